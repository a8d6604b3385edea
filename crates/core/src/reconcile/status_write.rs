//! Pure rule for when a newly built status is written: condition transitions at once, count-only
//! changes (and the `Scaling` condition's up/down/steady motion) at a bounded rate per group.
//!
//! During a burst the counters (`currentRunners`, `idleRunners`, `runningJobs`, …) and the
//! messages that quote them move on every pass; writing each of those would make status patches
//! the bulk of the operator's Kubernetes writes. Anything a reader acts on (a condition's status
//! or reason, the generation it describes, forge facts, the failure count) is written in the pass
//! that sees it; counts and messages are written at most once per [`COUNT_WRITE_INTERVAL`], and
//! a deferred change is written by a pass requeued for that moment, so the status converges.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::conditions::{ConditionReason, ConditionType};
use crate::crd::RunnerGroupStatus;

/// Shortest time between two status writes of one group that only move counts or messages.
pub const COUNT_WRITE_INTERVAL: Duration = Duration::from_secs(1);
/// `lastPollTime` alone is rewritten at most this often.
pub const POLL_TIME_REFRESH: Duration = Duration::from_secs(30);

/// Whether, and when, a status built by a pass is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusWrite {
    /// Nothing worth a write changed.
    Skip,
    /// Write in this pass.
    Now,
    /// Only counts or messages changed and the last write is recent: a pass this much later
    /// writes it (unless something else wrote first).
    Defer(Duration),
}

/// What a condition says, without its message and timestamps.
fn gist(c: &Condition) -> (&str, &str, &str, Option<i64>) {
    (&c.type_, &c.status, &c.reason, c.observed_generation)
}

/// A change of the `Scaling` condition between "scaling up", "scaling down" and "steady" only
/// tells motion, like the counts do: a group serving one job at a time flips it twice per job,
/// so it is written at the count rate. Reaching or leaving `AtMaxRunners` is a limit a person
/// acts on, and is written at once.
fn only_motion(a: &Condition, b: &Condition) -> bool {
    let scaling = ConditionType::Scaling.as_str();
    let at_max = ConditionReason::AtMaxRunners.as_str();
    a.type_ == scaling
        && b.type_ == scaling
        && a.reason != at_max
        && b.reason != at_max
        && a.observed_generation == b.observed_generation
}

/// A change a reader acts on: a condition appeared, went or flipped status or reason, the
/// generation moved, forge facts or the failure count changed.
fn significant_change(prev: &RunnerGroupStatus, next: &RunnerGroupStatus) -> bool {
    prev.observed_generation != next.observed_generation
        || prev.scale_set_id != next.scale_set_id
        || prev.forge_version != next.forge_version
        || prev.cache != next.cache
        || prev.failed_runners != next.failed_runners
        || prev.conditions.len() != next.conditions.len()
        || prev
            .conditions
            .iter()
            .zip(&next.conditions)
            .any(|(a, b)| gist(a) != gist(b) && !only_motion(a, b))
}

/// `lastPollTime` moved by [`POLL_TIME_REFRESH`] or more (or appeared, or went).
fn poll_time_stale(prev: &RunnerGroupStatus, next: &RunnerGroupStatus) -> bool {
    match (&prev.last_poll_time, &next.last_poll_time) {
        (Some(a), Some(b)) => b.0.duration_since(a.0).unsigned_abs() >= POLL_TIME_REFRESH,
        (a, b) => a != b,
    }
}

