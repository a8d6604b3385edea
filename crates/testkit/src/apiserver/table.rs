//! `meta.k8s.io/v1` Table responses for kubectl: the CRD's printer columns (with a small
//! JSONPath evaluator) or a few built-in column sets.

use std::sync::Arc;

use serde_json::{Value, json};

use super::registry::{Builtin, ResourceDef};

/// A human age like kubectl prints it (`5s`, `3m2s`, `10m`, `2h5m`, `3d`).
pub fn human_age(ts: &str) -> String {
    let Ok(t) = ts.parse::<jiff::Timestamp>() else {
        return "<unknown>".into();
    };
    let secs = (jiff::Timestamp::now().as_second() - t.as_second()).max(0);
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86400);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 600 => format!("{m}m{}s", s % 60),
        s if s < 3 * 3600 => format!("{m}m"),
        s if s < 8 * 3600 => format!("{h}h{}m", m % 60),
        s if s < 2 * 86400 => format!("{h}h"),
        _ => format!("{d}d"),
    }
}

/// Evaluates the JSONPath subset printer columns use: `.a.b`, `[0]`, `[*]`, `[?(@.k=="v")]`.
pub fn jsonpath(obj: &Value, path: &str) -> Vec<Value> {
    let mut cur = vec![obj.clone()];
    let p = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('$');
    let mut rest = p;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let key = &r[..end];
            cur = cur.iter().filter_map(|v| v.get(key).cloned()).collect();
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let Some(end) = r.find(']') else { return Vec::new() };
            let inner = &r[..end];
            rest = &r[end + 1..];
            cur = if inner == "*" {
                cur.iter()
                    .flat_map(|v| v.as_array().cloned().unwrap_or_default())
                    .collect()
            } else if let Ok(i) = inner.parse::<usize>() {
                cur.iter().filter_map(|v| v.get(i).cloned()).collect()
            } else if let Some(f) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (k, want) = f.split_once("==").unwrap_or((f, ""));
                let want = want.trim().trim_matches('"').trim_matches('\'');
                cur.iter()
                    .flat_map(|v| v.as_array().cloned().unwrap_or_default())
                    .filter(|e| {
                        e.get(k.trim())
                            .map(|x| x.as_str().map(str::to_string).unwrap_or(x.to_string()))
                            == Some(want.to_string())
                    })
                    .collect()
            } else {
                return Vec::new();
            };
        } else {
            return Vec::new();
        }
    }
    cur
}

fn column(name: &str, ty: &str, format: &str, priority: i64) -> Value {
    json!({"name": name, "type": ty, "format": format, "description": "", "priority": priority})
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

fn builtin_columns(b: Option<Builtin>) -> Vec<Value> {
    match b {
        Some(Builtin::Pod) => vec![
            column("Name", "string", "name", 0),
            column("Ready", "string", "", 0),
            column("Status", "string", "", 0),
            column("Restarts", "string", "", 0),
            column("Age", "string", "", 0),
        ],
        Some(Builtin::Job) => vec![
            column("Name", "string", "name", 0),
            column("Status", "string", "", 0),
            column("Completions", "string", "", 0),
            column("Age", "string", "", 0),
        ],
        Some(Builtin::Namespace) => vec![
            column("Name", "string", "name", 0),
            column("Status", "string", "", 0),
            column("Age", "string", "", 0),
        ],
        // Both Event resources render the stored core form (see `event_alias`).
        Some(Builtin::CoreEvent | Builtin::Event) => vec![
            column("Last Seen", "string", "", 0),
            column("Type", "string", "", 0),
            column("Reason", "string", "", 0),
            column("Object", "string", "", 0),
            column("Source", "string", "", 1),
            column("Message", "string", "", 0),
            column("Count", "string", "", 1),
            column("Name", "string", "name", 1),
        ],
        _ => vec![
            column("Name", "string", "name", 0),
            column("Age", "string", "", 0),
        ],
    }
}

/// The cells of a stored (core v1) Event, as the real server's event printer fills them.
fn event_cells(o: &Value) -> Vec<Value> {
    let last_seen = [
        "/series/lastObservedTime",
        "/lastTimestamp",
        "/eventTime",
        "/metadata/creationTimestamp",
    ]
    .iter()
    .map(|p| s(o, p))
    .find(|t| !t.is_empty())
    .unwrap_or_default();
    let object = format!(
        "{}/{}",
        s(o, "/involvedObject/kind").to_ascii_lowercase(),
        s(o, "/involvedObject/name")
    );
    let source = match s(o, "/source/component") {
        "" => s(o, "/reportingComponent"),
        c => c,
    };
    let count = o
        .pointer("/series/count")
        .or_else(|| o.pointer("/count"))
        .and_then(Value::as_i64)
        .unwrap_or(1);
    vec![
        json!(human_age(last_seen)),
        json!(s(o, "/type")),
        json!(s(o, "/reason")),
        json!(object),
        json!(source),
        json!(s(o, "/message")),
        json!(count.to_string()),
        json!(s(o, "/metadata/name")),
    ]
}

fn builtin_cells(b: Option<Builtin>, o: &Value) -> Vec<Value> {
    let name = json!(s(o, "/metadata/name"));
    let age = json!(human_age(s(o, "/metadata/creationTimestamp")));
    match b {
        Some(Builtin::Pod) => {
            let total = o
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let statuses = o
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let ready = statuses
                .iter()
                .filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true))
                .count();
            let restarts: i64 = statuses
                .iter()
                .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                .sum();
            let phase = if o.pointer("/metadata/deletionTimestamp").is_some() {
                "Terminating"
            } else {
                s(o, "/status/phase")
            };
            vec![
                name,
                json!(format!("{ready}/{total}")),
                json!(phase),
                json!(restarts.to_string()),
                age,
            ]
        }
        Some(Builtin::Job) => {
            let done = o
                .pointer("/status/succeeded")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let want = o
                .pointer("/spec/completions")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let status = o
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|cs| {
                    cs.iter()
                        .find(|c| s(c, "/status") == "True")
                        .map(|c| s(c, "/type").to_string())
                })
                .unwrap_or_else(|| "Running".to_string());
            vec![name, json!(status), json!(format!("{done}/{want}")), age]
        }
        Some(Builtin::Namespace) => vec![name, json!(s(o, "/status/phase")), age],
        Some(Builtin::CoreEvent | Builtin::Event) => event_cells(o),
        _ => vec![name, age],
    }
}

