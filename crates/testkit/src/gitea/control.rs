//! Starting the fake and the control API tests use: queue and cancel jobs, inspect state,
//! inject faults, read the request log, configure webhook delivery.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio_util::sync::DropGuard;

use super::faults::{Fault, LoggedRequest};
use super::json::Dialect;
use super::model::{Conclusion, FakeJob, FakeRunner, FakeScope, FakeUser, Fetch, JobChange, JobState, Model};
use crate::forge_common::faults::FaultTable;
pub(crate) use crate::forge_common::http::lock;
use crate::forge_common::http::serve_until_dropped;

/// How the fake behaves.
#[derive(Clone, Debug)]
pub struct FakeConfig {
    /// Version reported by `/api/v1/version`; `1.25.x` enables the 1.25 dialect (GET
    /// registration-token routes, `steps: null`); below 1.25 the `/actions/jobs` lists are 404.
    pub version: String,
    /// A runner is `offline` once it has not polled for this long (Gitea: one minute).
    pub offline_after: Duration,
    /// What the server's `GITEA_RUNNER_REGISTRATION_TOKEN` holds, if set: Gitea's fixed,
    /// instance-wide registration token. Upstream (`services/actions/init.go`
    /// `initGlobalRunnerToken`, v1.25/v1.26) stores it at start with
    /// `NewRunnerTokenWithValue(ctx, 0, 0, token)`, i.e. as the *global* token, so every runner
    /// registered with it is a global runner whatever scope its owner meant (see
    /// [`Model::init_global_runner_token`]). Like upstream, fewer than 32 characters make the
    /// start fail.
    pub runner_registration_token: Option<String>,
}

impl Default for FakeConfig {
    fn default() -> Self {
        FakeConfig {
            version: "1.26.0".to_string(),
            offline_after: Duration::from_secs(60),
            runner_registration_token: None,
        }
    }
}

/// Webhook delivery settings.
#[derive(Clone, Debug)]
pub(crate) struct WebhookConfig {
    pub url: String,
    pub secret: String,
}

/// One webhook delivery attempt.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// `action` of the payload.
    pub action: String,
    /// Job id.
    pub job_id: i64,
    /// HTTP status the receiver answered (0: not reachable).
    pub status: u16,
}

/// State shared by the routes and the handle.
pub(crate) struct Shared {
    pub config: FakeConfig,
    pub minor: (u64, u64),
    pub base_url: String,
    pub model: Mutex<Model>,
    pub faults: Arc<FaultTable>,
    pub webhook: Mutex<Option<WebhookConfig>>,
    pub deliveries: Arc<Mutex<Vec<Delivery>>>,
    pub http: reqwest::Client,
    /// One-shot polls placed between runner listing pages: (page, runner id).
    pub runner_page_hooks: Mutex<Vec<(usize, i64)>>,
}

impl Shared {
    pub fn dialect(&self) -> Dialect {
        Dialect {
            null_steps: self.minor < (1, 26),
            runner_disabled_field: self.minor >= (1, 26),
        }
    }

    /// Sends `workflow_job` webhooks for changes (if configured), in the background.
    pub fn announce(self: &Arc<Self>, changes: impl IntoIterator<Item = JobChange>) {
        for c in changes {
            super::webhook::deliver(self.clone(), c.job);
        }
    }
}

