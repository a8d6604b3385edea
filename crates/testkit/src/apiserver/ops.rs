//! Create and update semantics: names, namespaces, status subresource, generation, no-op
//! detection, decoding of built-ins, schema validation of custom resources.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::builtin;
use super::cel;
use super::crd;
use super::event_validation;
use super::field::FieldError;
use super::job_update;
use super::naming::{self, NameRule};
use super::objectmeta;
use super::registry::{Builtin, ResourceDef};
use super::sa_admission;
use super::schema;
use super::status::{ApiError, ApiResult, Reason};
use super::store::{ObjKey, Store, new_uid, now_rfc3339};

/// How unknown fields in a write are treated (`fieldValidation` parameter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Drop silently.
    Ignore,
    /// Drop and warn (the server default).
    #[default]
    Warn,
    /// Reject with 400.
    Strict,
}

/// Per-request write options and the warnings the write produced.
#[derive(Clone, Debug, Default)]
pub struct WriteCtx {
    /// Unknown-field handling.
    pub validation: FieldValidation,
    /// `fieldManager`, or a name derived from the user agent.
    pub manager: String,
    /// Whether the write is a server-side apply.
    pub apply: bool,
    /// The fields the apply sets (`fieldsV1`), recorded as its manager's
    /// ([`super::applied_fields`]).
    pub applied_fields: Option<Value>,
    /// `Warning` headers to return.
    pub warnings: Vec<String>,
    /// CEL rules not evaluated because a schema error blocked them.
    pub cel_skipped: u64,
    /// The API group the request was addressed to, when it differs from the stored form's
    /// (`events.k8s.io` writes are stored as core Events but validated more strictly).
    pub request_group: String,
}

impl WriteCtx {
    /// Whether the write came through `events.k8s.io`.
    fn events_v1(&self) -> bool {
        self.request_group == "events.k8s.io"
    }
}

fn meta(obj: &mut Value) -> ApiResult<&mut Map<String, Value>> {
    let m = obj
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("body must be a JSON object"))?;
    let e = m.entry("metadata").or_insert_with(|| json!({}));
    if !e.is_object() {
        return Err(ApiError::bad_request("metadata must be an object"));
    }
    e.as_object_mut()
        .ok_or_else(|| ApiError::bad_request("metadata must be an object"))
}

fn str_at<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr).and_then(Value::as_str)
}

/// etcd's default `--max-request-bytes` (1.5 MiB).
const ETCD_MAX_REQUEST_BYTES: usize = 1536 * 1024;

/// Refuses to store a custom resource larger than etcd accepts: etcd answers `etcdserver:
/// request is too large`, which the API server passes on as a 500 without a reason (apiserver
/// `handlers/rest.go` `isTooLargeError` only retries without managedFields, which are tiny
/// here). Custom resources are stored as JSON, so their JSON size is their stored size; built-in
/// types are stored as smaller protobuf and are not checked.
fn check_stored_size(def: &ResourceDef, obj: &Value) -> ApiResult<()> {
    if def.builtin.is_some() {
        return Ok(());
    }
    let size = serde_json::to_vec(obj).map_or(0, |b| b.len());
    if size > ETCD_MAX_REQUEST_BYTES {
        return Err(ApiError::new(Reason::Unknown, "etcdserver: request is too large"));
    }
    Ok(())
}

/// batch `jobStrategy.WarningsOnCreate`: a Job name that is not a DNS label is accepted with a
/// warning, its pods' names and hostnames derive from it.
fn job_name_warning(name: &str) -> Option<String> {
    let msgs = naming::dns1123_label(name);
    (!msgs.is_empty()).then(|| {
        format!(
            "metadata.name: this is used in Pod names and hostnames, which can result in surprising \
             behavior; a DNS label is recommended: [{}]",
            msgs.join(" ")
        )
    })
}

/// Longest generateName prefix kept (`names.SimpleNameGenerator`: 63 − 5 random characters).
const MAX_GENERATED_PREFIX: usize = 58;

fn random_suffix() -> String {
    const CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| CHARS[rand::random_range(0..CHARS.len())] as char)
        .collect()
}

/// The object without the fields a spec change ignores, for generation tracking.
fn spec_part(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
    }
    v
}

