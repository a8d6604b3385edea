//! End to end (issue 28): a runner the cluster kills mid-job gets its job re-run. The real
//! `forgerunner` binary against the fake API server, the cluster simulator, the scale-set
//! emulator and GitHub's REST job re-run beside it (`world::github_rest`).
//!
//! The node under a busy runner's pod is lost, and the simulator plays what the control plane
//! does:
//!
//! - Its Node object is deleted (`NodeLoss::NodeDeleted`, the common end of a spot instance):
//!   PodGC marks the pod `Failed` with `DisruptionTarget=True` reason `DeletionByPodGC` and
//!   force-deletes it, so it is gone before the operator looks; the runner Job's
//!   `podFailurePolicy` made the Job fail with reason `PodFailurePolicy`, which tells the
//!   operator (`Unattributed`).
//! - The node stops answering (`NodeLoss::Unreachable`): `Ready=False`, then the taint manager's
//!   `DisruptionTarget=True` reason `DeletionByTaintManager` and a graceful delete no kubelet
//!   confirms. Under the Job's `podFailurePolicy` the Job would fail only once the pod is
//!   `Failed` (when PodGC removes it after its Node object went, 40 s in the simulator, or
//!   never while the Node object stays); the operator reads the `Terminating` pod while the Job
//!   still runs and acts at once.
//!
//! With `spec.rerun` the operator asks GitHub to re-run exactly that job (Event `JobRerun`,
//! `forgerunner_jobs_rerun_total{outcome="requested"}`) and the job runs again. Without it the
//! job is only reported (Event `JobNotRerun`). A runner whose job failed by itself is never
//! re-run.
#![cfg(feature = "github")]

#[allow(dead_code)]
mod common;

use std::time::{Duration, Instant};

use common::e2e::{github_scale_set_with_session, start_operator, start_world};
use common::gitea_world::wait_or_fail;
use common::group::Group;
use common::scrape::scrape;
use forgerunner_sandbox::world::github_work::GithubJobPlay;
use forgerunner_sandbox::world::operator::OperatorProcess;
use forgerunner_sandbox::world::{World, WorldOptions};
use forgerunner_testkit::github::rest_jobs::Rerun;
use forgerunner_testkit::github::{JobState, ScaleSetId};
use forgerunner_testkit::sim::NodeLoss;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;

const GROUP: &str = "gh-rerun";
/// How a runner whose node stopped answering is reported: from its `Terminating` pod, while its
/// Job still runs.
const TAINT_REASON: &str = "DeletionByTaintManager";
/// How a runner lost with its Node object is reported: from its Job (`Unattributed`) when PodGC
/// removed the pod before the operator read it, as it mostly does, or from the pod itself
/// (`DeletionByPodGC`) when the operator was quicker. Kubernetes leaves both possible: the Job
/// controller writes `FailureTarget` before it lets the pod go.
const NODE_GONE_REASONS: [&str; 2] = ["Unattributed", "DeletionByPodGC"];

/// A world with the emulator and GitHub's REST re-run, and one group of up to 2 runners whose
/// `spec.rerun` is `max_per_hour` (unset for `None`); the operator runs and the group's scale
/// set has its session.
async fn start(ns: &str, max_per_hour: Option<u32>) -> (World, OperatorProcess, ScaleSetId) {
    let opts = WorldOptions {
        github: true,
        gitea: false,
        forgejo: false,
        github_rest: true,
        work_time: Duration::from_millis(300),
        github_long_poll: Duration::from_secs(1),
        ..WorldOptions::default()
    };
    let world = start_world(opts, ns).await;
    Group::github(GROUP)
        .max(2)
        .rerun(max_per_hour)
        .create(&world, ns)
        .await;
    let op = start_operator(&world, "github", &format!("forgerunner-{ns}"));
    let set_id = github_scale_set_with_session(&world, &op, GROUP).await;
    (world, op, set_id)
}

