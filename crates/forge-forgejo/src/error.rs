//! The Forgejo client's typed errors and their mapping onto core's `ForgeError`.

use forgerunner_core::ForgeError;
use forgerunner_core::labels::LabelError;
use forgerunner_http::RequestError;

use crate::scope::ScopeError;
use crate::version::VersionError;

/// What went wrong talking to Forgejo, or with a group's Forgejo settings.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ForgejoError {
    /// A request failed: the answer, or none, in Forgejo's words.
    #[error(transparent)]
    Request(#[from] RequestError),
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

impl From<ForgejoError> for ForgeError {
    fn from(e: ForgejoError) -> ForgeError {
        let msg = e.to_string();
        match e {
            ForgejoError::Request(e) => e.into(),
            ForgejoError::WrongUser { .. } => ForgeError::Unauthorized(msg),
            ForgejoError::Version(_)
            | ForgejoError::Label(_)
            | ForgejoError::Scope(_)
            | ForgejoError::Spec(_) => ForgeError::Config(msg),
            ForgejoError::MissingToken(_) => ForgeError::InvalidCredentials(msg),
        }
    }
}
