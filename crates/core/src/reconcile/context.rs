//! Shared state of one controller: clients, forges, the Job store and per-group memory.

use crate::schedule::CalendarClock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kube::Client;
use kube::runtime::reflector::Store;
use tokio::sync::Semaphore;

use super::ForgeSet;
use super::event_writer::EventWriter;
use super::fair_share::FairShare;
use super::ledger::Ledger;
use crate::fence::Fence;
use crate::forge::GroupKey;
use crate::forge_hosts::ForgeHostAllowlist;
use crate::metrics::Metrics;
use crate::runner_job::ObservedJob;

/// First retry delay after a failed reconcile.
pub const BACKOFF_BASE: Duration = Duration::from_secs(1);
/// Longest retry delay after repeated failures.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// Retry delay for errors only a person can fix (Secrets are not watched, so we poll).
pub const USER_ACTION_RETRY: Duration = Duration::from_secs(60);

/// Share of a retry delay that jitter may add or take away (±20 %).
pub const BACKOFF_JITTER: f64 = 0.2;

/// Exponential backoff for the `failures`-th consecutive failure (1-based): 1 s, 2 s, 4 s, … 5 min.
pub fn backoff_delay(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    BACKOFF_BASE.saturating_mul(1u32 << exp).min(BACKOFF_MAX)
}

/// `delay` moved by up to ±[`BACKOFF_JITTER`] of itself, `unit` (in `[0, 1)`) picking where:
/// 0 gives the shortest, 0.5 the delay itself. Groups that failed together (the forge or the API
/// server was down) then retry spread out instead of all at the same instant.
pub fn jittered(delay: Duration, unit: f64) -> Duration {
    let unit = if unit.is_finite() {
        unit.clamp(0.0, 1.0)
    } else {
        0.5
    };
    let factor = 1.0 - BACKOFF_JITTER + 2.0 * BACKOFF_JITTER * unit;
    delay.mul_f64(factor)
}

/// [`jittered`] with a random `unit`.
pub fn with_jitter(delay: Duration) -> Duration {
    jittered(delay, rand::random::<f64>())
}

/// Per-group memory that only needs to live as long as the process.
#[derive(Debug, Default)]
pub struct GroupMemory {
    /// Consecutive failed reconciles (drives the backoff); the controller's error policy counts
    /// them outside any pass.
    pub failures: u32,
    /// Progress of the cleanup of a deleted group.
    pub cleanup: Option<super::cleanup::CleanupState>,
    /// Events written lately, so a repeat is not written again at once.
    pub recent_events: super::events::RecentEvents,
    /// The group's books; a pass takes them whole ([`Context::lease_ledger`]).
    pub ledger: Ledger,
}

/// Everything a reconcile needs; one per watched namespace (each has its own Job store).
pub struct Context {
    /// Kubernetes client.
    pub client: Client,
    /// The enabled forges.
    pub forges: Arc<dyn ForgeSet>,
    /// Shared metrics.
    pub metrics: Arc<Metrics>,
    /// Writes the groups' Events (their repeats are filtered and counted per group, in
    /// [`GroupMemory::recent_events`]).
    pub recorder: EventWriter,
    /// Runner Jobs of this operator, from the controller's reflector.
    pub jobs: Store<ObservedJob>,
    /// Whether `jobs` has listed once. Until then an empty store means "not known yet", not
    /// "no runners": planning on it would create runners beyond `maxRunners` after a restart.
    pub jobs_synced: Arc<std::sync::atomic::AtomicBool>,
    /// Hosts the forge URLs of a group may point at (empty: any).
    pub forge_hosts: ForgeHostAllowlist,
    /// Checked before every forge write: a deposed leader must not register or remove runners.
    pub fence: Fence,
    /// Runner creations in flight at once over every group this controller runs, shared by
    /// the contexts of all watched namespaces ([`Context::with_create_permits`]).
    pub create_permits: Arc<Semaphore>,
    /// The ClusterRoles the runner RBAC of a group binds (config `runnerHooks`); `None` when this
    /// installation grants no runner container hooks.
    pub runner_hooks: Option<super::runner_rbac::RunnerHooks>,
    /// Turns per forge instance and namespace, shared like the reconcile slots
    /// ([`Context::with_fair_share`]).
    pub fair_share: Arc<FairShare>,
    /// Longest one forge call of a pass may take ([`FORGE_CALL_DEADLINE`]).
    pub forge_deadline: Duration,
    /// The clock `spec.schedules` are read on.
    pub calendar: CalendarClock,
    memory: Mutex<HashMap<GroupKey, GroupMemory>>,
}

