//! Test fixtures for every crate's tests: [`RunnerGroupBuilder`], a `RunnerGroup` that states only
//! what a test cares about, and [`FakeForge`], a forge whose demand a test sets directly.
//!
//! Compiled for core's own tests and under the `testing` feature, which other crates enable in
//! their `[dev-dependencies]` only: no shipped build has it.
//!
//! ```
//! use forgerunner_core::crd::{ContainerModeType, ForgeKind, RunnerGroup};
//!
//! let group = RunnerGroup::test(ForgeKind::Gitea)
//!     .named("ci", "linux")
//!     .max(3)
//!     .labels(["linux:host"])
//!     .container_mode(ContainerModeType::Dind)
//!     .finalized()
//!     .build();
//! assert_eq!(group.spec.max_runners, 3);
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, PodSpec, PodTemplateSpec, SecretKeySelector,
};
use k8s_openapi::api::rbac::v1::PolicyRule;

use crate::budget::RateBudget;
use crate::crd::{
    ContainerMode, ContainerModeType, ForgeKind, ForgejoSpec, GiteaScope, GiteaSpec, GithubSpec, RunnerGroup,
    RunnerGroupSpec,
};
use crate::embedded::Embedded;
use crate::forge::{
    ClusterRefs, Forge, ForgeError, ForgeProfile, ForgeRunnerState, ForgeSession, ForgeView, GroupContext,
    GroupKey, RemoveOutcome, RerunOutcome, RunnerCredentials, RunnerExit, RunnerPodRequest, RunnerRef,
    SecretValue,
};
use crate::job_identity::JobIdentity;
use crate::validate::{SpecViolation, violation};

/// Namespace of a [`RunnerGroupBuilder`]'s group unless [`RunnerGroupBuilder::named`] says otherwise.
pub const TEST_NAMESPACE: &str = "default";
/// Name of a [`RunnerGroupBuilder`]'s group unless [`RunnerGroupBuilder::named`] says otherwise.
pub const TEST_NAME: &str = "test";
/// `maxRunners` of a [`RunnerGroupBuilder`]'s group unless [`RunnerGroupBuilder::max`] says otherwise.
pub const TEST_MAX_RUNNERS: u32 = 5;

/// A valid `RunnerGroup` for tests, in the style of controller-rs's `Document::test()`: start from
/// a minimal valid group of one forge, then state only what the test is about.
///
/// The forge blocks it starts from (each passes `validate_spec` and the forge's own rules):
///
/// | forge   | URL                           | scope  | credentials     | labels                  |
/// |---------|-------------------------------|--------|-----------------|-------------------------|
/// | GitHub  | `https://github.com/my-org`   | (org)  | `github-pat`    | none                    |
/// | Gitea   | `https://gitea.example.com`   | global | `gitea-token`   | `ubuntu-latest`         |
/// | Forgejo | `https://forgejo.example.com` | global | `forgejo-token` | `ubuntu-latest:host`    |
///
/// Every other spec field is unset (its default applies), `minRunners` is 0 and `maxRunners`
/// [`TEST_MAX_RUNNERS`]; the group is [`TEST_NAMESPACE`]/[`TEST_NAME`] with no uid, generation
/// or finalizer. The setters of a forge block's fields act on the block of the builder's forge
/// and panic when that forge has no such field (a test bug).
#[derive(Clone, Debug)]
#[must_use]
pub struct RunnerGroupBuilder {
    namespace: String,
    name: String,
    uid: Option<String>,
    generation: Option<i64>,
    finalizers: Vec<String>,
    spec: RunnerGroupSpec,
}

/// Runs `$body` on the forge block of `$spec.forge` (bound to `$b`), whichever type it has.
macro_rules! on_block {
    ($spec:expr, $what:literal, |$b:ident| $body:expr) => {{
        let spec = &mut $spec;
        match spec.forge {
            ForgeKind::Github => {
                let $b = spec
                    .github
                    .as_mut()
                    .expect(concat!($what, ": the spec has no github block"));
                $body
            }
            ForgeKind::Gitea => {
                let $b = spec
                    .gitea
                    .as_mut()
                    .expect(concat!($what, ": the spec has no gitea block"));
                $body
            }
            ForgeKind::Forgejo => {
                let $b = spec
                    .forgejo
                    .as_mut()
                    .expect(concat!($what, ": the spec has no forgejo block"));
                $body
            }
        }
    }};
}

