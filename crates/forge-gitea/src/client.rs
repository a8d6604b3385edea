//! The Gitea REST client: version, job and runner lists (paged), registration tokens,
//! runner deletion, on top of the REST skeleton Gitea shares with Forgejo
//! ([`forgerunner_http::rest`]: retries, 429 `Retry-After`, capped bodies, trust and proxy).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use forgerunner_core::forge::SecretValue;
use forgerunner_core::metrics::Metrics;
pub use forgerunner_http::rest::ClientOptions;
use forgerunner_http::rest::{Api, Call, CallError, MAX_LIST_BYTES, MAX_SMALL_BYTES, RestClient, json};
use forgerunner_http::{
    Asked, Entries, ListingBudget, ListingError, ListingLimits, Page, PageShape, RequestError, wire,
};
use reqwest::Method;
use serde::de::DeserializeOwned;
use url::Url;

use crate::error::GiteaError;
use crate::scope::{Access, Routes, Scope};
use crate::types::{JOBS_PAGE, RUNNERS_PAGE, Runner, User, WorkflowJob};

/// Page size for every list (Gitea caps `limit` at 50 by default).
pub const PAGE_LIMIT: u32 = 50;

/// Every Gitea route is below `/api/v1`.
const API: [&str; 2] = ["api", "v1"];

/// What the shared client needs to know about Gitea.
pub(crate) const GITEA: Api = Api {
    forge: "gitea",
    name: "Gitea",
    spec: "spec.gitea",
    lift_block_after_wait: false,
};

/// One kind of request; the closed set used as metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// `GET /version`.
    Version,
    /// `GET /user`.
    User,
    /// `GET …/actions/jobs`.
    ListJobs,
    /// `POST …/registration-token`.
    RegistrationToken,
    /// `GET …/actions/runners`.
    ListRunners,
    /// `DELETE …/actions/runners/{id}`.
    DeleteRunner,
    /// `POST /repos/{owner}/{repo}/actions/runs/{run}/jobs/{job_id}/rerun` (1.26+).
    RerunJob,
    /// `GET /repos/{owner}/{repo}/actions/runs/{run}` (1.25+).
    GetRun,
}

impl Operation {
    /// Metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Version => "get_version",
            Operation::User => "get_user",
            Operation::ListJobs => "list_jobs",
            Operation::RegistrationToken => "registration_token",
            Operation::ListRunners => "list_runners",
            Operation::DeleteRunner => "delete_runner",
            Operation::RerunJob => "rerun_job",
            Operation::GetRun => "get_run",
        }
    }

    fn words(self) -> &'static str {
        match self {
            Operation::Version => "read the server version",
            Operation::User => "read its own user",
            Operation::ListJobs => "list Actions jobs",
            Operation::RegistrationToken => "create a runner registration token",
            Operation::ListRunners => "list runners",
            Operation::DeleteRunner => "delete a runner",
            Operation::RerunJob => "re-run an Actions job",
            Operation::GetRun => "read an Actions run",
        }
    }

    /// The right the operation needs at its scope. Listing runners only reads, yet Gitea
    /// guards it like the writes, with the owner check (`addActionsRoutes`).
    fn access(self) -> Access {
        match self {
            Operation::RegistrationToken | Operation::DeleteRunner | Operation::RerunJob => Access::Write,
            Operation::ListRunners => Access::OwnerRead,
            Operation::Version | Operation::User | Operation::ListJobs | Operation::GetRun => Access::Read,
        }
    }

    /// Whether a failed attempt may be sent again. Not a re-run: after an answer lost on the
    /// way back, a second one would find the job queued again (400, "not done"), and once that
    /// run ended, queue it a second time.
    fn idempotent(self) -> bool {
        self != Operation::RerunJob
    }

    fn body_cap(self) -> usize {
        match self {
            Operation::ListJobs | Operation::ListRunners => MAX_LIST_BYTES,
            _ => MAX_SMALL_BYTES,
        }
    }

    /// A failed exchange in Gitea's words: what was done, where, and which right is missing.
    fn error(self, scope: Option<&Scope>, e: CallError) -> GiteaError {
        let where_ = Scope::describe(scope);
        let asked = Asked {
            operation: self.as_str(),
            words: self.words(),
            needs: scope.map_or("a valid token", |s| s.rights_hint(self.access())),
            not_found: format!("{where_} does not exist at Gitea, or its Actions are disabled (404)"),
            scope: where_,
        };
        GiteaError::Request(RequestError::new(GITEA, asked, e))
    }
}

/// The runners at a scope, as one paged listing saw them.
#[derive(Clone, Debug, Default)]
pub struct RunnerListing {
    /// The runners, each id once.
    pub runners: Vec<Runner>,
    /// Whether the pages fit together: no runner on two pages, every page telling the same
    /// `total_count`, and that many runners seen. Gitea pages runners in `last_online DESC`
    /// order (`FindRunnerOptions.ToOrders`, `models/actions/runner.go`), which every runner
    /// call rewrites (`withRunner`, `routers/api/actions/runner/interceptor.go`): a runner
    /// that polls between two page requests moves to the head and is on neither page, while
    /// the row pushed over the page boundary shows up twice. A registration or deletion
    /// between pages changes the count. Only a complete listing tells that a runner missing
    /// from it is not registered; a single page always is one snapshot.
    pub complete: bool,
}

