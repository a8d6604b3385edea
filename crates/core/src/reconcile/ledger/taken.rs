//! Runners that took a job a jobs listing may still show waiting (pure).
//!
//! A polling forge's jobs listing is cached and shared, so it can be older than what the
//! cluster or the forge's runner listing already shows: a runner seen busy, or whose Job
//! succeeded, took a job, and a listing fetched before that may still show the job waiting.
//! Until a newer listing exists, such a runner covers one waiting job, or the planner would make
//! a runner for a job that is already taken, which then waits out the idle timeout.
//!
//! Each runner is remembered from the first pass that sees it take a job, and kept while its
//! Job exists, so a runner seen busy long ago covers nothing once its Job succeeds, and the
//! cleanup deleting a finished Job does not lose a runner an old listing still counts.
//!
//! A forge whose Busy states do not date a take ([`crate::forge::ForgeView::takes_by_success_only`]:
//! Forgejo 11–14 guesses which runners are busy from the count of running jobs) has a runner's
//! take dated by the first pass that sees its Job succeed: a runner guessed busy before a
//! listing may take a job that listing shows waiting.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use crate::forge::ForgeRunnerState;
use crate::plan::{ObservedRunner, RunnerPhase};

/// Runners that took a job, by name, with when a pass first saw each one do so.
#[derive(Clone, Debug, Default)]
pub struct TakenSinceListing {
    seen: BTreeMap<String, Instant>,
}

