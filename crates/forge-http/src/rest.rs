//! The REST client skeleton of the Gitea-family forges: one instance URL and one API token,
//! `Authorization: token …`, timeouts, bounded retries with backoff, 429 `Retry-After`
//! (clamped, and honoured by every later request of the client), size-capped body reads and
//! the mapping of an exchange's end onto a closed set of failures.
//!
//! Gitea and Forgejo (a fork of Gitea) speak the same REST dialect here; what differs, the
//! routes, the JSON types and how each failure is worded for users, stays in each forge crate.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use forgerunner_core::forge::SecretValue;
use forgerunner_core::metrics::{ForgeRequestLabels, Metrics, Outcome};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap};
use reqwest::{Method, StatusCode};
use url::Url;

use crate::address_policy::{self, AddressPolicy, AddressRefused};
use crate::body::BodyError;
use crate::listing::ListingError;
use crate::redirect::Redirected;
use crate::transport::TransportFailure;
use crate::{TrustError, no_redirects, read_capped, retry_after_secs, with_trust};

/// Largest body of a list page: 50 items take tens of KiB, and even an unpaged job list of
/// thousands of jobs fits, so only a hostile or broken server comes near it.
pub const MAX_LIST_BYTES: usize = 4 * 1024 * 1024;
/// Largest body of any other answer (version, user, token, one runner): a handful of fields.
pub const MAX_SMALL_BYTES: usize = 64 * 1024;
/// Wait assumed when a 429 names none (or an unreadable one): long enough not to hammer a
/// limiting server, short enough to be waited out by the next reconcile.
pub const DEFAULT_RETRY_AFTER_SECS: u64 = 10;

/// `Retry-After` in seconds, clamped by [`retry_after_secs`]; missing or odd values mean
/// [`DEFAULT_RETRY_AFTER_SECS`], since a 429 always asks for some pause.
pub fn retry_after_or_default(headers: &HeaderMap) -> u64 {
    retry_after_secs(headers).unwrap_or(DEFAULT_RETRY_AFTER_SECS)
}

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
    /// Which addresses the client may connect to (`forgeHosts.refusePrivateAddresses`).
    pub addresses: AddressPolicy,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            request_timeout: Duration::from_secs(15),
            connect_timeout: Duration::from_secs(5),
            max_attempts: 3,
            backoff: Duration::from_millis(250),
            max_inline_retry_after: Duration::from_secs(2),
            addresses: AddressPolicy::AllowPrivate,
        }
    }
}

/// Which forge a client talks to: the words and labels its messages and metrics use, and the
/// one point where the two forges' clients have always behaved differently.
#[derive(Clone, Copy, Debug)]
pub struct Api {
    /// Metric label (`spec.forge`), e.g. `gitea`.
    pub forge: &'static str,
    /// The forge's name in logs, e.g. `Gitea`.
    pub name: &'static str,
    /// The spec block whose fields messages name, e.g. `spec.gitea`.
    pub spec: &'static str,
    /// Whether waiting out a short 429 lifts the client's block at once (Forgejo). Otherwise
    /// the block lapses by itself (Gitea), so a longer one another request set meanwhile still
    /// holds.
    pub lift_block_after_wait: bool,
}

/// Why a client cannot be made from a group's settings; each is the user's to fix.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The URL does not parse.
    #[error("{spec}.url {url:?} is not a URL: {reason}")]
    NotAUrl {
        /// The spec block.
        spec: &'static str,
        /// The URL as written.
        url: String,
        /// What the parser said.
        reason: url::ParseError,
    },
    /// Not an `http(s)://host…` URL.
    #[error("{spec}.url {url:?} must be an http(s) URL")]
    NotHttp {
        /// The spec block.
        spec: &'static str,
        /// The URL as written.
        url: String,
    },
    /// The CA bundle holds no usable certificate.
    #[error("{0}")]
    CaBundle(TrustError),
    /// The proxy URL does not parse; the URL is never echoed, it may carry credentials.
    #[error("{spec}.proxyUrl is not a valid proxy URL")]
    Proxy {
        /// The spec block.
        spec: &'static str,
    },
    /// The URL or proxy URL names an IP address `forgeHosts.refusePrivateAddresses` refuses.
    #[error("{spec}.{field}: {refused}")]
    AddressRefused {
        /// The spec block.
        spec: &'static str,
        /// `url` or `proxyUrl`.
        field: &'static str,
        /// The address and its class.
        refused: AddressRefused,
    },
    /// reqwest refused the settings.
    #[error("cannot build the HTTP client: {0}")]
    Build(reqwest::Error),
}

