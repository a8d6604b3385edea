//! The harness of the reconciler's end-to-end tests: `run_controller` in-process against the
//! testkit's fake API server, with core's tiny fake forge ([`FakeForge`] of
//! `forgerunner_core::testing`). No cluster simulator runs, so runner Jobs keep no status unless a
//! test writes one.

// Each test binary uses part of the harness.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use forgerunner_core::Fence;
use forgerunner_core::crd::{ForgeKind, RunnerGroup};
use forgerunner_core::forge::{Forge, ReconcileTrigger};
use forgerunner_core::metrics::Metrics;
use forgerunner_core::reconcile::runner_rbac::RunnerHooks;
use forgerunner_core::reconcile::{ControllerOptions, ForgeSet, run_controller};
use forgerunner_core::runner_job::{GROUP_LABEL, MANAGED_BY_SELECTOR};
use forgerunner_core::schedule::CalendarClock;
use forgerunner_core::testing::FakeForge;
use forgerunner_testkit::apiserver::FakeApiServer;
use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, CustomResourceExt};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const NS: &str = "default";
pub const DEADLINE: Duration = Duration::from_secs(30);

/// The one enabled fake forge (of its kind), or none.
pub struct Forges {
    pub enabled: Option<Arc<FakeForge>>,
}

impl ForgeSet for Forges {
    fn enabled(&self) -> Vec<&dyn Forge> {
        self.enabled
            .as_deref()
            .map(|f| f as &dyn Forge)
            .into_iter()
            .collect()
    }
}

pub struct Harness {
    pub server: FakeApiServer,
    pub client: Client,
    pub forge: Arc<FakeForge>,
    pub forges: Arc<Forges>,
    pub fence: Fence,
    /// What the controller binds for runner permissions; kept over [`Harness::restart_controller`].
    pub runner_hooks: Option<RunnerHooks>,
    pub shutdown: CancellationToken,
    pub task: JoinHandle<()>,
    pub trigger: ReconcileTrigger,
    /// What the controller's calendar clock reads: the system's time while `None`.
    pub calendar_at: Arc<std::sync::Mutex<Option<jiff::Timestamp>>>,
}

/// A running controller: what stops it and how to wake it.
pub struct Controller {
    pub shutdown: CancellationToken,
    pub task: JoinHandle<()>,
    pub trigger: ReconcileTrigger,
}

/// The runner container hooks' ClusterRoles as the chart names them for a release
/// `forgerunner` in `forgerunner-system` (the fake API server checks no RBAC, so they need not
/// exist).
pub fn test_runner_hooks() -> RunnerHooks {
    RunnerHooks {
        cluster_role: "forgerunner-runner-hooks".into(),
        cleanup_cluster_role: "forgerunner-runner-hooks-cleanup".into(),
        operator_namespace: "forgerunner-system".into(),
        operator_service_account: "forgerunner".into(),
    }
}

/// Starts the controller on `client` and waits for its caches to sync (panics after the
/// deadline, naming it: a controller whose group LIST fails never syncs).
pub async fn start_controller(
    client: &Client,
    forges: Arc<Forges>,
    fence: Fence,
    runner_hooks: Option<RunnerHooks>,
    calendar_at: Arc<std::sync::Mutex<Option<jiff::Timestamp>>>,
) -> Controller {
    let ready = Arc::new(AtomicBool::new(false));
    let shutdown = CancellationToken::new();
    let (trigger, triggers) = ReconcileTrigger::channel();
    let opts = ControllerOptions {
        namespaces: vec![],
        instance: "test-0".into(),
        concurrency: 16,
        fence,
        runner_hooks,
        calendar: CalendarClock::from_fn(move || {
            calendar_at
                .lock()
                .expect("calendar")
                .unwrap_or_else(jiff::Timestamp::now)
        }),
        ..ControllerOptions::default()
    };
    let task = tokio::spawn({
        let (client, ready, shutdown) = (client.clone(), ready.clone(), shutdown.clone());
        async move {
            let metrics = Arc::new(Metrics::default());
            run_controller(client, forges, metrics, triggers, opts, ready, shutdown)
                .await
                .expect("controller ran");
        }
    });
    wait_for("caches synced", || {
        let ready = ready.clone();
        async move { ready.load(Ordering::SeqCst) }
    })
    .await;
    Controller {
        shutdown,
        task,
        trigger,
    }
}

impl Harness {
    pub async fn start(gitea_enabled: bool) -> Harness {
        Harness::start_with(if gitea_enabled {
            Some(ForgeKind::Gitea)
        } else {
            None
        })
        .await
    }

