//! The Gitea client's typed errors and their mapping onto core's `ForgeError`.

use forgerunner_core::ForgeError;
use forgerunner_http::RequestError;

use crate::labels::LabelError;
use crate::scope::ScopeError;
use crate::version::VersionError;

/// What went wrong talking to Gitea, or with a group's Gitea settings.
#[derive(Clone, Debug, thiserror::Error)]
pub enum GiteaError {
    /// A request failed: the answer, or none, in Gitea's words.
    #[error(transparent)]
    Request(#[from] RequestError),
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
            GiteaError::Request(e) => e.into(),
            GiteaError::WrongUser { .. } => ForgeError::Unauthorized(msg),
            GiteaError::Version(_) | GiteaError::Label(_) | GiteaError::Scope(_) | GiteaError::Spec(_) => {
                ForgeError::Config(msg)
            }
            GiteaError::MissingToken(_) | GiteaError::FixedTokenOutsideGlobal { .. } => {
                ForgeError::InvalidCredentials(msg)
            }
        }
    }
}
