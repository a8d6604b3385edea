//! A fake of the GitHub REST endpoints that re-run a job, which the `scaleset` emulator does not
//! serve: a run's job listing, the per-job re-run, and the App installation token the re-run is
//! sent with. Served under `/api/v3` (GHES's REST base), which is where a client puts the REST
//! API of a config URL on a host that is not github.com, such as this fake's loopback address.
//!
//! What it copies of GitHub (REST docs, "workflow jobs" and "workflow runs" pages; issue 28's
//! research notes for what the docs leave out):
//!
//! - `GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs`: `{"total_count", "jobs"}`, each job
//!   with its integer `id`, `run_id`, `name`, `status` and `runner_name` (`null` until a runner
//!   took it); `per_page` 30 by default and at most 100, `page` from 1; `filter=latest` (the
//!   default) lists the latest attempt only. 404 for a run it does not know.
//! - `POST /repos/{owner}/{repo}/actions/jobs/{job_id}/rerun`: 201 Created with `{}`; the job
//!   becomes a new attempt, listed under a new id with no runner. 404 for a job it does not know.
//! - While the run has not concluded GitHub refuses with 403 `This workflow is already running`
//!   (measured by peers for `rerun-failed-jobs`): [`RestJobsFake::refuse_while_running`].
//! - A token without the "Actions" permission (write) gets 403 `Resource not accessible by
//!   integration`: [`RestJobsFake::deny_reruns`]. A token it does not know gets 401 `Bad
//!   credentials`.
//! - `POST /app/installations/{id}/access_tokens` answers any bearer (the JWT is not checked)
//!   with [`INSTALLATION_TOKEN`], which the other routes then accept.
//!
//! Fault injection and the request log are the forge fakes' ([`crate::forge_common::faults`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::rest_error::rest_error;
use crate::forge_common::faults::{Fault, FaultTable, LoggedRequest, middleware};
use crate::forge_common::http::{Served, json_response, lock, token_of};

/// The installation token every App of the fake gets.
pub const INSTALLATION_TOKEN: &str = "ghs_fake_installation_token";
/// `documentation_url` of the fake's error bodies, as GitHub sends one with each.
const DOCS: &str = "https://docs.github.com/rest/actions/workflow-runs";
/// GitHub's default and largest `per_page`.
const DEFAULT_PER_PAGE: usize = 30;
const MAX_PER_PAGE: usize = 100;

/// One job of a run, as the listing shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakeRestJob {
    /// The REST job id.
    pub id: u64,
    /// The job's display name.
    pub name: String,
    /// The runner that took it, if one did.
    pub runner_name: Option<String>,
    /// `queued`, `in_progress` or `completed`.
    pub status: String,
}

/// A re-run the fake accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rerun {
    /// `owner/repo` of the request's path.
    pub repository: String,
    /// The job id it re-ran.
    pub job_id: u64,
    /// The id the new attempt of the job got.
    pub new_job_id: u64,
}

#[derive(Debug, Default)]
struct Model {
    /// Runs by id: repository and jobs (latest attempt).
    runs: BTreeMap<u64, (String, Vec<FakeRestJob>)>,
    /// Tokens accepted besides [`INSTALLATION_TOKEN`].
    tokens: Vec<String>,
    /// Re-runs still to refuse with "already running".
    refusals_left: u32,
    /// Refuse every re-run for want of permission.
    denied: bool,
    reruns: Vec<Rerun>,
    next_id: u64,
}

struct Shared {
    model: Mutex<Model>,
    faults: Arc<FaultTable>,
}

/// A running fake; stops when the last clone is dropped.
#[derive(Clone)]
pub struct RestJobsFake {
    served: Served<Shared>,
}

impl RestJobsFake {
    /// Starts the fake on a free loopback port; it accepts `token` (a PAT) and
    /// [`INSTALLATION_TOKEN`].
    pub async fn start(token: &str) -> std::io::Result<RestJobsFake> {
        let shared = |_: &str| Shared {
            model: Mutex::new(Model {
                tokens: vec![token.to_owned()],
                next_id: 1_000_000,
                ..Model::default()
            }),
            faults: Arc::default(),
        };
        let served = Served::start(shared, router).await?;
        Ok(RestJobsFake { served })
    }

    fn model(&self) -> MutexGuard<'_, Model> {
        lock(&self.served.state().model)
    }

    /// `http://127.0.0.1:PORT`; a config URL `{url}/{org}` has its REST API here.
    pub fn url(&self) -> &str {
        self.served.url()
    }

    /// Adds run `run_id` of `repository` (`owner/repo`) with these jobs (latest attempt).
    pub fn add_run(&self, repository: &str, run_id: u64, jobs: Vec<FakeRestJob>) {
        self.model().runs.insert(run_id, (repository.to_owned(), jobs));
    }

    /// Refuses the next `n` re-runs with 403 "This workflow is already running", as GitHub does
    /// until the run concludes.
    pub fn refuse_while_running(&self, n: u32) {
        self.model().refusals_left = n;
    }

    /// Refuses every re-run with 403 "Resource not accessible by integration" (a token without
    /// the "Actions" permission, write).
    pub fn deny_reruns(&self) {
        self.model().denied = true;
    }

    /// The re-runs accepted so far.
    pub fn reruns(&self) -> Vec<Rerun> {
        self.model().reruns.clone()
    }

    /// The jobs run `run_id` lists now.
    pub fn jobs(&self, run_id: u64) -> Vec<FakeRestJob> {
        self.model()
            .runs
            .get(&run_id)
            .map(|(_, j)| j.clone())
            .unwrap_or_default()
    }

    /// Adds a fault rule.
    pub fn push_fault(&self, fault: Fault) {
        self.served.state().faults.push(fault);
    }

    /// Requests received so far.
    pub fn requests(&self) -> Vec<LoggedRequest> {
        self.served.state().faults.requests()
    }
}

