//! Runners that finished their job while the forge's demand may still count it.
//!
//! A runner's Job can succeed, and be cleaned up, before the forge's numbers show its job
//! done: GitHub's `JobCompleted` message may arrive after the pod exits, and a cached Gitea
//! listing may predate the cleanup. Until then the demand asks for one runner too many, and a
//! planner that trusted it would create a runner for a job that no longer exists. The ledger
//! remembers such runners across passes (the cleanup deletes their Jobs) and forgets each once
//! the forge's data accounts for it. Pure: the clock and the forge's view come in.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

use crate::forge::ForgeRunnerState;
use crate::plan::{ObservedRunner, RunnerPhase};

/// How long a finished runner is remembered at most. The forge normally catches up within a
/// poll; the bound keeps a runner that exited without a job (so no completion ever comes) from
/// holding demand back for long.
pub const FINISH_GRACE: Duration = Duration::from_secs(30);

/// Finished runners the forge's demand may still count, by name, with when they were seen done.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FinishedLedger {
    entries: BTreeMap<String, Timestamp>,
}

impl FinishedLedger {
    /// Remembers a runner seen succeeded at `at` (the first sighting wins).
    pub fn record(&mut self, name: &str, at: Timestamp) {
        self.entries.entry(name.to_owned()).or_insert(at);
    }

    /// Remembers the runners of `observed` this pass cleaned up (`deleted`) whose completion the
    /// forge had not reported: their Jobs are gone from the next passes' view.
    pub fn record_cleaned_up(&mut self, observed: &[ObservedRunner], deleted: &[String], now: Timestamp) {
        for r in observed.iter().filter(|r| done_but_unreported(r)) {
            if deleted.contains(&r.name) {
                self.record(&r.name, now);
            }
        }
    }

    /// Names remembered, so the forge can be asked whether it has seen them finish.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Forgets runners the demand now accounts for: those the forge reports `Finished`, those
    /// older than a snapshot the demand was taken from (`observed_at`), and, when the forge
    /// reports finished runners by name (no snapshot), those older than [`FINISH_GRACE`]. A
    /// snapshot forge keeps them until a newer snapshot, however long its poll interval.
    pub fn settle(
        &mut self,
        observed_at: Option<Timestamp>,
        states: &BTreeMap<String, ForgeRunnerState>,
        now: Timestamp,
    ) {
        let grace = jiff::SignedDuration::try_from(FINISH_GRACE).unwrap_or(jiff::SignedDuration::ZERO);
        self.entries.retain(|name, at| {
            let confirmed = states.get(name) == Some(&ForgeRunnerState::Finished);
            let snapshot_newer = observed_at.is_some_and(|seen| seen > *at);
            let expired = observed_at.is_none() && now.duration_since(*at) >= grace;
            !(confirmed || snapshot_newer || expired)
        });
    }

    /// How long until the oldest entry expires: a pass is due then, or the demand it held back
    /// would wait for the next resync. `None` for a snapshot forge (`observed_at` set), whose
    /// entries wait for a newer listing instead ([`FinishedLedger::settle`]).
    pub fn next_expiry(&self, observed_at: Option<Timestamp>, now: Timestamp) -> Option<Duration> {
        if observed_at.is_some() {
            return None;
        }
        self.entries
            .values()
            .min()
            .map(|oldest| FINISH_GRACE.saturating_sub(now.duration_since(*oldest).unsigned_abs()))
    }

    /// Jobs the demand still counts that finished runners already took: the remembered runners
    /// plus those seen succeeded in this pass whose completion the forge has not reported.
    pub fn uncounted(&self, observed: &[ObservedRunner]) -> u32 {
        let now_done: BTreeSet<&str> = observed
            .iter()
            .filter(|r| done_but_unreported(r))
            .map(|r| r.name.as_str())
            .filter(|n| !self.entries.contains_key(*n))
            .collect();
        u32::try_from(self.entries.len().saturating_add(now_done.len())).unwrap_or(u32::MAX)
    }
}

