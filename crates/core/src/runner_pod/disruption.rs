//! Whether the cluster killed a runner's pod (preemption, eviction, drain, node loss) rather
//! than the runner failing on its own or someone deleting it, read from the pod alone.
//!
//! The evidence is what Kubernetes writes on the pod:
//!
//! - The `DisruptionTarget` condition, status `True`, "the pod is about to be terminated due to
//!   a disruption (such as preemption, eviction API or garbage-collection)" (k8s.io/api
//!   `core/v1/types.go`, v0.35.4, read as vendored in openshift-kni/scheduler-plugins). On by
//!   default since Kubernetes 1.26, locked on since 1.31 (feature `PodDisruptionConditions`).
//!   Its reason says who: see [`Disruption`].
//! - On clusters without that condition: `status.reason` `Evicted` (kubelet node-pressure
//!   eviction, `pkg/kubelet/eviction`) or `NodeLost` (the node lifecycle controller's
//!   `SetPodTerminationReason`, `pkg/controller/util/node/controller_utils.go`, for pods of an
//!   unreachable node).
//! - The pod's Node being gone while the pod still runs there (PodGC marks such pods only after
//!   its quarantine, so the caller may know first).
//!
//! A pod deleted by us or by a person carries none of these, and neither does one whose runner
//! exited non-zero by itself: both are `None`.
//!
//! A pod PodGC force-deleted with its Node is gone before it can be read; its runner Job keeps
//! the evidence instead ([`job`]).

pub mod job;

use k8s_openapi::api::core::v1::Pod;

pub use job::{classify_job, runner_pod_failure_policy};

/// Pod condition type Kubernetes sets before it terminates a pod for a disruption.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";

/// Why the cluster killed a runner's pod. [`Disruption::as_str`] is the Kubernetes reason
/// itself, safe as a metric label or Event reason (the set is closed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Disruption {
    /// kube-scheduler preempted the pod for one of higher priority (k8s.io/api
    /// `PodReasonPreemptionByScheduler`).
    PreemptionByScheduler,
    /// The taint manager deleted the pod for a `NoExecute` taint it does not tolerate, e.g. the
    /// node went unreachable or not ready (`pkg/controller/tainteviction/taint_eviction.go`,
    /// "Taint manager: deleting due to NoExecute taint").
    DeletionByTaintManager,
    /// The device taint manager (DRA) deleted the pod for a `NoExecute` device taint
    /// (`pkg/controller/devicetainteviction`, "Device Taint manager: deleting due to NoExecute
    /// taint").
    DeletionByDeviceTaintManager,
    /// The Eviction API evicted the pod: `kubectl drain`, the cluster autoscaler, Karpenter
    /// (`pkg/registry/core/pod/storage/eviction.go`, "Eviction API: evicting").
    EvictionByEvictionApi,
    /// PodGC removed the pod because its node no longer exists
    /// (`pkg/controller/podgc/gc_controller.go`, "PodGC: node no longer exists").
    DeletionByPodGc,
    /// The kubelet terminated the pod: node-pressure eviction, graceful node shutdown or
    /// critical-pod preemption (k8s.io/api `PodReasonTerminationByKubelet`).
    TerminationByKubelet,
    /// `DisruptionTarget` with a reason this list does not know (a newer Kubernetes): still a
    /// disruption by the condition's definition.
    Other,
    /// `status.reason: Evicted` without the condition: kubelet node-pressure eviction on a
    /// cluster before 1.26 or with the condition's feature off.
    Evicted,
    /// The pod's node is gone or unreachable without the condition: `status.reason: NodeLost`
    /// from the node lifecycle controller, or the caller saw the Node deleted.
    NodeLost,
    /// The pod was gone when the operator looked, and its runner Job failed by its
    /// `podFailurePolicy`, which fires on `DisruptionTarget=True` only ([`job::classify_job`]):
    /// a disruption whose reason went with the pod, most often PodGC's after a Node was deleted.
    Unattributed,
}

