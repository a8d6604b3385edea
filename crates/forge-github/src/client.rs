//! HTTP layer: one client per (config URL, credentials) over a transport shared by every group
//! with the same CA bundle and proxy, the token chain, request retries, metrics and the mapping
//! of responses onto [`ApiError`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes_helpers::{BOM, strip_bom};
use forgerunner_core::budget::{BudgetCell, RateBudget};
use forgerunner_core::forge::SecretValue;
use forgerunner_core::metrics::{ForgeRequestLabels, Metrics};
use forgerunner_http::address_policy::{self, AddressPolicy};
use forgerunner_http::{BodyError, LongPollClient, Redirected, TransportFailure};
use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Method, RequestBuilder, StatusCode};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use url::Url;

use crate::auth::AuthMethod;
use crate::auth::token_cache::{AdminConnection, TokenCache, jwt_exp};
use crate::backoff::Backoff;
use crate::config_url::ConfigUrl;
use crate::error::{ApiError, status_outcome, truncate};

/// API version every Actions service call carries.
pub const API_VERSION: &str = "6.0-preview";
/// Label value of the `forge` metric label.
const FORGE: &str = "github";
/// Largest success body read: a long-poll message with its job list or a runner lookup is
/// tens of KiB, so only a hostile or broken server comes near 4 MiB.
const MAX_REPLY_BYTES: usize = 4 * 1024 * 1024;
/// Largest error body read: only its `message` (cut to a few hundred characters) is used.
const MAX_ERROR_BYTES: usize = 64 * 1024;

/// Timeouts and retry policy of the HTTP layer.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    /// Timeout of an ordinary request.
    pub request_timeout: Duration,
    /// Timeout of a long poll (must exceed the service's ~50 s hold).
    pub poll_timeout: Duration,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Retries of a transient failure (429, 5xx except 501, transport) before giving up.
    pub max_retries: u32,
    /// Backoff between those retries; a `Retry-After` longer than `retry.cap` is not waited
    /// for but returned to the caller as a rate limit.
    pub retry: Backoff,
    /// Backoff between the [`REGISTRATION_RETRIES`] retries of a runner registration that
    /// GitHub refuses with 401/403 (a registration token minted a moment earlier may not have
    /// replicated yet, actions-runner-controller#3377). scaleset retries these for about 15 s
    /// (`client.go`, its `CheckRetry` with go-retryablehttp's 1 s → 30 s defaults).
    pub registration_retry: Backoff,
    /// Which addresses calls may connect to (`forgeHosts.refusePrivateAddresses`), the
    /// Actions service URL GitHub hands out included.
    pub addresses: AddressPolicy,
}

/// Retries of a runner registration refused with 401/403 (scaleset: `RetryMax` 4).
pub const REGISTRATION_RETRIES: u32 = 4;

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            request_timeout: Duration::from_secs(60),
            poll_timeout: Duration::from_secs(90),
            connect_timeout: Duration::from_secs(10),
            max_retries: 3,
            retry: Backoff {
                base: Duration::from_millis(500),
                cap: Duration::from_secs(10),
            },
            registration_retry: Backoff {
                base: Duration::from_secs(1),
                cap: Duration::from_secs(30),
            },
            addresses: AddressPolicy::AllowPrivate,
        }
    }
}

/// Idle connections kept per host. Groups share a transport, so a few cover the steady traffic;
/// a burst opens more and they are closed once idle.
const IDLE_CONNECTIONS_PER_HOST: usize = 8;
/// How long an idle connection is kept.
const IDLE_CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);
/// Requests other than the long poll in flight at once to one host over one transport; more
/// wait for a turn. Over HTTP/1.1 each request in flight holds a connection of its own (its
/// buffers and tasks cost about 30 KiB), and when a thousand groups start or wake at once they
/// would open a thousand connections for calls of a few milliseconds, most of them closed
/// again right after (only [`IDLE_CONNECTIONS_PER_HOST`] are kept). Over HTTP/2 the calls share
/// one connection anyway; the bound also stays below the 100 concurrent requests GitHub
/// allows before its secondary rate limit.
pub const REQUESTS_IN_FLIGHT_PER_HOST: usize = 32;
/// Hosts whose request bound is remembered while none of their requests is in flight.
const IDLE_HOST_LIMITS_KEPT: usize = 16;

