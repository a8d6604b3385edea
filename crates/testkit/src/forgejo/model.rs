//! The fake Forgejo's state, free of HTTP: accounts, repositories, API tokens, jobs with their
//! attempts and handles, runners, tasks and registration tokens. The runner-side rules (who
//! gets which job) are in `assign`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use crate::forge_common::http::{random_hex, random_uuid};
pub use crate::forge_common::rpc::Conclusion;

/// Where a runner or registration token lives.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FakeScope {
    /// Instance-wide (`owner_id` 0, `repo_id` 0).
    Global,
    /// A user or organization (all its repositories).
    Owner(String),
    /// One repository (`owner`, `name`).
    Repo(String, String),
}

/// Forgejo's job statuses that matter here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobStatus {
    /// Ready for a runner.
    Waiting,
    /// Held by `needs`, approval or an incomplete matrix: never listed, never picked.
    Blocked,
    /// A runner has it (`task_id` ≠ 0).
    Running,
    /// Finished.
    Done(Conclusion),
}

impl JobStatus {
    /// The status word of the API.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Waiting => "waiting",
            JobStatus::Blocked => "blocked",
            JobStatus::Running => "running",
            JobStatus::Done(c) => c.as_str(),
        }
    }
}

/// One job (`ActionRunJob`); a rerun resets it in place with a new attempt and handle.
#[derive(Clone, Debug)]
pub struct FakeJob {
    /// Job id.
    pub id: i64,
    /// Repository id.
    pub repo_id: i64,
    /// Owner (user or org) id.
    pub owner_id: i64,
    /// Repository owner login.
    pub owner: String,
    /// Repository name.
    pub repo: String,
    /// Job name.
    pub name: String,
    /// `needs`.
    pub needs: Vec<String>,
    /// `runs-on` label names.
    pub runs_on: Vec<String>,
    /// Status.
    pub status: JobStatus,
    /// Attempt, from 1.
    pub attempt: i64,
    /// Handle of the current attempt (a UUID).
    pub handle: String,
    /// Task of the current attempt (0 until picked).
    pub task_id: i64,
    /// Runner that took the current attempt.
    pub runner_id: Option<i64>,
    /// The run's `concurrency.group` when it queues behind earlier runs of the group
    /// (`cancel-in-progress: false`, Forgejo's `QueueBehind`); `None` for no group.
    pub concurrency_group: Option<String>,
}

/// One task: a job attempt handed to a runner.
#[derive(Clone, Debug)]
pub struct FakeTask {
    /// Task id (its own sequence, as in Forgejo).
    pub id: i64,
    /// Job id.
    pub job_id: i64,
    /// Attempt of the job.
    pub attempt: i64,
    /// Handle of that attempt.
    pub handle: String,
    /// Runner id.
    pub runner_id: i64,
    /// Runner name.
    pub runner_name: String,
    /// The runner's label names when it took the task.
    pub runner_labels: Vec<String>,
    /// Final result, once reported (or cancelled at the forge).
    pub result: Option<Conclusion>,
}

/// One runner row.
#[derive(Clone, Debug)]
pub struct FakeRunner {
    /// Runner id.
    pub id: i64,
    /// UUID the runner authenticates with.
    pub uuid: String,
    /// Secret the runner authenticates with.
    pub token: String,
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Version the runner declared.
    pub version: String,
    /// Label names (set by `Register` or `Declare`).
    pub labels: Vec<String>,
    /// At most one task, then deleted when it is done.
    pub ephemeral: bool,
    /// Where it is registered.
    pub scope: FakeScope,
    /// Last runner call (never: `offline`).
    pub last_online: Option<Instant>,
    /// Last `UpdateTask`/`UpdateLog`.
    pub last_active: Option<Instant>,
    /// The task it works on.
    pub task: Option<i64>,
    /// Whether it ever got a task.
    pub had_task: bool,
}

/// Who an API token belongs to and what it may do.
#[derive(Clone, Debug)]
pub struct FakeToken {
    /// Owner login.
    pub login: String,
    /// Scopes (`read:organization`, `write:admin`, …; `all` grants everything).
    pub scopes: BTreeSet<String>,
}

/// Everything the fake knows.
#[derive(Debug, Default)]
pub struct Model {
    /// Users and orgs: login → id.
    pub accounts: BTreeMap<String, i64>,
    /// Site admins.
    pub admins: BTreeSet<String>,
    /// Organizations → owners.
    pub orgs: BTreeMap<String, BTreeSet<String>>,
    /// Repositories (`owner`, `name`) → id.
    pub repos: BTreeMap<(String, String), i64>,
    /// API tokens.
    pub tokens: BTreeMap<String, FakeToken>,
    /// Jobs by id.
    pub jobs: BTreeMap<i64, FakeJob>,
    /// Runners by id.
    pub runners: BTreeMap<i64, FakeRunner>,
    /// Tasks by id.
    pub tasks: BTreeMap<i64, FakeTask>,
    /// Active registration token per scope.
    pub registration_tokens: BTreeMap<FakeScope, String>,
    /// Ids of runners deleted over time, for leak checks.
    pub deleted_runners: Vec<i64>,
    /// `[actions] CONCURRENCY_GROUP_QUEUE_ENABLED` on a server that has the queue (14+): jobs
    /// queued behind their concurrency group are listed `waiting` but handed to no runner.
    pub concurrency_queue: bool,
    next_id: i64,
}