impl TakenSinceListing {
    /// Records the runners that took a job (their Job succeeded, or the forge sees them busy,
    /// unless `success_only`) and returns how many waiting jobs of a listing fetched at
    /// `listed_at` they cover: those first seen after that fetch started, less the ones in
    /// `accounted` (runners whose job the forge's data already shows taken).
    pub fn covered(
        &mut self,
        runners: &[ObservedRunner],
        listed_at: Instant,
        accounted: &BTreeSet<String>,
        success_only: bool,
        now: Instant,
    ) -> u32 {
        let took_a_job = |r: &&ObservedRunner| {
            r.phase == RunnerPhase::Succeeded || (!success_only && r.forge_state == ForgeRunnerState::Busy)
        };
        for r in runners.iter().filter(took_a_job) {
            self.seen.entry(r.name.clone()).or_insert(now);
        }
        let present: BTreeSet<&str> = runners.iter().map(|r| r.name.as_str()).collect();
        // A runner whose Job is gone is forgotten once a newer listing accounts for its job.
        self.seen
            .retain(|name, at| *at >= listed_at || present.contains(name.as_str()));
        let n = self
            .seen
            .iter()
            .filter(|(name, at)| **at >= listed_at && !accounted.contains(*name))
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn runner(name: &str, phase: RunnerPhase, busy: bool) -> ObservedRunner {
        ObservedRunner {
            name: name.to_owned(),
            phase,
            forge_state: if busy {
                ForgeRunnerState::Busy
            } else {
                ForgeRunnerState::Unknown
            },
            age_seconds: 0,
            running_seconds: 0,
            ever_busy: false,
            stuck: None,
            outdated: false,
        }
    }

    fn none() -> BTreeSet<String> {
        BTreeSet::new()
    }

    #[test]
    fn finished_after_the_listing_covers_a_job_until_a_newer_listing() {
        let mut f = TakenSinceListing::default();
        let listing = Instant::now();
        let now = listing;
        let refs = [
            runner("a", RunnerPhase::Succeeded, false),
            runner("b", RunnerPhase::Running, false),
        ];
        assert_eq!(f.covered(&refs, listing, &none(), false, now), 1);
        // The Job is deleted: the runner is still remembered for the old listing.
        assert_eq!(f.covered(&[], listing, &none(), false, now), 1);
        // A listing fetched after the runner was seen finished no longer shows its job.
        let newer = now + Duration::from_millis(1);
        assert_eq!(f.covered(&[], newer, &none(), false, newer), 0);
        assert!(f.seen.is_empty());
    }

    #[test]
    fn busy_after_the_listing_covers_a_job_and_nothing_once_a_newer_listing_exists() {
        let mut f = TakenSinceListing::default();
        let listing = Instant::now();
        let now = listing;
        let refs = [
            runner("a", RunnerPhase::Running, true),
            runner("b", RunnerPhase::Running, false),
        ];
        assert_eq!(f.covered(&refs, listing, &none(), false, now), 1);
        let newer = now + Duration::from_millis(1);
        // The newer listing shows the job in progress, or done: still busy covers nothing.
        assert_eq!(f.covered(&refs, newer, &none(), false, newer), 0);
        // Its Job succeeds later: it was seen taking its job before the newer listing.
        let done = [
            runner("a", RunnerPhase::Succeeded, false),
            runner("b", RunnerPhase::Running, false),
        ];
        assert_eq!(f.covered(&done, newer, &none(), false, newer), 0);
        // Its Job is deleted: forgotten.
        assert_eq!(f.covered(&done[1..], newer, &none(), false, newer), 0);
        assert!(f.seen.is_empty());
    }

    #[test]
    fn runners_whose_job_is_accounted_cover_nothing() {
        let mut f = TakenSinceListing::default();
        let listing = Instant::now();
        let refs = [
            runner("a", RunnerPhase::Succeeded, false),
            runner("b", RunnerPhase::Running, true),
        ];
        let a = BTreeSet::from(["a".to_owned()]);
        assert_eq!(f.covered(&refs, listing, &a, false, listing), 1);
        let both = BTreeSet::from(["a".to_owned(), "b".to_owned()]);
        assert_eq!(f.covered(&refs, listing, &both, false, listing), 0);
    }

    #[test]
    fn failed_or_idle_runners_cover_nothing() {
        let mut f = TakenSinceListing::default();
        let refs = [
            runner("a", RunnerPhase::Failed, false),
            runner("b", RunnerPhase::Running, false),
        ];
        let now = Instant::now();
        assert_eq!(f.covered(&refs, now, &none(), false, now), 0);
    }

    /// Forgejo's rule for runners it binds to no job (moved from its book, `finished_unbound`):
    /// a runner whose Job succeeded covers one job until a listing fetched after a pass first
    /// saw it succeed.
    #[test]
    fn success_only_a_succeeded_runner_covers_a_job_until_a_newer_listing() {
        let mut f = TakenSinceListing::default();
        let listing = Instant::now();
        let now = listing + Duration::from_millis(5);
        let done = [runner("c", RunnerPhase::Succeeded, false)];
        assert_eq!(f.covered(&done, listing, &none(), true, now), 1);
        // The Job is cleaned up: the old listing is still covered.
        assert_eq!(f.covered(&[], listing, &none(), true, now), 1);
        let fresh = now + Duration::from_millis(1);
        assert_eq!(f.covered(&[], fresh, &none(), true, fresh), 0);
        assert!(f.seen.is_empty());
    }

    /// A guessed Busy state dates no take: a runner guessed busy before a listing that succeeds
    /// after it may have taken a job that listing shows waiting, so it covers one; a guessed
    /// busy runner covers nothing while it has not succeeded.
    #[test]
    fn success_only_a_runner_guessed_busy_covers_from_its_success() {
        let mut f = TakenSinceListing::default();
        let t0 = Instant::now();
        let busy = [runner("a", RunnerPhase::Running, true)];
        assert_eq!(
            f.covered(&busy, t0, &none(), true, t0),
            0,
            "a guess takes nothing"
        );
        let listing = t0 + Duration::from_millis(1);
        let later = listing + Duration::from_millis(1);
        let done = [runner("a", RunnerPhase::Succeeded, false)];
        assert_eq!(f.covered(&done, listing, &none(), true, later), 1);
        // Where Busy dates the take, the runner took its job before that listing.
        let mut g = TakenSinceListing::default();
        assert_eq!(g.covered(&busy, t0, &none(), false, t0), 1);
        assert_eq!(g.covered(&done, listing, &none(), false, later), 0);
    }
}
