//! Clients and listings shared between groups, keyed by what tenants write.
//!
//! Groups that point at the same forge URL with the same token, CA bundle and proxy share one
//! client (and with it one rate-limit block and one version check); groups that differ in any
//! of them must not share a client's roots or route. The maps are pruned to what live groups
//! use, so they stay as small as the set of groups.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use forgerunner_core::forge::SecretValue;
use forgerunner_core::metrics::Metrics;
use sha2::{Digest, Sha256};

use crate::rest::{Api, ClientOptions, RestClient, SetupError};
use crate::single_flight::Cell;

/// What a group reaches its forge with: the instance URL, the API token, the extra CA bundle
/// and the proxy. Two groups with equal settings share a client. Not `Debug`: the proxy URL
/// may carry credentials.
#[derive(Clone, Copy)]
pub struct Connection<'a> {
    /// Which forge, for the client's messages and metrics.
    pub api: Api,
    /// The instance URL as the spec writes it.
    pub url: &'a str,
    /// The API token.
    pub token: &'a SecretValue,
    /// Extra PEM CA certificates to trust.
    pub ca_bundle: Option<&'a str>,
    /// Proxy for every request; may carry credentials, never logged.
    pub proxy: Option<&'a str>,
}

impl Connection<'_> {
    /// The key its client is pooled under.
    pub fn key(&self) -> InstanceKey {
        InstanceKey::new(self.url, self.token, self.ca_bundle, self.proxy)
    }
}

/// One instance + token (+ CA bundle, proxy), identified without holding a secret.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct InstanceKey {
    url: String,
    /// SHA-256 of the token, CA bundle and proxy: equal settings share, the key holds no secret.
    credentials: [u8; 32],
}

impl InstanceKey {
    /// The key of `url` (trailing slashes and blanks dropped, so spellings of one URL share)
    /// reached with `token`, trusting `ca_bundle` and sending through `proxy`.
    pub fn new(url: &str, token: &SecretValue, ca_bundle: Option<&str>, proxy: Option<&str>) -> InstanceKey {
        let mut h = Sha256::new();
        for part in [Some(token.expose()), ca_bundle, proxy] {
            h.update(part.unwrap_or_default().as_bytes());
            // A separator, so that moving bytes between parts changes the key.
            h.update([0]);
        }
        InstanceKey {
            url: url.trim().trim_end_matches('/').to_string(),
            credentials: h.finalize().into(),
        }
    }

    /// The instance URL the client is made for.
    pub fn url(&self) -> &str {
        &self.url
    }
}

/// A client and what was checked about its server, cached per instance so that groups on one
/// instance check its version (and the token's user) once per TTL.
pub struct Instance<C, V> {
    /// The forge's REST client.
    pub client: C,
    /// The server version as checked (and whatever the forge derives from it).
    pub version: Cell<V>,
    /// The token owner's login, for `scope: user`.
    pub login: Cell<String>,
}

impl<C, V> Instance<C, V> {
    /// An instance nothing has been checked about yet.
    pub fn new(client: C) -> Instance<C, V> {
        Instance {
            client,
            version: Cell::default(),
            login: Cell::default(),
        }
    }
}

/// Why [`Pool::get_or_try_insert`] has no value.
#[derive(Debug, thiserror::Error)]
pub enum PoolError<E> {
    /// A thread panicked holding the pool; making a second client for a key could split one
    /// instance's rate-limit block, so this is an error rather than a fresh value.
    #[error("internal: instance map poisoned")]
    Poisoned,
    /// Making the value failed.
    #[error(transparent)]
    Make(E),
}

/// Values shared per key behind a lock, each handed out as an `Arc` so callers never hold the
/// lock across a request.
pub struct Pool<K, V> {
    map: Mutex<HashMap<K, Arc<V>>>,
}

impl<K, V> Default for Pool<K, V> {
    fn default() -> Self {
        Pool {
            map: Mutex::default(),
        }
    }
}

impl<K: Clone + Eq + Hash, V> Pool<K, V> {
    /// The value at `key`, made by `make` (and kept) when there is none.
    pub fn get_or_try_insert<E>(
        &self,
        key: &K,
        make: impl FnOnce() -> Result<V, E>,
    ) -> Result<Arc<V>, PoolError<E>> {
        let mut map = self.map.lock().map_err(|_| PoolError::Poisoned)?;
        if let Some(v) = map.get(key) {
            return Ok(v.clone());
        }
        let v = Arc::new(make().map_err(PoolError::Make)?);
        map.insert(key.clone(), v.clone());
        Ok(v)
    }

    /// The value at `key`, a default one made when there is none. A poisoned pool hands out a
    /// fresh unshared value: for caches that loses sharing, never correctness.
    pub fn shared(&self, key: &K) -> Arc<V>
    where
        V: Default,
    {
        match self.map.lock() {
            Ok(mut m) => m.entry(key.clone()).or_default().clone(),
            Err(_) => Arc::default(),
        }
    }

    /// The value at `key`, made by `make` when there is none (a cell charged to a budget,
    /// which `Default` cannot make). A poisoned pool hands out a fresh unshared value.
    pub fn shared_or(&self, key: &K, make: impl FnOnce() -> V) -> Arc<V> {
        match self.map.lock() {
            Ok(mut m) => m.entry(key.clone()).or_insert_with(|| Arc::new(make())).clone(),
            Err(_) => Arc::new(make()),
        }
    }

    /// Keeps only the keys `keep` accepts (those a live group uses).
    pub fn retain(&self, keep: impl Fn(&K) -> bool) {
        retain(&self.map, keep);
    }

