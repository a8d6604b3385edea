//! What the planner needs remembered between passes of one group: since when each runner has
//! been seen and been running, and since when the group has had more waiting runners than
//! demand. Pure: the pass hands in its observation and the clock.
//!
//! Both facts only live as long as the process. After a restart the clocks start again from the
//! first pass, which can only keep a runner longer, never remove one sooner.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use super::{ObservedRunner, RunnerPhase, Surplus};

/// Surplus waiting runners and since when the group has had at least that many.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SurplusSince {
    runners: u32,
    since: Timestamp,
}

/// The planner's memory for one group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlanMemory {
    running_since: BTreeMap<String, Timestamp>,
    seen_since: BTreeMap<String, Timestamp>,
    surplus: Option<SurplusSince>,
}

fn seconds_between(from: Timestamp, to: Timestamp) -> u64 {
    u64::try_from(to.duration_since(from).as_secs()).unwrap_or(0)
}

impl PlanMemory {
    /// Fills in each runner's `running_seconds` (counted from the first pass that saw it
    /// running) and forgets runners that are gone or no longer running.
    pub fn note_running(&mut self, runners: &mut [ObservedRunner], now: Timestamp) {
        self.running_since.retain(|name, _| {
            runners
                .iter()
                .any(|r| &r.name == name && r.phase == RunnerPhase::Running)
        });
        for r in runners.iter_mut().filter(|r| r.phase == RunnerPhase::Running) {
            let since = *self.running_since.entry(r.name.clone()).or_insert(now);
            r.running_seconds = seconds_between(since, now);
        }
    }

    /// Caps each runner's `age_seconds` at the time since this process first saw it, and forgets
    /// runners that are gone. A Job's age is this host's clock minus the API server's
    /// `creationTimestamp`; a host clock minutes ahead made every pending runner look older
    /// than its startup timeout, so each was removed as stuck and made again, in a loop. Both
    /// ends of the cap are this host's clock, so skew cannot shorten it.
    pub fn note_seen(&mut self, runners: &mut [ObservedRunner], now: Timestamp) {
        self.seen_since
            .retain(|name, _| runners.iter().any(|r| &r.name == name));
        for r in runners.iter_mut() {
            let since = *self.seen_since.entry(r.name.clone()).or_insert(now);
            r.age_seconds = r.age_seconds.min(seconds_between(since, now));
        }
    }

    /// The surplus recorded by earlier passes, aged to `now`, for [`super::PlanInput::surplus`].
    pub fn surplus(&self, now: Timestamp) -> Option<Surplus> {
        self.surplus.map(|s| Surplus {
            runners: s.runners,
            seconds: seconds_between(s.since, now),
        })
    }

    /// Takes in the surplus a pass left ([`super::Plan::surplus`]). The clock starts when a
    /// surplus appears and starts again whenever it grows: a job cancelled or reassigned is a
    /// new event, and the runners it freed wait a full delay of their own.
    pub fn record_surplus(&mut self, runners: u32, now: Timestamp) {
        self.surplus = match self.surplus {
            _ if runners == 0 => None,
            Some(prev) if runners <= prev.runners => Some(SurplusSince {
                runners,
                since: prev.since,
            }),
            _ => Some(SurplusSince { runners, since: now }),
        };
    }

