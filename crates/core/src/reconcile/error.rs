//! The reconciler's typed errors, each with a bounded category.

use std::time::Duration;

use kube::runtime::finalizer;

use crate::error::ErrorCategory;
use crate::fence::Fenced;
use crate::forge::ForgeError;
use crate::forge_hosts::HostRefused;
use crate::runner_job::RunnerJobError;

/// Why a reconcile of one `RunnerGroup` failed.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The spec breaks a rule; the message names the field(s).
    #[error("invalid spec: {0}")]
    InvalidSpec(String),
    /// The group's forge is not enabled in this operator.
    #[error("forge {0} is not enabled in this operator (config key forges)")]
    ForgeDisabled(&'static str),
    /// A URL of the spec leaves the operator's forge host allowlist; nothing was sent to it.
    #[error(transparent)]
    ForgeHostNotAllowed(#[from] HostRefused),
    /// The credentials Secret the spec names does not exist.
    #[error("Secret {namespace}/{name} named by the spec's credentials does not exist")]
    SecretNotFound {
        /// Namespace of the group.
        namespace: String,
        /// Secret name.
        name: String,
    },
    /// A ConfigMap the spec names (CA bundle) does not exist or lacks its key.
    #[error("ConfigMap {namespace}/{name} named by the spec is missing or has no key ca.crt")]
    ConfigMapNotFound {
        /// Namespace of the group.
        namespace: String,
        /// ConfigMap name.
        name: String,
    },
    /// A forge backend call failed.
    #[error(transparent)]
    Forge(#[from] ForgeError),
    /// A Kubernetes API call failed.
    #[error("kubernetes {operation} failed: {source}")]
    Kube {
        /// A fixed name of the call, e.g. `create job`.
        operation: &'static str,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// A runner Job or Secret could not be built (object not read from the API server).
    #[error(transparent)]
    Build(#[from] RunnerJobError),
    /// This replica lost the leader lease: the forge write was not attempted.
    #[error(transparent)]
    Fenced(#[from] Fenced),
    /// The finalizer helper failed; wraps apply and cleanup errors.
    // Boxed: the finalizer error contains this type.
    #[error(transparent)]
    Finalizer(Box<finalizer::Error<ReconcileError>>),
}

impl ReconcileError {
    /// A Kubernetes error for the call named `operation`.
    pub fn kube(operation: &'static str) -> impl FnOnce(kube::Error) -> ReconcileError {
        move |source| ReconcileError::Kube { operation, source }
    }

    /// Bounded category for metrics, Event reasons and condition reasons.
    pub fn category(&self) -> ErrorCategory {
        match self {
            ReconcileError::InvalidSpec(_) => ErrorCategory::InvalidSpec,
            ReconcileError::ForgeDisabled(_) => ErrorCategory::ForgeDisabled,
            ReconcileError::ForgeHostNotAllowed(_) => ErrorCategory::ForgeHostNotAllowed,
            ReconcileError::SecretNotFound { .. } => ErrorCategory::SecretNotFound,
            ReconcileError::ConfigMapNotFound { .. } => ErrorCategory::ForgeConfig,
            ReconcileError::Forge(e) => e.category(),
            // Never shown: a fenced replica's status and Event writes are refused too.
            ReconcileError::Kube { .. } | ReconcileError::Build(_) | ReconcileError::Fenced(_) => {
                ErrorCategory::Kubernetes
            }
            ReconcileError::Finalizer(e) => match e.as_ref() {
                finalizer::Error::ApplyFailed(inner) | finalizer::Error::CleanupFailed(inner) => {
                    inner.category()
                }
                _ => ErrorCategory::Kubernetes,
            },
        }
    }

    /// How long the forge asked us to wait, for rate limits.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ReconcileError::Forge(ForgeError::RateLimited { retry_after_seconds }) => {
                Some(Duration::from_secs(*retry_after_seconds))
            }
            ReconcileError::Finalizer(e) => match e.as_ref() {
                finalizer::Error::ApplyFailed(inner) | finalizer::Error::CleanupFailed(inner) => {
                    inner.retry_after()
                }
                _ => None,
            },
            _ => None,
        }
    }
}

impl From<finalizer::Error<ReconcileError>> for ReconcileError {
    fn from(e: finalizer::Error<ReconcileError>) -> Self {
        ReconcileError::Finalizer(Box::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_and_retry_after() {
        let rl = ReconcileError::Forge(ForgeError::RateLimited {
            retry_after_seconds: 42,
        });
        assert_eq!(rl.category(), ErrorCategory::RateLimited);
        assert_eq!(rl.retry_after(), Some(Duration::from_secs(42)));
        let wrapped: ReconcileError = finalizer::Error::ApplyFailed(rl).into();
        assert_eq!(wrapped.category(), ErrorCategory::RateLimited);
        assert_eq!(wrapped.retry_after(), Some(Duration::from_secs(42)));
        let missing = ReconcileError::SecretNotFound {
            namespace: "ci".into(),
            name: "creds".into(),
        };
        assert_eq!(missing.category(), ErrorCategory::SecretNotFound);
        assert!(missing.to_string().contains("ci/creds"));
        assert!(missing.category().needs_user_action());
        let other: ReconcileError = finalizer::Error::<ReconcileError>::UnnamedObject.into();
        assert_eq!(other.category(), ErrorCategory::Kubernetes);
    }
}
