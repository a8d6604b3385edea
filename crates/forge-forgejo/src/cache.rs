//! Forgejo's shared Actions cache (`spec.cache`; the objects are core's
//! [`forgerunner_core::cache_server`]).
//!
//! The server is forgejo-runner's own `cache-server` subcommand, run from the runners' image
//! (`Dockerfile`: `/bin/forgejo-runner`, user 1000): `forgejo-runner cache-server --config
//! <server config> --dir /cache --port 4000` (forgejo-runner 12.8 `internal/app/cmd/cmd.go`,
//! `cache-server.go`: the flags win over the config's `cache.dir/host/port/secret`). Its secret
//! is the config's `cache.secret`, never the `--secret` flag: an argument would put it in the pod
//! spec. Without a secret the server logs "no cache secret was specified, exiting." and exits 0.
//!
//! Each runner gets a config file with `cache.external_server` (the Service URL, no trailing
//! slash: the runner strips one, `internal/app/run/runner.go` `SetupCache`) and the same
//! `cache.secret`, which the runner requires with an external server ("A cache secret must be
//! specified to use an external cache server, cache will be disabled"). The runner keeps its
//! cache proxy: jobs call the proxy in their own runner pod, which signs each request with the
//! secret (HMAC over repository, run, timestamp and write isolation key,
//! `act/artifactcache/mac.go`) and forwards it, so only runner pods talk to the server and no
//! job sees the secret or the server. The MAC's input changed between releases, hence the
//! runners' own image for the server. forgejo-runner reads cache settings from a config file
//! only, so `one-job` gets `--config` ([`apply_cache`]); `register` (Forgejo 11–14) needs none.

use forgerunner_core::cache_server::{CACHE_DIR, CacheServer, SERVER_CONFIG_PATH, mount_runner_config};
use forgerunner_core::crd::RunnerGroup;
use forgerunner_core::forge::SecretValue;
use forgerunner_core::runner_version::runner_image;
use k8s_openapi::api::core::v1::PodSpec;

use crate::pod::{RUNNER_CONTAINER, RUNNER_IMAGE};

/// The port Forgejo's cache server listens on, and the cache Service's port.
pub const CACHE_PORT: i32 = 4000;

/// The cache server of `group`, reachable at `service_host`, sharing `secret` with the runners.
pub fn cache_server(group: &RunnerGroup, service_host: &str, secret: &SecretValue) -> CacheServer {
    let image = runner_image(&group.spec).unwrap_or_else(|| RUNNER_IMAGE.to_owned());
    let url = format!("http://{service_host}:{CACHE_PORT}");
    let args = [
        "cache-server",
        "--config",
        SERVER_CONFIG_PATH,
        "--dir",
        CACHE_DIR,
        "--port",
        &CACHE_PORT.to_string(),
    ]
    .map(str::to_owned)
    .to_vec();
    CacheServer {
        image,
        command: vec!["forgejo-runner".to_owned()],
        args,
        port: CACHE_PORT,
        server_config: server_config(secret),
        runner_config: runner_config(&url, secret),
        url,
    }
}

/// The server's config file: the secret every request's MAC is checked against.
pub fn server_config(secret: &SecretValue) -> SecretValue {
    SecretValue::new(format!(
        "# Written by forgerunner for spec.cache: forgejo-runner cache-server's config.\n\
         cache:\n  secret: \"{}\"\n",
        secret.expose()
    ))
}

/// A runner's config file: where the cache server is, and the secret its proxy signs with.
pub fn runner_config(url: &str, secret: &SecretValue) -> SecretValue {
    SecretValue::new(format!(
        "# Written by forgerunner for spec.cache: the runner's config.\n\
         cache:\n  enabled: true\n  external_server: \"{url}\"\n  secret: \"{}\"\n",
        secret.expose()
    ))
}

