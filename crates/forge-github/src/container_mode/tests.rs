//! The GitHub runner pod as the reconciler builds it (the forge's default pod, then
//! `build_runner_job`), in every container mode, checked against the restricted profile.

use std::collections::BTreeMap;
use std::sync::Arc;

use forgerunner_core::crd::{ContainerMode, RunnerGroupSpec};
use forgerunner_core::embedded::Embedded;
use forgerunner_core::forge::{ReconcileTrigger, RunnerCredentials, SecretValue};
use forgerunner_core::metrics::Metrics;
use forgerunner_core::runner_pod::{PssRule, default_work_volume_claim, restricted_violations};
use forgerunner_core::testing::{runner_container, runner_env};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::forge::GithubForge;

fn group(mode: Option<ContainerModeType>, template: Option<PodTemplateSpec>) -> RunnerGroup {
    let spec: RunnerGroupSpec = serde_json::from_value(serde_json::json!({
        "forge": "github", "maxRunners": 5, "image": "ghcr.io/actions/actions-runner:2.330.0",
        "github": {"configUrl": "https://github.com/my-org", "credentials": "github-pat"}
    }))
    .expect("spec");
    let mut g = RunnerGroup::new(
        "arc",
        RunnerGroupSpec {
            container_mode: mode.map(|type_| ContainerMode {
                type_,
                kubernetes_mode_work_volume_claim: None,
            }),
            template: template.as_ref().map(Embedded::new),
            ..spec
        },
    );
    g.metadata.namespace = Some("ci".into());
    g.metadata.uid = Some("uid-1".into());
    g
}

/// The runner pod the reconciler would create for `g`.
fn built_pod(g: &RunnerGroup) -> PodSpec {
    let forge = GithubForge::new(Arc::new(Metrics::default()), ReconcileTrigger::channel().0);
    let creds = RunnerCredentials {
        secret_data: BTreeMap::from([("jitconfig".to_owned(), SecretValue::new("jit"))]),
        env: BTreeMap::new(),
        annotations: BTreeMap::new(),
    };
    forgerunner_core::testing::built_pod(&forge, g, &creds)
}

#[test]
fn no_mode_and_kubernetes_modes_pass_restricted() {
    for mode in [
        None,
        Some(ContainerModeType::Kubernetes),
        Some(ContainerModeType::KubernetesNoVolume),
    ] {
        let p = built_pod(&group(mode, None));
        assert_eq!(restricted_violations(&p), [], "{mode:?}");
        let sc = p.security_context.as_ref().expect("pod context");
        assert_eq!(
            (sc.run_as_user, sc.run_as_group, sc.fs_group),
            (Some(1001), Some(123), Some(123)),
            "{mode:?}"
        );
    }
}

#[test]
fn dind_breaks_restricted_through_its_privileged_sidecar() {
    let p = built_pod(&group(Some(ContainerModeType::Dind), None));
    let v = restricted_violations(&p);
    assert!(
        v.iter()
            .any(|v| v.rule == PssRule::Privileged && v.field.starts_with("spec.initContainers[dind]")),
        "{v:?}"
    );
    assert!(
        v.iter().all(|v| v.field.starts_with("spec.initContainers[dind]")),
        "{v:?}"
    );
    assert_eq!(
        runner_env(&p, "DOCKER_HOST").as_deref(),
        Some("unix:///run/dind/docker.sock")
    );
    assert_eq!(
        runner_env(&p, "RUNNER_WAIT_FOR_DOCKER_IN_SECONDS").as_deref(),
        Some("120")
    );
    let init: Vec<&str> = p
        .init_containers
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(init, ["init-dind-externals", "dind"]);
    let copy = &p.init_containers.as_ref().expect("init")[0];
    assert_eq!(
        copy.image.as_deref(),
        Some("ghcr.io/actions/actions-runner:2.330.0"),
        "the externals come from the runner's own image"
    );
    assert_eq!(p.automount_service_account_token, Some(false));
    assert_eq!(p.service_account_name, None);
}

