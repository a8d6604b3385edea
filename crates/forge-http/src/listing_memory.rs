//! A budget for the decoded size of every cached listing together, shared by the Gitea and
//! Forgejo backends of one process.
//!
//! Each listing is bounded on its own ([`crate::ListingLimits`]), and a tenant can make groups
//! on as many scopes (or forge instances) as it likes, each with its own cached listing: the
//! sum would be bounded only by the number of scopes. So every cached listing holds a
//! [`Charge`] of its kept entries (items and labels, as [`crate::Entries`] counts them) against
//! one [`ListingMemory`]; a listing that would take the total over the budget first drops the
//! least recently used other listings, which are fetched again on their next use.
//!
//! A listing is charged after it was decoded (within its own cap), and it is kept even when it
//! alone is larger than the whole budget: refusing it would stop its groups, and the per-listing
//! cap already bounds it. The total held is thus at most the budget plus one listing, and
//! `forgerunner_listing_cache_over_budget` counts each listing kept that way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use forgerunner_core::metrics::Metrics;

use crate::bounded::Entries;

/// What a cached listing's storage does when the budget takes its room back.
pub trait Evict: Send + Sync {
    /// Drops the cached value if it still holds charge `id` (a newer value keeps its place).
    fn evict(&self, id: u64);
}

/// The process-wide budget for cached listings, in entries. Cheap to clone: clones share one
/// account.
#[derive(Clone)]
pub struct ListingMemory {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ListingMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListingMemory")
            .field("max_entries", &self.shared.max_entries)
            .field("held", &self.held())
            .finish()
    }
}

struct Shared {
    max_entries: usize,
    metrics: Arc<Metrics>,
    book: Mutex<Book>,
}

/// Who holds what, and in which order they were last used.
#[derive(Default)]
struct Book {
    held: usize,
    /// A use counter: a listing's last use orders eviction (lowest first).
    tick: u64,
    next_id: u64,
    charges: HashMap<u64, Held>,
}

struct Held {
    entries: usize,
    used: u64,
    slot: Weak<dyn Evict>,
}

impl Shared {
    /// The book, also after a panic elsewhere: its numbers are updated in single steps, so a
    /// poisoned one is still consistent.
    fn book(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn report(&self, held: usize) {
        self.metrics
            .listing_cache_entries
            .set(i64::try_from(held).unwrap_or(i64::MAX));
    }
}

/// A cached listing's share of the budget, returned when it is dropped (the listing replaced,
/// expired, evicted, or its cache entry pruned).
pub struct Charge {
    shared: Arc<Shared>,
    id: u64,
}

impl Charge {
    /// Its id, which [`Evict::evict`] is called with.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Marks the listing as used now, so the budget evicts others before it.
    pub fn touch(&self) {
        let mut book = self.shared.book();
        book.tick += 1;
        let tick = book.tick;
        if let Some(h) = book.charges.get_mut(&self.id) {
            h.used = tick;
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        let held = {
            let mut book = self.shared.book();
            // Gone already when evicted: the eviction returned it.
            let Some(h) = book.charges.remove(&self.id) else {
                return;
            };
            book.held = book.held.saturating_sub(h.entries);
            book.held
        };
        self.shared.report(held);
    }
}

impl ListingMemory {
    /// The default budget: 500 000 entries, twenty-five listings at their own cap of 20 000
    /// (thousands of everyday ones). Jobs with three labels and short names decode to about
    /// 115 bytes per entry (measured: RSS growth over 200 000 entries), so about 60 MB, which
    /// fits the chart's 128 MiB memory limit beside the rest of the operator. Strings near
    /// their caps take more, bounded per listing by its byte cap.
    pub const DEFAULT_ENTRIES: usize = 500_000;

    /// A budget of `max_entries` across every listing charged to it, reported in `metrics`.
    pub fn new(max_entries: usize, metrics: Arc<Metrics>) -> ListingMemory {
        ListingMemory {
            shared: Arc::new(Shared {
                max_entries,
                metrics,
                book: Mutex::default(),
            }),
        }
    }

    /// The budget, in entries.
    pub fn max_entries(&self) -> usize {
        self.shared.max_entries
    }

    /// Entries held by cached listings now.
    pub fn held(&self) -> usize {
        self.shared.book().held
    }

    /// Charges a listing of `entries` kept in `slot`, first evicting the least recently used
    /// other listings while the total would pass the budget. A listing larger than what is left
    /// once every other is gone is charged all the same (and counted as over budget).
    pub fn charge(&self, entries: usize, slot: Weak<dyn Evict>) -> Charge {
        let shared = &self.shared;
        let (id, held, evicted, over) = {
            let mut book = shared.book();
            let mut evicted = Vec::new();
            while book.held.saturating_add(entries) > shared.max_entries {
                let Some((&lru, _)) = book.charges.iter().min_by_key(|(_, h)| h.used) else {
                    break;
                };
                if let Some(h) = book.charges.remove(&lru) {
                    book.held = book.held.saturating_sub(h.entries);
                    evicted.push((lru, h.slot));
                }
            }
            let over = book.held.saturating_add(entries) > shared.max_entries;
            book.tick += 1;
            book.next_id += 1;
            let (id, used) = (book.next_id, book.tick);
            book.charges.insert(id, Held { entries, used, slot });
            book.held = book.held.saturating_add(entries);
            (id, book.held, evicted, over)
        };
        shared.report(held);
        if !evicted.is_empty() {
            let n = u64::try_from(evicted.len()).unwrap_or(u64::MAX);
            shared.metrics.listing_cache_evictions.inc_by(n);
        }
        if over {
            shared.metrics.listing_cache_over_budget.inc();
        }
        // Outside the book's lock: dropping a value drops nothing charged (its charge is gone
        // from the book already), yet its slot takes its own lock.
        for (lru, slot) in evicted {
            if let Some(slot) = slot.upgrade() {
                slot.evict(lru);
            }
        }
        Charge {
            shared: shared.clone(),
            id,
        }
    }
}

/// The entries `items` keep ([`Entries`] summed), what a cached listing of them is charged.
pub fn entries_of<T: Entries>(items: &[T]) -> usize {
    items.iter().map(Entries::entries).sum()
}

#[cfg(test)]
#[path = "listing_memory_tests.rs"]
mod tests;
