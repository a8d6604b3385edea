//! The Gitea REST client: version, job and runner lists (paged), registration tokens,
//! runner deletion. Retries transient failures with backoff and honours 429 `Retry-After`.
//! Trusts the group's extra CA bundle and sends through its proxy, as the other forges do.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use forgerunner_core::forge::SecretValue;
use forgerunner_core::metrics::{ForgeRequestLabels, Metrics, Outcome};
use forgerunner_http::{BodyError, ListingBudget, ListingError, ListingLimits, TransportFailure, TrustError};
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use url::Url;

use crate::error::GiteaError;
use crate::scope::{Access, Scope};
use crate::types::{
    RegistrationTokenBody, Runner, RunnersPage, ServerVersion, User, WorkflowJob, WorkflowJobsPage,
};

/// Page size for every list (Gitea caps `limit` at 50 by default).
pub const PAGE_LIMIT: u32 = 50;
/// Largest body of one list page: 50 items take tens of KiB, so only a hostile or broken
/// server comes near it.
const MAX_PAGE_BYTES: usize = 4 * 1024 * 1024;
/// Largest body of any other answer (version, user, token, delete): a handful of fields.
const MAX_SMALL_BYTES: usize = 64 * 1024;
/// Wait assumed when a 429 names none (or an unreadable one).
const DEFAULT_RETRY_AFTER_SECS: u64 = 10;

/// Tunables of the HTTP client; the defaults suit production.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Whole-request timeout.
    pub request_timeout: Duration,
    /// TCP/TLS connect timeout.
    pub connect_timeout: Duration,
    /// Attempts per request for 5xx, transport errors and short 429s (at least 1).
    pub max_attempts: u32,
    /// First backoff after a transient failure; doubles per attempt.
    pub backoff: Duration,
    /// A 429 whose `Retry-After` is at most this long is waited out inline; longer ones are
    /// returned as `RateLimited` so the reconciler requeues.
    pub max_inline_retry_after: Duration,
    /// Extra PEM CA certificates to trust (`spec.gitea.caBundleConfigMap`).
    pub ca_bundle: Option<String>,
    /// Proxy for every request (`spec.gitea.proxyUrl`); may carry credentials, never logged.
    pub proxy: Option<String>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            request_timeout: Duration::from_secs(15),
            connect_timeout: Duration::from_secs(5),
            max_attempts: 3,
            backoff: Duration::from_millis(250),
            max_inline_retry_after: Duration::from_secs(2),
            ca_bundle: None,
            proxy: None,
        }
    }
}

/// One kind of request; the closed set used as metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// `GET /version`.
    Version,
    /// `GET /user`.
    User,
    /// `GET …/actions/jobs`.
    ListJobs,
    /// `POST …/registration-token`.
    RegistrationToken,
    /// `GET …/actions/runners`.
    ListRunners,
    /// `DELETE …/actions/runners/{id}`.
    DeleteRunner,
}

impl Operation {
    /// Metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Version => "get_version",
            Operation::User => "get_user",
            Operation::ListJobs => "list_jobs",
            Operation::RegistrationToken => "registration_token",
            Operation::ListRunners => "list_runners",
            Operation::DeleteRunner => "delete_runner",
        }
    }

    fn words(self) -> &'static str {
        match self {
            Operation::Version => "read the server version",
            Operation::User => "read its own user",
            Operation::ListJobs => "list Actions jobs",
            Operation::RegistrationToken => "create a runner registration token",
            Operation::ListRunners => "list runners",
            Operation::DeleteRunner => "delete a runner",
        }
    }

    /// The right the operation needs at its scope. Listing runners only reads, yet Gitea
    /// guards it like the writes, with the owner check (`addActionsRoutes`).
    fn access(self) -> Access {
        match self {
            Operation::RegistrationToken | Operation::DeleteRunner => Access::Write,
            Operation::ListRunners => Access::OwnerRead,
            Operation::Version | Operation::User | Operation::ListJobs => Access::Read,
        }
    }

    fn body_cap(self) -> usize {
        match self {
            Operation::ListJobs | Operation::ListRunners => MAX_PAGE_BYTES,
            _ => MAX_SMALL_BYTES,
        }
    }
}

