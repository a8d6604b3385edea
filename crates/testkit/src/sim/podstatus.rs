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
    /// Init containers have not all finished (or sidecars started): phase `Pending`, the main
    /// containers wait `PodInitializing`.
    Initializing,
    /// A run-to-completion init container exited non-zero: phase `Failed`, as with
    /// `restartPolicy: Never`.
    InitFailed,
    /// The kubelet evicted the pod (node pressure): phase `Failed`, reason `Evicted`.
    Evicted,
    /// The node went away: phase `Failed`, reason `NodeLost`.
    NodeLost,
}

/// What one init container has done so far, in the kubelet's own record of the pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InitRecord {
    /// Not started yet (image pull, configuration).
    Waiting {
        /// Waiting reason, e.g. `ContainerCreating`, `ErrImagePull`.
        reason: String,
        /// Human-readable detail.
        message: Option<String>,
    },
    /// Started: a run-to-completion container working, or a sidecar up beside the main one.
    Running {
        /// When it started.
        started: Timestamp,
    },
    /// Exited with `exit_code`.
    Exited {
        /// When it started.
        started: Timestamp,
        /// When it exited.
        finished: Timestamp,
        /// Exit code.
        exit_code: i32,
    },
}

/// Whether an init container is a native sidecar (`restartPolicy: Always`).
pub fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
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

/// The full status for `pod` at `stage`, init containers derived from the stage alone (all done
/// once the main container runs).
pub fn status_for(pod: &Pod, place: &Placement, stage: &Stage, now: Timestamp) -> PodStatus {
    status_with_init(pod, place, stage, None, now)
}

/// The state of init container `c` given its record; `None` for a container not started yet.
fn init_state(c: &Container, record: Option<&InitRecord>, stage: &Stage, now: Timestamp) -> ContainerState {
    let killed = matches!(stage, Stage::Evicted | Stage::NodeLost);
    match record {
        None if killed => state_terminated(now, now, 137, "ContainerStatusUnknown"),
        None => state_waiting("PodInitializing", None),
        Some(InitRecord::Waiting { reason, message }) => state_waiting(reason, message.clone()),
        Some(InitRecord::Running { started }) => match stage {
            Stage::Evicted | Stage::NodeLost => {
                state_terminated(*started, now, 137, "ContainerStatusUnknown")
            }
            // The kubelet stops sidecars once the main container is done; they exit cleanly.
            Stage::Exited { .. } | Stage::InitFailed if is_sidecar(c) => {
                state_terminated(*started, now, 0, "Completed")
            }
            _ => state_running(*started),
        },
        Some(InitRecord::Exited {
            started,
            finished,
            exit_code,
        }) => state_terminated(*started, *finished, *exit_code, exit_reason(*exit_code)),
    }
}

/// Names of the init containers not yet done, for the `Initialized` condition's message.
fn incomplete_inits(init: &[Container], records: Option<&[InitRecord]>) -> Vec<String> {
    init.iter()
        .enumerate()
        .filter(|(i, c)| {
            let record = records.and_then(|r| r.get(*i));
            let done = match record {
                Some(InitRecord::Exited { exit_code, .. }) => *exit_code == 0,
                Some(InitRecord::Running { .. }) => is_sidecar(c),
                _ => false,
            };
            !done
        })
        .map(|(_, c)| c.name.clone())
        .collect()
}

/// The full status for `pod` at `stage`; `init` is the kubelet's record of the init containers
/// (index = position in `initContainers`; missing entries have not started), or `None` to
/// derive them from the stage.
pub fn status_with_init(
    pod: &Pod,
    place: &Placement,
    stage: &Stage,
    init: Option<&[InitRecord]>,
    now: Timestamp,
) -> PodStatus {
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    let spec = pod.spec.clone().unwrap_or_default();
    let main_name = main_container(pod).map(|c| c.name.clone()).unwrap_or_default();
    let (phase, reason, message) = match stage {
        Stage::Waiting { .. } | Stage::Initializing => ("Pending", None, None),
        Stage::Running { .. } => ("Running", None, None),
        Stage::Exited { exit_code: 0, .. } => ("Succeeded", None, None),
        Stage::Exited { .. } | Stage::InitFailed => ("Failed", None, None),
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
    let initializing = matches!(stage, Stage::Initializing | Stage::InitFailed);
    let started_containers = !matches!(stage, Stage::Waiting { .. }) || init.is_some_and(|r| !r.is_empty());
    let started_at = match stage {
        Stage::Running { started } | Stage::Exited { started, .. } => *started,
        _ => place.start_time,
    };
    let state_of = |c: &Container| -> ContainerState {
        match stage {
            Stage::Initializing | Stage::InitFailed => state_waiting("PodInitializing", None),
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
    let init_specs = spec.init_containers.clone().unwrap_or_default();
    let init_statuses: Vec<ContainerStatus> = init_specs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let sidecar = is_sidecar(c);
            let state = match init {
                Some(records) => init_state(c, records.get(i), stage, now),
                None => match stage {
                    Stage::Waiting { .. } | Stage::Initializing => state_waiting("PodInitializing", None),
                    Stage::Running { started } if sidecar => state_running(*started),
                    _ => state_terminated(started_at, started_at, 0, "Completed"),
                },
            };
            // A sidecar without a readiness probe is ready while it runs.
            let ready = sidecar && state.running.is_some();
            container_status(uid, c, state, ready)
        })
        .collect();
    let not_ready = match stage {
        Stage::Waiting { .. } | Stage::Initializing => Some("ContainersNotReady"),
        _ => Some("PodCompleted"),
    };
    let mut initialized = condition("Initialized", !initializing, None, now);
    if initializing {
        initialized.reason = Some("ContainersNotInitialized".to_owned());
        let names = incomplete_inits(&init_specs, init).join(" ");
        initialized.message = Some(format!("containers with incomplete status: [{names}]"));
    }
    let mut conditions = vec![
        condition(
            "PodReadyToStartContainers",
            running || matches!(stage, Stage::Initializing),
            None,
            now,
        ),
        initialized,
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
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        ..PodStatus::default()
    }
}

/// The status kube-scheduler writes for a pod no node can take: `Pending`, no node, and
/// `PodScheduled=False` (reason `Unschedulable`) with the scheduler's `message`.
pub fn unschedulable_status(message: &str, now: Timestamp) -> PodStatus {
    let mut scheduled = condition("PodScheduled", false, Some("Unschedulable"), now);
    scheduled.message = Some(message.to_owned());
    PodStatus {
        phase: Some("Pending".to_owned()),
        qos_class: Some("BestEffort".to_owned()),
        conditions: Some(vec![scheduled]),
        ..PodStatus::default()
    }
}

#[cfg(test)]
#[path = "podstatus_tests.rs"]
mod tests;
