//! Pod statuses the kubelet stand-in writes, built as full `PodStatus` values so one merge patch
//! replaces the lists (conditions, container statuses) as a whole.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Where the simulated pod runs; fixed per pod once the kubelet admits it.
#[derive(Clone, Debug)]
pub struct Placement {
    /// Node IP.
    pub host_ip: String,
    /// Pod IP.
    pub pod_ip: String,
    /// When the kubelet admitted the pod.
    pub start_time: Timestamp,
}

/// A pod-level stage the kubelet reports.
#[derive(Clone, Debug)]
pub enum Stage {
    /// Containers are waiting (`reason` e.g. `ContainerCreating`, `ErrImagePull`).
    Waiting {
        /// Waiting reason of the main container.
        reason: String,
        /// Human-readable detail.
        message: Option<String>,
    },
    /// All containers run since `started`.
    Running {
        /// When the containers started.
        started: Timestamp,
    },
    /// The main container exited with `exit_code`; the pod is terminal.
    Exited {
        /// When the containers started.
        started: Timestamp,
        /// Exit code of the main container.
        exit_code: i32,
    },
    /// The kubelet evicted the pod (node pressure): phase `Failed`, reason `Evicted`.
    Evicted,
    /// The node went away: phase `Failed`, reason `NodeLost`.
    NodeLost,
}

fn condition(type_: &str, ok: bool, reason: Option<&str>, now: Timestamp) -> PodCondition {
    PodCondition {
        type_: type_.to_owned(),
        status: if ok { "True" } else { "False" }.to_owned(),
        reason: reason.map(str::to_owned),
        last_transition_time: Some(Time(now)),
        ..PodCondition::default()
    }
}

fn state_waiting(reason: &str, message: Option<String>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.to_owned()),
            message,
        }),
        ..ContainerState::default()
    }
}

fn state_running(started: Timestamp) -> ContainerState {
    ContainerState {
        running: Some(ContainerStateRunning {
            started_at: Some(Time(started)),
        }),
        ..ContainerState::default()
    }
}

fn state_terminated(started: Timestamp, finished: Timestamp, exit_code: i32, reason: &str) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code,
            reason: Some(reason.to_owned()),
            started_at: Some(Time(started)),
            finished_at: Some(Time(finished)),
            ..ContainerStateTerminated::default()
        }),
        ..ContainerState::default()
    }
}

fn container_status(pod_uid: &str, c: &Container, state: ContainerState, ready: bool) -> ContainerStatus {
    let running = state.running.is_some();
    let has_id = state.waiting.is_none();
    let image = c.image.clone().unwrap_or_default();
    ContainerStatus {
        name: c.name.clone(),
        image_id: format!("sim://{image}"),
        image,
        ready,
        started: Some(running),
        restart_count: 0,
        container_id: has_id.then(|| format!("sim://{pod_uid}/{}", c.name)),
        state: Some(state),
        ..ContainerStatus::default()
    }
}

/// Index of the container a behaviour plays: the one named `runner`, else the first.
pub fn main_container(pod: &Pod) -> Option<&Container> {
    let containers = &pod.spec.as_ref()?.containers;
    containers
        .iter()
        .find(|c| c.name == "runner")
        .or_else(|| containers.first())
}

fn exit_reason(code: i32) -> &'static str {
    if code == 0 { "Completed" } else { "Error" }
}

