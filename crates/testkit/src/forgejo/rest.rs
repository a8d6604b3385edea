//! The fake's REST routes: `/api/v1/version`, `/api/forgejo/v1/version`, `/api/v1/user`, and at
//! the four scopes the waiting-job lists, registration tokens and (v15) runner CRUD, each only
//! from the Forgejo version that has it (absent routes are `404`). Also mounts the runner RPC and the fault
//! middleware.

use std::sync::Arc;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde::Deserialize;
use serde_json::{Value, json};

use super::assign::runner_status;
use super::auth::{Route, api_error, authorize};
use super::control::Shared;
use super::labels::LabelFilter;
use super::model::{FakeScope, JobStatus};
use super::version::without_suffix;
use crate::forge_common::http::{
    add_paging_headers, first, json_response, link_header, lock, paging, query_pairs, segments,
};

type S = State<Arc<Shared>>;

async fn version(State(s): S) -> Response {
    json_response(StatusCode::OK, json!({"version": s.config.version}))
}

async fn forgejo_version(State(s): S) -> Response {
    json_response(
        StatusCode::OK,
        json!({"version": without_suffix(&s.config.version)}),
    )
}

fn not_found() -> Response {
    api_error(StatusCode::NOT_FOUND, "not found")
}

fn method_not_allowed() -> Response {
    api_error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
}

/// `GET …/runners/jobs`: waiting and running jobs in scope matching `labels`, id descending,
/// no paging, `null` when empty.
fn list_jobs(s: &Shared, route: &Route, headers: &HeaderMap, query: &Option<String>) -> Response {
    let scope = match authorize(s, headers, route, false) {
        Ok(sc) => sc,
        Err(e) => return e,
    };
    let pairs = query_pairs(query);
    let filter = LabelFilter::from_query(first(&pairs, "labels"), s.version);
    let m = lock(&s.model);
    let jobs: Vec<Value> = m
        .jobs
        .values()
        .rev()
        .filter(|j| matches!(j.status, JobStatus::Waiting | JobStatus::Running))
        .filter(|j| super::model::Model::in_scope(&scope, j))
        .filter(|j| filter.matches(&j.runs_on))
        .map(|j| super::json::job(j, s.version.v15()))
        .collect();
    // Forgejo serialises a nil slice when nothing matches.
    let body = if jobs.is_empty() { Value::Null } else { json!(jobs) };
    json_response(StatusCode::OK, body)
}

/// `GET /api/v1/user` (`routers/api/v1/user/user.go` `GetAuthenticatedUser`): the token's own
/// user, behind the `read:user` token scope like the rest of `/user`.
fn current_user(s: &Shared, headers: &HeaderMap) -> Response {
    let login = match authorize(s, headers, &Route::User, false) {
        Ok(FakeScope::Owner(login)) => login,
        Ok(_) => return not_found(),
        Err(e) => return e,
    };
    let id = lock(&s.model).accounts.get(&login).copied().unwrap_or(0);
    // `convert.ToUser`: `login` is the user name; `username` repeats it (Forgejo adds it for
    // Gitea compatibility).
    json_response(
        StatusCode::OK,
        json!({"id": id, "login": login, "username": login, "login_name": ""}),
    )
}

fn registration_token(s: &Shared, route: &Route, headers: &HeaderMap) -> Response {
    let scope = match authorize(s, headers, route, false) {
        Ok(sc) => sc,
        Err(e) => return e,
    };
    let token = lock(&s.model).registration_token(&scope);
    json_response(StatusCode::OK, json!({"token": token}))
}

fn list_runners(
    s: &Shared,
    route: &Route,
    headers: &HeaderMap,
    query: &Option<String>,
    path: &str,
) -> Response {
    let scope = match authorize(s, headers, route, false) {
        Ok(sc) => sc,
        Err(e) => return e,
    };
    let pairs = query_pairs(query);
    let (page, limit) = paging(&pairs, s.config.max_response_items);
    let visible = first(&pairs, "visible").is_some_and(|v| v == "true");
    let hook = lock(&s.runner_page_hook).clone();
    let mut m = lock(&s.model);
    if let Some(hook) = hook {
        hook(page, &mut m);
    }
    let all = m.runners_at(&scope, visible);
    let total = all.len();
    let items: Vec<Value> = all
        .into_iter()
        .skip((page - 1) * limit)
        .take(limit)
        .map(|r| runner_json(s, &m, r))
        .collect();
    let mut resp = json_response(StatusCode::OK, json!(items));
    let link = link_header(&s.base_url, path, &pairs, page, limit, total);
    add_paging_headers(&mut resp, total, &link);
    resp
}

