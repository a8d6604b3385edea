//! The reconciler's typed errors, each with a bounded category.

use std::fmt;
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
    /// A forge call outlasted its deadline; the pass gave up so the reconcile slot goes to
    /// another group.
    #[error(
        "the forge did not finish {call} within {}s (it accepted the connection and answered too \
         slowly or not at all); other groups are not held up, and this one retries with backoff",
        after.as_secs()
    )]
    ForgeTimeout {
        /// The forge call (`observe`, `runner_credentials`, `remove_runner`, `shutdown`).
        call: &'static str,
        /// The deadline it outlasted.
        after: Duration,
    },
    /// A `<group>-runner` object the group's runners need exists without an owner reference to
    /// this group (made by someone else, or by an earlier group of the same name). It is left
    /// exactly as it is: taking it over would hand the hooks' rights to whoever it already
    /// binds, and make deleting the group delete it.
    #[error(
        "{kind} {namespace}/{name} exists and is not owned by this RunnerGroup ({owners}); \
         forgerunner never takes over objects it did not create: rename the group, or remove or \
         rename that {kind}"
    )]
    RunnerRbacConflict {
        /// `ServiceAccount` or `RoleBinding`.
        kind: &'static str,
        /// Namespace of the group.
        namespace: String,
        /// Name of the object.
        name: String,
        /// Its owners as `kind/name`, or `no owner`.
        owners: String,
    },
    /// The group's container mode needs runner container hooks and this operator is configured
    /// without them (config key `runnerHooks.clusterRole`).
    #[error(
        "this container mode runs job containers through the runner container hooks, which this \
         installation does not grant: set the chart value rbac.runnerContainerHooks=true (operator \
         config key runnerHooks.clusterRole), or remove spec.containerMode"
    )]
    RunnerHooksDisabled,
    /// An object of the group's shared cache (`spec.cache`, named `<group>-actions-cache`) exists
    /// and is not the group's own: no owner reference to this group (the Secret: none to the
    /// group's cache Deployment). It is left exactly as it is and no runner starts: a runner
    /// pod would mount that Secret as its config.
    #[error(
        "{kind} {namespace}/{name} exists and is not owned by this RunnerGroup ({owners}); \
         forgerunner never takes over objects it did not create: remove or rename that {kind}, \
         or remove {field}"
    )]
    CacheConflict {
        /// The spec field asking for the object: `spec.cache`, or `spec.dockerCache` for a
        /// claim of the Docker cache pool (`<group>-docker-<n>`).
        field: &'static str,
        /// `Deployment`, `Service`, `PersistentVolumeClaim`, `NetworkPolicy` or `Secret`.
        kind: &'static str,
        /// Namespace of the group.
        namespace: String,
        /// Name of the object.
        name: String,
        /// Its owners as `kind/name`, or `no owner`.
        owners: String,
    },
    /// A runner's Secret name is taken by a Secret this runner's Job does not own. Its values
    /// are never handed to a runner; the runner is removed and another one made.
    #[error(
        "Secret {name} exists and is not owned by the runner Job of that name; forgerunner never \
         uses a Secret it did not create: the runner was removed"
    )]
    ForeignSecret {
        /// Name of the Secret (and of the runner).
        name: String,
    },
    /// A Kubernetes API call failed. Shown with the server's own message ([`ServerMessage`]),
    /// since this text becomes condition messages and Event notes.
    #[error("kubernetes {operation} failed: {}", ServerMessage(.source))]
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
    /// A pass failed and so did the status write saying why: the error as it is, marked so the
    /// pass is retried until the status tells it, even where the error alone would wait for a
    /// change of the group ([`ReconcileError::unreported`]).
    #[error(transparent)]
    Unreported(Box<ReconcileError>),
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
            ReconcileError::RunnerRbacConflict { .. } => ErrorCategory::RunnerRbacConflict,
            ReconcileError::RunnerHooksDisabled => ErrorCategory::RunnerHooksDisabled,
            ReconcileError::CacheConflict { .. } => ErrorCategory::CacheConflict,
            ReconcileError::Forge(e) => e.category(),
            ReconcileError::ForgeTimeout { .. } => ErrorCategory::ForgeTimeout,
            // Never shown: a fenced replica's status and Event writes are refused too.
            ReconcileError::Kube { .. }
            | ReconcileError::ForeignSecret { .. }
            | ReconcileError::Build(_)
            | ReconcileError::Fenced(_) => ErrorCategory::Kubernetes,
            ReconcileError::Unreported(e) => e.category(),
            ReconcileError::Finalizer(e) => match e.as_ref() {
                finalizer::Error::ApplyFailed(inner) | finalizer::Error::CleanupFailed(inner) => {
                    inner.category()
                }
                _ => ErrorCategory::Kubernetes,
            },
        }
    }

    /// Whether the status does not tell this error yet: the reconcile is retried for the
    /// report's sake even when the error itself needs a change of the group.
    pub fn unreported(&self) -> bool {
        matches!(self, ReconcileError::Unreported(_))
    }

    /// How long the forge asked us to wait, for rate limits.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ReconcileError::Forge(ForgeError::RateLimited { retry_after_seconds }) => {
                Some(Duration::from_secs(*retry_after_seconds))
            }
            ReconcileError::Unreported(e) => e.retry_after(),
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