/// The object without fields that change on every write, for no-op detection.
fn comparable(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.pointer_mut("/metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    v
}

impl Store {
    /// Decodes, validates and prunes a body against its type, then runs its CEL rules (`old` is
    /// the stored object on update). A body that does not decode is a 400; the field errors of a
    /// custom resource are returned, to be reported with the other field errors of the write.
    fn normalize(
        &self,
        def: &ResourceDef,
        obj: &mut Value,
        old: Option<&Value>,
        ctx: &mut WriteCtx,
    ) -> ApiResult<Vec<FieldError>> {
        if let Some(m) = obj.as_object_mut() {
            m.insert("apiVersion".into(), json!(def.api_version()));
            m.insert("kind".into(), json!(def.kind));
        }
        let mut errors = Vec::new();
        let unknown = if let Some(b) = def.builtin {
            let decoded = builtin::decode(b, obj).map_err(|e| {
                ApiError::bad_request(format!("{} in body could not be decoded: {e}", def.kind))
            })?;
            let unknown = builtin::unknown_fields(obj, &decoded);
            *obj = decoded;
            // Go's omitempty drops empty lists and maps from built-in types.
            builtin::strip_empty(obj);
            unknown
        } else if let Some(schema) = &def.schema {
            if let Some(m) = obj.get_mut("metadata") {
                builtin::strip_empty(m);
            }
            let mut out = schema::validate(schema, obj, old);
            if out.blocking {
                // As the real server: CEL rules assume the schema's shape, so a type, required,
                // enum or size error stops them and says so.
                ctx.cel_skipped += cel::rule_count(schema);
                out.errors.push((
                    "<nil>".into(),
                    "Invalid value: \"null\": some validation rules were not checked because the \
                     object was invalid; correct the existing errors to complete validation"
                        .into(),
                ));
            } else {
                out.errors.extend(cel::evaluate(schema, obj, old));
            }
            errors = out.errors;
            out.unknown
        } else {
            Vec::new()
        };
        if !unknown.is_empty() {
            match ctx.validation {
                FieldValidation::Strict => {
                    let list: Vec<String> =
                        unknown.iter().map(|f| format!("unknown field \"{f}\"")).collect();
                    return Err(ApiError::bad_request(format!(
                        "strict decoding error: {}",
                        list.join(", ")
                    )));
                }
                FieldValidation::Warn => {
                    ctx.warnings
                        .extend(unknown.iter().map(|f| format!("unknown field \"{f}\"")));
                }
                FieldValidation::Ignore => {}
            }
        }
        Ok(errors)
    }

    /// The field errors every kind's registry strategy and the generic registry add to those of
    /// the body itself: metadata (names, labels, annotations), and per kind the rules that look
    /// at the old object too.
    fn field_errors(def: &ResourceDef, obj: &Value, old: Option<&Value>, ctx: &WriteCtx) -> Vec<FieldError> {
        // Updates check names only as path segments (`validateCommonFields`): the kind's own
        // format was checked at create and the name cannot change.
        let rule = match old {
            None => objectmeta::name_rule(def, ctx.events_v1()),
            Some(_) => NameRule::PathSegment,
        };
        let mut errs = objectmeta::validate(rule, obj);
        match (def.builtin, old) {
            (Some(Builtin::CoreEvent), None) => {
                errs.extend(event_validation::validate_create(obj, ctx.events_v1()));
            }
            (Some(Builtin::CoreEvent), Some(old)) => {
                errs.extend(event_validation::validate_update(obj, old, ctx.events_v1()));
            }
            (Some(Builtin::Job), Some(old)) => errs.extend(job_update::validate(obj, old)),
            _ => {}
        }
        errs
    }

    fn set_managed(
        &self,
        def: &ResourceDef,
        obj: &mut Value,
        old: Option<&Value>,
        ctx: &WriteCtx,
        sub: &str,
    ) {
        if ctx.manager.is_empty() {
            return;
        }
        let op = if ctx.apply { "Apply" } else { "Update" };
        let mut entries: Vec<Value> = old
            .and_then(|o| o.pointer("/metadata/managedFields"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let same = |e: &Value| {
            str_at(e, "/manager") == Some(ctx.manager.as_str())
                && str_at(e, "/operation") == Some(op)
                && str_at(e, "/subresource").unwrap_or_default() == sub
        };
        let time = entries
            .iter()
            .find(|e| same(e))
            .and_then(|e| e.get("time").cloned());
        entries.retain(|e| !same(e));
        let mut entry = json!({
            "manager": ctx.manager, "operation": op, "apiVersion": def.api_version(),
            "time": time.unwrap_or_else(|| json!(now_rfc3339())), "fieldsType": "FieldsV1",
            "fieldsV1": ctx.applied_fields.clone().filter(|_| ctx.apply).unwrap_or_else(|| json!({})),
        });
        if !sub.is_empty()
            && let Some(m) = entry.as_object_mut()
        {
            m.insert("subresource".into(), json!(sub));
        }
        entries.push(entry);
        if let Some(m) = obj.pointer_mut("/metadata").and_then(Value::as_object_mut) {
            m.insert("managedFields".into(), Value::Array(entries));
        }
    }

    /// Creates an object (POST, or an apply of a missing object).
    pub fn create(
        &mut self,
        def: &ResourceDef,
        ns: &str,
        mut obj: Value,
        ctx: &mut WriteCtx,
    ) -> ApiResult<Arc<Value>> {
        let m = meta(&mut obj)?;
        let body_ns = m
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if def.namespaced {
            if !body_ns.is_empty() && body_ns != ns {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            m.insert("namespace".into(), json!(ns));
        } else {
            m.remove("namespace");
        }
        for k in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "uid",
            "selfLink",
        ] {
            m.remove(k);
        }
        let mut name = m
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let generate = m
            .get("generateName")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if name.is_empty() && generate.is_empty() {
            return Err(ApiError::invalid(
                &def.group,
                &def.kind,
                "",
                &[(
                    "metadata.name".into(),
                    "Required value: name or generateName is required".into(),
                )],
            ));
        }
        let key_ns = if def.namespaced {
            ns.to_string()
        } else {
            String::new()
        };
        if def.namespaced {
            // NamespaceLifecycle admission runs before anything looks at the object.
            self.check_namespace_open(ns)?;
        }
        if def.builtin == Some(Builtin::Pod) {
            // Mutating admission sees the pod before the server names it.
            let shown = if name.is_empty() { &generate } else { &name };
            sa_admission::admit(self, ns, shown, &obj)?;
        }
        if name.is_empty() {
            let generate: String = generate.chars().take(MAX_GENERATED_PREFIX).collect();
            name = format!("{generate}{}", random_suffix());
            for _ in 0..8 {
                let k = ObjKey {
                    tk: def.type_key(),
                    ns: key_ns.clone(),
                    name: name.clone(),
                };
                if self.get(&k).is_none() {
                    break;
                }
                name = format!("{generate}{}", random_suffix());
            }
            meta(&mut obj)?.insert("name".into(), json!(name));
        }
        let key = ObjKey {
            tk: def.type_key(),
            ns: key_ns,
            name: name.clone(),
        };
        if self.get(&key).is_some() {
            return Err(ApiError::already_exists(&def.group, &def.plural, &name));
        }
        if def.status
            && let Some(o) = obj.as_object_mut()
        {
            o.remove("status");
        }
        let mut errs = self.normalize(def, &mut obj, None, ctx)?;
        let uid = new_uid();
        let m = meta(&mut obj)?;
        m.insert("uid".into(), json!(uid));
        m.insert("creationTimestamp".into(), json!(now_rfc3339()));
        if def.tracks_generation() {
            m.insert("generation".into(), json!(1));
        }
        if let Some(b) = def.builtin {
            builtin::apply_defaults(b, &mut obj, &uid, &name);
            errs.extend(builtin::validate(b, &obj));
        }
        errs.extend(Store::field_errors(def, &obj, None, ctx));
        if !errs.is_empty() {
            return Err(ApiError::invalid(&def.group, &def.kind, &name, &errs));
        }
        if def.builtin == Some(Builtin::Pod) {
            super::pod_security::admit(self.get(&namespace_key(ns)).as_deref(), &name, &obj)?;
        }
        if def.builtin == Some(Builtin::Job) {
            ctx.warnings.extend(job_name_warning(&name));
        }
        if def.builtin == Some(Builtin::Crd) {
            crd::accept(self, &mut obj)?;
        }
        self.set_managed(def, &mut obj, None, ctx, "");
        check_stored_size(def, &obj)?;
        let created = self.put(&key, obj);
        self.collect_if_orphaned(&key);
        Ok(created)
    }

    fn check_namespace_open(&self, ns: &str) -> ApiResult<()> {
        match self.get(&namespace_key(ns)) {
            None => Err(ApiError::not_found("", "namespaces", ns)),
            Some(n) if n.pointer("/metadata/deletionTimestamp").is_some() => Err(ApiError::new(
                Reason::Forbidden,
                format!("unable to create new content in namespace {ns} because it is being terminated"),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Replaces an object (PUT, or the result of a patch). `status_only` is the /status endpoint.
    pub fn update(
        &mut self,
        def: &ResourceDef,
        key: &ObjKey,
        mut obj: Value,
        status_only: bool,
        ctx: &mut WriteCtx,
    ) -> ApiResult<Arc<Value>> {
        let current = self
            .get(key)
            .ok_or_else(|| ApiError::not_found(&def.group, &def.plural, &key.name))?;
        let body_name = str_at(&obj, "/metadata/name").unwrap_or_default();
        if !body_name.is_empty() && body_name != key.name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({})",
                key.name
            )));
        }
        let want_rv = str_at(&obj, "/metadata/resourceVersion").unwrap_or_default();
        let have_rv = str_at(&current, "/metadata/resourceVersion").unwrap_or_default();
        if !want_rv.is_empty() && want_rv != have_rv {
            return Err(ApiError::conflict(&def.group, &def.plural, &key.name));
        }
        let mut new = if status_only {
            let mut n = (*current).clone();
            if let (Some(o), Some(s)) = (n.as_object_mut(), obj.get("status")) {
                o.insert("status".into(), s.clone());
            }
            n
        } else {
            if def.status
                && let Some(o) = obj.as_object_mut()
            {
                match current.get("status") {
                    Some(s) => o.insert("status".into(), s.clone()),
                    None => o.remove("status"),
                };
            }
            obj
        };
        let cur_meta = current.get("metadata").cloned().unwrap_or(json!({}));
        let m = meta(&mut new)?;
        for k in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            match cur_meta.get(k) {
                Some(v) => m.insert(k.into(), v.clone()),
                None => m.remove(k),
            };
        }
        if cur_meta.get("deletionTimestamp").is_some() {
            let old_f = finalizer_list(&current);
            let added = finalizer_list(&new).into_iter().any(|f| !old_f.contains(&f));
            if added {
                return Err(ApiError::new(
                    Reason::Forbidden,
                    "no new finalizers can be added if the object is being deleted".to_string(),
                ));
            }
        }
        let mut errs = self.normalize(def, &mut new, Some(&current), ctx)?;
        if let Some(b) = def.builtin {
            let uid = str_at(&current, "/metadata/uid").unwrap_or_default().to_string();
            builtin::apply_defaults(b, &mut new, &uid, &key.name);
            errs.extend(builtin::validate(b, &new));
        }
        errs.extend(Store::field_errors(def, &new, Some(&current), ctx));
        if !errs.is_empty() {
            return Err(ApiError::invalid(&def.group, &def.kind, &key.name, &errs));
        }
        if def.tracks_generation() && spec_part(&new) != spec_part(&current) {
            let g = current
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta(&mut new)?.insert("generation".into(), json!(g + 1));
        }
        if def.builtin == Some(Builtin::Crd) {
            crd::accept(self, &mut new)?;
        }
        let sub = if status_only { "status" } else { "" };
        self.set_managed(def, &mut new, Some(&current), ctx, sub);
        if comparable(&new) == comparable(&current) {
            return Ok(current);
        }
        if let Some(m) = new
            .pointer_mut("/metadata/managedFields")
            .and_then(Value::as_array_mut)
        {
            let op = if ctx.apply { "Apply" } else { "Update" };
            for e in m.iter_mut() {
                if str_at(e, "/manager") == Some(ctx.manager.as_str())
                    && str_at(e, "/operation") == Some(op)
                    && let Some(o) = e.as_object_mut()
                {
                    o.insert("time".into(), json!(now_rfc3339()));
                }
            }
        }
        check_stored_size(def, &new)?;
        let stored = self.put(key, new);
        self.finalize_if_done(key);
        Ok(stored)
    }
}

/// The `metadata.finalizers` of an object.
pub fn finalizer_list(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|f| f.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// The store key of the Namespace object `ns`.
fn namespace_key(ns: &str) -> ObjKey {
    ObjKey {
        tk: super::registry::TypeKey {
            group: String::new(),
            plural: "namespaces".into(),
        },
        ns: String::new(),
        name: ns.to_string(),
    }
}
