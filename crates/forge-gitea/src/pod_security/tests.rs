//! The Gitea runner pod as the reconciler builds it (the forge's default pod, then
//! `build_runner_job`), in every container mode Gitea supports, checked against the restricted
//! Pod Security profile; the checks are the ones every Gitea-family runner must pass
//! ([`forgerunner_http::pod_checks`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use forgerunner_core::crd::ContainerModeType;
use forgerunner_core::forge::{ReconcileTrigger, RunnerCredentials, SecretValue};
use forgerunner_core::metrics::Metrics;
use forgerunner_http::pod_checks;
use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec};

use crate::forge::GiteaForge;

/// What Gitea hands a runner: the registration token.
fn all_credentials() -> Vec<RunnerCredentials> {
    vec![RunnerCredentials {
        secret_data: BTreeMap::from([("registration_token".to_owned(), SecretValue::new("t"))]),
        env: BTreeMap::new(),
        annotations: BTreeMap::new(),
    }]
}

/// The runner pods the reconciler would create for a group in `mode` with `template`.
fn pods(mode: Option<ContainerModeType>, template: Option<PodTemplateSpec>) -> Vec<PodSpec> {
    let spec = serde_json::json!({
        "forge": "gitea", "maxRunners": 5,
        "gitea": {
            "url": "https://code.example.com", "scope": "repo", "repo": "alice/app",
            "credentials": "token", "labels": ["ubuntu-latest:docker://node:22", "linux:host"]
        }
    });
    let forge = GiteaForge::new(Arc::new(Metrics::default()), ReconcileTrigger::channel().0);
    pod_checks::built_pods(&forge, spec, &all_credentials(), mode, template)
}

/// Without a mode restricted as uid 1000; `dind` breaks it only through its privileged
/// sidecar; template resources reach the hardened runner.
#[test]
fn pods_pass_the_gitea_family_checks() {
    pod_checks::all(&pods);
}
