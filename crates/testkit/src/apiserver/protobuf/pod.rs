//! Pods and pod templates: the spec, containers, probes, security contexts and scheduling.
//! Status is the server's to set and is dropped from a request body.

use k8s_pb::api::core::v1 as core;

use super::json::{dropped, json_struct};

json_struct! {
    core::Pod { metadata, spec, status with dropped }
    core::PodTemplateSpec { metadata, spec }
    core::PodSpec {
        volumes, init_containers, containers, ephemeral_containers, restart_policy,
        termination_grace_period_seconds, active_deadline_seconds, dns_policy, node_selector,
        service_account_name, service_account, automount_service_account_token, node_name,
        host_network, host_pid as "hostPID", host_ipc as "hostIPC", share_process_namespace,
        security_context, image_pull_secrets, hostname, subdomain, affinity, scheduler_name,
        tolerations, host_aliases, priority_class_name, priority, dns_config, readiness_gates,
        runtime_class_name, enable_service_links, preemption_policy, overhead,
        topology_spread_constraints, set_hostname_as_fqdn as "setHostnameAsFQDN", os,
        host_users, scheduling_gates, resource_claims, resources, hostname_override,
        workload_ref,
    }
    core::Container {
        name, image, command, args, working_dir, ports, env_from, env, resources, resize_policy,
        restart_policy, restart_policy_rules, volume_mounts, volume_devices, liveness_probe,
        readiness_probe, startup_probe, lifecycle, termination_message_path,
        termination_message_policy, image_pull_policy, security_context, stdin, stdin_once, tty,
    }
    core::EphemeralContainer { ephemeral_container_common as "", target_container_name }
    core::EphemeralContainerCommon {
        name, image, command, args, working_dir, ports, env_from, env, resources, resize_policy,
        restart_policy, restart_policy_rules, volume_mounts, volume_devices, liveness_probe,
        readiness_probe, startup_probe, lifecycle, termination_message_path,
        termination_message_policy, image_pull_policy, security_context, stdin, stdin_once, tty,
    }
    core::ContainerPort { name, host_port, container_port, protocol, host_ip as "hostIP" }
    core::EnvFromSource { prefix, config_map_ref, secret_ref }
    core::ConfigMapEnvSource { local_object_reference as "", optional }
    core::SecretEnvSource { local_object_reference as "", optional }
    core::EnvVar { name, value, value_from }
    core::EnvVarSource {
        field_ref, resource_field_ref, config_map_key_ref, secret_key_ref, file_key_ref,
    }
    core::ObjectFieldSelector { api_version, field_path }
    core::ResourceFieldSelector { container_name, resource, divisor }
    core::ConfigMapKeySelector { local_object_reference as "", key, optional }
    core::SecretKeySelector { local_object_reference as "", key, optional }
    core::FileKeySelector { volume_name, path, key, optional }
    core::ResourceRequirements { limits, requests, claims }
    core::ResourceClaim { name, request }
    core::ContainerResizePolicy { resource_name, restart_policy }
    core::ContainerRestartRule { action, exit_codes }
    core::ContainerRestartRuleOnExitCodes { operator, values }
    core::VolumeMount {
        name, read_only, recursive_read_only, mount_path, sub_path, mount_propagation,
        sub_path_expr,
    }
    core::VolumeDevice { name, device_path }
    core::Probe {
        handler as "", initial_delay_seconds, timeout_seconds, period_seconds, success_threshold,
        failure_threshold, termination_grace_period_seconds,
    }
    core::ProbeHandler { exec, http_get, tcp_socket, grpc }
    core::Lifecycle { post_start, pre_stop, stop_signal }
    core::LifecycleHandler { exec, http_get, tcp_socket, sleep }
    core::ExecAction { command }
    core::HttpGetAction { path, port, host, scheme, http_headers }
    core::HttpHeader { name, value }
    core::TcpSocketAction { port, host }
    core::GrpcAction { port, service }
    core::SleepAction { seconds }
    core::SecurityContext {
        capabilities, privileged, se_linux_options, windows_options, run_as_user, run_as_group,
        run_as_non_root, read_only_root_filesystem, allow_privilege_escalation, proc_mount,
        seccomp_profile, app_armor_profile,
    }
    core::PodSecurityContext {
        se_linux_options, windows_options, run_as_user, run_as_group, run_as_non_root,
        supplemental_groups, supplemental_groups_policy, fs_group, sysctls,
        fs_group_change_policy, seccomp_profile, app_armor_profile, se_linux_change_policy,
    }
    core::Capabilities { add, drop }
    core::SeLinuxOptions { user, role, r#type, level }
    core::WindowsSecurityContextOptions {
        gmsa_credential_spec_name, gmsa_credential_spec, run_as_user_name, host_process,
    }
    core::Sysctl { name, value }
    core::SeccompProfile { r#type, localhost_profile }
    core::AppArmorProfile { r#type, localhost_profile }
    core::Affinity { node_affinity, pod_affinity, pod_anti_affinity }
    core::NodeAffinity {
        required_during_scheduling_ignored_during_execution,
        preferred_during_scheduling_ignored_during_execution,
    }
    core::NodeSelector { node_selector_terms }
    core::NodeSelectorTerm { match_expressions, match_fields }
    core::NodeSelectorRequirement { key, operator, values }
    core::PreferredSchedulingTerm { weight, preference }
    core::PodAffinity {
        required_during_scheduling_ignored_during_execution,
        preferred_during_scheduling_ignored_during_execution,
    }
    core::PodAntiAffinity {
        required_during_scheduling_ignored_during_execution,
        preferred_during_scheduling_ignored_during_execution,
    }
    core::PodAffinityTerm {
        label_selector, namespaces, topology_key, namespace_selector, match_label_keys,
        mismatch_label_keys,
    }
    core::WeightedPodAffinityTerm { weight, pod_affinity_term }
    core::Toleration { key, operator, value, effect, toleration_seconds }
    core::HostAlias { ip, hostnames }
    core::PodDnsConfig { nameservers, searches, options }
    core::PodDnsConfigOption { name, value }
    core::PodReadinessGate { condition_type }
    core::TopologySpreadConstraint {
        max_skew, topology_key, when_unsatisfiable, label_selector, min_domains,
        node_affinity_policy, node_taints_policy, match_label_keys,
    }
    core::PodOs { name }
    core::PodSchedulingGate { name }
    core::PodResourceClaim { name, resource_claim_name, resource_claim_template_name }
    core::WorkloadReference { name, pod_group, pod_group_replica_key }
}

#[cfg(test)]
mod tests {
    use k8s_pb::api::core::v1 as core;
    use k8s_pb::apimachinery::pkg::api::resource::Quantity;
    use k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
    use serde_json::{Value, json};

    use super::super::json::ToJson;

    fn s(v: &str) -> Option<String> {
        Some(v.to_string())
    }

    fn local(name: &str) -> Option<core::LocalObjectReference> {
        Some(core::LocalObjectReference { name: s(name) })
    }

    /// A pod that sets the fields whose JSON names are not plain lower camel case, the inlined
    /// structs and the special scalar types.
    fn rich_pod() -> core::Pod {
        let probe = core::Probe {
            handler: Some(core::ProbeHandler {
                http_get: Some(core::HttpGetAction {
                    path: s("/healthz"),
                    port: Some(IntOrString {
                        r#type: Some(1),
                        int_val: None,
                        str_val: s("http"),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            period_seconds: Some(5),
            ..Default::default()
        };
        let container = core::Container {
            name: s("runner"),
            image: s("ghcr.io/actions/runner:2"),
            command: vec!["/run.sh".into()],
            ports: vec![core::ContainerPort {
                name: s("http"),
                container_port: Some(8080),
                host_ip: s("127.0.0.1"),
                ..Default::default()
            }],
            env_from: vec![core::EnvFromSource {
                config_map_ref: Some(core::ConfigMapEnvSource {
                    local_object_reference: local("settings"),
                    optional: Some(true),
                }),
                ..Default::default()
            }],
            env: vec![core::EnvVar {
                name: s("TOKEN"),
                value_from: Some(core::EnvVarSource {
                    secret_key_ref: Some(core::SecretKeySelector {
                        local_object_reference: local("gh"),
                        key: s("token"),
                        optional: None,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            resources: Some(core::ResourceRequirements {
                limits: [("memory".to_string(), Quantity { string: s("64Mi") })].into(),
                ..Default::default()
            }),
            liveness_probe: Some(probe),
            security_context: Some(core::SecurityContext {
                capabilities: Some(core::Capabilities {
                    add: vec![],
                    drop: vec!["ALL".into()],
                }),
                se_linux_options: Some(core::SeLinuxOptions {
                    r#type: s("spc_t"),
                    ..Default::default()
                }),
                allow_privilege_escalation: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        };
        let volume = |name: &str, source: core::VolumeSource| core::Volume {
            name: s(name),
            volume_source: Some(source),
        };
        core::Pod {
            metadata: Some(ObjectMeta {
                name: s("p"),
                ..Default::default()
            }),
            spec: Some(core::PodSpec {
                containers: vec![container],
                host_pid: Some(true),
                host_ipc: Some(false),
                set_hostname_as_fqdn: Some(true),
                volumes: vec![
                    volume(
                        "cfg",
                        core::VolumeSource {
                            config_map: Some(core::ConfigMapVolumeSource {
                                local_object_reference: local("settings"),
                                default_mode: Some(0o644),
                                ..Default::default()
                            }),
                            ..Default::default()
                        },
                    ),
                    volume(
                        "info",
                        core::VolumeSource {
                            downward_api: Some(core::DownwardAPIVolumeSource {
                                items: vec![core::DownwardAPIVolumeFile {
                                    path: s("labels"),
                                    field_ref: Some(core::ObjectFieldSelector {
                                        field_path: s("metadata.labels"),
                                        ..Default::default()
                                    }),
                                    ..Default::default()
                                }],
                                ..Default::default()
                            }),
                            ..Default::default()
                        },
                    ),
                    volume(
                        "scratch",
                        core::VolumeSource {
                            empty_dir: Some(core::EmptyDirVolumeSource {
                                medium: None,
                                size_limit: Some(Quantity { string: s("1Gi") }),
                            }),
                            ..Default::default()
                        },
                    ),
                ],
                tolerations: vec![core::Toleration {
                    key: s("ci"),
                    operator: s("Exists"),
                    toleration_seconds: Some(30),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(core::PodStatus {
                phase: s("Running"),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_pod_converts_to_the_names_k8s_openapi_reads() {
        let converted = rich_pod().to_json().unwrap().unwrap();
        // k8s-openapi ignores unknown keys, so a misnamed field would vanish on the round trip.
        let typed: k8s_openapi::api::core::v1::Pod =
            serde_json::from_value(converted.clone()).expect("k8s-openapi reads the JSON");
        let mut back = serde_json::to_value(&typed).unwrap();
        // k8s-openapi adds the type meta, which `decode` adds from the envelope.
        if let Some(m) = back.as_object_mut() {
            m.remove("apiVersion");
            m.remove("kind");
        }
        assert_eq!(back, converted);
        assert_eq!(converted["spec"]["hostPID"], json!(true));
        assert_eq!(converted["spec"]["setHostnameAsFQDN"], json!(true));
        assert_eq!(
            converted["spec"]["volumes"][0]["configMap"]["name"],
            json!("settings")
        );
        assert_eq!(
            converted["spec"]["volumes"][1]["downwardAPI"]["items"][0]["path"],
            json!("labels")
        );
        let c = &converted["spec"]["containers"][0];
        assert_eq!(c["livenessProbe"]["httpGet"]["port"], json!("http"));
        assert_eq!(c["resources"]["limits"]["memory"], json!("64Mi"));
        assert_eq!(
            c["envFrom"][0]["configMapRef"],
            json!({"name": "settings", "optional": true})
        );
        assert_eq!(c["ports"][0]["hostIP"], json!("127.0.0.1"));
        // The server owns status; a request's is dropped.
        assert_eq!(converted.get("status"), None::<&Value>);
    }

    #[test]
    fn an_unsupported_volume_plugin_is_refused_by_name() {
        let mut pod = rich_pod();
        if let Some(spec) = pod.spec.as_mut() {
            spec.volumes[0].volume_source = Some(core::VolumeSource {
                nfs: Some(core::NfsVolumeSource {
                    server: s("nas"),
                    path: s("/x"),
                    read_only: None,
                }),
                ..Default::default()
            });
        }
        let err = pod.to_json().unwrap_err();
        assert!(err.to_string().contains("volumes[].nfs"), "{err}");
    }
}
