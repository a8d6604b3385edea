//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, `exists`, `!exists`) and field selectors.

use serde_json::Value;

use super::status::ApiError;

/// One parsed label requirement.
#[derive(Clone, Debug, PartialEq)]
enum Requirement {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector(Vec<Requirement>);

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn parse_set(rest: &str) -> Option<Vec<String>> {
    let inner = rest.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
    )
}

impl LabelSelector {
    /// Parses the `labelSelector` query parameter.
    pub fn parse(s: &str) -> Result<LabelSelector, ApiError> {
        let mut reqs = Vec::new();
        for part in split_top(s).into_iter().map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || ApiError::bad_request(format!("unable to parse requirement: {part}"));
            let req = if let Some(key) = part.strip_prefix('!') {
                Requirement::NotExists(key.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==") {
                Requirement::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                Requirement::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                Requirement::NotIn(k.trim().into(), parse_set(rest).ok_or_else(bad)?)
            } else if let Some((k, rest)) = part.split_once(" in ") {
                Requirement::In(k.trim().into(), parse_set(rest).ok_or_else(bad)?)
            } else if part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
            {
                Requirement::Exists(part.to_string())
            } else {
                return Err(bad());
            };
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether an object's labels satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Eq(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEq(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector: `path=value`, `path==value` or `path!=value` terms.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses the `fieldSelector` parameter, rejecting paths the type does not support.
    pub fn parse(s: &str, supported: &[String]) -> Result<FieldSelector, ApiError> {
        let mut terms = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, eq, v) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            let k = k.trim();
            let known = k == "metadata.name" || k == "metadata.namespace" || supported.iter().any(|f| f == k);
            if !known {
                return Err(ApiError::bad_request(format!("field label not supported: {k}")));
            }
            terms.push((k.to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector(terms))
    }

    /// The same selector with each field path rewritten, for a type served in another form
    /// than it is stored in.
    pub fn map_paths(self, f: impl Fn(&str) -> String) -> FieldSelector {
        FieldSelector(self.0.into_iter().map(|(p, eq, v)| (f(&p), eq, v)).collect())
    }

    /// Whether the object satisfies every term (a missing field reads as "").
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, want)| {
            let mut cur = Some(obj);
            for seg in field_path(path).split('.') {
                cur = cur.and_then(|c| c.get(seg));
            }
            let got = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (got == *want) == *eq
        })
    }
}

/// Where a field label's value lives in the object, for labels that are not plain paths: a
/// core/v1 Event's `source` is its `source.component`, as the API server's selectable fields say.
fn field_path(label: &str) -> &str {
    match label {
        "source" => "source.component",
        other => other,
    }
}

/// Both selectors of a list or watch request.
#[derive(Clone, Debug, Default)]
pub struct Selectors {
    /// The label selector.
    pub labels: LabelSelector,
    /// The field selector.
    pub fields: FieldSelector,
}

impl Selectors {
    /// Whether the object passes both selectors.
    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_operators() {
        let o = json!({"metadata": {"labels": {"app": "x", "tier": "web"}}});
        let t = |s: &str| LabelSelector::parse(s).map(|l| l.matches(&o)).unwrap_or(false);
        assert!(t("app=x"));
        assert!(t("app==x,tier"));
        assert!(!t("app!=x"));
        assert!(t("tier in (web, db)"));
        assert!(!t("tier notin (web)"));
        assert!(t("!missing"));
        assert!(!t("missing"));
        assert!(t("missing notin (a)"));
    }

    #[test]
    fn field_selector_on_core_events() {
        let ev = json!({"involvedObject": {"kind": "Job", "name": "j"}, "reason": "FailedCreate",
            "type": "Warning", "source": {"component": "job-controller"}});
        let supported: Vec<String> = [
            "involvedObject.kind",
            "involvedObject.name",
            "reason",
            "type",
            "source",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let t = |s: &str| FieldSelector::parse(s, &supported).unwrap().matches(&ev);
        assert!(t(
            "involvedObject.kind=Job,involvedObject.name==j,reason=FailedCreate"
        ));
        assert!(t("source=job-controller,type!=Normal"));
        assert!(!t("involvedObject.name=other"));
        assert!(!t("source!=job-controller"));
        assert!(FieldSelector::parse("involvedObject.bogus=x", &supported).is_err());
    }
}
