//! A job re-run on Gitea 1.26 after the cluster killed its runner gets its new runner on the
//! re-run's `queued` delivery, not one poll interval later.
//!
//! Gitea 1.26 queues the same job row again and leaves its attempt as it was
//! (`rerunWorkflowJob` in `services/actions/rerun.go`; only `CreateTaskForRunner` in
//! `models/actions/task.go` raises it), so the re-run's `queued` delivery repeats the id and
//! `run_attempt` of the killed task's `completed` one. The deliveries below are the fake's
//! own bodies, which carry what Gitea sends, handed to `GiteaForge` directly (no HTTP); the
//! poll interval is long, so only a delivery can make the job demand before the next listing.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

mod common;

use std::sync::Arc;

use forgerunner_core::crd::{GiteaScope, GiteaSpec};
use forgerunner_core::forge::{Forge, GroupContext, GroupKey, RerunOutcome, SecretValue};
use forgerunner_core::metrics::Metrics;
use forgerunner_gitea::{ClientOptions, GiteaClient, GiteaForge, parse_workflow_job, sign};
use forgerunner_testkit::gitea::{ADMIN_TOKEN, FakeConfig, FakeScope, GiteaFakeHandle};
use tokio::sync::mpsc::UnboundedReceiver;

/// The webhook secret of the group.
const HOOK_SECRET: &str = "hook-secret";

/// A group at organization `acme` serving `linux`, polling every 5 minutes, with webhooks.
fn group(fake: &GiteaFakeHandle) -> GroupContext {
    let gitea = GiteaSpec {
        url: fake.url(),
        scope: GiteaScope::Org,
        org: Some("acme".into()),
        user: None,
        repo: None,
        credentials: "creds".into(),
        labels: vec!["linux".into()],
        poll_interval_seconds: Some(300),
        webhook_secret: Some("hook".into()),
        ca_bundle_config_map: None,
        proxy_url: None,
    };
    let mut c = common::group_context("g", gitea, ADMIN_TOKEN);
    c.webhook_secret = Some(SecretValue::new(HOOK_SECRET));
    c
}

/// Jobs listings the fake has answered.
fn listings(fake: &GiteaFakeHandle) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.path.contains("/actions/jobs"))
        .count()
}

/// A job of `acme/app` running on our runner `g-killed` when the cluster killed it, and a
/// sibling of its run running on `g-sibling`, both in the backend's cached listing.
struct Killed {
    fake: GiteaFakeHandle,
    forge: GiteaForge,
    rx: UnboundedReceiver<GroupKey>,
    ctx: GroupContext,
    killed: i64,
    sibling: i64,
}

impl Killed {
    async fn start() -> Killed {
        let fake = GiteaFakeHandle::start(FakeConfig {
            version: "1.26.0".into(),
            ..FakeConfig::default()
        })
        .await
        .unwrap();
        let (forge, _, rx) = common::webhook::forge();
        let ctx = group(&fake);
        fake.add_org("acme", &["alice"]);
        let scope = FakeScope::Owner("acme".into());
        let killed_runner = fake.add_runner(scope.clone(), "g-killed", &["linux"], true);
        let sibling_runner = fake.add_runner(scope, "g-sibling", &["linux"], true);
        let mut run = Killed {
            killed: fake.queue_job("acme/app", &["linux"]),
            sibling: 0,
            fake,
            forge,
            rx,
            ctx,
        };
        run.sibling = run.fake.queue_job_in_run_of(run.killed, &["linux"]).unwrap();
        assert_eq!(run.fake.take_job(killed_runner), Some(run.killed));
        assert_eq!(run.fake.take_job(sibling_runner), Some(run.sibling));
        // The scope's listing, cached for the poll interval, shows both jobs in progress.
        assert_eq!(run.waiting().await, 0);
        assert_eq!(listings(&run.fake), 1);
        run
    }

    /// Hands the fake's current delivery for job `id` to the backend, as the operator's route
    /// does; returns the delivery's `(action, run_attempt)`.
    fn deliver(&mut self, id: i64) -> (String, i64) {
        let job = self.fake.job(id).expect("job exists");
        let body = self.fake.workflow_job_payload(&job);
        let mut headers = http::HeaderMap::new();
        headers.insert("x-gitea-event", http::HeaderValue::from_static("workflow_job"));
        let sig = sign(HOOK_SECRET.as_bytes(), &body);
        headers.insert("x-gitea-signature", sig.parse().expect("hex header"));
        let reply = self.forge.receive_webhook(&headers, &body);
        assert_eq!(reply.status, http::StatusCode::ACCEPTED, "{}", reply.body);
        common::webhook::woken(&mut self.rx);
        let event = parse_workflow_job(&body).expect("the fake's body parses");
        (format!("{:?}", event.action), event.run_attempt)
    }

    /// The group's demand as the backend reports it now.
    async fn waiting(&self) -> u32 {
        common::view(&self.forge, &self.ctx).await.unwrap().waiting_jobs
    }

    /// Gitea fails the killed runner's task as a zombie and the sibling completes; the
    /// backend gets both `completed` deliveries. Returns the killed job's.
    fn run_ends(&mut self) -> (String, i64) {
        assert!(self.fake.stop_zombie_task(self.killed));
        let completed = self.deliver(self.killed);
        assert!(self.fake.complete_job(self.sibling));
        self.deliver(self.sibling);
        completed
    }
}

#[tokio::test]
async fn our_reruns_queued_delivery_gives_the_job_a_runner_at_once() {
    let mut run = Killed::start().await;
    let view = run
        .forge
        .open(&run.ctx.key)
        .snapshot(&run.ctx, &[common::running("g-killed")])
        .await
        .unwrap();
    let identity = view.job_identities["g-killed"].clone();
    let completed = run.run_ends();
    assert_eq!(run.waiting().await, 0);

    let outcome = run
        .forge
        .open(&run.ctx.key)
        .rerun_job(&run.ctx, "g-killed", &identity)
        .await
        .unwrap();
    assert_eq!(outcome, RerunOutcome::Requested);
    let queued = run.deliver(run.killed);
    assert_eq!(
        (queued.0.as_str(), queued.1),
        ("Queued", completed.1),
        "Gitea 1.26 re-queues the job at the attempt of the killed task"
    );
    let before = listings(&run.fake);
    assert_eq!(
        run.waiting().await,
        1,
        "the re-run job is demand on its delivery, not one poll interval later"
    );
    assert_eq!(listings(&run.fake), before, "without a listing");
}

/// Only our own request makes a `queued` at a finished attempt demand before the next listing:
/// a re-run someone else asked for (the web UI, another client) waits for it, as a late
/// delivery would, so no delivery alone can restart a finished job.
#[tokio::test]
async fn a_rerun_we_did_not_ask_for_waits_for_the_next_listing() {
    let mut run = Killed::start().await;
    run.run_ends();
    let run_id = run.fake.job(run.killed).unwrap().run_id;
    let other = GiteaClient::new(
        &run.fake.url(),
        SecretValue::new(ADMIN_TOKEN),
        Arc::new(Metrics::default()),
        ClientOptions::default(),
    )
    .unwrap();
    other.rerun_job("acme", "app", run_id, run.killed).await.unwrap();
    run.deliver(run.killed);
    assert_eq!(run.waiting().await, 0);
}
