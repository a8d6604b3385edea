//! The Job controller's decisions, pure: from a Job, its pods and what the controller remembers,
//! to the pods to create/delete, the new status, and when to look again.
//!
//! A Job with a `podFailurePolicy` (or `podReplacementPolicy: Failed`) is handled as
//! kubernetes/kubernetes `pkg/controller/job/job_controller.go` does: a pod is failed only in
//! phase `Failed` (`isPodFailed` returns false for a deleted pod not yet `Failed` when
//! `onlyReplaceFailedPods` holds), so a deleted pod still running is terminating, not failed, and
//! is not replaced; each failed pod is matched against the policy
//! ([`failure_policy`](super::failure_policy)); a `FailJob` match fails the Job with reason
//! `PodFailurePolicy` before the backoff limit is looked at (`syncJob`, `getFailJobMessage`), an
//! `Ignore` match is not counted (`nonIgnoredFailedPodsCount`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus, PodFailurePolicy};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::failure_policy::{PolicyAction, match_policy};

/// How long a created pod may stay unseen before the controller stops waiting for it.
const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(30);
/// Kubernetes' default `backoffLimit`.
const DEFAULT_BACKOFF_LIMIT: i32 = 6;

/// A pod's lifecycle phase as far as the Job controller cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodOutcome {
    /// Still running or pending.
    Active,
    /// Phase `Succeeded`.
    Succeeded,
    /// Phase `Failed`.
    Failed,
}

impl PodOutcome {
    /// The outcome of a pod from its status phase.
    pub fn of(pod: &Pod) -> PodOutcome {
        match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Succeeded") => PodOutcome::Succeeded,
            Some("Failed") => PodOutcome::Failed,
            _ => PodOutcome::Active,
        }
    }
}

/// What the controller remembers about one Job between reconciles; authoritative over the
/// (possibly stale) cached Job because the controller is the only status writer.
#[derive(Clone, Debug, Default)]
pub struct JobMemory {
    /// UID of the Job this memory belongs to (a re-created Job starts afresh).
    pub uid: String,
    /// The status last written.
    pub status: JobStatus,
    /// Pods already counted as succeeded or failed.
    pub counted: BTreeSet<String>,
    /// Pods seen last time and not counted yet (active, or terminating under a
    /// `podFailurePolicy`), to notice ones that vanish before they were counted.
    pub active_seen: BTreeSet<String>,
    /// Pods the controller deleted itself (suspend, finish): never counted as failures.
    pub ignored: BTreeSet<String>,
    /// Pods created but not yet seen in the cache: name → creation time.
    pub expected: BTreeMap<String, Timestamp>,
    /// Deleted pods as their watch deletion showed them last, by UID: their final phase and
    /// the conditions a `podFailurePolicy` is matched against. (The real controller keeps such a
    /// pod with its `batch.kubernetes.io/job-tracking` finalizer until it counted it; the
    /// simulator keeps what it needs of it here instead.)
    pub tombstones: BTreeMap<String, Arc<Pod>>,
}

impl JobMemory {
    /// Memory for a Job first seen (e.g. after a simulator restart): trusts the Job's status
    /// and, if it already counted pods, treats the terminal pods present as counted.
    pub fn first_sight(job: &Job, pods: &[&Pod]) -> JobMemory {
        let status = job.status.clone().unwrap_or_default();
        let has_counts = status.succeeded.unwrap_or(0) + status.failed.unwrap_or(0) > 0;
        let counted = if has_counts || finish_time(&status).is_some() {
            pods.iter()
                .filter(|p| PodOutcome::of(p) != PodOutcome::Active)
                .filter_map(|p| p.metadata.uid.clone())
                .collect()
        } else {
            BTreeSet::new()
        };
        JobMemory {
            uid: job.metadata.uid.clone().unwrap_or_default(),
            status,
            counted,
            ..Default::default()
        }
    }
}

