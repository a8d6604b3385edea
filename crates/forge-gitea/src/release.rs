//! Forgetting what a group left in memory: its own entries, and the clients, listings and
//! tokens no remaining group uses. Run when a group is deleted and when a group moves to other
//! credentials, CA bundle or proxy, so maps keyed by what tenants write stay as small as the
//! set of live groups.

use std::collections::HashSet;

use forgerunner_core::forge::GroupKey;
use forgerunner_http::InstanceKey;
use forgerunner_http::pool::{clear, len};

use crate::forge::{GiteaForge, ListingKey};

impl GiteaForge {
    /// Forgets `key`'s group state and whatever no other group uses.
    pub(crate) fn release_group(&self, key: &GroupKey) {
        if let Ok(mut g) = self.groups.lock()
            && g.remove(key).is_some()
        {
            // One taker less: jobs only it could take are unmatched now.
            self.unmatched_scans.takers_changed();
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
        self.jobs.retain(|k| live.contains(k));
        self.runners.retain(|k| live.contains(k));
        self.tokens.retain(|k| live.contains(k));
        self.instances.retain(|k| instances.contains(k));
        if let Ok(mut a) = self.announced.lock() {
            a.retain(|k, _| live.contains(k));
        }
        self.unmatched_scans.retain(|k| live.contains(k));
        self.report_cache();
    }

    /// Forgets every group, client, listing and token (leadership lost).
    pub(crate) fn forget_all(&self) {
        clear(&self.groups);
        self.jobs.clear();
        self.runners.clear();
        self.tokens.clear();
        self.forget_announced();
        self.unmatched_scans.clear();
        self.instances.clear();
        self.report_cache();
    }

    /// Sets the cache gauge from the maps' sizes.
    pub(crate) fn report_cache(&self) {
        // The unmatched scans are not counted: one per jobs listing at most, pruned with it.
        let listings = self.jobs.len() + self.runners.len() + len(&self.announced);
        let groups = len(&self.groups);
        self.metrics.set_cache_entries(
            "gitea",
            &[
                ("clients", self.instances.len()),
                ("listings", listings),
                ("tokens", self.tokens.len()),
                ("groups", groups),
            ],
        );
    }
}
