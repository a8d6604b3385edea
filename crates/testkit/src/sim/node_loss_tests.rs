//! The statuses each control-plane step leaves, and the whole sequence played by the kubelet
//! stand-in against the fake API server, read back by the operator's disruption classifier.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use forgerunner_core::runner_pod::disruption::{Disruption, NodePresence, classify};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

use super::*;
use crate::apiserver::FakeApiServer;
use crate::sim::{ContainerBehaviour, NodeLoss, PodInfo, SimConfig, Simulator};

const DEADLINE: Duration = Duration::from_secs(30);

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(seconds).expect("timestamp")
}

/// A running pod's status: `Ready=True` since t=10.
fn running() -> PodStatus {
    serde_json::from_value(json!({
        "phase": "Running",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "1970-01-01T00:00:05Z"},
            {"type": "Ready", "status": "True", "lastTransitionTime": "1970-01-01T00:00:10Z"},
        ],
    }))
    .expect("status")
}

fn condition<'a>(status: &'a PodStatus, type_: &str) -> &'a PodCondition {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition"))
}

#[test]
fn not_ready_flips_only_the_ready_condition_once() {
    let mut status = running();
    assert!(mark_not_ready(&mut status, at(100)));
    let ready = condition(&status, "Ready");
    assert_eq!(ready.status, "False");
    assert_eq!(ready.last_transition_time, Some(Time(at(100))));
    assert_eq!(condition(&status, "PodScheduled").status, "True");
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert!(!mark_not_ready(&mut status, at(200)), "already not ready");
    assert_eq!(
        condition(&status, "Ready").last_transition_time,
        Some(Time(at(100)))
    );
    assert!(
        !mark_not_ready(&mut PodStatus::default(), at(100)),
        "no Ready condition"
    );
}

#[test]
fn the_taint_manager_marks_the_pod_and_podgc_fails_it_with_its_own_reason() {
    let mut status = running();
    assert!(mark_taint_eviction(&mut status, at(400)));
    let target = condition(&status, DISRUPTION_TARGET);
    assert_eq!(
        (target.status.as_str(), target.reason.as_deref()),
        ("True", Some(TAINT_MANAGER_REASON))
    );
    assert_eq!(
        status.phase.as_deref(),
        Some("Running"),
        "the phase is not changed"
    );
    assert!(!mark_taint_eviction(&mut status, at(401)), "marked once");

    assert!(mark_pod_gc_orphan(&mut status, at(500)));
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    let targets: Vec<_> = status
        .conditions
        .iter()
        .flatten()
        .filter(|c| c.type_ == DISRUPTION_TARGET)
        .collect();
    assert_eq!(targets.len(), 1, "the condition is replaced, not repeated");
    assert_eq!(targets[0].reason.as_deref(), Some(POD_GC_REASON));
    assert_eq!(targets[0].message.as_deref(), Some(POD_GC_MESSAGE));
    assert_eq!(
        targets[0].last_transition_time,
        Some(Time(at(400))),
        "still True: the transition time stays"
    );
}

#[test]
fn podgc_leaves_a_finished_pod_as_it_is() {
    let mut status = running();
    status.phase = Some("Succeeded".into());
    let before = status.clone();
    assert!(!mark_pod_gc_orphan(&mut status, at(500)));
    assert_eq!(status, before);
}

/// Runs until its pod is cancelled and records that it was.
#[derive(Default)]
struct UntilCancelled(AtomicBool);

#[async_trait]
impl ContainerBehaviour for UntilCancelled {
    async fn run(&self, pod: PodInfo) -> i32 {
        pod.cancel.cancelled().await;
        self.0.store(true, Ordering::SeqCst);
        0
    }
}

