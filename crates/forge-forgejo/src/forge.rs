//! `ForgejoForge`: the `Forge` implementation for Forgejo 11+.
//!
//! Poll-style: `observe` reads the waiting jobs at the group's scope with the group's label
//! names as Forgejo's server-side filter. Listings are shared: one jobs listing per (instance,
//! scope, labels, token) and one runner listing per (instance, scope, token) per poll
//! interval, however many groups use them.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use forgerunner_core::crd::{
    DEFAULT_FORGEJO_POLL_INTERVAL_SECONDS, ForgeKind, ForgejoScope, ForgejoSpec, RunnerGroup, RunnerGroupSpec,
};
use forgerunner_core::forge::{
    ClusterRefs, Forge, ForgeError, ForgeFacts, ForgeProfile, ForgeSession, ForgeView, GroupContext,
    GroupKey, OutboundUrl, ReconcileTrigger, RemoveOutcome, RunnerCredentials, RunnerRef, SecretValue,
    WaitingJob,
};
use forgerunner_core::metrics::Metrics;
use forgerunner_core::validate::SpecViolation;
use forgerunner_http::pool::clear;
use forgerunner_http::{Cell, Connection, Fetched, InstanceKey, ListingMemory, Pool, entries_of};
use k8s_openapi::api::core::v1::PodSpec;

use crate::classes::Claim;
use crate::client::{ClientOptions, FORGEJO, ForgejoClient};
use crate::error::ForgejoError;
use crate::observe::{self, Graces, Listing, RunnerRows};
use crate::runner_versions;
use crate::scope::{Routes, Scope};
use crate::state::{GroupBook, HeldBackoff};
use crate::types::{RunJob, Runner, RunnerList};
use crate::version::{ForgejoVersion, Mode, VersionError};

mod actions;
mod release;

/// At most this many runners are looked up by id per pass when a paged runner listing did
/// not show them; the rest stay unknown until a later pass (unknown is safe: such a runner
/// still covers demand and still times out).
const MAX_LOOKUPS: usize = 16;

/// Tunables of the backend; the defaults suit production.
#[derive(Clone, Debug)]
pub struct ForgejoOptions {
    /// HTTP client settings.
    pub client: ClientOptions,
    /// How long a checked server version is trusted.
    pub version_ttl: Duration,
    /// How long a fetched registration token is reused (reading does not rotate it).
    pub token_ttl: Duration,
    /// A runner that looks offline for less than this is reported idle (a new runner is
    /// offline until its pod connects).
    pub offline_grace: Duration,
    /// An offline runner row created by this process less than this ago is never a ghost.
    pub ghost_grace: Duration,
    /// A runner bound to a job that was connected at least this long when it was removed idle
    /// had time to take its job: the job is held back by Forgejo ([`GroupBook::note_held`]).
    pub held_evidence: Duration,
    /// How long no runner is made for a held job after the first such removal; each further
    /// one doubles it, up to [`HeldBackoff::max`].
    pub held_backoff: HeldBackoff,
    /// The budget every cached listing is charged to; `None`: one of
    /// [`ListingMemory::DEFAULT_ENTRIES`] for this backend alone. The operator hands the Gitea
    /// and Forgejo backends one shared budget (`listingCacheEntries`).
    pub listing_memory: Option<ListingMemory>,
}

impl Default for ForgejoOptions {
    fn default() -> Self {
        ForgejoOptions {
            client: ClientOptions::default(),
            version_ttl: Duration::from_secs(600),
            token_ttl: Duration::from_secs(300),
            offline_grace: Duration::from_secs(180),
            ghost_grace: Duration::from_secs(300),
            // forgejo-runner polls every 2 s by default (`FetchInterval`, `config.go` `New`):
            // a minute of polling is thirty chances to get an available job.
            held_evidence: Duration::from_secs(60),
            held_backoff: HeldBackoff {
                first: Duration::from_secs(60),
                max: Duration::from_secs(30 * 60),
            },
            listing_memory: None,
        }
    }
}

/// A client and what was checked about its server.
pub(crate) type Instance = forgerunner_http::Instance<ForgejoClient, (ForgejoVersion, Mode, String)>;

