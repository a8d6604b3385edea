//! The Forgejo runner pod as the reconciler builds it (the forge's default pod, then
//! `build_runner_job`), in every container mode Forgejo supports, checked against the restricted
//! Pod Security profile; the checks are the ones every Gitea-family runner must pass
//! ([`forgerunner_http::pod_checks`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use forgerunner_core::crd::ContainerModeType;
use forgerunner_core::forge::{ReconcileTrigger, RunnerCredentials, SecretValue};
use forgerunner_core::metrics::Metrics;
use forgerunner_http::pod_checks;
use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec};

use crate::forge::ForgejoForge;

/// Both pod shapes: a v15 runner's own token (one-job) and a registration token (11–14).
fn all_credentials() -> Vec<RunnerCredentials> {
    let token = |key: &str| BTreeMap::from([(key.to_owned(), SecretValue::new("t"))]);
    vec![
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
}

/// The runner pods the reconciler would create for a group in `mode` with `template`.
fn pods(mode: Option<ContainerModeType>, template: Option<PodTemplateSpec>) -> Vec<PodSpec> {
    // A docker label only with its daemon: validation refuses one without (forgejo-runner's
    // `configCheck` would exit at start).
    let labels: &[&str] = if mode == Some(ContainerModeType::Dind) {
        &["ubuntu-latest:docker://node:22", "linux:host"]
    } else {
        &["linux:host"]
    };
    let spec = serde_json::json!({
        "forge": "forgejo", "maxRunners": 5,
        "forgejo": {
            "url": "https://code.example.com", "scope": "repo", "repo": "alice/app",
            "credentials": "token", "labels": labels
        }
    });
    let forge = ForgejoForge::new(Arc::new(Metrics::default()), ReconcileTrigger::channel().0);
    pod_checks::built_pods(&forge, spec, &all_credentials(), mode, template)
}

/// Both credential shapes: without a mode restricted as uid 1000; `dind` breaks it only
/// through its privileged sidecar; template resources reach the hardened runner.
#[test]
fn pods_pass_the_gitea_family_checks() {
    pod_checks::all(&pods);
}
