//! The failures real clusters show runner pods, as the simulator plays them: init containers
//! and native sidecars, unschedulable pods, quota `FailedCreate` events, slow pulls and
//! eviction.

// Test helpers outside `#[test]` functions: a failed setup should fail the test loudly.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use forgerunner_testkit::apiserver::FakeApiServer;
use forgerunner_testkit::sim::{
    ContainerBehaviour, FAILED_CREATE_REASON, JOB_CONTROLLER_COMPONENT, PodInfo, SimConfig, SimHandle,
    Simulator,
};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Event, Namespace, Pod};
use kube::api::{ListParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::{Semaphore, mpsc};

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

/// Reports what it saw, then waits for a permit (or the pod's end) before exiting with `code`.
struct Gate {
    seen: mpsc::UnboundedSender<PodInfo>,
    open: Arc<Semaphore>,
    code: i32,
}

impl Gate {
    fn new(code: i32) -> (Arc<Gate>, mpsc::UnboundedReceiver<PodInfo>, Arc<Semaphore>) {
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
struct Register;

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

struct Env {
    server: FakeApiServer,
    client: Client,
    sim: SimHandle,
    ns: String,
}

impl Env {
    async fn start(ns: &str, config: SimConfig) -> Env {
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

    fn jobs(&self) -> Api<Job> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Creates a Job whose pod spec is `pod_spec` (restartPolicy Never, backoffLimit 0).
    async fn create_job(&self, name: &str, mut pod_spec: serde_json::Value) -> Job {
        pod_spec["restartPolicy"] = json!("Never");
        let job: Job = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {"backoffLimit": 0, "template": {"spec": pod_spec}},
        }))
        .unwrap();
        self.jobs().create(&PostParams::default(), &job).await.unwrap()
    }

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

    async fn job_pods(&self, job: &str) -> Vec<Pod> {
        let lp = ListParams::default().labels(&format!("job-name={job}"));
        self.pods().list(&lp).await.unwrap().items
    }

    /// Waits until some pod of the Job satisfies `cond`; returns it.
    async fn pod_until(&self, job: &str, what: &str, cond: impl Fn(&Pod) -> bool) -> Pod {
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
    fn record_pods(&self, job: &str) -> Arc<Mutex<Vec<Pod>>> {
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

    async fn stop(self) {
        self.sim.shutdown().await;
        self.server.shutdown().await;
    }
}

fn is_true(job: &Job, type_: &str) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

fn pod_condition(pod: &Pod, type_: &str) -> Option<(String, Option<String>, Option<String>)> {
    let c = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn statuses(pod: &Pod, init: bool) -> &[ContainerStatus] {
    let status = pod.status.as_ref();
    let list = if init {
        status.and_then(|s| s.init_container_statuses.as_ref())
    } else {
        status.and_then(|s| s.container_statuses.as_ref())
    };
    list.map_or(&[], Vec::as_slice)
}

fn state_of(pod: &Pod, init: bool, name: &str) -> ContainerState {
    statuses(pod, init)
        .iter()
        .find(|c| c.name == name)
        .and_then(|c| c.state.clone())
        .unwrap_or_default()
}

fn waiting(pod: &Pod, init: bool, name: &str) -> Option<String> {
    state_of(pod, init, name).waiting.and_then(|w| w.reason)
}

/// Pod spec: `register` init container, `dind` native sidecar, `runner` main container; the
/// two sharing the `state` emptyDir at different paths.
fn runner_with_init() -> serde_json::Value {
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

#[tokio::test]
async fn init_container_runs_first_and_sidecar_runs_beside_main() {
    let env = Env::start("sim-init", SimConfig::default()).await;
    let (register, mut registering, let_register) = Gate::new(0);
    let (runner, mut running, let_runner) = Gate::new(0);
    env.sim.register_behaviour("example.org/register", register);
    env.sim.register_behaviour("example.org/runner", runner);
    env.create_job("init", runner_with_init()).await;

    // While `register` runs: Pending, not initialized, main container waiting.
    let info = tokio::time::timeout(DEADLINE, registering.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(info.init && info.container == "register", "{info:?}");
    assert_eq!(info.args, ["register"]);
    assert!(info.write_scratch("/data/.runner", "registered-uuid"));
    let pod = env
        .pod_until("init", "register running", |p| {
            state_of(p, true, "register").running.is_some()
        })
        .await;
    assert_eq!(phase(&pod), Some("Pending"));
    assert_eq!(waiting(&pod, false, "runner").as_deref(), Some("PodInitializing"));
    assert_eq!(waiting(&pod, true, "dind").as_deref(), Some("PodInitializing"));
    let (status, reason, message) = pod_condition(&pod, "Initialized").unwrap();
    assert_eq!(
        (status.as_str(), reason.as_deref()),
        ("False", Some("ContainersNotInitialized"))
    );
    assert_eq!(
        message.as_deref(),
        Some("containers with incomplete status: [register dind]")
    );
    assert!(running.try_recv().is_err(), "main container waits for init");

    // Then the main container, reading what `register` left, beside the running sidecar.
    let_register.add_permits(1);
    let main = tokio::time::timeout(DEADLINE, running.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(!main.init && main.container == "runner");
    assert_eq!(
        main.read_scratch("/home/runner/state/.runner").as_deref(),
        Some("registered-uuid")
    );
    let pod = env
        .pod_until("init", "Running", |p| phase(p) == Some("Running"))
        .await;
    let register_done = state_of(&pod, true, "register").terminated.unwrap();
    assert_eq!(
        (register_done.exit_code, register_done.reason.as_deref()),
        (0, Some("Completed"))
    );
    let dind = statuses(&pod, true).iter().find(|c| c.name == "dind").unwrap();
    assert!(dind.state.as_ref().unwrap().running.is_some());
    assert_eq!((dind.started, dind.ready), (Some(true), true));
    assert_eq!(pod_condition(&pod, "Initialized").unwrap().0, "True");

    // The sidecar does not keep the pod alive.
    let_runner.add_permits(1);
    env.job_until("init", "Complete", |j| is_true(j, "Complete"))
        .await;
    let pod = env.job_pods("init").await.pop().unwrap();
    assert_eq!(phase(&pod), Some("Succeeded"));
    assert!(state_of(&pod, true, "dind").terminated.is_some());
    env.stop().await;
}

#[tokio::test]
async fn scratch_files_pass_from_init_to_main_container() {
    let env = Env::start("sim-scratch", SimConfig::default()).await;
    let (runner, mut running, let_runner) = Gate::new(0);
    env.sim
        .register_behaviour("example.org/register", Arc::new(Register));
    env.sim.register_behaviour("example.org/runner", runner);
    env.create_job("scratch", runner_with_init()).await;
    let main = tokio::time::timeout(DEADLINE, running.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        main.read_scratch("/home/runner/state/.runner").as_deref(),
        Some("registered-uuid")
    );
    let_runner.add_permits(1);
    env.job_until("scratch", "Complete", |j| is_true(j, "Complete"))
        .await;
    env.stop().await;
}

#[tokio::test]
async fn failing_init_container_fails_the_pod_without_running_main() {
    let env = Env::start("sim-initfail", SimConfig::default()).await;
    let (runner, mut running, _) = Gate::new(0);
    env.sim
        .register_behaviour("example.org/register", Arc::new(Exit(2)));
    env.sim.register_behaviour("example.org/runner", runner);
    env.create_job("initfail", runner_with_init()).await;
    env.job_until("initfail", "Failed", |j| is_true(j, "Failed"))
        .await;
    let pod = env.job_pods("initfail").await.pop().unwrap();
    assert_eq!(phase(&pod), Some("Failed"));
    let term = state_of(&pod, true, "register").terminated.unwrap();
    assert_eq!((term.exit_code, term.reason.as_deref()), (2, Some("Error")));
    assert_eq!(waiting(&pod, false, "runner").as_deref(), Some("PodInitializing"));
    assert_eq!(pod_condition(&pod, "Initialized").unwrap().0, "False");
    assert!(running.try_recv().is_err(), "main container never ran");
    assert_eq!(env.sim.stats().pods_started, 0);
    env.stop().await;
}

#[tokio::test]
async fn init_without_behaviour_succeeds_and_init_image_pulls_can_fail() {
    let config = SimConfig {
        image_pull_failures: vec!["bad.registry/".into()],
        ..SimConfig::default()
    };
    let env = Env::start("sim-initpull", config).await;
    env.sim
        .register_behaviour("example.org/runner", Arc::new(Exit(0)));
    // `example.org/register` has no behaviour: the init container succeeds at once.
    env.create_job("plain", runner_with_init()).await;
    env.job_until("plain", "Complete", |j| is_true(j, "Complete"))
        .await;

    let mut spec = runner_with_init();
    spec["initContainers"][0]["image"] = json!("bad.registry/register:1");
    env.create_job("pull", spec).await;
    let pod = env
        .pod_until("pull", "init ImagePullBackOff", |p| {
            waiting(p, true, "register").as_deref() == Some("ImagePullBackOff")
        })
        .await;
    assert_eq!(phase(&pod), Some("Pending"));
    assert_eq!(waiting(&pod, false, "runner").as_deref(), Some("PodInitializing"));
    env.stop().await;
}

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
    let message = event.message.clone().unwrap();
    let rest = message
        .strip_prefix("Error creating: pods \"second-")
        .unwrap_or_else(|| panic!("{message}"));
    assert_eq!(
        &rest[5..],
        "\" is forbidden: exceeded quota: pods-quota, requested: pods=1, used: pods=1, limited: pods=1",
        "{message}"
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

#[tokio::test]
async fn evicted_runner_pod_with_sidecar_ends_failed_evicted() {
    let env = Env::start("sim-evict", SimConfig::default()).await;
    let (runner, mut running, _) = Gate::new(0);
    env.sim.register_behaviour("example.org/runner", runner);
    env.create_job("evict", runner_with_init()).await;
    let info = tokio::time::timeout(DEADLINE, running.recv())
        .await
        .unwrap()
        .unwrap();
    env.sim.evict(&env.ns, &info.name).await.unwrap();
    let pod = env
        .pod_until("evict", "Failed", |p| phase(p) == Some("Failed"))
        .await;
    let status = pod.status.clone().unwrap();
    assert_eq!(status.reason.as_deref(), Some("Evicted"));
    assert!(
        state_of(&pod, true, "dind").terminated.is_some(),
        "sidecar stopped too"
    );
    assert_eq!(
        pod_condition(&pod, "DisruptionTarget").unwrap().1.as_deref(),
        Some("TerminationByKubelet")
    );
    env.job_until("evict", "Failed", |j| is_true(j, "Failed")).await;
    assert!(info.cancel.is_cancelled(), "the runner saw its pod end");
    env.stop().await;
}

#[tokio::test]
async fn slow_sidecar_pull_from_config_holds_initialization() {
    const PULL: Duration = Duration::from_millis(800);
    let config = SimConfig {
        slow_pulls: vec![("docker:".to_owned(), PULL)],
        ..SimConfig::default()
    };
    let env = Env::start("sim-slowinit", config).await;
    env.sim
        .register_behaviour("example.org/runner", Arc::new(Exit(0)));
    let history = env.record_pods("slowinit");
    let before = tokio::time::Instant::now();
    env.create_job("slowinit", runner_with_init()).await;
    env.job_until("slowinit", "Complete", |j| is_true(j, "Complete"))
        .await;
    assert!(before.elapsed() >= PULL, "done after {:?}", before.elapsed());
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let seen = history.lock().unwrap().clone();
        let creating = seen.iter().any(|p| {
            waiting(p, true, "dind").as_deref() == Some("ContainerCreating")
                && waiting(p, false, "runner").as_deref() == Some("PodInitializing")
        });
        if creating {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never saw dind ContainerCreating"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    env.stop().await;
}
