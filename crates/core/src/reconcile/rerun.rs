//! Jobs the cluster killed: when a busy runner's pod was evicted, preempted or lost with its
//! node ([`crate::runner_pod::disruption`]), its job is re-run through the forge's API
//! ([`ForgeSession::rerun_job`]) within the group's hourly budget (`spec.rerun`), and retried while
//! the forge says the job's run is still going. A job that failed on its own or was cancelled
//! is never re-run: only a pod the cluster marked as disrupted gets here.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use kube::runtime::events::EventType;

use super::context::Context;
use super::events::publish;
use super::forge_call::bounded;
use crate::crd::RunnerGroup;
use crate::forge::{ForgeSession, GroupContext, RerunOutcome};
use crate::job_identity::JobIdentity;
use crate::metrics::RerunLabels;
use crate::runner_pod::disruption::Disruption;

/// How long a re-run the forge refuses while the job's run goes on is asked for again: GitHub
/// refuses until every job of the run has finished, which for a long workflow takes a while.
pub const RERUN_WINDOW: Duration = Duration::from_secs(30 * 60);

/// Most re-runs waiting for their run to finish, per group: far above `maxPerHour`'s bound.
const MAX_PENDING: usize = 128;

/// Most re-run calls one pass makes: a node loss that killed dozens of runners must not make a
/// pass (and the slots every group shares) wait on dozens of forge calls in a row.
pub const MAX_RERUN_CALLS_PER_PASS: usize = 4;

/// How soon re-runs left over by [`MAX_RERUN_CALLS_PER_PASS`] are taken up.
const LEFT_OVER_DELAY: Duration = Duration::from_secs(2);

/// What came of a killed runner's job, for the metric and the Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RerunResult {
    /// The forge queued the job again.
    Requested,
    /// `spec.rerun` is unset.
    Disabled,
    /// The group's hourly budget is spent.
    OverBudget,
    /// The forge (or its version) has no API to re-run a job.
    Unsupported,
    /// The forge no longer knows the job.
    Gone,
    /// The forge refused or failed (a missing permission, an error), or its run did not finish
    /// within [`RERUN_WINDOW`].
    Failed,
    /// The runner's job is not known (the forge never told which job it ran).
    Unknown,
}

impl RerunResult {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            RerunResult::Requested => "requested",
            RerunResult::Disabled => "disabled",
            RerunResult::OverBudget => "over_budget",
            RerunResult::Unsupported => "unsupported",
            RerunResult::Gone => "gone",
            RerunResult::Failed => "failed",
            RerunResult::Unknown => "unknown",
        }
    }
}

/// A killed runner's job, waiting to be re-run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingRerun {
    /// The runner (its Job's name).
    pub runner: String,
    /// The job it ran.
    pub job: JobIdentity,
    /// How the cluster killed it.
    pub how: Disruption,
    /// When to ask the forge (again).
    pub due: Instant,
    /// When to stop asking.
    pub until: Instant,
}

/// The group's re-runs: those asked for in the last hour (the budget) and those waiting.
#[derive(Debug, Default)]
pub struct RerunBook {
    asked: VecDeque<Instant>,
    pending: Vec<PendingRerun>,
}

