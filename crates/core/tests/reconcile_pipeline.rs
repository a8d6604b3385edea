//! End-to-end tests of the generic reconciler: `run_controller` in-process against the testkit's
//! fake API server, with a tiny in-test forge. No cluster simulator runs, so runner Jobs keep no
//! status unless a test writes one.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use forgerunner_core::Fence;
use forgerunner_core::budget::RateBudget;
use forgerunner_core::crd::{ForgeKind, RunnerGroup, RunnerGroupSpec};
use forgerunner_core::forge::{
    ClusterRefs, Forge, ForgeError, ForgeRunnerState, ForgeView, GroupContext, GroupKey, ReconcileTrigger,
    RemoveOutcome, RunnerCredentials, RunnerExit, RunnerRef, SecretValue,
};
use forgerunner_core::job_identity::{JOB_NAME_ANNOTATION, JOB_RUN_ID_ANNOTATION, JobIdentity};
use forgerunner_core::metrics::Metrics;
use forgerunner_core::reconcile::{ControllerOptions, FINALIZER, ForgeSet, run_controller};
use forgerunner_core::runner_job::{FORGE_LABEL, GROUP_LABEL, MANAGED_BY_SELECTOR};
use forgerunner_core::validate::{SpecViolation, violation};
use forgerunner_testkit::apiserver::FakeApiServer;
use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, EnvVar, EnvVarSource, Pod, PodSpec, Secret, SecretKeySelector};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, CustomResourceExt};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const NS: &str = "default";
const SECRET_VALUE: &str = "runner-secret-value-do-not-leak";
const DEADLINE: Duration = Duration::from_secs(30);
/// The exit code the fake forge calls "outdated runner" (as GitHub's runner does).
const OUTDATED_EXIT: i32 = 7;

/// A forge whose waiting jobs tests set directly.
struct FakeForge {
    kind: ForgeKind,
    jobs: AtomicU32,
    fail_demand: AtomicBool,
    issued: Mutex<Vec<String>>,
    removed: Mutex<Vec<String>>,
    shutdowns: AtomicU32,
    /// The API budget the forge reports with each view.
    budget: Mutex<Option<RateBudget>>,
    /// The job each runner runs, as the forge reports it.
    identities: Mutex<BTreeMap<String, JobIdentity>>,
}

impl FakeForge {
    fn new(kind: ForgeKind) -> Arc<FakeForge> {
        Arc::new(FakeForge {
            kind,
            jobs: AtomicU32::new(0),
            fail_demand: AtomicBool::new(false),
            issued: Mutex::new(Vec::new()),
            removed: Mutex::new(Vec::new()),
            shutdowns: AtomicU32::new(0),
            budget: Mutex::new(None),
            identities: Mutex::new(BTreeMap::new()),
        })
    }

    fn removed(&self) -> Vec<String> {
        self.removed.lock().expect("lock").clone()
    }
}

#[async_trait]
impl Forge for FakeForge {
    fn kind(&self) -> ForgeKind {
        self.kind
    }

    fn validate(&self, spec: &RunnerGroupSpec) -> Vec<SpecViolation> {
        // One rule of the forge's own, to show its violations reach the condition.
        match &spec.gitea {
            Some(g) if g.labels.iter().any(|l| l == "reserved") => {
                vec![violation("spec.gitea.labels", "must not use reserved")]
            }
            _ => Vec::new(),
        }
    }

    fn cluster_refs(&self, spec: &RunnerGroupSpec) -> ClusterRefs {
        let credentials = spec
            .gitea
            .as_ref()
            .map(|g| g.credentials.clone())
            .or_else(|| spec.github.as_ref().map(|g| g.credentials.clone()))
            .unwrap_or_default();
        ClusterRefs {
            credentials_secret: credentials,
            ..ClusterRefs::default()
        }
    }

    fn resync_interval(&self, spec: &RunnerGroupSpec) -> Duration {
        let seconds = spec.gitea.as_ref().map_or(60, |g| g.poll_interval_seconds());
        Duration::from_secs(u64::from(seconds))
    }

