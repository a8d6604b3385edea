//! The webhook fast path of `GiteaForge`: verifying a delivery, which groups an event concerns,
//! accounting the event until the next listing, and waking the groups. The operator only
//! routes HTTP here ([`GiteaForge::receive_webhook`]).
//!
//! A delivery never causes a listing. It is recorded against the cached listing of each
//! concerned scope ([`announced::Announced`]) and the groups reconcile at once on that listing
//! plus the announced jobs. So a scope costs one jobs listing per poll interval however many
//! deliveries arrive, and a new job still gets its runner within one reconcile.

mod announced;
mod candidates;
mod instance;

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use forgerunner_core::forge::{GroupKey, SecretValue, WebhookReply};
use forgerunner_core::metrics::ForgeLabels;
use forgerunner_core::webhook::{DeliveryKey, delivery_id};
use http::{HeaderMap, StatusCode};
use sha2::{Digest, Sha256};

use self::announced::{Announced, GroupView, MAX_ANNOUNCED_TOTAL_BYTES, trim_total};
use self::candidates::{Offer, pick};
pub(crate) use self::instance::on_instance;
use crate::forge::{GiteaForge, ListingKey};
use crate::scope::Scope;
use crate::types::{JobStatus, WorkflowJob};
use crate::webhook::{
    DeliveryOrigin, WORKFLOW_JOB_EVENT, WorkflowJobEvent, delivery_origin, parse_workflow_job,
    verify_signature,
};

/// Headers naming a delivery, in the order they are read: Gitea's, and Forgejo's (a Forgejo
/// server sends both names, `services/webhook/deliver.go`).
const DELIVERY_ID_HEADERS: [&str; 2] = ["x-gitea-delivery", "x-forgejo-delivery"];

/// Most distinct webhook secrets tried on one delivery, so an unauthenticated request costs at
/// most this many HMACs whatever the number of groups. They are dealt out one per namespace per
/// round, so no tenant's groups can crowd another tenant's secret out.
pub const MAX_SECRETS_PER_DELIVERY: usize = 4;

/// What the deliveries told, per listing scope: the jobs announced since its cached listing.
pub(crate) type AnnouncedState = HashMap<ListingKey, Announced>;

/// The signature header value: `X-Gitea-Signature`, else `X-Hub-Signature-256`.
fn signature(headers: &HeaderMap) -> Option<&str> {
    ["x-gitea-signature", "x-hub-signature-256"].iter().find_map(|h| {
        headers
            .get(*h)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.trim().is_empty())
    })
}

/// Sort rank of a scope: the narrower, the sooner its secret is tried.
fn specificity(scope: &Scope) -> u8 {
    match scope {
        Scope::Repo { .. } => 0,
        Scope::Org(_) | Scope::User(_) => 1,
        Scope::Global => 2,
    }
}

/// The event name: `X-Gitea-Event`, else `X-GitHub-Event`.
fn event_name(headers: &HeaderMap) -> Option<&str> {
    ["x-gitea-event", "x-github-event"]
        .iter()
        .find_map(|h| headers.get(*h).and_then(|v| v.to_str().ok()))
}

