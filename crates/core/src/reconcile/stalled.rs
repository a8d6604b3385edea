//! The stuck-queue watchdog: how long the oldest job waiting for a group has waited, whether
//! that is a stall (longer than `spec.stalledJobSeconds`), and what most likely holds it up.
//!
//! Pure: a pass hands in the jobs the forge shows waiting, the clock and what else it saw; the
//! memory between passes ([`WaitBook`]) lives in the group's ledger.
//!
//! The clock a wait is measured on: the forge's queue time where its data gives one (GitHub's
//! `JobAssigned` message, Gitea's job listing and deliveries), else the moment this process first
//! saw the job (Forgejo's listing carries no queue time). Jobs a forge counts without naming
//! them (GitHub's statistics may count jobs no message named yet) are measured from when this
//! process first saw such a job waiting without a break. After a restart, first-seen clocks start
//! again: a stall measured on them is reported late, never early.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::conditions::{ConditionReason, ConditionStatus, ConditionType, GroupCondition};
use crate::error::ErrorCategory;
use crate::forge::{UnmatchedJob, WaitingJob};

/// Which clock a wait is measured on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitClock {
    /// The forge's own queue time of the job.
    Queued,
    /// When this process first saw the job waiting.
    FirstSeen,
}

impl WaitClock {
    /// How a message names the clock.
    fn words(self) -> &'static str {
        match self {
            WaitClock::Queued => "queued at the forge",
            WaitClock::FirstSeen => "first seen waiting by the operator",
        }
    }
}

/// Since when one job waits, on which clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Since {
    at: Timestamp,
    clock: WaitClock,
}

/// The job that has waited longest for a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Oldest {
    /// The forge's id of the job; `None` when the forge counts the job without naming it.
    pub job: Option<String>,
    /// Since when it waits.
    pub since: Timestamp,
    /// The clock `since` is on.
    pub clock: WaitClock,
    /// Jobs waiting for the group in all, this one included.
    pub waiting: u32,
}

impl Oldest {
    /// Whole seconds waited at `now`; 0 when `since` is later (a forge clock ahead of ours).
    pub fn age_seconds(&self, now: Timestamp) -> u64 {
        u64::try_from(now.as_second().saturating_sub(self.since.as_second())).unwrap_or(0)
    }
}

/// Memory of the waiting jobs between passes: since when each waits. One per group, in its
/// ledger; it holds only the jobs the last view showed, so it stays as small as the queue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WaitBook {
    /// The named waiting jobs, by the forge's id.
    named: BTreeMap<String, Since>,
    /// Since when jobs the forge counts but does not name have waited without a break.
    unnamed_since: Option<Timestamp>,
    /// Jobs waiting for the group in the last view (netted by the ledger).
    waiting: u32,
    /// Jobs of the group's scope no group can take: since when each waits, and whether the
    /// group announced it.
    unmatched: BTreeMap<String, (Timestamp, bool)>,
}

/// Most unmatched-job Events one pass publishes.
pub const MAX_UNMATCHED_EVENTS: usize = 3;

/// Numbers in numeric order, then as text: the order forges give out job ids.
fn id_order(id: &str) -> (usize, &str) {
    (id.len(), id)
}

impl WaitBook {
    /// Takes in one view: the jobs it names and how many wait in all (`ForgeView::waiting_jobs`,
    /// netted for jobs runners took since the forge's listing).
    pub fn observe(&mut self, waiting: &[WaitingJob], waiting_jobs: u32, now: Timestamp) {
        self.waiting = waiting_jobs;
        if waiting_jobs == 0 {
            self.named = BTreeMap::new();
            self.unnamed_since = None;
            return;
        }
        // A set, not a scan per entry: a listing may name thousands of jobs.
        let listed: std::collections::HashSet<&str> = waiting.iter().map(|w| w.id.as_str()).collect();
        self.named.retain(|id, _| listed.contains(id.as_str()));
        for w in waiting {
            let since = match (w.queued_at, self.named.get(&w.id)) {
                (Some(q), _) => Since {
                    at: q.min(now),
                    clock: WaitClock::Queued,
                },
                (None, Some(known)) => *known,
                (None, None) => Since {
                    at: now,
                    clock: WaitClock::FirstSeen,
                },
            };
            self.named.insert(w.id.clone(), since);
        }
        let named = u32::try_from(self.named.len()).unwrap_or(u32::MAX);
        if waiting_jobs > named {
            self.unnamed_since.get_or_insert(now);
        } else {
            self.unnamed_since = None;
        }
    }