    fn default_runner_pod(
        &self,
        _group: &RunnerGroup,
        _runner_name: &str,
        secret_name: &str,
        _credentials: &RunnerCredentials,
    ) -> PodSpec {
        PodSpec {
            containers: vec![Container {
                name: "runner".into(),
                image: Some("fake/runner:1".into()),
                env: Some(vec![EnvVar {
                    name: "TOKEN".into(),
                    value: None,
                    value_from: Some(EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: secret_name.into(),
                            key: "token".into(),
                            optional: None,
                        }),
                        ..EnvVarSource::default()
                    }),
                }]),
                ..Container::default()
            }],
            ..PodSpec::default()
        }
    }

    async fn observe(&self, _group: &GroupContext, runners: &[RunnerRef]) -> Result<ForgeView, ForgeError> {
        if self.fail_demand.load(Ordering::SeqCst) {
            return Err(ForgeError::Unavailable("fake outage".into()));
        }
        Ok(ForgeView {
            waiting_jobs: self.jobs.load(Ordering::SeqCst),
            runners: runners
                .iter()
                .map(|r| (r.name.clone(), ForgeRunnerState::Idle))
                .collect(),
            budget: *self.budget.lock().expect("lock"),
            job_identities: self.identities.lock().expect("lock").clone(),
            ..ForgeView::default()
        })
    }

    async fn runner_credentials(
        &self,
        _group: &GroupContext,
        name: &str,
    ) -> Result<RunnerCredentials, ForgeError> {
        self.issued.lock().expect("lock").push(name.to_owned());
        Ok(RunnerCredentials {
            secret_data: BTreeMap::from([("token".to_owned(), SecretValue::new(SECRET_VALUE))]),
            env: BTreeMap::from([("RUNNER_NAME".to_owned(), name.to_owned())]),
            annotations: BTreeMap::new(),
        })
    }

    fn runner_exit_meaning(&self, exit_code: i32) -> Option<RunnerExit> {
        (exit_code == OUTDATED_EXIT).then_some(RunnerExit::Outdated)
    }

    async fn remove_runner(
        &self,
        _group: &GroupContext,
        runner: &RunnerRef,
    ) -> Result<RemoveOutcome, ForgeError> {
        self.removed.lock().expect("lock").push(runner.name.clone());
        Ok(RemoveOutcome::Removed)
    }

    async fn shutdown(&self, _group: &GroupContext) -> Result<(), ForgeError> {
        self.shutdowns.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// The one enabled fake forge (of its kind), or none.
struct Forges {
    enabled: Option<Arc<FakeForge>>,
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

struct Harness {
    server: FakeApiServer,
    client: Client,
    forge: Arc<FakeForge>,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
    trigger: ReconcileTrigger,
}

impl Harness {
    async fn start(gitea_enabled: bool) -> Harness {
        Harness::start_with(if gitea_enabled {
            Some(ForgeKind::Gitea)
        } else {
            None
        })
        .await
    }

    async fn start_with(enabled: Option<ForgeKind>) -> Harness {
        Harness::start_fenced(enabled, Fence::open()).await
    }

    async fn start_fenced(enabled: Option<ForgeKind>, fence: Fence) -> Harness {
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
        let ready = Arc::new(AtomicBool::new(false));
        let shutdown = CancellationToken::new();
        let (trigger, triggers) = ReconcileTrigger::channel();
        let opts = ControllerOptions {
            namespaces: vec![],
            instance: "test-0".into(),
            concurrency: 4,
            fence,
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
        Harness {
            server,
            client,
            forge,
            shutdown,
            task,
            trigger,
        }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(DEADLINE, self.task)
            .await
            .expect("controller stops")
            .expect("no panic");
        self.server.shutdown().await;
    }

    fn groups(&self) -> Api<RunnerGroup> {
        Api::namespaced(self.client.clone(), NS)
    }

    /// Stores a group the CRD's CEL rules refuse, as one stored before the rules existed: the
    /// CRD is swapped for one without rules for the create, then put back.
    async fn create_group_before_rules(&self, name: &str, spec: serde_json::Value) {
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

    fn jobs(&self) -> Api<Job> {
        Api::namespaced(self.client.clone(), NS)
    }

    async fn create_secret(&self, name: &str) {
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

    async fn create_group(&self, name: &str, spec: serde_json::Value) {
        let g: RunnerGroup = serde_json::from_value(serde_json::json!({
            "apiVersion": "forgerunner.dev/v1alpha1",
            "kind": "RunnerGroup",
            "metadata": {"name": name, "namespace": NS},
            "spec": spec,
        }))
        .expect("group");
        self.groups()
            .create(&PostParams::default(), &g)
            .await
            .expect("create group");
    }

    async fn runner_jobs(&self, group: &str) -> Vec<Job> {
        let lp = ListParams::default().labels(&format!("{MANAGED_BY_SELECTOR},{GROUP_LABEL}={group}"));
        self.jobs().list(&lp).await.expect("list jobs").items
    }

    /// Marks runner Job `job` failed, as the Job controller would once its pod failed.
    async fn fail_job(&self, job: &str) {
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
    async fn failed_runner_pod(&self, job: &str, exit_code: i32) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), NS);
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("{job}-p0"), "labels": {"job-name": job}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "runner", "image": "fake/runner:1"}]},
        }))
        .expect("pod");
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
        let status = serde_json::json!({"status": {"phase": "Failed", "containerStatuses": [{
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

    async fn condition(&self, group: &str, type_: &str) -> Option<(String, String, String)> {
        let g = self.groups().get_opt(group).await.ok()??;
        let c = g.status?.conditions.into_iter().find(|c| c.type_ == type_)?;
        Some((c.status, c.reason, c.message))
    }
}

fn gitea_spec(min: u32, max: u32, idle: u32) -> serde_json::Value {
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
async fn wait_for<F, Fut>(what: &str, mut cond: F)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demand_creates_runner_jobs_with_secrets_within_max() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    h.forge.jobs.store(5, Ordering::SeqCst);
    h.create_group("pool", gitea_spec(0, 3, 600)).await;

    wait_for("3 runner jobs", || async {
        h.runner_jobs("pool").await.len() == 3
    })
    .await;
    // The pass that created the runners saw none yet; a later pass reports them.
    wait_for("Ready=True with 3 current runners", || async {
        let counted = h
            .groups()
            .get("pool")
            .await
            .ok()
            .and_then(|g| g.status)
            .is_some_and(|s| s.current_runners == 3);
        counted
            && h.condition("pool", "Ready")
                .await
                .is_some_and(|(s, r, _)| s == "True" && r == "Reconciled")
    })
    .await;
    let group = h.groups().get("pool").await.expect("group");
    assert!(group.metadata.finalizers.iter().flatten().any(|f| f == FINALIZER));
    let status = group.status.expect("status");
    assert_eq!(status.current_runners, 3);
    assert_eq!(status.desired_runners, 3);
    assert!(status.last_poll_time.is_some());

    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), NS);
    for job in h.runner_jobs("pool").await {
        let name = job.metadata.name.clone().expect("name");
        assert!(
            name.starts_with("pool-") && name.len() == "pool-".len() + 5,
            "{name}"
        );
        let labels = job.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get(FORGE_LABEL).map(String::as_str), Some("gitea"));
        let owner = &job.metadata.owner_references.clone().expect("owner")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("RunnerGroup", Some(true))
        );
        let json = serde_json::to_string(&job).expect("json");
        assert!(!json.contains(SECRET_VALUE), "secret literal in the Job");
        let secret = secrets.get(&name).await.expect("runner secret");
        let data = secret.data.expect("data");
        assert_eq!(
            data.get("token").map(|b| b.0.as_slice()),
            Some(SECRET_VALUE.as_bytes())
        );
        assert_eq!(secret.metadata.owner_references.expect("owner")[0].kind, "Job");
    }

    // More polls never exceed maxRunners.
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(h.runner_jobs("pool").await.len() <= 3, "maxRunners exceeded");
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_runners_are_removed_after_timeout_and_cleanup_runs() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    h.forge.jobs.store(2, Ordering::SeqCst);
    h.create_group("idle", gitea_spec(0, 4, 2)).await;
    wait_for("2 runner jobs", || async {
        h.runner_jobs("idle").await.len() == 2
    })
    .await;

    h.forge.jobs.store(0, Ordering::SeqCst);
    wait_for("idle runners removed", || async {
        h.runner_jobs("idle").await.is_empty()
    })
    .await;
    assert!(h.forge.removed().len() >= 2, "idle runners deregistered first");

    // Delete the group: the finalizer runs the forge cleanup, then lets go.
    h.groups()
        .delete("idle", &DeleteParams::default())
        .await
        .expect("delete");
    wait_for("group gone", || async {
        h.groups().get_opt("idle").await.ok().flatten().is_none()
    })
    .await;
    assert!(h.forge.shutdowns.load(Ordering::SeqCst) >= 1);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_runner_is_cleaned_up_and_counted() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    h.forge.jobs.store(1, Ordering::SeqCst);
    h.create_group("flaky", gitea_spec(0, 1, 600)).await;
    wait_for("1 runner job", || async {
        h.runner_jobs("flaky").await.len() == 1
    })
    .await;
    let first = h.runner_jobs("flaky").await[0]
        .metadata
        .name
        .clone()
        .expect("name");

    h.fail_job(&first).await;

    wait_for("failed runner replaced", || async {
        let jobs = h.runner_jobs("flaky").await;
        jobs.len() == 1 && jobs[0].metadata.name.as_deref() != Some(first.as_str())
    })
    .await;
    wait_for("failedRunners = 1", || async {
        h.groups()
            .get("flaky")
            .await
            .ok()
            .and_then(|g| g.status)
            .is_some_and(|s| s.failed_runners == 1)
    })
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_errors_become_conditions() {
    let h = Harness::start(true).await;
    // No Secret: SecretNotFound naming it.
    h.create_group("nosecret", gitea_spec(0, 2, 600)).await;
    wait_for("SecretNotFound", || async {
        h.condition("nosecret", "Ready")
            .await
            .is_some_and(|(s, r, m)| s == "False" && r == "SecretNotFound" && m.contains("creds"))
    })
    .await;
    // The fake refuses this at admission (CEL); stored before the rule existed, it reaches the
    // reconciler, whose own validation must catch it.
    h.create_group_before_rules("broken", serde_json::json!({"forge": "gitea", "maxRunners": 2}))
        .await;
    wait_for("InvalidSpec", || async {
        h.condition("broken", "Ready")
            .await
            .is_some_and(|(s, r, m)| s == "False" && r == "InvalidSpec" && m.contains("spec.gitea"))
    })
    .await;
    // A rule of the forge's own block is reported the same way.
    let mut unlabelled = gitea_spec(0, 2, 600);
    unlabelled["gitea"]["labels"] = serde_json::json!(["reserved"]);
    h.create_group("unlabelled", unlabelled).await;
    wait_for("InvalidSpec from the forge's rules", || async {
        h.condition("unlabelled", "Ready").await.is_some_and(|(s, r, m)| {
            s == "False" && r == "InvalidSpec" && m.contains("spec.gitea.labels: must not use reserved")
        })
    })
    .await;
    h.create_secret("creds").await;
    h.forge.fail_demand.store(true, Ordering::SeqCst);
    h.create_group("down", gitea_spec(0, 2, 600)).await;
    wait_for("ForgeConnected=False", || async {
        h.condition("down", "ForgeConnected")
            .await
            .is_some_and(|(s, r, _)| s == "False" && r == "ForgeUnavailable")
    })
    .await;
    assert!(h.runner_jobs("nosecret").await.is_empty() && h.runner_jobs("broken").await.is_empty());
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_forge_is_reported() {
    let h = Harness::start(false).await;
    h.create_secret("creds").await;
    h.create_group("off", gitea_spec(1, 2, 600)).await;
    wait_for("ForgeDisabled", || async {
        h.condition("off", "Ready")
            .await
            .is_some_and(|(s, r, _)| s == "False" && r == "ForgeDisabled")
    })
    .await;
    assert!(h.runner_jobs("off").await.is_empty());
    // Deleting a group of a disabled forge is not blocked.
    h.groups()
        .delete("off", &DeleteParams::default())
        .await
        .expect("delete");
    wait_for("group gone", || async {
        h.groups().get_opt("off").await.ok().flatten().is_none()
    })
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_wakes_a_push_style_group_before_its_resync() {
    let h = Harness::start_with(Some(ForgeKind::Github)).await;
    h.create_secret("creds").await;
    let spec = serde_json::json!({
        "forge": "github",
        "minRunners": 0,
        "maxRunners": 4,
        "github": {"configUrl": "https://github.com/acme", "credentials": "creds"}
    });
    h.create_group("gh", spec).await;
    wait_for("Ready=True", || async {
        h.condition("gh", "Ready")
            .await
            .is_some_and(|(s, _, _)| s == "True")
    })
    .await;
    assert!(h.runner_jobs("gh").await.is_empty());
    // The 60 s safety resync is far beyond the deadline: only the trigger can do this in time.
    h.forge.jobs.store(2, Ordering::SeqCst);
    h.trigger.wake(GroupKey {
        namespace: NS.into(),
        name: "gh".into(),
    });
    wait_for("2 runner jobs after trigger", || async {
        h.runner_jobs("gh").await.len() == 2
    })
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outdated_runner_exit_degrades_the_group_until_a_runner_succeeds() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    h.forge.jobs.store(1, Ordering::SeqCst);
    h.create_group("old", gitea_spec(0, 1, 600)).await;
    wait_for("1 runner job", || async { h.runner_jobs("old").await.len() == 1 }).await;
    let first = h.runner_jobs("old").await[0].metadata.name.clone().expect("name");

    h.failed_runner_pod(&first, OUTDATED_EXIT).await;
    h.fail_job(&first).await;
    wait_for("Degraded=True RunnerOutdated", || async {
        h.condition("old", "Degraded")
            .await
            .is_some_and(|(s, r, m)| s == "True" && r == "RunnerOutdated" && m.contains("spec.image"))
    })
    .await;
    wait_for("a RunnerOutdated Warning Event naming the runner", || async {
        let events: Api<Event> = Api::namespaced(h.client.clone(), NS);
        events.list(&ListParams::default()).await.is_ok_and(|l| {
            l.items.iter().any(|e| {
                e.reason.as_deref() == Some("RunnerOutdated")
                    && e.type_.as_deref() == Some("Warning")
                    && e.note.as_deref().is_some_and(|n| n.contains(&first))
            })
        })
    })
    .await;

    // Later passes (the replacement runner, its count in the status) keep the condition: the
    // image is still old.
    wait_for("replacement runner counted", || async {
        let jobs = h.runner_jobs("old").await;
        let replaced = jobs.len() == 1 && jobs[0].metadata.name.as_deref() != Some(first.as_str());
        let counted = h
            .groups()
            .get("old")
            .await
            .ok()
            .and_then(|g| g.status)
            .is_some_and(|s| s.failed_runners == 1 && s.current_runners == 1);
        replaced && counted
    })
    .await;
    let (status, reason, _) = h.condition("old", "Degraded").await.expect("degraded");
    assert_eq!((status.as_str(), reason.as_str()), ("True", "RunnerOutdated"));

    // A runner that finishes well clears it.
    let second = h.runner_jobs("old").await[0].metadata.name.clone().expect("name");
    let done = serde_json::json!({"status": {"succeeded": 1, "conditions": [
        {"type": "Complete", "status": "True", "reason": "Completed", "message": "x"}
    ]}});
    h.forge.jobs.store(0, Ordering::SeqCst);
    h.jobs()
        .patch_status(&second, &PatchParams::default(), &Patch::Merge(&done))
        .await
        .expect("complete job");
    wait_for("Degraded=False Healthy", || async {
        h.condition("old", "Degraded")
            .await
            .is_some_and(|(s, r, _)| s == "False" && r == "Healthy")
    })
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_runner_exit_codes_are_plain_failures() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    h.forge.jobs.store(1, Ordering::SeqCst);
    h.create_group("crash", gitea_spec(0, 1, 600)).await;
    wait_for("1 runner job", || async {
        h.runner_jobs("crash").await.len() == 1
    })
    .await;
    let first = h.runner_jobs("crash").await[0]
        .metadata
        .name
        .clone()
        .expect("name");
    h.failed_runner_pod(&first, 1).await;
    h.fail_job(&first).await;
    wait_for("failedRunners = 1", || async {
        h.groups()
            .get("crash")
            .await
            .ok()
            .and_then(|g| g.status)
            .is_some_and(|s| s.failed_runners == 1)
    })
    .await;
    let (status, reason, _) = h.condition("crash", "Degraded").await.expect("degraded");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Healthy"));
    h.stop().await;
}

/// A process killed between a runner's Job and its Secret leaves a Job whose pod can never
/// start. The next process retires it on its first pass (Job deleted, runner deregistered), so
/// a complete runner takes the job instead of the leftover holding its place until the startup
/// timeout; no credentials are re-issued for the leftover's pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_left_without_its_secret_by_a_crash_is_replaced() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    // The leftover: labelled as the group's runner, no Secret, pod never started.
    let leftover: Job = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pool-crash", "namespace": NS, "labels": {
            forgerunner_core::runner_job::MANAGED_BY_LABEL: forgerunner_core::runner_job::MANAGED_BY_VALUE,
            GROUP_LABEL: "pool",
        }},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "runner", "image": "fake/runner:1"}
        ]}}},
    }))
    .expect("job");
    h.jobs()
        .create(&PostParams::default(), &leftover)
        .await
        .expect("create leftover job");
    h.forge.jobs.store(1, Ordering::SeqCst);
    h.create_group("pool", gitea_spec(0, 3, 600)).await;

    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), NS);
    wait_for("a complete runner instead of the leftover", || async {
        let names: Vec<String> = h
            .runner_jobs("pool")
            .await
            .into_iter()
            .filter_map(|j| j.metadata.name)
            .collect();
        let mut complete = names.len() == 1 && names[0] != "pool-crash";
        for n in &names {
            complete &= secrets.get_opt(n).await.ok().flatten().is_some();
        }
        complete
    })
    .await;
    assert!(
        secrets.get_opt("pool-crash").await.expect("get").is_none(),
        "no Secret is written for the leftover"
    );
    assert!(
        h.forge.removed().contains(&"pool-crash".to_owned()),
        "the leftover is deregistered at the forge: removed {:?}",
        h.forge.removed()
    );
    h.stop().await;
}

