//! Forgetting what a group left in memory: its book, and the clients, listings and tokens no
//! remaining group uses. Run when a group is deleted and when a group moves to other
//! credentials, CA bundle, proxy, scope or labels, so maps keyed by what tenants write stay as
//! small as the set of live groups.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use forgerunner_core::forge::GroupKey;

use super::{ForgejoForge, InstanceKey, JobsKey, ScopeKey};

fn len<K, V>(map: &Mutex<HashMap<K, V>>) -> usize {
    map.lock().map_or(0, |m| m.len())
}

impl ForgejoForge {
    /// Records that `group` lists with `key`; prunes what its previous key alone used.
    pub(super) fn track(&self, group: &GroupKey, key: &JobsKey) {
        let before = match self.users.lock() {
            Ok(mut u) => u.insert(group.clone(), key.clone()),
            Err(_) => return,
        };
        if before.as_ref() != Some(key) {
            self.prune();
        }
    }

    /// The groups that list with `key`.
    pub(super) fn users_of(&self, key: &JobsKey) -> Vec<GroupKey> {
        match self.users.lock() {
            Ok(u) => u
                .iter()
                .filter(|(_, k)| *k == key)
                .map(|(g, _)| g.clone())
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Forgets `group`'s book and whatever no other group uses.
    pub(super) fn release_group(&self, group: &GroupKey) {
        if let Ok(mut b) = self.books.lock() {
            b.remove(group);
        }
        if let Ok(mut u) = self.users.lock() {
            u.remove(group);
        }
        self.prune();
    }

    /// Drops clients, listings and tokens of keys no group uses.
    fn prune(&self) {
        let live: HashSet<JobsKey> = match self.users.lock() {
            Ok(u) => u.values().cloned().collect(),
            // A poisoned map: keep everything rather than guess.
            Err(_) => return,
        };
        let scopes: HashSet<&ScopeKey> = live.iter().map(|k| &k.scope).collect();
        let instances: HashSet<&InstanceKey> = scopes.iter().map(|k| &k.instance).collect();
        if let Ok(mut m) = self.jobs.lock() {
            m.retain(|k, _| live.contains(k));
        }
        if let Ok(mut m) = self.runners.lock() {
            m.retain(|k, _| scopes.contains(k));
        }
        if let Ok(mut m) = self.tokens.lock() {
            m.retain(|k, _| scopes.contains(k));
        }
        if let Ok(mut m) = self.instances.lock() {
            m.retain(|k, _| instances.contains(k));
        }
        self.report_cache();
    }

    /// Sets the cache gauge from the maps' sizes.
    pub(super) fn report_cache(&self) {
        self.metrics.set_cache_entries(
            "forgejo",
            &[
                ("clients", len(&self.instances)),
                ("listings", len(&self.jobs) + len(&self.runners)),
                ("tokens", len(&self.tokens)),
                ("groups", len(&self.books) + len(&self.users)),
            ],
        );
    }
}
