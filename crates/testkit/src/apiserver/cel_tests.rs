//! Unit tests of the CEL admission rules: binding of `self`, messages, reasons, transition
//! rules, ratcheting, runtime errors and the checks at CRD registration.

use serde_json::{Value, json};

use super::cel::{check_crd, evaluate, rule_count};

fn schema() -> Value {
    json!({"type": "object", "properties": {"spec": {
    "type": "object",
    "x-kubernetes-validations": [
        {"rule": "!has(self.min) || self.min <= self.max", "message": "min must not exceed max",
         "fieldPath": ".min"},
        {"rule": "self.kind != 'a' || has(self.a)", "message": "a is required", "fieldPath": ".a",
         "reason": "FieldValueRequired"},
        {"rule": "self.kind == 'a' || !has(self.a)", "message": "a is forbidden", "fieldPath": ".a",
         "reason": "FieldValueForbidden"},
        {"rule": "self.labels.all(l, l.matches('^[a-z]+$')) && size(self.labels) < 4"},
    ],
    "properties": {
        "min": {"type": "integer"}, "max": {"type": "integer"}, "kind": {"type": "string"},
        "labels": {"type": "array", "items": {"type": "string"}},
        "a": {"type": "object", "nullable": true, "properties": {"x": {"type": "string"}},
              "x-kubernetes-validations": [{"rule": "self.x.startsWith('p')", "message": "x needs p"}]},
        "fixed": {"type": "string", "x-kubernetes-validations": [
            {"rule": "self == oldSelf", "messageExpression": "'fixed was ' + oldSelf + ', is ' + self"}]},
    }}}})
}

fn good() -> Value {
    json!({"spec": {"min": 1, "max": 2, "kind": "b", "labels": ["x"], "fixed": "f"}})
}

#[test]
fn a_good_object_passes() {
    assert_eq!(evaluate(&schema(), &good(), None), vec![]);
    assert_eq!(rule_count(&schema()), 6);
}

#[test]
fn a_failed_rule_names_its_field_path_with_the_servers_message() {
    let mut obj = good();
    obj["spec"]["min"] = json!(5);
    assert_eq!(
        evaluate(&schema(), &obj, None),
        vec![(
            "spec.min".to_string(),
            "Invalid value: \"object\": min must not exceed max".to_string()
        )]
    );
}

#[test]
fn reasons_choose_the_error_type_and_a_rule_without_message_gets_the_default() {
    let mut obj = good();
    obj["spec"]["kind"] = json!("a");
    obj["spec"]["labels"] = json!(["x", "Y"]);
    let errs = evaluate(&schema(), &obj, None);
    assert_eq!(
        errs,
        vec![
            ("spec.a".to_string(), "Required value: a is required".to_string()),
            (
                "spec".to_string(),
                "Invalid value: \"object\": failed rule: self.labels.all(l, l.matches('^[a-z]+$')) && size(self.labels) < 4"
                    .to_string()
            ),
        ]
    );
    let mut obj = good();
    obj["spec"]["a"] = json!({"x": "q"});
    let errs = evaluate(&schema(), &obj, None);
    assert!(
        errs.contains(&("spec.a".to_string(), "Forbidden: a is forbidden".to_string())),
        "{errs:?}"
    );
    // The nested rule runs with `self` bound to spec.a.
    assert!(
        errs.contains(&(
            "spec.a".to_string(),
            "Invalid value: \"object\": x needs p".to_string()
        )),
        "{errs:?}"
    );
}

#[test]
fn absent_and_null_nodes_skip_their_rules() {
    let mut obj = good();
    obj["spec"]["a"] = Value::Null;
    // spec.a is null: its own rule (x needs p) is skipped; the parent's has() still sees it.
    let errs = evaluate(&schema(), &obj, None);
    assert_eq!(
        errs,
        vec![("spec.a".to_string(), "Forbidden: a is forbidden".to_string())]
    );
}

