//! GitHub's REST job re-run beside the scale-set emulator, so the operator's re-run of a job
//! whose runner the cluster killed reaches a fake that records it, and the job really runs
//! again.
//!
//! Three parts:
//!
//! - The testkit's [`RestJobsFake`] serves a run's job listing and the per-job re-run, and its
//!   [`RunnerDownloadsFake`] the runner downloads listing (the release GitHub serves).
//! - A front on its own port takes the config URL's traffic. It sends those two routes to the
//!   fake, and everything else (the token chain, the scale-set registration) through the
//!   downloads fake, which answers its own routes and forwards the rest to the emulator.
//!   The REST API of a config URL on a host other than github.com is `{host}/api/v3`, and the
//!   emulator serves only its own routes there, so one host must answer both.
//! - A mirror keeps the fake's runs in step with the emulator. As on GitHub, a job is listed from
//!   the moment it is queued (the world lists the jobs it queues at once, the mirror any other),
//!   and gets its runner's name once a runner takes it. For each re-run the fake accepts, the
//!   job is queued again on its scale set with its labels, as GitHub queues a re-run job for
//!   the runners of its `runs-on`.
//!
//! The emulator (`scaleset` 0.1.0, `testing/state.rs`, `State::queue_job`) gives every job
//! repository `org/repo`, display name `job-{id}`, and a run id drawn from the id counter right
//! after the job's own id. So a job's run is its id plus one.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::response::Response;
use forgerunner_testkit::forge_common::forward::Upstream as Server;
use forgerunner_testkit::forge_common::http::Served;
use forgerunner_testkit::github::rest_jobs::{FakeRestJob, Rerun, RestJobsFake};
use forgerunner_testkit::github::runner_downloads::RunnerDownloadsFake;
use forgerunner_testkit::github::{Emulator, EmulatorState, JobState};
use scaleset::JobRequestId;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::WorldError;

/// The repository of every job the emulator queues.
pub const EMULATOR_REPOSITORY: &str = "org/repo";
/// How often the mirror looks at the emulator.
const MIRROR_EVERY: Duration = Duration::from_millis(100);

/// The REST run id of an emulator job (see the module docs).
pub fn run_of(job: JobRequestId) -> u64 {
    u64::try_from(job.0 + 1).unwrap_or_default()
}

/// Which server a request on the front goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Upstream {
    /// The REST jobs fake.
    RestJobs,
    /// The scale-set emulator.
    Emulator,
}

/// The REST jobs fake's routes: `/api/v3/repos/{o}/{r}/actions/runs/{id}/jobs` and
/// `/api/v3/repos/{o}/{r}/actions/jobs/{id}/rerun`; the rest is the emulator's.
fn upstream_for(path: &str) -> Upstream {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segments.as_slice() {
        ["api", "v3", "repos", _, _, "actions", "runs", _, "jobs"]
        | ["api", "v3", "repos", _, _, "actions", "jobs", _, "rerun"] => Upstream::RestJobs,
        _ => Upstream::Emulator,
    }
}

struct Front {
    rest_jobs: Server,
    emulator: Server,
}

/// Sends the request on to its upstream and the answer back.
async fn forward(State(front): State<Arc<Front>>, req: Request) -> Response {
    let server = match upstream_for(req.uri().path()) {
        Upstream::RestJobs => &front.rest_jobs,
        Upstream::Emulator => &front.emulator,
    };
    server.forward(req).await
}

/// The REST jobs fake, its front and the mirror; all stop when this is dropped.
pub struct GithubRest {
    /// The fake: the re-runs it accepted, the requests it received.
    pub fake: RestJobsFake,
    /// The runner downloads fake: the release GitHub serves.
    pub downloads: RunnerDownloadsFake,
    front: Served<Front>,
    mirrored: Arc<Mutex<Mirrored>>,
    _stop: DropGuard,
}

impl GithubRest {
    /// Starts the fake (accepting `token`, the emulator's PAT), the front before it and the
    /// emulator, and the mirror.
    pub async fn start(emu: Arc<Emulator>, token: &str) -> Result<GithubRest, WorldError> {
        let fake = RestJobsFake::start(token).await?;
        let downloads = RunnerDownloadsFake::in_front_of(&emu.uri(), token).await?;
        let front = Front {
            rest_jobs: Server::new(fake.url())?,
            emulator: Server::new(downloads.url())?,
        };
        let front = Served::start(|_| front, |f| Router::new().fallback(forward).with_state(f)).await?;
        let stop = CancellationToken::new();
        let mirrored = Arc::new(Mutex::new(Mirrored::default()));
        tokio::spawn(mirror(emu, fake.clone(), mirrored.clone(), stop.clone()));
        Ok(GithubRest {
            fake,
            downloads,
            front,
            mirrored,
            _stop: stop.drop_guard(),
        })
    }

    /// Lists a job just queued at the emulator, before any runner can take it.
    pub fn list_queued(&self, job: JobRequestId) {
        let mut mirrored = lock(&self.mirrored);
        if mirrored.listed.contains_key(&job.0) {
            return;
        }
        if let Some(listed) = rest_job(job, None, "queued") {
            self.fake.add_run(EMULATOR_REPOSITORY, run_of(job), vec![listed]);
            mirrored.listed.insert(job.0, false);
        }
    }

