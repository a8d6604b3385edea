//! The `Forge` and `ForgeSession` traits: what the generic reconciler needs from a forge backend,
//! once per process and once per group.
//!
//! Backends (`forgerunner-github`, `forgerunner-gitea`, `forgerunner-forgejo`) implement them;
//! the operator binary dispatches over the enabled ones. No HTTP here: the traits speak in
//! domain types.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::api::rbac::v1::PolicyRule;
use tokio::sync::mpsc;

use crate::budget::RateBudget;
use crate::crd::{ForgeKind, RunnerClass, RunnerGroup, RunnerGroupSpec};
use crate::error::ErrorCategory;
use crate::job_identity::JobIdentity;
use crate::plan::RunnerPhase;
use crate::validate::SpecViolation;

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
    /// The webhook secret ([`ClusterRefs::webhook_secret`]), when named and readable.
    pub webhook_secret: Option<SecretValue>,
}

/// How the forge sees one group and our runners of it, taken from one consistent snapshot of
/// the forge's data ([`ForgeSession::snapshot`]).
///
/// A view taken from a cached listing may be older than what the cluster shows (a runner that
/// took its job, or finished, after the listing was fetched): such a view says when its listing
/// was fetched (`listed_at`) and core's ledger nets `waiting_jobs` for it
/// (`reconcile::ledger::TakenSinceListing`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ForgeView {
    /// Jobs that wait for a runner of this group and that none of our runners has taken yet.
    pub waiting_jobs: u32,
    /// How the forge sees each of our runners, by name (missing names are `Unknown`).
    pub runners: BTreeMap<String, ForgeRunnerState>,
    /// The runner rows the forge lists for the group, where it lists them (`None`: it lists
    /// none). Facts for core's ghost rule, with no time rule of the forge's.
    pub listed_rows: Option<ListedRows>,
    /// The view tells as it happens which runners took a job, so surplus runners that look idle
    /// may be scaled down. Without it an idle-looking runner may have just taken a job, and
    /// only the idle timeout removes runners.
    pub complete: bool,
    /// Forge facts for the status (scale set id, server version).
    pub facts: ForgeFacts,
    /// The job each runner runs, by runner name, where the forge tells it; the reconciler
    /// records it on the runner's Job and pod once ([`crate::job_identity`]).
    pub job_identities: BTreeMap<String, JobIdentity>,
    /// What is left of the API budget of the group's credential, when the forge reports it;
    /// creation slows down before it runs out ([`crate::budget`]).
    pub budget: Option<RateBudget>,
    /// The waiting jobs by id, oldest first, where the forge names them: for the latency per
    /// stage (`crate::metrics::Stage`), the class of each new runner, and the job a new runner is
    /// bound to where the forge binds runners to jobs ([`WaitingJob::binding`]). Empty where the
    /// forge only gives counts.
    pub waiting: Vec<WaitingJob>,
    /// Runners that will never take a job: the one job they were made for is gone (re-run
    /// under a new handle, cancelled). The planner removes them at once unless they worked.
    pub stranded: BTreeSet<String>,
    /// When the fetch of the jobs listing behind `waiting_jobs` started, for a forge whose
    /// listing may be older than its runners' states; `None` when the view is one consistent
    /// snapshot (GitHub's statistics message).
    pub listed_at: Option<Instant>,
    /// Runners whose job the forge's data already shows taken (in progress in the listing, or
    /// named by a delivery since): `waiting_jobs` does not count their jobs.
    pub accounted: BTreeSet<String>,
    /// A Busy state in `runners` does not tell when the runner took its job (Forgejo guesses
    /// busy runners from the count of running jobs, or nets a bound runner's job by its handle
    /// itself): core's ledger then dates a take from the first pass that sees the runner's Job
    /// succeed, not from its first Busy state.
    pub takes_by_success_only: bool,
    /// Jobs waiting in the group's scope that no group this process knows can take, with the
    /// labels they ask for (a typo in `runs-on`); empty where the forge cannot tell.
    pub unmatched: Vec<UnmatchedJob>,
    /// What the forge tells of the group's runner releases ([`crate::runner_version`]).
    pub versions: crate::runner_version::RunnerVersions,
}

