//! Per-group clocks of Forgejo's runners (pure, no I/O): since when each runner has looked
//! offline or connected. They read Forgejo's runner rows over time: a new runner is offline until
//! its pod connects, and a runner bound to a job that stayed connected long enough without
//! getting it tells that Forgejo withholds the job.
//!
//! The rest is core's books: when this session registered each runner (`RunnerRef::registered_at`),
//! which job each new runner is bound to and which listed jobs need no new runner
//! (`forgerunner_core::reconcile::ledger::Reservations`), and which offline rows are ghosts
//! (`forgerunner_core::reconcile::ledger::OfflineRows`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use forgerunner_core::forge::RunnerRef;

/// Job annotation: the Forgejo runner id (v15), for deletion after a restart.
pub const RUNNER_ID_ANNOTATION: &str = "forgerunner.dev/forgejo-runner-id";

/// The runner id recorded on a runner's Job, if any.
pub fn runner_id(r: &RunnerRef) -> Option<i64> {
    r.annotations
        .get(RUNNER_ID_ANNOTATION)
        .and_then(|v| v.trim().parse().ok())
}

/// One group's runner clocks.
#[derive(Debug, Default)]
pub struct RunnerClocks {
    /// Since when each runner has looked offline.
    offline_since: BTreeMap<String, Instant>,
    /// Since when each runner has looked connected (its row `idle` or `active`).
    connected_since: BTreeMap<String, Instant>,
}

impl RunnerClocks {
    /// Forgets the runners the cluster no longer shows (`refs`).
    pub fn sync(&mut self, refs: &[RunnerRef]) {
        let seen: BTreeSet<&str> = refs.iter().map(|r| r.name.as_str()).collect();
        self.offline_since.retain(|name, _| seen.contains(name.as_str()));
        self.connected_since
            .retain(|name, _| seen.contains(name.as_str()));
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

    #[test]
    fn offline_grace() {
        let mut b = RunnerClocks::default();
        let t0 = Instant::now();
        let g = Duration::from_secs(60);
        assert!(!b.offline_for("x", true, t0, g));
        assert!(b.offline_for("x", true, t0 + g, g));
        assert!(!b.offline_for("x", false, t0 + g, g));
        assert!(!b.offline_for("x", true, t0 + g + g / 2, g));
    }

    /// The clocks of a runner the cluster no longer shows go.
    #[test]
    fn clocks_of_runners_gone_from_the_cluster_are_forgotten() {
        let mut b = RunnerClocks::default();
        let t0 = Instant::now();
        b.connected("gone", true, t0);
        b.offline_for("gone", true, t0, Duration::ZERO);
        b.sync(&[]);
        assert_eq!(
            b.connected_for("gone", t0 + Duration::from_secs(5)),
            Duration::ZERO
        );
        assert!(b.offline_since.is_empty() && b.connected_since.is_empty());
    }
}
