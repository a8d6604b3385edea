//! Helpers of the simulator failure tests: a fake API server with the simulator in its own
//! namespace, gated behaviours and pod status accessors.
#![allow(dead_code)] // each test binary uses a different subset
// Test helpers: a failed setup should fail the test loudly.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use forgerunner_testkit::apiserver::FakeApiServer;
use forgerunner_testkit::sim::{ContainerBehaviour, PodInfo, SimConfig, SimHandle, Simulator};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Namespace, Pod};
use kube::api::{ListParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::{Semaphore, mpsc};

/// Generous: the machine is shared and busy; conditions normally hold within milliseconds.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// Exits with a fixed code at once.
pub struct Exit(pub i32);

#[async_trait]
impl ContainerBehaviour for Exit {
    async fn run(&self, _pod: PodInfo) -> i32 {
        self.0
    }
}

/// Reports what it saw, then waits for a permit (or the pod's end) before exiting with `code`.
pub struct Gate {
    seen: mpsc::UnboundedSender<PodInfo>,
    open: Arc<Semaphore>,
    code: i32,
}

impl Gate {
    pub fn new(code: i32) -> (Arc<Gate>, mpsc::UnboundedReceiver<PodInfo>, Arc<Semaphore>) {
        let (seen, rx) = mpsc::unbounded_channel();
        let open = Arc::new(Semaphore::new(0));
        let gate = Arc::new(Gate {
            seen,
            open: open.clone(),
            code,
        });
        (gate, rx, open)
    }
}

#[async_trait]
impl ContainerBehaviour for Gate {
    async fn run(&self, pod: PodInfo) -> i32 {
        let _ = self.seen.send(pod.clone());
        tokio::select! {
            permit = self.open.acquire() => {
                if let Ok(permit) = permit {
                    permit.forget();
                }
                self.code
            }
            _ = pod.cancel.cancelled() => self.code,
        }
    }
}

/// Writes the runner state file into its emptyDir, as `register` does.
pub struct Register;

#[async_trait]
impl ContainerBehaviour for Register {
    async fn run(&self, pod: PodInfo) -> i32 {
        assert!(pod.init && pod.container == "register", "{pod:?}");
        if pod.write_scratch("/data/.runner", "registered-uuid") {
            0
        } else {
            9
        }
    }
}

pub struct Env {
    pub server: FakeApiServer,
    pub client: Client,
    pub sim: SimHandle,
    pub ns: String,
}

impl Env {
    pub async fn start(ns: &str, config: SimConfig) -> Env {
        let server = FakeApiServer::start().await.unwrap();
        let client = server.client().unwrap();
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap();
        let sim = Simulator::start(client.clone(), config);
        tokio::time::timeout(DEADLINE, sim.wait_ready())
            .await
            .expect("simulator caches synced");
        Env {
            server,
            client,
            sim,
            ns: ns.to_owned(),
        }
    }

    pub fn jobs(&self) -> Api<Job> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Creates a Job whose pod spec is `pod_spec` (restartPolicy Never, backoffLimit 0).
    pub async fn create_job(&self, name: &str, mut pod_spec: serde_json::Value) -> Job {
        pod_spec["restartPolicy"] = json!("Never");
        let job: Job = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {"backoffLimit": 0, "template": {"spec": pod_spec}},
        }))
        .unwrap();
        self.jobs().create(&PostParams::default(), &job).await.unwrap()
    }

    pub async fn job_until(&self, name: &str, what: &str, cond: impl Fn(&Job) -> bool) -> Job {
        let found = tokio::time::timeout(
            DEADLINE,
            await_condition(self.jobs(), name, move |j: Option<&Job>| j.is_some_and(&cond)),
        )
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for job {name}: {what}"))
        .unwrap();
        found.unwrap()
    }

    pub async fn job_pods(&self, job: &str) -> Vec<Pod> {
        let lp = ListParams::default().labels(&format!("job-name={job}"));
        self.pods().list(&lp).await.unwrap().items
    }

    /// Waits until some pod of the Job satisfies `cond`; returns it.
    pub async fn pod_until(&self, job: &str, what: &str, cond: impl Fn(&Pod) -> bool) -> Pod {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            if let Some(pod) = self.job_pods(job).await.into_iter().find(|p| cond(p)) {
                return pod;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for a pod of {job}: {what}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Records every version of the Job's pods from now on (a watch sees each transition,
    /// however briefly it lasted).
    pub fn record_pods(&self, job: &str) -> Arc<Mutex<Vec<Pod>>> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let config = watcher::Config::default().labels(&format!("job-name={job}"));
        let stream = watcher(self.pods(), config).applied_objects();
        let sink = seen.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(pod)) = stream.next().await {
                sink.lock().unwrap().push(pod);
            }
        });
        seen
    }

    pub async fn stop(self) {
        self.sim.shutdown().await;
        self.server.shutdown().await;
    }
}

pub fn is_true(job: &Job, type_: &str) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

pub fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

pub fn pod_condition(pod: &Pod, type_: &str) -> Option<(String, Option<String>, Option<String>)> {
    let c = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

pub fn statuses(pod: &Pod, init: bool) -> &[ContainerStatus] {
    let status = pod.status.as_ref();
    let list = if init {
        status.and_then(|s| s.init_container_statuses.as_ref())
    } else {
        status.and_then(|s| s.container_statuses.as_ref())
    };
    list.map_or(&[], Vec::as_slice)
}

pub fn state_of(pod: &Pod, init: bool, name: &str) -> ContainerState {
    statuses(pod, init)
        .iter()
        .find(|c| c.name == name)
        .and_then(|c| c.state.clone())
        .unwrap_or_default()
}

pub fn waiting(pod: &Pod, init: bool, name: &str) -> Option<String> {
    state_of(pod, init, name).waiting.and_then(|w| w.reason)
}

/// Pod spec: `register` init container, `dind` native sidecar, `runner` main container; the
/// two sharing the `state` emptyDir at different paths.
pub fn runner_with_init() -> serde_json::Value {
    json!({
        "volumes": [{"name": "state", "emptyDir": {}}],
        "initContainers": [
            {"name": "register", "image": "example.org/register", "args": ["register"],
             "volumeMounts": [{"name": "state", "mountPath": "/data"}]},
            {"name": "dind", "image": "docker:dind", "restartPolicy": "Always"}
        ],
        "containers": [{"name": "runner", "image": "example.org/runner",
            "volumeMounts": [{"name": "state", "mountPath": "/home/runner/state"}]}]
    })
}
