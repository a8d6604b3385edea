//! The HTTP routes of health and metrics: `/healthz`, `/readyz`, `/metrics`. Webhooks are in
//! [`crate::webhook_route`], the accept loop and its limits in [`crate::server`].
//!
//! With `metricsAddr` set, [`router`] is served on its own listener and the webhook listener gets
//! only [`probes`], so exposing webhooks (an Ingress, a LoadBalancer) never exposes `/metrics`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;

use crate::health::Readiness;

/// Content type of the OpenMetrics text format.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the handlers share.
#[derive(Clone)]
pub struct HttpState {
    /// Readiness flags.
    pub readiness: Arc<Readiness>,
    /// The metrics registry, fully populated before the server starts.
    pub registry: Arc<Registry>,
    /// Size of the last `/metrics` answer: the next one starts with room for it, instead of
    /// doubling its way up (with per-group histograms a scrape of 100 groups is about a
    /// megabyte, and doubling held up to twice that at once).
    pub last_metrics_len: Arc<AtomicUsize>,
}

/// The router of health and metrics.
pub fn router(state: HttpState) -> Router {
    probes(state.clone()).merge(Router::new().route("/metrics", get(metrics)).with_state(state))
}

/// The probes alone (`/healthz`, `/readyz`), for the webhook listener when metrics have their
/// own: probes configured on the webhook port keep working, and they tell nothing about tenants.
pub fn probes(state: HttpState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<HttpState>) -> Response {
    if state.readiness.is_ready() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response()
    }
}

async fn metrics(State(state): State<HttpState>) -> Response {
    let last = state.last_metrics_len.load(Ordering::Relaxed);
    let mut body = String::with_capacity(last + last / 16);
    match prometheus_client::encoding::text::encode(&mut body, &state.registry) {
        Ok(()) => {
            state.last_metrics_len.store(body.len(), Ordering::Relaxed);
            ([(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], body).into_response()
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot encode metrics");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use forgerunner_core::metrics::Metrics;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;

    fn state() -> HttpState {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        metrics
            .reconciles
            .get_or_create(&forgerunner_core::metrics::ReconcileLabels { forge: "gitea" })
            .inc();
        HttpState {
            last_metrics_len: Default::default(),
            readiness: Arc::new(Readiness::new()),
            registry: Arc::new(registry),
        }
    }

    async fn get_path(router: Router, path: &str) -> (StatusCode, String, String) {
        let res = router
            .oneshot(Request::get(path).body(Body::empty()).expect("request"))
            .await
            .expect("response");
        let status = res.status();
        let ctype = res
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body = res.into_body().collect().await.expect("body").to_bytes();
        (status, ctype, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn healthz_is_always_ok() {
        let (status, _, _) = get_path(router(state()), "/healthz").await;
        assert_eq!(status, StatusCode::OK);
    }

    #[tokio::test]
    async fn readyz_follows_readiness() {
        let s = state();
        let (status, _, _) = get_path(router(s.clone()), "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        s.readiness.standby();
        let (status, _, _) = get_path(router(s), "/readyz").await;
        assert_eq!(status, StatusCode::OK);
    }

    #[tokio::test]
    async fn probes_alone_answer_health_but_not_metrics() {
        let s = state();
        s.readiness.standby();
        let (status, _, _) = get_path(probes(s.clone()), "/healthz").await;
        assert_eq!(status, StatusCode::OK);
        let (status, _, _) = get_path(probes(s.clone()), "/readyz").await;
        assert_eq!(status, StatusCode::OK);
        let (status, _, _) = get_path(probes(s), "/metrics").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn metrics_are_openmetrics_text() {
        let (status, ctype, body) = get_path(router(state()), "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(ctype, OPENMETRICS_CONTENT_TYPE);
        assert!(
            body.contains("forgerunner_reconciles_total{forge=\"gitea\"} 1"),
            "{body}"
        );
        assert!(body.ends_with("# EOF\n"));
    }
}
