//! What the control plane writes on the pods of a node that stopped answering, pure: the pod
//! status each controller leaves, and the names it signs its Events with. The kubelet stand-in
//! plays the sequence ([`NodeLoss::Unreachable`](super::NodeLoss::Unreachable)).
//!
//! The sequence, as kubernetes/kubernetes runs it (files read at `003e862`):
//!
//! 1. The node lifecycle controller sees the node stop reporting: `MarkPodsNotReady`
//!    (`pkg/controller/util/node/controller_utils.go`) sets each pod's `Ready` condition to
//!    `False` and records a Warning Event `NodeNotReady`, "Node is not ready", as
//!    `node-controller`. It also taints the node `node.kubernetes.io/unreachable:NoExecute`.
//! 2. Once a pod's toleration of that taint runs out (300 s by default), the taint eviction
//!    controller's `addConditionAndDeletePod` (`pkg/controller/tainteviction/taint_eviction.go`)
//!    adds `DisruptionTarget=True`, reason `DeletionByTaintManager`, "Taint manager: deleting due
//!    to NoExecute taint", then deletes the pod with default options (graceful). Its
//!    `emitPodDeletionEvent` records a Normal Event `TaintManagerEviction`, "Marking for deletion
//!    Pod ns/name".
//! 3. No kubelet confirms the deletion: the pod stays `Terminating`, phase still `Running`.
//! 4. When the Node object is deleted, PodGC's `gcOrphaned` (`pkg/controller/podgc/gc_controller.go`,
//!    after its 40 s `quarantineTime`) calls `markFailedAndDeletePodWithCondition`: phase
//!    `Failed` unless terminal already, `DisruptionTarget=True` reason `DeletionByPodGC`, "PodGC:
//!    node no longer exists", then a delete with grace 0.
//!
//! A Node object deleted while its pods still run (a cloud controller removing the Node of a
//! vanished instance, often before the taint manager's 300 s are up) skips steps 2 and 3: PodGC's
//! step 4 alone ([`NodeLoss::NodeDeleted`](super::NodeLoss::NodeDeleted)). PodGC records no Event.
//! The pod's Job controller still counts the pod, which its `batch.kubernetes.io/job-tracking`
//! finalizer holds until then.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Pod condition type Kubernetes sets before it terminates a pod for a disruption.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";
/// `DisruptionTarget` reason of the taint eviction controller.
pub const TAINT_MANAGER_REASON: &str = "DeletionByTaintManager";
/// `DisruptionTarget` message of the taint eviction controller.
pub const TAINT_MANAGER_MESSAGE: &str = "Taint manager: deleting due to NoExecute taint";
/// `DisruptionTarget` reason of PodGC for a pod whose node is gone.
pub const POD_GC_REASON: &str = "DeletionByPodGC";
/// `DisruptionTarget` message of PodGC for a pod whose node is gone.
pub const POD_GC_MESSAGE: &str = "PodGC: node no longer exists";
/// Event source of the node lifecycle controller.
pub const NODE_CONTROLLER: &str = "node-controller";
/// Event source of the taint eviction controller (`taintEvictionController` in
/// `pkg/controller/nodelifecycle/node_lifecycle_controller.go`).
pub const TAINT_EVICTION_CONTROLLER: &str = "taint-eviction-controller";
/// Reason of the node lifecycle controller's Event on each pod of a node gone not ready.
pub const NODE_NOT_READY_EVENT: &str = "NodeNotReady";
/// Reason of the taint eviction controller's Event on a pod it deletes.
pub const TAINT_EVICTION_EVENT: &str = "TaintManagerEviction";
/// Finalizer the simulator puts on a pod of an unreachable node before deleting it. A real API
/// server keeps a gracefully deleted pod until its kubelet confirms; the fake API server
/// removes a pod without finalizers at once, so this holds it `Terminating` instead, until
/// PodGC's step lets it go.
pub const UNREACHABLE_HOLD_FINALIZER: &str = "testkit.forgerunner.dev/node-unreachable";

/// `UpdatePodCondition` (`pkg/api/v1/pod/util.go`): sets `condition`, replacing the one of its
/// type; the transition time moves only when the status changes. Returns whether anything
/// changed.
pub fn update_condition(status: &mut PodStatus, mut condition: PodCondition, now: Timestamp) -> bool {
    condition.last_transition_time = Some(Time(now));
    let conditions = status.conditions.get_or_insert_default();
    let Some(old) = conditions.iter_mut().find(|c| c.type_ == condition.type_) else {
        conditions.push(condition);
        return true;
    };
    if condition.status == old.status {
        condition.last_transition_time = old.last_transition_time.clone();
    }
    let changed = *old != condition;
    *old = condition;
    changed
}

fn disruption(reason: &str, message: &str) -> PodCondition {
    PodCondition {
        type_: DISRUPTION_TARGET.to_owned(),
        status: "True".to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        ..PodCondition::default()
    }
}

/// Step 1, `MarkPodsNotReady`: the `Ready` condition turns `False`, its reason and message
/// kept. Returns whether the status changed (a pod without a `Ready` condition is left alone).
pub fn mark_not_ready(status: &mut PodStatus, now: Timestamp) -> bool {
    let ready = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
        .cloned();
    let Some(mut ready) = ready else {
        return false;
    };
    ready.status = "False".to_owned();
    update_condition(status, ready, now)
}

/// Step 2, `addConditionAndDeletePod`: `DisruptionTarget=True` by the taint manager; the phase
/// is left as it is. Returns whether the status changed.
pub fn mark_taint_eviction(status: &mut PodStatus, now: Timestamp) -> bool {
    update_condition(
        status,
        disruption(TAINT_MANAGER_REASON, TAINT_MANAGER_MESSAGE),
        now,
    )
}

/// Step 4, `markFailedAndDeletePodWithCondition` for an orphaned pod: phase `Failed` and
/// `DisruptionTarget=True` by PodGC, unless the pod already finished (then nothing is written).
/// Returns whether the status changed.
pub fn mark_pod_gc_orphan(status: &mut PodStatus, now: Timestamp) -> bool {
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return false;
    }
    status.phase = Some("Failed".to_owned());
    update_condition(status, disruption(POD_GC_REASON, POD_GC_MESSAGE), now);
    true
}

#[cfg(test)]
#[path = "node_loss_tests.rs"]
mod tests;
