//! Patch bodies: JSON patch, JSON merge patch, strategic merge patch (keyed lists for the fields
//! the operator touches) and server-side apply (merge of the applied object into the live one,
//! keyed by the list-map keys Kubernetes declares).

use serde_json::{Map, Value};

use super::status::{ApiError, ApiResult, Reason};

/// The patch flavour, from the request's Content-Type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchKind {
    /// RFC 6902.
    Json,
    /// RFC 7386.
    Merge,
    /// Kubernetes strategic merge patch.
    Strategic,
    /// Server-side apply.
    Apply,
}

impl PatchKind {
    /// Maps a Content-Type (parameters ignored) to a patch kind.
    pub fn from_content_type(ct: &str) -> ApiResult<PatchKind> {
        let base = ct.split(';').next().unwrap_or_default().trim();
        match base {
            "application/json-patch+json" => Ok(PatchKind::Json),
            "application/merge-patch+json" => Ok(PatchKind::Merge),
            "application/strategic-merge-patch+json" => Ok(PatchKind::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(PatchKind::Apply),
            other => Err(ApiError::new(
                Reason::UnsupportedMediaType,
                format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml; got {other}"
                ),
            )),
        }
    }
}

/// The merge key of a built-in list field, as declared by `patchMergeKey` / list-map-keys.
fn builtin_key(field: &str, sample: &Value) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "containerStatuses"
        | "initContainerStatuses" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "ports" if sample.get("containerPort").is_some() => "containerPort",
        "ports" => "port",
        "conditions" => "type",
        "ownerReferences" => "uid",
        "hostAliases" => "ip",
        _ => return None,
    })
}

/// Whether a built-in list field is a set of scalars merged by union.
fn builtin_set(field: &str) -> bool {
    field == "finalizers"
}

/// Where list-merge rules come from.
#[derive(Clone, Copy)]
pub enum Rules<'a> {
    /// The built-in table of merge keys.
    Builtin,
    /// The custom resource's schema node (x-kubernetes-list-type / list-map-keys).
    Schema(Option<&'a Value>),
    /// RFC 7386: every list is replaced.
    None,
}

impl<'a> Rules<'a> {
    fn child(self, key: &str) -> Rules<'a> {
        match self {
            Rules::Schema(Some(s)) => Rules::Schema(
                s.get("properties")
                    .and_then(|p| p.get(key))
                    .or_else(|| s.get("additionalProperties").filter(|a| a.is_object())),
            ),
            Rules::Schema(None) => Rules::Schema(None),
            other => other,
        }
    }

    fn items(self) -> Rules<'a> {
        match self {
            Rules::Schema(Some(s)) => Rules::Schema(s.get("items")),
            other => other,
        }
    }

    /// (map keys, is set) for the list at this node.
    fn list_rule(self, field: &str, sample: &Value) -> (Vec<String>, bool) {
        match self {
            Rules::Builtin => (
                builtin_key(field, sample)
                    .map(|k| vec![k.to_string()])
                    .unwrap_or_default(),
                builtin_set(field),
            ),
            Rules::Schema(Some(s)) => {
                let t = s.get("x-kubernetes-list-type").and_then(Value::as_str);
                let keys = s
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(|k| k.as_str().map(str::to_string)).collect())
                    .unwrap_or_default();
                match t {
                    Some("map") => (keys, false),
                    Some("set") => (Vec::new(), true),
                    _ if field == "finalizers" => (Vec::new(), true),
                    _ => (Vec::new(), false),
                }
            }
            Rules::Schema(None) => (Vec::new(), field == "finalizers"),
            Rules::None => (Vec::new(), false),
        }
    }
}

