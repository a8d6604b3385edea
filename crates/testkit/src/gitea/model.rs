//! The fake Gitea's state and its rules, free of HTTP: jobs, runners, tokens, scopes, and
//! Gitea's job-assignment rule (oldest matching queued job to a runner whose label names are a
//! superset of the job's `runs-on`, within the runner's scope).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Where a runner or registration token lives.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FakeScope {
    /// Instance-wide.
    Global,
    /// A user or organization (all its repositories).
    Owner(String),
    /// One repository.
    Repo(String, String),
}

impl FakeScope {
    /// Whether a job of `owner/repo` is visible at this scope.
    pub fn contains(&self, owner: &str, repo: &str) -> bool {
        match self {
            FakeScope::Global => true,
            FakeScope::Owner(o) => o == owner,
            FakeScope::Repo(o, r) => o == owner && r == repo,
        }
    }
}

pub use crate::forge_common::rpc::Conclusion;

/// Gitea's internal job states that matter here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    /// Ready for a runner (API `queued`).
    Waiting,
    /// Held back by needs/concurrency/approval (API `waiting`).
    Blocked,
    /// Picked by a runner (API `in_progress`).
    Running,
    /// Finished.
    Done(Conclusion),
}

impl JobState {
    /// API status word.
    pub fn api_status(self) -> &'static str {
        match self {
            JobState::Waiting => "queued",
            JobState::Blocked => "waiting",
            JobState::Running => "in_progress",
            JobState::Done(_) => "completed",
        }
    }
}

/// One job.
#[derive(Clone, Debug)]
pub struct FakeJob {
    /// Job id.
    pub id: i64,
    /// Run id.
    pub run_id: i64,
    /// Repository owner.
    pub owner: String,
    /// Repository name.
    pub repo: String,
    /// Job name.
    pub name: String,
    /// `runs-on`.
    pub labels: Vec<String>,
    /// State.
    pub state: JobState,
    /// Gitea 1.25/1.26's `ActionRunJob.Attempt`, the payloads' `run_attempt`: 0 while the job
    /// was never taken, raised by one each time a runner takes it (`CreateTaskForRunner` in
    /// `models/actions/task.go`, `job.Attempt++`), and kept by a re-run
    /// ([`Model::rerun_job`]).
    pub attempt: i64,
    /// Runner that took it.
    pub runner_id: Option<i64>,
    /// That runner's name.
    pub runner_name: String,
    /// That runner's label names at the time (to check the matching rule in tests).
    pub runner_labels: Vec<String>,
    /// Creation time.
    pub created: jiff::Timestamp,
    /// Start time.
    pub started: Option<jiff::Timestamp>,
    /// Completion time.
    pub completed: Option<jiff::Timestamp>,
    /// A cancel was requested while running; the runner learns it on its next update.
    pub cancel_requested: bool,
    /// The key of the job's `actions/cache` step, if its workflow has one (the simulated
    /// runner plays that step against the runner's cache server).
    pub cache_key: Option<String>,
}

/// One registered runner.
#[derive(Clone, Debug)]
pub struct FakeRunner {
    /// Runner id.
    pub id: i64,
    /// UUID the runner authenticates with.
    pub uuid: String,
    /// Secret the runner authenticates with.
    pub token: String,
    /// Name (not unique).
    pub name: String,
    /// Label names.
    pub labels: Vec<String>,
    /// Ephemeral: one job, then deleted.
    pub ephemeral: bool,
    /// Where it is registered.
    pub scope: FakeScope,
    /// Last runner RPC other than `Register` (Gitea's `last_online`); online while recent.
    /// `None` until the runner's first `Declare`/`FetchTask`/`UpdateTask`.
    pub last_online: Option<Instant>,
    /// The job it works on.
    pub task: Option<i64>,
    /// Whether it ever took a job.
    pub had_task: bool,
    /// Disabled (1.26+).
    pub disabled: bool,
}

/// An API token of a user.
#[derive(Clone, Debug)]
pub struct FakeUser {
    /// Login.
    pub login: String,
    /// Site admin.
    pub admin: bool,
}

/// Everything the fake knows.
#[derive(Debug, Default)]
pub struct Model {
    /// Jobs by id.
    pub jobs: BTreeMap<i64, FakeJob>,
    /// Runners by id.
    pub runners: BTreeMap<i64, FakeRunner>,
    /// API tokens → user.
    pub tokens: BTreeMap<String, FakeUser>,
    /// Organizations → owners.
    pub orgs: BTreeMap<String, BTreeSet<String>>,
    /// Repositories (`owner`, `name`).
    pub repos: BTreeSet<(String, String)>,
    /// Active registration token per scope.
    pub registration_tokens: BTreeMap<FakeScope, String>,
    /// Runners deleted over time (ids), for leak checks.
    pub deleted_runners: Vec<i64>,
    /// Requests to the job re-run route, in order ([`super::rerun`]).
    pub reruns: Vec<super::rerun::RerunRequest>,
    next_id: i64,
}

