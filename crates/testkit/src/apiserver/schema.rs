//! Validation and pruning of custom resources against a CRD's structural openAPIV3Schema:
//! types, required, enum, minimum/maximum, length and item bounds, pattern, nullable,
//! additionalProperties and x-kubernetes-preserve-unknown-fields. CEL rules
//! (x-kubernetes-validations) run afterwards, in `cel`, unless an error here blocks them.
//!
//! Updates are ratcheted as the real server does since 1.30 (`CRDValidationRatcheting`, GA in
//! 1.33): errors under a node whose value equals the stored object's are dropped
//! (apiextensions-apiserver `pkg/apiserver/validation/ratcheting.go`,
//! `ratchetingValueValidator.Validate`). Nodes correlate with the stored object through object
//! properties; list items do not (the real server correlates only `listType=map` items, which
//! no schema served here relies on), so an item is ratcheted only with an unchanged list.

use serde_json::{Map, Value};

/// The result of validating one object.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Field errors as (path, message).
    pub errors: Vec<(String, String)>,
    /// Paths of pruned unknown fields.
    pub unknown: Vec<String>,
    /// An error the real server treats as blocking CEL: a wrong type, a missing required
    /// field, a value outside an enum, a string or list over its maximum size.
    pub blocking: bool,
}

/// Validates `obj` in place, pruning unknown fields. `apiVersion`, `kind` and `metadata`
/// are checked by the server itself, so the schema applies to the other top-level fields.
/// `old` is the stored object on an update: errors where nothing changed are ratcheted.
pub fn validate(schema: &Value, obj: &mut Value, old: Option<&Value>) -> Outcome {
    let mut out = Outcome::default();
    let Some(root) = obj.as_object_mut() else {
        out.errors.push((String::new(), "must be of type object".into()));
        return out;
    };
    let props = schema.get("properties").and_then(Value::as_object);
    let keys: Vec<String> = root.keys().cloned().collect();
    for k in keys {
        if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        match props.and_then(|p| p.get(&k)) {
            Some(sub) => {
                if let Some(v) = root.get_mut(&k) {
                    if v.is_null() && !nullable(sub) {
                        root.remove(&k);
                        continue;
                    }
                    walk(sub, v, old.and_then(|o| o.get(&k)), &k, &mut out);
                }
            }
            None if preserves(schema) => {}
            None => {
                root.remove(&k);
                out.unknown.push(k);
            }
        }
    }
    check_required(schema, root, "", &mut out);
    out
}

fn nullable(s: &Value) -> bool {
    s.get("nullable").and_then(Value::as_bool).unwrap_or(false)
}

