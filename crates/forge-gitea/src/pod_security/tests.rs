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
    let g = pod_checks::group(
        serde_json::json!({
            "forge": "gitea", "maxRunners": 5,
            "gitea": {
                "url": "https://code.example.com", "scope": "repo", "repo": "alice/app",
                "credentials": "token", "labels": ["ubuntu-latest:docker://node:22", "linux:host"]
            }
        }),
        mode,
        template,
    );
    let forge = GiteaForge::new(Arc::new(Metrics::default()), ReconcileTrigger::channel().0);
    all_credentials()
        .iter()
        .map(|creds| pod_checks::built_pod(&forge, &g, creds))
        .collect()
}

#[test]
fn no_mode_passes_restricted_as_uid_1000() {
    pod_checks::no_mode_passes_restricted_as_uid_1000(&pods);
}

#[test]
fn dind_breaks_restricted_only_through_its_privileged_sidecar() {
    pod_checks::dind_breaks_restricted_only_through_its_privileged_sidecar(&pods);
}

#[test]
fn template_resources_reach_the_hardened_runner() {
    pod_checks::template_resources_reach_the_hardened_runner(&pods);
}
