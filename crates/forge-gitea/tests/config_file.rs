//! `CONFIG_FILE` in the runner container's environment, as `docs/gitea.md` tells users to set
//! it, reaches the runner binary: the pod the operator builds (default pod + `spec.template`,
//! merged by core) played by the testkit's act_runner.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use forgerunner_core::crd::{GiteaScope, GiteaSpec};
use forgerunner_core::forge::{ReconcileTrigger, RunnerCredentials, SecretValue};
use forgerunner_core::metrics::Metrics;
use forgerunner_core::runner_job::{RunnerJobInput, build_runner_job};
use forgerunner_gitea::GiteaForge;
use forgerunner_http::pod_checks::default_pod;
use forgerunner_testkit::gitea::{
    Conclusion, FakeConfig, FakeScope, GiteaFakeHandle, JobState, RunnerOptions, runner_behaviour,
};
use forgerunner_testkit::sim::behaviour::{PodInfo, PodScratch};
use forgerunner_testkit::sim::env::{FieldContext, SourceLookup, expand, resolve};
use k8s_openapi::api::core::v1::{Container, Pod};

const CONFIG_PATH: &str = "/etc/gitea-runner/config.yaml";
/// The only part of a config the testkit's runner acts on: `runner.labels`, which replaces
/// the `--labels` of `register` (act_runner `internal/app/cmd/register.go`
/// `registerNoInteractive`). Registered labels therefore show whether the file was read.
const CONFIG: &str = "runner:\n  labels:\n    - gpu:host\n";

struct Sources {
    token: String,
}

impl SourceLookup for Sources {
    fn secret(&self, _ns: &str, name: &str) -> Option<BTreeMap<String, String>> {
        (name == "ci-abcde").then(|| BTreeMap::from([("registration_token".to_string(), self.token.clone())]))
    }

    fn config_map(&self, _ns: &str, name: &str) -> Option<BTreeMap<String, String>> {
        (name == "runner-config").then(|| BTreeMap::from([("config.yaml".to_string(), CONFIG.to_string())]))
    }
}

/// A group whose template sets `CONFIG_FILE` on the `runner` container (literally, or from a
/// ConfigMap key) and mounts the config ConfigMap there, as the docs describe.
fn group_with_config(url: &str, from_config_map: bool) -> forgerunner_core::forge::GroupContext {
    let gitea = GiteaSpec {
        url: url.to_string(),
        scope: GiteaScope::Global,
        org: None,
        user: None,
        repo: None,
        credentials: "creds".into(),
        labels: vec!["linux:host".into()],
        poll_interval_seconds: None,
        webhook_secret: None,
        ca_bundle_config_map: None,
        proxy_url: None,
    };
    let mut c = common::group_context("ci", gitea, "unused");
    let env = if from_config_map {
        serde_json::json!({"name": "CONFIG_FILE", "valueFrom": {"configMapKeyRef": {"name": "paths", "key": "config"}}})
    } else {
        serde_json::json!({"name": "CONFIG_FILE", "value": CONFIG_PATH})
    };
    c.group.spec.template = Some(
        serde_json::from_value(serde_json::json!({"spec": {
            "containers": [{"name": "runner", "env": [env],
                "volumeMounts": [{"name": "config", "mountPath": "/etc/gitea-runner", "readOnly": true}]}],
            "volumes": [{"name": "config", "configMap": {"name": "runner-config"}}],
        }}))
        .unwrap(),
    );
    c.group.metadata.uid = Some("uid-ci".into());
    c
}

