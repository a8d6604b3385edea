//! From one snapshot of Forgejo's listings and the group's runners to the planner's view
//! (pure, no I/O). The forge module fetches; this module decides.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use forgerunner_core::forge::{ForgeRunnerState, ListedRows, RunnerRef};
use forgerunner_core::names::is_runner_name_of;
use forgerunner_core::plan::RunnerPhase;

use crate::classes::Claim;
use crate::runner_id;
use crate::types::{RunJob, Runner, RunnerStatus};

/// A listing and when its fetch started.
pub(crate) struct Listing<'a, T> {
    pub(crate) rows: &'a [T],
    pub(crate) at: Instant,
}

/// The runner listing (v15), and what proves a runner it does not show gone.
pub(crate) struct RunnerRows<'a> {
    /// Rows of the listing, plus rows found by id since.
    pub(crate) rows: &'a [Runner],
    /// When the listing's fetch started.
    pub(crate) at: Instant,
    /// One page held the listing ([`crate::types::RunnerList::whole`]): absence proves a
    /// runner gone. Across pages a runner may just have moved.
    pub(crate) whole: bool,
    /// Runners a lookup by id found gone (404) after the listing.
    pub(crate) gone: &'a BTreeSet<i64>,
}

/// The ids of our active runners that `rows` do not show, for a lookup by id when the listing
/// took more than one page (oldest id first: the longest-lived are looked at first).
pub(crate) fn unlisted_ids(refs: &[RunnerRef], rows: &[Runner]) -> Vec<i64> {
    let shown: BTreeSet<i64> = rows.iter().map(|x| x.id).collect();
    let ids: BTreeSet<i64> = refs
        .iter()
        .filter(|r| r.phase.is_active())
        .filter_map(runner_id::of)
        .filter(|id| !shown.contains(id))
        .collect();
    ids.into_iter().collect()
}

/// The listed row of our runner `r`: by the runner id it was created with, else (a runner
/// whose creation was not recorded) by name.
pub(crate) fn row_of<'a>(r: &RunnerRef, rows: &'a [Runner]) -> Option<&'a Runner> {
    let id = runner_id::of(r);
    rows.iter().find(|x| id.map_or(x.name == r.name, |id| x.id == id))
}

/// What the view says, before the facts are added.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) waiting_jobs: u32,
    pub(crate) runners: BTreeMap<String, ForgeRunnerState>,
    /// The rows named like the group's runners, for core's ghost rule; `None` on 11–14, which
    /// list no runners.
    pub(crate) listed_rows: Option<ListedRows>,
    /// Bound runners whose job is gone ([`is_stranded`]): the planner removes them at once.
    pub(crate) stranded: BTreeSet<String>,
}

/// The group being observed: its name (runner name prefix) and the jobs it serves.
pub(crate) struct Group<'a> {
    pub(crate) name: &'a str,
    pub(crate) claim: &'a Claim,
    /// The description the group's own rows carry ([`crate::row_mark::of_group`]).
    pub(crate) mark: Option<&'a str>,
}

/// The waiting jobs some runner of the group can take, oldest first (the listing is
/// id-descending).
pub(crate) fn waiting<'a>(jobs: &'a [RunJob], claim: &Claim) -> Vec<&'a RunJob> {
    let mut w: Vec<&RunJob> = jobs
        .iter()
        .filter(|j| j.is_waiting() && !j.runs_on.is_empty() && claim.takes(&j.runs_on))
        .collect();
    w.sort_by_key(|j| j.id);
    w
}

/// How many jobs the listing shows waiting for a runner of the group. Core's ledger nets them
/// for the runners bound to them and for those that took a job after the listing was fetched
/// (the view's `listed_at`).
fn demand(waiting: &[&RunJob]) -> u32 {
    u32::try_from(waiting.len()).unwrap_or(u32::MAX)
}