/// Runs `$body` on the Gitea or Forgejo block of `$spec.forge` (bound to `$b`); panics for GitHub.
macro_rules! on_gitea_like_block {
    ($spec:expr, $what:literal, |$b:ident| $body:expr) => {{
        let spec = &mut $spec;
        match spec.forge {
            ForgeKind::Github => panic!(concat!($what, " is not a setting of a GitHub group")),
            ForgeKind::Gitea => {
                let $b = spec
                    .gitea
                    .as_mut()
                    .expect(concat!($what, ": the spec has no gitea block"));
                $body
            }
            ForgeKind::Forgejo => {
                let $b = spec
                    .forgejo
                    .as_mut()
                    .expect(concat!($what, ": the spec has no forgejo block"));
                $body
            }
        }
    }};
}

impl RunnerGroupBuilder {
    /// A minimal valid group of `forge` (see the type's documentation for what it holds).
    pub fn new(forge: ForgeKind) -> Self {
        let (github, gitea, forgejo) = match forge {
            ForgeKind::Github => (Some(test_github_block()), None, None),
            ForgeKind::Gitea => (None, Some(test_gitea_block()), None),
            ForgeKind::Forgejo => (None, None, Some(test_forgejo_block())),
        };
        RunnerGroupBuilder {
            namespace: TEST_NAMESPACE.to_owned(),
            name: TEST_NAME.to_owned(),
            uid: None,
            generation: None,
            finalizers: Vec::new(),
            spec: RunnerGroupSpec {
                forge,
                github,
                gitea,
                forgejo,
                min_runners: 0,
                max_runners: TEST_MAX_RUNNERS,
                image: None,
                template: None,
                ttl_seconds_after_finished: None,
                active_deadline_seconds: None,
                idle_timeout_seconds: None,
                startup_timeout_seconds: None,
                scale_down_delay_seconds: None,
                stalled_job_seconds: None,
                schedules: Vec::new(),
                rerun: None,
                container_mode: None,
                cache: None,
                docker_cache: None,
                classes: Vec::new(),
            },
        }
    }

    // --- metadata ---

    /// The group's namespace and name.
    pub fn named(mut self, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self.name = name.into();
        self
    }

    /// `metadata.uid` (as the API server sets it on create; runner Jobs need it for their owner).
    pub fn uid(mut self, uid: impl Into<String>) -> Self {
        self.uid = Some(uid.into());
        self
    }

    /// `metadata.generation` (the spec's version, as the API server counts it).
    pub fn generation(mut self, generation: i64) -> Self {
        self.generation = Some(generation);
        self
    }

    /// Carries the reconciler's finalizer ([`crate::reconcile::FINALIZER`]), as a group the
    /// operator has seen does.
    pub fn finalized(mut self) -> Self {
        let finalizer = crate::reconcile::FINALIZER.to_owned();
        if !self.finalizers.contains(&finalizer) {
            self.finalizers.push(finalizer);
        }
        self
    }

    // --- spec ---

    /// `spec.minRunners`.
    pub fn min(mut self, min_runners: u32) -> Self {
        self.spec.min_runners = min_runners;
        self
    }

    /// `spec.maxRunners`.
    pub fn max(mut self, max_runners: u32) -> Self {
        self.spec.max_runners = max_runners;
        self
    }

    /// `spec.image`.
    pub fn image(mut self, image: impl Into<String>) -> Self {
        self.spec.image = Some(image.into());
        self
    }

    /// `spec.template`, embedded from a typed pod template (as a user would write it).
    pub fn template(mut self, template: PodTemplateSpec) -> Self {
        self.spec.template = Some(Embedded::new(&template));
        self
    }

    /// `spec.template` as stored JSON, decodable or not.
    pub fn template_json(mut self, template: serde_json::Value) -> Self {
        self.spec.template = Some(Embedded::from_raw(template));
        self
    }

    /// `spec.ttlSecondsAfterFinished`; `None` unsets it.
    pub fn ttl_after_finished(mut self, seconds: impl Into<Option<i32>>) -> Self {
        self.spec.ttl_seconds_after_finished = seconds.into();
        self
    }

