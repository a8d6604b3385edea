//! The verb handlers: get, list, create, update, patch, delete, deletecollection (watch lives
//! in `watch`). Each runs under the store lock, so a patch reads and writes atomically.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use axum::response::Response;
use base64::Engine;
use http::{HeaderMap, header};
use serde_json::{Value, json};

use super::applied_fields;
use super::faults::Verb;
use super::gc::{Preconditions, Propagation};
use super::ops::{FieldValidation, WriteCtx};
use super::partial;
use super::patch::{self, PatchKind, Rules};
use super::registry::ResourceDef;
use super::selector::{FieldSelector, LabelSelector, Selectors};
use super::server::{Params, Target, error_response, json_response, wants_table};
use super::shared::{Shared, lock};
use super::status::{ApiError, ApiResult, Reason, success_status};
use super::store::ObjKey;
use super::{event_alias, protobuf, table, watch};

/// Routes one parsed request to its handler.
pub fn dispatch(
    shared: &Arc<Shared>,
    verb: Verb,
    t: Target,
    params: &Params,
    headers: &HeaderMap,
    body: &[u8],
    drop_watch: Option<Duration>,
) -> Response {
    let result = match verb {
        Verb::Get => get(shared, &t, headers),
        Verb::List => list(shared, &t, params, headers),
        Verb::Watch => return watch::start(shared, &t, params, headers, drop_watch),
        Verb::Create => create(shared, &t, params, headers, body),
        Verb::Update => update(shared, &t, params, headers, body),
        Verb::Patch => patch_obj(shared, &t, params, headers, body),
        Verb::Delete => delete(shared, &t, params, body),
        Verb::DeleteCollection => delete_collection(shared, &t, params, body),
    };
    match result {
        Ok(r) => r,
        Err(e) => error_response(&e, None),
    }
}

/// The object as the client's requested version spells it.
pub fn present<'a>(def: &ResourceDef, obj: &'a Value) -> Cow<'a, Value> {
    if event_alias::is_alias(def) {
        return event_alias::outbound(def, obj);
    }
    let want = def.api_version();
    if obj.get("apiVersion").and_then(Value::as_str) == Some(want.as_str()) {
        Cow::Borrowed(obj)
    } else {
        let mut o = obj.clone();
        if let Some(m) = o.as_object_mut() {
            m.insert("apiVersion".into(), json!(want));
        }
        Cow::Owned(o)
    }
}

fn key_for(t: &Target) -> ApiResult<ObjKey> {
    let name = t.name.clone().unwrap_or_default();
    let ns = if t.def.namespaced {
        t.ns.clone()
            .ok_or_else(|| ApiError::bad_request("a namespace is required for a namespaced resource"))?
    } else {
        String::new()
    };
    Ok(ObjKey {
        tk: t.def.type_key(),
        ns,
        name,
    })
}

/// Parses the label and field selectors of a list or watch.
pub fn selectors(def: &ResourceDef, params: &Params) -> ApiResult<Selectors> {
    Ok(Selectors {
        labels: LabelSelector::parse(params.get("labelSelector").map_or("", String::as_str))?,
        fields: {
            let f = FieldSelector::parse(
                params.get("fieldSelector").map_or("", String::as_str),
                &def.field_selectors,
            )?;
            if event_alias::is_alias(def) {
                f.map_paths(|p| event_alias::storage_field(p).into_owned())
            } else {
                f
            }
        },
    })
}

fn write_ctx(t: &Target, params: &Params, headers: &HeaderMap, apply: bool) -> WriteCtx {
    let validation = match params.get("fieldValidation").map(String::as_str) {
        Some("Strict") => FieldValidation::Strict,
        Some("Ignore") => FieldValidation::Ignore,
        _ => FieldValidation::Warn,
    };
    let manager = params.get("fieldManager").cloned().unwrap_or_else(|| {
        let ua = headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        ua.split('/')
            .next()
            .unwrap_or_default()
            .chars()
            .take(128)
            .collect()
    });
    WriteCtx {
        validation,
        manager,
        apply,
        applied_fields: None,
        warnings: Vec::new(),
        cel_skipped: 0,
        request_group: t.def.group.clone(),
    }
}

