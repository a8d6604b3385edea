//! The Forgejo REST transport on top of the skeleton Forgejo shares with Gitea
//! ([`forgerunner_http::rest`]: URLs, `Authorization: token …`, timeouts, bounded retries on
//! 5xx/transport/garbage, 429 `Retry-After` (clamped) and size-capped body reads), and how its
//! failures are worded. The endpoints themselves are in `requests`.

use std::sync::Arc;

use forgerunner_core::forge::SecretValue;
use forgerunner_core::metrics::Metrics;
pub use forgerunner_http::rest::ClientOptions;
use forgerunner_http::rest::{Api, Call, CallError, Reply, RestClient};
pub use forgerunner_http::rest::{MAX_LIST_BYTES, MAX_SMALL_BYTES};
use forgerunner_http::{Asked, RequestError};
use reqwest::Method;
use url::Url;

use crate::error::ForgejoError;
use crate::scope::{Routes, Scope};

/// What the shared client needs to know about Forgejo.
pub(crate) const FORGEJO: Api = Api {
    forge: "forgejo",
    name: "Forgejo",
    spec: "spec.forgejo",
    lift_block_after_wait: true,
};

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

    /// Whether a transient failure may be retried: creating a runner is not idempotent, and a
    /// retry after a lost answer would leave a second runner behind.
    fn idempotent(self, method: &Method) -> bool {
        !(self.writes() && *method == Method::POST)
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

/// A client for one Forgejo instance and one API token.
#[derive(Debug)]
pub struct ForgejoClient {
    rest: RestClient,
}

/// The forge's pool makes clients with the group's trust settings.
impl From<RestClient> for ForgejoClient {
    fn from(rest: RestClient) -> ForgejoClient {
        ForgejoClient { rest }
    }
}

impl Target<'_> {
    /// A failed exchange in Forgejo's words: what was done, where, and what is missing.
    pub(crate) fn error(self, e: CallError) -> ForgejoError {
        let op = self.op;
        let where_ = Scope::describe(self.scope);
        let missing = self.missing.map_or_else(
            || format!("{where_} (or its Actions are disabled)"),
            str::to_string,
        );
        let asked = Asked {
            operation: op.as_str(),
            words: op.words(),
            needs: self.scope.map_or("a valid token", |s| s.rights_hint(op.writes())),
            not_found: format!("{missing} not found at Forgejo (404 to {})", op.words()),
            scope: where_,
        };
        ForgejoError::Request(RequestError::new(FORGEJO, asked, e))
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
        let rest = RestClient::new(FORGEJO, base_url, token, metrics, opts, ca_bundle, proxy)
            .map_err(|e| ForgejoError::Spec(e.to_string()))?;
        Ok(ForgejoClient { rest })
    }

    /// `<base>/<prefix…>/<segments…>?query`, segments escaped.
    pub(crate) fn url(&self, prefix: &[&str], segments: &[&str], query: &[(&str, String)]) -> Url {
        self.rest.url(prefix, segments, query)
    }

    /// Sends with the shared client's bounded retries and words a failure for Forgejo.
    pub(crate) async fn request<T>(
        &self,
        t: Target<'_>,
        method: Method,
        url: Url,
        body: Option<serde_json::Value>,
        decode: &(dyn Fn(&[u8]) -> Option<T> + Sync),
    ) -> Result<Reply<T>, ForgejoError> {
        let call = Call {
            operation: t.op.as_str(),
            idempotent: t.op.idempotent(&method),
            method,
            url,
            body: body.as_ref(),
            cap: t.op.body_cap(),
        };
        self.rest.send(&call, decode).await.map_err(|e| t.error(e))
    }
}

#[cfg(test)]
mod tests;