/// The per-host bound of [`REQUESTS_IN_FLIGHT_PER_HOST`] of one transport.
#[derive(Clone, Debug, Default)]
pub struct HostLimits(Arc<Mutex<HashMap<String, Arc<Semaphore>>>>);

impl HostLimits {
    /// Waits for a turn to send a request to `url`'s host; the turn ends when the permit is
    /// dropped. `None` only if the bound was closed, which never happens.
    async fn acquire(&self, url: &Url) -> Option<OwnedSemaphorePermit> {
        let host = format!(
            "{}:{}",
            url.host_str().unwrap_or_default(),
            url.port_or_known_default().unwrap_or_default()
        );
        let limit = {
            let mut hosts = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if hosts.len() >= IDLE_HOST_LIMITS_KEPT && !hosts.contains_key(&host) {
                // Forget the bounds of hosts nothing is sent to right now.
                hosts.retain(|_, s| Arc::strong_count(s) > 1);
            }
            hosts
                .entry(host)
                .or_insert_with(|| Arc::new(Semaphore::new(REQUESTS_IN_FLIGHT_PER_HOST)))
                .clone()
        };
        limit.acquire_owned().await.ok()
    }

    /// Hosts with a bound (for tests).
    #[cfg(test)]
    fn hosts(&self) -> usize {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}

/// The HTTP clients one (CA bundle, proxy) pair needs, shared by every group with that pair.
#[derive(Clone, Debug)]
pub struct Transport {
    /// Admin, REST and queue calls other than the long poll: HTTP/2 where the server offers it,
    /// so the short calls of many groups share a connection.
    pub http: reqwest::Client,
    /// The message long poll only (see [`PollTransport`]).
    pub poll: PollTransport,
    /// Whether requests go through a proxy (reported in the User-Agent, as ARC's did).
    pub has_proxy: bool,
    /// Bounds the requests of `http` in flight per host.
    pub limits: HostLimits,
}

/// How the message long poll travels: over HTTP/1.1, one connection per open poll. Every
/// group holds a poll open for about 50 s, and as streams of one HTTP/2 connection the polls
/// beyond the server's `SETTINGS_MAX_CONCURRENT_STREAMS` would queue behind the others (ARC
/// runs one listener process, so one connection, per scale set).
#[derive(Clone, Debug)]
pub enum PollTransport {
    /// Direct: the lean client of [`forgerunner_http::long_poll`], which holds a waiting
    /// poll's connection in a few KiB instead of reqwest's 45.
    Direct(Arc<LongPollClient>),
    /// Through a proxy (the group's or the environment's): reqwest, HTTP/1.1 only, whose pool
    /// keeps each connection for the group's next poll.
    Proxied(reqwest::Client),
}

/// Builds the HTTP transport: `ca_bundle` (PEM) is trusted on top of the system roots, `proxy`
/// proxies every request. One transport serves every group with the same CA bundle and proxy,
/// so they share one connection pool and one root store (each costs memory per group
/// otherwise: about 16 connections and 70 KiB of roots).
pub fn build_transport(
    ca_bundle: Option<&str>,
    proxy: Option<&str>,
    opts: &HttpOptions,
) -> Result<Transport, ApiError> {
    // A proxy literal never reaches the resolver; with a proxy it is all the client connects to.
    address_policy::check_proxy(opts.addresses, proxy)
        .map_err(|e| ApiError::Config(format!("proxyUrl: {e}")))?;
    let http = forgerunner_http::client_builder()
        .pool_max_idle_per_host(IDLE_CONNECTIONS_PER_HOST)
        .pool_idle_timeout(IDLE_CONNECTION_TIMEOUT);
    let poll = if LongPollClient::serves(proxy) {
        let client = LongPollClient::new(
            ca_bundle,
            opts.addresses,
            opts.connect_timeout,
            IDLE_CONNECTION_TIMEOUT,
        )
        .map_err(|e| ApiError::Config(e.to_string()))?;
        PollTransport::Direct(Arc::new(client))
    } else {
        // Each group's connection goes back to the pool for the moment between two polls:
        // the pool keeps as many as there are groups (reqwest's default, no cap), or every
        // poll of the groups above a cap would open a new TLS connection.
        let poll = forgerunner_http::client_builder()
            .http1_only()
            .pool_idle_timeout(IDLE_CONNECTION_TIMEOUT);
        PollTransport::Proxied(finish_client(poll, ca_bundle, proxy, opts)?)
    };
    Ok(Transport {
        http: finish_client(http, ca_bundle, proxy, opts)?,
        poll,
        has_proxy: forgerunner_http::proxy_of(proxy).is_some(),
        limits: HostLimits::default(),
    })
}

/// Adds the settings both clients of a transport share and builds the client.
fn finish_client(
    builder: reqwest::ClientBuilder,
    ca_bundle: Option<&str>,
    proxy: Option<&str>,
    opts: &HttpOptions,
) -> Result<reqwest::Client, ApiError> {
    // A redirect would take the request past the host allowlist, to wherever the server names
    // (see `forgerunner_http::redirect`): the 3xx itself is the answer.
    let builder = builder
        .connect_timeout(opts.connect_timeout)
        .redirect(forgerunner_http::no_redirects());
    let builder = address_policy::with_policy(builder, opts.addresses);
    let builder = forgerunner_http::with_trust(builder, ca_bundle, proxy).map_err(|e| match e {
        forgerunner_http::TrustError::CaBundle(_) => ApiError::Config(e.to_string()),
        forgerunner_http::TrustError::Proxy => ApiError::Config("proxyUrl is not a valid proxy URL".into()),
    })?;
    builder
        .build()
        .map_err(|e| ApiError::Config(format!("cannot build HTTP client: {e}")))
}

/// A failed exchange: transient, except when every address of the host was refused (a
/// resolution a moment later says the same, and the operator's configuration must change).
fn transport_error(operation: &'static str, e: &reqwest::Error) -> ApiError {
    transport_failure(operation, TransportFailure::from_reqwest(e))
}

/// [`transport_error`] for a failure already described.
fn transport_failure(operation: &'static str, failure: TransportFailure) -> ApiError {
    if failure.is_address_refused() {
        return ApiError::Config(format!("{operation}: {failure}"));
    }
    ApiError::Transport {
        operation,
        message: failure.to_string(),
    }
}

/// The `User-Agent` of every call: JSON with the fields of scaleset's (`client.go`,
/// `SystemInfo` and `userAgent`; `common_client.go`, `setUserAgent`) that apply to us, plus
/// `has_proxy` from ARC's former `UserAgentInfo` (`github/actions/client.go`). GitHub reads
/// them when it debugs a scale set; `scale_set_id` is 0 until the scale set is known, as in
/// ARC's controller.
pub fn user_agent(scale_set_id: i64, has_proxy: bool) -> String {
    serde_json::json!({
        "system": "forgerunner",
        "version": env!("CARGO_PKG_VERSION"),
        "scale_set_id": scale_set_id,
        "subsystem": "forgerunner-github",
        "build_version": env!("CARGO_PKG_VERSION"),
        "kind": "scaleset",
        "has_proxy": has_proxy,
    })
    .to_string()
}

/// Whether a request takes a turn among the requests in flight to its host.
#[derive(Clone, Copy)]
enum Lane {
    /// Admin, REST and queue calls: bounded per host ([`REQUESTS_IN_FLIGHT_PER_HOST`]).
    Bounded,
    /// The message long poll: one per group, on its own client, not bounded.
    Poll,
}

/// How a request is authorized.
#[derive(Clone, Copy)]
pub enum Auth<'a> {
    /// `Authorization: Bearer <token>`.
    Bearer(&'a SecretValue),
    /// `Authorization: RemoteAuth <token>` (runner-registration).
    RemoteAuth(&'a SecretValue),
}

/// A successful response: its status and its body with any BOM removed. `Debug` shows the
/// body's size only: bodies carry tokens and JIT configs.
pub struct Reply {
    /// HTTP status (2xx).
    pub status: u16,
    /// Body bytes.
    pub body: Vec<u8>,
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reply")
            .field("status", &self.status)
            .field("body_bytes", &self.body.len())
            .finish()
    }
}

impl Reply {
    /// Decodes the body as JSON.
    pub fn json<T: DeserializeOwned>(&self, operation: &'static str) -> Result<T, ApiError> {
        serde_json::from_slice(&self.body).map_err(|e| ApiError::BadResponse {
            operation,
            message: truncate(&e.to_string()),
        })
    }
}

/// Error body of the Actions service (`typeName`) and of GitHub REST (`message`).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct ErrorBody {
    type_name: Option<String>,
    message: Option<String>,
}

