//! The group's books: what this process wrote that the cluster's store does not show yet, the
//! clocks the scaling rule keeps between passes, and what upkeep is already done. One per group;
//! a pass takes it whole for its duration ([`super::Context::lease_ledger`]), so the steps of a
//! pass read and write it without locking, and nothing else changes it meanwhile.
//!
//! Everything here is process memory: after a restart the books start empty, which costs at
//! most a repeated write (an RBAC apply, a Secret check) and never a runner or a job.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub mod connected;
pub mod offline_rows;
pub mod registrations;
pub mod reservations;
pub mod taken;

pub use connected::ConnectedSince;
pub use offline_rows::{DEFAULT_GHOST_GRACE, OWN_ROW_GRACE, OfflineRows};
pub use registrations::Registrations;
pub use reservations::{Reservations, WithheldBackoff};
pub use taken::TakenSinceListing;

use super::hook_leftovers::SweepClock;
use super::identity::IdentityWrites;
use super::rerun::RerunBook;
use super::stage_track::StageTracker;
use super::stalled::WaitBook;
use crate::crd::ForgeKind;
use crate::crd::{RunnerGroup, RunnerGroupStatus};
use crate::forge::{
    ClusterRefs, Credentials, Forge, ForgeSession, ForgeView, GroupKey, RunnerRef, SecretValue,
};
use crate::metrics::JobSeriesBook;
use crate::plan::ObservedRunner;
use crate::plan::memory::PlanMemory;
use crate::runner_job::ObservedJob;

/// One group's books.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Runner Job writes the store may not show yet.
    pub writes: InFlight,
    /// Runners that took a job the forge's jobs listing may still show waiting.
    pub taken: TakenSinceListing,
    /// Runners whose job identity is being (or was) recorded.
    pub identity_writes: IdentityWrites,
    /// The status this process wrote, until the store shows it.
    pub status: StatusBook,
    /// Since when runners run and a surplus lasts (the scaling rule's clocks).
    pub plan: PlanMemory,
    /// What the latency per stage has already counted.
    pub stages: StageTracker,
    /// Since when each waiting job waits, for the stuck-queue watchdog ([`super::stalled`]).
    pub waits: WaitBook,
    /// The last pass created fewer runners than planned because the API budget is low (the
    /// Event is published when this turns on).
    pub budget_throttled: bool,
    /// Upkeep already done, so a pass does not repeat it.
    pub upkeep: Upkeep,
    /// What the spec names in the cluster, as last read ([`ReadRefs`]).
    pub refs: Option<ReadRefs>,
    /// Which repository/workflow series the group's job counters have (bounded).
    pub job_series: JobSeriesBook,
    /// Jobs of runners the cluster killed: re-runs asked for and waiting ([`super::rerun`]).
    pub reruns: RerunBook,
    /// The group's schedules as last parsed.
    pub schedules: crate::schedule::ParsedSchedules,
    /// The class of each runner created that the store does not list yet.
    pub classes: super::classes::InFlightClasses,
    /// The group's session at its forge, opened on first use ([`Ledger::session`]).
    pub session: Option<GroupSession>,
    /// Runners that session registered, when, and what the forge said of each.
    pub registrations: Registrations,
    /// Since when the forge's runner rows named like the group's have been offline: which are
    /// ghosts.
    pub offline_rows: OfflineRows,
    /// Since when the forge has shown each runner connected (idle or busy) without a break.
    pub connected: ConnectedSince,
    /// Jobs reserved for one runner each, where the forge binds runners to jobs.
    pub reservations: Reservations,
}

impl Ledger {
    /// The group's session at `forge`, opened on first use. A group moved to another forge
    /// gets a new session; the old one is closed as it is dropped ([`GroupSession`]), and what
    /// it registered is forgotten: the new session registered none of it.
    pub fn session(&mut self, forge: &dyn Forge, key: &GroupKey) -> Arc<dyn ForgeSession> {
        match &self.session {
            Some(s) if s.kind == forge.kind() => s.session.clone(),
            _ => {
                self.registrations.clear();
                self.offline_rows.clear();
                self.connected.clear();
                let opened = GroupSession {
                    kind: forge.kind(),
                    session: Arc::from(forge.open(key)),
                    closed: false,
                };
                let session = opened.session.clone();
                self.session = Some(opened);
                session
            }
        }
    }