/// The runners at a scope, as one paged listing saw them.
#[derive(Clone, Debug, Default)]
pub struct RunnerListing {
    /// The runners, each id once.
    pub runners: Vec<Runner>,
    /// Whether the pages fit together: no runner on two pages, every page telling the same
    /// `total_count`, and that many runners seen. Gitea pages runners in `last_online DESC`
    /// order (`FindRunnerOptions.ToOrders`, `models/actions/runner.go`), which every runner
    /// call rewrites (`withRunner`, `routers/api/actions/runner/interceptor.go`): a runner
    /// that polls between two page requests moves to the head and is on neither page, while
    /// the row pushed over the page boundary shows up twice. A registration or deletion
    /// between pages changes the count. Only a complete listing tells that a runner missing
    /// from it is not registered; a single page always is one snapshot.
    pub complete: bool,
}

/// Result of deleting a runner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// Gitea deleted it (204).
    Deleted,
    /// Gitea did not know it (404): already gone.
    AlreadyGone,
}

/// A client for one Gitea instance and one API token.
pub struct GiteaClient {
    http: reqwest::Client,
    api: Url,
    token: SecretValue,
    metrics: Arc<Metrics>,
    opts: ClientOptions,
    /// Set by a 429: no request is sent before this instant.
    blocked_until: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for GiteaClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GiteaClient")
            .field("api", &self.api.as_str())
            .finish_non_exhaustive()
    }
}

/// `Retry-After` in seconds, clamped by the shared parser; missing or odd values mean 10 s.
fn retry_after(headers: &HeaderMap) -> u64 {
    forgerunner_http::retry_after_secs(headers).unwrap_or(DEFAULT_RETRY_AFTER_SECS)
}

fn transport_error(op: Operation, failure: &TransportFailure) -> GiteaError {
    GiteaError::Transport {
        operation: op.as_str(),
        detail: failure.to_string(),
    }
}

fn listing_error(op: Operation, e: ListingError) -> GiteaError {
    GiteaError::TooLarge {
        operation: op.words(),
        what: e.to_string(),
    }
}

impl GiteaClient {
    /// A client for the instance at `base_url` (e.g. `https://gitea.example.com/sub`).
    pub fn new(
        base_url: &str,
        token: SecretValue,
        metrics: Arc<Metrics>,
        opts: ClientOptions,
    ) -> Result<GiteaClient, GiteaError> {
        let mut api = Url::parse(base_url.trim())
            .map_err(|e| GiteaError::Spec(format!("spec.gitea.url {base_url:?} is not a URL: {e}")))?;
        if !matches!(api.scheme(), "http" | "https") || api.cannot_be_a_base() || api.host().is_none() {
            return Err(GiteaError::Spec(format!(
                "spec.gitea.url {base_url:?} must be an http(s) URL"
            )));
        }
        api.set_query(None);
        api.set_fragment(None);
        api.path_segments_mut()
            .map_err(|_| GiteaError::Spec(format!("spec.gitea.url {base_url:?} cannot hold a path")))?
            .pop_if_empty()
            .extend(["api", "v1"]);
        let builder = reqwest::Client::builder()
            .timeout(opts.request_timeout)
            .connect_timeout(opts.connect_timeout)
            .user_agent(concat!("forgerunner/", env!("CARGO_PKG_VERSION")));
        let builder = forgerunner_http::with_trust(builder, opts.ca_bundle.as_deref(), opts.proxy.as_deref())
            .map_err(|e| match e {
                TrustError::CaBundle(_) => GiteaError::Spec(e.to_string()),
                TrustError::Proxy => GiteaError::Spec("spec.gitea.proxyUrl is not a valid proxy URL".into()),
            })?;
        let http = builder
            .build()
            .map_err(|e| GiteaError::Spec(format!("cannot build the HTTP client: {e}")))?;
        Ok(GiteaClient {
            http,
            api,
            token,
            metrics,
            opts,
            blocked_until: Mutex::new(None),
        })
    }

