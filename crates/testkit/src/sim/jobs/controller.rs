//! The Job controller loop: watch events feed a work queue; each reconcile reads the caches,
//! asks [`logic::decide`] what to do and writes pods, Job status and TTL deletions.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::logic::{self, JobMemory, PodOutcome};
use super::podgen::{build_pod, controlling_job_name, controlling_job_uid, pod_name};
use crate::sim::config::{Counters, SimConfig};
use crate::sim::queue::WorkQueue;
use crate::sim::stores::{Handler, NsStores};

/// Retry delay after a failed write.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Namespace and name of a Job.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct JobKey {
    pub namespace: String,
    pub name: String,
}

/// Messages from the watch callbacks to the controller loop.
pub(crate) enum JobMsg {
    /// Something about this Job changed.
    Reconcile(JobKey),
    /// The Job was deleted.
    Gone { key: JobKey, uid: String },
}

type Memory = Arc<Mutex<HashMap<JobKey, JobMemory>>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404)
}

fn job_key_of_pod(pod: &Pod) -> Option<JobKey> {
    Some(JobKey {
        namespace: pod.namespace()?,
        name: controlling_job_name(pod)?.to_owned(),
    })
}

/// Which pods each Job controls, kept from pod events so a reconcile does not scan all pods.
#[derive(Debug, Default)]
pub(crate) struct PodIndex {
    /// Job UID → names of its pods (in the Job's namespace).
    by_job: HashMap<String, HashSet<String>>,
    /// (namespace, pod name) → controlling Job UID.
    job_of: HashMap<(String, String), String>,
}

impl PodIndex {
    fn update(&mut self, pod: &Pod) {
        let key = (pod.namespace().unwrap_or_default(), pod.name_any());
        let owner = controlling_job_uid(pod).map(str::to_owned);
        if self.job_of.get(&key) == owner.as_ref() {
            return;
        }
        self.remove(&key);
        if let Some(owner) = owner {
            self.by_job
                .entry(owner.clone())
                .or_default()
                .insert(key.1.clone());
            self.job_of.insert(key, owner);
        }
    }

    fn remove(&mut self, key: &(String, String)) {
        if let Some(owner) = self.job_of.remove(key)
            && let Some(names) = self.by_job.get_mut(&owner)
        {
            names.remove(&key.1);
            if names.is_empty() {
                self.by_job.remove(&owner);
            }
        }
    }

    /// Names of the pods controlled by the Job with `uid`.
    pub fn pods_of(&self, uid: &str) -> Vec<String> {
        self.by_job
            .get(uid)
            .map(|names| names.iter().cloned().collect())
            .unwrap_or_default()
    }
}

type Index = Arc<Mutex<PodIndex>>;

/// Callback wiring between the watches and the controller loop.
#[derive(Clone)]
pub(crate) struct JobEvents {
    tx: mpsc::UnboundedSender<JobMsg>,
    memory: Memory,
    index: Index,
}

impl JobEvents {
    /// A channel pair: the callbacks' side and the receiver for [`JobController::run`].
    pub fn new() -> (JobEvents, mpsc::UnboundedReceiver<JobMsg>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let events = JobEvents {
            tx,
            memory: Memory::default(),
            index: Index::default(),
        };
        (events, rx)
    }

    /// The controller's memory, shared with the pod callback (tombstones).
    pub fn memory(&self) -> Memory {
        self.memory.clone()
    }

    /// The pod index the pod callback maintains.
    pub fn index(&self) -> Index {
        self.index.clone()
    }

    fn send(&self, msg: JobMsg) {
        // The loop is gone only at shutdown; nothing to do then.
        let _ = self.tx.send(msg);
    }