impl RerunBook {
    /// Takes in a killed runner's job; `false` when the hour's budget of `max_per_hour`
    /// (re-runs asked for plus those waiting) is spent.
    pub fn admit(
        &mut self,
        runner: &str,
        job: JobIdentity,
        how: Disruption,
        max_per_hour: u32,
        now: Instant,
    ) -> bool {
        while self
            .asked
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= Duration::from_secs(3600))
        {
            self.asked.pop_front();
        }
        let used = self.asked.len() + self.pending.len();
        if used >= max_per_hour as usize || self.pending.len() >= MAX_PENDING {
            return false;
        }
        self.pending.push(PendingRerun {
            runner: runner.to_owned(),
            job,
            how,
            due: now,
            until: now + RERUN_WINDOW,
        });
        true
    }

    /// Takes out the re-runs due at `now`, the longest due first, at most
    /// [`MAX_RERUN_CALLS_PER_PASS`]; the others are due again shortly.
    pub fn due(&mut self, now: Instant) -> Vec<PendingRerun> {
        let (mut due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| p.due <= now);
        self.pending = later;
        due.sort_by_key(|p| p.due);
        let left_over = due.split_off(due.len().min(MAX_RERUN_CALLS_PER_PASS));
        self.pending.extend(left_over.into_iter().map(|mut p| {
            p.due = now + LEFT_OVER_DELAY;
            p
        }));
        due
    }

    /// Puts a re-run back to be asked for again after `after`; `false` past its window.
    pub fn later(&mut self, mut p: PendingRerun, after: Duration, now: Instant) -> bool {
        p.due = now + after;
        if p.due > p.until {
            return false;
        }
        self.pending.push(p);
        true
    }

    /// Counts a re-run asked for at `now` against the budget.
    pub fn asked(&mut self, now: Instant) {
        self.asked.push_back(now);
    }

    /// When the next waiting re-run is due, to come back then.
    pub fn next_due(&self, now: Instant) -> Option<Duration> {
        self.pending
            .iter()
            .map(|p| p.due.saturating_duration_since(now))
            .min()
    }
}

/// Takes in the runners this pass found killed by the cluster (`disrupted`, with the job each
/// ran as the forge told it or as recorded on its Job) and asks the forge for what is due.
pub async fn after_disruptions(
    ctx: &Context,
    group: &RunnerGroup,
    forge: &dyn ForgeSession,
    forge_group: &GroupContext,
    disrupted: &[(String, Disruption, Option<JobIdentity>)],
    book: &mut RerunBook,
) {
    let now = Instant::now();
    for (runner, how, job) in disrupted {
        let result = match (&group.spec.rerun, job) {
            (_, None) => Some(RerunResult::Unknown),
            (None, Some(_)) => Some(RerunResult::Disabled),
            (Some(spec), Some(job)) => (!book.admit(runner, job.clone(), *how, spec.max_per_hour, now))
                .then_some(RerunResult::OverBudget),
        };
        if let Some(result) = result {
            report(ctx, group, runner, *how, job.as_ref(), result, None).await;
        }
    }
    for p in book.due(now) {
        let call = forge.rerun_job(forge_group, &p.runner, &p.job);
        let (result, detail) = match bounded(ctx.forge_deadline, "rerun_job", forge_group, call).await {
            Ok(RerunOutcome::Requested) => {
                book.asked(now);
                (RerunResult::Requested, None)
            }
            Ok(RerunOutcome::NotYet { retry_after }) => {
                if book.later(p.clone(), retry_after, now) {
                    continue;
                }
                (
                    RerunResult::Failed,
                    Some(format!(
                        "its run had not finished after {} minutes",
                        RERUN_WINDOW.as_secs() / 60
                    )),
                )
            }
            Ok(RerunOutcome::Unsupported) => (RerunResult::Unsupported, None),
            Ok(RerunOutcome::Gone) => (RerunResult::Gone, None),
            Err(e) => (RerunResult::Failed, Some(e.to_string())),
        };
        report(ctx, group, &p.runner, p.how, Some(&p.job), result, detail).await;
    }
}

/// Counts the outcome and tells it in an Event.
async fn report(
    ctx: &Context,
    group: &RunnerGroup,
    runner: &str,
    how: Disruption,
    job: Option<&JobIdentity>,
    result: RerunResult,
    detail: Option<String>,
) {
    ctx.metrics
        .jobs_rerun
        .get_or_create(&RerunLabels {
            forge: group.spec.forge.as_str(),
            reason: how.as_str(),
            outcome: result.as_str(),
        })
        .inc();
    let what = job.map_or_else(|| "its job".to_owned(), describe);
    let killed = format!("runner {runner} was killed by the cluster ({how}) while running {what}");
    let (type_, reason, note) = match result {
        RerunResult::Requested => (
            EventType::Normal,
            "JobRerun",
            format!("{killed}; the forge re-runs it"),
        ),
        RerunResult::Disabled => (
            EventType::Warning,
            "JobNotRerun",
            format!("{killed}; re-run it by hand, or set spec.rerun to have forgerunner do it"),
        ),
        RerunResult::OverBudget => (
            EventType::Warning,
            "JobNotRerun",
            format!("{killed}; spec.rerun.maxPerHour is spent, re-run it by hand"),
        ),
        RerunResult::Unsupported => (
            EventType::Warning,
            "JobNotRerun",
            format!("{killed}; this forge has no API to re-run a job, re-run it by hand"),
        ),
        RerunResult::Gone => (
            EventType::Warning,
            "JobNotRerun",
            format!("{killed}; the forge no longer knows the job"),
        ),
        RerunResult::Unknown => (
            EventType::Warning,
            "JobNotRerun",
            format!("{killed}; the forge never said which job, so it cannot be re-run"),
        ),
        RerunResult::Failed => (
            EventType::Warning,
            "JobNotRerun",
            format!("{killed}; the re-run failed: {}", detail.unwrap_or_default()),
        ),
    };
    publish(ctx, group, type_, reason, "Rerun", note).await;
}

