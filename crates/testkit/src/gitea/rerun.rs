//! Re-running one job through the REST API as Gitea 1.26 does, and what lets such a re-run
//! through after a runner vanished mid-job: the server failing the runner's task.
//!
//! Upstream (bircni/gitea at v1.26.0):
//! - `routers/api/v1/api.go`: `POST /repos/{owner}/{repo}/actions/runs/{run}/jobs/{job_id}/rerun`
//!   exists from 1.26.0 only (1.25.x has no such route: 404), behind `reqToken()` (401 "token
//!   is required") and `reqRepoWriter(unit.TypeActions)` (403 "user should have a permission to
//!   write to a repo"). The fake has no collaborators: owning the repository's owner (itself,
//!   an organization it owns) or being a site admin stands for write access.
//! - `routers/api/v1/repo/action.go` `RerunWorkflowJob`: a run not in the repository is 404
//!   (`getCurrentRepoActionRunByID`), a job not of that run 404 (`APIErrorNotFound`); an
//!   `ErrInvalidArgument` from the service is 400 (`handleWorkflowRerunError`); success is 201
//!   with the job.
//! - `services/actions/rerun.go` `prepareRunRerun`: 400 "this workflow run is not done" while
//!   the run is not done, which it is once every job of it is (the run's status aggregates its
//!   jobs'). `rerunWorkflowJob` puts the **same** `ActionRunJob` row back to waiting with
//!   `task_id`, `started` and `stopped` cleared, so the same job id is queued again. Its
//!   `Attempt` is left as it is: Gitea raises it when a runner takes the job
//!   (`CreateTaskForRunner` in `models/actions/task.go`), so the `queued` delivery the re-run
//!   sends (`notify_service.WorkflowJobStatusUpdate`, rendered by `ToActionWorkflowJob` in
//!   `services/convert/convert.go`) carries the same id **and the same `run_attempt`** as the
//!   killed task's `completed` delivery, no `runner_id`/`runner_name` (no task any more), and
//!   the job's first `created_at`. (1.27 clones the jobs into a new attempt with new ids; the
//!   fake plays 1.26 for every version from 1.26. It models no `needs`, so no dependents are
//!   re-run along.)
//! - `services/actions/clear_tasks.go` `StopZombieTasks` → `stopTasks`: a running task not
//!   updated for `ZOMBIE_TASK_TIMEOUT` (10 minutes by default, checked `@every 5m` by the cron
//!   task `stop_zombie_tasks`) is stopped with `StatusFailure`; its runner is no longer busy.

use axum::http::StatusCode;

use super::model::{Conclusion, FakeJob, JobChange, JobState, Model};

/// One request that reached the re-run route, and the status the fake answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RerunRequest {
    /// Repository owner from the path.
    pub owner: String,
    /// Repository name from the path.
    pub repo: String,
    /// Run id from the path (0 when not a number, as Gitea's `PathParamInt64` reads it).
    pub run_id: i64,
    /// Job id from the path (0 when not a number).
    pub job_id: i64,
    /// HTTP status sent back.
    pub status: u16,
}

/// Why Gitea refuses to re-run a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RerunRefusal {
    /// No such run in the repository (404).
    RunNotFound,
    /// The run has no job of that id (404).
    JobNotFound,
    /// A job of the run is not done yet (400).
    RunNotDone,
}

impl RerunRefusal {
    /// The status `RerunWorkflowJob` answers with.
    pub fn status(self) -> StatusCode {
        match self {
            RerunRefusal::RunNotFound | RerunRefusal::JobNotFound => StatusCode::NOT_FOUND,
            RerunRefusal::RunNotDone => StatusCode::BAD_REQUEST,
        }
    }

    /// The `message` of Gitea's error body. `APIErrorNotFound` (`services/context/api.go`)
    /// says "not found" and puts the cause ("workflow job with id N") in `errors`, which the
    /// fake leaves out.
    pub fn message(self) -> &'static str {
        match self {
            RerunRefusal::RunNotFound | RerunRefusal::JobNotFound => "not found",
            RerunRefusal::RunNotDone => "this workflow run is not done",
        }
    }
}

