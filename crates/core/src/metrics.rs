//! Prometheus metrics shared by the reconciler and the forge backends.
//!
//! Labels are bounded: forge kind, operation names and error categories are closed sets; group
//! names appear only on the per-group runner gauge, whose cardinality is the number of groups.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub mod classes;
pub mod group;
pub mod job;
pub mod series_book;
pub mod unmatched;
pub mod versions;

use crate::budget::BudgetMetrics;
pub use group::{GroupGauges, GroupLabels, GroupMetrics, Stage};
pub use job::{JobLabels, JobSeriesBook};
pub use unmatched::{NamespaceLabels, UnmatchedBook};

/// Outcome of one forge request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, EncodeLabelValue)]
pub enum Outcome {
    /// 2xx.
    Success,
    /// 401/403.
    Unauthorized,
    /// 404.
    NotFound,
    /// 409.
    Conflict,
    /// 429 or a secondary rate limit.
    RateLimited,
    /// 5xx.
    ServerError,
    /// Connection failure or timeout.
    Transport,
    /// A 2xx with a body we could not read.
    BadResponse,
    /// Any other 4xx.
    ClientError,
}

/// Labels of forge request metrics.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ForgeRequestLabels {
    /// The forge (`spec.forge`).
    pub forge: &'static str,
    /// A fixed operation name such as `get_message` or `list_jobs`.
    pub operation: &'static str,
    /// How it ended.
    pub outcome: Outcome,
}

/// Labels of reconcile metrics.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// The forge (`spec.forge`).
    pub forge: &'static str,
}

/// Labels of reconcile error metrics.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ReconcileErrorLabels {
    /// The forge (`spec.forge`).
    pub forge: &'static str,
    /// Error category (`ErrorCategory::as_str`).
    pub category: &'static str,
}

/// Labels of the per-group runner gauge.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RunnerLabels {
    /// The forge (`spec.forge`).
    pub forge: &'static str,
    /// `namespace/name` of the group.
    pub group: String,
    /// `idle`, `busy`, `pending` or `failed`.
    pub state: &'static str,
}

/// Labels of the per-forge runner lifecycle counters.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ForgeLabels {
    /// The forge (`spec.forge`).
    pub forge: &'static str,
}

/// Labels of `forgerunner_jobs_rerun_total`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RerunLabels {
    /// The forge (`spec.forge`).
    pub forge: &'static str,
    /// How the cluster killed the runner ([`crate::runner_pod::disruption::Disruption`]).
    pub reason: &'static str,
    /// What came of it ([`crate::reconcile::rerun::RerunResult`]).
    pub outcome: &'static str,
}

/// Labels of webhook delivery counters.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct WebhookLabels {
    /// The forge the delivery's path names (`gitea`, …).
    pub forge: &'static str,
    /// A fixed outcome name: `accepted`, `duplicate`, `unauthorized`, `rejected`, `forwarded`,
    /// `no_leader`, `shed`, `timeout`.
    pub outcome: &'static str,
}

/// Labels of the forge cache gauge.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct CacheLabels {
    /// The forge (`spec.forge`).
    pub forge: &'static str,
    /// What is cached: `clients`, `listings`, `tokens` or `groups` (per-group state).
    pub kind: &'static str,
}