fn cr_cell(col: &Value, o: &Value) -> Value {
    let path = s(col, "/jsonPath");
    let ty = s(col, "/type");
    match jsonpath(o, path).into_iter().next() {
        None => Value::Null,
        Some(v) if ty == "date" => json!(human_age(v.as_str().unwrap_or_default())),
        Some(Value::String(x)) => json!(x),
        Some(v) if ty == "string" => json!(v.to_string()),
        Some(v) => v,
    }
}

/// A Table of `objs`; column definitions only when `with_columns` (watch events after the first omit them).
pub fn table(
    def: &ResourceDef,
    objs: &[Arc<Value>],
    rv: Option<u64>,
    cont: Option<String>,
    with_columns: bool,
) -> Value {
    let cr_columns = def.builtin.is_none();
    let columns: Vec<Value> = if cr_columns {
        let mut c = vec![column("Name", "string", "name", 0)];
        c.extend(def.printer_columns.iter().map(|p| {
            column(
                s(p, "/name"),
                s(p, "/type"),
                s(p, "/format"),
                p.get("priority").and_then(Value::as_i64).unwrap_or(0),
            )
        }));
        if def.printer_columns.is_empty() {
            c.push(column("Age", "date", "", 0));
        }
        c
    } else {
        builtin_columns(def.builtin)
    };
    let rows: Vec<Value> = objs
        .iter()
        .map(|o| {
            let cells = if cr_columns {
                let mut c = vec![json!(s(o, "/metadata/name"))];
                c.extend(def.printer_columns.iter().map(|p| cr_cell(p, o)));
                if def.printer_columns.is_empty() {
                    c.push(json!(human_age(s(o, "/metadata/creationTimestamp"))));
                }
                c
            } else {
                builtin_cells(def.builtin, o)
            };
            let mut meta = o.get("metadata").cloned().unwrap_or(json!({}));
            if let Some(m) = meta.as_object_mut() {
                m.remove("managedFields");
            }
            json!({"cells": cells, "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}})
        })
        .collect();
    let mut meta = json!({});
    if let Some(m) = meta.as_object_mut() {
        if let Some(rv) = rv {
            m.insert("resourceVersion".into(), json!(rv.to_string()));
        }
        if let Some(c) = cont {
            m.insert("continue".into(), json!(c));
        }
    }
    let mut t = json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "rows": rows});
    if with_columns && let Some(m) = t.as_object_mut() {
        m.insert("columnDefinitions".into(), Value::Array(columns));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonpath_filter() {
        let o = json!({"status": {"conditions": [{"type": "A", "status": "x"}, {"type": "Ready", "status": "True"}]}});
        assert_eq!(
            jsonpath(&o, r#".status.conditions[?(@.type=="Ready")].status"#),
            vec![json!("True")]
        );
        assert_eq!(jsonpath(&o, ".status.conditions[0].type"), vec![json!("A")]);
    }
}
