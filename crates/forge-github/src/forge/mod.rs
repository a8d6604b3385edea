//! `GithubForge`: the `Forge` implementation tying clients, scale sets, listeners and runners
//! together, with per-group state kept in memory (rebuilt from the cluster after a restart).

mod classes;
mod ensure;
mod options;
mod session;
mod transports;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use forgerunner_core::crd::{RunnerClass, RunnerGroupSpec};
use forgerunner_core::forge::{
    ClusterRefs, ForgeFacts, ForgeProfile, ForgeRunnerState, ForgeSession, ForgeView, GroupContext, GroupKey,
    OutboundUrl, ReconcileTrigger, RemoveOutcome, RerunOutcome, RunnerCredentials, RunnerExit, RunnerRef,
    WaitingJob,
};
use forgerunner_core::job_identity::JobIdentity;
use forgerunner_core::metrics::Metrics;
use forgerunner_core::runner_job::BUSY_ANNOTATION;
use forgerunner_core::runner_version::RunnerVersions;
use forgerunner_core::validate::SpecViolation;
use forgerunner_core::{Forge, ForgeError, ForgeKind, RunnerGroup};
use k8s_openapi::api::core::v1::PodSpec;

pub use self::classes::class_scale_set_name;
pub use self::options::GithubOptions;
use crate::client::GithubClient;
use crate::error::ApiError;
use crate::listener::Listener;
use crate::runner_downloads::{SharedReleases, served_release_of};
use crate::runners::{self, Removal};
use crate::scale_set;
use crate::{RUNNER_ID_ANNOTATION, SCALE_SET_ID_ANNOTATION, pod};

/// The scale set a group uses, as last confirmed at the service.
#[derive(Clone, Debug)]
struct ScaleSetInfo {
    id: i64,
    name: String,
    runner_group: Option<String>,
    /// The labels last set (or found) at the service, the name among them.
    labels: Vec<String>,
}

#[derive(Default)]
struct GroupState {
    client: Option<(u64, Arc<GithubClient>)>,
    scale_set: Option<ScaleSetInfo>,
    listener: Option<Listener>,
    /// The scale sets of the spec's classes (and of classes removed whose sets are still in
    /// use), by class name.
    classes: BTreeMap<String, classes::ClassSet>,
}

impl GroupState {
    /// Forgets the scale set `id` (gone at the service) so the next pass makes it again.
    fn forget_set(&mut self, id: i64) {
        if self.scale_set.as_ref().is_some_and(|s| s.id == id) {
            self.scale_set = None;
        }
        for set in self.classes.values_mut() {
            if set.scale_set.as_ref().is_some_and(|s| s.id == id) {
                set.scale_set = None;
            }
        }
    }

    /// The ids of every scale set of the group this process knows.
    fn set_ids(&self) -> Vec<i64> {
        let classes = self.classes.values().filter_map(|c| c.scale_set.as_ref());
        self.scale_set.iter().chain(classes).map(|s| s.id).collect()
    }

    /// Takes out every listener of the group: its own set's and its classes'.
    fn take_listeners(&mut self) -> Vec<Listener> {
        let classes = self.classes.values_mut().filter_map(|c| c.listener.take());
        self.listener.take().into_iter().chain(classes).collect()
    }
}

/// Whether the messages may not have told what `r` is doing: an active runner this session
/// did not register (it adopted it after a restart or a new leadership term), that no message
/// named and that was never marked busy. Its job may have started before this session.
fn activity_unknown(r: &RunnerRef, tracked: Option<ForgeRunnerState>) -> bool {
    r.phase.is_active()
        && tracked.is_none()
        && !r.registered_here
        && r.annotations.get(BUSY_ANNOTATION).map(String::as_str) != Some("true")
}

/// How long a release waits for a group's state lock before it gives up on the listener there.
const RELEASE_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// How often a group is reconciled when the listener wakes nobody (a safety net: the listener
/// wakes the group's reconcile whenever the statistics change).
pub const RESYNC: std::time::Duration = std::time::Duration::from_secs(60);

/// The GitHub runner scale set backend.
#[derive(Clone)]
pub struct GithubForge(Arc<GithubShared>);

