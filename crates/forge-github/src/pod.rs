//! The default GitHub runner pod: the official runner image running `run.sh` with its JIT
//! config taken from the runner Secret.
//!
//! Image: [`DEFAULT_RUNNER_IMAGE`] stays on `latest` on purpose. Scale-set runners are created
//! with `disableUpdate`, so a runner never updates itself, and GitHub stops accepting runner
//! versions some time after newer ones ship; an old image then exits with
//! [`RUNNER_EXIT_OUTDATED`] and the group turns `Degraded`. A fixed tag would reach that point
//! on a date nobody chose. Groups that want a fixed version set `spec.image` and update it when
//! the group reports outdated runners.
//!
//! `spec.github.proxyUrl` reaches the runner as ARC's proxy settings do.
//! `spec.github.caBundleConfigMap` does not go ARC's `githubServerTLS` way (`RUNNER_UPDATE_CA_CERTS`,
//! which needs `sudo` and so cannot work in the hardened runner container): an init container
//! writes the image's roots plus the CA into a bundle that `SSL_CERT_FILE`, `GIT_SSL_CAINFO`
//! and `NODE_EXTRA_CA_CERTS` point at (`forgerunner_core::runner_pod::trust`).

use forgerunner_core::RunnerGroup;
use forgerunner_core::runner_pod::trust::{RunnerTrust, TrustStyle};
use k8s_openapi::api::core::v1::{Container, EnvVar, EnvVarSource, PodSpec, SecretKeySelector};

/// Image used when `spec.image` is empty.
pub const DEFAULT_RUNNER_IMAGE: &str = "ghcr.io/actions/actions-runner:latest";
/// Command of the runner container.
pub const RUNNER_COMMAND: &str = "/home/runner/run.sh";
/// Name of the runner container (the template's container of this name merges into it).
pub const RUNNER_CONTAINER: &str = "runner";
/// Secret key holding the JIT config.
pub const JIT_CONFIG_KEY: &str = "jitconfig";
/// Env var the runner reads its JIT config from (equivalent to `run.sh --jitconfig`).
pub const JIT_CONFIG_ENV: &str = "ACTIONS_RUNNER_INPUT_JITCONFIG";
/// Exit code of a runner whose version GitHub no longer accepts (with
/// `ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE=1`, set in the default pod). The
/// reconciler should treat a runner container that exits with it as "outdated": not a job
/// failure, not retried with the same image; surface it on the group (e.g. a Degraded
/// condition asking for a newer `spec.image`).
pub const RUNNER_EXIT_OUTDATED: i32 = 7;

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..EnvVar::default()
    }
}

/// The default pod for one runner; the JIT config is referenced from `secret_name`.
pub fn default_runner_pod(group: &RunnerGroup, secret_name: &str) -> PodSpec {
    let image = group
        .spec
        .image
        .as_deref()
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .unwrap_or(DEFAULT_RUNNER_IMAGE)
        .to_string();
    let jit = EnvVar {
        name: JIT_CONFIG_ENV.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret_name.into(),
                key: JIT_CONFIG_KEY.into(),
                optional: Some(false),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    };
    let container = Container {
        name: RUNNER_CONTAINER.into(),
        image: Some(image),
        command: Some(vec![RUNNER_COMMAND.into()]),
        env: Some(vec![
            jit,
            env("ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE", "1"),
            env(
                "GITHUB_ACTIONS_RUNNER_EXTRA_USER_AGENT",
                concat!("forgerunner/", env!("CARGO_PKG_VERSION")),
            ),
        ]),
        ..Container::default()
    };
    let mut pod = PodSpec {
        containers: vec![container],
        restart_policy: Some("Never".into()),
        ..PodSpec::default()
    };
    if let Some(gh) = group.spec.github.as_ref() {
        RunnerTrust::new(gh.ca_bundle_config_map.as_deref(), gh.proxy_url.as_deref()).apply(
            &mut pod,
            &[RUNNER_CONTAINER],
            TrustStyle::Node,
            &group.spec,
        );
    }
    // Container mode and the restricted Pod Security settings.
    crate::container_mode::finish_pod(&mut pod, group);
    pod
}

