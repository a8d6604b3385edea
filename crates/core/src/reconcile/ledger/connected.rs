//! Since when the forge has shown each of the group's runners connected (pure).
//!
//! A view tells where a runner is at one moment; how long it has waited connected only passes
//! over time tell. A forge reads it where the moment is not enough: Forgejo 15 binds a runner
//! to one job, and a bound runner that waited connected long enough without getting it tells
//! that Forgejo withholds the job ([`crate::forge::RemoveOutcome::Withheld`]). The forge is
//! told it as [`crate::forge::RunnerRef::connected_since`].
//!
//! Process memory: after a restart a runner's clock starts at the first pass that sees it
//! connected, so the evidence it gives comes late, never early.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use crate::forge::ForgeRunnerState;
use crate::plan::ObservedRunner;

/// Since when each runner of the group has been shown idle or busy without a break, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnectedSince {
    since: BTreeMap<String, Instant>,
}

impl ConnectedSince {
    /// Takes in a pass's runners with the forge's state of each: a runner shown idle or busy
    /// keeps its time (or starts one at `now`); any other state, or a runner gone, ends it.
    pub fn note(&mut self, runners: &[ObservedRunner], now: Instant) {
        let connected: BTreeSet<&str> = runners
            .iter()
            .filter(|r| matches!(r.forge_state, ForgeRunnerState::Idle | ForgeRunnerState::Busy))
            .map(|r| r.name.as_str())
            .collect();
        self.since.retain(|name, _| connected.contains(name.as_str()));
        for name in connected {
            if !self.since.contains_key(name) {
                self.since.insert(name.to_owned(), now);
            }
        }
        if self.since.is_empty() {
            // An emptied B-tree keeps its node; a group with no connected runner keeps nothing.
            self.since = BTreeMap::new();
        }
    }

    /// Since when `runner` has been shown connected without a break, if the last pass showed
    /// it so.
    pub fn since(&self, runner: &str) -> Option<Instant> {
        self.since.get(runner).copied()
    }

    /// Forgets every runner (the group moved to another forge).
    pub fn clear(&mut self) {
        self.since = BTreeMap::new();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn runner(name: &str, state: ForgeRunnerState) -> ObservedRunner {
        ObservedRunner {
            forge_state: state,
            ..ObservedRunner::fresh(name)
        }
    }

    #[test]
    fn a_runner_is_connected_from_the_first_pass_that_shows_it_idle_or_busy() {
        let mut book = ConnectedSince::default();
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(30);
        book.note(&[runner("a", ForgeRunnerState::Offline)], t0);
        assert_eq!(book.since("a"), None, "not connected yet");
        book.note(&[runner("a", ForgeRunnerState::Idle)], t0);
        book.note(&[runner("a", ForgeRunnerState::Busy)], t1);
        assert_eq!(book.since("a"), Some(t0), "idle then busy is one stretch");
    }

    #[test]
    fn a_break_or_a_runner_gone_ends_the_stretch() {
        let mut book = ConnectedSince::default();
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(30);
        book.note(
            &[
                runner("a", ForgeRunnerState::Idle),
                runner("b", ForgeRunnerState::Idle),
            ],
            t0,
        );
        book.note(&[runner("a", ForgeRunnerState::Offline)], t1);
        assert_eq!(book.since("a"), None, "offline breaks it");
        assert_eq!(book.since("b"), None, "gone");
        book.note(&[runner("a", ForgeRunnerState::Idle)], t1);
        assert_eq!(book.since("a"), Some(t1), "starts over");
        book.note(&[runner("a", ForgeRunnerState::Unknown)], t1);
        assert_eq!(book, ConnectedSince::default());
    }
}
