//! What Gitea's runner listings can and cannot tell: they page over an order that every
//! runner call changes, and at `scope: global` they show every runner on the instance.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

mod common;

use std::sync::Arc;
use std::time::Duration;

use forgerunner_core::crd::{GiteaScope, GiteaSpec};
use forgerunner_core::forge::ForgeView;
use forgerunner_core::forge::{Forge, GroupContext, ReconcileTrigger, RemoveOutcome};
use forgerunner_core::metrics::Metrics;
use forgerunner_core::reconcile::ledger::{Ledger, OfflineRows};
use forgerunner_gitea::{ClientOptions, GiteaForge, GiteaOptions};
use forgerunner_testkit::gitea::{ADMIN_TOKEN, FakeConfig, FakeScope, GiteaFakeHandle, JobState};

async fn fake() -> GiteaFakeHandle {
    GiteaFakeHandle::start(FakeConfig::default()).await.unwrap()
}

fn opts() -> GiteaOptions {
    GiteaOptions {
        client: ClientOptions {
            request_timeout: Duration::from_millis(800),
            backoff: Duration::from_millis(10),
            ..ClientOptions::default()
        },
        ..GiteaOptions::default()
    }
}

fn forge(opts: GiteaOptions) -> GiteaForge {
    let (trigger, _rx) = ReconcileTrigger::channel();
    GiteaForge::with_options(Arc::new(Metrics::default()), trigger, opts)
}

fn ctx(name: &str, url: &str, scope: GiteaScope, target: Option<&str>, poll_seconds: u32) -> GroupContext {
    let gitea = GiteaSpec {
        url: url.to_string(),
        scope,
        org: (scope == GiteaScope::Org).then(|| target.unwrap_or_default().to_string()),
        user: None,
        repo: (scope == GiteaScope::Repo).then(|| target.unwrap_or_default().to_string()),
        credentials: "creds".into(),
        labels: vec!["linux".into()],
        poll_interval_seconds: Some(poll_seconds),
        webhook_secret: None,
        ca_bundle_config_map: None,
        proxy_url: None,
    };
    common::group_context(name, gitea, ADMIN_TOKEN)
}

/// The ghosts a pass finds in `f`'s view of `c` with no runners in the cluster, by the group's
/// core `books`.
async fn ghosts(f: &GiteaForge, c: &GroupContext, books: &mut Ledger) -> Vec<String> {
    let view: ForgeView = common::view(f, c).await.unwrap();
    forgerunner_core::testing::settled_ghosts(view, &[], books)
}

fn runner_listings(fake: &GiteaFakeHandle) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/actions/runners"))
        .count()
}

/// A repository with our runner `grp-abcde` (labels `linux`) and 50 other runners (`windows`)
/// that called in after it: ours is the 51st row of Gitea's `last_online DESC` order, on the
/// second page of a listing. Returns our runner's id.
fn crowded_repo(fake: &GiteaFakeHandle) -> i64 {
    fake.add_repo("acme/app");
    let scope = FakeScope::Repo("acme".into(), "app".into());
    let ours = fake.add_runner(scope.clone(), "grp-abcde", &["linux"], true);
    for i in 0..50 {
        fake.add_runner(scope.clone(), &format!("other-{i:05}"), &["windows"], true);
    }
    ours
}