/// Runner creations in flight at once in the whole process, over all groups. Every request in
/// flight holds an HTTP connection, and idle connections stay pooled: with many groups scaling
/// up together, a per-group limit alone opened thousands of connections and most of the
/// operator's memory went to their buffers.
pub const PROCESS_CREATE_PARALLELISM: usize = 32;

/// Longest one forge call of a pass (a listing, a registration, a removal) may take. The
/// clients' own timeouts bound each request; this bounds the call as a whole, retries and
/// pages included, so a forge that trickles its answers cannot hold a reconcile slot for
/// longer.
pub const FORGE_CALL_DEADLINE: Duration = Duration::from_secs(60);

/// Reconcile slots a context assumes when none are given ([`Context::with_fair_share`]).
const DEFAULT_SLOTS: usize = 16;

impl Context {
    /// A context over the given clients and store.
    pub fn new(
        client: Client,
        forges: Arc<dyn ForgeSet>,
        metrics: Arc<Metrics>,
        recorder: EventWriter,
        jobs: Store<ObservedJob>,
        jobs_synced: Arc<std::sync::atomic::AtomicBool>,
    ) -> Context {
        Context {
            client,
            forges,
            metrics,
            recorder,
            jobs,
            jobs_synced,
            forge_hosts: ForgeHostAllowlist::default(),
            fence: Fence::open(),
            create_permits: Arc::new(Semaphore::new(PROCESS_CREATE_PARALLELISM)),
            runner_hooks: None,
            fair_share: Arc::new(FairShare::for_slots(DEFAULT_SLOTS)),
            forge_deadline: FORGE_CALL_DEADLINE,
            calendar: CalendarClock::system(),
            memory: Mutex::new(HashMap::new()),
        }
    }

    /// The context with the operator's forge host allowlist.
    #[must_use]
    pub fn with_forge_hosts(mut self, forge_hosts: ForgeHostAllowlist) -> Context {
        self.forge_hosts = forge_hosts;
        self
    }

    /// The context with the ClusterRoles a group's runner RBAC binds (config `runnerHooks`).
    #[must_use]
    pub fn with_runner_hooks(mut self, hooks: Option<super::runner_rbac::RunnerHooks>) -> Context {
        self.runner_hooks = hooks;
        self
    }

    /// The same context, writing to the forge only while `fence` is held.
    #[must_use]
    pub fn with_fence(mut self, fence: Fence) -> Context {
        self.fence = fence;
        self
    }

    /// The same context, sharing `permits` for runner creations with other contexts.
    #[must_use]
    pub fn with_create_permits(mut self, permits: Arc<Semaphore>) -> Context {
        self.create_permits = permits;
        self
    }

    /// The same context, reading schedules on `clock`.
    #[must_use]
    pub fn with_calendar_clock(mut self, clock: CalendarClock) -> Context {
        self.calendar = clock;
        self
    }

    /// The same context, sharing `share`'s turns with other contexts.
    #[must_use]
    pub fn with_fair_share(mut self, share: Arc<FairShare>) -> Context {
        self.fair_share = share;
        self
    }

    /// The same context, giving each forge call at most `deadline`.
    #[must_use]
    pub fn with_forge_deadline(mut self, deadline: Duration) -> Context {
        self.forge_deadline = deadline;
        self
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<GroupKey, GroupMemory>> {
        // A panic while holding the lock leaves plain counters behind; keep using them.
        self.memory
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `f` on the memory of `key` (created empty on first use).
    pub fn with_memory<R>(&self, key: &GroupKey, f: impl FnOnce(&mut GroupMemory) -> R) -> R {
        f(self.lock().entry(key.clone()).or_default())
    }

    /// Takes the group's books for one pass; they go back when the lease is dropped, also when
    /// the pass fails or is cancelled.
    pub fn lease_ledger(&self, key: &GroupKey) -> LedgerLease<'_> {
        let ledger = self.with_memory(key, |m| std::mem::take(&mut m.ledger));
        LedgerLease {
            ctx: self,
            key: key.clone(),
            ledger,
        }
    }

    /// Forgets a group (deleted).
    pub fn forget(&self, key: &GroupKey) {
        self.lock().remove(key);
    }

    /// Counts a failure and returns how many the group has had in a row.
    pub fn record_failure(&self, key: &GroupKey) -> u32 {
        self.with_memory(key, |m| {
            m.failures = m.failures.saturating_add(1);
            m.failures
        })
    }

    /// Resets the failure count after a successful reconcile.
    pub fn record_success(&self, key: &GroupKey) {
        self.with_memory(key, |m| m.failures = 0);
    }
}

/// A group's books, taken for one pass ([`Context::lease_ledger`]).
pub struct LedgerLease<'a> {
    ctx: &'a Context,
    key: GroupKey,
    ledger: Ledger,
}

