//! The generic reconciler: one `kube::runtime::Controller` over `RunnerGroup`s per watched
//! namespace (or one for all), owning the runner Jobs, woken by forge triggers.
//!
//! Each pass observes (reflector stores, forge demand), plans ([`crate::plan`]), applies, and
//! writes the status by server-side apply; see [`pipeline`].

pub mod apply;
pub mod cache_server;
pub mod classes;
pub mod cleanup;
pub mod context;
pub mod docker_cache;
pub mod error;
pub mod event_writer;
pub mod events;
pub mod fair_share;
pub mod forge_call;
pub mod hook_leftovers;
pub mod identity;
pub mod ledger;
pub mod observe;
pub mod owned;
mod pass;
pub mod pass_metrics;
pub mod pipeline;
pub mod repair;
pub mod rerun;
pub mod runner_exit;
pub mod runner_rbac;
pub mod spans;
pub mod stage_track;
pub mod stalled;
pub mod startup_check;
pub mod status;
pub mod status_write;

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use event_writer::EventWriter;
use futures::StreamExt;
use kube::Client;
use kube::api::Api;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::crd::{RunnerGroup, RunnerGroupSpec};
use crate::fence::Fence;
use crate::forge::{Forge, GroupKey};
use crate::forge_hosts::ForgeHostAllowlist;
use crate::metrics::Metrics;
use crate::runner_job::{MANAGED_BY_SELECTOR, ObservedJob};

pub use context::Context;
pub use error::ReconcileError;

/// Finalizer on every `RunnerGroup`: deregister runners and release forge resources first.
pub const FINALIZER: &str = "forgerunner.dev/cleanup";
/// Field manager of every write (server-side apply and creates).
pub const FIELD_MANAGER: &str = "forgerunner";
/// Controller name in Events.
pub const CONTROLLER_NAME: &str = "forgerunner";

/// The enabled forge backends.
pub trait ForgeSet: Send + Sync + 'static {
    /// The enabled backends, one per forge.
    fn enabled(&self) -> Vec<&dyn Forge>;

    /// The backend `spec.forge` names, or `None` when that forge is disabled (→ `Ready=False
    /// ForgeDisabled`).
    fn for_spec(&self, spec: &RunnerGroupSpec) -> Option<&dyn Forge> {
        self.enabled().into_iter().find(|f| f.kind() == spec.forge)
    }

    /// The backend whose forge is named `name` (`github`, `gitea`, …), if enabled.
    fn by_name(&self, name: &str) -> Option<&dyn Forge> {
        self.enabled().into_iter().find(|f| f.kind().as_str() == name)
    }
}

/// How the controller runs.
#[derive(Clone, Debug, Default)]
pub struct ControllerOptions {
    /// Namespaces to watch; empty = all.
    pub namespaces: Vec<String>,
    /// This process's identity (pod name), reported in Events.
    pub instance: String,
    /// Groups reconciled at once (0 = unbounded).
    pub concurrency: u16,
    /// Hosts the groups' forge URLs may point at (empty: any).
    pub forge_hosts: ForgeHostAllowlist,
    /// Checked before every forge write; open when leader election is off.
    pub fence: Fence,
    /// The ClusterRoles a group's runner RBAC binds; `None`: no runner container hooks.
    pub runner_hooks: Option<runner_rbac::RunnerHooks>,
    /// The clock `spec.schedules` are read on (the system's but in tests).
    pub calendar: crate::schedule::CalendarClock,
}

/// Why the controller could not run.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// A controller task panicked or was aborted.
    #[error("controller task for {scope} ended abnormally: {source}")]
    Task {
        /// `all namespaces` or the namespace.
        scope: String,
        /// The join error.
        #[source]
        source: tokio::task::JoinError,
    },
}

