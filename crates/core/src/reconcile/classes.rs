//! Runner classes in a pass: the class of each runner (its Job's label, or this process's
//! memory of a creation the store does not list yet), the class each waiting job wants, both
//! handed to the planner ([`crate::plan::Classes`]), which decides how many runners of each
//! class to create; and the runners per class for the status. Pure but for the book of
//! in-flight creations, which the ledger keeps.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::crd::{ClassStatus, RunnerGroupSpec};
use crate::forge::{ForgeRunnerState, WaitingJob};
use crate::plan::{ClassLimit, Classes, ObservedRunner};
use crate::runner_class::{ClassMatch, Wanted, group_label_names, job_class, wanted};
use crate::runner_job::ObservedJob;

/// The class of each runner this process created that the store does not list yet, by runner
/// name. Without it a runner just created would count as one of the group's own until its Job
/// is listed, and the next pass would make a second runner of its class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InFlightClasses(BTreeMap<String, String>);

impl InFlightClasses {
    /// Forgets the runners the store lists now (their Job carries the class).
    pub fn settle(&mut self, jobs: &[Arc<ObservedJob>]) {
        let present: BTreeSet<&str> = jobs.iter().filter_map(|j| j.metadata.name.as_deref()).collect();
        self.0.retain(|name, _| !present.contains(name.as_str()));
    }

    /// Takes in the classed runners a pass created, and forgets those it deleted.
    pub fn record(&mut self, created: &[(String, String)], deleted: &[String]) {
        self.0.extend(created.iter().cloned());
        for name in deleted {
            self.0.remove(name);
        }
    }
}

/// The class of each classed runner among `jobs` and the in-flight creations, by runner name.
pub fn runner_classes(jobs: &[Arc<ObservedJob>], in_flight: &InFlightClasses) -> BTreeMap<String, String> {
    let mut out = in_flight.0.clone();
    for job in jobs {
        if let (Some(name), Some(class)) = (job.metadata.name.as_ref(), job_class(job.as_ref())) {
            out.insert(name.clone(), class.to_owned());
        }
    }
    out
}

/// What the planner needs of the group's classes in one pass, owned for the pass
/// ([`PlanClasses::input`] lends it to [`crate::plan::PlanInput`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlanClasses {
    limits: Vec<ClassLimit>,
    wanted: Vec<Option<usize>>,
    of_runner: BTreeMap<String, String>,
}

impl PlanClasses {
    /// The classes of `spec`, the class each of the `waiting` jobs wants (oldest first; a job
    /// that names no class, or that no runner of the group could take, wants the group's own
    /// runners) and the class of each runner (`of_runner`, from [`runner_classes`]). Empty for
    /// a group without classes.
    pub fn new(spec: &RunnerGroupSpec, waiting: &[WaitingJob], of_runner: BTreeMap<String, String>) -> Self {
        if spec.classes.is_empty() {
            return PlanClasses::default();
        }
        let matches = ClassMatch::of(spec);
        let group = group_label_names(spec);
        let mut jobs: Vec<&WaitingJob> = waiting.iter().collect();
        // Oldest first; jobs without a queue time after those with one.
        jobs.sort_by(|a, b| {
            (a.queued_at.is_none(), a.queued_at, &a.id).cmp(&(b.queued_at.is_none(), b.queued_at, &b.id))
        });
        let wanted = jobs
            .iter()
            .map(|j| match wanted(&matches, &group, &j.labels) {
                Wanted::Class(i) => Some(i),
                Wanted::Group | Wanted::Nobody => None,
            })
            .collect();
        let limits = matches
            .into_iter()
            .map(|c| ClassLimit {
                name: c.name,
                max_runners: c.max_runners,
            })
            .collect();
        PlanClasses {
            limits,
            wanted,
            of_runner,
        }
    }

    /// The classes as the planner takes them.
    pub fn input(&self) -> Classes<'_> {
        Classes {
            limits: &self.limits,
            wanted: &self.wanted,
            of_runner: &self.of_runner,
        }
    }
}