#[test]
fn transition_rules_run_on_update_only_with_their_message_expression() {
    let old = good();
    let mut new = good();
    new["spec"]["fixed"] = json!("g");
    assert_eq!(evaluate(&schema(), &new, None), vec![], "create: no oldSelf");
    assert_eq!(
        evaluate(&schema(), &new, Some(&old)),
        vec![(
            "spec.fixed".to_string(),
            "Invalid value: \"string\": fixed was f, is g".to_string()
        )]
    );
}

#[test]
fn an_unchanged_invalid_node_is_ratcheted_on_update() {
    let mut bad = good();
    bad["spec"]["min"] = json!(5);
    assert_eq!(evaluate(&schema(), &bad, Some(&bad)), vec![]);
    let mut worse = bad.clone();
    worse["spec"]["max"] = json!(1);
    assert_eq!(evaluate(&schema(), &worse, Some(&bad)).len(), 1);
}

#[test]
fn a_runtime_error_is_a_field_error_not_a_crash() {
    let s = json!({"type": "object", "properties": {"spec": {"type": "object",
        "x-kubernetes-validations": [{"rule": "self.missing > 1", "message": "needs missing"},
                                     {"rule": "self.n + 'x' == 1"}, {"rule": "self.n"}],
        "properties": {"n": {"type": "integer"}}}}});
    let errs = evaluate(&s, &json!({"spec": {"n": 1}}), None);
    assert_eq!(errs.len(), 3, "{errs:?}");
    assert!(errs[0].1.ends_with("evaluating rule: needs missing"), "{errs:?}");
    assert!(errs[2].1.contains("not a bool"), "{errs:?}");
}

#[test]
fn a_crd_with_a_broken_rule_is_refused_at_registration() {
    let crd = |rules: Value| {
        json!({"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": {"type": "object",
            "properties": {"spec": {"type": "object", "properties": {"a": {"type": "string"}},
                "x-kubernetes-validations": rules}}}}}]}})
    };
    assert_eq!(
        check_crd(&crd(json!([{"rule": "self.a == 'x'", "fieldPath": ".a"}]))),
        vec![]
    );
    let errs = check_crd(&crd(json!([
        {"rule": "self.a ==", "messageExpression": "'a' +", "fieldPath": ".b", "reason": "Nope"},
    ])));
    let fields: Vec<&str> = errs.iter().map(|(f, _)| f.as_str()).collect();
    let at = "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0]";
    assert_eq!(
        fields,
        vec![
            format!("{at}.rule"),
            format!("{at}.messageExpression"),
            format!("{at}.fieldPath"),
            format!("{at}.reason"),
        ],
        "{errs:?}"
    );
    assert!(errs[0].1.contains("compilation failed"), "{errs:?}");
}

#[test]
fn the_422_causes_carry_the_reason_of_each_error_type() {
    let err = super::status::ApiError::invalid(
        "forgerunner.dev",
        "RunnerGroup",
        "x",
        &[
            ("spec.a".into(), "Required value: a is required".into()),
            ("spec.b".into(), "Forbidden: b is forbidden".into()),
            ("spec.c".into(), "Invalid value: \"object\": c is wrong".into()),
        ],
    );
    let status = err.to_status();
    let reasons: Vec<&str> = status["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["reason"].as_str())
        .collect();
    assert_eq!(
        reasons,
        vec!["FieldValueRequired", "FieldValueForbidden", "FieldValueInvalid"]
    );
    assert_eq!(
        (status["code"].as_u64(), status["reason"].as_str()),
        (Some(422), Some("Invalid"))
    );
    assert_eq!(
        status["message"],
        "RunnerGroup.forgerunner.dev \"x\" is invalid: [spec.a: Required value: a is required, \
         spec.b: Forbidden: b is forbidden, spec.c: Invalid value: \"object\": c is wrong]"
    );
}
