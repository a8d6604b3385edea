//! A front for the `scaleset` emulator adding what it lacks for listener tests: the
//! `acquirablejobs` listing, answered from the emulator's state, and message sessions that stay
//! open but stop delivering (the failure ARC users cure by restarting the listener,
//! actions-runner-controller #4027, #4423, #4470). Every other request is forwarded to the
//! emulator, and the URLs its replies hand out (the Actions service URL of the token chain, a
//! session's queue URL) are rewritten to point here, so the whole conversation passes through.
//!
//! The listing copies the shape ARC's former client read (`github/actions/client.go`,
//! `GetAcquirableJobs`: `GET {actions}/_apis/runtime/runnerscalesets/{id}/acquirablejobs`, 204
//! for none, else 200 with an `AcquirableJobList` of `github/actions/types.go`:
//! `{count, value:[{acquireJobUrl, messageType, runnerRequestId, repositoryName, ownerName,
//! jobWorkflowRef, eventName, requestLabels}]}`; both removed with that client in
//! actions-runner-controller `dc7c858e`). It lists the emulator's jobs of the scale set still
//! `Available`, with the fields the emulator's state exposes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::get;
use scaleset::ScaleSetId;
use scaleset::testing::{Emulator, JobState};
use serde_json::{Value, json};
use tokio_util::sync::DropGuard;

use crate::forge_common::http::{json_response, serve_until_dropped};

/// How long a silenced long poll is held before its empty (202) answer, like a short emulator
/// hold: the listener polls at a test's pace, not in a busy loop.
pub const SILENT_HOLD: Duration = Duration::from_millis(100);
/// Largest request body forwarded (the listener's bodies are small JSON).
const MAX_FORWARDED_BODY: usize = 1024 * 1024;

struct Shared {
    emulator: Arc<Emulator>,
    /// The emulator's base URL (`http://host:port`, no trailing `/`).
    upstream: String,
    /// This front's base URL, likewise.
    url: String,
    http: reqwest::Client,
    delivering: AtomicBool,
    listings: AtomicUsize,
    silenced_polls: AtomicUsize,
}

/// A running front; stops when the last clone is dropped.
#[derive(Clone)]
pub struct ActionsFront {
    shared: Arc<Shared>,
    _stop: Arc<DropGuard>,
}

