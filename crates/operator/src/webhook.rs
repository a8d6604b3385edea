//! `POST /webhooks/gitea`: the `workflow_job` fast path.
//!
//! A delivery is trusted only if its signature verifies with the `secret` key of a Secret that
//! some Gitea RunnerGroup names in `spec.gitea.webhookSecret` (known from a RunnerGroup
//! reflector kept here). Verification comes first, so unauthenticated callers learn nothing
//! (401 for every unverified request). Then the Gitea backend picks the groups the job concerns
//! (scope and labels); only those whose own secret verified the delivery get the event, which the
//! backend accounts on top of their cached listing (no extra listing) before waking them for a
//! queued job. Bodies and secrets are never logged.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use forgerunner_core::{ForgeKind, GroupKey, RunnerGroup};
use forgerunner_gitea::GiteaForge;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Largest body accepted; `workflow_job` payloads are a few KiB.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// How long a read webhook secret is reused before it is read again.
const SECRET_TTL: Duration = Duration::from_secs(10);

/// Key of the webhook Secret that holds the HMAC secret.
const SECRET_KEY: &str = "secret";

/// A Secret by namespace and name.
type SecretRef = (String, String);

/// Where a group's webhook secret is and which groups use it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    secret: SecretRef,
}

/// Distinct webhook Secrets named by Gitea groups (pure, for tests).
fn candidate_secrets<'a>(groups: impl IntoIterator<Item = &'a RunnerGroup>) -> Vec<Candidate> {
    let set: BTreeSet<Candidate> = groups
        .into_iter()
        .filter(|g| g.spec.forge == ForgeKind::Gitea)
        .filter_map(|g| {
            let ns = g.metadata.namespace.clone()?;
            let name = g.spec.gitea.as_ref()?.webhook_secret.clone()?;
            (!name.is_empty()).then_some(Candidate { secret: (ns, name) })
        })
        .collect();
    set.into_iter().collect()
}

/// The signature header value: `X-Gitea-Signature`, else `X-Hub-Signature-256`.
fn signature(headers: &HeaderMap) -> Option<&str> {
    ["x-gitea-signature", "x-hub-signature-256"].iter().find_map(|h| {
        headers
            .get(*h)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.trim().is_empty())
    })
}

/// The event name: `X-Gitea-Event`, else `X-GitHub-Event`.
fn event_name(headers: &HeaderMap) -> Option<&str> {
    ["x-gitea-event", "x-github-event"]
        .iter()
        .find_map(|h| headers.get(*h).and_then(|v| v.to_str().ok()))
}

/// Short-lived cache of webhook secret bytes, so a burst of deliveries does not become a burst
/// of Secret reads.
#[derive(Default)]
struct SecretCache(Mutex<HashMap<SecretRef, CachedSecret>>);

/// When a secret was read, and its bytes (`None`: missing or unreadable).
type CachedSecret = (Instant, Option<Vec<u8>>);

impl SecretCache {
    fn get(&self, key: &SecretRef) -> Option<Option<Vec<u8>>> {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(key)
            .filter(|(at, _)| at.elapsed() < SECRET_TTL)
            .map(|(_, v)| v.clone())
    }

    fn put(&self, key: SecretRef, value: Option<Vec<u8>>) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|_, (at, _)| at.elapsed() < SECRET_TTL);
        map.insert(key, (Instant::now(), value));
    }
}

/// State of the webhook route.
pub struct GiteaWebhooks {
    client: Client,
    stores: Vec<Store<RunnerGroup>>,
    forges: Arc<crate::forges::EnabledForges>,
    secrets: SecretCache,
}

impl GiteaWebhooks {
    /// Starts RunnerGroup reflectors for `namespaces` (empty = all) that run until `shutdown`.
    pub fn start(
        client: Client,
        namespaces: &[String],
        forges: Arc<crate::forges::EnabledForges>,
        shutdown: CancellationToken,
    ) -> Arc<GiteaWebhooks> {
        let apis: Vec<Api<RunnerGroup>> = if namespaces.is_empty() {
            vec![Api::all(client.clone())]
        } else {
            namespaces
                .iter()
                .map(|ns| Api::namespaced(client.clone(), ns))
                .collect()
        };
        let stores = apis
            .into_iter()
            .map(|api| {
                let (reader, writer) = reflector::store();
                let stream =
                    reflector::reflector(writer, watcher(api, watcher::Config::default()).default_backoff())
                        .applied_objects();
                let stop = shutdown.clone();
                tokio::spawn(async move {
                    let drive = stream.for_each(|event| async move {
                        if let Err(e) = event {
                            tracing::debug!(error = %e, "RunnerGroup watch for webhooks interrupted");
                        }
                    });
                    tokio::select! {
                        _ = drive => {}
                        _ = stop.cancelled() => {}
                    }
                });
                reader
            })
            .collect();
        Arc::new(GiteaWebhooks {
            client,
            stores,
            forges,
            secrets: SecretCache::default(),
        })
    }

    fn gitea(&self) -> Option<&GiteaForge> {
        self.forges.gitea()
    }

