//! `workflow_job` webhook delivery with Gitea's headers and signature.

use std::sync::Arc;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::control::{Delivery, Shared, lock};
use super::model::{FakeJob, random_hex};

fn hex_hmac(secret: &[u8], body: &[u8]) -> String {
    let mut out = String::new();
    if let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) {
        mac.update(body);
        for b in mac.finalize().into_bytes() {
            out.push_str(&format!("{b:02x}"));
        }
    }
    out
}

/// Posts the payload for `job`'s current state to the configured URL (no-op if none).
pub(crate) fn deliver(shared: Arc<Shared>, job: FakeJob) {
    let Some(cfg) = lock(&shared.webhook).clone() else {
        return;
    };
    let owner_is_org = lock(&shared.model).orgs.contains_key(&job.owner);
    let payload = super::json::workflow_job_payload(&shared.base_url, &job, owner_is_org, shared.dialect());
    let body = payload.to_string().into_bytes();
    let sig = hex_hmac(cfg.secret.as_bytes(), &body);
    let action = job.state.api_status().to_string();
    let http = shared.http.clone();
    let deliveries = shared.deliveries.clone();
    let delivery_id = format!(
        "{}-{}-{}-{}-{}",
        random_hex(8),
        random_hex(4),
        random_hex(4),
        random_hex(4),
        random_hex(12)
    );
    tokio::spawn(async move {
        let sent = http
            .post(&cfg.url)
            .header("content-type", "application/json")
            .header("X-Gitea-Event", "workflow_job")
            .header("X-Gitea-Event-Type", "workflow_job")
            .header("X-GitHub-Event", "workflow_job")
            .header("X-Gogs-Event", "workflow_job")
            .header("X-Gitea-Delivery", &delivery_id)
            .header("X-GitHub-Delivery", &delivery_id)
            .header("X-Gitea-Signature", &sig)
            .header("X-Hub-Signature-256", format!("sha256={sig}"))
            .body(body)
            .send()
            .await;
        let status = sent.map(|r| r.status().as_u16()).unwrap_or(0);
        lock(&deliveries).push(Delivery {
            action,
            job_id: job.id,
            status,
        });
    });
}
