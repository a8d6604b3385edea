//! What an update may not change in a Job's spec: Kubernetes `pkg/apis/batch/validation/
//! validation.go` `ValidateJobSpecUpdate` (`validateCompletions`, `validatePodTemplateUpdate`)
//! with the options `pkg/registry/batch/job/strategy.go` `validationOptionsForJob` sets:
//! `selector`, `completionMode`, `podFailurePolicy`, `backoffLimitPerIndex`, `managedBy`,
//! `successPolicy` and the pod `template` are immutable; `completions` too, except that an
//! Indexed Job may change it together with `parallelism` (`ElasticIndexedJob`); a Job that was
//! suspended and never started may change its template's node selector, tolerations, node
//! affinity, scheduling gates, labels and annotations. `parallelism`, `suspend`,
//! `activeDeadlineSeconds`, `backoffLimit`, `ttlSecondsAfterFinished` and the rest stay mutable.
//! Both objects are in the stored form, defaults applied, so equal JSON is equal data.

use serde_json::Value;

use super::field::{self, FieldError};

/// Spec fields no update may change, besides `completions` and `template`.
const IMMUTABLE: &[&str] = &[
    "selector",
    "completionMode",
    "podFailurePolicy",
    "backoffLimitPerIndex",
    "managedBy",
    "successPolicy",
];

/// Template fields a suspended Job that never started may change
/// (`AllowMutableSchedulingDirectives`), as JSON pointers into the template.
const SCHEDULING_DIRECTIVES: &[&str] = &[
    "/spec/nodeSelector",
    "/spec/tolerations",
    "/spec/affinity/nodeAffinity",
    "/spec/schedulingGates",
    "/metadata/labels",
    "/metadata/annotations",
];

fn spec<'a>(job: &'a Value, key: &str) -> Option<&'a Value> {
    job.pointer(&format!("/spec/{key}")).filter(|v| !v.is_null())
}

/// `ValidateImmutableField`: `field is immutable`, showing the new value.
fn immutable(path: &str, new: Option<&Value>) -> FieldError {
    field::invalid_json(path, new.unwrap_or(&Value::Null), "field is immutable")
}

/// The template without the scheduling directives, so two templates that differ only there
/// compare equal; an affinity or metadata left empty counts as absent, as upstream drops an
/// emptied affinity.
fn without_directives(template: &Value) -> Value {
    let mut t = template.clone();
    for ptr in SCHEDULING_DIRECTIVES {
        if let Some((parent, key)) = ptr.rsplit_once('/')
            && let Some(p) = t.pointer_mut(parent).and_then(Value::as_object_mut)
        {
            p.remove(key);
        }
    }
    for (parent, key) in [("/spec", "affinity"), ("", "metadata")] {
        let empty = t
            .pointer(&format!("{parent}/{key}"))
            .and_then(Value::as_object)
            .is_some_and(serde_json::Map::is_empty);
        if empty && let Some(p) = t.pointer_mut(parent).and_then(Value::as_object_mut) {
            p.remove(key);
        }
    }
    t
}

/// The field errors of replacing `old` with `new` (both stored Jobs).
pub fn validate(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let (nc, oc) = (spec(new, "completions"), spec(old, "completions"));
    if nc != oc {
        let indexed = spec(new, "completionMode").and_then(Value::as_str) == Some("Indexed");
        if !indexed {
            errs.push(immutable("spec.completions", nc));
        } else if nc.is_some() && nc != spec(new, "parallelism") {
            errs.push(field::invalid_json(
                "spec.completions",
                nc.unwrap_or(&Value::Null),
                "can only be modified in tandem with spec.parallelism",
            ));
        }
    }
    for key in IMMUTABLE {
        let (n, o) = (spec(new, key), spec(old, key));
        if n != o {
            errs.push(immutable(&format!("spec.{key}"), n));
        }
    }
    let (nt, ot) = (spec(new, "template"), spec(old, "template"));
    let suspended = spec(old, "suspend").and_then(Value::as_bool) == Some(true);
    let not_started = old.pointer("/status/startTime").is_none_or(Value::is_null);
    let changed = match (nt, ot) {
        (Some(n), Some(o)) if suspended && not_started => without_directives(n) != without_directives(o),
        (n, o) => n != o,
    };
    if changed {
        errs.push(immutable("spec.template", nt));
    }
    errs
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn job(suspend: bool) -> Value {
        json!({"spec": {"parallelism": 1, "completions": 1, "suspend": suspend,
            "completionMode": "NonIndexed", "backoffLimit": 0,
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u"}},
            "template": {"metadata": {"labels": {"a": "b"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}})
    }

    fn fields(errs: Vec<FieldError>) -> Vec<String> {
        errs.into_iter().map(|e| e.0).collect()
    }

    /// validation.go `ValidateJobSpecUpdate`: completions, selector and template are fixed;
    /// parallelism, suspend and backoffLimit are not.
    #[test]
    fn immutable_and_mutable_fields() {
        let old = job(false);
        let mut new = old.clone();
        new["spec"]["parallelism"] = json!(3);
        new["spec"]["suspend"] = json!(true);
        new["spec"]["backoffLimit"] = json!(2);
        new["spec"]["activeDeadlineSeconds"] = json!(60);
        assert!(validate(&new, &old).is_empty());
        new["spec"]["completions"] = json!(2);
        new["spec"]["selector"] = json!({"matchLabels": {"x": "y"}});
        new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("j");
        assert_eq!(
            fields(validate(&new, &old)),
            vec!["spec.completions", "spec.selector", "spec.template"]
        );
        assert_eq!(validate(&new, &old)[0].1, "Invalid value: 2: field is immutable");
    }

    /// strategy.go `validationOptionsForJob` → `AllowMutableSchedulingDirectives`: only for a
    /// Job suspended before the update that never started.
    #[test]
    fn suspended_jobs_may_move_their_pods() {
        let old = job(true);
        let mut new = old.clone();
        new["spec"]["template"]["spec"]["nodeSelector"] = json!({"pool": "big"});
        new["spec"]["template"]["metadata"]["annotations"] = json!({"x": "y"});
        assert!(validate(&new, &old).is_empty());
        let mut started = old.clone();
        started["status"] = json!({"startTime": "2026-01-01T00:00:00Z"});
        assert_eq!(fields(validate(&new, &started)), vec!["spec.template"]);
        assert_eq!(fields(validate(&new, &job(false))), vec!["spec.template"]);
        new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("j");
        assert_eq!(fields(validate(&new, &old)), vec!["spec.template"]);
    }

    /// validation.go `validateCompletions`: an Indexed Job scales completions with parallelism.
    #[test]
    fn indexed_jobs_scale_completions_with_parallelism() {
        let mut old = job(false);
        old["spec"]["completionMode"] = json!("Indexed");
        let mut new = old.clone();
        new["spec"]["completions"] = json!(4);
        new["spec"]["parallelism"] = json!(4);
        assert!(validate(&new, &old).is_empty());
        new["spec"]["parallelism"] = json!(2);
        assert_eq!(
            validate(&new, &old)[0].1,
            "Invalid value: 4: can only be modified in tandem with spec.parallelism"
        );
    }
}
