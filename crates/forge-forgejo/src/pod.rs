//! The default runner pod for Forgejo, in the two shapes forgejo-runner supports here.
//!
//! - **one-job** (Forgejo 15+): `forgejo-runner one-job --wait --url $(FORGEJO_INSTANCE_URL)
//!   --uuid $(FORGEJO_RUNNER_UUID) --token-url file:/var/run/forgejo-runner/token
//!   [--handle $(FORGEJO_JOB_HANDLE)] --label <label>…`. The runner's own token comes from the
//!   runner Secret's key `token`, mounted read-only at `/var/run/forgejo-runner`; `--handle` is
//!   given only when the runner is bound to a job.
//! - **register** (Forgejo 11–14): a shell script runs `forgejo-runner register` with the
//!   registration token from the Secret's key `registration-token` (same mount), then
//!   `exec forgejo-runner one-job --wait`.
//!
//! The image is [`RUNNER_IMAGE`] unless `spec.image` says otherwise. Labels with `docker://`
//! need a Docker daemon: `containerMode: dind` adds one ([`crate::pod_security`]). `host` labels
//! work as is.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, KeyToPath, PodSpec, SecretVolumeSource, Volume, VolumeMount,
};

use forgerunner_core::forge::RunnerCredentials;

/// The runner image used when `spec.image` is empty: forgejo-runner 12.8.2, the first with
/// `one-job --handle` and `--token-url`.
pub const RUNNER_IMAGE: &str = "code.forgejo.org/forgejo/runner:12.8.2";
/// Name of the runner container (the template merge key).
pub const RUNNER_CONTAINER: &str = "runner";
/// Runner Secret key of a v15 runner's own token.
pub const TOKEN_KEY: &str = "token";
/// Runner Secret key of the registration token (Forgejo 11–14).
pub const REGISTRATION_TOKEN_KEY: &str = "registration-token";
/// Where the runner Secret is mounted.
pub const SECRET_DIR: &str = "/var/run/forgejo-runner";
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
/// forgejo-runner's home and work directory; an emptyDir so every runner starts fresh.
pub const DATA_DIR: &str = "/data";

/// The token-path script: register with the shared token, then run one job.
const REGISTER_SCRIPT: &str = r#"set -eu
cd /data
forgejo-runner register --no-interactive --instance "$FORGEJO_INSTANCE_URL" --token "$(cat /var/run/forgejo-runner/registration-token)" --name "$FORGEJO_RUNNER_NAME" --labels "$FORGEJO_RUNNER_LABELS"
exec forgejo-runner one-job --wait
"#;

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

fn secret_volume(secret_name: &str, key: &str) -> Volume {
    Volume {
        name: "forgejo-runner-secret".to_string(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret_name.to_string()),
            items: Some(vec![KeyToPath {
                key: key.to_string(),
                path: key.to_string(),
                mode: None,
            }]),
            optional: Some(false),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// The default pod for one runner. The shape follows what `credentials` hold: a runner token
/// (v15, one-job) or a registration token (11–14, register). Secret material is only mounted.
pub fn default_runner_pod(
    labels: &[String],
    image: Option<&str>,
    secret_name: &str,
    credentials: &RunnerCredentials,
) -> PodSpec {
    let v15 = credentials.secret_data.contains_key(TOKEN_KEY);
    let (command, args, key) = if v15 {
        let bound = credentials.env.contains_key(ENV_JOB_HANDLE);
        (
            vec!["forgejo-runner".to_string()],
            one_job_args(labels, bound),
            TOKEN_KEY,
        )
    } else {
        (
            vec!["/bin/sh".to_string(), "-c".to_string()],
            vec![REGISTER_SCRIPT.to_string()],
            REGISTRATION_TOKEN_KEY,
        )
    };
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
    PodSpec {
        containers: vec![Container {
            name: RUNNER_CONTAINER.to_string(),
            image: Some(image.to_string()),
            command: Some(command),
            args: Some(args),
            env: Some(env),
            working_dir: Some(DATA_DIR.to_string()),
            volume_mounts: Some(vec![
                VolumeMount {
                    name: "forgejo-runner-secret".to_string(),
                    mount_path: SECRET_DIR.to_string(),
                    read_only: Some(true),
                    ..VolumeMount::default()
                },
                VolumeMount {
                    name: "data".to_string(),
                    mount_path: DATA_DIR.to_string(),
                    ..VolumeMount::default()
                },
            ]),
            ..Container::default()
        }],
        volumes: Some(vec![
            secret_volume(secret_name, key),
            Volume {
                name: "data".to_string(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Volume::default()
            },
        ]),
        restart_policy: Some("Never".to_string()),
        ..PodSpec::default()
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
