//! Every size bound of the CRD schema (`minLength`, `maxLength`, `minItems`, `maxItems`,
//! `minimum`, `maximum`) has a twin in the reconciler's validation (core's `validate_spec` plus
//! the forge's `Forge::describe`, as `check_spec` runs them): on the same example, right at each
//! bound and one past it, the API server (the testkit's, which enforces the structural schema)
//! and the reconciler accept or refuse together. Every example keeps the field's format valid (a
//! URL stays a URL, so the fake's CEL rules hold) and differs from a valid spec only in size; the
//! CEL rules have their own twin test in `cel_rules_tests`.
//!
//! The bounds are read from the generated schema, so a bound added to the types without a twin
//! fails here.

use forgerunner_core::RunnerGroup;
use forgerunner_core::reconcile::pipeline::check_spec;
use forgerunner_testkit::apiserver::FakeApiServer;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::ApiResource;
use kube::{CustomResourceExt, Resource};
use serde_json::{Value, json};

use crate::controller::ForgeSet;
use crate::forges::EnabledForges;

const NS: &str = "bounds";
const KEYWORDS: [&str; 6] = [
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
];

/// One bound: the field's path under `spec` (`[]` for "each item"), the keyword and its value.
#[derive(Debug, Clone)]
struct Bound {
    path: Vec<String>,
    keyword: &'static str,
    value: i64,
}

fn collect(schema: &Value, path: &mut Vec<String>, out: &mut Vec<Bound>) {
    for keyword in KEYWORDS {
        if let Some(v) = schema.get(keyword).and_then(Value::as_f64) {
            #[allow(clippy::cast_possible_truncation)]
            out.push(Bound {
                path: path.clone(),
                keyword,
                value: v as i64,
            });
        }
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            path.push(name.clone());
            collect(sub, path, out);
            path.pop();
        }
    }
    if let Some(items) = schema.get("items") {
        path.push("[]".into());
        collect(items, path, out);
        path.pop();
    }
}

/// A valid spec for the forge whose block the path is in (GitHub for common fields).
fn base(path: &[String]) -> Value {
    match path.first().map(String::as_str) {
        Some("gitea") => json!({"forge": "gitea", "maxRunners": 5, "gitea": {
            "url": "https://gitea.example.com", "scope": "repo", "repo": "o/r",
            "credentials": "creds", "labels": ["linux"]}}),
        // A bare Forgejo label is a docker label: it needs the Docker daemon of dind.
        Some("forgejo") => json!({"forge": "forgejo", "maxRunners": 5,
            "containerMode": {"type": "dind"}, "forgejo": {
            "url": "https://forgejo.example.com", "scope": "repo", "repo": "o/r",
            "credentials": "creds", "labels": ["linux"]}}),
        // A cache is for Gitea and Forgejo only.
        Some("cache") => json!({"forge": "gitea", "maxRunners": 5, "gitea": {
            "url": "https://gitea.example.com", "scope": "repo", "repo": "o/r",
            "credentials": "creds", "labels": ["linux"]},
            "cache": {"size": "10Gi", "storageClassName": "standard"}}),
        // A Docker layer cache is for dind groups only.
        Some("dockerCache") => json!({"forge": "gitea", "maxRunners": 5,
            "containerMode": {"type": "dind"}, "gitea": {
            "url": "https://gitea.example.com", "scope": "repo", "repo": "o/r",
            "credentials": "creds", "labels": ["linux"]},
            "dockerCache": {"size": "20Gi", "storageClassName": "standard", "claims": 2}}),
        Some("classes") => json!({"forge": "gitea", "maxRunners": 5, "gitea": {
            "url": "https://gitea.example.com", "scope": "repo", "repo": "o/r",
            "credentials": "creds", "labels": ["linux"]},
            "classes": [class(0)]}),
        Some("rerun") => json!({"forge": "github", "maxRunners": 5, "github": {
            "configUrl": "https://github.com/org", "credentials": "creds"},
            "rerun": {"maxPerHour": 5}}),
        Some("schedules") => json!({"forge": "github", "maxRunners": 5, "github": {
            "configUrl": "https://github.com/org", "credentials": "creds"},
            "schedules": [schedule(0)]}),
        _ => json!({"forge": "github", "maxRunners": 5, "github": {
            "configUrl": "https://github.com/org", "credentials": "creds"}}),
    }
}

