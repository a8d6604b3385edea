//! The Forgejo REST transport: URLs, `Authorization: token …`, timeouts, bounded retries on
//! 5xx/transport/garbage, 429 `Retry-After` (clamped), status mapping and size-capped body
//! reads. The endpoints themselves are in `requests`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use forgerunner_core::forge::SecretValue;
use forgerunner_core::metrics::{ForgeRequestLabels, Metrics, Outcome};
use forgerunner_http::{BodyError, TransportFailure, TrustError};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap};
use reqwest::{Method, StatusCode};
use url::Url;

use crate::error::ForgejoError;
use crate::scope::Scope;

/// Largest body of a job list or a runner page: the job list is unpaged, but 4 MiB is
/// thousands of jobs.
pub const MAX_LIST_BYTES: usize = 4 * 1024 * 1024;
/// Largest body of any other answer (version, token, one runner): a handful of fields.
pub const MAX_SMALL_BYTES: usize = 64 * 1024;
/// Wait assumed when a 429 names none (or an unreadable one).
const DEFAULT_RETRY_AFTER_SECS: u64 = 10;

/// Tunables of the HTTP client; the defaults suit production.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Whole-request timeout.
    pub request_timeout: Duration,
    /// TCP/TLS connect timeout.
    pub connect_timeout: Duration,
    /// Attempts per request for 5xx, transport errors, garbage and short 429s (at least 1).
    pub max_attempts: u32,
    /// First backoff after a transient failure; doubles per attempt.
    pub backoff: Duration,
    /// A 429 whose `Retry-After` is at most this long is waited out inline; longer ones are
    /// returned as `RateLimited` so the reconciler requeues.
    pub max_inline_retry_after: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            request_timeout: Duration::from_secs(15),
            connect_timeout: Duration::from_secs(5),
            max_attempts: 3,
            backoff: Duration::from_millis(250),
            max_inline_retry_after: Duration::from_secs(2),
        }
    }
}

/// One kind of request; the closed set used as metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// `GET /api/v1/version`.
    Version,
    /// `GET /api/forgejo/v1/version`.
    ForgejoVersion,
    /// `GET …/runners/jobs`.
    ListJobs,
    /// `GET …/registration-token`.
    RegistrationToken,
    /// `GET …/actions/runners` (and `…/{id}`).
    ListRunners,
    /// `POST …/actions/runners`.
    CreateRunner,
    /// `DELETE …/actions/runners/{id}`.
    DeleteRunner,
    /// `GET /api/v1/user`.
    CurrentUser,
}

impl Operation {
    /// Metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Version => "get_version",
            Operation::ForgejoVersion => "get_forgejo_version",
            Operation::ListJobs => "list_jobs",
            Operation::RegistrationToken => "registration_token",
            Operation::ListRunners => "list_runners",
            Operation::CreateRunner => "create_runner",
            Operation::DeleteRunner => "delete_runner",
            Operation::CurrentUser => "get_user",
        }
    }

    pub(crate) fn words(self) -> &'static str {
        match self {
            Operation::Version | Operation::ForgejoVersion => "read the server version",
            Operation::ListJobs => "list waiting Actions jobs",
            Operation::RegistrationToken => "read the runner registration token",
            Operation::ListRunners => "list runners",
            Operation::CreateRunner => "create a runner",
            Operation::DeleteRunner => "delete a runner",
            Operation::CurrentUser => "read the token's user",
        }
    }

    fn writes(self) -> bool {
        matches!(self, Operation::CreateRunner | Operation::DeleteRunner)
    }

    fn body_cap(self) -> usize {
        match self {
            Operation::ListJobs | Operation::ListRunners => MAX_LIST_BYTES,
            _ => MAX_SMALL_BYTES,
        }
    }
}

/// Result of deleting a runner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// Forgejo deleted it (204).
    Deleted,
    /// Forgejo did not know it (404): already gone.
    AlreadyGone,
}

/// What a request is about, for metrics and error messages.
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) op: Operation,
    pub(crate) scope: Option<&'a Scope>,
    /// What a 404 means is missing; the scope when `None`.
    pub(crate) missing: Option<&'a str>,
}

/// A successful exchange: status, headers and the (capped) body.
pub(crate) struct Reply<T> {
    pub(crate) value: T,
    pub(crate) headers: HeaderMap,
}

