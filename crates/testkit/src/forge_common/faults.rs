//! Fault injection (status codes, redirects, latency, garbage, huge bodies and large valid
//! JSON) and the request log, as one axum middleware that both forge fakes mount in front of
//! all their routes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::http::lock;

/// One fault rule: requests whose path contains `path_contains` (and whose method matches,
/// if given) are delayed by `latency` and, if `status` or `garbage` is set, answered by the
/// fault instead of the fake.
#[derive(Clone, Debug, Default)]
pub struct Fault {
    /// Substring of the request path.
    pub path_contains: String,
    /// HTTP method (`GET`, …); any if `None`.
    pub method: Option<String>,
    /// Status to answer with; pass through (after the latency) if `None` and not `garbage`.
    pub status: Option<u16>,
    /// `Retry-After` value sent with the status.
    pub retry_after: Option<String>,
    /// Delay before answering (long enough, it is a client timeout).
    pub latency: Duration,
    /// How many requests it affects; unlimited if `None`.
    pub times: Option<u32>,
    /// Answer with a body that is not JSON (status `status`, or 200).
    pub garbage: bool,
    /// Answer 200 with a body of this many bytes, streamed without `Content-Length` so the
    /// client cannot refuse it up front (a hostile server pointed at by a group's URL).
    pub huge_body: Option<usize>,
    /// `Location` header sent with the status (a redirect).
    pub location: Option<String>,
    /// Only requests whose query holds this exact `key=value` pair (one page of a listing).
    pub query_pair: Option<String>,
    /// Answer 200 with this JSON, made as it is sent (a hostile server's valid but huge page).
    pub repeated: Option<Repeated>,
}

/// A JSON body `head`, then `unit` `count` times, then `tail`: the caller makes the three
/// parts valid JSON together, e.g. `[` + `"",` × n + `""]` for a list of n + 1 empty strings.
#[derive(Clone, Debug, Default)]
pub struct Repeated {
    /// What comes first.
    pub head: String,
    /// What is repeated.
    pub unit: String,
    /// How many times.
    pub count: usize,
    /// What comes last.
    pub tail: String,
}

impl Repeated {
    /// The body's length in bytes.
    pub fn len(&self) -> usize {
        self.head.len() + self.unit.len() * self.count + self.tail.len()
    }

    /// Whether the body is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Fault {
    /// Answers `status` to requests whose path contains `path`.
    pub fn status(path: &str, status: u16) -> Fault {
        Fault {
            path_contains: path.to_string(),
            status: Some(status),
            ..Fault::default()
        }
    }

    /// Delays requests whose path contains `path`.
    pub fn latency(path: &str, latency: Duration) -> Fault {
        Fault {
            path_contains: path.to_string(),
            latency,
            ..Fault::default()
        }
    }

    /// Answers `200` with a truncated, non-JSON body to requests whose path contains `path`.
    pub fn garbage(path: &str) -> Fault {
        Fault {
            path_contains: path.to_string(),
            garbage: true,
            ..Fault::default()
        }
    }

    /// Answers `200` with `bytes` of JSON whitespace, chunked, to requests whose path contains
    /// `path`. The body is generated as it is sent, so the fake itself stays small.
    pub fn huge_body(path: &str, bytes: usize) -> Fault {
        Fault {
            path_contains: path.to_string(),
            huge_body: Some(bytes),
            ..Fault::default()
        }
    }

    /// Answers `status` (a 3xx) with `Location: location` to requests whose path contains
    /// `path`: a forge URL whose server sends its clients elsewhere.
    pub fn redirect(path: &str, status: u16, location: &str) -> Fault {
        Fault {
            path_contains: path.to_string(),
            status: Some(status),
            location: Some(location.to_string()),
            ..Fault::default()
        }
    }

    /// Answers `200` with `body`, made chunk by chunk as it is sent, to requests whose path
    /// contains `path`: a page as large as a client accepts, without the fake holding it.
    pub fn repeated(path: &str, body: Repeated) -> Fault {
        Fault {
            path_contains: path.to_string(),
            repeated: Some(body),
            ..Fault::default()
        }
    }

    /// Limits the rule to requests whose query holds the pair `pair` (`key=value`), e.g. one
    /// page (`page=2`) of a paged listing.
    pub fn query_pair(mut self, pair: &str) -> Fault {
        self.query_pair = Some(pair.to_string());
        self
    }

    /// Limits the rule to the next `n` matching requests.
    pub fn times(mut self, n: u32) -> Fault {
        self.times = Some(n);
        self
    }

    /// Limits the rule to one HTTP method.
    pub fn method(mut self, method: &str) -> Fault {
        self.method = Some(method.to_string());
        self
    }

    /// Adds a `Retry-After` header.
    pub fn retry_after(mut self, value: &str) -> Fault {
        self.retry_after = Some(value.to_string());
        self
    }
}

/// One received request.
#[derive(Clone, Debug)]
pub struct LoggedRequest {
    /// Method.
    pub method: String,
    /// Path.
    pub path: String,
    /// Raw query string.
    pub query: String,
    /// Status sent back.
    pub status: u16,
    /// Whether an `Authorization` header was present.
    pub authorized: bool,
}

