//! Per-group bookkeeping of Forgejo's job handles (pure, no I/O): which handles are bound to
//! our runners, which bound runners finished or failed while a cached listing may still show
//! their job waiting, which jobs Forgejo holds back, which runners this process created and
//! when, and since when each runner has looked offline or connected.
//!
//! Runners bound to no job are core's to net: a listing older than such a runner's success is
//! covered by core's ledger (`forgerunner_core::reconcile::ledger::TakenSinceListing`), from the
//! view's `listed_at`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use forgerunner_core::forge::RunnerRef;
use forgerunner_core::plan::RunnerPhase;

/// Job annotation: the Forgejo runner id (v15), for deletion after a restart.
pub const RUNNER_ID_ANNOTATION: &str = "forgerunner.dev/forgejo-runner-id";
/// Job annotation: the job handle the runner is bound to (v15), absent for unbound runners.
pub const JOB_HANDLE_ANNOTATION: &str = "forgerunner.dev/forgejo-job-handle";

/// A binding handed out by `register` is trusted this long without its Job being
/// seen (the cluster store may lag, or the Job creation failed).
const HANDED_OUT_GRACE: Duration = Duration::from_secs(120);
/// How long a creation by this process is remembered (listing freshness, ghost protection,
/// age order).
const CREATED_MEMORY: Duration = Duration::from_secs(3600);
/// A held job's backoff is forgotten this long after the last removal (a listing that no
/// longer shows the job waiting forgets it sooner).
const HELD_MEMORY: Duration = Duration::from_secs(6 * 3600);
/// At most this many held jobs are remembered per group; the oldest go first.
const MAX_HELD: usize = 256;

/// How held jobs back off: the first wait, and the longest one (each removal doubles it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldBackoff {
    /// Wait after the first removal.
    pub first: Duration,
    /// Longest wait.
    pub max: Duration,
}

/// A waiting job that a connected runner bound to it did not get: Forgejo holds it back (a
/// concurrency group queue, 14+), although its listing shows it `waiting`.
#[derive(Clone, Copy, Debug)]
struct Held {
    /// Removals of runners bound to it so far.
    strikes: u32,
    /// No new runner is made for it before this.
    until: Instant,
    /// The last removal.
    at: Instant,
}

/// The runner id recorded on a runner's Job, if any.
pub fn runner_id(r: &RunnerRef) -> Option<i64> {
    r.annotations
        .get(RUNNER_ID_ANNOTATION)
        .and_then(|v| v.trim().parse().ok())
}

/// The job handle recorded on a runner's Job, if any.
pub fn job_handle(r: &RunnerRef) -> Option<&str> {
    r.annotations
        .get(JOB_HANDLE_ANNOTATION)
        .map(String::as_str)
        .filter(|h| !h.is_empty())
}

/// One group's bookkeeping.
#[derive(Debug, Default)]
pub struct GroupBook {
    /// Handles bound by `register` whose Job has not been seen yet → (runner, when).
    handed_out: BTreeMap<String, (String, Instant)>,
    /// Handles bound to live (pending or running) runners, from their Jobs → runner.
    observed: BTreeMap<String, String>,
    /// Handles whose bound runner succeeded; kept while a listing still shows them waiting.
    finished_handles: BTreeSet<String>,
    /// Handles whose bound runner failed, with when a pass first saw it: the runner may have
    /// taken its job before failing, so only a job listing fetched after that can tell whether
    /// the job still waits for a runner.
    failed_handles: BTreeMap<String, Instant>,
    /// Runners this process created, with when.
    created: BTreeMap<String, Instant>,
    /// Since when each runner has looked offline.
    offline_since: BTreeMap<String, Instant>,
    /// Since when each runner has looked connected (its row `idle` or `active`).
    connected_since: BTreeMap<String, Instant>,
    /// Waiting jobs held back by Forgejo, by handle, with their backoff.
    held: BTreeMap<String, Held>,
}