/// Queues one job that a runner keeps working on; once the operator knows which job the runner
/// runs, loses the runner's node as `loss` says. Returns the runner, the job's id and the pod.
async fn kill_busy_runner(
    world: &World,
    op: &OperatorProcess,
    ns: &str,
    set_id: ScaleSetId,
    loss: NodeLoss,
) -> (String, i64, String) {
    world
        .github_play_next(GithubJobPlay::UntilKilled)
        .expect("github");
    let queued = world.queue_github_job(set_id, GROUP).expect("queue").id;
    let busy = std::sync::Mutex::new(None);
    wait_or_fail(
        op,
        "a runner at work on the job, known to the operator",
        || async {
            let found = world.busy_github_runner(ns, set_id).await.ok().flatten();
            let is_busy = found.is_some();
            *busy.lock().expect("lock") = found;
            is_busy
        },
    )
    .await;
    let (runner, job) = busy.into_inner().expect("lock").expect("busy runner");
    assert_eq!(job.0, queued, "the runner works on the job queued");
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), ns);
    let selector = ListParams::default().labels(&format!("job-name={runner}"));
    let pod = pods
        .list(&selector)
        .await
        .expect("pods")
        .items
        .into_iter()
        .find_map(|p| p.metadata.name)
        .expect("the runner's pod");
    world.sim.lose_pod(ns, &pod, loss).await.expect("node lost");
    if loss == NodeLoss::NodeDeleted {
        assert!(
            pods.get_opt(&pod).await.expect("get").is_none(),
            "PodGC force-deleted the pod"
        );
    }
    (runner, queued, pod)
}

/// Which of `reasons` the Event note `note` names.
fn reason_in<'a>(note: &str, reasons: &[&'a str]) -> Option<&'a str> {
    reasons.iter().copied().find(|r| note.contains(&format!("({r})")))
}

/// Re-runs counted on /metrics with `outcome`, summed over `reasons`.
fn reruns_counted_over(scrape: &str, reasons: &[&str], outcome: &str) -> f64 {
    reasons
        .iter()
        .filter_map(|r| reruns_counted(scrape, r, outcome))
        .sum()
}

