//! The runner side of the fake: a simplified JSON form of act_runner's connect RPCs.
//!
//! A real act_runner speaks connect (protobuf or JSON) at
//! `/api/actions/runner.v1.RunnerService/{Register,Declare,FetchTask,UpdateTask}`. The fake
//! keeps those paths and the JSON encoding with a reduced message set:
//! - `Register` `{name, token, labels: [names], ephemeral}` → `{runner: {id, uuid, token, name,
//!   labels, ephemeral}}`; an unknown registration token is `401 {code: "unauthenticated"}`.
//! - `Declare`, `FetchTask`, `UpdateTask` authenticate with the headers `x-runner-uuid` and
//!   `x-runner-token`. `FetchTask` `{}` → `{task: {id, jobId, labels} | null}`; an ephemeral
//!   runner that already ran its job gets `404 {code: "not_found"}` and is deleted.
//!   `UpdateTask` `{state: {id, result}}` with `result` one of `RESULT_UNSPECIFIED`
//!   (heartbeat), `RESULT_SUCCESS`, `RESULT_FAILURE`, `RESULT_CANCELLED` → `{state: {id,
//!   result}}`, where `RESULT_CANCELLED` tells the runner the job was cancelled.

// Handlers return a ready `Response` as their error: it is what axum sends, and the size
// does not matter for a test fake.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Deserialize;
use serde_json::{Value, json};

use super::control::{Shared, lock};
use super::model::{Conclusion, Fetch};
use crate::forge_common::rpc::{RUNNER_SERVICE, connect_error, runner_credentials, unauthenticated};

const BASE: &str = RUNNER_SERVICE;

/// Gitea's `withRunner` interceptor (`routers/api/actions/runner/interceptor.go`): every call
/// but `Register` authenticates by uuid and token and stamps the runner's `last_online`.
fn runner_auth(s: &Shared, h: &HeaderMap) -> Result<i64, Response> {
    let (uuid, token) = runner_credentials(h);
    let mut m = lock(&s.model);
    let id = m.runner_by_auth(&uuid, &token).ok_or_else(unauthenticated)?;
    m.touch(id);
    Ok(id)
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
}

async fn register(State(s): State<Arc<Shared>>, body: axum::body::Bytes) -> Response {
    let Ok(b) = serde_json::from_slice::<RegisterBody>(&body) else {
        return connect_error(StatusCode::BAD_REQUEST, "invalid_argument", "bad body");
    };
    let reg = lock(&s.model).register(&b.token, &b.name, b.labels, b.ephemeral);
    match reg {
        Some(r) => axum::Json(json!({"runner": {
            "id": r.id, "uuid": r.uuid, "token": r.token, "name": r.name,
            "labels": r.labels, "ephemeral": r.ephemeral,
        }}))
        .into_response(),
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
}

async fn declare(State(s): State<Arc<Shared>>, h: HeaderMap, body: axum::body::Bytes) -> Response {
    let id = match runner_auth(&s, &h) {
        Ok(id) => id,
        Err(e) => return e,
    };
    let labels = serde_json::from_slice::<DeclareBody>(&body)
        .map(|b| b.labels)
        .unwrap_or_default();
    let mut m = lock(&s.model);
    match m.runners.get_mut(&id) {
        Some(r) => {
            if !labels.is_empty() {
                r.labels = labels;
            }
            axum::Json(json!({"runner": {"id": r.id, "name": r.name, "labels": r.labels}})).into_response()
        }
        None => connect_error(StatusCode::NOT_FOUND, "not_found", "runner not found"),
    }
}

async fn fetch_task(State(s): State<Arc<Shared>>, h: HeaderMap) -> Response {
    let id = match runner_auth(&s, &h) {
        Ok(id) => id,
        Err(e) => return e,
    };
    let (fetch, change) = lock(&s.model).fetch(id);
    s.announce(change);
    match fetch {
        Fetch::Task(job_id) => {
            let labels = lock(&s.model)
                .jobs
                .get(&job_id)
                .map(|j| j.labels.clone())
                .unwrap_or_default();
            axum::Json(json!({"task": {"id": job_id, "jobId": job_id, "labels": labels}, "tasksVersion": 1}))
                .into_response()
        }
        Fetch::Nothing => axum::Json(json!({"task": Value::Null, "tasksVersion": 1})).into_response(),
        Fetch::Gone => connect_error(
            StatusCode::NOT_FOUND,
            "not_found",
            "ephemeral runner already ran its task and was removed",
        ),
    }
}

#[derive(Deserialize)]
struct TaskState {
    id: i64,
    #[serde(default)]
    result: String,
}

#[derive(Deserialize)]
struct UpdateBody {
    state: TaskState,
}

async fn update_task(State(s): State<Arc<Shared>>, h: HeaderMap, body: axum::body::Bytes) -> Response {
    let id = match runner_auth(&s, &h) {
        Ok(id) => id,
        Err(e) => return e,
    };
    let Ok(b) = serde_json::from_slice::<UpdateBody>(&body) else {
        return connect_error(StatusCode::BAD_REQUEST, "invalid_argument", "bad body");
    };
    let result = Conclusion::from_rpc(&b.state.result);
    let (cancelled, change) = lock(&s.model).update(id, b.state.id, result);
    s.announce(change);
    let echo = if cancelled {
        "RESULT_CANCELLED"
    } else if result.is_some() {
        b.state.result.as_str()
    } else {
        "RESULT_UNSPECIFIED"
    };
    axum::Json(json!({"state": {"id": b.state.id, "result": echo}})).into_response()
}

/// Adds the runner routes.
pub(crate) fn routes(r: Router<Arc<Shared>>) -> Router<Arc<Shared>> {
    r.route(&format!("{BASE}/Register"), post(register))
        .route(&format!("{BASE}/Declare"), post(declare))
        .route(&format!("{BASE}/FetchTask"), post(fetch_task))
        .route(&format!("{BASE}/UpdateTask"), post(update_task))
}