/// The response of a write. CEL rules are skipped only on writes that fail, so they are counted
/// before the result is looked at.
fn finish(
    shared: &Shared,
    code: u16,
    def: &ResourceDef,
    result: ApiResult<Arc<Value>>,
    ctx: &WriteCtx,
) -> ApiResult<Response> {
    if ctx.cel_skipped > 0 {
        lock(&shared.log).cel_skipped += ctx.cel_skipped;
    }
    let stored = result?;
    Ok(json_response(code, &present(def, &stored), &ctx.warnings))
}

fn parse_body(body: &[u8]) -> ApiResult<Value> {
    serde_json::from_slice(body)
        .or_else(|_| serde_yaml::from_slice(body))
        .map_err(|e| ApiError::bad_request(format!("the body of the request could not be decoded: {e}")))
}

/// The object of a create or update: JSON or YAML, or Kubernetes protobuf by its Content-Type.
fn parse_object(headers: &HeaderMap, body: &[u8]) -> ApiResult<Value> {
    if protobuf::is_protobuf(headers) {
        return protobuf::decode(body).map_err(|e| e.to_api_error());
    }
    parse_body(body)
}

fn get(shared: &Shared, t: &Target, headers: &HeaderMap) -> ApiResult<Response> {
    let key = key_for(t)?;
    let obj = lock(&shared.store)
        .get(&key)
        .ok_or_else(|| ApiError::not_found(&t.def.group, &t.def.plural, &key.name))?;
    if t.sub.as_deref() == Some("log") {
        let mut resp = Response::new(axum::body::Body::from(String::new()));
        resp.headers_mut()
            .insert(header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain"));
        return Ok(resp);
    }
    if wants_table(headers) {
        return Ok(json_response(
            200,
            &table::table(&t.def, &[obj], None, None, true),
            &[],
        ));
    }
    if partial::wanted(headers) {
        return Ok(json_response(200, &partial::object(&present(&t.def, &obj)), &[]));
    }
    Ok(json_response(200, &present(&t.def, &obj), &[]))
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    rv: u64,
    ns: String,
    name: String,
}

fn list(shared: &Shared, t: &Target, params: &Params, headers: &HeaderMap) -> ApiResult<Response> {
    let sel = selectors(&t.def, params)?;
    let limit = params
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let tk = t.def.type_key();
    let store = lock(&shared.store);
    let (list_rv, after) = match params.get("continue").filter(|c| !c.is_empty()) {
        Some(c) => {
            let tok: ContinueToken = base64::engine::general_purpose::STANDARD
                .decode(c)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .ok_or_else(|| ApiError::bad_request("continue key is not valid"))?;
            if tok.rv < store.compacted_rv(&tk) {
                return Err(ApiError::new(
                    Reason::Expired,
                    "The provided continue parameter is too old to display a consistent list result. \
                     You can start a new list without the continue parameter.",
                ));
            }
            (tok.rv, Some((tok.ns, tok.name)))
        }
        None => (store.current_rv(), None),
    };
    let (items, next) = store.list(&tk, t.ns.as_deref(), |o| sel.matches(o), limit, after);
    let cont = next.map(|(ns, name)| {
        let tok = ContinueToken {
            rv: list_rv,
            ns,
            name,
        };
        base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&tok).unwrap_or_default())
    });
    drop(store);
    if wants_table(headers) {
        return Ok(json_response(
            200,
            &table::table(&t.def, &items, Some(list_rv), cont, true),
            &[],
        ));
    }
    let mut meta = json!({"resourceVersion": list_rv.to_string()});
    if let (Some(c), Some(m)) = (cont, meta.as_object_mut()) {
        m.insert("continue".into(), json!(c));
    }
    let items: Vec<Value> = items.iter().map(|o| present(&t.def, o).into_owned()).collect();
    if partial::wanted(headers) {
        return Ok(json_response(200, &partial::list(&items, meta), &[]));
    }
    let body = json!({
        "apiVersion": t.def.api_version(),
        "kind": format!("{}List", t.def.kind),
        "metadata": meta,
        "items": items,
    });
    Ok(json_response(200, &body, &[]))
}