/// Waits `within` for `cond` and says whether it ever held: for things that must not happen.
async fn happens_within<F, Fut>(within: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if cond().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborting_the_controller_stops_every_reconcile() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    h.create_group("pool", gitea_spec(0, 3, 600)).await;
    wait_for("the first pass", || async {
        h.condition("pool", "Ready").await.is_some()
    })
    .await;
    // A deposed leader aborts its controller: nothing of it may go on reconciling.
    h.task.abort();
    wait_for("the controller task to end", || async { h.task.is_finished() }).await;
    h.forge.jobs.store(2, Ordering::SeqCst);
    h.trigger.wake(GroupKey {
        namespace: NS.into(),
        name: "pool".into(),
    });
    h.groups()
        .patch(
            "pool",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"maxRunners": 4}})),
        )
        .await
        .expect("patch");
    let created = happens_within(Duration::from_secs(3), || async {
        !h.runner_jobs("pool").await.is_empty()
    })
    .await;
    assert!(!created, "an aborted controller created runners");
    assert!(h.forge.issued.lock().expect("lock").is_empty());
    h.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_fence_no_runner_is_registered_at_the_forge() {
    let fence = Fence::closed();
    let h = Harness::start_fenced(Some(ForgeKind::Gitea), fence.clone()).await;
    h.create_secret("creds").await;
    h.forge.jobs.store(2, Ordering::SeqCst);
    h.create_group("pool", gitea_spec(0, 3, 600)).await;
    wait_for("a fenced pass", || async {
        h.condition("pool", "Ready")
            .await
            .is_some_and(|(s, _, m)| s == "False" && m.contains("does not hold the leader lease"))
    })
    .await;
    assert!(
        h.forge.issued.lock().expect("lock").is_empty(),
        "credentials issued while fenced"
    );
    assert!(h.runner_jobs("pool").await.is_empty());
    // Holding the fence again lets the same controller work.
    fence.hold_until(tokio::time::Instant::now() + Duration::from_secs(3600));
    wait_for("2 runner jobs", || async {
        h.runner_jobs("pool").await.len() == 2
    })
    .await;
    h.stop().await;
}

