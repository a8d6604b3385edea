//! Queueing work on the forge fakes and reading back progress, latency and leaks.

use std::time::{Duration, Instant};

use scaleset::ScaleSetId;

use super::progress::github_tallies;
use super::watch::GroupTally;
use super::{WORLD_REPO, World, WorldError, fake_name};
use forgerunner_core::crd::ForgeKind;

/// Where a forge's jobs stand.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Jobs waiting for a runner.
    pub queued: usize,
    /// Jobs a runner works on.
    pub running: usize,
    /// Jobs finished.
    pub done: usize,
    /// All jobs queued so far.
    pub total: usize,
    /// Runners registered at the forge right now.
    pub registered_runners: usize,
}

impl Progress {
    /// Every queued job has finished.
    pub fn all_done(&self) -> bool {
        self.done == self.total
    }
}

/// One job queued on a forge, and when.
#[derive(Clone, Debug)]
pub struct Queued {
    /// Forge-side job id.
    pub id: i64,
    /// When it was queued.
    pub at: Instant,
}

impl World {
    /// Queues one job on `forge` asking for `runs_on`, in the world's repository where the
    /// forge has repositories (GitHub: on the scale set named `runs_on[0]`).
    pub fn queue_job(&self, forge: ForgeKind, runs_on: &[&str]) -> Result<Queued, WorldError> {
        let fake = self
            .forge(forge)
            .ok_or_else(|| WorldError::Timeout(format!("a {}", fake_name(forge))))?;
        let at = Instant::now();
        let id = fake.queue_job(WORLD_REPO, runs_on).ok_or_else(|| {
            WorldError::Timeout(format!("a pool for {runs_on:?} at the {}", fake_name(forge)))
        })?;
        self.list_on_rest(forge, id);
        Ok(Queued { id, at })
    }

    /// Lists a GitHub job just queued on the REST front, when the world serves one, before
    /// any runner can take it.
    fn list_on_rest(&self, forge: ForgeKind, id: i64) {
        if let (ForgeKind::Github, Some(rest)) = (forge, &self.github_rest) {
            rest.list_queued(scaleset::JobRequestId(id));
        }
    }

    /// Queues one GitHub job on a scale set (labels = the scale set's name).
    pub fn queue_github_job(&self, scale_set: ScaleSetId, label: &str) -> Result<Queued, WorldError> {
        let emu = self
            .github
            .as_ref()
            .ok_or_else(|| WorldError::Timeout(format!("a {}", fake_name(ForgeKind::Github))))?;
        let at = Instant::now();
        let id = emu.emu.queue_job(scale_set, [label]);
        self.list_on_rest(ForgeKind::Github, id.0);
        Ok(Queued { id: id.0, at })
    }

    /// Queues one Gitea job in the world's repository with `runs_on` labels.
    pub fn queue_gitea_job(&self, runs_on: &[&str]) -> Result<Queued, WorldError> {
        self.queue_job(ForgeKind::Gitea, runs_on)
    }

    /// Queues one waiting Forgejo job in the world's repository with `runs_on` labels.
    pub fn queue_forgejo_job(&self, runs_on: &[&str]) -> Result<Queued, WorldError> {
        self.queue_job(ForgeKind::Forgejo, runs_on)
    }

    /// Progress of the GitHub jobs of one scale set.
    pub fn github_progress(&self, scale_set: ScaleSetId) -> Progress {
        let Some(emu) = &self.github else {
            return Progress::default();
        };
        github_tallies(&emu.emu.state())
            .get(&scale_set)
            .copied()
            .unwrap_or_default()
    }

    /// Progress of the Gitea jobs whose `runs-on` is exactly `labels` (order ignored).
    pub fn gitea_progress(&self, labels: &[&str]) -> Progress {
        self.progress_of(ForgeKind::Gitea, &[labels])
            .pop()
            .unwrap_or_default()
    }

    /// Progress of the Forgejo jobs whose `runs-on` is exactly `labels` (order ignored).
    ///
    /// Registered runners are those whose declared label names include every one of `labels`,
    /// plus runner rows that have declared no label yet (they cannot be told apart by labels).
    pub fn forgejo_progress(&self, labels: &[&str]) -> Progress {
        self.progress_of(ForgeKind::Forgejo, &[labels])
            .pop()
            .unwrap_or_default()
    }
}

/// Where one group's jobs are queued and counted at its forge: the label its jobs ask for
/// and its runners carry (GitHub: the scale set's name, which is the group's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForgeTarget {
    /// The forge.
    pub forge: ForgeKind,
    /// The label.
    pub label: String,
}

impl ForgeTarget {
    /// Queues one job for this target.
    pub fn queue(&self, world: &World) -> Result<Queued, WorldError> {
        world.queue_job(self.forge, &[&self.label])
    }

    /// Where this target's jobs stand.
    pub fn progress(&self, world: &World) -> Progress {
        world
            .progress_of(self.forge, &[&[&self.label]])
            .pop()
            .unwrap_or_default()
    }
}

/// Latency from each queued job to a runner Job appearing, matching jobs to runner Jobs in
/// order (the n-th job queued is served by the n-th runner created). Exact when jobs are
/// queued one at a time; a fair estimate for bursts.
pub fn queue_to_runner_latencies(queued: &[Queued], tally: &GroupTally) -> Vec<Duration> {
    queued
        .iter()
        .zip(tally.created.iter())
        .map(|(q, (_, created))| created.saturating_duration_since(q.at))
        .collect()
}

/// The `p`-th percentile (0–100) of `samples` in milliseconds; 0 when empty.
pub fn percentile_ms(samples: &[Duration], p: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * (ms.len() - 1) as f64).round() as usize;
    ms[rank.min(ms.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_the_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile_ms(&samples, 50.0), 51.0);
        assert_eq!(percentile_ms(&samples, 99.0), 99.0);
        assert_eq!(percentile_ms(&samples, 100.0), 100.0);
        assert_eq!(percentile_ms(&[], 99.0), 0.0);
    }

    #[test]
    fn latencies_pair_jobs_with_runners_in_order() {
        let t0 = Instant::now();
        let queued = vec![
            Queued { id: 1, at: t0 },
            Queued {
                id: 2,
                at: t0 + Duration::from_millis(10),
            },
        ];
        let tally = GroupTally {
            created: vec![
                ("a".into(), t0 + Duration::from_millis(5)),
                ("b".into(), t0 + Duration::from_millis(30)),
            ],
            ..GroupTally::default()
        };
        let l = queue_to_runner_latencies(&queued, &tally);
        assert_eq!(l, vec![Duration::from_millis(5), Duration::from_millis(20)]);
    }
}
