//! `GiteaForge`: the `Forge` implementation for Gitea 1.25+.
//!
//! Poll-style: `demand` reads the queued jobs at the group's scope and counts those whose
//! `runs-on` its labels satisfy. Listings are shared: one jobs listing and one runner listing
//! per (instance URL, scope, token) per poll interval, however many groups use them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use forgerunner_core::crd::{ForgeKind, GiteaSpec, RunnerClass, RunnerGroup, RunnerGroupSpec};
use forgerunner_core::forge::{
    ClusterRefs, Forge, ForgeError, ForgeFacts, ForgeProfile, ForgeRunnerState, ForgeSession, ForgeView,
    GroupContext, GroupKey, OutboundUrl, ReconcileTrigger, RemoveOutcome, RunnerCredentials, RunnerExit,
    RunnerRef, SecretValue, UnmatchedJob, WaitingJob,
};
use forgerunner_core::metrics::{Metrics, UnmatchedBook};
use forgerunner_core::runner_class::runner_labels;
use forgerunner_core::validate::SpecViolation;
use forgerunner_core::webhook::RecentDeliveries;
use forgerunner_http::{Cell, Connection, Fetched, InstanceKey, ListingMemory, Pool, entries_of};
use k8s_openapi::api::core::v1::PodSpec;

use crate::client::{ClientOptions, GITEA, GiteaClient, RunnerListing};
use crate::error::GiteaError;
use crate::forge_webhook::AnnouncedState;
use crate::ghosts::OfflineSince;
use crate::labels::ServedLabels;
use crate::pod::{self, REGISTRATION_TOKEN_KEY};
use crate::runner_names::strongest;
use crate::scope::{Routes, Scope};
use crate::types::{JobStatus, Runner, WorkflowJob};
use crate::unmatched::{Scans, Taker, unmatched_jobs};
use crate::version::GiteaVersion;
use forgerunner_core::names::is_runner_name_of;

/// Fresh runner listings a removal makes at most while they shift under it (see
/// [`RunnerListing::complete`]); each further one is only made when the one before skipped or
/// repeated rows and did not show the runner.
const REMOVAL_LISTINGS: usize = 3;

/// Tunables of the backend; the defaults suit production.
#[derive(Clone, Debug)]
pub struct GiteaOptions {
    /// HTTP client settings.
    pub client: ClientOptions,
    /// How long a checked server version (and the token's user) is trusted.
    pub version_ttl: Duration,
    /// How long a fetched registration token is reused (POST does not rotate it).
    pub token_ttl: Duration,
    /// How long a runner row named like the group must stay offline (and not busy), seen so
    /// in listings this far apart, before it is reported as a ghost. A freshly registered
    /// runner is offline until its daemon first calls in, and at `scope: global` the rows
    /// include same-named groups' runners elsewhere; see `ghosts`.
    pub ghost_grace: Duration,
    /// The budget every cached listing is charged to; `None`: one of
    /// [`ListingMemory::DEFAULT_ENTRIES`] for this backend alone. The operator hands the Gitea
    /// and Forgejo backends one shared budget (`listingCacheEntries`).
    pub listing_memory: Option<ListingMemory>,
}

impl Default for GiteaOptions {
    fn default() -> Self {
        GiteaOptions {
            client: ClientOptions::default(),
            version_ttl: Duration::from_secs(600),
            token_ttl: Duration::from_secs(300),
            // Between `register` and the daemon's first call lie, at worst, the start of the
            // dind sidecar (an image pull on a cold node) and of the runner container.
            ghost_grace: Duration::from_secs(300),
            listing_memory: None,
        }
    }
}

/// One instance + token (+ CA bundle, proxy): a client and what was checked about the server.
pub(crate) type Instance = forgerunner_http::Instance<GiteaClient, (GiteaVersion, String)>;

/// One listing scope on one instance.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct ListingKey {
    instance: InstanceKey,
    scope: Scope,
}

impl ListingKey {
    /// The instance the scope is listed on.
    pub(crate) fn instance(&self) -> &InstanceKey {
        &self.instance
    }
}

/// What the webhook path needs to know about a group seen by `observe`.
#[derive(Clone)]
pub(crate) struct GroupInfo {
    pub(crate) scope: Scope,
    pub(crate) labels: ServedLabels,
    /// The secret that verifies deliveries for this group, if the spec names a readable one.
    pub(crate) webhook_secret: Option<SecretValue>,
    pub(crate) listing: ListingKey,
}

