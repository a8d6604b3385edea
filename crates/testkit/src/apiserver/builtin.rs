//! Decoding, pruning, defaulting and validation of built-in types.
//!
//! Bodies are decoded into the k8s-openapi type and encoded again, so unknown fields are dropped
//! (and reported) and a type mismatch is rejected as the real server's decoder would.

use k8s_openapi::api::{apps, batch, coordination, core, events, networking, rbac};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::registry::Builtin;

fn roundtrip<T: Serialize + DeserializeOwned>(v: &Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
    serde_json::to_value(&typed).map_err(|e| e.to_string())
}

/// Decodes and re-encodes a body as the built-in type, dropping unknown fields.
pub fn decode(builtin: Builtin, v: &Value) -> Result<Value, String> {
    match builtin {
        Builtin::Namespace => roundtrip::<core::v1::Namespace>(v),
        Builtin::Secret => roundtrip::<core::v1::Secret>(v),
        Builtin::ConfigMap => roundtrip::<core::v1::ConfigMap>(v),
        Builtin::Pod => roundtrip::<core::v1::Pod>(v),
        Builtin::CoreEvent => roundtrip::<core::v1::Event>(v),
        Builtin::ServiceAccount => roundtrip::<core::v1::ServiceAccount>(v),
        Builtin::Service => roundtrip::<core::v1::Service>(v),
        Builtin::PersistentVolumeClaim => roundtrip::<core::v1::PersistentVolumeClaim>(v),
        Builtin::NetworkPolicy => roundtrip::<networking::v1::NetworkPolicy>(v),
        Builtin::Job => roundtrip::<batch::v1::Job>(v),
        Builtin::Event => roundtrip::<events::v1::Event>(v),
        Builtin::Lease => roundtrip::<coordination::v1::Lease>(v),
        Builtin::Deployment => roundtrip::<apps::v1::Deployment>(v),
        Builtin::Role => roundtrip::<rbac::v1::Role>(v),
        Builtin::RoleBinding => roundtrip::<rbac::v1::RoleBinding>(v),
        Builtin::ClusterRole => roundtrip::<rbac::v1::ClusterRole>(v),
        Builtin::ClusterRoleBinding => roundtrip::<rbac::v1::ClusterRoleBinding>(v),
        Builtin::Crd => roundtrip::<CustomResourceDefinition>(v),
    }
}

/// Struct-pointer fields that are meaningful when empty: Go's `omitempty` keeps a non-nil
/// pointer to an empty struct (`emptyDir: {}` is how a pod asks for an emptyDir volume).
const KEEP_EMPTY: &[&str] = &["securityContext", "status", "emptyDir"];

/// Removes empty lists and maps recursively, as Go's `omitempty` does on encode.
pub fn strip_empty(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for x in m.values_mut() {
                strip_empty(x);
            }
            m.retain(|k, x| !is_empty_container(x) || KEEP_EMPTY.contains(&k.as_str()));
        }
        Value::Array(a) => a.iter_mut().for_each(strip_empty),
        _ => {}
    }
}

/// Paths present (non-null) in `input` but missing from `decoded`: the unknown fields.
pub fn unknown_fields(input: &Value, decoded: &Value) -> Vec<String> {
    let mut out = Vec::new();
    collect_unknown(input, decoded, "", &mut out);
    out
}