impl GiteaForge {
    /// Handles one delivery to the webhook route: the HTTP status and body to answer.
    ///
    /// A delivery is trusted only if its signature verifies with the webhook secret of a group
    /// this backend serves that can see the delivery's repository on the instance it names;
    /// verification comes first, so unauthenticated callers learn nothing (401 for every
    /// unverified request). A delivery whose id or body was already accepted is answered 200 and
    /// wakes nobody. The groups the job concerns (scope and labels) among those whose own secret
    /// verified it get the event, accounted on top of their cached listing, and a queued job
    /// wakes them. Bodies and secrets are never logged.
    pub fn receive_webhook(&self, headers: &HeaderMap, body: &[u8]) -> WebhookReply {
        let reply = |status, body: String| WebhookReply { status, body };
        let unauthorized = || {
            reply(
                StatusCode::UNAUTHORIZED,
                "signature missing or not valid\n".to_owned(),
            )
        };
        let Some(sig) = signature(headers) else {
            return unauthorized();
        };
        // Names the body for de-duplication (the signature covers it, the id header does not)
        // and turns the order in which namespaces' secrets are tried.
        let digest: [u8; 32] = Sha256::digest(body).into();
        let turn = digest.first_chunk::<8>().map_or(0, |b| u64::from_le_bytes(*b));
        // Only the secrets of groups that can see the delivery's repository on its instance are
        // tried, at most MAX_SECRETS_PER_DELIVERY of them: a forged delivery costs a bounded
        // number of HMACs however many groups (and webhook Secrets) this backend serves.
        let candidates = self.candidate_secrets(delivery_origin(body).as_ref(), turn);
        if candidates.is_empty() {
            // Debug only: the request is not authenticated. The usual cause of a genuine one is
            // a group `url` other than the address Gitea names itself by in `html_url`.
            tracing::debug!("no group on the instance a webhook delivery names can see its repository");
            return unauthorized();
        }
        let labels = ForgeLabels { forge: "gitea" };
        let verified: Vec<GroupKey> = candidates
            .into_iter()
            .find_map(|(secret, keys)| {
                self.metrics.webhook_signature_checks.get_or_create(&labels).inc();
                verify_signature(secret.expose().as_bytes(), body, sig).then_some(keys)
            })
            .unwrap_or_default();
        if verified.is_empty() {
            tracing::debug!("webhook delivery did not verify with any group's secret");
            return unauthorized();
        }
        if event_name(headers) != Some(WORKFLOW_JOB_EVENT) {
            // Verified but not for us (e.g. a test delivery): accept and ignore.
            return reply(StatusCode::NO_CONTENT, String::new());
        }
        let event = match parse_workflow_job(body) {
            Ok(event) => event,
            Err(e) => return reply(StatusCode::BAD_REQUEST, format!("{e}\n")),
        };
        // Remembered only now, verified and well formed: a forged or broken request cannot make
        // a genuine delivery look like a duplicate. The body counts as well as the id, which the
        // signature does not cover: a captured body replayed under fresh ids is still a replay.
        let mut keys = vec![DeliveryKey::BodySha256(digest)];
        keys.extend(delivery_id(headers, &DELIVERY_ID_HEADERS).map(|id| DeliveryKey::Id(id.to_owned())));
        if !self.deliveries.first_time(&keys, Instant::now()) {
            tracing::debug!(job_id = event.job_id, "duplicate webhook delivery ignored");
            return reply(StatusCode::OK, "{\"duplicate\":true}\n".to_owned());
        }
        let keys: Vec<GroupKey> = self
            .concerned_groups(&event)
            .into_iter()
            .filter(|k| verified.contains(k))
            .collect();
        tracing::debug!(
            job_id = event.job_id,
            groups = keys.len(),
            "workflow_job webhook accepted"
        );
        self.wake(&event, &keys);
        reply(
            StatusCode::ACCEPTED,
            format!("{{\"triggered\":{}}}\n", keys.len()),
        )
    }

