use std::sync::Arc;
use std::time::Duration;

use forgerunner_core::metrics::Metrics;

use super::*;
use crate::single_flight::Cell;

const HOUR: Duration = Duration::from_secs(3600);

/// A listing of `n` entries.
type Listing = Vec<u32>;

fn entries(l: &Listing) -> usize {
    l.len()
}

fn budget(max: usize) -> (ListingMemory, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::default());
    (ListingMemory::new(max, metrics.clone()), metrics)
}

fn cell(memory: &ListingMemory) -> Cell<Listing> {
    Cell::charged(memory.clone(), entries)
}

/// Gets `cell`'s value (fetching `n` entries when it has none), and whether it was fetched.
async fn use_listing(cell: &Cell<Listing>, n: usize) -> (usize, bool) {
    let got = cell
        .get(HOUR, async { Ok::<_, ()>(vec![0; n]) })
        .await
        .expect("fetched");
    (got.value.len(), got.fetched_now)
}

#[tokio::test]
async fn cached_listings_hold_their_entries_until_replaced_expired_or_dropped() {
    let (memory, metrics) = budget(1000);
    let (a, b) = (cell(&memory), cell(&memory));
    use_listing(&a, 10).await;
    use_listing(&b, 20).await;
    assert_eq!(memory.held(), 30);
    assert_eq!(metrics.listing_cache_entries.get(), 30);
    // A refetch replaces the value: the old charge goes back, the new one is taken.
    let got = a
        .get(Duration::ZERO, async { Ok::<_, ()>(vec![0; 5]) })
        .await
        .expect("refetched");
    assert!(got.fetched_now);
    assert_eq!(memory.held(), 25);
    b.expire().await;
    assert_eq!(memory.held(), 5);
    drop(a);
    assert_eq!(memory.held(), 0, "a pruned cache entry returns its charge");
    assert_eq!(metrics.listing_cache_entries.get(), 0);
    assert_eq!(metrics.listing_cache_evictions.get(), 0);
    assert_eq!(metrics.listing_cache_over_budget.get(), 0);
}

#[tokio::test]
async fn a_listing_over_the_budget_evicts_the_least_recently_used_others() {
    let (memory, metrics) = budget(100);
    let (a, b, c) = (cell(&memory), cell(&memory), cell(&memory));
    use_listing(&a, 40).await;
    use_listing(&b, 40).await;
    assert_eq!(
        use_listing(&a, 40).await,
        (40, false),
        "a is used again, b is not"
    );
    assert_eq!(use_listing(&c, 40).await, (40, true));
    assert_eq!(memory.held(), 80, "b made room");
    assert!(a.is_cached() && !b.is_cached() && c.is_cached());
    assert_eq!(metrics.listing_cache_evictions.get(), 1);
    // b's groups still get their listing: fetched again, evicting a (now the oldest use).
    assert_eq!(use_listing(&b, 40).await, (40, true));
    assert!(!a.is_cached() && b.is_cached() && c.is_cached());
    assert_eq!(memory.held(), 80);
    assert_eq!(metrics.listing_cache_evictions.get(), 2);
    assert_eq!(metrics.listing_cache_over_budget.get(), 0);
}

#[tokio::test]
async fn a_listing_larger_than_the_whole_budget_is_still_served() {
    let (memory, metrics) = budget(100);
    let (small, big) = (cell(&memory), cell(&memory));
    use_listing(&small, 60).await;
    assert_eq!(use_listing(&big, 150).await, (150, true), "never refused");
    assert!(!small.is_cached(), "everything else made room first");
    assert_eq!(memory.held(), 150, "the budget plus at most one listing");
    assert_eq!(metrics.listing_cache_over_budget.get(), 1);
    assert_eq!(metrics.listing_cache_evictions.get(), 1);
    // The next listing evicts the oversized one, and fits again.
    assert_eq!(use_listing(&small, 60).await, (60, true));
    assert_eq!(memory.held(), 60);
    assert!(!big.is_cached());
}

#[tokio::test]
async fn an_eviction_spares_a_value_fetched_since() {
    let (memory, _) = budget(100);
    let a = cell(&memory);
    use_listing(&a, 10).await;
    let first = {
        let book = memory.shared.book();
        *book.charges.keys().next().expect("one charge")
    };
    a.get(Duration::ZERO, async { Ok::<_, ()>(vec![0; 20]) })
        .await
        .expect("refetched");
    a.stored.evict(first);
    assert!(a.is_cached(), "the stale id does not drop the new value");
    assert_eq!(memory.held(), 20);
}

#[test]
fn entries_of_sums_items_and_labels() {
    struct Row(usize);
    impl Entries for Row {
        fn entries(&self) -> usize {
            1 + self.0
        }
    }
    assert_eq!(entries_of(&[Row(0), Row(3)]), 5);
    assert_eq!(entries_of::<Row>(&[]), 0);
}
