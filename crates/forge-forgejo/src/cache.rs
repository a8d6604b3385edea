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

use forgerunner_core::cache_server::{CacheServer, mount_runner_config};
use forgerunner_core::crd::RunnerGroup;
use forgerunner_core::forge::SecretValue;
use forgerunner_core::runner_version::runner_image;
use forgerunner_http::cache_server::CacheFlavour;
use k8s_openapi::api::core::v1::PodSpec;

use crate::pod::{RUNNER_CONTAINER, RUNNER_IMAGE};

/// forgejo-runner's cache server and config: port 4000, the secret under `secret`, no `--host`
/// (jobs call their runner's proxy, not the server), and a server URL without trailing slash.
pub const CACHE: CacheFlavour = CacheFlavour {
    runner: "forgejo-runner",
    port: 4000,
    secret_key: "secret",
    host_flag: false,
    trailing_slash: false,
};

/// The cache server of `group`, reachable at `service_host`, sharing `secret` with the runners:
/// the runners' own image, whose MAC the runners' proxies sign with.
pub fn cache_server(group: &RunnerGroup, service_host: &str, secret: &SecretValue) -> CacheServer {
    let image = runner_image(&group.spec).unwrap_or_else(|| RUNNER_IMAGE.to_owned());
    CACHE.server(image, "forgejo-runner", service_host, secret)
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

    use forgerunner_core::cache_server::RUNNER_CONFIG_PATH;
    use forgerunner_core::forge::{ReconcileTrigger, RunnerCredentials};
    use forgerunner_core::metrics::Metrics;
    use forgerunner_http::cache_checks::{self, SECRET, named};
    use forgerunner_http::pod_checks;

    use super::*;
    use crate::forge::ForgejoForge;

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

    /// The runner's arguments in `pod`.
    fn runner_args(pod: &PodSpec) -> Vec<String> {
        named(pod, RUNNER_CONTAINER).args.clone().unwrap_or_default()
    }

    #[test]
    fn the_server_is_forgejo_runners_cache_server_on_its_own_port() {
        let s = cache_checks::default_server(&forge(), "forgejo", "forgejo-runner", 4000, "secret");
        assert_eq!(s.image, RUNNER_IMAGE, "the runners' image: same MAC");
        assert_eq!(s.args[5..], ["--port", "4000"], "no --host, no --secret");
        assert_eq!(s.url, "http://web-actions-cache.ci.svc.cluster.local:4000");
        let runner: serde_yaml::Value = serde_yaml::from_str(s.runner_config.expose()).expect("YAML");
        assert!(
            runner["server"].is_null() && runner["runner"].is_null(),
            "no connections (one-job refuses them beside its flags) and no labels"
        );
    }

    #[test]
    fn the_server_runs_the_runners_image() {
        let g = cache_checks::group("forgejo", Some("data.forgejo.org/forgejo/runner:12.9.0"), true);
        let s = cache_server(&g, "h", &SecretValue::new(SECRET));
        assert_eq!(s.image, "data.forgejo.org/forgejo/runner:12.9.0");
    }

    #[test]
    fn one_job_reads_the_cache_config_in_both_shapes_and_stays_restricted() {
        for p in pods(&cache_checks::group("forgejo", None, true)) {
            // register (11–14) needs no cache secret.
            cache_checks::config_mounted_into(&p, &[RUNNER_CONTAINER]);
            assert_eq!(&runner_args(&p)[..3], ["one-job", "--config", RUNNER_CONFIG_PATH]);
        }
    }

    #[test]
    fn the_docs_show_the_config_files_as_written() {
        cache_checks::docs_show_the_config_files(&CACHE);
    }

    #[test]
    fn a_group_without_a_cache_gets_no_config() {
        for p in pods(&cache_checks::group("forgejo", None, false)) {
            cache_checks::no_config(&p);
            assert!(!runner_args(&p).iter().any(|a| a == "--config"));
        }
    }
}
