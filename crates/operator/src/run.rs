//! `forgerunner run`: wires config, cluster, metrics, forges, HTTP server and leadership.

use std::sync::Arc;
use std::time::Duration;

use forgerunner_core::Fence;
use forgerunner_core::forge::ReconcileTrigger;
use forgerunner_core::metrics::Metrics;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::cluster::{self, StartupError};
use crate::config::Config;
use crate::controller::ForgeSet;
use crate::fence_layer::{FenceLayer, LeaseRef};
use crate::forges::EnabledForges;
use crate::forward::{ForwardError, Forwarder};
use crate::health::Readiness;
use crate::http::{self, HttpState};
use crate::leader::{Leadership, LeadershipError, StepDownBudget};
use crate::leader_route::{LeaderRoute, endpoint_url};
use crate::lease::{LeaderElector, LeaseSettings, holder_identity};
use crate::server::{self, ServerLimits};
use crate::signals;
use crate::webhook_route::{self, WebhookState};

/// Reconciles run at once (not configurable yet). A forge instance gets a quarter of them and a
/// namespace half (`forgerunner_core::reconcile::fair_share`): one forge instance still runs 16
/// passes at once, as the whole operator did before, and a forge that never answers leaves
/// three quarters to the others.
const CONTROLLER_CONCURRENCY: u16 = 64;

/// How long the HTTP server may take to finish in-flight requests at exit.
const HTTP_DRAIN: Duration = Duration::from_secs(2);

/// Connections the metrics listener holds at once: its clients are a scraper or two and the
/// kubelet's probes, so a small cap bounds what a flood of it can cost (16 KiB of head buffer
/// each) without ever turning away a genuine client.
const METRICS_MAX_CONNECTIONS: usize = 128;

