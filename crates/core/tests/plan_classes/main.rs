//! Properties of the planner with runner classes over random observations: runners of every
//! class in every state, listed and unlisted jobs of every class, class limits, failures.

mod frozen;

use std::collections::BTreeMap;

use forgerunner_core::forge::{ForgeRunnerState, ForgeView};
use forgerunner_core::plan::{
    ClassLimit, Classes, FAILURE_THROTTLE_THRESHOLD, ObservedRunner, Plan, PlanInput, RemovalReason,
    RunnerPhase, plan,
};
use forgerunner_core::startup::{StartupFailure, Stuck};
use proptest::prelude::*;

/// The classes of every generated group; runners may also be of `gpu`, which the spec dropped.
const CLASSES: [&str; 2] = ["small", "large"];

/// An owned observation, so proptest can generate and shrink it.
#[derive(Clone, Debug)]
struct Observation {
    min: u32,
    max: u32,
    idle_timeout: u32,
    limits: Vec<ClassLimit>,
    runners: Vec<ObservedRunner>,
    /// Runner name → class.
    of_runner: BTreeMap<String, String>,
    wanted: Vec<Option<usize>>,
    view: ForgeView,
    failures: u32,
    held: bool,
    delay: u32,
}

impl Observation {
    fn input<'a>(&'a self, classes: Classes<'a>) -> PlanInput<'a> {
        PlanInput {
            min_runners: self.min,
            max_runners: self.max,
            idle_timeout_seconds: self.idle_timeout,
            runners: &self.runners,
            view: &self.view,
            ghosts: &[],
            failures: forgerunner_core::testing::failure_history(self.failures, self.held),
            budget: None,
            now: forgerunner_core::testing::TEST_NOW,
            scale_down_delay_seconds: self.delay,
            surplus: None,
            classes,
        }
    }

    fn classes(&self) -> Classes<'_> {
        Classes {
            limits: &self.limits,
            wanted: &self.wanted,
            of_runner: &self.of_runner,
        }
    }

    fn plan(&self) -> Plan {
        plan(&self.input(self.classes()))
    }

    fn class_of(&self, name: &str) -> Option<&str> {
        self.of_runner.get(name).map(String::as_str)
    }

    /// Runners of `class` whose pods may still run.
    fn occupying(&self, class: &str) -> u32 {
        self.runners
            .iter()
            .filter(|r| r.phase.occupies_capacity() && self.class_of(&r.name) == Some(class))
            .count() as u32
    }

    /// Runners of `class` that wait for a job and stay after the plan's removals.
    fn covering(&self, p: &Plan, class: &str) -> u32 {
        self.runners
            .iter()
            .filter(|r| self.class_of(&r.name) == Some(class))
            .filter(|r| r.phase.is_active() && !r.ever_busy)
            .filter(|r| !matches!(r.forge_state, ForgeRunnerState::Busy | ForgeRunnerState::Finished))
            .filter(|r| !p.remove.iter().any(|x| x.name == r.name))
            .count() as u32
    }

    /// Listed jobs the forge still counts that want `class` (the oldest listed are taken).
    fn jobs_wanting(&self, class: usize) -> u32 {
        let skip = self.wanted.len().saturating_sub(self.view.waiting_jobs as usize);
        self.wanted[skip..].iter().filter(|w| **w == Some(class)).count() as u32
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
    // Flags: 0 = stuck pulling, 1 = out of time to start, 2 = outdated, anything else none.
    // Class: 0 = the group's own, 1 = small, 2 = large, 3 = gpu (dropped from the spec).
    let runner = (
        phase(),
        forge_state(),
        0u64..2_000,
        any::<bool>(),
        0u8..10,
        0usize..4,
    );
    let job = prop_oneof![Just(None), Just(Some(0usize)), Just(Some(1usize))];
    (
        (any::<bool>(), 0u32..4, 0u32..10, 1u32..1_200),
        prop::collection::vec(proptest::option::of(1u32..4), 2),
        prop::collection::vec(runner, 0..12),
        prop::collection::vec(job, 0..10),
        // Jobs the forge counts beyond (positive) or below (negative) the listed ones.
        prop_oneof![3 => -3i64..4, 1 => Just(i64::from(u32::MAX))],
        (0u32..(FAILURE_THROTTLE_THRESHOLD * 2), prop::bool::weighted(0.2)),
        prop_oneof![3 => Just(0u32), 1 => Just(30u32)],
    )
        .prop_map(
            |((complete, min, max, idle_timeout), maxes, runners, wanted, extra, (failures, held), delay)| {
                let limits: Vec<ClassLimit> = CLASSES
                    .iter()
                    .zip(maxes)
                    .map(|(name, max_runners)| ClassLimit {
                        name: (*name).to_owned(),
                        max_runners,
                    })
                    .collect();
                let mut of_runner = BTreeMap::new();
                let runners = runners
                    .into_iter()
                    .enumerate()
                    .map(
                        |(i, (phase, forge_state, age_seconds, ever_busy, flags, class))| {
                            let name = format!("rg-{i:02}");
                            if let Some(c) = ["small", "large", "gpu"].get(class.wrapping_sub(1)) {
                                of_runner.insert(name.clone(), (*c).to_owned());
                            }
                            let cause = match flags {
                                0 => Some(StartupFailure::ImagePullFailed),
                                1 => Some(StartupFailure::Unschedulable),
                                _ => None,
                            };
                            ObservedRunner {
                                name,
                                phase,
                                forge_state,
                                age_seconds,
                                running_seconds: age_seconds,
                                ever_busy,
                                stuck: cause.map(|cause| Stuck {
                                    cause,
                                    message: "Back-off".to_owned(),
                                }),
                                outdated: flags == 2,
                            }
                        },
                    )
                    .collect();
                let listed = wanted.len() as i64;
                let waiting_jobs = u32::try_from((listed + extra).max(0)).unwrap_or(u32::MAX);
                Observation {
                    min,
                    max,
                    idle_timeout,
                    limits,
                    runners,
                    of_runner,
                    wanted,
                    view: ForgeView {
                        waiting_jobs,
                        complete,
                        ..ForgeView::default()
                    },
                    failures,
                    held,
                    delay,
                }
            },
        )
}

