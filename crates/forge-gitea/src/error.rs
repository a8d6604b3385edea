//! The Gitea client's typed errors and their mapping onto core's `ForgeError`.

use forgerunner_core::ForgeError;

use crate::labels::LabelError;
use crate::scope::ScopeError;
use crate::version::VersionError;

/// What went wrong talking to Gitea, or with a group's Gitea settings.
#[derive(Clone, Debug, thiserror::Error)]
pub enum GiteaError {
    /// 401: the token is unknown or expired.
    #[error("Gitea rejected the API token (401) at {scope}; check the Secret's token key")]
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
    /// 404 for the scope itself (unknown org, user or repo, or Actions disabled).
    #[error("{0} does not exist at Gitea, or its Actions are disabled (404)")]
    NotFound(String),
    /// 429.
    #[error("Gitea rate limited the request; retry after {0}s")]
    RateLimited(u64),
    /// 5xx.
    #[error("Gitea answered {0} to {1}")]
    Server(u16, &'static str),
    /// Another 4xx.
    #[error("Gitea refused {1} with {0}")]
    Rejected(u16, &'static str),
    /// Connection failure or timeout.
    #[error("cannot reach Gitea for {operation}: {detail}")]
    Transport {
        /// The operation.
        operation: &'static str,
        /// What failed: kind, origin and causes, never the URL's path or query.
        detail: String,
    },
    /// A 3xx: no forge client follows redirects (they would lead past `forgeHosts.allowed`).
    #[error(
        "Gitea answered the request to {operation} with {detail}; forgerunner does not follow \
         redirects: set spec.gitea.url to the final address"
    )]
    Redirect {
        /// The operation, in words.
        operation: &'static str,
        /// The status and the target's origin, never its path or query.
        detail: forgerunner_http::Redirected,
    },
    /// A 2xx body that does not decode.
    #[error("Gitea sent a malformed response to {0}")]
    BadResponse(&'static str),
    /// A body or a paged listing over its cap; refused whole, never truncated.
    #[error("Gitea returned a response too large to {operation}: {what}")]
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
    #[error("spec.gitea.labels: {0}")]
    Label(#[from] LabelError),
    /// Scope fields of the spec do not describe a scope.
    #[error(transparent)]
    Scope(#[from] ScopeError),
    /// `spec.gitea` is missing or its URL is unusable.
    #[error("{0}")]
    Spec(String),
    /// The credentials Secret lacks the `token` key.
    #[error("Secret {0} has no non-empty key \"token\" (the Gitea API token)")]
    MissingToken(String),
    /// The credentials Secret holds a fixed registration token, but the group is not global.
    ///
    /// Gitea cannot tell the operator which scope a registration token belongs to, and the one
    /// users have at hand, `GITEA_RUNNER_REGISTRATION_TOKEN`, is the *global* token
    /// (`services/actions/init.go` `initGlobalRunnerToken`: owner 0, repo 0). `Register` gives a
    /// runner its token's scope, so an org/user/repo group would get global runners that take
    /// every repository's jobs, never show in the scope's runner list and cannot be deleted
    /// there. With the API token (always required) the scope's own token is fetched instead.
    #[error(
        "Secret {secret} has the key \"registration_token\", which is only allowed with \
         spec.gitea.scope: global: a fixed registration token such as Gitea's instance-wide \
         GITEA_RUNNER_REGISTRATION_TOKEN registers global runners, which would take jobs from every \
         repository on the instance and never appear in the runner list of {scope}; remove the key \
         so the operator creates a registration token for {scope} with the API token (key \"token\")"
    )]
    FixedTokenOutsideGlobal {
        /// The credentials Secret's name.
        secret: String,
        /// The group's scope (display form, e.g. "organization acme").
        scope: String,
    },
    /// User scope, but the token belongs to someone else.
    #[error(
        "spec.gitea.user is {spec:?} but the token belongs to {actual:?}; /user/actions lists the token user's jobs"
    )]
    WrongUser {
        /// The user in the spec.
        spec: String,
        /// The token's login.
        actual: String,
    },
}

impl From<GiteaError> for ForgeError {
    fn from(e: GiteaError) -> ForgeError {
        let msg = e.to_string();
        match e {
            GiteaError::Unauthenticated { .. }
            | GiteaError::Forbidden { .. }
            | GiteaError::WrongUser { .. } => ForgeError::Unauthorized(msg),
            GiteaError::NotFound(_) => ForgeError::NotFound(msg),
            GiteaError::RateLimited(s) => ForgeError::RateLimited {
                retry_after_seconds: s,
            },
            GiteaError::Server(..)
            | GiteaError::Transport { .. }
            | GiteaError::BadResponse(_)
            | GiteaError::TooLarge { .. } => ForgeError::Unavailable(msg),
            GiteaError::Rejected(..)
            | GiteaError::Redirect { .. }
            | GiteaError::Version(_)
            | GiteaError::Label(_)
            | GiteaError::Scope(_)
            | GiteaError::Spec(_) => ForgeError::Config(msg),
            GiteaError::MissingToken(_) | GiteaError::FixedTokenOutsideGlobal { .. } => {
                ForgeError::InvalidCredentials(msg)
            }
        }
    }
}