fn preserves(s: &Value) -> bool {
    s.get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_ok(want: &str, v: &Value) -> bool {
    match want {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "number" => v.is_number(),
        "integer" => {
            v.as_i64().is_some() || v.as_u64().is_some() || v.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => true,
    }
}

fn check_required(s: &Value, obj: &Map<String, Value>, path: &str, out: &mut Outcome) {
    for r in s.get("required").and_then(Value::as_array).into_iter().flatten() {
        if let Some(r) = r.as_str()
            && obj.get(r).is_none_or(Value::is_null)
        {
            out.errors.push((join(path, r), "Required value".into()));
            out.blocking = true;
        }
    }
}

/// Validates `v` against `s`, or, where `v` is what the stored object holds at this path (`old`),
/// only prunes it: its errors are ratcheted.
fn walk(s: &Value, v: &mut Value, old: Option<&Value>, path: &str, out: &mut Outcome) {
    if old.is_some_and(|o| o == v) {
        let mut ratcheted = Outcome::default();
        check(s, v, None, path, &mut ratcheted);
        out.unknown.append(&mut ratcheted.unknown);
        return;
    }
    check(s, v, old, path, out);
}

fn check(s: &Value, v: &mut Value, old: Option<&Value>, path: &str, out: &mut Outcome) {
    if v.is_null() {
        if !nullable(s) {
            out.errors.push((
                path.into(),
                format!("Invalid value: \"null\": {path} in body must not be null"),
            ));
        }
        return;
    }
    let int_or_string = s
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if int_or_string {
        if !(v.is_string() || type_ok("integer", v)) {
            out.blocking = true;
            out.errors.push((
                path.into(),
                format!(
                    "Invalid value: \"{}\": must be an integer or a string",
                    type_name(v)
                ),
            ));
        }
        return;
    }
    if let Some(t) = s.get("type").and_then(Value::as_str)
        && !type_ok(t, v)
    {
        let got = type_name(v);
        out.blocking = true;
        out.errors.push((
            path.into(),
            format!("Invalid value: \"{got}\": {path} in body must be of type {t}: \"{got}\""),
        ));
        return;
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array)
        && !e.contains(v)
    {
        let allowed: Vec<String> = e.iter().map(Value::to_string).collect();
        out.blocking = true;
        out.errors.push((
            path.into(),
            format!("Unsupported value: {v}: supported values: {}", allowed.join(", ")),
        ));
    }
    check_bounds(s, v, path, out);
    match v {
        Value::Object(m) => walk_object(s, m, old, path, out),
        Value::Array(items) => {
            if let Some(item_schema) = s.get("items") {
                for (i, it) in items.iter_mut().enumerate() {
                    walk(item_schema, it, None, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

fn check_bounds(s: &Value, v: &Value, path: &str, out: &mut Outcome) {
    let num = |k: &str| s.get(k).and_then(Value::as_f64);
    if let Some(x) = v.as_f64() {
        if let Some(min) = num("minimum") {
            let excl = s
                .get("exclusiveMinimum")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            if x < min || (excl && x == min) {
                let op = if excl {
                    "greater than"
                } else {
                    "greater than or equal to"
                };
                out.errors.push((
                    path.into(),
                    format!("Invalid value: {v}: {path} in body should be {op} {min}"),
                ));
            }
        }
        if let Some(max) = num("maximum") {
            let excl = s
                .get("exclusiveMaximum")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            if x > max || (excl && x == max) {
                let op = if excl {
                    "less than"
                } else {
                    "less than or equal to"
                };
                out.errors.push((
                    path.into(),
                    format!("Invalid value: {v}: {path} in body should be {op} {max}"),
                ));
            }
        }
    }
    if let Some(text) = v.as_str() {
        let len = text.chars().count() as f64;
        if num("minLength").is_some_and(|m| len < m) {
            out.errors.push((
                path.into(),
                format!(
                    "Invalid value: {v}: {path} in body should be at least {} chars long",
                    num("minLength").unwrap_or(0.0)
                ),
            ));
        }
        if num("maxLength").is_some_and(|m| len > m) {
            out.blocking = true;
            out.errors.push((
                path.into(),
                format!(
                    "Too long: may not be more than {} bytes",
                    num("maxLength").unwrap_or(0.0)
                ),
            ));
        }
        if let Some(p) = s.get("pattern").and_then(Value::as_str)
            && let Ok(re) = regex::Regex::new(p)
            && !re.is_match(text)
        {
            out.errors.push((
                path.into(),
                format!("Invalid value: {v}: {path} in body should match '{p}'"),
            ));
        }
    }
    if let Some(a) = v.as_array() {
        let len = a.len() as f64;
        if num("minItems").is_some_and(|m| len < m) {
            out.errors.push((
                path.into(),
                format!(
                    "Invalid value: {len}: {path} in body should have at least {} items",
                    num("minItems").unwrap_or(0.0)
                ),
            ));
        }
        if num("maxItems").is_some_and(|m| len > m) {
            out.blocking = true;
            out.errors.push((
                path.into(),
                format!(
                    "Too many: {len}: must have at most {} items",
                    num("maxItems").unwrap_or(0.0)
                ),
            ));
        }
    }
}

fn walk_object(s: &Value, m: &mut Map<String, Value>, old: Option<&Value>, path: &str, out: &mut Outcome) {
    let props = s.get("properties").and_then(Value::as_object);
    let additional = s.get("additionalProperties");
    let keys: Vec<String> = m.keys().cloned().collect();
    for k in keys {
        let sub = props
            .and_then(|p| p.get(&k))
            .or(additional.filter(|a| a.is_object()));
        let p = join(path, &k);
        match sub {
            Some(sub) => {
                if m.get(&k).is_some_and(Value::is_null) && !nullable(sub) {
                    m.remove(&k);
                    continue;
                }
                if let Some(v) = m.get_mut(&k) {
                    walk(sub, v, old.and_then(|o| o.get(&k)), &p, out);
                }
            }
            None if preserves(s) || additional.and_then(Value::as_bool) == Some(true) => {}
            None if props.is_none() && additional.is_none() && s.get("type").is_none() => {}
            None => {
                m.remove(&k);
                out.unknown.push(p);
            }
        }
    }
    check_required(s, m, path, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prunes_and_reports() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "required": ["a"],
            "properties": {"a": {"type": "integer", "minimum": 1}, "e": {"type": "string", "enum": ["x"]}}}}});
        let mut obj = json!({"spec": {"a": 0, "e": "y", "junk": 1}});
        let out = validate(&schema, &mut obj, None);
        assert_eq!(out.unknown, vec!["spec.junk".to_string()]);
        assert_eq!(out.errors.len(), 2, "{:?}", out.errors);
        assert!(obj.pointer("/spec/junk").is_none());
    }
}