/// A group's settings, checked and tied to its instance.
struct Resolved<'a> {
    spec: &'a GiteaSpec,
    scope: Scope,
    /// The group's labels and, per class, the class runners' ([`ServedLabels`]).
    labels: ServedLabels,
    instance: Arc<Instance>,
    listing: ListingKey,
    interval: Duration,
}

/// The Gitea backend. Cheap to share (`Arc`); all state is behind locks.
#[derive(Clone)]
pub struct GiteaForge(Arc<GiteaShared>);

/// What a [`GiteaForge`] and the sessions it opens share.
pub struct GiteaShared {
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) trigger: ReconcileTrigger,
    pub(crate) opts: GiteaOptions,
    pub(crate) instances: Pool<InstanceKey, Instance>,
    pub(crate) jobs: Pool<ListingKey, Cell<Vec<WorkflowJob>>>,
    pub(crate) runners: Pool<ListingKey, Cell<RunnerListing>>,
    /// What the cached jobs and runner listings are charged to.
    listing_memory: ListingMemory,
    /// Per listing scope, since when its offline rows have been offline (ghost candidates).
    pub(crate) offline: Mutex<HashMap<ListingKey, OfflineSince>>,
    pub(crate) tokens: Pool<ListingKey, Cell<SecretValue>>,
    pub(crate) groups: Mutex<HashMap<GroupKey, GroupInfo>>,
    /// What webhook deliveries told since each scope's cached jobs listing.
    pub(crate) announced: Mutex<AnnouncedState>,
    /// Per group, runners that took a job after the cached jobs listing was fetched.
    /// Ids of deliveries already acted on.
    pub(crate) deliveries: RecentDeliveries,
    /// Per group, the queued jobs of its scope no group can take ([`crate::unmatched`]).
    pub(crate) unmatched: UnmatchedBook,
    /// The latest unmatched-jobs scan of each listing, shared by its groups.
    pub(crate) unmatched_scans: Scans<ListingKey>,
}

impl std::ops::Deref for GiteaForge {
    type Target = GiteaShared;

    fn deref(&self) -> &GiteaShared {
        &self.0
    }
}

impl GiteaForge {
    /// A backend with default options. `trigger` wakes groups when a webhook arrives.
    pub fn new(metrics: Arc<Metrics>, trigger: ReconcileTrigger) -> GiteaForge {
        GiteaForge::with_options(metrics, trigger, GiteaOptions::default())
    }

    /// A backend with explicit options (tests shorten timeouts).
    pub fn with_options(metrics: Arc<Metrics>, trigger: ReconcileTrigger, opts: GiteaOptions) -> GiteaForge {
        let listing_memory = opts
            .listing_memory
            .clone()
            .unwrap_or_else(|| ListingMemory::new(ListingMemory::DEFAULT_ENTRIES, metrics.clone()));
        GiteaForge(Arc::new(GiteaShared {
            listing_memory,
            metrics,
            trigger,
            opts,
            instances: Pool::default(),
            jobs: Pool::default(),
            runners: Pool::default(),
            offline: Mutex::default(),
            tokens: Pool::default(),
            groups: Mutex::default(),
            announced: Mutex::default(),
            deliveries: RecentDeliveries::default(),
            unmatched: UnmatchedBook::new("gitea"),
            unmatched_scans: Scans::default(),
        }))
    }