    /// `spec.activeDeadlineSeconds`; `None` unsets it.
    pub fn active_deadline(mut self, seconds: impl Into<Option<i64>>) -> Self {
        self.spec.active_deadline_seconds = seconds.into();
        self
    }

    /// `spec.idleTimeoutSeconds`; `None` unsets it (the default applies).
    pub fn idle_timeout(mut self, seconds: impl Into<Option<u32>>) -> Self {
        self.spec.idle_timeout_seconds = seconds.into();
        self
    }

    /// `spec.startupTimeoutSeconds`; `None` unsets it (the default applies).
    pub fn startup_timeout(mut self, seconds: impl Into<Option<u32>>) -> Self {
        self.spec.startup_timeout_seconds = seconds.into();
        self
    }

    /// `spec.scaleDownDelaySeconds`; `None` unsets it (the default applies).
    pub fn scale_down_delay(mut self, seconds: impl Into<Option<u32>>) -> Self {
        self.spec.scale_down_delay_seconds = seconds.into();
        self
    }

    /// `spec.cache` of `size` on the default storage class.
    pub fn cache(mut self, size: impl Into<String>) -> Self {
        self.spec.cache = Some(crate::crd::CacheSpec {
            size: size.into(),
            storage_class_name: None,
        });
        self
    }

    /// `spec.containerMode` of type `mode`, with no work volume claim.
    pub fn container_mode(mut self, mode: ContainerModeType) -> Self {
        self.spec.container_mode = Some(ContainerMode {
            type_: mode,
            kubernetes_mode_work_volume_claim: None,
        });
        self
    }

    // --- whole forge blocks ---

    /// Sets `spec.github` to `block`; `spec.forge` and the other blocks stay as they are.
    pub fn github(mut self, block: GithubSpec) -> Self {
        self.spec.github = Some(block);
        self
    }

    /// Sets `spec.gitea` to `block`; `spec.forge` and the other blocks stay as they are.
    pub fn gitea(mut self, block: GiteaSpec) -> Self {
        self.spec.gitea = Some(block);
        self
    }

    /// Sets `spec.forgejo` to `block`; `spec.forge` and the other blocks stay as they are.
    pub fn forgejo(mut self, block: ForgejoSpec) -> Self {
        self.spec.forgejo = Some(block);
        self
    }

    // --- fields of the forge's block ---

    /// The forge's URL: `github.configUrl`, `gitea.url` or `forgejo.url`.
    pub fn url(mut self, url: impl Into<String>) -> Self {
        let url = url.into();
        match self.spec.forge {
            ForgeKind::Github => self.github_block("url").config_url = url,
            ForgeKind::Gitea | ForgeKind::Forgejo => on_gitea_like_block!(self.spec, "url", |b| b.url = url),
        }
        self
    }

    /// The name of the credentials Secret of the forge's block.
    pub fn credentials(mut self, secret: impl Into<String>) -> Self {
        let secret = secret.into();
        on_block!(self.spec, "credentials", |b| b.credentials = secret);
        self
    }

    /// The labels of the forge's block (replacing the default ones).
    pub fn labels<I, L>(mut self, labels: I) -> Self
    where
        I: IntoIterator<Item = L>,
        L: Into<String>,
    {
        let labels: Vec<String> = labels.into_iter().map(Into::into).collect();
        on_block!(self.spec, "labels", |b| b.labels = labels);
        self
    }

    /// The forge block's `caBundleConfigMap`.
    pub fn ca_bundle(mut self, config_map: impl Into<String>) -> Self {
        let config_map = config_map.into();
        on_block!(self.spec, "ca_bundle", |b| b.ca_bundle_config_map =
            Some(config_map));
        self
    }

    /// The forge block's `proxyUrl`.
    pub fn proxy(mut self, url: impl Into<String>) -> Self {
        let url = url.into();
        on_block!(self.spec, "proxy", |b| b.proxy_url = Some(url));
        self
    }

    /// `github.scaleSetName`.
    pub fn scale_set_name(mut self, name: impl Into<String>) -> Self {
        self.github_block("scale_set_name").scale_set_name = Some(name.into());
        self
    }

    /// `github.runnerGroup`.
    pub fn runner_group(mut self, group: impl Into<String>) -> Self {
        self.github_block("runner_group").runner_group = Some(group.into());
        self
    }