impl ActionsFront {
    /// Starts a front for `emulator` on a free loopback port; sessions deliver until told not to.
    pub async fn in_front_of(emulator: Arc<Emulator>) -> std::io::Result<ActionsFront> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let http = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(std::io::Error::other)?;
        let shared = Arc::new(Shared {
            upstream: emulator.uri(),
            emulator,
            url,
            http,
            delivering: AtomicBool::new(true),
            listings: AtomicUsize::new(0),
            silenced_polls: AtomicUsize::new(0),
        });
        let stop = serve_until_dropped(listener, router(shared.clone()));
        Ok(ActionsFront {
            shared,
            _stop: Arc::new(stop),
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.shared.url
    }

    /// The emulator's organization config URL, on this front.
    pub fn config_url(&self) -> String {
        format!("{}/{}", self.shared.url, scaleset::testing::ORG)
    }

    /// From now on every session's long polls (those of sessions opened later too) are held
    /// and answered empty, their messages left with the emulator; `true` delivers again. A
    /// poll already forwarded is not recalled: see [`ActionsFront::silenced_polls`].
    pub fn set_delivering(&self, delivering: bool) {
        self.shared.delivering.store(delivering, Ordering::SeqCst);
    }

    /// Long polls answered empty because sessions do not deliver.
    pub fn silenced_polls(&self) -> usize {
        self.shared.silenced_polls.load(Ordering::SeqCst)
    }

    /// `acquirablejobs` requests received.
    pub fn listings(&self) -> usize {
        self.shared.listings.load(Ordering::SeqCst)
    }
}

/// `502` with a message, for an emulator that did not answer.
fn bad_gateway(message: &str) -> Response {
    json_response(StatusCode::BAD_GATEWAY, json!({ "message": message }))
}

/// The scale set's jobs still available, as an `AcquirableJobList`. The token is checked by
/// asking the emulator for the scale set with it, so a bad admin token (401) or a deleted scale
/// set (404) answers as the service would.
async fn acquirable(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<i64>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    shared.listings.fetch_add(1, Ordering::SeqCst);
    // With the listing's query: the emulator refuses a call without its `api-version`.
    let query = query.map(|q| format!("?{q}")).unwrap_or_default();
    let mut check = shared.http.get(format!(
        "{}/tenant/_apis/runtime/runnerscalesets/{id}{query}",
        shared.upstream
    ));
    if let Some(auth) = headers.get(axum::http::header::AUTHORIZATION) {
        check = check.header(reqwest::header::AUTHORIZATION, auth);
    }
    let Ok(reply) = check.send().await else {
        return bad_gateway("emulator unreachable");
    };
    if !reply.status().is_success() {
        let status = reply.status();
        let body = reply.bytes().await.unwrap_or_default();
        let mut resp = Response::new(Body::from(body));
        *resp.status_mut() = status;
        return resp;
    }
    let state = shared.emulator.state();
    let jobs: Vec<Value> = state
        .jobs_in(ScaleSetId(id), JobState::Available)
        .map(|j| {
            json!({
                "acquireJobUrl": format!(
                    "{}/tenant/_apis/runtime/runnerscalesets/{id}/acquirejobs",
                    shared.url
                ),
                "messageType": "JobAvailable",
                "runnerRequestId": j.id.get(),
                "requestLabels": j.labels,
            })
        })
        .collect();
    if jobs.is_empty() {
        return Response::builder()
            .status(StatusCode::NO_CONTENT)
            .body(Body::empty())
            .unwrap_or_default();
    }
    json_response(StatusCode::OK, json!({ "count": jobs.len(), "value": jobs }))
}

/// A long poll: forwarded while sessions deliver, else held and answered empty.
async fn poll(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    if shared.delivering.load(Ordering::SeqCst) {
        return forward(State(shared), req).await;
    }
    tokio::time::sleep(SILENT_HOLD).await;
    shared.silenced_polls.fetch_add(1, Ordering::SeqCst);
    Response::builder()
        .status(StatusCode::ACCEPTED)
        .body(Body::empty())
        .unwrap_or_default()
}

/// Sends the request on to the emulator and its answer back, with the emulator's own URLs in
/// the answer pointing here instead.
async fn forward(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(body) = axum::body::to_bytes(body, MAX_FORWARDED_BODY).await else {
        return json_response(
            StatusCode::PAYLOAD_TOO_LARGE,
            json!({ "message": "request body too large" }),
        );
    };
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut out = shared
        .http
        .request(parts.method.clone(), format!("{}{target}", shared.upstream))
        .body(body);
    for (name, value) in &parts.headers {
        if name != axum::http::header::HOST && name != axum::http::header::CONTENT_LENGTH {
            out = out.header(name, value);
        }
    }
    let Ok(reply) = out.send().await else {
        return bad_gateway("emulator unreachable");
    };
    let status = reply.status();
    let content_type = reply.headers().get(reqwest::header::CONTENT_TYPE).cloned();
    let retry_after = reply.headers().get(reqwest::header::RETRY_AFTER).cloned();
    let Ok(bytes) = reply.bytes().await else {
        return bad_gateway("emulator body unreadable");
    };
    // Only the emulator's own base URL followed by a path is replaced: no other text of a reply
    // has that shape.
    let from = format!("{}/", shared.upstream);
    let body = match std::str::from_utf8(&bytes) {
        Ok(text) if text.contains(&from) => Body::from(text.replace(&from, &format!("{}/", shared.url))),
        _ => Body::from(bytes),
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    if let Some(ct) = content_type {
        resp.headers_mut().insert(axum::http::header::CONTENT_TYPE, ct);
    }
    if let Some(ra) = retry_after {
        resp.headers_mut().insert(axum::http::header::RETRY_AFTER, ra);
    }
    resp
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(
            "/tenant/_apis/runtime/runnerscalesets/{id}/acquirablejobs",
            get(acquirable),
        )
        .route("/queue/{id}/{session}", get(poll))
        .fallback(forward)
        .with_state(shared)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The listing names the available jobs only, takes the admin token the emulator handed
    /// out through the front, and the token chain's Actions URL points at the front.
    #[tokio::test]
    async fn lists_available_jobs_with_the_admin_token_and_rewrites_urls() {
        let emu = Arc::new(Emulator::start().await);
        let front = ActionsFront::in_front_of(emu.clone())
            .await
            .expect("front starts");
        let set = emu
            .client()
            .create_runner_scale_set(&scaleset::RunnerScaleSetSpec::new("front"))
            .await
            .expect("scale set");
        let http = reqwest::Client::new();
        let registration_token: Value = http
            .post(format!(
                "{}/api/v3/orgs/{}/actions/runners/registration-token",
                front.url(),
                scaleset::testing::ORG
            ))
            .bearer_auth(scaleset::testing::DEFAULT_PAT)
            .header("content-length", "0")
            .send()
            .await
            .expect("sent")
            .json()
            .await
            .expect("json");
        let registration_token = registration_token["token"]
            .as_str()
            .expect("a registration token");
        let registration: Value = http
            .post(format!("{}/api/v3/actions/runner-registration", front.url()))
            .header("authorization", format!("RemoteAuth {registration_token}"))
            .json(&json!({"url": front.config_url(), "runner_event": "register"}))
            .send()
            .await
            .expect("sent")
            .json()
            .await
            .expect("json");
        let actions = registration["url"].as_str().expect("an Actions URL");
        assert!(actions.starts_with(front.url()), "{actions}");
        let admin = registration["token"].as_str().expect("an admin token");
        let list = |token: String| {
            let http = http.clone();
            let url = format!(
                "{}/tenant/_apis/runtime/runnerscalesets/{}/acquirablejobs?api-version=6.0-preview",
                front.url(),
                set.id.get()
            );
            async move { http.get(url).bearer_auth(token).send().await.expect("sent") }
        };
        assert_eq!(list(admin.to_owned()).await.status(), 204, "none yet");
        let waiting = emu.queue_job(set.id, Vec::<String>::new());
        let body: Value = list(admin.to_owned()).await.json().await.expect("json");
        assert_eq!(body["count"], 1);
        assert_eq!(body["value"][0]["runnerRequestId"], waiting.get());
        assert_eq!(list("wrong".into()).await.status(), 401);
        assert_eq!(front.listings(), 3);
    }
}