impl Disruption {
    /// Every reason, for metrics that list their label values up front.
    pub const ALL: [Disruption; 10] = [
        Disruption::PreemptionByScheduler,
        Disruption::DeletionByTaintManager,
        Disruption::DeletionByDeviceTaintManager,
        Disruption::EvictionByEvictionApi,
        Disruption::DeletionByPodGc,
        Disruption::TerminationByKubelet,
        Disruption::Other,
        Disruption::Evicted,
        Disruption::NodeLost,
        Disruption::Unattributed,
    ];

    /// The Kubernetes reason (CamelCase, as the project's other labels), or `Other`,
    /// `Unattributed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Disruption::PreemptionByScheduler => "PreemptionByScheduler",
            Disruption::DeletionByTaintManager => "DeletionByTaintManager",
            Disruption::DeletionByDeviceTaintManager => "DeletionByDeviceTaintManager",
            Disruption::EvictionByEvictionApi => "EvictionByEvictionAPI",
            Disruption::DeletionByPodGc => "DeletionByPodGC",
            Disruption::TerminationByKubelet => "TerminationByKubelet",
            Disruption::Other => "Other",
            Disruption::Evicted => "Evicted",
            Disruption::NodeLost => "NodeLost",
            Disruption::Unattributed => "Unattributed",
        }
    }

    /// The disruption a `DisruptionTarget` condition's reason names.
    fn from_condition_reason(reason: &str) -> Disruption {
        match reason {
            "PreemptionByScheduler" => Disruption::PreemptionByScheduler,
            "DeletionByTaintManager" => Disruption::DeletionByTaintManager,
            "DeletionByDeviceTaintManager" => Disruption::DeletionByDeviceTaintManager,
            "EvictionByEvictionAPI" => Disruption::EvictionByEvictionApi,
            "DeletionByPodGC" => Disruption::DeletionByPodGc,
            "TerminationByKubelet" => Disruption::TerminationByKubelet,
            _ => Disruption::Other,
        }
    }
}

impl std::fmt::Display for Disruption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the caller knows of the Node the pod was bound to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NodePresence {
    /// The Node object exists.
    Present,
    /// The Node object is gone (deleted by a cloud controller, Karpenter, a person).
    Gone,
    /// Not looked up.
    #[default]
    Unknown,
}

