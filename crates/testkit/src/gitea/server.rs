//! The fake's REST routes under `/api/v1` (the Gitea 1.25/1.26 paths forgerunner uses, the job
//! re-run route of 1.26 among them) and the runner protocol under `/api/actions` (see
//! `runner_api`).

// Handlers return a ready `Response` as their error: it is what axum sends, and the size
// does not matter for a test fake.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde_json::{Value, json};

use super::control::{Shared, lock};
use super::faults::api_error;
use super::model::{FakeScope, FakeUser, JobState, Model, status_filter};
use crate::forge_common::http::{
    add_paging_headers, json_response, link_header, paging, query_pairs, segments, token_of,
};

/// Gitea's default `MAX_RESPONSE_ITEMS`.
const MAX_ITEMS: usize = 50;

type S = State<Arc<Shared>>;

/// Which route family a request came through.
#[derive(Clone, Debug)]
enum Route {
    Admin,
    Org(String),
    User,
    Repo(String, String),
}

fn user(shared: &Shared, headers: &HeaderMap) -> Result<FakeUser, Response> {
    let tok = token_of(headers).ok_or_else(|| api_error(StatusCode::UNAUTHORIZED, "token is required"))?;
    lock(&shared.model)
        .tokens
        .get(&tok)
        .cloned()
        .ok_or_else(|| api_error(StatusCode::UNAUTHORIZED, "user does not exist"))
}

/// Checks access like Gitea: admin routes need a site admin; org routes an org owner; repo
/// routes an existing repo, and its owner for runner/token routes (`need_owner`).
fn authorize(m: &Model, u: &FakeUser, route: &Route, need_owner: bool) -> Result<FakeScope, Response> {
    let forbidden = || {
        api_error(
            StatusCode::FORBIDDEN,
            "token does not have at least one of required scope(s)",
        )
    };
    match route {
        Route::Admin if u.admin => Ok(FakeScope::Global),
        Route::Admin => Err(forbidden()),
        Route::Org(o) if !m.orgs.contains_key(o) => Err(api_error(StatusCode::NOT_FOUND, "org not found")),
        Route::Org(o) if m.owns(u, o) => Ok(FakeScope::Owner(o.clone())),
        Route::Org(_) => Err(forbidden()),
        Route::User => Ok(FakeScope::Owner(u.login.clone())),
        Route::Repo(o, r) if !m.repos.contains(&(o.clone(), r.clone())) => {
            Err(api_error(StatusCode::NOT_FOUND, "repo not found"))
        }
        Route::Repo(o, r) if !need_owner || m.owns(u, o) => Ok(FakeScope::Repo(o.clone(), r.clone())),
        Route::Repo(..) => Err(forbidden()),
    }
}

async fn version(State(s): S) -> Response {
    json_response(StatusCode::OK, json!({"version": s.config.version}))
}

async fn current_user(State(s): S, headers: HeaderMap) -> Response {
    match user(&s, &headers) {
        Ok(u) => json_response(
            StatusCode::OK,
            json!({"id": 1, "login": u.login, "username": u.login, "is_admin": u.admin}),
        ),
        Err(e) => e,
    }
}