    /// Reads the `secret` key of a webhook Secret; `None` when missing or unreadable.
    async fn secret_bytes(&self, key: &SecretRef) -> Option<Vec<u8>> {
        if let Some(cached) = self.secrets.get(key) {
            return cached;
        }
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &key.0);
        let value = match api.get_opt(&key.1).await {
            Ok(Some(secret)) => secret
                .data
                .as_ref()
                .and_then(|d| d.get(SECRET_KEY))
                .map(|b| b.0.clone())
                .or_else(|| {
                    secret
                        .string_data
                        .as_ref()
                        .and_then(|d| d.get(SECRET_KEY))
                        .map(|s| s.clone().into_bytes())
                }),
            Ok(None) => {
                tracing::warn!(namespace = %key.0, secret = %key.1, "webhook Secret not found");
                None
            }
            Err(e) => {
                tracing::warn!(namespace = %key.0, secret = %key.1, error = %e, "cannot read the webhook Secret");
                None
            }
        };
        self.secrets.put(key.clone(), value.clone());
        value
    }

    /// The Secrets (of any Gitea group) whose key verifies `body` under `signature`.
    async fn verified_secrets(&self, body: &[u8], signature: &str) -> BTreeSet<SecretRef> {
        let groups: Vec<Arc<RunnerGroup>> = self.stores.iter().flat_map(|s| s.state()).collect();
        let mut verified = BTreeSet::new();
        for candidate in candidate_secrets(groups.iter().map(|g| g.as_ref())) {
            let Some(secret) = self.secret_bytes(&candidate.secret).await else {
                continue;
            };
            if forgerunner_gitea::verify_signature(&secret, body, signature) {
                verified.insert(candidate.secret);
            }
        }
        verified
    }
}

/// The route, with its body limit.
pub fn router(hooks: Arc<GiteaWebhooks>) -> Router {
    Router::new()
        .route("/webhooks/gitea", post(receive))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(hooks)
}

async fn receive(State(hooks): State<Arc<GiteaWebhooks>>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(sig) = signature(&headers) else {
        return unauthorized();
    };
    let verified = hooks.verified_secrets(&body, sig).await;
    if verified.is_empty() {
        tracing::debug!("webhook delivery did not verify with any group's secret");
        return unauthorized();
    }
    if event_name(&headers) != Some(forgerunner_gitea::webhook::WORKFLOW_JOB_EVENT) {
        // Verified but not for us (e.g. a test delivery): accept and ignore.
        return StatusCode::NO_CONTENT.into_response();
    }
    let event = match forgerunner_gitea::parse_workflow_job(&body) {
        Ok(event) => event,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    };
    let Some(gitea) = hooks.gitea() else {
        return StatusCode::NO_CONTENT.into_response();
    };
    let keys: Vec<GroupKey> = gitea
        .webhook_targets(&event)
        .into_iter()
        .filter(|t| {
            t.webhook_secret
                .as_ref()
                .is_some_and(|s| verified.contains(&(t.key.namespace.clone(), s.clone())))
        })
        .map(|t| t.key)
        .collect();
    tracing::debug!(
        job_id = event.job_id,
        groups = keys.len(),
        "workflow_job webhook accepted"
    );
    gitea.wake(&event, &keys);
    (
        StatusCode::ACCEPTED,
        format!("{{\"triggered\":{}}}\n", keys.len()),
    )
        .into_response()
}

fn unauthorized() -> Response {
    (StatusCode::UNAUTHORIZED, "signature missing or not valid\n").into_response()
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;
    use forgerunner_core::RunnerGroupSpec;
    use forgerunner_core::crd::{GiteaScope, GiteaSpec};

    use super::*;

    fn group(ns: &str, name: &str, forge: ForgeKind, secret: Option<&str>) -> RunnerGroup {
        let mut g = RunnerGroup::new(
            name,
            RunnerGroupSpec {
                forge,
                github: None,
                gitea: Some(GiteaSpec {
                    url: "https://gitea.example".into(),
                    scope: GiteaScope::Global,
                    org: None,
                    user: None,
                    repo: None,
                    credentials: "creds".into(),
                    labels: vec!["linux".into()],
                    poll_interval_seconds: None,
                    webhook_secret: secret.map(str::to_owned),
                }),
                min_runners: 0,
                max_runners: 1,
                image: None,
                template: None,
                ttl_seconds_after_finished: None,
                active_deadline_seconds: None,
                idle_timeout_seconds: None,
            },
        );
        g.metadata.namespace = Some(ns.into());
        g
    }

    #[test]
    fn candidates_are_distinct_gitea_secrets() {
        let groups = [
            group("a", "g1", ForgeKind::Gitea, Some("hook")),
            group("a", "g2", ForgeKind::Gitea, Some("hook")),
            group("b", "g3", ForgeKind::Gitea, Some("hook")),
            group("a", "g4", ForgeKind::Gitea, None),
            group("a", "g5", ForgeKind::Gitea, Some("")),
            group("a", "g6", ForgeKind::Github, Some("other")),
        ];
        let got: Vec<SecretRef> = candidate_secrets(groups.iter())
            .into_iter()
            .map(|c| c.secret)
            .collect();
        assert_eq!(
            got,
            vec![("a".into(), "hook".into()), ("b".into(), "hook".into())]
        );
    }

    #[test]
    fn signature_header_falls_back_to_hub_form() {
        let mut h = HeaderMap::new();
        assert_eq!(signature(&h), None);
        h.insert("x-hub-signature-256", HeaderValue::from_static("sha256=ab"));
        assert_eq!(signature(&h), Some("sha256=ab"));
        h.insert("x-gitea-signature", HeaderValue::from_static("cd"));
        assert_eq!(signature(&h), Some("cd"));
        h.insert("x-gitea-signature", HeaderValue::from_static("  "));
        assert_eq!(signature(&h), Some("sha256=ab"), "a blank header does not count");
    }
}
