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

use forgerunner_core::cache_server::{CACHE_DIR, CacheServer, SERVER_CONFIG_PATH, mount_runner_config};
use forgerunner_core::crd::RunnerGroup;
use forgerunner_core::forge::SecretValue;
use forgerunner_core::runner_version::runner_image;
use k8s_openapi::api::core::v1::PodSpec;

use crate::pod::{DEFAULT_IMAGE, REGISTER_CONTAINER, RUNNER_CONTAINER, runner_binary};

/// The port Gitea's cache server listens on, and the cache Service's port.
pub const CACHE_PORT: i32 = 8088;

/// The cache server of `group`, reachable at `service_host`, sharing `secret` with the runners.
pub fn cache_server(group: &RunnerGroup, service_host: &str, secret: &SecretValue) -> CacheServer {
    let image = runner_image(&group.spec).unwrap_or_else(|| DEFAULT_IMAGE.to_owned());
    let binary = runner_binary(&image);
    let url = format!("http://{service_host}:{CACHE_PORT}/");
    let args = [
        "cache-server",
        "--config",
        SERVER_CONFIG_PATH,
        "--dir",
        CACHE_DIR,
        "--host",
        service_host,
        "--port",
        &CACHE_PORT.to_string(),
    ]
    .map(str::to_owned)
    .to_vec();
    CacheServer {
        image,
        command: vec![binary.to_owned()],
        args,
        port: CACHE_PORT,
        server_config: server_config(secret),
        runner_config: runner_config(&url, secret),
        url,
    }
}

/// The server's config file: the shared secret the runners present on `/_internal/register`.
pub fn server_config(secret: &SecretValue) -> SecretValue {
    SecretValue::new(format!(
        "# Written by forgerunner for spec.cache: gitea-runner cache-server's config.\n\
         cache:\n  external_secret: \"{}\"\n",
        secret.expose()
    ))
}

