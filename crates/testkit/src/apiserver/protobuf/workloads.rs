//! batch/v1 Job, apps/v1 Deployment, rbac roles and bindings, coordination Lease,
//! events.k8s.io Event and networking.k8s.io NetworkPolicy.

use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::batch::v1 as batch;
use k8s_pb::api::coordination::v1 as coordination;
use k8s_pb::api::events::v1 as events;
use k8s_pb::api::networking::v1 as networking;
use k8s_pb::api::rbac::v1 as rbac;

use super::json::{dropped, json_struct};

json_struct! {
    batch::Job { metadata, spec, status with dropped }
    batch::JobSpec {
        parallelism, completions, active_deadline_seconds, pod_failure_policy, success_policy,
        backoff_limit, backoff_limit_per_index, max_failed_indexes, selector, manual_selector,
        template, ttl_seconds_after_finished, completion_mode, suspend, pod_replacement_policy,
        managed_by,
    }
    batch::PodFailurePolicy { rules }
    batch::PodFailurePolicyRule { action, on_exit_codes, on_pod_conditions }
    batch::PodFailurePolicyOnExitCodesRequirement { container_name, operator, values }
    batch::PodFailurePolicyOnPodConditionsPattern { r#type, status }
    batch::SuccessPolicy { rules }
    batch::SuccessPolicyRule { succeeded_indexes, succeeded_count }
    apps::Deployment { metadata, spec, status with dropped }
    apps::DeploymentSpec {
        replicas, selector, template, strategy, min_ready_seconds, revision_history_limit, paused,
        progress_deadline_seconds,
    }
    apps::DeploymentStrategy { r#type, rolling_update }
    apps::RollingUpdateDeployment { max_unavailable, max_surge }
    rbac::Role { metadata, rules }
    rbac::ClusterRole { metadata, rules, aggregation_rule }
    rbac::AggregationRule { cluster_role_selectors }
    rbac::ClusterRoleBinding { metadata, subjects, role_ref }
    rbac::PolicyRule {
        verbs, api_groups, resources, resource_names, non_resource_ur_ls as "nonResourceURLs",
    }
    rbac::RoleBinding { metadata, subjects, role_ref }
    rbac::Subject { kind, api_group, name, namespace }
    rbac::RoleRef { api_group, kind, name }
    coordination::Lease { metadata, spec }
    coordination::LeaseSpec {
        holder_identity, lease_duration_seconds, acquire_time, renew_time, lease_transitions,
        strategy, preferred_holder,
    }
    events::Event {
        metadata, event_time, series, reporting_controller, reporting_instance, action, reason,
        regarding, related, note, r#type, deprecated_source, deprecated_first_timestamp,
        deprecated_last_timestamp, deprecated_count,
    }
    events::EventSeries { count, last_observed_time }
    networking::NetworkPolicy { metadata, spec }
    networking::NetworkPolicySpec { pod_selector, ingress, egress, policy_types }
    networking::NetworkPolicyIngressRule { ports, from }
    networking::NetworkPolicyEgressRule { ports, to }
    networking::NetworkPolicyPort { protocol, port, end_port }
    networking::NetworkPolicyPeer { pod_selector, namespace_selector, ip_block }
    networking::IpBlock { cidr, except }
}

#[cfg(test)]
mod tests {
    use k8s_pb::api::coordination::v1 as coordination;
    use k8s_pb::api::events::v1 as events;
    use k8s_pb::api::rbac::v1 as rbac;
    use k8s_pb::apimachinery::pkg::apis::meta::v1::MicroTime;
    use serde_json::json;

    use super::super::json::ToJson;

    #[test]
    fn a_network_policy_keeps_its_peers_and_ports() {
        use k8s_pb::api::networking::v1 as networking;
        use k8s_pb::apimachinery::pkg::apis::meta::v1::LabelSelector;
        use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
        let spec = networking::NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: [("app".to_owned(), "cache".to_owned())].into(),
                ..Default::default()
            }),
            policy_types: vec!["Ingress".into()],
            ingress: vec![networking::NetworkPolicyIngressRule {
                from: vec![networking::NetworkPolicyPeer {
                    ip_block: Some(networking::IpBlock {
                        cidr: Some("10.0.0.0/8".into()),
                        except: vec![],
                    }),
                    ..Default::default()
                }],
                ports: vec![networking::NetworkPolicyPort {
                    protocol: Some("TCP".into()),
                    port: Some(IntOrString {
                        r#type: Some(0),
                        int_val: Some(8088),
                        str_val: None,
                    }),
                    end_port: None,
                }],
            }],
            egress: vec![],
        };
        assert_eq!(
            spec.to_json().unwrap().unwrap(),
            json!({"podSelector": {"matchLabels": {"app": "cache"}}, "policyTypes": ["Ingress"],
                   "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}],
                                "ports": [{"protocol": "TCP", "port": 8088}]}]})
        );
    }

    #[test]
    fn policy_rule_names_non_resource_urls_as_kubernetes_does() {
        let r = rbac::PolicyRule {
            verbs: vec!["get".into()],
            non_resource_ur_ls: vec!["/healthz".into()],
            ..Default::default()
        };
        assert_eq!(
            r.to_json().unwrap().unwrap(),
            json!({"verbs": ["get"], "nonResourceURLs": ["/healthz"]})
        );
    }

    #[test]
    fn lease_times_are_micro_times() {
        let l = coordination::LeaseSpec {
            holder_identity: Some("pod-a".into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime {
                seconds: Some(1),
                nanos: Some(0),
            }),
            ..Default::default()
        };
        assert_eq!(
            l.to_json().unwrap().unwrap(),
            json!({"holderIdentity": "pod-a", "leaseDurationSeconds": 15,
                   "renewTime": "1970-01-01T00:00:01.000000Z"})
        );
    }

    #[test]
    fn events_v1_event_keeps_regarding_and_note() {
        let e = events::Event {
            reason: Some("Scaled".into()),
            note: Some("to 3".into()),
            regarding: Some(k8s_pb::api::core::v1::ObjectReference {
                kind: Some("RunnerGroup".into()),
                name: Some("pool".into()),
                ..Default::default()
            }),
            series: Some(events::EventSeries {
                count: Some(4),
                last_observed_time: None,
            }),
            ..Default::default()
        };
        assert_eq!(
            e.to_json().unwrap().unwrap(),
            json!({"reason": "Scaled", "note": "to 3",
                   "regarding": {"kind": "RunnerGroup", "name": "pool"}, "series": {"count": 4}})
        );
    }
}
