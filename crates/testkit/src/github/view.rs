//! One indexed snapshot of the emulator, shared by every simulated runner.
//!
//! The emulator only offers whole-state snapshots, and a snapshot costs O(scale sets × jobs)
//! (it computes every scale set's statistics). With thousands of runners polling every 50 ms,
//! per-runner snapshots made the test harness, not the operator, the bottleneck at 1,000
//! groups. So, from [`SHARED_FROM_SCALE_SETS`] scale sets on, runners share one snapshot,
//! retaken when it is older than a few times what the last one cost; at 1,000 groups snapshot
//! work stays a small fraction of a core. Below that every lookup takes a fresh snapshot, as a
//! real runner's own session would see: a reused one, however young, let a runner claim a job
//! another had just moved, and the e2e restart suite saw a duplicate runner in 2 of 12 runs.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use scaleset::testing::{Emulator, JobState};
use tokio::time::Instant;

/// A snapshot may be reused while younger than this many times what taking it cost.
const REUSE_FACTOR: u32 = 10;

/// Fewest scale sets at which runners share snapshots (the bench's many-groups scale).
pub(crate) const SHARED_FROM_SCALE_SETS: usize = 50;

/// Upper bound on reuse, so a slow snapshot (a loaded machine) never leaves runners blind long.
const MAX_AGE: Duration = Duration::from_millis(250);

/// What a runner asks of the view.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The runner is registered; the oldest assigned job of its scale set without a runner.
    Registered(Option<i64>),
    /// The runner is not registered in a snapshot taken after `since`: it is gone.
    Gone,
    /// The snapshot predates `since` and does not know the runner yet: ask again later.
    Unknown,
}

/// The parts of one snapshot the runners need.
#[derive(Debug)]
struct Snapshot {
    taken_at: Instant,
    runners: HashSet<i64>,
    /// Assigned jobs without a runner, by scale set, oldest (lowest id) first.
    assigned: HashMap<i64, BTreeSet<i64>>,
}

/// The shared snapshot and what it cost; callers serialise access (the runner's claim lock).
#[derive(Debug)]
pub(crate) struct ClaimView {
    snapshot: Option<Snapshot>,
    cost: Duration,
    /// Scale sets the last snapshot showed.
    scale_sets: usize,
    /// Scale sets from which snapshots are shared.
    shared_from: usize,
}

impl Default for ClaimView {
    fn default() -> Self {
        ClaimView {
            snapshot: None,
            cost: Duration::ZERO,
            scale_sets: 0,
            shared_from: SHARED_FROM_SCALE_SETS,
        }
    }
}

impl ClaimView {
    /// Looks up `runner_id` of `scale_set_id` for a runner that started at `since`.
    pub fn lookup(&mut self, emu: &Emulator, scale_set_id: i64, runner_id: i64, since: Instant) -> Lookup {
        let now = Instant::now();
        let reuse = if self.scale_sets >= self.shared_from {
            (self.cost * REUSE_FACTOR).min(MAX_AGE)
        } else {
            Duration::ZERO
        };
        let stale = self
            .snapshot
            .as_ref()
            .is_none_or(|s| now.saturating_duration_since(s.taken_at) > reuse);
        if stale {
            self.refresh(emu);
        }
        let Some(snap) = &self.snapshot else {
            return Lookup::Unknown;
        };
        if !snap.runners.contains(&runner_id) {
            // A runner registers before its pod starts, so only a snapshot taken after the
            // runner started proves it was removed.
            return if snap.taken_at >= since {
                Lookup::Gone
            } else {
                Lookup::Unknown
            };
        }
        let job = snap
            .assigned
            .get(&scale_set_id)
            .and_then(|jobs| jobs.first().copied());
        Lookup::Registered(job)
    }

    /// Forgets `job` as claimable: this caller started it, or starting it failed.
    pub fn taken(&mut self, scale_set_id: i64, job: i64) {
        if let Some(jobs) = self
            .snapshot
            .as_mut()
            .and_then(|s| s.assigned.get_mut(&scale_set_id))
        {
            jobs.remove(&job);
        }
    }

    /// Drops the snapshot, so the next lookup takes a new one.
    pub fn invalidate(&mut self) {
        self.snapshot = None;
    }

    fn refresh(&mut self, emu: &Emulator) {
        let started = Instant::now();
        let state = emu.state();
        let mut assigned: HashMap<i64, BTreeSet<i64>> = HashMap::new();
        for job in state
            .jobs
            .iter()
            .filter(|j| j.state == JobState::Assigned && j.runner_id.is_none())
        {
            assigned
                .entry(job.scale_set_id.0)
                .or_default()
                .insert(job.id.get());
        }
        let runners = state.runners.iter().map(|r| r.id.get()).collect();
        self.snapshot = Some(Snapshot {
            taken_at: started,
            runners,
            assigned,
        });
        self.cost = started.elapsed();
        self.scale_sets = state.scale_sets.len();
    }
}

#[cfg(test)]
mod tests {
    use scaleset::{JitRunnerSetting, RunnerScaleSetSpec};

    use super::*;

    #[tokio::test]
    async fn finds_assigned_jobs_and_tells_gone_from_not_yet_seen() {
        let emu = Emulator::builder()
            .long_poll(Duration::from_millis(100))
            .start()
            .await;
        let client = emu.client();
        let set = client
            .create_runner_scale_set(&RunnerScaleSetSpec::new("view"))
            .await
            .unwrap();
        let mut view = ClaimView::default();
        let before = Instant::now();
        // Take a snapshot before the runner exists, then register it.
        assert_eq!(view.lookup(&emu, set.id.0, 999, before), Lookup::Gone);
        let jit = client
            .generate_jit_config(set.id, &JitRunnerSetting::new("r1"))
            .await
            .unwrap();
        let runner = jit.runner.as_ref().unwrap().id.get();
        // With few scale sets every lookup is fresh and sees it at once.
        assert_eq!(
            view.lookup(&emu, set.id.0, runner, Instant::now()),
            Lookup::Registered(None)
        );
        // Shared (as at scale): an old snapshot must not call a newer runner gone.
        view.shared_from = 0;
        view.invalidate();
        assert_eq!(view.lookup(&emu, set.id.0, 999, Instant::now()), Lookup::Gone);
        view.cost = Duration::from_secs(1);
        view.snapshot.as_mut().expect("snapshot").runners.remove(&runner);
        let started = Instant::now();
        assert_eq!(view.lookup(&emu, set.id.0, runner, started), Lookup::Unknown);
        view.invalidate();
        assert_eq!(
            view.lookup(&emu, set.id.0, runner, started),
            Lookup::Registered(None)
        );

        let session = client.create_message_session(set.id, "t").await.unwrap();
        let job = emu.queue_job(set.id, Vec::<String>::new());
        session.acquire_jobs(&[job]).await.unwrap();
        view.invalidate();
        assert_eq!(
            view.lookup(&emu, set.id.0, runner, started),
            Lookup::Registered(Some(job.get()))
        );
        view.taken(set.id.0, job.get());
        assert_eq!(
            view.lookup(&emu, set.id.0, runner, started),
            Lookup::Registered(None)
        );
        session.close().await.unwrap();
    }
}