    fn url(&self, segments: &[&str], query: &[(&str, String)]) -> Url {
        let mut url = self.api.clone();
        if let Ok(mut p) = url.path_segments_mut() {
            p.extend(segments);
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
                forge: "gitea",
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

    /// One HTTP exchange: status mapping, body read, decode. Records one metric sample.
    async fn attempt<T>(
        &self,
        op: Operation,
        method: &Method,
        url: &Url,
        scope: Option<&Scope>,
        decode: &(dyn Fn(&[u8]) -> Option<T> + Sync),
    ) -> Result<(T, HeaderMap), GiteaError> {
        if let Some(left) = self.rate_limit_remaining() {
            return Err(GiteaError::RateLimited(left));
        }
        let started = Instant::now();
        let where_ = || scope.map_or_else(|| "the instance".to_string(), ToString::to_string);
        let sent = self
            .http
            .request(method.clone(), url.clone())
            .header(AUTHORIZATION, format!("token {}", self.token.expose()))
            .header(ACCEPT, "application/json")
            .send()
            .await;
        let resp = match sent {
            Ok(r) => r,
            Err(e) => {
                let err = transport_error(op, &TransportFailure::from_reqwest(&e));
                self.observe(op, err.outcome(), started);
                return Err(err);
            }
        };
        let status = resp.status();
        let headers = resp.headers().clone();
        let result = if status.is_success() {
            match forgerunner_http::read_capped(resp, op.body_cap()).await {
                Ok(body) => decode(&body).ok_or(GiteaError::BadResponse(op.as_str())),
                Err(e @ BodyError::TooLarge { .. }) => Err(GiteaError::TooLarge {
                    operation: op.words(),
                    what: e.to_string(),
                }),
                Err(BodyError::Read(f)) => Err(transport_error(op, &f)),
            }
        } else {
            Err(match status {
                StatusCode::UNAUTHORIZED => GiteaError::Unauthenticated { scope: where_() },
                StatusCode::FORBIDDEN => GiteaError::Forbidden {
                    operation: op.words(),
                    scope: where_(),
                    needs: scope.map_or("a valid token", |s| s.rights_hint(op.access())),
                },
                StatusCode::NOT_FOUND => GiteaError::NotFound(where_()),
                StatusCode::TOO_MANY_REQUESTS => {
                    let secs = retry_after(&headers);
                    self.block_for(secs);
                    GiteaError::RateLimited(secs)
                }
                s if s.is_server_error() => GiteaError::Server(s.as_u16(), op.as_str()),
                s => GiteaError::Rejected(s.as_u16(), op.as_str()),
            })
        };
        self.observe(
            op,
            match &result {
                Ok(_) => Outcome::Success,
                Err(e) => e.outcome(),
            },
            started,
        );
        result.map(|v| (v, headers))
    }

    /// Sends with retries: transient failures back off exponentially; a 429 with a short
    /// `Retry-After` is waited out, a long one is returned.
    async fn request<T>(
        &self,
        op: Operation,
        method: Method,
        url: Url,
        scope: Option<&Scope>,
        decode: &(dyn Fn(&[u8]) -> Option<T> + Sync),
    ) -> Result<(T, HeaderMap), GiteaError> {
        let attempts = self.opts.max_attempts.max(1);
        let mut backoff = self.opts.backoff;
        let mut n = 1;
        loop {
            match self.attempt(op, &method, &url, scope, decode).await {
                Ok(v) => return Ok(v),
                Err(GiteaError::RateLimited(secs))
                    if n < attempts && Duration::from_secs(secs) <= self.opts.max_inline_retry_after =>
                {
                    tokio::time::sleep(Duration::from_secs(secs)).await;
                }
                Err(e) if n < attempts && e.is_transient() => {
                    tracing::debug!(operation = op.as_str(), error = %e, "retrying Gitea request");
                    tokio::time::sleep(backoff).await;
                    backoff = backoff.saturating_mul(2);
                }
                Err(e) => return Err(e),
            }
            n += 1;
        }
    }

    async fn get_json<T: DeserializeOwned>(
        &self,
        op: Operation,
        url: Url,
        scope: Option<&Scope>,
    ) -> Result<T, GiteaError> {
        let decode = |b: &[u8]| serde_json::from_slice::<T>(b).ok();
        self.request(op, Method::GET, url, scope, &decode)
            .await
            .map(|(v, _)| v)
    }

    /// One list page and the size of its body, which the listing's budget counts.
    async fn get_page<T: DeserializeOwned>(
        &self,
        op: Operation,
        url: Url,
        scope: &Scope,
    ) -> Result<(T, usize), GiteaError> {
        let decode = |b: &[u8]| serde_json::from_slice::<T>(b).ok().map(|v| (v, b.len()));
        self.request(op, Method::GET, url, Some(scope), &decode)
            .await
            .map(|(v, _)| v)
    }

    /// The server's version string (`GET /version`).
    pub async fn version(&self) -> Result<String, GiteaError> {
        let v: ServerVersion = self
            .get_json(Operation::Version, self.url(&["version"], &[]), None)
            .await?;
        Ok(v.version)
    }

    /// The token user's login (`GET /user`).
    pub async fn current_user(&self) -> Result<String, GiteaError> {
        let u: User = self
            .get_json(Operation::User, self.url(&["user"], &[]), None)
            .await?;
        Ok(u.login)
    }

    /// Every job at `scope` whose status is one of `statuses` (API words, OR-ed), across all
    /// pages, deduplicated by id. Pages until the items seen reach `total_count`, since
    /// Gitea 1.25/1.26 set no order and may cap `limit` lower than asked. A listing over
    /// [`ListingLimits::FORGE_DEFAULT`] fails whole (see [`ListingBudget`] for why).
    pub async fn list_jobs(&self, scope: &Scope, statuses: &[&str]) -> Result<Vec<WorkflowJob>, GiteaError> {
        let op = Operation::ListJobs;
        let mut budget = ListingBudget::new(ListingLimits::FORGE_DEFAULT);
        let mut by_id = BTreeMap::new();
        let mut seen = 0i64;
        loop {
            let page = budget.next_page().map_err(|e| listing_error(op, e))?;
            let mut query: Vec<(&str, String)> = statuses.iter().map(|s| ("status", s.to_string())).collect();
            query.push(("page", page.to_string()));
            query.push(("limit", PAGE_LIMIT.to_string()));
            let url = self.url(&scope.jobs_path(), &query);
            let (body, bytes): (WorkflowJobsPage, usize) = self.get_page(op, url, scope).await?;
            let n = body.jobs.len();
            budget.charge(n, bytes).map_err(|e| listing_error(op, e))?;
            seen += n as i64;
            for j in body.jobs {
                by_id.insert(j.id, j);
            }
            if n == 0 || seen >= body.total_count {
                break;
            }
        }
        Ok(by_id.into_values().collect())
    }

    /// Every runner registered at `scope`, across pages, within the same limits as jobs, and
    /// whether the pages fit together (see [`RunnerListing::complete`]).
    pub async fn list_runners(&self, scope: &Scope) -> Result<RunnerListing, GiteaError> {
        let op = Operation::ListRunners;
        let mut budget = ListingBudget::new(ListingLimits::FORGE_DEFAULT);
        let mut by_id = BTreeMap::new();
        let mut seen = 0i64;
        let mut repeated = false;
        let mut totals = BTreeSet::new();
        loop {
            let page = budget.next_page().map_err(|e| listing_error(op, e))?;
            let query = [("page", page.to_string()), ("limit", PAGE_LIMIT.to_string())];
            let url = self.url(&scope.runners_path(), &query);
            let (body, bytes): (RunnersPage, usize) = self.get_page(op, url, scope).await?;
            let n = body.runners.len();
            budget.charge(n, bytes).map_err(|e| listing_error(op, e))?;
            seen += n as i64;
            totals.insert(body.total_count);
            for r in body.runners {
                // The later page's row wins: it is the fresher one.
                repeated |= by_id.insert(r.id, r).is_some();
            }
            if n == 0 || seen >= body.total_count {
                break;
            }
        }
        let distinct = i64::try_from(by_id.len()).unwrap_or(i64::MAX);
        Ok(RunnerListing {
            complete: !repeated && totals.len() == 1 && totals.first() == Some(&distinct),
            runners: by_id.into_values().collect(),
        })
    }

    /// The scope's registration token (`POST …/registration-token`; does not rotate it).
    pub async fn registration_token(&self, scope: &Scope) -> Result<SecretValue, GiteaError> {
        let url = self.url(&scope.registration_token_path(), &[]);
        let decode = |b: &[u8]| {
            serde_json::from_slice::<RegistrationTokenBody>(b)
                .ok()
                .filter(|t| !t.token.is_empty())
                .map(|t| SecretValue::new(t.token))
        };
        self.request(
            Operation::RegistrationToken,
            Method::POST,
            url,
            Some(scope),
            &decode,
        )
        .await
        .map(|(v, _)| v)
    }

    /// Deletes runner `id` at `scope`; 404 means it is already gone.
    pub async fn delete_runner(&self, scope: &Scope, id: i64) -> Result<DeleteOutcome, GiteaError> {
        let id = id.to_string();
        let mut segs = scope.runners_path();
        segs.push(&id);
        let url = self.url(&segs, &[]);
        let decode = |_: &[u8]| Some(());
        match self
            .request(Operation::DeleteRunner, Method::DELETE, url, Some(scope), &decode)
            .await
        {
            Ok(_) => Ok(DeleteOutcome::Deleted),
            Err(GiteaError::NotFound(_)) => Ok(DeleteOutcome::AlreadyGone),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests;