/// One runner listing scope on one instance.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ScopeKey {
    instance: InstanceKey,
    scope: Scope,
}

/// One jobs listing: scope and the label names sent as filter.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct JobsKey {
    scope: ScopeKey,
    labels: Vec<String>,
}

/// A group's settings, checked and tied to its instance and server version.
pub(crate) struct Resolved<'a> {
    pub(crate) spec: &'a ForgejoSpec,
    pub(crate) scope: Scope,
    /// The jobs the group serves: its labels and its classes.
    pub(crate) claim: Claim,
    pub(crate) instance: Arc<Instance>,
    pub(crate) scope_key: ScopeKey,
    pub(crate) jobs_key: JobsKey,
    pub(crate) interval: Duration,
    pub(crate) version: ForgejoVersion,
    pub(crate) mode: Mode,
    pub(crate) raw_version: String,
}

/// The Forgejo backend. Cheap to share (`Arc`); all state is behind locks.
#[derive(Clone)]
pub struct ForgejoForge(Arc<SharedjoShared>);

/// What a [`ForgejoForge`] and the sessions it opens share.
pub struct SharedjoShared {
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) opts: ForgejoOptions,
    /// Wakes a listing's groups when it expires.
    trigger: ReconcileTrigger,
    instances: Pool<InstanceKey, Instance>,
    jobs: Pool<JobsKey, Cell<Vec<RunJob>>>,
    runners: Pool<ScopeKey, Cell<RunnerList>>,
    /// What the cached jobs and runner listings are charged to.
    listing_memory: ListingMemory,
    tokens: Pool<ScopeKey, Cell<SecretValue>>,
    /// Per group: bindings, finished runners, creations, offline times.
    pub(crate) books: Mutex<HashMap<GroupKey, GroupBook>>,
    /// Per group, the listing it uses (and with it its scope and instance).
    users: Mutex<HashMap<GroupKey, JobsKey>>,
}

impl std::ops::Deref for ForgejoForge {
    type Target = SharedjoShared;

    fn deref(&self) -> &SharedjoShared {
        &self.0
    }
}

impl ForgejoForge {
    /// A backend with default options. `trigger` wakes a listing's groups when it expires.
    pub fn new(metrics: Arc<Metrics>, trigger: ReconcileTrigger) -> ForgejoForge {
        ForgejoForge::with_options(metrics, trigger, ForgejoOptions::default())
    }

    /// A backend with explicit options (tests shorten timeouts).
    pub fn with_options(
        metrics: Arc<Metrics>,
        trigger: ReconcileTrigger,
        opts: ForgejoOptions,
    ) -> ForgejoForge {
        let listing_memory = opts
            .listing_memory
            .clone()
            .unwrap_or_else(|| ListingMemory::new(ListingMemory::DEFAULT_ENTRIES, metrics.clone()));
        ForgejoForge(Arc::new(SharedjoShared {
            listing_memory,
            metrics,
            opts,
            trigger,
            instances: Pool::default(),
            jobs: Pool::default(),
            runners: Pool::default(),
            tokens: Pool::default(),
            books: Mutex::default(),
            users: Mutex::default(),
        }))
    }