    fn resolve<'a>(&self, ctx: &'a GroupContext) -> Result<Resolved<'a>, GiteaError> {
        let spec = ctx
            .group
            .spec
            .gitea
            .as_ref()
            .ok_or_else(|| GiteaError::Spec("spec.gitea is required when forge is gitea".into()))?;
        let scope = Scope::from_spec(spec)?;
        let labels = ServedLabels::parse(&spec.labels, &ctx.group.spec.classes)?;
        let token = ctx
            .credentials
            .get("token")
            .ok_or_else(|| GiteaError::MissingToken(ctx.credentials.secret_name.clone()))?;
        let proxy = forgerunner_http::proxy_of(spec.proxy_url.as_deref());
        // One client per (token, CA bundle, proxy): groups that differ in any of them must not
        // share a client's roots or route.
        let conn = Connection {
            api: GITEA,
            url: &spec.url,
            token,
            ca_bundle: ctx.ca_bundle.as_deref(),
            proxy,
        };
        let (key, instance) = self
            .instances
            .connect(&conn, &self.metrics, &self.opts.client)
            .map_err(|e| GiteaError::Spec(e.to_string()))?;
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

    /// Refuses the credentials key [`REGISTRATION_TOKEN_KEY`] unless the group is global.
    ///
    /// Gitea gives a runner the scope of the token it registers with (`Register` in
    /// `routers/api/actions/runner/runner.go`), and a token's value does not say its scope. The
    /// fixed token admins have, `GITEA_RUNNER_REGISTRATION_TOKEN`, is the global one
    /// (`initGlobalRunnerToken` in `services/actions/init.go`), so in an org/user/repo group it
    /// would make global runners: other tenants' jobs on this group's pods, and rows the scope's
    /// runner list never shows, so they could be neither observed nor removed. The API token
    /// (always present) fetches the scope's own token, so scoped groups need no fixed one.
    fn check_fixed_token(ctx: &GroupContext, r: &Resolved<'_>) -> Result<(), GiteaError> {
        if r.scope == Scope::Global || ctx.credentials.get(REGISTRATION_TOKEN_KEY).is_none() {
            return Ok(());
        }
        Err(GiteaError::FixedTokenOutsideGlobal {
            secret: ctx.credentials.secret_name.clone(),
            scope: r.scope.to_string(),
        })
    }

    /// Checks (and caches) the server version and, for user scope, the token's login.
    async fn ensure_ready(&self, r: &Resolved<'_>) -> Result<(GiteaVersion, String), GiteaError> {
        let client = &r.instance.client;
        let version = r
            .instance
            .version
            .get(self.opts.version_ttl, async {
                let raw = client.version().await?;
                let v = GiteaVersion::parse_supported(&raw)?;
                Ok::<_, GiteaError>((v, raw))
            })
            .await?
            .value;
        if let Scope::User(user) = &r.scope {
            let login = r
                .instance
                .login
                .get(self.opts.version_ttl, client.current_user())
                .await?
                .value;
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
        let cell = self.jobs_cell(&r.listing);
        // One call for both: queued is demand, in_progress tells which runners got work.
        let got = cell
            .get(
                r.interval,
                r.instance.client.list_jobs(&r.scope, &["queued", "in_progress"]),
            )
            .await?;
        if got.fetched_now {
            // The next poll is due one interval after this listing.
            self.poll_again_at(&r.listing, got.at + r.interval);
        }
        Ok((got.value, got.at))
    }

    /// The cached jobs listing of `key`, charged to the listing budget.
    pub(crate) fn jobs_cell(&self, key: &ListingKey) -> Arc<Cell<Vec<WorkflowJob>>> {
        self.jobs.shared_or(key, || {
            Cell::charged(self.listing_memory.clone(), |jobs| entries_of(jobs))
        })
    }

    /// The cached runner listing of `key`, charged to the listing budget.
    fn runners_cell(&self, key: &ListingKey) -> Arc<Cell<RunnerListing>> {
        self.runners.shared_or(key, || {
            Cell::charged(self.listing_memory.clone(), |l| entries_of(&l.runners))
        })
    }

    /// The scope's runner listing, at most `max_age` old, and when its fetch started.
    async fn runners(
        &self,
        r: &Resolved<'_>,
        max_age: Duration,
    ) -> Result<Fetched<RunnerListing>, GiteaError> {
        let cell = self.runners_cell(&r.listing);
        cell.get(max_age, r.instance.client.list_runners(&r.scope)).await
    }

    /// Names of the group's ghosts in `listing`: rows named like the group's runners that have
    /// been offline and not busy for at least [`GiteaOptions::ghost_grace`] (see `ghosts`).
    fn ghosts(&self, r: &Resolved<'_>, group: &str, listing: &Fetched<RunnerListing>) -> BTreeSet<String> {
        let Ok(mut books) = self.offline.lock() else {
            // A poisoned map: report no ghost rather than one not checked.
            return BTreeSet::new();
        };
        let book = books.entry(r.listing.clone()).or_default();
        book.note(&listing.value, listing.at);
        let ghosts = listing
            .value
            .runners
            .iter()
            .filter(|x| !x.is_online() && !x.busy && is_runner_name_of(group, &x.name))
            .filter(|x| book.for_at_least(x.id, listing.at, self.opts.ghost_grace))
            .map(|x| x.name.clone())
            .collect();
        if book.is_empty() {
            books.remove(&r.listing);
        }
        ghosts
    }

    /// Whether a fresh jobs listing shows runner `name` working on a job.
    async fn works(&self, r: &Resolved<'_>, name: &str) -> Result<bool, GiteaError> {
        let running = r.instance.client.list_jobs(&r.scope, &["in_progress"]).await?;
        Ok(running.iter().any(|j| j.runner_name == name))
    }

    /// The queued jobs of the group's listing (fetched at `fetched_at`) no known group can
    /// take, counted for the group's namespace. The listing is scanned once for all its groups
    /// ([`Scans`]).
    fn unmatched_of(
        &self,
        ctx: &GroupContext,
        r: &Resolved<'_>,
        jobs: &[WorkflowJob],
        fetched_at: Instant,
    ) -> Vec<UnmatchedJob> {
        let scan = || match self.groups.lock() {
            Ok(groups) => {
                let takers = groups.values().map(|g| Taker {
                    url: g.listing.instance().url(),
                    scope: &g.scope,
                    labels: &g.labels,
                });
                unmatched_jobs(jobs, r.listing.instance().url(), takers)
            }
            // A poisoned map: report none rather than every job.
            Err(_) => Vec::new(),
        };
        let found = self.unmatched_scans.get_or_scan(&r.listing, fetched_at, scan);
        let ids = found.iter().map(|j| j.id.clone()).collect();
        self.unmatched.record(&self.metrics, &ctx.key, ids);
        found.as_ref().clone()
    }

    fn remember(&self, ctx: &GroupContext, r: &Resolved<'_>) {
        let before = match self.groups.lock() {
            Ok(mut g) => g.insert(
                ctx.key.clone(),
                GroupInfo {
                    scope: r.scope.clone(),
                    labels: r.labels.clone(),
                    webhook_secret: ctx.webhook_secret.clone(),
                    listing: r.listing.clone(),
                },
            ),
            Err(_) => return,
        };
        let same_taker = before
            .as_ref()
            .is_some_and(|old| old.listing == r.listing && old.scope == r.scope && old.labels == r.labels);
        if !same_taker {
            // Which jobs no group can take may have changed.
            self.unmatched_scans.takers_changed();
        }
        if before.is_some_and(|old| old.listing != r.listing) {
            // New token, CA bundle, proxy or scope: what only the old one used goes.
            self.prune();
        }
    }

    async fn observe_inner(&self, ctx: &GroupContext, refs: &[RunnerRef]) -> Result<ForgeView, GiteaError> {
        let r = self.resolve(ctx)?;
        // Before any request: deliveries for the group verify even while the forge is down.
        self.remember(ctx, &r);
        // Every pass, not only when a runner is made: the group reports the bad key at once.
        Self::check_fixed_token(ctx, &r)?;
        let (version, raw_version) = self.ensure_ready(&r).await?;
        let (jobs, fetched_at) = self.jobs(&r).await?;
        let group = &ctx.key.name;
        let serves = |labels: &[String]| {
            r.labels.matches(labels) && (!labels.is_empty() || version.empty_runs_on_is_demand())
        };
        // What webhooks told since the listing was fetched (nothing without webhooks).
        let announced = self.announced_view(&r.listing, &ctx.key.name, fetched_at, &jobs, serves);
        let mut queued = announced.unlisted_queued;
        // Runners the listing shows working: their jobs are not counted as queued.
        let mut working: BTreeSet<&str> = BTreeSet::new();
        let mut waiting: Vec<WaitingJob> = announced
            .unlisted
            .iter()
            .map(|(id, queued_at, labels)| WaitingJob {
                id: id.to_string(),
                queued_at: *queued_at,
                labels: labels.clone(),
            })
            .collect();
        let mut identities = BTreeMap::new();
        for job in jobs.iter() {
            match job.status {
                JobStatus::Queued if serves(&job.labels) && !announced.taken.contains(&job.id) => {
                    queued = queued.saturating_add(1);
                    waiting.push(WaitingJob {
                        id: job.id.to_string(),
                        queued_at: job.created_at,
                        labels: job.labels.clone(),
                    });
                }
                JobStatus::InProgress => {
                    working.insert(job.runner_name.as_str());
                    if refs.iter().any(|r| r.name == job.runner_name) {
                        identities.insert(job.runner_name.clone(), job.identity());
                    }
                }
                _ => {}
            }
        }
        // Deliveries name a runner's job before a listing shows it in progress.
        for (runner, identity) in &announced.identities {
            if refs.iter().any(|r| &r.name == runner) {
                identities
                    .entry(runner.clone())
                    .or_insert_with(|| identity.clone());
            }
        }
        let unmatched = self.unmatched_of(ctx, &r, &jobs, fetched_at);
        let listing = self.runners(&r, r.interval).await?;
        let runners = &listing.value.runners;
        let mut states = BTreeMap::new();
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
            if let Some(s) = announced.runners.get(&rr.name) {
                state = strongest(state, *s);
            }
            if state != ForgeRunnerState::Unknown {
                states.insert(rr.name.clone(), state);
            }
        }
        // Runners the listing shows working, or a delivery named: their jobs are not counted.
        let accounted: BTreeSet<String> = working
            .iter()
            .map(|n| (*n).to_owned())
            .chain(announced.runners.keys().cloned())
            .collect();
        let ghosts = self.ghosts(&r, group, &listing);
        // This pass's listings are cached by now.
        self.report_cache();
        Ok(ForgeView {
            waiting,
            // A listing older than a runner's take may still show its job queued: core's ledger
            // nets that out, knowing when the listing was fetched.
            waiting_jobs: queued,
            runners: states,
            ghosts: ghosts.into_iter().collect(),
            // Runner states come from a listing, not as they happen: an idle-looking runner may
            // have just taken a job, so surplus runners leave through the idle timeout.
            complete: false,
            facts: ForgeFacts {
                scale_set_id: None,
                forge_version: Some(raw_version),
            },
            job_identities: identities,
            // Gitea sends no rate-limit headers.
            budget: None,
            stranded: Default::default(),
            listed_at: Some(fetched_at),
            accounted,
            // A runner seen busy took its job by then (its own runner row, or a delivery).
            takes_by_success_only: false,
            unmatched,
            versions: pod::runner_versions(&ctx.group.spec),
        })
    }

    async fn credentials_inner(
        &self,
        ctx: &GroupContext,
        runner_name: &str,
    ) -> Result<RunnerCredentials, GiteaError> {
        let r = self.resolve(ctx)?;
        Self::check_fixed_token(ctx, &r)?;
        let token = match ctx.credentials.get(REGISTRATION_TOKEN_KEY) {
            Some(t) => t.clone(),
            None => {
                self.ensure_ready(&r).await?;
                let cell = self.tokens.shared(&r.listing);
                let t = cell
                    .get(
                        self.opts.token_ttl,
                        r.instance.client.registration_token(&r.scope),
                    )
                    .await?;
                self.report_cache();
                (*t.value).clone()
            }
        };
        let mut env = pod::runner_env(r.spec, runner_name);
        // The labels are the pod's to say: a class's runner registers with its class's, which
        // the credentials (made before the class is known to the forge) would overwrite.
        env.remove(pod::LABELS_ENV);
        Ok(RunnerCredentials {
            secret_data: BTreeMap::from([(REGISTRATION_TOKEN_KEY.to_string(), token)]),
            env,
            annotations: BTreeMap::new(),
        })
    }

    async fn remove_inner(
        &self,
        ctx: &GroupContext,
        runner: &RunnerRef,
    ) -> Result<RemoveOutcome, GiteaError> {
        // No `check_fixed_token` here: removal uses only the API token, and refusing it would
        // keep a misconfigured group from cleaning up while it is fixed or deleted.
        let r = self.resolve(ctx)?;
        self.ensure_ready(&r).await?;
        let mut ours: BTreeMap<i64, Runner> = BTreeMap::new();
        let mut settled = false;
        for _ in 0..REMOVAL_LISTINGS {
            // Always a fresh listing: removing a runner that just took a job would kill the job.
            let listing = self.runners(&r, Duration::ZERO).await?;
            for x in listing.value.runners.iter().filter(|x| x.name == runner.name) {
                ours.insert(x.id, x.clone());
            }
            if ours.values().any(|x| x.busy) {
                return Ok(RemoveOutcome::Busy);
            }
            // Found, or not registered by the word of a listing whose pages fit together. A
            // listing that shifted between its pages may have skipped the runner just because
            // it polled (perhaps taking a job), so it is not taken for "gone": look again.
            if !ours.is_empty() || listing.value.complete {
                settled = true;
                break;
            }
        }
        // Still missing after listings that all shifted: only a runner at work must stay, and
        // the jobs listing (not ordered by polls) names it. One not at work is gone, or idle
        // and skipped each time: its Job may go, and a row left behind is swept as a ghost.
        if !settled && self.works(&r, &runner.name).await? {
            return Ok(RemoveOutcome::Busy);
        }
        for id in ours.keys() {
            r.instance.client.delete_runner(&r.scope, *id).await?;
        }
        self.runners_cell(&r.listing).expire().await;
        Ok(RemoveOutcome::Removed)
    }
}

