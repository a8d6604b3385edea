//! Every metric the user docs build on is recorded, on every forge: after a short burst through
//! the real `forgerunner` binary, a scrape of `/metrics` has a sample of each series the Grafana
//! dashboard and the chart's alert rules (`charts/forgerunner/files/prometheus-rules.yaml`) use.
//!
//! Exempt, with the reason: series that only a failure or a webhook records (other suites cover
//! them), and the stages a forge cannot fill (`docs/operations.md#latency-per-stage`).

#[allow(dead_code)]
mod common;

use std::time::{Duration, Instant};

use common::e2e::{OUTPUT_LINES, start_operator, start_operator_with, start_world};
use common::scrape::{missing, scrape};
use forgerunner_sandbox::world::groups::GroupSize;
use forgerunner_sandbox::world::operator::{OperatorProcess, OperatorSettings};
use forgerunner_sandbox::world::{World, WorldOptions};

const JOBS: usize = 4;
const DEADLINE: Duration = Duration::from_secs(240);

/// Recorded only when something fails, a webhook arrives, a forge instance uses its share of
/// the reconcile slots (`e2e_fair_share` records that one) or the cluster kills a busy runner
/// (core's `tests/reruns.rs` records that one), never by a clean polling run.
const NOT_IN_A_CLEAN_RUN: &[&str] = &[
    "forgerunner_jobs_rerun",
    "forgerunner_reconcile_errors",
    "forgerunner_reconciles_deferred",
    "forgerunner_webhook_deliveries",
    "forgerunner_webhook_signature_checks",
];

/// Only a group with `spec.classes` has series per class; `e2e_classes` checks the gauge.
const CLASSES_ONLY: &[&str] = &["forgerunner_class_runners"];

/// The API budget gauges: only GitHub's REST replies carry `X-RateLimit-*` headers (Gitea and
/// Forgejo send none), and the GitHub emulator sends them only with a rate-limit fault; the
/// GitHub client's unit tests read them from a raw server instead.
const BUDGET: &[&str] = &[
    "forgerunner_forge_rate_limit_limit",
    "forgerunner_forge_rate_limit_remaining",
    "forgerunner_forge_rate_limit_reset_timestamp_seconds",
];

/// Only Gitea's job listing shows jobs no group matches (Forgejo filters its listing by the
/// group's labels; GitHub routes jobs to scale sets by name): see
/// `docs/operations.md#stuck-queue-watchdog`.
const GITEA_ONLY: &[&str] = &["forgerunner_unmatched_waiting_jobs"];

fn size() -> GroupSize {
    GroupSize {
        min: 0,
        max: 3,
        idle_timeout_seconds: Some(5),
        startup_timeout_seconds: None,
        scale_down_delay_seconds: None,
    }
}

fn options(github: bool, gitea: bool, forgejo: bool) -> WorldOptions {
    WorldOptions {
        github,
        gitea,
        forgejo,
        // Long enough that a listing polled every second sees each job running.
        work_time: Duration::from_secs(3),
        github_long_poll: Duration::from_secs(1),
        ..WorldOptions::default()
    }
}

/// Waits for the group's first pass, so the jobs queued next are new to the operator.
async fn wait_first_pass(world: &World, op: &OperatorProcess, ns: &str, name: &str) {
    let polled = world.wait_first_pass(ns, name, DEADLINE).await;
    assert!(
        polled.is_ok(),
        "the group was never reconciled; operator log:\n{}",
        op.output_tail(OUTPUT_LINES)
    );
}

/// Waits until every job is done, then until every documented series has a sample.
async fn every_series_sampled(
    world: &World,
    op: &OperatorProcess,
    done: impl Fn(&World) -> usize,
    exempt: &[&str],
) {
    let deadline = Instant::now() + DEADLINE;
    while done(world) < JOBS {
        assert!(
            Instant::now() < deadline,
            "{}/{JOBS} jobs done; operator log:\n{}",
            done(world),
            op.output_tail(OUTPUT_LINES)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let exempt: Vec<&str> = NOT_IN_A_CLEAN_RUN
        .iter()
        .chain(CLASSES_ONLY)
        .chain(exempt)
        .copied()
        .collect();
    loop {
        let text = scrape(op).await;
        let gaps = missing(&text, &exempt);
        if gaps.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no sample of {gaps:?} in /metrics:\n{text}\noperator log:\n{}",
            op.output_tail(OUTPUT_LINES)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(feature = "gitea")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitea_records_every_documented_metric() {
    const NS: &str = "metrics-gitea";
    const LABELS: &[&str] = &["linux"];
    let world = start_world(options(false, true, false), NS).await;
    world
        .add_gitea_group(NS, "gt", LABELS, &size(), 1, None)
        .await
        .expect("group");
    let op = start_operator(&world, "gitea", "forgerunner-metrics-gitea");
    wait_first_pass(&world, &op, NS, "gt").await;
    for _ in 0..JOBS {
        world.queue_gitea_job(LABELS).expect("queue");
    }
    every_series_sampled(&world, &op, |w| w.gitea_progress(LABELS).done, BUDGET).await;
}

#[cfg(feature = "forgejo")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgejo_records_every_documented_metric() {
    const NS: &str = "metrics-forgejo";
    const LABELS: &[&str] = &["linux"];
    let world = start_world(options(false, false, true), NS).await;
    world
        .add_forgejo_group(NS, "fj", LABELS, &size(), 1)
        .await
        .expect("group");
    let op = start_operator(&world, "forgejo", "forgerunner-metrics-forgejo");
    wait_first_pass(&world, &op, NS, "fj").await;
    for _ in 0..JOBS {
        world.queue_forgejo_job(LABELS).expect("queue");
    }
    // Forgejo's job listing has no queue time.
    let mut exempt = vec!["forgerunner_job_queued_to_seen_seconds"];
    exempt.extend(BUDGET);
    exempt.extend(GITEA_ONLY);
    every_series_sampled(&world, &op, |w| w.forgejo_progress(LABELS).done, &exempt).await;
}

#[cfg(feature = "github")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_records_every_documented_metric() {
    const NS: &str = "metrics-github";
    const GROUP: &str = "gh";
    let world = start_world(options(true, false, false), NS).await;
    world.add_github_group(NS, GROUP, &size()).await.expect("group");
    // With `metrics.jobLabels` on: the job counters then carry the job's repository too.
    let settings = OperatorSettings {
        forges: vec!["github".into()],
        pod_name: "forgerunner-metrics-github".into(),
        env: vec![("FORGERUNNER_METRICS_JOB_LABELS".into(), "true".into())],
        ..OperatorSettings::default()
    };
    let op = start_operator_with(&world, &settings);
    let Ok(set_id) = world.github_scale_set(GROUP, DEADLINE).await else {
        panic!("no scale set; operator log:\n{}", op.output_tail(OUTPUT_LINES));
    };
    wait_first_pass(&world, &op, NS, GROUP).await;
    for _ in 0..JOBS {
        world.queue_github_job(set_id, GROUP).expect("queue");
    }
    let exempt: Vec<&str> = BUDGET.iter().chain(GITEA_ONLY).copied().collect();
    every_series_sampled(&world, &op, move |w| w.github_progress(set_id).done, &exempt).await;
    let deadline = Instant::now() + DEADLINE;
    loop {
        let text = scrape(&op).await;
        let labelled = text
            .lines()
            .any(|l| l.starts_with("forgerunner_jobs_completed_total{") && l.contains(",repository=\""));
        if labelled {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no jobs_completed_total sample with a repository label in /metrics:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