/// A valid class, named apart by `i`.
fn class(i: usize) -> Value {
    json!({"name": format!("c{i}"), "labels": [format!("size{i}")], "maxRunners": 1})
}

/// A valid schedule entry, named apart by `i`.
fn schedule(i: usize) -> Value {
    json!({"name": format!("s{i}"), "start": "0 8 * * *", "end": "0 18 * * *",
        "timeZone": "UTC", "minRunners": 1})
}

/// A string of exactly `len` characters that is valid for the field but for its length: the
/// field's value in `base` (or a valid seed), cut or padded with `a`.
fn sized_text(field: &str, current: Option<&str>, len: usize) -> String {
    let seed = current.map_or_else(
        || {
            if field.ends_with("Url") {
                "http://p.example/".to_owned()
            } else {
                "a".to_owned()
            }
        },
        str::to_owned,
    );
    let mut s: String = seed.chars().take(len).collect();
    // A cron expression stays one with more blanks between its fields.
    let pad = if matches!(field, "start" | "end") {
        ' '
    } else {
        'a'
    };
    while s.chars().count() < len {
        s.insert(s.find(' ').unwrap_or(s.len()), pad);
    }
    s
}

/// `spec` with the bounded field set to `n` (a length, a count or a number).
fn with_size(mut spec: Value, bound: &Bound, n: i64) -> Value {
    let (parent_path, last) = bound.path.split_at(bound.path.len() - 1);
    let last = last[0].as_str();
    let mut parent = &mut spec;
    for key in parent_path {
        if key == "[]" {
            // Only the first item is sized; the array has at least one.
            let arr = parent.as_array_mut().expect("array on the path");
            if arr.is_empty() {
                arr.push(json!("a"));
            }
            parent = &mut arr[0];
        } else {
            parent = parent
                .as_object_mut()
                .expect("object on the path")
                .entry(key.clone())
                .or_insert_with(|| json!([]));
        }
    }
    let len = usize::try_from(n).unwrap_or(0);
    let field = if last == "[]" {
        parent_path.last().map_or(last, String::as_str)
    } else {
        last
    };
    let value = match bound.keyword {
        "minimum" | "maximum" => json!(n),
        "minItems" | "maxItems" if field == "schedules" => Value::Array((0..len).map(schedule).collect()),
        "minItems" | "maxItems" if field == "classes" => Value::Array((0..len).map(class).collect()),
        "minItems" | "maxItems" => {
            let item = |i: usize| json!(format!("l{i}"));
            Value::Array((0..len).map(item).collect())
        }
        _ => {
            let current = if last == "[]" {
                parent.get(0).and_then(Value::as_str).map(str::to_owned)
            } else {
                parent.get(last).and_then(Value::as_str).map(str::to_owned)
            };
            json!(sized_text(field, current.as_deref(), len))
        }
    };
    if last == "[]" {
        let arr = parent.as_array_mut().expect("array");
        if arr.is_empty() {
            arr.push(value);
        } else {
            arr[0] = value;
        }
    } else {
        parent
            .as_object_mut()
            .expect("object")
            .insert(last.to_owned(), value);
    }
    spec
}

/// Length of the valid value the examples of a text bound start from.
fn seed_len(bound: &Bound) -> i64 {
    let mut v = &base(&bound.path);
    for key in &bound.path {
        v = if key == "[]" { &v[0] } else { &v[key.as_str()] };
    }
    v.as_str()
        .map_or(1, |s| i64::try_from(s.chars().count()).unwrap_or(1))
}