/// The runner rows a forge's listing shows for a group ([`ForgeView::listed_rows`]): the rows
/// named like the group's runners ([`crate::names::is_runner_name_of`]), ours included, by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedRows {
    /// Rows offline and not busy.
    pub offline: BTreeSet<String>,
    /// Rows online or busy.
    pub online: BTreeSet<String>,
    /// Of `offline`, the rows that carry a mark only this group writes when it registers a
    /// runner (Forgejo: the RunnerGroup's uid in the row's description): rows this group
    /// registered, never a same-named group's elsewhere. Empty where the forge writes no mark.
    pub own: BTreeSet<String>,
    /// The listing showed every row of its scope, so a row it does not show is gone; a partial
    /// (paged) listing may have skipped a row.
    pub whole: bool,
    /// When the listing's fetch started.
    pub listed_at: Instant,
}

/// A job waiting in a group's scope whose labels no group matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnmatchedJob {
    /// The forge's id of the job.
    pub id: String,
    /// The job's `runs-on` labels.
    pub labels: Vec<String>,
    /// When the forge queued it, where the forge says.
    pub queued_at: Option<jiff::Timestamp>,
}

/// A job waiting for a runner of the group, as the forge names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitingJob {
    /// The forge's id of the job (unique within the group's forge).
    pub id: String,
    /// When the forge queued it, where the forge says.
    pub queued_at: Option<jiff::Timestamp>,
    /// The labels the job asks for (`runs-on`), where the forge tells them; the class of its
    /// runner is chosen from them ([`crate::runner_class`]). Empty where the forge does not say.
    pub labels: Vec<String>,
    /// Where the forge binds a runner to one job (Forgejo 15's job handle): the key that binds a
    /// runner to this job alone. Core reserves each such job for one runner at a time and hands
    /// the job to [`ForgeSession::register`] ([`crate::reconcile::ledger::Reservations`]).
    /// `None` where any runner of the right labels takes any job.
    pub binding: Option<String>,
}

/// What a group's forge block names in the cluster; the reconciler reads these for the forge
/// ([`GroupContext::credentials`], [`GroupContext::ca_bundle`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterRefs {
    /// Name of the credentials Secret in the group's namespace.
    pub credentials_secret: String,
    /// Name of a ConfigMap in the group's namespace whose key [`CA_BUNDLE_KEY`] holds PEM
    /// certificates to trust, if the spec names one.
    pub ca_bundle_config_map: Option<String>,
    /// Name of a Secret in the group's namespace whose key [`WEBHOOK_SECRET_KEY`] verifies the
    /// forge's webhook deliveries, if the spec names one. A missing Secret is not an error: the
    /// group then works by polling alone.
    pub webhook_secret: Option<String>,
}

/// A URL the operator itself connects to for a group, and the spec field it comes from; checked
/// against the operator's forge host allowlist ([`crate::forge_hosts`]) before any forge call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboundUrl {
    /// JSON path of the field, e.g. `spec.gitea.url`.
    pub field: &'static str,
    /// The URL as the spec gives it.
    pub url: String,
}

/// Key of the webhook Secret that holds the shared HMAC secret.
pub const WEBHOOK_SECRET_KEY: &str = "secret";

/// Key of the CA bundle ConfigMap that holds the PEM certificates.
pub const CA_BUNDLE_KEY: &str = "ca.crt";

/// Facts about the forge-side objects a group uses, shown in its status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ForgeFacts {
    /// GitHub runner scale set id.
    pub scale_set_id: Option<i64>,
    /// Server version (Gitea, Forgejo).
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