fn collect_unknown(input: &Value, decoded: &Value, path: &str, out: &mut Vec<String>) {
    match (input, decoded) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match b.get(k) {
                    Some(dv) => collect_unknown(v, dv, &p, out),
                    None if !v.is_null() && !is_empty_container(v) => out.push(p),
                    None => {}
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                collect_unknown(x, y, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn is_empty_container(v: &Value) -> bool {
    matches!(v, Value::Object(m) if m.is_empty()) || matches!(v, Value::Array(a) if a.is_empty())
}

fn obj<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Map<String, Value>> {
    let m = v.as_object_mut()?;
    let e = m.entry(key.to_string()).or_insert_with(|| json!({}));
    if !e.is_object() {
        *e = json!({});
    }
    e.as_object_mut()
}

fn default_field(m: &mut Map<String, Value>, key: &str, val: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.to_string(), val);
    }
}

/// Applies the server-side defaults the operator and simulator may rely on.
pub fn apply_defaults(builtin: Builtin, v: &mut Value, uid: &str, name: &str) {
    match builtin {
        Builtin::Namespace => {
            if let Some(labels) = v.pointer_mut("/metadata").and_then(|m| obj(m, "labels")) {
                labels.insert("kubernetes.io/metadata.name".into(), json!(name));
            }
            if let Some(spec) = obj(v, "spec") {
                default_field(spec, "finalizers", json!(["kubernetes"]));
            }
            if let Some(status) = obj(v, "status") {
                default_field(status, "phase", json!("Active"));
            }
        }
        Builtin::Secret => {
            if let Some(m) = v.as_object_mut() {
                default_field(m, "type", json!("Opaque"));
                merge_string_data(m);
            }
        }
        Builtin::Pod => {
            if let Some(spec) = obj(v, "spec") {
                pod_spec_defaults(spec);
            }
            if let Some(status) = obj(v, "status") {
                default_field(status, "phase", json!("Pending"));
            }
        }
        Builtin::Job => job_defaults(v, uid, name),
        Builtin::Service => {
            if let Some(spec) = obj(v, "spec") {
                default_field(spec, "type", json!("ClusterIP"));
                default_field(spec, "sessionAffinity", json!("None"));
            }
        }
        Builtin::Deployment => {
            if let Some(spec) = obj(v, "spec") {
                default_field(spec, "replicas", json!(1));
                default_field(spec, "revisionHistoryLimit", json!(10));
                default_field(spec, "progressDeadlineSeconds", json!(600));
            }
        }
        _ => {}
    }
}

/// `stringData` is write-only: merged into base64 `data`, then dropped.
fn merge_string_data(m: &mut Map<String, Value>) {
    use base64::Engine;
    let Some(Value::Object(sd)) = m.remove("stringData") else {
        return;
    };
    let data = m.entry("data").or_insert_with(|| json!({}));
    if let Some(data) = data.as_object_mut() {
        for (k, val) in sd {
            let text = val.as_str().unwrap_or_default().to_string();
            data.insert(k, json!(base64::engine::general_purpose::STANDARD.encode(text)));
        }
    }
}

fn pod_spec_defaults(spec: &mut Map<String, Value>) {
    default_field(spec, "restartPolicy", json!("Always"));
    default_field(spec, "terminationGracePeriodSeconds", json!(30));
    default_field(spec, "dnsPolicy", json!("ClusterFirst"));
    default_field(spec, "schedulerName", json!("default-scheduler"));
    default_field(spec, "securityContext", json!({}));
    let sa = spec
        .get("serviceAccountName")
        .cloned()
        .unwrap_or(json!("default"));
    default_field(spec, "serviceAccountName", sa.clone());
    default_field(spec, "serviceAccount", sa);
    for list in ["containers", "initContainers"] {
        if let Some(Value::Array(cs)) = spec.get_mut(list) {
            for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                default_field(c, "terminationMessagePath", json!("/dev/termination-log"));
                default_field(c, "terminationMessagePolicy", json!("File"));
                let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
                let latest = !image.contains(':') || image.ends_with(":latest");
                default_field(
                    c,
                    "imagePullPolicy",
                    json!(if latest { "Always" } else { "IfNotPresent" }),
                );
            }
        }
    }
}

fn job_defaults(v: &mut Value, uid: &str, name: &str) {
    let Some(spec) = obj(v, "spec") else { return };
    default_field(spec, "parallelism", json!(1));
    default_field(spec, "completions", json!(1));
    default_field(spec, "backoffLimit", json!(6));
    default_field(spec, "completionMode", json!("NonIndexed"));
    default_field(spec, "suspend", json!(false));
    // `SetDefaults_Job` and `SetDefaults_PodFailurePolicyOnPodConditionsPattern`
    // (`pkg/apis/batch/v1/defaults.go`): with a `podFailurePolicy` only failed pods are replaced,
    // and a condition pattern's status is `True` unless given.
    let with_policy = spec.get("podFailurePolicy").is_some_and(|p| !p.is_null());
    let replacement = if with_policy {
        "Failed"
    } else {
        "TerminatingOrFailed"
    };
    default_field(spec, "podReplacementPolicy", json!(replacement));
    let rules = spec
        .get_mut("podFailurePolicy")
        .and_then(|p| p.get_mut("rules"))
        .and_then(Value::as_array_mut);
    for rule in rules.into_iter().flatten() {
        let patterns = rule.get_mut("onPodConditions").and_then(Value::as_array_mut);
        for pattern in patterns.into_iter().flatten().filter_map(Value::as_object_mut) {
            default_field(pattern, "status", json!("True"));
        }
    }
    let manual = spec
        .get("manualSelector")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if !manual {
        default_field(
            spec,
            "selector",
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}),
        );
    }
    let Some(template) = spec.get_mut("template") else {
        return;
    };
    if !manual && let Some(labels) = v_labels(template) {
        for (k, val) in [
            ("batch.kubernetes.io/controller-uid", uid),
            ("batch.kubernetes.io/job-name", name),
            ("controller-uid", uid),
            ("job-name", name),
        ] {
            labels.entry(k.to_string()).or_insert_with(|| json!(val));
        }
    }
    if let Some(pspec) = obj(template, "spec") {
        pod_spec_defaults(pspec);
    }
}

