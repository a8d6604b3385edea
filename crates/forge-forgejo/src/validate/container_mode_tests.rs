//! `spec.containerMode` for Forgejo: `dind` or no mode; a `kubernetes` mode is an invalid spec,
//! which the reconciler reports as `Ready=False` with reason `InvalidSpec`. Docker labels need
//! `dind` or a daemon the template gives the runner container: forgejo-runner's `configCheck`
//! (`internal/app/cmd/daemon.go`, called by `internal/app/cmd/job.go` `runJob` before it polls)
//! exits 1 without one, and a label without a scheme is docker (`internal/pkg/labels/labels.go`).

use std::sync::Arc;

use forgerunner_core::crd::{ContainerModeType, RunnerGroupSpec};
use forgerunner_core::embedded::Embedded;
use forgerunner_core::forge::{Forge, ReconcileTrigger};
use forgerunner_core::metrics::Metrics;
use forgerunner_core::validate::SpecViolation;
use forgerunner_http::spec_rules::testing::assert_not_ready_with_invalid_spec;

use super::tests::harness;
use crate::forge::ForgejoForge;

fn labelled(mode: Option<ContainerModeType>, labels: &[&str]) -> RunnerGroupSpec {
    harness().in_mode(mode, labels)
}

fn forge() -> ForgejoForge {
    ForgejoForge::new(Arc::new(Metrics::default()), ReconcileTrigger::channel().0)
}

/// What `f` refuses in `spec` (the error side of `describe`).
fn refused(f: &ForgejoForge, spec: &RunnerGroupSpec) -> Vec<SpecViolation> {
    f.describe(spec).err().unwrap_or_default()
}

// With no mode, and in a kubernetes mode so that only the mode is wrong, host labels: docker
// labels need a daemon.
forgerunner_http::container_mode_tests!(
    harness(),
    forge(),
    no_mode: &["linux:host"],
    kubernetes: &["linux:host"],
);

fn with_template(mut s: RunnerGroupSpec, runner: serde_json::Value) -> RunnerGroupSpec {
    s.template = Some(Embedded::from_raw(
        serde_json::json!({"spec": {"containers": [runner]}}),
    ));
    s
}

#[test]
fn docker_labels_without_a_daemon_are_refused_naming_the_fixes() {
    let f = forge();
    let v = refused(&f, &labelled(None, &["ubuntu-latest", "linux:host"]));
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].field, "spec.forgejo.labels");
    assert_eq!(
        v[0].message,
        "label \"ubuntu-latest\" runs jobs in Docker containers (a label without a scheme is \
         docker://node:22-bookworm); forgejo-runner exits at start without a Docker daemon: set \
         containerMode.type: dind, set DOCKER_HOST on the runner container in spec.template, or give the \
         label a host scheme (ubuntu-latest:host)"
    );
    let v = refused(&f, &labelled(None, &["a:docker://node:22", "b:docker"]));
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(
        v[0].message,
        "labels \"a:docker://node:22\", \"b:docker\" run jobs in Docker containers; forgejo-runner exits \
         at start without a Docker daemon: set containerMode.type: dind, set DOCKER_HOST on the runner \
         container in spec.template, or give each of them a host scheme (a:host)"
    );
    // Host labels need nothing; a template that gives the runner a daemon is enough.
    assert_eq!(refused(&f, &labelled(None, &["a:host", "b:host"])), []);
    let docker = || labelled(None, &["ubuntu-latest"]);
    let env = serde_json::json!({"name": "runner",
        "env": [{"name": "DOCKER_HOST", "value": "tcp://docker.ci.svc:2375"}]});
    assert_eq!(refused(&f, &with_template(docker(), env)), []);
    for path in [
        "/var/run/docker.sock",
        "/var/run",
        "/run",
        "/run/podman/",
        "/data/.docker/run",
    ] {
        let mount = serde_json::json!({"name": "runner",
            "volumeMounts": [{"name": "sock", "mountPath": path}]});
        assert_eq!(refused(&f, &with_template(docker(), mount)), [], "{path}");
    }
    for path in ["/data", "/var/lib/docker", "/tmp"] {
        let mount = serde_json::json!({"name": "runner",
            "volumeMounts": [{"name": "sock", "mountPath": path}]});
        assert_eq!(refused(&f, &with_template(docker(), mount)).len(), 1, "{path}");
    }
    // Only the runner container's environment counts.
    let sidecar = serde_json::json!({"name": "side",
        "env": [{"name": "DOCKER_HOST", "value": "tcp://x:2375"}]});
    assert_eq!(refused(&f, &with_template(docker(), sidecar)).len(), 1);
}

#[test]
fn docker_labels_without_a_daemon_make_the_group_not_ready_with_invalid_spec() {
    assert_not_ready_with_invalid_spec(
        &forge(),
        labelled(None, &["ubuntu-latest"]),
        labelled(Some(ContainerModeType::Dind), &["ubuntu-latest"]),
        &[
            "spec.forgejo.labels: label \"ubuntu-latest\" runs jobs in Docker",
            "containerMode.type: dind",
        ],
    );
}