async fn list_jobs(
    s: Arc<Shared>,
    route: Route,
    headers: HeaderMap,
    query: Option<String>,
    path: String,
) -> Response {
    if s.minor < (1, 25) {
        return api_error(StatusCode::NOT_FOUND, "not found");
    }
    let u = match user(&s, &headers) {
        Ok(u) => u,
        Err(e) => return e,
    };
    let pairs = query_pairs(&query);
    let mut states: Vec<JobState> = Vec::new();
    for (_, w) in pairs.iter().filter(|(k, _)| k == "status") {
        match status_filter(w) {
            Some(v) => states.extend(v),
            None => return api_error(StatusCode::BAD_REQUEST, &format!("unknown status {w}")),
        }
    }
    let (page, limit) = paging(&pairs, MAX_ITEMS);
    let dialect = s.dialect();
    let (total, items) = {
        let m = lock(&s.model);
        // Gitea 1.26 lists jobs with the reader check (`reqRepoReader(unit.TypeActions)` for a
        // repository); 1.25 with the owner check, like runners (`routers/api/v1/api.go`
        // `addActionsRoutes`: one `reqChecker`, `reqOwner()` for repositories, for every route).
        let scope = match authorize(&m, &u, &route, s.minor < (1, 26)) {
            Ok(sc) => sc,
            Err(e) => return e,
        };
        let all: Vec<Value> = m
            .jobs
            .values()
            .filter(|j| scope.contains(&j.owner, &j.repo))
            .filter(|j| states.is_empty() || states.contains(&j.state))
            .map(|j| super::json::job(&s.base_url, j, dialect))
            .collect();
        let total = all.len();
        (
            total,
            all.into_iter()
                .skip((page - 1) * limit)
                .take(limit)
                .collect::<Vec<_>>(),
        )
    };
    let mut r = json_response(StatusCode::OK, json!({"jobs": items, "total_count": total}));
    let link = link_header(&s.base_url, &path, &pairs, page, limit, total);
    add_paging_headers(&mut r, total, &link);
    r
}

async fn list_runners(s: Arc<Shared>, route: Route, headers: HeaderMap, query: Option<String>) -> Response {
    let u = match user(&s, &headers) {
        Ok(u) => u,
        Err(e) => return e,
    };
    let pairs = query_pairs(&query);
    let (page, limit) = paging(&pairs, MAX_ITEMS);
    let disabled = pairs
        .iter()
        .find(|(k, _)| k == "disabled")
        .and_then(|(_, v)| v.parse::<bool>().ok())
        .filter(|_| s.minor >= (1, 26));
    let mut m = lock(&s.model);
    let scope = match authorize(&m, &u, &route, true) {
        Ok(sc) => sc,
        Err(e) => return e,
    };
    // Gitea's `FindRunnerOptions.ToConds` (`models/actions/runner.go`) as `shared.ListRunners`
    // uses it: the admin route has no condition (every runner, global ones included); an
    // org/user route is `owner_id = X`, a repo route `repo_id = X`. A global runner (owner 0,
    // repo 0) is therefore in no org, user or repo listing. The order is `ToOrders`'s default,
    // `last_online DESC`, which every runner call changes: pages shift between requests.
    let all: Vec<Value> = m
        .listed_runners()
        .into_iter()
        .filter(|r| scope == FakeScope::Global || r.scope == scope)
        .filter(|r| disabled.is_none_or(|d| r.disabled == d))
        .map(|r| super::json::runner(r, Model::online(r, s.config.offline_after), s.dialect()))
        .collect();
    let total = all.len();
    let items: Vec<Value> = all.into_iter().skip((page - 1) * limit).take(limit).collect();
    // Runners whose poll a test placed right after this page (see
    // `GiteaFakeHandle::poll_after_runner_page`): they call `FetchTask` before the next page.
    let due = {
        let mut hooks = lock(&s.runner_page_hooks);
        let first = hooks.iter().position(|(p, _)| *p == page);
        first.map(|i| hooks.remove(i).1)
    };
    let change = due.and_then(|id| m.fetch(id).1);
    drop(m);
    s.announce(change);
    json_response(StatusCode::OK, json!({"runners": items, "total_count": total}))
}