    /// Handler for Job watch events.
    pub fn job_handler(&self) -> Handler<Job> {
        let me = self.clone();
        Arc::new(move |event, store: &Store<Job>, _scope| match event {
            watcher::Event::Apply(job) => {
                if let Some(namespace) = job.namespace() {
                    me.send(JobMsg::Reconcile(JobKey {
                        namespace,
                        name: job.name_any(),
                    }));
                }
            }
            watcher::Event::Delete(job) => {
                if let Some(namespace) = job.namespace() {
                    let key = JobKey {
                        namespace,
                        name: job.name_any(),
                    };
                    me.send(JobMsg::Gone {
                        key,
                        uid: job.uid().unwrap_or_default(),
                    });
                }
            }
            // The cache is replaced only at InitDone: reconcile everything then.
            watcher::Event::InitDone => {
                for job in store.state() {
                    if let Some(namespace) = job.namespace() {
                        me.send(JobMsg::Reconcile(JobKey {
                            namespace,
                            name: job.name_any(),
                        }));
                    }
                }
            }
            watcher::Event::Init | watcher::Event::InitApply(_) => {}
        })
    }

    /// Handler for pod events (the owning Job is reconciled); records final phases of deleted
    /// pods so a pod that succeeded and vanished between reconciles is not counted as failed.
    pub fn pod_event(&self, event: &watcher::Event<Pod>, store: &Store<Pod>, scope: Option<&str>) {
        match event {
            watcher::Event::Apply(pod) => {
                lock(&self.index).update(pod);
                if let Some(key) = job_key_of_pod(pod) {
                    self.send(JobMsg::Reconcile(key));
                }
            }
            watcher::Event::Delete(pod) => {
                lock(&self.index).remove(&(pod.namespace().unwrap_or_default(), pod.name_any()));
                let Some(key) = job_key_of_pod(pod) else { return };
                if let (Some(job_uid), Some(uid)) = (controlling_job_uid(pod), pod.uid()) {
                    let mut memory = lock(&self.memory);
                    if let Some(mem) = memory.get_mut(&key).filter(|m| m.uid == job_uid) {
                        mem.tombstones.insert(uid, PodOutcome::of(pod));
                    }
                }
                self.send(JobMsg::Reconcile(key));
            }
            watcher::Event::InitDone => {
                let pods = store.state();
                {
                    // The cache was just replaced (a relist): rebuild the index from it.
                    let mut index = lock(&self.index);
                    let stale: Vec<(String, String)> = index
                        .job_of
                        .keys()
                        .filter(|(ns, _)| scope.is_none_or(|scope| scope == ns))
                        .cloned()
                        .collect();
                    for key in stale {
                        index.remove(&key);
                    }
                    for pod in &pods {
                        index.update(pod);
                    }
                }
                for pod in pods {
                    if let Some(key) = job_key_of_pod(&pod) {
                        self.send(JobMsg::Reconcile(key));
                    }
                }
            }
            watcher::Event::Init | watcher::Event::InitApply(_) => {}
        }
    }
}

/// The controller: caches, memory and the API client.
pub(crate) struct JobController {
    pub client: kube::Client,
    pub config: SimConfig,
    pub jobs: NsStores<Job>,
    pub pods: Arc<NsStores<Pod>>,
    pub memory: Memory,
    pub index: Index,
    pub counters: Arc<Counters>,
}

/// A status as a merge patch; fields the controller clears are sent as explicit nulls.
fn status_patch(status: &JobStatus) -> Value {
    let mut value = serde_json::to_value(status).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        for field in ["startTime", "completionTime"] {
            map.entry(field).or_insert(Value::Null);
        }
    }
    serde_json::json!({ "status": value })
}

