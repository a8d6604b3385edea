//! Webhook deliveries against the fake Gitea: a delivery gives demand at once without a jobs
//! listing, so a scope costs one listing per poll interval however many deliveries arrive, and
//! the next listing (the source of truth) replaces what the deliveries announced.
//!
//! Deliveries are the fake's own `workflow_job` bodies handed to `GiteaForge` directly (no
//! HTTP), so every count below is exact; the fake counts the listings.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use forgerunner_core::crd::{GiteaScope, GiteaSpec};
use forgerunner_core::forge::{
    Forge, ForgeRunnerState, GroupContext, GroupKey, ReconcileTrigger, SecretValue,
};
use forgerunner_core::metrics::Metrics;
use forgerunner_core::reconcile::ledger::Ledger;
use forgerunner_gitea::{ClientOptions, GiteaForge, GiteaOptions, parse_workflow_job, sign};
use forgerunner_testkit::gitea::{ADMIN_TOKEN, FakeConfig, FakeScope, GiteaFakeHandle, JobState};
use tokio::sync::mpsc::UnboundedReceiver;

const REPO: &str = "acme/app";

async fn fake() -> GiteaFakeHandle {
    GiteaFakeHandle::start(FakeConfig {
        version: "1.26.0".into(),
        ..FakeConfig::default()
    })
    .await
    .unwrap()
}

fn forge() -> (GiteaForge, UnboundedReceiver<GroupKey>) {
    let (trigger, rx) = ReconcileTrigger::channel();
    let opts = GiteaOptions {
        client: ClientOptions {
            request_timeout: Duration::from_secs(5),
            backoff: Duration::from_millis(10),
            ..ClientOptions::default()
        },
        ..GiteaOptions::default()
    };
    (
        GiteaForge::with_options(Arc::new(Metrics::default()), trigger, opts),
        rx,
    )
}

fn ctx(name: &str, url: &str, labels: &[&str], poll_seconds: u32) -> GroupContext {
    let gitea = GiteaSpec {
        url: url.to_string(),
        scope: GiteaScope::Global,
        org: None,
        user: None,
        repo: None,
        credentials: "creds".into(),
        labels: labels.iter().map(|s| s.to_string()).collect(),
        poll_interval_seconds: Some(poll_seconds),
        webhook_secret: Some("hook".into()),
        ca_bundle_config_map: None,
        proxy_url: None,
    };
    let mut c = common::group_context(name, gitea, ADMIN_TOKEN);
    c.webhook_secret = Some(SecretValue::new(HOOK_SECRET));
    c
}

/// The webhook secret every group here is configured with.
const HOOK_SECRET: &str = "hook-secret";

/// Jobs listings the fake has answered.
fn listings(fake: &GiteaFakeHandle) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.path.contains("/actions/jobs"))
        .count()
}

/// Hands the fake's current delivery for job `id`, signed with the groups' secret, to the forge's
/// webhook entry point (as the operator's route does); returns the groups it woke.
fn deliver(
    f: &GiteaForge,
    fake: &GiteaFakeHandle,
    id: i64,
    rx: &mut UnboundedReceiver<GroupKey>,
) -> Vec<String> {
    let job = fake.job(id).expect("job exists");
    let body = fake.workflow_job_payload(&job);
    let mut headers = http::HeaderMap::new();
    headers.insert("x-gitea-event", http::HeaderValue::from_static("workflow_job"));
    let sig = sign(HOOK_SECRET.as_bytes(), &body);
    headers.insert("x-gitea-signature", sig.parse().expect("hex header"));
    let reply = f.receive_webhook(&headers, &body);
    assert_eq!(reply.status, http::StatusCode::ACCEPTED, "{}", reply.body);
    let mut woken = Vec::new();
    while let Ok(k) = rx.try_recv() {
        woken.push(k.name);
    }
    woken
}

/// How the forge reports one runner of `c`.
async fn state(f: &GiteaForge, c: &GroupContext, name: &str) -> Option<ForgeRunnerState> {
    let view = f
        .open(&c.key)
        .snapshot(c, &[common::running(name)])
        .await
        .unwrap();
    view.runners.get(name).copied()
}

async fn jobs(f: &GiteaForge, c: &GroupContext) -> u32 {
    common::view(f, c).await.expect("observe").waiting_jobs
}

