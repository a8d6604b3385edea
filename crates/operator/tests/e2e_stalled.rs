//! End to end: the stuck-queue watchdog. The real `forgerunner` binary against the fake API
//! server, the cluster simulator and the Gitea fake: a group at `maxRunners: 1` whose one runner
//! works a long job leaves the second job waiting; past `spec.stalledJobSeconds` the group says
//! `QueueStalled=True AtMaxRunners` naming that job, `/metrics` shows its wait in
//! `forgerunner_oldest_waiting_job_seconds`, one Warning Event (reason `QueueStalled`) is
//! published, and once the job gets its runner the condition clears.
#![cfg(feature = "gitea")]

#[allow(dead_code)]
mod common;

use std::time::Duration;

use common::e2e::start_operator;
use common::gitea_world::{condition, gitea_world as world, wait_or_fail};
use common::group::Group;
use common::scrape::scrape;
use forgerunner_testkit::gitea::JobState;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;

const NS: &str = "e2e-stalled";
const GROUP: &str = "stalled";
/// Long enough that the second job waits well past the threshold while the first one runs.
const WORK_TIME: Duration = Duration::from_secs(10);
const STALLED_JOB_SECONDS: u32 = 3;

/// The value of `forgerunner_oldest_waiting_job_seconds` for the group in a scrape.
fn oldest_waiting(scrape: &str) -> Option<f64> {
    scrape
        .lines()
        .filter(|l| l.starts_with("forgerunner_oldest_waiting_job_seconds{"))
        .find(|l| l.contains(&format!("namespace=\"{NS}\"")) && l.contains(&format!("group=\"{GROUP}\"")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Warning Events with reason `QueueStalled` on the group.
async fn stall_events(events: &Api<Event>) -> Vec<Event> {
    let list = events.list(&ListParams::default()).await.map(|l| l.items);
    list.unwrap_or_default()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("QueueStalled") && e.type_.as_deref() == Some("Warning"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_waiting_past_the_threshold_at_max_runners_is_reported_once_and_clears() {
    let world = world(NS, WORK_TIME).await;
    let gitea = world.gitea.clone().expect("gitea fake");
    Group::gitea(GROUP)
        .host_label(GROUP)
        .max(1)
        .idle_timeout(600)
        .spec(serde_json::json!({ "stalledJobSeconds": STALLED_JOB_SECONDS }))
        .create(&world, NS)
        .await;
    let op = start_operator(&world, "gitea", "forgerunner-e2e-stalled");
    let jobs: Vec<i64> = (0..2)
        .map(|_| world.queue_gitea_job(&[GROUP]).expect("queue").id)
        .collect();

    wait_or_fail(&op, "QueueStalled=True", || async {
        condition(&world, NS, GROUP, "QueueStalled")
            .await
            .is_some_and(|(s, _, _)| s == "True")
    })
    .await;
    let (_, reason, message) = condition(&world, NS, GROUP, "QueueStalled")
        .await
        .expect("condition");
    assert_eq!(reason, "AtMaxRunners", "{message}");
    let waiting: Vec<i64> = gitea
        .jobs()
        .iter()
        .filter(|j| jobs.contains(&j.id) && j.state == JobState::Waiting)
        .map(|j| j.id)
        .collect();
    let [stalled] = waiting[..] else {
        panic!("one of the two jobs waits while the other runs: {waiting:?}");
    };
    for part in [
        format!("job {stalled} has waited since"),
        "queued at the forge".to_owned(),
        format!("spec.stalledJobSeconds ({STALLED_JOB_SECONDS}s)"),
        "spec.maxRunners".to_owned(),
    ] {
        assert!(message.contains(&part), "{part:?} missing in {message:?}");
    }

    wait_or_fail(&op, "the oldest wait on /metrics past the threshold", || async {
        oldest_waiting(&scrape(&op).await).is_some_and(|v| v >= f64::from(STALLED_JOB_SECONDS))
    })
    .await;

    let events: Api<Event> = Api::namespaced(world.client.clone(), NS);
    wait_or_fail(&op, "a QueueStalled Warning Event naming the job", || async {
        stall_events(&events).await.iter().any(|e| {
            e.note
                .as_deref()
                .is_some_and(|n| n.contains(&format!("job {stalled}")) && n.contains("AtMaxRunners"))
        })
    })
    .await;

    // The first job ends, the runner slot frees, the waiting job gets its runner.
    wait_or_fail(&op, "QueueStalled=False once the job got a runner", || async {
        condition(&world, NS, GROUP, "QueueStalled")
            .await
            .is_some_and(|(s, r, _)| s == "False" && r == "QueueMoving")
    })
    .await;
    wait_or_fail(&op, "both jobs done", || async {
        world.gitea_progress(&[GROUP]).done == jobs.len()
    })
    .await;
    wait_or_fail(&op, "the gauge back at 0", || async {
        oldest_waiting(&scrape(&op).await) == Some(0.0)
    })
    .await;
    let published = stall_events(&events).await;
    assert_eq!(
        published.len(),
        1,
        "one Event per stall, not one per pass: {:?}",
        published.iter().map(|e| &e.note).collect::<Vec<_>>()
    );
    let series = published[0].series.as_ref().map_or(1, |s| s.count);
    assert_eq!(series, 1, "the stall's Event was not repeated");
}

/// The value of `forgerunner_unmatched_waiting_jobs` for `namespace` in a scrape.
fn unmatched_waiting(scrape: &str, namespace: &str) -> Option<f64> {
    scrape
        .lines()
        .filter(|l| l.starts_with("forgerunner_unmatched_waiting_jobs{"))
        .find(|l| l.contains(&format!("namespace=\"{namespace}\"")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Two groups watch the instance; a job whose `runs-on` has a typo matches neither and is
/// counted once for the namespace and named, with its labels, in an Event. The Gitea fake's
/// listing gives each job's `runs-on` as `labels` and its repository in `url`, as Gitea's
/// `ToActionWorkflowJob` (`services/convert/convert.go`) does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_no_group_matches_is_counted_once_and_named() {
    const NS: &str = "e2e-unmatched";
    let world = world(NS, Duration::from_millis(300)).await;
    for name in ["linux", "gpu"] {
        Group::gitea(name)
            .host_label(name)
            .max(2)
            .idle_timeout(600)
            .spec(serde_json::json!({ "stalledJobSeconds": STALLED_JOB_SECONDS }))
            .create(&world, NS)
            .await;
    }
    let op = start_operator(&world, "gitea", "forgerunner-e2e-unmatched");
    let typo = world.queue_gitea_job(&["linx"]).expect("queue").id;
    let served = world.queue_gitea_job(&["linux"]).expect("queue").id;

    wait_or_fail(&op, "the job with labels a group matches done", || async {
        world.gitea_progress(&["linux"]).done == 1
    })
    .await;
    wait_or_fail(&op, "one unmatched job for the namespace on /metrics", || async {
        unmatched_waiting(&scrape(&op).await, NS) == Some(1.0)
    })
    .await;
    let events: Api<Event> = Api::namespaced(world.client.clone(), NS);
    let names_the_typo = |e: &Event| {
        e.reason.as_deref() == Some("UnmatchedJob")
            && e.note
                .as_deref()
                .is_some_and(|n| n.contains(&format!("job {typo} ")) && n.contains("[linx]"))
    };
    wait_or_fail(
        &op,
        "an UnmatchedJob Event naming the job and its labels",
        || async {
            let list = events.list(&ListParams::default()).await.map(|l| l.items);
            list.unwrap_or_default().iter().any(names_the_typo)
        },
    )
    .await;
    let list = events.list(&ListParams::default()).await.expect("events").items;
    assert!(
        !list.iter().any(|e| e
            .note
            .as_deref()
            .is_some_and(|n| n.contains(&format!("job {served} ")))),
        "the served job is never called unmatched"
    );
}
