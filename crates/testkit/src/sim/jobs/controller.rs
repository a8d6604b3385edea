//! The Job controller loop: watch events feed a work queue; each reconcile reads the caches,
//! asks [`logic::decide`] what to do and writes pods, Job status and TTL deletions.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, ResourceExt};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::events::{Index, JobKey, JobMsg, Memory, lock};
use super::logic::{self, JobMemory};
use super::podgen::{build_pod, controlling_job_uid, generate_name, pod_name};
use super::quota::{EventWrite, FailedCreates, PodQuotas, record_failed_create};
use crate::sim::config::{Counters, SimConfig};
use crate::sim::queue::WorkQueue;
use crate::sim::stores::NsStores;

/// Retry delay after a failed write.
const RETRY_AFTER: Duration = Duration::from_secs(1);

fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404)
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
    /// Pod quotas, set from the handle.
    pub quotas: Arc<PodQuotas>,
    /// Failed creations per Job: backoff and the `FailedCreate` event series.
    pub failed_creates: FailedCreates,
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
        self.failed_creates.forget(key);
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
        let mut create_backoff = None;
        for _ in 0..decision.create {
            // Holds the quota reservation until the API server has named the pod.
            let placeholder = pod_name(&key.name);
            let generate = generate_name(&key.name);
            let mut pod = match build_pod(&job, placeholder.clone()) {
                Ok(pod) => pod,
                Err(err) => {
                    tracing::warn!(job = %key.name, error = %err, "cannot build pod for job");
                    break;
                }
            };
            // As `CreatePodsWithGenerateName`: the server names the pod, and a refusal names
            // the pod by its generateName.
            pod.metadata.name = None;
            pod.metadata.generate_name = Some(generate.clone());
            let admitted = self.quotas.admit(&key.namespace, &placeholder, || {
                self.pods.in_namespace(&key.namespace)
            });
            if let Err(exceeded) = admitted {
                create_backoff = Some(self.failed_create(key, &job, &exceeded.message(&generate)).await);
                break;
            }
            match pod_api.create(&PostParams::default(), &pod).await {
                Ok(created) => {
                    let name = created.metadata.name.unwrap_or(placeholder.clone());
                    self.quotas.named(&key.namespace, &placeholder, &name);
                    next.expected.insert(name, now);
                    Counters::bump(&self.counters.pods_created);
                    self.failed_creates.succeeded(key);
                }
                Err(err) => {
                    tracing::debug!(job = %key.name, error = %err, "creating pod failed");
                    self.quotas.release(&key.namespace, &placeholder);
                    match &err {
                        // Admission refused it (a ResourceQuota, Pod Security, a missing
                        // ServiceAccount): the Job controller says why on the Job and backs off.
                        // Other errors retry as before.
                        kube::Error::Api(status) if status.code == 403 => {
                            let message = format!("Error creating: {}", status.message);
                            create_backoff = Some(self.failed_create(key, &job, &message).await);
                            break;
                        }
                        _ => retry = true,
                    }
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
        let requeue = match (retry, decision.requeue_after) {
            (true, Some(after)) => Some(after.min(RETRY_AFTER)),
            (true, None) => Some(RETRY_AFTER),
            (false, after) => after,
        };
        match (requeue, create_backoff) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Records a failed pod creation on the Job; returns the backoff before the next try.
    async fn failed_create(&self, key: &JobKey, job: &Job, message: &str) -> Duration {
        let uid = job.uid().unwrap_or_default();
        let (backoff, write): (Duration, EventWrite) = self.failed_creates.failed(key, &uid);
        record_failed_create(&self.client, job, message, write).await;
        backoff
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
