use serde_json::json;

use super::*;

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

fn job(spec: serde_json::Value) -> Job {
    let mut spec = spec;
    spec["template"] = json!({"spec": {"containers": [{"name": "runner", "image": "img"}]}});
    serde_json::from_value(json!({
        "metadata": {"name": "j", "namespace": "ns", "uid": "job-uid"},
        "spec": spec,
    }))
    .unwrap()
}

fn pod(name: &str, phase: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
        "status": {"phase": phase},
    }))
    .unwrap()
}

fn ready_pod(name: &str) -> Pod {
    let mut p = pod(name, "Running");
    p.status.as_mut().unwrap().conditions = Some(vec![
        serde_json::from_value(json!({"type": "Ready", "status": "True"})).unwrap(),
    ]);
    p
}

fn deleting(mut p: Pod) -> Pod {
    p.metadata.deletion_timestamp = Some(Time(t(0)));
    p
}

/// Runs `decide` and returns the decision, with the memory carried forward like the controller does.
fn step(job: &Job, pods: &[Pod], mem: &mut JobMemory, now: Timestamp) -> Decision {
    let refs: Vec<&Pod> = pods.iter().collect();
    let d = decide(job, &refs, mem, now);
    *mem = d.memory.clone();
    d
}

fn condition<'a>(st: &'a JobStatus, type_: &str) -> Option<&'a JobCondition> {
    st.conditions.iter().flatten().find(|c| c.type_ == type_)
}

#[test]
fn new_job_creates_one_pod_and_sets_start_time() {
    let j = job(json!({"backoffLimit": 0}));
    let mut mem = JobMemory::first_sight(&j, &[]);
    let d = step(&j, &[], &mut mem, t(0));
    assert_eq!(d.create, 1);
    let st = d.status.unwrap();
    assert_eq!(st.start_time, Some(Time(t(0))));
    assert_eq!(st.active, Some(0));
    // Expectation recorded by the controller: no second pod while the first is unseen.
    mem.expected.insert("j-aaaaa".into(), t(0));
    let d = step(&j, &[], &mut mem, t(1));
    assert_eq!(d.create, 0);
    assert!(d.status.is_none(), "nothing changed");
}

#[test]
fn expectation_times_out() {
    let j = job(json!({}));
    let mut mem = JobMemory::first_sight(&j, &[]);
    step(&j, &[], &mut mem, t(0));
    mem.expected.insert("j-aaaaa".into(), t(0));
    assert_eq!(step(&j, &[], &mut mem, t(31)).create, 1);
}

#[test]
fn running_then_succeeded_completes() {
    let j = job(json!({"backoffLimit": 0}));
    let mut mem = JobMemory::first_sight(&j, &[]);
    step(&j, &[], &mut mem, t(0));
    let d = step(&j, &[ready_pod("j-1")], &mut mem, t(1));
    let st = d.status.unwrap();
    assert_eq!((st.active, st.ready), (Some(1), Some(1)));
    let d = step(&j, &[pod("j-1", "Succeeded")], &mut mem, t(2));
    let st = d.status.unwrap();
    assert_eq!(st.succeeded, Some(1));
    assert_eq!(st.active, Some(0));
    assert_eq!(st.completion_time, Some(Time(t(2))));
    assert_eq!(condition(&st, "Complete").unwrap().status, "True");
    assert_eq!(condition(&st, "SuccessCriteriaMet").unwrap().status, "True");
    assert_eq!(d.create, 0);
    // Idempotent: same input, no new write, no double count.
    let d = step(&j, &[pod("j-1", "Succeeded")], &mut mem, t(3));
    assert!(d.status.is_none());
    assert_eq!(mem.status.succeeded, Some(1));
}

