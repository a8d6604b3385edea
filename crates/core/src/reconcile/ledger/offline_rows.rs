//! Since when each runner row named like the group's runners has been seen offline (pure), and
//! which of them are ghosts now.
//!
//! A forge lists the rows it has registered for the group ([`ListedRows`]), with no time rule.
//! An offline row is not enough to call it a ghost: a runner is offline from its registration
//! until its daemon first calls in (a pod's start on a cold node takes minutes), and a listing
//! may hold rows that are not the group's (at Gitea's `scope: global` every runner of the
//! instance, so a same-named group elsewhere may have just registered one). A row is therefore a
//! ghost only once it has stayed offline, and not busy, across listings at least the grace
//! apart. A row seen online or busy starts over; one a whole listing no longer shows is
//! forgotten (deleted); one a partial listing does not show keeps its time, as the listing may
//! have skipped it.
//!
//! Process memory: after a restart a row is a ghost only a grace after this process first sees
//! it offline.
//!
//! A row the forge shows carrying this group's own mark ([`ListedRows::own`]) cannot be a
//! same-named group's, and a row of ours with a Job is no ghost whatever its state; so one with
//! no Job was left by a process that died between registering it and creating its Job. It is
//! a ghost after the much shorter [`OWN_ROW_GRACE`].

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::forge::ListedRows;

/// How long a row must stay offline, seen so in listings this far apart, before it is a ghost:
/// between a runner's registration and its daemon's first call lie, at worst, an image pull on a
/// cold node and the start of the runner's containers.
pub const DEFAULT_GHOST_GRACE: Duration = Duration::from_secs(300);

/// How long a row carrying the group's own mark must stay offline before it is a ghost. The
/// only writer that may still create its Job is a deposed leader whose fence check passed just
/// before its lease lapsed, one API call from done: a short wait covers that call. Were that
/// call slower still, its pod would find its registration gone and fail, and its job would get
/// another runner: a wasted pod, not a lost job.
pub const OWN_ROW_GRACE: Duration = Duration::from_secs(30);

/// One group's offline runner rows, by name, with the fetch time of the first listing that
/// showed each one offline since it was last seen online.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OfflineRows {
    since: BTreeMap<String, Instant>,
    grace: Duration,
}

impl Default for OfflineRows {
    /// An empty book with [`DEFAULT_GHOST_GRACE`].
    fn default() -> Self {
        OfflineRows::with_grace(DEFAULT_GHOST_GRACE)
    }
}

impl OfflineRows {
    /// An empty book whose rows are ghosts after `grace` offline, those with the group's own
    /// mark after [`OWN_ROW_GRACE`] if that is shorter.
    pub fn with_grace(grace: Duration) -> OfflineRows {
        OfflineRows {
            since: BTreeMap::new(),
            grace,
        }
    }

    /// Takes in the forge's runner listing (`None`: the forge lists no runner rows, so nothing
    /// is watched) and returns the ghosts now: the rows it shows offline, and not busy, that
    /// were first seen so at least the grace before it was fetched. A name the listing also
    /// shows online (names are not unique across scopes) counts as online.
    pub fn settle(&mut self, rows: Option<&ListedRows>) -> Vec<String> {
        let Some(rows) = rows else {
            self.clear();
            return Vec::new();
        };
        let offline = || rows.offline.iter().filter(|n| !rows.online.contains(*n));
        self.since.retain(|name, _| !rows.online.contains(name));
        if rows.whole {
            self.since.retain(|name, _| rows.offline.contains(name));
        }
        for name in offline() {
            self.since.entry(name.clone()).or_insert(rows.listed_at);
        }
        if self.since.is_empty() {
            // An emptied B-tree keeps its node; a group with no offline row keeps nothing.
            self.since = BTreeMap::new();
        }
        offline()
            .filter(|n| {
                let grace = if rows.own.contains(*n) {
                    self.grace.min(OWN_ROW_GRACE)
                } else {
                    self.grace
                };
                self.since
                    .get(*n)
                    .is_some_and(|since| rows.listed_at.saturating_duration_since(*since) >= grace)
            })
            .cloned()
            .collect()
    }

    /// Forgets every row (the group moved to another forge).
    pub fn clear(&mut self) {
        self.since = BTreeMap::new();
    }

    /// How many rows are watched.
    pub fn len(&self) -> usize {
        self.since.len()
    }

