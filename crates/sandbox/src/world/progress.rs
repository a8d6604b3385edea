//! Progress of many groups from one read of each forge fake, in the same terms at every forge
//! (jobs and runners by the labels of their pool, see [`forgerunner_testkit::forge_common::FakeForgeServer`]).
//!
//! Reading a fake copies its whole state (the GitHub emulator also computes every scale set's
//! statistics), so asking once per group made a 1,000-group drain check cost a thousand full
//! copies every poll: the harness, not the operator, was then the bottleneck.

use std::collections::HashMap;

use scaleset::ScaleSetId;
use scaleset::testing::{EmulatorState, JobState};

use forgerunner_core::crd::ForgeKind;
use forgerunner_testkit::forge_common::JobPhase;

use super::World;
use super::workload::{ForgeTarget, Progress};

impl World {
    /// Where each target's jobs stand, index-aligned with `targets`; each forge is read once.
    pub fn progress_all(&self, targets: &[ForgeTarget]) -> Vec<Progress> {
        let mut out = vec![Progress::default(); targets.len()];
        for forge in ForgeKind::ALL {
            let at: Vec<(usize, [&str; 1])> = targets
                .iter()
                .enumerate()
                .filter(|(_, t)| t.forge == forge)
                .map(|(i, t)| (i, [t.label.as_str()]))
                .collect();
            if at.is_empty() {
                continue;
            }
            let wants: Vec<&[&str]> = at.iter().map(|(_, w)| &w[..]).collect();
            for ((i, _), p) in at.iter().zip(self.progress_of(forge, &wants)) {
                out[*i] = p;
            }
        }
        out
    }

    /// Progress of the jobs at `forge` whose labels are exactly each label set (order
    /// ignored), from one read of its fake. Registered runners are those carrying every wanted
    /// label, plus, where the fake says runners without labels may belong to any pool
    /// (Forgejo: a runner row created over REST whose pod has not connected yet), those: they
    /// cannot be told apart by labels, so they count for every label set and a leaked one is
    /// never missed.
    pub(crate) fn progress_of(&self, forge: ForgeKind, wants: &[&[&str]]) -> Vec<Progress> {
        let Some(fake) = self.forge(forge) else {
            return vec![Progress::default(); wants.len()];
        };
        let snapshot = fake.snapshot();
        let phases = snapshot.jobs.iter().map(|job| (job.pool.as_slice(), job.phase));
        let runners: Vec<Vec<String>> = snapshot.runners.into_iter().map(|r| r.pool).collect();
        progress_by_labels(
            phases,
            &RunnerLabels::new(&runners, fake.unlabelled_runners_match()),
            wants,
        )
    }
}

/// Jobs and registered runners per scale set, from one emulator snapshot.
pub(crate) fn github_tallies(state: &EmulatorState) -> HashMap<ScaleSetId, Progress> {
    let mut out: HashMap<ScaleSetId, Progress> = HashMap::new();
    for job in &state.jobs {
        let p = out.entry(job.scale_set_id).or_default();
        p.total += 1;
        match job.state {
            JobState::Available | JobState::Assigned => p.queued += 1,
            JobState::Running => p.running += 1,
            JobState::Completed => p.done += 1,
        }
    }
    for runner in &state.runners {
        out.entry(runner.scale_set_id).or_default().registered_runners += 1;
    }
    out
}

fn sorted<S: AsRef<str>>(labels: &[S]) -> Vec<String> {
    let mut v: Vec<String> = labels.iter().map(|l| l.as_ref().to_owned()).collect();
    v.sort_unstable();
    v
}

/// Registered runners indexed by label, so a group's count is not a scan of every runner.
struct RunnerLabels<'a> {
    runners: &'a [Vec<String>],
    by_label: HashMap<&'a str, usize>,
    /// Runners without labels, counted for every label set when `unlabelled_match`.
    unlabelled: usize,
}

impl<'a> RunnerLabels<'a> {
    fn new(runners: &'a [Vec<String>], unlabelled_match: bool) -> RunnerLabels<'a> {
        let mut by_label: HashMap<&str, usize> = HashMap::new();
        let mut unlabelled = 0;
        for labels in runners {
            if labels.is_empty() {
                unlabelled += usize::from(unlabelled_match);
                continue;
            }
            let mut distinct: Vec<&str> = labels.iter().map(String::as_str).collect();
            distinct.sort_unstable();
            distinct.dedup();
            for l in distinct {
                *by_label.entry(l).or_default() += 1;
            }
        }
        RunnerLabels {
            runners,
            by_label,
            unlabelled,
        }
    }

    /// Runners carrying every label of `want` (plus unlabelled ones when they match all).
    fn carrying(&self, want: &[&str]) -> usize {
        match want {
            [one] => self.by_label.get(one).copied().unwrap_or(0) + self.unlabelled,
            _ => self
                .runners
                .iter()
                .filter(|r| {
                    (self.unlabelled > 0 && r.is_empty())
                        || want.iter().all(|l| r.iter().any(|have| have == l))
                })
                .count(),
        }
    }
}

/// Progress of the jobs whose labels are exactly each wanted set (order ignored), with the
/// runners carrying every wanted label as registered.
fn progress_by_labels<'a>(
    jobs: impl Iterator<Item = (&'a [String], JobPhase)>,
    runners: &RunnerLabels,
    wants: &[&[&str]],
) -> Vec<Progress> {
    let mut by_labels: HashMap<Vec<String>, Progress> = HashMap::new();
    for (labels, phase) in jobs {
        let p = by_labels.entry(sorted(labels)).or_default();
        p.total += 1;
        match phase {
            JobPhase::Queued => p.queued += 1,
            JobPhase::Running => p.running += 1,
            JobPhase::Succeeded | JobPhase::Failed => p.done += 1,
        }
    }
    wants
        .iter()
        .map(|want| Progress {
            registered_runners: runners.carrying(want),
            ..by_labels.get(&sorted(want)).copied().unwrap_or_default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(v: &[&[&str]]) -> Vec<Vec<String>> {
        v.iter()
            .map(|r| r.iter().map(|s| (*s).to_owned()).collect())
            .collect()
    }

    #[test]
    fn runner_counts_match_a_scan() {
        let runners = labels(&[&["a", "b"], &["a"], &[], &["b", "b"], &["c"]]);
        let scan = |want: &[&str], unlabelled: bool| {
            runners
                .iter()
                .filter(|r| (unlabelled && r.is_empty()) || want.iter().all(|l| r.iter().any(|h| h == l)))
                .count()
        };
        for unlabelled in [false, true] {
            let idx = RunnerLabels::new(&runners, unlabelled);
            for want in [&["a"][..], &["b"], &["a", "b"], &["z"], &["b", "c"], &[]] {
                assert_eq!(
                    idx.carrying(want),
                    scan(want, unlabelled),
                    "{want:?} {unlabelled}"
                );
            }
        }
    }
}