#[test]
fn failure_with_backoff_zero_fails_job() {
    let j = job(json!({"backoffLimit": 0}));
    let mut mem = JobMemory::first_sight(&j, &[]);
    step(&j, &[], &mut mem, t(0));
    let d = step(&j, &[pod("j-1", "Failed")], &mut mem, t(1));
    let st = d.status.unwrap();
    assert_eq!(st.failed, Some(1));
    let failed = condition(&st, "Failed").unwrap();
    assert_eq!(failed.reason.as_deref(), Some("BackoffLimitExceeded"));
    assert!(condition(&st, "FailureTarget").is_some());
    assert_eq!(st.completion_time, None);
    assert_eq!(d.create, 0);
}

#[test]
fn failure_within_backoff_limit_recreates() {
    let j = job(json!({"backoffLimit": 1}));
    let mut mem = JobMemory::first_sight(&j, &[]);
    step(&j, &[], &mut mem, t(0));
    let d = step(&j, &[pod("j-1", "Failed")], &mut mem, t(1));
    assert_eq!(d.create, 1);
    assert!(!is_finished(d.status.as_ref().unwrap()));
    let d = step(&j, &[pod("j-1", "Failed"), pod("j-2", "Failed")], &mut mem, t(2));
    assert_eq!(d.create, 0);
    assert_eq!(d.status.unwrap().failed, Some(2));
    assert!(is_finished(&mem.status));
}

#[test]
fn active_deadline_fails_and_deletes_running_pod() {
    let j = job(json!({"activeDeadlineSeconds": 10}));
    let mut mem = JobMemory::first_sight(&j, &[]);
    let d = step(&j, &[], &mut mem, t(0));
    assert_eq!(d.requeue_after, Some(Duration::from_secs(10)));
    let d = step(&j, &[ready_pod("j-1")], &mut mem, t(4));
    assert_eq!(d.requeue_after, Some(Duration::from_secs(6)));
    let d = step(&j, &[ready_pod("j-1")], &mut mem, t(10));
    assert_eq!(d.delete, vec![("j-1".to_owned(), "uid-j-1".to_owned())]);
    let st = d.status.unwrap();
    assert_eq!(
        condition(&st, "Failed").unwrap().reason.as_deref(),
        Some("DeadlineExceeded")
    );
    assert_eq!(st.active, Some(0));
    // The deleted pod going away is not counted as a failure and is not deleted twice.
    let d = step(&j, &[ready_pod("j-1")], &mut mem, t(11));
    assert!(d.delete.is_empty());
    step(&j, &[deleting(ready_pod("j-1"))], &mut mem, t(12));
    step(&j, &[], &mut mem, t(13));
    assert_eq!(mem.status.failed, Some(0));
}

#[test]
fn ttl_after_finished_deletes_job() {
    let j = job(json!({"ttlSecondsAfterFinished": 5}));
    let mut mem = JobMemory::first_sight(&j, &[]);
    step(&j, &[], &mut mem, t(0));
    let d = step(&j, &[pod("j-1", "Succeeded")], &mut mem, t(1));
    assert_eq!(d.requeue_after, Some(Duration::from_secs(5)));
    let d = step(&j, &[pod("j-1", "Succeeded")], &mut mem, t(3));
    assert!(!d.delete_job);
    assert_eq!(d.requeue_after, Some(Duration::from_secs(3)));
    assert!(step(&j, &[pod("j-1", "Succeeded")], &mut mem, t(6)).delete_job);
}

#[test]
fn ttl_zero_deletes_at_once_after_failure() {
    let j = job(json!({"ttlSecondsAfterFinished": 0, "backoffLimit": 0}));
    let mut mem = JobMemory::first_sight(&j, &[]);
    step(&j, &[], &mut mem, t(0));
    step(&j, &[pod("j-1", "Failed")], &mut mem, t(1));
    assert!(step(&j, &[pod("j-1", "Failed")], &mut mem, t(1)).delete_job);
}

