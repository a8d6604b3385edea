//! `spec.containerMode` for Forgejo: `dind` or no mode; a `kubernetes` mode is an invalid spec,
//! which the reconciler reports as `Ready=False` with reason `InvalidSpec`. Docker labels need
//! `dind` or a daemon the template gives the runner container: forgejo-runner's `configCheck`
//! (`internal/app/cmd/daemon.go`, called by `internal/app/cmd/job.go` `runJob` before it polls)
//! exits 1 without one, and a label without a scheme is docker (`internal/pkg/labels/labels.go`).

use std::sync::Arc;

use forgerunner_core::RunnerGroup;
use forgerunner_core::conditions::{ConditionStatus, ConditionType};
use forgerunner_core::crd::{ContainerMode, ContainerModeType, RunnerGroupSpec};
use forgerunner_core::embedded::Embedded;
use forgerunner_core::error::ErrorCategory;
use forgerunner_core::forge::{Forge, ReconcileTrigger};
use forgerunner_core::metrics::Metrics;
use forgerunner_core::reconcile::pipeline::check_spec;
use forgerunner_core::reconcile::status::error_conditions;

use crate::forge::ForgejoForge;

fn spec(mode: Option<ContainerModeType>) -> RunnerGroupSpec {
    labelled(mode, &["ubuntu-latest:docker://node:22"])
}

fn labelled(mode: Option<ContainerModeType>, labels: &[&str]) -> RunnerGroupSpec {
    let mut s: RunnerGroupSpec = serde_json::from_value(serde_json::json!({
        "forge": "forgejo", "maxRunners": 5,
        "forgejo": {
            "url": "https://code.example.com", "scope": "repo", "repo": "alice/app",
            "credentials": "token", "labels": labels
        }
    }))
    .expect("spec");
    s.container_mode = mode.map(|type_| ContainerMode {
        type_,
        kubernetes_mode_work_volume_claim: None,
    });
    s
}

fn forge() -> ForgejoForge {
    ForgejoForge::new(Arc::new(Metrics::default()), ReconcileTrigger::channel().0)
}

#[test]
fn dind_and_no_mode_are_valid() {
    let f = forge();
    assert_eq!(f.validate(&spec(Some(ContainerModeType::Dind))), []);
    assert_eq!(f.validate(&labelled(None, &["linux:host"])), []);
}

fn with_template(mut s: RunnerGroupSpec, runner: serde_json::Value) -> RunnerGroupSpec {
    s.template = Some(Embedded::from_raw(
        serde_json::json!({"spec": {"containers": [runner]}}),
    ));
    s
}

#[test]
fn docker_labels_without_a_daemon_are_refused_naming_the_fixes() {
    let f = forge();
    let v = f.validate(&labelled(None, &["ubuntu-latest", "linux:host"]));
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].field, "spec.forgejo.labels");
    assert_eq!(
        v[0].message,
        "label \"ubuntu-latest\" runs jobs in Docker containers (a label without a scheme is \
         docker://node:22-bookworm); forgejo-runner exits at start without a Docker daemon: set \
         containerMode.type: dind, set DOCKER_HOST on the runner container in spec.template, or give the \
         label a host scheme (ubuntu-latest:host)"
    );
    let v = f.validate(&labelled(None, &["a:docker://node:22", "b:docker"]));
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(
        v[0].message,
        "labels \"a:docker://node:22\", \"b:docker\" run jobs in Docker containers; forgejo-runner exits \
         at start without a Docker daemon: set containerMode.type: dind, set DOCKER_HOST on the runner \
         container in spec.template, or give each of them a host scheme (a:host)"
    );
    // Host labels need nothing; a template that gives the runner a daemon is enough.
    assert_eq!(f.validate(&labelled(None, &["a:host", "b:host"])), []);
    let docker = || labelled(None, &["ubuntu-latest"]);
    let env = serde_json::json!({"name": "runner",
        "env": [{"name": "DOCKER_HOST", "value": "tcp://docker.ci.svc:2375"}]});
    assert_eq!(f.validate(&with_template(docker(), env)), []);
    for path in [
        "/var/run/docker.sock",
        "/var/run",
        "/run",
        "/run/podman/",
        "/data/.docker/run",
    ] {
        let mount = serde_json::json!({"name": "runner",
            "volumeMounts": [{"name": "sock", "mountPath": path}]});
        assert_eq!(f.validate(&with_template(docker(), mount)), [], "{path}");
    }
    for path in ["/data", "/var/lib/docker", "/tmp"] {
        let mount = serde_json::json!({"name": "runner",
            "volumeMounts": [{"name": "sock", "mountPath": path}]});
        assert_eq!(f.validate(&with_template(docker(), mount)).len(), 1, "{path}");
    }
    // Only the runner container's environment counts.
    let sidecar = serde_json::json!({"name": "side",
        "env": [{"name": "DOCKER_HOST", "value": "tcp://x:2375"}]});
    assert_eq!(f.validate(&with_template(docker(), sidecar)).len(), 1);
}

