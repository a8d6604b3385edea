//! The failure backoff's input: how many runners failed in a row and when the last one did, as
//! the status records them (so the backoff survives an operator restart). Pure.

use jiff::{SignedDuration, Timestamp};

use crate::crd::RunnerGroupStatus;

/// Runner failures since the last runner that finished well.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FailureHistory {
    /// Consecutive failed runners.
    pub consecutive: u32,
    /// When the last of them failed.
    pub last_at: Option<Timestamp>,
}

impl FailureHistory {
    /// The history the status records for `generation`: a spec change starts over (a new image
    /// deserves a fresh start, not the old backoff).
    pub fn from_status(prev: Option<&RunnerGroupStatus>, generation: Option<i64>) -> FailureHistory {
        match prev {
            Some(s) if s.observed_generation == generation => FailureHistory {
                consecutive: s.failed_runners,
                last_at: s.last_runner_failure_time.as_ref().map(|t| t.0),
            },
            _ => FailureHistory::default(),
        }
    }

    /// Whether runner creation still waits out the backoff after the last failure
    /// ([`crate::startup::creation_backoff`]).
    pub fn creation_held(&self, now: Timestamp) -> bool {
        let Some(last) = self.last_at else {
            return false;
        };
        let wait = crate::startup::creation_backoff(self.consecutive);
        now.duration_since(last) < SignedDuration::try_from(wait).unwrap_or(SignedDuration::MAX)
    }

    /// Consecutive failures after a pass: reset by any runner that finished well, then plus the
    /// failed runners whose Job the pass actually deleted (so each failure counts once).
    pub fn next_count(&self, succeeded_deleted: u32, failed_deleted: u32) -> u32 {
        let base = if succeeded_deleted > 0 {
            0
        } else {
            self.consecutive
        };
        base.saturating_add(failed_deleted)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).expect("valid timestamp")
    }

    #[test]
    fn backoff_holds_creation_and_a_spec_change_resets_it() {
        let mut st = RunnerGroupStatus {
            observed_generation: Some(2),
            failed_runners: 3,
            last_runner_failure_time: Some(Time(at(1000))),
            ..RunnerGroupStatus::default()
        };
        let h = FailureHistory::from_status(Some(&st), Some(2));
        assert_eq!(h.consecutive, 3);
        assert_eq!(
            FailureHistory::from_status(Some(&st), Some(3)).consecutive,
            0,
            "new generation starts over"
        );
        // Three failures: 10 s.
        assert!(h.creation_held(at(1009)));
        assert!(!h.creation_held(at(1010)));
        let with = |consecutive: u32| FailureHistory { consecutive, ..h };
        assert!(
            !with(1).creation_held(at(1000)),
            "a one-off failure does not hold"
        );
        assert!(!with(0).creation_held(at(1000)));
        st.last_runner_failure_time = None;
        let h = FailureHistory::from_status(Some(&st), Some(2));
        assert!(!FailureHistory { consecutive: 9, ..h }.creation_held(at(1000)));
    }

    #[test]
    fn failure_counting() {
        let prev = |consecutive: u32| FailureHistory {
            consecutive,
            last_at: None,
        };
        assert_eq!(prev(3).next_count(0, 2), 5);
        assert_eq!(prev(3).next_count(1, 0), 0);
        assert_eq!(prev(3).next_count(1, 1), 1);
        assert_eq!(prev(u32::MAX).next_count(0, 1), u32::MAX);
    }
}