    /// The group's session at `forge`, for its deletion: its owner closes it
    /// ([`ForgeSession::close`]) now and may again, so dropping it closes nothing, and a late
    /// close cannot hit a group created again under the same name. A closed session forgets
    /// the runners it registered, and so do the books.
    pub fn session_to_close(&mut self, forge: &dyn Forge, key: &GroupKey) -> Arc<dyn ForgeSession> {
        let session = self.session(forge, key);
        if let Some(held) = self.session.as_mut() {
            held.closed = true;
        }
        self.registrations.clear();
        session
    }

    /// Settles the forge's `view` for the planner: takes out of `view.waiting_jobs` the jobs its
    /// listing may still show waiting although one of `runners` (told the forge as `refs`) took
    /// them, or is bound to them ([`Reservations`]), or took some job after the listing was
    /// fetched ([`TakenSinceListing`]). It notes which of `runners`, with the forge's state of
    /// each, are connected ([`ConnectedSince`]), and returns the runner rows offline for the
    /// ghost grace ([`OfflineRows`]): the planner's ghosts.
    pub fn settle_view(
        &mut self,
        view: &mut ForgeView,
        runners: &[ObservedRunner],
        refs: &[RunnerRef],
        now: Instant,
    ) -> Vec<String> {
        self.reservations.observe(refs, now);
        self.reservations.net(view, refs, now);
        if let Some(listed_at) = view.listed_at {
            let covered = self.taken.covered(
                runners,
                listed_at,
                &view.accounted,
                view.takes_by_success_only,
                now,
            );
            view.waiting_jobs = view.waiting_jobs.saturating_sub(covered);
        }
        self.connected.note(runners, now);
        self.offline_rows.settle(view.listed_rows.as_ref())
    }
}

/// A group's forge session as its books hold it.
///
/// The session is closed explicitly where the group is deleted ([`super::cleanup`]), because
/// closing is async and must finish before forge cleanup starts. Dropping a session that was
/// never closed that way (the group moved to another forge, the controller went away) closes
/// it on a task of its own, as a safety net: nothing then waits for it.
pub struct GroupSession {
    kind: ForgeKind,
    session: Arc<dyn ForgeSession>,
    closed: bool,
}

impl std::fmt::Debug for GroupSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupSession")
            .field("kind", &self.kind)
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl Drop for GroupSession {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let session = self.session.clone();
            runtime.spawn(async move { session.close().await });
        }
    }
}

/// How long what a group's spec names in the cluster (credentials Secret, CA bundle, webhook
/// Secret) is used before it is read again. Every pass read all three, every few seconds for
/// every group: a thousand groups made hundreds of GETs a second. A failed pass forgets them
/// ([`super::pass`]), so a Secret fixed after a refusal is read on the next try.
pub const REFS_TTL: Duration = Duration::from_secs(60);

/// What a group's spec names in the cluster, as read at `read_at`.
#[derive(Clone, Debug)]
pub struct ReadRefs {
    /// The names read; a spec naming others reads again.
    pub names: ClusterRefs,
    /// The credentials Secret's data.
    pub credentials: Credentials,
    /// The CA bundle, when named.
    pub ca_bundle: Option<String>,
    /// The webhook secret, when named and readable.
    pub webhook_secret: Option<SecretValue>,
    /// When they were read.
    pub read_at: Instant,
}

impl ReadRefs {
    /// Whether these are still good for a spec naming `names` at `now`.
    pub fn fresh(&self, names: &ClusterRefs, now: Instant) -> bool {
        self.names == *names && now.saturating_duration_since(self.read_at) < REFS_TTL
    }
}

/// Runner Job writes of this process the store has not caught up with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InFlight {
    /// Runner Jobs created but not yet seen in the store.
    pub created: BTreeSet<String>,
    /// Runner Jobs deleted but still in the store.
    pub deleted: BTreeSet<String>,
}

impl InFlight {
    /// Forgets entries the store has caught up with.
    pub fn settle(&mut self, jobs: &[Arc<ObservedJob>]) {
        let present: BTreeSet<&str> = jobs.iter().filter_map(|j| j.metadata.name.as_deref()).collect();
        self.created.retain(|n| !present.contains(n.as_str()));
        self.deleted.retain(|n| present.contains(n.as_str()));
    }

    /// Takes in what a pass created and deleted.
    pub fn record(&mut self, created: &[String], deleted: &[String]) {
        self.created.extend(created.iter().cloned());
        // A runner removed before the store ever listed it must stop counting as created: the
        // store may see it come and go between two passes, and it would then stay a phantom
        // pending runner that holds demand back forever.
        for name in deleted {
            self.created.remove(name);
        }
        self.deleted.extend(deleted.iter().cloned());
    }
}