/// A GitHub client for one config URL and one set of credentials.
#[derive(Debug)]
pub struct GithubClient {
    http: reqwest::Client,
    /// How the long poll travels (see [`PollTransport`]).
    poll: PollTransport,
    has_proxy: bool,
    /// The transport's bound on requests in flight per host (all but the long poll).
    limits: HostLimits,
    /// The scale set this client serves, 0 until known; named in the `User-Agent`.
    scale_set_id: AtomicI64,
    metrics: Arc<Metrics>,
    config: ConfigUrl,
    auth: AuthMethod,
    tokens: TokenCache,
    opts: HttpOptions,
    /// Non-secret id of the credential, the label of the budget gauges.
    credential_id: String,
    /// The latest `X-RateLimit-*` reading of this credential.
    budget: BudgetCell,
    /// Whether this client counts as a user of `credential_id`'s budget gauges.
    holds_gauges: bool,
}

impl GithubClient {
    /// A client for one config URL and credentials over `transport` (from [`build_transport`]).
    pub fn new(
        metrics: Arc<Metrics>,
        config: ConfigUrl,
        auth: AuthMethod,
        transport: Transport,
        opts: HttpOptions,
    ) -> GithubClient {
        GithubClient {
            http: transport.http,
            poll: transport.poll,
            has_proxy: transport.has_proxy,
            limits: transport.limits,
            scale_set_id: AtomicI64::new(0),
            metrics,
            config,
            auth,
            tokens: TokenCache::default(),
            opts,
            credential_id: "unknown".to_owned(),
            budget: BudgetCell::default(),
            holds_gauges: false,
        }
    }