fn create(
    shared: &Shared,
    t: &Target,
    params: &Params,
    headers: &HeaderMap,
    body: &[u8],
) -> ApiResult<Response> {
    if t.sub.is_some() {
        return Err(ApiError::new(
            Reason::MethodNotAllowed,
            "create is not supported on this subresource",
        ));
    }
    let obj = parse_object(headers, body)?;
    let mut ctx = write_ctx(t, params, headers, false);
    let ns = t.ns.clone().unwrap_or_default();
    if t.def.namespaced && ns.is_empty() {
        return Err(ApiError::bad_request(
            "a namespace is required for a namespaced resource",
        ));
    }
    let mut store = lock(&shared.store);
    let def = event_alias::storage_def(&store.registry, &t.def);
    let created = store.create(&def, &ns, event_alias::inbound(&t.def, obj), &mut ctx);
    drop(store);
    finish(shared, 201, &t.def, created, &ctx)
}

fn update(
    shared: &Shared,
    t: &Target,
    params: &Params,
    headers: &HeaderMap,
    body: &[u8],
) -> ApiResult<Response> {
    let obj = parse_object(headers, body)?;
    let mut ctx = write_ctx(t, params, headers, false);
    let key = key_for(t)?;
    let status_only = t.sub.as_deref() == Some("status");
    let mut store = lock(&shared.store);
    let def = event_alias::storage_def(&store.registry, &t.def);
    let obj = event_alias::inbound(&t.def, obj);
    let stored = store.update(&def, &key, obj, status_only, &mut ctx);
    drop(store);
    finish(shared, 200, &t.def, stored, &ctx)
}

fn patch_obj(
    shared: &Shared,
    t: &Target,
    params: &Params,
    headers: &HeaderMap,
    body: &[u8],
) -> ApiResult<Response> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let kind = PatchKind::from_content_type(ct)?;
    if kind == PatchKind::Strategic && t.def.builtin.is_none() {
        return Err(ApiError::new(
            Reason::UnsupportedMediaType,
            "strategic merge patch is not supported for custom resources; use a JSON merge patch or server-side apply",
        ));
    }
    if kind == PatchKind::Apply && params.get("fieldManager").is_none_or(String::is_empty) {
        return Err(ApiError::bad_request(
            "PATCH /apply requires fieldManager to be set",
        ));
    }
    let mut ctx = write_ctx(t, params, headers, kind == PatchKind::Apply);
    let key = key_for(t)?;
    let status_only = t.sub.as_deref() == Some("status");
    let rules = if t.def.builtin.is_some() {
        Rules::Builtin
    } else {
        Rules::Schema(t.def.schema.as_ref())
    };
    let mut store = lock(&shared.store);
    let def = event_alias::storage_def(&store.registry, &t.def);
    let Some(current) = store.get(&key) else {
        if kind == PatchKind::Apply && !status_only {
            let applied = event_alias::inbound(&t.def, patch::parse_apply(body)?);
            ctx.applied_fields = Some(applied_fields::of(&applied, false, t.def.status));
            let created = store.create(&def, &key.ns, applied, &mut ctx);
            drop(store);
            return finish(shared, 201, &t.def, created, &ctx);
        }
        return Err(ApiError::not_found(&t.def.group, &t.def.plural, &key.name));
    };
    // A patch is written against the served form, so it applies to that form.
    let mut doc = event_alias::outbound(&t.def, &current).into_owned();
    match kind {
        PatchKind::Json => patch::json_patch(&mut doc, body)?,
        PatchKind::Merge => patch::merge(&mut doc, &parse_body(body)?, Rules::None),
        PatchKind::Strategic => patch::merge(&mut doc, &parse_body(body)?, Rules::Builtin),
        PatchKind::Apply => {
            let applied = patch::parse_apply(body)?;
            if applied.pointer("/metadata/managedFields").is_some() {
                return Err(ApiError::bad_request("metadata.managedFields must be nil"));
            }
            patch::merge(&mut doc, &applied, rules);
            let now = applied_fields::of(&applied, status_only, t.def.status);
            let sub = if status_only { "status" } else { "" };
            let entries = current
                .pointer("/metadata/managedFields")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let mine = |e: &&Value| {
                e.get("manager").and_then(Value::as_str) == Some(ctx.manager.as_str())
                    && e.get("operation").and_then(Value::as_str) == Some("Apply")
                    && e.get("subresource").and_then(Value::as_str).unwrap_or_default() == sub
            };
            let empty = json!({});
            let before = entries
                .iter()
                .find(mine)
                .and_then(|e| e.get("fieldsV1"))
                .unwrap_or(&empty);
            let others: Vec<&Value> = entries
                .iter()
                .filter(|e| !mine(e))
                .filter_map(|e| e.get("fieldsV1"))
                .collect();
            applied_fields::prune(&mut doc, before, &now, &others);
            ctx.applied_fields = Some(now);
        }
    }
    let doc = event_alias::inbound(&t.def, doc);
    let stored = store.update(&def, &key, doc, status_only, &mut ctx);
    drop(store);
    finish(shared, 200, &t.def, stored, &ctx)
}

