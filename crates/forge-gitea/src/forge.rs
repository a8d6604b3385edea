//! `GiteaForge`: the `Forge` implementation for Gitea 1.25+.
//!
//! Poll-style: `demand` reads the queued jobs at the group's scope and counts those whose
//! `runs-on` its labels satisfy. Listings are shared: one jobs listing and one runner listing
//! per (instance URL, scope, token) per poll interval, however many groups use them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use forgerunner_core::crd::{ForgeKind, GiteaSpec, RunnerGroupSpec};
use forgerunner_core::forge::{
    Forge, ForgeProfile, ForgeSession, GroupContext, GroupKey, ReconcileTrigger, SecretValue,
};
use forgerunner_core::metrics::{Metrics, UnmatchedBook};
use forgerunner_core::validate::SpecViolation;
use forgerunner_core::webhook::RecentDeliveries;
use forgerunner_http::{Cell, Connection, Fetched, InstanceKey, ListingMemory, Pool, entries_of};

use crate::client::{ClientOptions, GITEA, GiteaClient, RunnerListing};
use crate::error::GiteaError;
use crate::forge_webhook::AnnouncedState;
use crate::labels::ServedLabels;
use crate::pod::REGISTRATION_TOKEN_KEY;
use crate::scope::{Routes, Scope};
use crate::session::GiteaSession;
use crate::types::WorkflowJob;
use crate::unmatched::Scans;
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

/// What the webhook path needs to know about a group seen by a snapshot.
#[derive(Clone)]
pub(crate) struct GroupInfo {
    pub(crate) scope: Scope,
    pub(crate) labels: ServedLabels,
    /// The secret that verifies deliveries for this group, if the spec names a readable one.
    pub(crate) webhook_secret: Option<SecretValue>,
    pub(crate) listing: ListingKey,
}

/// A group's settings, checked and tied to its instance.
pub(crate) struct Resolved<'a> {
    pub(crate) spec: &'a GiteaSpec,
    pub(crate) scope: Scope,
    /// The group's labels and, per class, the class runners' ([`ServedLabels`]).
    pub(crate) labels: ServedLabels,
    pub(crate) instance: Arc<Instance>,
    pub(crate) listing: ListingKey,
    pub(crate) interval: Duration,
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
            tokens: Pool::default(),
            groups: Mutex::default(),
            announced: Mutex::default(),
            deliveries: RecentDeliveries::default(),
            unmatched: UnmatchedBook::new("gitea"),
            unmatched_scans: Scans::default(),
        }))
    }

    pub(crate) fn resolve<'a>(&self, ctx: &'a GroupContext) -> Result<Resolved<'a>, GiteaError> {
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
    pub(crate) fn check_fixed_token(ctx: &GroupContext, r: &Resolved<'_>) -> Result<(), GiteaError> {
        if r.scope == Scope::Global || ctx.credentials.get(REGISTRATION_TOKEN_KEY).is_none() {
            return Ok(());
        }
        Err(GiteaError::FixedTokenOutsideGlobal {
            secret: ctx.credentials.secret_name.clone(),
            scope: r.scope.to_string(),
        })
    }

    /// Checks (and caches) the server version and, for user scope, the token's login.
    pub(crate) async fn ensure_ready(&self, r: &Resolved<'_>) -> Result<(GiteaVersion, String), GiteaError> {
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
    pub(crate) async fn jobs(
        &self,
        r: &Resolved<'_>,
    ) -> Result<(Arc<Vec<WorkflowJob>>, Instant), GiteaError> {
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
    pub(crate) fn runners_cell(&self, key: &ListingKey) -> Arc<Cell<RunnerListing>> {
        self.runners.shared_or(key, || {
            Cell::charged(self.listing_memory.clone(), |l| entries_of(&l.runners))
        })
    }

    /// The scope's runner listing, at most `max_age` old, and when its fetch started.
    pub(crate) async fn runners(
        &self,
        r: &Resolved<'_>,
        max_age: Duration,
    ) -> Result<Fetched<RunnerListing>, GiteaError> {
        let cell = self.runners_cell(&r.listing);
        cell.get(max_age, r.instance.client.list_runners(&r.scope)).await
    }

    /// Whether a fresh jobs listing shows runner `name` working on a job.
    pub(crate) async fn works(&self, r: &Resolved<'_>, name: &str) -> Result<bool, GiteaError> {
        let running = r.instance.client.list_jobs(&r.scope, &["in_progress"]).await?;
        Ok(running.iter().any(|j| j.runner_name == name))
    }
}

#[async_trait]
impl Forge for GiteaForge {
    fn kind(&self) -> ForgeKind {
        ForgeKind::Gitea
    }

    fn describe(&self, spec: &RunnerGroupSpec) -> Result<ForgeProfile, Vec<SpecViolation>> {
        crate::profile::describe(spec)
    }

    fn open(&self, key: &GroupKey) -> Box<dyn ForgeSession> {
        Box::new(GiteaSession::new(self.clone(), key.clone()))
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
