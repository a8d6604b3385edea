//! One test per rule: a compliant pod passes; breaking the rule yields exactly its violation.

use k8s_openapi::api::core::v1::{
    AppArmorProfile, Capabilities, Container, ContainerPort, EphemeralContainer, HostPathVolumeSource,
    NFSVolumeSource, PodOS, PodSecurityContext, SELinuxOptions, SeccompProfile, SecurityContext, Sysctl,
    Volume, WindowsSecurityContextOptions,
};

use super::*;

fn restricted_ctx() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            add: None,
            drop: Some(vec!["ALL".into()]),
        }),
        ..SecurityContext::default()
    }
}

/// A pod that passes: pod-level non-root and seccomp, hardened containers, allowed volumes.
fn good() -> PodSpec {
    let ctr = |name: &str| Container {
        name: name.into(),
        security_context: Some(restricted_ctx()),
        ..Container::default()
    };
    PodSpec {
        containers: vec![ctr("runner"), ctr("side")],
        init_containers: Some(vec![ctr("setup")]),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(1000),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            }),
            ..PodSecurityContext::default()
        }),
        volumes: Some(
            serde_json::from_value(serde_json::json!([
                {"name": "a", "emptyDir": {}},
                {"name": "b", "secret": {"secretName": "s"}},
                {"name": "c", "configMap": {"name": "cm"}},
                {"name": "d", "projected": {"sources": []}},
                {"name": "e", "downwardAPI": {}},
                {"name": "f", "persistentVolumeClaim": {"claimName": "x"}},
                {"name": "g", "csi": {"driver": "d"}},
                {"name": "h", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}
            ]))
            .expect("volumes"),
        ),
        ..PodSpec::default()
    }
}

fn runner_sc(p: &mut PodSpec) -> &mut SecurityContext {
    p.containers[0]
        .security_context
        .get_or_insert_with(SecurityContext::default)
}

fn pod_sc(p: &mut PodSpec) -> &mut PodSecurityContext {
    p.security_context.get_or_insert_with(PodSecurityContext::default)
}

/// The (rule, field) pairs of the violations.
fn found(p: &PodSpec) -> Vec<(PssRule, String)> {
    restricted_violations(p)
        .into_iter()
        .map(|v| (v.rule, v.field))
        .collect()
}

fn one(rule: PssRule, field: &str) -> Vec<(PssRule, String)> {
    vec![(rule, field.to_owned())]
}

#[test]
fn compliant_pod_has_no_violations() {
    assert_eq!(restricted_violations(&good()), []);
}

#[test]
fn host_namespaces() {
    for (set, field) in [
        (
            (|p: &mut PodSpec| p.host_network = Some(true)) as fn(&mut PodSpec),
            "spec.hostNetwork",
        ),
        (|p: &mut PodSpec| p.host_pid = Some(true), "spec.hostPID"),
        (|p: &mut PodSpec| p.host_ipc = Some(true), "spec.hostIPC"),
    ] {
        let mut p = good();
        set(&mut p);
        assert_eq!(found(&p), one(PssRule::HostNamespaces, field));
    }
    let mut p = good();
    p.host_network = Some(false);
    assert_eq!(found(&p), []);
}

#[test]
fn privileged() {
    let mut p = good();
    runner_sc(&mut p).privileged = Some(true);
    assert_eq!(
        found(&p),
        one(
            PssRule::Privileged,
            "spec.containers[runner].securityContext.privileged"
        )
    );
}

#[test]
fn capabilities_must_drop_all_and_add_only_net_bind_service() {
    let mut p = good();
    runner_sc(&mut p).capabilities = Some(Capabilities {
        add: Some(vec!["NET_BIND_SERVICE".into()]),
        drop: Some(vec!["ALL".into()]),
    });
    assert_eq!(found(&p), []);
    runner_sc(&mut p).capabilities = Some(Capabilities {
        add: Some(vec!["SYS_ADMIN".into()]),
        drop: Some(vec!["ALL".into()]),
    });
    let v = restricted_violations(&p);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].rule, PssRule::Capabilities);
    assert!(v[0].message.contains("SYS_ADMIN"), "{}", v[0]);
    runner_sc(&mut p).capabilities = Some(Capabilities {
        add: None,
        drop: Some(vec!["NET_RAW".into()]),
    });
    assert_eq!(
        found(&p),
        one(
            PssRule::Capabilities,
            "spec.containers[runner].securityContext.capabilities.drop"
        )
    );
}