#[tokio::test]
async fn deliveries_give_demand_at_once_without_listings() {
    let fake = fake().await;
    let (f, mut rx) = forge();
    let linux = ctx("g", &fake.url(), &["linux"], 300);
    let gpu = ctx("h", &fake.url(), &["gpu"], 300);
    assert_eq!(jobs(&f, &linux).await, 0);
    assert_eq!(jobs(&f, &gpu).await, 0);
    assert_eq!(listings(&fake), 1, "two groups on one scope share the listing");

    for n in 1..=20u32 {
        let id = fake.queue_job(REPO, &["linux"]);
        assert_eq!(
            deliver(&f, &fake, id, &mut rx),
            ["g"],
            "only the matching group is woken"
        );
        assert_eq!(jobs(&f, &linux).await, n, "announced job {n} counts at once");
        assert_eq!(jobs(&f, &gpu).await, 0, "labels still decide");
    }
    let blocked = fake.queue_blocked_job(REPO, &["linux"]);
    assert!(
        deliver(&f, &fake, blocked, &mut rx).is_empty(),
        "a blocked job wakes nobody"
    );
    assert_eq!(jobs(&f, &linux).await, 20, "nor is it demand");
    // Announced jobs keep the delivery's queue time: the queued → seen stage needs it.
    let waiting = common::view(&f, &linux).await.expect("observe").waiting;
    assert_eq!(waiting.len(), 20);
    assert!(
        waiting.iter().all(|w| w.queued_at.is_some()),
        "queue times: {waiting:?}"
    );
    assert_eq!(
        listings(&fake),
        1,
        "twenty deliveries, forty reconciles, still one listing"
    );
}

#[tokio::test]
async fn a_taken_job_leaves_demand_with_its_runner() {
    let fake = fake().await;
    let (f, mut rx) = forge();
    let g = ctx("g", &fake.url(), &["linux"], 300);
    assert_eq!(jobs(&f, &g).await, 0);
    let ours = fake.add_runner(FakeScope::Global, "g-abc12", &["linux"], true);
    let theirs = fake.add_runner(FakeScope::Global, "other-abc12", &["linux"], true);
    let a = fake.queue_job(REPO, &["linux"]);
    deliver(&f, &fake, a, &mut rx);
    assert_eq!(jobs(&f, &g).await, 1);
    assert_eq!(fake.take_job(ours), Some(a));
    assert!(
        deliver(&f, &fake, a, &mut rx).is_empty(),
        "in_progress wakes nobody"
    );
    // Job and runner leave the planner's arithmetic together: the job is no longer queued
    // and the runner is working, not waiting for a job.
    assert_eq!(jobs(&f, &g).await, 0, "taken by our runner");
    assert_eq!(state(&f, &g, "g-abc12").await, Some(ForgeRunnerState::Busy));
    // The delivery also names the runner's job, for its pod's annotations.
    let view = f
        .open(&g.key)
        .snapshot(&g, &[common::running("g-abc12")])
        .await
        .unwrap();
    let job = &view.job_identities["g-abc12"];
    assert_eq!(job.repository.as_deref(), Some(REPO));
    assert_eq!(job.job_id, Some(a.to_string()));
    assert!(job.run_id.is_some() && job.job_name.is_some(), "{job:?}");
    assert!(fake.complete_job(a));
    deliver(&f, &fake, a, &mut rx);
    assert_eq!(jobs(&f, &g).await, 0);
    assert_eq!(
        state(&f, &g, "g-abc12").await,
        Some(ForgeRunnerState::Finished),
        "its job no longer counts anywhere"
    );

    let b = fake.queue_job(REPO, &["linux"]);
    deliver(&f, &fake, b, &mut rx);
    assert_eq!(jobs(&f, &g).await, 1);
    assert_eq!(fake.take_job(theirs), Some(b));
    deliver(&f, &fake, b, &mut rx);
    assert_eq!(jobs(&f, &g).await, 0, "taken by another group's runner");

    let c = fake.queue_job(REPO, &["linux"]);
    deliver(&f, &fake, c, &mut rx);
    assert_eq!(jobs(&f, &g).await, 1);
    fake.cancel_job(c);
    deliver(&f, &fake, c, &mut rx);
    assert_eq!(jobs(&f, &g).await, 0, "cancelled while queued");

    // Out of order: the `queued` delivery of a job arrives after its `in_progress` one.
    let d = fake.queue_job(REPO, &["linux"]);
    let queued_body = fake.workflow_job_payload(&fake.job(d).unwrap());
    let third = fake.add_runner(FakeScope::Global, "other-xyz98", &["linux"], true);
    assert_eq!(fake.take_job(third), Some(d));
    deliver(&f, &fake, d, &mut rx);
    let late = parse_workflow_job(&queued_body).unwrap();
    f.wake(&late, std::slice::from_ref(&g.key));
    assert_eq!(
        jobs(&f, &g).await,
        0,
        "a late `queued` does not undo `in_progress`"
    );
    assert_eq!(listings(&fake), 1);
}

