//! A stateful fake Kubernetes API server on loopback, for kube-rs clients and the real kubectl.
//!
//! Start one per test with [`FakeApiServer::start`]; point clients at [`FakeApiServer::url`],
//! [`FakeApiServer::client`] or a kubeconfig from [`FakeApiServer::write_kubeconfig`]. The
//! server keeps objects in memory with a global resourceVersion, serves watches from a bounded
//! history, garbage-collects through ownerReferences, validates custom resources against their
//! CRD schema, and offers fault injection and a request log. It refuses what a real server
//! refuses where the operator could trip: label selectors, names, labels and annotations
//! (`label_parse`, `naming`, `objectmeta`), Event fields (`event_validation`), pods whose
//! ServiceAccount is missing (`sa_admission`), Job spec changes (`job_update`), non-structural
//! or too costly CRDs (`crd_structural`, `cel_cost`) and oversized bodies. See `docs/testing.md`.

mod applied_fields;
mod builtin;
mod cel;
mod cel_cost;
mod cel_path;
#[cfg(test)]
mod cel_tests;
mod crd;
mod crd_structural;
mod discovery;
mod event_alias;
mod event_validation;
mod faults;
mod field;
mod gc;
mod job_update;
mod label_parse;
mod naming;
mod objectmeta;
mod openapi;
mod ops;
mod partial;
mod patch;
mod pod_security;
pub mod protobuf;
mod registry;
mod sa_admission;
mod schema;
mod selector;
mod server;
mod shared;
mod status;
mod store;
mod table;
mod verbs;
mod watch;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use faults::{Fault, FaultAction, FaultTarget, RequestLog, RequestRecord, Verb};
pub use shared::ServerConfig;
pub use store::StoreConfig;

use shared::{Shared, lock};
use store::Store;

/// Selects rustls' ring provider for the process. Both ring and aws-lc-rs are compiled into
/// the workspace, so rustls cannot pick one itself and kube's client would panic; idempotent.
pub fn install_crypto_provider() {
    // Err means a provider is already installed, which is all we need.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Why the fake could not start.
#[derive(Debug, thiserror::Error)]
pub enum FakeApiError {
    /// Binding or serving the listener failed.
    #[error("fake API server I/O: {0}")]
    Io(#[from] std::io::Error),
    /// Building a kube client for the fake failed.
    #[error("kube client for the fake API server: {0}")]
    Client(String),
}

/// A running fake API server; dropping it does not stop it, call [`FakeApiServer::shutdown`].
pub struct FakeApiServer {
    shared: Arc<Shared>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl FakeApiServer {
    /// Starts a server with default settings on 127.0.0.1 and a free port.
    pub async fn start() -> Result<FakeApiServer, FakeApiError> {
        FakeApiServer::start_with(ServerConfig::default()).await
    }

    /// Starts a server with the given settings on 127.0.0.1 and a free port.
    pub async fn start_with(config: ServerConfig) -> Result<FakeApiServer, FakeApiError> {
        FakeApiServer::bind(
            "127.0.0.1:0"
                .parse()
                .map_err(|_| std::io::Error::other("bad address"))?,
            config,
        )
        .await
    }

    /// Starts a server on a chosen address.
    pub async fn bind(addr: SocketAddr, config: ServerConfig) -> Result<FakeApiServer, FakeApiError> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::new(config.store.clone())),
            log: Mutex::new(RequestLog::default()),
            faults: Mutex::new(faults::Faults::default()),
            config,
            shutdown: CancellationToken::new(),
            drop_all: Mutex::new(CancellationToken::new()),
            addr,
        });
        let app = axum::Router::new()
            .fallback(server::handle)
            .with_state(shared.clone());
        let token = shared.shutdown.clone();
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(token.cancelled_owned());
            if let Err(e) = serve.await {
                tracing::warn!(error = %e, "fake API server stopped with an error");
            }
        });
        Ok(FakeApiServer {
            shared,
            task: Mutex::new(Some(task)),
        })
    }

    /// The server's base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// A kubeconfig whose current context points at this server (namespace `default`).
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {url}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\n\
             current-context: fake\nusers:\n- name: fake\n  user: {{}}\npreferences: {{}}\n",
            url = self.url()
        )
    }

    /// Writes [`FakeApiServer::kubeconfig_yaml`] to `path`.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), FakeApiError> {
        std::fs::write(path, self.kubeconfig_yaml())?;
        Ok(())
    }

    /// A kube client for this server, sending `User-Agent: forgerunner-testkit`.
    pub fn client(&self) -> Result<kube::Client, FakeApiError> {
        self.client_as("forgerunner-testkit")
    }

    /// A kube client sending the given User-Agent, so the request log can tell callers apart
    /// (kube-rs sends none by default).
    pub fn client_as(&self, user_agent: &str) -> Result<kube::Client, FakeApiError> {
        kube::Client::try_from(self.kube_config(user_agent)?).map_err(|e| FakeApiError::Client(e.to_string()))
    }

    /// A kube client configuration for this server (default namespace `default`).
    pub fn kube_config(&self, user_agent: &str) -> Result<kube::Config, FakeApiError> {
        install_crypto_provider();
        let uri = self
            .url()
            .parse::<http::Uri>()
            .map_err(|e| FakeApiError::Client(e.to_string()))?;
        let mut config = kube::Config::new(uri);
        config.default_namespace = "default".into();
        let ua = http::HeaderValue::from_str(user_agent).map_err(|e| FakeApiError::Client(e.to_string()))?;
        config.headers.push((http::header::USER_AGENT, ua));
        Ok(config)
    }

    /// A snapshot of the request log.
    pub fn requests(&self) -> RequestLog {
        lock(&self.shared.log).clone()
    }

    /// Empties the request log.
    pub fn reset_requests(&self) {
        *lock(&self.shared.log) = RequestLog::default();
    }

    /// Adds a fault; it affects matching requests until it runs out or is cleared.
    pub fn inject(&self, fault: Fault) {
        lock(&self.shared.faults).add(fault);
    }

    /// Removes every fault.
    pub fn clear_faults(&self) {
        lock(&self.shared.faults).clear();
    }

    /// Closes every open watch now (a server-initiated disconnect).
    pub fn drop_watches(&self) {
        let mut token = lock(&self.shared.drop_all);
        token.cancel();
        *token = CancellationToken::new();
    }

    /// Forgets all watch history: a watch from any earlier resourceVersion gets 410 Gone.
    pub fn compact(&self) {
        lock(&self.shared.store).compact_all();
    }

    /// The latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.store).current_rv()
    }

    /// Stops serving and closes open watches.
    pub async fn shutdown(&self) {
        self.shared.shutdown.cancel();
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(task) = task {
            // A panicked server task has nothing left to clean up.
            let _ = task.await;
        }
    }
}
