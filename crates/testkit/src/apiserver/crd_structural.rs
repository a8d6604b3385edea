//! Whether a CRD's schemas are structural, as a real server requires of every CRD that prunes
//! (apiextensions-apiserver v0.34 `pkg/apis/apiextensions/validation/validation.go`
//! `validateCustomResourceDefinitionSpec`: a schema per version; `pkg/apiserver/schema/
//! validation.go` `ValidateStructural` → `validateStructuralInvariants`,
//! `validateValueValidation`, `validateNestedValueValidation`,
//! `validateStructuralMetadataInvariants`; `complete.go` `validateStructuralCompleteness`).
//!
//! Structural means: every node says its `type` (except under `x-kubernetes-int-or-string` or
//! `x-kubernetes-preserve-unknown-fields`), arrays say their `items`, the root is an object
//! without `additionalProperties`, the root `metadata` constrains only `name` and
//! `generateName`, and the logical junctors (`allOf`, `anyOf`, `oneOf`, `not`) only add value
//! validations to fields the structural part already declares. Errors are sorted by their text,
//! as upstream sorts them.

use serde_json::{Map, Value};

use super::field::{self, FieldError};

/// Where a node sits, for the wording of a missing `type`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Item,
    Field,
}

fn flag(s: &Value, k: &str) -> bool {
    s.get(k).and_then(Value::as_bool) == Some(true)
}

fn text<'a>(s: &'a Value, k: &str) -> &'a str {
    s.get(k).and_then(Value::as_str).unwrap_or_default()
}

fn props(s: &Value) -> Option<&Map<String, Value>> {
    s.get("properties").and_then(Value::as_object)
}

fn schema_of<'a>(s: &'a Value, k: &str) -> Option<&'a Value> {
    s.get(k).filter(|v| v.is_object())
}

/// `[{type: integer}, {type: string}]`, the int-or-string `anyOf` upstream lets through.
fn is_int_or_string_any_of(any_of: Option<&Value>) -> bool {
    let Some(a) = any_of.and_then(Value::as_array) else {
        return false;
    };
    a.len() == 2
        && a[0].as_object().is_some_and(|o| o.len() == 1)
        && text(&a[0], "type") == "integer"
        && a[1].as_object().is_some_and(|o| o.len() == 1)
        && text(&a[1], "type") == "string"
}

