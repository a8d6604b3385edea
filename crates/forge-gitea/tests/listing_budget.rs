//! Cached listings of many scopes share one budget (`listingCacheEntries`): a tenant with
//! groups on many repositories cannot make the operator hold a full listing per scope.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

mod common;

use std::sync::Arc;
use std::time::Duration;

use forgerunner_core::crd::{GiteaScope, GiteaSpec};
use forgerunner_core::forge::{GroupContext, ReconcileTrigger};
use forgerunner_core::metrics::Metrics;
use forgerunner_gitea::{ClientOptions, GiteaForge, GiteaOptions};
use forgerunner_http::ListingMemory;
use forgerunner_testkit::gitea::{ADMIN_TOKEN, FakeConfig, GiteaFakeHandle};

const REPOS: usize = 5;
const JOBS_PER_REPO: usize = 10;
/// A jobs listing of one repository: each job is one entry, and so is its one label.
const LISTING: usize = JOBS_PER_REPO * 2;

fn forge(memory: &ListingMemory, metrics: &Arc<Metrics>) -> GiteaForge {
    let (trigger, _rx) = ReconcileTrigger::channel();
    let opts = GiteaOptions {
        client: ClientOptions {
            request_timeout: Duration::from_millis(800),
            backoff: Duration::from_millis(10),
            ..ClientOptions::default()
        },
        listing_memory: Some(memory.clone()),
        ..GiteaOptions::default()
    };
    GiteaForge::with_options(metrics.clone(), trigger, opts)
}

fn ctx(i: usize, url: &str) -> GroupContext {
    let gitea = GiteaSpec {
        url: url.to_string(),
        scope: GiteaScope::Repo,
        org: None,
        user: None,
        repo: Some(format!("acme/app{i}")),
        credentials: "creds".into(),
        labels: vec!["linux".into()],
        // Long enough that every listing would still be fresh on the second round.
        poll_interval_seconds: Some(600),
        webhook_secret: None,
        ca_bundle_config_map: None,
        proxy_url: None,
    };
    common::group_context(&format!("grp{i}"), gitea, ADMIN_TOKEN)
}

/// Jobs listings requested so far.
fn jobs_listings(fake: &GiteaFakeHandle) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/actions/jobs"))
        .count()
}

async fn fake_with_repos() -> GiteaFakeHandle {
    let fake = GiteaFakeHandle::start(FakeConfig::default()).await.unwrap();
    for i in 0..REPOS {
        let repo = format!("acme/app{i}");
        fake.add_repo(&repo);
        for _ in 0..JOBS_PER_REPO {
            fake.queue_job(&repo, &["linux"]);
        }
    }
    fake
}

/// Two rounds over five groups on five repositories, whose listings (100 entries) are twice
/// the budget (50): what is held never passes the budget by more than one listing, and every
/// group still sees all its jobs, its listing fetched again when the budget had dropped it.
#[tokio::test]
async fn listings_of_many_scopes_stay_within_one_budget_and_groups_still_see_their_jobs() {
    let fake = fake_with_repos().await;
    let metrics = Arc::new(Metrics::default());
    let memory = ListingMemory::new(50, metrics.clone());
    let f = forge(&memory, &metrics);
    let groups: Vec<GroupContext> = (0..REPOS).map(|i| ctx(i, &fake.url())).collect();
    for round in 0..2 {
        for g in &groups {
            let view = common::view(&f, g).await.unwrap();
            assert_eq!(
                view.waiting_jobs as usize, JOBS_PER_REPO,
                "round {round}: {} sees its jobs",
                g.key.name
            );
            let held = memory.held();
            assert!(held <= 50 + LISTING, "round {round}: {held} entries held");
            assert_eq!(metrics.listing_cache_entries.get(), held as i64);
        }
    }
    assert_eq!(
        jobs_listings(&fake),
        2 * REPOS,
        "each dropped listing is fetched again"
    );
    assert!(metrics.listing_cache_evictions.get() >= REPOS as u64);
    assert_eq!(metrics.listing_cache_over_budget.get(), 0);
}

/// The same rounds under a budget that holds them all: nothing is dropped or fetched again.
#[tokio::test]
async fn under_a_budget_that_holds_them_all_listings_are_reused() {
    let fake = fake_with_repos().await;
    let metrics = Arc::new(Metrics::default());
    let memory = ListingMemory::new(REPOS * LISTING, metrics.clone());
    let f = forge(&memory, &metrics);
    let groups: Vec<GroupContext> = (0..REPOS).map(|i| ctx(i, &fake.url())).collect();
    for _ in 0..2 {
        for g in &groups {
            common::view(&f, g).await.unwrap();
        }
    }
    assert_eq!(jobs_listings(&fake), REPOS);
    assert_eq!(memory.held(), REPOS * LISTING);
    assert_eq!(metrics.listing_cache_evictions.get(), 0);
}
