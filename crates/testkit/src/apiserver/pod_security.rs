//! Pod Security admission, as far as runner pods need it: a pod created in a namespace labelled
//! `pod-security.kubernetes.io/enforce: restricted` that breaks the `restricted` profile is
//! refused with 403, in the words a real API server uses, so the operator's reaction (a Job
//! `FailedCreate`, `Degraded=True PodRejected`) can be tested. Other levels are not enforced.

use k8s_openapi::api::core::v1::PodSpec;
use serde_json::Value;

use super::status::{ApiError, ApiResult, Reason};

/// Namespace label naming the enforced Pod Security level.
pub const ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";

/// Refuses `pod` (named `name`) when `namespace` (the Namespace object, if any) enforces
/// `restricted` and the pod breaks it.
pub fn admit(namespace: Option<&Value>, name: &str, pod: &Value) -> ApiResult<()> {
    let level = namespace
        .and_then(|n| n.pointer("/metadata/labels"))
        .and_then(|l| l.get(ENFORCE_LABEL))
        .and_then(Value::as_str);
    if level != Some("restricted") {
        return Ok(());
    }
    let spec: PodSpec = pod
        .get("spec")
        .cloned()
        .and_then(|s| serde_json::from_value(s).ok())
        .unwrap_or_default();
    let violations = forgerunner_core::runner_pod::restricted_violations(&spec);
    if violations.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = violations.iter().map(ToString::to_string).collect();
    Err(ApiError::new(
        Reason::Forbidden,
        format!(
            "pods \"{name}\" is forbidden: violates PodSecurity \"restricted:latest\": {}",
            list.join(", ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ns(level: Option<&str>) -> Value {
        match level {
            Some(l) => json!({"metadata": {"name": "ci", "labels": {ENFORCE_LABEL: l}}}),
            None => json!({"metadata": {"name": "ci"}}),
        }
    }

    fn privileged_pod() -> Value {
        json!({"spec": {"containers": [{"name": "c", "image": "i", "securityContext": {"privileged": true}}]}})
    }

    #[test]
    fn restricted_namespaces_refuse_what_breaks_the_profile() {
        let err = admit(Some(&ns(Some("restricted"))), "p", &privileged_pod()).expect_err("refused");
        assert_eq!(err.reason, Reason::Forbidden);
        assert!(
            err.message.contains("violates PodSecurity \"restricted:latest\""),
            "{}",
            err.message
        );
    }

    #[test]
    fn other_levels_and_plain_namespaces_admit() {
        for level in [None, Some("baseline"), Some("privileged")] {
            assert!(
                admit(Some(&ns(level)), "p", &privileged_pod()).is_ok(),
                "{level:?}"
            );
        }
        assert!(admit(None, "p", &privileged_pod()).is_ok());
    }
}
