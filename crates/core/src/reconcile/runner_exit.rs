//! Why a failed runner failed, from its pod: the exit code of the `runner` container and what the
//! group's forge says it means. Looked up only for failed runner Jobs, just before they go, so a
//! healthy group costs no extra API calls. A pod already gone (PodGC force-deletes the pods of a
//! deleted Node) leaves the Job's own record of a disruption ([`classify_job`]). A runner whose
//! pod the cluster is killing while its Job still runs (a node that stopped answering) is found
//! from its pod before its Job fails, if it ever does ([`killed_runners`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use tracing::debug;

use super::observe::pod_leaving;
use crate::forge::{ForgeProfile, RunnerExit};
use crate::plan::ObservedRunner;
use crate::runner_job::{GROUP_LABEL, ObservedJob, RUNNER_CONTAINER};
use crate::runner_pod::disruption::{Disruption, NodePresence, classify, classify_job};

/// Label the Job controller puts on every pod of a Job (value: the Job's name).
pub const JOB_NAME_LABEL: &str = "job-name";

/// The exit code the `runner` container of `pod` terminated with, if it has terminated.
///
/// Runner pods never restart (`restartPolicy: Never`), but a kubelet may report the termination
/// as the last state, so that is read when the current state is not terminated.
pub fn runner_exit_code(pod: &Pod) -> Option<i32> {
    let status = pod
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == RUNNER_CONTAINER)?;
    let current = status.state.as_ref().and_then(|s| s.terminated.as_ref());
    let last = status.last_state.as_ref().and_then(|s| s.terminated.as_ref());
    current.or(last).map(|t| t.exit_code)
}

/// Whether the runner of `pod` exited with a code that `meaning` (the forge's
/// [`ForgeProfile::runner_exits`]) calls outdated.
pub fn outdated_runner(pod: &Pod, meaning: impl Fn(i32) -> Option<RunnerExit>) -> bool {
    runner_exit_code(pod).and_then(meaning) == Some(RunnerExit::Outdated)
}

/// What the pod of a failed runner Job tells about the failure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FailedPod {
    /// The runner exited as outdated ([`RunnerExit::Outdated`]).
    pub outdated: bool,
    /// The cluster killed the pod (eviction, preemption, node loss), not the runner itself.
    pub disruption: Option<Disruption>,
}

/// How the cluster killed the runner of a failed Job, from its `pods` (the precise reason) or,
/// when they show none, from the Job `job` as last observed.
pub fn disruption_of(pods: &[Pod], job: Option<&ObservedJob>) -> Option<Disruption> {
    pods.iter()
        .find_map(|p| classify(p, NodePresence::Unknown))
        .or_else(|| job.and_then(classify_job))
}

/// How the cluster is killing the runner of a Job that still runs, from the Job's `pods`: one on
/// its way out (a `deletionTimestamp`) that [`classify`] calls disrupted, above all by its
/// `DisruptionTarget=True` condition (`DeletionByTaintManager`, `PreemptionByScheduler`,
/// `EvictionByEvictionAPI`, `DeletionByPodGC`, `TerminationByKubelet`). Under the runner Job's
/// `podFailurePolicy` such a pod fails the Job only once it is `Failed`
/// ([`super::observe::pod_leaving`]), which on a node that stopped answering may be never.
/// A pod deleted by a person, or one that finished, is `None`.
pub fn killed_while_running(pods: &[Pod]) -> Option<Disruption> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .find_map(|p| classify(p, NodePresence::Unknown))
}

