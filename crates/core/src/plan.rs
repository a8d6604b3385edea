//! The pure scaling planner: (spec, observed runners, forge demand) → plan.
//!
//! Every scaling rule lives here, free of I/O, so it is tested exhaustively without a server.
//! The reconciler observes, calls [`plan`], applies the result and writes the status.

use std::collections::BTreeSet;

use crate::crd::ForgeKind;
use crate::forge::{Demand, ForgeRunnerState};

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
    /// The runner has been seen busy before (recorded on the Job), so it is never idle again.
    pub ever_busy: bool,
}

/// Everything the planner decides from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanInput<'a> {
    /// The group's forge; picks the scaling rule.
    pub forge: ForgeKind,
    /// `spec.minRunners`.
    pub min_runners: u32,
    /// `spec.maxRunners`.
    pub max_runners: u32,
    /// Idle timeout in seconds for runners that never take a job.
    pub idle_timeout_seconds: u32,
    /// Runners of the group in the cluster.
    pub runners: &'a [ObservedRunner],
    /// The forge's demand.
    pub demand: &'a Demand,
    /// Runners registered at the forge for this group and not connected; those without a Job
    /// in the cluster are ghosts to deregister.
    pub offline_forge_runners: &'a [String],
    /// Consecutive runner failures so far (from the status).
    pub consecutive_failures: u32,
    /// Runners that succeeded while the forge's demand may still count their job (GitHub: no
    /// `JobCompleted` seen for them yet; Gitea: finished after the cached listing): each
    /// covers one job of `demand.jobs` that needs no new runner.
    pub recently_succeeded: u32,
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
    /// Demand fell below the runners we have (GitHub).
    ScaleDown,
    /// Registered at the forge, offline, and no Job exists for it.
    Orphaned,
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
    /// Failed runner Jobs seen in this observation.
    pub failed: u32,
}

/// What the reconciler should do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Number of new runners to create.
    pub create: u32,
    /// Runners to remove.
    pub remove: Vec<Removal>,
    /// Runners now busy that are not yet recorded as such on their Job.
    pub mark_busy: Vec<String>,
    /// Counts for the status.
    pub counts: RunnerCounts,
    /// Creation is held back because runners keep failing.
    pub throttled: bool,
}

