//! Watch callbacks of the Job controller: they queue Jobs to reconcile, keep an index of which
//! pods each Job controls and record the final phase of deleted pods.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use tokio::sync::mpsc;

use super::logic::JobMemory;
use super::podgen::{controlling_job_name, controlling_job_uid};
use crate::sim::stores::Handler;

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

pub(crate) type Memory = Arc<Mutex<HashMap<JobKey, JobMemory>>>;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
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

pub(crate) type Index = Arc<Mutex<PodIndex>>;

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

    /// Handler for pod events (the owning Job is reconciled); records deleted pods as last seen
    /// so a pod that succeeded and vanished between reconciles is not counted as failed, and a
    /// failed one is matched against the Job's `podFailurePolicy`.
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
                        mem.tombstones.insert(uid, Arc::new(pod.clone()));
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
}