/// What [`Forge::describe`] and the sessions ([`crate::session::Session`]) are made of;
/// tests call them directly.
impl GiteaForge {
    /// What the forge refuses in `spec` (the error side of [`Forge::describe`]).
    pub fn validate(&self, spec: &RunnerGroupSpec) -> Vec<SpecViolation> {
        let mut out = spec
            .gitea
            .as_ref()
            .map(crate::validate::validate_gitea)
            .unwrap_or_default();
        out.extend(crate::validate::validate_container_mode(spec));
        out
    }

    /// What `spec` names in the cluster ([`ForgeProfile::cluster_refs`]).
    pub fn cluster_refs(&self, spec: &RunnerGroupSpec) -> ClusterRefs {
        let gitea = spec.gitea.as_ref();
        ClusterRefs {
            credentials_secret: gitea.map(|g| g.credentials.clone()).unwrap_or_default(),
            ca_bundle_config_map: gitea
                .and_then(|g| g.ca_bundle_config_map.clone())
                .filter(|n| !n.is_empty()),
            webhook_secret: gitea
                .and_then(|g| g.webhook_secret.clone())
                .filter(|n| !n.is_empty()),
        }
    }

    /// The URLs of `spec` the operator connects to ([`ForgeProfile::outbound_urls`]).
    pub fn outbound_urls(&self, spec: &RunnerGroupSpec) -> Vec<OutboundUrl> {
        let Some(gt) = spec.gitea.as_ref() else {
            return Vec::new();
        };
        let mut urls = vec![OutboundUrl {
            field: "spec.gitea.url",
            url: gt.url.clone(),
        }];
        urls.extend(gt.proxy_url.iter().map(|p| OutboundUrl {
            field: "spec.gitea.proxyUrl",
            url: p.clone(),
        }));
        urls
    }

