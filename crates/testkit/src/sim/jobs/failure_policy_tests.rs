use serde_json::json;

use super::*;

fn policy(rules: serde_json::Value) -> PodFailurePolicy {
    serde_json::from_value(json!({ "rules": rules })).expect("policy")
}

fn pod(status: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "r-1", "namespace": "ci"},
        "status": status,
    }))
    .expect("pod")
}

fn disruption_rule(action: &str) -> serde_json::Value {
    json!({"action": action, "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]})
}

/// A pod PodGC failed after its Node was deleted.
fn gc_pod() -> Pod {
    pod(json!({"phase": "Failed", "conditions": [
        {"type": "Ready", "status": "False"},
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
         "message": "PodGC: node no longer exists"},
    ]}))
}

fn exited(code: i32) -> Pod {
    pod(json!({"phase": "Failed", "containerStatuses": [{
        "name": "runner", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": code}},
    }]}))
}

#[test]
fn disruption_target_fails_the_job_with_the_controllers_message() {
    let got = match_policy(&policy(json!([disruption_rule("FailJob")])), &gc_pod());
    assert_eq!(
        got,
        Some(PolicyMatch {
            action: PolicyAction::FailJob,
            message: Some(
                "Pod ci/r-1 has condition DisruptionTarget matching FailJob rule at index 0".into()
            ),
        })
    );
}

#[test]
fn a_pod_that_failed_by_itself_matches_no_condition_rule() {
    let p = policy(json!([disruption_rule("FailJob")]));
    assert_eq!(match_policy(&p, &exited(1)), None);
    // A condition of another status does not match either (the disruption controller resets
    // a stale one to False).
    let reset = pod(json!({"phase": "Failed", "conditions": [
        {"type": "DisruptionTarget", "status": "False"},
    ]}));
    assert_eq!(match_policy(&p, &reset), None);
}

#[test]
fn the_first_matching_rule_wins() {
    let p = policy(json!([
        {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [1]}},
        disruption_rule("Ignore"),
        disruption_rule("FailJob"),
    ]));
    let ignored = match_policy(&p, &gc_pod()).expect("match");
    assert_eq!(ignored.action, PolicyAction::Ignore);
    assert_eq!(ignored.message, None);
    let count = policy(json!([disruption_rule("Count"), disruption_rule("FailJob")]));
    assert_eq!(
        match_policy(&count, &gc_pod()).map(|m| m.action),
        Some(PolicyAction::Count)
    );
}

#[test]
fn unknown_actions_are_skipped() {
    let p = policy(json!([
        disruption_rule("FailIndex"),
        disruption_rule("Restart"),
        disruption_rule("FailJob")
    ]));
    let got = match_policy(&p, &gc_pod()).expect("match");
    assert_eq!(got.action, PolicyAction::FailJob);
    assert!(got.message.expect("message").ends_with("at index 2"));
}

#[test]
fn pattern_status_defaults_to_true() {
    let p = policy(json!([{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]));
    assert_eq!(
        match_policy(&p, &gc_pod()).map(|m| m.action),
        Some(PolicyAction::FailJob)
    );
}

#[test]
fn exit_code_rules_read_non_zero_codes_of_the_named_container() {
    let in_42 = policy(json!([
        {"action": "FailJob", "onExitCodes": {"containerName": "runner", "operator": "In", "values": [42]}},
    ]));
    let got = match_policy(&in_42, &exited(42)).expect("match");
    assert_eq!(
        got.message.as_deref(),
        Some("Container runner for pod ci/r-1 failed with exit code 42 matching FailJob rule at index 0")
    );
    assert_eq!(match_policy(&in_42, &exited(1)), None);
    let not_in = policy(json!([{"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1]}}]));
    assert_eq!(match_policy(&not_in, &exited(1)), None);
    assert_eq!(
        match_policy(&not_in, &exited(137)).map(|m| m.action),
        Some(PolicyAction::Count)
    );
    assert_eq!(match_policy(&not_in, &exited(0)), None, "exit 0 never matches");
    let sidecar = policy(json!([
        {"action": "FailJob", "onExitCodes": {"containerName": "dind", "operator": "In", "values": [42]}},
    ]));
    assert_eq!(match_policy(&sidecar, &exited(42)), None);
}