impl std::ops::Deref for LedgerLease<'_> {
    type Target = Ledger;

    fn deref(&self) -> &Ledger {
        &self.ledger
    }
}

impl std::ops::DerefMut for LedgerLease<'_> {
    fn deref_mut(&mut self) -> &mut Ledger {
        &mut self.ledger
    }
}

impl Drop for LedgerLease<'_> {
    fn drop(&mut self) {
        let ledger = std::mem::take(&mut self.ledger);
        self.ctx.with_memory(&self.key, |m| m.ledger = ledger);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_caps() {
        assert_eq!(backoff_delay(1), Duration::from_secs(1));
        assert_eq!(backoff_delay(2), Duration::from_secs(2));
        assert_eq!(backoff_delay(4), Duration::from_secs(8));
        assert_eq!(backoff_delay(9), Duration::from_secs(256));
        assert_eq!(backoff_delay(10), BACKOFF_MAX);
        assert_eq!(backoff_delay(u32::MAX), BACKOFF_MAX);
        assert_eq!(backoff_delay(0), Duration::from_secs(1));
    }

    #[test]
    fn jitter_stays_within_twenty_percent() {
        let d = Duration::from_secs(100);
        assert_eq!(jittered(d, 0.0), Duration::from_secs(80));
        assert_eq!(jittered(d, 0.5), d);
        assert_eq!(jittered(d, 1.0), Duration::from_secs(120));
        // Out-of-range or broken samples never leave the band.
        assert_eq!(jittered(d, -3.0), Duration::from_secs(80));
        assert_eq!(jittered(d, 7.0), Duration::from_secs(120));
        assert_eq!(jittered(d, f64::NAN), d);
        assert_eq!(jittered(Duration::ZERO, 0.9), Duration::ZERO);
        for n in [1, 5, 9, 10, 40] {
            let base = backoff_delay(n);
            for _ in 0..200 {
                let j = with_jitter(base);
                assert!(
                    j >= base.mul_f64(0.8) && j <= base.mul_f64(1.2),
                    "{n}: {j:?} vs {base:?}"
                );
            }
        }
    }

    /// Groups failing together (one outage) must not all retry at the same instant.
    #[tokio::test]
    async fn failures_of_many_groups_retry_spread_out() {
        forgerunner_testkit::apiserver::install_crypto_provider();
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        let client = Client::try_from(config).expect("client");
        let reporter = kube::runtime::events::Reporter {
            controller: "test".into(),
            instance: None,
        };
        let forges: Arc<dyn super::ForgeSet> = Arc::new(NoForges);
        let ctx = Context::new(
            client.clone(),
            forges,
            Arc::new(Metrics::default()),
            EventWriter::new(client, reporter),
            kube::runtime::reflector::store::<ObservedJob>().0,
            Arc::new(std::sync::atomic::AtomicBool::new(true)),
        );
        let delays: Vec<Duration> = (0..50)
            .map(|i| {
                let failures = ctx.record_failure(&GroupKey {
                    namespace: "ci".into(),
                    name: format!("g{i}"),
                });
                with_jitter(backoff_delay(failures))
            })
            .collect();
        let distinct: std::collections::BTreeSet<Duration> = delays.iter().copied().collect();
        assert!(distinct.len() > 10, "first retries not spread: {distinct:?}");
        for d in delays {
            assert!(
                d >= Duration::from_millis(800) && d <= Duration::from_millis(1200),
                "{d:?}"
            );
        }
    }

    struct NoForges;

    impl super::ForgeSet for NoForges {
        fn enabled(&self) -> Vec<&dyn crate::forge::Forge> {
            Vec::new()
        }
    }
}