impl GroupBook {
    /// Takes in the group's runners as the cluster shows them now.
    pub fn sync(&mut self, refs: &[RunnerRef], now: Instant) {
        self.observed = refs
            .iter()
            .filter(|r| r.phase.is_active())
            .filter_map(|r| job_handle(r).map(|h| (h.to_string(), r.name.clone())))
            .collect();
        let seen: BTreeSet<&str> = refs.iter().map(|r| r.name.as_str()).collect();
        // A Job the store shows speaks for its binding from now on (alive: `observed`; ended:
        // the handle is free again, or finished below). A runner created in flight is not in the
        // store yet, so its handout stands until the store shows the Job: dropping it earlier
        // would free the handle for a second runner.
        let stored: BTreeSet<&str> = refs
            .iter()
            .filter(|r| r.stored)
            .map(|r| r.name.as_str())
            .collect();
        self.handed_out.retain(|_, (name, at)| {
            !stored.contains(name.as_str()) && now.duration_since(*at) < HANDED_OUT_GRACE
        });
        for h in refs
            .iter()
            .filter(|r| r.phase == RunnerPhase::Failed)
            .filter_map(job_handle)
        {
            self.failed_handles.entry(h.to_string()).or_insert(now);
        }
        self.failed_handles
            .retain(|_, at| now.duration_since(*at) < CREATED_MEMORY);
        // Unbound runners that succeeded are core's to net (the view's `listed_at`).
        for h in refs
            .iter()
            .filter(|r| r.phase == RunnerPhase::Succeeded)
            .filter_map(job_handle)
        {
            self.finished_handles.insert(h.to_string());
        }
        self.created
            .retain(|name, at| seen.contains(name.as_str()) || now.duration_since(*at) < CREATED_MEMORY);
        self.offline_since.retain(|name, _| seen.contains(name.as_str()));
        self.connected_since
            .retain(|name, _| seen.contains(name.as_str()));
    }

