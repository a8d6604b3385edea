//! Properties of the planner over random observations: runners in every state at once, huge or
//! zero demand, duplicate forge listings, any failure count.

use std::collections::BTreeSet;

use forgerunner_core::forge::{ForgeRunnerState, ForgeView};
use forgerunner_core::plan::{
    FAILURE_THROTTLE_THRESHOLD, ObservedRunner, Plan, PlanInput, RemovalReason, RunnerPhase, plan,
};
use forgerunner_core::startup::{StartupFailure, Stuck};
use proptest::prelude::*;

/// An owned observation, so proptest can generate and shrink it.
#[derive(Clone, Debug)]
struct Observation {
    min: u32,
    max: u32,
    idle_timeout: u32,
    runners: Vec<ObservedRunner>,
    view: ForgeView,
    ghosts: Vec<String>,
    failures: u32,
    held: bool,
}

impl Observation {
    fn input(&self) -> PlanInput<'_> {
        PlanInput {
            min_runners: self.min,
            max_runners: self.max,
            idle_timeout_seconds: self.idle_timeout,
            runners: &self.runners,
            view: &self.view,
            ghosts: &self.ghosts,
            failures: forgerunner_core::testing::failure_history(self.failures, self.held),
            budget: None,
            now: forgerunner_core::testing::TEST_NOW,
            scale_down_delay_seconds: 0,
            surplus: None,
            classes: forgerunner_core::plan::Classes::NONE,
        }
    }

    fn plan(&self) -> Plan {
        plan(&self.input())
    }

    fn occupied(&self) -> u32 {
        self.runners
            .iter()
            .filter(|r| r.phase.occupies_capacity())
            .count() as u32
    }

    fn busy_or_ever_busy(&self, r: &ObservedRunner) -> bool {
        r.ever_busy || r.forge_state == ForgeRunnerState::Busy
    }

    /// Active runners that never took a job, are counted by the forge, and are neither stuck nor
    /// outdated: the ones that cover demand. Oldest first.
    fn waiting(&self) -> Vec<&ObservedRunner> {
        let mut w: Vec<&ObservedRunner> = self
            .runners
            .iter()
            .filter(|r| r.phase.is_active() && !self.busy_or_ever_busy(r))
            .filter(|r| r.forge_state != ForgeRunnerState::Finished)
            .filter(|r| r.stuck.is_none() && !r.outdated)
            .collect();
        w.sort_by(|a, b| {
            b.age_seconds
                .cmp(&a.age_seconds)
                .then_with(|| a.name.cmp(&b.name))
        });
        w
    }

    /// The warm pool: up to `min` started waiting runners, oldest first.
    fn warm(&self) -> BTreeSet<String> {
        self.waiting()
            .into_iter()
            .filter(|r| r.phase == RunnerPhase::Running)
            .take(self.min as usize)
            .map(|r| r.name.clone())
            .collect()
    }

    /// Waiting runners the idle timeout takes.
    fn stale(&self) -> BTreeSet<String> {
        let warm = self.warm();
        self.waiting()
            .into_iter()
            .filter(|r| !warm.contains(&r.name) && r.age_seconds >= u64::from(self.idle_timeout))
            .map(|r| r.name.clone())
            .collect()
    }
}

fn phase() -> impl Strategy<Value = RunnerPhase> {
    prop_oneof![
        Just(RunnerPhase::Pending),
        Just(RunnerPhase::Running),
        Just(RunnerPhase::Terminating),
        Just(RunnerPhase::Succeeded),
        Just(RunnerPhase::Failed),
    ]
}

fn forge_state() -> impl Strategy<Value = ForgeRunnerState> {
    prop_oneof![
        Just(ForgeRunnerState::Unknown),
        Just(ForgeRunnerState::Idle),
        Just(ForgeRunnerState::Busy),
        Just(ForgeRunnerState::Offline),
        Just(ForgeRunnerState::Finished),
    ]
}

