//! End to end (issue 29, runner classes): the real `forgerunner` binary against the fake API
//! server, the cluster simulator and the Gitea fake. A group whose own label is `self-hosted`
//! has two classes, `small` (labels `linux`) and `large` (labels `linux`, `large`, 4 CPUs
//! requested). One job asks for `[linux, large]` and one for `[linux]`: the group makes two
//! runners, one of each class; the large one's pod requests the 4 CPUs and its runner
//! registers with `large`; each job runs on the runner of its class; the status and the class
//! gauge count the runners per class; nothing is left afterwards.
#![cfg(feature = "gitea")]

#[allow(dead_code)]
mod common;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use common::e2e::{fail_with_output, start_operator, wait_nothing_left};
use common::gitea_world::{DEADLINE, gitea_world, patch_spec, wait_or_fail};
use common::scrape::scrape;
use forgerunner_sandbox::world::groups::{GiteaGroup, GiteaRunnerScope, GroupSize};
use forgerunner_testkit::gitea::{Conclusion, JobState};
use k8s_openapi::api::batch::v1::Job;
use kube::api::ListParams;

const NS: &str = "e2e-classes";
const GROUP: &str = "sized";
const CLASS_LABEL: &str = "forgerunner.dev/class";

/// What a runner Job said about its class while it existed: the class label and the runner
/// container's CPU request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Seen {
    class: Option<String>,
    cpu: Option<String>,
}

fn seen(job: &Job) -> Seen {
    let class = job
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(CLASS_LABEL))
        .cloned();
    let pod = job.spec.as_ref().and_then(|s| s.template.spec.as_ref());
    let runner = pod.and_then(|p| p.containers.iter().find(|c| c.name == "runner"));
    let cpu = runner
        .and_then(|c| c.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("cpu"))
        .map(|q| q.0.clone());
    Seen { class, cpu }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_of_two_sizes_get_runners_of_two_sizes() {
    // Long enough that the status, written at most once a second for counts alone, shows the
    // runners at work.
    let world = gitea_world(NS, Duration::from_secs(3)).await;
    let gitea = world.gitea.clone().expect("gitea fake");
    let group = GiteaGroup {
        scope: GiteaRunnerScope::Global,
        labels: vec!["self-hosted:host".to_owned()],
        poll_interval_seconds: 1,
        webhook_secret: None,
    };
    let size = GroupSize {
        min: 0,
        max: 4,
        idle_timeout_seconds: Some(60),
        startup_timeout_seconds: None,
        scale_down_delay_seconds: None,
    };
    world
        .add_gitea_group_with(NS, GROUP, &group, &size)
        .await
        .expect("group");
    patch_spec(
        &world,
        NS,
        GROUP,
        serde_json::json!({"classes": [
            {"name": "small", "labels": ["linux:host"]},
            {"name": "large", "labels": ["linux:host", "large:host"], "maxRunners": 2,
             "resources": {"requests": {"cpu": "4"}}}
        ]}),
    )
    .await;
    let op = start_operator(&world, "gitea", "forgerunner-e2e-classes");

    // Gitea hands a job to any runner whose labels hold all its `runs-on`: a large runner can
    // take a small job, never the other way round. The large job is queued first, so whichever
    // runner asks first, each takes the job of its own class (see docs/classes.md).
    let large = world.queue_gitea_job(&["linux", "large"]).expect("queue").id;
    let small = world.queue_gitea_job(&["linux"]).expect("queue").id;

    let runners: Mutex<BTreeMap<String, Seen>> = Mutex::default();
    let classes_in_status: Mutex<Vec<(String, u32)>> = Mutex::default();
    wait_or_fail(&op, "both jobs to complete", || {
        let world = &world;
        let gitea = &gitea;
        let runners = &runners;
        let classes_in_status = &classes_in_status;
        async move {
            for job in world.runner_jobs(NS, Some(GROUP)).await.unwrap_or_default() {
                if let Some(name) = job.metadata.name.clone() {
                    runners.lock().expect("lock").insert(name, seen(&job));
                }
            }
            if let Some(status) = world.group(NS, GROUP).await.ok().and_then(|g| g.status) {
                let mut shown = classes_in_status.lock().expect("lock");
                for c in status.classes.iter().filter(|c| c.runners > 0) {
                    if !shown.iter().any(|(n, _)| n == &c.name) {
                        shown.push((c.name.clone(), c.runners));
                    }
                }
            }
            [large, small].iter().all(|id| {
                gitea
                    .job(*id)
                    .is_some_and(|j| j.state == JobState::Done(Conclusion::Success))
            })
        }
    })
    .await;

    let runners = runners.into_inner().expect("lock");
    let by_class = |class: &str| -> Vec<(&String, &Seen)> {
        runners
            .iter()
            .filter(|(_, s)| s.class.as_deref() == Some(class))
            .collect()
    };
    let (small_runners, large_runners) = (by_class("small"), by_class("large"));
    if runners.len() != 2 || small_runners.len() != 1 || large_runners.len() != 1 {
        fail_with_output(&op, &format!("one runner of each class, not {runners:?}"));
    }
    assert_eq!(
        large_runners[0].1.cpu.as_deref(),
        Some("4"),
        "the large runner's pod requests 4 CPUs"
    );
    assert_eq!(
        small_runners[0].1.cpu, None,
        "the small runner's pod requests nothing"
    );

    let large_job = gitea.job(large).expect("large job");
    assert_eq!(
        &large_job.runner_name, large_runners[0].0,
        "the large job ran on the large runner"
    );
    assert!(
        large_job.runner_labels.iter().any(|l| l == "large"),
        "the large runner registered with `large`: {:?}",
        large_job.runner_labels
    );
    let small_job = gitea.job(small).expect("small job");
    assert_eq!(
        &small_job.runner_name, small_runners[0].0,
        "the small job ran on the small runner"
    );
    assert_eq!(
        small_job.runner_labels,
        ["self-hosted", "linux"],
        "the small runner registered with the group's label and its class's"
    );

    let shown = classes_in_status.into_inner().expect("lock");
    let mut names: Vec<&str> = shown.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["large", "small"],
        "status.classes counted both: {shown:?}"
    );
    let text = scrape(&op).await;
    assert!(
        text.lines().any(|l| l.starts_with("forgerunner_class_runners{")
            && l.contains(r#"group="sized""#)
            && l.contains(r#"class="large""#)),
        "no class gauge in the scrape"
    );

    let registered = || gitea.runners().len();
    wait_nothing_left(&world, &op, DEADLINE, NS, &ListParams::default(), registered).await;
}