/// How one exchange (with its retries) ended when it did not succeed; each forge words it for
/// users with the operation and scope it knows.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// 401: the token is unknown or expired.
    #[error("the API token was rejected (401)")]
    Unauthenticated,
    /// 403: the token lacks a right.
    #[error("the API token lacks a right (403)")]
    Forbidden,
    /// 404.
    #[error("not found (404)")]
    NotFound,
    /// 429 (or this client's block from an earlier one): retry after this many seconds.
    #[error("rate limited; retry after {0}s")]
    RateLimited(u64),
    /// 5xx.
    #[error("server error {0}")]
    Server(u16),
    /// Another 4xx.
    #[error("refused with {0}")]
    Rejected(u16),
    /// Connection failure or timeout.
    #[error("{0}")]
    Transport(TransportFailure),
    /// A 3xx: never followed (see [`crate::redirect`]); the user points the URL at the final
    /// address instead.
    #[error("{0}")]
    Redirect(Redirected),
    /// A 2xx body that does not decode.
    #[error("malformed response")]
    BadResponse,
    /// A body or a paged listing over its cap, in words (never the body); refused whole.
    #[error("{0}")]
    TooLarge(String),
}

impl From<ListingError> for CallError {
    fn from(e: ListingError) -> CallError {
        CallError::TooLarge(e.to_string())
    }
}

impl CallError {
    /// The metric outcome.
    pub fn outcome(&self) -> Outcome {
        match self {
            CallError::Unauthenticated | CallError::Forbidden => Outcome::Unauthorized,
            CallError::NotFound => Outcome::NotFound,
            CallError::RateLimited(_) => Outcome::RateLimited,
            CallError::Server(_) => Outcome::ServerError,
            CallError::Transport(_) => Outcome::Transport,
            CallError::BadResponse | CallError::TooLarge(_) => Outcome::BadResponse,
            CallError::Rejected(_) | CallError::Redirect(_) => Outcome::ClientError,
        }
    }

    /// Whether a retry of the same request may succeed soon. An over-cap answer is not: the
    /// same server would send it again, and each retry costs a cap's worth of download. Nor is
    /// a host that resolved only to refused addresses: a resolution a moment later says the same.
    pub fn is_transient(&self) -> bool {
        match self {
            CallError::Transport(f) => !f.is_address_refused(),
            CallError::Server(_) | CallError::BadResponse => true,
            _ => false,
        }
    }

    /// The failure a non-2xx answer to a request for `url` means; a 429 also says how long to
    /// wait.
    fn of_status(status: StatusCode, headers: &HeaderMap, url: &Url) -> CallError {
        match status {
            s if s.is_redirection() => CallError::Redirect(Redirected::from_reply(s, headers, url)),
            StatusCode::UNAUTHORIZED => CallError::Unauthenticated,
            StatusCode::FORBIDDEN => CallError::Forbidden,
            StatusCode::NOT_FOUND => CallError::NotFound,
            StatusCode::TOO_MANY_REQUESTS => CallError::RateLimited(retry_after_or_default(headers)),
            s if s.is_server_error() => CallError::Server(s.as_u16()),
            s => CallError::Rejected(s.as_u16()),
        }
    }
}

/// One request: what it is for the metrics, where it goes and how its answer is read.
pub struct Call<'a> {
    /// Metric label of the operation, e.g. `list_jobs`.
    pub operation: &'static str,
    /// The method.
    pub method: Method,
    /// The URL, from [`RestClient::url`].
    pub url: Url,
    /// A JSON body to send, if any.
    pub body: Option<&'a serde_json::Value>,
    /// Most body bytes read from the answer.
    pub cap: usize,
    /// Whether a transient failure may be retried. Not for a request that makes something:
    /// a retry after a lost answer would make it twice.
    pub idempotent: bool,
}

