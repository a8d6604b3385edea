//! The metadata checks every write goes through, as apimachinery v0.34
//! `pkg/api/validation/objectmeta.go` `ValidateObjectMetaAccessor` makes them: `generateName`
//! and `name` in the format the kind wants, label keys and values (`v1validation.ValidateLabels`
//! in `pkg/apis/meta/v1/validation/validation.go`), annotation keys and their total size
//! (`ValidateAnnotations`, `TotalAnnotationSizeLimitB`). The generic registry runs these for
//! every kind on create and update (apiserver `pkg/registry/rest/create.go` `BeforeCreate`,
//! `update.go` `validateCommonFields`), custom resources and CRDs included.

use serde_json::{Map, Value};

use super::field::{self, FieldError};
use super::naming::{self, NameRule};
use super::registry::{Builtin, ResourceDef};

/// `TotalAnnotationSizeLimitB`: the sum of the lengths of every annotation key and value.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * (1 << 10);

/// The name format of a kind, per its registry strategy. `events_v1` says the write came through
/// `events.k8s.io/v1`, whose strict validation wants a DNS subdomain where core v1 wants none.
pub fn name_rule(def: &ResourceDef, events_v1: bool) -> NameRule {
    match def.builtin {
        // core validation `ValidateNamespaceName` = `NameIsDNSLabel`.
        Some(Builtin::Namespace) => NameRule::DnsLabel,
        // core validation `ValidateServiceName` = `NameIsDNS1035Label`.
        Some(Builtin::Service) => NameRule::Dns1035Label,
        // rbac validation `ValidateRBACName` = `path.IsValidPathSegmentName`.
        Some(Builtin::Role | Builtin::RoleBinding | Builtin::ClusterRole | Builtin::ClusterRoleBinding) => {
            NameRule::PathSegment
        }
        // events.go `ValidateEventCreate`: only events.k8s.io checks ObjectMeta.
        Some(Builtin::CoreEvent | Builtin::Event) if !events_v1 => NameRule::PathSegment,
        // Pods, Secrets, ConfigMaps, ServiceAccounts (`ValidateServiceAccountName`), Jobs
        // (`ValidateReplicationControllerName`), Leases, Deployments, CRDs and custom resources
        // (`NameIsDNSSubdomain`).
        _ => NameRule::DnsSubdomain,
    }
}

/// The errors of `metadata` for a write of `obj`, whose names must follow `rule`.
pub fn validate(rule: NameRule, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let meta = obj.get("metadata").and_then(Value::as_object);
    let text = |k: &str| {
        meta.and_then(|m| m.get(k))
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let generate = text("generateName");
    if !generate.is_empty() {
        for msg in rule.check(generate, true) {
            errs.push(field::invalid("metadata.generateName", generate, &msg));
        }
    }
    let name = text("name");
    for msg in rule.check(name, false) {
        errs.push(field::invalid("metadata.name", name, &msg));
    }
    let empty = Map::new();
    let map = |k: &str| {
        meta.and_then(|m| m.get(k))
            .and_then(Value::as_object)
            .unwrap_or(&empty)
    };
    errs.extend(labels(map("labels"), "metadata.labels"));
    errs.extend(annotations(map("annotations"), "metadata.annotations"));
    errs
}

/// `ValidateLabels`: every key a qualified name, every value a label value.
pub fn labels(labels: &Map<String, Value>, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (k, v) in labels {
        for msg in naming::qualified_name(k) {
            errs.push(field::invalid(path, k, &msg));
        }
        let v = v.as_str().unwrap_or_default();
        for msg in naming::label_value(v) {
            errs.push(field::invalid(path, v, &msg));
        }
    }
    errs
}

/// `ValidateAnnotations`: keys are qualified names (case-insensitively) and keys plus values
/// stay within [`TOTAL_ANNOTATION_SIZE_LIMIT`] bytes.
pub fn annotations(annotations: &Map<String, Value>, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut total = 0usize;
    for (k, v) in annotations {
        for msg in naming::qualified_name(&k.to_lowercase()) {
            errs.push(field::invalid(path, k, &msg));
        }
        total = total
            .saturating_add(k.len())
            .saturating_add(v.as_str().map_or(0, str::len));
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errs.push(field::too_long(path, TOTAL_ANNOTATION_SIZE_LIMIT));
    }
    errs
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// objectmeta.go `ValidateAnnotationsSize` counts key and value bytes, limit exclusive.
    #[test]
    fn annotation_size_counts_keys_and_values() {
        let at = |n: usize| {
            let m = json!({"k": "v".repeat(n)});
            annotations(m.as_object().expect("map"), "metadata.annotations")
        };
        assert!(at(TOTAL_ANNOTATION_SIZE_LIMIT - 1).is_empty());
        assert_eq!(
            at(TOTAL_ANNOTATION_SIZE_LIMIT),
            vec![(
                "metadata.annotations".to_string(),
                "Too long: may not be more than 262144 bytes".to_string()
            )]
        );
        // Keys are checked lower-cased: upper case is fine in annotation keys.
        let m = json!({"Example.COM/Key": "x"});
        assert!(annotations(m.as_object().expect("map"), "a").is_empty());
    }

    /// v1 validation.go `ValidateLabels`: key and value errors both name `metadata.labels`.
    #[test]
    fn labels_name_metadata_labels() {
        let obj = json!({"metadata": {"name": "ok", "labels": {"bad key": "v", "k": "-v"}}});
        let errs = validate(NameRule::DnsSubdomain, &obj);
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs.iter().all(|(f, _)| f == "metadata.labels"));
        assert!(
            errs[0]
                .1
                .starts_with("Invalid value: \"bad key\": name part must consist")
        );
        assert!(
            errs[1]
                .1
                .starts_with("Invalid value: \"-v\": a valid label must be")
        );
    }
}