/// What the kubelet would hand the container: resolved env and files, `$(VAR)` expanded.
fn pod_info(
    pod: &Pod,
    c: &Container,
    init: bool,
    lookup: &dyn SourceLookup,
    scratch: &PodScratch,
) -> PodInfo {
    let resolved = resolve(pod, c, lookup, &FieldContext::default()).unwrap();
    let expand_all = |v: &Option<Vec<String>>| -> Vec<String> {
        v.iter().flatten().map(|s| expand(s, &resolved.env)).collect()
    };
    PodInfo {
        namespace: "ns".into(),
        name: "ci-abcde".into(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        image: c.image.clone().unwrap_or_default(),
        command: expand_all(&c.command),
        args: expand_all(&c.args),
        env: resolved.env,
        files: resolved.files,
        cancel: Default::default(),
        container: c.name.clone(),
        init,
        scratch: scratch.with_mounts(vec![("/data".into(), "data".into())]),
    }
}

/// `CONFIG_FILE` means nothing to the runner binary: only the image's entrypoint script turns
/// it into `--config` (act_runner `scripts/run.sh`), and the operator's pod replaces that
/// entrypoint with its own commands. So the operator passes `--config` itself, to `register`
/// and to `daemon` (the flag is a persistent flag of the root command,
/// `internal/app/cmd/cmd.go`), and mounts the file in `register` too.
#[tokio::test]
async fn config_file_from_the_template_reaches_register_and_daemon() {
    for from_config_map in [false, true] {
        let fake = GiteaFakeHandle::start(FakeConfig::default()).await.unwrap();
        let token = fake.registration_token(&FakeScope::Global);
        let (trigger, _rx) = ReconcileTrigger::channel();
        let forge = GiteaForge::new(Arc::new(Metrics::default()), trigger);
        let ctx = group_with_config(&fake.url(), from_config_map);
        let creds = RunnerCredentials {
            secret_data: BTreeMap::from([("registration_token".to_string(), SecretValue::new(&token))]),
            env: forgerunner_gitea::pod::runner_env(ctx.group.spec.gitea.as_ref().unwrap(), "ci-abcde"),
            annotations: BTreeMap::new(),
        };
        let default_pod = default_pod(&forge, &ctx.group, "ci-abcde", "ci-abcde", &creds, None);
        let job = build_runner_job(RunnerJobInput {
            group: &ctx.group,
            runner_name: "ci-abcde",
            default_pod,
            credentials: &creds,
        })
        .unwrap();
        let spec = job.spec.unwrap().template.spec.unwrap();
        let pod = Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: Some(spec.clone()),
            status: None,
        };

        struct WithPaths<'a>(&'a Sources);
        impl SourceLookup for WithPaths<'_> {
            fn secret(&self, ns: &str, name: &str) -> Option<BTreeMap<String, String>> {
                self.0.secret(ns, name)
            }
            fn config_map(&self, ns: &str, name: &str) -> Option<BTreeMap<String, String>> {
                if name == "paths" {
                    return Some(BTreeMap::from([("config".to_string(), CONFIG_PATH.to_string())]));
                }
                self.0.config_map(ns, name)
            }
        }
        let sources = Sources { token: token.clone() };
        let lookup = WithPaths(&sources);
        let scratch = PodScratch::default();
        let register = spec
            .init_containers
            .iter()
            .flatten()
            .find(|c| c.name == "register")
            .unwrap();
        let runner = spec.containers.iter().find(|c| c.name == "runner").unwrap();
        let b = runner_behaviour(fake.clone(), RunnerOptions::default());
        let code = b.run(pod_info(&pod, register, true, &lookup, &scratch)).await;
        assert_eq!(code, 0, "register (config map: {from_config_map})");
        let labels: Vec<Vec<String>> = fake.runners().into_iter().map(|r| r.labels).collect();
        assert_eq!(
            labels,
            [["gpu"]],
            "register read the config (config map: {from_config_map})"
        );
        let gpu = fake.queue_job("o/r", &["gpu"]);
        let code = tokio::time::timeout(
            Duration::from_secs(30),
            b.run(pod_info(&pod, runner, false, &lookup, &scratch)),
        )
        .await
        .unwrap();
        assert_eq!(code, 0, "daemon");
        let job = fake.job(gpu).unwrap();
        assert_eq!(job.state, JobState::Done(Conclusion::Success));
        assert_eq!(job.runner_name, "ci-abcde");
    }
}