/// A successful exchange: the decoded body and the headers (paging totals live there).
pub struct Reply<T> {
    /// The decoded body.
    pub value: T,
    /// The response headers.
    pub headers: HeaderMap,
}

/// A client for one forge instance and one API token.
pub struct RestClient {
    http: reqwest::Client,
    base: Url,
    token: SecretValue,
    metrics: Arc<Metrics>,
    api: Api,
    opts: ClientOptions,
    /// Set by a 429: no request is sent before this instant.
    blocked_until: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for RestClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestClient")
            .field("base", &self.base.as_str())
            .finish_non_exhaustive()
    }
}

/// Decodes a JSON body; `None` (a bad response) when it does not fit `T`.
pub fn json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Option<T> {
    serde_json::from_slice(body).ok()
}

impl RestClient {
    /// A client for the instance at `base_url` (e.g. `https://forge.example.com/sub`),
    /// trusting `ca_bundle` (PEM) on top of the system roots and sending through `proxy`.
    pub fn new(
        api: Api,
        base_url: &str,
        token: SecretValue,
        metrics: Arc<Metrics>,
        opts: ClientOptions,
        ca_bundle: Option<&str>,
        proxy: Option<&str>,
    ) -> Result<RestClient, SetupError> {
        let mut base = Url::parse(base_url.trim()).map_err(|reason| SetupError::NotAUrl {
            spec: api.spec,
            url: base_url.to_string(),
            reason,
        })?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() || base.host().is_none() {
            return Err(SetupError::NotHttp {
                spec: api.spec,
                url: base_url.to_string(),
            });
        }
        base.set_query(None);
        base.set_fragment(None);
        // Literals never reach the resolver: judged here, with the proxy (what is connected to
        // when one is set).
        let refused = |field| {
            move |refused| SetupError::AddressRefused {
                spec: api.spec,
                field,
                refused,
            }
        };
        address_policy::check_url(opts.addresses, &base).map_err(refused("url"))?;
        address_policy::check_proxy(opts.addresses, proxy).map_err(refused("proxyUrl"))?;
        let builder = crate::client_builder()
            // A redirect would take the request past the host allowlist, to wherever the
            // server names (see `crate::redirect`).
            .redirect(no_redirects())
            .timeout(opts.request_timeout)
            .connect_timeout(opts.connect_timeout)
            .user_agent(concat!("forgerunner/", env!("CARGO_PKG_VERSION")));
        let builder = address_policy::with_policy(builder, opts.addresses);
        let builder = with_trust(builder, ca_bundle, proxy).map_err(|e| match e {
            TrustError::CaBundle(_) => SetupError::CaBundle(e),
            TrustError::Proxy => SetupError::Proxy { spec: api.spec },
        })?;
        let http = builder.build().map_err(SetupError::Build)?;
        Ok(RestClient {
            http,
            base,
            token,
            metrics,
            api,
            opts,
            blocked_until: Mutex::new(None),
        })
    }