#[test]
fn no_mode_has_no_token_and_no_account() {
    let p = built_pod(&group(None, None));
    assert_eq!(p.automount_service_account_token, Some(false));
    assert_eq!(p.service_account_name, None);
    assert_eq!(p.init_containers, None);
    assert_eq!(runner_env(&p, "ACTIONS_RUNNER_CONTAINER_HOOKS"), None);
}

#[test]
fn kubernetes_mode_uses_hooks_a_work_claim_and_the_runner_account() {
    let p = built_pod(&group(Some(ContainerModeType::Kubernetes), None));
    assert_eq!(
        runner_env(&p, "ACTIONS_RUNNER_CONTAINER_HOOKS").as_deref(),
        Some("/home/runner/k8s/index.js")
    );
    assert_eq!(
        runner_env(&p, "ACTIONS_RUNNER_REQUIRE_JOB_CONTAINER").as_deref(),
        Some("true")
    );
    let pod_name = runner_container(&p)
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "ACTIONS_RUNNER_POD_NAME")
        .and_then(|e| e.value_from.as_ref())
        .and_then(|v| v.field_ref.as_ref())
        .map(|f| f.field_path.clone());
    assert_eq!(pod_name.as_deref(), Some("metadata.name"));
    assert_eq!(runner_env(&p, "ACTIONS_RUNNER_IMAGE"), None);
    assert_eq!(p.service_account_name.as_deref(), Some("arc-runner"));
    assert_eq!(p.automount_service_account_token, Some(true));
    let work = p
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "work")
        .expect("work volume");
    assert!(
        work.ephemeral.is_some(),
        "an ephemeral claim, deleted with the pod"
    );
    let mount = runner_container(&p)
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == "work")
        .map(|m| m.mount_path.clone());
    assert_eq!(mount.as_deref(), Some("/home/runner/_work"));
}

#[test]
fn kubernetes_mode_takes_the_specs_claim() {
    let mut g = group(Some(ContainerModeType::Kubernetes), None);
    let mut claim = default_work_volume_claim();
    claim.spec.storage_class_name = Some("fast-ssd".into());
    if let Some(m) = g.spec.container_mode.as_mut() {
        m.kubernetes_mode_work_volume_claim = Some(Embedded::new(&claim));
    }
    let p = built_pod(&g);
    let class = p
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "work")
        .and_then(|v| v.ephemeral.as_ref())
        .and_then(|e| e.volume_claim_template.as_ref())
        .and_then(|t| t.spec.storage_class_name.clone());
    assert_eq!(class.as_deref(), Some("fast-ssd"));
}

#[test]
fn kubernetes_novolume_mode_names_the_runner_image_and_has_no_claim() {
    let p = built_pod(&group(Some(ContainerModeType::KubernetesNoVolume), None));
    assert_eq!(
        runner_env(&p, "ACTIONS_RUNNER_CONTAINER_HOOKS").as_deref(),
        Some("/home/runner/k8s-novolume/index.js")
    );
    assert_eq!(
        runner_env(&p, "ACTIONS_RUNNER_IMAGE").as_deref(),
        Some("ghcr.io/actions/actions-runner:2.330.0")
    );
    assert!(p.volumes.iter().flatten().all(|v| v.ephemeral.is_none()));
    assert_eq!(p.service_account_name.as_deref(), Some("arc-runner"));
    assert_eq!(p.automount_service_account_token, Some(true));
}

#[test]
fn role_rules_follow_the_mode() {
    let forge = GithubForge::new(Arc::new(Metrics::default()), ReconcileTrigger::channel().0);
    let resources = |mode| -> Vec<String> {
        forge
            .runner_role_rules(&group(mode, None).spec)
            .into_iter()
            .flat_map(|r| r.resources.unwrap_or_default())
            .collect()
    };
    assert_eq!(
        resources(Some(ContainerModeType::Kubernetes)),
        ["pods", "pods/exec", "pods/log", "jobs", "secrets"]
    );
    assert_eq!(
        resources(Some(ContainerModeType::KubernetesNoVolume)),
        ["pods", "pods/exec", "pods/log", "secrets"]
    );
    assert!(resources(Some(ContainerModeType::Dind)).is_empty());
    assert!(resources(None).is_empty());
    let rules = forge.runner_role_rules(&group(Some(ContainerModeType::Kubernetes), None).spec);
    let jobs = rules
        .iter()
        .find(|r| r.resources.as_deref() == Some(&["jobs".to_owned()][..]))
        .expect("jobs rule");
    assert_eq!(jobs.api_groups.as_deref(), Some(&["batch".to_owned()][..]));
    assert_eq!(jobs.verbs, ["get", "list", "create", "delete"]);
    let exec = &rules[1];
    assert_eq!(exec.verbs, ["get", "create"]);
    let log = &rules[2];
    assert_eq!(log.verbs, ["get", "list", "watch"]);
}

