//! The default runner pod for Forgejo, in the two shapes forgejo-runner supports here.
//!
//! - **one-job** (Forgejo 15+): `forgejo-runner one-job --wait --url $(FORGEJO_INSTANCE_URL)
//!   --uuid $(FORGEJO_RUNNER_UUID) --token-url file:/var/run/forgejo-runner/token
//!   [--handle $(FORGEJO_JOB_HANDLE)] --label <label>…`. The runner's own token comes from the
//!   runner Secret's key `token`, mounted read-only at `/var/run/forgejo-runner`; `--handle` is
//!   given only when the runner is bound to a job.
//! - **register** (Forgejo 11–14): the init container [`REGISTER_CONTAINER`] runs
//!   `forgejo-runner register` with the registration token from the Secret's key
//!   `registration-token`, mounted there only, and leaves the runner's own identity in
//!   `/data/.runner` on a shared emptyDir; the `runner` container then runs
//!   `forgejo-runner one-job --wait` from that file, with no Secret mount, so workflow steps
//!   cannot read the scope-wide registration token.
//!
//! The image is [`RUNNER_IMAGE`] unless `spec.image` says otherwise. Docker labels (`docker://`,
//! or a bare name) need a Docker daemon: forgejo-runner's `configCheck` exits at start without
//! one, so validation requires `containerMode: dind` (which adds one, [`crate::pod_security`]) or
//! a template that gives the runner `DOCKER_HOST` ([`crate::validate::validate_docker_daemon`]).
//! `host` labels work as is; `lxc` labels are refused (no LXC in the pod).
//!
//! A config file: forgejo-runner reads one only from `--config` (`internal/app/cmd/cmd.go`), and
//! neither it nor its image (`Dockerfile`: `CMD ["/bin/forgejo-runner"]`) knows `CONFIG_FILE`,
//! the Gitea runner image's convention (act_runner `scripts/run.sh`). Users carry it over, so
//! when `spec.template`'s runner container sets `CONFIG_FILE` in its `env`,
//! [`apply_config_file`] passes `--config $(CONFIG_FILE)` to `one-job` and, on 11–14, to
//! `register` ([`REGISTER_SCRIPT`]); see [`apply_config_file`] for what a config may change.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec, VolumeMount};

use forgerunner_core::crd::RunnerGroupSpec;
use forgerunner_core::forge::{RunnerCredentials, RunnerPodRequest};
pub use forgerunner_core::runner_pod::RUNNER_CONTAINER;
use forgerunner_core::runner_pod::trust::{RunnerTrust, TrustStyle};
// `DATA_DIR` is forgejo-runner's home and work directory; `REGISTER_CONTAINER` registers a
// token-path runner.
pub use forgerunner_http::act_runner::{DATA_DIR, REGISTER_CONTAINER};
use forgerunner_http::act_runner::{data_mount, data_volume, secret_key_volume};

/// The runner image used when `spec.image` is empty: forgejo-runner 12.8.2, the first with
/// `one-job --handle` and `--token-url`.
pub const RUNNER_IMAGE: &str = "code.forgejo.org/forgejo/runner:12.8.2";
/// Runner Secret key of a v15 runner's own token.
pub const TOKEN_KEY: &str = "token";
/// Runner Secret key of the registration token (Forgejo 11–14).
pub const REGISTRATION_TOKEN_KEY: &str = "registration-token";
/// Where the runner Secret is mounted.
pub const SECRET_DIR: &str = "/var/run/forgejo-runner";
/// The volume of the runner Secret.
const SECRET_VOLUME: &str = "forgejo-runner-secret";
/// Env: the instance URL.
pub const ENV_INSTANCE_URL: &str = "FORGEJO_INSTANCE_URL";
/// Env: the runner's UUID (v15).
pub const ENV_RUNNER_UUID: &str = "FORGEJO_RUNNER_UUID";
/// Env: the bound job's handle (v15, bound runners only).
pub const ENV_JOB_HANDLE: &str = "FORGEJO_JOB_HANDLE";
/// Env: the runner's name (token path).
pub const ENV_RUNNER_NAME: &str = "FORGEJO_RUNNER_NAME";
/// Env: the labels, comma-separated (token path).
pub const ENV_RUNNER_LABELS: &str = "FORGEJO_RUNNER_LABELS";

/// Env: the path of a forgejo-runner config file, when `spec.template` sets it.
pub const ENV_CONFIG_FILE: &str = "CONFIG_FILE";

/// The token-path registration, run in `/data` by the init container: the token is read from
/// the mounted file, so it is never in the pod spec or any environment. `--config` only when
/// [`ENV_CONFIG_FILE`] is set ([`apply_config_file`]).
pub const REGISTER_SCRIPT: &str = r#"exec forgejo-runner register --no-interactive ${CONFIG_FILE:+--config "$CONFIG_FILE"} --instance "$FORGEJO_INSTANCE_URL" --token "$(cat /var/run/forgejo-runner/registration-token)" --name "$FORGEJO_RUNNER_NAME" --labels "$FORGEJO_RUNNER_LABELS""#;

