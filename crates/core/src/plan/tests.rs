//! Table-driven tests of the planner: one `#[test]` per row, each row an observation and the plan
//! it must produce. Every row is also checked against the capacity and busy-runner invariants.

use super::*;
use ForgeRunnerState::{Busy, Finished, Idle, Offline, Unknown};
use RemovalReason::{Failed as RFailed, IdleTimeout, Orphaned, ScaleDown, Succeeded as RSucceeded};
use RunnerPhase::{Failed, Pending, Running, Succeeded, Terminating};

const TIMEOUT: u32 = 600;

fn r(name: &str, phase: RunnerPhase, state: ForgeRunnerState) -> ObservedRunner {
    ObservedRunner {
        name: name.to_owned(),
        phase,
        forge_state: state,
        age_seconds: 10,
        running_seconds: 10,
        ever_busy: false,
        stuck: None,
        outdated: false,
    }
}

fn stuck(mut runner: ObservedRunner, cause: StartupFailure) -> ObservedRunner {
    runner.stuck = Some(Stuck {
        cause,
        message: "Back-off pulling image".to_owned(),
    });
    runner
}

fn outdated(mut runner: ObservedRunner) -> ObservedRunner {
    runner.outdated = true;
    runner
}

fn aged(mut runner: ObservedRunner, age_seconds: u64) -> ObservedRunner {
    runner.age_seconds = age_seconds;
    if runner.phase == RunnerPhase::Running {
        runner.running_seconds = age_seconds;
    }
    runner
}

fn running_for(mut runner: ObservedRunner, running_seconds: u64) -> ObservedRunner {
    runner.running_seconds = running_seconds;
    runner
}

fn was_busy(mut runner: ObservedRunner) -> ObservedRunner {
    runner.ever_busy = true;
    runner
}

/// One observation.
struct Case {
    min: u32,
    max: u32,
    idle_timeout: u32,
    runners: Vec<ObservedRunner>,
    view: ForgeView,
    ghosts: Vec<String>,
    failures: u32,
    held: bool,
    delay: u32,
    surplus: Option<Surplus>,
}

/// A view the forge calls complete (runner activity reported as it happens): scale-down allowed.
fn complete(min: u32, max: u32) -> Case {
    Case {
        min,
        max,
        idle_timeout: TIMEOUT,
        runners: vec![],
        view: ForgeView {
            complete: true,
            ..ForgeView::default()
        },
        ghosts: Vec::new(),
        failures: 0,
        held: false,
        delay: 0,
        surplus: None,
    }
}

/// A view from a listing (not complete): surplus runners only leave through the idle timeout.
fn partial(min: u32, max: u32) -> Case {
    Case {
        view: ForgeView::default(),
        ..complete(min, max)
    }
}

impl Case {
    fn runners(mut self, runners: Vec<ObservedRunner>) -> Self {
        self.runners = runners;
        self
    }
    fn jobs(mut self, jobs: u32) -> Self {
        self.view.waiting_jobs = jobs;
        self
    }
    fn offline(mut self, names: &[&str]) -> Self {
        self.ghosts = names.iter().map(|n| (*n).to_owned()).collect();
        self
    }
    fn incomplete(mut self) -> Self {
        self.view.complete = false;
        self
    }
    fn failures(mut self, failures: u32) -> Self {
        self.failures = failures;
        self
    }
    /// `scaleDownDelaySeconds`, and the surplus earlier passes recorded.
    fn quiet_for(mut self, delay: u32, surplus: Option<(u32, u64)>) -> Self {
        self.delay = delay;
        self.surplus = surplus.map(|(runners, seconds)| Surplus { runners, seconds });
        self
    }
    fn held(mut self) -> Self {
        self.held = true;
        self
    }
    fn plan(&self) -> Plan {
        plan(&PlanInput {
            min_runners: self.min,
            max_runners: self.max,
            idle_timeout_seconds: self.idle_timeout,
            runners: &self.runners,
            view: &self.view,
            ghosts: &self.ghosts,
            failures: crate::testing::failure_history(self.failures, self.held),
            budget: None,
            now: crate::testing::TEST_NOW,
            scale_down_delay_seconds: self.delay,
            surplus: self.surplus,
            classes: Classes::NONE,
        })
    }
}

