//! Pod quotas the Job controller honours, and the `FailedCreate` events it records on a Job
//! whose pod could not be created (quota, or any API refusal), as the real controller does.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::events::{JobKey, lock};
use super::logic::PodOutcome;

/// Name of the ResourceQuota the simulated quota pretends to be.
pub const POD_QUOTA_NAME: &str = "pods-quota";
/// `reason` of the event recorded when a Job's pod cannot be created.
pub const FAILED_CREATE_REASON: &str = "FailedCreate";
/// `source.component` (and `reportingComponent`) of the Job controller's events.
pub const JOB_CONTROLLER_COMPONENT: &str = "job-controller";
/// How long a created pod counts against the quota before the cache must show it.
const RESERVATION_TTL: Duration = Duration::from_secs(30);
/// Cap of the create backoff, as a multiple of the configured base.
const MAX_BACKOFF_FACTOR: u32 = 16;

/// A pod refused because the namespace's quota is used up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaExceeded {
    /// Non-terminal pods counted against the quota.
    pub used: u32,
    /// The quota.
    pub limit: u32,
}

impl QuotaExceeded {
    /// The message of the Job's `FailedCreate` event for a pod the server has not named yet,
    /// so quota admission names it by its generateName `pod_name`, as the API server's quota
    /// admission and the Job controller word it.
    pub fn message(&self, pod_name: &str) -> String {
        format!(
            "Error creating: pods \"{pod_name}\" is forbidden: exceeded quota: {POD_QUOTA_NAME}, \
             requested: pods=1, used: pods={}, limited: pods={}",
            self.used, self.limit
        )
    }
}

/// Per-namespace pod quotas, changeable while the simulator runs.
#[derive(Debug, Default)]
pub(crate) struct PodQuotas {
    limits: RwLock<BTreeMap<String, u32>>,
    /// Namespace → pods created but perhaps not yet in the cache (name → when), so pods
    /// created in quick succession count before the watch catches up.
    reserved: Mutex<HashMap<String, HashMap<String, Instant>>>,
}

impl PodQuotas {
    /// Quotas starting at `limits`.
    pub fn new(limits: BTreeMap<String, u32>) -> PodQuotas {
        PodQuotas {
            limits: RwLock::new(limits),
            reserved: Mutex::default(),
        }
    }

    /// Sets or lifts the quota of `namespace`.
    pub fn set(&self, namespace: &str, limit: Option<u32>) {
        let mut limits = self.limits.write().unwrap_or_else(|p| p.into_inner());
        match limit {
            Some(limit) => limits.insert(namespace.to_owned(), limit),
            None => limits.remove(namespace),
        };
    }

    fn limit(&self, namespace: &str) -> Option<u32> {
        let limits = self.limits.read().unwrap_or_else(|p| p.into_inner());
        limits.get(namespace).copied()
    }

    /// Reserves room for pod `name` in `namespace`, whose cached pods `cached` lists (only
    /// called when a quota applies); refuses when the quota is used up.
    pub fn admit(
        &self,
        namespace: &str,
        name: &str,
        cached: impl FnOnce() -> Vec<Arc<Pod>>,
    ) -> Result<(), QuotaExceeded> {
        let Some(limit) = self.limit(namespace) else {
            return Ok(());
        };
        let pods = cached();
        let present: HashSet<&str> = pods.iter().filter_map(|p| p.metadata.name.as_deref()).collect();
        let active = pods
            .iter()
            .filter(|p| PodOutcome::of(p) == PodOutcome::Active)
            .count();
        let now = Instant::now();
        let mut reserved = lock(&self.reserved);
        let pending = reserved.entry(namespace.to_owned()).or_default();
        pending.retain(|n, at| !present.contains(n.as_str()) && now.duration_since(*at) < RESERVATION_TTL);
        let used = u32::try_from(active + pending.len()).unwrap_or(u32::MAX);
        if used >= limit {
            return Err(QuotaExceeded { used, limit });
        }
        pending.insert(name.to_owned(), now);
        Ok(())
    }