/// Everything but `create_classes`, which the old planner did not have.
fn same_but_classes(a: &Plan, b: &Plan) -> bool {
    let strip = |p: &Plan| Plan {
        create_classes: Vec::new(),
        ..p.clone()
    };
    strip(a) == strip(b)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Never more runners than the group's `maxRunners` over all classes, nor than a class's
    /// own; and `create` is the number of classes listed.
    #[test]
    fn never_past_the_groups_or_a_class_s_max(obs in observation()) {
        let p = obs.plan();
        prop_assert_eq!(p.create as usize, p.create_classes.len());
        let occupied = obs.runners.iter().filter(|r| r.phase.occupies_capacity()).count() as u32;
        prop_assert!(p.create == 0 || occupied + p.create <= obs.max, "{} + {} > {}", occupied, p.create, obs.max);
        for limit in &obs.limits {
            let made = p.create_classes.iter().filter(|c| c.as_deref() == Some(limit.name.as_str())).count() as u32;
            if let Some(max) = limit.max_runners {
                prop_assert!(made == 0 || obs.occupying(&limit.name) + made <= max, "{}: {} + {} > {}", limit.name, obs.occupying(&limit.name), made, max);
            }
        }
        prop_assert!(p.create_classes.iter().all(|c| c.as_deref() != Some("gpu")), "a dropped class made");
    }

    /// A job wanting class C is covered only by a waiting runner of C: with room enough and
    /// nothing throttling, each class gets one runner for each of its jobs beyond its own
    /// waiting runners, whatever the runners of the other classes.
    #[test]
    fn a_job_is_covered_only_by_a_runner_of_its_class(obs in observation()) {
        let mut roomy = obs.clone();
        roomy.max = 1_000;
        roomy.limits.iter_mut().for_each(|l| l.max_runners = None);
        roomy.failures = 0;
        roomy.held = false;
        let p = roomy.plan();
        for (i, name) in CLASSES.iter().enumerate() {
            let made = p.create_classes.iter().filter(|c| c.as_deref() == Some(*name)).count() as u32;
            let needs = roomy.jobs_wanting(i);
            prop_assert_eq!(made, needs.saturating_sub(roomy.covering(&p, name)), "class {}", name);
        }
        // Dropping every runner of one class changes nothing for the other.
        for (i, name) in CLASSES.iter().enumerate() {
            let other = CLASSES[1 - i];
            let mut without = roomy.clone();
            without.runners.retain(|r| roomy.class_of(&r.name) != Some(other));
            let q = without.plan();
            let made = |p: &Plan| p.create_classes.iter().filter(|c| c.as_deref() == Some(*name)).count();
            prop_assert_eq!(made(&p), made(&q), "class {} depends on {}'s runners", name, other);
        }
    }

    /// Scale-down never takes a waiting runner of a class that has a job no runner covers.
    #[test]
    fn scale_down_spares_a_class_whose_job_waits(obs in observation()) {
        let occupied = obs.runners.iter().filter(|r| r.phase.occupies_capacity()).count() as u32;
        if occupied > obs.max {
            // Over `maxRunners` (a schedule lowered it), waiting runners go whatever they wait for.
            return Ok(());
        }
        let p = obs.plan();
        for (i, name) in CLASSES.iter().enumerate() {
            let uncovered = obs.jobs_wanting(i) > obs.covering(&p, name);
            let scaled = p.remove.iter().any(|x| x.reason == RemovalReason::ScaleDown && obs.class_of(&x.name) == Some(*name));
            prop_assert!(!(uncovered && scaled), "class {} lost a runner with a job waiting: {:?}", name, p.remove);
        }
    }

    /// A group without classes plans exactly as the planner did before classes, every runner
    /// it creates its own.
    #[test]
    fn without_classes_the_plan_is_the_old_one(obs in observation()) {
        let p = plan(&obs.input(Classes::NONE));
        let old = frozen::old_plan(&obs.input(Classes::NONE));
        prop_assert_eq!(&p, &old);
        prop_assert!(p.create_classes.iter().all(Option::is_none));
    }

    /// Classes nobody uses (every job wants the group's own runners, every runner is one)
    /// change nothing.
    #[test]
    fn classes_nobody_uses_change_nothing(obs in observation()) {
        let mut unused = obs.clone();
        unused.of_runner.clear();
        unused.wanted.iter_mut().for_each(|w| *w = None);
        let p = unused.plan();
        let old = frozen::old_plan(&unused.input(Classes::NONE));
        prop_assert!(same_but_classes(&p, &old), "{:?}\nvs\n{:?}", p, old);
        prop_assert_eq!(p.create_classes, old.create_classes);
    }
}