impl Model {
    /// A fresh id (one sequence for everything: ids need only be unique).
    pub fn next_id(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }

    /// The id of a user or org, created as a plain user if unknown.
    pub fn account(&mut self, login: &str) -> i64 {
        if let Some(id) = self.accounts.get(login) {
            return *id;
        }
        let id = self.next_id();
        self.accounts.insert(login.to_string(), id);
        id
    }

    /// The id of repository `owner/name`, created if unknown.
    pub fn repo(&mut self, owner: &str, name: &str) -> i64 {
        self.account(owner);
        let key = (owner.to_string(), name.to_string());
        if let Some(id) = self.repos.get(&key) {
            return *id;
        }
        let id = self.next_id();
        self.repos.insert(key, id);
        id
    }

    /// A new API token for `login` with `scopes`.
    pub fn add_token(&mut self, login: &str, scopes: &[&str]) -> String {
        self.account(login);
        let token = random_hex(40);
        self.tokens.insert(
            token.clone(),
            FakeToken {
                login: login.to_string(),
                scopes: scopes.iter().map(|s| s.to_string()).collect(),
            },
        );
        token
    }

    /// Whether `login` may manage `owner` (itself or an org it owns); site admins may do all.
    pub fn owns(&self, login: &str, owner: &str) -> bool {
        self.admins.contains(login)
            || login == owner
            || self.orgs.get(owner).is_some_and(|o| o.contains(login))
    }

    /// Whether a job of `owner/repo` is in `scope`.
    pub fn in_scope(scope: &FakeScope, job: &FakeJob) -> bool {
        match scope {
            FakeScope::Global => true,
            FakeScope::Owner(o) => *o == job.owner,
            FakeScope::Repo(o, r) => *o == job.owner && *r == job.repo,
        }
    }

    /// `owner_id` and `repo_id` of a runner in `scope` (0 when not bound).
    pub fn scope_ids(&self, scope: &FakeScope) -> (i64, i64) {
        match scope {
            FakeScope::Global => (0, 0),
            FakeScope::Owner(o) => (self.accounts.get(o).copied().unwrap_or(0), 0),
            FakeScope::Repo(o, r) => (
                self.accounts.get(o).copied().unwrap_or(0),
                self.repos.get(&(o.clone(), r.clone())).copied().unwrap_or(0),
            ),
        }
    }

    /// Adds a job; creates the repository if needed.
    pub fn add_job(&mut self, spec: &JobSpec) -> FakeJob {
        let (owner, repo) = spec.repo.split_once('/').unwrap_or((spec.repo.as_str(), "repo"));
        let repo_id = self.repo(owner, repo);
        let owner_id = self.account(owner);
        let id = self.next_id();
        let job = FakeJob {
            id,
            repo_id,
            owner_id,
            owner: owner.to_string(),
            repo: repo.to_string(),
            name: spec.name.clone(),
            needs: spec.needs.clone(),
            runs_on: spec.runs_on.clone(),
            status: if spec.blocked {
                JobStatus::Blocked
            } else {
                JobStatus::Waiting
            },
            attempt: 1,
            handle: random_uuid(),
            task_id: 0,
            runner_id: None,
            concurrency_group: spec.concurrency.clone().filter(|g| !g.is_empty()),
        };
        self.jobs.insert(id, job.clone());
        job
    }

    /// Whether `job` waits behind its concurrency group, as Forgejo 14+ decides it when
    /// `CONCURRENCY_GROUP_QUEUE_ENABLED` (`models/actions/task.go` `GetAvailableJobsForRunner`
    /// → `getConcurrencyCondition`): another run of the same repository and group is running,
    /// or is not done (`PendingStatuses`) and older (lower run `index`).
    /// The fake's runs have one job each, so job ids order them. The job lists do not apply
    /// the condition (`routers/api/v1/shared/runners.go` `GetActionRunJobs`): such a job is
    /// listed `waiting`.
    pub fn held_by_concurrency(&self, job: &FakeJob) -> bool {
        let Some(group) = job
            .concurrency_group
            .as_deref()
            .filter(|_| self.concurrency_queue)
        else {
            return false;
        };
        self.jobs.values().any(|other| {
            other.id != job.id
                && other.repo_id == job.repo_id
                && other.concurrency_group.as_deref() == Some(group)
                && match other.status {
                    JobStatus::Running => true,
                    JobStatus::Waiting | JobStatus::Blocked => other.id < job.id,
                    JobStatus::Done(_) => false,
                }
        })
    }