    /// The pod reserved as `placeholder` was created and named `name` by the server: the
    /// reservation follows the name, so the cache showing the pod ends it.
    pub fn named(&self, namespace: &str, placeholder: &str, name: &str) {
        if let Some(pending) = lock(&self.reserved).get_mut(namespace)
            && let Some(at) = pending.remove(placeholder)
        {
            pending.insert(name.to_owned(), at);
        }
    }

    /// Gives back the room reserved for `name` (its creation failed).
    pub fn release(&self, namespace: &str, name: &str) {
        if let Some(pending) = lock(&self.reserved).get_mut(namespace) {
            pending.remove(name);
        }
    }
}

/// How to write the Job's `FailedCreate` event this time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum EventWrite {
    /// First failure of the series: a new event.
    Create {
        /// Event name.
        name: String,
    },
    /// A repeat: the existing event's `count`, `lastTimestamp` and message are updated, as the
    /// event recorder aggregates repeats instead of piling up events.
    Bump {
        /// Event name.
        name: String,
        /// The new count.
        count: i32,
    },
}

#[derive(Debug)]
struct Failures {
    uid: String,
    /// Consecutive failures, for the backoff.
    streak: u32,
    event: String,
    count: i32,
}

/// Failed pod creations per Job: the retry backoff and the event series.
#[derive(Debug)]
pub(crate) struct FailedCreates {
    base: Duration,
    by_job: Mutex<HashMap<JobKey, Failures>>,
}

impl FailedCreates {
    /// Tracking with backoff starting at `base`.
    pub fn new(base: Duration) -> FailedCreates {
        FailedCreates {
            base,
            by_job: Mutex::default(),
        }
    }

    /// Counts a failed creation for the Job `key` (UID `uid`); returns how long to wait before
    /// trying again and how to record it.
    pub fn failed(&self, key: &JobKey, uid: &str) -> (Duration, EventWrite) {
        let mut by_job = lock(&self.by_job);
        let entry = by_job
            .entry(key.clone())
            .and_modify(|f| {
                if f.uid != uid {
                    // A re-created Job with the same name: a new series.
                    f.count = 0;
                    f.streak = 0;
                }
            })
            .or_insert_with(|| Failures {
                uid: uid.to_owned(),
                streak: 0,
                event: String::new(),
                count: 0,
            });
        if entry.count == 0 {
            entry.uid = uid.to_owned();
            // The client-go recorder's naming: involved object name, then the time in hex.
            let nanos = Timestamp::now().as_nanosecond();
            entry.event = format!("{}.{nanos:x}", key.name);
        }
        entry.streak = entry.streak.saturating_add(1);
        entry.count = entry.count.saturating_add(1);
        let factor = 2u32
            .saturating_pow(entry.streak.saturating_sub(1))
            .min(MAX_BACKOFF_FACTOR);
        let write = if entry.count == 1 {
            EventWrite::Create {
                name: entry.event.clone(),
            }
        } else {
            EventWrite::Bump {
                name: entry.event.clone(),
                count: entry.count,
            }
        };
        (self.base * factor, write)
    }

    /// A pod of the Job was created: the backoff starts over (the event series goes on).
    pub fn succeeded(&self, key: &JobKey) {
        if let Some(f) = lock(&self.by_job).get_mut(key) {
            f.streak = 0;
        }
    }

    /// The Job is gone.
    pub fn forget(&self, key: &JobKey) {
        lock(&self.by_job).remove(key);
    }
}