    /// Reads the group's block, finds (or makes) its instance and checks the server version.
    pub(crate) async fn resolve<'a>(&self, ctx: &'a GroupContext) -> Result<Resolved<'a>, ForgejoError> {
        let spec = ctx
            .group
            .spec
            .forgejo
            .as_ref()
            .ok_or_else(|| ForgejoError::Spec("spec.forgejo is required when forge is forgejo".into()))?;
        let scope = Scope::from_spec(spec)?;
        let labels = crate::labels::parse_labels(&spec.labels)?;
        let token = ctx
            .credentials
            .get("token")
            .ok_or_else(|| ForgejoError::MissingToken(ctx.credentials.secret_name.clone()))?;
        let proxy = spec.proxy_url.as_deref().filter(|p| !p.trim().is_empty());
        let conn = Connection {
            api: FORGEJO,
            url: &spec.url,
            token,
            ca_bundle: ctx.ca_bundle.as_deref(),
            proxy,
        };
        let (key, instance) = self
            .instances
            .connect(&conn, &self.metrics, &self.opts.client)
            .map_err(|e| ForgejoError::Spec(e.to_string()))?;
        let (version, mode, raw_version) = self.check_version(&instance).await?;
        if let Scope::User(user) = &scope {
            self.check_user(&instance, user).await?;
        }
        let scope_key = ScopeKey {
            instance: key,
            scope: scope.clone(),
        };
        let claim = Claim::of(&labels, &ctx.group.spec);
        let jobs_key = JobsKey {
            scope: scope_key.clone(),
            labels: claim.listing_labels(),
        };
        self.track(&ctx.key, &jobs_key);
        Ok(Resolved {
            spec,
            jobs_key,
            scope_key,
            scope,
            claim,
            instance,
            interval: Duration::from_secs(u64::from(spec.poll_interval_seconds())),
            version,
            mode,
            raw_version,
        })
    }

    /// The server's version and mode, cached per instance for `version_ttl`. The Forgejo-only
    /// `/api/forgejo/v1/version` confirms it is Forgejo (Gitea answers 404 there).
    async fn check_version(&self, inst: &Instance) -> Result<(ForgejoVersion, Mode, String), ForgejoError> {
        let client = &inst.client;
        let got = inst
            .version
            .get(self.opts.version_ttl, async {
                let raw = client.version().await?;
                let (v, mode) = ForgejoVersion::supported(&raw)?;
                if client.forgejo_version().await?.is_none() {
                    return Err(VersionError::NotForgejo(raw).into());
                }
                Ok::<_, ForgejoError>((v, mode, raw))
            })
            .await?;
        Ok((*got.value).clone())
    }

    /// Refuses `scope: user` for another user than the token's owner: every `/user/actions/…`
    /// route acts for the token's owner (`routers/api/v1/user/runners.go`: `ctx.Doer.ID`), so a
    /// mistyped `user` would silently serve (and make runners for) the owner's repositories.
    /// The owner's login is read once per `version_ttl`. Forgejo user names are unique without
    /// regard to case (`models/user/user.go`: `LowerName` is the unique key).
    async fn check_user(&self, inst: &Instance, user: &str) -> Result<(), ForgejoError> {
        let login = inst
            .login
            .get(self.opts.version_ttl, inst.client.current_user())
            .await?;
        if login.value.eq_ignore_ascii_case(user) {
            Ok(())
        } else {
            Err(ForgejoError::WrongUser {
                spec: user.to_string(),
                actual: (*login.value).clone(),
            })
        }
    }

    /// The group's waiting and running jobs, at most one poll interval old.
    pub(crate) async fn jobs(&self, r: &Resolved<'_>) -> Result<Fetched<Vec<RunJob>>, ForgejoError> {
        let names: Vec<&str> = r.jobs_key.labels.iter().map(String::as_str).collect();
        let got = self
            .jobs_cell(&r.jobs_key)
            .get(
                r.interval,
                r.instance.client.list_jobs(r.version, &r.scope, &names),
            )
            .await?;
        if got.fetched_now {
            // The listing's groups reconcile when it expires, so the next listing is one
            // interval after this one, not after whichever pass came last.
            self.trigger
                .wake_at(self.users_of(&r.jobs_key), got.at + r.interval);
        }
        Ok(got)
    }

    /// The cached jobs listing of `key`, charged to the listing budget.
    fn jobs_cell(&self, key: &JobsKey) -> Arc<Cell<Vec<RunJob>>> {
        self.jobs.shared_or(key, || {
            Cell::charged(self.listing_memory.clone(), |jobs| entries_of(jobs))
        })
    }

    /// The cached runner listing of `key`, charged to the listing budget.
    fn runners_cell(&self, key: &ScopeKey) -> Arc<Cell<RunnerList>> {
        self.runners.shared_or(key, || {
            Cell::charged(self.listing_memory.clone(), |l| entries_of(&l.rows))
        })
    }

    /// The scope's runners (v15), at most `max_age` old.
    pub(crate) async fn runners(
        &self,
        r: &Resolved<'_>,
        max_age: Duration,
    ) -> Result<Fetched<RunnerList>, ForgejoError> {
        self.runners_cell(&r.scope_key)
            .get(max_age, r.instance.client.list_runners(r.version, &r.scope))
            .await
    }

    /// Looks up by id (at most [`MAX_LOOKUPS`] per pass) our active runners that a paged
    /// listing did not show: the rows found, and the ids Forgejo no longer knows (404). A lookup
    /// that fails proves nothing: that runner stays unknown for this pass.
    async fn look_up(&self, r: &Resolved<'_>, ids: &[i64]) -> (Vec<Runner>, BTreeSet<i64>) {
        let (mut found, mut gone) = (Vec::new(), BTreeSet::new());
        for id in ids.iter().take(MAX_LOOKUPS) {
            match r.instance.client.get_runner(r.version, &r.scope, *id).await {
                Ok(Some(row)) => found.push(row),
                Ok(None) => {
                    gone.insert(*id);
                }
                Err(e) => {
                    tracing::debug!(runner_id = id, error = %e, "could not look up a Forgejo runner");
                }
            }
        }
        (found, gone)
    }

    /// Drops the cached runner listing of the scope (after a create or delete).
    pub(crate) async fn expire_runners(&self, r: &Resolved<'_>) {
        self.runners_cell(&r.scope_key).expire().await;
    }

    /// The scope's registration token (token path), cached for `token_ttl`.
    pub(crate) async fn registration_token(&self, r: &Resolved<'_>) -> Result<SecretValue, ForgejoError> {
        let got = self
            .tokens
            .shared(&r.scope_key)
            .get(
                self.opts.token_ttl,
                r.instance.client.registration_token(&r.scope),
            )
            .await?;
        self.report_cache();
        Ok((*got.value).clone())
    }

    /// Runs `f` on the group's book (created empty on first use).
    pub(crate) fn with_book<T>(&self, key: &GroupKey, f: impl FnOnce(&mut GroupBook) -> T) -> T {
        match self.books.lock() {
            Ok(mut m) => f(m.entry(key.clone()).or_default()),
            // A poisoned map loses the bookkeeping of one pass, never more.
            Err(_) => f(&mut GroupBook::default()),
        }
    }

    async fn observe_inner(&self, ctx: &GroupContext, refs: &[RunnerRef]) -> Result<ForgeView, ForgejoError> {
        let r = self.resolve(ctx).await?;
        let jobs = self.jobs(&r).await?;
        let jobs_listing = Listing {
            rows: &jobs.value,
            at: jobs.at,
        };
        let now = Instant::now();
        let mut versions = runner_versions::of_image(&ctx.group.spec);
        let seen = match r.mode {
            Mode::Ephemeral => {
                let runners = self.runners(&r, r.interval).await?;
                let listed = &runners.value;
                // A paged listing may have skipped live runners (its order shifts as runners
                // call in): ask for the missing ones by id before calling any of them gone.
                let (found, gone) = if listed.whole {
                    (Vec::new(), BTreeSet::new())
                } else {
                    self.look_up(&r, &observe::unlisted_ids(refs, &listed.rows)).await
                };
                let mut rows: Cow<'_, [Runner]> = Cow::Borrowed(&listed.rows);
                if !found.is_empty() {
                    rows.to_mut().extend(found);
                }
                runner_versions::report_listed(&mut versions, refs, &rows);
                let graces = Graces {
                    offline: self.opts.offline_grace,
                    ghost: self.opts.ghost_grace,
                };
                self.with_book(&ctx.key, |book| {
                    observe::view_v15(
                        observe::Group {
                            name: &ctx.key.name,
                            claim: &r.claim,
                        },
                        book,
                        refs,
                        jobs_listing,
                        RunnerRows {
                            rows: &rows,
                            at: runners.at,
                            whole: listed.whole,
                            gone: &gone,
                        },
                        graces,
                        now,
                    )
                })
            }
            Mode::RegistrationToken => self.with_book(&ctx.key, |book| {
                observe::view_token(&r.claim, book, refs, jobs_listing, now)
            }),
        };
        // This pass's listings and book are cached by now.
        self.report_cache();
        // Forgejo's job listing carries no queue time: only the stages from first seen on.
        // Jobs `waiting_jobs` does not count (done by a runner the listing predates, or held
        // back) are left out: the planner makes a runner of the class each listed job wants,
        // and a runner of a class is bound only to a free job of its class.
        let waiting = self.with_book(&ctx.key, |book| {
            observe::waiting(&jobs.value, &r.claim)
                .into_iter()
                .filter(|j| !book.discounted(&j.handle, jobs.at, now))
                .map(|j| WaitingJob {
                    id: j.id.to_string(),
                    queued_at: None,
                    labels: j.runs_on.clone(),
                })
                .collect()
        });
        Ok(ForgeView {
            waiting,
            waiting_jobs: seen.waiting_jobs,
            runners: seen.runners,
            ghosts: seen.ghosts,
            // Runner states come from listings, not as they happen: an idle-looking runner may
            // have just taken a job, so surplus runners leave through the idle timeout.
            complete: false,
            facts: ForgeFacts {
                scale_set_id: None,
                forge_version: Some(r.raw_version),
            },
            // Bound runners carry their job from creation on; Forgejo sends no rate-limit
            // headers.
            job_identities: BTreeMap::new(),
            budget: None,
            stranded: seen.stranded,
            // Core's ledger nets runners bound to no job that succeeded after the jobs listing;
            // bound ones are netted by their handle here (`accounted`). Only a success dates a
            // take: 11–14 guess busy runners from the count of running jobs.
            listed_at: Some(jobs.at),
            accounted: seen.accounted,
            takes_by_success_only: true,
            // The jobs listing is filtered by the group's and its classes' labels on the server
            // (`labels` query, `GetActionRunJobs` in `routers/api/v1/shared/runners.go`): jobs
            // no group matches are never in it. Naming them needs an unfiltered listing per scope, not made yet.
            unmatched: Vec::new(),
            // Forgejo 11–14 list no runners: the image alone tells a release.
            versions,
        })
    }
}