/// Spec, metadata and deletion changes wake a group; its own status writes do not.
fn group_predicate(g: &RunnerGroup) -> Option<u64> {
    let m = &g.metadata;
    let mut h = DefaultHasher::new();
    (
        m.generation,
        m.deletion_timestamp.is_some(),
        &m.finalizers,
        &m.labels,
        &m.annotations,
    )
        .hash(&mut h);
    Some(h.finish())
}

/// Drops what the reconciler never reads from a runner Job before the store keeps it:
/// `managedFields` and condition messages (an [`ObservedJob`] never had the pod template). The
/// store holds every runner Job of every group, so this is most of the operator's memory under
/// load; what stays is what [`observe`] and the forges read (labels, annotations, owners,
/// timestamps, status counters and condition types).
pub fn slim_job(job: &mut ObservedJob) {
    job.metadata.managed_fields = None;
    if let Some(status) = job.status.as_mut() {
        for c in status.conditions.iter_mut().flatten() {
            c.message = None;
        }
        status.uncounted_terminated_pods = None;
    }
}

/// Drops `managedFields` from a `RunnerGroup` before the store keeps it: nothing reads them,
/// and every status write by server-side apply grows them.
pub fn slim_group(group: &mut RunnerGroup) {
    group.metadata.managed_fields = None;
}

/// Runs the controller until `shutdown` is cancelled; sets `ready` once every store has synced.
pub async fn run_controller(
    client: Client,
    forges: Arc<dyn ForgeSet>,
    metrics: Arc<Metrics>,
    triggers: mpsc::UnboundedReceiver<GroupKey>,
    options: ControllerOptions,
    ready: Arc<AtomicBool>,
    shutdown: CancellationToken,
) -> Result<(), ControllerError> {
    let reporter = Reporter {
        controller: CONTROLLER_NAME.to_owned(),
        instance: Some(options.instance.clone()),
    };
    let recorder = EventWriter::new(client.clone(), reporter);
    // One budget of runner creations for every namespace this controller watches.
    let create_permits = Arc::new(tokio::sync::Semaphore::new(context::PROCESS_CREATE_PARALLELISM));
    // The controllers' slots, shared fairly between forge instances and namespaces.
    let fair_share = Arc::new(fair_share::FairShare::for_slots(usize::from(options.concurrency)));

    let shared = Shared {
        client: &client,
        forges: &forges,
        metrics: &metrics,
        recorder: &recorder,
        options: &options,
        create_permits: &create_permits,
        fair_share: &fair_share,
        shutdown: &shutdown,
    };
    let mut senders: HashMap<Option<String>, mpsc::UnboundedSender<ObjectRef<RunnerGroup>>> = HashMap::new();
    // Every task is owned by a JoinSet: dropping this future (the leader aborting a deposed
    // term) aborts them all, so no reconcile outlives its term.
    let mut controllers = JoinSet::new();
    let mut scopes_by_task = HashMap::new();
    let mut helpers = JoinSet::new();
    let mut readiness = Vec::new();
    for scope in scopes(&options.namespaces) {
        let (tx, rx) = mpsc::unbounded_channel();
        senders.insert(scope.clone(), tx);
        let label = scope.clone().unwrap_or_else(|| "all namespaces".to_owned());
        let (controller, synced) = scope_controller(&shared, scope.as_deref(), rx, &mut helpers);
        readiness.push(synced);
        let task = controllers.spawn({
            let label = label.clone();
            async move {
                info!(scope = %label, "controller started");
                controller.await;
                info!(scope = %label, "controller stopped");
            }
        });
        scopes_by_task.insert(task.id(), label);
    }

    let ready_flag = ready.clone();
    helpers.spawn(async move {
        if futures::future::join_all(readiness)
            .await
            .into_iter()
            .all(|ok| ok)
        {
            ready_flag.store(true, Ordering::SeqCst);
            info!("caches synced; ready");
        }
    });
    helpers.spawn(forward_triggers(triggers, senders, shutdown.clone()));

    let mut result = Ok(());
    while let Some(joined) = controllers.join_next().await {
        if let Err(source) = joined {
            let scope = scopes_by_task.remove(&source.id()).unwrap_or_default();
            warn!(%scope, error = %source, "controller task failed");
            result = Err(ControllerError::Task { scope, source });
        }
    }
    ready.store(false, Ordering::SeqCst);
    helpers.abort_all();
    result
}