/// The runners among `runners` (of the group `group`, whose Jobs are `jobs`) the cluster is
/// killing while their Jobs still run, and how ([`killed_while_running`]). Only a still active
/// runner whose Job shows its pod on the way out ([`pod_leaving`]) is looked at, so a healthy
/// group costs no extra API call; when one is, a single list of the group's pods serves every
/// runner. Best effort: a failed list tells nothing, and the next pass looks again.
pub async fn killed_runners(
    pods: &Api<Pod>,
    group: &str,
    jobs: &[Arc<ObservedJob>],
    runners: &[ObservedRunner],
) -> BTreeMap<String, Disruption> {
    let leaving: BTreeSet<&str> = runners
        .iter()
        .filter(|r| r.phase.is_active())
        .filter_map(|r| {
            jobs.iter()
                .find(|j| j.metadata.name.as_deref() == Some(r.name.as_str()))
        })
        .filter(|j| pod_leaving(j))
        .filter_map(|j| j.metadata.name.as_deref())
        .collect();
    if leaving.is_empty() {
        return BTreeMap::new();
    }
    let lp = ListParams::default().labels(&format!("{GROUP_LABEL}={group}"));
    let listed = match pods.list(&lp).await {
        Ok(list) => list.items,
        Err(e) => {
            debug!(group, error = %e, "could not list the runner pods on their way out");
            return BTreeMap::new();
        }
    };
    let mut by_job: BTreeMap<&str, Vec<Pod>> = BTreeMap::new();
    for p in listed {
        let job = p.metadata.labels.as_ref().and_then(|l| l.get(JOB_NAME_LABEL));
        if let Some(&name) = job.and_then(|j| leaving.get(j.as_str())) {
            by_job.entry(name).or_default().push(p);
        }
    }
    by_job
        .into_iter()
        .filter_map(|(name, pods)| Some((name.to_owned(), killed_while_running(&pods)?)))
        .collect()
}

