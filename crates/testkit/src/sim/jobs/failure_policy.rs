//! A Job's `podFailurePolicy` matched against a failed pod, pure, as the Job controller does it:
//! kubernetes/kubernetes `pkg/controller/job/pod_failure_policy.go` `matchPodFailurePolicy`
//! (with `matchOnExitCodes`, `matchOnPodConditions`).
//!
//! Rules are tried in order; the first whose requirement holds and whose action is known decides.
//! A rule's `onExitCodes` looks at terminated containers (then init containers) with a non-zero
//! exit code, optionally of one container; its `onPodConditions` holds when a pattern's type and
//! status equal one of the pod's conditions. An unknown action skips the rule, as the API asks
//! clients to; `FailIndex` (indexed Jobs with `backoffLimitPerIndex`, which the simulator does not
//! play) is skipped likewise.

use k8s_openapi::api::batch::v1::{PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition, PodStatus};

/// What a matching rule does with the failed pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyAction {
    /// `FailJob`: the Job fails, reason `PodFailurePolicy`.
    FailJob,
    /// `Ignore`: the failure does not count towards `backoffLimit`.
    Ignore,
    /// `Count`: the default handling.
    Count,
}

impl PolicyAction {
    fn parse(action: &str) -> Option<PolicyAction> {
        match action {
            "FailJob" => Some(PolicyAction::FailJob),
            "Ignore" => Some(PolicyAction::Ignore),
            "Count" => Some(PolicyAction::Count),
            _ => None,
        }
    }
}

/// The rule a failed pod matched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyMatch {
    /// The rule's action.
    pub action: PolicyAction,
    /// For `FailJob`, the message of the Job's conditions, worded as the Job controller's.
    pub message: Option<String>,
}

/// The first rule of `policy` the failed `pod` matches, or `None` for the default handling.
pub fn match_policy(policy: &PodFailurePolicy, pod: &Pod) -> Option<PolicyMatch> {
    let default_status = PodStatus::default();
    let status = pod.status.as_ref().unwrap_or(&default_status);
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    for (index, rule) in policy.rules.iter().enumerate() {
        // Upstream reads `onExitCodes` when set, else `onPodConditions` (validation allows one).
        let message = if let Some(requirement) = &rule.on_exit_codes {
            let Some((container, code)) = match_on_exit_codes(status, requirement) else {
                continue;
            };
            format!(
                "Container {} for pod {namespace}/{name} failed with exit code {code} matching {} rule at index {index}",
                container.name, rule.action
            )
        } else if let Some(patterns) = &rule.on_pod_conditions {
            let Some(condition) = match_on_pod_conditions(status, patterns) else {
                continue;
            };
            format!(
                "Pod {namespace}/{name} has condition {} matching {} rule at index {index}",
                condition.type_, rule.action
            )
        } else {
            continue;
        };
        let Some(action) = PolicyAction::parse(&rule.action) else {
            continue;
        };
        return Some(PolicyMatch {
            action,
            message: (action == PolicyAction::FailJob).then_some(message),
        });
    }
    None
}

/// `matchOnExitCodes`: the first terminated container, then init container, whose non-zero exit
/// code the requirement's operator accepts.
fn match_on_exit_codes<'a>(
    status: &'a PodStatus,
    requirement: &PodFailurePolicyOnExitCodesRequirement,
) -> Option<(&'a ContainerStatus, i32)> {
    let containers = status.container_statuses.iter().flatten();
    let inits = status.init_container_statuses.iter().flatten();
    containers.chain(inits).find_map(|c| {
        let code = c.state.as_ref()?.terminated.as_ref()?.exit_code;
        let named = requirement.container_name.as_deref().is_none_or(|n| n == c.name);
        let listed = requirement.values.contains(&code);
        let accepted = match requirement.operator.as_str() {
            "In" => listed,
            "NotIn" => !listed,
            _ => false,
        };
        (named && code != 0 && accepted).then_some((c, code))
    })
}

/// `matchOnPodConditions`: the first condition of the pod some pattern names with its status
/// (the API server defaults a pattern's status to `True`).
fn match_on_pod_conditions<'a>(
    status: &'a PodStatus,
    patterns: &[k8s_openapi::api::batch::v1::PodFailurePolicyOnPodConditionsPattern],
) -> Option<&'a PodCondition> {
    status.conditions.iter().flatten().find(|c| {
        patterns
            .iter()
            .any(|p| p.type_ == c.type_ && p.status.as_deref().unwrap_or("True") == c.status)
    })
}

#[cfg(test)]
#[path = "failure_policy_tests.rs"]
mod tests;