    /// The job that has waited longest as of the last view, if any waits.
    ///
    /// When the count was netted below the named jobs, runners took jobs the forge's listing
    /// still shows. Forges give out the oldest job first (Gitea's `CreateTaskForRunner` in
    /// `models/actions/task.go` picks waiting jobs by `updated, id` ascending; Forgejo's the
    /// same after the run's priority), so the oldest named ones are taken and not reported.
    pub fn oldest(&self) -> Option<Oldest> {
        if self.waiting == 0 {
            return None;
        }
        let mut named: Vec<(&String, &Since)> = self.named.iter().collect();
        named.sort_by(|a, b| (a.1.at, id_order(a.0)).cmp(&(b.1.at, id_order(b.0))));
        let taken = named
            .len()
            .saturating_sub(usize::try_from(self.waiting).unwrap_or(usize::MAX));
        let named = named.into_iter().nth(taken).map(|(id, s)| Oldest {
            job: Some(id.clone()),
            since: s.at,
            clock: s.clock,
            waiting: self.waiting,
        });
        let unnamed = self.unnamed_since.map(|at| Oldest {
            job: None,
            since: at,
            clock: WaitClock::FirstSeen,
            waiting: self.waiting,
        });
        match (named, unnamed) {
            (Some(n), Some(u)) => Some(if u.since < n.since { u } else { n }),
            (n, u) => n.or(u),
        }
    }
}

impl WaitBook {
    /// The jobs of `unmatched` to announce now: waiting at least `threshold_seconds` (on the
    /// forge's queue time, else since first seen) and not announced before, at most
    /// [`MAX_UNMATCHED_EVENTS`]. A job a runner outside forgerunner serves is gone long before;
    /// one whose `runs-on` has a typo waits forever and is announced once.
    pub fn unmatched_due<'a>(
        &mut self,
        unmatched: &'a [UnmatchedJob],
        threshold_seconds: u32,
        now: Timestamp,
    ) -> Vec<&'a UnmatchedJob> {
        self.unmatched
            .retain(|id, _| unmatched.iter().any(|j| &j.id == id));
        let mut due = Vec::new();
        for job in unmatched {
            let (since, announced) = self
                .unmatched
                .entry(job.id.clone())
                .or_insert((job.queued_at.unwrap_or(now).min(now), false));
            let waited = now.as_second().saturating_sub(since.as_second());
            if !*announced && waited >= i64::from(threshold_seconds) && due.len() < MAX_UNMATCHED_EVENTS {
                *announced = true;
                due.push(job);
            }
        }
        due
    }
}

/// The note of an unmatched job's Event: the job, the labels it asks for, and what to check.
pub fn unmatched_note(job: &UnmatchedJob) -> String {
    format!(
        "job {} waits with runs-on [{}], which no RunnerGroup watching this scope matches: check the \
         workflow's runs-on for a typo, or give a group these labels",
        job.id,
        job.labels.join(", ")
    )
}

/// What most likely holds a stalled queue up, in the order [`likely_cause`] checks them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StallCause {
    /// The forge does not answer or refuses the operator's calls (for GitHub: the scale set,
    /// its message session or the runner registrations).
    ForgeErrors,
    /// The forge's API budget for the group's credential is spent.
    ApiBudgetExhausted,
    /// The group's passes fail before runners can be made (Secret, spec, Kubernetes).
    GroupFailing,
    /// Runners are made but do not start, or keep failing.
    RunnersNotStarting,
    /// The group has `spec.maxRunners` runners.
    AtMaxRunners,
    /// Nothing the operator sees: runners could take the job and none does.
    CauseUnknown,
}

