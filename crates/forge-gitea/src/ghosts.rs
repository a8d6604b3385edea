//! Which offline runner rows are ghosts.
//!
//! An offline row is not enough. Gitea lists a runner as offline from `Register` until its
//! daemon's first call (`Register` stamps no `last_online` and the `withRunner` interceptor,
//! `routers/api/actions/runner/interceptor.go`, passes it by), and a group's listing may hold
//! rows that are not its own: at `scope: global` it is every runner of the instance
//! (`shared.ListRunners` with owner and repository 0), and `api.ActionRunner` names no scope.
//! So a runner that a same-named group elsewhere (another namespace, another cluster) has just
//! registered looks exactly like this group's ghost. A row is therefore a ghost only once it
//! has stayed offline, and not busy, across listings at least a grace period apart: long
//! enough for a registered runner's pod to start its daemon.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::client::RunnerListing;

/// Since when each runner row of one listing scope has been seen offline and not busy, by id
/// (ids are unique, names are not).
#[derive(Debug, Default)]
pub(crate) struct OfflineSince(HashMap<i64, Instant>);

impl OfflineSince {
    /// Takes in what `listing`, fetched at `at`, shows. Rows that are online or busy start
    /// over; rows missing from a complete listing are forgotten (deleted). A row missing from
    /// an incomplete listing keeps its time: the listing may have skipped it.
    pub(crate) fn note(&mut self, listing: &RunnerListing, at: Instant) {
        for x in &listing.runners {
            if x.is_online() || x.busy {
                self.0.remove(&x.id);
            } else {
                self.0.entry(x.id).or_insert(at);
            }
        }
        if listing.complete {
            let ids: HashSet<i64> = listing.runners.iter().map(|x| x.id).collect();
            self.0.retain(|id, _| ids.contains(id));
        }
    }

    /// Whether runner `id` has been seen offline, and not busy, from at least `grace` before
    /// `at` on (`at` being the fetch time of the listing that shows it offline now).
    pub(crate) fn for_at_least(&self, id: i64, at: Instant, grace: Duration) -> bool {
        self.0
            .get(&id)
            .is_some_and(|since| at.saturating_duration_since(*since) >= grace)
    }

    /// Whether nothing is being watched.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Runner;

    fn row(id: i64, status: &str, busy: bool) -> Runner {
        serde_json::from_value(serde_json::json!({
            "id": id, "name": format!("g-{id:05}"), "status": status, "busy": busy,
        }))
        .unwrap()
    }

    fn listing(rows: Vec<Runner>, complete: bool) -> RunnerListing {
        RunnerListing {
            runners: rows,
            complete,
        }
    }

    #[test]
    fn offline_counts_from_the_first_listing_that_shows_it() {
        let grace = Duration::from_secs(300);
        let t0 = Instant::now();
        let mut b = OfflineSince::default();
        b.note(&listing(vec![row(1, "offline", false)], true), t0);
        assert!(!b.for_at_least(1, t0, grace), "just seen");
        assert!(b.for_at_least(1, t0, Duration::ZERO));
        let t1 = t0 + grace;
        b.note(&listing(vec![row(1, "offline", false)], true), t1);
        assert!(b.for_at_least(1, t1, grace), "still offline a grace later");
    }

    #[test]
    fn coming_online_or_busy_starts_over_and_a_complete_listing_forgets() {
        let grace = Duration::from_secs(300);
        let t0 = Instant::now();
        let mut b = OfflineSince::default();
        b.note(
            &listing(vec![row(1, "offline", false), row(2, "offline", false)], true),
            t0,
        );
        let t1 = t0 + Duration::from_secs(100);
        b.note(
            &listing(vec![row(1, "online", false), row(2, "offline", true)], true),
            t1,
        );
        let t2 = t0 + grace;
        b.note(
            &listing(vec![row(1, "offline", false), row(2, "offline", false)], true),
            t2,
        );
        assert!(!b.for_at_least(1, t2, grace) && !b.for_at_least(2, t2, grace));
        assert!(b.for_at_least(1, t2 + grace, grace));
        // Skipped by an incomplete listing: kept. Missing from a complete one: forgotten.
        b.note(&listing(vec![row(1, "offline", false)], false), t2);
        assert!(b.for_at_least(2, t2 + grace, grace));
        b.note(&listing(vec![], true), t2);
        assert!(b.is_empty());
    }
}