/// What a [`GithubForge`] and the sessions it opens share.
pub struct GithubShared {
    metrics: Arc<Metrics>,
    trigger: ReconcileTrigger,
    opts: GithubOptions,
    groups: Mutex<HashMap<GroupKey, Arc<tokio::sync::Mutex<GroupState>>>>,
    /// HTTP transports by (CA bundle, proxy), shared by the groups' clients.
    transports: Mutex<transports::Transports>,
    /// The runner release GitHub serves each scope, shared by the scope's groups.
    served: SharedReleases,
}

impl std::fmt::Debug for GithubForge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GithubForge").finish_non_exhaustive()
    }
}

impl std::ops::Deref for GithubForge {
    type Target = GithubShared;

    fn deref(&self) -> &GithubShared {
        &self.0
    }
}

impl GithubForge {
    /// A backend with default options; `trigger` wakes a group's reconcile after each poll.
    pub fn new(metrics: Arc<Metrics>, trigger: ReconcileTrigger) -> GithubForge {
        GithubForge::with_options(metrics, trigger, GithubOptions::default())
    }

    /// A backend with explicit options (tests use short timeouts and backoffs).
    pub fn with_options(
        metrics: Arc<Metrics>,
        trigger: ReconcileTrigger,
        opts: GithubOptions,
    ) -> GithubForge {
        GithubForge(Arc::new(GithubShared {
            metrics,
            trigger,
            opts,
            groups: Mutex::default(),
            transports: Mutex::default(),
            served: SharedReleases::default(),
        }))
    }

    fn entry(&self, key: &GroupKey) -> Arc<tokio::sync::Mutex<GroupState>> {
        let mut groups = self
            .groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        groups.entry(key.clone()).or_default().clone()
    }

    /// Sets the cache gauge: transports and groups with state.
    fn report_cache(&self) {
        let transports = self
            .transports
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len();
        let groups = self
            .groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len();
        self.metrics
            .set_cache_entries("github", &[("clients", transports), ("groups", groups)]);
    }

    /// Stops the group's listener (bounded) and forgets its state and transport.
    async fn release_inner(&self, key: &GroupKey) {
        let removed = self
            .groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
        if let Some(entry) = removed {
            // A pass holding the lock against a forge that drops traffic must not block us:
            // the listener is what has to stop, and it is only taken out under the lock.
            let listeners = match tokio::time::timeout(RELEASE_LOCK_WAIT, entry.lock()).await {
                Ok(mut st) => st.take_listeners(),
                Err(_) => Vec::new(),
            };
            let limit = self.opts.shutdown_timeout.saturating_mul(2);
            let stopped = listeners.len();
            futures::future::join_all(listeners.into_iter().map(|l| l.stop_within(limit))).await;
            if stopped > 0 {
                tracing::info!(group = %key, listeners = stopped, "GitHub listeners stopped");
            }
        }
        self.transports
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .release(key);
        self.served
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .release(key);
        self.report_cache();
    }

