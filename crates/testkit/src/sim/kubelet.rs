//! The kubelet stand-in: admits pods, resolves their configuration, runs the registered
//! behaviour and reports container and pod status; also eviction, node loss and image pulls.
//! A pod's life from admission to exit is in [`lifecycle`].

mod lifecycle;
mod unreachable;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::core::v1::PodStatus;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::config::{Counters, NodeLoss, SimConfig, SimError};
use super::podstatus::{InitRecord, Placement, Stage, status_with_init};
use super::registry::BehaviourRegistry;
use super::scheduling::{NodeView, parse_quantity};
use super::sources::Sources;

/// Attempts for one status write before giving up on a transient API error.
const WRITE_ATTEMPTS: u32 = 3;
/// How long a cancelled behaviour may keep running to clean up.
const CANCEL_GRACE: Duration = Duration::from_secs(2);

/// Namespace and name of a pod.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PodKey {
    pub namespace: String,
    pub name: String,
}

impl PodKey {
    fn of(pod: &Pod) -> PodKey {
        PodKey {
            namespace: pod.namespace().unwrap_or_default(),
            name: pod.name_any(),
        }
    }
}

/// One admitted pod.
#[derive(Clone)]
struct Run {
    uid: String,
    pod: Arc<Pod>,
    place: Placement,
    cancel: CancellationToken,
    /// Set by whoever writes (or observes) the terminal status first; later writers back off.
    terminal: Arc<AtomicBool>,
    /// What each init container did so far (index = position in `initContainers`), shared so
    /// an eviction's status write shows it too.
    init: Arc<Mutex<Vec<InitRecord>>>,
}

impl Run {
    fn new(uid: String, pod: Pod, place: Placement, cancel: CancellationToken) -> Run {
        Run {
            uid,
            pod: Arc::new(pod),
            place,
            cancel,
            terminal: Arc::new(AtomicBool::new(false)),
            init: Arc::new(Mutex::new(Vec::new())),
        }
    }
}

/// Kubelet state shared by the watch callback and the per-pod tasks.
pub(crate) struct Kubelet {
    client: kube::Client,
    config: SimConfig,
    registry: Arc<BehaviourRegistry>,
    sources: Sources,
    counters: Arc<Counters>,
    shutdown: CancellationToken,
    runs: Mutex<HashMap<PodKey, Run>>,
    /// UIDs whose deletion we already confirmed, so a pod is not deleted twice.
    confirming: Mutex<HashSet<String>>,
    pull_failures: RwLock<Vec<String>>,
    /// Image prefix → how long its pull takes.
    slow_pulls: RwLock<Vec<(String, Duration)>>,
    /// The node as the scheduler sees it; unschedulable pods wait for it to change.
    node: watch::Sender<NodeView>,
    next_ip: AtomicU32,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404)
}

/// Sleeps `d` unless cancelled first; returns whether the sleep completed.
async fn sleep_or_cancel(d: Duration, cancel: &CancellationToken) -> bool {
    if d.is_zero() {
        return !cancel.is_cancelled();
    }
    tokio::select! {
        biased;
        _ = cancel.cancelled() => false,
        _ = tokio::time::sleep(d) => true,
    }
}

impl Kubelet {
    /// A kubelet reading configuration from `sources`.
    pub fn new(
        client: kube::Client,
        config: SimConfig,
        registry: Arc<BehaviourRegistry>,
        sources: Sources,
        counters: Arc<Counters>,
        shutdown: CancellationToken,
    ) -> Kubelet {
        let pull_failures = RwLock::new(config.image_pull_failures.clone());
        let slow_pulls = RwLock::new(config.slow_pulls.clone());
        let node = watch::Sender::new(NodeView::from_config(&config));
        Kubelet {
            client,
            config,
            registry,
            sources,
            counters,
            shutdown,
            runs: Mutex::new(HashMap::new()),
            confirming: Mutex::new(HashSet::new()),
            pull_failures,
            slow_pulls,
            node,
            next_ip: AtomicU32::new(2),
        }
    }

    /// Makes images starting with `prefix` fail to pull from now on.
    pub fn fail_image_pulls(&self, prefix: &str) {
        self.pull_failures
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(prefix.to_owned());
    }

    fn pull_fails(&self, image: &str) -> bool {
        let failures = self.pull_failures.read().unwrap_or_else(|p| p.into_inner());
        failures.iter().any(|prefix| image.starts_with(prefix.as_str()))
    }

