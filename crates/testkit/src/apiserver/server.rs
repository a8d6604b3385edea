//! HTTP routing: parses Kubernetes API paths, applies faults, records requests and dispatches
//! to the verb handlers.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::response::Response;
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use serde_json::Value;

use super::discovery;
use super::faults::{FaultTarget, RequestRecord, Verb};
use super::registry::ResourceDef;
use super::shared::{Shared, lock};
use super::status::{ApiError, Reason};
use super::verbs;

/// apiserver `pkg/server/config.go` `MaxRequestBodyBytes` (3 MiB): a longer body is refused
/// with 413 before it is decoded (`handlers/rest.go` `limitedReadBody`).
pub const MAX_REQUEST_BODY_BYTES: usize = 3 * 1024 * 1024;

/// A parsed resource request.
pub struct Target {
    /// The addressed type.
    pub def: Arc<ResourceDef>,
    /// Namespace from the path.
    pub ns: Option<String>,
    /// Object name from the path.
    pub name: Option<String>,
    /// Subresource (`status`, `log`).
    pub sub: Option<String>,
}

/// Query parameters, first value wins.
pub type Params = HashMap<String, String>;

/// A JSON response with optional Warning headers.
pub fn json_response(code: u16, body: &Value, warnings: &[String]) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut resp = Response::new(Body::from(bytes));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for w in warnings {
        let text = format!("299 - \"{}\"", w.replace('"', "'"));
        if let Ok(v) = HeaderValue::from_str(&text) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp
}

/// The response for a failed request.
pub fn error_response(e: &ApiError, retry_after: Option<u64>) -> Response {
    let mut resp = json_response(e.code, &e.to_status(), &[]);
    if let Some(secs) = retry_after
        && let Ok(v) = HeaderValue::from_str(&secs.to_string())
    {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

fn parse_target(shared: &Shared, path: &str) -> Option<Result<Target, ApiError>> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] if !rest.is_empty() => ("", *v, rest),
        ["apis", g, v, rest @ ..] if !rest.is_empty() => (*g, *v, rest),
        _ => return None,
    };
    let (ns, plural, name, sub) = match rest {
        ["namespaces", ns, plural, tail @ ..] if !matches!(*plural, "status" | "finalize") => {
            (Some(ns.to_string()), *plural, tail.first(), tail.get(1))
        }
        [plural, tail @ ..] => (None, *plural, tail.first(), tail.get(1)),
        [] => return None,
    };
    let store = lock(&shared.store);
    let Some(def) = store.registry.get(group, version, plural) else {
        return Some(Err(ApiError::new(
            Reason::NotFound,
            "the server could not find the requested resource",
        )));
    };
    if ns.is_some() && !def.namespaced {
        return Some(Err(ApiError::new(
            Reason::NotFound,
            "the server could not find the requested resource",
        )));
    }
    let sub = sub.map(|s| s.to_string());
    match sub.as_deref() {
        None => {}
        Some("status") if def.status => {}
        Some("log") if def.kind == "Pod" && def.group.is_empty() => {}
        Some(_) => {
            return Some(Err(ApiError::new(
                Reason::NotFound,
                "the server could not find the requested resource",
            )));
        }
    }
    Some(Ok(Target {
        def,
        ns,
        name: name.map(|s| s.to_string()),
        sub,
    }))
}

fn verb_of(method: &Method, t: &Target, params: &Params) -> Option<Verb> {
    let watch = params.get("watch").is_some_and(|w| w == "true" || w == "1");
    Some(match (method.as_str(), t.name.is_some()) {
        ("GET", true) if watch => Verb::Watch,
        ("GET", true) => Verb::Get,
        ("GET", false) if watch => Verb::Watch,
        ("GET", false) => Verb::List,
        ("POST", false) => Verb::Create,
        ("PUT", true) => Verb::Update,
        ("PATCH", true) => Verb::Patch,
        ("DELETE", true) => Verb::Delete,
        ("DELETE", false) => Verb::DeleteCollection,
        _ => return None,
    })
}

/// The single entry point of the HTTP server.
pub async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let params: Params = Query::<Params>::try_from_uri(&parts.uri)
        .map(|q| q.0)
        .unwrap_or_default();
    let user_agent = parts
        .headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let mut record = RequestRecord {
        verb: None,
        method: parts.method.to_string(),
        path: path.clone(),
        query: parts.uri.query().unwrap_or_default().to_owned(),
        group: String::new(),
        resource: String::new(),
        namespace: None,
        name: None,
        user_agent,
        status: 200,
        at: std::time::Instant::now(),
    };
    let resp = match parse_target(&shared, &path) {
        None => discovery::serve(&shared, &path, &parts.headers),
        Some(Err(e)) => error_response(&e, None),
        Some(Ok(t)) => {
            record.group = t.def.group.clone();
            record.resource = match &t.sub {
                Some(s) => format!("{}/{s}", t.def.plural),
                None => t.def.plural.clone(),
            };
            record.namespace = t.ns.clone();
            record.name = t.name.clone();
            match verb_of(&parts.method, &t, &params) {
                None => error_response(
                    &ApiError::new(
                        Reason::MethodNotAllowed,
                        "the server does not allow this method on the requested resource",
                    ),
                    None,
                ),
                Some(verb) => {
                    record.verb = Some(verb);
                    let hit = lock(&shared.faults).hit(&FaultTarget {
                        verb,
                        resource: &record.resource,
                        namespace: t.ns.as_deref(),
                        user_agent: &record.user_agent,
                    });
                    if !hit.latency.is_zero() {
                        tokio::time::sleep(hit.latency).await;
                    }
                    if let Some((code, retry)) = hit.error {
                        let e = ApiError::new(Reason::from_code(code), format!("injected fault: {code}"))
                            .with_code(code);
                        error_response(&e, retry)
                    } else {
                        match axum::body::to_bytes(body, 256 * 1024 * 1024).await {
                            Ok(bytes) if bytes.len() > MAX_REQUEST_BODY_BYTES => error_response(
                                &ApiError::too_large(format!("limit is {MAX_REQUEST_BODY_BYTES}")),
                                None,
                            ),
                            Ok(bytes) => verbs::dispatch(
                                &shared,
                                verb,
                                t,
                                &params,
                                &parts.headers,
                                &bytes,
                                hit.drop_watch,
                            ),
                            Err(e) => {
                                error_response(&ApiError::bad_request(format!("reading body: {e}")), None)
                            }
                        }
                    }
                }
            }
        }
    };
    record.status = resp.status().as_u16();
    if shared.config.log_requests {
        lock(&shared.log).records.push(record);
    }
    resp
}

/// Whether the client asked for a `meta.k8s.io` Table.
pub fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| {
            a.split(',')
                .next()
                .is_some_and(|first| first.contains("as=Table"))
        })
}
