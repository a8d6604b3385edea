//! Why a failed runner failed, from its pod: the exit code of the `runner` container and what the
//! group's forge says it means. Looked up only for failed runner Jobs, just before they go, so a
//! healthy group costs no extra API calls.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use tracing::debug;

use crate::forge::{Forge, RunnerExit};
use crate::runner_job::RUNNER_CONTAINER;
use crate::runner_pod::disruption::{Disruption, NodePresence, classify};

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
/// [`Forge::runner_exit_meaning`]) calls outdated.
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

/// What the pods of the failed runner Job `job` tell. Best effort: a pod that is already gone
/// or a failed lookup tells nothing (the failure is still counted as such).
pub async fn failed_runner_pod(pods: &Api<Pod>, forge: &dyn Forge, job: &str) -> FailedPod {
    let lp = ListParams::default().labels(&format!("{JOB_NAME_LABEL}={job}"));
    match pods.list(&lp).await {
        Ok(list) => FailedPod {
            outdated: list
                .items
                .iter()
                .any(|p| outdated_runner(p, |code| forge.runner_exit_meaning(code))),
            disruption: list.items.iter().find_map(|p| classify(p, NodePresence::Unknown)),
        },
        Err(e) => {
            debug!(runner = job, error = %e, "could not read the failed runner's pod");
            FailedPod::default()
        }
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