fn parse_minor(v: &str) -> (u64, u64) {
    let mut it = v.split(['.', '-', '+']).map(|p| p.parse::<u64>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

struct Inner {
    shared: Arc<Shared>,
    _stop: DropGuard,
}

/// A running fake Gitea on 127.0.0.1; the server stops when the last handle is dropped.
#[derive(Clone)]
pub struct GiteaFakeHandle {
    inner: Arc<Inner>,
}

/// The admin token every fake accepts.
pub const ADMIN_TOKEN: &str = "fake-admin-token";

impl GiteaFakeHandle {
    /// Starts a fake with `config` on a free loopback port. Fails like Gitea's start when
    /// [`FakeConfig::runner_registration_token`] is shorter than 32 characters.
    pub async fn start(config: FakeConfig) -> std::io::Result<GiteaFakeHandle> {
        let mut model = Model::default();
        if let Some(token) = config.runner_registration_token.as_deref() {
            model
                .init_global_runner_token(token)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        model.tokens.insert(
            ADMIN_TOKEN.to_string(),
            FakeUser {
                login: "gitea_admin".to_string(),
                admin: true,
            },
        );
        let shared = Arc::new(Shared {
            minor: parse_minor(&config.version),
            config,
            base_url: format!("http://{addr}"),
            model: Mutex::new(model),
            faults: Arc::default(),
            webhook: Mutex::default(),
            deliveries: Arc::default(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .map_err(std::io::Error::other)?,
            runner_page_hooks: Mutex::default(),
        });
        let app = super::server::router(shared.clone());
        let stop = serve_until_dropped(listener, app);
        Ok(GiteaFakeHandle {
            inner: Arc::new(Inner { shared, _stop: stop }),
        })
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    fn model(&self) -> MutexGuard<'_, Model> {
        lock(&self.shared().model)
    }

    /// Base URL (`http://127.0.0.1:PORT`), what `spec.gitea.url` should hold.
    pub fn url(&self) -> String {
        self.shared().base_url.clone()
    }

    /// Adds an API token for `login` (created as a user); returns the token.
    pub fn add_token(&self, login: &str, admin: bool) -> String {
        let token = format!("tok-{}", super::model::random_hex(16));
        self.model().tokens.insert(
            token.clone(),
            FakeUser {
                login: login.to_string(),
                admin,
            },
        );
        token
    }

    /// Creates an organization with these owners.
    pub fn add_org(&self, org: &str, owners: &[&str]) {
        self.model()
            .orgs
            .insert(org.to_string(), owners.iter().map(|s| s.to_string()).collect());
    }

    /// Creates a repository (`owner/name`) without jobs.
    pub fn add_repo(&self, full_name: &str) {
        let (o, r) = full_name.split_once('/').unwrap_or((full_name, "repo"));
        self.model().repos.insert((o.to_string(), r.to_string()));
    }

    fn add_job(&self, repo: &str, runs_on: &[&str], state: JobState) -> i64 {
        let (o, r) = repo.split_once('/').unwrap_or((repo, "repo"));
        let job = self.model().add_job(o, r, runs_on, state);
        let id = job.id;
        self.shared().announce([JobChange { job }]);
        id
    }

    /// Queues a job ready for a runner (API `queued`) in `repo` (`owner/name`); returns its id.
    pub fn queue_job(&self, repo: &str, runs_on: &[&str]) -> i64 {
        self.add_job(repo, runs_on, JobState::Waiting)
    }

    /// Queues a job like [`GiteaFakeHandle::queue_job`] whose workflow has an `actions/cache`
    /// step with `key` ([`FakeJob::cache_key`]).
    pub fn queue_cached_job(&self, repo: &str, runs_on: &[&str], key: &str) -> i64 {
        let (o, r) = repo.split_once('/').unwrap_or((repo, "repo"));
        let job = {
            let mut model = self.model();
            let mut job = model.add_job(o, r, runs_on, JobState::Waiting);
            job.cache_key = Some(key.to_owned());
            model.jobs.insert(job.id, job.clone());
            job
        };
        let id = job.id;
        self.shared().announce([JobChange { job }]);
        id
    }

    /// Adds a job blocked by `needs`/approval (API `waiting`): never demand.
    pub fn queue_blocked_job(&self, repo: &str, runs_on: &[&str]) -> i64 {
        self.add_job(repo, runs_on, JobState::Blocked)
    }

    /// Adds a queued job to the run of job `sibling` (same repository, same run id); its id,
    /// `None` when `sibling` is unknown.
    pub fn queue_job_in_run_of(&self, sibling: i64, runs_on: &[&str]) -> Option<i64> {
        let job = self
            .model()
            .add_job_in_run_of(sibling, runs_on, JobState::Waiting)?;
        let id = job.id;
        self.shared().announce([JobChange { job }]);
        Some(id)
    }

    /// Fails running job `id` as Gitea's `StopZombieTasks` does once its runner stopped
    /// reporting for `ZOMBIE_TASK_TIMEOUT` (`services/actions/clear_tasks.go`): the job ends
    /// `failure` and its runner is no longer busy. False if the job was not running.
    pub fn stop_zombie_task(&self, id: i64) -> bool {
        let change = self.model().stop_zombie_task(id);
        let stopped = change.is_some();
        self.shared().announce(change);
        stopped
    }

    /// Requests to the job re-run route so far, with the status each got.
    pub fn reruns(&self) -> Vec<super::rerun::RerunRequest> {
        self.model().reruns.clone()
    }

    /// Cancels a job (queued: at once; running: its runner learns it on its next update).
    pub fn cancel_job(&self, id: i64) {
        let change = self.model().cancel(id);
        self.shared().announce(change);
    }

    /// Registers a runner directly (as if an act_runner had), e.g. to leave a ghost behind.
    /// `online: true` also has it call in once (as its daemon's `Declare`), which puts it at the
    /// head of the runner listings; `online: false` leaves it as `Register` does: never online.
    pub fn add_runner(&self, scope: FakeScope, name: &str, labels: &[&str], online: bool) -> i64 {
        let mut m = self.model();
        let token = m.registration_token(&scope);
        let labels = labels.iter().map(|s| s.to_string()).collect();
        let Some(r) = m.register(&token, name, labels, true) else {
            return 0;
        };
        if online {
            m.touch(r.id);
        }
        r.id
    }

    /// Runner `runner_id` calls in without taking a job (a `Declare`, say): like every runner
    /// call but `Register` it sets `last_online` to now (Gitea's `withRunner` interceptor), so
    /// the runner is online and first in the runner listings.
    pub fn runner_calls_in(&self, runner_id: i64) {
        self.model().touch(runner_id);
    }

    /// Runner `runner_id` calls `FetchTask` right after the fake has answered page `page` of
    /// the next runner listing (any scope), before any later page is asked for: once, taking
    /// the oldest matching queued job if there is one. Several calls queue up: each answered
    /// page `page` sets off the earliest one placed. Real runners poll every 2 s and each poll
    /// moves them to the head of Gitea's `last_online DESC` order, so a listing paged over such
    /// a moment skips one runner and repeats another; this makes that moment happen on cue.
    pub fn poll_after_runner_page(&self, page: usize, runner_id: i64) {
        lock(&self.shared().runner_page_hooks).push((page, runner_id));
    }

    /// The registration token of a scope (created if needed). For [`FakeScope::Global`] this is
    /// [`FakeConfig::runner_registration_token`] when set, as Gitea's admin route returns the
    /// latest global token (`GetLatestRunnerToken(ctx, 0, 0)`), which that one is.
    pub fn registration_token(&self, scope: &FakeScope) -> String {
        self.model().registration_token(scope)
    }

    /// A job by id.
    pub fn job(&self, id: i64) -> Option<FakeJob> {
        self.model().jobs.get(&id).cloned()
    }

    /// All jobs, by id.
    pub fn jobs(&self) -> Vec<FakeJob> {
        self.model().jobs.values().cloned().collect()
    }

    /// Registered runners, by id.
    pub fn runners(&self) -> Vec<FakeRunner> {
        self.model().runners.values().cloned().collect()
    }

    /// Names of all runners ever deleted (by the API or as finished ephemerals): count only.
    pub fn deleted_runner_count(&self) -> usize {
        self.model().deleted_runners.len()
    }

    /// Sends `workflow_job` deliveries to `url`, signed with `secret`.
    pub fn set_webhook(&self, url: &str, secret: &str) {
        *lock(&self.shared().webhook) = Some(WebhookConfig {
            url: url.to_string(),
            secret: secret.to_string(),
        });
    }

    /// Runner `runner_id` takes the oldest matching queued job, as its `FetchTask` would
    /// (with the webhook delivery, if configured); the job's id, if it got one.
    pub fn take_job(&self, runner_id: i64) -> Option<i64> {
        let (fetch, change) = self.model().fetch(runner_id);
        self.shared().announce(change);
        match fetch {
            Fetch::Task(id) => Some(id),
            Fetch::Nothing | Fetch::Gone => None,
        }
    }

    /// The runner of a running job reports it successful, as its `UpdateTask` would (with the
    /// webhook delivery, if configured); false if the job was not running.
    pub fn complete_job(&self, id: i64) -> bool {
        let runner = self.model().jobs.get(&id).and_then(|j| j.runner_id);
        let Some(runner) = runner else {
            return false;
        };
        let (_, change) = self.model().update(runner, id, Some(Conclusion::Success));
        let done = change.is_some();
        self.shared().announce(change);
        done
    }

    /// The `workflow_job` body the fake would deliver for `job` (any state, e.g. a clone of
    /// [`GiteaFakeHandle::job`] moved on), so tests can hand deliveries over without HTTP.
    pub fn workflow_job_payload(&self, job: &FakeJob) -> Vec<u8> {
        let shared = self.shared();
        let owner_is_org = self.model().orgs.contains_key(&job.owner);
        super::json::workflow_job_payload(&shared.base_url, job, owner_is_org, shared.dialect())
            .to_string()
            .into_bytes()
    }

    /// Webhook deliveries made so far.
    pub fn deliveries(&self) -> Vec<Delivery> {
        lock(&self.shared().deliveries).clone()
    }

    /// Adds a fault rule (first matching rule wins).
    pub fn inject_fault(&self, fault: Fault) {
        self.shared().faults.push(fault);
    }

    /// Removes every fault rule.
    pub fn clear_faults(&self) {
        self.shared().faults.clear();
    }

    /// Requests received so far (REST and runner API).
    pub fn requests(&self) -> Vec<LoggedRequest> {
        self.shared().faults.requests()
    }

    /// Forgets the request log.
    pub fn clear_requests(&self) {
        self.shared().faults.clear_requests();
    }

    /// Polls `pred` over the jobs and runners until it holds or `timeout` passes.
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

    /// Ids of jobs in a given API status (`queued`, `in_progress`, …).
    pub fn job_ids_with_status(&self, status: &str) -> BTreeSet<i64> {
        self.model()
            .jobs
            .values()
            .filter(|j| j.state.api_status() == status)
            .map(|j| j.id)
            .collect()
    }
}
