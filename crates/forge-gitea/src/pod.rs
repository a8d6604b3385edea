//! The default runner pod for Gitea and the environment a runner needs.
//!
//! Image: [`DEFAULT_IMAGE`], Gitea Runner 1.0.8 (act_runner's successor, binary `gitea-runner`),
//! the version Gitea's maintainers ask users to move to (older runners leave jobs unfinished on
//! Gitea 1.26, go-gitea/gitea#38277). Its "basic" flavour has no Docker daemon and needs no
//! privilege: `host` labels work as is; `docker://` labels need a daemon (`containerMode: dind`,
//! [`crate::pod_security`]). The `-dind` flavours start their daemon from the image's
//! entrypoint, which this pod replaces with an explicit command, so they are not the way to get
//! Docker here.
//!
//! Two steps, so the registration token never reaches the job's container:
//! 1. the init container [`REGISTER_CONTAINER`] mounts the runner Secret (key
//!    [`REGISTRATION_TOKEN_KEY`], read-only, at [`TOKEN_DIR`]) and runs
//!    `gitea-runner register --ephemeral`, which writes the runner's own identity to
//!    `/data/.runner` on a shared emptyDir;
//! 2. the `runner` container runs `gitea-runner daemon` from that file. `.runner` says
//!    `ephemeral`, so the daemon takes one job and exits; it has no token and no Secret mount,
//!    so workflow steps cannot read the scope-wide registration token.
//!
//! `spec.image` naming the legacy `gitea/act_runner` image (≥ 0.2.12, the first with
//! `--ephemeral`) works too: its binary is `act_runner`, picked by [`runner_binary`].
//!
//! A config file: the binary reads one only from `--config` (a persistent flag of its root
//! command, act_runner `internal/app/cmd/cmd.go`); `CONFIG_FILE` is read by the image's
//! entrypoint script alone (`scripts/run.sh`), which this pod replaces. So when the template
//! sets [`CONFIG_FILE_ENV`] on the `runner` container, [`apply_config_file`] passes `--config`
//! to both steps and mounts the file in `register` too.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec, VolumeMount};

use forgerunner_core::crd::{GiteaSpec, RunnerGroupSpec};
use forgerunner_core::forge::RunnerPodRequest;
use forgerunner_core::runner_class::runner_labels;
pub use forgerunner_core::runner_pod::RUNNER_CONTAINER;
use forgerunner_core::runner_pod::trust::{RunnerTrust, TrustStyle};
use forgerunner_core::runner_version::{RunnerVersions, pinned_release, runner_image};
// The runner's `.runner` state lives in `DATA_DIR`, shared by the two containers.
pub use forgerunner_http::act_runner::{DATA_DIR, REGISTER_CONTAINER};
use forgerunner_http::act_runner::{data_mount, data_volume, secret_key_volume};

/// The image used when `spec.image` is empty.
pub const DEFAULT_IMAGE: &str = "gitea/runner:1.0.8";
/// Secret key of the registration token in the runner's Secret.
pub const REGISTRATION_TOKEN_KEY: &str = "registration_token";
/// Where the register container finds the runner Secret.
pub const TOKEN_DIR: &str = "/var/run/gitea-runner";
/// Binary of Gitea Runner ≥ 1.0.
pub const RUNNER_BINARY: &str = "gitea-runner";
/// Binary of the legacy `gitea/act_runner` images.
pub const LEGACY_RUNNER_BINARY: &str = "act_runner";

/// The variable users set on the `runner` container to name a config file (the name the
/// runner images' entrypoint uses).
pub const CONFIG_FILE_ENV: &str = "CONFIG_FILE";

const TOKEN_VOLUME: &str = "registration-token";

/// Repository names (last path segment) of Gitea's runner images: `gitea/runner` (Gitea Runner
/// 1.x, [`DEFAULT_IMAGE`]), the legacy `gitea/act_runner`, and mirrors of them.
pub const RUNNER_REPOSITORIES: &[&str] = &["runner", "act_runner"];

/// What Gitea tells of a group's runner releases: the image its runners run (`spec.image`,
/// else the template's `runner` container's, else [`DEFAULT_IMAGE`]) and the release its tag
/// pins. Nothing more: Gitea's runner listing has no version (`ActionRunner`,
/// `modules/structs/repo_actions.go`, v1.24.0 to v1.26.0) and it serves no runner release.
pub fn runner_versions(group: &RunnerGroupSpec) -> RunnerVersions {
    let image = runner_image(group).unwrap_or_else(|| DEFAULT_IMAGE.to_owned());
    let release = pinned_release(&image, RUNNER_REPOSITORIES);
    RunnerVersions {
        image: Some((image, release)),
        ..RunnerVersions::default()
    }
}

/// The variable the register step passes to `--labels` (comma-separated).
pub const LABELS_ENV: &str = "GITEA_RUNNER_LABELS";