impl Model {
    /// Adds a job to the run of job `sibling` (same repository and run id), in `state`.
    pub fn add_job_in_run_of(&mut self, sibling: i64, runs_on: &[&str], state: JobState) -> Option<FakeJob> {
        let of = self.jobs.get(&sibling)?.clone();
        let mut job = self.add_job(&of.owner, &of.repo, runs_on, state);
        job.run_id = of.run_id;
        self.jobs.insert(job.id, job.clone());
        Some(job)
    }

    /// Gitea's `StopZombieTasks` for one job: a running job fails and its runner is free again.
    /// `None` (nothing changes) when the job is not running.
    pub fn stop_zombie_task(&mut self, id: i64) -> Option<JobChange> {
        let job = self.jobs.get_mut(&id)?;
        if job.state != JobState::Running {
            return None;
        }
        job.state = JobState::Done(Conclusion::Failure);
        job.completed = Some(jiff::Timestamp::now());
        let change = JobChange { job: job.clone() };
        if let Some(r) = job.runner_id.and_then(|r| self.runners.get_mut(&r))
            && r.task == Some(id)
        {
            r.task = None;
        }
        Some(change)
    }

    /// Whether run `run_id` of `owner/repo` is done (every job of it done), as
    /// `GetWorkflowRun` tells it in `status` (`ToActionsStatus`, `services/convert/convert.go`);
    /// `None` for a run the repository does not have.
    pub fn run_done(&self, owner: &str, repo: &str, run_id: i64) -> Option<bool> {
        let mut run = self
            .jobs
            .values()
            .filter(|j| j.owner == owner && j.repo == repo && j.run_id == run_id)
            .peekable();
        run.peek()?;
        Some(run.all(|j| matches!(j.state, JobState::Done(_))))
    }