/// Gitea orders runner listings by `last_online DESC` (`models/actions/runner.go`
/// `FindRunnerOptions.ToOrders`, v1.25.0/v1.26.0; `routers/api/v1/shared/runners.go`
/// `ListRunners` sets no other order) and rewrites `last_online` on every runner call
/// (`routers/api/actions/runner/interceptor.go` `withRunner`), with pages of at most 50
/// (`MAX_RESPONSE_ITEMS`). A runner that polls between the two pages of a listing is on
/// neither: the removal's fresh listing must not take "no row" for "gone", or it deletes the
/// Job of a runner that has just taken a job.
#[tokio::test]
async fn a_busy_runner_a_shifting_listing_skipped_is_not_removed() {
    let fake = fake().await;
    let ours = crowded_repo(&fake);
    let job = fake.queue_job("acme/app", &["linux"]);
    let f = forge(opts());
    let c = ctx("grp", &fake.url(), GiteaScope::Repo, Some("acme/app"), 30);
    // Right after the first page, our runner polls and takes the job: it jumps to the head.
    fake.poll_after_runner_page(1, ours);
    let outcome = f
        .open(&c.key)
        .deregister(&c, &common::running("grp-abcde"))
        .await
        .unwrap();
    assert_eq!(fake.job(job).unwrap().state, JobState::Running, "it took the job");
    assert_eq!(outcome, RemoveOutcome::Busy, "a runner at work is kept");
    assert!(fake.runners().iter().any(|r| r.id == ours), "still registered");
}

/// The same skip with an idle runner: it is still deregistered, not left behind as a row no
/// Job owns.
#[tokio::test]
async fn an_idle_runner_a_shifting_listing_skipped_is_still_deregistered() {
    let fake = fake().await;
    let ours = crowded_repo(&fake);
    let f = forge(opts());
    let c = ctx("grp", &fake.url(), GiteaScope::Repo, Some("acme/app"), 30);
    fake.poll_after_runner_page(1, ours);
    let outcome = f
        .open(&c.key)
        .deregister(&c, &common::running("grp-abcde"))
        .await
        .unwrap();
    assert_eq!(outcome, RemoveOutcome::Removed);
    assert!(
        fake.runners().iter().all(|r| r.id != ours),
        "deregistered at Gitea"
    );

    // A listing that did not shift is believed at once: one listing (two pages), no more.
    let scope = FakeScope::Repo("acme".into(), "app".into());
    fake.add_runner(scope, "other-extra", &["windows"], true);
    let before = runner_listings(&fake);
    let outcome = f
        .open(&c.key)
        .deregister(&c, &common::running("grp-zzzzz"))
        .await
        .unwrap();
    assert_eq!(outcome, RemoveOutcome::Removed, "never registered");
    assert_eq!(runner_listings(&fake) - before, 2, "one listing of two pages");
}

/// A runner's row exists from `Register` on, but it lists as offline until its daemon's first
/// call: `Register` (`routers/api/actions/runner/runner.go`) sets no `LastOnline` and the
/// `withRunner` interceptor skips it (`interceptor.go`). At `scope: global` the listing holds
/// every runner of the instance (`shared.ListRunners` with owner 0 and repo 0) and a row names
/// no scope (`api.ActionRunner`), so a runner a same-named group elsewhere (another namespace
/// or cluster, any scope) has just registered looks like this group's ghost.
#[tokio::test]
async fn a_global_group_does_not_sweep_a_runner_that_was_just_registered() {
    let fake = fake().await;
    fake.add_org("acme", &["alice"]);
    let f = forge(opts());
    let global = ctx("ci", &fake.url(), GiteaScope::Global, None, 1);
    // Group `ci` of another namespace, at organization acme, has just registered a runner.
    let fresh = fake.add_runner(FakeScope::Owner("acme".into()), "ci-k3x9z", &["linux"], false);
    let view = common::view(&f, &global).await.unwrap();
    let listed = view.listed_rows.as_ref().map(|r| r.offline.clone());
    assert_eq!(
        listed,
        Some(["ci-k3x9z".to_owned()].into()),
        "the row is listed offline"
    );
    // Core's books with the default grace: not a ghost yet.
    let ghosts = forgerunner_core::testing::settled_ghosts(view, &[], &mut Ledger::default());
    assert!(ghosts.is_empty(), "not a ghost yet: {ghosts:?}");
    assert!(fake.runners().iter().any(|r| r.id == fresh));
}