/// Merges `patch` into `target`: null deletes, objects recurse, lists follow `rules`.
pub fn merge(target: &mut Value, patch: &Value, rules: Rules<'_>) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut clean = p.clone();
        clean.remove("$patch");
        *target = Value::Object(clean);
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Some(t) = target.as_object_mut() else { return };
    for (k, pv) in p {
        if k.starts_with('$') {
            continue;
        }
        if pv.is_null() {
            t.remove(k);
            continue;
        }
        let sub = rules.child(k);
        match (t.get_mut(k), pv) {
            (Some(tv @ Value::Object(_)), Value::Object(_)) => merge(tv, pv, sub),
            (Some(Value::Array(ta)), Value::Array(pa)) => merge_list(ta, pa, k, sub),
            (_, _) => {
                let mut fresh = Value::Null;
                merge_fresh(&mut fresh, pv);
                t.insert(k.clone(), fresh);
            }
        }
    }
}

/// Copies a patch value into a new place, dropping nulls and directives.
fn merge_fresh(target: &mut Value, pv: &Value) {
    match pv {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                if v.is_null() || k.starts_with('$') {
                    continue;
                }
                let mut x = Value::Null;
                merge_fresh(&mut x, v);
                out.insert(k.clone(), x);
            }
            *target = Value::Object(out);
        }
        Value::Array(a) => {
            *target = Value::Array(
                a.iter()
                    .filter(|v| v.get("$patch").and_then(Value::as_str) != Some("delete"))
                    .map(|v| {
                        let mut x = Value::Null;
                        merge_fresh(&mut x, v);
                        x
                    })
                    .collect(),
            )
        }
        other => *target = other.clone(),
    }
}

fn merge_list(ta: &mut Vec<Value>, pa: &[Value], field: &str, rules: Rules<'_>) {
    let sample = pa.first().or(ta.first()).cloned().unwrap_or(Value::Null);
    let (keys, set) = rules.list_rule(field, &sample);
    if set {
        for v in pa {
            if !ta.contains(v) {
                ta.push(v.clone());
            }
        }
        return;
    }
    if keys.is_empty() || !pa.iter().all(Value::is_object) {
        let mut fresh = Value::Null;
        merge_fresh(&mut fresh, &Value::Array(pa.to_vec()));
        if let Value::Array(a) = fresh {
            *ta = a;
        }
        return;
    }
    let same = |a: &Value, b: &Value| keys.iter().all(|k| a.get(k) == b.get(k));
    for pv in pa {
        let delete = pv.get("$patch").and_then(Value::as_str) == Some("delete");
        match ta.iter().position(|tv| same(tv, pv)) {
            Some(i) if delete => {
                ta.remove(i);
            }
            Some(i) => merge(&mut ta[i], pv, rules.items()),
            None if delete => {}
            None => {
                let mut fresh = Value::Null;
                merge_fresh(&mut fresh, pv);
                ta.push(fresh);
            }
        }
    }
}

/// Applies an RFC 6902 patch body to `target`.
pub fn json_patch(target: &mut Value, body: &[u8]) -> ApiResult<()> {
    let p: json_patch::Patch = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
    json_patch::patch(target, &p).map_err(|e| {
        ApiError::new(
            Reason::Invalid,
            format!("the server rejected our request due to an error in our request: {e}"),
        )
        .with_code(422)
    })
}

/// Parses an apply body (YAML or JSON).
pub fn parse_apply(body: &[u8]) -> ApiResult<Value> {
    serde_yaml::from_slice::<Value>(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_merges_containers_by_name() {
        let mut t =
            json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}});
        merge(
            &mut t,
            &json!({"spec": {"containers": [{"name": "b", "image": "z"}]}}),
            Rules::Builtin,
        );
        assert_eq!(t.pointer("/spec/containers/1/image"), Some(&json!("z")));
        assert_eq!(t.pointer("/spec/containers/0/image"), Some(&json!("x")));
        merge(
            &mut t,
            &json!({"spec": {"containers": [{"name": "b", "image": "z"}]}}),
            Rules::None,
        );
        assert_eq!(
            t.pointer("/spec/containers")
                .and_then(Value::as_array)
                .map(Vec::len),
            Some(1)
        );
    }
}
