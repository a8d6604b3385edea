//! A single-flight cell with a maximum age: the first caller fetches, concurrent callers wait
//! for that fetch, later callers reuse the value until it is too old. This is how groups that
//! share an instance, scope and token share one listing per poll interval instead of each
//! asking the forge.
//!
//! A failed fetch is handed to the callers that waited for it, and not cached beyond them:
//! otherwise each waiter would try again in turn, and behind a forge that times out the last
//! of twenty groups would wait twenty timeouts, past its pass's deadline.

//! A cell made with [`Cell::charged`] holds a [`Charge`] on a [`ListingMemory`] for its value:
//! replacing or expiring the value returns it, and the budget may drop the value to make room
//! for another listing (the next caller then fetches afresh).

use std::any::Any;
use std::future::Future;
use std::sync::{Arc, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use crate::listing_memory::{Charge, Evict, ListingMemory};

/// A value from [`Cell::get`], with when its fetch started: anything that happened before that
/// instant may be in the value, anything later is not, which is what accounting on top of a
/// listing (webhook deliveries, runners that took a job since) needs to know.
pub struct Fetched<T> {
    /// The value.
    pub value: Arc<T>,
    /// When its fetch started (so the age never understates how stale the data may be).
    pub at: Instant,
    /// Whether this call fetched it; only that caller schedules the next poll.
    pub fetched_now: bool,
}

/// A cached value with its fetch time.
pub struct Cell<T> {
    /// Held across a fetch, so concurrent callers wait for it; holds the last failure for
    /// those who waited for it (the caller's error type, erased so the cell stays generic over
    /// the value alone).
    fetching: Mutex<Option<(Instant, Box<dyn Any + Send + Sync>)>>,
    /// The value, behind a lock of its own that is never held across an await, so that the
    /// budget can drop it while a fetch elsewhere runs.
    pub(crate) stored: Arc<Stored<T>>,
    budget: Option<Budget<T>>,
}

/// The last value, with its fetch start and its charge on the budget.
struct Kept<T> {
    at: Instant,
    value: Arc<T>,
    charge: Option<Charge>,
}

pub(crate) struct Stored<T>(std::sync::Mutex<Option<Kept<T>>>);

impl<T> Stored<T> {
    /// The slot, also after a panic elsewhere: a cache that loses a value refetches it.
    fn slot(&self) -> MutexGuard<'_, Option<Kept<T>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T: Send + Sync> Evict for Stored<T> {
    fn evict(&self, id: u64) {
        let mut slot = self.slot();
        if slot
            .as_ref()
            .and_then(|k| k.charge.as_ref())
            .is_some_and(|c| c.id() == id)
        {
            let gone = slot.take();
            drop(slot);
            drop(gone);
        }
    }
}

/// What a charged cell's values cost, and where.
struct Budget<T> {
    memory: ListingMemory,
    entries: fn(&T) -> usize,
    slot: Weak<dyn Evict>,
}

impl<T> Default for Cell<T> {
    fn default() -> Self {
        Cell {
            fetching: Mutex::new(None),
            stored: Arc::new(Stored(std::sync::Mutex::new(None))),
            budget: None,
        }
    }
}

impl<T: Send + Sync + 'static> Cell<T> {
    /// A cell whose value holds `entries(value)` of `memory` while cached (a listing).
    pub fn charged(memory: ListingMemory, entries: fn(&T) -> usize) -> Cell<T> {
        let cell = Cell::default();
        let slot: Arc<dyn Evict> = cell.stored.clone();
        Cell {
            budget: Some(Budget {
                memory,
                entries,
                slot: Arc::downgrade(&slot),
            }),
            ..cell
        }
    }
}

impl<T> Cell<T> {
    /// The value if younger than `max_age`, else the result of `fetch` (stored on success).
    /// A caller that waited for a fetch which failed gets that fetch's error; errors are not
    /// cached beyond that: the next caller tries again, so one failure does not hide the forge
    /// for a whole interval.
    pub async fn get<E, F>(&self, max_age: Duration, fetch: F) -> Result<Fetched<T>, E>
    where
        F: Future<Output = Result<T, E>>,
        E: Clone + Send + Sync + 'static,
    {
        let arrived = Instant::now();
        let mut failed = self.fetching.lock().await;
        if let Some(fresh) = self.fresh(max_age) {
            return Ok(fresh);
        }
        if let Some((failed_at, error)) = failed.as_ref()
            && *failed_at >= arrived
            && let Some(error) = error.downcast_ref::<E>()
        {
            return Err(error.clone());
        }
        let started = Instant::now();
        match fetch.await {
            Ok(value) => {
                let value = Arc::new(value);
                // The old value's charge goes back before room is made for the new one.
                let old = self.stored.slot().take();
                drop(old);
                let charge = self
                    .budget
                    .as_ref()
                    .map(|b| b.memory.charge((b.entries)(&value), b.slot.clone()));
                *self.stored.slot() = Some(Kept {
                    at: started,
                    value: value.clone(),
                    charge,
                });
                *failed = None;
                Ok(Fetched {
                    value,
                    at: started,
                    fetched_now: true,
                })
            }
            Err(e) => {
                *failed = Some((Instant::now(), Box::new(e.clone())));
                Err(e)
            }
        }
    }