    /// `<base>/<prefix…>/<segments…>?query`, segments escaped (names come from specs).
    pub fn url(&self, prefix: &[&str], segments: &[&str], query: &[(&str, String)]) -> Url {
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

    fn observe(&self, operation: &'static str, outcome: Outcome, started: Instant) {
        self.metrics.observe_forge_request(
            ForgeRequestLabels {
                forge: self.api.forge,
                operation,
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

    /// One HTTP exchange: status mapping, capped body read, decode. One metric sample, none
    /// when the client's 429 block refuses to send at all.
    async fn attempt<T>(
        &self,
        call: &Call<'_>,
        decode: &(dyn Fn(&[u8]) -> Option<T> + Sync),
    ) -> Result<Reply<T>, CallError> {
        if let Some(left) = self.rate_limit_remaining() {
            return Err(CallError::RateLimited(left));
        }
        let started = Instant::now();
        let mut req = self
            .http
            .request(call.method.clone(), call.url.clone())
            .header(AUTHORIZATION, format!("token {}", self.token.expose()))
            .header(ACCEPT, "application/json");
        if let Some(b) = call.body {
            req = req.header(CONTENT_TYPE, "application/json").body(b.to_string());
        }
        let result = match req.send().await {
            Err(e) => Err(CallError::Transport(TransportFailure::from_reqwest(&e))),
            Ok(resp) => {
                let status = resp.status();
                let headers = resp.headers().clone();
                if status.is_success() {
                    match read_capped(resp, call.cap).await {
                        Ok(body) => decode(&body)
                            .map(|value| Reply { value, headers })
                            .ok_or(CallError::BadResponse),
                        Err(e @ BodyError::TooLarge { .. }) => Err(CallError::TooLarge(e.to_string())),
                        Err(BodyError::Read(f)) => Err(CallError::Transport(f)),
                    }
                } else {
                    let e = CallError::of_status(status, &headers, &call.url);
                    if let CallError::RateLimited(secs) = e {
                        self.block_for(secs);
                    }
                    Err(e)
                }
            }
        };
        let outcome = match &result {
            Ok(_) => Outcome::Success,
            Err(e) => e.outcome(),
        };
        self.observe(call.operation, outcome, started);
        result
    }

    /// Sends with bounded retries: transient failures back off exponentially; a 429 with a
    /// short `Retry-After` is waited out, a long one is returned.
    pub async fn send<T>(
        &self,
        call: &Call<'_>,
        decode: &(dyn Fn(&[u8]) -> Option<T> + Sync),
    ) -> Result<Reply<T>, CallError> {
        let attempts = self.opts.max_attempts.max(1);
        let mut backoff = self.opts.backoff;
        let mut n = 1;
        loop {
            match self.attempt(call, decode).await {
                Ok(v) => return Ok(v),
                Err(CallError::RateLimited(secs))
                    if n < attempts && Duration::from_secs(secs) <= self.opts.max_inline_retry_after =>
                {
                    tokio::time::sleep(Duration::from_secs(secs)).await;
                    if self.api.lift_block_after_wait
                        && let Ok(mut g) = self.blocked_until.lock()
                    {
                        *g = None;
                    }
                }
                Err(e) if n < attempts && e.is_transient() && call.idempotent => {
                    tracing::debug!(operation = call.operation, error = %e, "retrying {} request", self.api.name);
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
mod tests {
    use super::*;
    use reqwest::header::{HeaderValue, RETRY_AFTER};

    const API: Api = Api {
        forge: "gitea",
        name: "Gitea",
        spec: "spec.gitea",
        lift_block_after_wait: false,
    };

    fn client(url: &str, proxy: Option<&str>) -> Result<RestClient, SetupError> {
        RestClient::new(
            API,
            url,
            SecretValue::new("t"),
            Arc::default(),
            ClientOptions::default(),
            None,
            proxy,
        )
    }

    #[test]
    fn retry_after_forms() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after_or_default(&h), 10);
        h.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        assert_eq!(retry_after_or_default(&h), 7);
        h.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after_or_default(&h), 0);
        h.insert(RETRY_AFTER, HeaderValue::from_static("soon"));
        assert_eq!(retry_after_or_default(&h), 10);
    }

    #[test]
    fn retry_after_is_clamped() {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_static("999999"));
        assert_eq!(retry_after_or_default(&h), 3600);
    }

    #[test]
    fn urls_keep_subpaths_and_escape_segments_and_labels() {
        let c = client("https://code.example.com/sub/", None).expect("client");
        let u = c.url(
            &["api", "v1"],
            &["repos", "a b", "r", "actions", "runners", "jobs"],
            &[("labels", "debian,self hosted".into())],
        );
        assert_eq!(
            u.as_str(),
            "https://code.example.com/sub/api/v1/repos/a%20b/r/actions/runners/jobs?labels=debian%2Cself+hosted"
        );
        let d = format!("{c:?}");
        assert!(d.contains("code.example.com") && !d.contains("\"t\""), "{d}");
    }

    #[test]
    fn rejects_bad_urls_and_proxies_in_the_spec_s_words() {
        for bad in ["", "gitea.local", "ftp://x", "mailto:a@b"] {
            assert!(
                matches!(
                    client(bad, None),
                    Err(SetupError::NotAUrl { .. } | SetupError::NotHttp { .. })
                ),
                "{bad}"
            );
        }
        let e = client("ftp://x", None).expect_err("not http");
        assert_eq!(e.to_string(), "spec.gitea.url \"ftp://x\" must be an http(s) URL");
        let e = client("https://x", Some("http://user:hunter2@[::not")).expect_err("bad proxy");
        assert_eq!(e.to_string(), "spec.gitea.proxyUrl is not a valid proxy URL");
        assert!(client("https://x", Some("http://proxy.internal:3128")).is_ok());
    }

    /// M1 of the security review: a forge URL answered with a redirect to another host must
    /// not make the client go there. reqwest follows up to 10 redirects to any host and scheme
    /// by default (`redirect::Policy::default()` is `Policy::limited(10)`, reqwest 0.13.5
    /// `src/redirect.rs`, `impl Default for Policy`), and with 307/308 it sends the POST or
    /// DELETE again. Built with `Policy::none()`, the client takes the 3xx as the answer: the
    /// second server never sees a request, and the failure names only the target's origin.
    #[tokio::test]
    async fn a_redirect_to_another_host_is_never_followed() {
        use std::sync::atomic::Ordering;

        use crate::test_server::{serve_json, serve_redirect};

        let (target, reached) = serve_json(|_| (vec![], "{}".into())).await;
        let location = format!("http://127.0.0.1:{target}/latest/meta-data?token=hunter2");
        let body = serde_json::json!({"name": "r"});
        for status in [301, 302, 303, 307, 308] {
            let (port, answered) = serve_redirect(status, location.clone()).await;
            let c = client(&format!("http://127.0.0.1:{port}/sub"), None).expect("client");
            for method in [Method::GET, Method::POST, Method::DELETE] {
                let call = Call {
                    operation: "op",
                    url: c.url(&["api", "v1"], &["runners"], &[]),
                    body: (method == Method::POST).then_some(&body),
                    method,
                    cap: MAX_SMALL_BYTES,
                    idempotent: true,
                };
                let e = c
                    .send(&call, &json::<serde_json::Value>)
                    .await
                    .err()
                    .unwrap_or_else(|| panic!("{status} {}: a redirect is no answer", call.method));
                let text = e.to_string();
                assert!(matches!(e, CallError::Redirect(_)), "{status}: {e:?}");
                assert_eq!(e.outcome(), Outcome::ClientError);
                assert!(!e.is_transient(), "the same server would redirect again");
                assert_eq!(
                    text,
                    format!("a redirect ({status}) to another address, http://127.0.0.1:{target}")
                );
            }
            assert_eq!(
                answered.load(Ordering::SeqCst),
                3,
                "{status}: one request per call, no retry"
            );
        }
        assert_eq!(
            reached.load(Ordering::SeqCst),
            0,
            "the redirect target got requests"
        );
    }

    #[test]
    fn statuses_map_onto_failures_and_outcomes() {
        let h = HeaderMap::new();
        let cases = [
            (401, CallError::Unauthenticated, Outcome::Unauthorized),
            (403, CallError::Forbidden, Outcome::Unauthorized),
            (404, CallError::NotFound, Outcome::NotFound),
            (429, CallError::RateLimited(10), Outcome::RateLimited),
            (502, CallError::Server(502), Outcome::ServerError),
            (409, CallError::Rejected(409), Outcome::ClientError),
        ];
        for (code, want, outcome) in cases {
            let status = StatusCode::from_u16(code).expect("status");
            let got = CallError::of_status(status, &h, &Url::parse("https://x/api").expect("URL"));
            assert_eq!((&got, got.outcome()), (&want, outcome), "{code}");
            assert_eq!(got.is_transient(), code == 502, "{code}");
        }
        assert!(CallError::BadResponse.is_transient());
        assert!(!CallError::TooLarge("x".into()).is_transient());
    }
}