/// A runner of ours, as the reconciler knows it (from the cluster and the group's books).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerRef {
    /// Runner name (= Job name = forge-side runner name).
    pub name: String,
    /// Annotations of the runner Job (forge ids recorded at creation). For a runner
    /// [`RunnerRef::registered_here`], the keys [`ForgeSession::register`] returned hold what it
    /// returned, whatever the Job says now (anyone who may edit Jobs can rewrite the Job's copy);
    /// a runner the store does not show yet has only those.
    pub annotations: BTreeMap<String, String>,
    /// Where the runner's Job is in its life; a forge uses it to account for runners that
    /// finished before its own data shows it.
    pub phase: RunnerPhase,
    /// The cluster's store shows the runner's Job. False for a runner this process created
    /// that the store has not listed yet.
    pub stored: bool,
    /// When this group's session ([`Forge::open`]) registered the runner (taken right after
    /// [`ForgeSession::register`] returned): the session has seen the runner's whole life, and
    /// the ids in `annotations` are the forge's own answer. `None` for a runner adopted:
    /// registered by an earlier process, an earlier leadership term, or a session the group had
    /// at another forge.
    pub registered_at: Option<Instant>,
    /// Since when passes have seen the forge show the runner connected (idle or busy) without a
    /// break, as of the last view core settled (`reconcile::ledger::ConnectedSince`); `None`
    /// when that view did not. For a forge whose rules need how long a runner has waited.
    pub connected_since: Option<Instant>,
}

impl RunnerRef {
    /// Whether this group's session registered the runner ([`RunnerRef::registered_at`]).
    pub fn registered_here(&self) -> bool {
        self.registered_at.is_some()
    }

    /// The job the runner was made for alone ([`WaitingJob::binding`]), from its Job's
    /// [`crate::runner_job::JOB_BINDING_ANNOTATION`]; `None` for a runner that takes any job.
    pub fn binding(&self) -> Option<&str> {
        self.annotations
            .get(crate::runner_job::JOB_BINDING_ANNOTATION)
            .map(String::as_str)
            .filter(|b| !b.is_empty())
    }
}

/// One new runner to register ([`ForgeSession::register`]).
#[derive(Clone, Copy, Debug)]
pub struct RunnerRequest<'a> {
    /// The runner's name (= Job name = forge-side name).
    pub name: &'a str,
    /// The runner's class of `spec.classes` (`None`: one of the group's own).
    pub class: Option<&'a RunnerClass>,
    /// The waiting job core reserved for the runner, where the forge binds runners to jobs
    /// ([`WaitingJob::binding`]): the forge binds the runner to it alone. `None`: the runner takes
    /// any job its labels match (or no job of its class was free).
    pub job: Option<&'a WaitingJob>,
}

impl<'a> RunnerRequest<'a> {
    /// A request for the runner `name` of `class` bound to no job.
    pub fn unbound(name: &'a str, class: Option<&'a RunnerClass>) -> RunnerRequest<'a> {
        RunnerRequest {
            name,
            class,
            job: None,
        }
    }
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
    /// The runner's job is done as far as the view is concerned ([`ForgeView::waiting_jobs`]
    /// no longer counts it); the runner's pod may still be on its way out.
    Finished,
}

/// Result of asking the forge to remove a runner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoveOutcome {
    /// The forge no longer knows the runner.
    Removed,
    /// The runner took a job meanwhile; it must be left alone.
    Busy,
    /// Removed, though the runner had waited connected long enough to get the one job it was
    /// bound to ([`RunnerRef::binding`]) and did not get it: the forge holds that job back while
    /// listing it waiting (Forgejo 14+ queues a job behind its concurrency group). Core makes no
    /// runner for that job for a while ([`crate::reconcile::ledger::Reservations::withhold`]).
    Withheld,
}

/// What a runner's exit code means to its forge, when it means more than "failed".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunnerExit {
    /// The runner refused to run because its version is too old for the forge: new runners
    /// from the same image will fail the same way until the image is updated.
    Outdated,
}

