//! End to end, webhooks with two replicas: two real `forgerunner` processes campaign for one
//! Lease; the Gitea fake delivers signed `workflow_job` webhooks alternately to the standby and
//! to the leader, as a Service in front of both would. The group polls only every 300 s, so a
//! runner appearing within seconds of a job being queued can only come from a delivery, and
//! every delivery must reach the leader: the standby relays it there and relays the answer.
//!
//! Debugging: `E2E_LOG=debug` sets the operators' log level, `E2E_DUMP=<file>` saves the output
//! of the failing one.
#![cfg(feature = "gitea")]

#[allow(dead_code)]
mod common;

use std::time::{Duration, Instant};

use common::e2e::{start_operator_with, wait_until_or_fail};
use common::gitea_world::gitea_world;
use common::group::{Group, is_ready};
use common::leader::lease_holder;
use forgerunner_sandbox::world::operator::{OperatorProcess, OperatorSettings};
use forgerunner_sandbox::world::watch::JobWatch;

const NS: &str = "e2e-standby";
const GROUP: &str = "hooked";
const LABELS: [&str; 1] = ["linux"];
const WEBHOOK_SECRET: &str = "standby-hmac-secret";
/// Far beyond every deadline below: a poll cannot explain any reaction this test waits for.
const POLL_INTERVAL_SECONDS: u32 = 300;
const JOBS: usize = 4;
const ALL_JOBS: Duration = Duration::from_secs(90);
const STARTUP: Duration = Duration::from_secs(60);
/// The status an unsigned delivery to `op` is answered with.
async fn unsigned_delivery_status(op: &OperatorProcess) -> Option<u16> {
    reqwest::Client::new()
        .post(format!(
            "http://{}/webhooks/gitea",
            op.http_addr().await.expect("operator listening")
        ))
        .header("x-gitea-event", "workflow_job")
        .body(r#"{"repository":{"full_name":"acme/app"}}"#)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()
        .map(|r| r.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deliveries_to_the_standby_reach_the_leader() {
    let world = gitea_world(NS, Duration::from_millis(300)).await;
    let fake = world.gitea.clone().expect("gitea fake");
    let watch = JobWatch::start(world.client.clone(), NS);
    let settings = |pod: &str| OperatorSettings {
        forges: vec!["gitea".into()],
        log_level: std::env::var("E2E_LOG").unwrap_or_else(|_| "info".into()),
        pod_name: pod.to_owned(),
        leader_election: true,
        env: Vec::new(),
    };
    let first = start_operator_with(&world, &settings("forgerunner-a"));
    wait_until_or_fail(&first, Instant::now() + STARTUP, "a leader", || async {
        lease_holder(&world).await.is_some()
    })
    .await;
    // The second replica starts once the first leads, so it is the standby.
    let second = start_operator_with(&world, &settings("forgerunner-b"));
    let holder = lease_holder(&world).await.expect("holder");
    let (leader, standby) = if holder == "forgerunner-a" {
        (&first, &second)
    } else {
        (&second, &first)
    };
    Group::gitea(GROUP)
        .in_world_org()
        .labels(&LABELS)
        .max(2)
        .idle_timeout(600)
        .poll_every(POLL_INTERVAL_SECONDS)
        .webhook_secret(WEBHOOK_SECRET)
        .create(&world, NS)
        .await;
    wait_until_or_fail(leader, Instant::now() + STARTUP, "the group to be Ready", || {
        is_ready(&world, NS, GROUP)
    })
    .await;
    // The standby relays (the leader answers 401 to an unsigned delivery) once it has read
    // the leader's endpoint from the Lease.
    wait_until_or_fail(
        standby,
        Instant::now() + STARTUP,
        "the standby to relay",
        || async { unsigned_delivery_status(standby).await == Some(401) },
    )
    .await;
    assert!(world.runner_jobs(NS, Some(GROUP)).await.expect("jobs").is_empty());

    let started = Instant::now();
    let deadline = started + ALL_JOBS;
    for n in 1..=JOBS {
        // Odd jobs are delivered to the standby, even ones to the leader.
        let target = if n % 2 == 1 { standby } else { leader };
        fake.set_webhook(
            &format!(
                "http://{}/webhooks/gitea",
                target.http_addr().await.expect("operator listening")
            ),
            WEBHOOK_SECRET,
        );
        let queued = world.queue_gitea_job(&LABELS).expect("queue");
        wait_until_or_fail(leader, deadline, &format!("a runner Job for job {n}"), || async {
            watch.group(GROUP).created.len() >= n
        })
        .await;
        eprintln!(
            "job {n} via {} got a runner Job in {:?}",
            target.http_addr().await.expect("operator listening"),
            queued.at.elapsed()
        );
        wait_until_or_fail(leader, deadline, &format!("job {n} done"), || async {
            world.gitea_progress(&LABELS).done == n
        })
        .await;
        wait_until_or_fail(leader, deadline, &format!("runner of job {n} gone"), || async {
            world
                .runner_jobs(NS, Some(GROUP))
                .await
                .is_ok_and(|j| j.is_empty())
        })
        .await;
    }
    let tally = watch.group(GROUP);
    assert_eq!(
        tally.created.len(),
        JOBS,
        "one runner per job: {:?}",
        tally.created
    );

    // Every delivery, to either replica, was accepted by the leader.
    wait_until_or_fail(
        leader,
        Instant::now() + Duration::from_secs(10),
        "every delivery",
        || async { fake.deliveries().iter().filter(|d| d.action == "queued").count() >= JOBS },
    )
    .await;
    let all = fake.deliveries();
    let refused: Vec<_> = all.iter().filter(|d| d.status != 202).collect();
    assert!(refused.is_empty(), "deliveries not answered 202: {refused:?}");
    let metrics = reqwest::get(format!(
        "http://{}/metrics",
        standby.metrics_addr().await.expect("operator listening")
    ))
    .await
    .expect("standby metrics")
    .text()
    .await
    .expect("metrics text");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("forgerunner_webhook_deliveries_total{")
                && l.contains("outcome=\"forwarded\"")
                && !l.ends_with(" 0")),
        "the standby counts its relayed deliveries:\n{metrics}"
    );
}