async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_unreachable_node_leaves_a_terminating_pod_the_classifier_reads_then_podgc_removes_it() {
    const NS: &str = "default";
    let server = FakeApiServer::start().await.expect("fake API server");
    let client = server.client().expect("client");
    let config = SimConfig {
        lost_node_gc_after: Duration::from_secs(2),
        ..SimConfig::default()
    };
    let sim = Simulator::start(client.clone(), config);
    sim.wait_ready().await;
    let behaviour = Arc::new(UntilCancelled::default());
    sim.register_behaviour("example.org/runner", behaviour.clone());
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "lost", "namespace": NS},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "runner", "image": "example.org/runner"}],
        }}},
    }))
    .expect("job");
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create job");
    let selector = ListParams::default().labels("job-name=lost");
    let running = eventually("the pod running", || async {
        let list = pods.list(&selector).await.ok()?;
        list.items
            .into_iter()
            .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
    })
    .await;
    let name = running.metadata.name.clone().expect("pod name");

    sim.lose_pod(NS, &name, NodeLoss::Unreachable)
        .await
        .expect("node lost");
    let pod = pods.get(&name).await.expect("the pod stays, terminating");
    assert!(pod.metadata.deletion_timestamp.is_some(), "deleted, unconfirmed");
    let status = pod.status.clone().expect("status");
    assert_eq!(
        status.phase.as_deref(),
        Some("Running"),
        "no kubelet moved the phase"
    );
    assert_eq!(condition(&status, "Ready").status, "False");
    assert_eq!(
        classify(&pod, NodePresence::Unknown),
        Some(Disruption::DeletionByTaintManager)
    );
    assert!(
        behaviour.0.load(Ordering::SeqCst),
        "the container stopped with its node"
    );
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let reasons: Vec<(String, String)> = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name.as_str()))
        .map(|e| {
            let source = e.source.and_then(|s| s.component).unwrap_or_default();
            (e.reason.unwrap_or_default(), source)
        })
        .collect();
    for expected in [
        (NODE_NOT_READY_EVENT, NODE_CONTROLLER),
        (TAINT_EVICTION_EVENT, TAINT_EVICTION_CONTROLLER),
    ] {
        assert!(
            reasons.iter().any(|(r, c)| (r.as_str(), c.as_str()) == expected),
            "{expected:?} in {reasons:?}"
        );
    }
    eventually("the Job failed", || async {
        let job = jobs.get("lost").await.ok()?;
        (job.status?.failed == Some(1)).then_some(())
    })
    .await;
    eventually("PodGC removing the pod", || async {
        pods.get_opt(&name).await.ok()?.is_none().then_some(())
    })
    .await;
    sim.shutdown().await;
    server.shutdown().await;
}

/// The runner Job's `podFailurePolicy` (forgerunner-core builds the same).
fn runner_policy() -> serde_json::Value {
    serde_json::to_value(forgerunner_core::runner_pod::disruption::runner_pod_failure_policy())
        .expect("policy")
}

/// A fake API server and a simulator whose PodGC comes 2 s after a node stops answering.
async fn cluster() -> (FakeApiServer, kube::Client, crate::sim::SimHandle) {
    let server = FakeApiServer::start().await.expect("fake API server");
    let client = server.client().expect("client");
    let config = SimConfig {
        lost_node_gc_after: Duration::from_secs(2),
        ..SimConfig::default()
    };
    let sim = Simulator::start(client.clone(), config);
    sim.wait_ready().await;
    sim.register_behaviour("example.org/runner", Arc::new(UntilCancelled::default()));
    (server, client, sim)
}

/// Creates a runner-like Job `name` (`backoffLimit: 0`, with `policy` when given) and returns
/// its pod's name once it runs.
async fn running_job(client: &kube::Client, name: &str, policy: Option<serde_json::Value>) -> String {
    const NS: &str = "default";
    let mut spec = json!({"backoffLimit": 0, "template": {"spec": {
        "restartPolicy": "Never",
        "containers": [{"name": "runner", "image": "example.org/runner"}],
    }}});
    if let Some(policy) = policy {
        spec["podFailurePolicy"] = policy;
    }
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }))
    .expect("job");
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create job");
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let selector = ListParams::default().labels(&format!("job-name={name}"));
    let running = eventually("the pod running", || async {
        let list = pods.list(&selector).await.ok()?;
        list.items
            .into_iter()
            .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
    })
    .await;
    running.metadata.name.expect("pod name")
}

