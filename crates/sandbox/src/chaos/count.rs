//! Counting what a cell's fault cost: jobs lost, jobs run twice, things left behind.
//!
//! Every forge is read through its fake's [`FakeForgeServer`] face: the jobs and runners of
//! the cell's pool, and work run twice as the fake counts it (Forgejo by its tasks). The
//! cluster side is the same for all: runner Jobs and pods left in the namespace.
//!
//! [`FakeForgeServer`]: forgerunner_testkit::forge_common::FakeForgeServer

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Serialize;

use super::Scenario;
use super::cell::{Cell, NAMESPACE};
use super::scenarios::InjectedFault;
use forgerunner_testkit::forge_common::fake_server::repeats;
use forgerunner_testkit::forge_common::{JobPhase, PoolJob};

/// How each job ended at the forge.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobEnds {
    /// Jobs that succeeded.
    pub succeeded: usize,
    /// Forge ids of jobs that ended in another way (failed, cancelled by their runner going
    /// away).
    pub failed: Vec<i64>,
    /// Jobs still queued or in progress.
    pub unfinished: usize,
}

impl JobEnds {
    /// Jobs lost: unfinished ones, and failed ones other than those whose runner the fault
    /// itself killed mid-job (such a job ends failed or cancelled at the forge, as on a real
    /// node loss, and nobody re-runs it by itself; any other failure is on the operator).
    pub fn lost(&self, interrupted: &BTreeSet<i64>) -> usize {
        self.unfinished + self.failed.iter().filter(|id| !interrupted.contains(id)).count()
    }
}

/// What is left in the cluster and at the forge.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Leaks {
    /// Runner Jobs left in the namespace.
    pub jobs: usize,
    /// Pods left in the namespace.
    pub pods: usize,
    /// Runners still registered at the forge.
    pub registered: usize,
}

impl Leaks {
    /// Everything left.
    pub fn total(&self) -> usize {
        self.jobs + self.pods + self.registered
    }
}

/// One cell's result.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Outcome {
    /// Scenario name.
    pub scenario: String,
    /// Forge name.
    pub forge: String,
    /// Jobs queued.
    pub jobs: usize,
    /// Jobs never run or left unfinished (see [`JobEnds::lost`]).
    pub lost: usize,
    /// Jobs run more than once, runners that ran more than one job, and runner Jobs made for
    /// a job that already had one (where the forge binds runners to jobs).
    pub duplicates: usize,
    /// Runner Jobs, pods and registered runners left after the drain.
    pub leaks: usize,
    /// The parts of `leaks`.
    pub left: Leaks,
    /// From the fault until every job had ended and nothing was left (or the drain deadline).
    #[serde(serialize_with = "seconds")]
    pub recovery: Duration,
    /// Jobs whose runner the fault killed mid-job (they may end failed).
    pub interrupted: usize,
    /// Runner Jobs created beyond one per job: spare runners that left through the idle
    /// timeout. Not duplicates where the forge cannot say which job a runner was made for.
    pub spare_runners: usize,
    /// GitHub: registrations left with no runner Job ever created (a kill between the JIT
    /// config and the Job; documented in docs/github.md, GitHub drops them after a day).
    pub orphan_registrations: usize,
    /// What the scenario did, for the report.
    pub notes: Vec<String>,
    /// The operators' last output when something is wrong.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub log_tail: String,
}

impl Outcome {
    /// Nothing lost, run twice or left.
    pub fn is_clean(&self) -> bool {
        self.lost == 0 && self.duplicates == 0 && self.leaks == 0
    }
}

fn seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64((d.as_secs_f64() * 100.0).round() / 100.0)
}

impl Cell {
    /// What is left now; GitHub registrations that never had a runner Job are not counted
    /// here (see [`Outcome::orphan_registrations`]).
    pub async fn leaks(&self) -> Leaks {
        let jobs = self
            .world
            .runner_jobs(NAMESPACE, None)
            .await
            .map_or(usize::MAX / 4, |j| j.len());
        let pods = self.pods().await.map_or(usize::MAX / 4, |p| p.len());
        let (registered, _) = self.registered_runners();
        Leaks {
            jobs,
            pods,
            registered,
        }
    }

    /// Runners registered at the forge: (those a runner Job was made for, the rest). Only a
    /// forge that registers runners without runner Jobs (GitHub, see
    /// [`Outcome::orphan_registrations`]) can have the rest; the fakes of the others hold only
    /// this cell's runners, and a Forgejo runner row may not have declared its labels yet.
    fn registered_runners(&self) -> (usize, usize) {
        let Some(fake) = self.world.forge(self.forge.kind()) else {
            return (0, 0);
        };
        if !fake.registers_without_runner_jobs() {
            return (self.progress().registered_runners, 0);
        }
        let created = self.watch.group(super::cell::GROUP).created;
        let had_job = |name: &str| created.iter().any(|(n, _)| n == name);
        let ours: Vec<_> = fake
            .runners()
            .into_iter()
            .filter(|r| r.pool == [self.target.label.clone()])
            .collect();
        let with_job = ours.iter().filter(|r| had_job(&r.name)).count();
        (with_job, ours.len() - with_job)
    }