#[test]
fn template_resources_reach_the_hardened_runner() {
    let limits = BTreeMap::from([("cpu".to_owned(), Quantity("2".into()))]);
    let requests = BTreeMap::from([("memory".to_owned(), Quantity("1Gi".into()))]);
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
    let p = built_pod(&group(None, Some(tpl)));
    let r = runner_container(&p).resources.as_ref().expect("resources");
    assert_eq!(r.limits.as_ref(), Some(&limits));
    assert_eq!(r.requests.as_ref(), Some(&requests));
    assert_eq!(restricted_violations(&p), [], "still restricted");
}

fn with_ca(mut g: RunnerGroup) -> RunnerGroup {
    if let Some(gh) = g.spec.github.as_mut() {
        gh.ca_bundle_config_map = Some("corp-ca".into());
    }
    g
}

/// GHES behind a private CA (`caBundleConfigMap`) must be trusted by a runner that cannot use
/// `sudo`, in every mode.
///
/// Upstream `actions/runner` `src/Misc/layoutroot/run.sh` `updateCerts`: with
/// `RUNNER_UPDATE_CA_CERTS` set, a runner whose uid is not 0 runs `sudo update-ca-certificates`
/// and, when that fails, only prints a message before starting. ARC relies on it because the
/// image gives `runner` passwordless sudo (`images/Dockerfile`) and ARC's pod sets no security
/// context. Here `allowPrivilegeEscalation: false` (no_new_privs) makes sudo refuse, so the
/// .NET listener and git would never trust the CA and every runner would idle.
#[test]
fn a_ca_bundle_is_trusted_without_sudo_in_every_mode() {
    for mode in [
        None,
        Some(ContainerModeType::Kubernetes),
        Some(ContainerModeType::KubernetesNoVolume),
        Some(ContainerModeType::Dind),
    ] {
        let p = built_pod(&with_ca(group(mode, None)));
        let r = runner_container(&p);
        let sc = r.security_context.as_ref().expect("runner context");
        assert_eq!(
            sc.allow_privilege_escalation,
            Some(false),
            "{mode:?}: sudo is blocked"
        );
        assert_eq!(
            runner_env(&p, "RUNNER_UPDATE_CA_CERTS"),
            None,
            "{mode:?}: RUNNER_UPDATE_CA_CERTS only works through sudo"
        );
        let bundle = runner_env(&p, "SSL_CERT_FILE").expect("SSL_CERT_FILE");
        assert_eq!(
            runner_env(&p, "GIT_SSL_CAINFO").as_ref(),
            Some(&bundle),
            "{mode:?}"
        );
        let mount = r
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| bundle.starts_with(&format!("{}/", m.mount_path)))
            .expect("the bundle's directory is mounted");
        assert_eq!(mount.read_only, Some(true), "{mode:?}");
        let writer = p
            .init_containers
            .iter()
            .flatten()
            .find(|c| {
                c.volume_mounts
                    .iter()
                    .flatten()
                    .any(|m| m.name == mount.name && m.read_only != Some(true))
            })
            .expect("an init container writes the bundle");
        assert_eq!(
            writer.image.as_deref(),
            Some("ghcr.io/actions/actions-runner:2.330.0"),
            "{mode:?}: the runner image's own system bundle"
        );
        let v = restricted_violations(&p);
        if mode == Some(ContainerModeType::Dind) {
            assert!(
                v.iter().all(|v| v.field.starts_with("spec.initContainers[dind]")),
                "{v:?}"
            );
        } else {
            assert_eq!(v, [], "{mode:?}");
        }
    }
}