/// What happened to a job, for webhooks.
#[derive(Clone, Debug)]
pub struct JobChange {
    /// The job after the change.
    pub job: FakeJob,
}

/// Outcome of a runner's fetch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fetch {
    /// A job was assigned (task id = job id).
    Task(i64),
    /// Nothing to do.
    Nothing,
    /// An ephemeral runner that already had its job: deleted, must stop.
    Gone,
}

impl Model {
    /// A fresh id (jobs, runners and runs share one sequence, as ids need only be unique).
    pub fn next_id(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }

    /// Whether `login` may manage runners/tokens of `owner` (itself, an org it owns, or admin).
    pub fn owns(&self, user: &FakeUser, owner: &str) -> bool {
        user.admin || user.login == owner || self.orgs.get(owner).is_some_and(|o| o.contains(&user.login))
    }

    /// Adds a job in the given state; creates the repository if needed.
    pub fn add_job(&mut self, owner: &str, repo: &str, runs_on: &[&str], state: JobState) -> FakeJob {
        self.repos.insert((owner.to_string(), repo.to_string()));
        let id = self.next_id();
        let job = FakeJob {
            id,
            run_id: id,
            owner: owner.to_string(),
            repo: repo.to_string(),
            name: format!("job-{id}"),
            labels: runs_on.iter().map(|s| s.to_string()).collect(),
            state,
            attempt: 0,
            runner_id: None,
            runner_name: String::new(),
            runner_labels: Vec::new(),
            created: jiff::Timestamp::now(),
            started: None,
            completed: None,
            cancel_requested: false,
            cache_key: None,
        };
        self.jobs.insert(id, job.clone());
        job
    }

    /// The registration token of a scope, created on first use (POST does not rotate).
    pub fn registration_token(&mut self, scope: &FakeScope) -> String {
        if let Some(t) = self.registration_tokens.get(scope) {
            return t.clone();
        }
        let t = format!("regtok-{}", random_hex(20));
        self.registration_tokens.insert(scope.clone(), t.clone());
        t
    }

    /// Gitea's `initGlobalRunnerToken` (`services/actions/init.go`, v1.25/v1.26) for the value
    /// of `GITEA_RUNNER_REGISTRATION_TOKEN`: shorter than 32 characters is an error; a token
    /// the server already knows is kept as it is (whatever its scope); otherwise it becomes the
    /// active **global** token (`NewRunnerTokenWithValue(ctx, 0, 0, token)`: owner 0, repo 0),
    /// replacing the previous global one (upstream deactivates it). Runners registered with it
    /// are therefore global runners ([`Model::register`]).
    pub fn init_global_runner_token(&mut self, token: &str) -> Result<(), String> {
        if token.len() < 32 {
            return Err("GITEA_RUNNER_REGISTRATION_TOKEN must be at least 32 random characters".into());
        }
        if self.registration_tokens.values().any(|t| t == token) {
            return Ok(());
        }
        self.registration_tokens
            .insert(FakeScope::Global, token.to_string());
        Ok(())
    }

    /// Registers a runner with a registration token; `None` if the token is unknown.
    ///
    /// As Gitea's `Register` (`routers/api/actions/runner/runner.go`, v1.25/v1.26), the runner's
    /// scope is the *token's* (`OwnerID: runnerToken.OwnerID, RepoID: runnerToken.RepoID`):
    /// nothing the runner sends can narrow it, so a runner registered with the global token
    /// (e.g. the fixed `GITEA_RUNNER_REGISTRATION_TOKEN`) is global.
    ///
    /// The new runner has never been online: `Register` sets no `LastOnline`, and it is the one
    /// method the `withRunner` interceptor (`routers/api/actions/runner/interceptor.go`) passes
    /// through without stamping `last_online`. It lists as `offline` until its daemon's first
    /// other call ([`Model::touch`]).
    pub fn register(
        &mut self,
        token: &str,
        name: &str,
        labels: Vec<String>,
        ephemeral: bool,
    ) -> Option<FakeRunner> {
        let scope = self
            .registration_tokens
            .iter()
            .find(|(_, t)| t.as_str() == token)
            .map(|(s, _)| s.clone())?;
        let id = self.next_id();
        let r = FakeRunner {
            id,
            uuid: format!("{:08x}-{}", id, random_hex(8)),
            token: random_hex(20),
            name: name.to_string(),
            labels,
            ephemeral,
            scope,
            last_online: None,
            task: None,
            had_task: false,
            disabled: false,
        };
        self.runners.insert(id, r.clone());
        Some(r)
    }

