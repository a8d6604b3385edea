//! End to end, the Gitea webhook fast path: the real `forgerunner` binary, the cluster simulator
//! and the Gitea fake delivering signed `workflow_job` webhooks to the operator's HTTP server.
//! The group polls only every 300 s, so a runner appearing within seconds of a job being queued
//! can only come from the webhook, and the deliveries cost no jobs listing: each job is counted
//! from its `queued` delivery, and keeps counting against the runner that took it.
//!
//! Debugging: `E2E_LOG=debug` sets the operator's log level, `E2E_DUMP=<file>` saves its whole
//! output when the test fails.
#![cfg(feature = "gitea")]

#[allow(dead_code)]
mod common;

use std::time::{Duration, Instant};

use common::e2e::{start_operator_with, wait_until_or_fail};
use common::gitea_world::gitea_world;
use common::group::{Group, is_ready};
use forgerunner_sandbox::world::operator::OperatorSettings;
use forgerunner_sandbox::world::watch::JobWatch;
use forgerunner_testkit::gitea::GiteaFakeHandle;

const NS: &str = "e2e-webhook";
const GROUP: &str = "hooked";
const LABELS: [&str; 1] = ["linux"];
const WEBHOOK_SECRET: &str = "webhook-hmac-secret";
/// Far beyond every deadline below: a poll cannot explain any reaction this test waits for.
const POLL_INTERVAL_SECONDS: u32 = 300;
const JOBS: usize = 5;
/// Every job of the test, queued one after the other, is served within this.
const ALL_JOBS: Duration = Duration::from_secs(60);
/// Startup: the operator's caches and the group's first poll.
const STARTUP: Duration = Duration::from_secs(60);

/// Deliveries of `job_id` by action, with the status the operator answered.
fn deliveries_of(fake: &GiteaFakeHandle, job_id: i64) -> Vec<(String, u16)> {
    fake.deliveries()
        .into_iter()
        .filter(|d| d.job_id == job_id)
        .map(|d| (d.action, d.status))
        .collect()
}

/// Jobs listings (pages) the fake has answered.
fn job_listings(fake: &GiteaFakeHandle) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.path.contains("/actions/jobs"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn webhooks_serve_jobs_long_before_the_next_poll() {
    let world = gitea_world(NS, Duration::from_millis(300)).await;
    let fake = world.gitea.clone().expect("gitea fake");
    let watch = JobWatch::start(world.client.clone(), NS);
    let settings = OperatorSettings {
        forges: vec!["gitea".into()],
        log_level: std::env::var("E2E_LOG").unwrap_or_else(|_| "info".into()),
        ..OperatorSettings::default()
    };
    let op = start_operator_with(&world, &settings);
    Group::gitea(GROUP)
        .in_world_org()
        .labels(&LABELS)
        .max(2)
        .idle_timeout(600)
        .poll_every(POLL_INTERVAL_SECONDS)
        .webhook_secret(WEBHOOK_SECRET)
        .create(&world, NS)
        .await;
    // Ready means the first poll is done: from here on only the webhook can bring news.
    wait_until_or_fail(&op, Instant::now() + STARTUP, "the group to be Ready", || {
        is_ready(&world, NS, GROUP)
    })
    .await;
    assert!(world.runner_jobs(NS, Some(GROUP)).await.expect("jobs").is_empty());
    fake.set_webhook(
        &format!(
            "http://{}/webhooks/gitea",
            op.http_addr().await.expect("operator listening")
        ),
        WEBHOOK_SECRET,
    );

    let lists_at_ready = job_listings(&fake);
    let started = Instant::now();
    let deadline = started + ALL_JOBS;
    let mut ids = Vec::new();
    let mut latencies = Vec::new();
    for n in 1..=JOBS {
        let queued = world.queue_gitea_job(&LABELS).expect("queue");
        ids.push(queued.id);
        wait_until_or_fail(&op, deadline, &format!("a runner Job for job {n}"), || async {
            watch.group(GROUP).created.len() >= n
        })
        .await;
        latencies.push(queued.at.elapsed());
        wait_until_or_fail(&op, deadline, &format!("job {n} done"), || async {
            world.gitea_progress(&LABELS).done == n
        })
        .await;
        // The runner is ephemeral: its Job goes, and the next job finds the group quiet.
        wait_until_or_fail(&op, deadline, &format!("runner of job {n} gone"), || async {
            world
                .runner_jobs(NS, Some(GROUP))
                .await
                .is_ok_and(|j| j.is_empty())
        })
        .await;
    }
    let elapsed = started.elapsed();
    assert!(elapsed < ALL_JOBS, "{JOBS} jobs took {elapsed:?}");
    // Deliveries are accounted on the cached listing: none of them cost a listing.
    assert_eq!(
        job_listings(&fake) - lists_at_ready,
        0,
        "jobs listings within one poll interval"
    );

    // The loop saw the last Job gone by listing; the watch may still be delivering its end.
    wait_until_or_fail(
        &op,
        Instant::now() + Duration::from_secs(10),
        "the watch to see every runner end",
        || async {
            let t = watch.group(GROUP);
            t.succeeded.len() + t.failed.len() >= t.created.len().max(JOBS)
        },
    )
    .await;
    let tally = watch.group(GROUP);
    assert_eq!(
        tally.created.len(),
        JOBS,
        "one runner per job: {:?}",
        tally.created
    );
    assert_eq!(tally.succeeded.len(), JOBS, "every runner finished well");
    assert!(tally.peak_active <= 1, "jobs came one at a time");
    let progress = world.gitea_progress(&LABELS);
    assert_eq!((progress.done, progress.registered_runners), (JOBS, 0));

    // Every job was announced (queued) and finished (completed) by a delivery the operator
    // accepted; deliveries are posted in the background, so wait for the last ones.
    wait_until_or_fail(
        &op,
        Instant::now() + Duration::from_secs(10),
        "every delivery",
        || async {
            ids.iter().all(|id| {
                let d = deliveries_of(&fake, *id);
                d.iter().any(|(a, _)| a == "queued") && d.iter().any(|(a, _)| a == "completed")
            })
        },
    )
    .await;
    let all = fake.deliveries();
    let refused: Vec<_> = all.iter().filter(|d| d.status != 202).collect();
    assert!(refused.is_empty(), "deliveries not answered 202: {refused:?}");
    assert!(all.len() >= 2 * JOBS, "{} deliveries", all.len());
    eprintln!("queue → runner Job latencies: {latencies:?}; {JOBS} jobs in {elapsed:?}");
}
