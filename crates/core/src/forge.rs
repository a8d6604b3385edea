//! The `Forge` trait: what the generic reconciler needs from a forge backend.
//!
//! Backends (`forgerunner-github`, `forgerunner-gitea`) implement it; the operator binary
//! dispatches over the enabled ones. No HTTP here: the trait speaks in domain types.

use std::collections::BTreeMap;
use std::fmt;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::PodSpec;
use tokio::sync::mpsc;

use crate::crd::{ForgeKind, RunnerGroup};
use crate::error::ErrorCategory;

/// Identity of one `RunnerGroup` (namespace and name); used to wake its reconcile.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    /// Namespace of the group.
    pub namespace: String,
    /// Name of the group.
    pub name: String,
}

impl fmt::Display for GroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A secret value that never prints itself (`Debug` and `Display` are redacted).
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(String);

impl SecretValue {
    /// Wraps a secret string.
    pub fn new(value: impl Into<String>) -> Self {
        SecretValue(value.into())
    }

    /// The secret itself; call only where it is sent to its destination.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretValue(<redacted>)")
    }
}

/// The data of the credentials Secret a group names, keyed by Secret key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Credentials {
    /// Name of the Secret the data came from (safe to show in messages).
    pub secret_name: String,
    /// Key → value.
    pub data: BTreeMap<String, SecretValue>,
    /// `resourceVersion` of the Secret, so backends can tell when to rebuild clients.
    pub version: String,
}

impl Credentials {
    /// A value by key, if present and non-empty.
    pub fn get(&self, key: &str) -> Option<&SecretValue> {
        self.data.get(key).filter(|v| !v.expose().is_empty())
    }
}

/// Everything a backend gets about a group on each call.
#[derive(Clone, Debug)]
pub struct GroupContext {
    /// The group's identity.
    pub key: GroupKey,
    /// The group's UID (stable across renames of nothing; changes when re-created).
    pub uid: String,
    /// The resource as last observed.
    pub group: RunnerGroup,
    /// The credentials Secret's data.
    pub credentials: Credentials,
    /// Optional extra data (e.g. a CA bundle) read from ConfigMaps the spec names.
    pub ca_bundle: Option<String>,
}

/// What the forge wants right now for one group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Demand {
    /// Jobs that need a runner of this group. GitHub: `totalAssignedJobs` of the scale set
    /// (assigned and running); Gitea: queued jobs whose labels this group matches.
    pub jobs: u32,
    /// Jobs the forge reports as running on our runners (for status only).
    pub running_jobs: u32,
    /// Names of our runners the forge knows to be busy (GitHub `JobStarted`).
    pub busy_runners: Vec<String>,
    /// Names of runners of this group the forge lists as offline (ghosts whose pod may be
    /// gone); the planner deregisters those without a Job (`PlanInput::offline_forge_runners`).
    pub offline_runners: Vec<String>,
    /// Forge facts for the status (scale set id, server version).
    pub facts: ForgeFacts,
    /// The forge reports which runners are busy or finished as it happens (GitHub's message
    /// stream). Only then are surplus runners scaled down: without it, a runner that looks idle
    /// may have just taken a job, and removing it would leave that job to a new runner.
    pub knows_runner_activity: bool,
    /// When the forge data behind `jobs` was fetched, if it may be older than now (a shared,
    /// cached listing): runners that finished after it still count as covering a job. `None`
    /// when the forge tracks finished runners by name instead ([`ForgeRunnerState::Finished`]).
    pub observed_at: Option<jiff::Timestamp>,
}

/// Facts about the forge-side objects a group uses, shown in its status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ForgeFacts {
    /// GitHub runner scale set id.
    pub scale_set_id: Option<i64>,
    /// Gitea server version.
    pub forge_version: Option<String>,
}

/// What one new runner needs to join the forge; stored in a Secret owned by its Job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerCredentials {
    /// Secret data for the runner (JIT config, registration token, …).
    pub secret_data: BTreeMap<String, SecretValue>,
    /// Plain (non-secret) environment for the runner container.
    pub env: BTreeMap<String, String>,
    /// Annotations recorded on the runner Job (forge ids), for restarts.
    pub annotations: BTreeMap<String, String>,
}

/// A runner of ours, as the reconciler knows it (from the cluster).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerRef {
    /// Runner name (= Job name = forge-side runner name).
    pub name: String,
    /// Annotations of the runner Job (forge ids recorded at creation).
    pub annotations: BTreeMap<String, String>,
}

/// How the forge sees one of our runners.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ForgeRunnerState {
    /// The forge does not know the runner (not registered yet, or already gone).
    #[default]
    Unknown,
    /// Registered and waiting for a job.
    Idle,
    /// Working on a job.
    Busy,
    /// Registered but not connected.
    Offline,
    /// The forge has seen the runner finish its job, so its demand no longer counts that job;
    /// the runner's pod may still be on its way out.
    Finished,
}

/// Result of asking the forge to remove a runner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoveOutcome {
    /// The forge no longer knows the runner.
    Removed,
    /// The runner took a job meanwhile; it must be left alone.
    Busy,
}

