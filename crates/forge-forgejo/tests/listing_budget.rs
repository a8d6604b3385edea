//! Cached listings of many scopes share one budget (`listingCacheEntries`): a tenant with
//! groups on many repositories cannot make the operator hold a full listing per scope.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

mod common;

use std::sync::Arc;

use forgerunner_core::crd::ForgejoScope;
use forgerunner_core::forge::{Forge, GroupContext};
use forgerunner_core::metrics::Metrics;
use forgerunner_forgejo::ForgejoForge;
use forgerunner_http::ListingMemory;
use forgerunner_testkit::forgejo::{ADMIN_TOKEN, ForgejoFakeHandle};

const REPOS: usize = 5;
const JOBS_PER_REPO: usize = 10;
/// A jobs listing of one repository: each job is one entry, and so is its one label.
const LISTING: usize = JOBS_PER_REPO * 2;

fn forge(memory: &ListingMemory) -> ForgejoForge {
    common::forge_with(|o| o.listing_memory = Some(memory.clone())).0
}

fn groups(fake: &ForgejoFakeHandle) -> Vec<GroupContext> {
    (0..REPOS)
        .map(|i| {
            let repo = format!("acme/app{i}");
            let spec = common::spec(&fake.url(), ForgejoScope::Repo, Some(&repo), &["debian"]);
            common::group_context(&format!("grp{i}"), spec, ADMIN_TOKEN)
        })
        .collect()
}

async fn fake_with_repos() -> ForgejoFakeHandle {
    let fake = common::fake("15.0.3+gitea-1.22.0").await;
    for i in 0..REPOS {
        let repo = format!("acme/app{i}");
        fake.add_repo(&repo);
        for j in 0..JOBS_PER_REPO {
            fake.queue_job(&repo, &format!("job{j}"), &["debian"]);
        }
    }
    fake
}

/// Jobs listings requested so far.
fn jobs_listings(fake: &ForgejoFakeHandle) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/actions/runners/jobs"))
        .count()
}

/// Two rounds over five groups on five repositories, whose listings (100 entries) are twice
/// the budget (50): what is held never passes the budget by more than one listing, and every
/// group still sees all its jobs, its listing fetched again when the budget had dropped it.
#[tokio::test]
async fn listings_of_many_scopes_stay_within_one_budget_and_groups_still_see_their_jobs() {
    let fake = fake_with_repos().await;
    let metrics = Arc::new(Metrics::default());
    let memory = ListingMemory::new(50, metrics.clone());
    let f = forge(&memory);
    for round in 0..2 {
        for g in &groups(&fake) {
            let view = f.open(&g.key).snapshot(g, &[]).await.unwrap();
            assert_eq!(
                view.waiting_jobs as usize, JOBS_PER_REPO,
                "round {round}: {}",
                g.key.name
            );
            let held = memory.held();
            assert!(held <= 50 + LISTING, "round {round}: {held} entries held");
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
    let f = forge(&memory);
    for _ in 0..2 {
        for g in &groups(&fake) {
            f.open(&g.key).snapshot(g, &[]).await.unwrap();
        }
    }
    assert_eq!(jobs_listings(&fake), REPOS);
    assert_eq!(memory.held(), REPOS * LISTING);
    assert_eq!(metrics.listing_cache_evictions.get(), 0);
}
