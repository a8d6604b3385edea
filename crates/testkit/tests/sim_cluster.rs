//! The cluster simulator against the in-process fake API server: Jobs run behaviours, and the
//! Job and pod statuses follow what Kubernetes does.

// Test helpers outside `#[test]` functions: a failed setup should fail the test loudly.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use forgerunner_testkit::apiserver::{FakeApiServer, Verb};
use forgerunner_testkit::sim::{
    BEHAVIOUR_LABEL, ContainerBehaviour, NodeLoss, PodInfo, SimConfig, SimHandle, Simulator,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::mpsc;

const NS: &str = "default";
/// Generous: the machine is shared and busy; conditions normally hold within milliseconds.
const DEADLINE: Duration = Duration::from_secs(30);

/// Exits with a fixed code at once.
struct Exit(i32);

#[async_trait]
impl ContainerBehaviour for Exit {
    async fn run(&self, _pod: PodInfo) -> i32 {
        self.0
    }
}

/// Sends what it saw, then exits 0.
struct Capture(mpsc::UnboundedSender<PodInfo>);

#[async_trait]
impl ContainerBehaviour for Capture {
    async fn run(&self, pod: PodInfo) -> i32 {
        let _ = self.0.send(pod);
        0
    }
}

/// Runs until cancelled and records that it was.
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

struct Env {
    server: FakeApiServer,
    client: Client,
    sim: SimHandle,
}

impl Env {
    async fn start(config: SimConfig) -> Env {
        let server = FakeApiServer::start().await.unwrap();
        let client = server.client().unwrap();
        let sim = Simulator::start(client.clone(), config);
        tokio::time::timeout(DEADLINE, sim.wait_ready())
            .await
            .expect("simulator caches synced");
        Env { server, client, sim }
    }

    fn jobs(&self) -> Api<Job> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), NS)
    }

    async fn create_job(&self, name: &str, image: &str, extra: serde_json::Value) -> Job {
        let mut spec = json!({
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": "runner"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "runner", "image": image}]
                }
            }
        });
        merge(&mut spec, extra);
        let job: Job = serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NS},
            "spec": spec,
        }))
        .unwrap();
        self.jobs().create(&PostParams::default(), &job).await.unwrap()
    }

    /// Waits until the Job satisfies `cond`; returns it.
    async fn job_until(&self, name: &str, what: &str, cond: impl Fn(&Job) -> bool) -> Job {
        let found = tokio::time::timeout(
            DEADLINE,
            await_condition(self.jobs(), name, move |j: Option<&Job>| j.is_some_and(&cond)),
        )
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for job {name}: {what}"))
        .unwrap();
        found.unwrap()
    }

    /// Waits until the Job is gone.
    async fn job_gone(&self, name: &str) {
        tokio::time::timeout(
            DEADLINE,
            await_condition(self.jobs(), name, |j: Option<&Job>| j.is_none()),
        )
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for job {name} to be deleted"))
        .unwrap();
    }

    /// Waits until some pod of the Job satisfies `cond`; returns it.
    async fn pod_until(&self, job: &str, what: &str, cond: impl Fn(&Pod) -> bool) -> Pod {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let pods = self.job_pods(job).await;
            if let Some(pod) = pods.into_iter().find(|p| cond(p)) {
                return pod;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for a pod of {job}: {what}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn job_pods(&self, job: &str) -> Vec<Pod> {
        let lp = kube::api::ListParams::default().labels(&format!("job-name={job}"));
        self.pods().list(&lp).await.unwrap().items
    }

    async fn stop(self) {
        self.sim.shutdown().await;
        self.server.shutdown().await;
    }
}

fn merge(base: &mut serde_json::Value, extra: serde_json::Value) {
    match (base, extra) {
        (serde_json::Value::Object(b), serde_json::Value::Object(e)) => {
            for (k, v) in e {
                merge(b.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (b, e) => *b = e,
    }
}

fn condition(job: &Job, type_: &str) -> Option<(String, Option<String>)> {
    let conds = job.status.as_ref()?.conditions.as_ref()?;
    conds
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

fn is_true(job: &Job, type_: &str) -> bool {
    condition(job, type_).is_some_and(|(s, _)| s == "True")
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

fn waiting_reason(pod: &Pod) -> Option<String> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    let runner = statuses.iter().find(|c| c.name == "runner")?;
    runner.state.as_ref()?.waiting.as_ref()?.reason.clone()
}

#[tokio::test]
async fn job_runs_behaviour_to_complete() {
    let env = Env::start(SimConfig::default()).await;
    env.sim.register_behaviour("example.org/ok", Arc::new(Exit(0)));
    let created = env.create_job("ok", "example.org/ok:1", json!({})).await;
    let job = env.job_until("ok", "Complete", |j| is_true(j, "Complete")).await;
    let status = job.status.clone().unwrap();
    assert_eq!(status.succeeded, Some(1));
    assert_eq!(status.active, Some(0));
    assert!(status.start_time.is_some() && status.completion_time.is_some());
    assert!(is_true(&job, "SuccessCriteriaMet"));

    let pods = env.job_pods("ok").await;
    assert_eq!(pods.len(), 1, "exactly one pod");
    let pod = &pods[0];
    assert_eq!(phase(pod), Some("Succeeded"));
    let name = pod.metadata.name.clone().unwrap();
    assert!(name.starts_with("ok-") && name.len() == 8, "{name}");
    let labels = pod.metadata.labels.clone().unwrap();
    assert_eq!(labels["app"], "runner");
    assert_eq!(labels["batch.kubernetes.io/job-name"], "ok");
    assert_eq!(labels["controller-uid"], created.metadata.uid.clone().unwrap());
    let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.controller), ("Job", Some(true)));
    let term = pod.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(term.exit_code, 0);
    assert_eq!(env.sim.stats().pods_succeeded, 1);
    env.stop().await;
}

#[tokio::test]
async fn failing_behaviour_fails_job_with_backoff_limit_zero() {
    let env = Env::start(SimConfig::default()).await;
    env.sim.register_behaviour("example.org/bad", Arc::new(Exit(3)));
    env.create_job("bad", "example.org/bad", json!({})).await;
    let job = env.job_until("bad", "Failed", |j| is_true(j, "Failed")).await;
    assert_eq!(
        condition(&job, "Failed").unwrap().1.as_deref(),
        Some("BackoffLimitExceeded")
    );
    assert!(is_true(&job, "FailureTarget"));
    assert_eq!(job.status.as_ref().unwrap().failed, Some(1));
    let pods = env.job_pods("bad").await;
    assert_eq!(pods.len(), 1, "no retry with backoffLimit 0");
    let term = pods[0]
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!((term.exit_code, term.reason.as_deref()), (3, Some("Error")));
    env.stop().await;
}

#[tokio::test]
async fn backoff_limit_recreates_pods_until_exceeded() {
    let env = Env::start(SimConfig {
        start_delay: Duration::ZERO,
        ..SimConfig::default()
    })
    .await;
    env.sim.register_behaviour("example.org/bad", Arc::new(Exit(1)));
    env.create_job("retry", "example.org/bad", json!({"backoffLimit": 2}))
        .await;
    let job = env.job_until("retry", "Failed", |j| is_true(j, "Failed")).await;
    assert_eq!(job.status.as_ref().unwrap().failed, Some(3));
    assert_eq!(env.job_pods("retry").await.len(), 3);
    env.stop().await;
}

#[tokio::test]
async fn active_deadline_fails_job_and_stops_the_pod() {
    let env = Env::start(SimConfig::default()).await;
    let forever = Arc::new(UntilCancelled::default());
    env.sim.register_behaviour("example.org/forever", forever.clone());
    env.create_job("slow", "example.org/forever", json!({"activeDeadlineSeconds": 1}))
        .await;
    let job = env.job_until("slow", "Failed", |j| is_true(j, "Failed")).await;
    assert_eq!(
        condition(&job, "Failed").unwrap().1.as_deref(),
        Some("DeadlineExceeded")
    );
    // The running pod is deleted and its behaviour cancelled.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !(env.job_pods("slow").await.is_empty() && forever.0.load(Ordering::SeqCst)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "pod not deleted / behaviour not cancelled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        env.jobs().get("slow").await.unwrap().status.unwrap().failed,
        Some(0)
    );
    env.stop().await;
}

#[tokio::test]
async fn ttl_after_finished_deletes_job_and_pods() {
    let env = Env::start(SimConfig::default()).await;
    env.sim.register_behaviour("example.org/ok", Arc::new(Exit(0)));
    env.create_job("ttl", "example.org/ok", json!({"ttlSecondsAfterFinished": 1}))
        .await;
    env.job_until("ttl", "Complete", |j| is_true(j, "Complete")).await;
    env.job_gone("ttl").await;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !env.job_pods("ttl").await.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "pods of the deleted job remain"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(env.sim.stats().jobs_deleted, 1);
    env.stop().await;
}

#[tokio::test]
async fn unknown_image_stays_running_until_patched() {
    let env = Env::start(SimConfig::default()).await;
    env.create_job("manual", "example.org/nobody-plays-this", json!({}))
        .await;
    let pod = env
        .pod_until("manual", "Running", |p| phase(p) == Some("Running"))
        .await;
    env.job_until("manual", "active and ready", |j| {
        j.status
            .as_ref()
            .is_some_and(|s| s.active == Some(1) && s.ready == Some(1))
    })
    .await;
    let name = pod.metadata.name.clone().unwrap();
    // Still running a while later: nothing plays it (a watch would show any change).
    let still = env.pods().get(&name).await.unwrap();
    assert_eq!(phase(&still), Some("Running"));
    let patch = json!({"status": {"phase": "Succeeded"}});
    env.pods()
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let job = env
        .job_until("manual", "Complete", |j| is_true(j, "Complete"))
        .await;
    assert_eq!(job.status.unwrap().succeeded, Some(1));
    env.stop().await;
}

#[tokio::test]
async fn env_and_files_from_secret_reach_the_behaviour() {
    let env = Env::start(SimConfig::default()).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    env.sim
        .register_behaviour("example.org/capture", Arc::new(Capture(tx)));
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "runner-secret", "namespace": NS},
        "stringData": {"token": "s3cret", "config.json": "{\"a\":1}"}
    }))
    .unwrap();
    Api::<Secret>::namespaced(env.client.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let extra = json!({"template": {"spec": {
        "volumes": [{"name": "cfg", "secret": {"secretName": "runner-secret", "items": [{"key": "config.json", "path": "c.json"}]}}],
        "containers": [{"name": "runner", "image": "example.org/capture",
            "command": ["forgejo-runner"],
            "args": ["one-job", "--uuid", "$(PLAIN)", "--token", "$(TOKEN)", "$(UNSET)", "$$(PLAIN)"],
            "env": [
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "runner-secret", "key": "token"}}},
                {"name": "PLAIN", "value": "v"}
            ],
            "volumeMounts": [{"name": "cfg", "mountPath": "/etc/runner"}]
        }]
    }}});
    env.create_job("capture", "example.org/capture", extra).await;
    let info = tokio::time::timeout(DEADLINE, rx.recv()).await.unwrap().unwrap();
    assert_eq!(info.env.get("TOKEN").map(String::as_str), Some("s3cret"));
    assert_eq!(info.env.get("PLAIN").map(String::as_str), Some("v"));
    assert_eq!(info.command, ["forgejo-runner"]);
    assert_eq!(
        info.args,
        [
            "one-job", "--uuid", "v", "--token", "s3cret", "$(UNSET)", "$(PLAIN)"
        ],
        "$(VAR) expanded from the container env, unknown kept, $$ escapes"
    );
    let files: BTreeMap<String, String> = info.files;
    assert_eq!(
        files.get("/etc/runner/c.json").map(String::as_str),
        Some("{\"a\":1}")
    );
    assert_eq!(info.image, "example.org/capture");
    assert!(info.name.starts_with("capture-"));
    env.job_until("capture", "Complete", |j| is_true(j, "Complete"))
        .await;
    env.stop().await;
}