fn observation() -> impl Strategy<Value = Observation> {
    // Flags: 0 = stuck, 1 = outdated, anything else neither.
    let runner = (phase(), forge_state(), 0u64..2_000, any::<bool>(), 0u8..8);
    (
        any::<bool>(),
        0u32..8,
        0u32..10,
        1u32..1_200,
        prop::collection::vec(runner, 0..14),
        prop_oneof![4 => 0u32..25, 1 => Just(u32::MAX)],
        prop::collection::vec(0usize..20, 0..6),
        0u32..(FAILURE_THROTTLE_THRESHOLD * 2),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(complete, min, max, idle_timeout, runners, jobs, offline_idx, failures, held)| {
                let runners: Vec<ObservedRunner> = runners
                    .into_iter()
                    .enumerate()
                    .map(
                        |(i, (phase, forge_state, age_seconds, ever_busy, flags))| ObservedRunner {
                            name: format!("rg-{i:02}"),
                            phase,
                            forge_state,
                            age_seconds,
                            running_seconds: age_seconds,
                            ever_busy,
                            stuck: (flags == 0).then(|| Stuck {
                                cause: StartupFailure::ImagePullFailed,
                                message: "Back-off pulling image".to_owned(),
                            }),
                            outdated: flags == 1,
                        },
                    )
                    .collect();
                // Indices past the runner list name runners the cluster does not have (ghosts).
                let name = |i: usize| format!("rg-{i:02}");
                Observation {
                    min,
                    max,
                    idle_timeout,
                    runners,
                    view: ForgeView {
                        waiting_jobs: jobs,
                        complete,
                        ..ForgeView::default()
                    },
                    ghosts: offline_idx.into_iter().map(name).collect(),
                    failures,
                    held,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn never_exceeds_max_runners(obs in observation()) {
        let p = obs.plan();
        let occupied = obs.occupied();
        if occupied >= obs.max {
            prop_assert_eq!(p.create, 0);
        } else {
            prop_assert!(occupied + p.create <= obs.max, "occupied {} + create {} > max {}", occupied, p.create, obs.max);
        }
    }

    #[test]
    fn never_removes_a_running_busy_or_ever_busy_runner(obs in observation()) {
        let p = obs.plan();
        for removal in &p.remove {
            if let Some(r) = obs.runners.iter().find(|r| r.name == removal.name) {
                prop_assert!(!(r.phase.is_active() && obs.busy_or_ever_busy(r)), "removed {:?}", r);
                prop_assert!(r.phase != RunnerPhase::Terminating, "removed a terminating runner {:?}", r);
            }
        }
    }

    #[test]
    fn removals_are_unique(obs in observation()) {
        let p = obs.plan();
        let names: BTreeSet<&str> = p.remove.iter().map(|r| r.name.as_str()).collect();
        prop_assert_eq!(names.len(), p.remove.len(), "{:?}", p.remove);
    }

    #[test]
    fn finished_runners_are_always_cleaned(obs in observation()) {
        let p = obs.plan();
        for r in obs.runners.iter().filter(|r| r.phase.is_finished()) {
            let removal = p.remove.iter().find(|x| x.name == r.name);
            prop_assert!(removal.is_some_and(|x| x.delete_job), "finished {:?} not cleaned", r);
        }
        let failed = obs.runners.iter().filter(|r| r.phase == RunnerPhase::Failed).count() as u32;
        prop_assert_eq!(p.counts.failed, failed);
    }

    #[test]
    fn idle_past_timeout_is_removed_above_the_warm_pool(obs in observation()) {
        let p = obs.plan();
        let stale = obs.stale();
        for name in &stale {
            prop_assert!(p.remove.iter().any(|x| &x.name == name), "stale {} kept", name);
        }
        // The warm pool never times out (scale-down may still trim it to what maxRunners allows).
        for name in obs.warm() {
            prop_assert!(!p.remove.iter().any(|x| x.name == name && x.reason == RemovalReason::IdleTimeout), "warm {} timed out", name);
        }
        prop_assert!(obs.warm().len() <= obs.min as usize);
    }

    #[test]
    fn stuck_and_outdated_idle_runners_are_removed(obs in observation()) {
        let p = obs.plan();
        for r in obs.runners.iter().filter(|r| r.phase.is_active() && !obs.busy_or_ever_busy(r)) {
            if r.forge_state == ForgeRunnerState::Finished {
                continue;
            }
            let removal = p.remove.iter().find(|x| x.name == r.name);
            if r.stuck.is_some() {
                prop_assert!(removal.is_some_and(|x| matches!(x.reason, RemovalReason::StartupFailed(_)) && x.delete_job), "{:?}", r);
            } else if r.outdated {
                prop_assert!(removal.is_some_and(|x| x.reason == RemovalReason::SpecChanged), "{:?}", r);
            }
        }
    }

    #[test]
    fn ghosts_are_only_deregistered(obs in observation()) {
        let p = obs.plan();
        let known: BTreeSet<&str> = obs.runners.iter().map(|r| r.name.as_str()).collect();
        for removal in p.remove.iter().filter(|x| !known.contains(x.name.as_str())) {
            prop_assert!(obs.ghosts.contains(&removal.name), "{:?} is neither a runner nor a ghost", removal);
            prop_assert!(removal.deregister && !removal.delete_job);
        }
    }

    #[test]
    fn plan_is_deterministic_and_order_independent(obs in observation(), seed in any::<u64>()) {
        let first = obs.plan();
        prop_assert_eq!(&first, &obs.plan());
        // Observing the same runners in another order gives the same decisions.
        let mut shuffled = obs.clone();
        let n = shuffled.runners.len();
        if n > 1 {
            let mut state = seed | 1;
            for i in (1..n).rev() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                shuffled.runners.swap(i, (state % (i as u64 + 1)) as usize);
            }
        }
        let second = shuffled.plan();
        prop_assert_eq!(first.create, second.create);
        prop_assert_eq!(first.counts, second.counts);
        prop_assert_eq!(first.throttled, second.throttled);
        let set = |p: &Plan| p.remove.iter().map(|r| (r.name.clone(), r.reason)).collect::<BTreeSet<_>>();
        prop_assert_eq!(set(&first), set(&second));
        let busy = |p: &Plan| p.mark_busy.iter().cloned().collect::<BTreeSet<_>>();
        prop_assert_eq!(busy(&first), busy(&second));
    }

    #[test]
    fn scaling_rules_hold_when_not_throttled(obs in observation()) {
        let p = obs.plan();
        prop_assume!(!p.throttled);
        let headroom = obs.max.saturating_sub(obs.occupied());
        let stale = obs.stale();
        let done = |r: &ObservedRunner| r.forge_state == ForgeRunnerState::Finished;
        let counted: Vec<&ObservedRunner> =
            obs.runners.iter().filter(|r| r.phase.is_active() && !done(r)).collect();
        let working = counted.iter().filter(|r| obs.busy_or_ever_busy(r)).count() as u32;
        let not_yet_busy = obs.waiting().iter().filter(|r| !stale.contains(&r.name)).count() as u32;
        // One rule for every forge.
        let wanted = obs.view.waiting_jobs.saturating_add(obs.min);
        prop_assert_eq!(p.create, wanted.saturating_sub(not_yet_busy).min(headroom));
        prop_assert_eq!(p.counts.desired, working.saturating_add(wanted).min(obs.max));
        // Scale-down only on a complete view, and never below what the jobs and min ask for.
        let scaled = p.remove.iter().filter(|r| r.reason == RemovalReason::ScaleDown).count() as u32;
        if obs.view.complete {
            prop_assert_eq!(scaled, not_yet_busy.saturating_sub(wanted.min(obs.max.saturating_sub(working))));
        } else {
            prop_assert_eq!(scaled, 0);
        }
    }

    #[test]
    fn throttled_plans_create_at_most_one(obs in observation()) {
        let p = obs.plan();
        if p.throttled && obs.held {
            prop_assert_eq!(p.create, 0);
        } else if p.throttled {
            prop_assert!(obs.failures >= FAILURE_THROTTLE_THRESHOLD);
            prop_assert!(p.create <= 1);
            let any_active = obs.runners.iter().any(|r| r.phase.is_active());
            prop_assert!(!(any_active && p.create > 0));
        }
    }
}
