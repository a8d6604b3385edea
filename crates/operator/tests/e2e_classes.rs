//! End to end (issue 29, runner classes): the real `forgerunner` binary against the fake API
//! server, the cluster simulator and the Gitea fake. A group whose own label is `self-hosted`
//! has two classes, `small` (labels `linux`) and `large` (labels `linux`, `large`, 4 CPUs
//! requested). One job asks for `[linux, large]` and one for `[linux]`: the group makes two
//! runners, one of each class; the large one's pod requests the 4 CPUs and its runner
//! registers with `large`; each job runs on the runner of its class; the status and the class
//! gauge count the runners per class; nothing is left afterwards.
//!
//! Forgejo 15 (job-bound ephemeral runners), the same two classes: the `[linux, large]` job
//! (queued first) and the `[linux]` job get a large and a small runner, each bound to the job
//! of its class and declaring the group's labels and its class's; the large pod requests the
//! 4 CPUs; nothing stays registered and no Job is left.
#![cfg(feature = "gitea")]

#[allow(dead_code)]
mod common;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use common::e2e::{fail_with_output, start_operator, wait_nothing_left};
use common::gitea_world::{DEADLINE, gitea_world, patch_spec, wait_or_fail};
use common::group::Group;
use common::scrape::scrape;
use forgerunner_sandbox::world::operator::OperatorProcess;
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

/// The two classes of the Gitea and Forgejo cases: `small` (`linux`) and `large` (`linux`,
/// `large`, at most 2 runners, 4 CPUs requested).
fn small_and_large() -> serde_json::Value {
    serde_json::json!([
        {"name": "small", "labels": ["linux:host"]},
        {"name": "large", "labels": ["linux:host", "large:host"], "maxRunners": 2,
         "resources": {"requests": {"cpu": "4"}}}
    ])
}

