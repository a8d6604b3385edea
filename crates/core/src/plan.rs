//! The pure scaling planner: (spec, observed runners, the forge's view) → plan.
//!
//! Every scaling rule lives here, free of I/O, so it is tested exhaustively without a server.
//! The reconciler observes, calls [`plan`], applies the result and writes the status.

use std::collections::BTreeSet;

use jiff::Timestamp;

use crate::budget::{RateBudget, creation_allowance};
use crate::forge::{ForgeRunnerState, ForgeView};
use crate::startup::{StartupFailure, Stuck};

pub mod backoff;
pub mod classes;
pub mod memory;

pub use backoff::FailureHistory;
pub use classes::{ClassLimit, Classes};

use classes::{Kind, Kinds};

/// After this many consecutive runner failures, the group stops bursting: it creates at most
/// one runner at a time, and only when none is active, until a runner succeeds.
pub const FAILURE_THROTTLE_THRESHOLD: u32 = 5;

/// Lifecycle of a runner Job in the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RunnerPhase {
    /// Job created; pod not running yet (scheduling, pulling, starting).
    Pending,
    /// Runner container running.
    Running,
    /// Job deleted, pod still going away; occupies capacity until it is gone.
    Terminating,
    /// Job completed successfully (the runner ran its job and exited).
    Succeeded,
    /// Job failed (pod died, image-pull failure past the deadline, runner error).
    Failed,
}

impl RunnerPhase {
    /// Whether the runner is still alive and not on its way out.
    pub fn is_active(self) -> bool {
        matches!(self, RunnerPhase::Pending | RunnerPhase::Running)
    }

    /// Whether the runner's pod may still exist and so counts against `maxRunners`.
    pub fn occupies_capacity(self) -> bool {
        matches!(
            self,
            RunnerPhase::Pending | RunnerPhase::Running | RunnerPhase::Terminating
        )
    }

    /// Whether the Job has finished.
    pub fn is_finished(self) -> bool {
        matches!(self, RunnerPhase::Succeeded | RunnerPhase::Failed)
    }
}

/// One runner of the group as observed in the cluster, joined with the forge's view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedRunner {
    /// Runner name (= Job name).
    pub name: String,
    /// Phase of the runner Job.
    pub phase: RunnerPhase,
    /// The forge's view of the runner.
    pub forge_state: ForgeRunnerState,
    /// Seconds since the runner Job was created.
    pub age_seconds: u64,
    /// Seconds the runner has been running without its Job finishing, counted from the first
    /// pass that saw it running ([`memory::PlanMemory::note_running`]); 0 while pending. The
    /// idle timeout counts this, so a slow pull or node scale-up does not eat into it.
    pub running_seconds: u64,
    /// The runner has been seen busy before (recorded on the Job), so it is never idle again.
    pub ever_busy: bool,
    /// The runner has not started and will not ([`crate::startup::classify`]).
    pub stuck: Option<Stuck>,
    /// The runner's pod was built from an older spec (its template hash differs).
    pub outdated: bool,
}

impl ObservedRunner {
    /// A runner just made: pending, unknown to the forge, no time on any clock.
    pub fn fresh(name: impl Into<String>) -> ObservedRunner {
        ObservedRunner {
            name: name.into(),
            phase: RunnerPhase::Pending,
            forge_state: ForgeRunnerState::Unknown,
            age_seconds: 0,
            running_seconds: 0,
            ever_busy: false,
            stuck: None,
            outdated: false,
        }
    }
}

/// Everything the planner decides from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanInput<'a> {
    /// `spec.minRunners`.
    pub min_runners: u32,
    /// `spec.maxRunners`.
    pub max_runners: u32,
    /// Idle timeout in seconds for runners that never take a job.
    pub idle_timeout_seconds: u32,
    /// Runners of the group in the cluster, with the forge's state of each.
    pub runners: &'a [ObservedRunner],
    /// The forge's view: waiting jobs, whether it is complete enough to scale down on.
    pub view: &'a ForgeView,
    /// Runner rows the forge has listed offline, and not busy, for at least core's ghost grace
    /// (`reconcile::ledger::OfflineRows`): those without a Job in the cluster are ghosts, and
    /// the plan deregisters them.
    pub ghosts: &'a [String],
    /// Runner failures so far (from the status); creation backs off after them.
    pub failures: FailureHistory,
    /// What is left of the forge's API budget for the group's credential; creation slows down
    /// before it runs out ([`crate::budget::creation_allowance`]).
    pub budget: Option<RateBudget>,
    /// The clock of the pass.
    pub now: Timestamp,
    /// `spec.scaleDownDelaySeconds`: how long a surplus of waiting runners must last before it
    /// is removed.
    pub scale_down_delay_seconds: u32,
    /// The surplus earlier passes left and how long it has lasted
    /// ([`memory::PlanMemory::surplus`]); `None` when the last pass had none.
    pub surplus: Option<Surplus>,
    /// `spec.classes`: the class each waiting job wants and each runner is
    /// ([`Classes::NONE`] for a group without classes).
    pub classes: Classes<'a>,
}