/// What a runner's exit code means to its forge, when it means more than "failed".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunnerExit {
    /// The runner refused to run because its version is too old for the forge: new runners
    /// from the same image will fail the same way until the image is updated.
    Outdated,
}

/// Why a backend call failed; the category drives retries, conditions, Events and metrics.
#[derive(Debug, thiserror::Error)]
pub enum ForgeError {
    /// The credentials are missing a key or are malformed (user must fix the Secret).
    #[error("invalid credentials: {0}")]
    InvalidCredentials(String),
    /// The forge rejected the credentials (401) or they lack rights (403).
    #[error("forge rejected the credentials: {0}")]
    Unauthorized(String),
    /// Something the spec names does not exist at the forge (org, repo, runner group, …).
    #[error("not found at the forge: {0}")]
    NotFound(String),
    /// The spec cannot work with this forge (wrong URL shape, unsupported version, …).
    #[error("configuration rejected: {0}")]
    Config(String),
    /// Rate limited; retry after the given seconds.
    #[error("rate limited by the forge, retry after {retry_after_seconds}s")]
    RateLimited {
        /// Seconds the forge asked us to wait.
        retry_after_seconds: u64,
    },
    /// The forge could not be reached or answered 5xx / garbage.
    #[error("forge unavailable: {0}")]
    Unavailable(String),
    /// The backend is starting (e.g. the listener has not reported yet); retry soon.
    #[error("forge backend not ready: {0}")]
    NotReady(String),
}

impl ForgeError {
    /// Bounded category for metrics labels and Event reasons.
    pub fn category(&self) -> ErrorCategory {
        match self {
            ForgeError::InvalidCredentials(_) => ErrorCategory::InvalidCredentials,
            ForgeError::Unauthorized(_) => ErrorCategory::Unauthorized,
            ForgeError::NotFound(_) => ErrorCategory::ForgeNotFound,
            ForgeError::Config(_) => ErrorCategory::ForgeConfig,
            ForgeError::RateLimited { .. } => ErrorCategory::RateLimited,
            ForgeError::Unavailable(_) => ErrorCategory::ForgeUnavailable,
            ForgeError::NotReady(_) => ErrorCategory::ForgeNotReady,
        }
    }
}

/// Sends "reconcile this group now" to the controller (push-style forges, webhooks).
#[derive(Clone, Debug)]
pub struct ReconcileTrigger(mpsc::UnboundedSender<GroupKey>);

impl ReconcileTrigger {
    /// A trigger and the stream end the controller listens on.
    pub fn channel() -> (ReconcileTrigger, mpsc::UnboundedReceiver<GroupKey>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (ReconcileTrigger(tx), rx)
    }

    /// Asks for a reconcile of `key`; a closed controller is ignored (it is shutting down).
    pub fn wake(&self, key: GroupKey) {
        let _ = self.0.send(key);
    }
}

/// The contract between the generic reconciler and a forge backend.
#[async_trait]
pub trait Forge: Send + Sync {
    /// Which forge this backend serves.
    fn kind(&self) -> ForgeKind;

    /// The forge's default pod for one runner: image, command and env. Secret material must be
    /// referenced from the Secret named `secret_name` (keys of [`RunnerCredentials::secret_data`]),
    /// never inlined. The reconciler merges the user's template onto it and sets the reserved
    /// fields (restart policy, labels, owner).
    fn default_runner_pod(&self, group: &RunnerGroup, runner_name: &str, secret_name: &str) -> PodSpec;

    /// What the forge wants now. GitHub starts (or keeps) the group's listener and returns the
    /// latest statistics; Gitea returns the matching queued jobs.
    async fn demand(&self, group: &GroupContext) -> Result<Demand, ForgeError>;

    /// What a new runner named `runner_name` needs to join the forge.
    async fn runner_credentials(
        &self,
        group: &GroupContext,
        runner_name: &str,
    ) -> Result<RunnerCredentials, ForgeError>;

    /// How the forge sees each of `runners` (missing entries mean `Unknown`).
    async fn runner_state(
        &self,
        group: &GroupContext,
        runners: &[RunnerRef],
    ) -> Result<BTreeMap<String, ForgeRunnerState>, ForgeError>;

    /// Deregisters a runner that will never run a job.
    async fn remove_runner(
        &self,
        group: &GroupContext,
        runner: &RunnerRef,
    ) -> Result<RemoveOutcome, ForgeError>;

    /// Releases forge-side resources of a deleted group (sessions, scale sets, caches).
    async fn shutdown(&self, group: &GroupContext) -> Result<(), ForgeError>;

    /// What the exit code of a failed runner container means, if the forge gives it a meaning
    /// the user should hear about (e.g. an outdated runner). Called only for failed runners.
    fn runner_exit_meaning(&self, _exit_code: i32) -> Option<RunnerExit> {
        None
    }

    /// Stops background work of every group (leadership lost or process exit).
    async fn shutdown_all(&self) {}
}