/// A runner whose Job succeeded while the forge has not reported its job finished.
fn done_but_unreported(r: &ObservedRunner) -> bool {
    r.phase == RunnerPhase::Succeeded && r.forge_state != ForgeRunnerState::Finished
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).expect("valid timestamp")
    }

    fn runner(name: &str, phase: RunnerPhase, forge_state: ForgeRunnerState) -> ObservedRunner {
        ObservedRunner {
            name: name.to_owned(),
            phase,
            forge_state,
            age_seconds: 1,
            ever_busy: true,
        }
    }

    #[test]
    fn confirmed_runners_are_forgotten_and_others_kept() {
        let mut l = FinishedLedger::default();
        l.record("a", ts(100));
        l.record("b", ts(100));
        let states = BTreeMap::from([("a".to_owned(), ForgeRunnerState::Finished)]);
        l.settle(None, &states, ts(105));
        assert_eq!(l.names().collect::<Vec<_>>(), ["b"]);
        assert_eq!(l.uncounted(&[]), 1);
    }

    #[test]
    fn a_snapshot_newer_than_the_cleanup_accounts_for_it() {
        let mut l = FinishedLedger::default();
        l.record("old", ts(100));
        l.record("new", ts(110));
        l.settle(Some(ts(105)), &BTreeMap::new(), ts(111));
        assert_eq!(l.names().collect::<Vec<_>>(), ["new"]);
    }

    #[test]
    fn entries_expire_after_the_grace() {
        let mut l = FinishedLedger::default();
        l.record("a", ts(100));
        let grace = i64::try_from(FINISH_GRACE.as_secs()).expect("small");
        l.settle(None, &BTreeMap::new(), ts(100 + grace - 1));
        assert!(!l.is_empty());
        l.settle(None, &BTreeMap::new(), ts(100 + grace));
        assert!(l.is_empty());
    }

    #[test]
    fn snapshot_forges_keep_entries_until_a_newer_snapshot() {
        let mut l = FinishedLedger::default();
        l.record("a", ts(100));
        l.settle(Some(ts(90)), &BTreeMap::new(), ts(1000));
        assert!(!l.is_empty(), "a slow poll's old listing still shows the job");
        l.settle(Some(ts(101)), &BTreeMap::new(), ts(1001));
        assert!(l.is_empty());
    }

    #[test]
    fn next_expiry_is_the_oldest_entry_plus_the_grace() {
        let mut l = FinishedLedger::default();
        assert_eq!(l.next_expiry(None, ts(100)), None);
        l.record("a", ts(100));
        l.record("b", ts(110));
        assert_eq!(
            l.next_expiry(None, ts(105)),
            Some(FINISH_GRACE - Duration::from_secs(5))
        );
        assert_eq!(l.next_expiry(None, ts(1000)), Some(Duration::ZERO));
    }

    #[test]
    fn first_sighting_wins() {
        let mut l = FinishedLedger::default();
        l.record("a", ts(100));
        l.record("a", ts(200));
        l.settle(Some(ts(150)), &BTreeMap::new(), ts(201));
        assert!(
            l.is_empty(),
            "the entry kept its first time and predates the snapshot"
        );
    }

    #[test]
    fn succeeded_runners_of_this_pass_count_once_unless_confirmed() {
        let mut l = FinishedLedger::default();
        l.record("a", ts(100));
        let observed = [
            runner("a", RunnerPhase::Succeeded, ForgeRunnerState::Idle),
            runner("b", RunnerPhase::Succeeded, ForgeRunnerState::Unknown),
            runner("c", RunnerPhase::Succeeded, ForgeRunnerState::Finished),
            runner("d", RunnerPhase::Running, ForgeRunnerState::Busy),
        ];
        assert_eq!(
            l.uncounted(&observed),
            2,
            "a (remembered) and b; c is confirmed, d runs"
        );
    }
}