/// All forgerunner metrics, registered under the `forgerunner` prefix.
#[derive(Debug)]
pub struct Metrics {
    /// Reconciles run.
    pub reconciles: Family<ReconcileLabels, Counter>,
    /// Reconcile failures by category.
    pub reconcile_errors: Family<ReconcileErrorLabels, Counter>,
    /// Reconcile duration in seconds.
    pub reconcile_duration: Family<ReconcileLabels, Histogram>,
    /// Reconciles put off because their forge instance or namespace had all its turns taken
    /// (`reconcile::fair_share`).
    pub reconciles_deferred: Family<ReconcileLabels, Counter>,
    /// Forge requests by forge, operation and outcome.
    pub forge_requests: Family<ForgeRequestLabels, Counter>,
    /// Forge request latency in seconds.
    pub forge_request_duration: Family<ForgeRequestLabels, Histogram>,
    /// Runners by group and state.
    pub runners: Family<RunnerLabels, Gauge>,
    /// Runner Jobs created.
    pub runners_created: Family<ForgeLabels, Counter>,
    /// Runner Jobs removed.
    pub runners_removed: Family<ForgeLabels, Counter>,
    /// Jobs seen by the forge as started on our runners.
    pub jobs_started: Family<JobLabels, Counter>,
    /// Jobs completed on our runners.
    pub jobs_completed: Family<JobLabels, Counter>,
    /// Seconds from a job being queued at the forge (or, where the forge gives no queue time,
    /// first seen) to its runner Job being created.
    pub job_queue_to_runner: Family<GroupLabels, Histogram>,
    /// Webhook deliveries by forge and outcome.
    pub webhook_deliveries: Family<WebhookLabels, Counter>,
    /// Webhook signature (HMAC) checks computed; bounded per delivery whatever the number of
    /// webhook Secrets.
    pub webhook_signature_checks: Family<ForgeLabels, Counter>,
    /// Entries in a forge backend's in-memory maps keyed by what groups name (clients per CA
    /// and proxy, tokens, listings, per-group state); back to 0 when no group uses the forge.
    pub forge_cache_entries: Family<CacheLabels, Gauge>,
    /// Entries (items and labels) held by the cached Gitea and Forgejo listings together,
    /// against the process-wide budget `listingCacheEntries`.
    pub listing_cache_entries: Gauge,
    /// Cached listings dropped to keep the listings within `listingCacheEntries`.
    pub listing_cache_evictions: Counter,
    /// Listings kept although alone larger than what the budget had left with every other
    /// listing dropped (each is still within its own cap).
    pub listing_cache_over_budget: Counter,
    /// Jobs waiting in a scope that no group's labels match, per namespace ([`unmatched`]).
    pub unmatched_waiting_jobs: Family<NamespaceLabels, Gauge>,
    /// Jobs whose runner the cluster killed, by how and by what came of re-running them.
    pub jobs_rerun: Family<RerunLabels, Counter>,
    /// 1 while this replica leads (it holds the lease, or runs without an election), else 0:
    /// `max` over the replicas is 0 when no replica reconciles.
    pub leader: Gauge,
    /// Per-group ARC gauges and stage histograms ([`group`]).
    pub group: GroupMetrics,
    // --- API budget (issue 13, identity/budget half): kept in its own module.
    /// Rate-limit gauges per forge and credential ([`crate::budget`]).
    pub budget: BudgetMetrics,
    /// Whether the job counters carry the job's repository and workflow (`metrics.jobLabels`;
    /// off by default, as each adds a series per repository and workflow).
    pub job_identity_labels: bool,
}