    /// Names the credential in the budget gauges (a non-secret id, see
    /// [`AuthMethod::credential_id`]).
    pub fn with_credential_id(mut self, id: String) -> GithubClient {
        if self.holds_gauges {
            self.metrics.budget.release(FORGE, &self.credential_id);
        }
        self.metrics.budget.hold(FORGE, &id);
        self.holds_gauges = true;
        self.credential_id = id;
        self
    }

    /// The latest API budget GitHub reported for this credential.
    pub fn budget(&self) -> Option<RateBudget> {
        self.budget.get()
    }

    /// Keeps and exports the budget a response reports, if it reports one (REST responses do,
    /// the Actions service's do not).
    fn note_budget(&self, headers: &HeaderMap) {
        if let Some(b) = RateBudget::from_headers(headers) {
            self.budget.update(b);
            self.metrics.budget.set(FORGE, &self.credential_id, &b);
        }
    }

    /// Names the scale set this client serves in the `User-Agent` of later calls.
    pub fn set_scale_set_id(&self, id: i64) {
        self.scale_set_id.store(id, Ordering::Relaxed);
    }

    /// The parsed config URL.
    pub fn config(&self) -> &ConfigUrl {
        &self.config
    }

    /// Sends a request built by `build` (called once per attempt), retrying transient failures.
    /// Each attempt waits for a turn among the transport's requests in flight to the host (see
    /// [`REQUESTS_IN_FLIGHT_PER_HOST`]).
    pub async fn execute(
        &self,
        operation: &'static str,
        timeout: Duration,
        build: impl Fn() -> RequestBuilder,
    ) -> Result<Reply, ApiError> {
        self.execute_in(Lane::Bounded, operation, timeout, build).await
    }

    /// [`GithubClient::execute`] for the message long poll (built with
    /// [`GithubClient::poll_request`]): it holds a connection of its own for up to a minute and
    /// every group has one open, so it takes no turn among the other requests.
    pub async fn execute_poll(
        &self,
        operation: &'static str,
        timeout: Duration,
        build: impl Fn() -> RequestBuilder,
    ) -> Result<Reply, ApiError> {
        self.execute_in(Lane::Poll, operation, timeout, build).await
    }