    /// How the cell's jobs ended, and how many were run twice (jobs run by two runners, or a
    /// runner that ran two jobs).
    fn job_ends(&self) -> (JobEnds, usize) {
        let mut ends = JobEnds::default();
        let Some(fake) = self.world.forge(self.forge.kind()) else {
            return (ends, 0);
        };
        let jobs: Vec<PoolJob> = fake
            .jobs()
            .into_iter()
            .filter(|j| j.pool == [self.target.label.clone()])
            .collect();
        for j in &jobs {
            match j.phase {
                JobPhase::Succeeded => ends.succeeded += 1,
                JobPhase::Failed => ends.failed.push(j.id),
                JobPhase::Queued | JobPhase::Running => ends.unfinished += 1,
            }
        }
        (ends, fake.ran_twice(&jobs))
    }

    /// Names and states of what is left, so a leak can be traced in the operator's output.
    async fn describe_leftovers(&self) -> String {
        let pods: Vec<String> = self
            .pods()
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|p| {
                let phase = p.status.and_then(|s| s.phase).unwrap_or_default();
                let deleting = p.metadata.deletion_timestamp.is_some();
                let owners = p.metadata.owner_references.map_or(0, |o| o.len());
                let name = p.metadata.name.unwrap_or_default();
                format!("{name} ({phase}, deleting {deleting}, owners {owners})")
            })
            .collect();
        let runners: Vec<String> = self
            .world
            .forge(self.forge.kind())
            .map_or_else(Vec::new, |f| f.describe_runners());
        format!("left: pods {pods:?}; registered runners {runners:?}")
    }

    /// Counts the cell after its drain.
    pub async fn count(&self, scenario: Scenario, jobs: usize, fault: &InjectedFault) -> Outcome {
        let (ends, ran_twice) = self.job_ends();
        let tally = self.watch.group(super::cell::GROUP);
        // Forgejo 15 binds each runner to one job's handle: two started runner Jobs for one
        // handle are two runners for one job, even if only one of them got to run it. A Job
        // deleted before its pod ever started (one left without its Secret is replaced) never
        // was a runner.
        let started_bindings: BTreeMap<String, String> = tally
            .bindings
            .iter()
            .filter(|(job, _)| tally.started.contains(*job))
            .map(|(job, binding)| (job.clone(), binding.clone()))
            .collect();
        let bound_twice = repeats(started_bindings.values());
        let left = self.leaks().await;
        let (_, orphans) = self.registered_runners();
        let mut notes = fault.notes.clone();
        if left.total() > 0 {
            notes.push(self.describe_leftovers().await);
        }
        if bound_twice > 0 {
            let mut by_binding: BTreeMap<&String, Vec<&String>> = BTreeMap::new();
            for (job, binding) in &started_bindings {
                by_binding.entry(binding).or_default().push(job);
            }
            by_binding.retain(|_, jobs| jobs.len() > 1);
            let tasks: Vec<String> = self.world.forgejo.as_ref().map_or_else(Vec::new, |f| {
                f.tasks()
                    .into_iter()
                    .filter(|t| by_binding.contains_key(&t.handle))
                    .map(|t| {
                        format!(
                            "task {} of job {} on {}: {:?}",
                            t.id, t.job_id, t.runner_name, t.result
                        )
                    })
                    .collect()
            });
            notes.push(format!(
                "runner Jobs bound to one job: {by_binding:?}; its tasks: {tasks:?}"
            ));
        }
        Outcome {
            scenario: scenario.name().to_owned(),
            forge: self.forge.name().to_owned(),
            jobs,
            lost: ends.lost(&fault.interrupted),
            duplicates: ran_twice + bound_twice,
            leaks: left.total(),
            left,
            recovery: Duration::ZERO,
            interrupted: fault.interrupted.len(),
            spare_runners: tally.created.len().saturating_sub(jobs),
            orphan_registrations: orphans,
            notes,
            log_tail: String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_jobs_allow_only_the_interrupted_ones_to_fail() {
        let ends = JobEnds {
            succeeded: 9,
            failed: vec![4, 7],
            unfinished: 1,
        };
        assert_eq!(ends.lost(&BTreeSet::new()), 3);
        assert_eq!(ends.lost(&BTreeSet::from([4, 7])), 1);
        assert_eq!(
            ends.lost(&BTreeSet::from([4, 9])),
            2,
            "only the interrupted job may fail, and an unfinished one is always lost"
        );
    }

    #[test]
    fn repeats_count_each_extra_occurrence() {
        assert_eq!(repeats([1, 2, 3]), 0);
        assert_eq!(repeats([1, 1, 2, 2, 2]), 3);
        assert_eq!(repeats(Vec::<u8>::new()), 0);
    }

    #[test]
    fn an_outcome_is_clean_only_with_all_three_at_zero() {
        let clean = Outcome::default();
        assert!(clean.is_clean());
        for o in [
            Outcome {
                lost: 1,
                ..Outcome::default()
            },
            Outcome {
                duplicates: 1,
                ..Outcome::default()
            },
            Outcome {
                leaks: 1,
                ..Outcome::default()
            },
        ] {
            assert!(!o.is_clean());
        }
    }
}