/// What the plan must contain.
#[derive(Default)]
struct Want {
    create: u32,
    remove: Vec<(&'static str, RemovalReason)>,
    mark_busy: Vec<&'static str>,
    throttled: bool,
    desired: Option<u32>,
}

fn create(n: u32) -> Want {
    Want {
        create: n,
        ..Want::default()
    }
}

impl Want {
    fn remove(mut self, removals: &[(&'static str, RemovalReason)]) -> Self {
        self.remove = removals.to_vec();
        self
    }
    fn mark_busy(mut self, names: &[&'static str]) -> Self {
        self.mark_busy = names.to_vec();
        self
    }
    fn throttled(mut self) -> Self {
        self.throttled = true;
        self
    }
    fn desired(mut self, desired: u32) -> Self {
        self.desired = Some(desired);
        self
    }
}

fn check(case: Case, want: Want) {
    let got = case.plan();
    assert_eq!(got.create, want.create, "create; plan: {got:?}");
    let mut removed: Vec<(&str, RemovalReason)> =
        got.remove.iter().map(|r| (r.name.as_str(), r.reason)).collect();
    removed.sort();
    let mut expected = want.remove.clone();
    expected.sort();
    assert_eq!(removed, expected, "removals; plan: {got:?}");
    assert_eq!(got.mark_busy, want.mark_busy, "mark_busy; plan: {got:?}");
    assert_eq!(got.throttled, want.throttled, "throttled; plan: {got:?}");
    if let Some(desired) = want.desired {
        assert_eq!(got.counts.desired, desired, "desired; plan: {got:?}");
    }
    // Invariants every row must keep.
    let occupied = case
        .runners
        .iter()
        .filter(|r| r.phase.occupies_capacity())
        .count() as u32;
    assert!(
        occupied.saturating_add(got.create) <= case.max.max(occupied),
        "capacity exceeded: {got:?}"
    );
    for removal in &got.remove {
        if let Some(runner) = case.runners.iter().find(|r| r.name == removal.name) {
            let busy = runner.ever_busy || runner.forge_state == Busy;
            assert!(
                !(busy && runner.phase.is_active()),
                "removed an active busy runner: {removal:?}"
            );
        }
    }
}

macro_rules! cases {
    ($($name:ident: $case:expr => $want:expr;)*) => {
        $(#[test] fn $name() { check($case, $want) })*
    };
}

cases! {
    // One creation rule: create = clamp(waitingJobs + minRunners - waiting, 0, max - occupied).
    nothing_to_do: complete(0, 5) => create(0).desired(0);
    min_runners_only: complete(2, 5) => create(2).desired(2);
    jobs_on_top_of_min: complete(1, 10).jobs(3) => create(4).desired(4);
    desired_capped_by_max: complete(2, 5).jobs(10) => create(5).desired(5);
    min_above_max_still_capped: complete(5, 3) => create(3).desired(3);
    idle_runners_cover_jobs: complete(0, 5).jobs(2).runners(vec![r("a", Running, Idle), r("b", Running, Idle)])
        => create(0).desired(2);
    pending_runners_cover_jobs: complete(0, 5).jobs(2).runners(vec![r("a", Pending, Unknown), r("b", Pending, Unknown)])
        => create(0);
    busy_runners_are_working_not_waiting: complete(0, 5).jobs(2).runners(vec![r("a", Running, Busy), r("b", Running, Busy)])
        => create(2).mark_busy(&["a", "b"]).desired(4);
    already_marked_not_marked_again: complete(0, 5).runners(vec![was_busy(r("a", Running, Busy))])
        => create(0).desired(1);
    queued_jobs_create_runners: partial(0, 10).jobs(3) => create(3);
    min_on_top_of_queue: partial(1, 10).jobs(2) => create(3);
    not_yet_busy_subtracted: partial(0, 10).jobs(3).runners(vec![r("p1", Pending, Unknown), r("p2", Running, Idle)])
        => create(1);
    clamped_to_headroom: partial(0, 4).jobs(10).runners(vec![r("b", Running, Busy), r("t", Terminating, Unknown)])
        => create(2).mark_busy(&["b"]);
    enough_waiting_creates_nothing: partial(0, 10).jobs(1).runners(vec![r("a", Running, Idle), r("b", Running, Idle)])
        => create(0);
    max_zero_creates_nothing: partial(0, 0).jobs(5) => create(0);
    huge_queue_does_not_overflow: partial(3, 4).jobs(u32::MAX).runners(vec![r("b", Running, Busy)])
        => create(3).mark_busy(&["b"]).desired(4);
    terminating_occupies_capacity: complete(0, 3).jobs(3).runners(vec![r("t1", Terminating, Unknown), r("t2", Terminating, Unknown)])
        => create(1);
    terminating_blocks_creation: partial(0, 2).jobs(1).runners(vec![r("t1", Terminating, Unknown), r("t2", Terminating, Unknown)])
        => create(0);
    failed_frees_capacity: complete(0, 2).jobs(2).runners(vec![r("f1", Failed, Unknown), r("f2", Failed, Offline)])
        => create(2).remove(&[("f1", RFailed), ("f2", RFailed)]);
    succeeded_cleaned_up: complete(0, 2).runners(vec![was_busy(r("done", Succeeded, Unknown))])
        => create(0).remove(&[("done", RSucceeded)]);
    over_max_already_creates_nothing: complete(0, 2).jobs(3).runners(vec![r("a", Running, Busy), r("b", Running, Busy), r("c", Running, Busy)])
        => create(0).mark_busy(&["a", "b", "c"]);

    // Scale-down, only on a complete view.
    scale_down_idle_surplus: complete(0, 5).runners(vec![r("a", Running, Idle), r("b", Running, Idle)])
        => create(0).remove(&[("a", ScaleDown), ("b", ScaleDown)]);
    scale_down_prefers_pending: complete(1, 5).runners(vec![aged(r("old", Running, Idle), 300), r("new", Pending, Unknown)])
        => create(0).remove(&[("new", ScaleDown)]);
    scale_down_prefers_unregistered: complete(1, 5).runners(vec![r("reg", Running, Idle), r("unreg", Running, Unknown)])
        => create(0).remove(&[("unreg", ScaleDown)]);
    scale_down_youngest_idle_first: complete(1, 5).runners(vec![aged(r("old", Running, Idle), 100), aged(r("young", Running, Idle), 50)])
        => create(0).remove(&[("young", ScaleDown)]);
    never_scales_down_busy: complete(0, 5).runners(vec![r("a", Running, Busy), r("b", Running, Busy)])
        => create(0).mark_busy(&["a", "b"]);
    never_scales_down_ever_busy: complete(0, 5).runners(vec![was_busy(r("a", Running, Idle))]) => create(0);
    scale_down_only_the_excess: complete(0, 5).runners(vec![r("busy", Running, Busy), r("idle", Running, Idle)])
        => create(0).remove(&[("idle", ScaleDown)]).mark_busy(&["busy"]);
    scale_down_keeps_what_max_allows: complete(0, 2).jobs(5).runners(vec![r("busy", Running, Busy), r("a", Running, Idle), r("b", Running, Idle)])
        => create(0).remove(&[("a", ScaleDown)]).mark_busy(&["busy"]);
    partial_view_never_scales_down: partial(0, 10).runners(vec![r("a", Running, Idle), r("b", Pending, Unknown)])
        => create(0);

    // Idle timeout, and the warm pool it spares.
    idle_timeout_without_headroom: complete(0, 1).jobs(1).runners(vec![aged(r("stale", Running, Idle), 600)])
        => create(0).remove(&[("stale", IdleTimeout)]);
    idle_timeout_replaced_with_headroom: complete(0, 2).jobs(1).runners(vec![aged(r("stale", Running, Idle), 601)])
        => create(1).remove(&[("stale", IdleTimeout)]);
    warm_pool_outlives_the_idle_timeout: complete(3, 5).runners(vec![
            aged(r("w1", Running, Idle), 5000), aged(r("w2", Running, Idle), 1300), aged(r("w3", Running, Idle), 700)])
        => create(0).desired(3);
    warm_pool_on_a_partial_view_too: partial(1, 5).runners(vec![aged(r("w", Running, Idle), 5000)]) => create(0);
    only_idle_runners_above_min_time_out: complete(1, 5).jobs(1).runners(vec![
            aged(r("old", Running, Idle), 900), aged(r("older", Running, Idle), 1000)])
        => create(1).remove(&[("old", IdleTimeout)]);
    // Idle time counts from running: a pending runner is the startup timeout's (`stuck`).
    pending_runners_do_not_time_out_idle: partial(1, 5).runners(vec![aged(r("p", Pending, Unknown), 700)])
        => create(0);
    idle_time_counts_from_running_not_from_the_job: partial(0, 5).runners(vec![
            running_for(aged(r("slow-pull", Running, Idle), 1_000), 100)])
        => create(0);
    idle_time_from_running_still_times_out: partial(0, 5).runners(vec![
            running_for(aged(r("slow-pull", Running, Idle), 1_000), 600)])
        => create(0).remove(&[("slow-pull", IdleTimeout)]);

    // Runners that do not start, and the backoff.
    stuck_runner_removed_as_failure: partial(0, 1).jobs(1).runners(vec![stuck(r("s", Pending, Unknown), StartupFailure::ImagePullFailed)])
        => create(0).remove(&[("s", RemovalReason::StartupFailed(StartupFailure::ImagePullFailed))]);
    stuck_runner_replaced_when_capacity_allows: partial(0, 3).jobs(1).runners(vec![stuck(r("s", Pending, Unknown), StartupFailure::ImagePullFailed)])
        .failures(1) => create(1).remove(&[("s", RemovalReason::StartupFailed(StartupFailure::ImagePullFailed))]);
    // Out of time but not failed (node scale-up, a large pull): kept while a job waits for it,
    // as ARC keeps it; a replacement would start no sooner.
    unschedulable_runner_kept_while_its_job_waits: partial(0, 3).jobs(1).runners(vec![stuck(r("s", Pending, Unknown), StartupFailure::Unschedulable)])
        => create(0);
    slow_runner_kept_while_its_job_waits: complete(0, 3).jobs(1).runners(vec![stuck(r("s", Pending, Unknown), StartupFailure::StartupTimeout)])
        => create(0);
    slow_runners_beyond_demand_removed: partial(0, 3).jobs(1).runners(vec![
            aged(stuck(r("older", Pending, Unknown), StartupFailure::StartupTimeout), 400),
            aged(stuck(r("newer", Pending, Unknown), StartupFailure::StartupTimeout), 350)])
        => create(0).remove(&[("newer", RemovalReason::StartupFailed(StartupFailure::StartupTimeout))]);
    slow_runner_removed_when_a_healthy_one_covers_the_job: partial(0, 3).jobs(1).runners(vec![
            stuck(r("s", Pending, Unknown), StartupFailure::StartupTimeout), r("ok", Running, Idle)])
        => create(0).remove(&[("s", RemovalReason::StartupFailed(StartupFailure::StartupTimeout))]);
    slow_runner_without_demand_removed: partial(0, 3).runners(vec![stuck(r("s", Pending, Unknown), StartupFailure::StartupTimeout)])
        => create(0).remove(&[("s", RemovalReason::StartupFailed(StartupFailure::StartupTimeout))]);

    // Scale-down waits until the surplus has lasted scaleDownDelaySeconds. GitHub cancels an
    // assignment no runner took in time and assigns the job again a little later, up to three
    // times (actions/scaleset README.md, "Job Reassignment"); the runner starting for it must
    // survive the gap (ARC scales down only when quiet: ephemeralrunnerset_controller.go,
    // patchID == 0).
    surplus_is_kept_on_the_pass_it_appears: complete(0, 5).quiet_for(120, None)
        .runners(vec![r("starting", Pending, Unknown)]) => create(0);
    surplus_is_kept_until_the_delay_is_over: complete(0, 5).quiet_for(120, Some((1, 119)))
        .runners(vec![r("starting", Pending, Unknown)]) => create(0);
    surplus_goes_once_the_delay_is_over: complete(0, 5).quiet_for(120, Some((1, 120)))
        .runners(vec![r("starting", Pending, Unknown)]) => create(0).remove(&[("starting", ScaleDown)]);
    surplus_that_grew_waits_again: complete(0, 5).quiet_for(120, Some((1, 500)))
        .runners(vec![r("a", Pending, Unknown), r("b", Running, Idle)]) => create(0);
    no_delay_scales_down_at_once: complete(0, 5).quiet_for(0, None)
        .runners(vec![r("starting", Pending, Unknown)]) => create(0).remove(&[("starting", ScaleDown)]);
    held_creation_creates_nothing: partial(0, 3).jobs(2).held() => create(0).throttled();
    held_creation_still_cleans_up: partial(0, 3).jobs(2).held().runners(vec![stuck(r("s", Pending, Unknown), StartupFailure::QuotaExceeded)])
        => create(0).throttled().remove(&[("s", RemovalReason::StartupFailed(StartupFailure::QuotaExceeded))]);
    held_without_demand_is_not_throttled: complete(0, 3).held() => create(0);

    // Spec changes roll idle runners; busy ones finish.
    outdated_idle_runner_replaced: complete(1, 3).runners(vec![outdated(r("old", Running, Idle))])
        => create(1).remove(&[("old", RemovalReason::SpecChanged)]).desired(1);
    outdated_busy_runner_finishes: complete(0, 3).runners(vec![outdated(was_busy(r("busy", Running, Busy)))]) => create(0);
    outdated_pending_runner_replaced: partial(0, 3).jobs(1).runners(vec![outdated(r("p", Pending, Unknown))])
        => create(1).remove(&[("p", RemovalReason::SpecChanged)]);
    idle_timeout_spares_busy: complete(0, 2).runners(vec![aged(r("long", Running, Busy), 100_000)])
        => create(0).mark_busy(&["long"]);
    idle_timeout_removes: partial(0, 10).runners(vec![aged(r("stale", Running, Idle), 700)])
        => create(0).remove(&[("stale", IdleTimeout)]);
    idle_timeout_replaced_when_queued: partial(0, 5).jobs(1).runners(vec![aged(r("stale", Running, Unknown), 700)])
        => create(1).remove(&[("stale", IdleTimeout)]);

    // Failure throttle.
    throttle_waits_while_a_runner_is_active: partial(0, 10).jobs(3).failures(FAILURE_THROTTLE_THRESHOLD)
        .runners(vec![r("p", Pending, Unknown)]) => create(0).throttled();
    throttle_allows_one_when_none_active: partial(0, 10).jobs(3).failures(FAILURE_THROTTLE_THRESHOLD) => create(1).throttled();
    no_throttle_below_threshold: partial(0, 10).jobs(3).failures(FAILURE_THROTTLE_THRESHOLD - 1) => create(3);
    throttle_not_flagged_without_demand: complete(0, 10).failures(50) => create(0);

    // Ghost runners registered at the forge without a Job.
    ghost_is_deregistered: partial(0, 5).offline(&["ghost"]) => create(0).remove(&[("ghost", Orphaned)]);
    ghost_with_a_job_is_not_orphaned: partial(0, 5).offline(&["mine", "gone"]).runners(vec![r("mine", Terminating, Offline)])
        => create(0).remove(&[("gone", Orphaned)]);
    ghost_listed_twice_removed_once: partial(0, 5).offline(&["ghost", "ghost"]) => create(0).remove(&[("ghost", Orphaned)]);
}

#[test]
fn removal_flags_follow_the_reason() {
    let case = complete(0, 5)
        .runners(vec![
            r("done-unknown", Succeeded, Unknown),
            r("done-known", Failed, Offline),
            aged(r("stale", Running, Idle), 1_000),
        ])
        .offline(&["ghost"]);
    let got = case.plan();
    let find = |name: &str| {
        got.remove
            .iter()
            .find(|r| r.name == name)
            .cloned()
            .expect("removal")
    };
    let done_unknown = find("done-unknown");
    assert!(
        done_unknown.delete_job && !done_unknown.deregister,
        "nothing to deregister: {done_unknown:?}"
    );
    let done_known = find("done-known");
    assert!(done_known.delete_job && done_known.deregister, "{done_known:?}");
    let stale = find("stale");
    assert!(stale.delete_job && stale.deregister, "{stale:?}");
    let ghost = find("ghost");
    assert!(!ghost.delete_job && ghost.deregister, "{ghost:?}");
}

#[test]
fn counts_with_runners_in_every_state() {
    let case = complete(0, 10).jobs(1).runners(vec![
        r("pending", Pending, Unknown),
        r("idle", Running, Idle),
        r("working", Running, Busy),
        was_busy(r("was-busy", Running, Busy)),
        r("leaving", Terminating, Unknown),
        r("ok", Succeeded, Unknown),
        r("broken", Failed, Unknown),
    ]);
    let got = case.plan();
    let counts = got.counts;
    assert_eq!(counts.current, 5, "pending, running and terminating: {counts:?}");
    assert_eq!(counts.running_jobs, 2, "{counts:?}");
    assert_eq!(counts.idle, 2, "{counts:?}");
    assert_eq!(counts.failed, 1, "{counts:?}");
    assert_eq!(counts.pending_jobs, 1, "the waiting jobs: {counts:?}");
    assert_eq!(counts.desired, 3, "working plus waiting jobs: {counts:?}");
}

#[test]
fn removal_reason_names_are_camel_case() {
    let names: Vec<&str> = [RSucceeded, RFailed, IdleTimeout, ScaleDown, Orphaned]
        .into_iter()
        .map(RemovalReason::as_str)
        .collect();
    assert_eq!(
        names,
        ["Succeeded", "Failed", "IdleTimeout", "ScaleDown", "Orphaned"]
    );
}

#[test]
fn phase_predicates() {
    let all = [Pending, Running, Terminating, Succeeded, Failed];
    let active: Vec<_> = all.into_iter().filter(|p| p.is_active()).collect();
    let occupying: Vec<_> = all.into_iter().filter(|p| p.occupies_capacity()).collect();
    let finished: Vec<_> = all.into_iter().filter(|p| p.is_finished()).collect();
    assert_eq!(active, [Pending, Running]);
    assert_eq!(occupying, [Pending, Running, Terminating]);
    assert_eq!(finished, [Succeeded, Failed]);
}

/// A runner whose job the view no longer counts keeps its pod for a moment; it must not make
/// the runner that waits for the next job look surplus (that runner would be scaled down, then
/// made again).
#[test]
fn runner_finished_at_forge_neither_works_nor_waits() {
    let case = complete(0, 5).jobs(1).runners(vec![
        was_busy(r("done", Running, Finished)),
        r("next", Pending, Unknown),
    ]);
    let p = case.plan();
    assert_eq!(p.create, 0);
    assert!(p.remove.is_empty(), "nothing removed: {p:?}");
    assert_eq!(p.counts.running_jobs, 0);
    assert_eq!(p.counts.idle, 1);
    assert_eq!(p.counts.current, 2, "the finishing pod still occupies capacity");
    let full = complete(0, 2)
        .jobs(1)
        .runners(vec![r("done", Running, Finished), r("a", Running, Busy)]);
    assert_eq!(full.plan().create, 0, "no headroom while the finished pod runs");
}

/// A runner the forge saw finish was ephemeral and is gone there: no deregistration call.
#[test]
fn runner_finished_at_forge_is_not_deregistered() {
    let p = complete(0, 2)
        .runners(vec![
            was_busy(r("seen", Succeeded, Finished)),
            was_busy(r("unseen", Succeeded, Idle)),
        ])
        .plan();
    let dereg: Vec<(&str, bool)> = p.remove.iter().map(|r| (r.name.as_str(), r.deregister)).collect();
    assert_eq!(dereg, [("seen", false), ("unseen", true)]);
}

/// Without a complete view nobody knows which idle-looking runner just took a job: surplus
/// runners are left to the idle timeout.
#[test]
fn incomplete_view_never_scales_down() {
    let case = complete(0, 5)
        .jobs(0)
        .runners(vec![r("a", Running, Idle), r("b", Running, Idle)]);
    assert_eq!(
        case.plan().remove.len(),
        2,
        "with a complete view the surplus goes"
    );
    let p = case.incomplete().plan();
    assert_eq!(p.create, 0);
    assert!(p.remove.is_empty(), "{p:?}");
}

#[test]
fn a_kept_surplus_is_reported_for_the_memory_and_a_removed_one_is_not() {
    let runners = vec![r("a", Pending, Unknown), r("b", Running, Idle)];
    let kept = complete(0, 5)
        .quiet_for(120, None)
        .runners(runners.clone())
        .plan();
    assert_eq!(kept.surplus, 2);
    let removed = complete(0, 5)
        .quiet_for(120, Some((2, 130)))
        .runners(runners.clone())
        .plan();
    assert_eq!(removed.surplus, 0);
    assert_eq!(removed.remove.len(), 2);
    let covered = complete(0, 5)
        .jobs(2)
        .quiet_for(120, None)
        .runners(runners)
        .plan();
    assert_eq!(
        covered.surplus, 0,
        "no surplus while every waiting runner has a job to wait for"
    );
}

#[test]
fn a_runner_whose_job_is_gone_is_removed_at_once_unless_it_worked() {
    let mut case = partial(1, 5).jobs(1).runners(vec![
        r("stranded", Running, Offline),
        was_busy(r("worked", Running, Busy)),
    ]);
    case.view.stranded = ["stranded".to_owned(), "worked".to_owned()].into_iter().collect();
    let got = case.plan();
    let removed: Vec<(&str, RemovalReason)> =
        got.remove.iter().map(|r| (r.name.as_str(), r.reason)).collect();
    assert_eq!(
        removed,
        vec![("stranded", RemovalReason::JobGone)],
        "not the warm pool either"
    );
    assert_eq!(
        got.create, 2,
        "the waiting job and the warm runner get runners of their own"
    );
}