    /// How long a group may go without a pass ([`ForgeProfile::resync_interval`]).
    pub fn resync_interval(&self, spec: &RunnerGroupSpec) -> Duration {
        let seconds = spec.gitea.as_ref().map_or(5, GiteaSpec::poll_interval_seconds);
        Duration::from_secs(u64::from(seconds))
    }

    /// The default pod of one new runner ([`ForgeSession::runner_pod`]).
    pub fn default_runner_pod(
        &self,
        group: &RunnerGroup,
        runner_name: &str,
        secret_name: &str,
        _credentials: &RunnerCredentials,
        class: Option<&RunnerClass>,
    ) -> PodSpec {
        let image = group.spec.image.as_deref();
        let mut pod = match &group.spec.gitea {
            Some(spec) => {
                let mut p = pod::default_runner_pod(spec, image, runner_name, secret_name);
                if let Some(class) = class {
                    pod::register_with(&mut p, &runner_labels(&spec.labels, class));
                }
                pod::apply_trust(&group.spec, spec, &mut p);
                pod::apply_config_file(&group.spec, &mut p);
                crate::cache::apply_cache(group, &mut p);
                p
            }
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
                    ca_bundle_config_map: None,
                    proxy_url: None,
                };
                pod::default_runner_pod(&empty, image, runner_name, secret_name)
            }
        };
        // Container mode and the restricted Pod Security settings.
        crate::pod_security::finish_pod(&mut pod, &group.spec);
        pod
    }

    /// Always `None`: Gitea Runner (and act_runner before it) has no exit code of its own for
    /// "too old for this server". Every failure, a refused `Declare` included, ends the process
    /// through cobra with exit code 1, and Gitea refuses no runner for its version (the only
    /// version message is the runner's own "Gitea too old to declare", about the server). An
    /// outdated runner therefore shows as an ordinary failed runner; the default image is
    /// pinned ([`pod::DEFAULT_IMAGE`]) so it does not drift.
    pub fn runner_exit_meaning(&self, _exit_code: i32) -> Option<RunnerExit> {
        None
    }

    /// The forge's view of the group ([`ForgeSession::snapshot`]).
    pub async fn observe(
        &self,
        group: &GroupContext,
        runners: &[RunnerRef],
    ) -> Result<ForgeView, ForgeError> {
        Ok(self.observe_inner(group, runners).await?)
    }

    /// What a new runner of the group's own needs to join ([`ForgeSession::register`]).
    pub async fn runner_credentials(
        &self,
        group: &GroupContext,
        runner_name: &str,
    ) -> Result<RunnerCredentials, ForgeError> {
        Ok(self.credentials_inner(group, runner_name).await?)
    }

    /// Deregisters a runner ([`ForgeSession::deregister`]).
    pub async fn remove_runner(
        &self,
        group: &GroupContext,
        runner: &RunnerRef,
    ) -> Result<RemoveOutcome, ForgeError> {
        Ok(self.remove_inner(group, runner).await?)
    }

    /// Gitea 1.26+ only (see `crate::rerun`); older servers answer `Unsupported` unasked.
    pub async fn rerun_job(
        &self,
        group: &GroupContext,
        runner: &str,
        job: &forgerunner_core::job_identity::JobIdentity,
    ) -> Result<forgerunner_core::forge::RerunOutcome, ForgeError> {
        let r = self.resolve(group)?;
        let (version, _) = self.ensure_ready(&r).await?;
        let ask = |job_id| self.rerun_asked(&r.listing, job_id);
        crate::rerun::rerun_job(&r.instance.client, &r.scope, version, runner, job, ask).await
    }

    /// Deletes the group's forge-side resources ([`ForgeSession::delete_group`]).
    pub async fn shutdown(&self, group: &GroupContext) -> Result<(), ForgeError> {
        self.release_group(&group.key);
        Ok(())
    }

    /// Stops the group's background work and forgets its state ([`ForgeSession::close`]).
    pub async fn release(&self, key: &GroupKey) {
        self.release_group(key);
        self.unmatched.forget(&self.metrics, key);
    }

    /// What a failed cleanup may leave ([`ForgeProfile::cleanup_hint`]).
    pub fn cleanup_hint(&self, _spec: &RunnerGroupSpec) -> String {
        "runners named after the group may stay registered at Gitea: delete them under Settings → \
         Actions → Runners of the group's scope (site administration, organization, user or \
         repository)"
            .to_owned()
    }

    /// Gitea Runner's own `cache-server` ([`crate::cache`]).
    pub fn cache_server(
        &self,
        group: &RunnerGroup,
        service_host: &str,
        secret: &forgerunner_core::forge::SecretValue,
    ) -> Option<forgerunner_core::cache_server::CacheServer> {
        Some(crate::cache::cache_server(group, service_host, secret))
    }
}

