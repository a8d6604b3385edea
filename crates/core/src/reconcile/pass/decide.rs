//! Decide: the plan for this pass, from the observation, the status' failure history and the
//! ledger's clocks; and which job identities to record. Pure but for the ledger it updates.

use std::collections::BTreeMap;
use std::time::Duration;

use super::observe::Seen;
use crate::crd::RunnerGroup;
use crate::plan::{FailureHistory, Plan, PlanInput, plan};
use crate::reconcile::classes::{PlanClasses, runner_classes};
use crate::reconcile::identity::identities_to_record;
use crate::reconcile::ledger::Ledger;
use crate::reconcile::stalled::Oldest;
use crate::schedule::{ScheduleState, in_force};
use jiff::Timestamp;

/// What the decide step decided.
pub(super) struct Decided {
    /// The plan.
    pub plan: Plan,
    /// The failure history the plan started from.
    pub failures: FailureHistory,
    /// When the surplus the plan keeps may be removed, if it keeps one.
    pub surplus_due_in: Option<Duration>,
    /// Job identity annotations to record, by runner ([`crate::reconcile::identity`]).
    pub identities: BTreeMap<String, BTreeMap<String, String>>,
    /// The job that has waited longest for the group ([`crate::reconcile::stalled`]).
    pub oldest: Option<Oldest>,
    /// Where the group's schedules stand (`None` without schedules).
    pub schedule: Option<ScheduleState>,
    /// When a schedule window next opens or closes, to come back exactly then.
    pub schedule_due_in: Option<Duration>,
    /// The class of each classed runner of the group, by runner name.
    pub runner_classes: BTreeMap<String, String>,
}

/// Plans the pass and records in `ledger` what the next pass needs of it.
pub(super) fn decide(
    group: &RunnerGroup,
    seen: &Seen,
    calendar_now: Timestamp,
    ledger: &mut Ledger,
) -> Decided {
    let spec = &group.spec;
    let failures = FailureHistory::from_status(group.status.as_ref(), group.metadata.generation);
    let calendar = ledger.schedules.calendar(&spec.schedules, spec.max_runners);
    let (limits, schedule) = in_force(spec.min_runners, spec.max_runners, calendar, calendar_now);
    ledger.classes.settle(&seen.jobs);
    let runner_classes = runner_classes(&seen.jobs, &ledger.classes);
    let classes = PlanClasses::new(spec, &seen.view.waiting, runner_classes.clone());
    let plan = plan(&PlanInput {
        min_runners: limits.min_runners,
        max_runners: limits.max_runners,
        idle_timeout_seconds: spec.idle_timeout_seconds(),
        runners: &seen.runners,
        view: &seen.view,
        ghosts: &seen.ghosts,
        failures,
        budget: seen.view.budget,
        now: seen.now,
        scale_down_delay_seconds: spec.scale_down_delay_seconds(),
        surplus: ledger.plan.surplus(seen.now),
        classes: classes.input(),
    });
    ledger.plan.record_surplus(plan.surplus, seen.now);
    let delay = Duration::from_secs(u64::from(spec.scale_down_delay_seconds()));
    let surplus_due_in = ledger.plan.surplus_due_in(delay, seen.now);
    let mut identities = identities_to_record(&seen.jobs, &seen.view.job_identities);
    ledger.identity_writes.claim(&mut identities, &seen.jobs);
    ledger
        .waits
        .observe(&seen.view.waiting, seen.view.waiting_jobs, seen.now);
    Decided {
        plan,
        failures,
        surplus_due_in,
        identities,
        oldest: ledger.waits.oldest(),
        schedule_due_in: schedule.as_ref().and_then(|s| s.requeue_after(calendar_now)),
        schedule,
        runner_classes,
    }
}