// No `rerun_job` (`Unsupported`): no Forgejo, v11 to v17-dev, has a re-run API route; only its UI.
/// What [`Forge::describe`] and the sessions ([`crate::session::Session`]) are made of;
/// tests call them directly.
impl ForgejoForge {
    /// What the forge refuses in `spec` (the error side of [`Forge::describe`]).
    pub fn validate(&self, spec: &RunnerGroupSpec) -> Vec<SpecViolation> {
        let mut out = spec
            .forgejo
            .as_ref()
            .map(crate::validate::validate_forgejo)
            .unwrap_or_default();
        out.extend(crate::validate::validate_container_mode(spec));
        out.extend(crate::validate::validate_docker_daemon(spec));
        out.extend(crate::validate::validate_class_docker_daemon(spec));
        out
    }

    /// What `spec` names in the cluster ([`ForgeProfile::cluster_refs`]).
    pub fn cluster_refs(&self, spec: &RunnerGroupSpec) -> ClusterRefs {
        let fj = spec.forgejo.as_ref();
        ClusterRefs {
            credentials_secret: fj.map(|f| f.credentials.clone()).unwrap_or_default(),
            ca_bundle_config_map: fj
                .and_then(|f| f.ca_bundle_config_map.clone())
                .filter(|n| !n.is_empty()),
            // Forgejo has no job-level webhook: polling only.
            webhook_secret: None,
        }
    }

