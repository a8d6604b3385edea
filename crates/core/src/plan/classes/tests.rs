//! The planner with runner classes: one case per rule, each through [`crate::plan::plan`].

use std::collections::BTreeMap;

use crate::forge::{ForgeRunnerState, ForgeView};
use crate::plan::{ClassLimit, Classes, ObservedRunner, Plan, PlanInput, RemovalReason, RunnerPhase, plan};
use crate::startup::{StartupFailure, Stuck};
use ForgeRunnerState::{Busy, Idle, Unknown};
use RunnerPhase::{Pending, Running};

const SMALL: usize = 0;
const LARGE: usize = 1;

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

/// A group with `small` and `large` (at most `large_max`) and what it observes.
struct Case {
    min: u32,
    max: u32,
    large_max: Option<u32>,
    idle_timeout: u32,
    runners: Vec<ObservedRunner>,
    /// Runner name → class name.
    of_runner: BTreeMap<String, String>,
    /// The class each listed job wants, oldest first.
    wanted: Vec<Option<usize>>,
    view: ForgeView,
    failures: u32,
}

fn case(max: u32) -> Case {
    Case {
        min: 0,
        max,
        large_max: None,
        idle_timeout: 600,
        runners: vec![],
        of_runner: BTreeMap::new(),
        wanted: vec![],
        view: ForgeView::default(),
        failures: 0,
    }
}

impl Case {
    /// Adds `runner` of `class` (`None`: the group's own).
    fn runner(mut self, runner: ObservedRunner, class: Option<&str>) -> Self {
        if let Some(c) = class {
            self.of_runner.insert(runner.name.clone(), c.to_owned());
        }
        self.runners.push(runner);
        self
    }

    /// Lists jobs wanting these classes, oldest first; the forge counts them all.
    fn jobs(mut self, wanted: &[Option<usize>]) -> Self {
        self.wanted = wanted.to_vec();
        self.view.waiting_jobs = wanted.len() as u32;
        self
    }

    fn complete(mut self) -> Self {
        self.view.complete = true;
        self
    }

    fn plan(&self) -> Plan {
        let limits = [
            ClassLimit {
                name: "small".into(),
                max_runners: None,
            },
            ClassLimit {
                name: "large".into(),
                max_runners: self.large_max,
            },
        ];
        plan(&PlanInput {
            min_runners: self.min,
            max_runners: self.max,
            idle_timeout_seconds: self.idle_timeout,
            runners: &self.runners,
            view: &self.view,
            ghosts: &[],
            failures: crate::testing::failure_history(self.failures, false),
            budget: None,
            now: crate::testing::TEST_NOW,
            scale_down_delay_seconds: 0,
            surplus: None,
            classes: Classes {
                limits: &limits,
                wanted: &self.wanted,
                of_runner: &self.of_runner,
            },
        })
    }
}

fn s(name: &str) -> Option<String> {
    Some(name.to_owned())
}

fn removed(p: &Plan) -> Vec<(&str, RemovalReason)> {
    let mut out: Vec<(&str, RemovalReason)> = p.remove.iter().map(|x| (x.name.as_str(), x.reason)).collect();
    out.sort();
    out
}

#[test]
fn an_idle_small_runner_does_not_cover_a_large_job() {
    let p = case(4)
        .runner(r("g-s", Running, Idle), Some("small"))
        .jobs(&[Some(LARGE)])
        .plan();
    assert_eq!(p.create_classes, [s("large")]);
    assert_eq!(p.create, 1);
    assert!(p.remove.is_empty(), "the small runner is young: {p:?}");
    // Nor a large runner a small job, which it might take: the small job gets its own.
    let p = case(4)
        .runner(r("g-l", Running, Idle), Some("large"))
        .jobs(&[Some(SMALL)])
        .plan();
    assert_eq!(p.create_classes, [s("small")]);
}

#[test]
fn two_sizes_of_jobs_get_two_sizes_of_runners_and_no_second_one() {
    let p = case(4).jobs(&[Some(SMALL), Some(LARGE)]).plan();
    assert_eq!(p.create_classes, [s("small"), s("large")]);
    // A large runner on its way covers the large job.
    let p = case(4)
        .runner(r("g-l", Pending, Unknown), Some("large"))
        .jobs(&[Some(LARGE), Some(SMALL)])
        .plan();
    assert_eq!(p.create_classes, [s("small")]);
    // A busy one covers nothing.
    let p = case(4)
        .runner(r("g-l", Running, Busy), Some("large"))
        .jobs(&[Some(LARGE), Some(SMALL)])
        .plan();
    assert_eq!(p.create_classes, [s("large"), s("small")]);
}

