//! REST helpers both forge fakes use the same way, because Forgejo inherited them from Gitea:
//! the `Authorization: token` header, `page`/`limit` paging with `Link`, path decoding, the
//! `{"message", "url"}` error body.

use std::sync::{Arc, Mutex, MutexGuard};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// Locks a mutex, recovering from poisoning (a panicking test thread must not cascade).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The API token of `Authorization: token <t>` (or `bearer`).
pub fn token_of(headers: &HeaderMap) -> Option<String> {
    let v = headers.get("authorization")?.to_str().ok()?;
    let (scheme, tok) = v.split_once(' ')?;
    matches!(scheme.to_ascii_lowercase().as_str(), "token" | "bearer").then(|| tok.trim().to_string())
}

/// The query string as decoded `(key, value)` pairs in order (form decoding, as Go's
/// `url.ParseQuery`: `+` is a space).
pub fn query_pairs(raw: &Option<String>) -> Vec<(String, String)> {
    let Some(q) = raw else { return Vec::new() };
    reqwest::Url::parse(&format!("http://x/?{q}"))
        .map(|u| {
            u.query_pairs()
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// The first value of `key`, as the forges' `ctx.FormString` reads it.
pub fn first<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Gitea/Forgejo paging: `page` 1-based, `limit` default 30, at most `max` (`MAX_RESPONSE_ITEMS`).
pub fn paging(pairs: &[(String, String)], max: usize) -> (usize, usize) {
    let num = |k: &str| first(pairs, k).and_then(|v| v.parse::<i64>().ok());
    let page = num("page").filter(|p| *p >= 1).unwrap_or(1) as usize;
    let limit = num("limit").filter(|l| *l >= 1).unwrap_or(30) as usize;
    (page, limit.min(max.max(1)))
}

/// RFC 5988 `Link` header as Gitea and Forgejo send it.
pub fn link_header(
    base: &str,
    path: &str,
    pairs: &[(String, String)],
    page: usize,
    limit: usize,
    total: usize,
) -> String {
    let last = total.div_ceil(limit).max(1);
    let url = |p: usize| {
        let mut u = format!("{base}{path}?");
        for (k, v) in pairs.iter().filter(|(k, _)| k != "page" && k != "limit") {
            u.push_str(&format!("{k}={v}&"));
        }
        format!("{u}limit={limit}&page={p}")
    };
    let mut links = Vec::new();
    if page < last {
        links.push(format!("<{}>; rel=\"next\"", url(page + 1)));
        links.push(format!("<{}>; rel=\"last\"", url(last)));
    }
    if page > 1 {
        links.push(format!("<{}>; rel=\"first\"", url(1)));
        links.push(format!("<{}>; rel=\"prev\"", url(page - 1)));
    }
    links.join(",")
}

/// Adds `X-Total-Count` and (if not empty) `Link` to a list response.
pub fn add_paging_headers(r: &mut Response, total: usize, link: &str) {
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&total.to_string()) {
        h.insert("x-total-count", v);
    }
    if let Ok(v) = HeaderValue::from_str(link)
        && !link.is_empty()
    {
        h.insert("link", v);
    }
}

/// Decodes `%XX` escapes of one path segment (invalid escapes are kept as they are).
pub fn percent_decode(seg: &str) -> String {
    let b = seg.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The path after `/api/v1/`, split and decoded.
pub fn segments(path: &str) -> Vec<String> {
    path.trim_start_matches("/api/v1/")
        .split('/')
        .map(percent_decode)
        .collect()
}

/// A JSON response.
pub fn json_response(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

/// The forges' API error body `{"message", "url"}`.
pub fn api_error(status: StatusCode, message: &str, docs_url: &str) -> Response {
    let body = serde_json::json!({"message": message, "url": docs_url});
    let mut r = Response::new(Body::from(body.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("application/json;charset=utf-8"),
    );
    r
}

/// `n` random lowercase hex characters.
pub fn random_hex(n: usize) -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..n)
        .map(|_| char::from_digit(rng.random_range(0..16u32), 16).unwrap_or('0'))
        .collect()
}

/// A random version-4 UUID in its text form.
pub fn random_uuid() -> String {
    let h = random_hex(32);
    // Version nibble 4 and variant bits 10xx, as a real v4 UUID has.
    let variant = ["8", "9", "a", "b"][usize::from(h.as_bytes()[16] % 4)];
    format!(
        "{}-{}-4{}-{}{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        variant,
        &h[17..20],
        &h[20..32]
    )
}

/// Serves `app` on `listener` in a task of its own until the returned guard is dropped (the
/// fake's handle holds it, so the server goes with the handle).
pub fn serve_until_dropped(
    listener: tokio::net::TcpListener,
    app: axum::Router,
) -> tokio_util::sync::DropGuard {
    let stop = tokio_util::sync::CancellationToken::new();
    let token = stop.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { token.cancelled().await })
            .await;
    });
    stop.drop_guard()
}

/// A fake's state and its server on a free loopback port; the server stops when the last clone
/// is dropped.
pub struct Served<S> {
    state: Arc<S>,
    url: String,
    _stop: Arc<tokio_util::sync::DropGuard>,
}

impl<S> Clone for Served<S> {
    fn clone(&self) -> Self {
        Served {
            state: self.state.clone(),
            url: self.url.clone(),
            _stop: self._stop.clone(),
        }
    }
}

impl<S> Served<S> {
    /// Binds a free loopback port, makes the state (which may need its own URL) and serves
    /// `router` of it there.
    pub async fn start(
        state: impl FnOnce(&str) -> S,
        router: impl FnOnce(Arc<S>) -> axum::Router,
    ) -> std::io::Result<Served<S>> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let state = Arc::new(state(&url));
        let stop = serve_until_dropped(listener, router(state.clone()));
        Ok(Served {
            state,
            url,
            _stop: Arc::new(stop),
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The state the routes share.
    pub fn state(&self) -> &S {
        &self.state
    }
}
