//! Starting the fake and the control API tests use: accounts and tokens, queue/cancel/complete/
//! re-run jobs, inspect jobs, runners and tasks, inject faults, read the request log.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio_util::sync::DropGuard;

use super::assign::TaskUpdate;
use super::model::{Conclusion, FakeJob, FakeRunner, FakeScope, FakeTask, JobSpec, Model};
use super::version::ForgejoVersion;
use crate::forge_common::faults::{Fault, FaultTable, LoggedRequest};
use crate::forge_common::http::{lock, serve_until_dropped};

/// How the fake behaves.
#[derive(Clone, Debug)]
pub struct FakeConfig {
    /// What `/api/v1/version` reports, e.g. `15.0.3+gitea-1.22.0`; its major gates the routes.
    pub version: String,
    /// A runner is `offline` once it has not called for this long (Forgejo: 1 min).
    pub offline_after: Duration,
    /// An online runner is `idle` once it has not updated a task for this long (Forgejo: 10 s).
    pub idle_after: Duration,
    /// `MAX_RESPONSE_ITEMS`: the largest `limit` of the runner list (Forgejo: 50).
    pub max_response_items: usize,
    /// `[actions] CONCURRENCY_GROUP_QUEUE_ENABLED` (Forgejo 14+, default true,
    /// `modules/setting/actions.go`): jobs queued behind their concurrency group are handed to
    /// no runner ([`Model::held_by_concurrency`]). Ignored before 14, which has no queue.
    pub concurrency_group_queue: bool,
}

impl Default for FakeConfig {
    fn default() -> Self {
        FakeConfig {
            version: "15.0.3+gitea-1.22.0".to_string(),
            offline_after: Duration::from_secs(60),
            idle_after: Duration::from_secs(10),
            max_response_items: 50,
            concurrency_group_queue: true,
        }
    }
}

impl FakeConfig {
    /// The default config playing `version`.
    pub fn version(version: &str) -> FakeConfig {
        FakeConfig {
            version: version.to_string(),
            ..FakeConfig::default()
        }
    }
}

/// A test hook run before each page of a runner list is read, with the page number (from 1)
/// and the model: what runners do between two page requests ([`Model::touch_runner`]).
pub type RunnerPageHook = dyn Fn(usize, &mut Model) + Send + Sync;

/// State shared by the routes and the handle.
pub(crate) struct Shared {
    pub config: FakeConfig,
    pub version: ForgejoVersion,
    pub base_url: String,
    pub model: Mutex<Model>,
    pub faults: Arc<FaultTable>,
    /// [`ForgejoFakeHandle::before_runner_page`].
    pub runner_page_hook: Mutex<Option<Arc<RunnerPageHook>>>,
}

struct Inner {
    shared: Arc<Shared>,
    _stop: DropGuard,
}

/// A running fake Forgejo on 127.0.0.1; the server stops when the last handle is dropped.
#[derive(Clone)]
pub struct ForgejoFakeHandle {
    inner: Arc<Inner>,
}

/// Login of the site admin every fake has.
pub const ADMIN_LOGIN: &str = "forgejo_admin";
/// A token of [`ADMIN_LOGIN`] with every scope.
pub const ADMIN_TOKEN: &str = "fake-forgejo-admin-token";

