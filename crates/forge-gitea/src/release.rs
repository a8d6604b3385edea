//! Forgetting what a group left in memory: its own entries, and the clients, listings and
//! tokens no remaining group uses. Run when a group is deleted and when a group moves to other
//! credentials, CA bundle or proxy, so maps keyed by what tenants write stay as small as the
//! set of live groups.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::Mutex;

use forgerunner_core::forge::GroupKey;

use crate::forge::{GiteaForge, InstanceKey, ListingKey};

fn retain_keys<K: Eq + Hash, V>(map: &Mutex<std::collections::HashMap<K, V>>, keep: impl Fn(&K) -> bool) {
    if let Ok(mut m) = map.lock() {
        m.retain(|k, _| keep(k));
    }
}

fn clear<K, V>(map: &Mutex<std::collections::HashMap<K, V>>) {
    if let Ok(mut m) = map.lock() {
        m.clear();
    }
}

fn len<K, V>(map: &Mutex<std::collections::HashMap<K, V>>) -> usize {
    map.lock().map_or(0, |m| m.len())
}

impl GiteaForge {
    /// Forgets `key`'s group state and whatever no other group uses.
    pub(crate) fn release_group(&self, key: &GroupKey) {
        if let Ok(mut g) = self.groups.lock() {
            g.remove(key);
        }
        if let Ok(mut f) = self.taken.lock() {
            f.remove(key);
        }
        self.prune();
    }

    /// Drops clients, listings, tokens and webhook accounting of scopes no group uses.
    pub(crate) fn prune(&self) {
        let live: HashSet<ListingKey> = match self.groups.lock() {
            Ok(g) => g.values().map(|i| i.listing.clone()).collect(),
            // A poisoned map: keep everything rather than guess.
            Err(_) => return,
        };
        let instances: HashSet<&InstanceKey> = live.iter().map(ListingKey::instance).collect();
        retain_keys(&self.jobs, |k| live.contains(k));
        retain_keys(&self.runners, |k| live.contains(k));
        retain_keys(&self.offline, |k| live.contains(k));
        retain_keys(&self.tokens, |k| live.contains(k));
        retain_keys(&self.instances, |k| instances.contains(k));
        if let Ok(mut a) = self.announced.lock() {
            a.retain(|k, _| live.contains(k));
        }
        self.report_cache();
    }

    /// Forgets every group, client, listing and token (leadership lost).
    pub(crate) fn forget_all(&self) {
        clear(&self.groups);
        clear(&self.jobs);
        clear(&self.runners);
        clear(&self.offline);
        clear(&self.tokens);
        clear(&self.taken);
        self.forget_announced();
        clear(&self.instances);
        self.report_cache();
    }

    /// Sets the cache gauge from the maps' sizes.
    pub(crate) fn report_cache(&self) {
        let listings = len(&self.jobs) + len(&self.runners) + len(&self.offline) + len(&self.announced);
        let groups = len(&self.groups) + len(&self.taken);
        self.metrics.set_cache_entries(
            "gitea",
            &[
                ("clients", len(&self.instances)),
                ("listings", listings),
                ("tokens", len(&self.tokens)),
                ("groups", groups),
            ],
        );
    }
}