fn latency_histogram() -> Histogram {
    // 1 ms … ~65 s
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

impl Metrics {
    /// Creates the metrics and registers them in `registry` under `forgerunner_`.
    pub fn register(registry: &mut Registry) -> Metrics {
        let m = Metrics::default();
        let r = registry.sub_registry_with_prefix("forgerunner");
        r.register("reconciles", "RunnerGroup reconciles run", m.reconciles.clone());
        r.register(
            "reconcile_errors",
            "RunnerGroup reconcile failures by category",
            m.reconcile_errors.clone(),
        );
        r.register(
            "reconciles_deferred",
            "RunnerGroup reconciles put off because their forge instance or namespace used its share of the reconcile slots",
            m.reconciles_deferred.clone(),
        );
        r.register(
            "reconcile_duration_seconds",
            "RunnerGroup reconcile duration",
            m.reconcile_duration.clone(),
        );
        r.register(
            "forge_requests",
            "Requests to forges by operation and outcome",
            m.forge_requests.clone(),
        );
        r.register(
            "forge_request_duration_seconds",
            "Latency of requests to forges",
            m.forge_request_duration.clone(),
        );
        r.register("runners", "Runners by group and state", m.runners.clone());
        r.register(
            "runners_created",
            "Runner Jobs created",
            m.runners_created.clone(),
        );
        r.register(
            "runners_removed",
            "Runner Jobs removed",
            m.runners_removed.clone(),
        );
        r.register(
            "jobs_started",
            "Jobs started on forgerunner runners",
            m.jobs_started.clone(),
        );
        r.register(
            "jobs_completed",
            "Jobs completed on forgerunner runners",
            m.jobs_completed.clone(),
        );
        r.register(
            "job_queue_to_runner_seconds",
            "Seconds from a job being queued to its runner Job being created",
            m.job_queue_to_runner.clone(),
        );
        r.register(
            "webhook_deliveries",
            "Webhook deliveries by forge and outcome",
            m.webhook_deliveries.clone(),
        );
        r.register(
            "webhook_signature_checks",
            "Webhook signature checks (HMAC computations)",
            m.webhook_signature_checks.clone(),
        );
        r.register(
            "forge_cache_entries",
            "Entries in a forge backend's caches by kind (clients, listings, tokens, groups)",
            m.forge_cache_entries.clone(),
        );
        r.register(
            "listing_cache_entries",
            "Entries (items and labels) held by cached Gitea and Forgejo listings, process-wide",
            m.listing_cache_entries.clone(),
        );
        r.register(
            "listing_cache_evictions",
            "Cached listings dropped to stay within the listing cache budget",
            m.listing_cache_evictions.clone(),
        );
        r.register(
            "listing_cache_over_budget",
            "Listings kept although alone larger than the room left in the listing cache budget",
            m.listing_cache_over_budget.clone(),
        );
        r.register(
            "unmatched_waiting_jobs",
            "Jobs waiting in a scope watched by the namespace's groups that no group's labels match",
            m.unmatched_waiting_jobs.clone(),
        );
        r.register(
            "jobs_rerun",
            "Jobs whose runner the cluster killed, by disruption reason and re-run outcome",
            m.jobs_rerun.clone(),
        );
        r.register(
            "leader",
            "1 while this replica leads and reconciles RunnerGroups, else 0",
            m.leader.clone(),
        );
        m.group.register(r);
        m.budget.register(r);
        m
    }

    /// Sets the forge cache gauge of `forge` to `entries` per kind.
    pub fn set_cache_entries(&self, forge: &'static str, entries: &[(&'static str, usize)]) {
        for (kind, n) in entries {
            self.forge_cache_entries
                .get_or_create(&CacheLabels { forge, kind })
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
    }

    /// Drops every per-group gauge: a process that stops leading exports none, so dashboards
    /// that sum across pods count each group once.
    pub fn clear_group_gauges(&self) {
        self.runners.clear();
        self.unmatched_waiting_jobs.clear();
        self.group.clear_gauges();
    }

    /// Records one forge request.
    pub fn observe_forge_request(&self, labels: ForgeRequestLabels, seconds: f64) {
        self.forge_requests.get_or_create(&labels).inc();
        self.forge_request_duration
            .get_or_create(&labels)
            .observe(seconds);
    }
}

impl Default for Metrics {
    /// Unregistered metrics, for tests and for backends used without a registry.
    fn default() -> Self {
        Metrics {
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Family::new_with_constructor(latency_histogram),
            reconciles_deferred: Family::default(),
            forge_requests: Family::default(),
            forge_request_duration: Family::new_with_constructor(latency_histogram),
            runners: Family::default(),
            runners_created: Family::default(),
            runners_removed: Family::default(),
            jobs_started: Family::default(),
            jobs_completed: Family::default(),
            job_queue_to_runner: Family::new_with_constructor(group::stage_histogram),
            webhook_deliveries: Family::default(),
            webhook_signature_checks: Family::default(),
            forge_cache_entries: Family::default(),
            listing_cache_entries: Gauge::default(),
            listing_cache_evictions: Counter::default(),
            listing_cache_over_budget: Counter::default(),
            unmatched_waiting_jobs: Family::default(),
            jobs_rerun: Family::default(),
            leader: Gauge::default(),
            group: GroupMetrics::default(),
            budget: BudgetMetrics::default(),
            job_identity_labels: false,
        }
    }
}