impl StallCause {
    /// The condition reason.
    pub fn as_str(self) -> &'static str {
        match self {
            StallCause::ForgeErrors => "ForgeErrors",
            StallCause::ApiBudgetExhausted => "ApiBudgetExhausted",
            StallCause::GroupFailing => "GroupFailing",
            StallCause::RunnersNotStarting => "RunnersNotStarting",
            StallCause::AtMaxRunners => "AtMaxRunners",
            StallCause::CauseUnknown => "CauseUnknown",
        }
    }

    /// What to look at.
    pub fn hint(self) -> &'static str {
        match self {
            StallCause::ForgeErrors => {
                "the forge does not answer or refuses the operator's calls (see condition ForgeConnected \
                 and forgerunner_forge_requests by outcome)"
            }
            StallCause::ApiBudgetExhausted => {
                "the forge's API budget for the group's credential is spent; runners are made again \
                 after it resets (forgerunner_forge_rate_limit_remaining)"
            }
            StallCause::GroupFailing => {
                "the group's passes fail before runners can be made (see conditions Ready and Degraded)"
            }
            StallCause::RunnersNotStarting => {
                "runners are made but do not start or keep failing (see condition Degraded and the \
                 runner pods' events)"
            }
            StallCause::AtMaxRunners => {
                "the group has spec.maxRunners runners, all busy or starting: raise spec.maxRunners or \
                 expect the job to wait its turn"
            }
            StallCause::CauseUnknown => {
                "runners could take it but none does: check that the runners' labels match the job's \
                 runs-on and read the runner pods' logs"
            }
        }
    }
}

/// What a pass saw that may explain a stall.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Signals {
    /// The error that stopped the pass, or the first one its apply met.
    pub error: Option<ErrorCategory>,
    /// The plan made fewer runners than it wanted because the API budget is low.
    pub budget_cut: bool,
    /// Runners do not start, keep failing, or exit as outdated.
    pub runners_failing: bool,
    /// Demand exceeds `spec.maxRunners`.
    pub at_max: bool,
}

/// The most likely cause of a stall given what the pass saw: an error first (it stops
/// everything after it), then the budget, failing runners, the runner limit.
pub fn likely_cause(s: &Signals) -> StallCause {
    if let Some(category) = s.error {
        return match category {
            ErrorCategory::RateLimited => StallCause::ApiBudgetExhausted,
            ErrorCategory::Unauthorized
            | ErrorCategory::ForgeNotFound
            | ErrorCategory::ForgeConfig
            | ErrorCategory::ForgeUnavailable
            | ErrorCategory::ForgeNotReady
            | ErrorCategory::ForgeTimeout => StallCause::ForgeErrors,
            ErrorCategory::InvalidSpec
            | ErrorCategory::ForgeDisabled
            | ErrorCategory::ForgeHostNotAllowed
            | ErrorCategory::SecretNotFound
            | ErrorCategory::InvalidCredentials
            | ErrorCategory::Kubernetes
            | ErrorCategory::RunnerRbacConflict
            | ErrorCategory::RunnerHooksDisabled
            | ErrorCategory::CacheConflict => StallCause::GroupFailing,
        };
    }
    if s.budget_cut {
        StallCause::ApiBudgetExhausted
    } else if s.runners_failing {
        StallCause::RunnersNotStarting
    } else if s.at_max {
        StallCause::AtMaxRunners
    } else {
        StallCause::CauseUnknown
    }
}

/// `QueueStalled` for the oldest waiting job (if any) against `threshold_seconds`.
///
/// The message names the job, since when it waits and on which clock, rather than an age that
/// would change (and rewrite the status) on every pass; the age is the gauge
/// `forgerunner_oldest_waiting_job_seconds`.
pub fn queue_condition(
    oldest: Option<&Oldest>,
    threshold_seconds: u32,
    signals: &Signals,
    now: Timestamp,
) -> GroupCondition {
    let stalled = oldest.filter(|o| o.age_seconds(now) >= u64::from(threshold_seconds));
    let Some(o) = stalled else {
        return GroupCondition::new(
            ConditionType::QueueStalled,
            ConditionStatus::False,
            ConditionReason::QueueMoving,
            format!("no job has waited longer than spec.stalledJobSeconds ({threshold_seconds}s)"),
        );
    };
    let cause = likely_cause(signals);
    let who = match &o.job {
        Some(id) => format!("job {id}"),
        None => "a job the forge counts without naming it".to_owned(),
    };
    let others = o.waiting.saturating_sub(1);
    GroupCondition::new(
        ConditionType::QueueStalled,
        ConditionStatus::True,
        ConditionReason::Stalled(cause),
        format!(
            "{who} has waited since {} ({}), longer than spec.stalledJobSeconds ({threshold_seconds}s); \
             {others} more jobs wait; likely cause: {}",
            o.since,
            o.clock.words(),
            cause.hint()
        ),
    )
}