fn delete_options(params: &Params, body: &[u8]) -> ApiResult<(Option<Propagation>, Preconditions)> {
    let opts: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        parse_body(body)?
    };
    let policy_text = params.get("propagationPolicy").cloned().or_else(|| {
        opts.get("propagationPolicy")
            .and_then(Value::as_str)
            .map(str::to_string)
    });
    let mut policy = match policy_text {
        Some(p) => Some(
            Propagation::parse(&p)
                .ok_or_else(|| ApiError::bad_request(format!("invalid propagationPolicy {p}")))?,
        ),
        None => None,
    };
    if policy.is_none() && opts.get("orphanDependents").and_then(Value::as_bool) == Some(true) {
        policy = Some(Propagation::Orphan);
    }
    let pre = Preconditions {
        uid: opts
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string),
        resource_version: opts
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string),
    };
    Ok((policy, pre))
}

/// Pods and custom resources answer a delete with the object; other types with a Status.
fn returns_object(def: &ResourceDef) -> bool {
    def.builtin.is_none() || def.kind == "Pod"
}

fn delete(shared: &Shared, t: &Target, params: &Params, body: &[u8]) -> ApiResult<Response> {
    let key = key_for(t)?;
    let (policy, pre) = delete_options(params, body)?;
    let out = lock(&shared.store).delete(&t.def, &key, policy, &pre)?;
    let body = if out.removed && !returns_object(&t.def) {
        let uid = out
            .object
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default();
        success_status(&t.def.group, &t.def.plural, &key.name, uid)
    } else {
        present(&t.def, &out.object).into_owned()
    };
    Ok(json_response(200, &body, &out.warnings))
}

fn delete_collection(shared: &Shared, t: &Target, params: &Params, body: &[u8]) -> ApiResult<Response> {
    let sel = selectors(&t.def, params)?;
    let (policy, pre) = delete_options(params, body)?;
    let mut store = lock(&shared.store);
    let (items, _) = store.list(&t.def.type_key(), t.ns.as_deref(), |o| sel.matches(o), None, None);
    let mut deleted = Vec::new();
    let mut warnings = Vec::new();
    for obj in items {
        let key = ObjKey {
            tk: t.def.type_key(),
            ns: obj
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            name: obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        };
        if let Ok(out) = store.delete(&t.def, &key, policy, &pre) {
            warnings.extend(out.warnings);
            deleted.push(present(&t.def, &out.object).into_owned());
        }
    }
    warnings.dedup();
    let rv = store.current_rv();
    drop(store);
    let body = json!({
        "apiVersion": t.def.api_version(),
        "kind": format!("{}List", t.def.kind),
        "metadata": {"resourceVersion": rv.to_string()},
        "items": deleted,
    });
    Ok(json_response(200, &body, &warnings))
}