    /// Gitea 1.26's `RerunWorkflowJob` for job `job_id` of run `run_id` in `owner/repo`: the
    /// same job goes back to the queue, its task (runner) and times cleared, its attempt kept.
    pub fn rerun_job(
        &mut self,
        owner: &str,
        repo: &str,
        run_id: i64,
        job_id: i64,
    ) -> Result<JobChange, RerunRefusal> {
        let run: Vec<&FakeJob> = self
            .jobs
            .values()
            .filter(|j| j.owner == owner && j.repo == repo && j.run_id == run_id)
            .collect();
        if run.is_empty() {
            return Err(RerunRefusal::RunNotFound);
        }
        if !run.iter().any(|j| j.id == job_id) {
            return Err(RerunRefusal::JobNotFound);
        }
        if run.iter().any(|j| !matches!(j.state, JobState::Done(_))) {
            return Err(RerunRefusal::RunNotDone);
        }
        let job = self.jobs.get_mut(&job_id).ok_or(RerunRefusal::JobNotFound)?;
        job.state = JobState::Waiting;
        job.runner_id = None;
        job.runner_name.clear();
        job.runner_labels.clear();
        job.started = None;
        job.completed = None;
        job.cancel_requested = false;
        Ok(JobChange { job: job.clone() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gitea::model::FakeScope;

    /// A model with job `a` running on a runner, and its sibling `b` in the same run queued.
    fn run_of_two() -> (Model, i64, i64, i64) {
        let mut m = Model::default();
        let tok = m.registration_token(&FakeScope::Global);
        let runner = m
            .register(&tok, "r", vec!["linux".into()], true)
            .expect("registered");
        let a = m.add_job("acme", "app", &["linux"], JobState::Waiting);
        let b = m
            .add_job_in_run_of(a.id, &["gpu"], JobState::Waiting)
            .expect("sibling");
        assert_eq!(b.run_id, a.run_id);
        m.fetch(runner.id);
        assert_eq!(m.jobs[&a.id].state, JobState::Running);
        (m, runner.id, a.id, b.id)
    }

    #[test]
    fn a_zombie_task_fails_and_frees_its_runner() {
        let (mut m, runner, a, b) = run_of_two();
        assert!(m.stop_zombie_task(b).is_none(), "a queued job is no task");
        let change = m.stop_zombie_task(a).expect("running");
        assert_eq!(change.job.state, JobState::Done(Conclusion::Failure));
        assert_eq!(m.runners[&runner].task, None);
        assert!(m.stop_zombie_task(a).is_none(), "already done");
    }

    #[test]
    fn a_job_is_rerun_only_once_its_whole_run_is_done() {
        let (mut m, _, a, b) = run_of_two();
        let run = m.jobs[&a].run_id;
        m.stop_zombie_task(a);
        assert_eq!(
            m.rerun_job("acme", "app", run, a).unwrap_err(),
            RerunRefusal::RunNotDone
        );
        assert_eq!(m.run_done("acme", "app", run), Some(false), "b still waits");
        m.jobs.get_mut(&b).expect("b").state = JobState::Done(Conclusion::Success);
        assert_eq!(m.run_done("acme", "app", run), Some(true));
        assert_eq!(
            m.run_done("acme", "other", run),
            None,
            "not this repository's run"
        );
        let taken = m.jobs[&a].attempt;
        assert_eq!(taken, 1, "raised when the runner took it");
        let change = m.rerun_job("acme", "app", run, a).expect("re-run");
        assert_eq!(change.job.id, a, "the same job row");
        assert_eq!(change.job.attempt, taken, "the re-run keeps the attempt");
        let again = &m.jobs[&a];
        assert_eq!(again.state, JobState::Waiting);
        assert_eq!((again.runner_id, again.runner_name.as_str()), (None, ""));
        assert_eq!((again.started, again.completed), (None, None));
        assert_eq!(
            m.jobs[&b].state,
            JobState::Done(Conclusion::Success),
            "siblings stay"
        );
    }

    /// What the re-run's `queued` delivery carries next to the killed task's `completed` one:
    /// the same id and `run_attempt`, no runner, the job's first queue time.
    #[test]
    fn the_reruns_delivery_repeats_the_attempt_of_the_killed_task() {
        let (mut m, _, a, b) = run_of_two();
        let run = m.jobs[&a].run_id;
        let dialect = crate::gitea::json::Dialect {
            null_steps: false,
            runner_disabled_field: true,
        };
        let payload = |j: &FakeJob| crate::gitea::json::workflow_job_payload("http://g", j, false, dialect);
        let queued = payload(&m.jobs[&b]);
        assert_eq!(queued["workflow_job"]["run_attempt"], 0, "never taken");
        let completed = payload(&m.stop_zombie_task(a).expect("running").job);
        m.jobs.get_mut(&b).expect("b").state = JobState::Done(Conclusion::Success);
        let again = payload(&m.rerun_job("acme", "app", run, a).expect("re-run").job);
        assert_eq!(
            (&completed["action"], &again["action"]),
            (&"completed".into(), &"queued".into())
        );
        let job = |p: &serde_json::Value, field: &str| p["workflow_job"][field].clone();
        assert_eq!(job(&again, "id"), job(&completed, "id"));
        assert_eq!(job(&again, "run_attempt"), 1);
        assert_eq!(job(&again, "run_attempt"), job(&completed, "run_attempt"));
        assert_eq!(job(&again, "created_at"), job(&completed, "created_at"));
        assert!(job(&completed, "runner_name").is_string());
        assert!(job(&again, "runner_name").is_null() && job(&again, "runner_id").is_null());
    }

    #[test]
    fn unknown_runs_and_jobs_are_not_found() {
        let (mut m, _, a, _) = run_of_two();
        let run = m.jobs[&a].run_id;
        assert_eq!(
            m.rerun_job("acme", "app", run + 1000, a).unwrap_err(),
            RerunRefusal::RunNotFound
        );
        assert_eq!(
            m.rerun_job("acme", "web", run, a).unwrap_err(),
            RerunRefusal::RunNotFound
        );
        assert_eq!(
            m.rerun_job("acme", "app", run, 9999).unwrap_err(),
            RerunRefusal::JobNotFound
        );
        let other = m.add_job("acme", "app", &[], JobState::Done(Conclusion::Success));
        assert_eq!(
            m.rerun_job("acme", "app", run, other.id).unwrap_err(),
            RerunRefusal::JobNotFound,
            "a job of another run"
        );
        assert_eq!(RerunRefusal::RunNotDone.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            RerunRefusal::RunNotDone.message(),
            "this workflow run is not done"
        );
    }
}
