//! Capacity failures as the simulator plays them: unschedulable pods, pod quota with
//! `FailedCreate` events, and slow image pulls.

// Test code: a failed step should fail the test loudly.
#![allow(clippy::unwrap_used)]

mod sim_common;

use std::sync::Arc;
use std::time::Duration;

use forgerunner_testkit::sim::{FAILED_CREATE_REASON, JOB_CONTROLLER_COMPONENT, SimConfig};
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;
use serde_json::json;
use sim_common::*;

#[tokio::test]
async fn unschedulable_pod_stays_pending_until_the_node_fits() {
    let env = Env::start("sim-sched", SimConfig::default()).await;
    env.sim
        .register_behaviour("example.org/runner", Arc::new(Exit(0)));
    let spec = json!({"nodeSelector": {"gpu": "true"},
        "containers": [{"name": "runner", "image": "example.org/runner"}]});
    env.create_job("selector", spec).await;
    let pod = env
        .pod_until("selector", "Unschedulable", |p| {
            pod_condition(p, "PodScheduled").is_some_and(|c| c.1.as_deref() == Some("Unschedulable"))
        })
        .await;
    let (status, _, message) = pod_condition(&pod, "PodScheduled").unwrap();
    assert_eq!(status, "False");
    assert_eq!(
        message.as_deref(),
        Some(
            "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. \
             preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
        )
    );
    assert_eq!(phase(&pod), Some("Pending"));
    assert!(pod.spec.as_ref().unwrap().node_name.is_none());
    assert!(
        statuses(&pod, false).is_empty(),
        "no container status before scheduling"
    );

    // Too big for the node's CPU.
    env.sim.set_node_allocatable("cpu", Some("2")).unwrap();
    let spec = json!({"containers": [{"name": "runner", "image": "example.org/runner",
        "resources": {"requests": {"cpu": "3"}}}]});
    env.create_job("big", spec).await;
    let pod = env
        .pod_until("big", "Unschedulable", |p| {
            pod_condition(p, "PodScheduled").is_some()
        })
        .await;
    let message = pod_condition(&pod, "PodScheduled").unwrap().2.unwrap();
    assert!(
        message.starts_with("0/1 nodes are available: 1 Insufficient cpu. preemption: "),
        "{message}"
    );
    assert_eq!(env.sim.stats().pods_started, 0, "neither pod ran");
    assert!(env.sim.set_node_allocatable("cpu", Some("two")).is_err());

    // The node changes: both pods are scheduled and run.
    env.sim.set_node_label("gpu", Some("true")).unwrap();
    env.sim.set_node_allocatable("cpu", None).unwrap();
    for job in ["selector", "big"] {
        env.job_until(job, "Complete", |j| is_true(j, "Complete")).await;
        let pod = env.job_pods(job).await.pop().unwrap();
        assert_eq!(pod_condition(&pod, "PodScheduled").unwrap().0, "True");
    }
    env.stop().await;
}