fn describe(job: &JobIdentity) -> String {
    let mut parts = Vec::new();
    if let Some(name) = &job.job_name {
        parts.push(format!("job {name}"));
    }
    if let Some(run) = &job.run_id {
        parts.push(format!("run {run}"));
    }
    if let Some(repo) = &job.repository {
        parts.push(format!("of {repo}"));
    }
    if parts.is_empty() {
        "its job".to_owned()
    } else {
        parts.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(n: u32) -> JobIdentity {
        JobIdentity {
            run_id: Some(n.to_string()),
            ..JobIdentity::default()
        }
    }

    #[test]
    fn the_hour_s_budget_counts_asked_and_waiting_re_runs() {
        let mut book = RerunBook::default();
        let t = Instant::now();
        assert!(book.admit("a", job(1), Disruption::EvictionByEvictionApi, 2, t));
        assert!(book.admit("b", job(2), Disruption::EvictionByEvictionApi, 2, t));
        assert!(
            !book.admit("c", job(3), Disruption::EvictionByEvictionApi, 2, t),
            "budget of 2 spent"
        );
        let due = book.due(t);
        assert_eq!(due.len(), 2);
        book.asked(t);
        book.asked(t);
        assert!(!book.admit(
            "c",
            job(3),
            Disruption::DeletionByPodGc,
            2,
            t + Duration::from_secs(3599)
        ));
        assert!(
            book.admit(
                "c",
                job(3),
                Disruption::DeletionByPodGc,
                2,
                t + Duration::from_secs(3600)
            ),
            "an hour later"
        );
    }

    #[test]
    fn a_pass_asks_for_a_few_re_runs_and_leaves_the_rest_for_the_next() {
        let mut book = RerunBook::default();
        let t = Instant::now();
        for n in 0..10 {
            assert!(book.admit(&format!("r{n}"), job(n), Disruption::DeletionByPodGc, 100, t));
        }
        let first = book.due(t);
        assert_eq!(first.len(), MAX_RERUN_CALLS_PER_PASS);
        assert!(book.due(t).is_empty(), "the rest wait a moment");
        assert_eq!(book.next_due(t), Some(LEFT_OVER_DELAY));
        let later = t + LEFT_OVER_DELAY;
        assert_eq!(book.due(later).len(), MAX_RERUN_CALLS_PER_PASS);
        assert_eq!(book.due(later + LEFT_OVER_DELAY).len(), 2, "none is lost");
    }

    #[test]
    fn a_refused_re_run_is_asked_again_until_its_window_ends() {
        let mut book = RerunBook::default();
        let t = Instant::now();
        assert!(book.admit("a", job(1), Disruption::PreemptionByScheduler, 5, t));
        let p = book.due(t).pop().expect("due now");
        assert!(book.due(t).is_empty());
        assert!(book.later(p, Duration::from_secs(30), t));
        assert_eq!(book.next_due(t), Some(Duration::from_secs(30)));
        assert!(book.due(t + Duration::from_secs(29)).is_empty());
        let p = book.due(t + Duration::from_secs(30)).pop().expect("due again");
        assert!(
            !book.later(p, Duration::from_secs(30), t + RERUN_WINDOW),
            "past its window"
        );
        assert_eq!(book.next_due(t), None);
    }
}