/// The names of the small and the large runner among `runners`, failing unless there is one
/// of each class, the large one's pod requesting 4 CPUs and the small one's nothing.
fn one_runner_of_each_class<'a>(
    op: &OperatorProcess,
    runners: &'a BTreeMap<String, Seen>,
) -> (&'a String, &'a String) {
    let by_class = |class: &str| -> Vec<(&'a String, &'a Seen)> {
        runners
            .iter()
            .filter(|(_, s)| s.class.as_deref() == Some(class))
            .collect()
    };
    let (small_runners, large_runners) = (by_class("small"), by_class("large"));
    if runners.len() != 2 || small_runners.len() != 1 || large_runners.len() != 1 {
        fail_with_output(op, &format!("one runner of each class, not {runners:?}"));
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
    (small_runners[0].0, large_runners[0].0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_of_two_sizes_get_runners_of_two_sizes() {
    // Long enough that the status, written at most once a second for counts alone, shows the
    // runners at work.
    let world = gitea_world(NS, Duration::from_secs(3)).await;
    let gitea = world.gitea.clone().expect("gitea fake");
    Group::gitea(GROUP)
        .host_label("self-hosted")
        .max(4)
        .idle_timeout(60)
        .classes(small_and_large())
        .create(&world, NS)
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
    let (small_runner, large_runner) = one_runner_of_each_class(&op, &runners);

    let large_job = gitea.job(large).expect("large job");
    assert_eq!(
        &large_job.runner_name, large_runner,
        "the large job ran on the large runner"
    );
    assert!(
        large_job.runner_labels.iter().any(|l| l == "large"),
        "the large runner registered with `large`: {:?}",
        large_job.runner_labels
    );
    let small_job = gitea.job(small).expect("small job");
    assert_eq!(
        &small_job.runner_name, small_runner,
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

/// A `small` runner waits with nothing to do (its job was cancelled before the runner started)
/// when a `[linux, large]` job arrives. The small runner cannot take it, so it covers nothing
/// of the large job's demand: the group makes a `large` runner at once rather than waiting for
/// the small one's idle timeout (here ten minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_small_runner_does_not_hold_back_a_large_job() {
    const NS_IDLE: &str = "e2e-classes-idle";
    let opts = forgerunner_sandbox::world::WorldOptions {
        github: false,
        gitea: true,
        forgejo: false,
        work_time: Duration::from_secs(1),
        // Time to cancel the small job after its runner's Job appears, before the runner asks
        // for work.
        pod_start_delay: Duration::from_secs(3),
        ..forgerunner_sandbox::world::WorldOptions::default()
    };
    let world = common::e2e::start_world(opts, NS_IDLE).await;
    let gitea = world.gitea.clone().expect("gitea fake");
    Group::gitea(GROUP)
        .host_label("self-hosted")
        .max(4)
        .idle_timeout(600)
        .classes(serde_json::json!([
            {"name": "small", "labels": ["linux:host"]},
            {"name": "large", "labels": ["linux:host", "large:host"]}
        ]))
        .create(&world, NS_IDLE)
        .await;
    let op = start_operator(&world, "gitea", "forgerunner-e2e-classes-idle");

    let runners_of = |class: &'static str| {
        let world = &world;
        async move {
            world
                .runner_jobs(NS_IDLE, Some(GROUP))
                .await
                .unwrap_or_default()
                .into_iter()
                .filter(|j| seen(j).class.as_deref() == Some(class))
                .filter_map(|j| j.metadata.name)
                .collect::<Vec<String>>()
        }
    };
    let small_job = world.queue_gitea_job(&["linux"]).expect("queue").id;
    wait_or_fail(&op, "a small runner", || async {
        !runners_of("small").await.is_empty()
    })
    .await;
    gitea.cancel_job(small_job);
    wait_or_fail(&op, "the small runner to register and wait", || async {
        gitea
            .runners()
            .iter()
            .any(|r| r.last_online.is_some() && r.task.is_none())
    })
    .await;
    let small = runners_of("small").await;

    let large_job = world.queue_gitea_job(&["linux", "large"]).expect("queue").id;
    common::gitea_world::wait_within(
        &op,
        Duration::from_secs(30),
        "a large runner while the small one waits",
        || async { !runners_of("large").await.is_empty() },
    )
    .await;
    assert_eq!(
        runners_of("small").await,
        small,
        "the small runner still waits: the large one did not wait for its idle timeout"
    );
    wait_or_fail(&op, "the large job to complete", || async {
        gitea
            .job(large_job)
            .is_some_and(|j| j.state == JobState::Done(Conclusion::Success))
    })
    .await;
    let labels = gitea.job(large_job).map(|j| j.runner_labels).unwrap_or_default();
    assert!(
        labels.iter().any(|l| l == "large"),
        "the large job ran on a large runner: {labels:?}"
    );

    // Let the small runner go to leave nothing behind.
    patch_spec(
        &world,
        NS_IDLE,
        GROUP,
        serde_json::json!({"idleTimeoutSeconds": 1}),
    )
    .await;
    let registered = || gitea.runners().len();
    wait_nothing_left(&world, &op, DEADLINE, NS_IDLE, &ListParams::default(), registered).await;
}

/// The Forgejo case (module docs): the world has only the Forgejo fake, playing 15.
#[cfg(feature = "forgejo")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgejo_jobs_of_two_sizes_get_runners_of_two_sizes() {
    use common::e2e::start_world;
    use forgerunner_sandbox::world::WorldOptions;
    use forgerunner_testkit::forgejo::{Conclusion as FjConclusion, JobStatus};

    const FJ_NS: &str = "e2e-classes-fj";
    let opts = WorldOptions {
        github: false,
        gitea: false,
        forgejo: true,
        forgejo_version: "15.0.3+gitea-1.22.0".to_owned(),
        work_time: Duration::from_secs(2),
        ..WorldOptions::default()
    };
    let world = start_world(opts, FJ_NS).await;
    let fake = world.forgejo.clone().expect("forgejo fake");
    Group::forgejo(GROUP)
        .host_label("self-hosted")
        .max(4)
        .idle_timeout(60)
        .classes(small_and_large())
        .create(&world, FJ_NS)
        .await;
    let op = start_operator(&world, "forgejo", "forgerunner-e2e-classes-fj");

    // The large job is the older: Forgejo 15 binds each runner to a job of the runner's own
    // class, not to the oldest job (a small runner could never take the large job).
    let large = world.queue_forgejo_job(&["linux", "large"]).expect("queue").id;
    let small = world.queue_forgejo_job(&["linux"]).expect("queue").id;

    let runners: Mutex<BTreeMap<String, Seen>> = Mutex::default();
    wait_or_fail(&op, "both Forgejo jobs to complete", || {
        let world = &world;
        let fake = &fake;
        let runners = &runners;
        async move {
            for job in world.runner_jobs(FJ_NS, Some(GROUP)).await.unwrap_or_default() {
                if let Some(name) = job.metadata.name.clone() {
                    runners.lock().expect("lock").insert(name, seen(&job));
                }
            }
            [large, small].iter().all(|id| {
                fake.job(*id)
                    .is_some_and(|j| j.status == JobStatus::Done(FjConclusion::Success))
            })
        }
    })
    .await;

    let runners = runners.into_inner().expect("lock");
    let (small_runner, large_runner) = one_runner_of_each_class(&op, &runners);

    let tasks = |id: i64| fake.tasks_for_job(id);
    let (large_tasks, small_tasks) = (tasks(large), tasks(small));
    assert_eq!(large_tasks.len(), 1, "the large job ran once: {large_tasks:?}");
    assert_eq!(small_tasks.len(), 1, "the small job ran once: {small_tasks:?}");
    assert_eq!(
        &large_tasks[0].runner_name, large_runner,
        "the large job ran on the large runner"
    );
    assert_eq!(
        large_tasks[0].runner_labels,
        ["self-hosted", "linux", "large"],
        "the large runner declared the group's label and its class's"
    );
    assert_eq!(
        &small_tasks[0].runner_name, small_runner,
        "the small job ran on the small runner"
    );
    assert_eq!(
        small_tasks[0].runner_labels,
        ["self-hosted", "linux"],
        "the small runner declared the group's label and its class's"
    );

    let registered = || fake.runners().len();
    wait_nothing_left(&world, &op, DEADLINE, FJ_NS, &ListParams::default(), registered).await;
}

/// GitHub (issue 29): each class is a scale set of its own. A group `sized` (its own scale set
/// `sized`) with a class `large` (scale set `sized-large`, label `large`, 4 CPUs requested).
/// One job asks for `sized`, one for `large`; GitHub routes each to the scale set whose labels
/// hold its `runs-on` (the testkit's routing): the group makes one runner of its own, registered
/// in `sized`, and one `large` runner, registered in `sized-large` and requesting 4 CPUs; both
/// jobs complete; deleting the group deletes both scale sets and their sessions.
#[cfg(feature = "github")]
mod github {
    use super::*;
    use common::e2e::{github_scale_set_with_session, start_world};
    use forgerunner_core::crd::RunnerGroup;
    use forgerunner_sandbox::world::WorldOptions;
    use forgerunner_testkit::github::routing::queue_runs_on;
    use kube::Api;
    use kube::api::DeleteParams;

    const NS_GH: &str = "e2e-classes-github";
    const SCALE_SET_ID: &str = "forgerunner.dev/scale-set-id";

    /// The class label, CPU request and scale set of a runner Job.
    fn seen_gh(job: &Job) -> (Seen, Option<String>) {
        let set = job
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SCALE_SET_ID))
            .cloned();
        (seen(job), set)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn jobs_of_two_scale_sets_get_runners_of_their_class() {
        let opts = WorldOptions {
            github: true,
            gitea: false,
            work_time: Duration::from_secs(2),
            github_long_poll: Duration::from_secs(1),
            ..WorldOptions::default()
        };
        let world = start_world(opts, NS_GH).await;
        Group::github(GROUP)
            .max(4)
            .classes(serde_json::json!([
                {"name": "large", "labels": ["large"], "maxRunners": 2,
                 "resources": {"requests": {"cpu": "4"}}}
            ]))
            .create(&world, NS_GH)
            .await;
        let op = start_operator(&world, "github", "forgerunner-e2e-classes-github");
        let emu = world.github.as_ref().expect("emulator").emu.clone();
        let own = github_scale_set_with_session(&world, &op, GROUP).await;
        let large = github_scale_set_with_session(&world, &op, &format!("{GROUP}-large")).await;

        let route = |runs_on: &[&str]| match queue_runs_on(&emu, runs_on) {
            Ok(queued) => queued,
            Err(e) => fail_with_output(&op, &format!("routing {runs_on:?}: {e}")),
        };
        let (small_job, small_set) = route(&[GROUP]);
        let (large_job, large_set) = route(&["large"]);
        assert_eq!((small_set, large_set), (own, large), "GitHub's routing by labels");

        let runners: Mutex<BTreeMap<String, (Seen, Option<String>)>> = Mutex::default();
        wait_or_fail(&op, "both jobs to complete", || {
            let world = &world;
            let emu = &emu;
            let runners = &runners;
            async move {
                for job in world.runner_jobs(NS_GH, Some(GROUP)).await.unwrap_or_default() {
                    if let Some(name) = job.metadata.name.clone() {
                        runners.lock().expect("lock").insert(name, seen_gh(&job));
                    }
                }
                let state = emu.state();
                [small_job, large_job].iter().all(|id| {
                    state
                        .jobs
                        .iter()
                        .any(|j| j.id == *id && j.result.as_deref() == Some("succeeded"))
                })
            }
        })
        .await;

        let runners = runners.into_inner().expect("lock");
        let of_class = |class: Option<&str>| -> Vec<&(Seen, Option<String>)> {
            runners
                .values()
                .filter(|(s, _)| s.class.as_deref() == class)
                .collect()
        };
        let (plain, classed) = (of_class(None), of_class(Some("large")));
        if runners.len() != 2 || plain.len() != 1 || classed.len() != 1 {
            fail_with_output(
                &op,
                &format!("one runner of the group's own and one large, not {runners:?}"),
            );
        }
        assert_eq!(
            classed[0].0.cpu.as_deref(),
            Some("4"),
            "the large runner requests 4 CPUs"
        );
        assert_eq!(plain[0].0.cpu, None, "the group's own runner requests nothing");
        assert_eq!(
            classed[0].1,
            Some(large.0.to_string()),
            "the large runner registered in the class's scale set"
        );
        assert_eq!(
            plain[0].1,
            Some(own.0.to_string()),
            "the group's own runner registered in the group's scale set"
        );

        Api::<RunnerGroup>::namespaced(world.client.clone(), NS_GH)
            .delete(GROUP, &DeleteParams::default())
            .await
            .expect("delete group");
        let gone = forgerunner_sandbox::world::wait_until(DEADLINE, "both scale sets deleted", || {
            let state = emu.state();
            std::future::ready(state.scale_sets.is_empty() && state.sessions.is_empty())
        })
        .await;
        if gone.is_err() {
            fail_with_output(&op, &format!("scale sets left: {:?}", emu.state().scale_sets));
        }
    }
}
