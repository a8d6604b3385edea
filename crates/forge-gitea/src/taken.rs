//! Runners of one group that took a job the cached jobs listing may still show queued (pure).
//!
//! The jobs listing is shared and cached for a poll interval, and the runners listing is cached
//! apart from it (a removal refreshes it at once), so either can be the newer one. A runner the
//! runners listing or a delivery shows busy, or whose Job succeeded, took a job; when the jobs
//! listing predates that, the job may still show `queued` in it. Until a newer jobs listing
//! exists, such a runner covers one queued job, or the planner would make a runner for a job
//! that is already taken, which then waits out the idle timeout.
//!
//! Each runner is remembered from the first pass that sees it take a job, and kept while its
//! Job exists, so a runner seen busy long ago covers nothing once its Job succeeds, and the
//! cleanup deleting a finished Job does not lose a runner an old listing still counts.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use forgerunner_core::forge::RunnerRef;
use forgerunner_core::plan::RunnerPhase;

/// Runners that took a job, by name, with when a pass first saw each one do so.
#[derive(Clone, Debug, Default)]
pub(crate) struct TakenSinceListing {
    seen: BTreeMap<String, Instant>,
}

impl TakenSinceListing {
    /// Records the runners of `refs` that took a job (their Job succeeded, or `busy(name)`),
    /// and returns how many queued jobs of a listing fetched at `listing_fetched_at` they cover:
    /// those first seen after that fetch started, less the ones `accounted(name)` says the
    /// listing or a delivery already shows taken.
    pub(crate) fn covered(
        &mut self,
        refs: &[RunnerRef],
        listing_fetched_at: Instant,
        busy: impl Fn(&str) -> bool,
        accounted: impl Fn(&str) -> bool,
    ) -> u32 {
        let now = Instant::now();
        for r in refs
            .iter()
            .filter(|r| r.phase == RunnerPhase::Succeeded || busy(&r.name))
        {
            self.seen.entry(r.name.clone()).or_insert(now);
        }
        let present: BTreeSet<&str> = refs.iter().map(|r| r.name.as_str()).collect();
        // A runner whose Job is gone is forgotten once a newer listing accounts for its job.
        self.seen
            .retain(|name, at| *at >= listing_fetched_at || present.contains(name.as_str()));
        let n = self
            .seen
            .iter()
            .filter(|(name, at)| **at >= listing_fetched_at && !accounted(name))
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn runner(name: &str, phase: RunnerPhase) -> RunnerRef {
        RunnerRef {
            name: name.to_owned(),
            annotations: BTreeMap::new(),
            phase,
        }
    }

    fn never(_: &str) -> bool {
        false
    }

    #[test]
    fn finished_after_the_listing_covers_a_job_until_a_newer_listing() {
        let mut f = TakenSinceListing::default();
        let listing = Instant::now();
        let refs = [
            runner("a", RunnerPhase::Succeeded),
            runner("b", RunnerPhase::Running),
        ];
        assert_eq!(f.covered(&refs, listing, never, never), 1);
        // The Job is deleted: the runner is still remembered for the old listing.
        assert_eq!(f.covered(&[], listing, never, never), 1);
        // A listing fetched after the runner was seen finished no longer shows its job.
        let newer = Instant::now() + Duration::from_millis(1);
        assert_eq!(f.covered(&[], newer, never, never), 0);
        assert!(f.seen.is_empty());
    }

    #[test]
    fn busy_after_the_listing_covers_a_job_and_nothing_once_a_newer_listing_exists() {
        let mut f = TakenSinceListing::default();
        let listing = Instant::now();
        let refs = [
            runner("a", RunnerPhase::Running),
            runner("b", RunnerPhase::Running),
        ];
        let a_busy = |n: &str| n == "a";
        assert_eq!(f.covered(&refs, listing, a_busy, never), 1);
        let newer = Instant::now() + Duration::from_millis(1);
        // The newer listing shows the job in progress, or done: still busy covers nothing.
        assert_eq!(f.covered(&refs, newer, a_busy, never), 0);
        // Its Job succeeds later: it was seen taking its job before the newer listing.
        let done = [
            runner("a", RunnerPhase::Succeeded),
            runner("b", RunnerPhase::Running),
        ];
        assert_eq!(f.covered(&done, newer, never, never), 0);
        // Its Job is deleted: forgotten.
        assert_eq!(f.covered(&done[1..], newer, never, never), 0);
        assert!(f.seen.is_empty());
    }

    #[test]
    fn runners_whose_job_is_accounted_cover_nothing() {
        let mut f = TakenSinceListing::default();
        let listing = Instant::now();
        let refs = [
            runner("a", RunnerPhase::Succeeded),
            runner("b", RunnerPhase::Running),
        ];
        assert_eq!(f.covered(&refs, listing, |n| n == "b", |n| n == "a"), 1);
        assert_eq!(f.covered(&refs, listing, |n| n == "b", |_| true), 0);
    }

    #[test]
    fn failed_or_idle_runners_cover_nothing() {
        let mut f = TakenSinceListing::default();
        let refs = [
            runner("a", RunnerPhase::Failed),
            runner("b", RunnerPhase::Running),
        ];
        assert_eq!(f.covered(&refs, Instant::now(), never, never), 0);
    }
}
