//! The `forgerunner` binary of this package run against a testkit [`World`], and the end of an
//! end-to-end run: waiting for nothing to be left, failing with the operator's own output so a
//! red test explains itself.

use std::time::{Duration, Instant};

use forgerunner_sandbox::world::operator::{OperatorCommand, OperatorProcess, OperatorSettings};
use forgerunner_sandbox::world::watch::GroupTally;
use forgerunner_sandbox::world::{World, WorldOptions, wait_until};
use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use kube::api::ListParams;

/// Waits for `check` until `deadline`, failing with the operator's output.
pub async fn wait_until_or_fail<F, Fut>(op: &OperatorProcess, deadline: Instant, what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let left = deadline.saturating_duration_since(Instant::now());
    if wait_until(left, what, check).await.is_err() {
        fail_with_output(op, &format!("timed out waiting for {what}"));
    }
}

/// Lines of operator output a failure message shows.
pub const OUTPUT_LINES: usize = 40;

/// Starts a world and creates the test's own namespace in it.
pub async fn start_world(opts: WorldOptions, namespace: &str) -> World {
    let world = World::start(opts).await.expect("world starts");
    world.create_namespace(namespace).await.expect("namespace");
    world
}

/// Starts a world with the GitHub emulator (long polls of a second) and no Gitea fake, whose
/// simulated runners work `work_time` per job, and creates the test's namespace in it.
pub async fn github_world(namespace: &str, work_time: Duration) -> World {
    let opts = WorldOptions {
        github: true,
        gitea: false,
        work_time,
        github_long_poll: Duration::from_secs(1),
        ..WorldOptions::default()
    };
    start_world(opts, namespace).await
}

/// Starts `forgerunner run` against `world` with `settings`.
pub fn start_operator_with(world: &World, settings: &OperatorSettings) -> OperatorProcess {
    let command = OperatorCommand::binary(env!("CARGO_BIN_EXE_forgerunner"));
    OperatorProcess::spawn(&command, world.kubeconfig(), settings).expect("spawn forgerunner")
}

/// Starts `forgerunner run` against `world` with only `forge` enabled, reporting as `pod_name`.
pub fn start_operator(world: &World, forge: &str, pod_name: &str) -> OperatorProcess {
    let settings = OperatorSettings {
        forges: vec![forge.to_owned()],
        pod_name: pod_name.to_owned(),
        ..OperatorSettings::default()
    };
    start_operator_with(world, &settings)
}

/// The scale set the operator made for `group` once its message session is open; fails with
/// the operator's output otherwise.
pub async fn github_scale_set_with_session(
    world: &World,
    op: &OperatorProcess,
    group: &str,
) -> forgerunner_testkit::github::ScaleSetId {
    let Ok(set_id) = world.github_scale_set(group, Duration::from_secs(90)).await else {
        fail_with_output(op, "no scale set");
    };
    let emu = world.github.as_ref().expect("emulator").emu.clone();
    let session = wait_until(Duration::from_secs(90), "a session", || async {
        emu.state().sessions.iter().any(|s| s.scale_set_id == set_id)
    })
    .await;
    if session.is_err() {
        fail_with_output(op, "no session");
    }
    set_id
}

/// Fails with `what` and the operator's last output, so a red test explains itself; with
/// `E2E_DUMP=<file>` the whole output is saved there too.
pub fn fail_with_output(op: &OperatorProcess, what: &str) -> ! {
    if let Ok(path) = std::env::var("E2E_DUMP") {
        let _ = std::fs::write(path, op.output().join("\n"));
    }
    panic!("{what}; operator log:\n{}", op.output_tail(OUTPUT_LINES));
}

/// Fails unless the operator's `/healthz` answers 200.
pub async fn assert_healthz(op: &OperatorProcess) {
    let health = reqwest::get(format!(
        "http://{}/healthz",
        op.http_addr().await.expect("operator listening")
    ))
    .await
    .map(|r| r.status().as_u16());
    if health.as_ref().ok() != Some(&200) {
        fail_with_output(op, &format!("/healthz answered {health:?}"));
    }
}

/// Fails unless the operator's peak resident memory stayed under `limit_mib` MiB; `after` says
/// what it went through, for the messages.
pub fn assert_peak_rss_under(op: &OperatorProcess, limit_mib: f64, after: &str) {
    let Some((peak_mib, _)) = op.resource_usage() else {
        fail_with_output(op, "no /proc reading of the operator");
    };
    eprintln!("operator peak RSS after {after}: {peak_mib:.1} MiB");
    assert!(
        peak_mib < limit_mib,
        "peak RSS {peak_mib:.1} MiB after {after} (limit {limit_mib} MiB)"
    );
}

/// Waits up to `timeout` until `registered()` (runners still registered at the forge) is 0 and
/// no Job of `namespace` matching `jobs` is left; fails with the operator's output otherwise.
pub async fn wait_nothing_left(
    world: &World,
    op: &OperatorProcess,
    timeout: Duration,
    namespace: &str,
    jobs: &ListParams,
    registered: impl Fn() -> usize,
) {
    let api: Api<Job> = Api::namespaced(world.client.clone(), namespace);
    let left = || async {
        let count = api.list(jobs).await.expect("list Jobs").items.len();
        (registered(), count)
    };
    let cleaned = wait_until(timeout, "nothing left", || async { left().await == (0, 0) }).await;
    if cleaned.is_err() {
        let (registered, jobs) = left().await;
        panic!(
            "{registered} runners registered and {jobs} Jobs left; operator log:\n{}",
            op.output_tail(OUTPUT_LINES)
        );
    }
}

/// Fails unless the group never had more than `max` runner Jobs at once, nor more runners in
/// all than the `jobs` queued: never a runner made twice for a job.
pub fn assert_runners_bounded(tally: &GroupTally, max: u32, jobs: usize) {
    assert!(
        tally.peak_active <= max as usize,
        "peak {} > max {max}",
        tally.peak_active
    );
    assert!(
        tally.created.len() <= jobs,
        "created {} runners for {jobs} jobs",
        tally.created.len()
    );
}
