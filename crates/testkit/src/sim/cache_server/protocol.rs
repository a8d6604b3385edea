//! The fake Actions cache server: the part of Gitea Runner's cache API (v1, REST under
//! `/_apis/artifactcache`) one `actions/cache` step uses, and the control plane a runner with
//! `cache.external_server` calls around each job.
//!
//! Read from gitea-runner v1.0.8 `act/artifactcache/handler.go` (Sirherobrine23/gitea-runner,
//! mirror of gitea.com/gitea/runner; act_runner's older server is nektos/act's
//! `pkg/artifactcache/handler.go`, same routes):
//! - `GET /cache?keys=a,b&version=v` (`find`): per key, an exact match, else the newest complete
//!   entry whose key starts with it, of the caller's repository and version; 204 when none,
//!   else 200 `{result: "hit", archiveLocation, cacheKey}`, where `archiveLocation` is a
//!   signed URL built from `--host` and the port (`ExternalURL`, `signedArtifactURL`);
//! - `POST /caches` `{key, version, cacheSize}` (`reserve`) → `{cacheId}`;
//! - `PATCH /caches/{id}` with `Content-Range: bytes a-b/*` (`upload`): 400 when not reserved
//!   or already complete, 403 for another repository's entry;
//! - `POST /caches/{id}` (`commit`): the entry becomes complete and findable;
//! - `GET /artifacts/{id}?exp&sig` (`get`, `signedURLAuth`): the archive;
//! - the job routes need `Authorization: Bearer <runtime token>` of a registered job
//!   (`bearerAuth`: 401 otherwise) and see only that job's repository;
//! - `POST /_internal/register` `{token, repo}` and `/_internal/revoke` `{token}` need
//!   `Authorization: Bearer <cache.external_secret>` (`internalAuth`: 404 when the server has
//!   no secret, 401 for a wrong one); registrations are counted and live in memory.
//!
//! Simplified: the signature is a per-server random token rather than an HMAC with expiry, and
//! a server without a secret (legacy act_runner, before v0.6.0) answers every job request as
//! one anonymous repository.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The cache API's path prefix (`apiPath`).
pub const API_PATH: &str = "/_apis/artifactcache";
/// The control plane's path prefix (`internalPath`).
pub const INTERNAL_PATH: &str = "/_internal";

/// One cache entry.
#[derive(Clone, Debug)]
struct Entry {
    repo: String,
    key: String,
    version: String,
    data: Vec<u8>,
    complete: bool,
    /// Order of creation (`CreatedAt`; the newest match wins).
    created: u64,
}

/// What the volume holds: survives a restart of the server, like the claim it stands for.
#[derive(Debug, Default)]
pub struct Volume {
    entries: BTreeMap<u64, Entry>,
    next_id: u64,
}

/// Counters of one server, for tests and the sandbox.
#[derive(Debug, Default)]
pub struct ServerCounters {
    hits: AtomicU64,
    misses: AtomicU64,
    commits: AtomicU64,
    unauthorized: AtomicU64,
}

/// A snapshot of [`ServerCounters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheServerStats {
    /// Lookups answered with an entry.
    pub hits: u64,
    /// Lookups answered 204.
    pub misses: u64,
    /// Entries committed.
    pub commits: u64,
    /// Requests refused for a missing or unknown token or a wrong secret.
    pub unauthorized: u64,
}

impl ServerCounters {
    /// The counts so far.
    pub fn snapshot(&self) -> CacheServerStats {
        CacheServerStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            commits: self.commits.load(Ordering::Relaxed),
            unauthorized: self.unauthorized.load(Ordering::Relaxed),
        }
    }
}

/// What a server is started with.
#[derive(Clone, Debug)]
pub struct ServerSettings {
    /// `--host`: the name its download URLs carry.
    pub host: String,
    /// `--port`: the port its download URLs carry.
    pub port: i32,
    /// `cache.external_secret` of its config; `None` serves without authentication.
    pub secret: Option<String>,
}

struct Server {
    settings: ServerSettings,
    volume: Arc<Mutex<Volume>>,
    /// Registered runtime token → (repository, registrations).
    creds: Mutex<BTreeMap<String, (String, u32)>>,
    signature: String,
    counters: Arc<ServerCounters>,
}