#[tokio::test]
async fn the_next_listing_replaces_announcements_and_finds_lost_deliveries() {
    let fake = fake().await;
    let (f, mut rx) = forge();
    let g = ctx("g", &fake.url(), &["linux"], 1);
    assert_eq!(jobs(&f, &g).await, 0);
    let announced = fake.queue_job(REPO, &["linux"]);
    deliver(&f, &fake, announced, &mut rx);
    let cancelled = fake.queue_job(REPO, &["linux"]);
    deliver(&f, &fake, cancelled, &mut rx);
    // Neither delivery of these two arrives: one queued, one cancelled while queued.
    let silent = fake.queue_job(REPO, &["linux"]);
    fake.cancel_job(cancelled);
    assert_eq!(jobs(&f, &g).await, 2, "what the deliveries said");
    assert_eq!(listings(&fake), 1);

    // The poll interval (1 s) passes: a reconcile then lists afresh.
    let deadline = Instant::now() + Duration::from_secs(30);
    while listings(&fake) < 2 {
        assert!(Instant::now() < deadline, "no second listing within 30 s");
        jobs(&f, &g).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        jobs(&f, &g).await,
        2,
        "the listing counts the announced job once and finds the silent one; the cancel is gone"
    );
    assert_eq!(fake.job(silent).map(|j| j.state), Some(JobState::Waiting));
}

