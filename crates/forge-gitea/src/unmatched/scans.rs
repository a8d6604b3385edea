//! One unmatched-jobs scan per listing, shared by the groups on it (pure).
//!
//! What a scan finds depends only on the listing and on the groups this process knows (every
//! group can be a taker), not on the group whose pass asks. So the scan of a listing is kept
//! with the listing's fetch time and the groups' generation, and every group of the scope
//! reuses it until a new listing is fetched or a group comes, goes or changes scope or labels:
//! a scope's thousands of jobs are scanned once per poll interval, not once per group.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use forgerunner_core::forge::UnmatchedJob;

/// One listing's scan.
#[derive(Debug)]
struct Scan {
    /// When the scanned listing's fetch started: it names that listing.
    fetched_at: Instant,
    /// The groups' generation it was made with.
    takers: u64,
    jobs: Arc<Vec<UnmatchedJob>>,
}

/// The latest scan of each listing (keyed by `K`).
#[derive(Debug)]
pub(crate) struct Scans<K> {
    by_listing: Mutex<HashMap<K, Scan>>,
    /// Raised whenever the set of takers changes ([`Scans::takers_changed`]).
    takers: AtomicU64,
    /// Scans made so far: the work this saves is counted by tests.
    made: AtomicU64,
}

impl<K> Default for Scans<K> {
    fn default() -> Scans<K> {
        Scans {
            by_listing: Mutex::new(HashMap::new()),
            takers: AtomicU64::new(0),
            made: AtomicU64::new(0),
        }
    }
}

impl<K: Eq + Hash + Clone> Scans<K> {
    /// The groups that can take jobs changed: every kept scan is out of date.
    pub(crate) fn takers_changed(&self) {
        self.takers.fetch_add(1, Ordering::AcqRel);
    }

    /// The unmatched jobs of listing `key` fetched at `fetched_at`: the kept scan when it was
    /// made of that listing with the current takers, else what `scan` finds (then kept).
    pub(crate) fn get_or_scan(
        &self,
        key: &K,
        fetched_at: Instant,
        scan: impl FnOnce() -> Vec<UnmatchedJob>,
    ) -> Arc<Vec<UnmatchedJob>> {
        // Read before scanning: takers changing meanwhile make this scan out of date at once,
        // never a stale one look current.
        let takers = self.takers.load(Ordering::Acquire);
        if let Ok(kept) = self.by_listing.lock()
            && let Some(s) = kept.get(key)
            && s.fetched_at == fetched_at
            && s.takers == takers
        {
            return s.jobs.clone();
        }
        // Scanned outside the lock: passes of other listings do not wait for it.
        let jobs = Arc::new(scan());
        self.made.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut kept) = self.by_listing.lock() {
            let newer_kept = kept
                .get(key)
                .is_some_and(|s| (s.fetched_at, s.takers) > (fetched_at, takers));
            if !newer_kept {
                kept.insert(
                    key.clone(),
                    Scan {
                        fetched_at,
                        takers,
                        jobs: jobs.clone(),
                    },
                );
            }
        }
        jobs
    }

    /// Keeps the scans of the listings `keep` says are still used.
    pub(crate) fn retain(&self, keep: impl Fn(&K) -> bool) {
        if let Ok(mut kept) = self.by_listing.lock() {
            kept.retain(|k, _| keep(k));
        }
    }

    /// Forgets every scan.
    pub(crate) fn clear(&self) {
        if let Ok(mut kept) = self.by_listing.lock() {
            kept.clear();
        }
        self.takers_changed();
    }

    /// Listings with a kept scan.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_listing.lock().map_or(0, |k| k.len())
    }

    /// Scans made so far.
    #[cfg(test)]
    pub(crate) fn made(&self) -> u64 {
        self.made.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn job(id: &str) -> UnmatchedJob {
        UnmatchedJob {
            id: id.into(),
            labels: vec!["linx".into()],
            queued_at: None,
        }
    }

    fn ids(found: &[UnmatchedJob]) -> Vec<&str> {
        found.iter().map(|j| j.id.as_str()).collect()
    }

    #[test]
    fn a_listing_is_scanned_once_until_it_or_the_takers_change() {
        let scans: Scans<&str> = Scans::default();
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(30);
        for _ in 0..10 {
            let found = scans.get_or_scan(&"acme", t0, || vec![job("1")]);
            assert_eq!(ids(&found), ["1"]);
        }
        assert_eq!(scans.made(), 1, "ten groups of one listing, one scan");
        scans.get_or_scan(&"other", t0, Vec::new);
        assert_eq!(scans.made(), 2, "another listing is scanned on its own");
        let found = scans.get_or_scan(&"acme", t1, || vec![job("2")]);
        assert_eq!((ids(&found), scans.made()), (vec!["2"], 3), "a new listing");
        scans.takers_changed();
        let found = scans.get_or_scan(&"acme", t1, Vec::new);
        assert!(found.is_empty() && scans.made() == 4, "a group came or went");
        scans.get_or_scan(&"acme", t1, Vec::new);
        assert_eq!(scans.made(), 4);
    }

    /// A pass still on an older listing does not replace the newer listing's scan.
    #[test]
    fn an_older_listings_scan_does_not_replace_a_newer_one() {
        let scans: Scans<&str> = Scans::default();
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(30);
        scans.get_or_scan(&"acme", t1, || vec![job("new")]);
        let old = scans.get_or_scan(&"acme", t0, || vec![job("old")]);
        assert_eq!(ids(&old), ["old"], "the older pass gets its own listing's");
        let kept = scans.get_or_scan(&"acme", t1, Vec::new);
        assert_eq!((ids(&kept), scans.made()), (vec!["new"], 2));
    }

    #[test]
    fn unused_listings_are_forgotten() {
        let scans: Scans<&str> = Scans::default();
        let t0 = Instant::now();
        scans.get_or_scan(&"a", t0, Vec::new);
        scans.get_or_scan(&"b", t0, Vec::new);
        scans.retain(|k| *k == "a");
        assert_eq!(scans.len(), 1);
        scans.clear();
        assert_eq!(scans.len(), 0);
        scans.get_or_scan(&"a", t0, Vec::new);
        assert_eq!(scans.made(), 3, "nothing kept after a clear");
    }
}