    async fn execute_in(
        &self,
        lane: Lane,
        operation: &'static str,
        timeout: Duration,
        build: impl Fn() -> RequestBuilder,
    ) -> Result<Reply, ApiError> {
        let mut attempt = 0;
        loop {
            let (http, request) = build().timeout(timeout).build_split();
            let result = self.attempt(lane, operation, http, request).await;
            match result {
                Err(e) if e.is_transient() && attempt < self.opts.max_retries => {
                    let wait_asked = e.retry_after().map(Duration::from_secs);
                    if wait_asked.is_some_and(|w| w > self.opts.retry.cap) {
                        return Err(e);
                    }
                    let wait = self.opts.retry.delay_with_retry_after(attempt, e.retry_after());
                    tracing::debug!(operation, attempt, wait_ms = wait.as_millis() as u64, error = %e, "retrying GitHub request");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// Sends one built request and reads its answer. It takes the request built, not its
    /// builder: a future holds its arguments for as long as it lives, and one long poll per
    /// group is always waiting.
    async fn attempt(
        &self,
        lane: Lane,
        operation: &'static str,
        http: reqwest::Client,
        request: reqwest::Result<reqwest::Request>,
    ) -> Result<Reply, ApiError> {
        // An IP literal skips the resolver, and GitHub's answers name URLs (the Actions
        // service's) that no host check saw.
        if let Ok(r) = &request
            && let Err(e) = address_policy::check_url(self.opts.addresses, r.url())
        {
            return Err(ApiError::Config(format!("{operation}: {e}")));
        }
        // Held until the body is read: over HTTP/1.1 that is as long as the request holds its
        // connection.
        let _turn = match (&request, lane) {
            (Ok(r), Lane::Bounded) => self.limits.acquire(r.url()).await,
            _ => None,
        };
        let started = Instant::now();
        // Boxed: every group's listener task holds a poll in flight, inline, all the time, and
        // a future is as large as its largest branch; boxed, only the branch taken is held.
        let result = match request {
            Err(e) => Err(transport_error(operation, &e)),
            Ok(r) => match (lane, &self.poll) {
                (Lane::Poll, PollTransport::Direct(lean)) => {
                    Box::pin(self.answer_direct(operation, lean, r)).await
                }
                (Lane::Poll, PollTransport::Proxied(poll)) => Box::pin(self.answer(operation, poll, r)).await,
                (Lane::Bounded, _) => Box::pin(self.answer(operation, &http, r)).await,
            },
        };
        let outcome = match &result {
            Ok(r) => status_outcome(r.status, false),
            Err(e) => e.outcome(),
        };
        self.metrics.observe_forge_request(
            ForgeRequestLabels {
                forge: FORGE,
                operation,
                outcome,
            },
            started.elapsed().as_secs_f64(),
        );
        result
    }

    /// Sends `request` on `http` and reads the answer.
    async fn answer(
        &self,
        operation: &'static str,
        http: &reqwest::Client,
        request: reqwest::Request,
    ) -> Result<Reply, ApiError> {
        let resp = http
            .execute(request)
            .await
            .map_err(|e| transport_error(operation, &e))?;
        let status = resp.status();
        let headers = resp.headers().clone();
        self.note_budget(&headers);
        if status.is_redirection() {
            // Not followed (see `finish_client`): its body is of no use either.
            return Err(redirected(operation, status, &headers, resp.url()));
        }
        let body = forgerunner_http::read_capped(resp, reply_cap(status)).await;
        settle(operation, status, &headers, body)
    }

    /// Sends the long poll `request` on the direct poll client and reads the answer.
    async fn answer_direct(
        &self,
        operation: &'static str,
        lean: &LongPollClient,
        request: reqwest::Request,
    ) -> Result<Reply, ApiError> {
        let timeout = request.timeout().copied().unwrap_or(self.opts.poll_timeout);
        let answer = lean
            .get(request.url(), request.headers(), timeout, reply_cap)
            .await
            .map_err(|f| transport_failure(operation, f))?;
        self.note_budget(&answer.headers);
        if answer.status.is_redirection() {
            return Err(redirected(
                operation,
                answer.status,
                &answer.headers,
                request.url(),
            ));
        }
        settle(operation, answer.status, &answer.headers, answer.body)
    }

    fn request(&self, method: Method, url: Url, auth: Auth<'_>) -> RequestBuilder {
        self.request_on(&self.http, method, url, auth)
    }

    fn request_on(&self, http: &reqwest::Client, method: Method, url: Url, auth: Auth<'_>) -> RequestBuilder {
        let value = match auth {
            Auth::Bearer(t) => format!("Bearer {}", t.expose()),
            Auth::RemoteAuth(t) => format!("RemoteAuth {}", t.expose()),
        };
        let agent = user_agent(self.scale_set_id.load(Ordering::Relaxed), self.has_proxy);
        let mut req = http
            .request(method, url)
            .header(reqwest::header::AUTHORIZATION, value);
        if let Ok(v) = HeaderValue::from_str(&agent) {
            req = req.header(reqwest::header::USER_AGENT, v);
        }
        req
    }

    /// Builds a request to an arbitrary URL (message queue) with `auth`.
    pub fn raw_request(&self, method: Method, url: Url, auth: Auth<'_>) -> RequestBuilder {
        self.request(method, url, auth)
    }

    /// Builds the message long poll, for [`GithubClient::execute_poll`], which sends it on
    /// the poll transport: a connection of its own instead of a stream of the connection every
    /// group shares (see [`PollTransport`]).
    pub fn poll_request(&self, url: Url, auth: Auth<'_>) -> RequestBuilder {
        self.request_on(&self.http, Method::GET, url, auth)
    }

    /// Ordinary request timeout.
    pub fn request_timeout(&self) -> Duration {
        self.opts.request_timeout
    }

    /// Long-poll timeout.
    pub fn poll_timeout(&self) -> Duration {
        self.opts.poll_timeout
    }

    /// The admin connection, refreshed through the whole token chain when due.
    pub async fn admin(&self) -> Result<AdminConnection, ApiError> {
        self.tokens.get_or_refresh(|| self.connect()).await
    }

    /// The token GitHub's REST API takes from these credentials: the PAT itself, or a fresh
    /// installation token of the App (minted on each call: callers of REST are rare, the
    /// Actions service calls use the admin connection instead).
    pub async fn rest_token(&self) -> Result<SecretValue, ApiError> {
        Ok(match &self.auth {
            AuthMethod::Pat(t) => t.clone(),
            AuthMethod::App {
                app_id,
                installation_id,
                key,
            } => {
                let jwt = SecretValue::new(
                    key.jwt(app_id)
                        .map_err(|e| ApiError::InvalidCredentials(format!("github_app_private_key: {e}")))?,
                );
                let url = self.rest_url(&format!("app/installations/{installation_id}/access_tokens"))?;
                let reply = self
                    .execute("app_access_token", self.opts.request_timeout, || {
                        no_body(self.request(Method::POST, url.clone(), Auth::Bearer(&jwt)))
                            .header(reqwest::header::ACCEPT, "application/vnd.github+json")
                    })
                    .await?;
                SecretValue::new(reply.json::<TokenReply>("app_access_token")?.token)
            }
        })
    }

    /// Runs the token chain: (App: JWT → installation token) → registration token →
    /// `runner-registration` → Actions service URL and admin token.
    async fn connect(&self) -> Result<AdminConnection, ApiError> {
        let bearer = self.rest_token().await?;
        let url = self.rest_url(&self.config.registration_token_path())?;
        let reply = self
            .execute("registration_token", self.opts.request_timeout, || {
                no_body(self.request(Method::POST, url.clone(), Auth::Bearer(&bearer)))
                    .header(reqwest::header::ACCEPT, "application/vnd.github.v3+json")
            })
            .await?;
        let registration = SecretValue::new(reply.json::<TokenReply>("registration_token")?.token);

        let url = self.rest_url("actions/runner-registration")?;
        let body = serde_json::json!({ "url": self.config.raw, "runner_event": "register" });
        // GitHub sometimes rejects a registration token minted a moment ago: retry 401/403 briefly.
        let mut attempt = 0;
        let reply = loop {
            let result = self
                .execute("runner_registration", self.opts.request_timeout, || {
                    self.request(Method::POST, url.clone(), Auth::RemoteAuth(&registration))
                        .json(&body)
                })
                .await;
            match result {
                Err(e) if matches!(e.status(), Some(401 | 403)) && attempt < REGISTRATION_RETRIES => {
                    tokio::time::sleep(self.opts.registration_retry.delay(attempt)).await;
                    attempt += 1;
                }
                other => break other?,
            }
        };
        let conn: RegistrationReply = reply.json("runner_registration")?;
        if conn.url.is_empty() || conn.token.is_empty() {
            return Err(ApiError::BadResponse {
                operation: "runner_registration",
                message: "empty Actions service URL or token".into(),
            });
        }
        let mut base = conn.url.clone();
        if !base.ends_with('/') {
            base.push('/');
        }
        let url = Url::parse(&base).map_err(|e| ApiError::BadResponse {
            operation: "runner_registration",
            message: format!("Actions service URL is invalid: {e}"),
        })?;
        let exp = jwt_exp(&conn.token);
        Ok(AdminConnection {
            url,
            token: SecretValue::new(conn.token),
            exp,
        })
    }

    /// `path` under the REST API base of the config URL (`https://api.github.com/`, or
    /// `https://<host>/api/v3/` for GHES).
    pub fn rest_url(&self, path: &str) -> Result<Url, ApiError> {
        self.config
            .rest_base
            .join(path)
            .map_err(|e| ApiError::Config(format!("bad REST URL: {e}")))
    }

    /// Calls the Actions service with the admin token at `path` (relative to the service URL),
    /// adding `api-version`. A 401 drops the cached token and retries once with a fresh one.
    pub async fn actions(
        &self,
        operation: &'static str,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&serde_json::Value>,
    ) -> Result<Reply, ApiError> {
        let mut refreshed = false;
        loop {
            let conn = self.admin().await?;
            let mut url = conn
                .url
                .join(path)
                .map_err(|e| ApiError::Config(format!("bad Actions URL: {e}")))?;
            {
                let mut pairs = url.query_pairs_mut();
                for (k, v) in query {
                    pairs.append_pair(k, v);
                }
                pairs.append_pair("api-version", API_VERSION);
            }
            let result = self
                .execute(operation, self.opts.request_timeout, || {
                    let req = self.request(method.clone(), url.clone(), Auth::Bearer(&conn.token));
                    match body {
                        Some(b) => req.json(b),
                        None if [Method::POST, Method::PATCH, Method::PUT].contains(&method) => no_body(req),
                        None => req,
                    }
                })
                .await;
            match result {
                Err(e) if e.status() == Some(401) && !refreshed => {
                    self.tokens.invalidate(&conn.token).await;
                    refreshed = true;
                }
                other => return other,
            }
        }
    }

    /// The Actions service URL for `path` with `api-version`, for calls made with another token.
    pub async fn actions_url(&self, path: &str) -> Result<Url, ApiError> {
        let conn = self.admin().await?;
        let mut url = conn
            .url
            .join(path)
            .map_err(|e| ApiError::Config(format!("bad Actions URL: {e}")))?;
        url.query_pairs_mut().append_pair("api-version", API_VERSION);
        Ok(url)
    }
}

impl Drop for GithubClient {
    fn drop(&mut self) {
        if self.holds_gauges {
            self.metrics.budget.release(FORGE, &self.credential_id);
        }
    }
}

/// Marks a bodyless POST or PATCH as such with `Content-Length: 0`. hyper writes no length for
/// an empty HTTP/1.1 body (`proto/h1/role.rs`, `set_length`), while Go's `net/http`, which is
/// what GitHub sees from ARC, always sends one for these methods, and a strict proxy or GHES
/// front end may answer 411 without it. Never used with a body: an explicit length overrides
/// the body's own.
pub(crate) fn no_body(req: RequestBuilder) -> RequestBuilder {
    req.header(reqwest::header::CONTENT_LENGTH, "0")
}

#[derive(Deserialize)]
struct TokenReply {
    token: String,
}

#[derive(Deserialize)]
struct RegistrationReply {
    #[serde(default)]
    url: String,
    #[serde(default)]
    token: String,
}

/// The most body bytes read of an answer with `status`.
fn reply_cap(status: StatusCode) -> usize {
    if status.is_success() {
        MAX_REPLY_BYTES
    } else {
        MAX_ERROR_BYTES
    }
}

/// The error of an answer that redirected `request` (redirects are never followed).
fn redirected(operation: &'static str, status: StatusCode, headers: &HeaderMap, request: &Url) -> ApiError {
    ApiError::Redirect {
        operation,
        detail: Redirected::from_reply(status, headers, request),
    }
}

/// The reply, or the error, of an answer with `status`, `headers` and `body` (as far as it
/// was read).
fn settle(
    operation: &'static str,
    status: StatusCode,
    headers: &HeaderMap,
    body: Result<Vec<u8>, BodyError>,
) -> Result<Reply, ApiError> {
    let ok = status.is_success();
    let status = status.as_u16();
    match (body, ok) {
        (Err(BodyError::Read(f)), _) => Err(ApiError::Transport {
            operation,
            message: f.to_string(),
        }),
        (Err(e @ BodyError::TooLarge { .. }), true) => Err(ApiError::TooLarge {
            operation,
            what: e.to_string(),
        }),
        // The status says what went wrong; an oversized explanation is dropped.
        (Err(BodyError::TooLarge { .. }), false) => Err(status_error(operation, status, headers, b"")),
        (Ok(mut body), true) => {
            // In place: a long-poll message may be tens of KiB.
            if body.starts_with(BOM) {
                body.drain(..BOM.len());
            }
            Ok(Reply { status, body })
        }
        (Ok(body), false) => Err(status_error(operation, status, headers, strip_bom(&body))),
    }
}

fn status_error(operation: &'static str, status: u16, headers: &HeaderMap, body: &[u8]) -> ApiError {
    let parsed: ErrorBody = serde_json::from_slice(body).unwrap_or_default();
    let message = parsed
        .message
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string());
    let retry_after = forgerunner_http::retry_after_secs(headers);
    let remaining_zero = headers
        .get("x-ratelimit-remaining")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim() == "0");
    let rate_limited = status == 429
        || (status == 403 && (remaining_zero || message.to_ascii_lowercase().contains("rate limit")));
    let retry_after = retry_after.or_else(|| {
        // Primary rate limit: wait until the reset time.
        let reset = headers
            .get("x-ratelimit-reset")?
            .to_str()
            .ok()?
            .trim()
            .parse::<i64>()
            .ok()?;
        let now = jiff::Timestamp::now().as_second();
        (remaining_zero && reset > now)
            .then(|| forgerunner_http::retry_after::clamp_secs(u64::try_from(reset - now).unwrap_or(60)))
    });
    ApiError::Status {
        operation,
        status,
        type_name: parsed.type_name,
        message: truncate(&message),
        retry_after,
        rate_limited,
        request_ids: request_ids(headers),
    }
}

/// The ids GitHub support needs to trace a failed call, from the reply's headers.
fn request_ids(headers: &HeaderMap) -> Option<String> {
    let ids: Vec<String> = [
        ("x-github-request-id", "X-GitHub-Request-Id"),
        ("activityid", "ActivityId"),
    ]
    .into_iter()
    .filter_map(|(header, label)| {
        let value = headers.get(header)?.to_str().ok()?.trim();
        // Ids are short tokens; anything else is not shown.
        (!value.is_empty()
            && value.len() <= 80
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == ':'))
        .then(|| format!("{label} {value}"))
    })
    .collect();
    (!ids.is_empty()).then(|| ids.join(", "))
}

/// Byte helpers kept apart from the client for unit tests.
pub mod bytes_helpers {
    /// The UTF-8 byte order mark, which the Actions service sends before JSON.
    pub const BOM: &[u8] = &[0xEF, 0xBB, 0xBF];

    /// Removes a leading UTF-8 byte order mark.
    pub fn strip_bom(body: &[u8]) -> &[u8] {
        body.strip_prefix(BOM).unwrap_or(body)
    }
}

#[cfg(test)]
mod tests;
