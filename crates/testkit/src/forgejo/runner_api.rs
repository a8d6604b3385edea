//! Forgejo's runner RPC in the fakes' simplified connect-JSON form (framing and auth shared
//! with the Gitea fake, see [`crate::forge_common::rpc`]), at
//! `/api/actions/runner.v1.RunnerService/…`:
//! - `Register` `{name, token, labels, ephemeral, version}` → `{runner: {id, uuid, token, name,
//!   labels, ephemeral}}`; `ephemeral` is honoured from v15 only. Unknown token: `401`.
//! - `Declare` `{labels, version}` → `{runner: {…}}`: replaces the runner's label names.
//! - `FetchTask` `{}` and (v15; `404 unimplemented` before) `FetchSingleTask` `{handle}` →
//!   `{task: {id, jobId, attempt, handle, runsOn} | null, tasksVersion}`.
//! - `UpdateTask` `{state: {id, result}}` → `{state: {id, result}}`; the answer's `result` is
//!   `RESULT_CANCELLED` once the job was cancelled at the forge.
//! - `UpdateLog` `{taskId, index, rows, noMore}` → `{ackIndex}`.
//!
//! Every call with valid credentials refreshes the runner's `last_online`; `UpdateTask` and
//! `UpdateLog` also `last_active`.

// Handlers return a ready `Response` as their error: it is what axum sends.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::assign::TaskUpdate;
use super::control::Shared;
use super::model::{Conclusion, FakeRunner, FakeTask};
use crate::forge_common::http::lock;
use crate::forge_common::rpc::{RUNNER_SERVICE, connect_error, runner_credentials, unauthenticated};

type S = State<Arc<Shared>>;

fn auth(s: &Shared, h: &HeaderMap) -> Result<i64, Response> {
    let (uuid, token) = runner_credentials(h);
    lock(&s.model)
        .runner_by_auth(&uuid, &token)
        .ok_or_else(unauthenticated)
}

fn body<T: DeserializeOwned>(b: &[u8]) -> Result<T, Response> {
    // Connect accepts an empty body as the empty message.
    let b = if b.is_empty() { b"{}".as_slice() } else { b };
    serde_json::from_slice(b)
        .map_err(|_| connect_error(StatusCode::BAD_REQUEST, "invalid_argument", "bad body"))
}

fn ok(v: Value) -> Response {
    axum::Json(v).into_response()
}

fn runner_json(r: &FakeRunner) -> Value {
    json!({"runner": {
        "id": r.id, "uuid": r.uuid, "token": r.token, "name": r.name,
        "labels": r.labels, "ephemeral": r.ephemeral, "version": r.version,
    }})
}

#[derive(Deserialize)]
struct RegisterBody {
    #[serde(default)]
    name: String,
    #[serde(default)]
    token: String,
    #[serde(default)]
    labels: Vec<String>,
    #[serde(default)]
    ephemeral: bool,
    #[serde(default)]
    version: String,
}

async fn register(State(s): S, raw: axum::body::Bytes) -> Response {
    let b: RegisterBody = match body(&raw) {
        Ok(b) => b,
        Err(e) => return e,
    };
    // Ephemeral runners exist from v15; older servers ignore the field.
    let ephemeral = b.ephemeral && s.version.v15();
    let mut m = lock(&s.model);
    match m.register(&b.token, &b.name, b.labels, ephemeral) {
        Some(r) => {
            let r = m.declare(r.id, r.labels.clone(), &b.version).unwrap_or(r);
            ok(runner_json(&r))
        }
        None => connect_error(
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "runner registration token not found",
        ),
    }
}

#[derive(Deserialize)]
struct DeclareBody {
    #[serde(default)]
    labels: Vec<String>,
    #[serde(default)]
    version: String,
}