/// The Job `name` once it carries a true `Failed` condition.
async fn failed_job(client: &kube::Client, name: &str) -> Job {
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    eventually("the Job failed", || async {
        let job = jobs.get(name).await.ok()?;
        let failed = job
            .status
            .as_ref()?
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Failed" && c.status == "True");
        failed.then_some(job)
    })
    .await
}

fn reason_of<'a>(job: &'a Job, type_: &str) -> Option<&'a str> {
    job.status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_ && c.status == "True")?
        .reason
        .as_deref()
}

#[tokio::test]
async fn a_deleted_node_object_takes_the_pod_at_once_and_the_job_policy_remembers_why() {
    let (server, client, sim) = cluster().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let with_policy = running_job(&client, "spot", Some(runner_policy())).await;
    let without = running_job(&client, "plain", None).await;

    for pod in [&with_policy, &without] {
        sim.lose_pod("default", pod, NodeLoss::NodeDeleted)
            .await
            .expect("node deleted");
        assert!(
            pods.get_opt(pod).await.expect("get").is_none(),
            "PodGC force-deleted {pod}"
        );
    }
    let spot = failed_job(&client, "spot").await;
    assert_eq!(reason_of(&spot, "FailureTarget"), Some("PodFailurePolicy"));
    assert_eq!(reason_of(&spot, "Failed"), Some("PodFailurePolicy"));
    assert_eq!(spot.status.as_ref().and_then(|s| s.failed), Some(1));
    assert_eq!(
        forgerunner_core::runner_pod::disruption::classify_job(&spot.clone().into()),
        Some(Disruption::Unattributed)
    );
    // Without the policy nothing of the disruption is left anywhere.
    let plain = failed_job(&client, "plain").await;
    assert_eq!(reason_of(&plain, "Failed"), Some("BackoffLimitExceeded"));
    assert_eq!(
        forgerunner_core::runner_pod::disruption::classify_job(&plain.clone().into()),
        None
    );
    // PodGC records no Event.
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let listed = events.list(&ListParams::default()).await.expect("events").items;
    assert!(
        !listed
            .iter()
            .any(|e| e.involved_object.name.as_deref() == Some(with_policy.as_str())),
        "{:?}",
        listed.iter().map(|e| &e.reason).collect::<Vec<_>>()
    );
    sim.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn under_a_pod_failure_policy_an_unreachable_node_fails_the_job_only_once_podgc_ran() {
    let (server, client, sim) = cluster().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pod = running_job(&client, "held", Some(runner_policy())).await;
    sim.lose_pod("default", &pod, NodeLoss::Unreachable)
        .await
        .expect("node lost");
    // Terminating in phase Running: not a failure under the policy (`isPodFailed`).
    let terminating = eventually("the Job counting the pod terminating", || async {
        let job = jobs.get("held").await.ok()?;
        (job.status.as_ref()?.terminating == Some(1)).then_some(job)
    })
    .await;
    assert_eq!(reason_of(&terminating, "Failed"), None);
    assert!(pods.get_opt(&pod).await.expect("get").is_some(), "still there");
    // PodGC (2 s here) fails it, and the policy fails the Job.
    let held = failed_job(&client, "held").await;
    assert_eq!(reason_of(&held, "Failed"), Some("PodFailurePolicy"));
    eventually("PodGC removing the pod", || async {
        pods.get_opt(&pod).await.ok()?.is_none().then_some(())
    })
    .await;
    sim.shutdown().await;
    server.shutdown().await;
}
