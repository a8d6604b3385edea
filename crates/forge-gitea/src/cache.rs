//! A single-flight cell with a maximum age: the first caller fetches, concurrent callers wait
//! for that fetch, and later callers reuse the value until it is too old. This is how several
//! groups sharing an instance, scope and token share one jobs listing per poll interval.
//! Webhooks do not expire the jobs listing (they are accounted on top of it, see
//! `forge_webhook`), so that listing is fetched at most once per `max_age`.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

struct Timed<T> {
    at: Instant,
    value: Arc<T>,
}

/// A value from [`Cell::get_or_fetch_at`].
pub struct Got<T> {
    /// The value.
    pub value: Arc<T>,
    /// When its fetch started.
    pub fetched_at: Instant,
    /// Whether this call fetched it (else it was cached, or fetched by a concurrent caller).
    pub fetched_now: bool,
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
        let got = self.get_or_fetch_at(max_age, fetch).await?;
        Ok((got.value, got.fetched_at.elapsed()))
    }

    /// Like [`Cell::get_or_fetch`], also telling when the value's fetch started (anything that
    /// happened before that instant may be in the value, anything later is not) and whether
    /// this call fetched it.
    pub async fn get_or_fetch_at<E, F>(&self, max_age: Duration, fetch: F) -> Result<Got<T>, E>
    where
        F: Future<Output = Result<T, E>>,
    {
        let mut guard = self.inner.lock().await;
        if let Some(t) = guard.as_ref()
            && t.at.elapsed() < max_age
        {
            return Ok(Got {
                value: t.value.clone(),
                fetched_at: t.at,
                fetched_now: false,
            });
        }
        let started = Instant::now();
        let value = Arc::new(fetch.await?);
        *guard = Some(Timed {
            at: started,
            value: value.clone(),
        });
        Ok(Got {
            value,
            fetched_at: started,
            fetched_now: true,
        })
    }

    /// Drops the value if it is at least `min_age` old, so the next caller fetches afresh
    /// (after a runner is deleted, its listing must not be reused).
    pub async fn expire_if_older(&self, min_age: Duration) {
        let mut guard = self.inner.lock().await;
        if guard.as_ref().is_some_and(|t| t.at.elapsed() >= min_age) {
            *guard = None;
        }
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
    async fn fetch_start_is_reported_and_kept_while_fresh() {
        let cell = Cell::<u32>::default();
        let before = Instant::now();
        let got = cell
            .get_or_fetch_at(Duration::from_secs(60), async { Ok::<_, ()>(1) })
            .await
            .unwrap();
        assert_eq!((*got.value, got.fetched_now), (1, true));
        let at = got.fetched_at;
        assert!(at >= before && at <= Instant::now());
        let got = cell
            .get_or_fetch_at(Duration::from_secs(60), async { Ok::<_, ()>(2) })
            .await
            .unwrap();
        assert_eq!(
            (*got.value, got.fetched_at, got.fetched_now),
            (1, at, false),
            "a reused value keeps its fetch start"
        );
        let got = cell
            .get_or_fetch_at(Duration::ZERO, async { Ok::<_, ()>(3) })
            .await
            .unwrap();
        assert_eq!((*got.value, got.fetched_now), (3, true));
        let later = got.fetched_at;
        assert!(later >= at);
    }
}
