//! `POST /webhooks/<forge>`: bounded, then handled here when we lead or relayed to the leader.
//!
//! Order matters for cost: a delivery first takes one of a fixed number of slots (none free:
//! 503 with `Retry-After`, before a byte of body is read), then its body is read within a size
//! and time bound, then the forge verifies it on the blocking pool, so signature checks never
//! stall the runtime that answers `/healthz`. A standby forwards to the leader instead; with no
//! leader known it answers 503, so the forge records a failed delivery rather than a silent
//! success.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use forgerunner_core::forge::MAX_WEBHOOK_BODY_BYTES;
use forgerunner_core::metrics::{Metrics, WebhookLabels};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tokio::sync::Semaphore;

use crate::controller::ForgeSet;
use crate::forward::{Forwarder, was_forwarded};
use crate::leader_route::{LeaderRoute, Route};
use crate::server::ServerLimits;

/// Seconds a shed or refused delivery is told to wait before trying again.
const RETRY_AFTER_SECONDS: &str = "5";

/// What the webhook handler shares.
#[derive(Clone)]
pub struct WebhookState {
    /// Enabled forges.
    pub forges: Arc<dyn ForgeSet>,
    /// Shared metrics.
    pub metrics: Arc<Metrics>,
    /// Where deliveries go now.
    pub route: LeaderRoute,
    /// Relays deliveries to the leader.
    pub forwarder: Forwarder,
    /// Slots for deliveries in flight.
    pub slots: Arc<Semaphore>,
    /// Permits to verify a delivery (CPU work).
    pub verifications: Arc<Semaphore>,
    /// Bound on reading one body.
    pub body_timeout: Duration,
    /// Bound on waiting for a slot.
    pub queue_wait: Duration,
}

impl WebhookState {
    /// State for `forges` with slots and timeouts from `limits`.
    pub fn new(
        forges: Arc<dyn ForgeSet>,
        metrics: Arc<Metrics>,
        route: LeaderRoute,
        forwarder: Forwarder,
        limits: &ServerLimits,
    ) -> Self {
        WebhookState {
            forges,
            metrics,
            route,
            forwarder,
            slots: Arc::new(Semaphore::new(limits.max_webhooks_in_flight.max(1))),
            verifications: Arc::new(Semaphore::new(limits.max_verifications.max(1))),
            body_timeout: limits.body_timeout,
            queue_wait: limits.webhook_queue_wait,
        }
    }

    fn count(&self, forge: &str, outcome: &'static str) {
        // The label must be a closed set: a path naming no enabled forge counts as "unknown".
        let forge = self
            .forges
            .by_name(forge)
            .map_or("unknown", |f| f.kind().as_str());
        self.metrics
            .webhook_deliveries
            .get_or_create(&WebhookLabels { forge, outcome })
            .inc();
    }
}

/// The webhook route: each delivery goes to the enabled forge the path names, which verifies
/// and answers it; a forge that is not enabled, or takes no webhooks, is 404.
pub fn webhook_router(state: WebhookState) -> Router {
    Router::new()
        .route("/webhooks/{forge}", post(receive_webhook))
        .with_state(state)
}

fn refuse(status: StatusCode, message: &'static str) -> Response {
    let mut res = (status, message).into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        res.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECONDS));
    }
    res
}

async fn receive_webhook(
    State(state): State<WebhookState>,
    Path(forge): Path<String>,
    request: Request,
) -> Response {
    // A zero wait still takes a free slot: the timeout polls the acquisition first.
    let Ok(Ok(_slot)) = tokio::time::timeout(state.queue_wait, state.slots.clone().acquire_owned()).await
    else {
        state.count(&forge, "shed");
        return refuse(StatusCode::SERVICE_UNAVAILABLE, "too many deliveries at once\n");
    };
    if state.forges.by_name(&forge).is_none() {
        return refuse(StatusCode::NOT_FOUND, "no such webhook\n");
    }
    let (parts, body) = request.into_parts();
    let body = match read_body(body, state.body_timeout).await {
        Ok(body) => body,
        Err((status, message, outcome)) => {
            state.count(&forge, outcome);
            return refuse(status, message);
        }
    };
    match state.route.get() {
        Route::Local => handle_here(&state, forge, parts.headers, body).await,
        Route::Remote(endpoint) if !was_forwarded(&parts.headers) => {
            let path = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
            match state
                .forwarder
                .forward(&endpoint, &path, &parts.headers, body)
                .await
            {
                Ok(answer) => {
                    state.count(&forge, "forwarded");
                    let mut res = (answer.status, answer.body).into_response();
                    if let Some(ct) = answer.content_type {
                        res.headers_mut().insert(header::CONTENT_TYPE, ct);
                    }
                    res
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot forward a webhook delivery to the leader");
                    state.count(&forge, "no_leader");
                    refuse(StatusCode::SERVICE_UNAVAILABLE, "the leader is not reachable\n")
                }
            }
        }
        _ => {
            state.count(&forge, "no_leader");
            refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "no leader to take the delivery\n",
            )
        }
    }
}

/// The whole body within `timeout` and [`MAX_WEBHOOK_BODY_BYTES`]; else the status, message
/// and metric outcome to refuse with.
async fn read_body(body: Body, timeout: Duration) -> Result<Bytes, (StatusCode, &'static str, &'static str)> {
    let too_large = (
        StatusCode::PAYLOAD_TOO_LARGE,
        "delivery body too large\n",
        "too_large",
    );
    match tokio::time::timeout(timeout, Limited::new(body, MAX_WEBHOOK_BODY_BYTES).collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<LengthLimitError>() => Err(too_large),
        Ok(Err(_)) => Err((
            StatusCode::BAD_REQUEST,
            "cannot read the delivery body\n",
            "rejected",
        )),
        Err(_) => Err((
            StatusCode::REQUEST_TIMEOUT,
            "delivery body not received in time\n",
            "timeout",
        )),
    }
}

/// Lets the forge verify and act on the delivery, off the async workers: signature checks are
/// CPU work, and a burst of them must not delay `/healthz`.
async fn handle_here(state: &WebhookState, forge: String, headers: HeaderMap, body: Bytes) -> Response {
    // Waiting here is async: the delivery already holds a slot, so the queue stays bounded.
    let Ok(_permit) = state.verifications.clone().acquire_owned().await else {
        return refuse(StatusCode::SERVICE_UNAVAILABLE, "shutting down\n");
    };
    let forges = state.forges.clone();
    let name = forge.clone();
    let reply = tokio::task::spawn_blocking(move || {
        forges
            .by_name(&name)
            .and_then(|f| f.receive_webhook(&headers, &body))
    })
    .await;
    match reply {
        Ok(Some(reply)) => {
            let outcome = match reply.status.as_u16() {
                200..=299 => "accepted",
                401 => "unauthorized",
                _ => "rejected",
            };
            state.count(&forge, outcome);
            (reply.status, reply.body).into_response()
        }
        Ok(None) => refuse(StatusCode::NOT_FOUND, "no such webhook\n"),
        Err(e) => {
            tracing::error!(error = %e, "the webhook handler panicked");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}
