//! CustomResourceDefinitions: checking a CRD, registering its served versions as resource types,
//! marking it Established, and dropping its objects when it goes away.

use serde_json::{Value, json};

use super::registry::{ResourceDef, TypeKey};
use super::status::{ApiError, ApiResult};
use super::store::{ObjKey, Store, now_rfc3339};

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// The resource types one CRD defines, one per served version.
pub fn defs_from_crd(crd: &Value) -> Vec<ResourceDef> {
    let name = s(crd, "/metadata/name").to_string();
    let group = s(crd, "/spec/group").to_string();
    let kind = s(crd, "/spec/names/kind").to_string();
    let plural = s(crd, "/spec/names/plural").to_string();
    let singular = match s(crd, "/spec/names/singular") {
        "" => kind.to_ascii_lowercase(),
        x => x.to_string(),
    };
    let namespaced = s(crd, "/spec/scope") != "Cluster";
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    versions
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(true))
        .map(|v| ResourceDef {
            group: group.clone(),
            version: s(v, "/name").to_string(),
            kind: kind.clone(),
            plural: plural.clone(),
            singular: singular.clone(),
            namespaced,
            status: v.pointer("/subresources/status").is_some(),
            short_names: strings(crd.pointer("/spec/names/shortNames")),
            categories: strings(crd.pointer("/spec/names/categories")),
            builtin: None,
            schema: v.pointer("/schema/openAPIV3Schema").cloned(),
            printer_columns: v
                .get("additionalPrinterColumns")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            field_selectors: v
                .get("selectableFields")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|f| f.get("jsonPath").and_then(Value::as_str))
                        .map(|p| p.trim_start_matches('.').to_string())
                        .collect()
                })
                .unwrap_or_default(),
            crd: Some(name.clone()),
        })
        .collect()
}

/// Checks a CRD, registers its types and sets its status to Established.
pub fn accept(store: &mut Store, crd: &mut Value) -> ApiResult<()> {
    let name = s(crd, "/metadata/name").to_string();
    let group = s(crd, "/spec/group");
    let plural = s(crd, "/spec/names/plural");
    let mut errs = Vec::new();
    if group.is_empty() {
        errs.push(("spec.group".to_string(), "Required value".to_string()));
    }
    if plural.is_empty() || s(crd, "/spec/names/kind").is_empty() {
        errs.push((
            "spec.names".to_string(),
            "Required value: plural and kind are required".to_string(),
        ));
    }
    if name != format!("{plural}.{group}") {
        errs.push((
            "metadata.name".to_string(),
            format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let storage: Vec<&Value> = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .collect();
    if storage.len() != 1 {
        errs.push((
            "spec.versions".to_string(),
            "Invalid value: must have exactly one version marked as storage version".to_string(),
        ));
    }
    // A real server type-checks rules at registration and refuses the CRD; this one at least
    // refuses rules that do not parse or name fields that do not exist.
    errs.extend(super::cel::check_crd(crd));
    // Schemas must be structural; only then are the rules' estimated costs looked at, as a
    // real server builds its CEL context only from a structural schema.
    let structural = super::crd_structural::check_crd(crd);
    if structural.is_empty() {
        errs.extend(super::cel_cost::check_crd(crd));
    }
    errs.extend(structural);
    if !errs.is_empty() {
        return Err(ApiError::invalid(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            &name,
            &errs,
        ));
    }
    let stored_version = storage
        .first()
        .map(|v| s(v, "/name").to_string())
        .unwrap_or_default();
    let now = now_rfc3339();
    let keep_time = |t: &str| -> Value {
        crd.pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| s(c, "/type") == t))
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(now))
    };
    let status = json!({
        "acceptedNames": crd.pointer("/spec/names").cloned().unwrap_or(json!({})),
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": keep_time("NamesAccepted")},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": keep_time("Established")},
        ],
        "storedVersions": [stored_version],
    });
    if let Some(o) = crd.as_object_mut() {
        o.insert("status".into(), status);
    }
    store.registry.remove_crd(&name);
    for def in defs_from_crd(crd) {
        store.registry.insert(def);
    }
    Ok(())
}

/// Drops every object of a removed CRD and stops serving its types.
pub fn on_removed(store: &mut Store, crd: &Value) {
    let name = s(crd, "/metadata/name").to_string();
    let tk = TypeKey {
        group: s(crd, "/spec/group").to_string(),
        plural: s(crd, "/spec/names/plural").to_string(),
    };
    let keys: Vec<ObjKey> = store.drop_type(&tk);
    for k in keys {
        store.remove(&k);
    }
    store.registry.remove_crd(&name);
}
