//! The runner Job's side of a disruption: a `podFailurePolicy` that makes the Job controller
//! remember that its pod carried `DisruptionTarget`, and the reading of that memory once the pod
//! itself is gone.
//!
//! Why the Job: when a Node object is deleted (a cloud controller, Karpenter, the cluster
//! autoscaler; the common end of a spot instance), PodGC's `gcOrphaned`
//! (`pkg/controller/podgc/gc_controller.go`, after its 40 s `quarantineTime`) calls
//! `markFailedAndDeletePodWithCondition`: phase `Failed`, `DisruptionTarget=True` reason
//! `DeletionByPodGC`, then a delete with grace 0. The pod is gone before the operator comes to
//! read it, so the pod alone ([`super::classify`]) can no longer tell.
//!
//! The Job controller (kubernetes/kubernetes `pkg/controller/job`) holds each pod with its
//! `batch.kubernetes.io/job-tracking` finalizer until it has counted it, and matches a failed pod
//! against the Job's `podFailurePolicy` first (`syncJob` → `getFailJobMessage` →
//! `matchPodFailurePolicy` in `pod_failure_policy.go`: rules in order, the first whose
//! `onPodConditions` pattern equals a condition's type and status wins). A `FailJob` match
//! writes `FailureTarget`, then, once the pod's finalizer is off, `Failed`, both with reason
//! `PodFailurePolicy` (k8s.io/api `batch/v1` `JobReasonPodFailurePolicy`). Without a match a
//! pod of a `backoffLimit: 0` Job ends it `BackoffLimitExceeded`, as before.
//!
//! The field is alpha in Kubernetes 1.25, beta and on by default from 1.26, GA and locked on
//! from 1.31 (`JobPodFailurePolicy`, `pkg/features/kube_features.go`); `DisruptionTarget` itself
//! follows the same versions (`PodDisruptionConditions`). It needs `restartPolicy: Never`, which
//! every runner pod has.
//!
//! Its price: with a `podFailurePolicy` the Job controller counts a pod as failed only once its
//! phase is `Failed` (`isPodFailed`, `onlyReplaceFailedPods` in `job_controller.go`). A pod the
//! taint manager deleted on a node that stopped answering stays `Terminating` in phase
//! `Running` while its Node object exists, so its runner Job fails only when the Node goes
//! (PodGC then marks the pod `Failed`) or the node comes back (its kubelet does). The operator
//! does not wait for that: it reads such a pod while the Job still runs
//! (`reconcile::runner_exit::killed_runners`).

use k8s_openapi::api::batch::v1::{
    PodFailurePolicy, PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule,
};

use super::{DISRUPTION_TARGET, Disruption};
use crate::runner_job::ObservedJob;

/// `podFailurePolicy` action that fails the whole Job (k8s.io/api `PodFailurePolicyActionFailJob`).
pub const FAIL_JOB: &str = "FailJob";
/// Reason of the Job's `FailureTarget` and `Failed` conditions when a pod matched a `FailJob`
/// rule (k8s.io/api `batch/v1` `JobReasonPodFailurePolicy`).
pub const POD_FAILURE_POLICY_REASON: &str = "PodFailurePolicy";

/// The runner Job's `podFailurePolicy`: one rule, `FailJob` on `DisruptionTarget=True`. A pod
/// with that condition fails the Job at once (as `backoffLimit: 0` would anyway), but with reason
/// [`POD_FAILURE_POLICY_REASON`], which outlives the pod.
///
/// Every `FailJob` rule here must fire on `DisruptionTarget` alone: [`classify_job`] reads the
/// reason as a disruption on Jobs the operator's store keeps without their spec.
pub fn runner_pod_failure_policy() -> PodFailurePolicy {
    PodFailurePolicy {
        rules: vec![PodFailurePolicyRule {
            action: FAIL_JOB.to_owned(),
            on_exit_codes: None,
            on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                type_: DISRUPTION_TARGET.to_owned(),
                // The API server defaults it to True; written out so the spec reads as sent.
                status: Some("True".to_owned()),
            }]),
        }],
    }
}

/// Whether the runner Job `job` failed because its pod carried `DisruptionTarget=True`: a true
/// `FailureTarget` or `Failed` condition with reason [`POD_FAILURE_POLICY_REASON`]. The pod's
/// own reason is gone with it, so the answer is [`Disruption::Unattributed`].
///
/// The store keeps runner Jobs without their spec ([`ObservedJob`]), so the policy is not read
/// back: every runner Job is built with [`runner_pod_failure_policy`], whose one `FailJob` rule
/// fires on `DisruptionTarget` alone, and the Job controller writes the reason only for a Job
/// with a policy.
pub fn classify_job(job: &ObservedJob) -> Option<Disruption> {
    let failed_by_policy = job.status.as_ref()?.conditions.iter().flatten().any(|c| {
        (c.type_ == "Failed" || c.type_ == "FailureTarget")
            && c.status == "True"
            && c.reason.as_deref() == Some(POD_FAILURE_POLICY_REASON)
    });
    failed_by_policy.then_some(Disruption::Unattributed)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A runner Job, as the store keeps it, with the given status.
    fn job(status: serde_json::Value) -> ObservedJob {
        serde_json::from_value(json!({
            "metadata": {"name": "r-abcde"},
            "status": status,
        }))
        .expect("job")
    }

    fn condition(type_: &str, reason: &str) -> serde_json::Value {
        json!({"type": type_, "status": "True", "reason": reason, "message": "m"})
    }

    #[test]
    fn the_policy_is_one_fail_job_rule_on_disruption_target() {
        let policy = serde_json::to_value(runner_pod_failure_policy()).expect("json");
        assert_eq!(
            policy,
            json!({"rules": [{
                "action": "FailJob",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            }]})
        );
    }

    #[test]
    fn a_job_failed_by_the_policy_lost_its_pod_to_a_disruption() {
        let failed = job(json!({"failed": 1, "conditions": [
            condition("FailureTarget", "PodFailurePolicy"),
            condition("Failed", "PodFailurePolicy"),
        ]}));
        assert_eq!(classify_job(&failed), Some(Disruption::Unattributed));
        // Between the two writes only `FailureTarget` is there.
        let about_to = job(json!({"conditions": [condition("FailureTarget", "PodFailurePolicy")]}));
        assert_eq!(classify_job(&about_to), Some(Disruption::Unattributed));
    }

    #[test]
    fn a_runner_that_failed_by_itself_fails_its_job_past_the_backoff_limit() {
        // Exit 1 matches no rule: the default handling, `backoffLimit: 0` exceeded.
        let own = job(json!({"failed": 1, "conditions": [
            condition("FailureTarget", "BackoffLimitExceeded"),
            condition("Failed", "BackoffLimitExceeded"),
        ]}));
        assert_eq!(classify_job(&own), None);
        let deadline = job(json!({"conditions": [condition("Failed", "DeadlineExceeded")]}));
        assert_eq!(classify_job(&deadline), None);
        assert_eq!(classify_job(&job(json!({"active": 1}))), None);
    }

    #[test]
    fn a_false_condition_tells_nothing() {
        let reset = job(json!({"conditions": [
            {"type": "Failed", "status": "False", "reason": "PodFailurePolicy"},
        ]}));
        assert_eq!(classify_job(&reset), None);
    }
}
