//! Start-up checks against the cluster: build a client, make sure the API server answers and
//! the RunnerGroup CRD is installed. Each failure becomes one line a person can act on.

use std::error::Error as StdError;
use std::time::Duration;

use forgerunner_core::RunnerGroup;
use http::Request;
use kube::api::ListParams;
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder};
use kube::{Api, Client};
use tower::buffer::BufferLayer;
use tower::retry::RetryLayer;

use crate::fence_layer::FenceLayer;

/// Requests queued for the client stack at once (kube's own client buffer has the same bound).
const BUFFER: usize = 1024;

/// How long start-up waits for the API server before giving up.
const REACH_TIMEOUT: Duration = Duration::from_secs(20);

/// Prefix of the User-Agent sent with every API request, so audit logs (and the RBAC coverage
/// test) can tell the operator's calls apart; kube sends no User-Agent of its own.
pub const USER_AGENT: &str = concat!("forgerunner/", env!("CARGO_PKG_VERSION"));

/// The full User-Agent: [`USER_AGENT`] plus the replica's identity, so an audit log (or a test)
/// can tell which of several replicas made a call, e.g. whether a deposed leader still writes.
pub fn user_agent(identity: &str) -> String {
    let clean: String = identity
        .chars()
        .filter(|c| c.is_ascii_graphic() && !matches!(c, '(' | ')'))
        .take(63)
        .collect();
    format!("{USER_AGENT} ({clean})")
}

/// Why the operator cannot start against this cluster.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// Neither a kubeconfig nor an in-cluster service account was usable.
    #[error("cannot load a Kubernetes client configuration (kubeconfig or in-cluster): {0}")]
    NoConfig(String),
    /// The client could not be built from the configuration (TLS material, proxy, …).
    #[error("cannot build a Kubernetes client for {url}: {reason}")]
    Client {
        /// API server URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The API server did not answer.
    #[error("cannot reach the Kubernetes API server at {url}: {reason}")]
    Unreachable {
        /// API server URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The CRD is not installed.
    #[error(
        "the RunnerGroup CRD (runnergroups.forgerunner.dev) is not installed; install it with \
         `kubectl apply --server-side -f charts/forgerunner/crds/` or \
         `forgerunner crd | kubectl apply --server-side -f -`"
    )]
    CrdMissing,
    /// The service account may not list RunnerGroups.
    #[error("not allowed to list RunnerGroups{scope}: {reason} (check the operator's RBAC)")]
    Forbidden {
        /// ` in namespace x`, or empty for all namespaces.
        scope: String,
        /// The API server's message.
        reason: String,
    },
    /// Listing RunnerGroups failed for another reason.
    #[error("cannot list RunnerGroups at {url}: {reason}")]
    Api {
        /// API server URL.
        url: String,
        /// Why.
        reason: String,
    },
}

/// A connected client plus the URL it talks to (for messages).
pub struct Cluster {
    /// The client.
    pub client: Client,
    /// API server URL, for messages.
    pub url: String,
}

/// Builds a client from the kubeconfig or the in-cluster environment and checks that the API
/// server answers. Every write goes through `fence` (see [`crate::fence_layer`]).
pub async fn connect(identity: &str, fence: &FenceLayer) -> Result<Cluster, StartupError> {
    let mut config = kube::Config::infer()
        .await
        .map_err(|e| StartupError::NoConfig(error_chain(&e)))?;
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_str(&user_agent(identity))
            .unwrap_or_else(|_| http::HeaderValue::from_static(USER_AGENT)),
    ));
    let url = config.cluster_url.to_string().trim_end_matches('/').to_owned();
    // kube's own retry layer sits below any layer added here, so a retried write would skip the
    // fence; retry above the fence instead, with the same policy.
    config.default_retry = false;
    let builder = ClientBuilder::try_from(config).map_err(|e| StartupError::Client {
        url: url.clone(),
        reason: error_chain(&e),
    })?;
    let client = builder
        // Retries clone the service below them; the buffer makes the boxed stack cloneable.
        .with_layer(&BufferLayer::<Request<Body>>::new(BUFFER))
        .with_layer(fence)
        .with_layer(&RetryLayer::new(RetryPolicy::server_retry()))
        .build();
    match tokio::time::timeout(REACH_TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(_)) => Ok(Cluster { client, url }),
        Ok(Err(e)) => Err(StartupError::Unreachable {
            url,
            reason: error_chain(&e),
        }),
        Err(_) => Err(StartupError::Unreachable {
            url,
            reason: format!("no answer within {}s", REACH_TIMEOUT.as_secs()),
        }),
    }
}

/// Lists at most one RunnerGroup where the operator will watch, to learn whether the CRD is
/// installed and whether RBAC lets us read it.
pub async fn check_crd(cluster: &Cluster, namespaces: &[String]) -> Result<(), StartupError> {
    let (api, scope): (Api<RunnerGroup>, String) = match namespaces.first() {
        None => (Api::all(cluster.client.clone()), String::new()),
        Some(ns) => (
            Api::namespaced(cluster.client.clone(), ns),
            format!(" in namespace {ns}"),
        ),
    };
    match tokio::time::timeout(REACH_TIMEOUT, api.list_metadata(&ListParams::default().limit(1))).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(kube::Error::Api(s))) if s.code == 404 => Err(StartupError::CrdMissing),
        Ok(Err(kube::Error::Api(s))) if s.code == 403 => Err(StartupError::Forbidden {
            scope,
            reason: one_line(&s.message),
        }),
        Ok(Err(e)) => Err(StartupError::Api {
            url: cluster.url.clone(),
            reason: error_chain(&e),
        }),
        Err(_) => Err(StartupError::Api {
            url: cluster.url.clone(),
            reason: format!("no answer within {}s", REACH_TIMEOUT.as_secs()),
        }),
    }
}

/// An error and its sources on one line, repeated messages dropped.
pub fn error_chain(err: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = current {
        let text = one_line(&e.to_string());
        // Wrappers often repeat their source's text; keep each message once.
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        current = e.source();
    }
    parts.join(": ")
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer failed")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("inner\nbroke")]
    struct Inner;

    #[test]
    fn error_chain_is_one_line_with_sources() {
        assert_eq!(error_chain(&Outer(Inner)), "outer failed: inner broke");
    }

    #[test]
    fn user_agent_names_the_replica_and_stays_a_valid_header() {
        let ua = user_agent("forgerunner-7f9c (x)\n");
        assert_eq!(ua, format!("{USER_AGENT} (forgerunner-7f9cx)"));
        assert!(http::HeaderValue::from_str(&ua).is_ok());
    }

    #[test]
    fn crd_hint_names_both_install_paths() {
        let text = StartupError::CrdMissing.to_string();
        assert!(text.contains("kubectl apply --server-side -f charts/forgerunner/crds/"));
        assert!(text.contains("forgerunner crd | kubectl apply --server-side -f -"));
    }
}
