//! Validation of Events, both APIs: Kubernetes v1.35 `pkg/apis/core/validation/events.go`
//! (`ValidateEventCreate`, `ValidateEventUpdate`, `legacyValidateEvent`,
//! `validateV1EventSeries`), as the event registry strategy calls them with the group of the
//! request. Events are stored in the core form (see `event_alias`), so every check reads core
//! field names; the messages use the field names upstream uses (`message`, not `note`).
//!
//! Core v1 writes only get the legacy checks; those only look at the note, reason and
//! reporting fields of "new" Events, the ones with an `eventTime`. Writes through
//! `events.k8s.io` also need `eventTime`, a valid `type`, no deprecated fields, a sane
//! `series`, and on update leave everything but `series` (and metadata) unchanged.

use serde_json::Value;

use super::field::{self, FieldError};
use super::naming;

/// `ReportingInstanceLengthLimit`.
const REPORTING_INSTANCE_LIMIT: usize = 128;
/// `ActionLengthLimit`.
const ACTION_LIMIT: usize = 128;
/// `ReasonLengthLimit`.
const REASON_LIMIT: usize = 128;
/// `NoteLengthLimit`, in bytes (`len` of a Go string).
pub const NOTE_LIMIT: usize = 1024;

fn text<'a>(ev: &'a Value, ptr: &str) -> &'a str {
    ev.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

/// A time field is unset when absent or null (Go's zero time).
fn is_set(ev: &Value, ptr: &str) -> bool {
    ev.pointer(ptr).is_some_and(|v| !v.is_null())
}

fn at_most(errs: &mut Vec<FieldError>, path: &str, value: &str, limit: usize) {
    if value.len() > limit {
        errs.push(field::invalid(
            path,
            "",
            &format!("can have at most {limit} characters"),
        ));
    }
}

fn required_nonempty(errs: &mut Vec<FieldError>, path: &str, value: &str) {
    if value.is_empty() {
        errs.push(field::required(path, ""));
    }
}

/// `legacyValidateEvent`: what every Event write must pass, whichever API it came through.
fn legacy(ev: &Value, events_v1: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let ns = text(ev, "/metadata/namespace");
    let involved_ns = text(ev, "/involvedObject/namespace");
    let mismatch = || {
        field::invalid(
            "involvedObject.namespace",
            involved_ns,
            "does not match event.namespace",
        )
    };
    if !is_set(ev, "/eventTime") {
        let ok = if involved_ns.is_empty() {
            ns.is_empty() || ns == "default"
        } else {
            ns == involved_ns
        };
        if !ok {
            errs.push(mismatch());
        }
    } else {
        if involved_ns.is_empty() && ns != "default" && ns != "kube-system" {
            errs.push(mismatch());
        }
        let controller_field = if events_v1 {
            "reportingController"
        } else {
            "reportingComponent"
        };
        let controller = text(ev, "/reportingComponent");
        required_nonempty(&mut errs, controller_field, controller);
        for msg in naming::qualified_name(controller) {
            errs.push(field::invalid(controller_field, controller, &msg));
        }
        let instance = text(ev, "/reportingInstance");
        required_nonempty(&mut errs, "reportingInstance", instance);
        at_most(&mut errs, "reportingInstance", instance, REPORTING_INSTANCE_LIMIT);
        let action = text(ev, "/action");
        required_nonempty(&mut errs, "action", action);
        at_most(&mut errs, "action", action, ACTION_LIMIT);
        let reason = text(ev, "/reason");
        required_nonempty(&mut errs, "reason", reason);
        at_most(&mut errs, "reason", reason, REASON_LIMIT);
        at_most(&mut errs, "message", text(ev, "/message"), NOTE_LIMIT);
    }
    for msg in naming::dns1123_subdomain(ns) {
        errs.push(field::invalid("namespace", ns, &msg));
    }
    errs
}

/// `validateV1EventSeries`.
fn series(ev: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(s) = ev.get("series").filter(|s| !s.is_null()) {
        if s.get("count").and_then(Value::as_i64).unwrap_or(0) < 2 {
            errs.push(field::invalid("series.count", "", "should be at least 2"));
        }
        if !is_set(s, "/lastObservedTime") {
            errs.push(field::required("series.lastObservedTime", ""));
        }
    }
    errs
}

/// `ValidateEventCreate`; `events_v1` says the request came through `events.k8s.io/v1`.
/// (Metadata, including the DNS-subdomain name events.k8s.io wants, is checked with every
/// kind's metadata in `objectmeta`.)
pub fn validate_create(ev: &Value, events_v1: bool) -> Vec<FieldError> {
    let mut errs = legacy(ev, events_v1);
    if !events_v1 {
        return errs;
    }
    errs.extend(series(ev));
    if !is_set(ev, "/eventTime") {
        errs.push(field::required("eventTime", ""));
    }
    let ty = text(ev, "/type");
    if ty != "Normal" && ty != "Warning" {
        errs.push(field::invalid("type", "", &format!("has invalid value: {ty}")));
    }
    for (path, set) in [
        ("firstTimestamp", is_set(ev, "/firstTimestamp")),
        ("lastTimestamp", is_set(ev, "/lastTimestamp")),
        ("count", ev.get("count").and_then(Value::as_i64).unwrap_or(0) != 0),
        (
            "source",
            !text(ev, "/source/component").is_empty() || !text(ev, "/source/host").is_empty(),
        ),
    ] {
        if set {
            errs.push(field::invalid(path, "", "needs to be unset"));
        }
    }
    errs
}

