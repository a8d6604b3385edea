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
    Job, PodFailurePolicy, PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule,
};

use super::{DISRUPTION_TARGET, Disruption};

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
/// reason as a disruption on Jobs whose spec the operator's store dropped.
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

/// Whether every `FailJob` rule of `policy` fires on `DisruptionTarget=True` alone, so that a Job
/// failed by the policy had a pod with that condition. A Job made by an operator version
/// with other rules (or none) is not read this way.
fn fails_only_on_disruption(policy: &PodFailurePolicy) -> bool {
    let mut fail_job = policy.rules.iter().filter(|r| r.action == FAIL_JOB).peekable();
    fail_job.peek().is_some()
        && fail_job.all(|r| {
            r.on_exit_codes.is_none()
                && r.on_pod_conditions.as_ref().is_some_and(|patterns| {
                    !patterns.is_empty()
                        && patterns.iter().all(|p| {
                            p.type_ == DISRUPTION_TARGET && p.status.as_deref().unwrap_or("True") == "True"
                        })
                })
        })
}

/// Whether the runner Job `job` failed because its pod carried `DisruptionTarget=True`: a true
/// `FailureTarget` or `Failed` condition with reason [`POD_FAILURE_POLICY_REASON`], on a Job
/// whose policy fails it on that condition only. The pod's own reason is gone with it, so the
/// answer is [`Disruption::Unattributed`].
///
/// A Job without its spec is taken as the operator's store keeps a runner Job
/// (`reconcile::slim_job` drops the spec): built with [`runner_pod_failure_policy`]. The reason
/// alone is enough then, as the Job controller writes it only for a Job with a policy.
pub fn classify_job(job: &Job) -> Option<Disruption> {
    if let Some(spec) = &job.spec
        && !spec
            .pod_failure_policy
            .as_ref()
            .is_some_and(fails_only_on_disruption)
    {
        return None;
    }
    let failed_by_policy = job.status.as_ref()?.conditions.iter().flatten().any(|c| {
        (c.type_ == "Failed" || c.type_ == "FailureTarget")
            && c.status == "True"
            && c.reason.as_deref() == Some(POD_FAILURE_POLICY_REASON)
    });
    failed_by_policy.then_some(Disruption::Unattributed)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::batch::v1::JobSpec;
    use serde_json::json;

    use super::*;

    /// A runner Job with our policy and the given status.
    fn job(status: serde_json::Value) -> Job {
        let mut job: Job = serde_json::from_value(json!({
            "metadata": {"name": "r-abcde"},
            "status": status,
        }))
        .expect("job");
        job.spec = Some(JobSpec {
            pod_failure_policy: Some(runner_pod_failure_policy()),
            ..JobSpec::default()
        });
        job
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
    fn the_runner_policy_fails_the_job_on_disruption_alone() {
        assert!(fails_only_on_disruption(&runner_pod_failure_policy()));
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
    fn a_false_condition_or_a_job_without_our_policy_tells_nothing() {
        let reset = job(json!({"conditions": [
            {"type": "Failed", "status": "False", "reason": "PodFailurePolicy"},
        ]}));
        assert_eq!(classify_job(&reset), None);
        // A Job made before the policy existed.
        let mut old = job(json!({"conditions": [condition("Failed", "PodFailurePolicy")]}));
        old.spec = Some(JobSpec::default());
        assert_eq!(classify_job(&old), None);
    }

    #[test]
    fn a_job_as_the_store_keeps_it_is_read_by_its_conditions() {
        // `reconcile::slim_job` drops the spec of every stored runner Job.
        let mut slim = job(json!({"failed": 1, "conditions": [
            condition("FailureTarget", "PodFailurePolicy"),
            condition("Failed", "PodFailurePolicy"),
        ]}));
        slim.spec = None;
        assert_eq!(classify_job(&slim), Some(Disruption::Unattributed));
        let mut own = job(json!({"conditions": [condition("Failed", "BackoffLimitExceeded")]}));
        own.spec = None;
        assert_eq!(classify_job(&own), None);
    }

    #[test]
    fn only_a_policy_that_fails_on_disruption_alone_is_read() {
        let with = |rules: serde_json::Value| -> Job {
            let mut j = job(json!({"conditions": [condition("Failed", "PodFailurePolicy")]}));
            j.spec.as_mut().expect("spec").pod_failure_policy =
                Some(serde_json::from_value(json!({"rules": rules})).expect("policy"));
            j
        };
        let exit_code = with(json!([
            {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
        ]));
        assert_eq!(classify_job(&exit_code), None, "exit 42 fails it too");
        let other_condition = with(json!([
            {"action": "FailJob", "onPodConditions": [{"type": "ConfigIssue", "status": "True"}]},
        ]));
        assert_eq!(classify_job(&other_condition), None);
        let ignore_only = with(json!([
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        ]));
        assert_eq!(classify_job(&ignore_only), None, "no FailJob rule");
        let defaulted_status = with(json!([
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}},
            {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]},
        ]));
        assert_eq!(
            classify_job(&defaulted_status),
            Some(Disruption::Unattributed),
            "status defaults to True; other actions do not fail the Job"
        );
    }
}
