//! [`validate_class_docker_daemon`]: a class's docker labels need a Docker daemon in the pod.

use forgerunner_core::crd::{ContainerMode, ContainerModeType, ForgeKind, RunnerGroup};
use serde_json::json;

use super::*;

fn with_classes(classes: serde_json::Value) -> RunnerGroupSpec {
    let mut spec = RunnerGroup::test(ForgeKind::Forgejo).spec();
    spec.classes = serde_json::from_value(classes).expect("classes");
    spec
}

#[test]
fn a_class_docker_label_needs_a_daemon() {
    let mut spec = with_classes(json!([
        {"name": "small", "labels": ["linux:host"]},
        {"name": "node", "labels": ["linux:host", "node", "deb:docker://debian:12"]}
    ]));
    let v = validate_class_docker_daemon(&spec);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].field, "spec.classes");
    assert!(
        v[0].message
            .starts_with("class node: label(s) \"node\", \"deb:docker://debian:12\" run jobs in Docker"),
        "{v:?}"
    );
    assert!(v[0].message.contains("(node:host)"), "{v:?}");
    spec.container_mode = Some(ContainerMode {
        type_: ContainerModeType::Dind,
        kubernetes_mode_work_volume_claim: None,
    });
    assert_eq!(validate_class_docker_daemon(&spec), Vec::new(), "dind brings one");
}

#[test]
fn host_labels_and_no_classes_need_nothing() {
    let spec = with_classes(json!([{"name": "small", "labels": ["linux:host"]}]));
    assert_eq!(validate_class_docker_daemon(&spec), Vec::new());
    assert_eq!(validate_class_docker_daemon(&with_classes(json!([]))), Vec::new());
}
