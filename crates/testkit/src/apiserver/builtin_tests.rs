use serde_json::json;

use super::*;

/// A runner-like Job body with `pod_failure_policy` (none for `Value::Null`) and `restart`.
fn job(pod_failure_policy: Value, restart: &str) -> Value {
    let mut spec = json!({"template": {"spec": {
        "restartPolicy": restart,
        "containers": [{"name": "runner", "image": "r:1"}],
    }}});
    if !pod_failure_policy.is_null() {
        spec["podFailurePolicy"] = pod_failure_policy;
    }
    json!({"metadata": {"name": "r-1"}, "spec": spec})
}

fn disruption_rule() -> Value {
    json!({"rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]})
}

/// Defaults, then validation, as a create goes.
fn create(mut body: Value) -> (Value, Vec<(String, String)>) {
    apply_defaults(Builtin::Job, &mut body, "u1", "r-1");
    let errs = validate(Builtin::Job, &body);
    (body, errs)
}

#[test]
fn a_pod_failure_policy_defaults_replacement_to_failed_and_pattern_status_to_true() {
    let (created, errs) = create(job(disruption_rule(), "Never"));
    assert_eq!(errs, Vec::<(String, String)>::new());
    assert_eq!(created["spec"]["podReplacementPolicy"], "Failed");
    assert_eq!(
        created["spec"]["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["status"],
        "True"
    );
    let (plain, _) = create(job(Value::Null, "Never"));
    assert_eq!(plain["spec"]["podReplacementPolicy"], "TerminatingOrFailed");
}

#[test]
fn a_pod_failure_policy_needs_restart_policy_never() {
    let (_, errs) = create(job(disruption_rule(), "OnFailure"));
    assert_eq!(
        errs,
        [(
            "spec.template.spec.restartPolicy".to_owned(),
            "Invalid value: \"OnFailure\": only \"Never\" is supported when podFailurePolicy is specified"
                .to_owned()
        )]
    );
    let (_, without) = create(job(Value::Null, "OnFailure"));
    assert!(without.is_empty(), "{without:?}");
}

#[test]
fn a_pod_failure_policy_refuses_replacing_terminating_pods_and_malformed_rules() {
    let mut body = job(disruption_rule(), "Never");
    body["spec"]["podReplacementPolicy"] = json!("TerminatingOrFailed");
    let (_, errs) = create(body);
    assert_eq!(
        errs,
        [(
            "spec.podReplacementPolicy".to_owned(),
            "Unsupported value: \"TerminatingOrFailed\": supported values: \"Failed\"".to_owned()
        )]
    );
    let rules = json!({"rules": [
        {"action": "Restart", "onPodConditions": [{"type": "DisruptionTarget"}]},
        {"action": "FailJob"},
        {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [3]}},
    ]});
    let (_, errs) = create(job(rules, "Never"));
    let paths: Vec<&str> = errs.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        [
            "spec.podFailurePolicy.rules[0].action",
            "spec.podFailurePolicy.rules[1]",
            "spec.podFailurePolicy.rules[2].action",
        ]
    );
}