async fn runner_by_id(
    s: Arc<Shared>,
    route: Route,
    headers: HeaderMap,
    id: String,
    delete: bool,
) -> Response {
    let u = match user(&s, &headers) {
        Ok(u) => u,
        Err(e) => return e,
    };
    let mut m = lock(&s.model);
    let scope = match authorize(&m, &u, &route, true) {
        Ok(sc) => sc,
        Err(e) => return e,
    };
    let Ok(id) = id.parse::<i64>() else {
        return api_error(StatusCode::BAD_REQUEST, "invalid runner id");
    };
    // Gitea's `getRunnerByID` (`routers/api/v1/shared/runners.go`): an unknown id is 404
    // "Runner not found"; a runner not `EditableInContext` of the route (`models/actions/
    // runner.go`: admin edits any, org/user only `OwnerID == X`, repo only `RepoID == X`) is
    // 404 too, e.g. a global runner through an org, user or repo route.
    let Some(editable) = m
        .runners
        .get(&id)
        .map(|r| scope == FakeScope::Global || r.scope == scope)
    else {
        return api_error(StatusCode::NOT_FOUND, "Runner not found");
    };
    if !editable {
        return api_error(StatusCode::NOT_FOUND, "No permission to access this runner");
    }
    if delete {
        m.delete_runner(id);
        return StatusCode::NO_CONTENT.into_response();
    }
    match m.runners.get(&id) {
        Some(r) => json_response(
            StatusCode::OK,
            super::json::runner(r, Model::online(r, s.config.offline_after), s.dialect()),
        ),
        None => api_error(StatusCode::NOT_FOUND, "Runner not found"),
    }
}

async fn registration_token(s: Arc<Shared>, route: Route, headers: HeaderMap, is_get: bool) -> Response {
    // GET was removed in 1.26 (only POST remains).
    if is_get && s.minor >= (1, 26) {
        return api_error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    }
    let u = match user(&s, &headers) {
        Ok(u) => u,
        Err(e) => return e,
    };
    let mut m = lock(&s.model);
    let scope = match authorize(&m, &u, &route, true) {
        Ok(sc) => sc,
        Err(e) => return e,
    };
    let token = m.registration_token(&scope);
    json_response(StatusCode::OK, json!({"token": token}))
}

/// `POST /repos/{owner}/{repo}/actions/runs/{run}/jobs/{job_id}/rerun`: Gitea 1.26's
/// `RerunWorkflowJob` behind `reqToken()` and `reqRepoWriter(unit.TypeActions)`
/// (`routers/api/v1/api.go`), with the rules of [`super::rerun`]. Every request is recorded,
/// with its answer's status.
fn rerun_job(
    s: &Arc<Shared>,
    owner: &str,
    repo: &str,
    headers: &HeaderMap,
    run: &str,
    job: &str,
) -> Response {
    // `ctx.PathParamInt64` reads an id that is not a number as 0, which names nothing.
    let (run_id, job_id) = (run.parse().unwrap_or(0), job.parse().unwrap_or(0));
    let response = rerun_answer(s, owner, repo, headers, run_id, job_id);
    lock(&s.model).reruns.push(super::rerun::RerunRequest {
        owner: owner.to_owned(),
        repo: repo.to_owned(),
        run_id,
        job_id,
        status: response.status().as_u16(),
    });
    response
}

fn rerun_answer(
    s: &Arc<Shared>,
    owner: &str,
    repo: &str,
    headers: &HeaderMap,
    run_id: i64,
    job_id: i64,
) -> Response {
    // No such route before 1.26 (`routers/api/v1/api.go` at v1.25.4).
    if s.minor < (1, 26) {
        return api_error(StatusCode::NOT_FOUND, "not found");
    }
    let u = match user(s, headers) {
        Ok(u) => u,
        Err(e) => return e,
    };
    let mut m = lock(&s.model);
    let route = Route::Repo(owner.to_owned(), repo.to_owned());
    if let Err(e) = authorize(&m, &u, &route, false) {
        return e;
    }
    // Write access stands for owning the repository's owner (the fake has no collaborators).
    if !m.owns(&u, owner) {
        return api_error(
            StatusCode::FORBIDDEN,
            "user should have a permission to write to a repo",
        );
    }
    match m.rerun_job(owner, repo, run_id, job_id) {
        Ok(change) => {
            let body = super::json::job(&s.base_url, &change.job, s.dialect());
            drop(m);
            // `rerunWorkflowJob` notifies `WorkflowJobStatusUpdate`: a `workflow_job` delivery.
            s.announce([change]);
            json_response(StatusCode::CREATED, body)
        }
        Err(refusal) => api_error(refusal.status(), refusal.message()),
    }
}