/// Decides what to create and remove. Pure: same input, same plan.
///
/// Rules (each covered by `plan/tests.rs` and the properties in `tests/plan_props.rs`):
/// - Finished Jobs (succeeded or failed) are always cleaned up; failed ones never count toward
///   capacity.
/// - Pending, running and terminating runners occupy capacity: `occupied + create <= maxRunners`.
/// - GitHub: `desired = min(minRunners + totalAssignedJobs - recentlySucceeded, maxRunners)`;
///   runners beyond `min(minRunners + totalAssignedJobs, maxRunners)` that never took a job are
///   scaled down (pending first, then unregistered, then youngest idle), but only while the
///   forge reports runner activity. A runner whose job the forge already counts as finished is
///   neither working nor waiting: it only occupies capacity until its pod is gone.
/// - Gitea: `create = clamp(queued + minRunners - notYetBusy, 0, maxRunners - occupied)`.
/// - A runner that never took a job within the idle timeout is removed; a runner that is or ever
///   was busy is never removed while it runs.
/// - After [`FAILURE_THROTTLE_THRESHOLD`] consecutive failures, at most one runner is created
///   at a time, and only when none is active.
pub fn plan(input: &PlanInput<'_>) -> Plan {
    let busy_names: BTreeSet<&str> = input.demand.busy_runners.iter().map(String::as_str).collect();
    let is_busy_now =
        |r: &ObservedRunner| r.forge_state == ForgeRunnerState::Busy || busy_names.contains(r.name.as_str());
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
        });
    }

    out.mark_busy = active
        .iter()
        .filter(|r| is_busy_now(r) && !r.ever_busy && !done_at_forge(r))
        .map(|r| r.name.clone())
        .collect();

    // Runners still in the forge's count: the demand no longer includes the job of a runner
    // it saw finish, so such a runner neither covers a job nor may be removed.
    let counted: Vec<&ObservedRunner> = active.iter().copied().filter(|r| !done_at_forge(r)).collect();
    // Runners that never took a job, oldest first; only these may be removed.
    let mut waiting: Vec<&ObservedRunner> = counted.iter().copied().filter(|r| !has_worked(r)).collect();
    waiting.sort_by(|a, b| {
        b.age_seconds
            .cmp(&a.age_seconds)
            .then_with(|| a.name.cmp(&b.name))
    });
    let working = counted.len() as u32 - waiting.len() as u32;

    let timed_out: BTreeSet<&str> = waiting
        .iter()
        .filter(|r| r.age_seconds >= u64::from(input.idle_timeout_seconds))
        .map(|r| r.name.as_str())
        .collect();
    for name in &timed_out {
        out.remove.push(active_removal(name, RemovalReason::IdleTimeout));
    }
    let waiting_kept: Vec<&ObservedRunner> = waiting
        .iter()
        .copied()
        .filter(|r| !timed_out.contains(r.name.as_str()))
        .collect();
    let waiting_kept_count = waiting_kept.len() as u32;

    let max = input.max_runners;
    let headroom = max.saturating_sub(occupied);
    let wanted = match input.forge {
        ForgeKind::Github => {
            // ARC semantics: totalAssignedJobs counts assigned and running jobs.
            let jobs = input.demand.jobs.saturating_sub(input.recently_succeeded);
            let desired = input.min_runners.saturating_add(jobs).min(max);
            out.counts.desired = desired;
            let kept = working + waiting_kept_count;
            // The finished-runner discount may overshoot (a job can be counted done before its
            // runner's pod exits): it only ever holds creation back, never removes a runner.
            let keep_at_least = input.min_runners.saturating_add(input.demand.jobs).min(max);
            if kept > keep_at_least && input.demand.knows_runner_activity {
                // Scale down: drop runners that never registered first, then the youngest idle.
                let mut candidates = waiting_kept.clone();
                candidates.sort_by(|a, b| {
                    scale_down_rank(a)
                        .cmp(&scale_down_rank(b))
                        .then_with(|| a.age_seconds.cmp(&b.age_seconds))
                        .then_with(|| a.name.cmp(&b.name))
                });
                let excess = (kept - keep_at_least) as usize;
                for r in candidates.into_iter().take(excess) {
                    out.remove.push(active_removal(&r.name, RemovalReason::ScaleDown));
                }
            }
            desired.saturating_sub(kept)
        }
        ForgeKind::Gitea => {
            let need = input
                .demand
                .jobs
                .saturating_add(input.min_runners)
                .saturating_sub(waiting_kept_count)
                .saturating_sub(input.recently_succeeded);
            // Saturating: `jobs` comes from the forge and may be huge; bad input never panics.
            out.counts.desired = working
                .saturating_add(waiting_kept_count)
                .saturating_add(need)
                .min(max);
            need
        }
    };
    out.create = wanted.min(headroom);

    if input.consecutive_failures >= FAILURE_THROTTLE_THRESHOLD && out.create > 0 {
        out.throttled = true;
        out.create = u32::from(active.is_empty());
    }

    // Ghosts: offline at the forge and no Job of ours; deregister only, once each even when the
    // forge lists a name twice.
    let known: BTreeSet<&str> = input.runners.iter().map(|r| r.name.as_str()).collect();
    let mut ghosts_seen: BTreeSet<&str> = BTreeSet::new();
    for name in input.offline_forge_runners {
        if !known.contains(name.as_str()) && ghosts_seen.insert(name.as_str()) {
            out.remove.push(Removal {
                name: name.clone(),
                reason: RemovalReason::Orphaned,
                deregister: true,
                delete_job: false,
            });
        }
    }

    // Terminating pods still run and count against `maxRunners`, so they are shown as current.
    out.counts.current = occupied;
    out.counts.running_jobs = working;
    out.counts.idle = waiting.len() as u32;
    out.counts.pending_jobs = match input.forge {
        // totalAssignedJobs includes the jobs already running on our runners.
        ForgeKind::Github => input
            .demand
            .jobs
            .saturating_sub(input.recently_succeeded)
            .saturating_sub(working),
        ForgeKind::Gitea => input.demand.jobs,
    };
    out
}

fn active_removal(name: &str, reason: RemovalReason) -> Removal {
    Removal {
        name: name.to_owned(),
        reason,
        deregister: true,
        delete_job: true,
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