    /// Gitea or Forgejo: `pollIntervalSeconds`; `None` unsets it (the default applies).
    pub fn poll_interval(mut self, seconds: impl Into<Option<u32>>) -> Self {
        let seconds = seconds.into();
        on_gitea_like_block!(self.spec, "poll_interval", |b| b.poll_interval_seconds = seconds);
        self
    }

    /// Gitea or Forgejo: `scope: org` of organization `org`.
    pub fn org(mut self, org: impl Into<String>) -> Self {
        let org = org.into();
        on_gitea_like_block!(self.spec, "org", |b| {
            b.scope = GiteaScope::Org;
            b.org = Some(org);
        });
        self
    }

    /// Gitea or Forgejo: `scope: user` of user `user`.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        let user = user.into();
        on_gitea_like_block!(self.spec, "user", |b| {
            b.scope = GiteaScope::User;
            b.user = Some(user);
        });
        self
    }

    /// Gitea or Forgejo: `scope: repo` of repository `repo` (`owner/name`).
    pub fn repo(mut self, repo: impl Into<String>) -> Self {
        let repo = repo.into();
        on_gitea_like_block!(self.spec, "repo", |b| {
            b.scope = GiteaScope::Repo;
            b.repo = Some(repo);
        });
        self
    }

    /// Gitea: `webhookSecret`, the Secret that verifies `workflow_job` webhooks.
    pub fn webhook_secret(mut self, secret: impl Into<String>) -> Self {
        let secret = secret.into();
        match self.spec.gitea.as_mut() {
            Some(g) if self.spec.forge == ForgeKind::Gitea => g.webhook_secret = Some(secret),
            _ => panic!("webhook_secret is a setting of a Gitea group only"),
        }
        self
    }

    fn github_block(&mut self, what: &str) -> &mut GithubSpec {
        match self.spec.github.as_mut() {
            Some(g) if self.spec.forge == ForgeKind::Github => g,
            _ => panic!("{what} is a setting of a GitHub group only"),
        }
    }

    // --- results ---

    /// The spec alone.
    pub fn spec(self) -> RunnerGroupSpec {
        self.spec
    }

    /// The whole group.
    pub fn build(self) -> RunnerGroup {
        let mut group = RunnerGroup::new(&self.name, self.spec);
        group.metadata.namespace = Some(self.namespace);
        group.metadata.uid = self.uid;
        group.metadata.generation = self.generation;
        if !self.finalizers.is_empty() {
            group.metadata.finalizers = Some(self.finalizers);
        }
        group
    }
}

impl RunnerGroup {
    /// A [`RunnerGroupBuilder`] of `forge`: `RunnerGroup::test(ForgeKind::Gitea).max(3).build()`.
    pub fn test(forge: ForgeKind) -> RunnerGroupBuilder {
        RunnerGroupBuilder::new(forge)
    }
}

/// The GitHub block a [`RunnerGroupBuilder`] starts from.
pub fn test_github_block() -> GithubSpec {
    GithubSpec {
        config_url: "https://github.com/my-org".into(),
        credentials: "github-pat".into(),
        runner_group: None,
        scale_set_name: None,
        labels: Vec::new(),
        ca_bundle_config_map: None,
        proxy_url: None,
    }
}

/// The Gitea block a [`RunnerGroupBuilder`] starts from.
pub fn test_gitea_block() -> GiteaSpec {
    GiteaSpec {
        url: "https://gitea.example.com".into(),
        scope: GiteaScope::Global,
        org: None,
        user: None,
        repo: None,
        credentials: "gitea-token".into(),
        labels: vec!["ubuntu-latest".into()],
        poll_interval_seconds: None,
        webhook_secret: None,
        ca_bundle_config_map: None,
        proxy_url: None,
    }
}

/// The Forgejo block a [`RunnerGroupBuilder`] starts from (a `:host` label: a label without a
/// scheme is docker, which needs `containerMode: dind`).
pub fn test_forgejo_block() -> ForgejoSpec {
    ForgejoSpec {
        url: "https://forgejo.example.com".into(),
        scope: GiteaScope::Global,
        org: None,
        user: None,
        repo: None,
        credentials: "forgejo-token".into(),
        labels: vec!["ubuntu-latest:host".into()],
        poll_interval_seconds: None,
        ca_bundle_config_map: None,
        proxy_url: None,
    }
}

