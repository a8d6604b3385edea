//! The `fieldPath` of an `x-kubernetes-validations` rule: parsing it (`.a.b`, `['a.b']`),
//! checking it names a field of the rule's schema node, and the field an error is reported at.

use serde_json::Value;

/// The schema type a failed rule's `Invalid value: "<type>"` shows (empty for int-or-string).
pub fn node_type(schema: &Value) -> &str {
    schema.get("type").and_then(Value::as_str).unwrap_or_default()
}

/// The property names of a fieldPath, or why it does not parse.
fn segments(fp: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut rest = fp;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let name = &r[..end];
            if name.is_empty() {
                return Err("fieldPath must be a valid path: empty field name".into());
            }
            out.push(name.to_string());
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix("['").or_else(|| rest.strip_prefix("[\"")) {
            let quote = if rest.as_bytes().get(1) == Some(&b'\'') {
                "']"
            } else {
                "\"]"
            };
            let end = r
                .find(quote)
                .ok_or_else(|| "fieldPath must be a valid path: unclosed subscript".to_string())?;
            out.push(r[..end].to_string());
            rest = &r[end + 2..];
        } else {
            return Err("fieldPath must be a valid path: expected '.' or '['".into());
        }
    }
    Ok(out)
}

/// Whether `fp` names a field under `schema` (a map's keys are any name).
pub fn check_field_path(schema: &Value, fp: &str) -> Result<(), String> {
    let mut node = schema;
    for seg in segments(fp)? {
        node = match node.get("properties").and_then(|p| p.get(&seg)) {
            Some(sub) => sub,
            None => match node.get("additionalProperties").filter(|a| a.is_object()) {
                Some(sub) => sub,
                None => {
                    return Err("fieldPath must be a valid path: does not refer to a valid field".into());
                }
            },
        };
    }
    Ok(())
}

/// The field a failed rule is reported at: the node's path extended by the rule's fieldPath.
/// `None` when the rule has no (usable) fieldPath.
pub fn target_path(node: &str, fp: Option<&str>) -> Option<String> {
    let segs = segments(fp?).ok()?;
    let mut path = node.to_string();
    for s in segs {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(&s);
    }
    Some(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_parse_and_join() {
        assert_eq!(
            target_path("spec", Some(".github")).as_deref(),
            Some("spec.github")
        );
        assert_eq!(target_path("", Some(".spec.a")).as_deref(), Some("spec.a"));
        assert_eq!(target_path("spec", Some("['a.b']")).as_deref(), Some("spec.a.b"));
        assert_eq!(target_path("spec", Some("github")), None);
        let schema =
            json!({"properties": {"a": {"properties": {"b": {}}}, "m": {"additionalProperties": {}}}});
        assert!(check_field_path(&schema, ".a.b").is_ok());
        assert!(check_field_path(&schema, ".m['any key']").is_ok());
        assert!(check_field_path(&schema, ".a.c").is_err());
        assert!(check_field_path(&schema, "a").is_err());
    }
}
