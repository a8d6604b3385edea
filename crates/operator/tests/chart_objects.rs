//! Every object the Helm chart renders parses as its Kubernetes type.
//!
//! The chart is rendered by real Helm (see `common/chart.rs`); this test parses the output with
//! k8s-openapi, so a typo in a template field fails here rather than on a user's cluster.

#[allow(dead_code)]
mod common;

use common::chart::render;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// Parses one object strictly as its type; returns the kind for bookkeeping.
fn parse_typed(obj: &serde_json::Value) -> String {
    let kind = obj["kind"].as_str().expect("every object has a kind").to_owned();
    let json = obj.clone();
    fn check<T: serde::de::DeserializeOwned>(json: serde_json::Value, kind: &str) {
        if let Err(e) = serde_json::from_value::<T>(json) {
            panic!("rendered {kind} does not parse as its Kubernetes type: {e}");
        }
    }
    match kind.as_str() {
        "CustomResourceDefinition" => check::<CustomResourceDefinition>(json, &kind),
        "Deployment" => check::<Deployment>(json, &kind),
        "ConfigMap" => check::<ConfigMap>(json, &kind),
        "Service" => check::<Service>(json, &kind),
        "ServiceAccount" => check::<ServiceAccount>(json, &kind),
        "ClusterRole" => check::<ClusterRole>(json, &kind),
        "ClusterRoleBinding" => check::<ClusterRoleBinding>(json, &kind),
        "Role" => check::<Role>(json, &kind),
        "RoleBinding" => check::<RoleBinding>(json, &kind),
        "PodDisruptionBudget" => check::<PodDisruptionBudget>(json, &kind),
        "NetworkPolicy" => check::<NetworkPolicy>(json, &kind),
        // ServiceMonitor is a Prometheus Operator CRD: no k8s-openapi type; check its shape.
        "ServiceMonitor" => {
            assert_eq!(obj["apiVersion"].as_str(), Some("monitoring.coreos.com/v1"));
            assert!(obj["spec"]["endpoints"].as_array().is_some_and(|e| !e.is_empty()));
        }
        // So is PrometheusRule; tests/chart/test_alerts.py checks its rules.
        "PrometheusRule" => {
            assert_eq!(obj["apiVersion"].as_str(), Some("monitoring.coreos.com/v1"));
            assert!(obj["spec"]["groups"].as_array().is_some_and(|g| !g.is_empty()));
        }
        other => panic!("the chart renders a kind this test does not know: {other}"),
    }
    kind
}

#[test]
fn default_values_render_typed_objects() {
    let kinds: Vec<String> = render(&[]).iter().map(parse_typed).collect();
    for expected in [
        "Deployment",
        "ServiceAccount",
        "ClusterRole",
        "ConfigMap",
        "CustomResourceDefinition",
    ] {
        assert!(
            kinds.iter().any(|k| k == expected),
            "default render lacks a {expected}: {kinds:?}"
        );
    }
}

#[test]
fn every_optional_object_renders_typed() {
    let kinds: Vec<String> = render(&[
        "--set",
        "replicaCount=2",
        "--set",
        "serviceMonitor.enabled=true",
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "watchNamespaces={ci,builds}",
    ])
    .iter()
    .map(parse_typed)
    .collect();
    for expected in [
        "PodDisruptionBudget",
        "NetworkPolicy",
        "ServiceMonitor",
        "PrometheusRule",
        "Role",
        "RoleBinding",
    ] {
        assert!(
            kinds.iter().any(|k| k == expected),
            "render lacks a {expected}: {kinds:?}"
        );
    }
}