fn runner_json(s: &Shared, m: &super::model::Model, r: &super::model::FakeRunner) -> Value {
    let (owner_id, repo_id) = m.scope_ids(&r.scope);
    let status = runner_status(r, s.config.offline_after, s.config.idle_after);
    super::json::runner(r, owner_id, repo_id, status)
}

fn runner_by_id(s: &Shared, route: &Route, headers: &HeaderMap, id: &str, delete: bool) -> Response {
    let scope = match authorize(s, headers, route, delete) {
        Ok(sc) => sc,
        Err(e) => return e,
    };
    let Ok(id) = id.parse::<i64>() else {
        return api_error(StatusCode::NOT_FOUND, "runner not found");
    };
    let mut m = lock(&s.model);
    // Only the scope's own runners: one owned by a higher scope is `404` here.
    let found = m
        .runners
        .get(&id)
        .filter(|r| scope == FakeScope::Global || r.scope == scope)
        .cloned();
    match found {
        None => api_error(StatusCode::NOT_FOUND, "runner not found"),
        Some(_) if delete => {
            m.delete_runner(id);
            StatusCode::NO_CONTENT.into_response()
        }
        Some(r) => json_response(StatusCode::OK, runner_json(s, &m, &r)),
    }
}

#[derive(Deserialize)]
struct RegisterRunnerOptions {
    name: Option<String>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    ephemeral: bool,
}

fn create_runner(s: &Shared, route: &Route, headers: &HeaderMap, body: &[u8]) -> Response {
    let scope = match authorize(s, headers, route, true) {
        Ok(sc) => sc,
        Err(e) => return e,
    };
    let Ok(opts) = serde_json::from_slice::<RegisterRunnerOptions>(body) else {
        return api_error(StatusCode::BAD_REQUEST, "invalid body");
    };
    let Some(name) = opts.name.filter(|n| !n.is_empty()) else {
        return json_response(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!([{"fieldNames": ["Name"], "classification": "RequiredError", "message": "Required"}]),
        );
    };
    let mut m = lock(&s.model);
    // No labels until forgejo-runner declares them.
    let mut r = m.new_runner(scope, &name, Vec::new(), opts.ephemeral);
    r.description = opts.description;
    m.runners.insert(r.id, r.clone());
    json_response(
        StatusCode::CREATED,
        json!({"id": r.id, "uuid": r.uuid, "token": r.token}),
    )
}

/// Dispatches every scoped route by its path, gating each by the version that has it.
async fn dispatch(
    State(s): S,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
    body: axum::body::Bytes,
) -> Response {
    let path = uri.path().to_string();
    let segs = segments(&path);
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let v = s.version;
    if segs.as_slice() == ["user"] {
        return if method == Method::GET {
            current_user(&s, &headers)
        } else {
            method_not_allowed()
        };
    }
    let (route, rest) = match segs.as_slice() {
        // The pre-v15 admin paths sit outside `/admin/actions`.
        ["admin", "runners", "jobs"] if v.has_job_lists() => (Route::Admin, &segs[2..]),
        ["admin", "runners", "registration-token"] => (Route::Admin, &segs[2..]),
        ["admin", "actions", "runners", rest @ ..] if v.v15() => (Route::Admin, rest),
        ["orgs", o, "actions", "runners", rest @ ..] => (Route::Org(o.to_string()), rest),
        ["user", "actions", "runners", rest @ ..] => (Route::User, rest),
        ["repos", o, r, "actions", "runners", rest @ ..] => (Route::Repo(o.to_string(), r.to_string()), rest),
        _ => return not_found(),
    };
    let get = method == Method::GET;
    match rest {
        ["jobs"] if !v.has_job_lists() => not_found(),
        ["jobs"] if get => list_jobs(&s, &route, &headers, &q),
        ["registration-token"] if get => registration_token(&s, &route, &headers),
        [] if !v.v15() => not_found(),
        [] if get => list_runners(&s, &route, &headers, &q, &path),
        [] if method == Method::POST => create_runner(&s, &route, &headers, &body),
        [id] if v.v15() && *id != "jobs" && *id != "registration-token" => match method {
            Method::GET => runner_by_id(&s, &route, &headers, id, false),
            Method::DELETE => runner_by_id(&s, &route, &headers, id, true),
            _ => method_not_allowed(),
        },
        ["jobs"] | ["registration-token"] | [] => method_not_allowed(),
        _ => not_found(),
    }
}

/// The full router (REST, runner RPC, fault/log middleware).
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    let api: Router<Arc<Shared>> = Router::new()
        .route("/api/v1/version", get(version))
        .route("/api/forgejo/v1/version", get(forgejo_version))
        .route("/api/v1/{*rest}", any(dispatch));
    let api = super::runner_api::routes(api);
    api.layer(axum::middleware::from_fn_with_state(
        shared.faults.clone(),
        crate::forge_common::faults::middleware,
    ))
    .with_state(shared)
}
