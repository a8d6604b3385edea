//! Object metadata and the small core/v1 kinds: Namespace, Secret, ConfigMap, ServiceAccount
//! and the core Event.

use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;

use super::json::{bytes_map, json_struct};

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
