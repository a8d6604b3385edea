//! Finds the group's runners that will not start, from their pods and their Jobs' `FailedCreate`
//! Events. Only runners pending for a while are looked at, so a healthy group whose runners
//! start promptly costs no extra API calls.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams};
use tracing::debug;

use super::error::ServerMessage;
use super::runner_exit::JOB_NAME_LABEL;
use crate::plan::{ObservedRunner, RunnerPhase};
use crate::runner_job::GROUP_LABEL;
use crate::startup::{Stuck, classify};

/// A runner pending for less than this is not looked at: most pods start within it.
pub const LOOK_AFTER: Duration = Duration::from_secs(5);
/// Event reason the Job controller uses when it cannot create a pod.
const FAILED_CREATE: &str = "FailedCreate";

/// The pending runners of `group` (by name) that are stuck, and why.
///
/// Best effort: a failed lookup is logged and treated as "nothing seen", which still leaves the
/// startup timeout to catch a runner that never starts.
pub async fn find_stuck(
    pods: &Api<Pod>,
    events: &Api<Event>,
    group: &str,
    runners: &[ObservedRunner],
    startup_timeout: Duration,
) -> BTreeMap<String, Stuck> {
    let candidates: Vec<&ObservedRunner> = runners
        .iter()
        .filter(|r| r.phase == RunnerPhase::Pending && !r.ever_busy)
        .filter(|r| Duration::from_secs(r.age_seconds) >= LOOK_AFTER.min(startup_timeout))
        .collect();
    if candidates.is_empty() {
        return BTreeMap::new();
    }
    let lp = ListParams::default()
        .labels(&format!("{GROUP_LABEL}={group}"))
        .fields("status.phase=Pending");
    let pending_pods: BTreeMap<String, Pod> = match pods.list(&lp).await {
        Ok(list) => list
            .items
            .into_iter()
            .filter_map(|p| {
                let job = p.metadata.labels.as_ref()?.get(JOB_NAME_LABEL)?.clone();
                Some((job, p))
            })
            .collect(),
        Err(e) => {
            debug!(group, error = %ServerMessage(&e), "could not list pending runner pods");
            BTreeMap::new()
        }
    };
    let without_pod = candidates.iter().any(|r| !pending_pods.contains_key(&r.name));
    let failed_creates = if without_pod {
        failed_create_messages(events, group).await
    } else {
        BTreeMap::new()
    };
    candidates
        .into_iter()
        .filter_map(|r| {
            let stuck = classify(
                pending_pods.get(&r.name),
                failed_creates.get(&r.name).map(String::as_str),
                Duration::from_secs(r.age_seconds),
                startup_timeout,
            )?;
            Some((r.name.clone(), stuck))
        })
        .collect()
}

/// The newest `FailedCreate` message of each Job in the namespace (callers look their own up).
async fn failed_create_messages(events: &Api<Event>, group: &str) -> BTreeMap<String, String> {
    let lp = ListParams::default().fields(&format!("involvedObject.kind=Job,reason={FAILED_CREATE}"));
    let list = match events.list(&lp).await {
        Ok(list) => list.items,
        Err(e) => {
            debug!(group, error = %ServerMessage(&e), "could not list FailedCreate events");
            return BTreeMap::new();
        }
    };
    let mut newest: BTreeMap<String, (Option<jiff::Timestamp>, String)> = BTreeMap::new();
    for ev in list {
        let Some(job) = ev.involved_object.name.clone() else {
            continue;
        };
        let at = ev
            .last_timestamp
            .as_ref()
            .map(|t| t.0)
            .or_else(|| ev.event_time.as_ref().map(|t| t.0));
        let message = ev.message.unwrap_or_default();
        let entry = newest.entry(job).or_insert((at, message.clone()));
        if at > entry.0 {
            *entry = (at, message);
        }
    }
    newest.into_iter().map(|(k, (_, m))| (k, m)).collect()
}