    pub async fn start_with(enabled: Option<ForgeKind>) -> Harness {
        Harness::start_fenced(enabled, Fence::open()).await
    }

    pub async fn start_fenced(enabled: Option<ForgeKind>, fence: Fence) -> Harness {
        // Logs only when RUST_LOG is set; a second init in the same binary is a no-op.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let server = FakeApiServer::start().await.expect("fake api server");
        let client = server.client().expect("client");
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        crds.create(&PostParams::default(), &RunnerGroup::crd())
            .await
            .expect("install CRD");
        let forge = FakeForge::new(enabled.unwrap_or(ForgeKind::Gitea));
        let forges = Arc::new(Forges {
            enabled: enabled.map(|_| forge.clone()),
        });
        let runner_hooks = Some(test_runner_hooks());
        let calendar_at = Arc::new(std::sync::Mutex::new(None));
        let c = start_controller(
            &client,
            forges.clone(),
            fence.clone(),
            runner_hooks.clone(),
            calendar_at.clone(),
        )
        .await;
        Harness {
            server,
            client,
            forge,
            forges,
            fence,
            runner_hooks,
            shutdown: c.shutdown,
            task: c.task,
            trigger: c.trigger,
            calendar_at,
        }
    }

    /// Stops the controller and starts a new one on the same cluster, as a restart or a
    /// failover does: the new one starts with a LIST of every group.
    pub async fn restart_controller(&mut self) {
        self.shutdown.cancel();
        let task = std::mem::replace(&mut self.task, tokio::spawn(async {}));
        tokio::time::timeout(DEADLINE, task)
            .await
            .expect("controller stops")
            .expect("no panic");
        let c = start_controller(
            &self.client,
            self.forges.clone(),
            self.fence.clone(),
            self.runner_hooks.clone(),
            self.calendar_at.clone(),
        )
        .await;
        self.shutdown = c.shutdown;
        self.task = c.task;
        self.trigger = c.trigger;
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(DEADLINE, self.task)
            .await
            .expect("controller stops")
            .expect("no panic");
        self.server.shutdown().await;
    }

    pub fn groups(&self) -> Api<RunnerGroup> {
        Api::namespaced(self.client.clone(), NS)
    }

    /// Stores a group the CRD's CEL rules refuse, as one stored before the rules existed: the
    /// CRD is swapped for one without rules for the create, then put back.
    pub async fn create_group_before_rules(&self, name: &str, spec: serde_json::Value) {
        self.create_group_under_older_crd(name, spec, false).await;
    }

    /// Stores a group as an older CRD let it be stored: without the CEL rules, and with
    /// `free_template` the pod template free-form (`x-kubernetes-preserve-unknown-fields`, as
    /// every version before the typed template schema had it). The CRD is put back after.
    pub async fn create_group_under_older_crd(
        &self,
        name: &str,
        spec: serde_json::Value,
        free_template: bool,
    ) {
        fn strip(v: &mut serde_json::Value) {
            match v {
                serde_json::Value::Object(m) => {
                    m.remove("x-kubernetes-validations");
                    m.values_mut().for_each(strip);
                }
                serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
                _ => {}
            }
        }
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let name_of_crd = RunnerGroup::crd_name();
        let mut bare = serde_json::to_value(crds.get(name_of_crd).await.expect("get CRD")).expect("CRD");
        strip(&mut bare);
        if free_template {
            let spec_props = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties";
            bare.pointer_mut(spec_props).expect("spec schema")["template"] =
                serde_json::json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
        }
        let bare: CustomResourceDefinition = serde_json::from_value(bare).expect("CRD");
        crds.replace(name_of_crd, &PostParams::default(), &bare)
            .await
            .expect("CRD without rules");
        self.create_group(name, spec).await;
        let mut with_rules = RunnerGroup::crd();
        with_rules.metadata.resource_version = crds
            .get(name_of_crd)
            .await
            .expect("get CRD")
            .metadata
            .resource_version;
        crds.replace(name_of_crd, &PostParams::default(), &with_rules)
            .await
            .expect("CRD with rules again");
    }

    pub fn jobs(&self) -> Api<Job> {
        Api::namespaced(self.client.clone(), NS)
    }

