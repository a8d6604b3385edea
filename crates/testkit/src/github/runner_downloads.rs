//! A fake of GitHub's runner downloads, the REST listing that tells which runner release GitHub
//! serves now, which the `scaleset` emulator does not serve. Everything else can be forwarded
//! to an emulator ([`RunnerDownloadsFake::in_front_of`]), so that one config URL on this fake
//! reaches both: the token chain goes through it, and the Actions service URL the emulator
//! hands out points at the emulator itself.
//!
//! What it copies of GitHub (REST docs, "REST API endpoints for self-hosted runners", sections
//! "List runner applications for a repository / an organization / an enterprise",
//! <https://docs.github.com/en/rest/actions/self-hosted-runners>):
//!
//! - `GET /repos/{owner}/{repo}/actions/runners/downloads`,
//!   `GET /orgs/{org}/actions/runners/downloads` and
//!   `GET /enterprises/{enterprise}/actions/runners/downloads` answer 200 with a JSON array of
//!   `{os, architecture, download_url, filename, sha256_checksum}` (`temp_download_token` is
//!   optional and left out), one per platform. The filename carries the release, e.g.
//!   `actions-runner-linux-x64-2.331.0.tar.gz`. Served under `/api/v3`, GHES's REST base.
//! - A token it does not know gets 401 `Bad credentials`.
//!
//! Fault injection and the request log are the forge fakes' ([`crate::forge_common::faults`]).

use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use axum::routing::get;
use serde_json::{Value, json};

use super::rest_error::rest_error;
use crate::forge_common::faults::{Fault, FaultTable, LoggedRequest, middleware};
use crate::forge_common::forward::Upstream;
use crate::forge_common::http::{Served, json_response, lock, token_of};

/// The release the fake serves until told otherwise: a current one.
pub const DEFAULT_SERVED: &str = "2.331.0";
/// The path every downloads route ends with.
pub const DOWNLOADS_PATH: &str = "/actions/runners/downloads";
/// `documentation_url` of the fake's error bodies.
const DOCS: &str = "https://docs.github.com/rest/actions/self-hosted-runners";
/// Platforms GitHub lists, as `(os, architecture, archive extension)`.
const PLATFORMS: [(&str, &str, &str); 7] = [
    ("osx", "x64", "tar.gz"),
    ("osx", "arm64", "tar.gz"),
    ("linux", "x64", "tar.gz"),
    ("linux", "arm", "tar.gz"),
    ("linux", "arm64", "tar.gz"),
    ("win", "x64", "zip"),
    ("win", "arm64", "zip"),
];

#[derive(Debug)]
struct Model {
    /// The release the listing names.
    served: String,
    /// Answer the downloads routes with this status instead.
    failing: Option<StatusCode>,
    /// Tokens accepted: the one the fake was started with, and the installation tokens the
    /// upstream handed out through it.
    tokens: Vec<String>,
}

struct Shared {
    model: Mutex<Model>,
    faults: Arc<FaultTable>,
    /// Where requests for other routes go.
    upstream: Option<Upstream>,
}

/// A running fake; stops when the last clone is dropped.
#[derive(Clone)]
pub struct RunnerDownloadsFake {
    served: Served<Shared>,
}

impl RunnerDownloadsFake {
    /// Starts the fake alone on a free loopback port; it accepts `token`. Other routes are 404.
    pub async fn start(token: &str) -> std::io::Result<RunnerDownloadsFake> {
        RunnerDownloadsFake::serve(token, None).await
    }

    /// Starts the fake in front of `upstream` (the emulator's `uri()`): routes other than the
    /// downloads are forwarded there. `token` is the PAT the emulator takes.
    pub async fn in_front_of(upstream: &str, token: &str) -> std::io::Result<RunnerDownloadsFake> {
        RunnerDownloadsFake::serve(token, Some(Upstream::new(upstream)?)).await
    }