    /// The organization config URL on the front (what a RunnerGroup points at).
    pub fn config_url(&self) -> String {
        format!("{}/{}", self.front.url(), scaleset::testing::ORG)
    }

    /// The re-runs the fake accepted so far.
    pub fn reruns(&self) -> Vec<Rerun> {
        self.fake.reruns()
    }
}

/// What the mirror already did.
#[derive(Debug, Default)]
struct Mirrored {
    /// Emulator jobs listed in the fake: whether with their runner's name.
    listed: BTreeMap<i64, bool>,
    /// Re-runs already queued again at the emulator.
    requeued: usize,
}

fn lock(m: &Mutex<Mirrored>) -> MutexGuard<'_, Mirrored> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The emulator job `job` as GitHub's REST API lists it; `None` for an id no REST id can be.
fn rest_job(job: JobRequestId, runner_name: Option<String>, status: &str) -> Option<FakeRestJob> {
    Some(FakeRestJob {
        id: u64::try_from(job.0).ok()?,
        name: format!("job-{}", job.0),
        runner_name,
        status: status.to_owned(),
    })
}

/// Keeps the fake's runs and the emulator's queue in step until `stop`.
async fn mirror(
    emu: Arc<Emulator>,
    fake: RestJobsFake,
    mirrored: Arc<Mutex<Mirrored>>,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(MIRROR_EVERY) => {}
        }
        let state = emu.state();
        let mut done = lock(&mirrored);
        for (job, runner_name, status) in changed_jobs(&state, &done.listed) {
            let run = run_of(job);
            // A job re-run meanwhile is listed under its new id: leave that be.
            let known = done.listed.contains_key(&job.0);
            let still_listed = fake
                .jobs(run)
                .iter()
                .any(|j| Some(j.id) == u64::try_from(job.0).ok());
            if known && !still_listed {
                continue;
            }
            let named = runner_name.is_some();
            if let Some(listed) = rest_job(job, runner_name, status) {
                fake.add_run(EMULATOR_REPOSITORY, run, vec![listed]);
                done.listed.insert(job.0, named);
            }
        }
        let reruns = fake.reruns();
        for rerun in reruns.iter().skip(done.requeued) {
            let Some(again) = requeue(&emu, &state, rerun) else {
                continue;
            };
            if let Some(listed) = rest_job(again, None, "queued") {
                fake.add_run(EMULATOR_REPOSITORY, run_of(again), vec![listed]);
                done.listed.insert(again.0, false);
            }
        }
        done.requeued = reruns.len();
    }
}

/// Jobs to list or to name: not listed yet, or listed without a runner that now has one. Each
/// with its runner's name (while the runner is registered) and REST status.
fn changed_jobs(
    state: &EmulatorState,
    listed: &BTreeMap<i64, bool>,
) -> Vec<(JobRequestId, Option<String>, &'static str)> {
    state
        .jobs
        .iter()
        .filter_map(|j| {
            let runner_name = j
                .runner_id
                .and_then(|id| state.runners.iter().find(|r| r.id == id).map(|r| r.name.clone()));
            let wanted = match listed.get(&j.id.0) {
                None => true,
                Some(named) => !named && runner_name.is_some(),
            };
            let status = match j.state {
                JobState::Available | JobState::Assigned => "queued",
                JobState::Running => "in_progress",
                JobState::Completed => "completed",
            };
            wanted.then_some((j.id, runner_name, status))
        })
        .collect()
}

/// Queues the re-run job on the scale set and with the labels of the job it re-runs; returns
/// the new job.
fn requeue(emu: &Emulator, state: &EmulatorState, rerun: &Rerun) -> Option<JobRequestId> {
    let Some(job) = state
        .jobs
        .iter()
        .find(|j| u64::try_from(j.id.0).ok() == Some(rerun.job_id))
    else {
        tracing::warn!(job = rerun.job_id, "re-run of a job the emulator does not know");
        return None;
    };
    let again = emu.queue_job(job.scale_set_id, job.labels.clone());
    tracing::info!(job = rerun.job_id, again = again.0, "re-run job queued");
    Some(again)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rest_jobs_routes_go_to_the_fake_and_the_rest_to_the_emulator() {
        for path in [
            "/api/v3/repos/org/repo/actions/runs/1002/jobs",
            "/api/v3/repos/org/repo/actions/jobs/1001/rerun",
        ] {
            assert_eq!(upstream_for(path), Upstream::RestJobs, "{path}");
        }
        for path in [
            "/api/v3/actions/runner-registration",
            "/api/v3/orgs/org/actions/runners/registration-token",
            "/api/v3/repos/org/repo/actions/runs/1002",
            "/api/v3/repos/org/repo/actions/jobs/1001",
            "/tenant/_apis/runtime/runnerscalesets",
            "/org",
        ] {
            assert_eq!(upstream_for(path), Upstream::Emulator, "{path}");
        }
    }
}
