//! The `forgerunner` binary of this package run against a testkit [`World`], and the end of an
//! end-to-end run: waiting for nothing to be left, failing with the operator's own output so a
//! red test explains itself.

use std::time::Duration;

use forgerunner_testkit::world::operator::{OperatorCommand, OperatorProcess, OperatorSettings};
use forgerunner_testkit::world::{World, wait_until};
use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use kube::api::ListParams;

/// Lines of operator output a failure message shows.
pub const OUTPUT_LINES: usize = 40;

/// Starts `forgerunner run` against `world` with only `forge` enabled, reporting as `pod_name`.
pub fn start_operator(world: &World, forge: &str, pod_name: &str) -> OperatorProcess {
    let settings = OperatorSettings {
        forges: vec![forge.to_owned()],
        pod_name: pod_name.to_owned(),
        ..OperatorSettings::default()
    };
    let command = OperatorCommand::binary(env!("CARGO_BIN_EXE_forgerunner"));
    OperatorProcess::spawn(&command, world.kubeconfig(), &settings).expect("spawn forgerunner")
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