    /// The distinct webhook secrets of groups that can see `origin` on the instance it names,
    /// each with the groups using it: at most [`MAX_SECRETS_PER_DELIVERY`] of them, dealt out
    /// one per namespace per round starting `turn` namespaces in, each namespace's most specific
    /// scopes first (repository, then owner, then instance); see [`candidates`]. A payload
    /// naming no repository or organization (a system-wide event) can only come from a hook of a
    /// `global` group.
    fn candidate_secrets(
        &self,
        origin: Option<&DeliveryOrigin>,
        turn: u64,
    ) -> Vec<(SecretValue, Vec<GroupKey>)> {
        let Ok(groups) = self.groups.lock() else {
            return Vec::new();
        };
        // In scope; and on the instance the delivery names (`Some(true)`), or not (`Some(false)`).
        let sees = |g: &crate::forge::GroupInfo| match origin {
            Some(o) => o
                .in_scope(&g.scope)
                .then(|| o.on_instance(g.listing.instance().url())),
            None => (g.scope == Scope::Global).then_some(true),
        };
        let offers = |on_instance: bool| -> Vec<Offer<'_>> {
            groups
                .iter()
                .filter(|(_, g)| sees(g) == Some(on_instance))
                .filter_map(|(key, g)| {
                    g.webhook_secret.as_ref().map(|secret| Offer {
                        key,
                        rank: specificity(&g.scope),
                        secret,
                    })
                })
                .collect()
        };
        let mut picked = pick(offers(true), turn, MAX_SECRETS_PER_DELIVERY);
        let room = MAX_SECRETS_PER_DELIVERY.saturating_sub(picked.secrets.len());
        if room > 0 {
            // Gitea writes its ROOT_URL into deliveries of jobs queued without a request (a
            // push, the job emitter: `modules/httplib/url.go` `GuessCurrentHostURL`), so a group
            // that reaches its Gitea by another address (an in-cluster Service) still gets the
            // tries the groups of the named instance left.
            let rest = pick(offers(false), turn, room);
            for (secret, keys) in rest.secrets {
                if picked.secrets.iter().all(|(s, _)| s.expose() != secret.expose()) {
                    picked.secrets.push((secret, keys));
                }
            }
            picked.left_out += rest.left_out;
        }
        if picked.left_out > 0 {
            tracing::debug!(
                left_out = picked.left_out,
                "more distinct webhook secrets apply to one repository than are tried per delivery"
            );
        }
        picked.secrets
    }

    /// Groups (seen by a snapshot) that a `workflow_job` event concerns: in scope and, for a
    /// queued job, able to serve its labels.
    fn concerned_groups(&self, event: &WorkflowJobEvent) -> Vec<GroupKey> {
        let Ok(groups) = self.groups.lock() else {
            return Vec::new();
        };
        let mut out: Vec<GroupKey> = groups
            .iter()
            .filter(|(_, g)| event.in_scope(&g.scope))
            .filter(|(_, g)| {
                event.action != JobStatus::Queued || event.labels.served_by(|l| g.labels.matches(l))
            })
            .map(|(k, _)| k.clone())
            .collect();
        out.sort();
        out
    }

    /// Accounts a verified `event` for the listings of `keys` and, for a queued job, reconciles
    /// those groups at once.
    ///
    /// No listing is expired or fetched: the groups plan on the cached listing plus the jobs
    /// announced since it was fetched (see [`announced`] for the counting rules). Other
    /// actions only tell which runner took an announced job, so they wake nobody.
    pub fn wake(&self, event: &WorkflowJobEvent, keys: &[GroupKey]) {
        let received = Instant::now();
        let listings: HashSet<ListingKey> = match self.groups.lock() {
            Ok(g) => keys
                .iter()
                .filter_map(|k| g.get(k).map(|i| i.listing.clone()))
                .collect(),
            Err(_) => HashSet::new(),
        };
        if let Ok(mut state) = self.announced.lock() {
            for l in listings {
                state.entry(l).or_default().record(event, received);
            }
            // Listings per tenant are not bounded, so neither would be their sum: past the
            // budget the largest listings forget their earliest jobs first.
            trim_total(&mut state, MAX_ANNOUNCED_TOTAL_BYTES);
        }
        if event.action == JobStatus::Queued {
            for k in keys {
                self.trigger.wake(k.clone());
            }
        }
    }

    /// Reconciles the groups on `listing` when it expires at `due` (one poll interval after
    /// its fetch started), so the next listing is one interval after the latest one.
    ///
    /// The reconciler requeues a group one interval after each pass, and a pass woken by a
    /// delivery (or a runner Job change) reuses the cached listing: without this, a job whose
    /// delivery was lost could wait almost two intervals.
    pub(crate) fn poll_again_at(&self, listing: &ListingKey, due: Instant) {
        let keys: Vec<GroupKey> = match self.groups.lock() {
            Ok(g) => g
                .iter()
                .filter(|(_, i)| &i.listing == listing)
                .map(|(k, _)| k.clone())
                .collect(),
            Err(_) => return,
        };
        self.trigger.wake_at(keys, due);
    }

    /// The deliveries' view for the group named `group` (serving jobs when `serves` says so)
    /// on `jobs`, the listing of `listing` fetched at `fetched_at`; also forgets what that
    /// listing covers.
    pub(crate) fn announced_view(
        &self,
        listing: &ListingKey,
        group: &str,
        fetched_at: Instant,
        jobs: &[WorkflowJob],
        serves: impl Fn(&[String]) -> bool,
    ) -> GroupView {
        let Ok(mut state) = self.announced.lock() else {
            return GroupView::default();
        };
        match state.get_mut(listing) {
            Some(a) => {
                a.covered_by(fetched_at);
                if a.is_empty() {
                    GroupView::default()
                } else {
                    a.view(group, fetched_at, jobs, serves)
                }
            }
            None => GroupView::default(),
        }
    }

    /// Notes that this process is about to ask Gitea to re-run job `job_id`, found in
    /// `listing`, so that the re-run's `queued` delivery gives the job a runner at once (see
    /// [`announced`]). The answer goes to the returned note.
    pub(crate) fn rerun_asked(&self, listing: &ListingKey, job_id: i64) -> AskedRerun<'_> {
        if let Ok(mut state) = self.announced.lock() {
            state.entry(listing.clone()).or_default().rerun_asked(job_id);
        }
        AskedRerun {
            forge: self,
            listing: listing.clone(),
            job_id,
            answered: false,
        }
    }

    /// Forgets every delivery (a new leader starts from nothing).
    pub(crate) fn forget_announced(&self) {
        if let Ok(mut s) = self.announced.lock() {
            s.clear();
        }
        self.deliveries.clear();
    }
}

/// A re-run request on its way to Gitea ([`GiteaForge::rerun_asked`]). Dropped without an
/// answer (the request was abandoned), it counts as one Gitea may have carried out.
pub(crate) struct AskedRerun<'a> {
    forge: &'a GiteaForge,
    listing: ListingKey,
    job_id: i64,
    answered: bool,
}

impl AskedRerun<'_> {
    /// Gitea answered: `queued` unless it refused, which queued nothing.
    pub(crate) fn answered(mut self, queued: bool) {
        self.note(queued);
    }

    fn note(&mut self, queued: bool) {
        self.answered = true;
        if let Ok(mut state) = self.forge.announced.lock()
            && let Some(a) = state.get_mut(&self.listing)
        {
            a.rerun_answered(self.job_id, Instant::now(), queued);
        }
    }
}

impl Drop for AskedRerun<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.note(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

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