    /// Forgets every value (leadership lost: a new leader starts from nothing).
    pub fn clear(&self) {
        clear(&self.map);
    }

    /// How many keys are held, for the cache gauge.
    pub fn len(&self) -> usize {
        len(&self.map)
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An instance and the key it is pooled under (listings are keyed by it too).
pub type Connected<C, V> = (InstanceKey, Arc<Instance<C, V>>);

impl<C: From<RestClient>, V> Pool<InstanceKey, Instance<C, V>> {
    /// The instance `conn` reaches and its key, the client made on first use.
    pub fn connect(
        &self,
        conn: &Connection<'_>,
        metrics: &Arc<Metrics>,
        opts: &ClientOptions,
    ) -> Result<Connected<C, V>, PoolError<SetupError>> {
        let key = conn.key();
        let instance = self.get_or_try_insert(&key, || {
            // The URL as keyed, so every spelling of it makes the same client.
            let client = RestClient::new(
                conn.api,
                key.url(),
                conn.token.clone(),
                metrics.clone(),
                opts.clone(),
                conn.ca_bundle,
                conn.proxy,
            )?;
            Ok(Instance::new(C::from(client)))
        })?;
        Ok((key, instance))
    }
}

/// Keeps only the keys `keep` accepts; a poisoned map is left as it is rather than guessed at.
pub fn retain<K, V>(map: &Mutex<HashMap<K, V>>, keep: impl Fn(&K) -> bool) {
    if let Ok(mut m) = map.lock() {
        m.retain(|k, _| keep(k));
    }
}

/// Empties `map` (a poisoned one is left as it is).
pub fn clear<K, V>(map: &Mutex<HashMap<K, V>>) {
    if let Ok(mut m) = map.lock() {
        m.clear();
    }
}

/// The size of `map` for the cache gauge; 0 when poisoned, as a gauge has no "unknown".
pub fn len<K, V>(map: &Mutex<HashMap<K, V>>) -> usize {
    map.lock().map_or(0, |m| m.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_by_settings_and_hold_no_secret() {
        let t = SecretValue::new("hunter2");
        let a = InstanceKey::new(" https://git.example.com/ ", &t, None, None);
        let b = InstanceKey::new("https://git.example.com", &t, Some(""), None);
        assert_eq!(a, b, "trailing slash and blanks do not split an instance");
        assert_eq!(a.url(), "https://git.example.com");
        let other_token = InstanceKey::new("https://git.example.com", &SecretValue::new("x"), None, None);
        let with_ca = InstanceKey::new("https://git.example.com", &t, Some("pem"), None);
        let with_proxy = InstanceKey::new("https://git.example.com", &t, None, Some("http://p:1"));
        for k in [&other_token, &with_ca, &with_proxy] {
            assert_ne!(&a, k);
        }
        assert_ne!(
            InstanceKey::new("u", &SecretValue::new("ab"), Some("c"), None),
            InstanceKey::new("u", &SecretValue::new("a"), Some("bc"), None),
            "parts are separated"
        );
        assert!(!format!("{a:?}").contains("hunter2"));
    }

    #[test]
    fn pools_share_make_once_and_prune() {
        let pool: Pool<&str, u32> = Pool::default();
        let made = pool.get_or_try_insert(&"a", || Ok::<_, ()>(1)).expect("made");
        let again = pool
            .get_or_try_insert(&"a", || Err::<u32, _>("not called"))
            .expect("kept");
        assert!(Arc::ptr_eq(&made, &again));
        let failed = pool.get_or_try_insert(&"b", || Err::<u32, _>("bad"));
        assert!(matches!(failed, Err(PoolError::Make("bad"))));
        assert_eq!(pool.len(), 1, "a failed make keeps nothing");
        assert!(Arc::ptr_eq(&pool.shared(&"c"), &pool.shared(&"c")));
        let made = pool.shared_or(&"d", || 4);
        assert!(Arc::ptr_eq(&made, &pool.shared_or(&"d", || 5)), "made once");
        assert_eq!(*made, 4);
        pool.retain(|k| *k != "d");
        pool.retain(|k| *k == "c");
        assert_eq!(pool.len(), 1);
        pool.clear();
        assert!(pool.is_empty());
    }

    struct Client;

    impl From<RestClient> for Client {
        fn from(_: RestClient) -> Client {
            Client
        }
    }

    #[test]
    fn connections_with_equal_settings_share_one_instance() {
        let pool: Pool<InstanceKey, Instance<Client, ()>> = Pool::default();
        let token = SecretValue::new("t");
        let api = Api {
            forge: "gitea",
            name: "Gitea",
            spec: "spec.gitea",
            lift_block_after_wait: false,
        };
        let conn = |url| Connection {
            api,
            url,
            token: &token,
            ca_bundle: None,
            proxy: None,
        };
        let (metrics, opts) = (Arc::default(), ClientOptions::default());
        let (k1, a) = pool
            .connect(&conn("https://git.example.com/"), &metrics, &opts)
            .expect("a");
        let (k2, b) = pool
            .connect(&conn("https://git.example.com"), &metrics, &opts)
            .expect("b");
        assert_eq!(k1, k2);
        assert!(Arc::ptr_eq(&a, &b));
        let e = pool
            .connect(&conn("ftp://x"), &metrics, &opts)
            .map(|_| ())
            .expect_err("not http");
        assert_eq!(e.to_string(), "spec.gitea.url \"ftp://x\" must be an http(s) URL");
        assert_eq!(pool.len(), 1);
    }
}
