//! Progress of many groups from one read of each forge fake.
//!
//! Reading a fake copies its whole state (the GitHub emulator also computes every scale set's
//! statistics), so asking once per group made a 1,000-group drain check cost a thousand full
//! copies every poll: the harness, not the operator, was then the bottleneck.

use std::collections::HashMap;

use scaleset::ScaleSetId;
use scaleset::testing::{EmulatorState, JobState};

use super::World;
use super::workload::{ForgeTarget, Progress};

impl World {
    /// Where each target's jobs stand, index-aligned with `targets`; each forge is read once.
    pub fn progress_all(&self, targets: &[ForgeTarget]) -> Vec<Progress> {
        let mut out = vec![Progress::default(); targets.len()];
        let github: Vec<(usize, ScaleSetId)> = targets
            .iter()
            .enumerate()
            .filter_map(|(i, t)| match t {
                ForgeTarget::Github { scale_set, .. } => Some((i, *scale_set)),
                _ => None,
            })
            .collect();
        if let (false, Some(emu)) = (github.is_empty(), &self.github) {
            let tallies = github_tallies(&emu.emu.state());
            for (i, id) in github {
                out[i] = tallies.get(&id).copied().unwrap_or_default();
            }
        }
        let gitea: Vec<(usize, Vec<&str>)> = targets
            .iter()
            .enumerate()
            .filter_map(|(i, t)| match t {
                ForgeTarget::Gitea { label } => Some((i, vec![label.as_str()])),
                _ => None,
            })
            .collect();
        if !gitea.is_empty() {
            let wants: Vec<&[&str]> = gitea.iter().map(|(_, w)| w.as_slice()).collect();
            for ((i, _), p) in gitea.iter().zip(self.gitea_progress_of(&wants)) {
                out[*i] = p;
            }
        }
        let forgejo: Vec<(usize, Vec<&str>)> = targets
            .iter()
            .enumerate()
            .filter_map(|(i, t)| match t {
                ForgeTarget::Forgejo { label } => Some((i, vec![label.as_str()])),
                _ => None,
            })
            .collect();
        if !forgejo.is_empty() {
            let wants: Vec<&[&str]> = forgejo.iter().map(|(_, w)| w.as_slice()).collect();
            for ((i, _), p) in forgejo.iter().zip(self.forgejo_progress_of(&wants)) {
                out[*i] = p;
            }
        }
        out
    }

    /// Progress of the Gitea jobs whose `runs-on` is exactly each label set (order ignored),
    /// from one read of the fake. Registered runners are those carrying every wanted label.
    pub(crate) fn gitea_progress_of(&self, wants: &[&[&str]]) -> Vec<Progress> {
        use forgerunner_testkit::gitea::JobState;
        let Some(fake) = &self.gitea else {
            return vec![Progress::default(); wants.len()];
        };
        let jobs = fake.jobs();
        let phases = jobs.iter().map(|job| {
            let phase = match job.state {
                JobState::Waiting | JobState::Blocked => Phase::Queued,
                JobState::Running => Phase::Running,
                JobState::Done(_) => Phase::Done,
            };
            (job.labels.as_slice(), phase)
        });
        let runners: Vec<Vec<String>> = fake.runners().into_iter().map(|r| r.labels).collect();
        progress_by_labels(phases, &RunnerLabels::new(&runners, false), wants)
    }

    /// Progress of the Forgejo jobs whose `runs-on` is exactly each label set (order ignored),
    /// from one read of the fake.
    ///
    /// Registered runners are those whose declared label names include every wanted label,
    /// plus runner rows that have declared no label yet (created over REST, pod not yet
    /// connected): those cannot be told apart by labels, so they count for every label set and
    /// a leaked one is never missed.
    pub(crate) fn forgejo_progress_of(&self, wants: &[&[&str]]) -> Vec<Progress> {
        use forgerunner_testkit::forgejo::JobStatus;
        let Some(fake) = &self.forgejo else {
            return vec![Progress::default(); wants.len()];
        };
        let jobs = fake.jobs();
        let phases = jobs.iter().map(|job| {
            let phase = match job.status {
                JobStatus::Waiting | JobStatus::Blocked => Phase::Queued,
                JobStatus::Running => Phase::Running,
                JobStatus::Done(_) => Phase::Done,
            };
            (job.runs_on.as_slice(), phase)
        });
        let runners: Vec<Vec<String>> = fake.runners().into_iter().map(|r| r.labels).collect();
        progress_by_labels(phases, &RunnerLabels::new(&runners, true), wants)
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

/// Where a job is, in the forge-neutral terms of [`Progress`].
#[derive(Clone, Copy)]
enum Phase {
    Queued,
    Running,
    Done,
}

/// Progress of the jobs whose labels are exactly each wanted set (order ignored), with the
/// runners carrying every wanted label as registered.
fn progress_by_labels<'a>(
    jobs: impl Iterator<Item = (&'a [String], Phase)>,
    runners: &RunnerLabels,
    wants: &[&[&str]],
) -> Vec<Progress> {
    let mut by_labels: HashMap<Vec<String>, Progress> = HashMap::new();
    for (labels, phase) in jobs {
        let p = by_labels.entry(sorted(labels)).or_default();
        p.total += 1;
        match phase {
            Phase::Queued => p.queued += 1,
            Phase::Running => p.running += 1,
            Phase::Done => p.done += 1,
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