    pub async fn create_secret(&self, name: &str) {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), NS);
        let s = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                "token".to_owned(),
                ByteString(b"api-token".to_vec()),
            )])),
            ..Secret::default()
        };
        secrets
            .create(&PostParams::default(), &s)
            .await
            .expect("create secret");
    }

    /// Creates a group from JSON as a user's `kubectl apply` would: untyped, so the test never
    /// decodes what the operator must.
    pub async fn create_group(&self, name: &str, spec: serde_json::Value) {
        let g: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "forgerunner.dev/v1alpha1",
            "kind": "RunnerGroup",
            "metadata": {"name": name, "namespace": NS},
            "spec": spec,
        }))
        .expect("group");
        let resource = ApiResource::erase::<RunnerGroup>(&());
        Api::<DynamicObject>::namespaced_with(self.client.clone(), NS, &resource)
            .create(&PostParams::default(), &g)
            .await
            .expect("create group");
    }

    pub async fn runner_jobs(&self, group: &str) -> Vec<Job> {
        let lp = ListParams::default().labels(&format!("{MANAGED_BY_SELECTOR},{GROUP_LABEL}={group}"));
        self.jobs().list(&lp).await.expect("list jobs").items
    }

    /// Marks runner Job `job` failed, as the Job controller would once its pod failed.
    pub async fn fail_job(&self, job: &str) {
        let failed = serde_json::json!({"status": {"failed": 1, "conditions": [
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "x"}
        ]}});
        self.jobs()
            .patch_status(job, &PatchParams::default(), &Patch::Merge(&failed))
            .await
            .expect("fail job");
    }

    /// Creates the pod of runner Job `job` whose `runner` container exited with `exit_code`
    /// (no kubelet runs here, so the test writes the status itself).
    pub async fn failed_runner_pod(&self, job: &str, exit_code: i32) {
        self.ended_runner_pod(job, exit_code, serde_json::json!([])).await;
    }

    /// Creates the pod of runner Job `job` as the cluster leaves a pod it killed: phase
    /// `Failed` with the `DisruptionTarget` condition and `reason` (set by the eviction API,
    /// the scheduler's preemption, the taint manager or the pod GC; k8s.io/api `core/v1`
    /// `DisruptionTarget`), the runner container killed by the signal.
    pub async fn disrupted_runner_pod(&self, job: &str, reason: &str) {
        let conditions = serde_json::json!([{"type": "DisruptionTarget", "status": "True",
            "reason": reason, "message": "Eviction API: evicting",
            "lastTransitionTime": "2026-11-26T00:00:00Z"}]);
        self.ended_runner_pod(job, 143, conditions).await;
    }

    /// Creates the failed pod of runner Job `job`: its `runner` container exited with
    /// `exit_code`, and the pod carries `conditions`.
    async fn ended_runner_pod(&self, job: &str, exit_code: i32, conditions: serde_json::Value) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), NS);
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("{job}-p0"), "labels": {"job-name": job}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "runner", "image": "fake/runner:1"}]},
        }))
        .expect("pod");
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
        let status = serde_json::json!({"status": {"phase": "Failed", "conditions": conditions,
            "containerStatuses": [{
            "name": "runner", "image": "fake/runner:1", "imageID": "", "ready": false,
            "restartCount": 0, "state": {"terminated": {"exitCode": exit_code, "reason": "Error"}},
        }]}});
        pods.patch_status(
            &format!("{job}-p0"),
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await
        .expect("pod status");
    }

    /// The notes of the namespace's events.k8s.io Events with `reason`, one entry per Event.
    pub async fn notes(&self, reason: &str) -> Vec<String> {
        Api::<k8s_openapi::api::events::v1::Event>::namespaced(self.client.clone(), NS)
            .list(&ListParams::default())
            .await
            .expect("list events")
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter_map(|e| e.note)
            .collect()
    }

    pub async fn condition(&self, group: &str, type_: &str) -> Option<(String, String, String)> {
        let g = self.groups().get_opt(group).await.ok()??;
        let c = g.status?.conditions.into_iter().find(|c| c.type_ == type_)?;
        Some((c.status, c.reason, c.message))
    }
}

pub fn gitea_spec(min: u32, max: u32, idle: u32) -> serde_json::Value {
    serde_json::json!({
        "forge": "gitea",
        "minRunners": min,
        "maxRunners": max,
        "idleTimeoutSeconds": idle,
        "gitea": {
            "url": "https://gitea.example.com",
            "scope": "global",
            "credentials": "creds",
            "labels": ["ubuntu-latest"],
            "pollIntervalSeconds": 1
        }
    })
}

/// Polls `cond` every 50 ms until it holds; panics naming `what` after the deadline.
pub async fn wait_for<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if cond().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