#[test]
fn host_path_volumes_and_volume_types() {
    let mut p = good();
    p.volumes = Some(vec![Volume {
        name: "docker".into(),
        host_path: Some(HostPathVolumeSource {
            path: "/var/run/docker.sock".into(),
            type_: None,
        }),
        ..Volume::default()
    }]);
    assert_eq!(
        found(&p),
        vec![
            (PssRule::HostPathVolumes, "spec.volumes[docker].hostPath".into()),
            (PssRule::VolumeTypes, "spec.volumes[docker].hostPath".into()),
        ]
    );
    p.volumes = Some(vec![Volume {
        name: "share".into(),
        nfs: Some(NFSVolumeSource {
            path: "/x".into(),
            server: "nfs".into(),
            read_only: None,
        }),
        ..Volume::default()
    }]);
    assert_eq!(found(&p), one(PssRule::VolumeTypes, "spec.volumes[share].nfs"));
}

#[test]
fn host_ports() {
    let mut p = good();
    p.containers[0].ports = Some(vec![
        ContainerPort {
            container_port: 80,
            host_port: Some(0),
            ..ContainerPort::default()
        },
        ContainerPort {
            container_port: 8080,
            host_port: Some(8080),
            ..ContainerPort::default()
        },
    ]);
    assert_eq!(
        found(&p),
        one(PssRule::HostPorts, "spec.containers[runner].ports[8080].hostPort")
    );
}

#[test]
fn app_armor() {
    let mut p = good();
    runner_sc(&mut p).app_armor_profile = Some(AppArmorProfile {
        type_: "Localhost".into(),
        localhost_profile: Some("p".into()),
    });
    assert_eq!(found(&p), []);
    pod_sc(&mut p).app_armor_profile = Some(AppArmorProfile {
        type_: "Unconfined".into(),
        localhost_profile: None,
    });
    assert_eq!(
        found(&p),
        one(PssRule::AppArmor, "spec.securityContext.appArmorProfile.type")
    );
}

#[test]
fn se_linux() {
    let mut p = good();
    runner_sc(&mut p).se_linux_options = Some(SELinuxOptions {
        type_: Some("container_init_t".into()),
        level: Some("s0:c1,c2".into()),
        ..SELinuxOptions::default()
    });
    assert_eq!(found(&p), []);
    runner_sc(&mut p).se_linux_options = Some(SELinuxOptions {
        type_: Some("spc_t".into()),
        user: Some("root".into()),
        ..SELinuxOptions::default()
    });
    assert_eq!(
        found(&p),
        vec![
            (
                PssRule::SeLinux,
                "spec.containers[runner].securityContext.seLinuxOptions.type".into()
            ),
            (
                PssRule::SeLinux,
                "spec.containers[runner].securityContext.seLinuxOptions.user".into()
            ),
        ]
    );
}

#[test]
fn proc_mount() {
    let mut p = good();
    runner_sc(&mut p).proc_mount = Some("Default".into());
    assert_eq!(found(&p), []);
    runner_sc(&mut p).proc_mount = Some("Unmasked".into());
    assert_eq!(
        found(&p),
        one(
            PssRule::ProcMount,
            "spec.containers[runner].securityContext.procMount"
        )
    );
}

#[test]
fn seccomp_on_the_pod_or_every_container() {
    let mut p = good();
    pod_sc(&mut p).seccomp_profile = None;
    // Every container (init included) then lacks a profile.
    assert_eq!(
        found(&p),
        vec![
            (
                PssRule::Seccomp,
                "spec.initContainers[setup].securityContext.seccompProfile.type".into()
            ),
            (
                PssRule::Seccomp,
                "spec.containers[runner].securityContext.seccompProfile.type".into()
            ),
            (
                PssRule::Seccomp,
                "spec.containers[side].securityContext.seccompProfile.type".into()
            ),
        ]
    );
    let localhost = SeccompProfile {
        type_: "Localhost".into(),
        localhost_profile: Some("p.json".into()),
    };
    for c in p
        .containers
        .iter_mut()
        .chain(p.init_containers.iter_mut().flatten())
    {
        if let Some(sc) = c.security_context.as_mut() {
            sc.seccomp_profile = Some(localhost.clone());
        }
    }
    assert_eq!(found(&p), []);
    // Unconfined anywhere breaks it, even under a good pod-level profile.
    let mut p = good();
    runner_sc(&mut p).seccomp_profile = Some(SeccompProfile {
        type_: "Unconfined".into(),
        localhost_profile: None,
    });
    assert_eq!(
        found(&p),
        one(
            PssRule::Seccomp,
            "spec.containers[runner].securityContext.seccompProfile.type"
        )
    );
}

