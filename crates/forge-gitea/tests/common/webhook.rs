//! Sending deliveries to the backend and reading what they did (only the webhook suites use
//! these, so the others would call them dead).
#![allow(dead_code)]

use forgerunner_core::forge::GroupKey;
use forgerunner_core::metrics::{ForgeLabels, Metrics};
use http::{HeaderMap, HeaderValue};
use tokio::sync::mpsc::UnboundedReceiver;

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