/// Why `run` ended with an error; each maps to one stderr line and exit code 1.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Start-up checks failed.
    #[error(transparent)]
    Startup(#[from] StartupError),
    /// An HTTP address could not be bound.
    #[error("config key '{key}': cannot listen on {addr}: {reason}")]
    Bind {
        /// The config key naming the address (`httpAddr` or `metricsAddr`).
        key: &'static str,
        /// The address.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The controller stopped on an error.
    #[error("the controller stopped: {0}")]
    Controller(#[from] LeadershipError),
    /// The signal handlers could not be installed.
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    /// The client relaying webhooks to the leader could not be built.
    #[error(transparent)]
    Forwarder(#[from] ForwardError),
}

/// Runs the operator until SIGTERM/SIGINT (Ok) or a fatal error.
pub async fn run(config: Config) -> Result<(), RunError> {
    let shutdown = CancellationToken::new();
    signals::spawn(shutdown.clone()).map_err(RunError::Signals)?;
    run_until(config, shutdown).await
}

/// Binds the listener of config key `key`.
async fn bind(key: &'static str, addr: std::net::SocketAddr) -> Result<TcpListener, RunError> {
    TcpListener::bind(addr).await.map_err(|e| RunError::Bind {
        key,
        addr: addr.to_string(),
        reason: e.to_string(),
    })
}

/// Runs the operator until `shutdown` fires (Ok) or a fatal error; the seam tests drive.
pub async fn run_until(config: Config, shutdown: CancellationToken) -> Result<(), RunError> {
    let identity = holder_identity();
    let le = &config.leader_election;
    // Without an election this replica always leads; with one it writes only while its lease is
    // fresh, and the Lease itself stays writable so it can campaign.
    let (fence, lease) = if le.enabled {
        let lease = LeaseRef {
            namespace: le.lease_namespace.clone(),
            name: le.lease_name.clone(),
        };
        (Fence::closed(), Some(lease))
    } else {
        (Fence::open(), None)
    };
    let cluster = cluster::connect(&identity, &FenceLayer::new(fence.clone(), lease)).await?;
    cluster::check_crd(&cluster, &config.watch_namespaces).await?;
    tracing::info!(api_server = %cluster.url, forges = ?config.forges, "connected; RunnerGroup CRD present");

    let mut registry = Registry::default();
    let mut metrics = Metrics::register(&mut registry);
    metrics.job_identity_labels = config.metrics_job_labels;
    let metrics = Arc::new(metrics);
    let (trigger, triggers) = ReconcileTrigger::channel();
    let forges = Arc::new(EnabledForges::new(
        &config.forges,
        &metrics,
        &trigger,
        &fence,
        config.forge_hosts.addresses(),
        config.listing_cache_entries,
    ));
    let readiness = Arc::new(Readiness::new());
    tracing::info!(forges = ?forges.kinds(), "forge backends ready");

    let listener = bind("httpAddr", config.http_addr).await?;
    let metrics_listener = match config.metrics_addr {
        Some(addr) => Some(bind("metricsAddr", addr).await?),
        None => None,
    };
    let local_addr = listener.local_addr().ok();
    let http_addr = local_addr.map(|a| a.to_string()).unwrap_or_default();
    // Standbys relay deliveries here while we lead; without POD_IP they cannot (503).
    let pod_ip = std::env::var("POD_IP").ok();
    let endpoint = local_addr.and_then(|a| endpoint_url(pod_ip.as_deref(), a.port()));
    if endpoint.is_none() && config.leader_election.enabled {
        tracing::warn!(
            "POD_IP is not set to an IP address: standbys cannot forward webhook deliveries to this instance"
        );
    }
    let limits = ServerLimits::default();
    let route = LeaderRoute::default();
    let state = HttpState {
        last_metrics_len: Default::default(),
        readiness: readiness.clone(),
        registry: Arc::new(registry),
    };
    let webhooks = WebhookState::new(
        forges.clone() as Arc<dyn ForgeSet>,
        metrics.clone(),
        route.clone(),
        Forwarder::new(limits.forward_timeout)?,
        &limits,
    );
    let webhook_router = webhook_route::webhook_router(webhooks);
    let http_stop = CancellationToken::new();
    let mut servers = Vec::new();
    match metrics_listener {
        Some(metrics_listener) => {
            let router = http::probes(state.clone()).merge(webhook_router);
            servers.push(tokio::spawn(server::serve(
                listener,
                router,
                limits,
                http_stop.clone(),
            )));
            tracing::info!(listener = "http", addr = %http_addr, "serving webhooks, /healthz, /readyz");
            let metrics_addr = metrics_listener
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_default();
            let metrics_limits = ServerLimits {
                max_connections: METRICS_MAX_CONNECTIONS,
                ..limits
            };
            servers.push(tokio::spawn(server::serve(
                metrics_listener,
                http::router(state),
                metrics_limits,
                http_stop.clone(),
            )));
            tracing::info!(listener = "metrics", addr = %metrics_addr, "serving /healthz, /readyz, /metrics");
        }
        None => {
            let router = http::router(state).merge(webhook_router);
            servers.push(tokio::spawn(server::serve(
                listener,
                router,
                limits,
                http_stop.clone(),
            )));
            tracing::info!(listener = "http", addr = %http_addr, "serving /healthz, /readyz, /metrics");
        }
    }

    let elector = le.enabled.then(|| {
        LeaderElector::new(
            cluster.client.clone(),
            LeaseSettings {
                name: le.lease_name.clone(),
                namespace: le.lease_namespace.clone(),
                identity: identity.clone(),
                duration: le.lease_duration,
                renew_deadline: le.renew_deadline,
                retry_period: le.retry_period,
                advertise: endpoint,
            },
            fence.clone(),
        )
        .with_route(route.clone())
    });
    let leadership = Leadership {
        client: cluster.client.clone(),
        forges: forges.clone() as Arc<dyn ForgeSet>,
        metrics,
        namespaces: config.watch_namespaces.clone(),
        instance: identity,
        concurrency: CONTROLLER_CONCURRENCY,
        forge_hosts: config.forge_hosts.clone(),
        runner_hooks: config.runner_hooks.clone(),
        readiness,
        elector,
        fence,
        budget: StepDownBudget::default(),
        route,
    };
    let result = leadership.run(triggers, shutdown.clone()).await;
    // Background tasks (webhook caches) end with the process-wide token.
    shutdown.cancel();
    http_stop.cancel();
    // Both listeners drain at once, within one deadline.
    let drain_until = tokio::time::Instant::now() + HTTP_DRAIN;
    for mut server in servers {
        if tokio::time::timeout_at(drain_until, &mut server).await.is_err() {
            server.abort();
        }
    }
    tracing::info!("stopped");
    result.map_err(RunError::from)
}
