//! The Forgejo client's typed errors and their mapping onto core's `ForgeError`.

use forgerunner_core::ForgeError;
use forgerunner_core::labels::LabelError;
use forgerunner_core::metrics::Outcome;

use crate::scope::ScopeError;
use crate::version::VersionError;

/// What went wrong talking to Forgejo, or with a group's Forgejo settings.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ForgejoError {
    /// 401: the token is unknown or expired.
    #[error("Forgejo rejected the API token (401) at {scope}; check the Secret's token key")]
    Unauthenticated {
        /// Where it happened (scope display).
        scope: String,
    },
    /// 403: the token lacks a right.
    #[error("the API token may not {operation} at {scope} (403); it needs {needs}")]
    Forbidden {
        /// The operation, in words.
        operation: &'static str,
        /// Where.
        scope: String,
        /// Which token right is missing.
        needs: &'static str,
    },
    /// 404: what was asked for does not exist (or Actions are disabled there).
    #[error("{what} not found at Forgejo (404 to {operation})")]
    NotFound {
        /// What is missing, in words.
        what: String,
        /// The operation, in words.
        operation: &'static str,
    },
    /// 429: retry after this many seconds.
    #[error("Forgejo rate limited the request; retry after {0}s")]
    RateLimited(u64),
    /// 5xx.
    #[error("Forgejo answered {0} to {1}")]
    Server(u16, &'static str),
    /// Another 4xx.
    #[error("Forgejo refused {1} with {0}")]
    Rejected(u16, &'static str),
    /// Connection failure or timeout.
    #[error("cannot reach Forgejo for {operation}: {detail}")]
    Transport {
        /// The operation.
        operation: &'static str,
        /// What failed: kind, origin and causes, never the URL's path or query.
        detail: String,
    },
    /// A 3xx: no forge client follows redirects (they would lead past `forgeHosts.allowed`).
    #[error(
        "Forgejo answered the request to {operation} with {detail}; forgerunner does not follow \
         redirects: set spec.forgejo.url to the final address"
    )]
    Redirect {
        /// The operation, in words.
        operation: &'static str,
        /// The status and the target's origin, never its path or query.
        detail: forgerunner_http::Redirected,
    },
    /// A 2xx body that does not decode.
    #[error("Forgejo sent a malformed response to {0}")]
    BadResponse(&'static str),
    /// A body or a paged listing over its cap; refused whole, never truncated.
    #[error("Forgejo returned a response too large to {operation}: {what}")]
    TooLarge {
        /// The operation, in words.
        operation: &'static str,
        /// Which cap it passed (never the body).
        what: String,
    },
    /// The server version cannot be used.
    #[error(transparent)]
    Version(#[from] VersionError),
    /// A malformed label in the spec.
    #[error("spec.forgejo.labels: {0}")]
    Label(#[from] LabelError),
    /// Scope fields of the spec do not describe a scope.
    #[error(transparent)]
    Scope(#[from] ScopeError),
    /// `spec.forgejo` is missing, or its URL, proxy or CA bundle is unusable.
    #[error("{0}")]
    Spec(String),
    /// The credentials Secret lacks the `token` key.
    #[error("Secret {0} has no non-empty key \"token\" (the Forgejo API token)")]
    MissingToken(String),
    /// `scope: user` names another user than the token's owner; Forgejo's `/user/actions/…`
    /// routes always act for the token's owner.
    #[error(
        "spec.forgejo.user is {spec:?} but the token belongs to {actual:?}; Forgejo lists jobs and makes runners for the token's own user: use a token of {spec:?} or set user to {actual:?}"
    )]
    WrongUser {
        /// The user in the spec.
        spec: String,
        /// The token's login.
        actual: String,
    },
}

impl ForgejoError {
    /// The metric outcome of a failed request.
    pub fn outcome(&self) -> Outcome {
        match self {
            ForgejoError::Unauthenticated { .. } | ForgejoError::Forbidden { .. } => Outcome::Unauthorized,
            ForgejoError::NotFound { .. } => Outcome::NotFound,
            ForgejoError::RateLimited(_) => Outcome::RateLimited,
            ForgejoError::Server(..) => Outcome::ServerError,
            ForgejoError::Transport { .. } => Outcome::Transport,
            ForgejoError::BadResponse(_) | ForgejoError::TooLarge { .. } => Outcome::BadResponse,
            _ => Outcome::ClientError,
        }
    }

    /// Whether a retry of the same request may succeed soon. An over-cap answer is not: the
    /// same server would send it again, and each retry costs a cap's worth of download.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ForgejoError::Server(..) | ForgejoError::Transport { .. } | ForgejoError::BadResponse(_)
        )
    }
}

impl From<ForgejoError> for ForgeError {
    fn from(e: ForgejoError) -> ForgeError {
        let msg = e.to_string();
        match e {
            ForgejoError::Unauthenticated { .. }
            | ForgejoError::Forbidden { .. }
            | ForgejoError::WrongUser { .. } => ForgeError::Unauthorized(msg),
            ForgejoError::NotFound { .. } => ForgeError::NotFound(msg),
            ForgejoError::RateLimited(s) => ForgeError::RateLimited {
                retry_after_seconds: s,
            },
            ForgejoError::Server(..)
            | ForgejoError::Transport { .. }
            | ForgejoError::BadResponse(_)
            | ForgejoError::TooLarge { .. } => ForgeError::Unavailable(msg),
            ForgejoError::Rejected(..)
            | ForgejoError::Redirect { .. }
            | ForgejoError::Version(_)
            | ForgejoError::Label(_)
            | ForgejoError::Scope(_)
            | ForgejoError::Spec(_) => ForgeError::Config(msg),
            ForgejoError::MissingToken(_) => ForgeError::InvalidCredentials(msg),
        }
    }
}