/// Core fields an events.k8s.io update may not change, with the names upstream reports.
const IMMUTABLE: &[(&str, &str)] = &[
    ("involvedObject", "involvedObject"),
    ("reason", "reason"),
    ("message", "message"),
    ("source", "source"),
    ("firstTimestamp", "firstTimestamp"),
    ("lastTimestamp", "lastTimestamp"),
    ("count", "count"),
    ("type", "type"),
    ("eventTime", "eventTime"),
    ("action", "action"),
    ("related", "related"),
    ("reportingComponent", "reportingController"),
    ("reportingInstance", "reportingInstance"),
];

/// `ValidateEventUpdate`.
pub fn validate_update(new: &Value, old: &Value, events_v1: bool) -> Vec<FieldError> {
    let mut errs = legacy(new, events_v1);
    if !events_v1 {
        return errs;
    }
    let unset = |v: Option<&Value>| v.is_none_or(Value::is_null);
    if new.get("series") != old.get("series") && !(unset(new.get("series")) && unset(old.get("series"))) {
        errs.extend(series(new));
    }
    for (stored, reported) in IMMUTABLE {
        let (n, o) = (new.get(*stored), old.get(*stored));
        // Both forms are decoded and re-encoded the same way (`eventTime` with six fraction
        // digits), so equal JSON is equal data; absent and null are both Go's zero value.
        if n != o && !(unset(n) && unset(o)) {
            errs.push(field::invalid_json(
                reported,
                n.unwrap_or(&Value::Null),
                "field is immutable",
            ));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn new_event() -> Value {
        json!({"metadata": {"name": "rg.1", "namespace": "ci"}, "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingComponent": "forgerunner", "reportingInstance": "forgerunner-0", "action": "Scale",
            "reason": "ScaledUp", "type": "Normal", "message": "m",
            "involvedObject": {"kind": "RunnerGroup", "name": "rg", "namespace": "ci"}})
    }

    /// events.go `legacyValidateEvent`: `len(Message) > NoteLengthLimit`, in bytes, only for
    /// Events with an eventTime; core Events without one may carry any message.
    #[test]
    fn note_limit_counts_bytes_of_new_events_only() {
        let mut ev = new_event();
        ev["message"] = json!("é".repeat(512));
        assert!(validate_create(&ev, true).is_empty(), "1024 bytes");
        ev["message"] = json!("é".repeat(513));
        assert_eq!(
            validate_create(&ev, true),
            vec![(
                "message".into(),
                "Invalid value: \"\": can have at most 1024 characters".into()
            )]
        );
        let legacy = json!({"metadata": {"namespace": "ci"}, "message": "x".repeat(5000),
            "involvedObject": {"kind": "Job", "name": "j", "namespace": "ci"}});
        assert!(validate_create(&legacy, false).is_empty());
    }

    /// events.go `ValidateEventCreate` for events.k8s.io: reporting fields, eventTime, type,
    /// no deprecated fields, series count ≥ 2.
    #[test]
    fn strict_create_for_events_v1() {
        let mut ev = new_event();
        for k in ["reportingComponent", "reportingInstance", "action", "eventTime"] {
            ev.as_object_mut().expect("object").remove(k);
        }
        ev["type"] = json!("Info");
        ev["count"] = json!(3);
        ev["series"] = json!({"count": 1});
        let fields: Vec<String> = validate_create(&ev, true).into_iter().map(|e| e.0).collect();
        assert_eq!(
            fields,
            vec![
                "series.count",
                "series.lastObservedTime",
                "eventTime",
                "type",
                "count"
            ]
        );
        // Without eventTime the legacy branch applies; with it, the missing fields show.
        ev["eventTime"] = json!("2026-01-01T00:00:00.000000Z");
        let fields: Vec<String> = validate_create(&ev, true).into_iter().map(|e| e.0).collect();
        assert!(
            fields.starts_with(&[
                "reportingController".to_string(),
                "reportingController".to_string(),
                "reportingController".to_string(),
                "reportingInstance".to_string(),
                "action".to_string(),
            ]),
            "{fields:?}"
        );
        // Core v1 names the field reportingComponent.
        assert_eq!(validate_create(&ev, false)[0].0, "reportingComponent");
    }

    /// events.go `ValidateEventUpdate`: only series and metadata may change.
    #[test]
    fn updates_keep_the_event_fixed() {
        let old = new_event();
        let mut new = old.clone();
        new["series"] = json!({"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000000Z"});
        assert!(validate_update(&new, &old, true).is_empty());
        new["message"] = json!("other");
        assert_eq!(
            validate_update(&new, &old, true),
            vec![(
                "message".into(),
                "Invalid value: \"other\": field is immutable".into()
            )]
        );
        assert!(
            validate_update(&new, &old, false).is_empty(),
            "core v1 has no such rule"
        );
    }
}