    /// Records a runner call, as Forgejo's runner interceptor does for every RPC but
    /// `Register` (`routers/api/actions/runner/interceptor.go` `withRunner`: `last_online =
    /// now`), which moves the runner to the top of the runner list; false if it does not exist.
    pub fn touch_runner(&mut self, id: i64) -> bool {
        match self.runners.get_mut(&id) {
            Some(r) => {
                r.last_online = Some(Instant::now());
                true
            }
            None => false,
        }
    }

    /// The registration token of a scope, created on first use (reading does not rotate).
    pub fn registration_token(&mut self, scope: &FakeScope) -> String {
        if let Some(t) = self.registration_tokens.get(scope) {
            return t.clone();
        }
        let t = random_hex(40);
        self.registration_tokens.insert(scope.clone(), t.clone());
        t
    }

    /// A new runner row (no contact yet: `offline`).
    pub fn new_runner(
        &mut self,
        scope: FakeScope,
        name: &str,
        labels: Vec<String>,
        ephemeral: bool,
    ) -> FakeRunner {
        let id = self.next_id();
        let r = FakeRunner {
            id,
            uuid: random_uuid(),
            token: random_hex(40),
            name: name.to_string(),
            description: String::new(),
            version: String::new(),
            labels,
            ephemeral,
            scope,
            last_online: None,
            last_active: None,
            task: None,
            had_task: false,
        };
        self.runners.insert(id, r.clone());
        r
    }

    /// Deletes a runner row (its running task, if any, is left as it is, as Forgejo does).
    pub fn delete_runner(&mut self, id: i64) -> Option<FakeRunner> {
        let r = self.runners.remove(&id)?;
        self.deleted_runners.push(id);
        Some(r)
    }

    /// Cancels a job at the forge: waiting/blocked/running all end `cancelled` at once; a
    /// running job's runner learns it from its next `UpdateTask`.
    pub fn cancel(&mut self, id: i64) -> bool {
        let Some(job) = self.jobs.get_mut(&id) else {
            return false;
        };
        if matches!(job.status, JobStatus::Done(_)) {
            return false;
        }
        job.status = JobStatus::Done(Conclusion::Cancelled);
        if let Some(t) = self.tasks.get_mut(&job.task_id) {
            t.result = Some(Conclusion::Cancelled);
        }
        true
    }

    /// Re-runs a finished job: a new attempt with a new handle, waiting again
    /// (`models/actions/run_job.go` `PrepareNextAttempt`: refused while the job is active,
    /// then `Attempt++`, `TaskID = 0`, `Handle = uuid`). A runner bound to the old handle never
    /// gets the new attempt (`IsRequestedByRunner`). The new handle, or `None` if the job is
    /// unknown or not finished.
    pub fn rerun(&mut self, id: i64) -> Option<String> {
        let job = self.jobs.get_mut(&id)?;
        if !matches!(job.status, JobStatus::Done(_)) {
            return None;
        }
        job.attempt += 1;
        job.handle = random_uuid();
        job.status = JobStatus::Waiting;
        job.task_id = 0;
        job.runner_id = None;
        Some(job.handle.clone())
    }
}

/// A job to queue.
#[derive(Clone, Debug)]
pub struct JobSpec {
    /// Repository, `owner/name`.
    pub repo: String,
    /// Job name.
    pub name: String,
    /// `runs-on` label names.
    pub runs_on: Vec<String>,
    /// `needs`.
    pub needs: Vec<String>,
    /// Created `blocked` (waiting on needs or approval).
    pub blocked: bool,
    /// The run's concurrency group, queued behind earlier runs of the group (see
    /// [`Model::held_by_concurrency`]).
    pub concurrency: Option<String>,
}

impl JobSpec {
    /// A waiting job without needs.
    pub fn new(repo: &str, name: &str, runs_on: &[&str]) -> JobSpec {
        JobSpec {
            repo: repo.to_string(),
            name: name.to_string(),
            runs_on: runs_on.iter().map(|s| s.to_string()).collect(),
            needs: Vec::new(),
            blocked: false,
            concurrency: None,
        }
    }

    /// In concurrency group `group` (`concurrency: {group, cancel-in-progress: false}`).
    pub fn concurrency(mut self, group: &str) -> JobSpec {
        self.concurrency = Some(group.to_string());
        self
    }

    /// Created `blocked`.
    pub fn blocked(mut self) -> JobSpec {
        self.blocked = true;
        self
    }

    /// Sets `needs`.
    pub fn needs(mut self, needs: &[&str]) -> JobSpec {
        self.needs = needs.iter().map(|s| s.to_string()).collect();
        self
    }
}