    /// The stored value if younger than `max_age`, marked as used.
    fn fresh(&self, max_age: Duration) -> Option<Fetched<T>> {
        let slot = self.stored.slot();
        let kept = slot.as_ref().filter(|k| k.at.elapsed() < max_age)?;
        if let Some(c) = &kept.charge {
            c.touch();
        }
        Some(Fetched {
            value: kept.value.clone(),
            at: kept.at,
            fetched_now: false,
        })
    }

    /// Drops the value, so the next caller fetches afresh: after a runner is created or
    /// deleted, a listing from before must not be reused.
    pub async fn expire(&self) {
        let _fetching = self.fetching.lock().await;
        let old = self.stored.slot().take();
        drop(old);
    }

    /// Whether a value is cached (of any age).
    pub fn is_cached(&self) -> bool {
        self.stored.slot().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn concurrent_callers_share_one_fetch_and_errors_are_not_cached() {
        let cell = Arc::new(Cell::<u32>::default());
        let calls = Arc::new(AtomicU32::new(0));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (cell, calls) = (cell.clone(), calls.clone());
            tasks.push(tokio::spawn(async move {
                cell.get(Duration::from_secs(60), async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    Ok::<_, ()>(7)
                })
                .await
                .map(|f| (*f.value, f.fetched_now))
            }));
        }
        let mut fetched = 0;
        for t in tasks {
            let (value, now) = t.await.expect("join").expect("fetch");
            assert_eq!(value, 7);
            fetched += usize::from(now);
        }
        assert_eq!(fetched, 1, "only the fetching caller says it fetched");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        cell.expire().await;
        let e: Result<_, &str> = cell.get(Duration::from_secs(60), async { Err("boom") }).await;
        assert!(e.is_err());
        let v = cell
            .get(Duration::from_secs(60), async { Ok::<_, ()>(2) })
            .await
            .map(|f| *f.value);
        assert_eq!(v, Ok(2));
    }

    /// Twenty groups behind one listing of a forge that fails slowly: one fetch, and every
    /// waiter gets its error at once instead of trying again in turn.
    #[tokio::test(start_paused = true)]
    async fn a_failed_fetch_is_shared_with_its_waiters_only() {
        let cell = Arc::new(Cell::<u32>::default());
        let calls = Arc::new(AtomicU32::new(0));
        let mut tasks = Vec::new();
        for _ in 0..20 {
            let (cell, calls) = (cell.clone(), calls.clone());
            tasks.push(tokio::spawn(async move {
                cell.get(Duration::from_secs(60), async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    Err::<u32, _>("timed out")
                })
                .await
                .err()
            }));
        }
        let started = tokio::time::Instant::now();
        for t in tasks {
            assert_eq!(t.await.expect("join"), Some("timed out"));
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1, "one fetch for all twenty");
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(30),
            "one timeout, not twenty"
        );
        let later = cell
            .get(Duration::from_secs(60), async { Ok::<_, &str>(5) })
            .await
            .map(|f| *f.value);
        assert_eq!(later, Ok(5), "a caller after the failure fetches again");
    }

    #[tokio::test]
    async fn errors_are_not_cached_and_expiry_refetches() {
        let cell = Cell::<u32>::default();
        let r: Result<_, &str> = cell.get(Duration::from_secs(60), async { Err("boom") }).await;
        assert!(r.is_err());
        let v = cell
            .get(Duration::from_secs(60), async { Ok::<_, ()>(1) })
            .await
            .unwrap()
            .value;
        assert_eq!(*v, 1);
        let v = cell
            .get(Duration::from_secs(60), async { Ok::<_, ()>(2) })
            .await
            .unwrap()
            .value;
        assert_eq!(*v, 1, "fresh value reused");
        cell.expire().await;
        let v = cell
            .get(Duration::from_secs(60), async { Ok::<_, ()>(3) })
            .await
            .unwrap()
            .value;
        assert_eq!(*v, 3);
        let v = cell
            .get(Duration::ZERO, async { Ok::<_, ()>(4) })
            .await
            .unwrap()
            .value;
        assert_eq!(*v, 4, "max_age zero always refetches");
    }

    #[tokio::test]
    async fn fetch_start_is_reported_and_kept_while_fresh() {
        let cell = Cell::<u32>::default();
        let before = Instant::now();
        let got = cell
            .get(Duration::from_secs(60), async { Ok::<_, ()>(1) })
            .await
            .unwrap();
        assert_eq!((*got.value, got.fetched_now), (1, true));
        let at = got.at;
        assert!(at >= before && at <= Instant::now());
        let got = cell
            .get(Duration::from_secs(60), async { Ok::<_, ()>(2) })
            .await
            .unwrap();
        assert_eq!(
            (*got.value, got.at, got.fetched_now),
            (1, at, false),
            "a reused value keeps its fetch start"
        );
        let got = cell.get(Duration::ZERO, async { Ok::<_, ()>(3) }).await.unwrap();
        assert_eq!((*got.value, got.fetched_now), (3, true));
        let later = got.at;
        assert!(later >= at);
    }
}