impl ForgejoFakeHandle {
    /// Starts a fake with `config` on a free loopback port.
    pub async fn start(config: FakeConfig) -> std::io::Result<ForgejoFakeHandle> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let mut model = Model::default();
        model.account(ADMIN_LOGIN);
        model.admins.insert(ADMIN_LOGIN.to_string());
        model.tokens.insert(
            ADMIN_TOKEN.to_string(),
            super::model::FakeToken {
                login: ADMIN_LOGIN.to_string(),
                scopes: ["all".to_string()].into(),
            },
        );
        let version = ForgejoVersion::parse(&config.version);
        model.concurrency_queue = version.has_concurrency_queue() && config.concurrency_group_queue;
        let shared = Arc::new(Shared {
            version,
            config,
            base_url: format!("http://{addr}"),
            model: Mutex::new(model),
            faults: Arc::default(),
            runner_page_hook: Mutex::new(None),
        });
        let app = super::rest::router(shared.clone());
        let stop = serve_until_dropped(listener, app);
        Ok(ForgejoFakeHandle {
            inner: Arc::new(Inner { shared, _stop: stop }),
        })
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    fn model(&self) -> MutexGuard<'_, Model> {
        lock(&self.shared().model)
    }

    /// Base URL (`http://127.0.0.1:PORT`), the instance URL.
    pub fn url(&self) -> String {
        self.shared().base_url.clone()
    }

    /// The configuration it was started with.
    pub fn config(&self) -> FakeConfig {
        self.shared().config.clone()
    }

    /// Creates a user (a site admin if `admin`); returns its id.
    pub fn add_user(&self, login: &str, admin: bool) -> i64 {
        let mut m = self.model();
        if admin {
            m.admins.insert(login.to_string());
        }
        m.account(login)
    }

    /// Creates an organization with these owners (created as users); returns its id.
    pub fn add_org(&self, org: &str, owners: &[&str]) -> i64 {
        let mut m = self.model();
        for o in owners {
            m.account(o);
        }
        m.orgs
            .insert(org.to_string(), owners.iter().map(|s| s.to_string()).collect());
        m.account(org)
    }

    /// Creates a repository (`owner/name`) without jobs; returns its id.
    pub fn add_repo(&self, full_name: &str) -> i64 {
        let (o, r) = full_name.split_once('/').unwrap_or((full_name, "repo"));
        self.model().repo(o, r)
    }

    /// A token of `login` (created as a user) with every scope.
    pub fn add_token(&self, login: &str) -> String {
        self.model().add_token(login, &["all"])
    }

    /// A token of `login` with only these scopes (`read:organization`, `write:repository`, …).
    pub fn add_scoped_token(&self, login: &str, scopes: &[&str]) -> String {
        self.model().add_token(login, scopes)
    }

    /// Queues a job; its id.
    pub fn queue(&self, spec: JobSpec) -> i64 {
        self.model().add_job(&spec).id
    }

    /// Queues a waiting job `name` in `repo` (`owner/name`); its id.
    pub fn queue_job(&self, repo: &str, name: &str, runs_on: &[&str]) -> i64 {
        self.queue(JobSpec::new(repo, name, runs_on))
    }

    /// Queues a `blocked` job (held by needs/approval): never listed, never picked.
    pub fn queue_blocked_job(&self, repo: &str, name: &str, runs_on: &[&str]) -> i64 {
        self.queue(JobSpec::new(repo, name, runs_on).blocked())
    }

    /// A blocked job becomes waiting (its needs finished); false if it was not blocked.
    pub fn unblock_job(&self, id: i64) -> bool {
        let mut m = self.model();
        match m.jobs.get_mut(&id) {
            Some(j) if j.status == super::model::JobStatus::Blocked => {
                j.status = super::model::JobStatus::Waiting;
                true
            }
            _ => false,
        }
    }

    /// Cancels a job at the forge (waiting or running: at once; the runner learns it on its
    /// next `UpdateTask`); false if unknown or finished.
    pub fn cancel_job(&self, id: i64) -> bool {
        self.model().cancel(id)
    }

    /// The runner of a running job reports `result`, as its `UpdateTask` would (so an
    /// ephemeral runner is deleted); false if the job was not running.
    pub fn complete_job(&self, id: i64, result: Conclusion) -> bool {
        let mut m = self.model();
        let Some((runner, task)) = m.jobs.get(&id).and_then(|j| Some((j.runner_id?, j.task_id))) else {
            return false;
        };
        if m.jobs.get(&id).map(|j| j.status) != Some(super::model::JobStatus::Running) {
            return false;
        }
        m.update_task(runner, task, Some(result)) != TaskUpdate::NotFound
    }

    /// Re-runs a finished job: a new attempt with a new handle (returned), waiting again.
    pub fn rerun_job(&self, id: i64) -> Option<String> {
        self.model().rerun(id)
    }

    /// The registration token of a scope (created if needed).
    pub fn registration_token(&self, scope: &FakeScope) -> String {
        self.model().registration_token(scope)
    }

    /// Adds a runner row directly (as `POST …/actions/runners` would): never connected, so
    /// `offline`, with these labels.
    pub fn add_runner(&self, scope: FakeScope, name: &str, labels: &[&str], ephemeral: bool) -> FakeRunner {
        let labels = labels.iter().map(|s| s.to_string()).collect();
        self.model().new_runner(scope, name, labels, ephemeral)
    }

    /// Sets when runner `id` was last online and last active (`None`: never), as if that
    /// long ago; false if it does not exist.
    pub fn set_runner_seen(
        &self,
        id: i64,
        online_ago: Option<Duration>,
        active_ago: Option<Duration>,
    ) -> bool {
        let now = Instant::now();
        let at = |ago: Option<Duration>| ago.map(|d| now.checked_sub(d).unwrap_or(now));
        match self.model().runners.get_mut(&id) {
            Some(r) => {
                r.last_online = at(online_ago);
                r.last_active = at(active_ago);
                true
            }
            None => false,
        }
    }

    /// Sets the version runner `id` reported (as its `Declare` would; a row made by `POST` has
    /// none until then); false if it does not exist.
    pub fn set_runner_version(&self, id: i64, version: &str) -> bool {
        match self.model().runners.get_mut(&id) {
            Some(r) => {
                r.version = version.to_owned();
                true
            }
            None => false,
        }
    }

    /// Records a runner call for runner `id` (its `last_online` becomes now, as any runner RPC
    /// makes it), which moves it to the top of the runner list; false if it does not exist.
    pub fn touch_runner(&self, id: i64) -> bool {
        self.model().touch_runner(id)
    }

    /// Runs `hook` before each page of every runner list is read (page numbers from 1), under
    /// the model's lock: a deterministic stand-in for the runners that call in between two
    /// page requests and so reorder the list. Replaces any earlier hook.
    pub fn before_runner_page(&self, hook: impl Fn(usize, &mut Model) + Send + Sync + 'static) {
        *lock(&self.shared().runner_page_hook) = Some(Arc::new(hook));
    }

    /// Removes the hook of [`ForgejoFakeHandle::before_runner_page`].
    pub fn clear_runner_page_hook(&self) {
        *lock(&self.shared().runner_page_hook) = None;
    }

    /// Runs Forgejo's `CleanupEphemeralRunners` cron once; the ids it deleted.
    pub fn cleanup_ephemeral_runners(&self) -> Vec<i64> {
        self.model().cleanup_ephemeral_runners()
    }

    /// A job by id.
    pub fn job(&self, id: i64) -> Option<FakeJob> {
        self.model().jobs.get(&id).cloned()
    }

    /// All jobs, by id.
    pub fn jobs(&self) -> Vec<FakeJob> {
        self.model().jobs.values().cloned().collect()
    }

    /// A runner row by id.
    pub fn runner(&self, id: i64) -> Option<FakeRunner> {
        self.model().runners.get(&id).cloned()
    }

    /// All runner rows, by id.
    pub fn runners(&self) -> Vec<FakeRunner> {
        self.model().runners.values().cloned().collect()
    }

    /// Every task handed out, by id (one per job attempt a runner took).
    pub fn tasks(&self) -> Vec<FakeTask> {
        self.model().tasks.values().cloned().collect()
    }

    /// The tasks handed out for job `id`, oldest first.
    pub fn tasks_for_job(&self, id: i64) -> Vec<FakeTask> {
        self.model()
            .tasks
            .values()
            .filter(|t| t.job_id == id)
            .cloned()
            .collect()
    }

    /// Ids of runners deleted so far (REST `DELETE`, finished ephemerals, cleanup).
    pub fn deleted_runners(&self) -> Vec<i64> {
        self.model().deleted_runners.clone()
    }

    /// The status word a runner would be listed with now.
    pub fn runner_status(&self, id: i64) -> Option<&'static str> {
        let c = &self.shared().config;
        self.model()
            .runners
            .get(&id)
            .map(|r| super::assign::runner_status(r, c.offline_after, c.idle_after))
    }

    /// Adds a fault rule (first matching rule wins).
    pub fn inject_fault(&self, fault: Fault) {
        self.shared().faults.push(fault);
    }

    /// Removes every fault rule.
    pub fn clear_faults(&self) {
        self.shared().faults.clear();
    }

    /// Requests received so far (REST and runner RPC).
    pub fn requests(&self) -> Vec<LoggedRequest> {
        self.shared().faults.requests()
    }

    /// Forgets the request log.
    pub fn clear_requests(&self) {
        self.shared().faults.clear_requests();
    }

    /// Polls `pred` over jobs and runners until it holds or `timeout` passes.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        pred: impl Fn(&[FakeJob], &[FakeRunner]) -> bool,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if pred(&self.jobs(), &self.runners()) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
