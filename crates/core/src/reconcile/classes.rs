//! Runner classes in a pass: the class of each runner (its Job's label, or this process's
//! memory of a creation the store does not list yet), the counts per class the choice and the
//! status need, and the choice itself ([`crate::runner_class::choose`]). Pure but for the book
//! of in-flight creations, which the ledger keeps.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;

use crate::crd::{ClassStatus, RunnerGroupSpec};
use crate::forge::{ForgeRunnerState, WaitingJob};
use crate::plan::{ObservedRunner, Plan};
use crate::runner_class::{ChoiceInput, ClassCount, ClassMatch, choose, group_label_names, job_class};

/// The class of each runner this process created that the store does not list yet, by runner
/// name. Without it a runner just created would count as one of the group's own until its Job
/// is listed, and the next pass would make a second runner of its class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InFlightClasses(BTreeMap<String, String>);

impl InFlightClasses {
    /// Forgets the runners the store lists now (their Job carries the class).
    pub fn settle(&mut self, jobs: &[Arc<Job>]) {
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
pub fn runner_classes(jobs: &[Arc<Job>], in_flight: &InFlightClasses) -> BTreeMap<String, String> {
    let mut out = in_flight.0.clone();
    for job in jobs {
        if let (Some(name), Some(class)) = (job.metadata.name.as_ref(), job_class(job)) {
            out.insert(name.clone(), class.to_owned());
        }
    }
    out
}

/// Whether a runner waits for a job: active, never busy, and not done at the forge.
fn waits(r: &ObservedRunner) -> bool {
    r.phase.is_active()
        && !r.ever_busy
        && !matches!(r.forge_state, ForgeRunnerState::Busy | ForgeRunnerState::Finished)
}

/// The runners each class has (`None`: the group's own), after `plan`'s removals.
pub fn class_counts(
    runners: &[ObservedRunner],
    classes: &BTreeMap<String, String>,
    plan: &Plan,
) -> BTreeMap<Option<String>, ClassCount> {
    let removed: BTreeSet<&str> = plan.remove.iter().map(|r| r.name.as_str()).collect();
    let mut out: BTreeMap<Option<String>, ClassCount> = BTreeMap::new();
    for r in runners.iter().filter(|r| r.phase.occupies_capacity()) {
        let count = out.entry(classes.get(&r.name).cloned()).or_default();
        count.occupied += 1;
        if waits(r) && !removed.contains(r.name.as_str()) {
            count.covering += 1;
        }
    }
    out
}

/// The class of each runner `plan` creates (`None`: the group's own); see
/// [`crate::runner_class::choose`].
pub fn choose_classes(
    spec: &RunnerGroupSpec,
    runners: &[ObservedRunner],
    classes: &BTreeMap<String, String>,
    waiting: &[WaitingJob],
    plan: &Plan,
) -> Vec<Option<String>> {
    let matches = ClassMatch::of(spec);
    let existing = class_counts(runners, classes, plan);
    choose(&ChoiceInput {
        classes: &matches,
        group_labels: &group_label_names(spec),
        waiting,
        existing: &existing,
        create: plan.create,
    })
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
    use crate::plan::{Removal, RemovalReason, RunnerPhase};
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

    fn job(name: &str, class: Option<&str>) -> Arc<Job> {
        let mut labels = BTreeMap::new();
        if let Some(c) = class {
            labels.insert(CLASS_LABEL.to_owned(), c.to_owned());
        }
        Arc::new(Job {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            ..Job::default()
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

    #[test]
    fn waiting_runners_cover_jobs_of_their_class_unless_the_plan_removes_them() {
        let runners = [
            runner("g-a", RunnerPhase::Pending, ForgeRunnerState::Unknown),
            runner("g-b", RunnerPhase::Running, ForgeRunnerState::Busy),
            runner("g-c", RunnerPhase::Running, ForgeRunnerState::Idle),
            runner("g-d", RunnerPhase::Terminating, ForgeRunnerState::Unknown),
            runner("g-e", RunnerPhase::Running, ForgeRunnerState::Idle),
        ];
        let classes = BTreeMap::from([
            ("g-a".to_owned(), "large".to_owned()),
            ("g-b".to_owned(), "large".to_owned()),
            ("g-c".to_owned(), "large".to_owned()),
            ("g-d".to_owned(), "large".to_owned()),
        ]);
        let plan = Plan {
            remove: vec![Removal {
                name: "g-c".into(),
                reason: RemovalReason::IdleTimeout,
                deregister: true,
                delete_job: true,
                message: None,
            }],
            ..Plan::default()
        };
        let counts = class_counts(&runners, &classes, &plan);
        let large = counts[&Some("large".to_owned())];
        assert_eq!(
            (large.occupied, large.covering),
            (4, 1),
            "only g-a waits and stays"
        );
        assert_eq!(
            counts[&None],
            ClassCount {
                occupied: 1,
                covering: 1
            }
        );
    }

    #[test]
    fn the_choice_of_a_pass_gives_a_job_of_each_size_its_class() {
        let runners = [runner("g-a", RunnerPhase::Pending, ForgeRunnerState::Unknown)];
        let classes = BTreeMap::from([("g-a".to_owned(), "small".to_owned())]);
        let waiting = [
            WaitingJob {
                id: "1".into(),
                queued_at: None,
                labels: vec!["linux".into()],
            },
            WaitingJob {
                id: "2".into(),
                queued_at: None,
                labels: vec!["linux".into(), "large".into()],
            },
        ];
        let plan = Plan {
            create: 1,
            ..Plan::default()
        };
        let chosen = choose_classes(&spec(), &runners, &classes, &waiting, &plan);
        assert_eq!(
            chosen,
            [Some("large".to_owned())],
            "job 1 has its small runner coming"
        );
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
                    runners: 0,
                    busy: 0
                }
            ]
        );
    }
}