    /// The URLs of `spec` the operator connects to ([`ForgeProfile::outbound_urls`]).
    pub fn outbound_urls(&self, spec: &RunnerGroupSpec) -> Vec<OutboundUrl> {
        let Some(fj) = spec.forgejo.as_ref() else {
            return Vec::new();
        };
        let mut urls = vec![OutboundUrl {
            field: "spec.forgejo.url",
            url: fj.url.clone(),
        }];
        urls.extend(fj.proxy_url.iter().map(|p| OutboundUrl {
            field: "spec.forgejo.proxyUrl",
            url: p.clone(),
        }));
        urls
    }

    /// How long a group may go without a pass ([`ForgeProfile::resync_interval`]).
    pub fn resync_interval(&self, spec: &RunnerGroupSpec) -> Duration {
        let seconds = spec.forgejo.as_ref().map_or(
            DEFAULT_FORGEJO_POLL_INTERVAL_SECONDS,
            ForgejoSpec::poll_interval_seconds,
        );
        Duration::from_secs(u64::from(seconds))
    }

    /// The default pod of one new runner ([`ForgeSession::runner_pod`]).
    pub fn default_runner_pod(
        &self,
        group: &RunnerGroup,
        _runner_name: &str,
        secret_name: &str,
        credentials: &RunnerCredentials,
        class: Option<&forgerunner_core::crd::RunnerClass>,
    ) -> PodSpec {
        let own = group
            .spec
            .forgejo
            .as_ref()
            .map(|f| f.labels.clone())
            .unwrap_or_default();
        // The group's labels and the class's: `one-job --label` (15+) or `register --labels`
        // (11–14) declare them.
        let labels = crate::classes::runner_labels(&own, class);
        let credentials = crate::pod::with_labels(credentials, &labels);
        let mut pod =
            crate::pod::default_runner_pod(&labels, group.spec.image.as_deref(), secret_name, &credentials);
        crate::pod::apply_trust(&group.spec, &mut pod);
        crate::pod::apply_config_file(&group.spec, &mut pod);
        crate::cache::apply_cache(group, &mut pod);
        // Container mode and the restricted Pod Security settings.
        crate::pod_security::finish_pod(&mut pod, &group.spec);
        pod
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
        Ok(self.credentials_inner(group, runner_name, None).await?)
    }