#[test]
fn docker_labels_without_a_daemon_make_the_group_not_ready_with_invalid_spec() {
    let f = forge();
    let mut group = RunnerGroup::new("g", labelled(None, &["ubuntu-latest"]));
    group.metadata.namespace = Some("ci".into());
    let err = check_spec(&group, Some(&f as &dyn Forge)).expect_err("invalid spec");
    assert_eq!(err.category(), ErrorCategory::InvalidSpec);
    let conditions = error_conditions(err.category(), &err.to_string());
    let ready = conditions
        .iter()
        .find(|c| c.type_ == ConditionType::Ready)
        .expect("Ready");
    assert_eq!(ready.status, ConditionStatus::False);
    assert_eq!(ready.reason.as_str(), "InvalidSpec");
    assert!(
        ready
            .message
            .contains("spec.forgejo.labels: label \"ubuntu-latest\" runs jobs in Docker")
            && ready.message.contains("containerMode.type: dind"),
        "{}",
        ready.message
    );
    group.spec = labelled(Some(ContainerModeType::Dind), &["ubuntu-latest"]);
    assert!(check_spec(&group, Some(&f as &dyn Forge)).is_ok());
}

#[test]
fn kubernetes_modes_are_rejected_naming_the_field() {
    let f = forge();
    for mode in [
        ContainerModeType::Kubernetes,
        ContainerModeType::KubernetesNoVolume,
    ] {
        // Host labels, so that only the mode is wrong (docker labels would also lack a daemon).
        let v = f.validate(&labelled(Some(mode), &["linux:host"]));
        assert_eq!(v.len(), 1, "{mode:?}: {v:?}");
        assert_eq!(v[0].field, "spec.containerMode.type");
        assert_eq!(
            v[0].message,
            "the kubernetes modes need GitHub's runner container hooks; forgejo runners support dind or no mode"
        );
    }
}

#[test]
fn a_kubernetes_mode_makes_the_group_not_ready_with_invalid_spec() {
    let f = forge();
    let mut group = RunnerGroup::new("g", spec(Some(ContainerModeType::Kubernetes)));
    group.metadata.namespace = Some("ci".into());
    let err = check_spec(&group, Some(&f as &dyn Forge)).expect_err("invalid spec");
    assert_eq!(err.category(), ErrorCategory::InvalidSpec);
    let conditions = error_conditions(err.category(), &err.to_string());
    let ready = conditions
        .iter()
        .find(|c| c.type_ == ConditionType::Ready)
        .expect("Ready");
    assert_eq!(ready.status, ConditionStatus::False);
    assert_eq!(ready.reason.as_str(), "InvalidSpec");
    assert!(
        ready.message.contains("spec.containerMode.type"),
        "{}",
        ready.message
    );
    group.spec = spec(Some(ContainerModeType::Dind));
    assert!(check_spec(&group, Some(&f as &dyn Forge)).is_ok());
}