type Shared = Arc<Server>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn error(code: StatusCode, message: &str) -> Response {
    (code, axum::Json(json!({"error": message}))).into_response()
}

/// Why a request was refused before its handler ran.
#[derive(Debug)]
enum Refused {
    /// A missing or unknown token, or a wrong secret (401).
    Unauthorized(&'static str),
    /// The control plane of a server without a secret (404: the route "does not exist").
    NoControlPlane,
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        match self {
            Refused::Unauthorized(why) => error(StatusCode::UNAUTHORIZED, why),
            Refused::NoControlPlane => StatusCode::NOT_FOUND.into_response(),
        }
    }
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let auth = headers.get("authorization")?.to_str().ok()?;
    let (scheme, token) = auth.split_at_checked(7)?;
    (scheme.eq_ignore_ascii_case("bearer ") && !token.is_empty()).then_some(token)
}

impl Server {
    /// The repository the caller's runtime token was registered for (`bearerAuth`).
    fn repo_of(&self, headers: &HeaderMap) -> Result<String, Refused> {
        if self.settings.secret.is_none() {
            return Ok(String::new());
        }
        let found = bearer(headers).and_then(|t| lock(&self.creds).get(t).map(|(repo, _)| repo.clone()));
        found.ok_or_else(|| {
            self.counters.unauthorized.fetch_add(1, Ordering::Relaxed);
            Refused::Unauthorized("unknown bearer token")
        })
    }

    /// `internalAuth`.
    fn internal(&self, headers: &HeaderMap) -> Result<(), Refused> {
        let Some(secret) = &self.settings.secret else {
            return Err(Refused::NoControlPlane);
        };
        if bearer(headers) == Some(secret.as_str()) {
            Ok(())
        } else {
            self.counters.unauthorized.fetch_add(1, Ordering::Relaxed);
            Err(Refused::Unauthorized("internal: bad secret"))
        }
    }
}

#[derive(Deserialize)]
struct FindQuery {
    #[serde(default)]
    keys: String,
    #[serde(default)]
    version: String,
}

async fn find(State(s): State<Shared>, headers: HeaderMap, Query(q): Query<FindQuery>) -> Response {
    let repo = match s.repo_of(&headers) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let found = {
        let volume = lock(&s.volume);
        let newest = |pick: &dyn Fn(&Entry) -> bool| {
            volume
                .entries
                .iter()
                .filter(|(_, e)| e.complete && e.repo == repo && e.version == q.version && pick(e))
                .max_by_key(|(_, e)| e.created)
                .map(|(id, e)| (*id, e.key.clone()))
        };
        q.keys.split(',').find_map(|prefix| {
            newest(&|e: &Entry| e.key == prefix).or_else(|| newest(&|e: &Entry| e.key.starts_with(prefix)))
        })
    };
    match found {
        None => {
            s.counters.misses.fetch_add(1, Ordering::Relaxed);
            StatusCode::NO_CONTENT.into_response()
        }
        Some((id, key)) => {
            s.counters.hits.fetch_add(1, Ordering::Relaxed);
            let location = format!(
                "http://{}:{}{API_PATH}/artifacts/{id}?exp=0&sig={}",
                s.settings.host, s.settings.port, s.signature
            );
            axum::Json(json!({"result": "hit", "archiveLocation": location, "cacheKey": key})).into_response()
        }
    }
}

#[derive(Deserialize)]
struct ReserveBody {
    key: String,
    #[serde(default)]
    version: String,
}

async fn reserve(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let repo = match s.repo_of(&headers) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let Ok(req) = serde_json::from_slice::<ReserveBody>(&body) else {
        return error(StatusCode::BAD_REQUEST, "bad request body");
    };
    let mut volume = lock(&s.volume);
    volume.next_id += 1;
    let id = volume.next_id;
    volume.entries.insert(
        id,
        Entry {
            repo,
            key: req.key,
            version: req.version,
            data: Vec::new(),
            complete: false,
            created: id,
        },
    );
    axum::Json(json!({"cacheId": id})).into_response()
}

/// The start offset of `Content-Range: bytes a-b/*` (`parseContentRange`).
fn range_start(headers: &HeaderMap) -> Option<usize> {
    let value = headers.get("content-range")?.to_str().ok()?;
    let range = value.strip_prefix("bytes ")?;
    range.split(['-', '/']).next()?.parse().ok()
}