/// The plain (non-secret) environment of a runner.
pub fn runner_env(spec: &GiteaSpec, runner_name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("GITEA_INSTANCE_URL".to_string(), spec.url.trim().to_string()),
        ("GITEA_RUNNER_NAME".to_string(), runner_name.to_string()),
        (LABELS_ENV.to_string(), spec.labels.join(",")),
    ])
}

/// Makes the pod's runner register with `labels` instead of the group's (a runner of a class of
/// `spec.classes`): [`LABELS_ENV`] of both containers, which `register` passes to `--labels`.
pub fn register_with(pod: &mut PodSpec, labels: &[String]) {
    let containers = pod
        .init_containers
        .iter_mut()
        .flatten()
        .chain(pod.containers.iter_mut());
    for c in containers.filter(|c| c.name == REGISTER_CONTAINER || c.name == RUNNER_CONTAINER) {
        for e in c.env.iter_mut().flatten().filter(|e| e.name == LABELS_ENV) {
            e.value = Some(labels.join(","));
        }
    }
}

/// The runner binary in `image`: `act_runner` for the legacy `…/act_runner` images, else
/// `gitea-runner`.
pub fn runner_binary(image: &str) -> &'static str {
    // The repository name, without registry, tag or digest.
    let repo = image.split(['@']).next().unwrap_or_default();
    let name = repo.rsplit('/').next().unwrap_or_default();
    let name = name.split(':').next().unwrap_or_default();
    if name == "act_runner" {
        LEGACY_RUNNER_BINARY
    } else {
        RUNNER_BINARY
    }
}

/// The register step's script: the token is read from the mounted file, so it is never in the
/// pod spec or any container's environment.
pub fn register_script(binary: &str) -> String {
    format!(
        "exec {binary} register --no-interactive --ephemeral --instance \"$GITEA_INSTANCE_URL\" \
         --token \"$(cat {TOKEN_DIR}/{REGISTRATION_TOKEN_KEY})\" --name \"$GITEA_RUNNER_NAME\" \
         --labels \"$GITEA_RUNNER_LABELS\""
    )
}