/// What a forge did with a request to re-run a job the cluster killed ([`ForgeSession::rerun_job`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RerunOutcome {
    /// The forge queued the job again (with the jobs that depend on it).
    Requested,
    /// The forge refuses while the job's run is still going (GitHub answers 403 "This workflow
    /// is already running" until the run concludes; Gitea 400 "this workflow run is not
    /// done"): ask again after `retry_after`.
    NotYet {
        /// How long to wait before asking again.
        retry_after: Duration,
    },
    /// This forge, or its version, has no API to re-run a job.
    Unsupported,
    /// The forge no longer knows the job, or it is too old to re-run (GitHub: 30 days, or past
    /// log retention).
    Gone,
}

impl RerunOutcome {
    /// CamelCase name, safe as a metric label or Event reason.
    pub fn as_str(self) -> &'static str {
        match self {
            RerunOutcome::Requested => "Requested",
            RerunOutcome::NotYet { .. } => "NotYet",
            RerunOutcome::Unsupported => "Unsupported",
            RerunOutcome::Gone => "Gone",
        }
    }
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

    /// Asks for a reconcile of each of `keys` at `due`, from a task of its own.
    ///
    /// Polling forges use it when a shared listing expires: the reconciler requeues a group one
    /// interval after each pass, and a pass woken between listings reuses the cached one, so
    /// without this a job queued just after a listing could wait almost two intervals.
    pub fn wake_at(&self, keys: Vec<GroupKey>, due: Instant) {
        if keys.is_empty() {
            return;
        }
        let trigger = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(tokio::time::Instant::from_std(due)).await;
            for k in keys {
                trigger.wake(k);
            }
        });
    }
}

/// What a forge makes of a valid spec: plain data the reconciler reads instead of asking the
/// forge again ([`Forge::describe`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ForgeProfile {
    /// What the forge's block names in the cluster, for the reconciler to read into the
    /// [`GroupContext`].
    pub cluster_refs: ClusterRefs,
    /// The URLs of the spec the operator connects to for this forge: its base URL and, when
    /// set, its proxy; checked against the forge host allowlist ([`crate::forge_hosts`]) before
    /// any forge call. URLs the forge learns from the forge itself (e.g. GitHub's Actions
    /// service) are not listed; an empty list is refused by a configured allowlist.
    pub outbound_urls: Vec<OutboundUrl>,
    /// How long a group may go without a pass when nothing wakes it (a push-style forge wakes
    /// the reconciler itself and only needs a safety resync; a poll-style one sets its poll).
    pub resync_interval: Duration,
    /// What a deleted group whose forge cleanup did not finish may have left at the forge, and
    /// how a person removes it; quoted in the cleanup Events ([`DEFAULT_CLEANUP_HINT`] when the
    /// forge has nothing more precise to say).
    pub cleanup_hint: String,
    /// Permissions the runner pods need in the group's namespace, e.g. GitHub's container hooks
    /// creating job pods in `kubernetes` mode. When not empty, the reconciler keeps a
    /// ServiceAccount named [`crate::names::runner_service_account_name`] for the group and
    /// binds it to the runner container hooks' ClusterRole the chart ships; these rules say what
    /// that ClusterRole must hold (the chart tests compare them). The default pod should run as
    /// that account.
    pub runner_role_rules: Vec<PolicyRule>,
    /// What the exit code of a failed runner container means, for the codes the forge gives a
    /// meaning the user should hear about (e.g. an outdated runner). Read only for failed
    /// runners; a code not listed means plain failure.
    pub runner_exits: BTreeMap<i32, RunnerExit>,
}

impl ForgeProfile {
    /// What a failed runner's `exit_code` means to the forge, if anything.
    pub fn runner_exit(&self, exit_code: i32) -> Option<RunnerExit> {
        self.runner_exits.get(&exit_code).copied()
    }
}

/// The cleanup hint of a forge that says nothing more precise ([`ForgeProfile::cleanup_hint`]).
pub const DEFAULT_CLEANUP_HINT: &str =
    "runners of the group may stay registered at the forge: remove them in the forge's runner settings";