/// The one-job arguments; `bound` adds `--handle`.
pub fn one_job_args(labels: &[String], bound: bool) -> Vec<String> {
    let mut args: Vec<String> = [
        "one-job",
        "--wait",
        "--url",
        "$(FORGEJO_INSTANCE_URL)",
        "--uuid",
        "$(FORGEJO_RUNNER_UUID)",
        "--token-url",
        "file:/var/run/forgejo-runner/token",
    ]
    .map(String::from)
    .to_vec();
    if bound {
        args.extend(["--handle".to_string(), "$(FORGEJO_JOB_HANDLE)".to_string()]);
    }
    for l in labels {
        args.extend(["--label".to_string(), l.clone()]);
    }
    args
}

fn secret_mount() -> VolumeMount {
    VolumeMount {
        name: SECRET_VOLUME.to_string(),
        mount_path: SECRET_DIR.to_string(),
        read_only: Some(true),
        ..VolumeMount::default()
    }
}

/// The default pod for one runner. The shape follows what `credentials` hold: a runner token
/// (v15, one-job) or a registration token (11–14, register). Secret material is only mounted,
/// and on the token path only into the `register` init container.
pub fn default_runner_pod(
    labels: &[String],
    image: Option<&str>,
    secret_name: &str,
    credentials: &RunnerCredentials,
) -> PodSpec {
    let v15 = credentials.secret_data.contains_key(TOKEN_KEY);
    let env: Vec<EnvVar> = credentials
        .env
        .iter()
        .map(|(name, value)| EnvVar {
            name: name.clone(),
            value: Some(value.clone()),
            value_from: None,
        })
        .collect();
    let image = image
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .unwrap_or(RUNNER_IMAGE);
    let runner = |args: Vec<String>, mounts: Vec<VolumeMount>| Container {
        name: RUNNER_CONTAINER.to_string(),
        image: Some(image.to_string()),
        command: Some(vec!["forgejo-runner".to_string()]),
        args: Some(args),
        env: Some(env.clone()),
        working_dir: Some(DATA_DIR.to_string()),
        volume_mounts: Some(mounts),
        ..Container::default()
    };
    let (containers, init, key) = if v15 {
        let bound = credentials.env.contains_key(ENV_JOB_HANDLE);
        let main = runner(one_job_args(labels, bound), vec![secret_mount(), data_mount()]);
        (vec![main], None, TOKEN_KEY)
    } else {
        let register = Container {
            name: REGISTER_CONTAINER.to_string(),
            image: Some(image.to_string()),
            command: Some(vec!["/bin/sh".to_string(), "-c".to_string()]),
            args: Some(vec![REGISTER_SCRIPT.to_string()]),
            env: Some(env.clone()),
            working_dir: Some(DATA_DIR.to_string()),
            volume_mounts: Some(vec![secret_mount(), data_mount()]),
            ..Container::default()
        };
        // `one-job` without connection flags reads the `.runner` file `register` left in /data.
        let args = ["one-job", "--wait"].map(String::from).to_vec();
        (
            vec![runner(args, vec![data_mount()])],
            Some(vec![register]),
            REGISTRATION_TOKEN_KEY,
        )
    };
    PodSpec {
        init_containers: init,
        containers,
        volumes: Some(vec![
            secret_key_volume(SECRET_VOLUME, secret_name, key),
            data_volume(),
        ]),
        restart_policy: Some("Never".to_string()),
        ..PodSpec::default()
    }
}

/// One new runner's pod ([`forgerunner_core::forge::ForgeSession::runner_pod`]): the
/// [`default_runner_pod`] declaring the group's labels and its class's (`one-job --label` on 15+,
/// `register --labels` on 11–14), the group's trust settings, config file and cache, then
/// container mode and the restricted Pod Security settings.
pub(crate) fn runner_pod(r: &RunnerPodRequest<'_>) -> PodSpec {
    let group = r.group;
    let own = group
        .spec
        .forgejo
        .as_ref()
        .map(|f| f.labels.clone())
        .unwrap_or_default();
    let labels = crate::classes::runner_labels(&own, r.class);
    let credentials = with_labels(r.credentials, &labels);
    let mut pod = default_runner_pod(&labels, group.spec.image.as_deref(), r.secret_name, &credentials);
    apply_trust(&group.spec, &mut pod);
    apply_config_file(&group.spec, &mut pod);
    crate::cache::apply_cache(group, &mut pod);
    crate::pod_security::finish_pod(&mut pod, &group.spec);
    pod
}

/// Carries `spec.forgejo.caBundleConfigMap` and `spec.forgejo.proxyUrl` into the containers
/// that talk to Forgejo (the runner and, on the token path, `register`); see
/// `forgerunner_core::runner_pod::trust`.
pub fn apply_trust(group: &RunnerGroupSpec, pod: &mut PodSpec) {
    let Some(fj) = group.forgejo.as_ref() else {
        return;
    };
    RunnerTrust::new(fj.ca_bundle_config_map.as_deref(), fj.proxy_url.as_deref()).apply(
        pod,
        &[REGISTER_CONTAINER, RUNNER_CONTAINER],
        TrustStyle::Go,
        group,
    );
}