    /// The runner authenticated by uuid and token.
    pub fn runner_by_auth(&self, uuid: &str, token: &str) -> Option<i64> {
        self.runners
            .values()
            .find(|r| r.uuid == uuid && r.token == token)
            .map(|r| r.id)
    }

    /// Gitea's `withRunner` interceptor (`routers/api/actions/runner/interceptor.go`,
    /// v1.25/v1.26): every authenticated runner call but `Register` sets `last_online` to now,
    /// which moves the runner to the head of the runner listings ([`Model::listed_runners`]).
    pub fn touch(&mut self, runner_id: i64) {
        if let Some(r) = self.runners.get_mut(&runner_id) {
            r.last_online = Some(Instant::now());
        }
    }

    /// The runners in the order Gitea lists them: `FindRunnerOptions.ToOrders`
    /// (`models/actions/runner.go`, v1.25/v1.26) is `last_online DESC` when no `Sort` is given,
    /// and `shared.ListRunners` never gives one. A runner that never called in (`last_online`
    /// 0 upstream) comes last. Gitea stores seconds, so ties are common there and come in the
    /// database's order; the fake breaks them by id.
    pub fn listed_runners(&self) -> Vec<&FakeRunner> {
        let mut all: Vec<&FakeRunner> = self.runners.values().collect();
        all.sort_by(|a, b| b.last_online.cmp(&a.last_online).then(a.id.cmp(&b.id)));
        all
    }

    /// Deletes a runner; a job it was running fails like a zombie task would.
    pub fn delete_runner(&mut self, id: i64) -> Option<FakeRunner> {
        let r = self.runners.remove(&id)?;
        self.deleted_runners.push(id);
        Some(r)
    }

    /// Gitea's `FetchTask`: the oldest waiting job in scope whose labels the runner has.
    pub fn fetch(&mut self, runner_id: i64) -> (Fetch, Option<JobChange>) {
        let Some(r) = self.runners.get_mut(&runner_id) else {
            return (Fetch::Gone, None);
        };
        r.last_online = Some(Instant::now());
        if r.task.is_some() {
            return (Fetch::Nothing, None);
        }
        if r.ephemeral && r.had_task {
            self.delete_runner(runner_id);
            return (Fetch::Gone, None);
        }
        if r.disabled {
            return (Fetch::Nothing, None);
        }
        let (scope, labels, name) = (r.scope.clone(), r.labels.clone(), r.name.clone());
        let pick = self
            .jobs
            .values()
            .filter(|j| j.state == JobState::Waiting && scope.contains(&j.owner, &j.repo))
            .find(|j| j.labels.iter().all(|l| labels.contains(l)))
            .map(|j| j.id);
        let Some(job_id) = pick else {
            return (Fetch::Nothing, None);
        };
        if let Some(r) = self.runners.get_mut(&runner_id) {
            r.task = Some(job_id);
            r.had_task = true;
        }
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return (Fetch::Nothing, None);
        };
        job.state = JobState::Running;
        job.attempt += 1;
        job.runner_id = Some(runner_id);
        job.runner_name = name;
        job.runner_labels = labels;
        job.started = Some(jiff::Timestamp::now());
        (Fetch::Task(job_id), Some(JobChange { job: job.clone() }))
    }

    /// Gitea's `UpdateTask`: heartbeat (`None`) or final result. Returns whether the job was
    /// cancelled meanwhile, and the change to announce.
    pub fn update(
        &mut self,
        runner_id: i64,
        task: i64,
        result: Option<Conclusion>,
    ) -> (bool, Option<JobChange>) {
        if let Some(r) = self.runners.get_mut(&runner_id) {
            r.last_online = Some(Instant::now());
        }
        let Some(job) = self.jobs.get_mut(&task) else {
            return (true, None);
        };
        if job.runner_id != Some(runner_id) {
            return (true, None);
        }
        let cancelled = job.cancel_requested || matches!(job.state, JobState::Done(Conclusion::Cancelled));
        let Some(result) = result else {
            return (cancelled, None);
        };
        let already_done = matches!(job.state, JobState::Done(_));
        if !already_done {
            job.state = JobState::Done(if cancelled { Conclusion::Cancelled } else { result });
            job.completed = Some(jiff::Timestamp::now());
        }
        let change = (!already_done).then(|| JobChange { job: job.clone() });
        let ephemeral = self.runners.get(&runner_id).is_some_and(|r| r.ephemeral);
        if let Some(r) = self.runners.get_mut(&runner_id) {
            r.task = None;
        }
        if ephemeral {
            self.delete_runner(runner_id);
        }
        (cancelled, change)
    }

    /// Cancels a job: a queued one ends at once, a running one when its runner next reports.
    pub fn cancel(&mut self, id: i64) -> Option<JobChange> {
        let job = self.jobs.get_mut(&id)?;
        match job.state {
            JobState::Waiting | JobState::Blocked => {
                job.state = JobState::Done(Conclusion::Cancelled);
                job.completed = Some(jiff::Timestamp::now());
                Some(JobChange { job: job.clone() })
            }
            JobState::Running => {
                job.cancel_requested = true;
                None
            }
            JobState::Done(_) => None,
        }
    }

    /// Whether a runner counts as online.
    pub fn online(r: &FakeRunner, offline_after: Duration) -> bool {
        r.last_online.is_some_and(|t| t.elapsed() < offline_after)
    }
}

