//! The fields a server-side apply sets, and the removal of those a manager stops applying.
//!
//! The real server records each manager's applied fields in `managedFields[].fieldsV1` and, when
//! the manager applies again without a field it applied before, removes that field unless
//! another manager owns it (structured-merge-diff `merge/update.go`, `Updater.Apply` →
//! `prune`, which drops "fields that were previously applied but are no longer in the applied
//! config"; apimachinery `pkg/util/managedfields`). A controller relies on this to clear an
//! optional status field by leaving it out of its next apply.
//!
//! The set is kept in the real `fieldsV1` shape (`{"f:status": {"f:schedule": {"f:active": {}}}}`)
//! with one simplification: a list is one leaf (the real set goes into `listType=map` items by
//! key), so a list stops being applied or is applied whole.

use serde_json::{Map, Value};

/// Paths the server owns or sets itself; an apply never owns them.
const SERVER_FIELDS: [&str; 8] = [
    "apiVersion",
    "kind",
    "metadata.name",
    "metadata.namespace",
    "metadata.resourceVersion",
    "metadata.managedFields",
    "metadata.uid",
    "metadata.creationTimestamp",
];

/// The `fieldsV1` set of an applied configuration; on the status subresource only `status`
/// counts, on the main resource everything but `status` (the other endpoint's part is ignored).
pub fn of(applied: &Value, status_only: bool, has_status: bool) -> Value {
    let mut set = Map::new();
    if let Some(root) = applied.as_object() {
        for (k, v) in root {
            let counts = match (status_only, has_status) {
                (true, _) => k == "status",
                (false, true) => k != "status",
                (false, false) => true,
            };
            if counts && !SERVER_FIELDS.contains(&k.as_str()) {
                set.insert(format!("f:{k}"), node(v, k));
            }
        }
    }
    Value::Object(set)
}

fn node(v: &Value, path: &str) -> Value {
    match v.as_object() {
        Some(m) if !m.is_empty() => {
            let mut out = Map::new();
            out.insert(".".into(), Value::Object(Map::new()));
            for (k, child) in m {
                let p = format!("{path}.{k}");
                if !SERVER_FIELDS.contains(&p.as_str()) {
                    out.insert(format!("f:{k}"), node(child, &p));
                }
            }
            Value::Object(out)
        }
        _ => Value::Object(Map::new()),
    }
}

/// The leaf paths of a set, as key lists.
fn leaves(set: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let Some(m) = set.as_object() else { return };
    let children: Vec<(&String, &Value)> = m.iter().filter(|(k, _)| k.starts_with("f:")).collect();
    if children.is_empty() {
        if !prefix.is_empty() {
            out.push(prefix.clone());
        }
        return;
    }
    for (k, child) in children {
        prefix.push(k["f:".len()..].to_owned());
        leaves(child, prefix, out);
        prefix.pop();
    }
}

fn contains(set: &Value, path: &[String]) -> bool {
    let mut cur = set;
    for k in path {
        match cur.get(format!("f:{k}")) {
            Some(next) => cur = next,
            None => return false,
        }
    }
    true
}

/// Removes from `doc` what `before` (the manager's last applied set) had and `now` has not,
/// unless one of `others` (other managers' sets) owns it.
pub fn prune(doc: &mut Value, before: &Value, now: &Value, others: &[&Value]) {
    let mut gone = Vec::new();
    leaves(before, &mut Vec::new(), &mut gone);
    for path in gone {
        // A field still applied at or below this path keeps it; so does another owner.
        if contains(now, &path) || others.iter().any(|o| contains(o, &path)) {
            continue;
        }
        remove(doc, &path);
    }
    // A map the manager applied itself (its `.` member) and applies no longer goes whole once
    // nothing else keeps a field in it (structured-merge-diff owns the map, not just its
    // leaves); deepest first, so a parent emptied by its children goes too.
    let mut maps = Vec::new();
    members(before, &mut Vec::new(), &mut maps);
    maps.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for path in maps {
        if contains(now, &path) || others.iter().any(|o| contains(o, &path)) {
            continue;
        }
        remove_if_empty(doc, &path);
    }
}