/// The examples of one bound: (description, spec, past the bound).
fn examples(bound: &Bound) -> Vec<(String, Value, bool)> {
    let (at, past) = match bound.keyword {
        // A URL cannot be one character long: the lower bound of a text is checked at the
        // valid example's own length, which is above it.
        "minLength" => (bound.value.max(seed_len(bound)), bound.value - 1),
        "minItems" | "minimum" => (bound.value, bound.value - 1),
        _ => (bound.value, bound.value + 1),
    };
    let name = format!("{} {} {}", bound.path.join("."), bound.keyword, bound.value);
    // No IANA time zone name is anywhere near the 64 characters allowed, so a valid example at
    // that bound cannot be written: only the refusal past it is compared.
    let at_is_writable =
        !(bound.path.last().is_some_and(|f| f == "timeZone") && bound.keyword == "maxLength");
    let mut out = Vec::new();
    if at_is_writable {
        out.push((
            format!("{name} (at {at})"),
            with_size(base(&bound.path), bound, at),
            false,
        ));
    }
    // A length or count below zero cannot be written; the type refuses negative numbers.
    if past >= 0 || matches!(bound.keyword, "minimum" | "maximum") {
        out.push((
            format!("{name} (past: {past})"),
            with_size(base(&bound.path), bound, past),
            true,
        ));
    }
    out
}

fn reconciler_accepts(object: &Value, forges: &EnabledForges) -> Result<(), String> {
    let group: RunnerGroup = serde_json::from_value(object.clone()).map_err(|e| e.to_string())?;
    check_spec(&group, forges.for_spec(&group.spec)).map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_schema_bound_has_a_twin_in_validation() {
    let crd = RunnerGroup::crd();
    let schema = serde_json::to_value(&crd.spec.versions[0].schema).expect("schema");
    let spec_schema = &schema["openAPIV3Schema"]["properties"]["spec"];
    let mut bounds = Vec::new();
    collect(spec_schema, &mut Vec::new(), &mut bounds);
    // The walk found the bounds the types declare (a broken walk would pass vacuously).
    assert!(bounds.len() > 40, "{bounds:#?}");
    for (path, keyword) in [
        ("maxRunners", "maximum"),
        ("github.runnerGroup", "maxLength"),
        ("gitea.repo", "maxLength"),
        ("forgejo.labels", "maxItems"),
        ("classes", "maxItems"),
        ("classes.[].name", "maxLength"),
        ("classes.[].maxRunners", "minimum"),
    ] {
        assert!(
            bounds
                .iter()
                .any(|b| b.path.join(".") == path && b.keyword == keyword),
            "no {keyword} on {path}"
        );
    }

    let server = FakeApiServer::start().await.expect("fake API server");
    let client = server.client().expect("client");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd).await.expect("CRD");
    let resource = ApiResource::erase::<RunnerGroup>(&());
    let served: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while served.list(&Default::default()).await.is_err() {
        assert!(std::time::Instant::now() < deadline, "the CRD is not served");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).expect("ns");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("namespace");
    let api: Api<DynamicObject> = Api::namespaced_with(client, NS, &resource);
    let forges = crate::forges::all_for_tests();

    let mut disagreements = Vec::new();
    let mut index = 0;
    for bound in &bounds {
        for (what, spec, past) in examples(bound) {
            index += 1;
            let object = json!({
                "apiVersion": RunnerGroup::api_version(&()),
                "kind": RunnerGroup::kind(&()),
                "metadata": {"name": format!("b{index}"), "namespace": NS},
                "spec": spec,
            });
            let dynamic: DynamicObject = serde_json::from_value(object.clone()).expect("object");
            let server_says = match api.create(&PostParams::default(), &dynamic).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 422 => Err(s.message),
                Err(e) => panic!("{what}: unexpected API error {e}"),
            };
            let reconciler_says = reconciler_accepts(&object, &forges);
            if past {
                assert!(
                    server_says.is_err(),
                    "{what}: the example is meant to break the schema bound"
                );
            }
            if server_says.is_ok() != reconciler_says.is_ok() {
                disagreements.push(format!(
                    "{what}: API server {server_says:?}, reconciler {reconciler_says:?}"
                ));
            }
        }
    }
    assert!(
        disagreements.is_empty(),
        "schema and validation disagree:\n{}",
        disagreements.join("\n")
    );
}