/// The fault rules and the request log of one fake.
#[derive(Debug, Default)]
pub struct FaultTable {
    faults: Mutex<Vec<Fault>>,
    log: Mutex<Vec<LoggedRequest>>,
}

impl FaultTable {
    /// Adds a rule (first matching rule wins).
    pub fn push(&self, fault: Fault) {
        lock(&self.faults).push(fault);
    }

    /// Removes every rule.
    pub fn clear(&self) {
        lock(&self.faults).clear();
    }

    /// Requests received so far.
    pub fn requests(&self) -> Vec<LoggedRequest> {
        lock(&self.log).clone()
    }

    /// Forgets the request log.
    pub fn clear_requests(&self) {
        lock(&self.log).clear();
    }

    /// The first live rule matching the request, with one use consumed.
    fn take(&self, method: &str, path: &str, query: &str) -> Option<Fault> {
        let mut faults = lock(&self.faults);
        let hit = faults.iter_mut().find(|f| {
            path.contains(&f.path_contains)
                && f.method.as_deref().is_none_or(|m| m.eq_ignore_ascii_case(method))
                && f.query_pair
                    .as_deref()
                    .is_none_or(|p| query.split('&').any(|kv| kv == p))
                && f.times != Some(0)
        })?;
        if let Some(n) = hit.times.as_mut() {
            *n -= 1;
        }
        Some(hit.clone())
    }
}

/// One chunk of a huge body: JSON whitespace, so a client that read it all fails to decode it.
static HUGE_CHUNK: [u8; 64 * 1024] = [b' '; 64 * 1024];

/// A body of `bytes` bytes made chunk by chunk as the client reads.
fn huge_body(bytes: usize) -> Body {
    let chunks = bytes.div_ceil(HUGE_CHUNK.len());
    let stream = futures::stream::iter((0..chunks).map(move |i| {
        let len = (bytes - i * HUGE_CHUNK.len()).min(HUGE_CHUNK.len());
        Ok::<_, std::convert::Infallible>(bytes::Bytes::from_static(&HUGE_CHUNK[..len]))
    }));
    Body::from_stream(stream)
}

/// Units per chunk of a [`Repeated`] body: chunks of some KiB, so the body streams in pieces
/// and the fake never holds more than one chunk of it.
const REPEATS_PER_CHUNK: usize = 4096;

/// A [`Repeated`] body made chunk by chunk as the client reads (chunked, no length).
fn repeated_body(r: &Repeated) -> Body {
    let chunk = bytes::Bytes::from(r.unit.repeat(REPEATS_PER_CHUNK.min(r.count)));
    let full = r.count / REPEATS_PER_CHUNK;
    let rest = bytes::Bytes::from(r.unit.repeat(r.count % REPEATS_PER_CHUNK));
    let parts = std::iter::once(bytes::Bytes::from(r.head.clone()))
        .chain(std::iter::repeat_n(chunk, full))
        .chain([rest, bytes::Bytes::from(r.tail.clone())]);
    Body::from_stream(futures::stream::iter(
        parts.map(Ok::<_, std::convert::Infallible>),
    ))
}

fn injected(f: &Fault) -> Option<Response> {
    let status = f.status.and_then(|s| StatusCode::from_u16(s).ok());
    if let Some(body) = &f.repeated {
        let mut r = Response::new(repeated_body(body));
        r.headers_mut()
            .insert("content-type", HeaderValue::from_static("application/json"));
        return Some(r);
    }
    if let Some(bytes) = f.huge_body {
        let mut r = Response::new(huge_body(bytes));
        r.headers_mut()
            .insert("content-type", HeaderValue::from_static("application/json"));
        return Some(r);
    }
    let mut r = if f.garbage {
        // Cut-off JSON with a JSON content type: what a proxy dropping the connection mid-body
        // or an HTML error page behind a misconfigured ingress looks like to a client.
        let mut r = Response::new(Body::from("{\"message\": \"<html><body>502 Bad Gat"));
        *r.status_mut() = status.unwrap_or(StatusCode::OK);
        r.headers_mut()
            .insert("content-type", HeaderValue::from_static("application/json"));
        r
    } else {
        (
            status?,
            axum::Json(serde_json::json!({"message": "injected fault", "url": ""})),
        )
            .into_response()
    };
    if let Some(v) = f
        .retry_after
        .as_deref()
        .and_then(|v| HeaderValue::from_str(v).ok())
    {
        r.headers_mut().insert("retry-after", v);
    }
    if let Some(v) = f.location.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
        r.headers_mut().insert("location", v);
    }
    Some(r)
}

/// Applies the first matching fault and records the request.
pub async fn middleware(State(table): State<Arc<FaultTable>>, req: Request, next: Next) -> Response {
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    let authorized = req.headers().contains_key("authorization");
    let fault = table.take(&method, &path, &query);
    let resp = match fault {
        Some(f) => {
            if !f.latency.is_zero() {
                tokio::time::sleep(f.latency).await;
            }
            match injected(&f) {
                Some(r) => r,
                None => next.run(req).await,
            }
        }
        None => next.run(req).await,
    };
    lock(&table.log).push(LoggedRequest {
        method,
        path,
        query,
        status: resp.status().as_u16(),
        authorized,
    });
    resp
}