/// The namespace scopes to watch, one controller each: the namespaces named, or all (`None`).
fn scopes(namespaces: &[String]) -> Vec<Option<String>> {
    if namespaces.is_empty() {
        return vec![None];
    }
    let mut ns = namespaces.to_vec();
    ns.sort();
    ns.dedup();
    ns.into_iter().map(Some).collect()
}

/// What the controllers of every namespace scope share.
struct Shared<'a> {
    client: &'a Client,
    forges: &'a Arc<dyn ForgeSet>,
    metrics: &'a Arc<Metrics>,
    recorder: &'a EventWriter,
    options: &'a ControllerOptions,
    create_permits: &'a Arc<tokio::sync::Semaphore>,
    fair_share: &'a Arc<fair_share::FairShare>,
    shutdown: &'a CancellationToken,
}

/// The controller of one namespace scope (`None`: all namespaces), ready to run, and a future
/// that tells whether its stores synced. `wake` carries the forges' reconcile requests.
fn scope_controller(
    shared: &Shared<'_>,
    scope: Option<&str>,
    wake: mpsc::UnboundedReceiver<ObjectRef<RunnerGroup>>,
    helpers: &mut JoinSet<()>,
) -> (
    impl std::future::Future<Output = ()> + Send + 'static,
    impl std::future::Future<Output = bool> + Send + 'static,
) {
    let client = shared.client;
    let (groups_api, jobs_api): (Api<RunnerGroup>, Api<ObservedJob>) = match scope {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let (group_reader, group_writer) = reflector::store();
    let (job_reader, job_writer) = reflector::store();
    let groups = watcher(groups_api, watcher::Config::default())
        .default_backoff()
        .modify(slim_group)
        .reflect(group_writer)
        .applied_objects()
        .predicate_filter(group_predicate, Default::default());
    let jobs = watcher(jobs_api, watcher::Config::default().labels(MANAGED_BY_SELECTOR))
        .default_backoff()
        .modify(slim_job)
        .reflect(job_writer)
        .touched_objects();
    let jobs_synced = Arc::new(AtomicBool::new(false));
    let (synced, jobs_store) = (jobs_synced.clone(), job_reader.clone());
    helpers.spawn(async move {
        if store_ready(&jobs_store).await {
            synced.store(true, Ordering::SeqCst);
        }
    });
    let ctx = Arc::new(
        Context::new(
            client.clone(),
            shared.forges.clone(),
            shared.metrics.clone(),
            shared.recorder.clone(),
            job_reader.clone(),
            jobs_synced,
        )
        .with_forge_hosts(shared.options.forge_hosts.clone())
        .with_fence(shared.options.fence.clone())
        .with_runner_hooks(shared.options.runner_hooks.clone())
        .with_create_permits(shared.create_permits.clone())
        .with_fair_share(shared.fair_share.clone())
        .with_calendar_clock(shared.options.calendar.clone()),
    );
    let (gr, jr) = (group_reader.clone(), job_reader);
    let ready = async move { store_ready(&gr).await && store_ready(&jr).await };
    let controller = Controller::for_stream(groups, group_reader)
        .owns_stream(jobs)
        .reconcile_on(futures::stream::unfold(wake, |mut rx| async move {
            rx.recv().await.map(|r| (r, rx))
        }))
        .with_config(ControllerConfig::default().concurrency(shared.options.concurrency))
        .graceful_shutdown_on(shared.shutdown.clone().cancelled_owned());
    let run = controller
        .run(pipeline::reconcile, pipeline::error_policy, ctx)
        .for_each(|res| async move {
            match res {
                Ok((obj, _)) => debug!(group = %obj, "reconciled"),
                Err(e) => debug!(error = %e, "reconcile failed"),
            }
        });
    (run, ready)
}

/// Waits until `store` has synced; false if its writer is gone.
///
/// `Store::wait_until_ready` keeps one waker only, and the controller waits on the same store,
/// so a second waiter may never be woken: re-poll it on a short timer instead.
async fn store_ready<K>(store: &reflector::Store<K>) -> bool
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    loop {
        match tokio::time::timeout(std::time::Duration::from_millis(100), store.wait_until_ready()).await {
            Ok(res) => return res.is_ok(),
            Err(_elapsed) => continue,
        }
    }
}