/// Result of deleting a runner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// Gitea deleted it (204).
    Deleted,
    /// Gitea did not know it (404): already gone.
    AlreadyGone,
}

/// A client for one Gitea instance and one API token.
#[derive(Debug)]
pub struct GiteaClient {
    rest: RestClient,
}

/// The forge's pool makes clients with the group's trust settings.
impl From<RestClient> for GiteaClient {
    fn from(rest: RestClient) -> GiteaClient {
        GiteaClient { rest }
    }
}

impl GiteaClient {
    /// A client for the instance at `base_url` (e.g. `https://gitea.example.com/sub`).
    pub fn new(
        base_url: &str,
        token: SecretValue,
        metrics: Arc<Metrics>,
        opts: ClientOptions,
    ) -> Result<GiteaClient, GiteaError> {
        let rest = RestClient::new(GITEA, base_url, token, metrics, opts, None, None)
            .map_err(|e| GiteaError::Spec(e.to_string()))?;
        Ok(GiteaClient { rest })
    }

    fn url(&self, segments: &[&str], query: &[(&str, String)]) -> Url {
        self.rest.url(&API, segments, query)
    }

    /// Sends with the shared client's retries and words a failure for Gitea.
    async fn request<T>(
        &self,
        op: Operation,
        method: Method,
        url: Url,
        scope: Option<&Scope>,
        decode: &(dyn Fn(&[u8]) -> Option<T> + Sync),
    ) -> Result<T, GiteaError> {
        let call = Call {
            operation: op.as_str(),
            method,
            url,
            body: None,
            cap: op.body_cap(),
            idempotent: op.idempotent(),
        };
        match self.rest.send(&call, decode).await {
            Ok(reply) => Ok(reply.value),
            Err(e) => Err(op.error(scope, e)),
        }
    }

    async fn get_json<T: DeserializeOwned>(
        &self,
        op: Operation,
        url: Url,
        scope: Option<&Scope>,
    ) -> Result<T, GiteaError> {
        self.request(op, Method::GET, url, scope, &json::<T>).await
    }

    /// One list page, decoded within what `budget` has room for and charged to it (see
    /// [`ListingBudget::decode_page`]: nothing past the room is kept, not even while decoding).
    async fn get_page<T>(
        &self,
        op: Operation,
        url: Url,
        scope: &Scope,
        budget: &mut ListingBudget,
        shape: PageShape,
    ) -> Result<Page<T>, GiteaError>
    where
        T: for<'de> serde::Deserialize<'de> + Entries,
    {
        let over = |e: ListingError| op.error(Some(scope), CallError::from(e));
        let decode = |body: &[u8]| budget.decode_page::<T>(body, shape);
        let page = self
            .request(op, Method::GET, url, Some(scope), &decode)
            .await?
            .map_err(over)?;
        budget.charge_page(&page).map_err(over)?;
        Ok(page)
    }

    /// The server's version string (`GET /version`).
    pub async fn version(&self) -> Result<String, GiteaError> {
        let v: wire::ServerVersion = self
            .get_json(Operation::Version, self.url(&["version"], &[]), None)
            .await?;
        Ok(v.version)
    }

    /// The token user's login (`GET /user`).
    pub async fn current_user(&self) -> Result<String, GiteaError> {
        let u: User = self
            .get_json(Operation::User, self.url(&["user"], &[]), None)
            .await?;
        Ok(u.login)
    }

    /// Every job at `scope` whose status is one of `statuses` (API words, OR-ed), across all
    /// pages, deduplicated by id. Pages until the items seen reach `total_count`, since
    /// Gitea 1.25/1.26 set no order and may cap `limit` lower than asked. A listing over
    /// [`ListingLimits::FORGE_DEFAULT`] fails whole (see [`ListingBudget`] for why).
    pub async fn list_jobs(&self, scope: &Scope, statuses: &[&str]) -> Result<Vec<WorkflowJob>, GiteaError> {
        let op = Operation::ListJobs;
        let over = |e: ListingError| op.error(Some(scope), CallError::from(e));
        let mut budget = ListingBudget::new(ListingLimits::FORGE_DEFAULT);
        let mut by_id = BTreeMap::new();
        let mut seen = 0i64;
        loop {
            let page = budget.next_page().map_err(over)?;
            let mut query: Vec<(&str, String)> = statuses.iter().map(|s| ("status", s.to_string())).collect();
            query.push(("page", page.to_string()));
            query.push(("limit", PAGE_LIMIT.to_string()));
            let url = self.url(&scope.jobs_path(), &query);
            let body: Page<WorkflowJob> = self.get_page(op, url, scope, &mut budget, JOBS_PAGE).await?;
            let n = body.items.len();
            seen += n as i64;
            for j in body.items {
                by_id.insert(j.id, j);
            }
            if n == 0 || seen >= body.total_count.unwrap_or(0) {
                break;
            }
        }
        Ok(by_id.into_values().collect())
    }

