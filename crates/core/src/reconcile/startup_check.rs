//! Finds the group's runners that will not start, from their pods and their Jobs' `FailedCreate`
//! Events. Only runners pending for a while are looked at, so a healthy group whose runners
//! start promptly costs no extra API calls.
//!
//! The Events are read per runner Job, by name and with a `limit`, never namespace-wide: one
//! list of every `FailedCreate` in the namespace cost what the namespace's other workloads made
//! it cost, on every pass of every group with a stuck runner (security review L7).

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
/// Most runners whose Events one pass looks up (each lookup is one small list). The oldest go
/// first; the others are looked up on later passes, as the ones found stuck are removed, and
/// meanwhile the startup timeout still applies to them.
pub const MAX_FAILED_CREATE_LOOKUPS: usize = 8;
/// Most Events one lookup reads. The Job controller's recorder folds repeats of a message into
/// one Event (its `count`) and combines similar ones after ten, so a Job has a few of them; any
/// one tells why its pods are refused.
pub const FAILED_CREATE_EVENT_LIMIT: u32 = 16;

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
    let mut without_pod: Vec<(u64, &str)> = candidates
        .iter()
        .filter(|r| !pending_pods.contains_key(&r.name))
        .map(|r| (r.age_seconds, r.name.as_str()))
        .collect();
    // Oldest first (then by name): they are nearest to the startup timeout, which would fail
    // them with a vaguer reason than the Event gives.
    without_pod.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    let mut failed_creates = BTreeMap::new();
    for (_, job) in without_pod.into_iter().take(MAX_FAILED_CREATE_LOOKUPS) {
        match failed_create_message(events, job).await {
            Ok(Some(message)) => {
                failed_creates.insert(job.to_owned(), message);
            }
            Ok(None) => {}
            Err(e) => {
                // The next lookup would most likely fail the same way (RBAC, an unavailable API
                // server); the startup timeout still catches these runners.
                debug!(group, error = %ServerMessage(&e), "could not list FailedCreate events");
                break;
            }
        }
    }
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

/// What one lookup asks for: the `FailedCreate` Events of Job `job` alone, at most
/// [`FAILED_CREATE_EVENT_LIMIT`] of them. Core Events are selectable by these fields
/// (`ToSelectableFields`, `pkg/registry/core/event/strategy.go`).
fn failed_create_params(job: &str) -> ListParams {
    ListParams::default()
        .fields(&format!(
            "involvedObject.kind=Job,involvedObject.name={job},reason={FAILED_CREATE}"
        ))
        .limit(FAILED_CREATE_EVENT_LIMIT)
}

/// The newest `FailedCreate` message of Job `job`, if it has one.
async fn failed_create_message(events: &Api<Event>, job: &str) -> Result<Option<String>, kube::Error> {
    let list = events.list(&failed_create_params(job)).await?;
    let newest = list
        .items
        .into_iter()
        // The selector names the Job already; this keeps a server that ignored it harmless.
        .filter(|ev| ev.involved_object.name.as_deref() == Some(job))
        .map(|ev| {
            let at = ev
                .last_timestamp
                .as_ref()
                .map(|t| t.0)
                .or_else(|| ev.event_time.as_ref().map(|t| t.0));
            (at, ev.message.unwrap_or_default())
        })
        // The first of equals wins, as before: a later Event replaces it only when newer.
        .reduce(|best, next| if next.0 > best.0 { next } else { best });
    Ok(newest.map(|(_, message)| message))
}