#[tokio::test]
async fn one_listing_per_poll_interval_under_a_stream_of_deliveries() {
    let fake = fake().await;
    let (f, mut rx) = forge();
    let g = ctx("g", &fake.url(), &["linux"], 1);
    let start = Instant::now();
    assert_eq!(jobs(&f, &g).await, 0);
    let mut queued = 0u32;
    // About three poll intervals of deliveries, each followed by a reconcile. The old path
    // (a refresh per delivery, at most one per 500 ms) listed about six times here.
    while start.elapsed() < Duration::from_secs(3) {
        let id = fake.queue_job(REPO, &["linux"]);
        queued += 1;
        deliver(&f, &fake, id, &mut rx);
        assert_eq!(jobs(&f, &g).await, queued, "every queued job is demand at once");
        // Arrivals about ten a second (as in the bench), so the queue fits one page.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let n = listings(&fake);
    assert!(
        (n as f64) <= elapsed.floor() + 1.0,
        "{n} listings in {elapsed:.2} s with a 1 s poll interval"
    );
    assert!(n >= 2, "polling goes on: {n} listings in {elapsed:.2} s");
}

#[tokio::test]
async fn the_next_poll_is_due_one_interval_after_the_latest_listing() {
    let fake = fake().await;
    let (f, mut rx) = forge();
    let g = ctx("g", &fake.url(), &["linux"], 1);
    let before = Instant::now();
    assert_eq!(jobs(&f, &g).await, 0);
    // A reconcile woken meanwhile (a delivery) reuses the listing and schedules nothing.
    let id = fake.queue_job(REPO, &["linux"]);
    assert_eq!(deliver(&f, &fake, id, &mut rx), ["g"]);
    assert_eq!(jobs(&f, &g).await, 1);
    let woken = tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("the group is woken when its listing expires")
        .expect("trigger open");
    assert_eq!(woken.name, "g");
    assert!(
        before.elapsed() >= Duration::from_secs(1),
        "not before the interval: {:?}",
        before.elapsed()
    );
    assert_eq!(listings(&fake), 1);
    assert_eq!(jobs(&f, &g).await, 1, "that reconcile lists afresh");
    assert_eq!(listings(&fake), 2);
    assert!(rx.try_recv().is_err(), "one wake per listing");
}

/// A runner that finished after the cached listing was fetched covers the job that listing still
/// shows queued (no duplicate runner), until a newer listing shows the job done.
#[tokio::test]
async fn a_runner_finished_after_the_listing_covers_its_job_until_the_next_listing() {
    use forgerunner_core::plan::RunnerPhase;
    let fake = fake().await;
    let (f, _rx) = forge();
    let c = ctx("g", &fake.url(), &["linux"], 1);
    // The group's books in core, which net the view for runners that took a job after the
    // listing, as the reconciler does.
    let mut books = Ledger::default();
    let id = fake.queue_job(REPO, &["linux"]);
    assert_eq!(netted_view(&f, &c, &[], &mut books).await.waiting_jobs, 1);
    let before = listings(&fake);

    // Our runner took the job and its Job succeeded; the cached listing still shows it queued.
    let runner = fake.add_runner(FakeScope::Global, "g-fin01", &["linux"], true);
    assert_eq!(fake.take_job(runner), Some(id));
    assert!(fake.complete_job(id));
    let mut done = common::running("g-fin01");
    done.phase = RunnerPhase::Succeeded;
    let view = netted_view(&f, &c, &[done], &mut books).await;
    assert_eq!(listings(&fake), before, "still the cached listing");
    assert_eq!(view.waiting_jobs, 0, "the finished runner covers its job");
    // Its Job is cleaned up: the runner is gone from the cluster, and still covers the job.
    assert_eq!(netted_view(&f, &c, &[], &mut books).await.waiting_jobs, 0);

    // A newer listing no longer shows the job: nothing is covered, and a new job counts again.
    fake.queue_job(REPO, &["linux"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while listings(&fake) == before {
        assert!(Instant::now() < deadline, "no new listing");
        let _ = netted_view(&f, &c, &[], &mut books).await.waiting_jobs;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        netted_view(&f, &c, &[], &mut books).await.waiting_jobs,
        1,
        "the new job is demand; the old one is gone"
    );
}

/// A runner the runners listing (refreshed by a removal) shows busy while the older cached jobs
/// listing still shows its job queued covers that job: no runner is made for a taken job. Once
/// its Job succeeds it covers the job still (the listing is the same), and nothing is counted
/// twice.
#[tokio::test]
async fn a_runner_busy_after_the_jobs_listing_covers_its_job() {
    use forgerunner_core::plan::RunnerPhase;
    let fake = fake().await;
    let (f, _rx) = forge();
    // A long interval: the jobs listing stays cached for the whole test.
    let c = ctx("g", &fake.url(), &["linux"], 300);
    // The group's books in core, which net the view as the reconciler does.
    let mut books = Ledger::default();
    let id = fake.queue_job(REPO, &["linux"]);
    let runner = fake.add_runner(FakeScope::Global, "g-bus01", &["linux"], true);
    let refs = [common::running("g-bus01")];
    let view = netted_view(&f, &c, &refs, &mut books).await;
    assert_eq!(view.waiting_jobs, 1);
    assert_eq!(view.runners.get("g-bus01"), Some(&ForgeRunnerState::Idle));
    let before = listings(&fake);

    // The runner takes the job; removing another runner refreshes the runners listing only.
    assert_eq!(fake.take_job(runner), Some(id));
    f.open(&c.key)
        .deregister(&c, &common::running("g-gone1"))
        .await
        .unwrap();
    let view = netted_view(&f, &c, &refs, &mut books).await;
    assert_eq!(listings(&fake), before, "still the cached jobs listing");
    assert_eq!(view.runners.get("g-bus01"), Some(&ForgeRunnerState::Busy));
    assert_eq!(view.waiting_jobs, 0, "the busy runner covers its job");

    // The job completes and the runner's Job succeeds; the cached listing is the same.
    assert!(fake.complete_job(id));
    let mut done = common::running("g-bus01");
    done.phase = RunnerPhase::Succeeded;
    assert_eq!(netted_view(&f, &c, &[done], &mut books).await.waiting_jobs, 0);
    assert_eq!(
        netted_view(&f, &c, &[], &mut books).await.waiting_jobs,
        0,
        "its Job is gone; the old listing is still covered"
    );
}

/// The view the reconciler plans on: the snapshot, then netted by the group's books in core.
async fn netted_view(
    f: &forgerunner_gitea::GiteaForge,
    c: &forgerunner_core::forge::GroupContext,
    refs: &[forgerunner_core::forge::RunnerRef],
    books: &mut forgerunner_core::reconcile::ledger::Ledger,
) -> forgerunner_core::forge::ForgeView {
    let view = f.open(&c.key).snapshot(c, refs).await.expect("observe");
    forgerunner_core::testing::netted_view(view, refs, books)
}