/// The `CONFIG_FILE` entry of `spec.template`'s runner container `env` (a value or a
/// `valueFrom`), if it sets a usable one. Read when the pod is built: the pod runs
/// forgejo-runner without a shell, and forgejo-runner never reads `CONFIG_FILE` itself.
pub fn template_config_file(group: &RunnerGroupSpec) -> Option<EnvVar> {
    let tpl = group.pod_template().ok().flatten()?;
    tpl.spec?
        .containers
        .into_iter()
        .filter(|c| c.name == RUNNER_CONTAINER)
        .flat_map(|c| c.env.unwrap_or_default())
        .find(|e| {
            e.name == ENV_CONFIG_FILE
                && (e.value.as_deref().is_some_and(|v| !v.trim().is_empty()) || e.value_from.is_some())
        })
}

/// Passes the config file named by `spec.template`'s `CONFIG_FILE` ([`template_config_file`])
/// to forgejo-runner: `one-job --config $(CONFIG_FILE)` (the kubelet expands it from the
/// runner container's env, where the template's entry is merged) and, on the token path, to
/// `register` (its script adds `--config "$CONFIG_FILE"`; the entry is copied to the init
/// container, with the template runner mounts that hold a literal path, so the file is there
/// too). Without the entry the pod is left alone.
///
/// What a config changes (forgejo-runner 12.8): `runner.labels` replaces `register`'s
/// `--labels` and, on 11–14, the labels `one-job` declares (`register.go`,
/// `config.FromRegistration`); on 15 the `--label` flags win (`config.New`). A config with
/// `server.connections` makes `one-job` refuse to start (`args.go` `connectionFromArguments`).
pub fn apply_config_file(group: &RunnerGroupSpec, pod: &mut PodSpec) {
    let Some(entry) = template_config_file(group) else {
        return;
    };
    if let Some(runner) = pod.containers.iter_mut().find(|c| c.name == RUNNER_CONTAINER)
        && let Some(args) = runner.args.as_mut()
        && args.first().is_some_and(|a| a == "one-job")
    {
        args.splice(1..1, ["--config".to_string(), format!("$({ENV_CONFIG_FILE})")]);
    }
    let Some(register) = pod
        .init_containers
        .iter_mut()
        .flatten()
        .find(|c| c.name == REGISTER_CONTAINER)
    else {
        return;
    };
    // The mounts of the template's runner container that hold the file: the template gives
    // them to the runner container only, and `register` needs the same file.
    let mounts: Vec<VolumeMount> = entry
        .value
        .as_deref()
        .map(|path| config_mounts(group, path))
        .unwrap_or_default();
    register.env.get_or_insert_with(Vec::new).push(entry);
    let have = register.volume_mounts.get_or_insert_with(Vec::new);
    for m in mounts {
        if !have.iter().any(|h| h.mount_path == m.mount_path) {
            have.push(m);
        }
    }
}

/// The template runner container's mounts at or above `path`, read-only.
fn config_mounts(group: &RunnerGroupSpec, path: &str) -> Vec<VolumeMount> {
    let Some(spec) = group.pod_template().ok().flatten().and_then(|t| t.spec) else {
        return Vec::new();
    };
    spec.containers
        .into_iter()
        .filter(|c| c.name == RUNNER_CONTAINER)
        .flat_map(|c| c.volume_mounts.unwrap_or_default())
        .filter(|m| {
            let dir = m.mount_path.trim_end_matches('/');
            !dir.is_empty()
                && (path == dir || path.strip_prefix(dir).is_some_and(|rest| rest.starts_with('/')))
        })
        .map(|m| VolumeMount {
            read_only: Some(true),
            ..m
        })
        .collect()
}

/// `credentials` with the token path's labels ([`ENV_RUNNER_LABELS`], when set) replaced by
/// `labels`, so that the pod registers with the labels of the runner's class whatever the
/// credentials were issued for.
pub fn with_labels<'a>(credentials: &'a RunnerCredentials, labels: &[String]) -> Cow<'a, RunnerCredentials> {
    let joined = labels.join(",");
    match credentials.env.get(ENV_RUNNER_LABELS) {
        Some(have) if *have != joined => {
            let mut c = credentials.clone();
            c.env.insert(ENV_RUNNER_LABELS.to_string(), joined);
            Cow::Owned(c)
        }
        _ => Cow::Borrowed(credentials),
    }
}

/// The plain environment of a token-path runner.
pub fn register_env(url: &str, runner_name: &str, labels: &[String]) -> BTreeMap<String, String> {
    BTreeMap::from([
        (ENV_INSTANCE_URL.to_string(), url.trim().to_string()),
        (ENV_RUNNER_NAME.to_string(), runner_name.to_string()),
        (ENV_RUNNER_LABELS.to_string(), labels.join(",")),
    ])
}

#[cfg(test)]
mod tests;