/// Forgejo 15+: runner rows and job handles tell each runner's state, as its row shows it now
/// (a new runner is offline until its pod starts and connects; how long a runner has been
/// connected is core's to count, `RunnerRef::connected_since`).
pub(crate) fn view_v15(
    group: Group<'_>,
    refs: &[RunnerRef],
    jobs: Listing<'_, RunJob>,
    runners: RunnerRows<'_>,
) -> Seen {
    let (group_name, claim, mark) = (group.name, group.claim, group.mark);
    let waiting_jobs = waiting(jobs.rows, claim);
    // Every handle the jobs listing shows, waiting or running.
    let listed_handles: BTreeSet<&str> = jobs.rows.iter().map(|j| j.handle.as_str()).collect();
    let mut states = BTreeMap::new();
    let mut stranded = BTreeSet::new();
    for r in refs {
        let id = runner_id::of(r);
        let row = row_of(r, runners.rows);
        // Busy only from the runner's own row: Forgejo reports `active` while the runner updates
        // a task. A bound job that runs may have been taken by another runner (one without a
        // handle); inferring Busy from it would mark this runner busy for good, and a runner
        // that never gets its job would then never leave.
        let state = match row {
            Some(x)
                if x.status != RunnerStatus::Active && is_stranded(r, &jobs, &runners, &listed_handles) =>
            {
                stranded.insert(r.name.clone());
                ForgeRunnerState::Offline
            }
            Some(x) => match x.status {
                RunnerStatus::Active => ForgeRunnerState::Busy,
                RunnerStatus::Idle => ForgeRunnerState::Idle,
                RunnerStatus::Offline => ForgeRunnerState::Offline,
            },
            None => {
                // Ephemeral rows are deleted after their task. Only a listing fetched after the
                // runner was registered (core's `registered_at`; an adopted runner's is older)
                // can tell that it is gone, and only a whole one (or a lookup by id): a runner
                // that called in between two page requests is missing from a paged listing
                // although it lives, and a live runner taken for finished would neither cover
                // its job nor ever be reaped. The runner listing is trusted over an older jobs
                // listing that may still show the job waiting.
                let listing_knows = r.registered_at.is_none_or(|c| runners.at >= c);
                let proven = runners.whole || id.is_some_and(|id| runners.gone.contains(&id));
                if id.is_some() && listing_knows && proven && r.phase != RunnerPhase::Failed {
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
    // Core tells the ghosts among the offline rows: a new runner's row is offline until its pod
    // connects, whoever made it.
    let (offline, online): (Vec<&Runner>, Vec<&Runner>) = runners
        .rows
        .iter()
        .filter(|x| is_runner_name_of(group_name, &x.name))
        .partition(|x| x.status == RunnerStatus::Offline);
    let own = offline
        .iter()
        .filter(|x| mark.is_some_and(|m| x.description == m))
        .map(|x| x.name.clone())
        .collect();
    let names = |rows: Vec<&Runner>| rows.into_iter().map(|x| x.name.clone()).collect();
    let listed_rows = ListedRows {
        offline: names(offline),
        online: names(online),
        own,
        whole: runners.whole,
        listed_at: runners.at,
    };
    // A stranded runner can take no job: the planner removes it at once and it covers no
    // demand (the re-run of its own job gets a runner of its own).
    Seen {
        waiting_jobs: demand(&waiting_jobs),
        runners: states,
        listed_rows: Some(listed_rows),
        stranded,
    }
}

/// Whether `r`, a live runner bound to a job handle that Forgejo shows not at work, can never
/// get a job: the jobs listing shows its handle neither waiting nor running although it was
/// fetched after the runner was made, and the runner row was read after that listing (so the
/// runner did not take the job and finish in between: its ephemeral row would be gone). A
/// re-run gives the job a new handle (`models/actions/run_job.go` `PrepareNextAttempt`) and a
/// cancel ends it; either way the runner's `one-job --handle` polls for nothing until its idle
/// timeout.
fn is_stranded(
    r: &RunnerRef,
    jobs: &Listing<'_, RunJob>,
    runners: &RunnerRows<'_>,
    listed_handles: &BTreeSet<&str>,
) -> bool {
    let Some(handle) = r.binding() else {
        return false;
    };
    r.phase.is_active()
        && !listed_handles.contains(handle)
        && r.registered_at.is_none_or(|c| jobs.at >= c)
        && runners.at >= jobs.at
}

/// Forgejo 11–14: no runner API. So that a runner at work is never idle-reaped, the oldest
/// active runners (running pods first) are reported busy, as many as jobs are running.
pub(crate) fn view_token(claim: &Claim, refs: &[RunnerRef], jobs: Listing<'_, RunJob>) -> Seen {
    let waiting_jobs = waiting(jobs.rows, claim);
    let running = jobs
        .rows
        .iter()
        .filter(|j| j.is_running() && claim.takes(&j.runs_on))
        .count();
    let mut active: Vec<&RunnerRef> = refs.iter().filter(|r| r.phase.is_active()).collect();
    // Runners registered by an earlier process have no registration time: they rank oldest.
    active.sort_by(|a, b| {
        (a.phase != RunnerPhase::Running)
            .cmp(&(b.phase != RunnerPhase::Running))
            .then_with(|| a.registered_at.cmp(&b.registered_at))
            .then_with(|| a.name.cmp(&b.name))
    });
    let runners = active
        .into_iter()
        .take(running)
        .map(|r| (r.name.clone(), ForgeRunnerState::Busy))
        .collect();
    Seen {
        waiting_jobs: demand(&waiting_jobs),
        runners,
        listed_rows: None,
        stranded: BTreeSet::new(),
    }
}

#[cfg(test)]
mod tests;
