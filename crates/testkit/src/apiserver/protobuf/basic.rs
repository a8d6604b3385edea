//! Object metadata and the small core/v1 kinds: Namespace, Secret, ConfigMap, ServiceAccount
//! the core Event and Service.

use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;

use super::json::{bytes_map, dropped, json_struct};

json_struct! {
    meta::ObjectMeta {
        name, generate_name, namespace, self_link, uid, resource_version, generation,
        creation_timestamp, deletion_timestamp, deletion_grace_period_seconds, labels,
        annotations, owner_references, finalizers, managed_fields,
    }
    meta::OwnerReference { api_version, kind, name, uid, controller, block_owner_deletion }
    meta::ManagedFieldsEntry {
        manager, operation, api_version, time, fields_type, fields_v1 as "fieldsV1", subresource,
    }
    meta::LabelSelector { match_labels, match_expressions }
    meta::LabelSelectorRequirement { key, operator, values }
    core::Namespace { metadata, spec, status }
    core::NamespaceSpec { finalizers }
    core::NamespaceStatus { phase, conditions }
    core::NamespaceCondition { r#type, status, last_transition_time, reason, message }
    core::Secret { metadata, immutable, data with bytes_map, string_data, r#type }
    core::ConfigMap { metadata, immutable, data, binary_data with bytes_map }
    core::ServiceAccount { metadata, secrets, image_pull_secrets, automount_service_account_token }
    core::ObjectReference { kind, namespace, name, uid, api_version, resource_version, field_path }
    core::LocalObjectReference { name }
    core::Event {
        metadata, involved_object, reason, message, source, first_timestamp, last_timestamp,
        count, r#type, event_time, series, action, related, reporting_component,
        reporting_instance,
    }
    core::EventSource { component, host }
    core::EventSeries { count, last_observed_time }
    core::Service { metadata, spec, status with dropped }
    core::ServiceSpec {
        ports, selector, cluster_ip as "clusterIP", cluster_ips as "clusterIPs", r#type,
        external_ips as "externalIPs", session_affinity, load_balancer_ip as "loadBalancerIP",
        load_balancer_source_ranges, external_name, external_traffic_policy,
        health_check_node_port, publish_not_ready_addresses, session_affinity_config,
        ip_families, ip_family_policy, allocate_load_balancer_node_ports, load_balancer_class,
        internal_traffic_policy, traffic_distribution,
    }
    core::ServicePort { name, protocol, app_protocol, port, target_port, node_port }
    core::SessionAffinityConfig { client_ip as "clientIP" }
    core::ClientIpConfig { timeout_seconds }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_pb::api::core::v1 as core;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    use serde_json::json;

    use super::super::json::ToJson;

    fn meta(name: &str) -> Option<meta::ObjectMeta> {
        Some(meta::ObjectMeta {
            name: Some(name.into()),
            labels: BTreeMap::from([("app".into(), "ci".into())]),
            ..Default::default()
        })
    }

    #[test]
    fn secret_data_becomes_base64_and_unset_fields_are_omitted() {
        let s = core::Secret {
            metadata: meta("gh"),
            data: BTreeMap::from([("token".into(), b"s3cr3t".to_vec())]),
            r#type: Some("Opaque".into()),
            ..Default::default()
        };
        assert_eq!(
            s.to_json().unwrap().unwrap(),
            json!({"metadata": {"name": "gh", "labels": {"app": "ci"}},
                   "data": {"token": "czNjcjN0"}, "type": "Opaque"})
        );
    }

    #[test]
    fn owner_references_and_times_use_kubernetes_names() {
        let m = meta::ObjectMeta {
            generate_name: Some("job-".into()),
            creation_timestamp: Some(meta::Time {
                seconds: Some(0),
                nanos: None,
            }),
            owner_references: vec![meta::OwnerReference {
                api_version: Some("batch/v1".into()),
                kind: Some("Job".into()),
                name: Some("j".into()),
                uid: Some("u1".into()),
                controller: Some(true),
                block_owner_deletion: Some(false),
            }],
            ..Default::default()
        };
        assert_eq!(
            m.to_json().unwrap().unwrap(),
            json!({"generateName": "job-", "creationTimestamp": "1970-01-01T00:00:00Z",
                   "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                   "uid": "u1", "controller": true, "blockOwnerDeletion": false}]})
        );
    }

    #[test]
    fn service_uses_the_acronym_names_and_int_or_string_ports() {
        let svc = core::Service {
            metadata: meta("web"),
            spec: Some(core::ServiceSpec {
                cluster_ip: Some("10.0.0.1".into()),
                ports: vec![core::ServicePort {
                    port: Some(80),
                    target_port: Some(k8s_pb::apimachinery::pkg::util::intstr::IntOrString {
                        r#type: Some(1),
                        int_val: None,
                        str_val: Some("http".into()),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(Default::default()),
        };
        let j = svc.to_json().unwrap().unwrap();
        assert_eq!(
            j["spec"],
            json!({"clusterIP": "10.0.0.1", "ports": [{"port": 80, "targetPort": "http"}]})
        );
        assert!(j.get("status").is_none());
    }

    #[test]
    fn core_event_keeps_involved_object_and_micro_time() {
        let e = core::Event {
            metadata: meta("e1"),
            involved_object: Some(core::ObjectReference {
                kind: Some("Pod".into()),
                name: Some("p".into()),
                ..Default::default()
            }),
            reason: Some("Started".into()),
            count: Some(2),
            event_time: Some(meta::MicroTime {
                seconds: Some(60),
                nanos: Some(5000),
            }),
            ..Default::default()
        };
        let j = e.to_json().unwrap().unwrap();
        assert_eq!(j["involvedObject"], json!({"kind": "Pod", "name": "p"}));
        assert_eq!(j["eventTime"], json!("1970-01-01T00:01:00.000005Z"));
        assert_eq!(j["count"], json!(2));
        assert!(j.get("source").is_none());
    }
}
