//! Observation: the group's runner Jobs (from the reflector store) mapped to the planner's
//! [`ObservedRunner`]s, then joined with the forge's view. Pure: the store snapshot, the forge's
//! view and the clock come in.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::Timestamp;

use super::ledger::{ConnectedSince, InFlight, Registrations};
use crate::crd::RunnerGroup;
use crate::forge::{ForgeRunnerState, ForgeView, RunnerRef};
use crate::plan::{ObservedRunner, RunnerPhase};
use crate::runner_job::{BUSY_ANNOTATION, GROUP_LABEL, ObservedJob, TEMPLATE_HASH_ANNOTATION};
use crate::runner_pod::disruption::Disruption;

/// Whether `job` is a runner of `group`: same namespace, group label, and an ownerReference to
/// this very group's uid, which every runner Job gets at creation
/// ([`crate::runner_job::group_owner_reference`]).
///
/// The labels alone prove nothing: anyone who may create Jobs in the namespace can set them,
/// and a runner's Job drives forge calls (its annotations name the runner to deregister). A
/// Job without the owner, or a group whose uid is unknown, is not the group's; nor are a
/// re-created group's predecessor's Jobs. Such a Job is left alone without a log line: this
/// runs on every pass, and the Job never becomes the group's later.
pub fn belongs_to(job: &ObservedJob, group: &RunnerGroup) -> bool {
    let same_ns = job.metadata.namespace == group.metadata.namespace;
    let labelled =
        job.metadata.labels.as_ref().and_then(|l| l.get(GROUP_LABEL)) == group.metadata.name.as_ref();
    let owned = group.metadata.uid.as_ref().is_some_and(|uid| {
        job.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|r| &r.uid == uid)
    });
    same_ns && labelled && owned
}

/// The phase of a runner Job, from its deletion mark, conditions and counters.
pub fn job_phase(job: &ObservedJob) -> RunnerPhase {
    if job.metadata.deletion_timestamp.is_some() {
        return RunnerPhase::Terminating;
    }
    let Some(status) = &job.status else {
        return RunnerPhase::Pending;
    };
    let holds = |t: &str| {
        status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == t && c.status == "True")
    };
    // FailureTarget / SuccessCriteriaMet come before the terminal conditions on newer clusters.
    if holds("Failed") || holds("FailureTarget") || status.failed.unwrap_or(0) > 0 {
        return RunnerPhase::Failed;
    }
    if holds("Complete") || holds("SuccessCriteriaMet") || status.succeeded.unwrap_or(0) > 0 {
        return RunnerPhase::Succeeded;
    }
    if status.ready.unwrap_or(0) > 0 {
        RunnerPhase::Running
    } else {
        RunnerPhase::Pending
    }
}

/// Whether the still running Job `job` shows its pod on the way out, so that the pod may be one
/// the cluster is killing ([`super::runner_exit::killed_while_running`]).
///
/// Under the runner Job's `podFailurePolicy` the Job controller counts a deleted pod as failed
/// only once its phase is `Failed` (`isPodFailed` with `onlyReplaceFailedPods`,
/// `pkg/controller/job/job_controller.go`): until then the Job runs on, its pod no longer
/// `active` (`controller.IsPodActive` leaves out pods with a `deletionTimestamp`) but
/// `terminating`. A pod the taint manager deleted on a node that stopped answering stays so for
/// as long as the Node object does. `status.terminating` is written from Kubernetes 1.29
/// (`JobPodReplacementPolicy`); without it a busy runner's Job with no active pod tells the same.
pub fn pod_leaving(job: &ObservedJob) -> bool {
    let Some(status) = &job.status else {
        return false;
    };
    match status.terminating {
        Some(n) => n > 0,
        None => ever_busy(job) && status.active.unwrap_or(0) == 0,
    }
}

/// Marks the still active runners of `killed` as failed, so the plan removes them (deregistered,
/// their Job deleted) as it does a runner whose Job failed. A runner already on its way out
/// (its Job deleted by an earlier pass) is left as it is: its kill is counted once, when its
/// Job goes.
pub fn mark_killed(runners: &mut [ObservedRunner], killed: &BTreeMap<String, Disruption>) {
    for r in runners.iter_mut() {
        if r.phase.is_active() && killed.contains_key(&r.name) {
            r.phase = RunnerPhase::Failed;
        }
    }
}

/// Whether the Job carries the busy mark.
pub fn ever_busy(job: &ObservedJob) -> bool {
    job.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(BUSY_ANNOTATION))
        .is_some_and(|v| v == "true")
}

/// Whether the Job's pod was built from another spec than the one hashing to `current`. A Job
/// without the annotation (made before it existed) is left alone: an upgrade of the operator
/// alone must not replace every idle runner.
pub fn outdated(job: &ObservedJob, current: &str) -> bool {
    job.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TEMPLATE_HASH_ANNOTATION))
        .is_some_and(|h| h != current)
}

