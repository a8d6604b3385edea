//! The Actions service admin connection (URL + admin JWT), refreshed before it expires.
//!
//! All callers go through one async mutex, so at most one refresh is in flight per client and
//! concurrent callers wait for its result instead of minting tokens of their own.

use std::future::Future;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use forgerunner_core::forge::SecretValue;
use tokio::sync::Mutex;
use url::Url;

use crate::error::ApiError;

/// Refresh this many seconds before the admin token's `exp`, as ARC does.
pub const REFRESH_MARGIN_SECONDS: i64 = 60;

/// Where the Actions service lives for this config URL, and the token to call it with.
#[derive(Clone, Debug)]
pub struct AdminConnection {
    /// Actions service base URL, ending in `/`.
    pub url: Url,
    /// Admin token (a JWT).
    pub token: SecretValue,
    /// The token's `exp` (unix seconds); `None` if unreadable (then it is used until rejected).
    pub exp: Option<i64>,
}

impl AdminConnection {
    /// Whether the token must be refreshed at `now` (unix seconds).
    pub fn needs_refresh(&self, now: i64) -> bool {
        self.exp.is_some_and(|exp| now + REFRESH_MARGIN_SECONDS > exp)
    }
}

/// The cached admin connection of one client.
#[derive(Debug, Default)]
pub struct TokenCache {
    slot: Mutex<Option<AdminConnection>>,
}

impl TokenCache {
    /// The cached connection, or a fresh one from `refresh` when missing or about to expire.
    pub async fn get_or_refresh<F, Fut>(&self, refresh: F) -> Result<AdminConnection, ApiError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<AdminConnection, ApiError>>,
    {
        let mut slot = self.slot.lock().await;
        if let Some(conn) = slot.as_ref()
            && !conn.needs_refresh(jiff::Timestamp::now().as_second())
        {
            return Ok(conn.clone());
        }
        let fresh = refresh().await?;
        *slot = Some(fresh.clone());
        Ok(fresh)
    }

    /// Drops the cached connection if it still holds `token` (the service rejected it).
    pub async fn invalidate(&self, token: &SecretValue) {
        let mut slot = self.slot.lock().await;
        if slot.as_ref().is_some_and(|c| &c.token == token) {
            *slot = None;
        }
    }
}

/// The `exp` claim of a JWT, read without verifying the signature (as ARC does).
pub fn jwt_exp(token: &str) -> Option<i64> {
    let payload = token.split('.').nth(1)?;
    let bytes = URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    value.get("exp")?.as_i64()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn jwt_with(payload: &str) -> String {
        format!("e30.{}.", URL_SAFE_NO_PAD.encode(payload))
    }

    fn conn(exp: Option<i64>, token: &str) -> AdminConnection {
        AdminConnection {
            url: Url::parse("http://x/tenant/").unwrap(),
            token: SecretValue::new(token),
            exp,
        }
    }

    #[test]
    fn reads_exp_without_verifying() {
        assert_eq!(jwt_exp(&jwt_with(r#"{"exp":1700000000}"#)), Some(1_700_000_000));
        assert_eq!(jwt_exp(&jwt_with(r#"{"nope":1}"#)), None);
        assert_eq!(jwt_exp("garbage"), None);
        assert_eq!(jwt_exp("a.!!!.b"), None);
    }

    #[test]
    fn refreshes_a_minute_early() {
        let c = conn(Some(1000), "t");
        assert!(!c.needs_refresh(900));
        assert!(c.needs_refresh(941));
        assert!(!conn(None, "t").needs_refresh(i64::MAX - 100));
    }

    #[tokio::test]
    async fn serializes_refreshes_and_caches() {
        let cache = Arc::new(TokenCache::default());
        let calls = Arc::new(AtomicU32::new(0));
        let far = jiff::Timestamp::now().as_second() + 3600;
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let cache = cache.clone();
            let calls = calls.clone();
            tasks.push(tokio::spawn(async move {
                cache
                    .get_or_refresh(|| async move {
                        calls.fetch_add(1, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        Ok(conn(Some(far), "a"))
                    })
                    .await
                    .unwrap()
            }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap().token.expose(), "a");
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        cache.invalidate(&SecretValue::new("other")).await;
        cache
            .get_or_refresh(|| async { Ok(conn(Some(far), "b")) })
            .await
            .unwrap();
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "a different token does not invalidate"
        );
        cache.invalidate(&SecretValue::new("a")).await;
        let c = cache
            .get_or_refresh(|| async { Ok(conn(Some(far), "b")) })
            .await
            .unwrap();
        assert_eq!(c.token.expose(), "b");
    }
}