#[test]
fn sysctls() {
    let mut p = good();
    pod_sc(&mut p).sysctls = Some(vec![
        Sysctl {
            name: "net.ipv4.ip_local_port_range".into(),
            value: "1024 65535".into(),
        },
        Sysctl {
            name: "kernel.msgmax".into(),
            value: "65536".into(),
        },
    ]);
    assert_eq!(
        found(&p),
        one(PssRule::Sysctls, "spec.securityContext.sysctls[kernel.msgmax]")
    );
}

#[test]
fn privilege_escalation() {
    let mut p = good();
    runner_sc(&mut p).allow_privilege_escalation = None;
    assert_eq!(
        found(&p),
        one(
            PssRule::PrivilegeEscalation,
            "spec.containers[runner].securityContext.allowPrivilegeEscalation"
        )
    );
}

#[test]
fn run_as_non_root_on_the_pod_or_every_container() {
    let mut p = good();
    pod_sc(&mut p).run_as_non_root = None;
    assert_eq!(found(&p).len(), 3, "every container then lacks it");
    for c in p
        .containers
        .iter_mut()
        .chain(p.init_containers.iter_mut().flatten())
    {
        if let Some(sc) = c.security_context.as_mut() {
            sc.run_as_non_root = Some(true);
        }
    }
    assert_eq!(found(&p), []);
    let mut p = good();
    runner_sc(&mut p).run_as_non_root = Some(false);
    assert_eq!(
        found(&p),
        one(
            PssRule::RunAsNonRoot,
            "spec.containers[runner].securityContext.runAsNonRoot"
        )
    );
    let mut p = good();
    pod_sc(&mut p).run_as_non_root = Some(false);
    assert_eq!(found(&p).len(), 4, "the pod and its three containers");
}

#[test]
fn run_as_user_zero() {
    let mut p = good();
    pod_sc(&mut p).run_as_user = Some(0);
    runner_sc(&mut p).run_as_user = Some(0);
    assert_eq!(
        found(&p),
        vec![
            (PssRule::RunAsUser, "spec.securityContext.runAsUser".into()),
            (
                PssRule::RunAsUser,
                "spec.containers[runner].securityContext.runAsUser".into()
            ),
        ]
    );
}

#[test]
fn host_process() {
    let mut p = good();
    runner_sc(&mut p).windows_options = Some(WindowsSecurityContextOptions {
        host_process: Some(true),
        ..WindowsSecurityContextOptions::default()
    });
    assert_eq!(
        found(&p),
        one(
            PssRule::HostProcess,
            "spec.containers[runner].securityContext.windowsOptions.hostProcess"
        )
    );
}

#[test]
fn ephemeral_containers_are_checked() {
    let mut p = good();
    p.ephemeral_containers = Some(vec![EphemeralContainer {
        name: "debug".into(),
        security_context: Some(restricted_ctx()),
        ..EphemeralContainer::default()
    }]);
    assert_eq!(found(&p), []);
    if let Some(e) = p.ephemeral_containers.as_mut() {
        e[0].security_context = None;
    }
    let v = found(&p);
    assert!(
        v.iter()
            .all(|(_, f)| f.starts_with("spec.ephemeralContainers[debug]")),
        "{v:?}"
    );
    assert_eq!(v.len(), 2, "escalation and capabilities: {v:?}");
}

#[test]
fn windows_pods_skip_the_linux_only_rules() {
    let mut p = good();
    p.os = Some(PodOS {
        name: "windows".into(),
    });
    pod_sc(&mut p).seccomp_profile = None;
    runner_sc(&mut p).allow_privilege_escalation = None;
    runner_sc(&mut p).capabilities = None;
    assert_eq!(found(&p), []);
}

#[test]
fn display_names_rule_field_and_message() {
    let mut p = good();
    runner_sc(&mut p).privileged = Some(true);
    let v = restricted_violations(&p);
    assert_eq!(
        v[0].to_string(),
        "privileged (spec.containers[runner].securityContext.privileged): privileged containers are forbidden"
    );
}