    /// Forgejo 15 binds the runner to a waiting job of its class (see `create_ephemeral`).
    pub async fn runner_credentials_of_class(
        &self,
        group: &GroupContext,
        runner_name: &str,
        class: Option<&forgerunner_core::crd::RunnerClass>,
    ) -> Result<RunnerCredentials, ForgeError> {
        Ok(self.credentials_inner(group, runner_name, class).await?)
    }

    /// Deregisters a runner ([`ForgeSession::deregister`]).
    pub async fn remove_runner(
        &self,
        group: &GroupContext,
        runner: &RunnerRef,
    ) -> Result<RemoveOutcome, ForgeError> {
        Ok(self.remove_inner(group, runner).await?)
    }

    /// Deletes the group's forge-side resources ([`ForgeSession::delete_group`]).
    pub async fn shutdown(&self, group: &GroupContext) -> Result<(), ForgeError> {
        self.release_group(&group.key);
        Ok(())
    }

    /// Stops the group's background work and forgets its state ([`ForgeSession::close`]).
    pub async fn release(&self, key: &GroupKey) {
        self.release_group(key);
    }

    /// What a failed cleanup may leave ([`ForgeProfile::cleanup_hint`]).
    pub fn cleanup_hint(&self, spec: &RunnerGroupSpec) -> String {
        // Forgejo's own cleanup of offline runners (`services/cron/tasks_actions.go`
        // `registerOfflineRunnersCleanup`) exists from 12, is off by default, and by default
        // deletes only instance-wide runners (`GLOBAL_SCOPE_ONLY`); 11 has none, and there is no
        // runner DELETE in the API before 15.
        let global = spec
            .forgejo
            .as_ref()
            .is_some_and(|f| f.scope == ForgejoScope::Global);
        let scope_setting = if global {
            ""
        } else {
            " and GLOBAL_SCOPE_ONLY = false (org, user and repository runners are kept otherwise)"
        };
        format!(
            "runners named after the group may stay registered at Forgejo: delete them under \
             Settings → Actions → Runners of the group's scope. On Forgejo 12 or newer the \
             [cron.cleanup_offline_runners] job can remove offline runners after a day: set \
             ENABLED = true{scope_setting}; Forgejo 11 has no such job"
        )
    }

    /// forgejo-runner's own `cache-server` ([`crate::cache`]).
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
impl Forge for ForgejoForge {
    fn kind(&self) -> ForgeKind {
        ForgeKind::Forgejo
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

    async fn shutdown_all(&self) {
        // A new leader starts from nothing: forget every group, listing, token and client.
        clear(&self.books);
        self.jobs.clear();
        self.runners.clear();
        self.tokens.clear();
        self.instances.clear();
        clear(&self.users);
        self.report_cache();
    }
}