/// The status this process wrote last, and when.
#[derive(Debug, Default)]
pub struct StatusBook {
    /// The last write, until the store shows a newer object.
    written: Option<WrittenStatus>,
    /// When this process last wrote the status (count-only changes are rate-limited by it).
    last_write: Option<Instant>,
    /// The last status write was refused or failed: what the status says is older than what
    /// the last pass found.
    unreported: bool,
}

/// A status written by this process, and the `resourceVersion` of the object it was based on.
#[derive(Debug)]
struct WrittenStatus {
    /// `resourceVersion` of the group the write started from; while the store still shows it,
    /// the store has not seen the write.
    based_on: Option<String>,
    /// The status written.
    status: RunnerGroupStatus,
}

impl StatusBook {
    /// The group with the status this process last wrote, when the store has not caught up
    /// with that write yet. The status carries state between passes (failure count, sticky
    /// conditions); a pass right after a write must not plan on, and write back, the older one.
    pub fn overlay(&mut self, group: Arc<RunnerGroup>) -> Arc<RunnerGroup> {
        let stale = self
            .written
            .as_ref()
            .is_some_and(|w| w.based_on.is_some() && w.based_on == group.metadata.resource_version);
        if !stale {
            // The store has moved on (our write, or someone else's): trust it from now on.
            self.written = None;
            return group;
        }
        let mut g = (*group).clone();
        g.status = self.written.as_ref().map(|w| w.status.clone());
        Arc::new(g)
    }

    /// Takes in a status written on top of the object at `based_on`.
    pub fn wrote(&mut self, based_on: Option<String>, status: RunnerGroupStatus) {
        self.written = Some(WrittenStatus { based_on, status });
        self.last_write = Some(Instant::now());
        self.unreported = false;
    }

    /// Notes that a status write failed.
    pub fn write_failed(&mut self) {
        self.unreported = true;
    }

    /// Whether the last status write failed, so the status does not say what the last pass
    /// found (a group that stopped on its spec must retry until it says so).
    pub fn unreported(&self) -> bool {
        self.unreported
    }

    /// Time since the last write, if any.
    pub fn since_last_write(&self) -> Option<Duration> {
        self.last_write.map(|t| t.elapsed())
    }
}

/// Upkeep of a group that a pass does once, not every time.
#[derive(Debug, Default)]
pub struct Upkeep {
    /// Pending runner Jobs have been checked for a missing Secret since the last failed pass.
    pub secrets_checked: bool,
    /// Fingerprint of the runner RBAC state last settled (see `runner_rbac::keep_runner_rbac`).
    pub runner_rbac: Option<String>,
    /// Generation whose runner pods were already checked against `restricted`.
    pub pod_security_checked: Option<i64>,
    /// When the runner container hooks' leftovers were last looked for.
    pub hook_sweep: SweepClock,
    /// The shared cache's last settled look (see `cache_server::keep_cache`).
    pub cache: Option<super::cache_server::CacheUpkeep>,
    /// The Docker cache pool's last settled look (see `docker_cache::keep_docker_cache`).
    pub docker_cache: Option<super::docker_cache::DockerCacheUpkeep>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runner_deleted_before_the_store_listed_it_stops_counting_as_created() {
        let mut w = InFlight::default();
        w.record(&["a".into(), "b".into()], &[]);
        w.record(&[], &["a".into()]);
        assert_eq!(w.created, BTreeSet::from(["b".to_owned()]));
        assert_eq!(w.deleted, BTreeSet::from(["a".to_owned()]));
    }

    /// Settling a view names as ghosts the rows offline for the grace, from the forge's runner
    /// rows alone: a forge that lists no rows has none.
    #[test]
    fn settling_a_view_names_the_rows_offline_for_the_grace() {
        let grace = Duration::from_secs(300);
        let mut ledger = Ledger {
            offline_rows: OfflineRows::with_grace(grace),
            ..Ledger::default()
        };
        let t0 = Instant::now();
        let view_at = |at: Instant| ForgeView {
            listed_rows: Some(crate::forge::ListedRows {
                offline: BTreeSet::from(["g-dead0".to_owned()]),
                online: BTreeSet::new(),
                own: std::collections::BTreeSet::new(),
                whole: true,
                listed_at: at,
            }),
            ..ForgeView::default()
        };
        let first = ledger.settle_view(&mut view_at(t0), &[], &[], t0);
        assert!(first.is_empty(), "just seen");
        let later = ledger.settle_view(&mut view_at(t0 + grace), &[], &[], t0 + grace);
        assert_eq!(later, ["g-dead0"]);
        let unlisted = ledger.settle_view(&mut ForgeView::default(), &[], &[], t0 + grace);
        assert!(unlisted.is_empty(), "no runner rows, no ghosts");
        assert!(ledger.offline_rows.is_empty());
    }