/// Maps a `status` query word to the states it selects (Gitea's `convertToInternal`).
pub fn status_filter(word: &str) -> Option<Vec<JobState>> {
    use Conclusion::*;
    Some(match word {
        "pending" | "waiting" | "requested" | "action_required" => vec![JobState::Blocked],
        "queued" => vec![JobState::Waiting],
        "in_progress" => vec![JobState::Running],
        "completed" => [Success, Failure, Cancelled, Skipped]
            .into_iter()
            .map(JobState::Done)
            .collect(),
        "failure" => vec![JobState::Done(Failure)],
        "success" => vec![JobState::Done(Success)],
        "skipped" | "neutral" => vec![JobState::Done(Skipped)],
        "cancelled" | "timed_out" => vec![JobState::Done(Cancelled)],
        _ => return None,
    })
}

pub use crate::forge_common::http::random_hex;

#[cfg(test)]
mod tests {
    use super::*;

    fn model_with_runner(labels: &[&str], scope: FakeScope, ephemeral: bool) -> (Model, i64) {
        let mut m = Model::default();
        let tok = m.registration_token(&scope);
        let r = m
            .register(
                &tok,
                "r-aaaaa",
                labels.iter().map(|s| s.to_string()).collect(),
                ephemeral,
            )
            .unwrap();
        (m, r.id)
    }

    #[test]
    fn assigns_oldest_matching_job_in_scope() {
        let (mut m, rid) = model_with_runner(&["linux", "x64"], FakeScope::Owner("acme".into()), true);
        let other = m.add_job("other", "app", &["linux"], JobState::Waiting);
        let gpu = m.add_job("acme", "app", &["gpu"], JobState::Waiting);
        let blocked = m.add_job("acme", "app", &["linux"], JobState::Blocked);
        let first = m.add_job("acme", "app", &["linux", "x64"], JobState::Waiting);
        let _second = m.add_job("acme", "web", &[], JobState::Waiting);
        let (f, change) = m.fetch(rid);
        assert_eq!(f, Fetch::Task(first.id));
        assert_eq!(change.unwrap().job.runner_name, "r-aaaaa");
        for id in [other.id, gpu.id, blocked.id] {
            assert_ne!(m.jobs[&id].state, JobState::Running);
        }
        // Busy runners get nothing more; finishing deletes the ephemeral runner.
        assert_eq!(m.fetch(rid).0, Fetch::Nothing);
        let (cancelled, change) = m.update(rid, first.id, Some(Conclusion::Success));
        assert!(!cancelled);
        assert_eq!(change.unwrap().job.state, JobState::Done(Conclusion::Success));
        assert!(m.runners.is_empty());
        assert_eq!(m.fetch(rid).0, Fetch::Gone);
    }

    #[test]
    fn unknown_registration_token_is_refused_and_cancel_reaches_runner() {
        let (mut m, rid) = model_with_runner(&["a"], FakeScope::Global, false);
        assert!(m.register("nope", "x", vec![], true).is_none());
        let j = m.add_job("o", "r", &["a"], JobState::Waiting);
        assert_eq!(m.fetch(rid).0, Fetch::Task(j.id));
        assert!(m.cancel(j.id).is_none());
        let (cancelled, _) = m.update(rid, j.id, None);
        assert!(cancelled);
        let (_, change) = m.update(rid, j.id, Some(Conclusion::Success));
        assert_eq!(change.unwrap().job.state, JobState::Done(Conclusion::Cancelled));
        assert_eq!(m.runners.len(), 1, "non-ephemeral runner stays");
    }

    #[test]
    fn status_words() {
        assert_eq!(status_filter("queued"), Some(vec![JobState::Waiting]));
        assert_eq!(status_filter("waiting"), Some(vec![JobState::Blocked]));
        assert_eq!(status_filter("completed").map(|v| v.len()), Some(4));
        assert_eq!(status_filter("bogus"), None);
    }
}