/// A job in the listing's JSON shape.
fn job_json(run_id: u64, j: &FakeRestJob) -> Value {
    json!({
        "id": j.id,
        "run_id": run_id,
        "name": j.name,
        "status": j.status,
        "conclusion": if j.status == "completed" { Some("failure") } else { None },
        "runner_name": j.runner_name,
    })
}

/// GitHub's error body.
fn error(status: StatusCode, message: &str) -> Response {
    rest_error(DOCS, status, message)
}

/// The request's token if the fake knows it.
fn authorized(shared: &Shared, headers: &HeaderMap) -> bool {
    let Some(t) = token_of(headers) else {
        return false;
    };
    t == INSTALLATION_TOKEN || lock(&shared.model).tokens.contains(&t)
}

async fn list_jobs(
    State(shared): State<Arc<Shared>>,
    Path((owner, repo, run_id)): Path<(String, String, u64)>,
    Query(q): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&shared, &headers) {
        return error(StatusCode::UNAUTHORIZED, "Bad credentials");
    }
    let num = |k: &str, default: usize| {
        q.get(k)
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|n| *n >= 1)
            .unwrap_or(default)
    };
    let per_page = num("per_page", DEFAULT_PER_PAGE).min(MAX_PER_PAGE);
    let page = num("page", 1);
    let m = lock(&shared.model);
    let repository = format!("{owner}/{repo}");
    let Some((_, jobs)) = m.runs.get(&run_id).filter(|(r, _)| *r == repository) else {
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    let shown: Vec<Value> = jobs
        .iter()
        .skip((page - 1).saturating_mul(per_page))
        .take(per_page)
        .map(|j| job_json(run_id, j))
        .collect();
    json_response(StatusCode::OK, json!({"total_count": jobs.len(), "jobs": shown}))
}

async fn rerun_job(
    State(shared): State<Arc<Shared>>,
    Path((owner, repo, job_id)): Path<(String, String, u64)>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&shared, &headers) {
        return error(StatusCode::UNAUTHORIZED, "Bad credentials");
    }
    let repository = format!("{owner}/{repo}");
    let mut guard = lock(&shared.model);
    let m: &mut Model = &mut guard;
    let next_id = m.next_id;
    let Some(job) = m
        .runs
        .values_mut()
        .filter(|(r, _)| *r == repository)
        .flat_map(|(_, jobs)| jobs.iter_mut())
        .find(|j| j.id == job_id)
    else {
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    if m.denied {
        return error(StatusCode::FORBIDDEN, "Resource not accessible by integration");
    }
    if m.refusals_left > 0 {
        m.refusals_left -= 1;
        return error(StatusCode::FORBIDDEN, "This workflow is already running");
    }
    *job = FakeRestJob {
        id: next_id,
        name: job.name.clone(),
        runner_name: None,
        status: "queued".into(),
    };
    m.next_id += 1;
    m.reruns.push(Rerun {
        repository,
        job_id,
        new_job_id: next_id,
    });
    json_response(StatusCode::CREATED, json!({}))
}

async fn installation_token(headers: HeaderMap) -> Response {
    if token_of(&headers).is_none() {
        return error(StatusCode::UNAUTHORIZED, "A JSON web token could not be decoded");
    }
    json_response(
        StatusCode::CREATED,
        json!({"token": INSTALLATION_TOKEN, "expires_at": "2099-01-01T00:00:00Z"}),
    )
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(
            "/api/v3/repos/{owner}/{repo}/actions/runs/{run_id}/jobs",
            get(list_jobs),
        )
        .route(
            "/api/v3/repos/{owner}/{repo}/actions/jobs/{job_id}/rerun",
            post(rerun_job),
        )
        .route(
            "/api/v3/app/installations/{id}/access_tokens",
            post(installation_token),
        )
        .layer(axum::middleware::from_fn_with_state(
            shared.faults.clone(),
            middleware,
        ))
        .with_state(shared)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u64, name: &str, runner: Option<&str>) -> FakeRestJob {
        FakeRestJob {
            id,
            name: name.into(),
            runner_name: runner.map(Into::into),
            status: "in_progress".into(),
        }
    }

    #[tokio::test]
    async fn lists_pages_and_reruns_after_the_refusals() {
        let fake = RestJobsFake::start("pat").await.expect("fake starts");
        fake.add_run("octo/hello", 7, (1..=3).map(|i| job(i, "test", None)).collect());
        fake.refuse_while_running(1);
        let http = reqwest::Client::new();
        let base = format!("{}/api/v3/repos/octo/hello/actions", fake.url());
        let page: Value = http
            .get(format!("{base}/runs/7/jobs?per_page=2&page=2"))
            .bearer_auth("pat")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(page["total_count"], 3);
        assert_eq!(page["jobs"].as_array().map(Vec::len), Some(1));
        assert_eq!(page["jobs"][0]["id"], 3);
        let post = |id: u64| {
            http.post(format!("{base}/jobs/{id}/rerun"))
                .bearer_auth("pat")
                .send()
        };
        assert_eq!(post(2).await.unwrap().status(), 403);
        assert_eq!(post(2).await.unwrap().status(), 201);
        assert_eq!(post(2).await.unwrap().status(), 404, "the job has a new id now");
        assert_eq!(fake.reruns().len(), 1);
        assert_eq!(fake.jobs(7)[1].runner_name, None);
        let unknown = http
            .get(format!("{base}/runs/7/jobs"))
            .bearer_auth("nope")
            .send()
            .await
            .unwrap();
        assert_eq!(unknown.status(), 401);
    }
}