/// Gives the runner of a group with a cache its config: mounted read-only into the `runner`
/// container and named by `one-job --config`. Without `spec.cache` the pod is left alone.
pub fn apply_cache(group: &RunnerGroup, pod: &mut PodSpec) {
    let Some(path) = mount_runner_config(group, pod, &[RUNNER_CONTAINER]) else {
        return;
    };
    if let Some(runner) = pod.containers.iter_mut().find(|c| c.name == RUNNER_CONTAINER)
        && let Some(args) = runner.args.as_mut()
        && args.first().is_some_and(|a| a == "one-job")
    {
        args.splice(1..1, ["--config".to_owned(), path.to_owned()]);
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

    use super::*;
    use crate::forge::ForgejoForge;
    use crate::pod::REGISTER_CONTAINER;

    const SECRET: &str = "s3cr3t-s3cr3t-s3cr3t";

    fn group(image: Option<&str>, cache: bool) -> RunnerGroup {
        let mut spec = serde_json::json!({
            "forge": "forgejo", "maxRunners": 5,
            "forgejo": {"url": "https://code.example.com", "scope": "repo", "repo": "alice/app",
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

    fn forge() -> ForgejoForge {
        ForgejoForge::new(Arc::new(Metrics::default()), ReconcileTrigger::channel().0)
    }

    /// Both pod shapes: v15 one-job, and 11–14 register + one-job.
    fn pods(g: &RunnerGroup) -> Vec<PodSpec> {
        let token = |key: &str| BTreeMap::from([(key.to_owned(), SecretValue::new("t"))]);
        [
            RunnerCredentials {
                secret_data: token("token"),
                env: BTreeMap::from([("FORGEJO_RUNNER_UUID".to_owned(), "u".to_owned())]),
                annotations: BTreeMap::new(),
            },
            RunnerCredentials {
                secret_data: token("registration-token"),
                env: BTreeMap::new(),
                annotations: BTreeMap::new(),
            },
        ]
        .iter()
        .map(|creds| pod_checks::built_pod(&forge(), g, creds))
        .collect()
    }

    #[test]
    fn the_server_is_forgejo_runners_cache_server_on_its_own_port() {
        let g = group(None, true);
        let host = service_host(&g);
        let s = forge()
            .cache_server(&g, &host, &SecretValue::new(SECRET))
            .expect("Forgejo runs a cache server");
        assert_eq!(s.image, RUNNER_IMAGE, "the runners' image: same MAC");
        assert_eq!(s.command, ["forgejo-runner"]);
        assert_eq!(
            s.args,
            [
                "cache-server",
                "--config",
                "/etc/forgerunner-cache/server.yaml",
                "--dir",
                "/cache",
                "--port",
                "4000"
            ]
        );
        assert!(!s.args.iter().any(|a| a == "--secret" || a.contains(SECRET)));
        assert_eq!(s.port, 4000);
        assert_eq!(s.url, "http://web-actions-cache.ci.svc.cluster.local:4000");
        let server: serde_yaml::Value = serde_yaml::from_str(s.server_config.expose()).expect("YAML");
        assert_eq!(server["cache"]["secret"].as_str(), Some(SECRET));
        let runner: serde_yaml::Value = serde_yaml::from_str(s.runner_config.expose()).expect("YAML");
        assert_eq!(
            runner["cache"]["external_server"].as_str(),
            Some("http://web-actions-cache.ci.svc.cluster.local:4000")
        );
        assert_eq!(runner["cache"]["secret"].as_str(), Some(SECRET));
        assert_eq!(runner["cache"]["enabled"].as_bool(), Some(true));
        assert!(
            runner["server"].is_null() && runner["runner"].is_null(),
            "no connections (one-job refuses them beside its flags) and no labels"
        );
    }

    #[test]
    fn the_server_runs_the_runners_image() {
        let g = group(Some("data.forgejo.org/forgejo/runner:12.9.0"), true);
        let s = cache_server(&g, "h", &SecretValue::new(SECRET));
        assert_eq!(s.image, "data.forgejo.org/forgejo/runner:12.9.0");
    }

    #[test]
    fn one_job_reads_the_cache_config_in_both_shapes_and_stays_restricted() {
        for p in pods(&group(None, true)) {
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
            let runner = p
                .containers
                .iter()
                .find(|c| c.name == RUNNER_CONTAINER)
                .expect("runner");
            assert!(
                runner
                    .volume_mounts
                    .iter()
                    .flatten()
                    .any(|m| m.name == RUNNER_CONFIG_VOLUME
                        && m.mount_path == CONFIG_DIR
                        && m.read_only == Some(true))
            );
            let args = runner.args.clone().expect("args");
            assert_eq!(&args[..3], ["one-job", "--config", RUNNER_CONFIG_PATH]);
            for register in p
                .init_containers
                .iter()
                .flatten()
                .filter(|c| c.name == REGISTER_CONTAINER)
            {
                assert!(
                    !register
                        .volume_mounts
                        .iter()
                        .flatten()
                        .any(|m| m.name == RUNNER_CONFIG_VOLUME),
                    "register needs no cache secret"
                );
            }
            assert_eq!(restricted_violations(&p), Vec::new());
        }
    }

    /// docs/caches.md shows the config files exactly as written (for its example group `linux`
    /// in `ci`, the secret as a placeholder).
    #[test]
    fn the_docs_show_the_config_files_as_written() {
        let docs = include_str!("../../../docs/caches.md");
        let secret = SecretValue::new("<64 hex characters>");
        let url = "http://linux-actions-cache.ci.svc.cluster.local:4000";
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
        for p in pods(&group(None, false)) {
            assert!(!p.volumes.iter().flatten().any(|v| v.name == RUNNER_CONFIG_VOLUME));
            let runner = p
                .containers
                .iter()
                .find(|c| c.name == RUNNER_CONTAINER)
                .expect("runner");
            assert!(!runner.args.iter().flatten().any(|a| a == "--config"));
        }
    }
}