impl JobController {
    /// Runs until `shutdown`, reconciling at most `config.job_workers` Jobs at once.
    pub async fn run(self: Arc<Self>, mut rx: mpsc::UnboundedReceiver<JobMsg>, shutdown: CancellationToken) {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = async { self.jobs.wait_ready().await; self.pods.wait_ready().await } => {}
        }
        let mut queue: WorkQueue<JobKey> = WorkQueue::default();
        let mut running: JoinSet<(JobKey, Option<Duration>)> = JoinSet::new();
        let mut keys_by_task = HashMap::new();
        let workers = self.config.job_workers.max(1);
        loop {
            while running.len() < workers {
                let Some(key) = queue.pop(tokio::time::Instant::now()) else {
                    break;
                };
                let me = self.clone();
                let task_key = key.clone();
                let handle = running.spawn(async move {
                    let requeue = me.reconcile(&task_key).await;
                    (task_key, requeue)
                });
                keys_by_task.insert(handle.id(), key);
            }
            let due = queue.next_due();
            tokio::select! {
                _ = shutdown.cancelled() => break,
                msg = rx.recv() => match msg {
                    None => break,
                    Some(JobMsg::Reconcile(key)) => queue.add(key),
                    Some(JobMsg::Gone { key, uid }) => {
                        queue.forget(&key);
                        self.forget(&key, &uid);
                        queue.add(key);
                    }
                },
                Some(done) = running.join_next_with_id(), if !running.is_empty() => {
                    let (id, requeue) = match done {
                        Ok((id, (_, requeue))) => (id, requeue),
                        Err(err) => (err.id(), Some(RETRY_AFTER)),
                    };
                    if let Some(key) = keys_by_task.remove(&id) {
                        queue.done(&key);
                        if let Some(after) = requeue {
                            queue.add_at(key, tokio::time::Instant::now() + after);
                        }
                    }
                }
                _ = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)), if due.is_some() => {}
            }
        }
        running.shutdown().await;
    }

    /// Drops the memory of a deleted Job and, if configured, deletes its leftover pods.
    fn forget(&self, key: &JobKey, uid: &str) {
        let mut memory = lock(&self.memory);
        if memory.get(key).is_some_and(|m| m.uid == uid) {
            memory.remove(key);
        }
        drop(memory);
        if !self.config.collect_orphans {
            return;
        }
        let orphans: Vec<String> = self
            .pods_of(&key.namespace, uid)
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| p.name_any())
            .collect();
        if orphans.is_empty() {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &key.namespace);
        tokio::spawn(async move {
            for name in orphans {
                if let Err(err) = api.delete(&name, &DeleteParams::background()).await
                    && !is_not_found(&err)
                {
                    tracing::debug!(pod = %name, error = %err, "deleting orphaned pod failed");
                }
            }
        });
    }

    /// The cached pods the Job with `uid` controls, found through the index.
    fn pods_of(&self, namespace: &str, uid: &str) -> Vec<Arc<Pod>> {
        let names = lock(&self.index).pods_of(uid);
        names
            .iter()
            .filter_map(|name| self.pods.get(namespace, name))
            .filter(|p| controlling_job_uid(p) == Some(uid))
            .collect()
    }

    /// One reconcile; returns when to look again without events.
    async fn reconcile(&self, key: &JobKey) -> Option<Duration> {
        let Some(job) = self.jobs.get(&key.namespace, &key.name) else {
            lock(&self.memory).remove(key);
            return None;
        };
        let uid = job.uid().unwrap_or_default();
        let pods = self.pods_of(&key.namespace, &uid);
        let refs: Vec<&Pod> = pods.iter().map(|p| p.as_ref()).collect();
        let before = lock(&self.memory)
            .get(key)
            .filter(|m| m.uid == uid)
            .cloned()
            .unwrap_or_else(|| JobMemory::first_sight(&job, &refs));
        let now = Timestamp::now();
        let decision = logic::decide(&job, &refs, &before, now);
        let mut next = decision.memory.clone();
        let mut retry = false;
        let pod_api: Api<Pod> = Api::namespaced(self.client.clone(), &key.namespace);
        let job_api: Api<Job> = Api::namespaced(self.client.clone(), &key.namespace);

        for (name, pod_uid) in &decision.delete {
            match pod_api.delete(name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(err) if is_not_found(&err) => {}
                Err(err) => {
                    tracing::debug!(pod = %name, error = %err, "deleting pod failed");
                    next.ignored.remove(pod_uid);
                    retry = true;
                }
            }
        }
        for _ in 0..decision.create {
            let name = pod_name(&key.name);
            let pod = match build_pod(&job, name.clone()) {
                Ok(pod) => pod,
                Err(err) => {
                    tracing::warn!(job = %key.name, error = %err, "cannot build pod for job");
                    break;
                }
            };
            match pod_api.create(&PostParams::default(), &pod).await {
                Ok(_) => {
                    next.expected.insert(name, now);
                    Counters::bump(&self.counters.pods_created);
                }
                Err(err) => {
                    tracing::debug!(job = %key.name, error = %err, "creating pod failed");
                    retry = true;
                }
            }
        }
        if let Some(status) = &decision.status {
            match job_api
                .patch_status(
                    &key.name,
                    &PatchParams::default(),
                    &Patch::Merge(status_patch(status)),
                )
                .await
            {
                Ok(_) => {
                    if !logic::is_finished(&before.status) && logic::is_finished(status) {
                        let failed = status.conditions.iter().flatten().any(|c| c.type_ == "Failed");
                        let counter = if failed {
                            &self.counters.jobs_failed
                        } else {
                            &self.counters.jobs_completed
                        };
                        Counters::bump(counter);
                    }
                }
                Err(err) if is_not_found(&err) => {
                    lock(&self.memory).remove(key);
                    return None;
                }
                Err(err) => {
                    tracing::debug!(job = %key.name, error = %err, "job status write failed");
                    // Counting must match what is written: keep the old view of it.
                    next.status = before.status.clone();
                    next.counted = before.counted.clone();
                    next.active_seen = before.active_seen.clone();
                    retry = true;
                }
            }
        }
        if decision.delete_job && !retry {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(uid.clone()),
                    resource_version: None,
                }),
                ..DeleteParams::background()
            };
            match job_api.delete(&key.name, &params).await {
                Ok(_) => Counters::bump(&self.counters.jobs_deleted),
                Err(err) if is_not_found(&err) => {}
                Err(err) => {
                    tracing::debug!(job = %key.name, error = %err, "deleting finished job failed");
                    retry = true;
                }
            }
        }
        {
            let mut memory = lock(&self.memory);
            // Tombstones recorded while this reconcile ran must survive it.
            let mut tombstones = memory
                .get(key)
                .filter(|m| m.uid == uid)
                .map(|m| m.tombstones.clone());
            let mut tombstones = tombstones.take().unwrap_or_default();
            if next.status == decision.memory.status {
                for consumed in &decision.consumed_tombstones {
                    tombstones.remove(consumed);
                }
            }
            next.tombstones = tombstones;
            memory.insert(key.clone(), next);
        }
        match (retry, decision.requeue_after) {
            (true, Some(after)) => Some(after.min(RETRY_AFTER)),
            (true, None) => Some(RETRY_AFTER),
            (false, after) => after,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(name: &str, owner: Option<&str>) -> Pod {
        let owners: Vec<serde_json::Value> = owner
            .map(|uid| json!({"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": uid, "controller": true}))
            .into_iter()
            .collect();
        serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": "ns", "ownerReferences": owners}}),
        )
        .unwrap()
    }

    #[test]
    fn pod_index_follows_owner_changes_and_deletes() {
        let mut index = PodIndex::default();
        index.update(&pod("a", Some("j1")));
        index.update(&pod("b", Some("j1")));
        index.update(&pod("c", None));
        let mut of_j1 = index.pods_of("j1");
        of_j1.sort();
        assert_eq!(of_j1, vec!["a", "b"]);
        // Orphaned (owner reference removed), then adopted elsewhere.
        index.update(&pod("a", None));
        assert_eq!(index.pods_of("j1"), vec!["b"]);
        index.update(&pod("a", Some("j2")));
        assert_eq!(index.pods_of("j2"), vec!["a"]);
        index.remove(&("ns".to_owned(), "b".to_owned()));
        assert!(index.pods_of("j1").is_empty());
        assert!(!index.by_job.contains_key("j1"), "empty sets are dropped");
    }

    #[test]
    fn status_patch_clears_times_explicitly() {
        let patch = status_patch(&JobStatus {
            active: Some(1),
            ..JobStatus::default()
        });
        assert_eq!(patch["status"]["active"], 1);
        assert!(patch["status"]["startTime"].is_null() && patch["status"].get("startTime").is_some());
    }
}