/// What the pods of the failed runner Job `name` (as observed: `job`) tell. Best effort: a pod
/// that is already gone or a failed lookup tells only what the Job does (the failure is still
/// counted as such).
pub async fn failed_runner_pod(
    pods: &Api<Pod>,
    profile: &ForgeProfile,
    name: &str,
    job: Option<&ObservedJob>,
) -> FailedPod {
    let lp = ListParams::default().labels(&format!("{JOB_NAME_LABEL}={name}"));
    let items = match pods.list(&lp).await {
        Ok(list) => list.items,
        Err(e) => {
            debug!(runner = name, error = %e, "could not read the failed runner's pod");
            Vec::new()
        }
    };
    FailedPod {
        outdated: items
            .iter()
            .any(|p| outdated_runner(p, |code| profile.runner_exit(code))),
        disruption: disruption_of(&items, job),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "r-abcde-x1", "labels": {"job-name": "r-abcde"}},
            "status": status,
        }))
        .expect("pod")
    }

    fn terminated(name: &str, code: i32) -> serde_json::Value {
        serde_json::json!({
            "name": name, "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": code}},
        })
    }

    fn seven_is_outdated(code: i32) -> Option<RunnerExit> {
        (code == 7).then_some(RunnerExit::Outdated)
    }

    /// A runner Job, as the store keeps it, failed with `reason`.
    fn failed_job(reason: &str) -> ObservedJob {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "r-abcde"},
            "status": {"failed": 1, "conditions": [
                {"type": "FailureTarget", "status": "True", "reason": reason},
                {"type": "Failed", "status": "True", "reason": reason},
            ]},
        }))
        .expect("job")
    }

    #[test]
    fn a_pod_gone_with_its_node_is_known_from_the_job() {
        // PodGC force-deleted the pod: nothing to list, the Job's policy remembers.
        let by_policy = failed_job("PodFailurePolicy");
        assert_eq!(
            disruption_of(&[], Some(&by_policy)),
            Some(Disruption::Unattributed)
        );
        // As the store keeps it (`slim_job`: no condition messages).
        let mut slim = by_policy.clone();
        crate::reconcile::slim_job(&mut slim);
        assert_eq!(disruption_of(&[], Some(&slim)), Some(Disruption::Unattributed));
        // The pod, when still there, says precisely who.
        let gc = pod(serde_json::json!({"phase": "Failed", "conditions": [{
            "type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
            "message": "PodGC: node no longer exists",
        }]}));
        assert_eq!(
            disruption_of(std::slice::from_ref(&gc), Some(&by_policy)),
            Some(Disruption::DeletionByPodGc)
        );
    }

    #[test]
    fn a_runner_that_exited_1_is_no_disruption_with_or_without_its_pod() {
        let mut own = failed_job("BackoffLimitExceeded");
        crate::reconcile::slim_job(&mut own);
        let exited =
            pod(serde_json::json!({"phase": "Failed", "containerStatuses": [terminated("runner", 1)]}));
        assert_eq!(disruption_of(std::slice::from_ref(&exited), Some(&own)), None);
        assert_eq!(disruption_of(&[], Some(&own)), None);
        assert_eq!(disruption_of(&[], None), None);
    }

    /// A runner pod on a node that stopped answering: the taint manager marked and deleted it,
    /// no kubelet confirms, so it stays `Terminating` in phase `Running`.
    fn taint_evicted() -> Pod {
        let mut p = pod(serde_json::json!({"phase": "Running", "conditions": [
            {"type": "Ready", "status": "False", "reason": "NodeNotReady"},
            {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
             "message": "Taint manager: deleting due to NoExecute taint"},
        ]}));
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::UNIX_EPOCH,
        ));
        p
    }

    #[test]
    fn a_terminating_pod_with_disruption_target_is_a_runner_killed_while_its_job_runs() {
        assert_eq!(
            killed_while_running(&[taint_evicted()]),
            Some(Disruption::DeletionByTaintManager)
        );
        for reason in [
            "PreemptionByScheduler",
            "EvictionByEvictionAPI",
            "DeletionByPodGC",
            "TerminationByKubelet",
        ] {
            let mut p = taint_evicted();
            let conditions = p
                .status
                .as_mut()
                .and_then(|s| s.conditions.as_mut())
                .expect("conditions");
            conditions[1].reason = Some(reason.to_owned());
            let got = killed_while_running(std::slice::from_ref(&p)).map(Disruption::as_str);
            assert_eq!(got, Some(reason));
        }
    }

    #[test]
    fn a_pod_deleted_by_a_person_or_not_deleted_is_no_kill_yet() {
        let mut by_hand = taint_evicted();
        by_hand.status.as_mut().expect("status").conditions = None;
        assert_eq!(killed_while_running(&[by_hand]), None, "deleted, no condition");
        // The condition alone, on a pod nobody deleted, may be stale (the disruption controller
        // resets it to False after two minutes).
        let mut stale = taint_evicted();
        stale.metadata.deletion_timestamp = None;
        assert_eq!(killed_while_running(&[stale]), None);
        let mut done = taint_evicted();
        done.status.as_mut().expect("status").phase = Some("Succeeded".into());
        assert_eq!(
            killed_while_running(&[done]),
            None,
            "the runner finished its work"
        );
        assert_eq!(killed_while_running(&[]), None);
    }

    #[test]
    fn runner_container_exit_7_is_outdated() {
        let p = pod(serde_json::json!({"phase": "Failed", "containerStatuses": [
            terminated("dind", 0),
            terminated("runner", 7),
        ]}));
        assert_eq!(runner_exit_code(&p), Some(7));
        assert!(outdated_runner(&p, seven_is_outdated));
    }

    #[test]
    fn other_codes_containers_and_forges_are_not_outdated() {
        let other_code = pod(serde_json::json!({"containerStatuses": [terminated("runner", 1)]}));
        assert!(!outdated_runner(&other_code, seven_is_outdated));
        // Exit 7 of a sidecar says nothing about the runner.
        let sidecar = pod(serde_json::json!({"containerStatuses": [
            terminated("dind", 7),
            terminated("runner", 137),
        ]}));
        assert_eq!(runner_exit_code(&sidecar), Some(137));
        assert!(!outdated_runner(&sidecar, seven_is_outdated));
        // A forge that gives exit codes no meaning never reports an outdated runner.
        let seven = pod(serde_json::json!({"containerStatuses": [terminated("runner", 7)]}));
        assert!(!outdated_runner(&seven, |_| None));
    }

    #[test]
    fn last_state_counts_and_missing_data_is_not_outdated() {
        let restarted = pod(serde_json::json!({"containerStatuses": [{
            "name": "runner", "image": "i", "imageID": "", "ready": false, "restartCount": 1,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 7}},
        }]}));
        assert!(outdated_runner(&restarted, seven_is_outdated));
        let running = pod(serde_json::json!({"containerStatuses": [{
            "name": "runner", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
            "state": {"running": {}},
        }]}));
        assert_eq!(runner_exit_code(&running), None);
        assert_eq!(
            runner_exit_code(&pod(serde_json::json!({"phase": "Pending"}))),
            None
        );
        assert_eq!(runner_exit_code(&Pod::default()), None);
    }
}