/// What a reconcile should do.
#[derive(Clone, Debug, Default)]
pub struct Decision {
    /// Number of pods to create.
    pub create: usize,
    /// Pods to delete: (name, uid).
    pub delete: Vec<(String, String)>,
    /// The new status, when it differs from the one last written.
    pub status: Option<JobStatus>,
    /// Delete the Job itself (TTL after finished expired).
    pub delete_job: bool,
    /// Look again after this long even without events (deadlines, TTL).
    pub requeue_after: Option<Duration>,
    /// Memory to keep if the status write succeeds.
    pub memory: JobMemory,
    /// Tombstones consumed by this decision.
    pub consumed_tombstones: Vec<String>,
}

/// Condition types and reasons the controller writes, as Kubernetes names them.
mod names {
    pub const COMPLETE: &str = "Complete";
    pub const FAILED: &str = "Failed";
    pub const SUCCESS_CRITERIA_MET: &str = "SuccessCriteriaMet";
    pub const FAILURE_TARGET: &str = "FailureTarget";
    pub const SUSPENDED: &str = "Suspended";
}

/// Why a Job failed.
#[derive(Clone, Debug, PartialEq, Eq)]
enum FailReason {
    /// A failed pod matched a `FailJob` rule; the controller's message.
    PodFailurePolicy(String),
    BackoffLimitExceeded,
    DeadlineExceeded,
}

impl FailReason {
    fn reason(&self) -> &'static str {
        match self {
            FailReason::PodFailurePolicy(_) => "PodFailurePolicy",
            FailReason::BackoffLimitExceeded => "BackoffLimitExceeded",
            FailReason::DeadlineExceeded => "DeadlineExceeded",
        }
    }

    fn message(&self) -> &str {
        match self {
            FailReason::PodFailurePolicy(message) => message,
            FailReason::BackoffLimitExceeded => "Job has reached the specified backoff limit",
            FailReason::DeadlineExceeded => "Job was active longer than specified deadline",
        }
    }
}

/// Counts one failed pod (`pod`: as last seen, if known) under `policy`: an `Ignore` match is not
/// counted; the first `FailJob` match's message is kept in `fail_job`.
fn count_failure(
    policy: Option<&PodFailurePolicy>,
    pod: Option<&Pod>,
    failed: &mut i32,
    fail_job: &mut Option<String>,
) {
    let matched = policy
        .zip(pod)
        .and_then(|(policy, pod)| match_policy(policy, pod));
    match matched {
        Some(m) if m.action == PolicyAction::Ignore => {}
        Some(m) => {
            *failed += 1;
            if fail_job.is_none() {
                *fail_job = m.message;
            }
        }
        None => *failed += 1,
    }
}

/// Whether a Job status carries a true `Complete` or `Failed` condition.
pub fn is_finished(status: &JobStatus) -> bool {
    finish_time(status).is_some()
}

/// When the Job finished (`Complete`/`Failed` transition time), if it did.
pub fn finish_time(status: &JobStatus) -> Option<Timestamp> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| (c.type_ == names::COMPLETE || c.type_ == names::FAILED) && c.status == "True")
        .map(|c| {
            c.last_transition_time
                .as_ref()
                .or(status.completion_time.as_ref())
                .map(|t| t.0)
                .unwrap_or(Timestamp::UNIX_EPOCH)
        })
}