/// A runner's config file: where the cache server is, and the shared secret.
pub fn runner_config(url: &str, secret: &SecretValue) -> SecretValue {
    SecretValue::new(format!(
        "# Written by forgerunner for spec.cache: the runner's config.\n\
         cache:\n  enabled: true\n  external_server: \"{url}\"\n  external_secret: \"{}\"\n",
        secret.expose()
    ))
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

    use forgerunner_core::cache_server::{
        CONFIG_DIR, RUNNER_CONFIG_KEY, RUNNER_CONFIG_PATH, RUNNER_CONFIG_VOLUME, service_host,
    };
    use forgerunner_core::forge::{Forge, ReconcileTrigger, RunnerCredentials};
    use forgerunner_core::metrics::Metrics;
    use forgerunner_core::runner_pod::restricted_violations;
    use forgerunner_http::pod_checks;
    use k8s_openapi::api::core::v1::Container;

    use super::*;
    use crate::forge::GiteaForge;

    const SECRET: &str = "s3cr3t-s3cr3t-s3cr3t";

    fn group(image: Option<&str>, cache: bool) -> RunnerGroup {
        let mut spec = serde_json::json!({
            "forge": "gitea", "maxRunners": 5,
            "gitea": {"url": "https://code.example.com", "scope": "repo", "repo": "alice/app",
                "credentials": "token", "labels": ["linux:host"]}
        });
        if cache {
            spec["cache"] = serde_json::json!({"size": "10Gi"});
        }
        if let Some(image) = image {
            spec["image"] = serde_json::json!(image);
        }
        let mut g = pod_checks::group(spec, None, None);
        g.metadata.name = Some("web".into());
        g
    }

    fn forge() -> GiteaForge {
        GiteaForge::new(Arc::new(Metrics::default()), ReconcileTrigger::channel().0)
    }

    fn pod(g: &RunnerGroup) -> PodSpec {
        let creds = RunnerCredentials {
            secret_data: BTreeMap::from([("registration_token".to_owned(), SecretValue::new("t"))]),
            env: BTreeMap::new(),
            annotations: BTreeMap::new(),
        };
        pod_checks::built_pod(&forge(), g, &creds)
    }

    fn named<'a>(pod: &'a PodSpec, name: &str) -> &'a Container {
        pod.containers
            .iter()
            .chain(pod.init_containers.iter().flatten())
            .find(|c| c.name == name)
            .expect("container")
    }

    #[test]
    fn the_server_is_gitea_runners_cache_server_on_its_own_port() {
        let g = group(None, true);
        let host = service_host(&g);
        let s = forge()
            .cache_server(&g, &host, &SecretValue::new(SECRET))
            .expect("Gitea runs a cache server");
        assert_eq!(s.image, DEFAULT_IMAGE, "the runners' image");
        assert_eq!(s.command, ["gitea-runner"]);
        assert_eq!(
            s.args,
            [
                "cache-server",
                "--config",
                "/etc/forgerunner-cache/server.yaml",
                "--dir",
                "/cache",
                "--host",
                "web-actions-cache.ci.svc.cluster.local",
                "--port",
                "8088"
            ]
        );
        assert_eq!(s.port, 8088);
        assert_eq!(s.url, "http://web-actions-cache.ci.svc.cluster.local:8088/");
        assert!(
            !s.args.join(" ").contains(SECRET),
            "the secret is never an argument"
        );
        let server: serde_yaml::Value = serde_yaml::from_str(s.server_config.expose()).expect("YAML");
        assert_eq!(server["cache"]["external_secret"].as_str(), Some(SECRET));
        let runner: serde_yaml::Value = serde_yaml::from_str(s.runner_config.expose()).expect("YAML");
        assert_eq!(
            runner["cache"]["external_server"].as_str(),
            Some("http://web-actions-cache.ci.svc.cluster.local:8088/")
        );
        assert_eq!(runner["cache"]["external_secret"].as_str(), Some(SECRET));
        assert_eq!(runner["cache"]["enabled"].as_bool(), Some(true));
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
        let volume = p
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == RUNNER_CONFIG_VOLUME)
            .expect("cache config volume");
        let secret = volume.secret.as_ref().expect("secret volume");
        assert_eq!(secret.secret_name.as_deref(), Some("web-actions-cache"));
        let keys: Vec<&str> = secret.items.iter().flatten().map(|i| i.key.as_str()).collect();
        assert_eq!(keys, [RUNNER_CONFIG_KEY]);
        for name in [REGISTER_CONTAINER, RUNNER_CONTAINER] {
            let c = named(&p, name);
            assert!(
                c.volume_mounts
                    .iter()
                    .flatten()
                    .any(|m| m.name == RUNNER_CONFIG_VOLUME
                        && m.mount_path == CONFIG_DIR
                        && m.read_only == Some(true)),
                "{name} mounts the config"
            );
        }
        let daemon = named(&p, RUNNER_CONTAINER).command.clone().expect("command");
        assert_eq!(daemon, ["gitea-runner", "daemon", "--config", RUNNER_CONFIG_PATH]);
        let script = named(&p, REGISTER_CONTAINER).command.clone().expect("command")[2].clone();
        assert!(
            script.ends_with(&format!(" --config {RUNNER_CONFIG_PATH}")),
            "{script}"
        );
        assert_eq!(restricted_violations(&p), Vec::new());
    }

    /// docs/caches.md shows the config files exactly as written (for its example group `linux`
    /// in `ci`, the secret as a placeholder).
    #[test]
    fn the_docs_show_the_config_files_as_written() {
        let docs = include_str!("../../../docs/caches.md");
        let secret = SecretValue::new("<64 hex characters>");
        let url = "http://linux-actions-cache.ci.svc.cluster.local:8088/";
        for file in [server_config(&secret), runner_config(url, &secret)] {
            assert!(
                docs.contains(file.expose()),
                "docs/caches.md lacks:\n{}",
                file.expose()
            );
        }
    }

    #[test]
    fn a_group_without_a_cache_gets_no_config() {
        let p = pod(&group(None, false));
        assert!(!p.volumes.iter().flatten().any(|v| v.name == RUNNER_CONFIG_VOLUME));
        let daemon = named(&p, RUNNER_CONTAINER).command.clone().expect("command");
        assert_eq!(daemon, ["gitea-runner", "daemon"]);
        assert!(!named(&p, REGISTER_CONTAINER).command.clone().expect("command")[2].contains("--config"));
    }
}
