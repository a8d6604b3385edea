//! The default GitHub runner pod: the official runner image running `run.sh` with its JIT
//! config taken from the runner Secret.

use forgerunner_core::RunnerGroup;
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
    // Container mode and the restricted Pod Security settings.
    crate::container_mode::finish_pod(&mut pod, group);
    pod
}

/// `workingDir` of the template's `runner` container, sent as the JIT `workFolder`.
pub fn work_folder(group: &RunnerGroup) -> String {
    group
        .spec
        .template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .and_then(|s| s.containers.iter().find(|c| c.name == RUNNER_CONTAINER))
        .and_then(|c| c.working_dir.clone())
        .unwrap_or_default()
}
