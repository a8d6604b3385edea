//! Fault injection (status codes, latency) and the request log, as one axum middleware.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::control::{Shared, lock};

/// One fault rule: requests whose path contains `path_contains` (and whose method matches,
/// if given) are delayed by `latency` and, if `status` is set, answered with it.
#[derive(Clone, Debug, Default)]
pub struct Fault {
    /// Substring of the request path.
    pub path_contains: String,
    /// HTTP method (`GET`, …); any if `None`.
    pub method: Option<String>,
    /// Status to answer with; pass through (after the latency) if `None`.
    pub status: Option<u16>,
    /// `Retry-After` value sent with the status.
    pub retry_after: Option<String>,
    /// Delay before answering.
    pub latency: Duration,
    /// How many requests it affects; unlimited if `None`.
    pub times: Option<u32>,
}

impl Fault {
    /// Answers `status` to requests whose path contains `path`.
    pub fn status(path: &str, status: u16) -> Fault {
        Fault {
            path_contains: path.to_string(),
            status: Some(status),
            ..Fault::default()
        }
    }

    /// Delays requests whose path contains `path`.
    pub fn latency(path: &str, latency: Duration) -> Fault {
        Fault {
            path_contains: path.to_string(),
            latency,
            ..Fault::default()
        }
    }

    /// Limits the rule to the next `n` matching requests.
    pub fn times(mut self, n: u32) -> Fault {
        self.times = Some(n);
        self
    }

    /// Adds a `Retry-After` header.
    pub fn retry_after(mut self, value: &str) -> Fault {
        self.retry_after = Some(value.to_string());
        self
    }
}

/// One received request.
#[derive(Clone, Debug)]
pub struct LoggedRequest {
    /// Method.
    pub method: String,
    /// Path.
    pub path: String,
    /// Raw query string.
    pub query: String,
    /// Status sent back.
    pub status: u16,
    /// Whether an `Authorization` header was present.
    pub authorized: bool,
}

/// Applies the first matching fault and records the request.
pub(crate) async fn middleware(State(shared): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    let authorized = req.headers().contains_key("authorization");
    let fault = {
        let mut faults = lock(&shared.faults);
        let hit = faults.iter_mut().find(|f| {
            path.contains(&f.path_contains)
                && f.method
                    .as_deref()
                    .is_none_or(|m| m.eq_ignore_ascii_case(&method))
                && f.times != Some(0)
        });
        hit.map(|f| {
            if let Some(n) = f.times.as_mut() {
                *n -= 1;
            }
            f.clone()
        })
    };
    let resp = match fault {
        Some(f) => {
            if !f.latency.is_zero() {
                tokio::time::sleep(f.latency).await;
            }
            match f.status.and_then(|s| StatusCode::from_u16(s).ok()) {
                Some(status) => {
                    let mut r = (
                        status,
                        axum::Json(serde_json::json!({"message": "injected fault", "url": ""})),
                    )
                        .into_response();
                    if let Some(v) = f
                        .retry_after
                        .as_deref()
                        .and_then(|v| HeaderValue::from_str(v).ok())
                    {
                        r.headers_mut().insert("retry-after", v);
                    }
                    r
                }
                None => next.run(req).await,
            }
        }
        None => next.run(req).await,
    };
    lock(&shared.log).push(LoggedRequest {
        method,
        path,
        query,
        status: resp.status().as_u16(),
        authorized,
    });
    resp
}

/// A Gitea-style error body (`{"message", "url"}`).
pub(crate) fn api_error(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({"message": message, "url": "https://docs.gitea.com/api/"});
    let mut r = Response::new(Body::from(body.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("application/json;charset=utf-8"),
    );
    r
}