fn plain_env(spec: &GiteaSpec, runner_name: &str) -> Vec<EnvVar> {
    runner_env(spec, runner_name)
        .into_iter()
        .map(|(name, value)| EnvVar {
            name,
            value: Some(value),
            value_from: None,
        })
        .collect()
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_string(),
        mount_path: path.to_string(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

/// The default pod: the `register` init container (with the Secret) and the `runner`
/// container (without), sharing a fresh `/data`.
pub fn default_runner_pod(
    spec: &GiteaSpec,
    image: Option<&str>,
    runner_name: &str,
    secret_name: &str,
) -> PodSpec {
    let image = image
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .unwrap_or(DEFAULT_IMAGE);
    let binary = runner_binary(image);
    let register = Container {
        name: REGISTER_CONTAINER.to_string(),
        image: Some(image.to_string()),
        command: Some(vec!["sh".to_string(), "-c".to_string(), register_script(binary)]),
        env: Some(plain_env(spec, runner_name)),
        working_dir: Some(DATA_DIR.to_string()),
        volume_mounts: Some(vec![data_mount(), mount(TOKEN_VOLUME, TOKEN_DIR, true)]),
        ..Container::default()
    };
    let runner = Container {
        name: RUNNER_CONTAINER.to_string(),
        image: Some(image.to_string()),
        command: Some(vec![binary.to_string(), "daemon".to_string()]),
        env: Some(plain_env(spec, runner_name)),
        working_dir: Some(DATA_DIR.to_string()),
        volume_mounts: Some(vec![data_mount()]),
        ..Container::default()
    };
    PodSpec {
        init_containers: Some(vec![register]),
        containers: vec![runner],
        volumes: Some(vec![
            data_volume(),
            secret_key_volume(TOKEN_VOLUME, secret_name, REGISTRATION_TOKEN_KEY),
        ]),
        restart_policy: Some("Never".to_string()),
        ..PodSpec::default()
    }
}

/// Where the template's `CONFIG_FILE` points, as far as the pod spec tells.
enum ConfigPath {
    /// A literal path.
    Literal(String),
    /// Resolved by the kubelet (`valueFrom`, or a value with `$(VAR)` references).
    Resolved,
}

/// The template's `CONFIG_FILE` on the `runner` container (a non-empty one: `run.sh` ignores
/// an empty one too), where it points, and the template mounts that may hold the file: the
/// mount covering a literal path, else every ConfigMap, Secret or projected volume mount.
fn template_config_file(group: &RunnerGroupSpec) -> Option<(EnvVar, ConfigPath, Vec<VolumeMount>)> {
    // A template that does not decode is refused by validation; no config then.
    let spec = group.pod_template().ok().flatten()?.spec?;
    let runner = spec.containers.iter().find(|c| c.name == RUNNER_CONTAINER)?;
    let var = runner.env.iter().flatten().find(|e| e.name == CONFIG_FILE_ENV)?;
    let path = match (&var.value, &var.value_from) {
        (_, Some(_)) => ConfigPath::Resolved,
        (Some(v), None) if v.contains("$(") => ConfigPath::Resolved,
        (Some(v), None) if !v.trim().is_empty() => ConfigPath::Literal(v.trim().to_string()),
        _ => return None,
    };
    let file_volumes: BTreeSet<&str> = spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| v.config_map.is_some() || v.secret.is_some() || v.projected.is_some())
        .map(|v| v.name.as_str())
        .collect();
    let mounts = runner
        .volume_mounts
        .iter()
        .flatten()
        .filter(|m| match &path {
            ConfigPath::Literal(p) => {
                let dir = m.mount_path.trim_end_matches('/');
                p == &m.mount_path || p.strip_prefix(dir).is_some_and(|rest| rest.starts_with('/'))
            }
            ConfigPath::Resolved => file_volumes.contains(m.name.as_str()),
        })
        .cloned()
        .collect();
    Some((var.clone(), path, mounts))
}

/// One new runner's pod ([`forgerunner_core::forge::ForgeSession::runner_pod`]): the
/// [`default_runner_pod`] registering with the class's labels, the group's trust settings,
/// config file and cache, then container mode and the restricted Pod Security settings.
pub(crate) fn runner_pod(r: &RunnerPodRequest<'_>) -> PodSpec {
    let group = r.group;
    let image = group.spec.image.as_deref();
    let mut pod = match &group.spec.gitea {
        Some(spec) => {
            let mut p = default_runner_pod(spec, image, r.runner_name, r.secret_name);
            if let Some(class) = r.class {
                register_with(&mut p, &runner_labels(&spec.labels, class));
            }
            apply_trust(&group.spec, spec, &mut p);
            apply_config_file(&group.spec, &mut p);
            crate::cache::apply_cache(group, &mut p);
            p
        }
        // Validation rejects such a group before any runner is made; keep a sane shape.
        None => {
            let empty = GiteaSpec {
                url: String::new(),
                scope: forgerunner_core::crd::GiteaScope::Global,
                org: None,
                user: None,
                repo: None,
                credentials: String::new(),
                labels: Vec::new(),
                poll_interval_seconds: None,
                webhook_secret: None,
                ca_bundle_config_map: None,
                proxy_url: None,
            };
            default_runner_pod(&empty, image, r.runner_name, r.secret_name)
        }
    };
    crate::pod_security::finish_pod(&mut pod, &group.spec);
    pod
}

/// Passes the config file the template names in `CONFIG_FILE` (on the `runner` container) to
/// the runner, as the image's entrypoint would have: `--config` for `daemon` (the literal
/// path, or `$(CONFIG_FILE)` for the kubelet to expand, so no shell is needed) and for
/// `register` (whose script reads the variable), with the variable and the mounts holding
/// the file copied, read-only, into `register`. `register` needs it too: a config's
/// `runner.file` moves the state file both steps share, and its `runner.labels` replace
/// `--labels` (`registerNoInteractive`). Without `CONFIG_FILE` the pod is left as it is.
pub fn apply_config_file(group: &RunnerGroupSpec, pod: &mut PodSpec) {
    let Some((var, path, mounts)) = template_config_file(group) else {
        return;
    };
    let arg = match path {
        ConfigPath::Literal(p) => p,
        ConfigPath::Resolved => format!("$({CONFIG_FILE_ENV})"),
    };
    for c in pod.containers.iter_mut().filter(|c| c.name == RUNNER_CONTAINER) {
        if let Some(command) = c.command.as_mut() {
            command.extend(["--config".to_string(), arg.clone()]);
        }
    }
    let registers = pod.init_containers.iter_mut().flatten();
    for c in registers.filter(|c| c.name == REGISTER_CONTAINER) {
        if let Some(script) = c.command.as_mut().and_then(|cmd| cmd.get_mut(2)) {
            script.push_str(&format!(" --config \"${CONFIG_FILE_ENV}\""));
        }
        let env = c.env.get_or_insert_with(Vec::new);
        if !env.iter().any(|e| e.name == CONFIG_FILE_ENV) {
            env.push(var.clone());
        }
        let have = c.volume_mounts.get_or_insert_with(Vec::new);
        for m in &mounts {
            if !have.iter().any(|h| h.mount_path == m.mount_path) {
                have.push(VolumeMount {
                    read_only: Some(true),
                    ..m.clone()
                });
            }
        }
    }
}

/// Carries `spec.gitea.caBundleConfigMap` and `spec.gitea.proxyUrl` into both containers, since
/// both talk to Gitea (see `forgerunner_core::runner_pod::trust`).
pub fn apply_trust(group: &RunnerGroupSpec, spec: &GiteaSpec, pod: &mut PodSpec) {
    RunnerTrust::new(spec.ca_bundle_config_map.as_deref(), spec.proxy_url.as_deref()).apply(
        pod,
        &[REGISTER_CONTAINER, RUNNER_CONTAINER],
        TrustStyle::Go,
        group,
    );
}

#[cfg(test)]
mod tests;