/// The secret value [`FakeForge`] issues to every runner (tests check it never leaks).
pub const SECRET_VALUE: &str = "runner-secret-value-do-not-leak";
/// The exit code [`FakeForge`] calls "outdated runner" (as GitHub's runner does).
pub const OUTDATED_EXIT: i32 = 7;

/// A forge whose waiting jobs tests set directly, and that records what the reconciler asks of it.
pub struct FakeForge {
    /// The forge it plays.
    pub kind: ForgeKind,
    /// Jobs waiting for a runner, as the next observation reports them.
    pub jobs: AtomicU32,
    /// When set, observing fails as an unavailable forge does.
    pub fail_demand: AtomicBool,
    /// Names of the runners credentials were issued to, in order.
    pub issued: Mutex<Vec<String>>,
    /// Names of the runners removed from the forge, in order.
    pub removed: Mutex<Vec<String>>,
    /// How the reconciler last told of each runner, in a snapshot or a removal, by name.
    pub told: Mutex<BTreeMap<String, RunnerRef>>,
    /// How many times a group was shut down.
    pub shutdowns: AtomicU32,
    /// How many times a group's session was closed.
    pub closes: AtomicU32,
    /// How many times a spec was described.
    pub describes: AtomicU32,
    /// How many snapshots sessions took.
    pub snapshots: AtomicU32,
    /// The API budget the forge reports with each view.
    pub budget: Mutex<Option<RateBudget>>,
    /// The job each runner runs, as the forge reports it.
    pub identities: Mutex<BTreeMap<String, JobIdentity>>,
    /// What the runner pods may do (as GitHub's `containerMode: kubernetes` asks); none by default.
    pub role_rules: Mutex<Vec<PolicyRule>>,
    /// Jobs asked to be re-run, by runner, in order.
    pub reruns: Mutex<Vec<(String, JobIdentity)>>,
    /// What a re-run request answers; `Unsupported` (the trait's default) until set.
    pub rerun_answer: Mutex<RerunOutcome>,
    /// The runner releases the forge tells with each view.
    pub versions: Mutex<crate::runner_version::RunnerVersions>,
    /// Jobs listed waiting with each view, oldest first (with bindings: a forge that binds each
    /// runner to one job); empty by default.
    pub waiting: Mutex<Vec<crate::forge::WaitingJob>>,
    /// The binding of the job each registration was bound to, by runner name, in order.
    pub bound: Mutex<Vec<(String, Option<String>)>>,
    /// The runner rows each view lists (`ForgeView::listed_rows`); none by default.
    pub listed_rows: Mutex<Option<crate::forge::ListedRows>>,
    /// The fake itself, for the sessions it opens.
    this: std::sync::Weak<FakeForge>,
}

impl FakeForge {
    /// A fake forge of `kind` with no waiting jobs.
    pub fn new(kind: ForgeKind) -> Arc<FakeForge> {
        Arc::new_cyclic(|this| FakeForge {
            this: this.clone(),
            kind,
            jobs: AtomicU32::new(0),
            fail_demand: AtomicBool::new(false),
            issued: Mutex::new(Vec::new()),
            removed: Mutex::new(Vec::new()),
            told: Mutex::default(),
            shutdowns: AtomicU32::new(0),
            closes: AtomicU32::new(0),
            describes: AtomicU32::new(0),
            snapshots: AtomicU32::new(0),
            budget: Mutex::new(None),
            identities: Mutex::new(BTreeMap::new()),
            role_rules: Mutex::new(Vec::new()),
            reruns: Mutex::new(Vec::new()),
            rerun_answer: Mutex::new(RerunOutcome::Unsupported),
            versions: Mutex::default(),
            waiting: Mutex::default(),
            bound: Mutex::default(),
            listed_rows: Mutex::default(),
        })
    }

    /// Names of the runners removed from the forge so far, in order.
    pub fn removed(&self) -> Vec<String> {
        self.removed.lock().expect("lock").clone()
    }

    /// How the reconciler last told of the runner `name`, if it did.
    pub fn told(&self, name: &str) -> Option<RunnerRef> {
        self.told.lock().expect("lock").get(name).cloned()
    }

    fn note_told(&self, runners: &[RunnerRef]) {
        let mut told = self.told.lock().expect("lock");
        told.extend(runners.iter().map(|r| (r.name.clone(), r.clone())));
    }
}