/// A forge backend, once per process: what it makes of a spec, and a session per group.
///
/// The reconciler knows no forge by name: everything that differs per forge is a method here,
/// a method of [`ForgeSession`], or data of [`ForgeProfile`]. One pass describes the spec,
/// takes one [`ForgeSession::snapshot`], plans, then acts through [`ForgeSession::register`]
/// and [`ForgeSession::deregister`].
#[async_trait]
pub trait Forge: Send + Sync {
    /// Which forge this backend serves.
    fn kind(&self) -> ForgeKind;

    /// What the forge makes of `spec`, or what it refuses in the forge's block. The reconciler
    /// has already checked the common fields and that exactly this forge's block is set; each
    /// violation names the field to fix. Pure: no I/O.
    fn describe(&self, spec: &RunnerGroupSpec) -> Result<ForgeProfile, Vec<SpecViolation>>;

    /// A session for the group `key`. The reconciler keeps it in the group's books for as long
    /// as the group lives, and closes it ([`ForgeSession::close`]) when the group is deleted.
    fn open(&self, key: &GroupKey) -> Box<dyn ForgeSession>;

    /// Answers one delivery to `POST /webhooks/<forge>`; `None` when the forge takes no
    /// webhooks (the route then answers 404). Verification is the forge's: it must answer 401
    /// to anything it cannot verify and never log bodies or secrets.
    fn receive_webhook(&self, _headers: &http::HeaderMap, _body: &[u8]) -> Option<WebhookReply> {
        None
    }

    /// Stops background work of every group (leadership lost or process exit).
    async fn shutdown_all(&self) {}
}

/// What a forge builds one new runner's pod from ([`ForgeSession::runner_pod`]).
#[derive(Clone, Copy, Debug)]
pub struct RunnerPodRequest<'a> {
    /// The group the runner belongs to.
    pub group: &'a RunnerGroup,
    /// The runner's name (= Job name = forge-side name).
    pub runner_name: &'a str,
    /// The Secret that holds [`RunnerCredentials::secret_data`]; the pod references it and
    /// never inlines secret material.
    pub secret_name: &'a str,
    /// What [`ForgeSession::register`] returned for the runner.
    pub credentials: &'a RunnerCredentials,
    /// The runner's class of `spec.classes` (`None`: one of the group's own): its runner
    /// registers with the labels of [`crate::runner_class::runner_labels`].
    pub class: Option<&'a RunnerClass>,
}

/// One group at the forge ([`Forge::open`]).
///
/// Every call gets the group's fresh [`GroupContext`]: credentials and spec may change between
/// passes, and a session keeps working across such changes (a spec edit does not restart
/// GitHub's listener).
///
/// Closing: [`ForgeSession::close`] is async (GitHub stops its listener), so the reconciler
/// closes a deleted group's session explicitly, before any forge cleanup and again after it.
/// The reconciler's holder of a session ([`crate::reconcile::ledger::GroupSession`]) closes it
/// on drop only as a safety net, for a session dropped without being closed.
#[async_trait]
pub trait ForgeSession: Send + Sync {
    /// What the forge wants now and how it sees each of `runners`, from one consistent
    /// snapshot of its data. `runners` are all of the group's runners in the cluster.
    async fn snapshot(&self, group: &GroupContext, runners: &[RunnerRef]) -> Result<ForgeView, ForgeError>;

    /// What the new runner `request` names needs to join the forge. GitHub registers a class's
    /// runner in the class's own scale set; Forgejo 15 binds it to the job core reserved for it
    /// ([`RunnerRequest::job`]); the others take the class's labels from the pod
    /// ([`ForgeSession::runner_pod`]).
    async fn register(
        &self,
        group: &GroupContext,
        request: &RunnerRequest<'_>,
    ) -> Result<RunnerCredentials, ForgeError>;