    /// Makes images starting with `prefix` take `delay` to pull from now on (replacing an
    /// earlier delay for the same prefix; the longest matching prefix wins).
    pub fn slow_image_pulls(&self, prefix: &str, delay: Duration) {
        let mut slow = self.slow_pulls.write().unwrap_or_else(|p| p.into_inner());
        slow.retain(|(p, _)| p != prefix);
        slow.push((prefix.to_owned(), delay));
    }

    fn pull_delay(&self, image: &str) -> Option<Duration> {
        let slow = self.slow_pulls.read().unwrap_or_else(|p| p.into_inner());
        slow.iter()
            .filter(|(prefix, _)| image.starts_with(prefix.as_str()))
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, delay)| *delay)
    }

    /// Sets (or with `None` removes) a node label; pending unschedulable pods are re-checked.
    pub fn set_node_label(&self, key: &str, value: Option<&str>) {
        self.node.send_modify(|node| match value {
            Some(value) => {
                node.labels.insert(key.to_owned(), value.to_owned());
            }
            None => {
                node.labels.remove(key);
            }
        });
    }

    /// Sets (or with `None` lifts) the node's allocatable amount of `resource`; pending
    /// unschedulable pods are re-checked.
    pub fn set_node_allocatable(&self, resource: &str, quantity: Option<&str>) -> Result<(), SimError> {
        let amount = quantity
            .map(|q| {
                parse_quantity(q).ok_or_else(|| SimError::InvalidQuantity {
                    resource: resource.to_owned(),
                    quantity: q.to_owned(),
                })
            })
            .transpose()?;
        self.node.send_modify(|node| match amount {
            Some(amount) => {
                node.allocatable.insert(resource.to_owned(), amount);
            }
            None => {
                node.allocatable.remove(resource);
            }
        });
        Ok(())
    }

    fn placement(&self) -> Placement {
        let n = self.next_ip.fetch_add(1, Ordering::Relaxed);
        Placement {
            host_ip: "10.96.0.10".to_owned(),
            pod_ip: format!("10.244.{}.{}", (n >> 8) & 0xff, n & 0xff),
            start_time: Timestamp::now(),
        }
    }

    /// Reacts to one pod watch event.
    pub fn on_event(self: &Arc<Self>, event: &watcher::Event<Pod>) {
        match event {
            watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => self.on_pod(pod),
            watcher::Event::Delete(pod) => self.on_gone(pod),
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }

    fn on_pod(self: &Arc<Self>, pod: &Pod) {
        let key = PodKey::of(pod);
        let uid = pod.uid().unwrap_or_default();
        let mut runs = lock(&self.runs);
        if pod.metadata.deletion_timestamp.is_some() {
            if let Some(run) = runs.get(&key).filter(|r| r.uid == uid).cloned() {
                runs.remove(&key);
                run.terminal.store(true, Ordering::SeqCst);
                run.cancel.cancel();
            }
            drop(runs);
            self.confirm_deletion(pod, key, uid);
            return;
        }
        if let Some(run) = runs.get(&key) {
            if run.uid == uid {
                // A terminal phase we did not write: an outside driver finished the container.
                if is_terminal(pod) && !run.terminal.swap(true, Ordering::SeqCst) {
                    run.cancel.cancel();
                }
                return;
            }
            // Same name, new pod: the old one is gone.
            run.terminal.store(true, Ordering::SeqCst);
            run.cancel.cancel();
            runs.remove(&key);
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if !matches!(phase, None | Some("Pending")) {
            // Running or finished before we saw it (e.g. a previous simulator): not ours.
            return;
        }
        let run = Run::new(uid, pod.clone(), self.placement(), self.shutdown.child_token());
        runs.insert(key, run.clone());
        drop(runs);
        let me = self.clone();
        tokio::spawn(async move { me.run_pod(run).await });
    }

    fn on_gone(&self, pod: &Pod) {
        let key = PodKey::of(pod);
        let uid = pod.uid().unwrap_or_default();
        let mut runs = lock(&self.runs);
        if let Some(run) = runs.get(&key).filter(|r| r.uid == uid).cloned() {
            runs.remove(&key);
            run.terminal.store(true, Ordering::SeqCst);
            run.cancel.cancel();
        }
        drop(runs);
        lock(&self.confirming).remove(&uid);
    }

    /// The containers are gone once the pod is deleting: tell the API server so (grace 0), as
    /// the kubelet does, unless finalizers still hold the pod.
    fn confirm_deletion(&self, pod: &Pod, key: PodKey, uid: String) {
        if !pod.finalizers().is_empty() || !lock(&self.confirming).insert(uid) {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &key.namespace);
        tokio::spawn(async move {
            if let Err(err) = api
                .delete(&key.name, &DeleteParams::default().grace_period(0))
                .await
                && !is_not_found(&err)
            {
                tracing::debug!(pod = %key.name, error = %err, "confirming pod deletion failed");
            }
        });
    }

    /// Writes `stage` for `run`'s pod; returns false when the pod is gone or the write failed.
    async fn write(&self, run: &Run, stage: &Stage) -> bool {
        let init = lock(&run.init).clone();
        let status = status_with_init(&run.pod, &run.place, stage, Some(&init), Timestamp::now());
        self.write_status(run, status).await
    }

    /// Writes `status` for `run`'s pod as a merge patch (lists replaced whole).
    async fn write_status(&self, run: &Run, status: PodStatus) -> bool {
        let patch = Patch::Merge(json!({ "status": status }));
        let namespace = run.pod.namespace().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let name = run.pod.name_any();
        for attempt in 1..=WRITE_ATTEMPTS {
            match api.patch_status(&name, &PatchParams::default(), &patch).await {
                Ok(_) => return true,
                Err(err) if is_not_found(&err) => return false,
                Err(err) => {
                    tracing::debug!(pod = %name, attempt, error = %err, "pod status write failed");
                    if !sleep_or_cancel(Duration::from_millis(50 * u64::from(attempt)), &self.shutdown).await
                    {
                        return false;
                    }
                }
            }
        }
        false
    }

    /// Claims the pod's terminal status for an outside event (eviction, node loss); `None` if
    /// the pod already finished.
    async fn claim(&self, namespace: &str, name: &str) -> Result<Option<Run>, SimError> {
        let key = PodKey {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        };
        let existing = lock(&self.runs).get(&key).cloned();
        let run = match existing {
            Some(run) => run,
            None => {
                let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
                let Some(pod) = api.get_opt(name).await? else {
                    return Err(SimError::PodNotFound {
                        namespace: key.namespace,
                        name: key.name,
                    });
                };
                if is_terminal(&pod) {
                    return Ok(None);
                }
                let uid = pod.uid().unwrap_or_default();
                Run::new(uid, pod, self.placement(), CancellationToken::new())
            }
        };
        if run.terminal.swap(true, Ordering::SeqCst) {
            return Ok(None);
        }
        run.cancel.cancel();
        Counters::bump(&self.counters.pods_failed);
        Ok(Some(run))
    }

    /// Evicts the pod: phase `Failed`, reason `Evicted`.
    pub async fn evict(&self, namespace: &str, name: &str) -> Result<(), SimError> {
        if let Some(run) = self.claim(namespace, name).await? {
            self.write(&run, &Stage::Evicted).await;
        }
        Ok(())
    }

    /// Loses the pod's node: the pod is deleted, marked `Failed` (`NodeLost`), or goes through
    /// what the control plane does for an unreachable node or a deleted Node object.
    pub async fn lose_pod(&self, namespace: &str, name: &str, mode: NodeLoss) -> Result<(), SimError> {
        let Some(run) = self.claim(namespace, name).await? else {
            return Ok(());
        };
        match mode {
            NodeLoss::Unreachable => self.lose_unreachable(namespace, name).await?,
            NodeLoss::NodeDeleted => self.lose_deleted_node(namespace, name).await?,
            NodeLoss::Fail => {
                self.write(&run, &Stage::NodeLost).await;
            }
            NodeLoss::Delete => {
                let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
                match api.delete(name, &DeleteParams::default().grace_period(0)).await {
                    Ok(_) => {}
                    Err(err) if is_not_found(&err) => {}
                    Err(err) => return Err(err.into()),
                }
            }
        }
        Ok(())
    }

    /// Loses the node for every pod not yet finished; returns how many pods were affected.
    pub async fn lose_node(&self, mode: NodeLoss) -> Result<usize, SimError> {
        let keys: Vec<PodKey> = lock(&self.runs)
            .iter()
            .filter(|(_, run)| !run.terminal.load(Ordering::SeqCst))
            .map(|(key, _)| key.clone())
            .collect();
        let mut lost = 0;
        for key in keys {
            match self.lose_pod(&key.namespace, &key.name, mode).await {
                Ok(()) => lost += 1,
                Err(SimError::PodNotFound { .. }) => {}
                Err(err) => return Err(err),
            }
        }
        Ok(lost)
    }
}
