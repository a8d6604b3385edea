//! End-to-end (GitHub issue 4): the real `forgerunner` binary against the fake API server, the
//! cluster simulator and the scaleset emulator. 50 jobs with `maxRunners: 10` all complete,
//! never more than 10 runners exist, and nothing is left registered or running afterwards.
#![cfg(feature = "github")]

#[allow(dead_code)]
mod common;

use std::cell::Cell;
use std::time::Duration;

use common::e2e::{
    OUTPUT_LINES, github_scale_set_with_session, github_world, start_operator, wait_nothing_left,
};
use common::group::Group;
use forgerunner_sandbox::world::watch::JobWatch;
use forgerunner_sandbox::world::{GROUP_LABEL, wait_until};
use forgerunner_testkit::github::Endpoint;
use kube::api::ListParams;

const NS: &str = "e2e-github";
const GROUP: &str = "gh-runners";
const JOBS: usize = 50;
const MAX_RUNNERS: usize = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_jobs_with_max_ten_runners_all_complete_and_clean_up() {
    let world = github_world(NS, Duration::from_millis(300)).await;
    let watch = JobWatch::start(world.client.clone(), NS);
    Group::github(GROUP)
        .max(MAX_RUNNERS as u32)
        .create(&world, NS)
        .await;
    let op = start_operator(&world, "github", "forgerunner-e2e-github");
    let emu = world.github.as_ref().expect("emulator").emu.clone();

    // The operator creates the scale set (named after the group) and opens its session.
    let set_id = github_scale_set_with_session(&world, &op, GROUP).await;

    let queued: Vec<i64> = (0..JOBS)
        .map(|_| world.queue_github_job(set_id, GROUP).expect("queue").id)
        .collect();
    let (max_registered, max_busy) = (Cell::new(0usize), Cell::new(0usize));
    let completed = wait_until(Duration::from_secs(240), "every job to complete", || {
        let p = world.github_progress(set_id);
        max_registered.set(max_registered.get().max(p.registered_runners));
        max_busy.set(max_busy.get().max(p.running));
        std::future::ready(p.done == JOBS)
    })
    .await;
    let max_active = watch.group(GROUP).peak_active;
    assert!(
        completed.is_ok(),
        "only {}/{JOBS} jobs completed (max active {max_active}); operator log:\n{}",
        world.github_progress(set_id).done,
        op.output_tail(OUTPUT_LINES)
    );
    let state = emu.state();
    assert!(
        state
            .jobs
            .iter()
            .filter(|j| queued.contains(&j.id.0))
            .all(|j| j.result.as_deref() == Some("succeeded")),
        "every job succeeded: {:?}",
        state.jobs.iter().map(|j| j.result.clone()).collect::<Vec<_>>()
    );
    let (max_registered, max_busy) = (max_registered.get(), max_busy.get());
    assert!(
        max_active <= MAX_RUNNERS,
        "{max_active} runner Jobs active at once (max {MAX_RUNNERS})"
    );
    assert!(
        max_registered <= MAX_RUNNERS,
        "{max_registered} runners registered at once (max {MAX_RUNNERS})"
    );
    assert!(max_busy > 1, "runners worked in parallel (max busy {max_busy})");
    assert!(
        emu.requests_to(Endpoint::GetMessage)
            .iter()
            .all(|r| r.max_capacity == Some(MAX_RUNNERS as u32)),
        "X-ScaleSetMaxCapacity = maxRunners"
    );

    // Afterwards: no runner left registered at the service, no runner Job left in the cluster.
    let selector = ListParams::default().labels(&format!("{GROUP_LABEL}={GROUP}"));
    let registered = || emu.state().runners.len();
    wait_nothing_left(&world, &op, Duration::from_secs(120), NS, &selector, registered).await;
}
