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

#[test]
fn init_records_drive_init_statuses_and_initialized() {
    let mut p = pod();
    let spec = p.spec.as_mut().unwrap();
    spec.init_containers.as_mut().unwrap().insert(
        0,
        Container {
            name: "register".into(),
            image: Some("reg".into()),
            ..Container::default()
        },
    );
    let t = Timestamp::UNIX_EPOCH;
    let running = [InitRecord::Running { started: t }];
    let st = status_with_init(&p, &place(), &Stage::Initializing, Some(&running), t);
    assert_eq!(st.phase.as_deref(), Some("Pending"));
    let init = st.init_container_statuses.as_ref().unwrap();
    assert!(init[0].state.as_ref().unwrap().running.is_some());
    let dind_waiting = init[1].state.as_ref().unwrap().waiting.as_ref().unwrap();
    assert_eq!(dind_waiting.reason.as_deref(), Some("PodInitializing"));
    let initialized = cond(&st, "Initialized");
    assert_eq!(initialized.status, "False");
    assert_eq!(
        initialized.message.as_deref(),
        Some("containers with incomplete status: [register dind]")
    );
    let failed = [InitRecord::Exited {
        started: t,
        finished: t,
        exit_code: 1,
    }];
    let st = status_with_init(&p, &place(), &Stage::InitFailed, Some(&failed), t);
    assert_eq!(st.phase.as_deref(), Some("Failed"));
    let term = st.init_container_statuses.as_ref().unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!((term.exit_code, term.reason.as_deref()), (1, Some("Error")));
}

#[test]
fn unschedulable_has_no_node_and_scheduled_false() {
    let st = unschedulable_status("0/1 nodes are available", Timestamp::UNIX_EPOCH);
    assert_eq!(st.phase.as_deref(), Some("Pending"));
    assert!(st.host_ip.is_none() && st.container_statuses.is_none());
    let c = cond(&st, "PodScheduled");
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref(), c.message.as_deref()),
        ("False", Some("Unschedulable"), Some("0/1 nodes are available"))
    );
}