/// `GET /repos/{owner}/{repo}/actions/runs/{run}`: Gitea's `GetWorkflowRun` (from 1.25,
/// `routers/api/v1/api.go` at v1.25.4; absent at v1.24.0), behind `reqRepoReader(unit.
/// TypeActions)`. Only the fields a client reads here: `id`, `status` and `conclusion`.
fn get_run(s: &Arc<Shared>, owner: &str, repo: &str, headers: &HeaderMap, run: &str) -> Response {
    if s.minor < (1, 25) {
        return api_error(StatusCode::NOT_FOUND, "not found");
    }
    let u = match user(s, headers) {
        Ok(u) => u,
        Err(e) => return e,
    };
    let m = lock(&s.model);
    let route = Route::Repo(owner.to_owned(), repo.to_owned());
    if let Err(e) = authorize(&m, &u, &route, false) {
        return e;
    }
    let run_id: i64 = run.parse().unwrap_or(0);
    match m.run_done(owner, repo, run_id) {
        None => api_error(StatusCode::NOT_FOUND, "not found"),
        Some(done) => json_response(
            StatusCode::OK,
            json!({
                "id": run_id,
                "status": if done { "completed" } else { "in_progress" },
            }),
        ),
    }
}

/// Dispatches every scoped route by its path, the way Gitea's router nests them.
async fn dispatch(
    State(s): S,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
) -> Response {
    let path = uri.path().to_string();
    let segs = segments(&path);
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let (route, rest) = match segs.as_slice() {
        ["admin", "runners", "registration-token"] if method == Method::GET => {
            return registration_token(s, Route::Admin, headers, true).await;
        }
        ["admin", "actions", rest @ ..] => (Route::Admin, rest),
        ["orgs", o, "actions", rest @ ..] => (Route::Org(o.to_string()), rest),
        ["user", "actions", rest @ ..] => (Route::User, rest),
        ["repos", o, r, "actions", rest @ ..] => (Route::Repo(o.to_string(), r.to_string()), rest),
        _ => return api_error(StatusCode::NOT_FOUND, "not found"),
    };
    match (rest, &method) {
        (["runs", run], &Method::GET) => match &route {
            Route::Repo(o, r) => get_run(&s, o, r, &headers, run),
            _ => api_error(StatusCode::NOT_FOUND, "not found"),
        },
        (["runs", run, "jobs", job, "rerun"], &Method::POST) => match &route {
            Route::Repo(o, r) => rerun_job(&s, o, r, &headers, run, job),
            _ => api_error(StatusCode::NOT_FOUND, "not found"),
        },
        (["jobs"], &Method::GET) => list_jobs(s, route, headers, q, path).await,
        (["runners"], &Method::GET) => list_runners(s, route, headers, q).await,
        (["runners", "registration-token"], &Method::GET) => {
            registration_token(s, route, headers, true).await
        }
        (["runners", "registration-token"], &Method::POST) => {
            registration_token(s, route, headers, false).await
        }
        (["runners", id], &Method::GET) => runner_by_id(s, route, headers, id.to_string(), false).await,
        (["runners", id], &Method::DELETE) => runner_by_id(s, route, headers, id.to_string(), true).await,
        (["jobs"] | ["runners"] | ["runners", _], _) => {
            api_error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
        }
        _ => api_error(StatusCode::NOT_FOUND, "not found"),
    }
}

/// The full router (REST, runner protocol, fault/log middleware).
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    let api: Router<Arc<Shared>> = Router::new()
        .route("/api/v1/version", get(version))
        .route("/api/v1/user", get(current_user))
        .route("/api/v1/{*rest}", any(dispatch));
    let api = super::runner_api::routes(api);
    api.layer(axum::middleware::from_fn_with_state(
        shared.faults.clone(),
        crate::forge_common::faults::middleware,
    ))
    .with_state(shared)
}