/// Waiting runners beyond what demand asks for, and for how long there have been that many.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Surplus {
    /// How many runners.
    pub runners: u32,
    /// Seconds since the surplus appeared or last grew.
    pub seconds: u64,
}

/// Why the plan removes a runner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RemovalReason {
    /// The runner Job completed; clean it up.
    Succeeded,
    /// The runner Job failed; clean it up and count the failure.
    Failed,
    /// The runner never took a job within the idle timeout.
    IdleTimeout,
    /// Fewer jobs wait than idle runners do, on a view the forge calls complete.
    ScaleDown,
    /// Registered at the forge, offline, and no Job exists for it.
    Orphaned,
    /// The runner did not start, for this reason; it counts as a failure.
    StartupFailed(StartupFailure),
    /// The runner never took a job and its pod comes from an older spec: it is replaced.
    SpecChanged,
    /// The one job the runner was made for is gone at the forge (re-run, cancelled).
    JobGone,
}

impl RemovalReason {
    /// CamelCase name for Events and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            RemovalReason::Succeeded => "Succeeded",
            RemovalReason::Failed => "Failed",
            RemovalReason::IdleTimeout => "IdleTimeout",
            RemovalReason::ScaleDown => "ScaleDown",
            RemovalReason::Orphaned => "Orphaned",
            RemovalReason::StartupFailed(cause) => cause.as_str(),
            RemovalReason::SpecChanged => "SpecChanged",
            RemovalReason::JobGone => "JobGone",
        }
    }
}

/// One runner the plan removes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Removal {
    /// Runner name (= Job name).
    pub name: String,
    /// Why.
    pub reason: RemovalReason,
    /// Deregister at the forge first; if the forge says the runner is busy, keep the Job.
    pub deregister: bool,
    /// Delete the runner Job in the cluster.
    pub delete_job: bool,
    /// What Kubernetes said about a runner that did not start (quoted in the Event).
    pub message: Option<String>,
}

/// Counts for the status, computed from the observation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunnerCounts {
    /// Runners the demand asks for (capped at `maxRunners`).
    pub desired: u32,
    /// Runner Jobs whose pods may still run (pending, running or terminating): what counts
    /// against `maxRunners`.
    pub current: u32,
    /// Active runners not (yet) working on a job.
    pub idle: u32,
    /// Runners working on a job.
    pub running_jobs: u32,
    /// Jobs waiting for a runner.
    pub pending_jobs: u32,
    /// Of `idle`, the runners whose pod is not running yet.
    pub pending_runners: u32,
    /// Failed runner Jobs seen in this observation.
    pub failed: u32,
}

/// What the reconciler should do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Number of new runners to create.
    pub create: u32,
    /// The class of each runner to create (`None`: one of the group's own), `create` of them,
    /// in the order demand is served (oldest job first, the warm pool last).
    pub create_classes: Vec<Option<String>>,
    /// Runners to remove.
    pub remove: Vec<Removal>,
    /// Runners now busy that are not yet recorded as such on their Job.
    pub mark_busy: Vec<String>,
    /// Counts for the status.
    pub counts: RunnerCounts,
    /// Creation is held back because runners keep failing.
    pub throttled: bool,
    /// How many runners the plan would have created had the API budget not been low; `None`
    /// when the budget cut nothing.
    pub cut_by_budget: Option<u32>,
    /// Demand asks for more runners than `maxRunners` allows.
    pub at_max: bool,
    /// Waiting runners beyond demand that this plan keeps, for now, on a complete view
    /// (scale-down waits for the surplus to last `scaleDownDelaySeconds`); the caller records
    /// it ([`memory::PlanMemory::record_surplus`]).
    pub surplus: u32,
    /// Runners out of time to start (startup timeout, unschedulable) that the plan keeps
    /// because a waiting job needs them, with what Kubernetes says about each.
    pub waiting_out: Vec<(String, Stuck)>,
}

