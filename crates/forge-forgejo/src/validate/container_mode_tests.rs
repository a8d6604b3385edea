//! `spec.containerMode` for Forgejo: `dind` or no mode; a `kubernetes` mode is an invalid spec,
//! which the reconciler reports as `Ready=False` with reason `InvalidSpec`.

use std::sync::Arc;

use forgerunner_core::RunnerGroup;
use forgerunner_core::conditions::{ConditionStatus, ConditionType};
use forgerunner_core::crd::{ContainerMode, ContainerModeType, RunnerGroupSpec};
use forgerunner_core::error::ErrorCategory;
use forgerunner_core::forge::{Forge, ReconcileTrigger};
use forgerunner_core::metrics::Metrics;
use forgerunner_core::reconcile::pipeline::check_spec;
use forgerunner_core::reconcile::status::error_conditions;

use crate::forge::ForgejoForge;

fn spec(mode: Option<ContainerModeType>) -> RunnerGroupSpec {
    let mut s: RunnerGroupSpec = serde_json::from_value(serde_json::json!({
        "forge": "forgejo", "maxRunners": 5,
        "forgejo": {
            "url": "https://code.example.com", "scope": "repo", "repo": "alice/app",
            "credentials": "token", "labels": ["ubuntu-latest:docker://node:22"]
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
    assert_eq!(f.validate(&spec(None)), []);
    assert_eq!(f.validate(&spec(Some(ContainerModeType::Dind))), []);
}

#[test]
fn kubernetes_modes_are_rejected_naming_the_field() {
    let f = forge();
    for mode in [
        ContainerModeType::Kubernetes,
        ContainerModeType::KubernetesNoVolume,
    ] {
        let v = f.validate(&spec(Some(mode)));
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