#[test]
fn pod_deleted_while_running_counts_as_failed_unless_tombstone_says_succeeded() {
    let j = job(json!({"backoffLimit": 3}));
    let mut mem = JobMemory::first_sight(&j, &[]);
    step(&j, &[], &mut mem, t(0));
    step(&j, &[ready_pod("j-1")], &mut mem, t(1));
    let d = step(&j, &[], &mut mem, t(2));
    assert_eq!(mem.status.failed, Some(1));
    assert_eq!(d.create, 1);
    step(&j, &[ready_pod("j-2")], &mut mem, t(3));
    mem.tombstones
        .insert("uid-j-2".into(), Arc::new(pod("j-2", "Succeeded")));
    let d = step(&j, &[], &mut mem, t(4));
    assert_eq!(d.consumed_tombstones, vec!["uid-j-2".to_owned()]);
    assert_eq!(mem.status.succeeded, Some(1));
    assert!(is_finished(&mem.status));
}

#[test]
fn suspend_deletes_pods_and_resume_restarts() {
    let j = job(json!({"suspend": true, "activeDeadlineSeconds": 100}));
    let mut mem = JobMemory::first_sight(&j, &[]);
    let d = step(&j, &[ready_pod("j-1")], &mut mem, t(0));
    assert_eq!(d.create, 0);
    assert_eq!(d.delete.len(), 1);
    let st = d.status.unwrap();
    assert_eq!(condition(&st, "Suspended").unwrap().status, "True");
    assert_eq!(st.start_time, None);
    step(&j, &[], &mut mem, t(1));
    assert_eq!(mem.status.failed, Some(0), "suspension is not failure");
    let resumed = job(json!({"suspend": false, "activeDeadlineSeconds": 100}));
    let d = step(&resumed, &[], &mut mem, t(2));
    assert_eq!(d.create, 1);
    let st = d.status.unwrap();
    assert_eq!(condition(&st, "Suspended").unwrap().status, "False");
    assert_eq!(st.start_time, Some(Time(t(2))));
}

#[test]
fn completions_and_parallelism() {
    let j = job(json!({"completions": 3, "parallelism": 2}));
    let mut mem = JobMemory::first_sight(&j, &[]);
    assert_eq!(step(&j, &[], &mut mem, t(0)).create, 2);
    let pods = [pod("a", "Succeeded"), ready_pod("b")];
    assert_eq!(step(&j, &pods, &mut mem, t(1)).create, 1);
    let pods = [
        pod("a", "Succeeded"),
        pod("b", "Succeeded"),
        pod("c", "Succeeded"),
    ];
    step(&j, &pods, &mut mem, t(2));
    assert!(is_finished(&mem.status));
}

#[test]
fn first_sight_does_not_recount_pods_after_restart() {
    let mut j = job(json!({"backoffLimit": 0}));
    j.status = Some(serde_json::from_value(json!({"succeeded": 1, "active": 0})).unwrap());
    let pods = [pod("j-1", "Succeeded")];
    let refs: Vec<&Pod> = pods.iter().collect();
    let mut mem = JobMemory::first_sight(&j, &refs);
    step(&j, &pods, &mut mem, t(0));
    assert_eq!(mem.status.succeeded, Some(1));
    assert!(is_finished(&mem.status));
}

#[test]
fn conditions_keep_transition_time() {
    let mut st = JobStatus::default();
    set_condition(&mut st, "Suspended", true, "A", "a", t(0));
    set_condition(&mut st, "Suspended", true, "B", "b", t(5));
    let c = condition(&st, "Suspended").unwrap();
    assert_eq!(c.last_transition_time, Some(Time(t(0))));
    assert_eq!(c.reason.as_deref(), Some("B"));
}

