//! Only the leader exports group gauges: a standby exports none, and a leader that loses its
//! Lease drops them once the standby takes over, so dashboards that sum across replicas count
//! each group once; `forgerunner_leader` says which replica leads. Two real `forgerunner`
//! processes with leader election against one cluster.
#![cfg(feature = "gitea")]

#[allow(dead_code)]
mod common;

use std::time::{Duration, Instant};

use common::e2e::{fail_with_output, start_world};
use common::leader::{lease_holder, start_candidate as start};
use common::scrape::scrape;
use forgerunner_sandbox::world::groups::GroupSize;
use forgerunner_sandbox::world::operator::OperatorProcess;
use forgerunner_sandbox::world::{WorldOptions, wait_until};
use forgerunner_testkit::apiserver::Fault as ApiFault;

const NS: &str = "leader-gauges";
const LABELS: &[&str] = &["linux"];
const DEADLINE: Duration = Duration::from_secs(120);

/// Per-group gauges: the runner gauge and the ARC-style ones.
const GROUP_GAUGES: &[&str] = &[
    "forgerunner_runners",
    "forgerunner_assigned_jobs",
    "forgerunner_running_jobs",
    "forgerunner_registered_runners",
    "forgerunner_busy_runners",
    "forgerunner_idle_runners",
    "forgerunner_pending_runners",
    "forgerunner_desired_runners",
    "forgerunner_min_runners",
    "forgerunner_max_runners",
];

/// Sample lines of group gauges in `op`'s `/metrics`; `None` while it does not answer.
async fn group_gauges(op: &OperatorProcess) -> Option<Vec<String>> {
    let text = scrape(op).await;
    if !text.contains("# EOF") {
        return None;
    }
    Some(
        text.lines()
            .filter(|l| GROUP_GAUGES.iter().any(|g| l.starts_with(&format!("{g}{{"))))
            .map(str::to_owned)
            .collect(),
    )
}

/// The value of `forgerunner_leader` in `op`'s `/metrics`; `None` while it does not answer.
async fn leader_value(op: &OperatorProcess) -> Option<String> {
    let text = scrape(op).await;
    text.lines()
        .find_map(|l| l.strip_prefix("forgerunner_leader "))
        .map(str::to_owned)
}

async fn wait_for_leader_value(op: &OperatorProcess, want: &str, what: &str) {
    let got = wait_until(DEADLINE, what, || async {
        leader_value(op).await.as_deref() == Some(want)
    })
    .await;
    if got.is_err() {
        let now = leader_value(op).await;
        fail_with_output(op, &format!("{what}: forgerunner_leader is {now:?}, not {want}"));
    }
}

async fn wait_for_gauges(op: &OperatorProcess, present: bool, what: &str) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let got = group_gauges(op).await;
        if got.as_ref().is_some_and(|g| g.is_empty() != present) {
            return;
        }
        if Instant::now() > deadline {
            fail_with_output(op, &format!("{what}; group gauges: {got:?}"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deposed_leader_exports_no_group_gauges() {
    let opts = WorldOptions {
        github: false,
        gitea: true,
        forgejo: false,
        ..WorldOptions::default()
    };
    let world = start_world(opts, NS).await;
    let size = GroupSize {
        min: 1,
        ..GroupSize::up_to(3)
    };
    world
        .add_gitea_group(NS, "gt", LABELS, &size, 1, None)
        .await
        .expect("group");
    let a = start(&world, "op-a");
    if wait_until(DEADLINE, "op-a leads", || async {
        lease_holder(&world).await.as_deref() == Some("op-a")
    })
    .await
    .is_err()
    {
        fail_with_output(&a, "op-a did not take the lease");
    }
    wait_for_gauges(&a, true, "the leader exports no group gauges").await;
    wait_for_leader_value(&a, "1", "the leader says it leads").await;

    let b = start(&world, "op-b");
    let standby = wait_until(DEADLINE, "op-b serves /metrics", || async {
        group_gauges(&b).await.is_some()
    })
    .await;
    if standby.is_err() {
        fail_with_output(&b, "op-b never served /metrics");
    }
    let b_gauges = group_gauges(&b).await.unwrap_or_default();
    assert!(
        b_gauges.is_empty(),
        "a standby exports group gauges: {b_gauges:?}"
    );
    wait_for_leader_value(&b, "0", "the standby says it does not lead").await;

    // op-a can no longer renew; op-b takes over once the Lease expires.
    world
        .api
        .inject(ApiFault::error(500).resource("leases").user_agent("(op-a)"));
    if wait_until(DEADLINE, "op-b leads", || async {
        lease_holder(&world).await.as_deref() == Some("op-b")
    })
    .await
    .is_err()
    {
        fail_with_output(&b, "op-b did not take the lease");
    }
    wait_for_gauges(&b, true, "the new leader exports no group gauges").await;
    wait_for_gauges(&a, false, "the deposed leader still exports group gauges").await;
    wait_for_leader_value(&b, "1", "the new leader says it leads").await;
    wait_for_leader_value(&a, "0", "the deposed leader says it no longer leads").await;
    drop((a, b));
}