/// The full status for `pod` at `stage`.
pub fn status_for(pod: &Pod, place: &Placement, stage: &Stage, now: Timestamp) -> PodStatus {
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    let spec = pod.spec.clone().unwrap_or_default();
    let main_name = main_container(pod).map(|c| c.name.clone()).unwrap_or_default();
    let (phase, reason, message) = match stage {
        Stage::Waiting { .. } => ("Pending", None, None),
        Stage::Running { .. } => ("Running", None, None),
        Stage::Exited { exit_code: 0, .. } => ("Succeeded", None, None),
        Stage::Exited { .. } => ("Failed", None, None),
        Stage::Evicted => (
            "Failed",
            Some("Evicted"),
            Some("The node was low on resource: memory. "),
        ),
        Stage::NodeLost => (
            "Failed",
            Some("NodeLost"),
            Some("Node which was running the pod is unresponsive"),
        ),
    };
    let running = matches!(stage, Stage::Running { .. });
    let started_containers = !matches!(stage, Stage::Waiting { .. });
    let started_at = match stage {
        Stage::Running { started } | Stage::Exited { started, .. } => *started,
        _ => place.start_time,
    };
    let state_of = |c: &Container| -> ContainerState {
        match stage {
            Stage::Waiting { reason, message } if c.name == main_name => {
                state_waiting(reason, message.clone())
            }
            Stage::Waiting { .. } => state_waiting("ContainerCreating", None),
            Stage::Running { started } => state_running(*started),
            Stage::Exited { exit_code, .. } if c.name == main_name => {
                state_terminated(started_at, now, *exit_code, exit_reason(*exit_code))
            }
            Stage::Exited { .. } => state_terminated(started_at, now, 0, "Completed"),
            Stage::Evicted | Stage::NodeLost => {
                state_terminated(started_at, now, 137, "ContainerStatusUnknown")
            }
        }
    };
    let containers: Vec<ContainerStatus> = spec
        .containers
        .iter()
        .map(|c| container_status(uid, c, state_of(c), running))
        .collect();
    let init: Vec<ContainerStatus> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| {
            let sidecar = c.restart_policy.as_deref() == Some("Always");
            let state = match stage {
                Stage::Waiting { .. } => state_waiting("PodInitializing", None),
                Stage::Running { started } if sidecar => state_running(*started),
                _ => state_terminated(started_at, started_at, 0, "Completed"),
            };
            container_status(uid, c, state, sidecar && running)
        })
        .collect();
    let not_ready = match stage {
        Stage::Waiting { .. } => Some("ContainersNotReady"),
        _ => Some("PodCompleted"),
    };
    let mut conditions = vec![
        condition(
            "PodReadyToStartContainers",
            started_containers && running,
            None,
            now,
        ),
        condition("Initialized", true, None, now),
        condition("Ready", running, (!running).then_some(not_ready).flatten(), now),
        condition(
            "ContainersReady",
            running,
            (!running).then_some(not_ready).flatten(),
            now,
        ),
        condition("PodScheduled", true, None, now),
    ];
    if matches!(stage, Stage::Evicted | Stage::NodeLost) {
        let why = if matches!(stage, Stage::Evicted) {
            "TerminationByKubelet"
        } else {
            "DeletionByTaintManager"
        };
        conditions.push(condition("DisruptionTarget", true, Some(why), now));
    }
    PodStatus {
        phase: Some(phase.to_owned()),
        reason: reason.map(str::to_owned),
        message: message.map(str::to_owned),
        host_ip: Some(place.host_ip.clone()),
        host_ips: Some(vec![HostIP {
            ip: place.host_ip.clone(),
        }]),
        pod_ip: started_containers.then(|| place.pod_ip.clone()),
        pod_ips: started_containers.then(|| {
            vec![PodIP {
                ip: place.pod_ip.clone(),
            }]
        }),
        start_time: Some(Time(place.start_time)),
        qos_class: Some("BestEffort".to_owned()),
        conditions: Some(conditions),
        container_statuses: Some(containers),
        init_container_statuses: (!init.is_empty()).then_some(init),
        ..PodStatus::default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {
                "initContainers": [{"name": "dind", "image": "docker", "restartPolicy": "Always"}],
                "containers": [{"name": "side", "image": "s"}, {"name": "runner", "image": "r"}]
            }
        }))
        .unwrap()
    }

    fn place() -> Placement {
        Placement {
            host_ip: "10.1.0.1".into(),
            pod_ip: "10.2.0.5".into(),
            start_time: Timestamp::UNIX_EPOCH,
        }
    }

    fn cond<'a>(st: &'a PodStatus, t: &str) -> &'a PodCondition {
        st.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == t)
            .unwrap()
    }

    #[test]
    fn main_container_prefers_runner() {
        assert_eq!(main_container(&pod()).unwrap().name, "runner");
    }

    #[test]
    fn waiting_reports_reason_on_main_container() {
        let stage = Stage::Waiting {
            reason: "ErrImagePull".into(),
            message: Some("nope".into()),
        };
        let st = status_for(&pod(), &place(), &stage, Timestamp::UNIX_EPOCH);
        assert_eq!(st.phase.as_deref(), Some("Pending"));
        let runner = &st.container_statuses.as_ref().unwrap()[1];
        let waiting = runner.state.as_ref().unwrap().waiting.as_ref().unwrap();
        assert_eq!(waiting.reason.as_deref(), Some("ErrImagePull"));
        assert_eq!(st.pod_ip, None);
        assert_eq!(cond(&st, "Ready").status, "False");
    }

    #[test]
    fn running_is_ready_and_exit_code_sets_phase() {
        let now = Timestamp::UNIX_EPOCH;
        let st = status_for(&pod(), &place(), &Stage::Running { started: now }, now);
        assert_eq!(st.phase.as_deref(), Some("Running"));
        assert_eq!(cond(&st, "Ready").status, "True");
        assert!(st.init_container_statuses.as_ref().unwrap()[0].ready);
        let st = status_for(
            &pod(),
            &place(),
            &Stage::Exited {
                started: now,
                exit_code: 3,
            },
            now,
        );
        assert_eq!(st.phase.as_deref(), Some("Failed"));
        let term = st.container_statuses.as_ref().unwrap()[1]
            .state
            .clone()
            .unwrap()
            .terminated
            .unwrap();
        assert_eq!((term.exit_code, term.reason.as_deref()), (3, Some("Error")));
        let st = status_for(
            &pod(),
            &place(),
            &Stage::Exited {
                started: now,
                exit_code: 0,
            },
            now,
        );
        assert_eq!(st.phase.as_deref(), Some("Succeeded"));
    }

    #[test]
    fn eviction_is_failed_with_reason() {
        let st = status_for(&pod(), &place(), &Stage::Evicted, Timestamp::UNIX_EPOCH);
        assert_eq!(
            (st.phase.as_deref(), st.reason.as_deref()),
            (Some("Failed"), Some("Evicted"))
        );
        assert_eq!(cond(&st, "DisruptionTarget").status, "True");
    }
}
