//! `GiteaForge`: the `Forge` implementation for Gitea 1.25+.
//!
//! Poll-style: `demand` reads the queued jobs at the group's scope and counts those whose
//! `runs-on` its labels satisfy. Listings are shared: one jobs listing and one runner listing
//! per (instance URL, scope, token) per poll interval, however many groups use them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use forgerunner_core::crd::{ForgeKind, GiteaSpec, RunnerGroup};
use forgerunner_core::forge::{
    Demand, Forge, ForgeError, ForgeFacts, ForgeRunnerState, GroupContext, GroupKey, ReconcileTrigger,
    RemoveOutcome, RunnerCredentials, RunnerRef, SecretValue,
};
use forgerunner_core::metrics::Metrics;
use k8s_openapi::api::core::v1::PodSpec;
use sha2::{Digest, Sha256};

use crate::cache::Cell;
use crate::client::{ClientOptions, GiteaClient};
use crate::error::GiteaError;
use crate::forge_webhook::AnnouncedState;
use crate::labels::LabelSet;
use crate::pod::{self, REGISTRATION_TOKEN_KEY};
use crate::runner_names::{is_group_runner_name, strongest};
use crate::scope::Scope;
use crate::types::{JobStatus, Runner, WorkflowJob};
use crate::version::GiteaVersion;

/// Tunables of the backend; the defaults suit production.
#[derive(Clone, Debug)]
pub struct GiteaOptions {
    /// HTTP client settings.
    pub client: ClientOptions,
    /// How long a checked server version (and the token's user) is trusted.
    pub version_ttl: Duration,
    /// How long a fetched registration token is reused (POST does not rotate it).
    pub token_ttl: Duration,
}

impl Default for GiteaOptions {
    fn default() -> Self {
        GiteaOptions {
            client: ClientOptions::default(),
            version_ttl: Duration::from_secs(600),
            token_ttl: Duration::from_secs(300),
        }
    }
}

/// One instance + token (+ CA bundle): a client and what was checked about the server.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct InstanceKey {
    url: String,
    /// SHA-256 of the token and CA bundle, so the key holds no secret.
    credentials: [u8; 32],
}

pub(crate) struct Instance {
    client: GiteaClient,
    version: Cell<(GiteaVersion, String)>,
    login: Cell<String>,
}

/// One listing scope on one instance.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct ListingKey {
    instance: InstanceKey,
    scope: Scope,
}

/// What the webhook path needs to know about a group seen by `demand`.
#[derive(Clone)]
pub(crate) struct GroupInfo {
    pub(crate) scope: Scope,
    pub(crate) labels: LabelSet,
    pub(crate) webhook_secret: Option<String>,
    pub(crate) listing: ListingKey,
}

/// A group on which the webhook path may act (see `GiteaForge::webhook_targets`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookTarget {
    /// The group.
    pub key: GroupKey,
    /// Name of the Secret (key `secret`) that verifies its deliveries, if configured.
    pub webhook_secret: Option<String>,
}

/// A group's settings, checked and tied to its instance.
struct Resolved<'a> {
    spec: &'a GiteaSpec,
    scope: Scope,
    labels: LabelSet,
    instance: Arc<Instance>,
    listing: ListingKey,
    interval: Duration,
}

/// The Gitea backend. Cheap to share (`Arc`); all state is behind locks.
pub struct GiteaForge {
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) trigger: ReconcileTrigger,
    pub(crate) opts: GiteaOptions,
    pub(crate) instances: Mutex<HashMap<InstanceKey, Arc<Instance>>>,
    pub(crate) jobs: Mutex<HashMap<ListingKey, Arc<Cell<Vec<WorkflowJob>>>>>,
    pub(crate) runners: Mutex<HashMap<ListingKey, Arc<Cell<Vec<Runner>>>>>,
    pub(crate) tokens: Mutex<HashMap<ListingKey, Arc<Cell<SecretValue>>>>,
    pub(crate) groups: Mutex<HashMap<GroupKey, GroupInfo>>,
    /// What webhook deliveries told since each scope's cached jobs listing.
    pub(crate) announced: Mutex<AnnouncedState>,
}

pub(crate) fn cell_for<K: Clone + Eq + Hash, T>(
    map: &Mutex<HashMap<K, Arc<Cell<T>>>>,
    key: &K,
) -> Arc<Cell<T>> {
    match map.lock() {
        Ok(mut m) => m.entry(key.clone()).or_default().clone(),
        // A poisoned map only loses sharing, never correctness.
        Err(_) => Arc::new(Cell::default()),
    }
}

