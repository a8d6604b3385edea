//! The runner pod as the reconciler builds it (the forge's default pod, then
//! `build_runner_job`), in every container mode the Gitea-family forges support, checked against
//! the restricted Pod Security profile (feature `testing`). Both forges' pods follow
//! [`crate::act_runner::PROFILE`], so one set of checks serves both; each forge supplies its
//! spec and the credential shapes it hands out.

use std::collections::BTreeMap;

use forgerunner_core::RunnerGroup;
use forgerunner_core::crd::{ContainerMode, ContainerModeType, RunnerClass, RunnerGroupSpec};
use forgerunner_core::embedded::Embedded;
use forgerunner_core::forge::{Forge, GroupKey, RunnerCredentials, RunnerPodRequest};
use forgerunner_core::runner_pod::{PssRule, restricted_violations};
use forgerunner_core::testing::{runner_container, runner_env};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::act_runner::REGISTER_CONTAINER;

/// The pods of a group in `mode` with `template`, one per credential shape the forge hands out.
pub type Pods<'a> = &'a dyn Fn(Option<ContainerModeType>, Option<PodTemplateSpec>) -> Vec<PodSpec>;

/// A group `g` in namespace `ci` from `spec` (the RunnerGroup spec as JSON), in `mode` with
/// `template`.
pub fn group(
    spec: serde_json::Value,
    mode: Option<ContainerModeType>,
    template: Option<PodTemplateSpec>,
) -> RunnerGroup {
    let mut spec: RunnerGroupSpec = serde_json::from_value(spec).expect("spec");
    spec.container_mode = mode.map(|type_| ContainerMode {
        type_,
        kubernetes_mode_work_volume_claim: None,
    });
    spec.template = template.as_ref().map(Embedded::new);
    let mut g = RunnerGroup::new("g", spec);
    g.metadata.namespace = Some("ci".into());
    g.metadata.uid = Some("uid-1".into());
    g
}

/// The forge's default pod for runner `runner_name` of `g` (of `class`; `None`: one of the
/// group's own) with its Secret `secret_name`, asked of the group's session as the reconciler
/// asks for it, before the reconciler lays anything on it.
pub fn default_pod(
    forge: &dyn Forge,
    g: &RunnerGroup,
    runner_name: &str,
    secret_name: &str,
    credentials: &RunnerCredentials,
    class: Option<&RunnerClass>,
) -> PodSpec {
    let key = GroupKey {
        namespace: g.metadata.namespace.clone().unwrap_or_default(),
        name: g.metadata.name.clone().unwrap_or_default(),
    };
    forge.open(&key).runner_pod(&RunnerPodRequest {
        group: g,
        runner_name,
        secret_name,
        credentials,
        class,
    })
}

/// The runner pod the reconciler would create for `g`.
pub fn built_pod(forge: &impl Forge, g: &RunnerGroup, creds: &RunnerCredentials) -> PodSpec {
    forgerunner_core::testing::built_pod(forge, g, creds)
}

/// The runner pods `forge` would have the reconciler create for a group of `spec` (see
/// [`group`]) in `mode` with `template`, one per credential shape in `credentials`.
pub fn built_pods(
    forge: &impl Forge,
    spec: serde_json::Value,
    credentials: &[RunnerCredentials],
    mode: Option<ContainerModeType>,
    template: Option<PodTemplateSpec>,
) -> Vec<PodSpec> {
    let g = group(spec, mode, template);
    credentials
        .iter()
        .map(|creds| built_pod(forge, &g, creds))
        .collect()
}

/// Every check here, each forge's pods must pass them all.
pub fn all(pods: Pods<'_>) {
    no_mode_passes_restricted_as_uid_1000(pods);
    dind_breaks_restricted_only_through_its_privileged_sidecar(pods);
    template_resources_reach_the_hardened_runner(pods);
}

/// Without a container mode the pod passes restricted, as uid 1000 with `HOME=/data`.
pub fn no_mode_passes_restricted_as_uid_1000(pods: Pods<'_>) {
    for p in pods(None, None) {
        assert_eq!(restricted_violations(&p), []);
        let sc = p.security_context.as_ref().expect("pod context");
        assert_eq!(
            (sc.run_as_user, sc.run_as_group, sc.fs_group, sc.run_as_non_root),
            (Some(1000), Some(1000), Some(1000), Some(true))
        );
        assert_eq!(p.automount_service_account_token, Some(false));
        // Only the registration step (register-token path), which passes as well.
        let init: Vec<&str> = p
            .init_containers
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert!(init.iter().all(|n| *n == REGISTER_CONTAINER), "{init:?}");
        // forgejo-runner's `Dockerfile` sets `HOME=/data`; a custom image may not, and
        // `internal/pkg/config/config.go` `New` puts the cache under `os.UserHomeDir()`.
        assert_eq!(runner_env(&p, "HOME").as_deref(), Some("/data"));
    }
}

/// `dind` breaks restricted only through its privileged sidecar.
pub fn dind_breaks_restricted_only_through_its_privileged_sidecar(pods: Pods<'_>) {
    for p in pods(Some(ContainerModeType::Dind), None) {
        let v = restricted_violations(&p);
        assert!(v.iter().any(|v| v.rule == PssRule::Privileged), "{v:?}");
        assert!(
            v.iter().all(|v| v.field.starts_with("spec.initContainers[dind]")),
            "{v:?}"
        );
        let init: Vec<&str> = p
            .init_containers
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .filter(|n| *n != REGISTER_CONTAINER)
            .collect();
        assert_eq!(init, ["dind"]);
        let dind = p
            .init_containers
            .iter()
            .flatten()
            .find(|c| c.name == "dind")
            .expect("dind");
        assert_eq!(dind.image.as_deref(), Some("docker:28-dind"));
        assert!(dind.args.iter().flatten().any(|a| a == "--group=1000"));
        // The data directory is shared at the same path, so job bind mounts resolve.
        let data = dind
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.mount_path == "/data")
            .map(|m| m.name.clone());
        assert_eq!(data.as_deref(), Some("data"));
        assert_eq!(
            runner_env(&p, "DOCKER_HOST").as_deref(),
            Some("unix:///run/dind/docker.sock")
        );
        let sc = runner_container(&p)
            .security_context
            .as_ref()
            .expect("runner context");
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.privileged, None);
    }
}

/// The template's resources reach the hardened runner, which still passes restricted.
pub fn template_resources_reach_the_hardened_runner(pods: Pods<'_>) {
    let limits = BTreeMap::from([("cpu".to_owned(), Quantity("2".into()))]);
    let requests = BTreeMap::from([("memory".to_owned(), Quantity("512Mi".into()))]);
    let tpl = PodTemplateSpec {
        metadata: None,
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "runner".into(),
                resources: Some(ResourceRequirements {
                    limits: Some(limits.clone()),
                    requests: Some(requests.clone()),
                    claims: None,
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
    };
    for p in pods(None, Some(tpl)) {
        let r = runner_container(&p).resources.as_ref().expect("resources");
        assert_eq!(r.limits.as_ref(), Some(&limits));
        assert_eq!(r.requests.as_ref(), Some(&requests));
        assert_eq!(restricted_violations(&p), [], "still restricted");
    }
}