    #[test]
    fn the_written_status_stands_in_until_the_store_moves_on() {
        let mut book = StatusBook::default();
        let mut g = RunnerGroup::test(crate::crd::ForgeKind::Gitea).build();
        g.metadata.resource_version = Some("1".into());
        let written = RunnerGroupStatus {
            failed_runners: 3,
            ..RunnerGroupStatus::default()
        };
        book.wrote(Some("1".into()), written);
        let seen = book.overlay(Arc::new(g.clone()));
        assert_eq!(seen.status.as_ref().map(|s| s.failed_runners), Some(3));
        assert!(book.since_last_write().is_some());
        g.metadata.resource_version = Some("2".into());
        let seen = book.overlay(Arc::new(g));
        assert_eq!(seen.status, None, "the store's newer object wins");
        assert!(book.written.is_none());
    }
}

#[cfg(test)]
mod session_tests {
    use super::*;
    use crate::testing::FakeForge;
    use std::sync::atomic::Ordering;

    fn key() -> GroupKey {
        GroupKey {
            namespace: "ci".into(),
            name: "g".into(),
        }
    }

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_group_keeps_its_session_until_it_moves_to_another_forge() {
        let gitea = FakeForge::new(ForgeKind::Gitea);
        let forgejo = FakeForge::new(ForgeKind::Forgejo);
        let mut ledger = Ledger::default();
        let first = ledger.session(gitea.as_ref(), &key());
        let again = ledger.session(gitea.as_ref(), &key());
        assert!(Arc::ptr_eq(&first, &again), "one session per group");
        let moved = ledger.session(forgejo.as_ref(), &key());
        assert!(!Arc::ptr_eq(&first, &moved));
        settle().await;
        assert_eq!(
            gitea.closes.load(Ordering::SeqCst),
            1,
            "the old forge's session is closed"
        );
        assert_eq!(forgejo.closes.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn dropping_books_closes_only_a_session_nobody_closed() {
        let forge = FakeForge::new(ForgeKind::Gitea);
        let mut ledger = Ledger::default();
        ledger.session(forge.as_ref(), &key());
        drop(ledger);
        settle().await;
        assert_eq!(forge.closes.load(Ordering::SeqCst), 1, "the safety net closed it");

        let mut deleted = Ledger::default();
        let session = deleted.session_to_close(forge.as_ref(), &key());
        session.close().await;
        drop(deleted);
        settle().await;
        assert_eq!(
            forge.closes.load(Ordering::SeqCst),
            2,
            "a session its owner closed is not closed again on drop"
        );
    }

    #[tokio::test]
    async fn a_new_session_starts_with_no_registrations() {
        let gitea = FakeForge::new(ForgeKind::Gitea);
        let forgejo = FakeForge::new(ForgeKind::Forgejo);
        let mut ledger = Ledger::default();
        ledger.session(gitea.as_ref(), &key());
        ledger
            .registrations
            .record("g-aaaaa", &Default::default(), Instant::now());
        ledger.session(gitea.as_ref(), &key());
        assert!(
            ledger.registrations.contains("g-aaaaa"),
            "the same session keeps what it registered"
        );
        ledger.session(forgejo.as_ref(), &key());
        assert!(
            ledger.registrations.is_empty(),
            "the new forge's session registered none of them"
        );
        ledger
            .registrations
            .record("g-bbbbb", &Default::default(), Instant::now());
        ledger.session_to_close(forgejo.as_ref(), &key());
        assert!(ledger.registrations.is_empty(), "a closed session forgets them");
    }

    #[tokio::test]
    async fn a_group_moved_to_another_forge_forgets_the_old_forges_offline_rows() {
        let gitea = FakeForge::new(ForgeKind::Gitea);
        let forgejo = FakeForge::new(ForgeKind::Forgejo);
        let mut ledger = Ledger::default();
        ledger.session(gitea.as_ref(), &key());
        let rows = crate::forge::ListedRows {
            offline: BTreeSet::from(["g-dead0".to_owned()]),
            online: BTreeSet::new(),
            own: std::collections::BTreeSet::new(),
            whole: false,
            listed_at: Instant::now(),
        };
        ledger.offline_rows.settle(Some(&rows));
        ledger.session(gitea.as_ref(), &key());
        assert_eq!(ledger.offline_rows.len(), 1, "the same forge keeps watching");
        ledger.session(forgejo.as_ref(), &key());
        assert!(ledger.offline_rows.is_empty(), "another forge's rows");
    }
}
