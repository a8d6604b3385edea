//! A Gitea-only world for the capacity and startup suites, and the few steps they share:
//! patching a group's spec, reading a condition, waiting or failing with the operator's output.
//! Their groups are made with [`super::group::Group`].

use std::time::Duration;

use forgerunner_core::RunnerGroup;
use forgerunner_sandbox::world::operator::OperatorProcess;
use forgerunner_sandbox::world::{World, WorldOptions, wait_until};
use forgerunner_testkit::gitea::{Conclusion, JobState};
use kube::Api;
use kube::api::{Patch, PatchParams};

use super::e2e::{fail_with_output, start_world};

/// How long a step of these suites may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// A world with only the Gitea fake, whose simulated runners work `work_time` per job.
pub async fn gitea_world(namespace: &str, work_time: Duration) -> World {
    let opts = WorldOptions {
        github: false,
        gitea: true,
        forgejo: false,
        work_time,
        ..WorldOptions::default()
    };
    start_world(opts, namespace).await
}

/// Merge-patches the group's spec, as `kubectl patch --type merge` would.
pub async fn patch_spec(world: &World, namespace: &str, name: &str, spec: serde_json::Value) {
    let api: Api<RunnerGroup> = Api::namespaced(world.client.clone(), namespace);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "spec": spec })),
    )
    .await
    .expect("patch spec");
}

/// `(status, reason, message)` of the group's condition `type_`.
pub async fn condition(
    world: &World,
    namespace: &str,
    name: &str,
    type_: &str,
) -> Option<(String, String, String)> {
    let group = world.group(namespace, name).await.ok()?;
    group
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason, c.message))
}

/// Waits up to [`DEADLINE`] for `check`, failing with the operator's output.
pub async fn wait_or_fail<F, Fut>(op: &OperatorProcess, what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    wait_within(op, DEADLINE, what, check).await;
}

/// Waits up to `deadline` for `check`, failing with the operator's output.
pub async fn wait_within<F, Fut>(op: &OperatorProcess, deadline: Duration, what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    if wait_until(deadline, what, check).await.is_err() {
        fail_with_output(op, &format!("timed out waiting for {what}"));
    }
}

/// Fails unless every Gitea job of `ids` is done and succeeded.
pub fn assert_jobs_succeeded(world: &World, ids: &[i64]) {
    for id in ids {
        let job = world.gitea.as_ref().and_then(|g| g.job(*id)).expect("job");
        assert_eq!(job.state, JobState::Done(Conclusion::Success), "job {id}");
    }
}