    async fn observe_inner(&self, ctx: &GroupContext, runners: &[RunnerRef]) -> Result<ForgeView, ApiError> {
        let entry = self.entry(&ctx.key);
        let mut st = entry.lock().await;
        let (client, id) = self.ensure(ctx, &mut st).await?;
        self.ensure_listener(ctx, &mut st, &client, id);
        self.ensure_classes(ctx, &mut st, &client, runners).await?;
        // Each scale set of the group (its own first, then its classes') with what its
        // listener knows. Statistics and runner activity of one message batch are recorded
        // together.
        let mut sets: Vec<SetReading> = vec![SetReading {
            id,
            labels: Vec::new(),
            state: st.listener.as_ref().map(Listener::state).unwrap_or_default(),
        }];
        for class in &ctx.group.spec.classes {
            let Some(set) = st.classes.get(&class.name) else {
                continue;
            };
            let Some(info) = &set.scale_set else {
                continue;
            };
            sets.push(SetReading {
                id: info.id,
                labels: classes::reported_labels(class),
                state: set.listener.as_ref().map(Listener::state).unwrap_or_default(),
            });
        }
        let mut waiting_jobs = 0u32;
        let mut complete = true;
        for set in &sets {
            // Without a session (opening, or waiting out a 409 after a crash) there are no
            // messages naming busy or finished runners: fall back to the scale set's
            // statistics. A poll that keeps failing makes the session's statistics stale:
            // still the best demand there is, but no view to scale down on.
            let (stats, set_complete) = match set.state.statistics {
                Some(s) => statistics_basis(Some(s), set.state.last_error.is_some(), None),
                None => match scale_set::get(&client, set.id).await? {
                    Some(found) => statistics_basis(None, false, found.statistics),
                    None => {
                        // Deleted between ensure and now: recreated on the next call.
                        st.forget_set(set.id);
                        return Err(not_ready());
                    }
                },
            };
            // Assigned counts running jobs too; both numbers come from one snapshot, so a job
            // whose runner finished before `JobCompleted` arrived still counts as running,
            // never as waiting: no ledger of finished runners is needed.
            waiting_jobs = waiting_jobs
                .saturating_add(stats.total_assigned_jobs.saturating_sub(stats.total_running_jobs));
            complete &= set_complete;
        }
        // With the sets of removed classes whose runners are still around: those may be at
        // work, and are not runners of a set made again.
        let ids = st.set_ids();
        let tracked = |name: &str| sets.iter().find_map(|s| s.state.runners.state_of(name));
        // No request per runner: the message streams say who is busy or finished, and a runner
        // with a JIT config is registered (removal treats 404 as already gone).
        let states = runners
            .iter()
            .filter_map(|r| {
                let state = tracked(&r.name).or_else(|| {
                    if registered_in_another_scale_set(r, &ids) {
                        // The scale set was deleted and made again: the runner cannot take
                        // this set's jobs, so it covers no demand and goes first.
                        return Some(ForgeRunnerState::Offline);
                    }
                    r.annotations
                        .contains_key(RUNNER_ID_ANNOTATION)
                        .then_some(ForgeRunnerState::Idle)
                })?;
                Some((r.name.clone(), state))
            })
            .collect();
        let job_identities = runners
            .iter()
            .filter_map(|r| {
                let identity = sets.iter().find_map(|s| s.state.runners.identity_of(&r.name))?;
                Some((r.name.clone(), identity.clone()))
            })
            .collect();
        // An adopted runner shown idle may be working: scaling down on such a view could remove
        // a runner made for a waiting job and make another later. Until the adopted runners
        // are gone or marked busy, surplus runners leave through the idle timeout.
        let complete = complete && !runners.iter().any(|r| activity_unknown(r, tracked(&r.name)));
        // GitHub's runner APIs carry no runner version: the image is all there is to compare.
        let versions = RunnerVersions {
            image: Some(crate::runner_version::image_release(&ctx.group.spec)),
            served: served_release_of(&self.served, &client, &ctx.key),
            reported: BTreeMap::new(),
        };
        Ok(ForgeView {
            waiting_jobs,
            // Job requests the messages show assigned and not started, with `JobAssigned`'s
            // queue time for the "queued → seen" stage. The set a job was assigned to is its
            // class: its labels make core's choice give its runner that class.
            waiting: sets
                .iter()
                .flat_map(|set| {
                    set.state
                        .runners
                        .waiting_requests()
                        .map(|(key, queued_at)| WaitingJob {
                            id: key.to_string(),
                            queued_at,
                            labels: set.labels.clone(),
                        })
                })
                .collect(),
            runners: states,
            // The Actions service drops offline ephemeral runners itself; nothing to report.
            ghosts: Vec::new(),
            complete,
            facts: ForgeFacts {
                scale_set_id: Some(id),
                forge_version: None,
            },
            job_identities,
            budget: client.budget(),
            stranded: Default::default(),
            // One statistics message is one consistent snapshot: nothing to net.
            listed_at: None,
            accounted: Default::default(),
            takes_by_success_only: false,
            // Scale sets match by name: a job for no scale set never reaches a listener.
            unmatched: Vec::new(),
            versions,
        })
    }

