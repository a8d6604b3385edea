//! The default runner pod for Gitea and the environment a runner needs.
//!
//! Image choice: `gitea/act_runner:latest` (the "basic" flavour: no Docker daemon, no
//! privilege). Its entrypoint (`run.sh`) reads exactly the `GITEA_*` variables set here and
//! registers before running the daemon; with `GITEA_RUNNER_EPHEMERAL` set it takes one job and
//! exits. Groups whose labels use `docker://` need a Docker daemon: `containerMode: dind` adds
//! one ([`crate::pod_security`]). `host` labels work as is.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, PodSpec, SecretKeySelector, Volume, VolumeMount,
};

use forgerunner_core::crd::GiteaSpec;

/// The image used when `spec.image` is empty.
pub const DEFAULT_IMAGE: &str = "gitea/act_runner:latest";
/// Name of the runner container (the template merge key).
pub const RUNNER_CONTAINER: &str = "runner";
/// Secret key of the registration token in the runner's Secret.
pub const REGISTRATION_TOKEN_KEY: &str = "registration_token";
/// Where act_runner keeps its `.runner` state; an emptyDir so every runner starts fresh.
pub const DATA_DIR: &str = "/data";

/// The plain (non-secret) environment of a runner.
pub fn runner_env(spec: &GiteaSpec, runner_name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("GITEA_INSTANCE_URL".to_string(), spec.url.trim().to_string()),
        ("GITEA_RUNNER_NAME".to_string(), runner_name.to_string()),
        ("GITEA_RUNNER_LABELS".to_string(), spec.labels.join(",")),
        // Any non-empty value makes run.sh register with --ephemeral: one job, then Gitea
        // deletes the runner and the process exits.
        ("GITEA_RUNNER_EPHEMERAL".to_string(), "1".to_string()),
    ])
}

/// The default pod: one `runner` container with the env above plus the registration token
/// from `secret_name` (a `secretKeyRef`, never a literal) and a fresh `/data`.
pub fn default_runner_pod(
    spec: &GiteaSpec,
    image: Option<&str>,
    runner_name: &str,
    secret_name: &str,
) -> PodSpec {
    let mut env: Vec<EnvVar> = runner_env(spec, runner_name)
        .into_iter()
        .map(|(name, value)| EnvVar {
            name,
            value: Some(value),
            value_from: None,
        })
        .collect();
    env.push(EnvVar {
        name: "GITEA_RUNNER_REGISTRATION_TOKEN".to_string(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret_name.to_string(),
                key: REGISTRATION_TOKEN_KEY.to_string(),
                optional: Some(false),
            }),
            ..EnvVarSource::default()
        }),
    });
    let image = image
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .unwrap_or(DEFAULT_IMAGE);
    PodSpec {
        containers: vec![Container {
            name: RUNNER_CONTAINER.to_string(),
            image: Some(image.to_string()),
            env: Some(env),
            volume_mounts: Some(vec![VolumeMount {
                name: "data".to_string(),
                mount_path: DATA_DIR.to_string(),
                ..VolumeMount::default()
            }]),
            ..Container::default()
        }],
        volumes: Some(vec![Volume {
            name: "data".to_string(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        }]),
        restart_policy: Some("Never".to_string()),
        ..PodSpec::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use forgerunner_core::crd::GiteaScope;

    fn spec() -> GiteaSpec {
        GiteaSpec {
            url: "https://git.example.com".into(),
            scope: GiteaScope::Global,
            org: None,
            user: None,
            repo: None,
            credentials: "creds".into(),
            labels: vec!["linux:host".into(), "ubuntu:docker://node:20".into()],
            poll_interval_seconds: None,
            webhook_secret: None,
            ca_bundle_config_map: None,
            proxy_url: None,
        }
    }

    #[test]
    fn pod_references_the_token_and_has_fresh_data() {
        let pod = default_runner_pod(&spec(), None, "g-abcde", "g-abcde");
        let c = &pod.containers[0];
        assert_eq!(c.name, "runner");
        assert_eq!(c.image.as_deref(), Some(DEFAULT_IMAGE));
        let env = c.env.as_ref().unwrap();
        let get = |n: &str| env.iter().find(|e| e.name == n).unwrap();
        assert_eq!(
            get("GITEA_RUNNER_LABELS").value.as_deref(),
            Some("linux:host,ubuntu:docker://node:20")
        );
        assert_eq!(get("GITEA_RUNNER_NAME").value.as_deref(), Some("g-abcde"));
        assert_eq!(get("GITEA_RUNNER_EPHEMERAL").value.as_deref(), Some("1"));
        let tok = get("GITEA_RUNNER_REGISTRATION_TOKEN");
        assert_eq!(tok.value, None);
        let sel = tok.value_from.as_ref().unwrap().secret_key_ref.as_ref().unwrap();
        assert_eq!(
            (sel.name.as_str(), sel.key.as_str()),
            ("g-abcde", REGISTRATION_TOKEN_KEY)
        );
        assert!(pod.volumes.unwrap()[0].empty_dir.is_some());
        assert_eq!(c.volume_mounts.as_ref().unwrap()[0].mount_path, "/data");
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    }

    #[test]
    fn custom_image() {
        let pod = default_runner_pod(&spec(), Some("gitea/runner:1.0.8"), "r", "r");
        assert_eq!(pod.containers[0].image.as_deref(), Some("gitea/runner:1.0.8"));
        let pod = default_runner_pod(&spec(), Some("  "), "r", "r");
        assert_eq!(pod.containers[0].image.as_deref(), Some(DEFAULT_IMAGE));
    }
}