/// The `QueueStalled` condition of `new` when it turned true since `old`: a stall began, worth
/// one Warning Event. A stall whose cause changes is the same stall; one the status already
/// shows (a restart, a new leader) is not announced again.
pub fn stall_began<'a>(old: &[Condition], new: &'a [Condition]) -> Option<&'a Condition> {
    let stalled = |c: &&Condition| {
        c.type_ == ConditionType::QueueStalled.as_str() && c.status == ConditionStatus::True.as_str()
    };
    let was = old.iter().any(|c| stalled(&c));
    new.iter().find(stalled).filter(|_| !was)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).expect("valid timestamp")
    }

    fn job(id: &str, queued: Option<i64>) -> WaitingJob {
        WaitingJob {
            id: id.into(),
            queued_at: queued.map(at),
            labels: Vec::new(),
            binding: None,
        }
    }

    #[test]
    fn a_forge_queue_time_is_the_clock_where_the_forge_gives_one() {
        let mut book = WaitBook::default();
        book.observe(&[job("7", Some(100)), job("8", Some(150))], 2, at(1000));
        let o = book.oldest().expect("a job waits");
        assert_eq!(o.job.as_deref(), Some("7"));
        assert_eq!(
            (o.clock, o.age_seconds(at(1000)), o.waiting),
            (WaitClock::Queued, 900, 2)
        );
    }

    #[test]
    fn without_a_queue_time_the_wait_counts_from_first_seen_and_survives_passes() {
        let mut book = WaitBook::default();
        book.observe(&[job("3", None)], 1, at(100));
        book.observe(&[job("3", None), job("4", None)], 2, at(400));
        let o = book.oldest().expect("waits");
        assert_eq!((o.job.as_deref(), o.clock), (Some("3"), WaitClock::FirstSeen));
        assert_eq!(o.age_seconds(at(400)), 300, "first seen at 100, not again at 400");
        book.observe(&[job("4", None)], 1, at(500));
        let o = book.oldest().expect("waits");
        assert_eq!((o.job.as_deref(), o.since), (Some("4"), at(400)));
        book.observe(&[], 0, at(600));
        assert_eq!(book.oldest(), None, "nothing waits");
        book.observe(&[job("4", None)], 1, at(700));
        assert_eq!(
            book.oldest().map(|o| o.since),
            Some(at(700)),
            "a gap restarts the clock"
        );
    }

    #[test]
    fn counted_but_unnamed_jobs_wait_from_when_they_were_first_counted() {
        let mut book = WaitBook::default();
        book.observe(&[], 2, at(100));
        book.observe(&[job("9", Some(250))], 3, at(300));
        let o = book.oldest().expect("waits");
        assert_eq!((o.job, o.since, o.clock), (None, at(100), WaitClock::FirstSeen));
        book.observe(&[job("9", Some(250))], 1, at(400));
        assert_eq!(book.oldest().and_then(|o| o.job).as_deref(), Some("9"));
        assert_eq!(book.unnamed_since, None, "every waiting job is named again");
    }

    #[test]
    fn jobs_a_runner_took_since_the_listing_are_the_oldest_and_not_reported() {
        let mut book = WaitBook::default();
        book.observe(
            &[job("10", Some(50)), job("9", Some(50)), job("11", Some(60))],
            1,
            at(900),
        );
        let o = book.oldest().expect("one waits");
        assert_eq!(
            o.job.as_deref(),
            Some("11"),
            "9 and 10 (numeric order) were taken"
        );
    }

    #[test]
    fn an_unmatched_job_is_announced_once_after_the_threshold() {
        let typo = UnmatchedJob {
            id: "5".into(),
            labels: vec!["ubuntu-lates".into()],
            queued_at: Some(at(100)),
        };
        let fresh = UnmatchedJob {
            id: "6".into(),
            labels: vec!["gpu".into()],
            queued_at: None,
        };
        let jobs = [typo.clone(), fresh.clone()];
        let mut book = WaitBook::default();
        assert!(
            book.unmatched_due(&jobs, 600, at(650)).is_empty(),
            "not waited long enough"
        );
        assert_eq!(book.unmatched_due(&jobs, 600, at(700)), vec![&typo]);
        assert!(
            book.unmatched_due(&jobs, 600, at(800)).is_empty(),
            "announced once"
        );
        assert_eq!(
            book.unmatched_due(&jobs, 600, at(1250)),
            vec![&fresh],
            "first seen at 650, without a queue time"
        );
        assert!(book.unmatched_due(&[], 600, at(1300)).is_empty());
        assert!(book.unmatched.is_empty(), "forgets jobs no longer waiting");
        let note = unmatched_note(&typo);
        assert!(
            note.contains("job 5") && note.contains("[ubuntu-lates]"),
            "{note}"
        );
    }

    #[test]
    fn a_forge_clock_ahead_of_ours_is_no_negative_age() {
        let mut book = WaitBook::default();
        book.observe(&[job("1", Some(2000))], 1, at(1000));
        assert_eq!(book.oldest().map(|o| o.age_seconds(at(1000))), Some(0));
    }

    #[test]
    fn causes_in_order_of_what_stops_runners_first() {
        let all = Signals {
            error: Some(ErrorCategory::ForgeUnavailable),
            budget_cut: true,
            runners_failing: true,
            at_max: true,
        };
        assert_eq!(likely_cause(&all), StallCause::ForgeErrors);
        let limited = Signals {
            error: Some(ErrorCategory::RateLimited),
            ..all
        };
        assert_eq!(likely_cause(&limited), StallCause::ApiBudgetExhausted);
        let secret = Signals {
            error: Some(ErrorCategory::SecretNotFound),
            ..all
        };
        assert_eq!(likely_cause(&secret), StallCause::GroupFailing);
        let no_error = Signals { error: None, ..all };
        assert_eq!(likely_cause(&no_error), StallCause::ApiBudgetExhausted);
        let failing = Signals {
            budget_cut: false,
            ..no_error
        };
        assert_eq!(likely_cause(&failing), StallCause::RunnersNotStarting);
        let at_max = Signals {
            runners_failing: false,
            ..failing
        };
        assert_eq!(likely_cause(&at_max), StallCause::AtMaxRunners);
        assert_eq!(likely_cause(&Signals::default()), StallCause::CauseUnknown);
    }

    #[test]
    fn the_condition_turns_true_at_the_threshold_naming_job_clock_and_cause() {
        let oldest = Oldest {
            job: Some("42".into()),
            since: at(1000),
            clock: WaitClock::Queued,
            waiting: 3,
        };
        let at_max = Signals {
            at_max: true,
            ..Signals::default()
        };
        let before = queue_condition(Some(&oldest), 600, &at_max, at(1599));
        assert_eq!(
            (before.status, before.reason),
            (ConditionStatus::False, ConditionReason::QueueMoving)
        );
        let c = queue_condition(Some(&oldest), 600, &at_max, at(1600));
        assert_eq!(
            (c.type_, c.status, c.reason),
            (
                ConditionType::QueueStalled,
                ConditionStatus::True,
                ConditionReason::Stalled(StallCause::AtMaxRunners)
            )
        );
        for part in [
            "job 42",
            "since 1970-01-01T00:16:40Z",
            "queued at the forge",
            "(600s)",
            "2 more",
            "maxRunners",
        ] {
            assert!(c.message.contains(part), "{part} missing: {}", c.message);
        }
        let later = queue_condition(Some(&oldest), 600, &at_max, at(5000));
        assert_eq!(
            later.message, c.message,
            "the message does not move with the clock"
        );
        assert_eq!(
            queue_condition(None, 600, &at_max, at(5000)).status,
            ConditionStatus::False
        );
    }

    #[test]
    fn a_stall_is_announced_when_it_begins_only() {
        let now = Time(at(10));
        let cond = |status: ConditionStatus, reason| {
            GroupCondition::new(ConditionType::QueueStalled, status, reason, "m").to_condition(Some(1), &now)
        };
        let moving = cond(ConditionStatus::False, ConditionReason::QueueMoving);
        let stalled = cond(
            ConditionStatus::True,
            ConditionReason::Stalled(StallCause::AtMaxRunners),
        );
        let other_cause = cond(
            ConditionStatus::True,
            ConditionReason::Stalled(StallCause::RunnersNotStarting),
        );
        assert!(stall_began(&[], std::slice::from_ref(&stalled)).is_some());
        assert!(stall_began(std::slice::from_ref(&moving), std::slice::from_ref(&stalled)).is_some());
        assert!(stall_began(std::slice::from_ref(&stalled), std::slice::from_ref(&other_cause)).is_none());
        assert!(stall_began(std::slice::from_ref(&stalled), std::slice::from_ref(&moving)).is_none());
    }
}
