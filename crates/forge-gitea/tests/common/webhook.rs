//! Sending deliveries to the backend and reading what they did (only the webhook suites use
//! these, so the others would call them dead).
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use forgerunner_core::forge::{GroupKey, ReconcileTrigger};
use forgerunner_core::metrics::{ForgeLabels, Metrics};
use forgerunner_gitea::{ClientOptions, GiteaForge, GiteaOptions};
use http::{HeaderMap, HeaderValue};
use tokio::sync::mpsc::UnboundedReceiver;

/// A backend with quick client retries, its metrics and the groups it wakes.
pub fn forge() -> (GiteaForge, Arc<Metrics>, UnboundedReceiver<GroupKey>) {
    let (trigger, rx) = ReconcileTrigger::channel();
    let metrics = Arc::new(Metrics::default());
    let opts = GiteaOptions {
        client: ClientOptions {
            request_timeout: Duration::from_secs(5),
            backoff: Duration::from_millis(10),
            ..ClientOptions::default()
        },
        ..GiteaOptions::default()
    };
    (
        GiteaForge::with_options(metrics.clone(), trigger, opts),
        metrics,
        rx,
    )
}

/// Signature checks made so far.
pub fn checks(metrics: &Metrics) -> u64 {
    metrics
        .webhook_signature_checks
        .get_or_create(&ForgeLabels { forge: "gitea" })
        .get()
}

/// The headers Gitea sends with a `workflow_job` delivery signed `sig`.
pub fn headers(sig: &str, delivery: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("x-gitea-event", HeaderValue::from_static("workflow_job"));
    h.insert("x-gitea-signature", sig.parse().expect("header"));
    h.insert("x-gitea-delivery", delivery.parse().expect("header"));
    h
}

/// The groups woken since the last call, by name.
pub fn woken(rx: &mut UnboundedReceiver<GroupKey>) -> Vec<String> {
    let mut out = Vec::new();
    while let Ok(k) = rx.try_recv() {
        out.push(k.name);
    }
    out
}