/// `status.classes`: the runners of each class of the spec, in spec order (runners of a class
/// the spec no longer has are left out).
pub fn class_statuses(
    spec: &RunnerGroupSpec,
    runners: &[ObservedRunner],
    classes: &BTreeMap<String, String>,
) -> Vec<ClassStatus> {
    spec.classes
        .iter()
        .map(|c| {
            let ours = runners
                .iter()
                .filter(|r| r.phase.occupies_capacity())
                .filter(|r| classes.get(&r.name) == Some(&c.name));
            let (mut runners, mut busy) = (0u32, 0u32);
            for r in ours {
                runners += 1;
                if r.phase.is_active() && (r.ever_busy || r.forge_state == ForgeRunnerState::Busy) {
                    busy += 1;
                }
            }
            ClassStatus {
                name: c.name.clone(),
                runners,
                busy,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{ForgeKind, RunnerGroup};
    use crate::plan::RunnerPhase;
    use crate::runner_class::CLASS_LABEL;
    use crate::testing::RunnerGroupBuilder;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn runner(name: &str, phase: RunnerPhase, state: ForgeRunnerState) -> ObservedRunner {
        ObservedRunner {
            name: name.into(),
            phase,
            forge_state: state,
            age_seconds: 10,
            running_seconds: 0,
            ever_busy: false,
            stuck: None,
            outdated: false,
        }
    }

    fn job(name: &str, class: Option<&str>) -> Arc<ObservedJob> {
        let mut labels = BTreeMap::new();
        if let Some(c) = class {
            labels.insert(CLASS_LABEL.to_owned(), c.to_owned());
        }
        Arc::new(ObservedJob {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            ..ObservedJob::default()
        })
    }

    fn spec() -> RunnerGroupSpec {
        let g: RunnerGroup = RunnerGroupBuilder::new(ForgeKind::Gitea).build();
        let mut spec = g.spec;
        spec.classes = serde_json::from_value(serde_json::json!([
            {"name": "small", "labels": ["linux"]},
            {"name": "large", "labels": ["linux", "large"]}
        ]))
        .expect("classes");
        spec
    }

    #[test]
    fn a_creation_keeps_its_class_until_the_store_lists_its_job() {
        let mut book = InFlightClasses::default();
        book.record(
            &[("g-a".into(), "large".into()), ("g-b".into(), "small".into())],
            &[],
        );
        let jobs = vec![job("g-a", Some("large")), job("g-old", None)];
        let classes = runner_classes(&jobs, &book);
        assert_eq!(classes.get("g-a").map(String::as_str), Some("large"));
        assert_eq!(classes.get("g-b").map(String::as_str), Some("small"));
        assert!(
            !classes.contains_key("g-old"),
            "the group's own runner has no class"
        );
        book.settle(&jobs);
        book.record(&[], &["g-b".into()]);
        assert_eq!(
            book,
            InFlightClasses::default(),
            "listed and deleted runners are forgotten"
        );
    }

    fn waiting(id: &str, queued: Option<i64>, labels: &[&str]) -> WaitingJob {
        WaitingJob {
            id: id.into(),
            queued_at: queued.map(|t| jiff::Timestamp::from_second(t).expect("valid timestamp")),
            labels: labels.iter().map(|l| (*l).to_owned()).collect(),
            binding: None,
        }
    }

    #[test]
    fn the_planner_gets_the_class_of_each_job_oldest_first() {
        let jobs = [
            waiting("9", None, &["linux"]),
            waiting("3", Some(30), &["linux", "large"]),
            waiting("1", Some(10), &["self-hosted"]),
            waiting("2", Some(20), &["large", "gpu"]),
        ];
        let runners = BTreeMap::from([("g-a".to_owned(), "large".to_owned())]);
        let classes = PlanClasses::new(&spec(), &jobs, runners.clone());
        let input = classes.input();
        assert_eq!(
            input.wanted,
            [None, None, Some(1), Some(0)],
            "the group's job, a job no runner takes, large, then the one without a queue time"
        );
        assert_eq!(
            input.limits,
            [
                ClassLimit {
                    name: "small".into(),
                    max_runners: None
                },
                ClassLimit {
                    name: "large".into(),
                    max_runners: None
                }
            ]
        );
        assert_eq!(input.of_runner, &runners);
        let mut plain = spec();
        plain.classes.clear();
        assert_eq!(
            PlanClasses::new(&plain, &jobs, runners).input(),
            Classes::NONE,
            "a group without classes plans as one"
        );
    }

    #[test]
    fn status_counts_the_runners_of_each_class() {
        let runners = [
            runner("g-a", RunnerPhase::Pending, ForgeRunnerState::Unknown),
            runner("g-b", RunnerPhase::Running, ForgeRunnerState::Busy),
            runner("g-c", RunnerPhase::Succeeded, ForgeRunnerState::Finished),
        ];
        let classes = BTreeMap::from([
            ("g-a".to_owned(), "small".to_owned()),
            ("g-b".to_owned(), "large".to_owned()),
            ("g-c".to_owned(), "large".to_owned()),
        ]);
        let statuses = class_statuses(&spec(), &runners, &classes);
        assert_eq!(
            statuses,
            [
                ClassStatus {
                    name: "small".into(),
                    runners: 1,
                    busy: 0
                },
                ClassStatus {
                    name: "large".into(),
                    runners: 1,
                    busy: 1
                }
            ]
        );
    }
}
