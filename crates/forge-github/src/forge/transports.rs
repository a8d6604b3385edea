//! HTTP transports shared by the groups' clients, one per (CA bundle, proxy), and which group
//! uses which: a transport no group uses any more is dropped, so groups that come and go with
//! their own CA or proxy do not pile up connection pools and root stores.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use forgerunner_core::forge::GroupKey;

use crate::client::Transport;

/// The transports and their users.
#[derive(Default)]
pub(super) struct Transports {
    by_trust: HashMap<u64, Transport>,
    users: HashMap<GroupKey, u64>,
}

/// Identifies a (CA bundle, proxy) pair without keeping either.
pub(super) fn trust_key(ca_bundle: Option<&str>, proxy: Option<&str>) -> u64 {
    let mut h = DefaultHasher::new();
    ca_bundle.hash(&mut h);
    proxy.hash(&mut h);
    h.finish()
}

impl Transports {
    /// The transport for `key`, built by `build` when none exists; `group` now uses it (and no
    /// longer the one it used before).
    pub(super) fn get_or_build<E>(
        &mut self,
        group: &GroupKey,
        key: u64,
        build: impl FnOnce() -> Result<Transport, E>,
    ) -> Result<Transport, E> {
        let http = match self.by_trust.get(&key) {
            Some(http) => http.clone(),
            None => {
                let http = build()?;
                self.by_trust.insert(key, http.clone());
                http
            }
        };
        if self.users.insert(group.clone(), key) != Some(key) {
            self.prune();
        }
        Ok(http)
    }

    /// `group` no longer uses a transport.
    pub(super) fn release(&mut self, group: &GroupKey) {
        if self.users.remove(group).is_some() {
            self.prune();
        }
    }

    /// Transports held (for the cache gauge).
    pub(super) fn len(&self) -> usize {
        self.by_trust.len()
    }

    /// Forgets everything (leadership lost).
    pub(super) fn clear(&mut self) {
        self.by_trust.clear();
        self.users.clear();
    }

    fn prune(&mut self) {
        let users = &self.users;
        self.by_trust.retain(|k, _| users.values().any(|u| u == k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> GroupKey {
        GroupKey {
            namespace: "ci".into(),
            name: name.into(),
        }
    }

    fn client() -> Result<Transport, ()> {
        Ok(Transport {
            http: reqwest::Client::new(),
            poll: crate::client::PollTransport::Proxied(reqwest::Client::new()),
            has_proxy: false,
            limits: Default::default(),
        })
    }

    #[test]
    fn a_transport_lives_while_a_group_uses_it() {
        let mut t = Transports::default();
        let (a, b) = (trust_key(Some("ca-a"), None), trust_key(None, Some("http://p:1")));
        assert_ne!(a, b);
        t.get_or_build(&key("g1"), a, client).expect("a");
        t.get_or_build(&key("g2"), a, || Err(()))
            .expect("shared, not rebuilt");
        t.get_or_build(&key("g3"), b, client).expect("b");
        assert_eq!(t.len(), 2);
        // g3 changes its proxy: its old transport goes with nobody else on it.
        t.get_or_build(&key("g3"), a, client).expect("a again");
        assert_eq!(t.len(), 1);
        t.release(&key("g1"));
        assert_eq!(t.len(), 1, "g2 and g3 still use it");
        t.release(&key("g2"));
        t.release(&key("g3"));
        t.release(&key("g3"));
        assert_eq!(t.len(), 0);
    }
}
