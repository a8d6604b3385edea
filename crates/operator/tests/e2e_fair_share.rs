//! End to end: one forge that accepts connections and never answers does not stop the other
//! groups (security review H5, `../shared/reference/findings/security.md`). Twenty groups point
//! at such a server; a healthy group beside them, in the same namespace, still gets a runner
//! for each of its jobs, and the slow groups say why they are not ready.
//!
//! The slow server is the outage a real forge behind a load balancer shows: the TCP handshake
//! is answered by the balancer and the request never is. A reqwest client then waits for its
//! whole request timeout (`reqwest::ClientBuilder::timeout`, applied per request in
//! `reqwest/src/async_impl/client.rs`, `Client::execute_request`), so every pass of such a group
//! holds its reconcile slot for that long.
#![cfg(feature = "gitea")]

#[allow(dead_code)]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::e2e::{assert_healthz, fail_with_output, start_operator};
use common::gitea_world::{condition, gitea_world, wait_or_fail, wait_within};
use common::group::Group;
use tokio::net::TcpListener;

const NS: &str = "fair-share";
/// Groups whose forge never answers: more than the reconcile slots the operator had (16).
const SLOW_GROUPS: usize = 20;
/// Jobs queued for the healthy group.
const JOBS: usize = 4;
/// How long the healthy group may take to get its runners. Starved, it waited for the slow
/// groups' request timeouts (15 s each, every slot): 0 of 4 runners in 40 s.
const HEALTHY_WITHIN: Duration = Duration::from_secs(12);

/// A server that accepts every connection and never answers; counts the connections.
async fn silent_server() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            // Kept open and never read: the client waits for an answer that never comes.
            held.push(socket);
        }
    });
    (format!("http://{addr}"), accepted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_silent_forge_does_not_starve_a_healthy_group() {
    let world = gitea_world(NS, Duration::from_millis(300)).await;
    let (silent_url, accepted) = silent_server().await;
    let op = start_operator(&world, "gitea", "forgerunner-e2e-fair-share");
    for i in 0..SLOW_GROUPS {
        Group::gitea(&format!("slow-{i}"))
            .host_label("slow")
            .max(2)
            .idle_timeout(600)
            .spec(serde_json::json!({ "gitea": { "url": silent_url } }))
            .create(&world, NS)
            .await;
    }
    Group::gitea("healthy")
        .host_label("healthy")
        .max(JOBS as u32)
        .idle_timeout(600)
        .create(&world, NS)
        .await;
    // The slow groups share one listing of the silent forge (same URL, scope and token), so
    // one connection is enough to hold all their passes.
    wait_or_fail(&op, "the slow groups to reach the silent forge", || async {
        accepted.load(Ordering::SeqCst) >= 1
    })
    .await;

    for _ in 0..JOBS {
        world.queue_gitea_job(&["healthy"]).expect("queue");
    }
    wait_within(
        &op,
        HEALTHY_WITHIN,
        "a runner for each of the healthy group's jobs",
        || async {
            world
                .runner_jobs(NS, Some("healthy"))
                .await
                .is_ok_and(|jobs| jobs.len() >= JOBS)
        },
    )
    .await;

    // The slow groups say what is wrong, each on its own.
    wait_or_fail(&op, "a slow group to say its forge did not answer", || async {
        condition(&world, NS, "slow-0", "Ready")
            .await
            .is_some_and(|(status, reason, _)| {
                status == "False" && (reason == "ForgeTimeout" || reason == "ForgeUnavailable")
            })
    })
    .await;
    // Four of the twenty had to wait for a turn of their forge instance, and that is counted.
    let metrics = reqwest::get(format!(
        "http://{}/metrics",
        op.metrics_addr().await.expect("operator listening")
    ))
    .await
    .expect("scrape");
    let metrics = metrics.text().await.expect("metrics text");
    if !metrics.contains("forgerunner_reconciles_deferred_total{forge=\"gitea\"}") {
        fail_with_output(&op, "no deferred reconcile was counted");
    }
    assert_healthz(&op).await;
}