/// A client for one Forgejo instance and one API token.
pub struct ForgejoClient {
    http: reqwest::Client,
    base: Url,
    token: SecretValue,
    metrics: Arc<Metrics>,
    opts: ClientOptions,
    /// Set by a 429: no request is sent before this instant.
    blocked_until: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for ForgejoClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForgejoClient")
            .field("base", &self.base.as_str())
            .finish_non_exhaustive()
    }
}

/// `Retry-After` in seconds, clamped by the shared parser; missing or odd values mean 10 s.
pub(crate) fn retry_after(headers: &HeaderMap) -> u64 {
    forgerunner_http::retry_after_secs(headers).unwrap_or(DEFAULT_RETRY_AFTER_SECS)
}

fn transport_error(op: Operation, failure: &TransportFailure) -> ForgejoError {
    ForgejoError::Transport {
        operation: op.as_str(),
        detail: failure.to_string(),
    }
}

impl ForgejoClient {
    /// A client for the instance at `base_url` (e.g. `https://forgejo.example.com/sub`),
    /// trusting `ca_bundle` (PEM) on top of the system roots and sending through `proxy`.
    pub fn new(
        base_url: &str,
        token: SecretValue,
        metrics: Arc<Metrics>,
        opts: ClientOptions,
        ca_bundle: Option<&str>,
        proxy: Option<&str>,
    ) -> Result<ForgejoClient, ForgejoError> {
        let mut base = Url::parse(base_url.trim())
            .map_err(|e| ForgejoError::Spec(format!("spec.forgejo.url {base_url:?} is not a URL: {e}")))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() || base.host().is_none() {
            return Err(ForgejoError::Spec(format!(
                "spec.forgejo.url {base_url:?} must be an http(s) URL"
            )));
        }
        base.set_query(None);
        base.set_fragment(None);
        let builder = reqwest::Client::builder()
            .timeout(opts.request_timeout)
            .connect_timeout(opts.connect_timeout)
            .user_agent(concat!("forgerunner/", env!("CARGO_PKG_VERSION")));
        let builder = forgerunner_http::with_trust(builder, ca_bundle, proxy).map_err(|e| match e {
            TrustError::CaBundle(_) => ForgejoError::Spec(e.to_string()),
            TrustError::Proxy => ForgejoError::Spec("spec.forgejo.proxyUrl is not a valid proxy URL".into()),
        })?;
        let http = builder
            .build()
            .map_err(|e| ForgejoError::Spec(format!("cannot build the HTTP client: {e}")))?;
        Ok(ForgejoClient {
            http,
            base,
            token,
            metrics,
            opts,
            blocked_until: Mutex::new(None),
        })
    }