#[async_trait]
impl Forge for FakeForge {
    fn kind(&self) -> ForgeKind {
        self.kind
    }

    fn describe(&self, spec: &RunnerGroupSpec) -> Result<ForgeProfile, Vec<SpecViolation>> {
        self.describes.fetch_add(1, Ordering::SeqCst);
        // One rule of the forge's own, to show its violations reach the condition.
        if let Some(g) = &spec.gitea
            && g.labels.iter().any(|l| l == "reserved")
        {
            return Err(vec![violation("spec.gitea.labels", "must not use reserved")]);
        }
        Ok(ForgeProfile {
            cluster_refs: Self::cluster_refs(spec),
            outbound_urls: Vec::new(),
            resync_interval: Self::resync_interval(spec),
            cleanup_hint: crate::forge::DEFAULT_CLEANUP_HINT.to_owned(),
            runner_role_rules: self.role_rules.lock().expect("lock").clone(),
            runner_exits: BTreeMap::from([(OUTDATED_EXIT, RunnerExit::Outdated)]),
        })
    }

    fn open(&self, _key: &GroupKey) -> Box<dyn ForgeSession> {
        Box::new(FakeSession(
            self.this.upgrade().expect("the fake lives in an Arc"),
        ))
    }
}

/// A session of [`FakeForge`]: every group shares the fake's books.
struct FakeSession(Arc<FakeForge>);

