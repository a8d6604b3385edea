//! What the GitHub runner image needs from its pod: its user, the `dind` fit, and the two
//! `kubernetes` modes, which only GitHub's runner has (its container hooks run job containers
//! as pods of their own). Shapes follow ARC's chart so that ARC users find what they know.

use forgerunner_core::RunnerGroup;
use forgerunner_core::crd::{ContainerModeType, RunnerGroupSpec};
use forgerunner_core::names::runner_service_account_name;
use forgerunner_core::runner_pod::{
    DindProfile, RunAs, RunnerPodProfile, ephemeral_volume, finish_default_pod, runner_container_mut,
};
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, PodSpec, VolumeMount};
use k8s_openapi::api::rbac::v1::PolicyRule;

/// The runner image's `runner` user (uid 1001). Its group here is `docker` (gid 123), the group
/// the image puts `runner` in: it owns the `dind` socket, and as `fsGroup` it makes the
/// `kubernetes` mode work volume writable (what ARC's docs ask users to set).
pub const RUN_AS: RunAs = RunAs {
    user: 1001,
    group: 123,
};
/// The runner's work directory (`_work` under the runner's home).
pub const WORK_DIR: &str = "/home/runner/_work";
/// Tools the runner mounts into job containers (node for JavaScript actions).
pub const EXTERNALS_DIR: &str = "/home/runner/externals";
/// Name of the work volume; the container hooks find the claim as `<pod>-work`.
pub const WORK_VOLUME: &str = "work";
/// Hooks of the `kubernetes` mode (shipped in the runner image).
pub const HOOKS_KUBERNETES: &str = "/home/runner/k8s/index.js";
/// Hooks of the `kubernetes-novolume` mode (shipped in the runner image).
pub const HOOKS_KUBERNETES_NOVOLUME: &str = "/home/runner/k8s-novolume/index.js";

/// How the GitHub runner fits the generic pod settings.
pub const PROFILE: RunnerPodProfile<'static> = RunnerPodProfile {
    run_as: RUN_AS,
    // The image's passwd has `runner` with home /home/runner.
    home: None,
    dind: DindProfile {
        work_dir: WORK_DIR,
        externals_dir: Some(EXTERNALS_DIR),
        // run.sh waits this long for the daemon before giving up on the job.
        runner_env: &[("RUNNER_WAIT_FOR_DOCKER_IN_SECONDS", "120")],
    },
};

/// Adds the group's container mode to a default GitHub pod and hardens it.
pub fn finish_pod(pod: &mut PodSpec, group: &RunnerGroup) {
    let mode = group.spec.container_mode_type();
    match mode {
        Some(ContainerModeType::Kubernetes) => add_kubernetes_mode(pod, group, true),
        Some(ContainerModeType::KubernetesNoVolume) => add_kubernetes_mode(pod, group, false),
        Some(ContainerModeType::Dind) | None => {}
    }
    finish_default_pod(pod, &PROFILE, mode);
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

/// The container hooks' settings; `with_volume` is `kubernetes` (a work volume shared with job
/// pods), otherwise `kubernetes-novolume` (the hooks copy files into job pods).
fn add_kubernetes_mode(pod: &mut PodSpec, group: &RunnerGroup, with_volume: bool) {
    let group_name = group.metadata.name.as_deref().unwrap_or_default();
    // The hooks create job pods, so this pod needs its API token and the group's runner account
    // (kept by the reconciler from `runner_role_rules`).
    pod.service_account_name = Some(runner_service_account_name(group_name));
    pod.automount_service_account_token = Some(true);
    if with_volume {
        // A claim that does not decode is refused by validation before any pod is built.
        let claim = group.spec.work_volume_claim().ok().flatten();
        pod.volumes
            .get_or_insert_with(Vec::new)
            .push(ephemeral_volume(WORK_VOLUME, claim.as_ref()));
    }
    let Some(runner) = runner_container_mut(pod) else {
        return;
    };
    let hooks = if with_volume {
        HOOKS_KUBERNETES
    } else {
        HOOKS_KUBERNETES_NOVOLUME
    };
    let mut add = vec![
        env("ACTIONS_RUNNER_CONTAINER_HOOKS", hooks),
        EnvVar {
            name: "ACTIONS_RUNNER_POD_NAME".into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    api_version: None,
                    field_path: "metadata.name".into(),
                }),
                ..EnvVarSource::default()
            }),
        },
        // Jobs without a `container:` would run steps in the runner pod itself, which has no
        // tools; ARC makes them fail early with a clear message instead.
        env("ACTIONS_RUNNER_REQUIRE_JOB_CONTAINER", "true"),
    ];
    if with_volume {
        runner
            .volume_mounts
            .get_or_insert_with(Vec::new)
            .push(VolumeMount {
                name: WORK_VOLUME.into(),
                mount_path: WORK_DIR.into(),
                ..VolumeMount::default()
            });
    } else if let Some(image) = runner.image.clone() {
        // The novolume hooks start job pods with an init container of the runner's image.
        add.push(env("ACTIONS_RUNNER_IMAGE", &image));
    }
    let runner_env = runner.env.get_or_insert_with(Vec::new);
    for e in add {
        if !runner_env.iter().any(|x| x.name == e.name) {
            runner_env.push(e);
        }
    }
}

fn rule(api_group: &str, resource: &str, verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![api_group.into()]),
        resources: Some(vec![resource.into()]),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        ..PolicyRule::default()
    }
}

/// What the container hooks do in the group's namespace (ARC's runner Role): create, watch and
/// delete job pods, exec into them and read their logs, keep secrets for their env, and (with a
/// work volume) run container steps as Jobs. Empty for modes without hooks. The chart ships the
/// `kubernetes` set as the ClusterRole the operator binds for both modes (never holding it);
/// `crates/operator/tests/rbac_coverage.rs` checks that the two agree.
pub fn runner_role_rules(spec: &RunnerGroupSpec) -> Vec<PolicyRule> {
    let with_jobs = match spec.container_mode_type() {
        Some(ContainerModeType::Kubernetes) => true,
        Some(ContainerModeType::KubernetesNoVolume) => false,
        Some(ContainerModeType::Dind) | None => return Vec::new(),
    };
    let mut rules = vec![
        rule("", "pods", &["get", "list", "create", "delete"]),
        rule("", "pods/exec", &["get", "create"]),
        rule("", "pods/log", &["get", "list", "watch"]),
    ];
    if with_jobs {
        rules.push(rule("batch", "jobs", &["get", "list", "create", "delete"]));
    }
    rules.push(rule("", "secrets", &["get", "list", "create", "delete"]));
    rules
}

#[cfg(test)]
mod tests;
