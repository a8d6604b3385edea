//! Two operator processes competing for the Lease: the helpers the leader-election suites share.

use forgerunner_sandbox::world::World;
use forgerunner_sandbox::world::operator::{OperatorProcess, OperatorSettings};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

use super::e2e::start_operator_with;

/// Lease duration the suites use: short, so a failover fits a test, and long enough that a busy
/// two-core machine renews in time.
pub const LEASE_SECONDS: u64 = 8;

/// Starts a Gitea operator named `name` (its pod name, so its Lease identity) with leader
/// election on and the suites' lease duration.
pub fn start_candidate(world: &World, name: &str) -> OperatorProcess {
    let settings = OperatorSettings {
        forges: vec!["gitea".into()],
        pod_name: name.into(),
        leader_election: true,
        env: vec![(
            "FORGERUNNER_LEADER_ELECTION_LEASE_DURATION_SECONDS".into(),
            LEASE_SECONDS.to_string(),
        )],
        ..OperatorSettings::default()
    };
    start_operator_with(world, &settings)
}

/// Who holds the operator's Lease now, if anyone.
pub async fn lease_holder(world: &World) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(world.client.clone(), "default");
    leases
        .get_opt("forgerunner")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty())
}