impl GiteaForge {
    /// A backend with default options. `trigger` wakes groups when a webhook arrives.
    pub fn new(metrics: Arc<Metrics>, trigger: ReconcileTrigger) -> GiteaForge {
        GiteaForge::with_options(metrics, trigger, GiteaOptions::default())
    }

    /// A backend with explicit options (tests shorten timeouts).
    pub fn with_options(metrics: Arc<Metrics>, trigger: ReconcileTrigger, opts: GiteaOptions) -> GiteaForge {
        GiteaForge {
            metrics,
            trigger,
            opts,
            instances: Mutex::default(),
            jobs: Mutex::default(),
            runners: Mutex::default(),
            tokens: Mutex::default(),
            groups: Mutex::default(),
            announced: Mutex::default(),
        }
    }

    fn resolve<'a>(&self, ctx: &'a GroupContext) -> Result<Resolved<'a>, GiteaError> {
        let spec = ctx
            .group
            .spec
            .gitea
            .as_ref()
            .ok_or_else(|| GiteaError::Spec("spec.gitea is required when forge is gitea".into()))?;
        let scope = Scope::from_spec(spec)?;
        let labels = LabelSet::parse(&spec.labels)?;
        let token = ctx
            .credentials
            .get("token")
            .ok_or_else(|| GiteaError::MissingToken(ctx.credentials.secret_name.clone()))?;
        let mut h = Sha256::new();
        h.update(token.expose().as_bytes());
        h.update([0]);
        h.update(ctx.ca_bundle.as_deref().unwrap_or_default().as_bytes());
        let key = InstanceKey {
            url: spec.url.trim().trim_end_matches('/').to_string(),
            credentials: h.finalize().into(),
        };
        let instance = self.instance(&key, token, ctx.ca_bundle.clone())?;
        Ok(Resolved {
            spec,
            listing: ListingKey {
                instance: key,
                scope: scope.clone(),
            },
            scope,
            labels,
            instance,
            interval: Duration::from_secs(u64::from(spec.poll_interval_seconds())),
        })
    }

    fn instance(
        &self,
        key: &InstanceKey,
        token: &SecretValue,
        ca: Option<String>,
    ) -> Result<Arc<Instance>, GiteaError> {
        let mut map = self
            .instances
            .lock()
            .map_err(|_| GiteaError::Spec("internal: instance map poisoned".into()))?;
        if let Some(i) = map.get(key) {
            return Ok(i.clone());
        }
        let mut opts = self.opts.client.clone();
        opts.ca_bundle = ca;
        let client = GiteaClient::new(&key.url, token.clone(), self.metrics.clone(), opts)?;
        let inst = Arc::new(Instance {
            client,
            version: Cell::default(),
            login: Cell::default(),
        });
        map.insert(key.clone(), inst.clone());
        Ok(inst)
    }

    /// Checks (and caches) the server version and, for user scope, the token's login.
    async fn ensure_ready(&self, r: &Resolved<'_>) -> Result<(GiteaVersion, String), GiteaError> {
        let client = &r.instance.client;
        let version = r
            .instance
            .version
            .get_or_fetch(self.opts.version_ttl, async {
                let raw = client.version().await?;
                let v = GiteaVersion::parse_supported(&raw)?;
                Ok::<_, GiteaError>((v, raw))
            })
            .await?;
        if let Scope::User(user) = &r.scope {
            let login = r
                .instance
                .login
                .get_or_fetch(self.opts.version_ttl, client.current_user())
                .await?;
            if login.as_str() != user {
                return Err(GiteaError::WrongUser {
                    spec: user.clone(),
                    actual: login.to_string(),
                });
            }
        }
        Ok((*version).clone())
    }

    /// The scope's queued and running jobs, and when that listing's fetch started. Fetched at
    /// most once per poll interval: webhooks never expire it (they are accounted on top).
    async fn jobs(&self, r: &Resolved<'_>) -> Result<(Arc<Vec<WorkflowJob>>, Instant), GiteaError> {
        let cell = cell_for(&self.jobs, &r.listing);
        // One call for both: queued is demand, in_progress tells which runners got work.
        let got = cell
            .get_or_fetch_at(
                r.interval,
                r.instance.client.list_jobs(&r.scope, &["queued", "in_progress"]),
            )
            .await?;
        if got.fetched_now {
            // The next poll is due one interval after this listing.
            self.poll_again_at(&r.listing, got.fetched_at + r.interval);
        }
        Ok((got.value, got.fetched_at))
    }

    async fn runners(&self, r: &Resolved<'_>, max_age: Duration) -> Result<Arc<Vec<Runner>>, GiteaError> {
        let cell = cell_for(&self.runners, &r.listing);
        cell.get_or_fetch(max_age, r.instance.client.list_runners(&r.scope))
            .await
    }

    fn remember(&self, ctx: &GroupContext, r: &Resolved<'_>) {
        if let Ok(mut g) = self.groups.lock() {
            g.insert(
                ctx.key.clone(),
                GroupInfo {
                    scope: r.scope.clone(),
                    labels: r.labels.clone(),
                    webhook_secret: r.spec.webhook_secret.clone(),
                    listing: r.listing.clone(),
                },
            );
        }
    }

    async fn demand_inner(&self, ctx: &GroupContext) -> Result<Demand, GiteaError> {
        let r = self.resolve(ctx)?;
        let (version, raw_version) = self.ensure_ready(&r).await?;
        self.remember(ctx, &r);
        let (jobs, fetched_at) = self.jobs(&r).await?;
        let age = fetched_at.elapsed();
        let observed_at = jiff::SignedDuration::try_from(age)
            .ok()
            .and_then(|age| jiff::Timestamp::now().checked_sub(age).ok());
        let group = &ctx.key.name;
        let serves = |labels: &[String]| {
            r.labels.matches(labels) && (!labels.is_empty() || version.empty_runs_on_is_demand())
        };
        // What webhooks told since the listing was fetched (nothing without webhooks).
        let announced = self.announced_view(&ctx.key, &r.listing, fetched_at, &jobs, serves);
        let mut queued = announced.unlisted_queued;
        let mut busy = BTreeSet::new();
        for job in jobs.iter() {
            match job.status {
                JobStatus::Queued if serves(&job.labels) && !announced.taken.contains(&job.id) => {
                    queued = queued.saturating_add(1)
                }
                JobStatus::InProgress if is_group_runner_name(group, &job.runner_name) => {
                    busy.insert(job.runner_name.clone());
                }
                _ => {}
            }
        }
        let runners = self.runners(&r, r.interval).await?;
        let offline: BTreeSet<String> = runners
            .iter()
            .filter(|x| !x.is_online() && !x.busy && is_group_runner_name(group, &x.name))
            .map(|x| x.name.clone())
            .collect();
        Ok(Demand {
            jobs: queued,
            running_jobs: u32::try_from(busy.len()).unwrap_or(u32::MAX),
            busy_runners: busy.into_iter().collect(),
            offline_runners: offline.into_iter().collect(),
            facts: ForgeFacts {
                scale_set_id: None,
                forge_version: Some(raw_version),
            },
            // Runner states come from a listing, not as they happen (and Gitea never scales down).
            knows_runner_activity: false,
            observed_at,
        })
    }

    async fn credentials_inner(
        &self,
        ctx: &GroupContext,
        runner_name: &str,
    ) -> Result<RunnerCredentials, GiteaError> {
        let r = self.resolve(ctx)?;
        let token = match ctx.credentials.get(REGISTRATION_TOKEN_KEY) {
            Some(t) => t.clone(),
            None => {
                self.ensure_ready(&r).await?;
                let cell = cell_for(&self.tokens, &r.listing);
                let t = cell
                    .get_or_fetch(
                        self.opts.token_ttl,
                        r.instance.client.registration_token(&r.scope),
                    )
                    .await?;
                (*t).clone()
            }
        };
        Ok(RunnerCredentials {
            secret_data: BTreeMap::from([(REGISTRATION_TOKEN_KEY.to_string(), token)]),
            env: pod::runner_env(r.spec, runner_name),
            annotations: BTreeMap::new(),
        })
    }

    async fn state_inner(
        &self,
        ctx: &GroupContext,
        refs: &[RunnerRef],
    ) -> Result<BTreeMap<String, ForgeRunnerState>, GiteaError> {
        let r = self.resolve(ctx)?;
        self.ensure_ready(&r).await?;
        let runners = self.runners(&r, r.interval).await?;
        let (jobs, _) = self.jobs(&r).await?;
        let working: BTreeSet<&str> = jobs
            .iter()
            .filter(|j| j.status == JobStatus::InProgress)
            .map(|j| j.runner_name.as_str())
            .collect();
        // As the deliveries told this reconcile's `demand` (taken jobs left with their runner).
        let announced = self.announced_runners(&ctx.key);
        let mut out = BTreeMap::new();
        for rr in refs {
            let mut state = ForgeRunnerState::Unknown;
            for x in runners.iter().filter(|x| x.name == rr.name) {
                let s = if x.busy {
                    ForgeRunnerState::Busy
                } else if x.is_online() {
                    ForgeRunnerState::Idle
                } else {
                    ForgeRunnerState::Offline
                };
                state = strongest(state, s);
            }
            if working.contains(rr.name.as_str()) {
                state = ForgeRunnerState::Busy;
            }
            if let Some(s) = announced.get(&rr.name) {
                state = strongest(state, *s);
            }
            if state != ForgeRunnerState::Unknown {
                out.insert(rr.name.clone(), state);
            }
        }
        Ok(out)
    }

    async fn remove_inner(
        &self,
        ctx: &GroupContext,
        runner: &RunnerRef,
    ) -> Result<RemoveOutcome, GiteaError> {
        let r = self.resolve(ctx)?;
        self.ensure_ready(&r).await?;
        // Always a fresh listing: removing a runner that just took a job would kill the job.
        let runners = self.runners(&r, Duration::ZERO).await?;
        let ours: Vec<&Runner> = runners.iter().filter(|x| x.name == runner.name).collect();
        if ours.iter().any(|x| x.busy) {
            return Ok(RemoveOutcome::Busy);
        }
        for x in ours {
            r.instance.client.delete_runner(&r.scope, x.id).await?;
        }
        cell_for(&self.runners, &r.listing)
            .expire_if_older(Duration::ZERO)
            .await;
        Ok(RemoveOutcome::Removed)
    }
}