/// A kube client error as a person reads it: for an API error, the server's `Status.message`
/// once, then its reason and code; kube's own text otherwise.
///
/// kube's `Display` of `Error::Api` is `ApiError: {0} ({0:?})` (kube-client 5.0 `src/error.rs`)
/// over `Status`'s `{message}: {reason}` (kube-core `src/response.rs`): the message, then the
/// whole `Debug` of the Status with the message again and every `details.causes` entry, which
/// for a 422 repeat what the message already lists. That pushed condition messages and Event
/// notes past the Event note limit for the very errors a user needs to read.
pub struct ServerMessage<'a>(pub &'a kube::Error);

impl fmt::Display for ServerMessage<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kube::Error::Api(status) = self.0 else {
            return self.0.fmt(f);
        };
        let message = match status.message.trim() {
            "" => "no message",
            m => m,
        };
        match (status.reason.as_str(), status.code) {
            ("", 0) => f.write_str(message),
            ("", code) => write!(f, "{message} ({code})"),
            (reason, 0) => write!(f, "{message} ({reason})"),
            (reason, code) => write!(f, "{message} ({reason}, {code})"),
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

    /// A 422 as the API server sends it: `apierrors.NewInvalid` (apimachinery
    /// `pkg/api/errors/errors.go`) puts every field error into `message` and again into
    /// `details.causes`.
    fn invalid_job() -> kube::Error {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure",
            "message": "Job.batch \"g-abcde\" is invalid: spec.template.spec.containers[0].image: Required value",
            "reason": "Invalid",
            "code": 422,
            "details": {"name": "g-abcde", "group": "batch", "kind": "Job", "causes": [{
                "reason": "FieldValueRequired",
                "message": "Required value",
                "field": "spec.template.spec.containers[0].image",
            }]},
        }))
        .expect("status");
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn api_errors_show_the_server_message_once_with_reason_and_code() {
        let e = ReconcileError::kube("create job")(invalid_job());
        let text = e.to_string();
        assert_eq!(
            text,
            "kubernetes create job failed: Job.batch \"g-abcde\" is invalid: \
             spec.template.spec.containers[0].image: Required value (Invalid, 422)"
        );
        assert_eq!(text.matches("Required value").count(), 1, "{text}");
    }

    #[test]
    fn other_client_errors_keep_kubes_text() {
        let e = kube::Error::LinesCodecMaxLineLengthExceeded;
        let expected = format!("kubernetes watch failed: {e}");
        assert_eq!(ReconcileError::kube("watch")(e).to_string(), expected);
        let bare = kube::Error::Api(Box::default());
        assert_eq!(ServerMessage(&bare).to_string(), "no message");
    }
}