    /// Every runner registered at `scope`, across pages, within the same limits as jobs, and
    /// whether the pages fit together (see [`RunnerListing::complete`]).
    pub async fn list_runners(&self, scope: &Scope) -> Result<RunnerListing, GiteaError> {
        let op = Operation::ListRunners;
        let over = |e: ListingError| op.error(Some(scope), CallError::from(e));
        let mut budget = ListingBudget::new(ListingLimits::FORGE_DEFAULT);
        let mut by_id = BTreeMap::new();
        let mut seen = 0i64;
        let mut repeated = false;
        let mut totals = BTreeSet::new();
        loop {
            let page = budget.next_page().map_err(over)?;
            let query = [("page", page.to_string()), ("limit", PAGE_LIMIT.to_string())];
            let url = self.url(&scope.runners_path(), &query);
            let body: Page<Runner> = self.get_page(op, url, scope, &mut budget, RUNNERS_PAGE).await?;
            let n = body.items.len();
            seen += n as i64;
            let total = body.total_count.unwrap_or(0);
            totals.insert(total);
            for r in body.items {
                // The later page's row wins: it is the fresher one.
                repeated |= by_id.insert(r.id, r).is_some();
            }
            if n == 0 || seen >= total {
                break;
            }
        }
        let distinct = i64::try_from(by_id.len()).unwrap_or(i64::MAX);
        Ok(RunnerListing {
            complete: !repeated && totals.len() == 1 && totals.first() == Some(&distinct),
            runners: by_id.into_values().collect(),
        })
    }

    /// The scope's registration token (`POST …/registration-token`; does not rotate it).
    pub async fn registration_token(&self, scope: &Scope) -> Result<SecretValue, GiteaError> {
        let url = self.url(&scope.registration_token_path(), &[]);
        self.request(
            Operation::RegistrationToken,
            Method::POST,
            url,
            Some(scope),
            &wire::registration_token,
        )
        .await
    }

    /// Re-runs job `job_id` of run `run_id` in `owner/repo`
    /// (`POST /repos/{owner}/{repo}/actions/runs/{run}/jobs/{job_id}/rerun`, Gitea 1.26+), sent
    /// once (see [`Operation::RerunJob`]). The 201 body, the job, is not read: 1.26 answers with
    /// the same job, 1.27 with a new one, and neither changes what comes next.
    pub async fn rerun_job(
        &self,
        owner: &str,
        repo: &str,
        run_id: i64,
        job_id: i64,
    ) -> Result<(), GiteaError> {
        let (run, job) = (run_id.to_string(), job_id.to_string());
        let segs = [
            "repos", owner, repo, "actions", "runs", &run, "jobs", &job, "rerun",
        ];
        let url = self.url(&segs, &[]);
        let scope = Scope::Repo {
            owner: owner.to_owned(),
            name: repo.to_owned(),
        };
        let decode = |_: &[u8]| Some(());
        self.request(Operation::RerunJob, Method::POST, url, Some(&scope), &decode)
            .await
    }

    /// Whether run `run_id` of `owner/repo` is done (`GET /repos/{owner}/{repo}/actions/runs/
    /// {run}`, Gitea 1.25+): its `status` is `completed` exactly when every job of the run is
    /// done (`ToActionsStatus` in `services/convert/convert.go`), which is what a re-run waits
    /// for (`prepareRunRerun` in `services/actions/rerun.go`).
    pub async fn run_done(&self, owner: &str, repo: &str, run_id: i64) -> Result<bool, GiteaError> {
        #[derive(serde::Deserialize)]
        struct Run {
            #[serde(default)]
            status: String,
        }
        let run = run_id.to_string();
        let url = self.url(&["repos", owner, repo, "actions", "runs", &run], &[]);
        let scope = Scope::Repo {
            owner: owner.to_owned(),
            name: repo.to_owned(),
        };
        let r: Run = self.get_json(Operation::GetRun, url, Some(&scope)).await?;
        Ok(r.status == "completed")
    }

    /// Deletes runner `id` at `scope`; 404 means it is already gone.
    pub async fn delete_runner(&self, scope: &Scope, id: i64) -> Result<DeleteOutcome, GiteaError> {
        let id = id.to_string();
        let mut segs = scope.runners_path();
        segs.push(&id);
        let url = self.url(&segs, &[]);
        let decode = |_: &[u8]| Some(());
        match self
            .request(Operation::DeleteRunner, Method::DELETE, url, Some(scope), &decode)
            .await
        {
            Ok(_) => Ok(DeleteOutcome::Deleted),
            Err(GiteaError::Request(RequestError::NotFound(_))) => Ok(DeleteOutcome::AlreadyGone),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests;