#[async_trait]
impl Forge for GiteaForge {
    fn kind(&self) -> ForgeKind {
        ForgeKind::Gitea
    }

    fn default_runner_pod(&self, group: &RunnerGroup, runner_name: &str, secret_name: &str) -> PodSpec {
        let image = group.spec.image.as_deref();
        match &group.spec.gitea {
            Some(spec) => pod::default_runner_pod(spec, image, runner_name, secret_name),
            // Validation rejects such a group before any runner is made; keep a sane shape.
            None => {
                let empty = GiteaSpec {
                    url: String::new(),
                    scope: forgerunner_core::crd::GiteaScope::Global,
                    org: None,
                    user: None,
                    repo: None,
                    credentials: String::new(),
                    labels: Vec::new(),
                    poll_interval_seconds: None,
                    webhook_secret: None,
                };
                pod::default_runner_pod(&empty, image, runner_name, secret_name)
            }
        }
    }

    async fn demand(&self, group: &GroupContext) -> Result<Demand, ForgeError> {
        Ok(self.demand_inner(group).await?)
    }

    async fn runner_credentials(
        &self,
        group: &GroupContext,
        runner_name: &str,
    ) -> Result<RunnerCredentials, ForgeError> {
        Ok(self.credentials_inner(group, runner_name).await?)
    }

    async fn runner_state(
        &self,
        group: &GroupContext,
        runners: &[RunnerRef],
    ) -> Result<BTreeMap<String, ForgeRunnerState>, ForgeError> {
        Ok(self.state_inner(group, runners).await?)
    }

    async fn remove_runner(
        &self,
        group: &GroupContext,
        runner: &RunnerRef,
    ) -> Result<RemoveOutcome, ForgeError> {
        Ok(self.remove_inner(group, runner).await?)
    }

    async fn shutdown(&self, group: &GroupContext) -> Result<(), ForgeError> {
        if let Ok(mut g) = self.groups.lock() {
            g.remove(&group.key);
        }
        Ok(())
    }

    async fn shutdown_all(&self) {
        // A new leader starts from nothing: forget groups and every cached listing and token.
        for m in [&self.groups] {
            if let Ok(mut g) = m.lock() {
                g.clear();
            }
        }
        if let Ok(mut m) = self.jobs.lock() {
            m.clear();
        }
        if let Ok(mut m) = self.runners.lock() {
            m.clear();
        }
        if let Ok(mut m) = self.tokens.lock() {
            m.clear();
        }
        self.forget_announced();
        if let Ok(mut m) = self.instances.lock() {
            m.clear();
        }
    }
}