async fn declare(State(s): S, h: HeaderMap, raw: axum::body::Bytes) -> Response {
    let (id, b) = match auth(&s, &h).and_then(|id| Ok((id, body::<DeclareBody>(&raw)?))) {
        Ok(x) => x,
        Err(e) => return e,
    };
    match lock(&s.model).declare(id, b.labels, &b.version) {
        Some(r) => ok(runner_json(&r)),
        None => unauthenticated(),
    }
}

fn task_json(t: Option<FakeTask>, s: &Shared) -> Value {
    let task = t.map(|t| {
        let runs_on = lock(&s.model)
            .jobs
            .get(&t.job_id)
            .map(|j| j.runs_on.clone())
            .unwrap_or_default();
        json!({"id": t.id, "jobId": t.job_id, "attempt": t.attempt, "handle": t.handle, "runsOn": runs_on})
    });
    json!({"task": task, "tasksVersion": 1})
}

async fn fetch_task(State(s): S, h: HeaderMap) -> Response {
    let id = match auth(&s, &h) {
        Ok(id) => id,
        Err(e) => return e,
    };
    let task = lock(&s.model).fetch(id, None);
    ok(task_json(task, &s))
}

#[derive(Deserialize)]
struct FetchSingleBody {
    #[serde(default)]
    handle: String,
}

async fn fetch_single_task(State(s): S, h: HeaderMap, raw: axum::body::Bytes) -> Response {
    if !s.version.v15() {
        return connect_error(
            StatusCode::NOT_FOUND,
            "unimplemented",
            "FetchSingleTask is not implemented",
        );
    }
    let (id, b) = match auth(&s, &h).and_then(|id| Ok((id, body::<FetchSingleBody>(&raw)?))) {
        Ok(x) => x,
        Err(e) => return e,
    };
    // Without a handle it is a plain fetch.
    let handle = Some(b.handle.as_str()).filter(|h| !h.is_empty());
    let task = lock(&s.model).fetch(id, handle);
    ok(task_json(task, &s))
}

#[derive(Deserialize)]
struct TaskState {
    id: i64,
    #[serde(default)]
    result: String,
}

#[derive(Deserialize)]
struct UpdateTaskBody {
    state: TaskState,
}

async fn update_task(State(s): S, h: HeaderMap, raw: axum::body::Bytes) -> Response {
    let (id, b) = match auth(&s, &h).and_then(|id| Ok((id, body::<UpdateTaskBody>(&raw)?))) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let result = Conclusion::from_rpc(&b.state.result);
    match lock(&s.model).update_task(id, b.state.id, result) {
        TaskUpdate::NotFound => connect_error(StatusCode::NOT_FOUND, "not_found", "task not found"),
        TaskUpdate::Ok(now) => {
            let word = now.map_or("RESULT_UNSPECIFIED", Conclusion::rpc_word);
            ok(json!({"state": {"id": b.state.id, "result": word}}))
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UpdateLogBody {
    task_id: i64,
    #[serde(default)]
    index: i64,
    #[serde(default)]
    rows: Vec<Value>,
}

async fn update_log(State(s): S, h: HeaderMap, raw: axum::body::Bytes) -> Response {
    let (id, b) = match auth(&s, &h).and_then(|id| Ok((id, body::<UpdateLogBody>(&raw)?))) {
        Ok(x) => x,
        Err(e) => return e,
    };
    if !lock(&s.model).update_log(id, b.task_id) {
        return connect_error(StatusCode::NOT_FOUND, "not_found", "task not found");
    }
    ok(json!({"ackIndex": b.index + b.rows.len() as i64}))
}

/// Adds the runner routes.
pub(crate) fn routes(r: Router<Arc<Shared>>) -> Router<Arc<Shared>> {
    let at = |m: &str| format!("{RUNNER_SERVICE}/{m}");
    r.route(&at("Register"), post(register))
        .route(&at("Declare"), post(declare))
        .route(&at("FetchTask"), post(fetch_task))
        .route(&at("FetchSingleTask"), post(fetch_single_task))
        .route(&at("UpdateTask"), post(update_task))
        .route(&at("UpdateLog"), post(update_log))
}
