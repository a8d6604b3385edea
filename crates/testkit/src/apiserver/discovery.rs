//! Non-resource paths: /version, legacy discovery documents, health and OpenAPI.

use std::collections::BTreeMap;

use axum::body::Body;
use axum::response::Response;
use http::{HeaderMap, HeaderValue, header};
use serde_json::{Value, json};

use super::openapi;
use super::registry::ResourceDef;
use super::server::{error_response, json_response};
use super::shared::{Shared, lock};
use super::status::{ApiError, Reason};

/// The Kubernetes version the fake claims to be.
pub const GIT_VERSION: &str = "v1.33.0-fake";

fn verbs(def: &ResourceDef) -> Vec<&'static str> {
    vec![
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ]
    .into_iter()
    .filter(|_| def.kind != "__none")
    .collect()
}

fn resource_list(defs: &[&ResourceDef], gv: &str) -> Value {
    let mut resources = Vec::new();
    for d in defs {
        let mut r = json!({
            "name": d.plural, "singularName": d.singular, "namespaced": d.namespaced,
            "kind": d.kind, "verbs": verbs(d),
        });
        if let Some(m) = r.as_object_mut() {
            if !d.short_names.is_empty() {
                m.insert("shortNames".into(), json!(d.short_names));
            }
            if !d.categories.is_empty() {
                m.insert("categories".into(), json!(d.categories));
            }
        }
        resources.push(r);
        if d.status {
            resources.push(json!({"name": format!("{}/status", d.plural), "singularName": "",
                "namespaced": d.namespaced, "kind": d.kind, "verbs": ["get", "patch", "update"]}));
        }
        if d.kind == "Pod" && d.group.is_empty() {
            resources.push(json!({"name": "pods/log", "singularName": "", "namespaced": true,
                "kind": "Pod", "verbs": ["get"]}));
        }
    }
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
}

fn groups(shared: &Shared) -> BTreeMap<String, Vec<String>> {
    let store = lock(&shared.store);
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for d in store.registry.all() {
        if d.group.is_empty() {
            continue;
        }
        let vs = out.entry(d.group.clone()).or_default();
        if !vs.contains(&d.version) {
            vs.push(d.version.clone());
        }
    }
    out
}

fn group_doc(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    let preferred = vs.first().cloned().unwrap_or(json!({}));
    json!({"name": name, "versions": vs, "preferredVersion": preferred})
}

fn text(body: &'static str) -> Response {
    let mut resp = Response::new(Body::from(body));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

fn not_found() -> Response {
    error_response(
        &ApiError::new(
            Reason::NotFound,
            "the server could not find the requested resource",
        ),
        None,
    )
}

/// Serves a non-resource path.
pub fn serve(shared: &Shared, path: &str, _headers: &HeaderMap) -> Response {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    match segs.as_slice() {
        ["version"] => json_response(
            200,
            &json!({
                "major": "1", "minor": "33", "gitVersion": GIT_VERSION, "gitCommit": "0000000000000000000000000000000000000000",
                "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.24.0",
                "compiler": "gc", "platform": "linux/amd64",
            }),
            &[],
        ),
        ["healthz"] | ["livez"] | ["readyz"] => text("ok"),
        ["api"] => json_response(
            200,
            &json!({
                "kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": shared.addr.to_string()}],
            }),
            &[],
        ),
        ["apis"] => {
            let gs: Vec<Value> = groups(shared).iter().map(|(g, vs)| group_doc(g, vs)).collect();
            json_response(
                200,
                &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": gs}),
                &[],
            )
        }
        ["apis", g] => match groups(shared).get(*g) {
            Some(vs) => {
                let mut doc = group_doc(g, vs);
                if let Some(m) = doc.as_object_mut() {
                    m.insert("kind".into(), json!("APIGroup"));
                    m.insert("apiVersion".into(), json!("v1"));
                }
                json_response(200, &doc, &[])
            }
            None => not_found(),
        },
        ["api", v] | ["apis", _, v] => {
            let group = if segs[0] == "api" { "" } else { segs[1] };
            let store = lock(&shared.store);
            let defs: Vec<&ResourceDef> = store
                .registry
                .all()
                .filter(|d| d.group == group && d.version == *v)
                .map(|d| d.as_ref())
                .collect();
            if defs.is_empty() {
                return not_found();
            }
            let gv = if group.is_empty() {
                v.to_string()
            } else {
                format!("{group}/{v}")
            };
            json_response(200, &resource_list(&defs, &gv), &[])
        }
        ["openapi", "v3", rest @ ..] => openapi::serve(shared, rest),
        _ => not_found(),
    }
}
