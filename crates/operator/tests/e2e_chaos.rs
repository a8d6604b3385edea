//! The chaos table as a test: one pass of every scenario (operator killed, leader partitioned,
//! API server faults, forge faults, a node lost under busy runners, twenty neighbour groups whose
//! forge never answers) on GitHub, Gitea and
//! Forgejo 15, the real `forgerunner` binary against the fakes. Every cell must end with no
//! job lost, none run twice and nothing left behind. Each test runs one scenario on the three
//! forges at once, each in its own world.
#![cfg(all(feature = "github", feature = "gitea", feature = "forgejo"))]

use forgerunner_sandbox::chaos::{ChaosOptions, Scenario, run_row};
use forgerunner_sandbox::world::operator::OperatorCommand;

async fn row(scenario: Scenario) {
    let opts = ChaosOptions::new(OperatorCommand::binary(env!("CARGO_BIN_EXE_forgerunner")));
    let mut failures = Vec::new();
    for (forge, result) in run_row(scenario, &opts).await {
        match result {
            Ok(o) => {
                eprintln!(
                    "{} on {}: jobs {} lost {} duplicates {} leaks {} ({:?}) recovery {:.1} s spare {} orphans {}; {:?}",
                    o.scenario,
                    o.forge,
                    o.jobs,
                    o.lost,
                    o.duplicates,
                    o.leaks,
                    o.left,
                    o.recovery.as_secs_f64(),
                    o.spare_runners,
                    o.orphan_registrations,
                    o.notes
                );
                if !o.is_clean() {
                    failures.push(format!(
                        "{} on {}: lost {}, duplicates {}, leaks {} ({:?}); operator output:\n{}",
                        o.scenario, o.forge, o.lost, o.duplicates, o.leaks, o.left, o.log_tail
                    ));
                }
            }
            Err(e) => failures.push(format!("{} on {}: {e}", scenario.name(), forge.name())),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operator_kill_mid_burst_loses_nothing() {
    row(Scenario::OperatorKill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_partition_loses_nothing() {
    row(Scenario::LeaderPartition).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn api_server_faults_lose_nothing() {
    row(Scenario::ApiServerFaults).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forge_faults_lose_nothing() {
    row(Scenario::ForgeFaults).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn node_lost_under_busy_runners_loses_nothing() {
    row(Scenario::NodeLost).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn silent_neighbours_starve_nothing() {
    row(Scenario::SilentNeighbours).await;
}
