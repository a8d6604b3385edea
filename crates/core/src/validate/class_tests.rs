//! The rules of `spec.classes`, each naming `spec.classes` and the class at fault.

use super::*;
use crate::crd::{ForgeKind, RunnerGroup};

fn with_classes(forge: ForgeKind, classes: serde_json::Value) -> RunnerGroupSpec {
    let mut spec = RunnerGroup::test(forge).spec();
    spec.classes = serde_json::from_value(classes).expect("classes");
    spec
}

fn messages(spec: &RunnerGroupSpec) -> Vec<String> {
    let v = validate_spec(spec);
    assert!(v.iter().all(|v| v.field == CLASSES_FIELD), "{v:?}");
    v.into_iter().map(|v| v.message).collect()
}

#[test]
fn two_sizes_on_gitea_pass() {
    let spec = with_classes(
        ForgeKind::Gitea,
        serde_json::json!([
            {"name": "small", "labels": ["linux"]},
            {"name": "large", "labels": ["linux", "large:docker://node:20"], "maxRunners": 5,
             "resources": {"requests": {"cpu": 4}}, "nodeSelector": {"pool": "big"},
             "tolerations": [{"key": "big", "operator": "Exists"}]}
        ]),
    );
    assert_eq!(messages(&spec), Vec::<String>::new());
}

/// GitHub makes a scale set per class (`forgerunner-github`, `forge::classes`); the rules that
/// are GitHub's own (plain labels, the class's scale set name) are the forge's `validate`.
#[test]
fn two_sizes_on_github_pass() {
    let spec = with_classes(
        ForgeKind::Github,
        serde_json::json!([
            {"name": "small", "labels": ["small"]},
            {"name": "large", "labels": ["large"], "maxRunners": 1,
             "resources": {"requests": {"cpu": 4}}}
        ]),
    );
    assert_eq!(messages(&spec), Vec::<String>::new());
}

/// Forgejo 15 binds each runner of a class to a job of that class, 11–14 register it with the
/// class's labels (docs/classes.md#forgejo); the common rules still hold.
#[test]
fn two_sizes_on_forgejo_pass_and_the_common_rules_hold() {
    let spec = with_classes(
        ForgeKind::Forgejo,
        serde_json::json!([
            {"name": "small", "labels": ["linux:host"]},
            {"name": "large", "labels": ["linux:host", "large:host"], "maxRunners": 5,
             "resources": {"requests": {"cpu": 4}}}
        ]),
    );
    assert_eq!(messages(&spec), Vec::<String>::new());
    let bad = with_classes(
        ForgeKind::Forgejo,
        serde_json::json!([{"name": "big", "labels": ["b"], "maxRunners": 6}]),
    );
    assert_eq!(
        messages(&bad),
        ["class big: maxRunners 6 must be between 1 and spec.maxRunners 5"]
    );
}

#[test]
fn names_are_short_unique_dns_labels() {
    let spec = with_classes(
        ForgeKind::Gitea,
        serde_json::json!([
            {"name": "Large", "labels": ["a"]},
            {"name": "a-twenty-one-chars-xx", "labels": ["b"]},
            {"name": "dup", "labels": ["c"]},
            {"name": "dup", "labels": ["d"]},
            {"name": "-x", "labels": ["e"]}
        ]),
    );
    let m = messages(&spec);
    assert_eq!(m.len(), 4, "{m:?}");
    assert!(m[0].contains("\"Large\" must be a DNS label"), "{m:?}");
    assert!(m[1].contains("a-twenty-one-chars-xx"), "{m:?}");
    assert!(m[2].contains("\"dup\" is used more than once"), "{m:?}");
    assert!(m[3].contains("\"-x\""), "{m:?}");
}

#[test]
fn at_most_eight_classes() {
    let classes: Vec<_> = (0..9)
        .map(|i| serde_json::json!({"name": format!("c{i}"), "labels": [format!("l{i}")]}))
        .collect();
    let m = messages(&with_classes(ForgeKind::Gitea, serde_json::json!(classes)));
    assert_eq!(m, ["must have at most 8 classes"]);
}

#[test]
fn labels_are_runner_labels_with_distinct_names() {
    let spec = with_classes(
        ForgeKind::Gitea,
        serde_json::json!([
            {"name": "none", "labels": []},
            {"name": "bad", "labels": ["a b", "x:vm"]},
            {"name": "twice", "labels": ["x:host", "x:docker://alpine"]}
        ]),
    );
    let m = messages(&spec);
    assert_eq!(m.len(), 4, "{m:?}");
    assert!(m[0].starts_with("class none: must have 1 to 64 labels"), "{m:?}");
    assert!(m[1].starts_with("class bad: label \"a b\""), "{m:?}");
    assert!(m[2].starts_with("class bad: label \"x:vm\""), "{m:?}");
    assert!(
        m[3].starts_with("class twice: label name \"x\" appears more than once"),
        "{m:?}"
    );
}

#[test]
fn a_class_limit_is_within_the_groups() {
    let spec = with_classes(
        ForgeKind::Gitea,
        serde_json::json!([
            {"name": "zero", "labels": ["a"], "maxRunners": 0},
            {"name": "big", "labels": ["b"], "maxRunners": 6},
            {"name": "all", "labels": ["c"], "maxRunners": 5}
        ]),
    );
    let m = messages(&spec);
    assert_eq!(
        m,
        [
            "class zero: maxRunners 0 must be between 1 and spec.maxRunners 5",
            "class big: maxRunners 6 must be between 1 and spec.maxRunners 5"
        ]
    );
}

#[test]
fn resources_and_tolerations_must_decode() {
    let spec = with_classes(
        ForgeKind::Gitea,
        serde_json::json!([
            {"name": "odd", "labels": ["a"], "resources": {"requests": ["cpu"]},
             "tolerations": [{"key": 3}]}
        ]),
    );
    let m = messages(&spec);
    assert_eq!(m.len(), 2, "{m:?}");
    assert!(m[0].starts_with("class odd: resources: requests: "), "{m:?}");
    assert!(m[1].starts_with("class odd: tolerations: key: "), "{m:?}");
}

#[test]
fn the_example_of_the_classes_doc_is_valid() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/classes.md"))
        .expect("docs/classes.md");
    let block = doc
        .split("```yaml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a YAML block");
    let group: RunnerGroup = serde_yaml::from_str(block).expect("a RunnerGroup");
    assert_eq!(group.spec.classes.len(), 2);
    assert_eq!(validate_spec(&group.spec), Vec::new());
}