    async fn serve(token: &str, upstream: Option<Upstream>) -> std::io::Result<RunnerDownloadsFake> {
        let shared = |_: &str| Shared {
            model: Mutex::new(Model {
                served: DEFAULT_SERVED.to_owned(),
                failing: None,
                tokens: vec![token.to_owned()],
            }),
            faults: Arc::default(),
            upstream,
        };
        let served = Served::start(shared, router).await?;
        Ok(RunnerDownloadsFake { served })
    }

    fn model(&self) -> MutexGuard<'_, Model> {
        lock(&self.served.state().model)
    }

    /// `http://127.0.0.1:PORT`; a config URL `{url}/{org}` has its REST API here.
    pub fn url(&self) -> &str {
        self.served.url()
    }

    /// The emulator's organization config URL, on this fake.
    pub fn config_url(&self) -> String {
        format!("{}/{}", self.url(), scaleset::testing::ORG)
    }

    /// Makes the listing name release `version` (`2.332.0`) from now on.
    pub fn set_served(&self, version: &str) {
        self.model().served = version.to_owned();
    }

    /// Answers the downloads routes with `status` (with GitHub's error body) from now on;
    /// `None` serves them again.
    pub fn fail_with(&self, status: Option<u16>) {
        self.model().failing = status.and_then(|s| StatusCode::from_u16(s).ok());
    }

    /// Adds a fault rule (e.g. [`Fault::garbage`] on [`DOWNLOADS_PATH`]).
    pub fn push_fault(&self, fault: Fault) {
        self.served.state().faults.push(fault);
    }

    /// Requests received so far, forwarded ones included.
    pub fn requests(&self) -> Vec<LoggedRequest> {
        self.served.state().faults.requests()
    }

    /// How many requests the downloads routes received, failed and faulted ones included.
    pub fn downloads_requests(&self) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.path.ends_with(DOWNLOADS_PATH))
            .count()
    }
}

/// The listing for release `version`, one entry per platform, as GitHub shapes it.
pub fn downloads_json(version: &str) -> Value {
    let entries: Vec<Value> = PLATFORMS
        .iter()
        .map(|(os, arch, ext)| {
            let filename = format!("actions-runner-{os}-{arch}-{version}.{ext}");
            json!({
                "os": os,
                "architecture": arch,
                "download_url": format!(
                    "https://github.com/actions/runner/releases/download/v{version}/{filename}"
                ),
                "filename": filename,
                "sha256_checksum": "0".repeat(64),
            })
        })
        .collect();
    Value::Array(entries)
}

/// GitHub's error body.
fn error(status: StatusCode, message: &str) -> Response {
    rest_error(DOCS, status, message)
}

async fn downloads(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let m = lock(&shared.model);
    if !token_of(&headers).is_some_and(|t| m.tokens.contains(&t)) {
        return error(StatusCode::UNAUTHORIZED, "Bad credentials");
    }
    if let Some(status) = m.failing {
        return error(status, "Server Error");
    }
    json_response(StatusCode::OK, downloads_json(&m.served))
}