#[async_trait]
impl Forge for GiteaForge {
    fn kind(&self) -> ForgeKind {
        ForgeKind::Gitea
    }

    fn describe(&self, spec: &RunnerGroupSpec) -> Result<ForgeProfile, Vec<SpecViolation>> {
        let violations = self.validate(spec);
        if !violations.is_empty() {
            return Err(violations);
        }
        Ok(ForgeProfile {
            cluster_refs: self.cluster_refs(spec),
            outbound_urls: self.outbound_urls(spec),
            resync_interval: self.resync_interval(spec),
            cleanup_hint: self.cleanup_hint(spec),
            runner_role_rules: Vec::new(),
            runner_exits: BTreeMap::new(),
        })
    }

    fn open(&self, key: &GroupKey) -> Box<dyn ForgeSession> {
        Box::new(crate::session::Session::new(self.clone(), key.clone()))
    }

    fn receive_webhook(
        &self,
        headers: &http::HeaderMap,
        body: &[u8],
    ) -> Option<forgerunner_core::forge::WebhookReply> {
        Some(GiteaForge::receive_webhook(self, headers, body))
    }

    async fn shutdown_all(&self) {
        // A new leader starts from nothing: forget groups and every cached listing and token.
        self.forget_all();
        self.unmatched.clear(&self.metrics);
    }
}