/// The `FailedCreate` event for `job`, named `name`.
fn failed_create_event(job: &Job, name: &str, message: &str, count: i32, now: Timestamp) -> Event {
    let namespace = job.namespace().unwrap_or_default();
    Event {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.clone()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("batch/v1".to_owned()),
            kind: Some("Job".to_owned()),
            name: job.metadata.name.clone(),
            namespace: Some(namespace),
            uid: job.metadata.uid.clone(),
            resource_version: job.metadata.resource_version.clone(),
            field_path: None,
        },
        reason: Some(FAILED_CREATE_REASON.to_owned()),
        message: Some(message.to_owned()),
        type_: Some("Warning".to_owned()),
        source: Some(EventSource {
            component: Some(JOB_CONTROLLER_COMPONENT.to_owned()),
            host: None,
        }),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(count),
        reporting_component: Some(JOB_CONTROLLER_COMPONENT.to_owned()),
        reporting_instance: Some(String::new()),
        ..Event::default()
    }
}

fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404)
}

/// Writes the Job's `FailedCreate` event; failures are only logged (the retry follows anyway).
pub(crate) async fn record_failed_create(client: &kube::Client, job: &Job, message: &str, write: EventWrite) {
    let namespace = job.namespace().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
    let now = Timestamp::now();
    let (name, count) = match write {
        EventWrite::Create { name } => (name, 1),
        EventWrite::Bump { name, count } => {
            let patch = json!({"count": count, "lastTimestamp": Time(now), "message": message});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return,
                // Expired or deleted: write it afresh.
                Err(err) if is_not_found(&err) => (name, count),
                Err(err) => {
                    tracing::debug!(event = %name, error = %err, "updating FailedCreate event failed");
                    return;
                }
            }
        }
    };
    let event = failed_create_event(job, &name, message, count, now);
    if let Err(err) = api.create(&PostParams::default(), &event).await {
        tracing::debug!(event = %name, error = %err, "recording FailedCreate event failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> JobKey {
        JobKey {
            namespace: "ns".into(),
            name: "j".into(),
        }
    }

    #[test]
    fn quota_counts_reservations_and_active_pods() {
        let quotas = PodQuotas::new(BTreeMap::new());
        assert_eq!(quotas.admit("ns", "a", Vec::new), Ok(()), "no quota, no limit");
        quotas.set("ns", Some(1));
        assert_eq!(quotas.admit("ns", "b", Vec::new), Ok(()));
        assert_eq!(
            quotas.admit("ns", "c", Vec::new),
            Err(QuotaExceeded { used: 1, limit: 1 }),
            "b is reserved though not cached yet"
        );
        quotas.release("ns", "b");
        assert_eq!(quotas.admit("ns", "c", Vec::new), Ok(()));
        // Renamed to the server's name, the reservation ends when the cache shows that pod.
        quotas.named("ns", "c", "job-x2k4z");
        let cached: Pod = serde_json::from_value(json!({"metadata": {"name": "job-x2k4z"},
            "status": {"phase": "Succeeded"}}))
        .unwrap();
        assert_eq!(quotas.admit("ns", "e", || vec![Arc::new(cached)]), Ok(()));
        quotas.set("ns", None);
        assert_eq!(quotas.admit("ns", "d", Vec::new), Ok(()));
    }

    #[test]
    fn message_shape() {
        let m = QuotaExceeded { used: 2, limit: 2 }.message("job-");
        assert_eq!(
            m,
            "Error creating: pods \"job-\" is forbidden: exceeded quota: pods-quota, requested: pods=1, used: pods=2, limited: pods=2"
        );
    }

    #[test]
    fn backoff_doubles_and_caps_and_events_aggregate() {
        let f = FailedCreates::new(Duration::from_millis(100));
        let (d1, w1) = f.failed(&key(), "u");
        assert_eq!(d1, Duration::from_millis(100));
        let EventWrite::Create { name } = w1 else {
            panic!("first failure creates an event")
        };
        assert!(name.starts_with("j."));
        let (d2, w2) = f.failed(&key(), "u");
        assert_eq!(d2, Duration::from_millis(200));
        assert_eq!(w2, EventWrite::Bump { name, count: 2 });
        for _ in 0..10 {
            f.failed(&key(), "u");
        }
        assert_eq!(f.failed(&key(), "u").0, Duration::from_millis(1600));
        f.succeeded(&key());
        assert_eq!(f.failed(&key(), "u").0, Duration::from_millis(100));
    }
}
