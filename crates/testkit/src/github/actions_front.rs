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
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use axum::routing::get;
use scaleset::ScaleSetId;
use scaleset::testing::{Emulator, JobState};
use serde_json::{Value, json};

use crate::forge_common::forward::Upstream;
use crate::forge_common::http::{Served, json_response};

/// How long a silenced long poll is held before its empty (202) answer, like a short emulator
/// hold: the listener polls at a test's pace, not in a busy loop.
pub const SILENT_HOLD: Duration = Duration::from_millis(100);

struct Shared {
    emulator: Arc<Emulator>,
    upstream: Upstream,
    /// This front's base URL (`http://host:port`, no trailing `/`).
    url: String,
    delivering: AtomicBool,
    listings: AtomicUsize,
    silenced_polls: AtomicUsize,
}

/// A running front; stops when the last clone is dropped.
#[derive(Clone)]
pub struct ActionsFront {
    served: Served<Shared>,
}

impl ActionsFront {
    /// Starts a front for `emulator` on a free loopback port; sessions deliver until told not to.
    pub async fn in_front_of(emulator: Arc<Emulator>) -> std::io::Result<ActionsFront> {
        let upstream = Upstream::new(&emulator.uri())?;
        let shared = |url: &str| Shared {
            emulator,
            upstream,
            url: url.to_owned(),
            delivering: AtomicBool::new(true),
            listings: AtomicUsize::new(0),
            silenced_polls: AtomicUsize::new(0),
        };
        let served = Served::start(shared, router).await?;
        Ok(ActionsFront { served })
    }

    fn shared(&self) -> &Shared {
        self.served.state()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        self.served.url()
    }

    /// The emulator's organization config URL, on this front.
    pub fn config_url(&self) -> String {
        format!("{}/{}", self.url(), scaleset::testing::ORG)
    }

    /// From now on every session's long polls (those of sessions opened later too) are held
    /// and answered empty, their messages left with the emulator; `true` delivers again. A
    /// poll already forwarded is not recalled: see [`ActionsFront::silenced_polls`].
    pub fn set_delivering(&self, delivering: bool) {
        self.shared().delivering.store(delivering, Ordering::SeqCst);
    }

    /// Long polls answered empty because sessions do not deliver.
    pub fn silenced_polls(&self) -> usize {
        self.shared().silenced_polls.load(Ordering::SeqCst)
    }

    /// `acquirablejobs` requests received.
    pub fn listings(&self) -> usize {
        self.shared().listings.load(Ordering::SeqCst)
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
    let mut check = shared.upstream.request(
        reqwest::Method::GET,
        &format!("/tenant/_apis/runtime/runnerscalesets/{id}{query}"),
    );
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
    let mut reply = match shared.upstream.send(req).await {
        Ok(reply) => reply,
        Err(e) => return json_response(e.status(), json!({ "message": e.to_string() })),
    };
    // Only the emulator's own base URL followed by a path is replaced: no other text of a reply
    // has that shape.
    let from = format!("{}/", shared.upstream.base());
    if let Ok(text) = std::str::from_utf8(&reply.body)
        && text.contains(&from)
    {
        reply.body = Bytes::from(text.replace(&from, &format!("{}/", shared.url)));
    }
    reply.into_response(|name| name == header::CONTENT_TYPE || name == header::RETRY_AFTER)
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

    async fn json_of(req: reqwest::RequestBuilder) -> Value {
        req.send().await.expect("sent").json().await.expect("json")
    }

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
        let registration_token = json_of(
            http.post(format!(
                "{}/api/v3/orgs/{}/actions/runners/registration-token",
                front.url(),
                scaleset::testing::ORG
            ))
            .bearer_auth(scaleset::testing::DEFAULT_PAT)
            .header("content-length", "0"),
        )
        .await;
        let registration_token = registration_token["token"]
            .as_str()
            .expect("a registration token");
        let registration = json_of(
            http.post(format!("{}/api/v3/actions/runner-registration", front.url()))
                .header("authorization", format!("RemoteAuth {registration_token}"))
                .json(&json!({"url": front.config_url(), "runner_event": "register"})),
        )
        .await;
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
