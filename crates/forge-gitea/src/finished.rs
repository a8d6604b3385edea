//! Runners of one group that finished after the cached jobs listing was fetched (pure).
//!
//! A listing is shared and cached for a poll interval, so it can predate a runner's end: the
//! job that runner took may still show `queued` in it. Until a newer listing exists, such a
//! runner covers one queued job, or the planner would make a duplicate runner for a job that is
//! already done. Each runner is remembered from the first pass that sees its Job succeeded, so
//! the cleanup deleting that Job does not lose it.

use std::collections::BTreeMap;
use std::time::Instant;

use forgerunner_core::forge::RunnerRef;
use forgerunner_core::plan::RunnerPhase;

/// Finished runners by name, with when a pass first saw each one finished.
#[derive(Clone, Debug, Default)]
pub(crate) struct FinishedSinceListing {
    seen: BTreeMap<String, Instant>,
}

impl FinishedSinceListing {
    /// Records the succeeded runners of `refs`, forgets those a listing fetched at
    /// `listing_fetched_at` already accounts for (it started after they were seen finished),
    /// and returns how many queued jobs the rest cover. `accounted(name)` tells a runner whose
    /// job the listing or a delivery already shows taken: it covers nothing.
    pub(crate) fn covered(
        &mut self,
        refs: &[RunnerRef],
        listing_fetched_at: Instant,
        accounted: impl Fn(&str) -> bool,
    ) -> u32 {
        let now = Instant::now();
        for r in refs.iter().filter(|r| r.phase == RunnerPhase::Succeeded) {
            self.seen.entry(r.name.clone()).or_insert(now);
        }
        self.seen.retain(|_, at| *at >= listing_fetched_at);
        let n = self.seen.keys().filter(|name| !accounted(name)).count();
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

    #[test]
    fn finished_after_the_listing_covers_a_job_until_a_newer_listing() {
        let mut f = FinishedSinceListing::default();
        let listing = Instant::now();
        let refs = [
            runner("a", RunnerPhase::Succeeded),
            runner("b", RunnerPhase::Running),
        ];
        assert_eq!(f.covered(&refs, listing, |_| false), 1);
        // The Job is deleted: the runner is still remembered for the old listing.
        assert_eq!(f.covered(&[], listing, |_| false), 1);
        // A listing fetched after the runner was seen finished no longer shows its job.
        let newer = Instant::now() + Duration::from_millis(1);
        assert_eq!(f.covered(&[], newer, |_| false), 0);
        assert!(f.seen.is_empty());
    }

    #[test]
    fn runners_whose_job_is_accounted_cover_nothing() {
        let mut f = FinishedSinceListing::default();
        let listing = Instant::now();
        let refs = [
            runner("a", RunnerPhase::Succeeded),
            runner("b", RunnerPhase::Succeeded),
        ];
        assert_eq!(f.covered(&refs, listing, |n| n == "a"), 1);
    }

    #[test]
    fn failed_runners_cover_nothing() {
        let mut f = FinishedSinceListing::default();
        let refs = [runner("a", RunnerPhase::Failed)];
        assert_eq!(f.covered(&refs, Instant::now(), |_| false), 0);
    }
}
