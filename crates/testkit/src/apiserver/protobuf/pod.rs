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