    /// When the kept surplus has waited out `delay`, i.e. when a pass should look again.
    pub fn surplus_due_in(&self, delay: Duration, now: Timestamp) -> Option<Duration> {
        let s = self.surplus?;
        let waited = Duration::from_secs(seconds_between(s.since, now));
        Some(delay.saturating_sub(waited).max(Duration::from_secs(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Job's `creationTimestamp` is the API server's clock (`k8s.io/apiserver`
    /// `pkg/registry/rest/meta.go`, `FillObjectMetaSystemFields` sets it to `metav1.Now()`),
    /// its age this host's clock minus that. With this host 10 minutes ahead, a Job created
    /// a moment ago is "600 s old": past every startup timeout (security review L4).
    #[test]
    fn a_runner_is_never_older_than_since_this_process_saw_it() {
        let mut memory = PlanMemory::default();
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().expect("time");
        let skewed = |name: &str| ObservedRunner {
            age_seconds: 600,
            ..runner(name, RunnerPhase::Pending)
        };
        let mut runners = vec![skewed("a")];
        memory.note_seen(&mut runners, t0);
        assert_eq!(runners[0].age_seconds, 0, "first seen now");
        let mut runners = vec![skewed("a"), skewed("b")];
        memory.note_seen(&mut runners, t0 + Duration::from_secs(30));
        assert_eq!(
            runners[0].age_seconds, 30,
            "30 s of this host's clock since first seen"
        );
        assert_eq!(runners[1].age_seconds, 0);
        // An accurate age below the cap stays as it is.
        let mut runners = vec![ObservedRunner {
            age_seconds: 5,
            ..runner("a", RunnerPhase::Pending)
        }];
        memory.note_seen(&mut runners, t0 + Duration::from_secs(60));
        assert_eq!(runners[0].age_seconds, 5);
        assert_eq!(memory.seen_since.len(), 1, "b is gone and forgotten");
    }
    use crate::forge::ForgeRunnerState;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).expect("valid timestamp")
    }

    fn runner(name: &str, phase: RunnerPhase) -> ObservedRunner {
        ObservedRunner {
            name: name.to_owned(),
            phase,
            forge_state: ForgeRunnerState::Unknown,
            age_seconds: 500,
            running_seconds: 0,
            ever_busy: false,
            stuck: None,
            outdated: false,
        }
    }

    #[test]
    fn running_time_counts_from_the_first_pass_that_saw_the_runner_running() {
        let mut m = PlanMemory::default();
        let mut rs = vec![runner("a", RunnerPhase::Pending)];
        m.note_running(&mut rs, at(0));
        assert_eq!(rs[0].running_seconds, 0);
        let mut rs = vec![runner("a", RunnerPhase::Running)];
        m.note_running(&mut rs, at(100));
        assert_eq!(
            rs[0].running_seconds, 0,
            "a runner only now running has run for 0 s, whatever its Job's age"
        );
        let mut rs = vec![runner("a", RunnerPhase::Running)];
        m.note_running(&mut rs, at(250));
        assert_eq!(rs[0].running_seconds, 150);
        m.note_running(&mut [], at(260));
        assert!(m.running_since.is_empty(), "a runner gone is forgotten");
    }

    #[test]
    fn the_surplus_clock_runs_while_the_surplus_holds_or_shrinks_and_restarts_when_it_grows() {
        let mut m = PlanMemory::default();
        assert_eq!(m.surplus(at(0)), None);
        m.record_surplus(1, at(0));
        m.record_surplus(1, at(50));
        assert_eq!(
            m.surplus(at(60)),
            Some(Surplus {
                runners: 1,
                seconds: 60
            })
        );
        m.record_surplus(2, at(70));
        assert_eq!(
            m.surplus(at(80)),
            Some(Surplus {
                runners: 2,
                seconds: 10
            }),
            "a cancelled job adds a runner to the surplus: a new event, a new delay"
        );
        m.record_surplus(1, at(90));
        assert_eq!(
            m.surplus(at(90)),
            Some(Surplus {
                runners: 1,
                seconds: 20
            })
        );
        m.record_surplus(0, at(95));
        assert_eq!(m.surplus(at(95)), None, "demand caught up: the surplus is gone");
    }

    #[test]
    fn a_kept_surplus_asks_for_a_pass_when_its_delay_is_over() {
        let mut m = PlanMemory::default();
        let delay = Duration::from_secs(120);
        assert_eq!(m.surplus_due_in(delay, at(0)), None);
        m.record_surplus(3, at(0));
        assert_eq!(m.surplus_due_in(delay, at(20)), Some(Duration::from_secs(100)));
        assert_eq!(m.surplus_due_in(delay, at(500)), Some(Duration::from_secs(1)));
    }
}