/// Routes forge triggers to the controller of the group's namespace; others are dropped.
async fn forward_triggers(
    mut triggers: mpsc::UnboundedReceiver<GroupKey>,
    senders: HashMap<Option<String>, mpsc::UnboundedSender<ObjectRef<RunnerGroup>>>,
    shutdown: CancellationToken,
) {
    loop {
        let key = tokio::select! {
            () = shutdown.cancelled() => return,
            k = triggers.recv() => match k { Some(k) => k, None => return },
        };
        let tx = senders
            .get(&None)
            .or_else(|| senders.get(&Some(key.namespace.clone())));
        match tx {
            Some(tx) => {
                let _ = tx.send(ObjectRef::new(&key.name).within(&key.namespace));
            }
            None => debug!(group = %key, "trigger for an unwatched namespace dropped"),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

    use super::*;
    use crate::plan::RunnerPhase;

    #[test]
    fn slim_job_keeps_what_observation_reads() {
        let mut job = ObservedJob {
            metadata: ObjectMeta {
                name: Some("g-abcde".into()),
                namespace: Some("ci".into()),
                labels: Some([("forgerunner.dev/group".to_owned(), "g".to_owned())].into()),
                annotations: Some(
                    [(crate::runner_job::BUSY_ANNOTATION.to_owned(), "true".to_owned())].into(),
                ),
                managed_fields: Some(vec![ManagedFieldsEntry::default()]),
                ..ObjectMeta::default()
            },
            status: Some(JobStatus {
                ready: Some(1),
                conditions: Some(vec![JobCondition {
                    type_: "Complete".into(),
                    status: "True".into(),
                    message: Some("long text".into()),
                    ..JobCondition::default()
                }]),
                ..JobStatus::default()
            }),
        };
        let before = (
            observe::job_phase(&job),
            observe::ever_busy(&job),
            observe::job_annotations(&[Arc::new(job.clone())], "g-abcde"),
        );
        slim_job(&mut job);
        assert!(job.metadata.managed_fields.is_none());
        let conds = job
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .expect("conditions kept");
        assert!(conds[0].message.is_none());
        let after = (
            observe::job_phase(&job),
            observe::ever_busy(&job),
            observe::job_annotations(&[Arc::new(job.clone())], "g-abcde"),
        );
        assert_eq!(before, after);
        assert_eq!(after.0, RunnerPhase::Succeeded);
        assert_eq!(job.metadata.labels.map(|l| l.len()), Some(1));
    }

    #[test]
    fn slim_group_drops_managed_fields_only() {
        let mut g: RunnerGroup = serde_json::from_value(serde_json::json!({
            "apiVersion": "forgerunner.dev/v1alpha1", "kind": "RunnerGroup",
            "metadata": {"name": "g", "namespace": "ci", "generation": 3,
                "managedFields": [{"manager": "forgerunner", "operation": "Apply"}]},
            "spec": {"forge": "gitea", "maxRunners": 1,
                "gitea": {"url": "https://x", "scope": "global", "credentials": "c", "labels": ["l"]}}
        }))
        .expect("group");
        let spec = g.spec.clone();
        slim_group(&mut g);
        assert!(g.metadata.managed_fields.is_none());
        assert_eq!((g.metadata.generation, g.spec), (Some(3), spec));
    }
}