/// A runner-like Job: `backoffLimit` as given, `FailJob` on `DisruptionTarget=True`.
fn job_with_policy(backoff_limit: i32, action: &str) -> Job {
    job(
        json!({"backoffLimit": backoff_limit, "podFailurePolicy": {"rules": [
            {"action": action, "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        ]}}),
    )
}

/// `p` with `DisruptionTarget=True` by `reason`.
fn disrupted(mut p: Pod, reason: &str) -> Pod {
    let condition = serde_json::from_value(json!({
        "type": "DisruptionTarget", "status": "True", "reason": reason,
    }))
    .unwrap();
    p.status
        .as_mut()
        .unwrap()
        .conditions
        .get_or_insert_default()
        .push(condition);
    p
}

fn reason_of<'a>(st: &'a JobStatus, type_: &str) -> Option<&'a str> {
    condition(st, type_)
        .filter(|c| c.status == "True")
        .and_then(|c| c.reason.as_deref())
}

#[test]
fn a_pod_failed_with_disruption_target_fails_the_job_by_its_policy() {
    let j = job_with_policy(0, "FailJob");
    let mut mem = JobMemory::first_sight(&j, &[]);
    step(&j, &[], &mut mem, t(0));
    step(&j, &[ready_pod("j-1")], &mut mem, t(1));
    let gone_with_node = disrupted(pod("j-1", "Failed"), "DeletionByPodGC");
    step(&j, &[gone_with_node], &mut mem, t(2));
    let st = &mem.status;
    assert_eq!(reason_of(st, "FailureTarget"), Some("PodFailurePolicy"));
    assert_eq!(reason_of(st, "Failed"), Some("PodFailurePolicy"));
    assert_eq!(
        condition(st, "Failed").and_then(|c| c.message.as_deref()),
        Some("Pod ns/j-1 has condition DisruptionTarget matching FailJob rule at index 0")
    );
    assert_eq!(st.failed, Some(1));
}

#[test]
fn a_pod_that_failed_by_itself_still_exceeds_the_backoff_limit() {
    let j = job_with_policy(0, "FailJob");
    let mut mem = JobMemory::first_sight(&j, &[]);
    step(&j, &[ready_pod("j-1")], &mut mem, t(0));
    step(&j, &[pod("j-1", "Failed")], &mut mem, t(1));
    assert_eq!(reason_of(&mem.status, "Failed"), Some("BackoffLimitExceeded"));
}

#[test]
fn under_a_policy_a_deleted_running_pod_is_terminating_until_it_fails() {
    let j = job_with_policy(3, "FailJob");
    let mut mem = JobMemory::first_sight(&j, &[]);
    step(&j, &[ready_pod("j-1")], &mut mem, t(0));
    // The taint manager deleted it on a node that stopped answering: phase still Running.
    let held = deleting(disrupted(pod("j-1", "Running"), "DeletionByTaintManager"));
    let d = step(&j, std::slice::from_ref(&held), &mut mem, t(1));
    assert_eq!(mem.status.failed, Some(0), "not failed while Running");
    assert_eq!(mem.status.terminating, Some(1));
    assert_eq!(d.create, 0, "not replaced before it failed");
    assert!(!is_finished(&mem.status));
    // Without a policy the same pod is a failure at once.
    let plain = job(json!({"backoffLimit": 0}));
    let mut plain_mem = JobMemory::first_sight(&plain, &[]);
    step(&plain, &[ready_pod("j-1")], &mut plain_mem, t(0));
    step(&plain, std::slice::from_ref(&held), &mut plain_mem, t(1));
    assert_eq!(
        reason_of(&plain_mem.status, "Failed"),
        Some("BackoffLimitExceeded")
    );
    // PodGC: Failed, and its own reason on the condition.
    let mut gc = deleting(pod("j-1", "Failed"));
    gc = disrupted(gc, "DeletionByPodGC");
    step(&j, &[gc], &mut mem, t(2));
    assert_eq!(reason_of(&mem.status, "Failed"), Some("PodFailurePolicy"));
}

#[test]
fn pod_replacement_policy_failed_alone_also_holds_a_terminating_pod() {
    // `onlyReplaceFailedPods`: `podReplacementPolicy: Failed` without a podFailurePolicy too.
    let j = job(json!({"backoffLimit": 0, "podReplacementPolicy": "Failed"}));
    let mut mem = JobMemory::first_sight(&j, &[]);
    step(&j, &[ready_pod("j-1")], &mut mem, t(0));
    let held = deleting(pod("j-1", "Running"));
    let d = step(&j, std::slice::from_ref(&held), &mut mem, t(1));
    assert_eq!(mem.status.failed, Some(0), "not failed while Running");
    assert_eq!(mem.status.terminating, Some(1));
    assert_eq!(d.create, 0, "not replaced before it failed");
    step(&j, &[deleting(pod("j-1", "Failed"))], &mut mem, t(2));
    assert_eq!(reason_of(&mem.status, "Failed"), Some("BackoffLimitExceeded"));
    // `TerminatingOrFailed` (the default without a policy) counts it at once.
    let plain = job(json!({"backoffLimit": 0, "podReplacementPolicy": "TerminatingOrFailed"}));
    let mut plain_mem = JobMemory::first_sight(&plain, &[]);
    step(&plain, &[ready_pod("j-1")], &mut plain_mem, t(0));
    step(&plain, &[held], &mut plain_mem, t(1));
    assert_eq!(
        reason_of(&plain_mem.status, "Failed"),
        Some("BackoffLimitExceeded")
    );
}

#[test]
fn a_pod_gone_before_it_was_seen_failed_is_matched_as_its_deletion_showed_it() {
    let j = job_with_policy(0, "FailJob");
    let mut mem = JobMemory::first_sight(&j, &[]);
    step(&j, &[ready_pod("j-1")], &mut mem, t(0));
    // PodGC's status write and forced delete came between two reconciles.
    let last = deleting(disrupted(pod("j-1", "Failed"), "DeletionByPodGC"));
    mem.tombstones.insert("uid-j-1".into(), Arc::new(last));
    step(&j, &[], &mut mem, t(1));
    assert_eq!(reason_of(&mem.status, "Failed"), Some("PodFailurePolicy"));
    // A terminating pod (not counted yet) that vanishes is matched the same way.
    let j = job_with_policy(0, "FailJob");
    let mut mem = JobMemory::first_sight(&j, &[]);
    step(&j, &[ready_pod("j-1")], &mut mem, t(0));
    let held = deleting(disrupted(pod("j-1", "Running"), "DeletionByTaintManager"));
    step(&j, std::slice::from_ref(&held), &mut mem, t(1));
    mem.tombstones.insert(
        "uid-j-1".into(),
        Arc::new(deleting(disrupted(pod("j-1", "Failed"), "DeletionByPodGC"))),
    );
    step(&j, &[], &mut mem, t(2));
    assert_eq!(reason_of(&mem.status, "Failed"), Some("PodFailurePolicy"));
    // Without a tombstone there is nothing to match: the default handling.
    let mut mem = JobMemory::first_sight(&j, &[]);
    step(&j, &[ready_pod("j-1")], &mut mem, t(0));
    step(&j, &[], &mut mem, t(1));
    assert_eq!(reason_of(&mem.status, "Failed"), Some("BackoffLimitExceeded"));
}

#[test]
fn an_ignore_rule_does_not_count_the_failure_and_the_pod_is_replaced() {
    let j = job_with_policy(0, "Ignore");
    let mut mem = JobMemory::first_sight(&j, &[]);
    step(&j, &[ready_pod("j-1")], &mut mem, t(0));
    let d = step(
        &j,
        &[disrupted(pod("j-1", "Failed"), "EvictionByEvictionAPI")],
        &mut mem,
        t(1),
    );
    assert_eq!(mem.status.failed, Some(0));
    assert!(!is_finished(&mem.status));
    assert_eq!(d.create, 1);
}