fn v_labels(template: &mut Value) -> Option<&mut Map<String, Value>> {
    let meta = obj(template, "metadata")?;
    let e = meta.entry("labels".to_string()).or_insert_with(|| json!({}));
    if !e.is_object() {
        *e = json!({});
    }
    e.as_object_mut()
}

/// Field errors of a built-in object, as (field path, message) pairs.
pub fn validate(builtin: Builtin, v: &Value) -> Vec<(String, String)> {
    let mut errs = Vec::new();
    match builtin {
        Builtin::Pod => check_containers(v.pointer("/spec"), "spec", &mut errs),
        Builtin::Job => {
            let policy = v
                .pointer("/spec/template/spec/restartPolicy")
                .and_then(Value::as_str);
            let failure_policy = v.pointer("/spec/podFailurePolicy").filter(|p| !p.is_null());
            if !matches!(policy, Some("Never" | "OnFailure")) {
                errs.push((
                    "spec.template.spec.restartPolicy".into(),
                    format!(
                        "Unsupported value: \"{}\": supported values: \"OnFailure\", \"Never\"",
                        policy.unwrap_or("Always")
                    ),
                ));
            } else if failure_policy.is_some() && policy != Some("Never") {
                errs.push((
                    "spec.template.spec.restartPolicy".into(),
                    format!(
                        "Invalid value: \"{}\": only \"Never\" is supported when podFailurePolicy is specified",
                        policy.unwrap_or_default()
                    ),
                ));
            }
            if let Some(failure_policy) = failure_policy {
                check_pod_failure_policy(v, failure_policy, &mut errs);
            }
            check_containers(v.pointer("/spec/template/spec"), "spec.template.spec", &mut errs);
        }
        _ => {}
    }
    errs
}

/// What `validateJobSpec` (`pkg/apis/batch/validation/validation.go`) asks of a Job with a
/// `podFailurePolicy` beyond its restart policy: `podReplacementPolicy: Failed`
/// (`validatePodReplacementPolicy`), and rules with a known action and exactly one of
/// `onExitCodes` and `onPodConditions` (`validatePodFailurePolicyRule`).
fn check_pod_failure_policy(job: &Value, policy: &Value, errs: &mut Vec<(String, String)>) {
    if let Some(replacement) = job.pointer("/spec/podReplacementPolicy").and_then(Value::as_str)
        && replacement != "Failed"
    {
        errs.push((
            "spec.podReplacementPolicy".into(),
            format!("Unsupported value: \"{replacement}\": supported values: \"Failed\""),
        ));
    }
    let rules = policy.get("rules").and_then(Value::as_array);
    for (i, rule) in rules.into_iter().flatten().enumerate() {
        let path = format!("spec.podFailurePolicy.rules[{i}]");
        match rule.get("action").and_then(Value::as_str).unwrap_or_default() {
            "" => errs.push((
                format!("{path}.action"),
                "Required value: valid values: [\"Count\" \"FailIndex\" \"FailJob\" \"Ignore\"]".into(),
            )),
            "FailIndex" if job.pointer("/spec/backoffLimitPerIndex").is_none_or(Value::is_null) => {
                errs.push((
                    format!("{path}.action"),
                    "Invalid value: \"FailIndex\": requires the backoffLimitPerIndex to be set".into(),
                ));
            }
            "Count" | "FailIndex" | "FailJob" | "Ignore" => {}
            other => errs.push((
                format!("{path}.action"),
                format!(
                    "Unsupported value: \"{other}\": supported values: \"Count\", \"FailIndex\", \"FailJob\", \"Ignore\""
                ),
            )),
        }
        let exit_codes = rule.get("onExitCodes").is_some_and(|c| !c.is_null());
        let conditions = rule
            .get("onPodConditions")
            .and_then(Value::as_array)
            .is_some_and(|c| !c.is_empty());
        let detail = match (exit_codes, conditions) {
            (true, true) => Some("specifying both OnExitCodes and OnPodConditions is not supported"),
            (false, false) => Some("specifying one of OnExitCodes and OnPodConditions is required"),
            _ => None,
        };
        if let Some(detail) = detail {
            errs.push((path, format!("Invalid value: \"object\": {detail}")));
        }
    }
}

fn check_containers(spec: Option<&Value>, path: &str, errs: &mut Vec<(String, String)>) {
    let containers = spec.and_then(|s| s.get("containers")).and_then(Value::as_array);
    match containers {
        None => errs.push((format!("{path}.containers"), "Required value".into())),
        Some(cs) if cs.is_empty() => errs.push((format!("{path}.containers"), "Required value".into())),
        Some(cs) => {
            for (i, c) in cs.iter().enumerate() {
                if c.get("image").and_then(Value::as_str).is_none_or(str::is_empty) {
                    errs.push((format!("{path}.containers[{i}].image"), "Required value".into()));
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "builtin_tests.rs"]
mod tests;
