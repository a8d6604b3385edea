//! One Event resource served in two API groups, as a real API server does: core `v1` `events`
//! and `events.k8s.io/v1` `events` share one store, kept in the core v1 form, and each request
//! through `events.k8s.io` is converted on the way in and out.
//!
//! The field mapping follows Kubernetes' `pkg/apis/events/v1` conversion
//! (`Convert_v1_Event_To_core_Event` and back): `regarding` ↔ `involvedObject`, `note` ↔
//! `message`, `deprecatedSource` ↔ `source`, `deprecated{Count,FirstTimestamp,LastTimestamp}` ↔
//! `count`/`firstTimestamp`/`lastTimestamp`, and `reportingController` ↔ core's
//! `reportingComponent` (the Go field is `ReportingController` in both). `reportingInstance`,
//! `eventTime`, `series`, `action`, `reason`, `type` and `related` keep their names.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::registry::{Builtin, Registry, ResourceDef, TypeKey};

/// `(core v1 name, events.k8s.io/v1 name)` of every top-level field whose name differs.
const RENAMED: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("count", "deprecatedCount"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("reportingComponent", "reportingController"),
];

/// The API version of the stored (core) form.
const CORE_API_VERSION: &str = "v1";
/// The API version of the aliased form.
const EVENTS_API_VERSION: &str = "events.k8s.io/v1";

/// Whether `def` is the `events.k8s.io` view of the shared Event store.
pub fn is_alias(def: &ResourceDef) -> bool {
    def.builtin == Some(Builtin::Event)
}

/// Where both Event resources keep their objects: the core group's table.
pub fn storage_key() -> TypeKey {
    TypeKey {
        group: String::new(),
        plural: "events".into(),
    }
}

/// The definition writes go through (validation, pruning, defaults): core v1 Event for the
/// alias, `def` itself otherwise.
pub fn storage_def(registry: &Registry, def: &Arc<ResourceDef>) -> Arc<ResourceDef> {
    if is_alias(def) {
        registry.get("", "v1", "events").unwrap_or_else(|| def.clone())
    } else {
        def.clone()
    }
}

/// A request body in the served form, turned into the stored form (identity unless alias).
pub fn inbound(def: &ResourceDef, obj: Value) -> Value {
    if is_alias(def) { to_core(obj) } else { obj }
}

/// A stored object as the alias serves it (borrowed unless `def` is the alias).
pub fn outbound<'a>(def: &ResourceDef, obj: &'a Value) -> Cow<'a, Value> {
    if is_alias(def) && obj.get("apiVersion").and_then(Value::as_str) != Some(EVENTS_API_VERSION) {
        Cow::Owned(to_events(obj.clone()))
    } else {
        Cow::Borrowed(obj)
    }
}

/// Where an `events.k8s.io` field-selector label lives in the stored core object.
pub fn storage_field(label: &str) -> Cow<'_, str> {
    for (core, events) in RENAMED {
        if label == *events {
            return Cow::Borrowed(core);
        }
        if let Some(rest) = label.strip_prefix(events).and_then(|r| r.strip_prefix('.')) {
            return Cow::Owned(format!("{core}.{rest}"));
        }
    }
    Cow::Borrowed(label)
}

fn rename(obj: Value, api_version: &str, from_core: bool) -> Value {
    let Value::Object(src) = obj else { return obj };
    let mut out = Map::with_capacity(src.len());
    for (k, v) in src {
        let renamed = RENAMED.iter().find_map(|(core, events)| {
            let (from, to) = if from_core { (core, events) } else { (events, core) };
            (k == *from).then_some(*to)
        });
        out.insert(renamed.map_or(k, str::to_string), v);
    }
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!("Event"));
    Value::Object(out)
}

/// An `events.k8s.io/v1` Event in the core v1 form.
pub fn to_core(obj: Value) -> Value {
    rename(obj, CORE_API_VERSION, false)
}

/// A core v1 Event in the `events.k8s.io/v1` form.
pub fn to_events(obj: Value) -> Value {
    rename(obj, EVENTS_API_VERSION, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events_v1() -> Value {
        json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "rg.1", "namespace": "ci"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "series": {"count": 3, "lastObservedTime": "2026-01-01T00:01:00.000000Z"},
            "reportingController": "forgerunner", "reportingInstance": "forgerunner-0",
            "action": "Scale", "reason": "ScaledUp", "type": "Normal", "note": "2 runners",
            "regarding": {"kind": "RunnerGroup", "name": "rg", "namespace": "ci", "uid": "u1"},
            "related": {"kind": "Job", "name": "j"},
            "deprecatedSource": {"component": "old", "host": "h"},
            "deprecatedCount": 4,
            "deprecatedFirstTimestamp": "2026-01-01T00:00:00Z",
            "deprecatedLastTimestamp": "2026-01-01T00:02:00Z",
        })
    }

    #[test]
    fn events_v1_maps_to_core_fields() {
        let core = to_core(events_v1());
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "rg");
        assert_eq!(core["message"], "2 runners");
        assert_eq!(core["reportingComponent"], "forgerunner");
        assert_eq!(core["reportingInstance"], "forgerunner-0");
        assert_eq!(core["source"]["host"], "h");
        assert_eq!(core["count"], 4);
        assert_eq!(core["firstTimestamp"], "2026-01-01T00:00:00Z");
        assert_eq!(core["lastTimestamp"], "2026-01-01T00:02:00Z");
        assert_eq!(core["series"]["count"], 3);
        assert_eq!(core["eventTime"], "2026-01-01T00:00:00.000000Z");
        for gone in [
            "regarding",
            "note",
            "reportingController",
            "deprecatedCount",
            "deprecatedSource",
        ] {
            assert!(core.get(gone).is_none(), "{gone} left in the core form");
        }
    }

    #[test]
    fn round_trip_is_lossless() {
        assert_eq!(to_events(to_core(events_v1())), events_v1());
    }

    #[test]
    fn core_event_served_through_the_alias() {
        let alias = Registry::with_builtins()
            .get("events.k8s.io", "v1", "events")
            .expect("alias registered");
        let core = json!({"apiVersion": "v1", "kind": "Event", "message": "m",
            "involvedObject": {"kind": "Pod", "name": "p"}, "count": 2});
        let served = outbound(&alias, &core);
        assert_eq!(served["apiVersion"], "events.k8s.io/v1");
        assert_eq!(served["note"], "m");
        assert_eq!(served["regarding"]["kind"], "Pod");
        assert_eq!(served["deprecatedCount"], 2);
    }

    #[test]
    fn both_resources_share_storage_and_writes_use_core() {
        let reg = Registry::with_builtins();
        let alias = reg.get("events.k8s.io", "v1", "events").expect("alias");
        let core = reg.get("", "v1", "events").expect("core");
        assert_eq!(alias.type_key(), core.type_key());
        assert_eq!(storage_def(&reg, &alias).api_version(), "v1");
        assert!(matches!(outbound(&core, &json!({"a": 1})), Cow::Borrowed(_)));
    }

    #[test]
    fn alias_field_labels_point_at_core_paths() {
        assert_eq!(storage_field("regarding.kind"), "involvedObject.kind");
        assert_eq!(storage_field("regarding.uid"), "involvedObject.uid");
        assert_eq!(storage_field("reportingController"), "reportingComponent");
        assert_eq!(storage_field("reason"), "reason");
        assert_eq!(storage_field("involvedObject.name"), "involvedObject.name");
        // A prefix that is not a whole segment is not renamed.
        assert_eq!(storage_field("noteworthy"), "noteworthy");
    }
}
