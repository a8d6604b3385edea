//! From one snapshot of Forgejo's listings and the group's runners to the planner's view
//! (pure, no I/O). The forge module fetches; this module decides.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use forgerunner_core::forge::{ForgeRunnerState, RunnerRef};
use forgerunner_core::names::is_runner_name_of;
use forgerunner_core::plan::RunnerPhase;

use crate::labels::LabelSet;
use crate::state::{GroupBook, job_handle, runner_id};
use crate::types::{RunJob, Runner, RunnerStatus};

/// A listing and when its fetch started.
pub(crate) struct Listing<'a, T> {
    pub(crate) rows: &'a [T],
    pub(crate) at: Instant,
}

/// What the view says, before the facts are added.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) waiting_jobs: u32,
    pub(crate) runners: BTreeMap<String, ForgeRunnerState>,
    pub(crate) ghosts: Vec<String>,
}

/// The group being observed: its name (runner name prefix) and labels.
pub(crate) struct Group<'a> {
    pub(crate) name: &'a str,
    pub(crate) labels: &'a LabelSet,
}

/// Tunables of the reading.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Graces {
    /// A runner that looks offline for less than this is reported idle (a new runner is
    /// offline until its pod starts and connects).
    pub(crate) offline: Duration,
    /// An offline runner row this process created less than this ago is no ghost (its Job may
    /// not be in the cluster store yet).
    pub(crate) ghost: Duration,
}

/// The waiting jobs of the group, oldest first (the listing is id-descending).
pub(crate) fn waiting<'a>(jobs: &'a [RunJob], labels: &LabelSet) -> Vec<&'a RunJob> {
    let mut w: Vec<&RunJob> = jobs
        .iter()
        .filter(|j| j.is_waiting() && !j.runs_on.is_empty() && labels.matches(&j.runs_on))
        .collect();
    w.sort_by_key(|j| j.id);
    w
}

/// Waiting jobs not already done by one of our runners the listing predates.
fn demand(book: &mut GroupBook, waiting: &[&RunJob], jobs_at: Instant) -> u32 {
    let handles: BTreeSet<&str> = waiting.iter().map(|j| j.handle.as_str()).collect();
    let covered = book.covered(&handles, jobs_at);
    u32::try_from(waiting.len())
        .unwrap_or(u32::MAX)
        .saturating_sub(covered)
}

/// Forgejo 15+: runner rows and job handles tell each runner's state.
pub(crate) fn view_v15(
    group: Group<'_>,
    book: &mut GroupBook,
    refs: &[RunnerRef],
    jobs: Listing<'_, RunJob>,
    runners: Listing<'_, Runner>,
    graces: Graces,
    now: Instant,
) -> Seen {
    let (group_name, labels) = (group.name, group.labels);
    book.sync(refs, now);
    let waiting_jobs = waiting(jobs.rows, labels);
    let waiting_handles: BTreeSet<&str> = waiting_jobs.iter().map(|j| j.handle.as_str()).collect();
    let mut states = BTreeMap::new();
    for r in refs {
        let id = runner_id(r);
        let row = runners
            .rows
            .iter()
            .find(|x| id.map_or(x.name == r.name, |id| x.id == id));
        // Busy only from the runner's own row: Forgejo reports `active` while the runner updates
        // a task. A bound job that runs may have been taken by another runner (one without a
        // handle); inferring Busy from it would mark this runner busy for good, and a runner
        // that never gets its job would then never leave.
        let state = match row {
            Some(x) => match x.status {
                RunnerStatus::Active => ForgeRunnerState::Busy,
                RunnerStatus::Idle => {
                    book.offline_for(&r.name, false, now, graces.offline);
                    ForgeRunnerState::Idle
                }
                RunnerStatus::Offline if book.offline_for(&r.name, true, now, graces.offline) => {
                    ForgeRunnerState::Offline
                }
                RunnerStatus::Offline => ForgeRunnerState::Idle,
            },
            None => {
                // Ephemeral rows are deleted after their task. Only a listing fetched after the
                // runner was created can tell that it is gone. The runner listing is trusted
                // over an older jobs listing that may still show the job waiting.
                let listing_knows = book.created_at(&r.name).is_none_or(|c| runners.at >= c);
                if id.is_some() && listing_knows && r.phase != RunnerPhase::Failed {
                    ForgeRunnerState::Finished
                } else {
                    ForgeRunnerState::Unknown
                }
            }
        };
        if state != ForgeRunnerState::Unknown {
            states.insert(r.name.clone(), state);
        }
    }
    let names: BTreeSet<&str> = refs.iter().map(|r| r.name.as_str()).collect();
    let ghosts: BTreeSet<String> = runners
        .rows
        .iter()
        .filter(|x| x.status == RunnerStatus::Offline && is_runner_name_of(group_name, &x.name))
        .filter(|x| !names.contains(x.name.as_str()))
        .filter(|x| !book.recently_created(&x.name, now, graces.ghost))
        .map(|x| x.name.clone())
        .collect();
    // The jobs listing may be older than the runner listing: a job still shown waiting whose
    // bound runner is already at work (or done) is not waiting for a new runner.
    let at_work: BTreeSet<&str> = refs
        .iter()
        .filter(|r| {
            matches!(
                states.get(&r.name),
                Some(ForgeRunnerState::Busy | ForgeRunnerState::Finished)
            )
        })
        .filter_map(job_handle)
        .collect();
    Seen {
        waiting_jobs: demand(book, &waiting_jobs, jobs.at)
            .saturating_sub(book.uncovered_among(&at_work, &waiting_handles)),
        runners: states,
        ghosts: ghosts.into_iter().collect(),
    }
}

/// Forgejo 11–14: no runner API. So that a runner at work is never idle-reaped, the oldest
/// active runners (running pods first) are reported busy, as many as jobs are running.
pub(crate) fn view_token(
    labels: &LabelSet,
    book: &mut GroupBook,
    refs: &[RunnerRef],
    jobs: Listing<'_, RunJob>,
    now: Instant,
) -> Seen {
    book.sync(refs, now);
    let waiting_jobs = waiting(jobs.rows, labels);
    let running = jobs
        .rows
        .iter()
        .filter(|j| j.is_running() && labels.matches(&j.runs_on))
        .count();
    let mut active: Vec<&RunnerRef> = refs.iter().filter(|r| r.phase.is_active()).collect();
    // Runners created by an earlier process have no creation time here: they rank oldest.
    active.sort_by(|a, b| {
        (a.phase != RunnerPhase::Running)
            .cmp(&(b.phase != RunnerPhase::Running))
            .then_with(|| book.created_at(&a.name).cmp(&book.created_at(&b.name)))
            .then_with(|| a.name.cmp(&b.name))
    });
    let runners = active
        .into_iter()
        .take(running)
        .map(|r| (r.name.clone(), ForgeRunnerState::Busy))
        .collect();
    Seen {
        waiting_jobs: demand(book, &waiting_jobs, jobs.at),
        runners,
        ghosts: Vec::new(),
    }
}

#[cfg(test)]
mod tests;