    /// Forgets what a listing fetched at `listing_at`, showing `waiting` handles, accounts for:
    /// finished handles it no longer shows waiting, and held jobs it no longer shows waiting.
    /// Returns how many waiting jobs need no new runner now: covered by a bound runner, or held
    /// back ([`GroupBook::note_held`]).
    pub fn covered(&mut self, waiting: &BTreeSet<&str>, listing_at: Instant, now: Instant) -> u32 {
        self.finished_handles.retain(|h| waiting.contains(h.as_str()));
        // A held job that a listing fetched after the removal no longer shows waiting ran or
        // ended: its backoff is over.
        self.held.retain(|h, e| {
            (waiting.contains(h.as_str()) || listing_at <= e.at) && now.duration_since(e.at) < HELD_MEMORY
        });
        let n = waiting
            .iter()
            .filter(|h| self.discounted(h, listing_at, now))
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Whether the waiting job of `handle` (in a listing fetched at `listing_at`) needs no new
    /// runner now, as [`GroupBook::covered`] counts it: its bound runner finished, or failed
    /// after the listing was fetched (it may have taken the job, and a fresher listing will
    /// tell), or Forgejo holds the job back. The jobs the view lists as waiting leave these
    /// out, so that the class each listed job wants is the class of a runner to make.
    pub fn discounted(&self, handle: &str, listing_at: Instant, now: Instant) -> bool {
        self.finished_handles.contains(handle)
            || self.failed_handles.get(handle).is_some_and(|at| listing_at < *at)
            || self.held(handle, now)
    }

    /// Records that a runner bound to `handle`, connected long enough to have taken its job,
    /// was removed idle while the job still waited: Forgejo holds the job back (Forgejo 14+
    /// hands no job queued behind its concurrency group to any runner,
    /// `models/actions/task.go` `GetAvailableJobsForRunner`, while its listing shows it
    /// `waiting`). No runner is made for it for a while, doubling with each such removal, so a
    /// held job does not get a runner that idles out over and over.
    pub fn note_held(&mut self, handle: &str, backoff: HeldBackoff, now: Instant) {
        let strikes = self.held.get(handle).map_or(1, |e| e.strikes.saturating_add(1));
        let factor = 1u32
            .checked_shl(strikes.saturating_sub(1).min(16))
            .unwrap_or(u32::MAX);
        let wait = backoff.first.saturating_mul(factor).min(backoff.max);
        self.held.insert(
            handle.to_string(),
            Held {
                strikes,
                until: now + wait,
                at: now,
            },
        );
        while self.held.len() > MAX_HELD {
            let oldest = self.held.iter().min_by_key(|(_, e)| e.at).map(|(h, _)| h.clone());
            match oldest {
                Some(h) => self.held.remove(&h),
                None => break,
            };
        }
    }

    /// Whether the job of `handle` is held back now ([`GroupBook::note_held`]).
    pub fn held(&self, handle: &str, now: Instant) -> bool {
        self.held.get(handle).is_some_and(|e| now < e.until)
    }

    /// How many of `at_work` (handles whose runner is busy or done) `waiting` still shows and
    /// [`GroupBook::covered`] does not already discount.
    pub fn uncovered_among(&self, at_work: &BTreeSet<&str>, waiting: &BTreeSet<&str>) -> u32 {
        let n = at_work
            .iter()
            .filter(|h| waiting.contains(*h) && !self.finished_handles.contains(**h))
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Whether `handle` is bound to a live runner or done as far as we know, or its runner
    /// failed after the listing at `listing_at` was fetched (that listing cannot say whether
    /// the runner had taken the job first), or its job is held back now.
    fn taken(&self, handle: &str, listing_at: Instant, now: Instant) -> bool {
        self.held(handle, now)
            || self.observed.contains_key(handle)
            || self.handed_out.contains_key(handle)
            || self.finished_handles.contains(handle)
            || self
                .failed_handles
                .get(handle)
                .is_some_and(|failed| listing_at < *failed)
    }

    /// Binds `runner` to the first of `handles` (oldest job first, from a listing fetched at
    /// `listing_at`) that is free; `None` when every one is taken. The caller holds the book's
    /// lock, so two creations never get the same handle.
    pub fn bind<'a>(
        &mut self,
        handles: impl IntoIterator<Item = &'a str>,
        listing_at: Instant,
        runner: &str,
        now: Instant,
    ) -> Option<String> {
        let h = handles
            .into_iter()
            .find(|h| !h.is_empty() && !self.taken(h, listing_at, now))?;
        self.handed_out.insert(h.to_string(), (runner.to_string(), now));
        Some(h.to_string())
    }

    /// Releases a binding whose runner could not be created.
    pub fn unbind(&mut self, handle: &str) {
        self.handed_out.remove(handle);
    }

    /// Records that this process created (or registered) `runner` at `at`.
    pub fn created(&mut self, runner: &str, at: Instant) {
        self.created.insert(runner.to_string(), at);
    }

    /// When this process created `runner`, if it did.
    pub fn created_at(&self, runner: &str) -> Option<Instant> {
        self.created.get(runner).copied()
    }

    /// Whether `runner` was created by this process less than `grace` ago.
    pub fn recently_created(&self, runner: &str, now: Instant, grace: Duration) -> bool {
        self.created
            .get(runner)
            .is_some_and(|at| now.duration_since(*at) < grace)
    }

    /// Records whether `runner` looks connected now (its row `idle` or `active`).
    pub fn connected(&mut self, runner: &str, connected: bool, now: Instant) {
        if connected {
            self.connected_since.entry(runner.to_string()).or_insert(now);
        } else {
            self.connected_since.remove(runner);
        }
    }

    /// How long `runner` has looked connected without a break, as passes saw it.
    pub fn connected_for(&self, runner: &str, now: Instant) -> Duration {
        self.connected_since
            .get(runner)
            .map_or(Duration::ZERO, |since| now.saturating_duration_since(*since))
    }

    /// Records `runner` as offline now (or online: forgets it); whether it has been offline
    /// for at least `grace`.
    pub fn offline_for(&mut self, runner: &str, offline: bool, now: Instant, grace: Duration) -> bool {
        if !offline {
            self.offline_since.remove(runner);
            return false;
        }
        let since = *self.offline_since.entry(runner.to_string()).or_insert(now);
        now.duration_since(since) >= grace
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(name: &str, phase: RunnerPhase, handle: Option<&str>) -> RunnerRef {
        let mut annotations = BTreeMap::new();
        if let Some(h) = handle {
            annotations.insert(JOB_HANDLE_ANNOTATION.to_string(), h.to_string());
        }
        RunnerRef {
            name: name.into(),
            // A runner without its handle stands for one created in flight.
            stored: !annotations.is_empty(),
            registered_here: false,
            annotations,
            phase,
        }
    }

    /// A runner created in flight comes without its Job's annotations: its handout must stand
    /// until the store shows the Job, or a second runner gets the same job.
    #[test]
    fn a_runner_created_in_flight_keeps_its_handle() {
        let mut b = GroupBook::default();
        let now = Instant::now();
        assert_eq!(b.bind(["h1", "h2"], now, "g-aaaaa", now).as_deref(), Some("h1"));
        b.sync(&[r("g-aaaaa", RunnerPhase::Pending, None)], now);
        assert_eq!(b.bind(["h1", "h2"], now, "g-bbbbb", now).as_deref(), Some("h2"));
        // The store shows the Job with its annotation: the binding is read from it.
        b.sync(&[r("g-aaaaa", RunnerPhase::Pending, Some("h1"))], now);
        assert_eq!(b.bind(["h1"], now, "g-ccccc", now), None);
    }

    #[test]
    fn bindings_from_jobs_and_handouts_are_never_reused() {
        let mut b = GroupBook::default();
        let now = Instant::now();
        b.sync(&[r("g-aaaaa", RunnerPhase::Running, Some("h1"))], now);
        assert_eq!(
            b.bind(["h1", "h2", "h3"], now, "g-bbbbb", now).as_deref(),
            Some("h2")
        );
        assert_eq!(
            b.bind(["h1", "h2", "h3"], now, "g-ccccc", now).as_deref(),
            Some("h3")
        );
        assert_eq!(b.bind(["h1", "h2", "h3"], now, "g-ddddd", now), None);
        b.unbind("h3");
        assert_eq!(b.bind(["h3"], now, "g-eeeee", now).as_deref(), Some("h3"));
        // A failed runner frees its handle once its Job is seen, for a listing fetched since.
        b.sync(&[r("g-aaaaa", RunnerPhase::Failed, Some("h1"))], now);
        assert_eq!(b.bind(["h1"], now, "g-fffff", now).as_deref(), Some("h1"));
        // Handouts whose Job never appears expire.
        let later = now + HANDED_OUT_GRACE;
        b.sync(&[], later);
        assert_eq!(b.bind(["h2"], later, "g-ggggg", later).as_deref(), Some("h2"));
    }

    /// A runner lost while it worked on its job fails; a job listing fetched before that still
    /// shows its job waiting (from before the runner took it), and must not bind a second
    /// runner to the job. A listing fetched after the failure can.
    #[test]
    fn a_failed_runners_handle_is_free_only_for_a_listing_fetched_after_the_failure() {
        let mut b = GroupBook::default();
        let listing = Instant::now();
        let now = listing + Duration::from_millis(5);
        b.sync(&[r("g-aaaaa", RunnerPhase::Running, Some("h1"))], listing);
        b.sync(&[r("g-aaaaa", RunnerPhase::Failed, Some("h1"))], now);
        assert_eq!(b.bind(["h1"], listing, "g-bbbbb", now), None);
        // Nor does that listing count the job as waiting for a new runner.
        assert_eq!(b.covered(&["h1", "h2"].into(), listing, listing), 1);
        let fresh = now + Duration::from_millis(1);
        assert_eq!(b.covered(&["h1", "h2"].into(), fresh, fresh), 0);
        assert_eq!(b.bind(["h1"], fresh, "g-bbbbb", fresh).as_deref(), Some("h1"));
    }

    #[test]
    fn finished_runners_cover_their_job_until_a_listing_drops_it() {
        let mut b = GroupBook::default();
        let listing = Instant::now();
        let now = listing + Duration::from_millis(5);
        b.sync(&[r("g-aaaaa", RunnerPhase::Succeeded, Some("h1"))], now);
        let waiting: BTreeSet<&str> = ["h1", "h2"].into();
        assert_eq!(b.covered(&waiting, listing, listing), 1);
        assert_eq!(b.bind(["h1", "h2"], now, "g-bbbbb", now).as_deref(), Some("h2"));
        // The Job is cleaned up: still remembered while the listing shows h1 waiting.
        b.sync(&[], now);
        assert_eq!(b.covered(&waiting, listing, listing), 1);
        assert_eq!(b.covered(&["h2"].into(), now, now), 0);
        // An unbound runner is core's to net (`TakenSinceListing`, the view's `listed_at`).
        b.sync(&[r("g-ccccc", RunnerPhase::Succeeded, None)], now);
        assert_eq!(b.covered(&BTreeSet::new(), listing, listing), 0);
    }

    /// A job a connected bound runner did not get is held back, doubling, up to the cap;
    /// a listing fetched after the removal that no longer shows it waiting forgets it.
    #[test]
    fn held_jobs_back_off_doubling_until_a_listing_drops_them() {
        let mut b = GroupBook::default();
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let backoff = HeldBackoff { first: s, max: 3 * s };
        let waiting: BTreeSet<&str> = ["h1", "h2"].into();
        b.note_held("h1", backoff, t0);
        assert!(b.held("h1", t0) && !b.held("h1", t0 + s));
        assert_eq!(b.covered(&waiting, t0, t0), 1, "h1 needs no runner now");
        assert!(b.discounted("h1", t0, t0) && !b.discounted("h2", t0, t0));
        assert_eq!(b.bind(["h1", "h2"], t0, "g-aaaaa", t0).as_deref(), Some("h2"));
        assert_eq!(b.covered(&waiting, t0, t0 + s), 0, "the wait is over");
        b.note_held("h1", backoff, t0 + s);
        assert!(b.held("h1", t0 + 2 * s) && !b.held("h1", t0 + 3 * s), "doubled");
        b.note_held("h1", backoff, t0 + 3 * s);
        b.note_held("h1", backoff, t0 + 6 * s);
        assert!(!b.held("h1", t0 + 9 * s), "capped at max");
        // An older listing without h1 proves nothing; a newer one ends the backoff.
        let later = t0 + 7 * s;
        assert_eq!(b.covered(&["h2"].into(), t0, later), 0);
        assert!(b.held("h1", later));
        assert_eq!(b.covered(&["h2"].into(), later, later), 0);
        assert!(!b.held("h1", later));
        b.note_held("h1", backoff, later);
        assert!(!b.held("h1", later + s), "strikes start over");
    }

    #[test]
    fn offline_grace() {
        let mut b = GroupBook::default();
        let t0 = Instant::now();
        let g = Duration::from_secs(60);
        assert!(!b.offline_for("x", true, t0, g));
        assert!(b.offline_for("x", true, t0 + g, g));
        assert!(!b.offline_for("x", false, t0 + g, g));
        assert!(!b.offline_for("x", true, t0 + g + g / 2, g));
    }
}