    /// A JIT config for `runner_name` from the scale set of its `class` (`None`: the group's
    /// own): a runner takes only the jobs of the set it registered in.
    async fn credentials_inner(
        &self,
        ctx: &GroupContext,
        runner_name: &str,
        class: Option<&RunnerClass>,
    ) -> Result<RunnerCredentials, ApiError> {
        let entry = self.entry(&ctx.key);
        let work_folder = pod::work_folder(&ctx.group);
        let mut attempt = 0;
        loop {
            let (client, id) = {
                let mut st = entry.lock().await;
                let (client, id) = self.ensure(ctx, &mut st).await?;
                match class {
                    Some(class) => {
                        let class_id = self.ensure_class(ctx, &mut st, &client, class).await?;
                        (client, class_id)
                    }
                    None => (client, id),
                }
            };
            match runners::generate_jit_config(&client, id, runner_name, &work_folder).await {
                Ok(jit) => {
                    let mut secret_data = BTreeMap::new();
                    secret_data.insert(pod::JIT_CONFIG_KEY.to_string(), jit.encoded);
                    let mut annotations = BTreeMap::new();
                    annotations.insert(RUNNER_ID_ANNOTATION.to_string(), jit.runner.id.to_string());
                    annotations.insert(SCALE_SET_ID_ANNOTATION.to_string(), id.to_string());
                    return Ok(RunnerCredentials {
                        secret_data,
                        env: BTreeMap::new(),
                        annotations,
                    });
                }
                // The scale set vanished under us: recreate it once.
                Err(e) if e.status() == Some(404) && attempt == 0 => {
                    attempt += 1;
                    entry.lock().await.forget_set(id);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Removes `runner` at the service, by an id the service itself gave for its name.
    ///
    /// The Job's `runner-id` annotation is not that: anyone who may edit Jobs in the namespace
    /// can rewrite it, and a DELETE of `agents/{id}` removes any runner the admin token reaches
    /// (self-hosted runners of the scope, other scale sets). So the id is the one this session
    /// got with the JIT config (core tells it in the annotations of a runner registered here,
    /// from its own books, never from the Job), or else the one the service lists under the
    /// runner's name (`agents?agentName=`, one request, as scaleset's `GetRunnerByName`); a
    /// runner of that name in another scale set than the group's is not ours and is left alone.
    async fn remove_inner(&self, ctx: &GroupContext, runner: &RunnerRef) -> Result<RemoveOutcome, ApiError> {
        let (client, mut sets) = {
            let entry = self.entry(&ctx.key);
            let mut st = entry.lock().await;
            let client = self.ensure_client(ctx, &mut st).await?;
            (client, st.set_ids())
        };
        if sets.is_empty() {
            sets.extend(ctx.group.status.as_ref().and_then(|s| s.scale_set_id));
        }
        let annotated = runner
            .annotations
            .get(RUNNER_ID_ANNOTATION)
            .and_then(|v| v.parse::<i64>().ok());
        let issued = annotated.filter(|_| runner.registered_here);
        let id = match issued {
            Some(id) => Some(id),
            None => match runners::find_by_name(&client, &runner.name).await? {
                Some(found) if !sets.is_empty() && !sets.contains(&found.runner_scale_set_id) => {
                    tracing::warn!(
                        group = %ctx.key,
                        runner = %runner.name,
                        runner_id = found.id,
                        scale_set_id = found.runner_scale_set_id,
                        "a runner of this name is registered outside the group's scale sets; not deleting it"
                    );
                    None
                }
                found => found.map(|f| f.id),
            },
        };
        if let (Some(id), Some(a)) = (id, annotated)
            && a != id
        {
            tracing::warn!(
                group = %ctx.key,
                runner = %runner.name,
                runner_id = id,
                annotated_id = a,
                "the runner id on the runner's Job is not the service's; removing by the service's"
            );
        }
        let Some(id) = id else {
            return Ok(RemoveOutcome::Removed);
        };
        match runners::remove(&client, id).await? {
            Removal::Removed => Ok(RemoveOutcome::Removed),
            Removal::Busy => Ok(RemoveOutcome::Busy),
        }
    }

    async fn shutdown_inner(&self, ctx: &GroupContext) -> Result<(), ApiError> {
        let removed = {
            let mut groups = self
                .groups
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            groups.remove(&ctx.key)
        };
        let mut st = match removed {
            Some(entry) => std::mem::take(&mut *entry.lock().await),
            None => GroupState::default(),
        };
        futures::future::join_all(st.take_listeners().into_iter().map(Listener::stop)).await;
        // A new client forgets the sets it knew; the classes' are needed below.
        let known = std::mem::take(&mut st.classes);
        let client = self.ensure_client(ctx, &mut st).await?;
        st.classes = known;
        self.delete_class_sets(ctx, &mut st, &client).await?;
        let id = match &st.scale_set {
            Some(s) => Some(s.id),
            None => {
                let known = ctx.group.status.as_ref().and_then(|s| s.scale_set_id);
                match known {
                    Some(id) => Some(id),
                    None => {
                        let want = ensure::desired(ctx)?;
                        let gid = scale_set::runner_group_id(&client, want.runner_group.as_deref()).await?;
                        scale_set::find(&client, gid, &want.name).await?.map(|s| s.id)
                    }
                }
            }
        };
        if let Some(id) = id {
            scale_set::delete(&client, id).await?;
            tracing::info!(group = %ctx.key, scale_set_id = id, "deleted GitHub runner scale set");
        }
        Ok(())
    }
}

/// The statistics to plan on, and whether the view is complete enough to scale down on: the
/// session's while its polls succeed; stale ones while they fail (still the best demand there
/// is, but runners may have taken jobs unseen); without a session the scale set's, never
/// complete. `statistics` is `omitempty` on the scale set (actions/scaleset `types.go`,
/// `RunnerScaleSet`) and no upstream client reads it from there: when it is absent the pass
/// still runs (cleanup, status) on no known demand, and scales nothing down.
fn statistics_basis(
    session: Option<crate::types::Statistics>,
    polls_failing: bool,
    scale_set: Option<crate::types::Statistics>,
) -> (crate::types::Statistics, bool) {
    match session {
        Some(s) => (s, !polls_failing),
        None => (scale_set.unwrap_or_default(), false),
    }
}

/// Whether the runner's Job says it was registered in a scale set other than the group's
/// `current` ones (one deleted since, then made again under the same name).
fn registered_in_another_scale_set(r: &RunnerRef, current: &[i64]) -> bool {
    r.annotations
        .get(SCALE_SET_ID_ANNOTATION)
        .and_then(|v| v.parse::<i64>().ok())
        .is_some_and(|set| !current.contains(&set))
}

/// One scale set of a group in a pass: its id, the labels its waiting jobs are reported with
/// (none for the group's own set) and what its listener knows.
struct SetReading {
    id: i64,
    labels: Vec<String>,
    state: crate::listener::ListenerState,
}

fn not_ready() -> ApiError {
    ApiError::NotReady("the scale set has not reported statistics yet".into())
}

fn map_err(e: ApiError) -> ForgeError {
    e.into()
}

/// What [`Forge::describe`] and the sessions ([`session::GithubSession`]) are made of; tests
/// call them directly.
impl GithubForge {
    /// What the forge refuses in `spec` (the error side of [`Forge::describe`]).
    pub fn validate(&self, spec: &RunnerGroupSpec) -> Vec<SpecViolation> {
        let mut out: Vec<SpecViolation> = spec
            .github
            .as_ref()
            .map(crate::validate::validate_github)
            .unwrap_or_default();
        out.extend(crate::validate::validate_classes(spec));
        out.extend(crate::runner_version::check(spec));
        out
    }

    /// What `spec` names in the cluster ([`ForgeProfile::cluster_refs`]).
    pub fn cluster_refs(&self, spec: &RunnerGroupSpec) -> ClusterRefs {
        ClusterRefs {
            credentials_secret: spec
                .github
                .as_ref()
                .map(|g| g.credentials.clone())
                .unwrap_or_default(),
            ca_bundle_config_map: spec.github.as_ref().and_then(|g| g.ca_bundle_config_map.clone()),
            webhook_secret: None,
        }
    }

    /// The URLs of `spec` the operator connects to ([`ForgeProfile::outbound_urls`]).
    pub fn outbound_urls(&self, spec: &RunnerGroupSpec) -> Vec<OutboundUrl> {
        let Some(gh) = spec.github.as_ref() else {
            return Vec::new();
        };
        // The API host (api.github.com for github.com, the same host for GHES) follows from
        // configUrl; the Actions service URL comes from GitHub's own answer.
        let mut urls = vec![OutboundUrl {
            field: "spec.github.configUrl",
            url: gh.config_url.clone(),
        }];
        urls.extend(gh.proxy_url.iter().map(|p| OutboundUrl {
            field: "spec.github.proxyUrl",
            url: p.clone(),
        }));
        urls
    }

    /// How long a group may go without a pass ([`ForgeProfile::resync_interval`]).
    pub fn resync_interval(&self, _spec: &RunnerGroupSpec) -> std::time::Duration {
        RESYNC
    }

    /// The default pod of one new runner ([`ForgeSession::runner_pod`]).
    pub fn default_runner_pod(
        &self,
        group: &RunnerGroup,
        _runner_name: &str,
        secret_name: &str,
        _credentials: &RunnerCredentials,
        // The class's labels are its scale set's: the JIT config carries them.
        _class: Option<&RunnerClass>,
    ) -> PodSpec {
        pod::default_runner_pod(group, secret_name)
    }

    /// What the runner pods may do ([`ForgeProfile::runner_role_rules`]).
    pub fn runner_role_rules(&self, spec: &RunnerGroupSpec) -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
        crate::container_mode::runner_role_rules(spec)
    }

    /// What a failed runner's exit code means ([`ForgeProfile::runner_exits`]).
    pub fn runner_exit_meaning(&self, exit_code: i32) -> Option<RunnerExit> {
        // The default pod asks the runner to exit with this code when its version is deprecated.
        (exit_code == pod::RUNNER_EXIT_OUTDATED).then_some(RunnerExit::Outdated)
    }

    /// The forge's view of the group ([`ForgeSession::snapshot`]).
    pub async fn observe(
        &self,
        group: &GroupContext,
        runners: &[RunnerRef],
    ) -> Result<ForgeView, ForgeError> {
        self.observe_inner(group, runners).await.map_err(map_err)
    }

    /// What a new runner of the group's own needs to join ([`ForgeSession::register`]).
    pub async fn runner_credentials(
        &self,
        group: &GroupContext,
        runner_name: &str,
    ) -> Result<RunnerCredentials, ForgeError> {
        self.credentials_inner(group, runner_name, None)
            .await
            .map_err(map_err)
    }

    /// What a new runner of `class` needs to join ([`ForgeSession::register`]).
    pub async fn runner_credentials_of_class(
        &self,
        group: &GroupContext,
        runner_name: &str,
        class: Option<&RunnerClass>,
    ) -> Result<RunnerCredentials, ForgeError> {
        self.credentials_inner(group, runner_name, class)
            .await
            .map_err(map_err)
    }

    /// Deregisters a runner ([`ForgeSession::deregister`]).
    pub async fn remove_runner(
        &self,
        group: &GroupContext,
        runner: &RunnerRef,
    ) -> Result<RemoveOutcome, ForgeError> {
        self.remove_inner(group, runner).await.map_err(map_err)
    }

    /// Asks the forge to re-run a killed runner's job ([`ForgeSession::rerun_job`]).
    pub async fn rerun_job(
        &self,
        group: &GroupContext,
        runner: &str,
        job: &JobIdentity,
    ) -> Result<RerunOutcome, ForgeError> {
        let client = {
            let entry = self.entry(&group.key);
            let mut st = entry.lock().await;
            self.ensure_client(group, &mut st).await.map_err(map_err)?
        };
        crate::rerun::rerun_job(&client, runner, job).await
    }

    /// Deletes the group's forge-side resources ([`ForgeSession::delete_group`]).
    pub async fn shutdown(&self, group: &GroupContext) -> Result<(), ForgeError> {
        // Errors go to the reconciler, which bounds the retries and tells the user what is
        // left (the finalizer is never held beyond its cleanup budget).
        match self.shutdown_inner(group).await {
            Ok(()) => Ok(()),
            Err(e) if e.status() == Some(404) => Ok(()),
            Err(e) => Err(map_err(e)),
        }
    }

    /// Stops the group's background work and forgets its state ([`ForgeSession::close`]).
    pub async fn release(&self, key: &GroupKey) {
        self.release_inner(key).await;
    }

    /// What a failed cleanup may leave ([`ForgeProfile::cleanup_hint`]).
    pub fn cleanup_hint(&self, spec: &RunnerGroupSpec) -> String {
        let name = spec
            .github
            .as_ref()
            .and_then(|g| g.scale_set_name.as_deref())
            .filter(|n| !n.trim().is_empty())
            .map_or_else(|| "named after the group".to_owned(), |n| format!("'{n}'"));
        let classes = if spec.classes.is_empty() {
            String::new()
        } else {
            " (and one per class, named after it with '-<class>')".to_owned()
        };
        format!(
            "the runner scale set {name}{classes} and its runners may remain at GitHub: delete them under \
             Settings → Actions → Runners of the configUrl's repository, organization or \
             enterprise (GitHub also drops ephemeral runners that never connect)"
        )
    }
}

#[async_trait]
impl Forge for GithubForge {
    fn kind(&self) -> ForgeKind {
        ForgeKind::Github
    }

    fn describe(&self, spec: &RunnerGroupSpec) -> Result<ForgeProfile, Vec<SpecViolation>> {
        let violations = self.validate(spec);
        if !violations.is_empty() {
            return Err(violations);
        }
        Ok(ForgeProfile {
            cluster_refs: self.cluster_refs(spec),
            outbound_urls: self.outbound_urls(spec),
            resync_interval: self.resync_interval(spec),
            cleanup_hint: self.cleanup_hint(spec),
            runner_role_rules: self.runner_role_rules(spec),
            // The default pod asks the runner to exit with this code when its version is
            // deprecated.
            runner_exits: BTreeMap::from([(pod::RUNNER_EXIT_OUTDATED, RunnerExit::Outdated)]),
        })
    }

    fn open(&self, key: &GroupKey) -> Box<dyn ForgeSession> {
        Box::new(session::GithubSession::new(self.clone(), key.clone()))
    }

    async fn shutdown_all(&self) {
        let entries: Vec<_> = {
            let mut groups = self
                .groups
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            groups.drain().map(|(_, v)| v).collect()
        };
        let stops = entries.into_iter().map(|entry| async move {
            let listeners = entry.lock().await.take_listeners();
            futures::future::join_all(listeners.into_iter().map(Listener::stop)).await;
        });
        futures::future::join_all(stops).await;
        self.transports
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
        self.served
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
        self.report_cache();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// D5/D6 of the GitHub findings: a scale set without `statistics` (it is `omitempty`)
    /// must not fail the pass, and statistics of a session whose polls fail are no ground to
    /// scale down on.
    #[test]
    fn the_view_is_complete_only_on_a_healthy_sessions_statistics() {
        let stats = crate::types::Statistics {
            total_assigned_jobs: 3,
            ..Default::default()
        };
        assert_eq!(statistics_basis(Some(stats), false, None), (stats, true));
        assert_eq!(statistics_basis(Some(stats), true, None), (stats, false));
        assert_eq!(statistics_basis(None, false, Some(stats)), (stats, false));
        assert_eq!(
            statistics_basis(None, false, None),
            (crate::types::Statistics::default(), false),
            "no statistics on the scale set: no known demand, no error"
        );
    }

    #[test]
    fn a_runner_of_a_scale_set_made_again_is_not_supply() {
        let runner = |set: Option<&str>| RunnerRef {
            name: "r".into(),
            annotations: set
                .map(|v| BTreeMap::from([(SCALE_SET_ID_ANNOTATION.to_owned(), v.to_owned())]))
                .unwrap_or_default(),
            phase: forgerunner_core::plan::RunnerPhase::Running,
            stored: true,
            registered_here: false,
        };
        assert!(registered_in_another_scale_set(&runner(Some("7")), &[8]));
        assert!(!registered_in_another_scale_set(&runner(Some("8")), &[8]));
        assert!(
            !registered_in_another_scale_set(&runner(Some("9")), &[8, 9]),
            "a runner of a class's scale set is supply"
        );
        assert!(
            !registered_in_another_scale_set(&runner(None), &[8]),
            "older Jobs without the id are left alone"
        );
        assert!(!registered_in_another_scale_set(&runner(Some("x")), &[8]));
    }

    #[test]
    fn only_the_deprecated_version_exit_code_means_outdated() {
        let (trigger, _rx) = ReconcileTrigger::channel();
        let forge = GithubForge::new(Arc::new(Metrics::default()), trigger);
        assert_eq!(
            forge.runner_exit_meaning(crate::RUNNER_EXIT_OUTDATED),
            Some(RunnerExit::Outdated)
        );
        for code in [0, 1, 2, 137, -1] {
            assert_eq!(forge.runner_exit_meaning(code), None, "exit code {code}");
        }
    }
}