#[test]
fn the_oldest_jobs_get_the_room_the_group_has() {
    let p = case(2)
        .runner(r("g-b", Running, Busy), None)
        .jobs(&[Some(LARGE), None, Some(SMALL)])
        .plan();
    assert_eq!(p.create_classes, [s("large")]);
    assert!(p.at_max);
}

#[test]
fn a_full_class_waits_and_takes_no_room_from_the_others() {
    let mut c =
        case(3)
            .runner(r("g-l", Running, Busy), Some("large"))
            .jobs(&[Some(LARGE), Some(LARGE), Some(SMALL)]);
    c.large_max = Some(1);
    assert_eq!(c.plan().create_classes, [s("small")]);
    c.large_max = Some(2);
    assert_eq!(c.plan().create_classes, [s("large"), s("small")]);
}

#[test]
fn the_warm_pool_is_the_groups_own() {
    let mut c = case(4)
        .runner(r("g-s", Running, Idle), Some("small"))
        .runner(r("g-o", Running, Idle), None);
    c.min = 2;
    assert_eq!(
        c.plan().create_classes,
        [None],
        "the small runner is not part of the pool"
    );
    // Past the idle timeout the small runner goes; the group's own stays.
    c.idle_timeout = 5;
    assert_eq!(removed(&c.plan()), [("g-s", RemovalReason::IdleTimeout)]);
}

#[test]
fn scale_down_takes_runners_of_classes_with_nothing_to_do() {
    let c = case(4)
        .runner(r("g-s", Running, Idle), Some("small"))
        .runner(r("g-l", Running, Idle), Some("large"))
        .jobs(&[Some(LARGE)])
        .complete();
    let p = c.plan();
    assert_eq!(removed(&p), [("g-s", RemovalReason::ScaleDown)]);
    assert!(p.create_classes.is_empty());
    // At maxRunners with the large job uncovered: the small runner goes, the large one comes
    // when its room is free.
    let p = case(1)
        .runner(r("g-s", Running, Idle), Some("small"))
        .jobs(&[Some(LARGE)])
        .complete()
        .plan();
    assert_eq!(removed(&p), [("g-s", RemovalReason::ScaleDown)]);
    assert!(p.create_classes.is_empty(), "the small pod still runs");
}

#[test]
fn a_runner_waiting_for_a_node_waits_for_its_own_class_only() {
    let mut unschedulable = r("g-l", Pending, Unknown);
    unschedulable.stuck = Some(Stuck {
        cause: StartupFailure::Unschedulable,
        message: "0/3 nodes are available".into(),
    });
    let c = case(4)
        .runner(unschedulable, Some("large"))
        .runner(r("g-s", Running, Idle), Some("small"))
        .jobs(&[Some(LARGE)]);
    let p = c.plan();
    assert!(
        p.remove.is_empty(),
        "the healthy small runner does not replace it: {p:?}"
    );
    assert_eq!(p.waiting_out.len(), 1);
    assert!(p.create_classes.is_empty());
}

#[test]
fn runners_of_a_class_the_spec_dropped_cover_nothing() {
    let p = case(4)
        .runner(r("g-x", Running, Idle), Some("gpu"))
        .jobs(&[None])
        .complete()
        .plan();
    assert_eq!(p.create_classes, [None]);
    assert_eq!(removed(&p), [("g-x", RemovalReason::ScaleDown)]);
}

#[test]
fn jobs_counted_but_not_listed_are_the_groups_own_and_taken_jobs_the_oldest() {
    let mut c = case(8).jobs(&[Some(LARGE)]);
    c.view.waiting_jobs = 3;
    assert_eq!(c.plan().create_classes, [s("large"), None, None]);
    // Runners took a job since the listing: the forge counts one of the two it lists.
    let mut c = case(8).jobs(&[Some(LARGE), Some(SMALL)]);
    c.view.waiting_jobs = 1;
    assert_eq!(c.plan().create_classes, [s("small")]);
}

#[test]
fn throttling_keeps_the_oldest_jobs_runner() {
    let mut c = case(8).jobs(&[Some(LARGE), Some(SMALL)]);
    c.failures = crate::plan::FAILURE_THROTTLE_THRESHOLD;
    let p = c.plan();
    assert!(p.throttled);
    assert_eq!(p.create_classes, [s("large")]);
    assert_eq!(p.create, 1);
}