/// Sends the request on to the upstream and its answer back. The installation tokens the
/// upstream mints are learned: the downloads routes take them as GitHub would.
async fn forward(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let Some(upstream) = &shared.upstream else {
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    let mints = req.uri().path().ends_with("/access_tokens");
    let reply = match upstream.send(req).await {
        Ok(reply) => reply,
        Err(e) => return error(e.status(), &e.to_string()),
    };
    if mints && reply.status.is_success() {
        let minted = serde_json::from_slice::<Value>(&reply.body)
            .ok()
            .and_then(|v| v.get("token")?.as_str().map(str::to_owned));
        if let Some(token) = minted {
            lock(&shared.model).tokens.push(token);
        }
    }
    reply.into_response(|name| name == header::CONTENT_TYPE)
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(
            "/api/v3/repos/{owner}/{repo}/actions/runners/downloads",
            get(downloads),
        )
        .route("/api/v3/orgs/{org}/actions/runners/downloads", get(downloads))
        .route(
            "/api/v3/enterprises/{enterprise}/actions/runners/downloads",
            get(downloads),
        )
        .fallback(forward)
        .layer(axum::middleware::from_fn_with_state(
            shared.faults.clone(),
            middleware,
        ))
        .with_state(shared)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get_json(http: &reqwest::Client, url: &str, token: &str) -> (u16, Value) {
        let r = http.get(url).bearer_auth(token).send().await.expect("sent");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    #[tokio::test]
    async fn serves_every_scope_the_set_release_and_the_set_failure() {
        let fake = RunnerDownloadsFake::start("pat").await.expect("fake starts");
        let http = reqwest::Client::new();
        let base = format!("{}/api/v3", fake.url());
        for scope in ["repos/octo/hello", "orgs/octo", "enterprises/acme"] {
            let (status, body) = get_json(&http, &format!("{base}/{scope}{DOWNLOADS_PATH}"), "pat").await;
            assert_eq!(status, 200, "{scope}");
            let linux = body
                .as_array()
                .and_then(|a| {
                    a.iter()
                        .find(|e| e["os"] == "linux" && e["architecture"] == "x64")
                })
                .expect("linux x64 entry");
            assert_eq!(linux["filename"], "actions-runner-linux-x64-2.331.0.tar.gz");
        }
        fake.set_served("2.332.0");
        let orgs = format!("{base}/orgs/octo{DOWNLOADS_PATH}");
        let (_, body) = get_json(&http, &orgs, "pat").await;
        assert!(body.to_string().contains("actions-runner-win-x64-2.332.0.zip"));
        assert_eq!(get_json(&http, &orgs, "nope").await.0, 401);
        fake.fail_with(Some(500));
        assert_eq!(get_json(&http, &orgs, "pat").await.0, 500);
        fake.fail_with(None);
        assert_eq!(get_json(&http, &orgs, "pat").await.0, 200);
        assert_eq!(fake.downloads_requests(), 7);
        let (status, _) = get_json(&http, &format!("{base}/orgs/octo/actions/runners"), "pat").await;
        assert_eq!(status, 404, "nothing upstream");
    }

    /// A JWT of the shape the emulator checks (RS256 header, `exp` ahead); it checks no signature.
    fn app_jwt() -> String {
        use base64::Engine;
        let enc = |v: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        let exp = jiff::Timestamp::now().as_second() + 600;
        format!(
            "{}.{}.sig",
            enc(json!({"alg": "RS256", "typ": "JWT"})),
            enc(json!({"iss": "1", "exp": exp}))
        )
    }

    #[tokio::test]
    async fn forwards_the_rest_upstream_and_learns_minted_tokens() {
        let emu = scaleset::testing::Emulator::builder()
            .github_app(4242)
            .start()
            .await;
        let fake = RunnerDownloadsFake::in_front_of(&emu.uri(), scaleset::testing::DEFAULT_PAT)
            .await
            .expect("fake starts");
        let http = reqwest::Client::new();
        let registration = http
            .post(format!(
                "{}/api/v3/orgs/{}/actions/runners/registration-token",
                fake.url(),
                scaleset::testing::ORG
            ))
            .bearer_auth(scaleset::testing::DEFAULT_PAT)
            .header("content-length", "0")
            .send()
            .await
            .expect("sent");
        assert_eq!(registration.status(), 201, "answered by the emulator");
        let minted: Value = http
            .post(format!(
                "{}/api/v3/app/installations/4242/access_tokens",
                fake.url()
            ))
            .bearer_auth(app_jwt())
            .header("content-length", "0")
            .send()
            .await
            .expect("sent")
            .json()
            .await
            .expect("json");
        let token = minted["token"].as_str().expect("a token");
        let orgs = format!("{}/api/v3/orgs/org{DOWNLOADS_PATH}", fake.url());
        assert_eq!(get_json(&http, &orgs, token).await.0, 200);
    }
}