/// Decides what to create and remove. Pure: same input, same plan.
///
/// Rules (each covered by `plan/tests.rs`, `plan/classes/tests.rs` and the properties in
/// `tests/plan_props.rs` and `tests/plan_classes/`):
/// - Finished Jobs (succeeded or failed) are always cleaned up; failed ones never count toward
///   capacity.
/// - Pending, running and terminating runners occupy capacity: `occupied + create <= maxRunners`.
/// - Runners are *working* (busy now or ever), *waiting* (never took a job) or done at the forge
///   (`Finished`: neither; they only occupy capacity until their pod is gone).
/// - Creation, for every forge: `create = clamp(waitingJobs + minRunners - waiting, 0,
///   maxRunners - occupied)` (ARC's meaning of `minRunners`: idle runners on top of demand).
/// - With `spec.classes` ([`classes`]) the same rules hold per class: a job wants one class
///   (or the group's own runners), the warm pool is the group's own, and a waiting runner
///   covers only demand of its class. Jobs are served oldest first: one runner of its class
///   for each job no waiting runner of that class covers, while the group is below
///   `maxRunners` and the class below its own; a job of a full class waits and takes no room
///   from the others.
/// - Scale-down, only on a view the forge calls complete and only once the surplus has lasted
///   `scaleDownDelaySeconds` without growing: waiting runners beyond
///   `min(waitingJobs + minRunners, maxRunners - working)` are removed (with classes: beyond
///   what their own class's demand asks for), pending first, then those the forge does not
///   know or sees offline, then the youngest idle ones. (GitHub cancels an assignment no
///   runner took in time and assigns the job again a little later, up to three times: a
///   runner starting for it must not be thrown away in between.)
/// - A runner that never took a job within the idle timeout, counted from when it was first
///   seen running, is removed, except the warm pool: up to `minRunners` started idle runners
///   of the group's own live until used. A runner that is or ever was busy is never removed
///   while it runs.
/// - A runner that will not start (`stuck`) is removed as a failure, except one that only ran
///   out of time (startup timeout, unschedulable) while demand of its class still covers it:
///   node scale-up and large pulls take what they take, and a replacement would start no
///   sooner. An idle runner built from an older spec (`outdated`) is replaced; busy ones finish.
/// - A runner whose one job is gone at the forge (`stranded`: re-run under a new handle,
///   cancelled) is removed at once, unless it worked.
/// - While the failure backoff after the last runner failure lasts, nothing is created.
/// - After [`FAILURE_THROTTLE_THRESHOLD`] consecutive failures, at most one runner is created
///   at a time, and only when none is active.
/// - When the forge's API budget runs low, fewer runners are created
///   ([`crate::budget::creation_allowance`]).
pub fn plan(input: &PlanInput<'_>) -> Plan {
    let is_busy_now = |r: &ObservedRunner| r.forge_state == ForgeRunnerState::Busy;
    let done_at_forge = |r: &ObservedRunner| r.forge_state == ForgeRunnerState::Finished;
    let has_worked = |r: &ObservedRunner| r.ever_busy || is_busy_now(r);

    let mut out = Plan::default();
    let active: Vec<&ObservedRunner> = input.runners.iter().filter(|r| r.phase.is_active()).collect();
    let occupied = input
        .runners
        .iter()
        .filter(|r| r.phase.occupies_capacity())
        .count() as u32;

    // Finished runners: clean up; deregister when the forge still lists them.
    for r in input.runners.iter().filter(|r| r.phase.is_finished()) {
        let failed = r.phase == RunnerPhase::Failed;
        out.counts.failed += u32::from(failed);
        out.remove.push(Removal {
            name: r.name.clone(),
            reason: if failed {
                RemovalReason::Failed
            } else {
                RemovalReason::Succeeded
            },
            // A runner the forge saw finish is gone there already (ephemeral).
            deregister: !matches!(
                r.forge_state,
                ForgeRunnerState::Unknown | ForgeRunnerState::Finished
            ),
            delete_job: true,
            message: None,
        });
    }

    out.mark_busy = active
        .iter()
        .filter(|r| is_busy_now(r) && !r.ever_busy)
        .map(|r| r.name.clone())
        .collect();

    // A runner whose job the view no longer counts neither covers a job nor may be removed.
    let counted: Vec<&ObservedRunner> = active.iter().copied().filter(|r| !done_at_forge(r)).collect();
    // Runners that never took a job, oldest first; only these may be removed.
    let mut waiting: Vec<&ObservedRunner> = counted.iter().copied().filter(|r| !has_worked(r)).collect();
    waiting.sort_by(|a, b| {
        b.age_seconds
            .cmp(&a.age_seconds)
            .then_with(|| a.name.cmp(&b.name))
    });
    let working = counted.len() as u32 - waiting.len() as u32;

    // Runners that will not start, or were built from an older spec, go first; neither covers
    // demand, so the creation below replaces them (the stuck ones behind the backoff).
    let max = input.max_runners;
    // Saturating throughout: `waiting_jobs` comes from the forge and may be huge.
    let wanted_waiting = input.view.waiting_jobs.saturating_add(input.min_runners);
    // Demand and supply per class: a runner covers only demand of its own class.
    let kinds = Kinds::new(input.classes);
    let kind_of = |r: &ObservedRunner| kinds.index(kinds.of_runner(&r.name));
    let demand = kinds.demand(input.view.waiting_jobs, input.min_runners);
    let healthy = kinds.tally(
        waiting
            .iter()
            .filter(|r| r.stuck.is_none() && !r.outdated)
            .map(|r| r.name.as_str()),
    );
    // Runners only out of time to start keep covering demand of their class that no healthy
    // runner covers, oldest (closest to starting) first.
    let mut patient_slots: Vec<u32> = kinds
        .totals(&demand)
        .iter()
        .zip(&healthy)
        .map(|(wanted, healthy)| wanted.saturating_sub(*healthy))
        .collect();
    let mut replaced: BTreeSet<&str> = BTreeSet::new();
    for r in &waiting {
        let waits_out = r.stuck.as_ref().is_some_and(|s| s.cause.waits_out()) && !r.outdated;
        let slots = &mut patient_slots[kind_of(r)];
        if waits_out && *slots > 0 {
            *slots -= 1;
            if let Some(stuck) = &r.stuck {
                out.waiting_out.push((r.name.clone(), stuck.clone()));
            }
            continue;
        }
        if let Some(stuck) = &r.stuck {
            out.remove.push(Removal {
                message: Some(stuck.message.clone()),
                ..active_removal(&r.name, RemovalReason::StartupFailed(stuck.cause))
            });
            replaced.insert(r.name.as_str());
        } else if r.outdated {
            out.remove
                .push(active_removal(&r.name, RemovalReason::SpecChanged));
            replaced.insert(r.name.as_str());
        }
    }
    let current: Vec<&ObservedRunner> = waiting
        .iter()
        .copied()
        .filter(|r| !replaced.contains(r.name.as_str()))
        .collect();

    // The warm pool: up to `minRunners` started runners of the group's own never time out
    // (oldest first, the ones the timeout would take); only idle runners above it do.
    let stranded = |r: &ObservedRunner| input.view.stranded.contains(&r.name);
    for r in current.iter().filter(|r| stranded(r)) {
        out.remove.push(active_removal(&r.name, RemovalReason::JobGone));
    }
    let current: Vec<&ObservedRunner> = current.into_iter().filter(|r| !stranded(r)).collect();
    let warm: BTreeSet<&str> = current
        .iter()
        .filter(|r| r.phase == RunnerPhase::Running && kinds.of_runner(&r.name) == Kind::Group)
        .take(input.min_runners as usize)
        .map(|r| r.name.as_str())
        .collect();
    let timed_out: BTreeSet<&str> = current
        .iter()
        .filter(|r| !warm.contains(r.name.as_str()))
        .filter(|r| r.running_seconds >= u64::from(input.idle_timeout_seconds))
        .map(|r| r.name.as_str())
        .collect();
    for name in &timed_out {
        out.remove.push(active_removal(name, RemovalReason::IdleTimeout));
    }
    let waiting_kept: Vec<&ObservedRunner> = current
        .iter()
        .copied()
        .filter(|r| !timed_out.contains(r.name.as_str()))
        .collect();
    let supply = kinds.tally(waiting_kept.iter().map(|r| r.name.as_str()));

    if input.view.complete {
        // Each class keeps the waiting runners its own demand asks for, all classes together no
        // more than `maxRunners` leaves beside the working ones; the rest is surplus.
        let kept = kinds.kept(&demand, &supply, max.saturating_sub(working));
        let surplus: Vec<u32> = supply.iter().zip(&kept).map(|(s, k)| s - k).collect();
        let excess = surplus.iter().fold(0u32, |a, n| a.saturating_add(*n));
        let quiet_long_enough = input.scale_down_delay_seconds == 0
            || input.surplus.is_some_and(|s| {
                excess <= s.runners && s.seconds >= u64::from(input.scale_down_delay_seconds)
            });
        if excess > 0 && !quiet_long_enough {
            out.surplus = excess;
        } else if excess > 0 {
            let mut candidates = waiting_kept.clone();
            candidates.sort_by(|a, b| {
                scale_down_rank(a)
                    .cmp(&scale_down_rank(b))
                    .then_with(|| a.age_seconds.cmp(&b.age_seconds))
                    .then_with(|| a.name.cmp(&b.name))
            });
            let mut left = surplus;
            for r in candidates {
                let slot = &mut left[kind_of(r)];
                if *slot > 0 {
                    *slot -= 1;
                    out.remove.push(active_removal(&r.name, RemovalReason::ScaleDown));
                }
            }
        }
    }
    let headroom = max.saturating_sub(occupied);
    let occupying = kinds.tally(
        input
            .runners
            .iter()
            .filter(|r| r.phase.occupies_capacity())
            .map(|r| r.name.as_str()),
    );
    out.create_classes = kinds.creations(&demand, &supply, &occupying, headroom);

    let mut create = out.create_classes.len() as u32;
    if input.failures.creation_held(input.now) && create > 0 {
        out.throttled = true;
        create = 0;
    }
    if input.failures.consecutive >= FAILURE_THROTTLE_THRESHOLD && create > 0 {
        out.throttled = true;
        create = u32::from(active.is_empty());
    }
    let allowance = creation_allowance(create, input.budget.as_ref(), input.now);
    if allowance.throttled {
        out.cut_by_budget = Some(create);
        create = allowance.create;
    }
    // Cuts keep the runners for the oldest jobs.
    out.create_classes.truncate(create as usize);
    out.create = out.create_classes.len() as u32;

    // Ghosts: offline at the forge and no Job of ours; deregister only, once each even when the
    // forge lists a name twice.
    let known: BTreeSet<&str> = input.runners.iter().map(|r| r.name.as_str()).collect();
    let mut ghosts_seen: BTreeSet<&str> = BTreeSet::new();
    for name in input.ghosts {
        if !known.contains(name.as_str()) && ghosts_seen.insert(name.as_str()) {
            out.remove.push(Removal {
                name: name.clone(),
                reason: RemovalReason::Orphaned,
                deregister: true,
                delete_job: false,
                message: None,
            });
        }
    }

    out.counts.desired = working.saturating_add(wanted_waiting).min(max);
    // Terminating pods still run and count against `maxRunners`, so they are shown as current.
    out.counts.current = occupied;
    out.counts.running_jobs = working;
    out.counts.idle = current.len() as u32;
    out.counts.pending_runners = current.iter().filter(|r| r.phase == RunnerPhase::Pending).count() as u32;
    out.counts.pending_jobs = input.view.waiting_jobs;
    out.at_max = working
        .saturating_add(input.view.waiting_jobs)
        .saturating_add(input.min_runners)
        > max;
    out
}

fn active_removal(name: &str, reason: RemovalReason) -> Removal {
    Removal {
        name: name.to_owned(),
        reason,
        deregister: true,
        delete_job: true,
        message: None,
    }
}

/// Lower ranks are removed first on scale-down.
fn scale_down_rank(r: &ObservedRunner) -> u8 {
    match (r.phase, r.forge_state) {
        (RunnerPhase::Pending, _) => 0,
        (_, ForgeRunnerState::Unknown | ForgeRunnerState::Offline) => 1,
        _ => 2,
    }
}

#[cfg(test)]
mod tests;