#[tokio::test]
async fn quota_refuses_pods_with_failed_create_event_until_lifted() {
    let ns = "sim-quota";
    let config = SimConfig {
        pod_quotas: [(ns.to_owned(), 1)].into(),
        ..SimConfig::default()
    };
    let env = Env::start(ns, config).await;
    let (forever, _, let_first) = Gate::new(0);
    env.sim.register_behaviour("example.org/forever", forever);
    env.sim.register_behaviour("example.org/ok", Arc::new(Exit(0)));
    env.create_job(
        "first",
        json!({"containers": [{"name": "runner", "image": "example.org/forever"}]}),
    )
    .await;
    env.pod_until("first", "Running", |p| phase(p) == Some("Running"))
        .await;
    let second = env
        .create_job(
            "second",
            json!({"containers": [{"name": "runner", "image": "example.org/ok"}]}),
        )
        .await;

    // The operator's query: why has this Job no pod? Retries bump the one event's count.
    let events: Api<Event> = Api::namespaced(env.client.clone(), ns);
    let lp = ListParams::default()
        .fields("involvedObject.kind=Job,involvedObject.name=second,reason=FailedCreate");
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let event = loop {
        let found = events.list(&lp).await.unwrap().items;
        assert!(found.len() <= 1, "repeats aggregate into one event: {found:?}");
        if let Some(event) = found.into_iter().find(|e| e.count.unwrap_or(0) >= 2) {
            break event;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no repeated FailedCreate event"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(event.reason.as_deref(), Some(FAILED_CREATE_REASON));
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let source = event.source.clone().unwrap().component;
    assert_eq!(source.as_deref(), Some(JOB_CONTROLLER_COMPONENT));
    let involved = &event.involved_object;
    assert_eq!(
        (
            involved.kind.as_deref(),
            involved.name.as_deref(),
            involved.namespace.as_deref()
        ),
        (Some("Job"), Some("second"), Some(ns))
    );
    assert_eq!(involved.uid, second.metadata.uid);
    // The Job controller creates pods by generateName, so the refusal names `second-`.
    let message = event.message.clone().unwrap();
    assert_eq!(
        message,
        "Error creating: pods \"second-\" is forbidden: exceeded quota: pods-quota, requested: pods=1, \
         used: pods=1, limited: pods=1"
    );
    assert!(env.job_pods("second").await.is_empty(), "no pod beyond the quota");
    let job = env.jobs().get("second").await.unwrap();
    assert!(!is_true(&job, "Failed") && !is_true(&job, "Complete"));

    // Lifting the quota lets the retry through.
    env.sim.set_pod_quota(ns, None);
    env.job_until("second", "Complete", |j| is_true(j, "Complete"))
        .await;
    let_first.add_permits(1);
    env.job_until("first", "Complete", |j| is_true(j, "Complete"))
        .await;
    env.stop().await;
}

#[tokio::test]
async fn slow_pull_waits_in_container_creating_then_runs() {
    const PULL: Duration = Duration::from_millis(1500);
    let env = Env::start("sim-slow", SimConfig::default()).await;
    env.sim.register_behaviour("slow.registry/", Arc::new(Exit(0)));
    env.sim.slow_image_pulls("slow.registry/", PULL).unwrap();
    let history = env.record_pods("slow");
    let before = tokio::time::Instant::now();
    env.create_job(
        "slow",
        json!({"containers": [{"name": "runner", "image": "slow.registry/runner:1"}]}),
    )
    .await;
    env.pod_until("slow", "Running", |p| {
        phase(p) == Some("Running") || phase(p) == Some("Succeeded")
    })
    .await;
    assert!(before.elapsed() >= PULL, "started after {:?}", before.elapsed());
    env.job_until("slow", "Complete", |j| is_true(j, "Complete"))
        .await;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let reasons: Vec<Option<String>> = history
            .lock()
            .unwrap()
            .iter()
            .map(|p| waiting(p, false, "runner"))
            .collect();
        if reasons.iter().any(|r| r.as_deref() == Some("ContainerCreating"))
            && history
                .lock()
                .unwrap()
                .iter()
                .any(|p| phase(p) == Some("Succeeded"))
        {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "saw {reasons:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pod = env.job_pods("slow").await.pop().unwrap();
    assert_eq!(phase(&pod), Some("Succeeded"), "a slow pull still succeeds");
    env.stop().await;
}

/// Kubernetes `plugin/pkg/admission/serviceaccount/admission.go` `Admit`: a pod naming a
/// ServiceAccount that does not exist is refused (403); the Job controller
/// (`pkg/controller/controller_utils.go` `RealPodControl.createPods`) records `FailedCreate`
/// `Error creating: <the error>` on the Job and retries until the account exists.
#[tokio::test]
async fn missing_service_account_fails_creation_until_the_account_exists() {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use kube::api::PostParams;

    let ns = "sim-sa";
    let env = Env::start(ns, SimConfig::default()).await;
    env.sim.register_behaviour("example.org/ok", Arc::new(Exit(0)));
    let job = env
        .create_job(
            "hooks",
            json!({"serviceAccountName": "hooks-runner",
                "containers": [{"name": "runner", "image": "example.org/ok"}]}),
        )
        .await;
    let events: Api<Event> = Api::namespaced(env.client.clone(), ns);
    let lp = ListParams::default().fields("involvedObject.name=hooks,reason=FailedCreate");
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let event = loop {
        if let Some(e) = events.list(&lp).await.unwrap().items.pop() {
            break e;
        }
        assert!(tokio::time::Instant::now() < deadline, "no FailedCreate event");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        event.message.as_deref(),
        Some(
            "Error creating: pods \"hooks-\" is forbidden: error looking up service account \
             sim-sa/hooks-runner: serviceaccount \"hooks-runner\" not found"
        )
    );
    assert_eq!(event.involved_object.uid, job.metadata.uid);
    assert!(
        env.job_pods("hooks").await.is_empty(),
        "no pod without its account"
    );

    // The account appears: the controller's retry creates the pod and the Job completes.
    let accounts: Api<ServiceAccount> = Api::namespaced(env.client.clone(), ns);
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "hooks-runner"}})).unwrap();
    accounts.create(&PostParams::default(), &sa).await.unwrap();
    env.job_until("hooks", "Complete", |j| is_true(j, "Complete"))
        .await;
    env.stop().await;
}