/// Seconds since the Job was created (0 when unknown or in the future).
pub fn age_seconds(job: &ObservedJob, now: Timestamp) -> u64 {
    job.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| now.duration_since(t.0).as_secs())
        .map_or(0, |s| u64::try_from(s).unwrap_or(0))
}

/// Runner references for the forge: every runner of `observed` (Jobs and creations the store
/// does not show yet), with its phase, its annotations, whether the store shows it, whether
/// the group's session registered it ([`Registrations::runner_ref`]) and since when the forge
/// has shown it connected ([`ConnectedSince`]).
pub fn runner_refs(
    jobs: &[Arc<ObservedJob>],
    observed: &[ObservedRunner],
    registrations: &Registrations,
    connected: &ConnectedSince,
) -> Vec<RunnerRef> {
    observed
        .iter()
        .map(|r| RunnerRef {
            connected_since: connected.since(&r.name),
            ..registrations.runner_ref(&r.name, r.phase, find_job(jobs, &r.name))
        })
        .collect()
}

/// The Job named `name` among `jobs`.
pub fn find_job<'a>(jobs: &'a [Arc<ObservedJob>], name: &str) -> Option<&'a ObservedJob> {
    jobs.iter()
        .find(|j| j.metadata.name.as_deref() == Some(name))
        .map(|j| j.as_ref())
}

/// The annotations of the Job named `name` (empty when the store does not have it).
pub fn job_annotations(jobs: &[Arc<ObservedJob>], name: &str) -> BTreeMap<String, String> {
    find_job(jobs, name)
        .and_then(|j| j.metadata.annotations.clone())
        .unwrap_or_default()
}

/// The runners with the forge's state of each (missing names stay `Unknown`).
pub fn with_forge_states(mut runners: Vec<ObservedRunner>, view: &ForgeView) -> Vec<ObservedRunner> {
    for r in &mut runners {
        r.forge_state = view.runners.get(&r.name).copied().unwrap_or_default();
    }
    runners
}