    /// `<base>/<prefix…>/<segments…>?query`, segments escaped.
    pub(crate) fn url(&self, prefix: &[&str], segments: &[&str], query: &[(&str, String)]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut p) = url.path_segments_mut() {
            p.pop_if_empty().extend(prefix).extend(segments);
        }
        if !query.is_empty() {
            let mut q = url.query_pairs_mut();
            for (k, v) in query {
                q.append_pair(k, v);
            }
        }
        url
    }

    fn observe(&self, op: Operation, outcome: Outcome, started: Instant) {
        self.metrics.observe_forge_request(
            ForgeRequestLabels {
                forge: "forgejo",
                operation: op.as_str(),
                outcome,
            },
            started.elapsed().as_secs_f64(),
        );
    }

    fn rate_limit_remaining(&self) -> Option<u64> {
        let guard = self.blocked_until.lock().ok()?;
        let until = (*guard)?;
        let left = until.checked_duration_since(Instant::now())?;
        Some(left.as_secs().max(1))
    }

    fn block_for(&self, secs: u64) {
        if let Ok(mut g) = self.blocked_until.lock() {
            *g = Some(Instant::now() + Duration::from_secs(secs));
        }
    }

    /// Reads the body within the operation's cap.
    async fn read_capped(op: Operation, resp: reqwest::Response) -> Result<Vec<u8>, ForgejoError> {
        forgerunner_http::read_capped(resp, op.body_cap())
            .await
            .map_err(|e| match e {
                BodyError::TooLarge { .. } => ForgejoError::TooLarge {
                    operation: op.words(),
                    what: e.to_string(),
                },
                BodyError::Read(f) => transport_error(op, &f),
            })
    }

    fn status_error(&self, t: Target<'_>, status: StatusCode, headers: &HeaderMap) -> ForgejoError {
        let where_ = || {
            t.scope
                .map_or_else(|| "the instance".to_string(), ToString::to_string)
        };
        match status {
            StatusCode::UNAUTHORIZED => ForgejoError::Unauthenticated { scope: where_() },
            StatusCode::FORBIDDEN => ForgejoError::Forbidden {
                operation: t.op.words(),
                scope: where_(),
                needs: t.scope.map_or("a valid token", |s| s.rights_hint(t.op.writes())),
            },
            StatusCode::NOT_FOUND => ForgejoError::NotFound {
                what: t.missing.map_or_else(
                    || format!("{} (or its Actions are disabled)", where_()),
                    str::to_string,
                ),
                operation: t.op.words(),
            },
            StatusCode::TOO_MANY_REQUESTS => {
                let secs = retry_after(headers);
                self.block_for(secs);
                ForgejoError::RateLimited(secs)
            }
            s if s.is_server_error() => ForgejoError::Server(s.as_u16(), t.op.as_str()),
            s => ForgejoError::Rejected(s.as_u16(), t.op.as_str()),
        }
    }

    /// One HTTP exchange: status mapping, capped body read, decode. One metric sample.
    async fn attempt<T>(
        &self,
        t: Target<'_>,
        method: &Method,
        url: &Url,
        body: Option<&serde_json::Value>,
        decode: &(dyn Fn(&[u8]) -> Option<T> + Sync),
    ) -> Result<Reply<T>, ForgejoError> {
        if let Some(left) = self.rate_limit_remaining() {
            return Err(ForgejoError::RateLimited(left));
        }
        let started = Instant::now();
        let mut req = self
            .http
            .request(method.clone(), url.clone())
            .header(AUTHORIZATION, format!("token {}", self.token.expose()))
            .header(ACCEPT, "application/json");
        if let Some(b) = body {
            req = req.header(CONTENT_TYPE, "application/json").body(b.to_string());
        }
        let result = match req.send().await {
            Err(e) => Err(transport_error(t.op, &TransportFailure::from_reqwest(&e))),
            Ok(resp) => {
                let status = resp.status();
                let headers = resp.headers().clone();
                if status.is_success() {
                    Self::read_capped(t.op, resp).await.and_then(|b| {
                        decode(&b)
                            .map(|value| Reply {
                                value,
                                headers: headers.clone(),
                            })
                            .ok_or(ForgejoError::BadResponse(t.op.as_str()))
                    })
                } else {
                    Err(self.status_error(t, status, &headers))
                }
            }
        };
        let outcome = match &result {
            Ok(_) => Outcome::Success,
            Err(e) => e.outcome(),
        };
        self.observe(t.op, outcome, started);
        result
    }

    /// Sends with bounded retries: transient failures back off exponentially; a 429 with a
    /// short `Retry-After` is waited out, a long one is returned.
    pub(crate) async fn request<T>(
        &self,
        t: Target<'_>,
        method: Method,
        url: Url,
        body: Option<serde_json::Value>,
        decode: &(dyn Fn(&[u8]) -> Option<T> + Sync),
    ) -> Result<Reply<T>, ForgejoError> {
        let attempts = self.opts.max_attempts.max(1);
        let mut backoff = self.opts.backoff;
        let mut n = 1;
        loop {
            match self.attempt(t, &method, &url, body.as_ref(), decode).await {
                Ok(v) => return Ok(v),
                Err(ForgejoError::RateLimited(secs))
                    if n < attempts && Duration::from_secs(secs) <= self.opts.max_inline_retry_after =>
                {
                    tokio::time::sleep(Duration::from_secs(secs)).await;
                    // The wait is over: the block set by this 429 no longer applies.
                    if let Ok(mut g) = self.blocked_until.lock() {
                        *g = None;
                    }
                }
                // Creating a runner is not idempotent: a retry after a lost answer would leave
                // a second runner behind, so only failures before any answer are retried.
                Err(e) if n < attempts && e.is_transient() && !(t.op.writes() && method == Method::POST) => {
                    tracing::debug!(operation = t.op.as_str(), error = %e, "retrying Forgejo request");
                    tokio::time::sleep(backoff).await;
                    backoff = backoff.saturating_mul(2);
                }
                Err(e) => return Err(e),
            }
            n += 1;
        }
    }
}

#[cfg(test)]
mod tests;