/// Runs `change` on reserved, incomplete entry `id` of the caller's repository.
fn with_open_entry(s: &Server, headers: &HeaderMap, id: u64, change: impl FnOnce(&mut Entry)) -> Response {
    let repo = match s.repo_of(headers) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let mut volume = lock(&s.volume);
    let Some(entry) = volume.entries.get_mut(&id) else {
        return error(StatusCode::BAD_REQUEST, "not reserved");
    };
    if entry.repo != repo {
        return error(StatusCode::FORBIDDEN, "forbidden");
    }
    if entry.complete {
        return error(StatusCode::BAD_REQUEST, "already complete");
    }
    change(entry);
    StatusCode::OK.into_response()
}

async fn upload(State(s): State<Shared>, Path(id): Path<u64>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(start) = range_start(&headers) else {
        return error(StatusCode::BAD_REQUEST, "bad Content-Range");
    };
    with_open_entry(&s, &headers, id, |entry| {
        let end = start + body.len();
        if entry.data.len() < end {
            entry.data.resize(end, 0);
        }
        entry.data[start..end].copy_from_slice(&body);
    })
}

async fn commit(State(s): State<Shared>, Path(id): Path<u64>, headers: HeaderMap) -> Response {
    let response = with_open_entry(&s, &headers, id, |entry| entry.complete = true);
    if response.status() == StatusCode::OK {
        s.counters.commits.fetch_add(1, Ordering::Relaxed);
    }
    response
}

#[derive(Deserialize)]
struct Signed {
    #[serde(default)]
    sig: String,
}

async fn artifact(State(s): State<Shared>, Path(id): Path<u64>, Query(q): Query<Signed>) -> Response {
    if q.sig != s.signature {
        s.counters.unauthorized.fetch_add(1, Ordering::Relaxed);
        return error(StatusCode::UNAUTHORIZED, "bad signature");
    }
    match lock(&s.volume).entries.get(&id) {
        Some(e) if e.complete => e.data.clone().into_response(),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

#[derive(Deserialize)]
struct TokenBody {
    token: String,
    #[serde(default)]
    repo: String,
}

async fn register(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(e) = s.internal(&headers) {
        return e.into_response();
    }
    let Ok(req) = serde_json::from_slice::<TokenBody>(&body) else {
        return error(StatusCode::BAD_REQUEST, "token is required");
    };
    // A token registered twice keeps its first repository (`RegisterJob`).
    lock(&s.creds).entry(req.token).or_insert((req.repo, 0)).1 += 1;
    StatusCode::OK.into_response()
}

async fn revoke(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(e) = s.internal(&headers) {
        return e.into_response();
    }
    let Ok(req) = serde_json::from_slice::<TokenBody>(&body) else {
        return error(StatusCode::BAD_REQUEST, "token is required");
    };
    let mut creds = lock(&s.creds);
    if let Some(entry) = creds.get_mut(&req.token) {
        entry.1 = entry.1.saturating_sub(1);
        if entry.1 == 0 {
            creds.remove(&req.token);
        }
    }
    StatusCode::OK.into_response()
}

fn router(server: Shared) -> Router {
    Router::new()
        .route(&format!("{API_PATH}/cache"), get(find))
        .route(&format!("{API_PATH}/caches"), post(reserve))
        .route(&format!("{API_PATH}/caches/{{id}}"), post(commit).patch(upload))
        .route(&format!("{API_PATH}/artifacts/{{id}}"), get(artifact))
        .route(&format!("{INTERNAL_PATH}/register"), post(register))
        .route(&format!("{INTERNAL_PATH}/revoke"), post(revoke))
        .with_state(server)
}

/// Starts a server on a free local port over `volume`; it stops when `stop` fires.
pub async fn serve(
    settings: ServerSettings,
    volume: Arc<Mutex<Volume>>,
    counters: Arc<ServerCounters>,
    stop: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let signature: u64 = rand::random();
    let server = Arc::new(Server {
        settings,
        volume,
        creds: Mutex::new(BTreeMap::new()),
        signature: format!("{signature:016x}"),
        counters,
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, router(server))
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
    });
    Ok(addr)
}
