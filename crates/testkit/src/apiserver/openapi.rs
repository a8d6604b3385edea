//! OpenAPI v3: an index of group-versions and one document per group-version, good enough for
//! kubectl's `apply` (it looks for the `fieldValidation` parameter on PATCH operations and then
//! leaves validation to the server) and `explain`-style schema lookups. Built-in schemas come
//! from k8s-openapi's schemars implementations; a CRD brings its own schema.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::sync::OnceLock;

use axum::response::Response;
use serde_json::{Map, Value, json};

use super::registry::ResourceDef;
use super::server::{error_response, json_response};
use super::shared::{Shared, lock};
use super::status::{ApiError, Reason};

fn builtin_defs() -> &'static Map<String, Value> {
    static DEFS: OnceLock<Map<String, Value>> = OnceLock::new();
    DEFS.get_or_init(|| {
        use k8s_openapi::api::{apps, batch, coordination, core, events, rbac};
        let mut g = schemars::generate::SchemaSettings::openapi3().into_generator();
        g.subschema_for::<core::v1::Namespace>();
        g.subschema_for::<core::v1::Secret>();
        g.subschema_for::<core::v1::ConfigMap>();
        g.subschema_for::<core::v1::Pod>();
        g.subschema_for::<core::v1::Event>();
        g.subschema_for::<core::v1::ServiceAccount>();
        g.subschema_for::<core::v1::Service>();
        g.subschema_for::<batch::v1::Job>();
        g.subschema_for::<events::v1::Event>();
        g.subschema_for::<coordination::v1::Lease>();
        g.subschema_for::<apps::v1::Deployment>();
        g.subschema_for::<rbac::v1::Role>();
        g.subschema_for::<rbac::v1::RoleBinding>();
        g.subschema_for::<rbac::v1::ClusterRole>();
        g.subschema_for::<rbac::v1::ClusterRoleBinding>();
        g.subschema_for::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>();
        g.take_definitions(true)
    })
}

/// The schema name of a type: reversed group, version, kind (`dev.forgerunner.v1alpha1.RunnerGroup`).
fn schema_name(d: &ResourceDef) -> String {
    if d.builtin.is_some() {
        let pkg = match d.group.as_str() {
            "" => "io.k8s.api.core".to_string(),
            "apiextensions.k8s.io" => "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions".to_string(),
            g => format!("io.k8s.api.{}", g.split('.').next().unwrap_or(g)),
        };
        return format!("{pkg}.{}.{}", d.version, d.kind);
    }
    let rev: Vec<&str> = d.group.split('.').rev().collect();
    format!("{}.{}.{}", rev.join("."), d.version, d.kind)
}

fn refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(r) = m.get("$ref").and_then(Value::as_str)
                && let Some(name) = r.strip_prefix("#/components/schemas/")
            {
                out.push(name.to_string());
            }
            m.values().for_each(|x| refs(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
        _ => {}
    }
}

/// Adds `roots` and every schema they reference (from the built-in set) to `out`.
fn closure(roots: Vec<String>, out: &mut Map<String, Value>) {
    let defs = builtin_defs();
    let mut todo = roots;
    while let Some(name) = todo.pop() {
        if out.contains_key(&name) {
            continue;
        }
        let Some(s) = defs.get(&name) else { continue };
        refs(s, &mut todo);
        out.insert(name, s.clone());
    }
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn params() -> Value {
    let q = |n: &str| json!({"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": true}});
    json!([q("dryRun"), q("fieldManager"), q("fieldValidation"), q("force")])
}

fn paths_for(d: &ResourceDef, name: &str) -> Map<String, Value> {
    let gvk = json!({"group": d.group, "version": d.version, "kind": d.kind});
    let reference = json!({"$ref": format!("#/components/schemas/{name}")});
    let body = json!({"content": {"application/json": {"schema": reference}}});
    let ok = json!({"200": {"description": "OK", "content": {"application/json": {"schema": reference}}}});
    let op = |action: &str| {
        json!({"x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk,
               "parameters": params(), "requestBody": body, "responses": ok})
    };
    let base = format!("/{}", gv_path(&d.group, &d.version));
    let coll = if d.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}", d.plural)
    } else {
        format!("{base}/{}", d.plural)
    };
    let mut out = Map::new();
    out.insert(
        coll.clone(),
        json!({"get": op("list"), "post": op("post"), "delete": op("deletecollection")}),
    );
    out.insert(
        format!("{coll}/{{name}}"),
        json!({"get": op("get"), "put": op("put"), "patch": op("patch"), "delete": op("delete")}),
    );
    if d.status {
        out.insert(
            format!("{coll}/{{name}}/status"),
            json!({"get": op("get"), "put": op("put"), "patch": op("patch")}),
        );
    }
    out
}

fn document(defs: &[&ResourceDef]) -> Value {
    let mut schemas = Map::new();
    let mut paths = Map::new();
    let mut seen = BTreeSet::new();
    for d in defs {
        let name = schema_name(d);
        paths.extend(paths_for(d, &name));
        if !seen.insert(name.clone()) {
            continue;
        }
        let mut s = match (&d.schema, d.builtin) {
            (Some(s), _) => {
                let mut s = s.clone();
                if let Some(props) = s.get_mut("properties").and_then(Value::as_object_mut) {
                    props.insert("metadata".into(), json!({"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}));
                }
                closure(
                    vec!["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta".into()],
                    &mut schemas,
                );
                s
            }
            (None, Some(_)) => {
                closure(vec![name.clone()], &mut schemas);
                schemas.get(&name).cloned().unwrap_or(json!({"type": "object"}))
            }
            (None, None) => json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        };
        if let Some(m) = s.as_object_mut() {
            m.insert(
                "x-kubernetes-group-version-kind".into(),
                json!([{"group": d.group, "kind": d.kind, "version": d.version}]),
            );
        }
        schemas.insert(name, s);
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": super::discovery::GIT_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

/// Serves `/openapi/v3` (index) and `/openapi/v3/<gv path>`.
pub fn serve(shared: &Shared, rest: &[&str]) -> Response {
    let store = lock(&shared.store);
    let mut by_gv: BTreeMap<String, Vec<&ResourceDef>> = BTreeMap::new();
    for d in store.registry.all() {
        by_gv
            .entry(gv_path(&d.group, &d.version))
            .or_default()
            .push(d.as_ref());
    }
    if rest.is_empty() {
        let mut paths = Map::new();
        for (gv, defs) in &by_gv {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            for d in defs {
                d.plural.hash(&mut h);
                d.schema.as_ref().map(Value::to_string).hash(&mut h);
                d.printer_columns.len().hash(&mut h);
            }
            paths.insert(
                gv.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{gv}?hash={:016X}", h.finish())}),
            );
        }
        return json_response(200, &json!({"paths": paths}), &[]);
    }
    match by_gv.get(&rest.join("/")) {
        Some(defs) => json_response(200, &document(defs), &[]),
        None => error_response(
            &ApiError::new(
                Reason::NotFound,
                "the server could not find the requested resource",
            ),
            None,
        ),
    }
}
