//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, `exists`, `!exists`, `gt`, `lt`; parsed and
//! validated in `label_parse`) and field selectors.

use serde_json::Value;

use super::label_parse::{self, Op, Requirement};
use super::status::ApiError;

/// A parsed label selector; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    /// Parses the `labelSelector` query parameter; a malformed selector, a bad key or a value
    /// that is not a valid label value is a 400 with the real parser's message.
    pub fn parse(s: &str) -> Result<LabelSelector, ApiError> {
        label_parse::parse(s)
            .map(LabelSelector)
            .map_err(ApiError::bad_request)
    }

    /// Whether an object's labels satisfy every requirement (`Requirement.Matches`).
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| {
            let has = |x: &str| r.values.iter().any(|v| v == x);
            match r.op {
                Op::Equals | Op::DoubleEquals | Op::In => get(&r.key).is_some_and(has),
                Op::NotEquals | Op::NotIn => get(&r.key).is_none_or(|x| !has(x)),
                Op::Exists => get(&r.key).is_some(),
                Op::DoesNotExist => get(&r.key).is_none(),
                Op::GreaterThan | Op::LessThan => {
                    let have = get(&r.key).and_then(|x| x.parse::<i64>().ok());
                    let want = r.values.first().and_then(|x| x.parse::<i64>().ok());
                    match (have, want) {
                        (Some(h), Some(w)) if r.op == Op::GreaterThan => h > w,
                        (Some(h), Some(w)) => h < w,
                        _ => false,
                    }
                }
            }
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
        let n = json!({"metadata": {"labels": {"n": "5", "s": "x"}}});
        let t = |s: &str| LabelSelector::parse(s).map(|l| l.matches(&n)).unwrap_or(false);
        assert!(t("n>4") && t("n<6") && !t("n>5") && !t("s>1") && !t("missing<1"));
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