/// A row stays a ghost candidate only while it stays offline and idle: once seen offline for
/// the grace, across Gitea's listings, core's books call it a ghost; one whose daemon called in
/// meanwhile never is.
#[tokio::test]
async fn an_offline_row_is_a_ghost_only_after_the_grace() {
    let fake = fake().await;
    let grace = Duration::from_millis(1500);
    let f = forge(opts());
    let mut books = Ledger {
        offline_rows: OfflineRows::with_grace(grace),
        ..Ledger::default()
    };
    // Listings at most a second apart.
    let c = ctx("ci", &fake.url(), GiteaScope::Global, None, 1);
    let starts = fake.add_runner(FakeScope::Global, "ci-start", &["linux"], false);
    let dead = fake.add_runner(FakeScope::Global, "ci-dead0", &["linux"], false);
    let first_seen = tokio::time::Instant::now();
    assert!(ghosts(&f, &c, &mut books).await.is_empty());
    // The first one's daemon starts; the other never does.
    fake.runner_calls_in(starts);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let found = loop {
        let this_pass = ghosts(&f, &c, &mut books).await;
        if !this_pass.is_empty() || tokio::time::Instant::now() > deadline {
            break this_pass;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(found, ["ci-dead0"]);
    assert!(first_seen.elapsed() >= grace, "not before the grace");
    assert!(fake.runners().iter().any(|r| r.id == dead));
}

/// Gitea stores `last_online` in whole seconds and leaves the order of ties to the database,
/// so in a busy scope a runner can miss several listings in a row. After three listings that
/// all shifted, the removal asks the in-progress jobs whether the runner works: here the rows
/// of runners polling between pages shift every listing, and our runner's row is gone while
/// its job still runs (Gitea fails such a job only at its zombie-task cleanup), which is what
/// such a listing shows of a skipped runner at work.
#[tokio::test]
async fn after_three_shifting_listings_the_jobs_listing_decides() {
    let fake = fake().await;
    fake.add_repo("acme/app");
    let scope = FakeScope::Repo("acme".into(), "app".into());
    let ours = fake.add_runner(scope.clone(), "grp-abcde", &["linux"], true);
    let job = fake.queue_job("acme/app", &["linux"]);
    assert_eq!(fake.take_job(ours), Some(job));
    let status = reqwest::Client::new()
        .delete(format!(
            "{}/api/v1/repos/acme/app/actions/runners/{ours}",
            fake.url()
        ))
        .header("Authorization", format!("token {ADMIN_TOKEN}"))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 204);
    // 53 other runners; the three least recently online poll, one after each listing's first
    // page, so every listing repeats a row.
    let others: Vec<i64> = (0..53)
        .map(|i| fake.add_runner(scope.clone(), &format!("other-{i:05}"), &["windows"], true))
        .collect();
    let f = forge(opts());
    let c = ctx("grp", &fake.url(), GiteaScope::Repo, Some("acme/app"), 30);
    let jobs_listings = || {
        fake.requests()
            .iter()
            .filter(|r| r.path.ends_with("/actions/jobs"))
            .count()
    };
    let cases = [
        ("grp-abcde", RemoveOutcome::Busy),
        ("grp-zzzzz", RemoveOutcome::Removed),
    ];
    for (round, (name, want)) in cases.into_iter().enumerate() {
        // The three least recently online now: the earlier rounds' have moved to the head.
        for id in &others[3 * round..3 * round + 3] {
            fake.poll_after_runner_page(1, *id);
        }
        let (listings, jobs) = (runner_listings(&fake), jobs_listings());
        let outcome = f
            .open(&c.key)
            .deregister(&c, &common::running(name))
            .await
            .unwrap();
        assert_eq!(outcome, want, "{name}");
        assert_eq!(
            runner_listings(&fake) - listings,
            6,
            "{name}: three listings of two pages"
        );
        assert_eq!(jobs_listings() - jobs, 1, "{name}: then one jobs listing");
    }
    assert_eq!(fake.job(job).unwrap().state, JobState::Running);
}
