//! Unit tests of the pod statuses.

use serde_json::json;

use super::*;

fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {
            "initContainers": [{"name": "dind", "image": "docker", "restartPolicy": "Always"}],
            "containers": [{"name": "side", "image": "s"}, {"name": "runner", "image": "r"}]
        }
    }))
    .unwrap()
}

fn place() -> Placement {
    Placement {
        host_ip: "10.1.0.1".into(),
        pod_ip: "10.2.0.5".into(),
        start_time: Timestamp::UNIX_EPOCH,
    }
}

fn cond<'a>(st: &'a PodStatus, t: &str) -> &'a PodCondition {
    st.conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == t)
        .unwrap()
}

#[test]
fn main_container_prefers_runner() {
    assert_eq!(main_container(&pod()).unwrap().name, "runner");
}

#[test]
fn waiting_reports_reason_on_main_container() {
    let stage = Stage::Waiting {
        reason: "ErrImagePull".into(),
        message: Some("nope".into()),
    };
    let st = status_for(&pod(), &place(), &stage, Timestamp::UNIX_EPOCH);
    assert_eq!(st.phase.as_deref(), Some("Pending"));
    let runner = &st.container_statuses.as_ref().unwrap()[1];
    let waiting = runner.state.as_ref().unwrap().waiting.as_ref().unwrap();
    assert_eq!(waiting.reason.as_deref(), Some("ErrImagePull"));
    assert_eq!(st.pod_ip, None);
    assert_eq!(cond(&st, "Ready").status, "False");
}

#[test]
fn running_is_ready_and_exit_code_sets_phase() {
    let now = Timestamp::UNIX_EPOCH;
    let st = status_for(&pod(), &place(), &Stage::Running { started: now }, now);
    assert_eq!(st.phase.as_deref(), Some("Running"));
    assert_eq!(cond(&st, "Ready").status, "True");
    assert!(st.init_container_statuses.as_ref().unwrap()[0].ready);
    let st = status_for(
        &pod(),
        &place(),
        &Stage::Exited {
            started: now,
            exit_code: 3,
        },
        now,
    );
    assert_eq!(st.phase.as_deref(), Some("Failed"));
    let term = st.container_statuses.as_ref().unwrap()[1]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!((term.exit_code, term.reason.as_deref()), (3, Some("Error")));
    let st = status_for(
        &pod(),
        &place(),
        &Stage::Exited {
            started: now,
            exit_code: 0,
        },
        now,
    );
    assert_eq!(st.phase.as_deref(), Some("Succeeded"));
}

#[test]
fn eviction_is_failed_with_reason() {
    let st = status_for(&pod(), &place(), &Stage::Evicted, Timestamp::UNIX_EPOCH);
    assert_eq!(
        (st.phase.as_deref(), st.reason.as_deref()),
        (Some("Failed"), Some("Evicted"))
    );
    assert_eq!(cond(&st, "DisruptionTarget").status, "True");
}