/// Maps the group's Jobs (plus in-flight writes) to planner input.
///
/// Created-but-unseen runners count as fresh pending runners so a stale store cannot make us
/// exceed `maxRunners`; deleted-but-still-listed ones count as terminating so a finished runner
/// is not counted (or deleted) twice.
/// `template_hash` is the current spec's ([`crate::runner_job::template_hash`]).
pub fn observe_runners(
    jobs: &[Arc<ObservedJob>],
    in_flight: &InFlight,
    template_hash: &str,
    now: Timestamp,
) -> Vec<ObservedRunner> {
    let mut out: Vec<ObservedRunner> = jobs
        .iter()
        .filter_map(|j| {
            let name = j.metadata.name.clone()?;
            let phase = if in_flight.deleted.contains(&name) {
                RunnerPhase::Terminating
            } else {
                job_phase(j)
            };
            Some(ObservedRunner {
                forge_state: ForgeRunnerState::Unknown,
                phase,
                age_seconds: age_seconds(j, now),
                running_seconds: 0,
                ever_busy: ever_busy(j),
                stuck: None,
                outdated: outdated(j, template_hash),
                name,
            })
        })
        .collect();
    let seen: BTreeSet<String> = out.iter().map(|r| r.name.clone()).collect();
    for name in in_flight.created.iter().filter(|n| !seen.contains(*n)) {
        out.push(ObservedRunner::fresh(name.clone()));
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

    use super::*;

    fn ts(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).expect("valid timestamp")
    }

    fn job(name: &str, status: Option<JobStatus>) -> ObservedJob {
        ObservedJob {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ci".into()),
                labels: Some(BTreeMap::from([(GROUP_LABEL.to_owned(), "g".to_owned())])),
                owner_references: Some(vec![OwnerReference {
                    uid: "u1".into(),
                    ..OwnerReference::default()
                }]),
                creation_timestamp: Some(Time(ts(1000))),
                ..ObjectMeta::default()
            },
            status,
        }
    }

    fn cond(t: &str) -> JobCondition {
        JobCondition {
            type_: t.into(),
            status: "True".into(),
            ..JobCondition::default()
        }
    }

    #[test]
    fn phases_from_status() {
        assert_eq!(job_phase(&job("a", None)), RunnerPhase::Pending);
        let active = JobStatus {
            active: Some(1),
            ..JobStatus::default()
        };
        assert_eq!(job_phase(&job("a", Some(active))), RunnerPhase::Pending);
        let ready = JobStatus {
            active: Some(1),
            ready: Some(1),
            ..JobStatus::default()
        };
        assert_eq!(job_phase(&job("a", Some(ready))), RunnerPhase::Running);
        let done = JobStatus {
            conditions: Some(vec![cond("Complete")]),
            ..JobStatus::default()
        };
        assert_eq!(job_phase(&job("a", Some(done))), RunnerPhase::Succeeded);
        let failed = JobStatus {
            conditions: Some(vec![cond("FailureTarget")]),
            ..JobStatus::default()
        };
        assert_eq!(job_phase(&job("a", Some(failed))), RunnerPhase::Failed);
        let counted = JobStatus {
            failed: Some(1),
            ..JobStatus::default()
        };
        assert_eq!(job_phase(&job("a", Some(counted))), RunnerPhase::Failed);
        let not_true = JobStatus {
            conditions: Some(vec![JobCondition {
                type_: "Failed".into(),
                status: "False".into(),
                ..JobCondition::default()
            }]),
            ..JobStatus::default()
        };
        assert_eq!(job_phase(&job("a", Some(not_true))), RunnerPhase::Pending);
        let mut deleting = job(
            "a",
            Some(JobStatus {
                succeeded: Some(1),
                ..JobStatus::default()
            }),
        );
        deleting.metadata.deletion_timestamp = Some(Time(ts(2000)));
        assert_eq!(job_phase(&deleting), RunnerPhase::Terminating);
    }

    #[test]
    fn a_job_whose_pod_is_terminating_may_have_lost_it_to_the_cluster() {
        let with = |status: JobStatus, busy: bool| {
            let mut j = job("g-aaaaa", Some(status));
            if busy {
                j.metadata.annotations =
                    Some(BTreeMap::from([(BUSY_ANNOTATION.to_owned(), "true".to_owned())]));
            }
            j
        };
        // Kubernetes 1.29 on: `terminating` says it, busy or not.
        let leaving = JobStatus {
            active: None,
            ready: Some(0),
            terminating: Some(1),
            ..JobStatus::default()
        };
        assert!(pod_leaving(&with(leaving.clone(), true)));
        assert!(pod_leaving(&with(leaving, false)));
        let running = JobStatus {
            active: Some(1),
            ready: Some(1),
            terminating: Some(0),
            ..JobStatus::default()
        };
        assert!(!pod_leaving(&with(running, true)));
        // A fresh Job whose pod is not created yet has no active pod either.
        let fresh = JobStatus {
            terminating: Some(0),
            ..JobStatus::default()
        };
        assert!(!pod_leaving(&with(fresh, false)));
        // Before 1.29: no `terminating`; only a runner that worked had an active pod to lose.
        let older = JobStatus {
            active: None,
            ready: Some(0),
            ..JobStatus::default()
        };
        assert!(pod_leaving(&with(older.clone(), true)));
        assert!(!pod_leaving(&with(older, false)), "not started yet");
        let older_running = JobStatus {
            active: Some(1),
            ..JobStatus::default()
        };
        assert!(!pod_leaving(&with(older_running, true)));
        assert!(!pod_leaving(&job("g-aaaaa", None)));
    }

    #[test]
    fn a_killed_runner_is_failed_once_and_not_again_while_its_job_goes() {
        let runner = |name: &str, phase: RunnerPhase| ObservedRunner {
            name: name.into(),
            phase,
            forge_state: ForgeRunnerState::Busy,
            age_seconds: 60,
            running_seconds: 50,
            ever_busy: true,
            stuck: None,
            outdated: false,
        };
        let mut runners = vec![
            runner("g-gone1", RunnerPhase::Running),
            runner("g-gone2", RunnerPhase::Pending),
            runner("g-going", RunnerPhase::Terminating),
            runner("g-fine1", RunnerPhase::Running),
        ];
        let killed = BTreeMap::from([
            ("g-gone1".to_owned(), Disruption::DeletionByTaintManager),
            ("g-gone2".to_owned(), Disruption::EvictionByEvictionApi),
            ("g-going".to_owned(), Disruption::DeletionByTaintManager),
        ]);
        mark_killed(&mut runners, &killed);
        let phases: Vec<RunnerPhase> = runners.iter().map(|r| r.phase).collect();
        assert_eq!(
            phases,
            [
                RunnerPhase::Failed,
                RunnerPhase::Failed,
                RunnerPhase::Terminating,
                RunnerPhase::Running
            ]
        );
    }

    #[test]
    fn busy_annotation_age_and_state() {
        let mut j = job("g-aaaaa", None);
        j.metadata.annotations = Some(BTreeMap::from([(BUSY_ANNOTATION.to_owned(), "true".to_owned())]));
        let jobs = vec![Arc::new(j), Arc::new(job("g-bbbbb", None))];
        let view = ForgeView {
            runners: BTreeMap::from([("g-bbbbb".to_owned(), ForgeRunnerState::Idle)]),
            ..ForgeView::default()
        };
        let obs = with_forge_states(observe_runners(&jobs, &InFlight::default(), "h", ts(1600)), &view);
        assert_eq!(obs.len(), 2);
        assert!(obs[0].ever_busy && !obs[1].ever_busy);
        assert_eq!(obs[0].age_seconds, 600);
        assert_eq!(obs[0].forge_state, ForgeRunnerState::Unknown);
        assert_eq!(obs[1].forge_state, ForgeRunnerState::Idle);
        assert_eq!(age_seconds(&jobs[0], ts(10)), 0, "clock skew never underflows");
    }

    #[test]
    fn in_flight_writes_shape_observation() {
        let jobs = vec![Arc::new(job(
            "g-done1",
            Some(JobStatus {
                failed: Some(1),
                ..JobStatus::default()
            }),
        ))];
        let mut fl = InFlight::default();
        fl.created.insert("g-new01".into());
        fl.deleted.insert("g-done1".into());
        let obs = observe_runners(&jobs, &fl, "h", ts(2000));
        let got: Vec<(&str, RunnerPhase)> = obs.iter().map(|r| (r.name.as_str(), r.phase)).collect();
        assert_eq!(
            got,
            [
                ("g-done1", RunnerPhase::Terminating),
                ("g-new01", RunnerPhase::Pending)
            ]
        );
        // The store catches up: created appears, deleted disappears.
        let caught_up = vec![Arc::new(job("g-new01", None))];
        fl.settle(&caught_up);
        assert!(fl.created.is_empty() && fl.deleted.is_empty());
    }

    #[test]
    fn ownership_filter() {
        let mut g = RunnerGroup::new(
            "g",
            serde_json::from_value(serde_json::json!({
                "forge": "gitea", "maxRunners": 1,
                "gitea": {"url": "https://x", "scope": "global", "credentials": "c", "labels": ["l"]}
            }))
            .expect("spec"),
        );
        g.metadata.namespace = Some("ci".into());
        g.metadata.uid = Some("u1".into());
        assert!(belongs_to(&job("g-1", None), &g));
        g.metadata.uid = Some("u2".into());
        assert!(
            !belongs_to(&job("g-1", None), &g),
            "a re-created group does not adopt old Jobs"
        );
        g.metadata.uid = Some("u1".into());
        // M2 of the security review: anyone who may create Jobs in the namespace can label one
        // as the group's runner; without the group's ownerReference it is not ours, so nothing
        // of it (its runner-id annotation above all) ever reaches the forge.
        let mut unowned = job("g-1", None);
        unowned.metadata.owner_references = None;
        assert!(
            !belongs_to(&unowned, &g),
            "a labelled Job without owner is not ours"
        );
        unowned.metadata.owner_references = Some(Vec::new());
        assert!(!belongs_to(&unowned, &g), "nor one with an empty owner list");
        let mut uidless = g.clone();
        uidless.metadata.uid = None;
        assert!(
            !belongs_to(&job("g-1", None), &uidless),
            "a group whose uid is unknown owns nothing"
        );
        g.metadata.namespace = Some("other".into());
        assert!(!belongs_to(&job("g-1", None), &g));
        let jobs = [Arc::new(job("g-1", None))];
        let refs = runner_refs(
            &jobs,
            &observe_runners(&jobs, &InFlight::default(), "h", ts(2000)),
            &Registrations::default(),
            &ConnectedSince::default(),
        );
        assert_eq!(refs[0].name, "g-1");
        assert_eq!(refs[0].phase, RunnerPhase::Pending);
    }

    /// A runner created in the last pass that the store does not list yet: the forge is told
    /// what its registration returned, and that this session made it; a stored runner the
    /// session did not register is told from its Job alone.
    #[test]
    fn an_unstored_runner_is_told_with_what_its_registration_returned() {
        let mut stored = job("g-old01", None);
        stored.metadata.annotations = Some(BTreeMap::from([("id".to_owned(), "1".to_owned())]));
        let jobs = [Arc::new(stored)];
        let mut fl = InFlight::default();
        fl.created.insert("g-new01".into());
        let mut book = Registrations::default();
        book.record(
            "g-new01",
            &BTreeMap::from([("id".to_owned(), "2".to_owned())]),
            std::time::Instant::now(),
        );
        let refs = runner_refs(
            &jobs,
            &observe_runners(&jobs, &fl, "h", ts(2000)),
            &book,
            &ConnectedSince::default(),
        );
        let got: Vec<(&str, Option<&str>, bool, bool)> = refs
            .iter()
            .map(|r| {
                let id = r.annotations.get("id").map(String::as_str);
                (r.name.as_str(), id, r.stored, r.registered_here())
            })
            .collect();
        assert_eq!(
            got,
            [
                ("g-new01", Some("2"), false, true),
                ("g-old01", Some("1"), true, false)
            ]
        );
    }
}