#[tokio::test]
async fn missing_secret_keeps_pod_pending_until_it_exists() {
    let env = Env::start(SimConfig::default()).await;
    env.sim.register_behaviour("example.org/ok", Arc::new(Exit(0)));
    let extra = json!({"template": {"spec": {"containers": [{"name": "runner", "image": "example.org/ok",
        "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "late", "key": "token"}}}]}]}}});
    env.create_job("late", "example.org/ok", extra).await;
    let pod = env
        .pod_until("late", "CreateContainerConfigError", |p| {
            waiting_reason(p).as_deref() == Some("CreateContainerConfigError")
        })
        .await;
    assert_eq!(phase(&pod), Some("Pending"));
    let message = pod.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0]
        .state
        .clone()
        .unwrap()
        .waiting
        .unwrap()
        .message;
    assert_eq!(message.as_deref(), Some("secret \"late\" not found"));
    // Created afterwards, like the operator's runner Secret: the pod then starts.
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "late", "namespace": NS}, "stringData": {"token": "t"}
    }))
    .unwrap();
    Api::<Secret>::namespaced(env.client.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    env.job_until("late", "Complete", |j| is_true(j, "Complete"))
        .await;
    env.stop().await;
}

#[tokio::test]
async fn eviction_fails_the_pod_and_the_job() {
    let env = Env::start(SimConfig::default()).await;
    let forever = Arc::new(UntilCancelled::default());
    env.sim.register_behaviour("example.org/forever", forever.clone());
    env.create_job("evict", "example.org/forever", json!({})).await;
    let pod = env
        .pod_until("evict", "Running", |p| phase(p) == Some("Running"))
        .await;
    env.sim
        .evict(NS, pod.metadata.name.as_deref().unwrap())
        .await
        .unwrap();
    let pod = env
        .pod_until("evict", "Evicted", |p| phase(p) == Some("Failed"))
        .await;
    assert_eq!(pod.status.as_ref().unwrap().reason.as_deref(), Some("Evicted"));
    let job = env.job_until("evict", "Failed", |j| is_true(j, "Failed")).await;
    assert_eq!(job.status.unwrap().failed, Some(1));
    assert!(forever.0.load(Ordering::SeqCst), "behaviour saw the cancel");
    env.stop().await;
}

#[tokio::test]
async fn image_pull_failure_stays_pending() {
    let config = SimConfig {
        image_pull_failures: vec!["bad.registry/".into()],
        ..SimConfig::default()
    };
    let env = Env::start(config).await;
    env.sim.register_behaviour("bad.registry/", Arc::new(Exit(0)));
    env.create_job("pull", "bad.registry/missing:1", json!({})).await;
    env.pod_until("pull", "ErrImagePull", |p| {
        waiting_reason(p).as_deref() == Some("ErrImagePull")
    })
    .await;
    let pod = env
        .pod_until("pull", "ImagePullBackOff", |p| {
            waiting_reason(p).as_deref() == Some("ImagePullBackOff")
        })
        .await;
    assert_eq!(phase(&pod), Some("Pending"));
    let job = env.jobs().get("pull").await.unwrap();
    assert!(!is_true(&job, "Complete") && !is_true(&job, "Failed"));
    env.stop().await;
}

#[tokio::test]
async fn named_behaviour_by_label_and_node_loss() {
    let env = Env::start(SimConfig::default()).await;
    env.sim.register_behaviour("example.org/", Arc::new(Exit(0)));
    let forever = Arc::new(UntilCancelled::default());
    env.sim.register_named_behaviour("hang", forever.clone());
    let extra = json!({"template": {"metadata": {"labels": {BEHAVIOUR_LABEL: "hang"}}}});
    env.create_job("lost", "example.org/anything", extra).await;
    let pod = env
        .pod_until("lost", "Running", |p| phase(p) == Some("Running"))
        .await;
    let job = env.jobs().get("lost").await.unwrap();
    assert!(
        !is_true(&job, "Complete"),
        "the label's behaviour, not the image's, plays the pod"
    );
    env.sim
        .lose_pod(NS, pod.metadata.name.as_deref().unwrap(), NodeLoss::Fail)
        .await
        .unwrap();
    let pod = env
        .pod_until("lost", "NodeLost", |p| phase(p) == Some("Failed"))
        .await;
    assert_eq!(pod.status.as_ref().unwrap().reason.as_deref(), Some("NodeLost"));
    env.job_until("lost", "Failed", |j| is_true(j, "Failed")).await;
    env.stop().await;
}

#[tokio::test]
async fn deleted_pod_cancels_behaviour_and_counts_as_failed() {
    let env = Env::start(SimConfig::default()).await;
    let forever = Arc::new(UntilCancelled::default());
    env.sim.register_behaviour("example.org/forever", forever.clone());
    env.create_job("gone", "example.org/forever", json!({"backoffLimit": 1}))
        .await;
    let pod = env
        .pod_until("gone", "Running", |p| phase(p) == Some("Running"))
        .await;
    let first = pod.metadata.name.clone().unwrap();
    env.pods().delete(&first, &Default::default()).await.unwrap();
    // A replacement comes up (backoffLimit 1) and the loss is counted.
    let second = env
        .pod_until("gone", "replacement Running", |p| {
            phase(p) == Some("Running") && p.metadata.name.as_deref() != Some(first.as_str())
        })
        .await;
    assert!(forever.0.load(Ordering::SeqCst));
    let job = env
        .job_until("gone", "failed counted", |j| {
            j.status.as_ref().is_some_and(|s| s.failed == Some(1))
        })
        .await;
    assert!(!is_true(&job, "Failed"));
    env.sim
        .lose_pod(NS, second.metadata.name.as_deref().unwrap(), NodeLoss::Delete)
        .await
        .unwrap();
    let job = env.job_until("gone", "Failed", |j| is_true(j, "Failed")).await;
    assert_eq!(job.status.unwrap().failed, Some(2));
    env.stop().await;
}

#[tokio::test]
async fn suspended_job_runs_no_pods_until_resumed() {
    let env = Env::start(SimConfig::default()).await;
    env.sim.register_behaviour("example.org/ok", Arc::new(Exit(0)));
    env.create_job("susp", "example.org/ok", json!({"suspend": true}))
        .await;
    env.job_until("susp", "Suspended", |j| is_true(j, "Suspended"))
        .await;
    assert!(env.job_pods("susp").await.is_empty());
    let patch = json!({"spec": {"suspend": false}});
    env.jobs()
        .patch("susp", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let job = env
        .job_until("susp", "Complete", |j| is_true(j, "Complete"))
        .await;
    assert_eq!(condition(&job, "Suspended").unwrap().0, "False");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_jobs_complete_without_duplicate_pods() {
    use futures::StreamExt;
    const JOBS: usize = 100;
    let config = SimConfig {
        start_delay: Duration::ZERO,
        ..SimConfig::default()
    };
    let env = Env::start(config).await;
    env.sim.register_behaviour("example.org/ok", Arc::new(Exit(0)));
    let started = std::time::Instant::now();
    futures::stream::iter(0..JOBS)
        .map(|i| {
            let env = &env;
            async move {
                env.create_job(&format!("bulk-{i}"), "example.org/ok", json!({}))
                    .await
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
    let created = started.elapsed();
    let deadline = tokio::time::Instant::now() + DEADLINE * 2;
    loop {
        let stats = env.sim.stats();
        if stats.jobs_completed as usize == JOBS {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {stats:?} after the deadline"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "{JOBS} jobs created in {created:?}, all complete after {:?}",
        started.elapsed()
    );
    let pods = env.pods().list(&Default::default()).await.unwrap().items;
    assert_eq!(pods.len(), JOBS, "one pod per job");
    assert!(pods.iter().all(|p| phase(p) == Some("Succeeded")));
    let stats = env.sim.stats();
    assert_eq!(
        (stats.pods_created, stats.pods_succeeded),
        (JOBS as u64, JOBS as u64)
    );
    // Efficiency: a handful of writes per Job, and no polling lists.
    let counts = env.server.requests().counts();
    let count = |verb: Verb, resource: &str| counts.get(&(verb, resource.to_owned())).copied().unwrap_or(0);
    assert!(count(Verb::Patch, "pods/status") <= 3 * JOBS, "{counts:?}");
    assert!(count(Verb::Patch, "jobs/status") <= 4 * JOBS, "{counts:?}");
    assert!(count(Verb::List, "pods") <= 3, "{counts:?}");
    env.stop().await;
}

#[tokio::test]
async fn survives_dropped_watches_and_compaction() {
    let env = Env::start(SimConfig::default()).await;
    env.sim.register_behaviour("example.org/ok", Arc::new(Exit(0)));
    env.create_job("before", "example.org/ok", json!({})).await;
    env.job_until("before", "Complete", |j| is_true(j, "Complete"))
        .await;
    // Every watch must relist (410 Gone on resume); caches and the pod index are rebuilt.
    env.server.compact();
    env.server.drop_watches();
    env.create_job("after", "example.org/ok", json!({})).await;
    let job = env
        .job_until("after", "Complete", |j| is_true(j, "Complete"))
        .await;
    assert_eq!(job.status.unwrap().succeeded, Some(1));
    assert_eq!(
        env.job_pods("after").await.len(),
        1,
        "no duplicate pod after the relist"
    );
    let before = env.jobs().get("before").await.unwrap();
    assert_eq!(
        before.status.unwrap().succeeded,
        Some(1),
        "finished job not recounted"
    );
    assert_eq!(env.job_pods("before").await.len(), 1);
    env.stop().await;
}

#[tokio::test]
async fn only_watched_namespaces_are_simulated() {
    use k8s_openapi::api::core::v1::Namespace;
    let server = FakeApiServer::start().await.unwrap();
    let client = server.client().unwrap();
    for name in ["team-a", "team-b"] {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
    }
    let config = SimConfig {
        namespaces: vec!["team-a".into()],
        ..SimConfig::default()
    };
    let sim = Simulator::start(client.clone(), config);
    tokio::time::timeout(DEADLINE, sim.wait_ready()).await.unwrap();
    sim.register_behaviour("example.org/ok", Arc::new(Exit(0)));
    let job_in = |ns: &str| -> Job {
        serde_json::from_value(json!({
            "metadata": {"name": "j", "namespace": ns},
            "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "runner", "image": "example.org/ok"}]}}}
        }))
        .unwrap()
    };
    let api_a: Api<Job> = Api::namespaced(client.clone(), "team-a");
    let api_b: Api<Job> = Api::namespaced(client.clone(), "team-b");
    // team-b first: if it were simulated, its pod would exist by the time team-a's Job completes.
    api_b
        .create(&PostParams::default(), &job_in("team-b"))
        .await
        .unwrap();
    api_a
        .create(&PostParams::default(), &job_in("team-a"))
        .await
        .unwrap();
    tokio::time::timeout(
        DEADLINE,
        await_condition(api_a, "j", |j: Option<&Job>| {
            j.is_some_and(|j| is_true(j, "Complete"))
        }),
    )
    .await
    .unwrap()
    .unwrap();
    let pods_b = Api::<Pod>::namespaced(client.clone(), "team-b")
        .list(&Default::default())
        .await
        .unwrap();
    assert!(pods_b.items.is_empty(), "unwatched namespace got pods");
    assert!(api_b.get("j").await.unwrap().status.is_none());
    sim.shutdown().await;
    server.shutdown().await;
}