fn condition_is_true(status: &JobStatus, type_: &str) -> bool {
    status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// Sets a condition, keeping `lastTransitionTime` when the status does not change.
fn set_condition(
    status: &mut JobStatus,
    type_: &str,
    value: bool,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    let value = if value { "True" } else { "False" };
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if existing.status != value {
            existing.status = value.to_owned();
            existing.last_transition_time = Some(Time(now));
        }
        existing.last_probe_time = Some(Time(now));
        existing.reason = Some(reason.to_owned());
        existing.message = Some(message.to_owned());
        return;
    }
    conditions.push(JobCondition {
        type_: type_.to_owned(),
        status: value.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    });
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn until(target: Timestamp, now: Timestamp) -> Duration {
    let millis = target
        .as_millisecond()
        .saturating_sub(now.as_millisecond())
        .max(0);
    Duration::from_millis(u64::try_from(millis).unwrap_or(0))
}

fn add_seconds(at: Timestamp, seconds: i64) -> Timestamp {
    let millis = at.as_millisecond().saturating_add(seconds.saturating_mul(1000));
    Timestamp::from_millisecond(millis).unwrap_or(Timestamp::MAX)
}

/// Decides one reconcile of `job`, given the pods it controls and the controller's memory.
pub fn decide(job: &Job, pods: &[&Pod], memory: &JobMemory, now: Timestamp) -> Decision {
    let spec = job.spec.clone().unwrap_or_default();
    let mut mem = memory.clone();
    let mut st = mem.status.clone();
    let mut out = Decision::default();

    // Count newly terminal pods and pods that vanished while active.
    let present: BTreeSet<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    let present_names: BTreeSet<&str> = pods.iter().filter_map(|p| p.metadata.name.as_deref()).collect();
    mem.expected.retain(|name, created| {
        let age = now.as_millisecond().saturating_sub(created.as_millisecond());
        !present_names.contains(name.as_str())
            && u128::try_from(age).unwrap_or(0) < EXPECTATION_TIMEOUT.as_millis()
    });
    let policy = spec.pod_failure_policy.as_ref();
    // `onlyReplaceFailedPods` (job_controller.go): a podFailurePolicy, or
    // `podReplacementPolicy: Failed`.
    let only_failed = policy.is_some() || spec.pod_replacement_policy.as_deref() == Some("Failed");
    let mut succeeded = st.succeeded.unwrap_or(0);
    let mut failed = st.failed.unwrap_or(0);
    let mut fail_job = None;
    let mut active: Vec<&Pod> = Vec::new();
    let mut terminating = 0;
    for pod in pods {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let outcome = PodOutcome::of(pod);
        let deleting = pod.metadata.deletion_timestamp.is_some();
        if outcome == PodOutcome::Active && !deleting {
            active.push(pod);
            continue;
        }
        if deleting && outcome == PodOutcome::Active {
            terminating += 1;
            // `isPodFailed` (job_controller.go): a deleted pod counts as failed before its phase
            // says so only when `onlyReplaceFailedPods` is false.
            if only_failed {
                continue;
            }
        }
        if mem.counted.insert(uid.clone()) && !mem.ignored.contains(&uid) {
            // A pod deleted before it finished counts as failed, as in Kubernetes.
            match outcome {
                PodOutcome::Succeeded => succeeded += 1,
                _ => count_failure(policy, Some(pod), &mut failed, &mut fail_job),
            }
        }
    }
    for uid in mem.active_seen.iter().filter(|uid| !present.contains(*uid)) {
        let tomb = mem.tombstones.get(uid);
        if mem.counted.contains(uid) || mem.ignored.contains(uid) {
            continue;
        }
        match tomb.map(|p| PodOutcome::of(p)) {
            Some(PodOutcome::Succeeded) => succeeded += 1,
            _ => count_failure(policy, tomb.map(Arc::as_ref), &mut failed, &mut fail_job),
        }
    }
    out.consumed_tombstones = mem
        .tombstones
        .keys()
        .filter(|uid| !present.contains(*uid))
        .cloned()
        .collect();
    mem.active_seen = pods
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .filter(|uid| !mem.counted.contains(uid))
        .collect();
    mem.counted.retain(|uid| present.contains(uid));
    mem.ignored.retain(|uid| present.contains(uid));
    st.succeeded = Some(succeeded);
    st.failed = Some(failed);

    let mut delete_active = false;
    if is_finished(&st) {
        delete_active = true;
        if let Some(ttl) = spec.ttl_seconds_after_finished {
            let due = add_seconds(finish_time(&st).unwrap_or(now), i64::from(ttl));
            if now >= due {
                out.delete_job = true;
            } else {
                out.requeue_after = Some(until(due, now));
            }
        }
    } else if spec.suspend.unwrap_or(false) {
        delete_active = true;
        set_condition(
            &mut st,
            names::SUSPENDED,
            true,
            "JobSuspended",
            "Job suspended",
            now,
        );
        // Kubernetes resets the start time so activeDeadlineSeconds restarts on resume.
        st.start_time = None;
    } else {
        if condition_is_true(&st, names::SUSPENDED) {
            set_condition(&mut st, names::SUSPENDED, false, "JobResumed", "Job resumed", now);
        }
        let start = st.start_time.get_or_insert(Time(now)).0;
        let mut fail = None;
        if let Some(message) = fail_job {
            fail = Some(FailReason::PodFailurePolicy(message));
        } else if failed > spec.backoff_limit.unwrap_or(DEFAULT_BACKOFF_LIMIT) {
            fail = Some(FailReason::BackoffLimitExceeded);
        } else if let Some(deadline) = spec.active_deadline_seconds {
            let due = add_seconds(start, deadline);
            if now >= due {
                fail = Some(FailReason::DeadlineExceeded);
            } else {
                out.requeue_after = Some(until(due, now));
            }
        }
        let parallelism = usize::try_from(spec.parallelism.unwrap_or(1)).unwrap_or(0);
        let succeeded_n = usize::try_from(succeeded).unwrap_or(0);
        // Under `onlyReplaceFailedPods` a terminating pod is replaced only once it failed: it
        // still holds its place.
        let held = if only_failed { terminating } else { 0 };
        let in_flight = active.len() + mem.expected.len() + held;
        let complete = match spec.completions {
            Some(c) => succeeded >= c,
            None => succeeded > 0 && in_flight == 0,
        };
        if let Some(reason) = fail {
            delete_active = true;
            set_condition(
                &mut st,
                names::FAILURE_TARGET,
                true,
                reason.reason(),
                reason.message(),
                now,
            );
            set_condition(
                &mut st,
                names::FAILED,
                true,
                reason.reason(),
                reason.message(),
                now,
            );
            out.requeue_after = None;
        } else if complete {
            delete_active = true;
            let msg = "Reached expected number of succeeded pods";
            set_condition(
                &mut st,
                names::SUCCESS_CRITERIA_MET,
                true,
                "CompletionsReached",
                msg,
                now,
            );
            set_condition(&mut st, names::COMPLETE, true, "CompletionsReached", msg, now);
            st.completion_time = Some(Time(now));
            out.requeue_after = None;
        } else {
            let want = match spec.completions {
                Some(c) => parallelism.min(usize::try_from(c).unwrap_or(0).saturating_sub(succeeded_n)),
                None if succeeded > 0 => 0,
                None => parallelism,
            };
            out.create = want.saturating_sub(in_flight);
        }
        if is_finished(&st)
            && let Some(ttl) = spec.ttl_seconds_after_finished
        {
            out.requeue_after = Some(Duration::from_secs(u64::try_from(ttl).unwrap_or(0)));
        }
    }

    if delete_active {
        for pod in &active {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            // Already asked to delete it: the cache has just not caught up yet.
            if mem.ignored.insert(uid.clone()) {
                out.delete.push((name, uid));
            }
        }
        terminating += active.len();
        active.clear();
    }
    st.active = Some(i32::try_from(active.len()).unwrap_or(i32::MAX));
    st.ready = Some(i32::try_from(active.iter().filter(|p| pod_ready(p)).count()).unwrap_or(i32::MAX));
    st.terminating = Some(i32::try_from(terminating).unwrap_or(i32::MAX));
    if st != mem.status {
        out.status = Some(st.clone());
    }
    mem.status = st;
    out.memory = mem;
    out
}

#[cfg(test)]
#[path = "logic_tests.rs"]
mod tests;