/// Why the cluster killed `pod`, or `None` when it did not (still running, finished, failed on
/// its own, deleted by us or a person).
///
/// The condition only counts on a pod that is on its way out (being deleted, or `Failed`): the
/// disruption controller resets a `DisruptionTarget` left on a pod nobody deleted to `False`
/// after two minutes (`pkg/controller/disruption/disruption.go`, `stalePodDisruptionTimeout`),
/// so until then it may be stale. A `Succeeded` pod finished its work, whatever happened next.
pub fn classify(pod: &Pod, node: NodePresence) -> Option<Disruption> {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref());
    if phase == Some("Succeeded") {
        return None;
    }
    let ending = pod.metadata.deletion_timestamp.is_some() || phase == Some("Failed");
    let condition = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == DISRUPTION_TARGET && c.status == "True");
    if let Some(c) = condition
        && ending
    {
        return Some(Disruption::from_condition_reason(
            c.reason.as_deref().unwrap_or_default(),
        ));
    }
    match status.and_then(|s| s.reason.as_deref()) {
        Some("Evicted") => return Some(Disruption::Evicted),
        Some("NodeLost") => return Some(Disruption::NodeLost),
        _ => {}
    }
    // A runner that already failed by itself stays its own failure if its node goes later.
    let bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    (node == NodePresence::Gone && bound && phase != Some("Failed")).then_some(Disruption::NodeLost)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodCondition, PodSpec, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    /// A runner pod bound to `node-a` whose runner container is running.
    fn running() -> Pod {
        Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("runner-abcde".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("node-a".into()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![
                    condition("PodScheduled", "True", None, None),
                    condition("Ready", "True", None, None),
                ]),
                container_statuses: Some(vec![ContainerStatus {
                    name: "runner".into(),
                    ready: true,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn condition(type_: &str, status: &str, reason: Option<&str>, message: Option<&str>) -> PodCondition {
        PodCondition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.map(Into::into),
            message: message.map(Into::into),
            last_transition_time: Some(Time(jiff::Timestamp::UNIX_EPOCH)),
            ..Default::default()
        }
    }

    fn with_disruption(mut pod: Pod, reason: &str, message: &str) -> Pod {
        let status = pod.status.get_or_insert_default();
        status.conditions.get_or_insert_default().push(condition(
            DISRUPTION_TARGET,
            "True",
            Some(reason),
            Some(message),
        ));
        pod
    }

    fn deleting(mut pod: Pod) -> Pod {
        pod.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        pod.metadata.deletion_grace_period_seconds = Some(30);
        pod
    }

    fn failed(mut pod: Pod, reason: Option<&str>, message: Option<&str>) -> Pod {
        let status = pod.status.get_or_insert_default();
        status.phase = Some("Failed".into());
        status.reason = reason.map(Into::into);
        status.message = message.map(Into::into);
        pod
    }

    fn exited(mut pod: Pod, code: i32) -> Pod {
        let status = pod.status.get_or_insert_default();
        status.container_statuses = Some(vec![ContainerStatus {
            name: "runner".into(),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: code,
                    reason: Some(if code == 0 { "Completed" } else { "Error" }.into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }]);
        pod
    }

    #[test]
    fn scheduler_preemption_is_read_from_the_condition_of_a_deleted_pod() {
        let pod = deleting(with_disruption(
            running(),
            "PreemptionByScheduler",
            "default-scheduler: preempting to accommodate a higher priority pod",
        ));
        assert_eq!(
            classify(&pod, NodePresence::Present),
            Some(Disruption::PreemptionByScheduler)
        );
    }

    #[test]
    fn taint_eviction_of_an_unreachable_node_keeps_the_phase_running() {
        // The kubelet cannot confirm: the pod stays Running and Terminating, Ready=False.
        let mut pod = deleting(with_disruption(
            running(),
            "DeletionByTaintManager",
            "Taint manager: deleting due to NoExecute taint",
        ));
        pod.status.as_mut().unwrap().conditions.as_mut().unwrap()[1] =
            condition("Ready", "False", Some("NodeNotReady"), None);
        assert_eq!(
            classify(&pod, NodePresence::Present),
            Some(Disruption::DeletionByTaintManager)
        );
    }

    #[test]
    fn a_drain_is_an_eviction_api_disruption() {
        let pod = deleting(with_disruption(
            running(),
            "EvictionByEvictionAPI",
            "Eviction API: evicting",
        ));
        let got = classify(&pod, NodePresence::Unknown);
        assert_eq!(got, Some(Disruption::EvictionByEvictionApi));
        assert_eq!(got.map(Disruption::as_str), Some("EvictionByEvictionAPI"));
    }

    #[test]
    fn pod_gc_marks_the_pod_failed_when_its_node_is_gone() {
        let pod = deleting(failed(
            with_disruption(running(), "DeletionByPodGC", "PodGC: node no longer exists"),
            None,
            None,
        ));
        assert_eq!(
            classify(&pod, NodePresence::Gone),
            Some(Disruption::DeletionByPodGc)
        );
        assert_eq!(Disruption::DeletionByPodGc.as_str(), "DeletionByPodGC");
    }

    #[test]
    fn kubelet_pressure_eviction_prefers_the_condition_over_the_status_reason() {
        let pod = exited(
            failed(
                with_disruption(
                    running(),
                    "TerminationByKubelet",
                    "The node was low on resource: memory.",
                ),
                Some("Evicted"),
                Some("The node was low on resource: memory. Threshold quantity: 100Mi."),
            ),
            137,
        );
        assert_eq!(
            classify(&pod, NodePresence::Present),
            Some(Disruption::TerminationByKubelet)
        );
    }

    #[test]
    fn graceful_node_shutdown_is_a_kubelet_termination() {
        let pod = exited(
            failed(
                with_disruption(
                    running(),
                    "TerminationByKubelet",
                    "Pod was terminated in response to imminent node shutdown.",
                ),
                Some("Terminated"),
                Some("Pod was terminated in response to imminent node shutdown."),
            ),
            143,
        );
        assert_eq!(
            classify(&pod, NodePresence::Present),
            Some(Disruption::TerminationByKubelet)
        );
    }

    #[test]
    fn device_taint_eviction_and_unknown_reasons_count() {
        let dra = deleting(with_disruption(
            running(),
            "DeletionByDeviceTaintManager",
            "Device Taint manager: deleting due to NoExecute taint",
        ));
        assert_eq!(
            classify(&dra, NodePresence::Present),
            Some(Disruption::DeletionByDeviceTaintManager)
        );
        let future = deleting(with_disruption(running(), "SomethingNew", "a newer Kubernetes"));
        assert_eq!(classify(&future, NodePresence::Present), Some(Disruption::Other));
    }

    #[test]
    fn older_clusters_say_evicted_or_node_lost_in_the_status_reason() {
        let evicted = exited(
            failed(
                running(),
                Some("Evicted"),
                Some("The node was low on resource: ephemeral-storage."),
            ),
            137,
        );
        assert_eq!(
            classify(&evicted, NodePresence::Present),
            Some(Disruption::Evicted)
        );
        let mut lost = deleting(running());
        lost.status.as_mut().unwrap().reason = Some("NodeLost".into());
        assert_eq!(classify(&lost, NodePresence::Unknown), Some(Disruption::NodeLost));
    }

    #[test]
    fn a_live_pod_on_a_deleted_node_is_lost() {
        assert_eq!(
            classify(&running(), NodePresence::Gone),
            Some(Disruption::NodeLost)
        );
        let mut unbound = running();
        unbound.spec.as_mut().unwrap().node_name = None;
        unbound.status.as_mut().unwrap().phase = Some("Pending".into());
        assert_eq!(
            classify(&unbound, NodePresence::Gone),
            None,
            "never placed on that node"
        );
    }

    #[test]
    fn a_runner_that_failed_by_itself_is_not_a_disruption() {
        let pod = exited(failed(running(), None, None), 1);
        assert_eq!(classify(&pod, NodePresence::Present), None);
        assert_eq!(
            classify(&pod, NodePresence::Gone),
            None,
            "its node going away later does not make its own failure a disruption"
        );
    }

    #[test]
    fn a_pod_deleted_by_us_or_a_person_is_not_a_disruption() {
        let pod = deleting(running());
        assert_eq!(classify(&pod, NodePresence::Present), None);
        assert_eq!(classify(&exited(pod, 143), NodePresence::Unknown), None);
    }

    #[test]
    fn a_stale_or_false_condition_is_not_a_disruption() {
        // An eviction whose delete never came: the disruption controller resets it later.
        let stale = with_disruption(running(), "EvictionByEvictionAPI", "Eviction API: evicting");
        assert_eq!(classify(&stale, NodePresence::Present), None);
        let mut reset = deleting(running());
        reset
            .status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()
            .push(condition(
                DISRUPTION_TARGET,
                "False",
                Some("EvictionByEvictionAPI"),
                None,
            ));
        assert_eq!(classify(&reset, NodePresence::Present), None);
    }

    #[test]
    fn a_finished_runner_is_not_a_disruption() {
        let mut done = exited(running(), 0);
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        let done = deleting(with_disruption(
            done,
            "DeletionByPodGC",
            "PodGC: node no longer exists",
        ));
        assert_eq!(classify(&done, NodePresence::Gone), None);
        assert_eq!(classify(&Pod::default(), NodePresence::Unknown), None);
    }

    #[test]
    fn labels_are_distinct() {
        let labels: std::collections::BTreeSet<_> = Disruption::ALL.iter().map(|d| d.as_str()).collect();
        assert_eq!(labels.len(), Disruption::ALL.len());
        for d in Disruption::ALL {
            if !matches!(
                d,
                Disruption::Other | Disruption::Evicted | Disruption::NodeLost | Disruption::Unattributed
            ) {
                assert_eq!(Disruption::from_condition_reason(d.as_str()), d, "{d}");
            }
        }
    }
}