    /// Whether no row is watched.
    pub fn is_empty(&self) -> bool {
        self.since.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    const GRACE: Duration = Duration::from_secs(300);

    fn names(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    /// A listing fetched at `at` showing `offline` rows offline and not busy, `online` rows
    /// online or busy.
    fn listing(offline: &[&str], online: &[&str], whole: bool, at: Instant) -> ListedRows {
        ListedRows {
            offline: names(offline),
            online: names(online),
            own: BTreeSet::new(),
            whole,
            listed_at: at,
        }
    }

    #[test]
    fn a_row_is_a_ghost_once_offline_a_grace_after_the_first_listing_that_showed_it() {
        let mut book = OfflineRows::with_grace(GRACE);
        let t0 = Instant::now();
        assert_eq!(
            book.settle(Some(&listing(&["g-dead0"], &[], true, t0))),
            Vec::<String>::new(),
            "just seen"
        );
        let early = t0 + GRACE - Duration::from_secs(1);
        assert!(
            book.settle(Some(&listing(&["g-dead0"], &[], true, early)))
                .is_empty()
        );
        let t1 = t0 + GRACE;
        assert_eq!(
            book.settle(Some(&listing(&["g-dead0"], &[], true, t1))),
            ["g-dead0"],
            "still offline a grace later"
        );
    }

    /// The listing's fetch time counts, not the pass's: a pass long after a cached listing
    /// that first showed the row still sees it just seen.
    #[test]
    fn time_is_the_listings_not_the_pass() {
        let mut book = OfflineRows::with_grace(GRACE);
        let t0 = Instant::now();
        let cached = listing(&["g-dead0"], &[], true, t0);
        assert!(book.settle(Some(&cached)).is_empty());
        assert!(book.settle(Some(&cached)).is_empty(), "the same listing again");
        assert_eq!(book.len(), 1);
    }

    /// A row of the group's own mark is a ghost after the short grace, an unmarked one of the
    /// same listing only after the whole grace.
    #[test]
    fn a_row_with_the_groups_own_mark_is_a_ghost_after_the_short_grace() {
        let mut book = OfflineRows::with_grace(GRACE);
        let t0 = Instant::now();
        let marked = |at: Instant| ListedRows {
            own: names(&["g-mine0"]),
            ..listing(&["g-mine0", "g-other"], &[], true, at)
        };
        assert!(book.settle(Some(&marked(t0))).is_empty(), "just seen");
        assert!(
            book.settle(Some(&marked(t0 + OWN_ROW_GRACE - Duration::from_secs(1))))
                .is_empty()
        );
        assert_eq!(book.settle(Some(&marked(t0 + OWN_ROW_GRACE))), ["g-mine0"]);
        assert_eq!(
            book.settle(Some(&marked(t0 + GRACE))),
            ["g-mine0", "g-other"],
            "the unmarked row only after the whole grace"
        );
    }

    #[test]
    fn a_zero_grace_calls_a_ghost_at_first_sight() {
        let mut book = OfflineRows::with_grace(Duration::ZERO);
        let t0 = Instant::now();
        assert_eq!(
            book.settle(Some(&listing(&["g-dead0"], &["g-live0"], true, t0))),
            ["g-dead0"]
        );
    }

    #[test]
    fn a_row_seen_online_or_busy_starts_over() {
        let mut book = OfflineRows::with_grace(GRACE);
        let t0 = Instant::now();
        assert!(
            book.settle(Some(&listing(&["g-aaaaa", "g-bbbbb"], &[], true, t0)))
                .is_empty()
        );
        // The first one's daemon called in; the second one is busy (partial listing: being
        // listed online still counts).
        let t1 = t0 + Duration::from_secs(100);
        assert!(
            book.settle(Some(&listing(&[], &["g-aaaaa", "g-bbbbb"], false, t1)))
                .is_empty()
        );
        assert!(book.is_empty());
        let t2 = t0 + GRACE;
        assert!(
            book.settle(Some(&listing(&["g-aaaaa", "g-bbbbb"], &[], true, t2)))
                .is_empty(),
            "offline again: the grace counts from now"
        );
        assert_eq!(
            book.settle(Some(&listing(&["g-aaaaa", "g-bbbbb"], &[], true, t2 + GRACE))),
            ["g-aaaaa", "g-bbbbb"]
        );
    }

    #[test]
    fn a_name_listed_both_offline_and_online_is_online() {
        let mut book = OfflineRows::with_grace(Duration::ZERO);
        let t0 = Instant::now();
        assert!(
            book.settle(Some(&listing(&["g-twin0"], &["g-twin0"], true, t0)))
                .is_empty()
        );
        assert!(book.is_empty());
    }

    #[test]
    fn a_partial_listing_keeps_a_row_it_skipped_and_a_whole_one_forgets_it() {
        let mut book = OfflineRows::with_grace(GRACE);
        let t0 = Instant::now();
        assert!(
            book.settle(Some(&listing(&["g-aaaaa", "g-bbbbb"], &[], true, t0)))
                .is_empty()
        );
        let t1 = t0 + GRACE;
        // Skipped by a partial listing: it keeps its time, and is no ghost while not shown.
        assert_eq!(
            book.settle(Some(&listing(&["g-aaaaa"], &[], false, t1))),
            ["g-aaaaa"]
        );
        assert_eq!(
            book.settle(Some(&listing(&["g-aaaaa", "g-bbbbb"], &[], false, t1))),
            ["g-aaaaa", "g-bbbbb"],
            "shown again: offline since the first sighting"
        );
        // Missing from a whole listing: deleted, forgotten; a row of that name later starts over.
        assert_eq!(
            book.settle(Some(&listing(&["g-aaaaa"], &[], true, t1))),
            ["g-aaaaa"]
        );
        assert_eq!(book.len(), 1);
        assert_eq!(
            book.settle(Some(&listing(&["g-aaaaa", "g-bbbbb"], &[], true, t1))),
            ["g-aaaaa"]
        );
        assert!(book.settle(Some(&listing(&[], &[], true, t1))).is_empty());
        assert!(book.is_empty());
    }

    #[test]
    fn no_runner_listing_watches_nothing() {
        let mut book = OfflineRows::with_grace(Duration::ZERO);
        let t0 = Instant::now();
        assert_eq!(
            book.settle(Some(&listing(&["g-dead0"], &[], false, t0))),
            ["g-dead0"]
        );
        assert!(book.settle(None).is_empty());
        assert!(book.is_empty());
    }
}