/// `validateStructuralInvariants`.
fn invariants(s: &Value, lvl: Level, path: &str, errs: &mut Vec<FieldError>) {
    let ty = text(s, "type");
    let items = schema_of(s, "items");
    if ty == "array" && items.is_none() {
        errs.push(field::required(&format!("{path}.items"), "must be specified"));
    }
    if let Some(items) = items {
        invariants(items, Level::Item, &format!("{path}.items"), errs);
    }
    if let Some(p) = props(s) {
        for (k, v) in p {
            invariants(v, Level::Field, &format!("{path}.properties[{k}]"), errs);
        }
    }
    if s.get("additionalProperties").is_some_and(|a| !a.is_null()) {
        if lvl == Level::Root {
            errs.push(field::forbidden(
                &format!("{path}.additionalProperties"),
                "must not be used at the root",
            ));
        }
        if let Some(a) = schema_of(s, "additionalProperties") {
            invariants(a, Level::Field, &format!("{path}.additionalProperties"), errs);
        }
    }
    let int_or_string = flag(s, "x-kubernetes-int-or-string");
    let preserve = flag(s, "x-kubernetes-preserve-unknown-fields");
    let embedded = flag(s, "x-kubernetes-embedded-resource");
    if int_or_string && preserve {
        errs.push(field::invalid_json(
            &format!("{path}.x-kubernetes-preserve-unknown-fields"),
            &Value::Bool(true),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if int_or_string && embedded {
        errs.push(field::invalid_json(
            &format!("{path}.x-kubernetes-embedded-resource"),
            &Value::Bool(true),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    let skip_any_of = is_int_or_string_any_of(s.get("anyOf"));
    let skip_first_all_of_any_of = s
        .get("allOf")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .is_some_and(|first| is_int_or_string_any_of(first.get("anyOf")));
    junctors(s, skip_any_of, skip_first_all_of_any_of, path, errs);
    if embedded && ty != "object" {
        if ty.is_empty() {
            errs.push(field::required(
                &format!("{path}.type"),
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        } else {
            errs.push(field::invalid(
                &format!("{path}.type"),
                ty,
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        }
    } else if ty.is_empty() && !int_or_string && !preserve {
        let why = match lvl {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        errs.push(field::required(&format!("{path}.type"), why));
    }
    if embedded && s.get("additionalProperties").is_some_and(|a| !a.is_null()) {
        errs.push(field::forbidden(
            &format!("{path}.additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    if lvl == Level::Root && !ty.is_empty() && ty != "object" {
        errs.push(field::invalid(
            &format!("{path}.type"),
            ty,
            "must be object at the root",
        ));
    }
    let check_metadata = lvl == Level::Root || embedded;
    if check_metadata {
        for k in ["kind", "apiVersion"] {
            if let Some(p) = props(s).and_then(|p| p.get(k))
                && text(p, "type") != "string"
            {
                errs.push(field::invalid(
                    &format!("{path}.properties[{k}].type"),
                    text(p, "type"),
                    "must be string",
                ));
            }
        }
    }
    if let Some(meta) = props(s).and_then(|p| p.get("metadata")) {
        metadata(
            meta,
            check_metadata,
            lvl,
            &format!("{path}.properties[metadata]"),
            errs,
        );
    }
    if embedded && !preserve && props(s).is_none_or(Map::is_empty) {
        errs.push(field::required(
            &format!("{path}.properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
}

/// `validateStructuralMetadataInvariants`: at the root, `metadata` may say it is an object and
/// constrain `name` and `generateName`, nothing else.
fn metadata(m: &Value, check: bool, lvl: Level, path: &str, errs: &mut Vec<FieldError>) {
    if check && text(m, "type") != "object" {
        errs.push(field::invalid(
            &format!("{path}.type"),
            text(m, "type"),
            "must be object",
        ));
    }
    if lvl != Level::Root {
        return;
    }
    let only_names =
        props(m).is_none_or(|p| !p.is_empty() && p.keys().all(|k| k == "name" || k == "generateName"));
    let other = m.as_object().is_some_and(|o| {
        o.keys()
            .any(|k| !matches!(k.as_str(), "type" | "properties" | "default"))
    });
    if !only_names || other {
        errs.push(field::forbidden(
            path,
            "must not specify anything other than name and generateName, but metadata is implicitly specified",
        ));
    }
}

/// `validateValueValidation`: the junctors of a node, each a nested value validation.
fn junctors(
    s: &Value,
    skip_any_of: bool,
    skip_first_all_of_any_of: bool,
    path: &str,
    errs: &mut Vec<FieldError>,
) {
    let list = |k: &str| {
        s.get(k)
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
    };
    if !skip_any_of {
        for (i, n) in list("anyOf").iter().enumerate() {
            nested(n, false, &format!("{path}.anyOf[{i}]"), errs);
        }
    }
    for (i, n) in list("allOf").iter().enumerate() {
        nested(
            n,
            skip_first_all_of_any_of && i == 0,
            &format!("{path}.allOf[{i}]"),
            errs,
        );
    }
    for (i, n) in list("oneOf").iter().enumerate() {
        nested(n, false, &format!("{path}.oneOf[{i}]"), errs);
    }
    if let Some(n) = schema_of(s, "not") {
        nested(n, false, &format!("{path}.not"), errs);
    }
}

/// What a nested value validation may not say, with upstream's complaint.
const NESTED_FORBIDDEN: &[(&str, &str)] = &[
    ("type", "must be empty to be structural"),
    ("additionalProperties", "must be undefined to be structural"),
    ("default", "must be undefined to be structural"),
    ("title", "must be empty to be structural"),
    ("description", "must be empty to be structural"),
    ("nullable", "must be false to be structural"),
    (
        "x-kubernetes-preserve-unknown-fields",
        "must be false to be structural",
    ),
    ("x-kubernetes-embedded-resource", "must be false to be structural"),
    ("x-kubernetes-int-or-string", "must be false to be structural"),
    ("x-kubernetes-list-map-keys", "must be empty to be structural"),
    ("x-kubernetes-list-type", "must be undefined to be structural"),
    ("x-kubernetes-map-type", "must be undefined to be structural"),
    ("x-kubernetes-validations", "must be empty to be structural"),
];

/// Whether a nested field counts as set (false, empty strings and lists are Go zero values).
fn is_set(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => false,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        _ => true,
    }
}

/// `validateNestedValueValidation`.
fn nested(n: &Value, skip_any_of: bool, path: &str, errs: &mut Vec<FieldError>) {
    junctors(n, skip_any_of, false, path, errs);
    if let Some(items) = schema_of(n, "items") {
        nested(items, false, &format!("{path}.items"), errs);
    }
    if let Some(p) = props(n) {
        for (k, v) in p {
            nested(v, false, &format!("{path}.properties[{k}]"), errs);
        }
    }
    for (k, why) in NESTED_FORBIDDEN {
        // Any default is a value, `false` included; elsewhere Go's zero values are unset.
        let set = if *k == "default" {
            n.get(*k).is_some_and(|d| !d.is_null())
        } else {
            n.get(*k).is_some_and(is_set)
        };
        if set {
            errs.push(field::forbidden(&format!("{path}.{k}"), why));
        }
    }
    if props(n).is_some_and(|p| p.contains_key("metadata")) {
        errs.push(field::forbidden(
            &format!("{path}.properties[metadata]"),
            "must not be specified in a nested context",
        ));
    }
}

/// `validateStructuralCompleteness`: what a junctor names must exist in the structural part.
fn completeness(s: Option<&Value>, v: &Value, s_path: &str, v_path: &str, errs: &mut Vec<FieldError>) {
    let Some(s) = s else {
        errs.push(field::required(
            s_path,
            &format!("because it is defined in {v_path}"),
        ));
        return;
    };
    let list = |k: &str| {
        v.get(k)
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
    };
    if let Some(not) = schema_of(v, "not") {
        nested_completeness(s, not, s_path, &format!("{v_path}.not"), errs);
    }
    for k in ["allOf", "anyOf", "oneOf"] {
        for (i, n) in list(k).iter().enumerate() {
            nested_completeness(s, n, s_path, &format!("{v_path}.{k}[{i}]"), errs);
        }
    }
}

fn nested_completeness(s: &Value, v: &Value, s_path: &str, v_path: &str, errs: &mut Vec<FieldError>) {
    completeness(Some(s), v, s_path, v_path, errs);
    if let Some(items) = schema_of(v, "items") {
        let s_items = schema_of(s, "items");
        match s_items {
            Some(si) => nested_completeness(
                si,
                items,
                &format!("{s_path}.items"),
                &format!("{v_path}.items"),
                errs,
            ),
            None => errs.push(field::required(
                &format!("{s_path}.items"),
                &format!("because it is defined in {v_path}.items"),
            )),
        }
    }
    if let Some(p) = props(v) {
        for (k, vf) in p {
            let sp = format!("{s_path}.properties[{k}]");
            let vp = format!("{v_path}.properties[{k}]");
            match props(s).and_then(|sp| sp.get(k)) {
                Some(sf) => nested_completeness(sf, vf, &sp, &vp, errs),
                None => errs.push(field::required(&sp, &format!("because it is defined in {vp}"))),
            }
        }
    }
}

/// Walks every node of the structural part, checking its junctors' completeness.
fn completeness_everywhere(s: &Value, path: &str, errs: &mut Vec<FieldError>) {
    completeness(Some(s), s, path, path, errs);
    if let Some(items) = schema_of(s, "items") {
        completeness_everywhere(items, &format!("{path}.items"), errs);
    }
    if let Some(p) = props(s) {
        for (k, v) in p {
            completeness_everywhere(v, &format!("{path}.properties[{k}]"), errs);
        }
    }
    if let Some(a) = schema_of(s, "additionalProperties") {
        completeness_everywhere(a, &format!("{path}.additionalProperties"), errs);
    }
}

/// The structural-schema errors of a CRD, and a missing schema per version. Empty when a
/// version's schemas are structural (or the CRD opts out of pruning).
pub fn check_crd(crd: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if crd
        .pointer("/spec/preserveUnknownFields")
        .and_then(Value::as_bool)
        == Some(true)
    {
        return errs;
    }
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array);
    for (i, v) in versions.into_iter().flatten().enumerate() {
        let path = format!("spec.versions[{i}].schema.openAPIV3Schema");
        let Some(schema) = v.pointer("/schema/openAPIV3Schema").filter(|s| s.is_object()) else {
            errs.push(field::required(&path, ""));
            continue;
        };
        let mut version_errs = Vec::new();
        invariants(schema, Level::Root, &path, &mut version_errs);
        completeness_everywhere(schema, &path, &mut version_errs);
        version_errs.sort_by_key(field::render);
        errs.extend(version_errs);
    }
    errs
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn crd(schema: Value) -> Value {
        json!({"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": schema}}]}})
    }

    /// schema/validation.go `validateStructuralInvariants`: a property without `type`.
    #[test]
    fn untyped_fields_are_refused() {
        let errs = check_crd(&crd(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"size": {"description": "n"}}}}})));
        assert_eq!(
            errs,
            vec![(
                "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[size].type".to_string(),
                "Required value: must not be empty for specified object fields".to_string()
            )]
        );
    }

    /// The exceptions: int-or-string and preserve-unknown-fields nodes need no type, nor does
    /// the int-or-string `anyOf` pattern count as a typed junctor.
    #[test]
    fn int_or_string_and_preserved_nodes_need_no_type() {
        let errs = check_crd(&crd(json!({"type": "object", "properties": {
            "port": {"x-kubernetes-int-or-string": true,
                     "anyOf": [{"type": "integer"}, {"type": "string"}]},
            "blob": {"x-kubernetes-preserve-unknown-fields": true},
            "list": {"type": "array", "items": {"type": "string"}},
            "metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 63}}}}})));
        assert!(errs.is_empty(), "{errs:?}");
    }

    /// `validateNestedValueValidation`, `validateStructuralMetadataInvariants`, missing items,
    /// root additionalProperties, completeness and a missing schema.
    #[test]
    fn other_structural_rules() {
        let errs = check_crd(&crd(
            json!({"type": "object", "additionalProperties": {"type": "string"},
            "properties": {
                "a": {"type": "array"},
                "b": {"type": "string", "anyOf": [{"type": "string"}]},
                "c": {"type": "object", "oneOf": [{"properties": {"x": {"maxLength": 1}}}]},
                "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}}}),
        ));
        let fields: Vec<&str> = errs.iter().map(|e| e.0.as_str()).collect();
        let p = "spec.versions[0].schema.openAPIV3Schema";
        for want in [
            format!("{p}.additionalProperties"),
            format!("{p}.properties[a].items"),
            format!("{p}.properties[b].anyOf[0].type"),
            format!("{p}.properties[c].properties[x]"),
            format!("{p}.properties[metadata]"),
        ] {
            assert!(fields.contains(&want.as_str()), "{want} in {fields:?}");
        }
        let missing = check_crd(&json!({"spec": {"versions": [{"name": "v1"}]}}));
        assert_eq!(missing, vec![(p.to_string(), "Required value".to_string())]);
    }
}