/// A runner whose Secret cannot be written never starts: its Job is deleted and the runner the
/// forge registered for it is deregistered too, instead of staying behind as a ghost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_whose_secret_fails_is_deregistered_with_its_job() {
    use forgerunner_testkit::apiserver::{Fault, Verb};
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    h.server
        .inject(Fault::error(500).verb(Verb::Create).resource("secrets").times(1));
    h.forge.jobs.store(1, Ordering::SeqCst);
    h.create_group("pool", gitea_spec(0, 1, 600)).await;

    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), NS);
    // The retry creates a runner that gets its Secret.
    wait_for("a runner with its Secret", || async {
        let jobs = h.runner_jobs("pool").await;
        let mut with_secret = false;
        for j in &jobs {
            let name = j.metadata.name.clone().unwrap_or_default();
            with_secret |= secrets.get_opt(&name).await.ok().flatten().is_some();
        }
        with_secret
    })
    .await;
    let first = h
        .forge
        .issued
        .lock()
        .expect("lock")
        .first()
        .cloned()
        .expect("a runner issued");
    let live: Vec<String> = h
        .runner_jobs("pool")
        .await
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .collect();
    assert!(!live.contains(&first), "the runner without a Secret lost its Job");
    assert!(
        h.forge.removed().contains(&first),
        "the runner without a Secret is deregistered at the forge: removed {:?}",
        h.forge.removed()
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_low_api_budget_holds_creation_back_before_the_forge_refuses() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    // 40 of 5000 requests left: inside the reserve, so nothing is created.
    *h.forge.budget.lock().expect("lock") = Some(RateBudget {
        limit: 5000,
        remaining: 40,
        reset: Some(jiff::Timestamp::now() + jiff::SignedDuration::from_secs(3600)),
    });
    h.forge.jobs.store(6, Ordering::SeqCst);
    h.create_group("thrifty", gitea_spec(0, 6, 600)).await;
    wait_for("an ApiBudgetLow Warning Event", || async {
        let events: Api<Event> = Api::namespaced(h.client.clone(), NS);
        events.list(&ListParams::default()).await.is_ok_and(|l| {
            l.items.iter().any(|e| {
                e.reason.as_deref() == Some("ApiBudgetLow")
                    && e.type_.as_deref() == Some("Warning")
                    && e.note.as_deref().is_some_and(|n| {
                        n.contains("40 of 5000") && n.contains("): creating 0 of 6 runners this pass")
                    })
            })
        })
    })
    .await;
    assert!(
        h.runner_jobs("thrifty").await.is_empty(),
        "created on an exhausted budget"
    );

    // 250 of the 500-request low band left: half the demand per pass, never more.
    *h.forge.budget.lock().expect("lock") = Some(RateBudget {
        limit: 5000,
        remaining: 250,
        reset: None,
    });
    h.trigger.wake(GroupKey {
        namespace: NS.into(),
        name: "thrifty".into(),
    });
    wait_for("runners created at the slower pace", || async {
        !h.runner_jobs("thrifty").await.is_empty()
    })
    .await;
    assert!(h.forge.issued.lock().expect("lock").len() <= 6);

    // A full budget again: the rest follows.
    *h.forge.budget.lock().expect("lock") = None;
    h.trigger.wake(GroupKey {
        namespace: NS.into(),
        name: "thrifty".into(),
    });
    wait_for("all 6 runners", || async {
        h.runner_jobs("thrifty").await.len() == 6
    })
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_job_a_runner_runs_is_recorded_on_its_job() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    h.forge.jobs.store(1, Ordering::SeqCst);
    h.create_group("named", gitea_spec(0, 1, 600)).await;
    wait_for("a runner", || async { h.runner_jobs("named").await.len() == 1 }).await;
    let name = h.runner_jobs("named").await[0]
        .metadata
        .name
        .clone()
        .expect("name");
    h.forge.identities.lock().expect("lock").insert(
        name.clone(),
        JobIdentity {
            run_id: Some("41".into()),
            job_name: Some("lint\n".into()),
            ..JobIdentity::default()
        },
    );
    h.trigger.wake(GroupKey {
        namespace: NS.into(),
        name: "named".into(),
    });
    wait_for("the runner Job annotated with its job", || async {
        h.jobs().get(&name).await.is_ok_and(|j| {
            let a = j.metadata.annotations.unwrap_or_default();
            a.get(JOB_RUN_ID_ANNOTATION).map(String::as_str) == Some("41")
                && a.get(JOB_NAME_ANNOTATION).map(String::as_str) == Some("lint")
        })
    })
    .await;
    h.stop().await;
}