    /// The forge's default pod for one new runner: image, command and env. The reconciler
    /// merges the user's template onto it, lays the class's resources, node selector and
    /// tolerations on it, and sets the reserved fields (restart policy, labels, owner).
    fn runner_pod(&self, request: &RunnerPodRequest<'_>) -> PodSpec;

    /// The cache server of a group with `spec.cache` ([`crate::cache_server`]): the runner's own
    /// `cache-server`, reachable at `service_host` (the group's cache Service), sharing
    /// `secret` with the runners through the two config files it returns. `None` for a forge
    /// whose runner cannot be pointed at a cache server (validation refuses `spec.cache` there).
    /// The forge's default pod must mount the runner config when the group has a cache
    /// ([`crate::cache_server::mount_runner_config`]).
    fn cache_server(
        &self,
        _group: &RunnerGroup,
        _service_host: &str,
        _secret: &SecretValue,
    ) -> Option<crate::cache_server::CacheServer> {
        None
    }

    /// Deregisters a runner that will never run a job.
    async fn deregister(&self, group: &GroupContext, runner: &RunnerRef)
    -> Result<RemoveOutcome, ForgeError>;

    /// Asks the forge to run again the job that `runner` (its name) was running when the
    /// cluster killed its pod ([`crate::runner_pod::disruption`]), and only that job and the
    /// jobs that depend on it: never the run's other failed jobs, which failed on their own.
    /// `job` is what the forge told about the job ([`ForgeView::job_identities`]). The default
    /// answers [`RerunOutcome::Unsupported`]; a forge without the needed permission answers
    /// [`ForgeError::Unauthorized`] naming it.
    async fn rerun_job(
        &self,
        _group: &GroupContext,
        _runner: &str,
        _job: &JobIdentity,
    ) -> Result<RerunOutcome, ForgeError> {
        Ok(RerunOutcome::Unsupported)
    }

    /// Deletes the forge-side resources of a deleted group (sessions, scale sets, caches).
    async fn delete_group(&self, group: &GroupContext) -> Result<(), ForgeError>;

    /// Stops the group's background work (GitHub: its listener and message session) and
    /// forgets what this process keeps for it: per-group state, and cached clients, tokens and
    /// listings no other group uses. Needs no credentials, so a group whose Secret is already
    /// gone is released all the same; bounded in time even when the forge drops traffic.
    ///
    /// Idempotent, and the session stays usable: a later call builds what it needs again. The
    /// reconciler calls it first when a group is deleted, before any forge cleanup, so nothing
    /// keeps acting for the group (acquiring jobs, polling) while cleanup runs or after it
    /// gives up; and again when it releases the finalizer, because cleanup calls may have
    /// cached a client for the group meanwhile.
    async fn close(&self) {}
}

/// A forge's answer to a webhook delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookReply {
    /// HTTP status code.
    pub status: http::StatusCode,
    /// Response body (plain text or JSON, never secret material).
    pub body: String,
}

/// Largest webhook delivery body the HTTP server accepts; forge payloads are a few KiB.
pub const MAX_WEBHOOK_BODY_BYTES: usize = 1024 * 1024;

#[cfg(test)]
mod rerun_tests {
    use super::*;
    use crate::testing::{FakeForge, RunnerGroupBuilder};

    #[tokio::test]
    async fn a_forge_that_says_nothing_of_reruns_cannot_rerun() {
        let forge = FakeForge::new(ForgeKind::Forgejo);
        let session = forge.open(&GroupKey {
            namespace: "ns".into(),
            name: "g".into(),
        });
        let group = GroupContext {
            key: GroupKey {
                namespace: "ns".into(),
                name: "g".into(),
            },
            uid: "uid".into(),
            group: RunnerGroupBuilder::new(ForgeKind::Forgejo).build(),
            credentials: Credentials::default(),
            ca_bundle: None,
            webhook_secret: None,
        };
        let outcome = session
            .rerun_job(&group, "runner-1", &JobIdentity::default())
            .await
            .expect("the default never fails");
        assert_eq!(outcome, RerunOutcome::Unsupported);
        assert_eq!(outcome.as_str(), "Unsupported");
        let wait = RerunOutcome::NotYet {
            retry_after: Duration::from_secs(30),
        };
        assert_eq!(wait.as_str(), "NotYet");
    }
}
