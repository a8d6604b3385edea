//! A single-flight cell with a maximum age: the first caller fetches, concurrent callers wait
//! for that fetch, and later callers reuse the value until it is too old. This is how several
//! groups sharing an instance, scope and token share one jobs listing per poll interval.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

struct Timed<T> {
    at: Instant,
    value: Arc<T>,
}

/// A cached value with its fetch time.
pub struct Cell<T> {
    inner: Mutex<Option<Timed<T>>>,
}

impl<T> Default for Cell<T> {
    fn default() -> Self {
        Cell {
            inner: Mutex::new(None),
        }
    }
}

impl<T> Cell<T> {
    /// The value if younger than `max_age`, else the result of `fetch` (stored on success).
    /// Errors are not cached: the next caller tries again.
    pub async fn get_or_fetch<E, F>(&self, max_age: Duration, fetch: F) -> Result<Arc<T>, E>
    where
        F: Future<Output = Result<T, E>>,
    {
        Ok(self.get_or_fetch_timed(max_age, fetch).await?.0)
    }

    /// Like [`Cell::get_or_fetch`], also telling how old the value is (measured from when its
    /// fetch started, so the age never understates how stale the data may be).
    pub async fn get_or_fetch_timed<E, F>(&self, max_age: Duration, fetch: F) -> Result<(Arc<T>, Duration), E>
    where
        F: Future<Output = Result<T, E>>,
    {
        let mut guard = self.inner.lock().await;
        if let Some(t) = guard.as_ref()
            && t.at.elapsed() < max_age
        {
            return Ok((t.value.clone(), t.at.elapsed()));
        }
        let started = Instant::now();
        let value = Arc::new(fetch.await?);
        *guard = Some(Timed {
            at: started,
            value: value.clone(),
        });
        Ok((value, started.elapsed()))
    }

    /// Drops the value if it is at least `min_age` old, so the next caller fetches afresh
    /// (webhooks use a small `min_age` so a burst of deliveries causes few listings).
    pub async fn expire_if_older(&self, min_age: Duration) {
        let mut guard = self.inner.lock().await;
        if guard.as_ref().is_some_and(|t| t.at.elapsed() >= min_age) {
            *guard = None;
        }
    }

    /// Drops the value if its fetch started before `instant`, so it may predate something that
    /// happened then (waits for a fetch in flight); returns whether a value was dropped.
    pub async fn expire_if_fetched_before(&self, instant: Instant) -> bool {
        let mut guard = self.inner.lock().await;
        let stale = guard.as_ref().is_some_and(|t| t.at < instant);
        if stale {
            *guard = None;
        }
        stale
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn concurrent_callers_share_one_fetch() {
        let cell = Arc::new(Cell::<u32>::default());
        let calls = Arc::new(AtomicU32::new(0));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (cell, calls) = (cell.clone(), calls.clone());
            tasks.push(tokio::spawn(async move {
                cell.get_or_fetch(Duration::from_secs(60), async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    Ok::<_, ()>(7)
                })
                .await
            }));
        }
        for t in tasks {
            assert_eq!(*t.await.unwrap().unwrap(), 7);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn errors_are_not_cached_and_expiry_refetches() {
        let cell = Cell::<u32>::default();
        let r: Result<_, &str> = cell
            .get_or_fetch(Duration::from_secs(60), async { Err("boom") })
            .await;
        assert!(r.is_err());
        let v = cell
            .get_or_fetch(Duration::from_secs(60), async { Ok::<_, ()>(1) })
            .await
            .unwrap();
        assert_eq!(*v, 1);
        let v = cell
            .get_or_fetch(Duration::from_secs(60), async { Ok::<_, ()>(2) })
            .await
            .unwrap();
        assert_eq!(*v, 1, "fresh value reused");
        cell.expire_if_older(Duration::ZERO).await;
        let v = cell
            .get_or_fetch(Duration::from_secs(60), async { Ok::<_, ()>(3) })
            .await
            .unwrap();
        assert_eq!(*v, 3);
        let v = cell
            .get_or_fetch(Duration::ZERO, async { Ok::<_, ()>(4) })
            .await
            .unwrap();
        assert_eq!(*v, 4, "max_age zero always refetches");
    }

    #[tokio::test]
    async fn expiry_by_fetch_start_keeps_newer_values() {
        let cell = Cell::<u32>::default();
        let before = Instant::now();
        assert!(!cell.expire_if_fetched_before(before).await, "nothing to expire");
        let fetch = async { Ok::<_, ()>(1) };
        cell.get_or_fetch(Duration::from_secs(60), fetch).await.unwrap();
        assert!(
            !cell.expire_if_fetched_before(before).await,
            "fetched after the instant"
        );
        assert!(cell.expire_if_fetched_before(Instant::now()).await);
        let v = cell
            .get_or_fetch(Duration::from_secs(60), async { Ok::<_, ()>(2) })
            .await
            .unwrap();
        assert_eq!(*v, 2, "expired value refetched");
    }
}
