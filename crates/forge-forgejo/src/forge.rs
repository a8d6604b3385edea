//! `ForgejoForge`: the `Forge` implementation for Forgejo 11+.
//!
//! Poll-style: a snapshot reads the waiting jobs at the group's scope with the group's label
//! names as Forgejo's server-side filter. Listings are shared: one jobs listing per (instance,
//! scope, labels, token) and one runner listing per (instance, scope, token) per poll
//! interval, however many groups use them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use forgerunner_core::crd::{ForgeKind, ForgejoSpec, RunnerGroupSpec};
use forgerunner_core::forge::{
    Forge, ForgeProfile, ForgeSession, GroupContext, GroupKey, ReconcileTrigger, SecretValue,
};
use forgerunner_core::metrics::Metrics;
use forgerunner_core::validate::SpecViolation;
use forgerunner_http::pool::clear;
use forgerunner_http::{Cell, Connection, Fetched, InstanceKey, ListingMemory, Pool, entries_of};

use crate::classes::Claim;
use crate::client::{ClientOptions, FORGEJO, ForgejoClient};
use crate::error::ForgejoError;
use crate::scope::{Routes, Scope};
use crate::session::ForgejoSession;
use crate::types::{RunJob, RunnerList};
use crate::version::{ForgejoVersion, Mode, VersionError};

mod release;

/// Tunables of the backend; the defaults suit production.
#[derive(Clone, Debug)]
pub struct ForgejoOptions {
    /// HTTP client settings.
    pub client: ClientOptions,
    /// How long a checked server version is trusted.
    pub version_ttl: Duration,
    /// How long a fetched registration token is reused (reading does not rotate it).
    pub token_ttl: Duration,
    /// A runner bound to a job that core had seen connected at least this long
    /// (`RunnerRef::connected_since`) when it was removed idle had time to take its job: Forgejo withholds the job, and the removal says so
    /// (`RemoveOutcome::Withheld`; core backs the job off).
    pub held_evidence: Duration,
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
            // forgejo-runner polls every 2 s by default (`FetchInterval`, `config.go` `New`):
            // a minute of polling is thirty chances to get an available job.
            held_evidence: Duration::from_secs(60),
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
pub struct ForgejoForge(Arc<ForgejoShared>);

/// What a [`ForgejoForge`] and the sessions it opens share.
pub struct ForgejoShared {
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
    /// Per group, the listing it uses (and with it its scope and instance).
    users: Mutex<HashMap<GroupKey, JobsKey>>,
}

impl std::ops::Deref for ForgejoForge {
    type Target = ForgejoShared;

    fn deref(&self) -> &ForgejoShared {
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
        ForgejoForge(Arc::new(ForgejoShared {
            listing_memory,
            metrics,
            opts,
            trigger,
            instances: Pool::default(),
            jobs: Pool::default(),
            runners: Pool::default(),
            tokens: Pool::default(),
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
}

#[async_trait]
impl Forge for ForgejoForge {
    fn kind(&self) -> ForgeKind {
        ForgeKind::Forgejo
    }

    fn describe(&self, spec: &RunnerGroupSpec) -> Result<ForgeProfile, Vec<SpecViolation>> {
        crate::profile::describe(spec)
    }

    fn open(&self, key: &GroupKey) -> Box<dyn ForgeSession> {
        Box::new(ForgejoSession::new(self.clone(), key.clone()))
    }

    async fn shutdown_all(&self) {
        // A new leader starts from nothing: forget every group, listing, token and client.
        self.jobs.clear();
        self.runners.clear();
        self.tokens.clear();
        self.instances.clear();
        clear(&self.users);
        self.report_cache();
    }
}