/// Decides how to write `next` given the status last written (`prev`, `None` when the group
/// has none yet) and the time since this process last wrote it (`None`: not in this process's
/// memory, or the caller wants no deferral, e.g. on an error).
pub fn status_write(
    prev: Option<&RunnerGroupStatus>,
    next: &RunnerGroupStatus,
    since_last_write: Option<Duration>,
) -> StatusWrite {
    let Some(prev) = prev else {
        return StatusWrite::Now;
    };
    if significant_change(prev, next) {
        return StatusWrite::Now;
    }
    let mut same = prev.clone();
    same.last_poll_time.clone_from(&next.last_poll_time);
    if &same == next && !poll_time_stale(prev, next) {
        return StatusWrite::Skip;
    }
    match since_last_write {
        Some(since) if since < COUNT_WRITE_INTERVAL => StatusWrite::Defer(COUNT_WRITE_INTERVAL - since),
        _ => StatusWrite::Now,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn t(s: i64) -> Time {
        Time(jiff::Timestamp::from_second(s).expect("valid timestamp"))
    }

    fn cond(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: Some(1),
            last_transition_time: t(100),
        }
    }

    fn base() -> RunnerGroupStatus {
        RunnerGroupStatus {
            observed_generation: Some(1),
            conditions: vec![
                cond("Ready", "True", "Reconciled", "2 runners"),
                cond("Scaling", "False", "Steady", "runner count matches demand"),
            ],
            current_runners: 2,
            last_poll_time: Some(t(100)),
            ..RunnerGroupStatus::default()
        }
    }

    const RECENT: Option<Duration> = Some(Duration::from_millis(300));
    const LONG_AGO: Option<Duration> = Some(Duration::from_secs(5));

    #[test]
    fn decisions() {
        let counts = |s: &mut RunnerGroupStatus| {
            s.current_runners = 3;
            s.idle_runners = 1;
            s.conditions[0].message = "3 runners".into();
        };
        let flip = |s: &mut RunnerGroupStatus| {
            s.conditions[0].status = "False".into();
            s.conditions[0].reason = "ForgeUnreachable".into();
        };
        let scaling_up = |s: &mut RunnerGroupStatus| {
            s.conditions[1].status = "True".into();
            s.conditions[1].reason = "ScalingUp".into();
        };
        let reason = |s: &mut RunnerGroupStatus| s.conditions[1].reason = "AtMaxRunners".into();
        let generation = |s: &mut RunnerGroupStatus| s.observed_generation = Some(2);
        let cond_generation = |s: &mut RunnerGroupStatus| s.conditions[0].observed_generation = Some(2);
        let new_cond =
            |s: &mut RunnerGroupStatus| s.conditions.push(cond("Degraded", "False", "Healthy", "ok"));
        let facts = |s: &mut RunnerGroupStatus| s.scale_set_id = Some(9);
        let version = |s: &mut RunnerGroupStatus| s.forge_version = Some("1.24".into());
        let failures = |s: &mut RunnerGroupStatus| s.failed_runners = 1;
        let poll_soon = |s: &mut RunnerGroupStatus| s.last_poll_time = Some(t(110));
        let poll_late = |s: &mut RunnerGroupStatus| s.last_poll_time = Some(t(130));
        let nothing = |_: &mut RunnerGroupStatus| {};
        type Edit = fn(&mut RunnerGroupStatus);
        let ms = Duration::from_millis;
        let table: [(&str, Edit, Option<Duration>, StatusWrite); 18] = [
            ("unchanged", nothing, RECENT, StatusWrite::Skip),
            ("unchanged, not in memory", nothing, None, StatusWrite::Skip),
            ("poll time only, fresh", poll_soon, RECENT, StatusWrite::Skip),
            ("poll time only, 30 s old", poll_late, LONG_AGO, StatusWrite::Now),
            (
                "poll time only, 30 s old, recent write",
                poll_late,
                RECENT,
                StatusWrite::Defer(ms(700)),
            ),
            (
                "counts, recent write",
                counts,
                RECENT,
                StatusWrite::Defer(ms(700)),
            ),
            ("counts, old write", counts, LONG_AGO, StatusWrite::Now),
            ("counts, no deferral allowed", counts, None, StatusWrite::Now),
            ("condition status flips", flip, RECENT, StatusWrite::Now),
            (
                "scaling up, recent write",
                scaling_up,
                RECENT,
                StatusWrite::Defer(ms(700)),
            ),
            ("scaling up, old write", scaling_up, LONG_AGO, StatusWrite::Now),
            ("condition reason changes", reason, RECENT, StatusWrite::Now),
            ("generation moves", generation, RECENT, StatusWrite::Now),
            (
                "condition generation moves",
                cond_generation,
                RECENT,
                StatusWrite::Now,
            ),
            ("condition appears", new_cond, RECENT, StatusWrite::Now),
            ("scale set id", facts, RECENT, StatusWrite::Now),
            ("forge version", version, RECENT, StatusWrite::Now),
            ("failure count", failures, RECENT, StatusWrite::Now),
        ];
        for (what, edit, since, want) in table {
            let mut next = base();
            edit(&mut next);
            assert_eq!(status_write(Some(&base()), &next, since), want, "{what}");
        }
    }

    #[test]
    fn first_status_is_written_at_once() {
        assert_eq!(status_write(None, &base(), RECENT), StatusWrite::Now);
    }

    #[test]
    fn deferral_never_exceeds_the_interval() {
        let mut next = base();
        next.current_runners = 7;
        for since_ms in [0, 1, 500, 999] {
            match status_write(Some(&base()), &next, Some(Duration::from_millis(since_ms))) {
                StatusWrite::Defer(d) => assert!(d > Duration::ZERO && d <= COUNT_WRITE_INTERVAL),
                other => panic!("{since_ms} ms: {other:?}"),
            }
        }
        assert_eq!(
            status_write(Some(&base()), &next, Some(COUNT_WRITE_INTERVAL)),
            StatusWrite::Now
        );
    }
}