/// The paths of the maps a set owns as such (a `.` member).
fn members(set: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let Some(m) = set.as_object() else { return };
    for (k, child) in m.iter().filter(|(k, _)| k.starts_with("f:")) {
        prefix.push(k["f:".len()..].to_owned());
        if child.get(".").is_some() {
            out.push(prefix.clone());
        }
        members(child, prefix, out);
        prefix.pop();
    }
}

/// Removes the map at `path` of `doc` if it is empty.
fn remove_if_empty(doc: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = doc;
    for k in parents {
        match cur.get_mut(k) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(m) = cur.as_object_mut()
        && m.get(last).and_then(Value::as_object).is_some_and(Map::is_empty)
    {
        m.remove(last);
    }
}

fn remove(doc: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = doc;
    for k in parents {
        match cur.get_mut(k) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(m) = cur.as_object_mut() {
        m.remove(last);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_field_no_longer_applied_is_removed_unless_another_manager_owns_it() {
        let first = json!({"status": {"schedule": {"active": "a", "nextChange": "t1"}, "n": 1}});
        let second = json!({"status": {"schedule": {"nextChange": "t2"}, "n": 2}});
        let before = of(&first, true, true);
        let now = of(&second, true, true);
        let mut doc = json!({"spec": {"x": 1}, "status": {"schedule": {"active": "a", "nextChange": "t2"}, "n": 2, "other": 3}});
        prune(&mut doc, &before, &now, &[]);
        assert_eq!(
            doc,
            json!({"spec": {"x": 1}, "status": {"schedule": {"nextChange": "t2"}, "n": 2, "other": 3}})
        );
        let mut kept = json!({"status": {"schedule": {"active": "a"}}});
        let theirs = json!({"f:status": {"f:schedule": {"f:active": {}}}});
        prune(&mut kept, &before, &now, &[&theirs]);
        assert_eq!(kept.pointer("/status/schedule/active"), Some(&json!("a")));
    }

    /// structured-merge-diff owns an applied map itself (the `.` member): a map the manager stops
    /// applying goes whole, not as an empty `{}` its schema may refuse (a status struct whose
    /// fields are required).
    #[test]
    fn a_map_no_longer_applied_goes_whole_unless_something_else_keeps_it() {
        let first = json!({"status": {"cache": {"url": "u", "size": "1Gi"}, "n": 1}});
        let second = json!({"status": {"n": 2}});
        let before = of(&first, true, true);
        let now = of(&second, true, true);
        let mut doc = json!({"status": {"cache": {"url": "u", "size": "1Gi"}, "n": 2}});
        prune(&mut doc, &before, &now, &[]);
        assert_eq!(doc, json!({"status": {"n": 2}}));
        // Another manager's field keeps the map (and that field).
        let mut kept = json!({"status": {"cache": {"url": "u", "size": "1Gi", "note": "x"}, "n": 2}});
        let theirs = json!({"f:status": {"f:cache": {"f:note": {}}}});
        prune(&mut kept, &before, &now, &[&theirs]);
        assert_eq!(kept, json!({"status": {"cache": {"note": "x"}, "n": 2}}));
        // A map still applied stays, even when emptied of what it had.
        let emptied = of(&json!({"status": {"cache": {"url": "u"}, "n": 2}}), true, true);
        let mut still = json!({"status": {"cache": {"url": "u", "size": "1Gi"}, "n": 2}});
        prune(&mut still, &before, &emptied, &[]);
        assert_eq!(still, json!({"status": {"cache": {"url": "u"}, "n": 2}}));
    }

    #[test]
    fn the_other_endpoint_s_part_and_server_fields_are_not_owned() {
        let applied = json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "n", "labels": {"a": "b"}},
            "spec": {"x": 1}, "status": {"y": 2}});
        let main = of(&applied, false, true);
        assert!(main.get("f:status").is_none() && main.get("f:apiVersion").is_none());
        assert!(main.pointer("/f:metadata/f:labels/f:a").is_some());
        assert!(main.pointer("/f:metadata/f:name").is_none());
        let status = of(&applied, true, true);
        assert_eq!(status, json!({"f:status": {".": {}, "f:y": {}}}));
    }
}
