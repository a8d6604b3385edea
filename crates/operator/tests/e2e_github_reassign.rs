//! End to end (issue 25, D1): GitHub cancels an assignment no runner took in time and assigns
//! the job again a little later, up to three times (actions/scaleset README.md, "Job
//! Reassignment"; ARC scales down only when quiet: actions-runner-controller
//! `ephemeralrunnerset_controller.go`, `patchID == 0`). The emulator world plays that
//! re-assignment; runner pods start slower than the assignment lasts. The runner made for the
//! job must survive every cancel and serve the job: one runner Job, not one per attempt.
#![cfg(feature = "github")]

#[allow(dead_code)]
mod common;

use std::time::Duration;

use common::e2e::{OUTPUT_LINES, github_scale_set_with_session, start_operator, start_world};
use forgerunner_sandbox::world::groups::GroupSize;
use forgerunner_sandbox::world::watch::JobWatch;
use forgerunner_sandbox::world::{WorldOptions, wait_until};
use forgerunner_testkit::github::{JobState, ReassignPolicy};

const NS: &str = "e2e-gh-reassign";
const GROUP: &str = "gh-reassign";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_reassigned_while_its_runner_starts_is_served_by_that_runner() {
    let opts = WorldOptions {
        github: true,
        gitea: false,
        forgejo: false,
        work_time: Duration::from_millis(300),
        // Slower than the assignment lasts: the runner is still starting when GitHub cancels.
        pod_start_delay: Duration::from_secs(4),
        github_long_poll: Duration::from_secs(1),
        github_reassign: Some(ReassignPolicy::github(
            Duration::from_secs(1),
            Duration::from_millis(300),
        )),
        ..WorldOptions::default()
    };
    let world = start_world(opts, NS).await;
    let watch = JobWatch::start(world.client.clone(), NS);
    world
        .add_github_group(NS, GROUP, &GroupSize::up_to(3))
        .await
        .expect("group");
    let op = start_operator(&world, "github", "forgerunner-e2e-gh-reassign");
    let emu = world.github.as_ref().expect("emulator").emu.clone();
    let set_id = github_scale_set_with_session(&world, &op, GROUP).await;

    world.queue_github_job(set_id, GROUP).expect("queue");
    let served = wait_until(Duration::from_secs(120), "the job to run to success", || {
        let state = emu.state();
        std::future::ready(
            state
                .jobs
                .iter()
                .any(|j| j.state == JobState::Completed && j.result.as_deref() == Some("succeeded")),
        )
    })
    .await;
    let state = emu.state();
    let cancelled = state
        .jobs
        .iter()
        .filter(|j| j.result.as_deref() == Some("canceled"))
        .count();
    let tally = watch.group(GROUP);
    let runners: Vec<&str> = tally.created.iter().map(|(n, _)| n.as_str()).collect();
    assert!(
        served.is_ok(),
        "the job never ran (cancelled {cancelled} times, runner Jobs {runners:?}); operator log:\n{}",
        op.output_tail(OUTPUT_LINES)
    );
    assert!(
        cancelled >= 1,
        "the world did not re-assign the job (the runner started before the assignment ended)"
    );
    assert_eq!(
        runners.len(),
        1,
        "one runner Job serves the job through {cancelled} re-assignments, got {runners:?}; operator log:\n{}",
        op.output_tail(OUTPUT_LINES)
    );
}
