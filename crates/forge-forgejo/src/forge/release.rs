//! Forgetting what a group left in memory: its book, and the clients, listings and tokens no
//! remaining group uses. Run when a group is deleted and when a group moves to other
//! credentials, CA bundle, proxy, scope or labels, so maps keyed by what tenants write stay as
//! small as the set of live groups.

use std::collections::HashSet;

use forgerunner_core::forge::GroupKey;
use forgerunner_http::InstanceKey;
use forgerunner_http::pool::len;

use super::{ForgejoForge, JobsKey, ScopeKey};

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
    pub(crate) fn release_group(&self, group: &GroupKey) {
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
        self.jobs.retain(|k| live.contains(k));
        self.runners.retain(|k| scopes.contains(k));
        self.tokens.retain(|k| scopes.contains(k));
        self.instances.retain(|k| instances.contains(k));
        self.report_cache();
    }

    /// Sets the cache gauge from the maps' sizes.
    pub(crate) fn report_cache(&self) {
        self.metrics.set_cache_entries(
            "forgejo",
            &[
                ("clients", self.instances.len()),
                ("listings", self.jobs.len() + self.runners.len()),
                ("tokens", self.tokens.len()),
                ("groups", len(&self.users)),
            ],
        );
    }
}
