//! The planner as it was before runner classes entered it (commit 7118205,
//! `crates/core/src/plan.rs` `plan`), frozen: a group without classes must still plan exactly
//! like this. Only the paths changed (`crate::` → `forgerunner_core::`) and the new
//! `create_classes` field is filled as the reconciler filled it then (`vec![None; create]`).

use std::collections::BTreeSet;

use forgerunner_core::budget::creation_allowance;
use forgerunner_core::forge::ForgeRunnerState;
use forgerunner_core::plan::{
    FAILURE_THROTTLE_THRESHOLD, ObservedRunner, Plan, PlanInput, Removal, RemovalReason, RunnerPhase,
};

pub fn old_plan(input: &PlanInput<'_>) -> Plan {
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
    let healthy = waiting
        .iter()
        .filter(|r| r.stuck.is_none() && !r.outdated)
        .count() as u32;
    // Runners only out of time to start keep covering demand that no healthy runner covers,
    // oldest (closest to starting) first.
    let mut patient_slots = wanted_waiting.saturating_sub(healthy);
    let mut replaced: BTreeSet<&str> = BTreeSet::new();
    for r in &waiting {
        let waits_out = r.stuck.as_ref().is_some_and(|s| s.cause.waits_out()) && !r.outdated;
        if waits_out && patient_slots > 0 {
            patient_slots -= 1;
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

    // The warm pool: up to `minRunners` started runners never time out (oldest first, the
    // ones the timeout would take); only idle runners above it do.
    let stranded = |r: &ObservedRunner| input.view.stranded.contains(&r.name);
    for r in current.iter().filter(|r| stranded(r)) {
        out.remove.push(active_removal(&r.name, RemovalReason::JobGone));
    }
    let current: Vec<&ObservedRunner> = current.into_iter().filter(|r| !stranded(r)).collect();
    let warm: BTreeSet<&str> = current
        .iter()
        .filter(|r| r.phase == RunnerPhase::Running)
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
    let waiting_kept_count = waiting_kept.len() as u32;

    if input.view.complete {
        let keep = wanted_waiting.min(max.saturating_sub(working));
        let excess = waiting_kept_count.saturating_sub(keep);
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
            for r in candidates.into_iter().take(excess as usize) {
                out.remove.push(active_removal(&r.name, RemovalReason::ScaleDown));
            }
        }
    }
    let headroom = max.saturating_sub(occupied);
    out.create = wanted_waiting.saturating_sub(waiting_kept_count).min(headroom);

    if input.failures.creation_held(input.now) && out.create > 0 {
        out.throttled = true;
        out.create = 0;
    }
    if input.failures.consecutive >= FAILURE_THROTTLE_THRESHOLD && out.create > 0 {
        out.throttled = true;
        out.create = u32::from(active.is_empty());
    }
    let allowance = creation_allowance(out.create, input.budget.as_ref(), input.now);
    if allowance.throttled {
        out.cut_by_budget = Some(out.create);
        out.create = allowance.create;
    }

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
    out.create_classes = vec![None; out.create as usize];
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