impl FakeForge {
    fn cluster_refs(spec: &RunnerGroupSpec) -> ClusterRefs {
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

    fn resync_interval(spec: &RunnerGroupSpec) -> Duration {
        let seconds = spec.gitea.as_ref().map_or(60, |g| g.poll_interval_seconds());
        Duration::from_secs(u64::from(seconds))
    }
}

#[async_trait]
impl ForgeSession for FakeSession {
    fn runner_pod(&self, request: &RunnerPodRequest<'_>) -> PodSpec {
        let secret_name = request.secret_name;
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

    async fn snapshot(&self, _group: &GroupContext, runners: &[RunnerRef]) -> Result<ForgeView, ForgeError> {
        let fake = &self.0;
        fake.snapshots.fetch_add(1, Ordering::SeqCst);
        fake.note_told(runners);
        if fake.fail_demand.load(Ordering::SeqCst) {
            return Err(ForgeError::Unavailable("fake outage".into()));
        }
        Ok(ForgeView {
            waiting_jobs: fake.jobs.load(Ordering::SeqCst),
            runners: runners
                .iter()
                .map(|r| (r.name.clone(), ForgeRunnerState::Idle))
                .collect(),
            budget: *fake.budget.lock().expect("lock"),
            job_identities: fake.identities.lock().expect("lock").clone(),
            versions: fake.versions.lock().expect("lock").clone(),
            waiting: fake.waiting.lock().expect("lock").clone(),
            listed_rows: fake.listed_rows.lock().expect("lock").clone(),
            ..ForgeView::default()
        })
    }

    async fn register(
        &self,
        _group: &GroupContext,
        request: &crate::forge::RunnerRequest<'_>,
    ) -> Result<RunnerCredentials, ForgeError> {
        let name = request.name;
        self.0.issued.lock().expect("lock").push(name.to_owned());
        let binding = request.job.and_then(|j| j.binding.clone());
        self.0
            .bound
            .lock()
            .expect("lock")
            .push((name.to_owned(), binding));
        Ok(RunnerCredentials {
            secret_data: BTreeMap::from([("token".to_owned(), SecretValue::new(SECRET_VALUE))]),
            env: BTreeMap::from([("RUNNER_NAME".to_owned(), name.to_owned())]),
            annotations: BTreeMap::new(),
        })
    }

    async fn rerun_job(
        &self,
        _group: &GroupContext,
        runner: &str,
        job: &JobIdentity,
    ) -> Result<RerunOutcome, ForgeError> {
        self.0
            .reruns
            .lock()
            .expect("lock")
            .push((runner.to_owned(), job.clone()));
        Ok(*self.0.rerun_answer.lock().expect("lock"))
    }

    async fn deregister(
        &self,
        _group: &GroupContext,
        runner: &RunnerRef,
    ) -> Result<RemoveOutcome, ForgeError> {
        self.0.note_told(std::slice::from_ref(runner));
        self.0.removed.lock().expect("lock").push(runner.name.clone());
        Ok(RemoveOutcome::Removed)
    }

    async fn delete_group(&self, _group: &GroupContext) -> Result<(), ForgeError> {
        self.0.shutdowns.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    async fn close(&self) {
        self.0.closes.fetch_add(1, Ordering::SeqCst);
    }
}

/// The clock of a planned pass in tests that need a fixed one.
pub const TEST_NOW: jiff::Timestamp = jiff::Timestamp::constant(1_000_000, 0);

/// A failure history of `consecutive` failures; `held` puts the last one at [`TEST_NOW`], after
/// enough failures (at least two) for creation to back off.
pub fn failure_history(consecutive: u32, held: bool) -> crate::plan::FailureHistory {
    crate::plan::FailureHistory {
        consecutive: if held { consecutive.max(2) } else { consecutive },
        last_at: held.then_some(TEST_NOW),
    }
}

/// The runner pod the reconciler would create for `g` with `forge`'s default pod: the forge's
/// pod, the user's template merged onto it and the reserved fields set, as a real pass does.
pub fn built_pod(
    forge: &dyn crate::forge::Forge,
    g: &RunnerGroup,
    creds: &crate::forge::RunnerCredentials,
) -> k8s_openapi::api::core::v1::PodSpec {
    let session = forge.open(&GroupKey {
        namespace: g.metadata.namespace.clone().unwrap_or_default(),
        name: g.metadata.name.clone().unwrap_or_default(),
    });
    let default_pod = session.runner_pod(&crate::forge::RunnerPodRequest {
        group: g,
        runner_name: "g-abcde",
        secret_name: "g-abcde",
        credentials: creds,
        class: None,
    });
    let job = crate::runner_job::build_runner_job(crate::runner_job::RunnerJobInput {
        group: g,
        runner_name: "g-abcde",
        default_pod,
        credentials: creds,
    })
    .expect("job");
    job.spec.and_then(|s| s.template.spec).expect("pod spec")
}

/// The container named `runner` of `pod`.
pub fn runner_container(pod: &k8s_openapi::api::core::v1::PodSpec) -> &k8s_openapi::api::core::v1::Container {
    pod.containers
        .iter()
        .find(|c| c.name == "runner")
        .expect("runner container")
}

/// The plain value of the runner container's environment variable `name`.
pub fn runner_env(pod: &k8s_openapi::api::core::v1::PodSpec, name: &str) -> Option<String> {
    runner_container(pod)
        .env
        .iter()
        .flatten()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

/// A runner of the group as the cluster shows it, with its Job's `annotations`; one without
/// annotations stands for a runner created in flight, which the store does not show yet.
pub fn runner_ref(
    name: &str,
    phase: crate::plan::RunnerPhase,
    annotations: BTreeMap<String, String>,
) -> RunnerRef {
    RunnerRef {
        name: name.into(),
        stored: !annotations.is_empty(),
        registered_at: None,
        connected_since: None,
        annotations,
        phase,
    }
}

/// Waiting jobs, oldest first, one per binding of `bindings` (a forge that binds each runner to
/// one job), with ids `0`, `1`, … and no labels.
pub fn bound_jobs(bindings: &[&str]) -> Vec<crate::forge::WaitingJob> {
    bindings
        .iter()
        .enumerate()
        .map(|(i, b)| crate::forge::WaitingJob {
            id: i.to_string(),
            queued_at: None,
            labels: Vec::new(),
            binding: Some((*b).to_owned()),
        })
        .collect()
}

/// A runner Job, as the store keeps it, named `name` with `annotations` and nothing else.
pub fn annotated_job(name: &str, annotations: &[(&str, &str)]) -> crate::runner_job::ObservedJob {
    crate::runner_job::ObservedJob {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.to_owned()),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The view the reconciler plans on: a forge's `view` of `refs`, settled by the group's `books`
/// (`Ledger::settle_view`): netted for runners that took a job after the cached jobs listing.
pub fn netted_view(
    view: crate::forge::ForgeView,
    refs: &[crate::forge::RunnerRef],
    books: &mut crate::reconcile::ledger::Ledger,
) -> crate::forge::ForgeView {
    settled(view, refs, books).0
}

/// The ghosts a pass plans on from a forge's `view` of `refs`: the runner rows the group's
/// `books` (`Ledger::settle_view`) have seen offline for the ghost grace.
pub fn settled_ghosts(
    view: crate::forge::ForgeView,
    refs: &[crate::forge::RunnerRef],
    books: &mut crate::reconcile::ledger::Ledger,
) -> Vec<String> {
    settled(view, refs, books).1
}

/// `view` settled by `books` as a pass settles it, and the ghosts.
fn settled(
    mut view: crate::forge::ForgeView,
    refs: &[crate::forge::RunnerRef],
    books: &mut crate::reconcile::ledger::Ledger,
) -> (crate::forge::ForgeView, Vec<String>) {
    let runners: Vec<crate::plan::ObservedRunner> = refs
        .iter()
        .map(|r| crate::plan::ObservedRunner {
            phase: r.phase,
            forge_state: view.runners.get(&r.name).copied().unwrap_or_default(),
            ..crate::plan::ObservedRunner::fresh(r.name.clone())
        })
        .collect();
    let ghosts = books.settle_view(&mut view, &runners, refs, std::time::Instant::now());
    (view, ghosts)
}

/// Registers the new runner `name` of `class` through `session` as a pass does: bound to the
/// job the group's `books` reserve for it in `view` (a view [`netted_view`] returned), with that
/// job's binding among the annotations the runner's Job gets. A failed registration frees the
/// job again.
pub async fn register_as_a_pass_does(
    session: &dyn ForgeSession,
    group: &GroupContext,
    books: &mut crate::reconcile::ledger::Ledger,
    view: &crate::forge::ForgeView,
    name: &str,
    class: Option<&crate::crd::RunnerClass>,
) -> Result<RunnerCredentials, ForgeError> {
    let job = books.reservations.reserve(
        &group.group.spec,
        view,
        class.map(|c| c.name.as_str()),
        name,
        std::time::Instant::now(),
    );
    let request = crate::forge::RunnerRequest {
        name,
        class,
        job: job.as_ref(),
    };
    match session.register(group, &request).await {
        Ok(mut creds) => {
            crate::runner_job::record_binding(&mut creds.annotations, job.as_ref());
            Ok(creds)
        }
        Err(e) => {
            if let Some(b) = job.as_ref().and_then(|j| j.binding.as_deref()) {
                books.reservations.release(b);
            }
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::validate_spec;

    #[test]
    fn every_forge_starts_valid_with_only_its_block() {
        for forge in ForgeKind::ALL {
            let spec = RunnerGroupBuilder::new(forge).spec();
            assert_eq!(spec.forge_blocks_set(), [forge]);
            assert_eq!(validate_spec(&spec), [], "{forge}");
        }
    }

    #[test]
    fn build_carries_metadata_and_setters_reach_the_forge_block() {
        let g = RunnerGroup::test(ForgeKind::Forgejo)
            .named("ci", "linux")
            .uid("uid-1")
            .generation(3)
            .finalized()
            .finalized()
            .repo("alice/app")
            .labels(["a:host"])
            .poll_interval(7)
            .idle_timeout(30)
            .build();
        assert_eq!(g.metadata.namespace.as_deref(), Some("ci"));
        assert_eq!(g.metadata.name.as_deref(), Some("linux"));
        assert_eq!(g.metadata.uid.as_deref(), Some("uid-1"));
        assert_eq!(g.metadata.generation, Some(3));
        assert_eq!(
            g.metadata.finalizers,
            Some(vec![crate::reconcile::FINALIZER.to_owned()])
        );
        let fj = g.spec.forgejo.as_ref().expect("forgejo block");
        assert_eq!(
            (fj.scope, fj.repo.as_deref()),
            (GiteaScope::Repo, Some("alice/app"))
        );
        assert_eq!(fj.labels, ["a:host"]);
        assert_eq!(fj.poll_interval_seconds, Some(7));
        assert_eq!(g.spec.idle_timeout_seconds, Some(30));
        assert_eq!(validate_spec(&g.spec), []);
    }

    #[test]
    #[should_panic(expected = "webhook_secret is a setting of a Gitea group only")]
    fn a_setting_of_another_forge_is_a_test_bug() {
        let _ = RunnerGroup::test(ForgeKind::Github).webhook_secret("hook");
    }
}
