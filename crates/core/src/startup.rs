//! Runners that do not start: why, from what Kubernetes shows, and how long creation backs off
//! after failures. Pure: pods, Events and the clock come in.
//!
//! A runner that never starts must not hold a `maxRunners` slot until the idle timeout. Some
//! causes are final from the first sign (a pull that already backed off, a quota or admission
//! refusing the pod); those fail the runner at once. The others (unschedulable, slow pulls,
//! a config error that may be the runner Secret arriving a moment after its Job) fail it only
//! after a grace or at `startupTimeoutSeconds`.

use std::fmt;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

/// Why a runner did not start; also the `Degraded` reason and the Event reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StartupFailure {
    /// The image cannot be pulled (`ImagePullBackOff`, `InvalidImageName`, `ErrImageNeverPull`).
    ImagePullFailed,
    /// No node can take the pod (`PodScheduled=False`, reason `Unschedulable`).
    Unschedulable,
    /// A ResourceQuota refused the pod (Job `FailedCreate`, "exceeded quota").
    QuotaExceeded,
    /// Admission refused the pod for another reason (e.g. Pod Security), Job `FailedCreate`.
    PodRejected,
    /// The ServiceAccount admission plugin refused the pod because the ServiceAccount it runs as
    /// does not exist (Job `FailedCreate`, [`missing_service_account`]). For the runner account
    /// the operator keeps (`containerMode: kubernetes`), the reconciler re-applies it at once.
    ServiceAccountMissing,
    /// A container cannot be configured or created (`CreateContainerConfigError`,
    /// `CreateContainerError`, `RunContainerError`), e.g. a missing Secret or ConfigMap key.
    ContainerConfigError,
    /// Not running within `startupTimeoutSeconds`, for no more specific reason.
    StartupTimeout,
}

impl StartupFailure {
    /// CamelCase name, used as condition reason and Event reason.
    pub fn as_str(self) -> &'static str {
        match self {
            StartupFailure::ImagePullFailed => "ImagePullFailed",
            StartupFailure::Unschedulable => "Unschedulable",
            StartupFailure::QuotaExceeded => "QuotaExceeded",
            StartupFailure::PodRejected => "PodRejected",
            StartupFailure::ServiceAccountMissing => "ServiceAccountMissing",
            StartupFailure::ContainerConfigError => "ContainerConfigError",
            StartupFailure::StartupTimeout => "StartupTimeout",
        }
    }

    /// Parses [`StartupFailure::as_str`] back (from a condition reason).
    pub fn parse(s: &str) -> Option<StartupFailure> {
        [
            StartupFailure::ImagePullFailed,
            StartupFailure::Unschedulable,
            StartupFailure::QuotaExceeded,
            StartupFailure::PodRejected,
            StartupFailure::ServiceAccountMissing,
            StartupFailure::ContainerConfigError,
            StartupFailure::StartupTimeout,
        ]
        .into_iter()
        .find(|f| f.as_str() == s)
    }

    /// Whether the runner only ran out of time (nothing Kubernetes calls final): it may still
    /// start, e.g. once a node is added or a large image is pulled. The planner keeps such a
    /// runner while demand covers it.
    pub fn waits_out(self) -> bool {
        matches!(
            self,
            StartupFailure::StartupTimeout | StartupFailure::Unschedulable
        )
    }

    /// What a person can do about it.
    pub fn hint(self) -> &'static str {
        match self {
            StartupFailure::ImagePullFailed => {
                "check spec.image (or the template's images) and imagePullSecrets"
            }
            StartupFailure::Unschedulable => {
                "check node capacity, nodeSelector, affinity and tolerations in spec.template"
            }
            StartupFailure::QuotaExceeded => "raise the namespace's ResourceQuota or lower spec.maxRunners",
            StartupFailure::PodRejected => {
                "the namespace's admission refused the runner pod; see the message and spec.template"
            }
            StartupFailure::ServiceAccountMissing => {
                "the ServiceAccount the runner pod runs as does not exist; the runner account of \
                 containerMode kubernetes is re-created at once, any other must be created (see \
                 spec.template's serviceAccountName)"
            }
            StartupFailure::ContainerConfigError => {
                "a Secret, ConfigMap or key the runner pod needs is missing; see the message"
            }
            StartupFailure::StartupTimeout => {
                "the runner did not start in time; check the pods' events, or raise spec.startupTimeoutSeconds"
            }
        }
    }
}

impl fmt::Display for StartupFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A runner judged stuck: the cause and Kubernetes' own words about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stuck {
    /// Why.
    pub cause: StartupFailure,
    /// Kubernetes' message (pod status or Event), cut to a readable length.
    pub message: String,
}

/// Longest Kubernetes message quoted in conditions and Events.
pub const MAX_QUOTED_MESSAGE: usize = 512;

/// How long a container config error may last before it counts: the runner Secret is written
/// right after the Job, so a pod can briefly miss it.
pub const CONFIG_ERROR_GRACE: Duration = Duration::from_secs(60);

