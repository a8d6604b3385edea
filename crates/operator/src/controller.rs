//! The seam to core's generic controller (`forgerunner_core::reconcile`).
//!
//! TEMPORARY: core's reconcile module is being built in parallel. Until it lands, this file
//! holds stand-ins with the agreed signatures so the binary builds and its runtime (lease,
//! HTTP, shutdown) can be tested; the stand-in controller only reports readiness and waits.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use forgerunner_core::ForgeKind;
use forgerunner_core::forge::{Forge, GroupKey};
use forgerunner_core::metrics::Metrics;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

/// The enabled forge backends, by kind (`None` = disabled).
pub trait ForgeSet: Send + Sync + 'static {
    /// The backend for `kind`, if enabled.
    fn get(&self, kind: ForgeKind) -> Option<&dyn Forge>;
}

/// Controller settings.
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    /// Namespaces to watch; empty = all.
    pub namespaces: Vec<String>,
    /// Pod name, for Events.
    pub instance: String,
    /// Reconciles run at once.
    pub concurrency: u16,
}

/// The controller stopped on an error.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// Placeholder variant.
    #[error("controller failed: {0}")]
    Failed(String),
}

/// Stand-in for `forgerunner_core::reconcile::run_controller`.
pub async fn run_controller(
    _client: kube::Client,
    _forges: Arc<dyn ForgeSet>,
    _metrics: Arc<Metrics>,
    mut triggers: UnboundedReceiver<GroupKey>,
    options: ControllerOptions,
    ready: Arc<AtomicBool>,
    shutdown: CancellationToken,
) -> Result<(), ControllerError> {
    tracing::debug!(
        namespaces = ?options.namespaces,
        instance = %options.instance,
        concurrency = options.concurrency,
        "stand-in controller started"
    );
    ready.store(true, Ordering::SeqCst);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            key = triggers.recv() => match key {
                Some(key) => tracing::debug!(group = %key, "reconcile requested"),
                None => { shutdown.cancelled().await; return Ok(()); }
            },
        }
    }
}