/// `workingDir` of the template's `runner` container, sent as the JIT `workFolder`.
pub fn work_folder(group: &RunnerGroup) -> String {
    // A template that does not decode is refused by validation before any pod is built.
    group
        .spec
        .pod_template()
        .ok()
        .flatten()
        .and_then(|t| t.spec)
        .and_then(|s| s.containers.into_iter().find(|c| c.name == RUNNER_CONTAINER))
        .and_then(|c| c.working_dir)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use forgerunner_core::runner_pod::trust::{CA_BUNDLE_FILE, CA_BUNDLE_INIT, EXTRA_CA_FILE, TRUST_DIR};

    fn group(extra: serde_json::Value) -> RunnerGroup {
        let mut gh = serde_json::json!({"configUrl": "https://github.com/acme", "credentials": "c"});
        if let (Some(o), Some(e)) = (gh.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        let spec = serde_json::from_value(serde_json::json!({
            "forge": "github", "maxRunners": 1, "github": gh,
        }))
        .expect("spec");
        RunnerGroup::new("g", spec)
    }

    fn env(pod: &PodSpec, name: &str) -> Option<String> {
        pod.containers[0]
            .env
            .iter()
            .flatten()
            .find(|e| e.name == name)
            .and_then(|e| e.value.clone())
    }

    /// actions/runner's `run.sh` and `run-helper.sh` pass exit code 7 on only when the variable
    /// is the string `1` (`== "1"`; `Program.cs` alone would also take `true`): any other value
    /// turns an outdated runner's exit into 0, a runner that looks as if it finished.
    #[test]
    fn the_runner_reports_a_deprecated_version_with_its_own_exit_code() {
        let pod = default_runner_pod(&group(serde_json::json!({})), "s");
        assert_eq!(
            env(&pod, "ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE").as_deref(),
            Some("1")
        );
        assert_eq!(RUNNER_EXIT_OUTDATED, 7, "ReturnCode.RunnerVersionDeprecated");
    }

    #[test]
    fn ca_bundle_and_proxy_only_when_set() {
        let plain = default_runner_pod(&group(serde_json::json!({})), "s");
        assert_eq!(plain.containers[0].image.as_deref(), Some(DEFAULT_RUNNER_IMAGE));
        for n in [
            "NODE_EXTRA_CA_CERTS",
            "SSL_CERT_FILE",
            "GIT_SSL_CAINFO",
            "RUNNER_UPDATE_CA_CERTS",
            "https_proxy",
            "http_proxy",
            "no_proxy",
        ] {
            assert_eq!(env(&plain, n), None, "{n}");
        }
        assert!(plain.volumes.is_none() && plain.containers[0].volume_mounts.is_none());
        assert_eq!(plain.init_containers, None);

        let pod = default_runner_pod(
            &group(serde_json::json!({"caBundleConfigMap": "corp-ca", "proxyUrl": "http://proxy:3128"})),
            "s",
        );
        assert_eq!(env(&pod, "NODE_EXTRA_CA_CERTS").as_deref(), Some(EXTRA_CA_FILE));
        assert_eq!(env(&pod, "SSL_CERT_FILE").as_deref(), Some(CA_BUNDLE_FILE));
        assert_eq!(env(&pod, "GIT_SSL_CAINFO").as_deref(), Some(CA_BUNDLE_FILE));
        assert_eq!(env(&pod, "RUNNER_UPDATE_CA_CERTS"), None, "needs sudo");
        assert_eq!(env(&pod, "https_proxy").as_deref(), Some("http://proxy:3128"));
        assert_eq!(env(&pod, "http_proxy").as_deref(), Some("http://proxy:3128"));
        assert!(env(&pod, "no_proxy").is_some_and(|n| n.contains(".svc")));
        let m = &pod.containers[0].volume_mounts.as_ref().expect("mounts")[0];
        assert_eq!((m.mount_path.as_str(), m.read_only), (TRUST_DIR, Some(true)));
        let init = &pod.init_containers.as_ref().expect("init")[0];
        assert_eq!(init.name, CA_BUNDLE_INIT);
        assert_eq!(init.image.as_deref(), Some(DEFAULT_RUNNER_IMAGE));
        let cm = pod
            .volumes
            .iter()
            .flatten()
            .find_map(|v| v.config_map.as_ref())
            .expect("configMap volume");
        assert_eq!(cm.name, "corp-ca");
        assert!(
            init.volume_mounts
                .iter()
                .flatten()
                .any(|m| m.name == "forgerunner-ca"),
            "only the init container reads the ConfigMap"
        );
        let trust = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == m.name)
            .expect("trust volume");
        assert!(trust.empty_dir.is_some());
    }
}