/// Waiting reasons that mean the image will not come: the kubelet already retried and backed
/// off, or the name cannot work.
const IMAGE_FAILURES: [&str; 3] = ["ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"];
/// Waiting reasons of containers that cannot be set up.
const CONFIG_FAILURES: [&str; 3] = [
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

fn quote(message: &str) -> String {
    let trimmed = message.trim();
    match trimmed.char_indices().nth(MAX_QUOTED_MESSAGE) {
        Some((i, _)) => format!("{}…", &trimmed[..i]),
        None => trimmed.to_owned(),
    }
}

/// Every container status of the pod, init containers first.
fn statuses(pod: &Pod) -> impl Iterator<Item = &ContainerStatus> {
    let st = pod.status.as_ref();
    st.and_then(|s| s.init_container_statuses.as_ref())
        .into_iter()
        .flatten()
        .chain(
            st.and_then(|s| s.container_statuses.as_ref())
                .into_iter()
                .flatten(),
        )
}

fn waiting_with(pod: &Pod, reasons: &[&str]) -> Option<(String, String)> {
    statuses(pod).find_map(|c| {
        let w = c.state.as_ref()?.waiting.as_ref()?;
        let reason = w.reason.as_deref()?;
        reasons.contains(&reason).then(|| {
            let msg = w.message.clone().unwrap_or_default();
            (
                reason.to_owned(),
                format!("container {}: {reason}: {msg}", c.name),
            )
        })
    })
}

fn unschedulable(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| {
            c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
        })
        .map(|c| {
            c.message
                .clone()
                .unwrap_or_else(|| "pod is unschedulable".to_owned())
        })
}

/// The most telling waiting reason of any container, for a timeout message.
fn any_waiting(pod: &Pod) -> Option<String> {
    statuses(pod).find_map(|c| {
        let w = c.state.as_ref()?.waiting.as_ref()?;
        let reason = w.reason.as_deref()?;
        Some(format!(
            "container {}: {reason}{}",
            c.name,
            w.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default()
        ))
    })
}

/// Why the Job controller could not create a runner's pod, from its `FailedCreate` Event message
/// (`Error creating: <the API server's error>`, `pkg/controller/controller_utils.go`
/// `RealPodControl.createPods`): the Event is the only signal it gives.
fn failed_create_cause(message: &str) -> StartupFailure {
    if message.contains("exceeded quota") {
        StartupFailure::QuotaExceeded
    } else if missing_service_account(message).is_some() {
        StartupFailure::ServiceAccountMissing
    } else {
        StartupFailure::PodRejected
    }
}

/// The ServiceAccount an admission refusal names as missing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MissingServiceAccount {
    /// Namespace of the pod (and of the account).
    pub namespace: String,
    /// Name of the account.
    pub name: String,
}

/// The account named by the ServiceAccount admission plugin's refusal of a pod whose account
/// does not exist, if `message` is that refusal.
///
/// The shape is the plugin's (`plugin/pkg/admission/serviceaccount/admission.go`, `Admit`):
/// `error looking up service account <ns>/<name>: <err>`, where `getServiceAccount` returns
/// `errors.NewNotFound(api.Resource("serviceaccount"), name)` when the account is neither in
/// the informer cache nor found by a direct GET, whose text is `serviceaccount "<name>" not
/// found`. The refusal is a 403 (`admission.NewForbidden`), so the whole message reads
/// `pods "<generateName>" is forbidden: error looking up service account ns/name: serviceaccount
/// "name" not found`. Any other lookup error (a timeout) is not a missing account.
pub fn missing_service_account(message: &str) -> Option<MissingServiceAccount> {
    const LOOKUP: &str = "error looking up service account ";
    let rest = &message[message.find(LOOKUP)? + LOOKUP.len()..];
    let (account, cause) = rest.split_once(": ")?;
    let (namespace, name) = account.split_once('/')?;
    let not_found = format!("serviceaccount \"{name}\" not found");
    (!namespace.is_empty() && !name.is_empty() && cause.trim_end().starts_with(&not_found)).then(|| {
        MissingServiceAccount {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    })
}

/// Whether a runner that is not running yet is stuck, from its pod (if any), the Job's
/// `FailedCreate` Event message (if any), its age and the group's startup timeout.
pub fn classify(
    pod: Option<&Pod>,
    failed_create: Option<&str>,
    age: Duration,
    startup_timeout: Duration,
) -> Option<Stuck> {
    let stuck = |cause, message: &str| {
        Some(Stuck {
            cause,
            message: quote(message),
        })
    };
    if let Some(pod) = pod {
        if let Some((_, msg)) = waiting_with(pod, &IMAGE_FAILURES) {
            return stuck(StartupFailure::ImagePullFailed, &msg);
        }
        if let Some((_, msg)) = waiting_with(pod, &CONFIG_FAILURES)
            && age >= CONFIG_ERROR_GRACE.min(startup_timeout)
        {
            return stuck(StartupFailure::ContainerConfigError, &msg);
        }
        if age < startup_timeout {
            return None;
        }
        if let Some(msg) = unschedulable(pod) {
            return stuck(StartupFailure::Unschedulable, &msg);
        }
        let msg = any_waiting(pod).unwrap_or_else(|| "pod not running".to_owned());
        return stuck(
            StartupFailure::StartupTimeout,
            &format!("not running after {} s; {msg}", startup_timeout.as_secs()),
        );
    }
    if let Some(msg) = failed_create {
        return stuck(failed_create_cause(msg), msg);
    }
    (age >= startup_timeout).then(|| Stuck {
        cause: StartupFailure::StartupTimeout,
        message: format!("no pod after {} s", startup_timeout.as_secs()),
    })
}

/// How long creation waits after the last runner failure, for `failures` in a row: none for a
/// single failure (a one-off must not slow the group down), then 5 s doubling to 5 min.
pub fn creation_backoff(failures: u32) -> Duration {
    const FIRST: Duration = Duration::from_secs(5);
    const MAX: Duration = Duration::from_secs(300);
    if failures < 2 {
        return Duration::ZERO;
    }
    let exp = (failures - 2).min(16);
    FIRST.saturating_mul(1u32 << exp).min(MAX)
}

#[cfg(test)]
mod tests;
