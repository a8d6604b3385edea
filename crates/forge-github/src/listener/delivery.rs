//! Notices a message session that stays open but stops delivering. The service answers such a
//! session's long polls empty while jobs wait for the scale set; only a new session gets them
//! (ARC users restart the listener by hand: actions-runner-controller #4027, #4423, #4470). A job
//! the scale set could acquire that stays so for a whole interval with no message at all is
//! the sign: a working session offers it (`JobAvailable`) and we acquire it at once.

use std::time::{Duration, Instant};

use crate::types::Statistics;

/// How often a session without messages is checked, unless the listener is told otherwise: one
/// extra call a minute at most, and a stuck job waits about two minutes before it is noticed.
pub const DEFAULT_EVERY: Duration = Duration::from_secs(60);

/// When the session last delivered, when the next check is due, and the jobs seen available at
/// the last check. Pure: the caller passes the time and does the listing.
#[derive(Debug)]
pub struct DeliveryWatch {
    every: Duration,
    /// `None` when `every` reaches past what an `Instant` can hold: never due.
    next_check: Option<Instant>,
    /// Request ids the last completed check listed available.
    seen: Vec<i64>,
}

impl DeliveryWatch {
    /// A watch for a session opened (or delivering) at `now`.
    pub fn new(every: Duration, now: Instant) -> DeliveryWatch {
        DeliveryWatch {
            every,
            next_check: now.checked_add(every),
            seen: Vec::new(),
        }
    }

    /// The session delivered a message at `now`: it works, so what was seen before says nothing.
    pub fn delivered(&mut self, now: Instant) {
        self.skip(now);
    }

    /// Whether a check is due at `now`.
    pub fn due(&self, now: Instant) -> bool {
        self.next_check.is_some_and(|at| now >= at)
    }

    /// A due check that could not be made (no room, listing failed): the next one starts afresh,
    /// since jobs seen before then may have been held back rightly.
    pub fn skip(&mut self, now: Instant) {
        self.next_check = now.checked_add(self.every);
        self.seen.clear();
    }

    /// Records the jobs listed available at `now`; true when one of them was listed at the
    /// previous check too, i.e. it stayed available a whole interval while the session
    /// delivered nothing.
    pub fn check(&mut self, available: &[i64], now: Instant) -> bool {
        let stuck = available.iter().any(|id| self.seen.contains(id));
        self.next_check = now.checked_add(self.every);
        self.seen.clear();
        self.seen.extend_from_slice(available);
        stuck
    }
}

/// Whether the scale set can take another job: the capacity we announce (`X-ScaleSetMaxCapacity`)
/// exceeds the jobs assigned to it in the latest statistics. At capacity the service holds jobs
/// back on purpose, so a job waiting then proves nothing. Unknown statistics count as room.
pub fn has_room(capacity: u32, statistics: Option<&Statistics>) -> bool {
    statistics.map_or(0, |s| s.total_assigned_jobs) < capacity
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY: Duration = Duration::from_secs(60);

    fn at(start: Instant, secs: u64) -> Instant {
        start + Duration::from_secs(secs)
    }

    #[test]
    fn no_check_is_due_before_an_interval() {
        let t0 = Instant::now();
        let watch = DeliveryWatch::new(EVERY, t0);
        assert!(!watch.due(t0));
        assert!(!watch.due(at(t0, 59)));
        assert!(watch.due(at(t0, 60)));
    }

    #[test]
    fn a_job_available_at_two_consecutive_checks_means_stuck() {
        let t0 = Instant::now();
        let mut watch = DeliveryWatch::new(EVERY, t0);
        assert!(
            !watch.check(&[7, 8], at(t0, 60)),
            "the first sighting proves nothing"
        );
        assert!(!watch.due(at(t0, 119)), "the next check waits a whole interval");
        assert!(watch.due(at(t0, 120)));
        assert!(watch.check(&[9, 8], at(t0, 120)), "job 8 waited a whole interval");
    }

    #[test]
    fn a_message_in_between_resets_the_watch() {
        let t0 = Instant::now();
        let mut watch = DeliveryWatch::new(EVERY, t0);
        assert!(!watch.check(&[7], at(t0, 60)));
        watch.delivered(at(t0, 90));
        assert!(!watch.due(at(t0, 120)), "a message restarts the interval");
        assert!(watch.due(at(t0, 150)));
        assert!(!watch.check(&[7], at(t0, 150)), "seen once since the message");
        assert!(watch.check(&[7], at(t0, 210)));
    }

    #[test]
    fn different_jobs_at_the_two_checks_are_not_stuck() {
        let t0 = Instant::now();
        let mut watch = DeliveryWatch::new(EVERY, t0);
        assert!(!watch.check(&[1, 2], at(t0, 60)));
        assert!(!watch.check(&[3], at(t0, 120)));
        assert!(!watch.check(&[], at(t0, 180)));
        assert!(
            !watch.check(&[3], at(t0, 240)),
            "job 3 was not listed at the check before"
        );
    }

    #[test]
    fn a_skipped_check_starts_afresh() {
        let t0 = Instant::now();
        let mut watch = DeliveryWatch::new(EVERY, t0);
        assert!(!watch.check(&[5], at(t0, 60)));
        watch.skip(at(t0, 120));
        assert!(!watch.due(at(t0, 150)));
        assert!(
            !watch.check(&[5], at(t0, 180)),
            "the skipped interval breaks the chain"
        );
        assert!(watch.check(&[5], at(t0, 240)));
    }

    #[test]
    fn an_interval_past_the_clock_is_never_due() {
        let t0 = Instant::now();
        let watch = DeliveryWatch::new(Duration::MAX, t0);
        assert!(!watch.due(at(t0, 1_000_000)));
    }

    #[test]
    fn room_is_capacity_above_the_assigned_jobs() {
        let stats = |assigned| Statistics {
            total_assigned_jobs: assigned,
            total_available_jobs: 3,
            ..Statistics::default()
        };
        assert!(has_room(10, Some(&stats(9))));
        assert!(!has_room(10, Some(&stats(10))), "saturated");
        assert!(!has_room(10, Some(&stats(12))));
        assert!(has_room(1, None), "unknown statistics");
        assert!(!has_room(0, None), "a group scaled to nothing takes no job");
    }
}