/// Events of the namespace with `reason`.
async fn events(world: &World, ns: &str, reason: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(world.client.clone(), ns);
    let list = api.list(&ListParams::default()).await.map(|l| l.items);
    list.unwrap_or_default()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

fn note_names(e: &Event, runner: &str) -> bool {
    e.note.as_deref().is_some_and(|n| n.contains(runner))
}

/// Waits for an Event of `reason` naming `runner`; returns the namespace's Events of `reason`.
async fn events_naming(
    world: &World,
    op: &OperatorProcess,
    ns: &str,
    reason: &str,
    runner: &str,
) -> Vec<Event> {
    wait_or_fail(op, &format!("a {reason} Event naming the runner"), || async {
        events(world, ns, reason)
            .await
            .iter()
            .any(|e| note_names(e, runner))
    })
    .await;
    events(world, ns, reason).await
}

/// Waits for GitHub to be asked to re-run a job; fails unless it was asked once, for `job`.
async fn the_one_rerun(world: &World, op: &OperatorProcess, job: i64) -> Rerun {
    let rest = world.github_rest.as_ref().expect("GitHub REST fake");
    wait_or_fail(op, "GitHub asked to re-run the job", || {
        std::future::ready(!rest.reruns().is_empty())
    })
    .await;
    let reruns = rest.reruns();
    assert_eq!(reruns.len(), 1, "one re-run: {reruns:?}");
    assert_eq!(
        i64::try_from(reruns[0].job_id).ok(),
        Some(job),
        "the job the killed runner ran"
    );
    reruns[0].clone()
}

/// The value of `forgerunner_jobs_rerun_total` for the GitHub forge, `reason` and `outcome`.
fn reruns_counted(scrape: &str, reason: &str, outcome: &str) -> Option<f64> {
    scrape
        .lines()
        .filter(|l| l.starts_with("forgerunner_jobs_rerun_total{"))
        .find(|l| {
            l.contains("forge=\"github\"")
                && l.contains(&format!("reason=\"{reason}\""))
                && l.contains(&format!("outcome=\"{outcome}\""))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Re-run requests the REST fake received (accepted or refused).
fn rerun_requests(world: &World) -> usize {
    let rest = world.github_rest.as_ref().expect("GitHub REST fake");
    rest.fake
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/rerun"))
        .count()
}

/// A busy runner whose node stops answering gets exactly its job re-run while its pod is still
/// `Terminating` and its Job still runs (the runner Job's `podFailurePolicy` would count the pod
/// only once PodGC failed it), and not again once PodGC removed the pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_killed_with_its_node_gets_exactly_its_job_rerun() {
    const NS: &str = "e2e-rerun";
    let (world, op, set_id) = start(NS, Some(5)).await;
    let rest = world.github_rest.as_ref().expect("GitHub REST fake");
    let (runner, job, pod) = kill_busy_runner(&world, &op, NS, set_id, NodeLoss::Unreachable).await;
    let lost_at = Instant::now();

    let rerun = the_one_rerun(&world, &op, job).await;
    assert_eq!(rerun.repository, "org/repo");

    let rerun_events = events_naming(&world, &op, NS, "JobRerun", &runner).await;
    eprintln!(
        "JobRerun Event {:.1} s after the node loss",
        lost_at.elapsed().as_secs_f64()
    );
    let note = rerun_events[0].note.clone().unwrap_or_default();
    // Read from the Terminating pod: PodGC, had it come first, would have replaced the reason.
    assert!(
        note.contains(&format!("({TAINT_REASON})")) && note.contains("the forge re-runs it"),
        "{note}"
    );
    assert_eq!(rerun_events[0].type_.as_deref(), Some("Normal"));
    assert!(
        events(&world, NS, "JobNotRerun").await.is_empty(),
        "nothing reported as not re-run"
    );

    wait_or_fail(&op, "the re-run counted on /metrics", || async {
        reruns_counted(&scrape(&op).await, TAINT_REASON, "requested") == Some(1.0)
    })
    .await;

    // GitHub queues the job again; a new runner takes it and it succeeds.
    let emu = world.github.as_ref().expect("emulator").emu.clone();
    wait_or_fail(&op, "the re-run job done", || {
        let state = emu.state();
        let ours: Vec<_> = state.jobs.iter().filter(|j| j.scale_set_id == set_id).collect();
        let done = ours.len() == 2
            && ours.iter().all(|j| j.state == JobState::Completed)
            && ours
                .iter()
                .any(|j| j.id.0 != job && j.result.as_deref() == Some("succeeded"));
        std::future::ready(done)
    })
    .await;
    // PodGC fails and removes the pod once the Node object went; nothing is re-run again.
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), NS);
    wait_or_fail(&op, "PodGC removing the lost pod", || async {
        matches!(pods.get_opt(&pod).await, Ok(None))
    })
    .await;
    let scraped = scrape(&op).await;
    let all_reasons = [TAINT_REASON, NODE_GONE_REASONS[0], NODE_GONE_REASONS[1]];
    assert_eq!(
        reruns_counted_over(&scraped, &all_reasons, "requested"),
        1.0,
        "counted once"
    );
    assert_eq!(rerun_requests(&world), 1, "asked once");
    assert_eq!(rest.reruns().len(), 1, "one re-run");
}

/// A busy runner whose Node object is deleted (PodGC force-deletes its pod at once, before the
/// operator can read it) gets exactly its job re-run: its Job's `podFailurePolicy` remembers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_whose_node_object_is_deleted_gets_its_job_rerun() {
    const NS: &str = "e2e-rerun-node-gone";
    let (world, op, set_id) = start(NS, Some(5)).await;
    let (runner, job, _pod) = kill_busy_runner(&world, &op, NS, set_id, NodeLoss::NodeDeleted).await;

    the_one_rerun(&world, &op, job).await;
    let rerun_events = events_naming(&world, &op, NS, "JobRerun", &runner).await;
    let note = rerun_events[0].note.clone().unwrap_or_default();
    let reason = reason_in(&note, &NODE_GONE_REASONS);
    assert!(
        reason.is_some() && note.contains("the forge re-runs it"),
        "{note}"
    );
    eprintln!("runner lost with its Node reported as {reason:?}");
    wait_or_fail(&op, "the re-run counted on /metrics", || async {
        reruns_counted_over(&scrape(&op).await, &NODE_GONE_REASONS, "requested") == 1.0
    })
    .await;
    let emu = world.github.as_ref().expect("emulator").emu.clone();
    wait_or_fail(&op, "the re-run job done", || {
        let state = emu.state();
        let done = state.jobs.iter().any(|j| {
            j.scale_set_id == set_id
                && j.id.0 != job
                && j.state == JobState::Completed
                && j.result.as_deref() == Some("succeeded")
        });
        std::future::ready(done)
    })
    .await;
    assert_eq!(rerun_requests(&world), 1, "asked once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_spec_rerun_a_killed_runner_s_job_is_reported_and_not_rerun() {
    const NS: &str = "e2e-rerun-off";
    let (world, op, set_id) = start(NS, None).await;
    let (runner, _job, _pod) = kill_busy_runner(&world, &op, NS, set_id, NodeLoss::NodeDeleted).await;

    let reported = events_naming(&world, &op, NS, "JobNotRerun", &runner).await;
    let note = reported[0].note.clone().unwrap_or_default();
    assert!(
        reason_in(&note, &NODE_GONE_REASONS).is_some() && note.contains("set spec.rerun"),
        "{note}"
    );
    assert_eq!(reported[0].type_.as_deref(), Some("Warning"));
    wait_or_fail(&op, "the unrequested re-run counted on /metrics", || async {
        reruns_counted_over(&scrape(&op).await, &NODE_GONE_REASONS, "disabled") == 1.0
    })
    .await;
    assert_eq!(rerun_requests(&world), 0, "GitHub never asked");
    assert!(events(&world, NS, "JobRerun").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_whose_job_failed_by_itself_is_never_rerun() {
    const NS: &str = "e2e-rerun-own";
    let (world, op, set_id) = start(NS, Some(5)).await;
    let emu = world.github.as_ref().expect("emulator").emu.clone();
    world
        .github_play_next(GithubJobPlay::FailsByItself)
        .expect("github");
    let failing = world.queue_github_job(set_id, GROUP).expect("queue").id;
    wait_or_fail(&op, "the job failed and its runner Job removed", || async {
        let failed = emu
            .state()
            .jobs
            .iter()
            .any(|j| j.id.0 == failing && j.result.as_deref() == Some("failed"));
        failed
            && world
                .runner_jobs(NS, Some(GROUP))
                .await
                .is_ok_and(|j| j.is_empty())
    })
    .await;
    // The operator took the runner for failed: it read the pod, and found no disruption there.
    wait_or_fail(&op, "a RunnerFailed Event", || async {
        !events(&world, NS, "RunnerFailed").await.is_empty()
    })
    .await;
    // Passes after the failed runner's: a later job comes and goes through the same group.
    let next = world.queue_github_job(set_id, GROUP).expect("queue").id;
    wait_or_fail(&op, "a later job done", || {
        let done = emu
            .state()
            .jobs
            .iter()
            .any(|j| j.id.0 == next && j.result.as_deref() == Some("succeeded"));
        std::future::ready(done)
    })
    .await;

    assert_eq!(rerun_requests(&world), 0, "GitHub never asked");
    for reason in ["JobRerun", "JobNotRerun"] {
        let found = events(&world, NS, reason).await;
        assert!(
            found.is_empty(),
            "no {reason}: {:?}",
            found.iter().map(|e| &e.note).collect::<Vec<_>>()
        );
    }
    let metrics = scrape(&op).await;
    assert!(
        !metrics
            .lines()
            .any(|l| l.starts_with("forgerunner_jobs_rerun_total{")),
        "no re-run counted"
    );
}
