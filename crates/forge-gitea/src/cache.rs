//! Gitea's shared Actions cache (`spec.cache`; the objects are core's
//! [`forgerunner_core::cache_server`]).
//!
//! The server is Gitea Runner's own `cache-server` subcommand, run from the runners' image:
//! `gitea-runner cache-server --config <server config> --dir /cache --host <service> --port 8088`
//! (gitea-runner v1.0.8 `internal/app/cmd/cmd.go` and `cache-server.go`; the flags win over the
//! config's `cache.dir/host/port`). From v0.6.0 it refuses to start without
//! `cache.external_secret` in its config file, and it has no flag for it, so the secret is in
//! that file. It listens on every interface at `--port` and builds the download URLs it hands
//! to jobs from `--host` and that port (v1.0.8 `act/artifactcache/handler.go` `ExternalURL`):
//! job containers call the server directly, so `--host` is the Service's DNS name and the
//! Service's port is the server's.
//!
//! Each runner gets a config file with `cache.external_server` (the Service URL with its
//! trailing slash: v1.0.8 hands it to jobs verbatim as `ACTIONS_CACHE_URL`, and the config
//! example says it "should generally end with '/'") and the same `cache.external_secret`: the
//! runner registers each job's runtime token with the server before the job and revokes it
//! after (v1.0.8 `internal/app/run/runner.go` `registerCacheForTask`). Gitea Runner reads cache
//! settings from a config file only (no flag, no environment), so both `register` and `daemon`
//! get `--config` ([`apply_cache`]). A config without `runner.labels` keeps the `--labels`
//! given to `register`.
//!
//! act_runner before v0.6.0 knows no `external_secret` (the key is ignored): its server then
//! answers anyone who reaches it, and the NetworkPolicy alone keeps other pods out.

use forgerunner_core::cache_server::{CacheServer, mount_runner_config};
use forgerunner_core::crd::RunnerGroup;
use forgerunner_core::forge::SecretValue;
use forgerunner_core::runner_version::runner_image;
use forgerunner_http::cache_server::CacheFlavour;
use k8s_openapi::api::core::v1::PodSpec;

use crate::pod::{DEFAULT_IMAGE, REGISTER_CONTAINER, RUNNER_CONTAINER, runner_binary};

/// Gitea Runner's cache server and config: port 8088, the secret under `external_secret`, a
/// `--host` for the URLs jobs call, and a server URL ending in `/`.
pub const CACHE: CacheFlavour = CacheFlavour {
    runner: "gitea-runner",
    port: 8088,
    secret_key: "external_secret",
    host_flag: true,
    trailing_slash: true,
};

/// The cache server of `group`, reachable at `service_host`, sharing `secret` with the runners:
/// the runners' image and its binary (`act_runner` in images that old).
pub fn cache_server(group: &RunnerGroup, service_host: &str, secret: &SecretValue) -> CacheServer {
    let image = runner_image(&group.spec).unwrap_or_else(|| DEFAULT_IMAGE.to_owned());
    let binary = runner_binary(&image);
    CACHE.server(image, binary, service_host, secret)
}

/// Gives both steps of a runner pod of a group with a cache the runner config: mounted
/// read-only into `register` and `runner`, named by `--config` on `daemon` and in the register
/// script. Without `spec.cache` the pod is left alone.
pub fn apply_cache(group: &RunnerGroup, pod: &mut PodSpec) {
    let Some(path) = mount_runner_config(group, pod, &[REGISTER_CONTAINER, RUNNER_CONTAINER]) else {
        return;
    };
    for c in pod.containers.iter_mut().filter(|c| c.name == RUNNER_CONTAINER) {
        if let Some(command) = c.command.as_mut() {
            command.extend(["--config".to_owned(), path.to_owned()]);
        }
    }
    let registers = pod.init_containers.iter_mut().flatten();
    for c in registers.filter(|c| c.name == REGISTER_CONTAINER) {
        if let Some(script) = c.command.as_mut().and_then(|cmd| cmd.get_mut(2)) {
            script.push_str(&format!(" --config {path}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use forgerunner_core::cache_server::RUNNER_CONFIG_PATH;
    use forgerunner_core::forge::{ReconcileTrigger, RunnerCredentials};
    use forgerunner_core::metrics::Metrics;
    use forgerunner_http::cache_checks::{self, SECRET, named};
    use forgerunner_http::pod_checks;

    use super::*;
    use crate::forge::GiteaForge;

    fn forge() -> GiteaForge {
        GiteaForge::new(Arc::new(Metrics::default()), ReconcileTrigger::channel().0)
    }

    fn group(image: Option<&str>, cache: bool) -> RunnerGroup {
        cache_checks::group("gitea", image, cache)
    }

    fn pod(g: &RunnerGroup) -> PodSpec {
        let creds = RunnerCredentials {
            secret_data: BTreeMap::from([("registration_token".to_owned(), SecretValue::new("t"))]),
            env: BTreeMap::new(),
            annotations: BTreeMap::new(),
        };
        pod_checks::built_pod(&forge(), g, &creds)
    }

    /// The command of `name` in `pod`.
    fn command(pod: &PodSpec, name: &str) -> Vec<String> {
        named(pod, name).command.clone().expect("command")
    }

    #[test]
    fn the_server_is_gitea_runners_cache_server_on_its_own_port() {
        let s = cache_checks::default_server(&forge(), "gitea", "gitea-runner", 8088, "external_secret");
        assert_eq!(s.image, DEFAULT_IMAGE, "the runners' image");
        let host = "web-actions-cache.ci.svc.cluster.local";
        assert_eq!(
            s.args[5..],
            ["--host", host, "--port", "8088"],
            "jobs call the server"
        );
        assert_eq!(s.url, format!("http://{host}:8088/"));
        let runner: serde_yaml::Value = serde_yaml::from_str(s.runner_config.expose()).expect("YAML");
        assert!(
            runner["runner"]["labels"].is_null(),
            "register's --labels stay in force"
        );
    }

    #[test]
    fn the_server_runs_the_runners_image_and_binary() {
        let g = group(Some("gitea/act_runner:0.2.13"), true);
        let s = cache_server(&g, "h", &SecretValue::new(SECRET));
        assert_eq!(s.image, "gitea/act_runner:0.2.13");
        assert_eq!(s.command, ["act_runner"]);
        let g = group(Some("registry.example/gitea/runner:1.0.9"), true);
        assert_eq!(
            cache_server(&g, "h", &SecretValue::new(SECRET)).command,
            ["gitea-runner"]
        );
    }

    #[test]
    fn both_steps_read_the_cache_config_and_stay_restricted() {
        let p = pod(&group(None, true));
        cache_checks::config_mounted_into(&p, &[RUNNER_CONTAINER, REGISTER_CONTAINER]);
        assert_eq!(
            command(&p, RUNNER_CONTAINER),
            ["gitea-runner", "daemon", "--config", RUNNER_CONFIG_PATH]
        );
        let script = command(&p, REGISTER_CONTAINER)[2].clone();
        assert!(
            script.ends_with(&format!(" --config {RUNNER_CONFIG_PATH}")),
            "{script}"
        );
    }

    #[test]
    fn the_docs_show_the_config_files_as_written() {
        cache_checks::docs_show_the_config_files(&CACHE);
    }

    #[test]
    fn a_group_without_a_cache_gets_no_config() {
        let p = pod(&group(None, false));
        cache_checks::no_config(&p);
        assert_eq!(command(&p, RUNNER_CONTAINER), ["gitea-runner", "daemon"]);
        assert!(!command(&p, REGISTER_CONTAINER)[2].contains("--config"));
    }
}
