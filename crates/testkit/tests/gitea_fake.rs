//! The Gitea fake against Gitea's swagger (1.25 and 1.26): routes exist, bodies have exactly
//! the declared fields with the declared types; plus paging headers and webhook delivery.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use forgerunner_testkit::gitea::{ADMIN_TOKEN, FakeConfig, FakeScope, GiteaFakeHandle};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

fn reference_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference")
}

/// Our reduced form of a swagger document: path → methods, definition → property → type.
fn reduce(full: &Value, defs: &[&str]) -> Value {
    let paths: serde_json::Map<String, Value> = full["paths"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(p, ops)| {
            let mut m: Vec<&String> = ops.as_object().map(|o| o.keys().collect()).unwrap_or_default();
            m.sort();
            (p.clone(), json!(m))
        })
        .collect();
    let mut d = serde_json::Map::new();
    for name in defs {
        let mut props = serde_json::Map::new();
        for (k, pv) in full["definitions"][name]["properties"]
            .as_object()
            .into_iter()
            .flatten()
        {
            let short = |r: &Value| r.as_str().and_then(|s| s.rsplit('/').next()).map(str::to_string);
            let mut e = serde_json::Map::new();
            if let Some(r) = short(&pv["$ref"]) {
                e.insert("ref".into(), json!(r));
            } else {
                e.insert("type".into(), pv["type"].clone());
                if let Some(f) = pv.get("format") {
                    e.insert("format".into(), f.clone());
                }
                if pv["type"] == "array" {
                    let it = &pv["items"];
                    e.insert(
                        "items".into(),
                        json!(
                            short(&it["$ref"])
                                .unwrap_or_else(|| it["type"].as_str().unwrap_or_default().to_string())
                        ),
                    );
                }
            }
            props.insert(k.clone(), Value::Object(e));
        }
        d.insert(name.to_string(), Value::Object(props));
    }
    json!({"paths": paths, "definitions": d})
}

const DEFS: &[&str] = &[
    "ActionWorkflowJobsResponse",
    "ActionWorkflowJob",
    "ActionWorkflowStep",
    "ActionRunnersResponse",
    "ActionRunner",
    "ActionRunnerLabel",
    "ServerVersion",
];

/// The schema subset for `version` (`v1.25` / `v1.26`); checked against the real swagger when
/// `../shared/reference` is present (so the vendored subset cannot drift).
fn schema(version: &str) -> Value {
    let vendored: Value = serde_json::from_str(include_str!("data/gitea-swagger-subset.json")).unwrap();
    let sub = vendored["versions"][version].clone();
    let full = reference_dir().join(format!("gitea-swagger-{version}.json"));
    if let Ok(text) = std::fs::read_to_string(&full) {
        let full: Value = serde_json::from_str(&text).unwrap();
        let reduced = reduce(&full, DEFS);
        assert_eq!(
            reduced["definitions"], sub["definitions"],
            "vendored subset drifted from {full:?}"
        );
        for (p, m) in sub["paths"].as_object().unwrap() {
            assert_eq!(&reduced["paths"][p], m, "path {p} drifted");
        }
    }
    sub
}

fn check(defs: &Value, def: &str, v: &Value, at: &str, errors: &mut Vec<String>) {
    let Some(obj) = v.as_object() else {
        errors.push(format!("{at}: expected object {def}, got {v}"));
        return;
    };
    let props = &defs[def];
    for (k, val) in obj {
        let Some(p) = props.get(k) else {
            errors.push(format!("{at}.{k}: not a property of {def}"));
            continue;
        };
        check_value(defs, p, val, &format!("{at}.{k}"), errors);
    }
}

fn check_value(defs: &Value, p: &Value, val: &Value, at: &str, errors: &mut Vec<String>) {
    if let Some(r) = p["ref"].as_str() {
        return check(defs, r, val, at, errors);
    }
    let ok = match p["type"].as_str().unwrap_or_default() {
        "integer" => val.is_i64(),
        "boolean" => val.is_boolean(),
        "string" if p["format"] == "date-time" => {
            val.as_str().is_some_and(|s| s.parse::<jiff::Timestamp>().is_ok())
        }
        "string" => val.is_string(),
        // Go marshals a nil slice as null (Gitea 1.25 `steps`).
        "array" if val.is_null() => true,
        "array" => match val.as_array() {
            Some(items) => {
                let item = p["items"].as_str().unwrap_or_default();
                for (i, it) in items.iter().enumerate() {
                    let sub = if defs.get(item).is_some() {
                        json!({"ref": item})
                    } else {
                        json!({"type": item})
                    };
                    check_value(defs, &sub, it, &format!("{at}[{i}]"), errors);
                }
                true
            }
            None => false,
        },
        _ => false,
    };
    if !ok {
        errors.push(format!("{at}: {val} does not match {p}"));
    }
}

/// Maps a concrete path to the swagger template it instantiates.
fn template_for<'a>(paths: &'a Value, concrete: &str) -> Option<&'a str> {
    let c: Vec<&str> = concrete.trim_start_matches("/api/v1").split('/').collect();
    paths.as_object()?.keys().map(String::as_str).find(|t| {
        let t: Vec<&str> = t.split('/').collect();
        t.len() == c.len() && t.iter().zip(&c).all(|(a, b)| a.starts_with('{') || a == b)
    })
}

async fn setup(version: &str) -> GiteaFakeHandle {
    let fake = GiteaFakeHandle::start(FakeConfig {
        version: version.into(),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    fake.add_org("acme", &["alice"]);
    let a = fake.queue_job("acme/app", &["linux"]);
    fake.queue_job("acme/app", &[]);
    fake.queue_blocked_job("acme/app", &["linux"]);
    fake.queue_job("bob/tool", &["gpu", "x64"]);
    fake.cancel_job(a);
    let scope = FakeScope::Owner("acme".into());
    fake.add_runner(scope.clone(), "grp-abcde", &["linux", "x64"], true);
    fake.add_runner(FakeScope::Global, "g-zzzzz", &["gpu"], false);
    fake
}

#[tokio::test]
async fn responses_match_the_swagger() {
    for (version, sv) in [("1.25.0", "v1.25"), ("1.26.0", "v1.26")] {
        let fake = setup(version).await;
        let sch = schema(sv);
        let defs = &sch["definitions"];
        let http = reqwest::Client::new();
        let get = |path: String| {
            let http = http.clone();
            let url = format!("{}{path}", fake.url());
            async move {
                let r = http
                    .get(url)
                    .header("Authorization", format!("token {ADMIN_TOKEN}"))
                    .send()
                    .await
                    .unwrap();
                assert!(r.status().is_success(), "{path}: {}", r.status());
                r.json::<Value>().await.unwrap()
            }
        };
        let mut errors = Vec::new();
        let mut paths = vec!["/api/v1/version".to_string()];
        check(
            defs,
            "ServerVersion",
            &get("/api/v1/version".into()).await,
            "version",
            &mut errors,
        );
        for base in [
            "/api/v1/admin",
            "/api/v1/orgs/acme",
            "/api/v1/user",
            "/api/v1/repos/acme/app",
        ] {
            for q in [
                "",
                "?status=queued",
                "?status=completed&status=waiting&page=1&limit=2",
            ] {
                let p = format!("{base}/actions/jobs");
                let body = get(format!("{p}{q}")).await;
                check(defs, "ActionWorkflowJobsResponse", &body, &p, &mut errors);
                paths.push(p);
            }
            let p = format!("{base}/actions/runners");
            check(
                defs,
                "ActionRunnersResponse",
                &get(p.clone()).await,
                &p,
                &mut errors,
            );
            paths.push(p);
        }
        let all = get("/api/v1/admin/actions/jobs".into()).await;
        assert_eq!(all["total_count"], 4, "{version}");
        let steps = &all["jobs"][0]["steps"];
        assert_eq!(steps.is_null(), sv == "v1.25", "1.25 sends null steps, 1.26 []");
        assert!(
            all["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .any(|j| j["started_at"] == "1970-01-01T00:00:00Z")
        );
        let id = fake.runners()[0].id;
        let p = format!("/api/v1/admin/actions/runners/{id}");
        check(defs, "ActionRunner", &get(p.clone()).await, &p, &mut errors);
        paths.push(p);
        let p = "/api/v1/orgs/acme/actions/runners/registration-token".to_string();
        let r = http
            .post(format!("{}{p}", fake.url()))
            .header("Authorization", format!("token {ADMIN_TOKEN}"))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
        assert!(
            r.json::<Value>().await.unwrap()["token"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
        );
        paths.push(p);
        for p in &paths {
            assert!(
                template_for(&sch["paths"], p).is_some(),
                "{version}: {p} is not a Gitea route"
            );
        }
        // The old GET token route exists only up to 1.25.
        let r = http
            .get(format!(
                "{}/api/v1/orgs/acme/actions/runners/registration-token",
                fake.url()
            ))
            .header("Authorization", format!("token {ADMIN_TOKEN}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().is_success(), sv == "v1.25", "{version}");
        assert!(errors.is_empty(), "{version}: {errors:#?}");
    }
}

#[tokio::test]
async fn paging_headers_and_filters() {
    let fake = setup("1.26.0").await;
    for _ in 0..70 {
        fake.queue_job("acme/app", &["linux"]);
    }
    let http = reqwest::Client::new();
    let url = format!(
        "{}/api/v1/orgs/acme/actions/jobs?status=queued&limit=100&page=2",
        fake.url()
    );
    let r = http
        .get(url)
        .header("Authorization", format!("token {ADMIN_TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-total-count"], "71");
    let link = r.headers()["link"].to_str().unwrap().to_string();
    assert!(
        link.contains("rel=\"prev\"") && link.contains("rel=\"first\""),
        "{link}"
    );
    assert!(!link.contains("rel=\"next\""), "limit is capped at 50: 2 pages");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["jobs"].as_array().unwrap().len(), 21);
    let bad = http
        .get(format!("{}/api/v1/admin/actions/jobs?status=bogus", fake.url()))
        .header("Authorization", format!("token {ADMIN_TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let anon = http
        .get(format!("{}/api/v1/admin/actions/jobs", fake.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(anon.status(), 401);
    assert!(fake.requests().iter().any(|r| r.status == 401 && !r.authorized));
}

#[tokio::test]
async fn webhook_deliveries_are_signed() {
    let received: Arc<Mutex<Vec<(HeaderMap, bytes::Bytes)>>> = Arc::default();
    let sink = received.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |h: HeaderMap, b: bytes::Bytes| {
            let sink = sink.clone();
            async move {
                sink.lock().unwrap().push((h, b));
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let fake = GiteaFakeHandle::start(FakeConfig::default()).await.unwrap();
    fake.add_org("acme", &[]);
    fake.set_webhook(&format!("http://{addr}/hook"), "hook-secret");
    let id = fake.queue_job("acme/app", &["linux"]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while received.lock().unwrap().is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (h, body) = received.lock().unwrap().first().cloned().expect("a delivery");
    assert_eq!(h["x-gitea-event"], "workflow_job");
    assert!(!h["x-gitea-delivery"].is_empty());
    let mut mac = Hmac::<Sha256>::new_from_slice(b"hook-secret").unwrap();
    mac.update(&body);
    let want: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(h["x-gitea-signature"], want.as_str());
    assert_eq!(h["x-hub-signature-256"], format!("sha256={want}").as_str());
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["action"], "queued");
    assert_eq!(v["workflow_job"]["id"], id);
    assert_eq!(v["workflow_job"]["labels"], json!(["linux"]));
    assert_eq!(v["repository"]["full_name"], "acme/app");
    // `structs.Organization` (modules/structs/org.go) has `username` and `name`, no `login`.
    assert_eq!(v["organization"]["username"], "acme");
    assert!(v["organization"].get("login").is_none());
    assert!(
        fake.deliveries()
            .iter()
            .any(|d| d.job_id == id && d.status == 200)
    );
}

/// `GET {base}{path}` with the admin token: the JSON body.
async fn admin_get(fake: &GiteaFakeHandle, path: &str) -> Value {
    reqwest::Client::new()
        .get(format!("{}{path}", fake.url()))
        .header("Authorization", format!("token {ADMIN_TOKEN}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn ids(page: &Value) -> Vec<i64> {
    page["runners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect()
}

/// Runner listings are ordered as Gitea orders them and shift under polling runners.
///
/// Upstream (v1.25.0 and v1.26.0): `shared.ListRunners` (`routers/api/v1/shared/runners.go`)
/// sets no `Sort`, so `FindRunnerOptions.ToOrders` (`models/actions/runner.go`) orders by
/// `last_online DESC`; the `withRunner` interceptor (`routers/api/actions/runner/interceptor.go`)
/// rewrites `last_online` on every runner call but `Register`; `limit` is capped at
/// `MAX_RESPONSE_ITEMS` = 50 (`modules/setting/api.go`, `services/convert/utils.go`
/// `ToCorrectPageSize`). A runner that polls between two page requests jumps to the head: the
/// second page repeats the first page's last row and the runner is in neither.
#[tokio::test]
async fn runner_listings_follow_last_online_and_shift_between_pages() {
    let fake = GiteaFakeHandle::start(FakeConfig::default()).await.unwrap();
    fake.add_org("acme", &["alice"]);
    let scope = FakeScope::Owner("acme".into());
    // Registered and called in in this order: the first is the least recently online.
    let all: Vec<i64> = (0..51)
        .map(|i| fake.add_runner(scope.clone(), &format!("grp-{i:05}"), &["linux"], true))
        .collect();
    let first = all[0];
    let path = "/api/v1/orgs/acme/actions/runners";
    let p1 = admin_get(&fake, &format!("{path}?page=1&limit=100")).await;
    assert_eq!(p1["total_count"], 51);
    assert_eq!(ids(&p1).len(), 50, "limit is capped at 50");
    assert_eq!(ids(&p1)[0], all[50], "most recently online first");
    let p2 = admin_get(&fake, &format!("{path}?page=2&limit=50")).await;
    assert_eq!(ids(&p2), [first], "least recently online last");

    // The oldest runner polls: it moves to the head.
    fake.runner_calls_in(first);
    let p1 = admin_get(&fake, &format!("{path}?page=1&limit=50")).await;
    assert_eq!(ids(&p1)[0], first);

    // A runner that never called in (Register alone) is last and offline.
    let fresh = fake.add_runner(scope.clone(), "grp-fresh", &["linux"], false);
    let p2 = admin_get(&fake, &format!("{path}?page=2&limit=50")).await;
    assert_eq!(ids(&p2).last(), Some(&fresh));
    assert_eq!(p2["runners"][1]["status"], "offline");

    // Paging over a poll: runner `all[1]` (now 51st of 52) polls after page 1 is served.
    let moving = all[1];
    fake.poll_after_runner_page(1, moving);
    let p1 = ids(&admin_get(&fake, &format!("{path}?page=1&limit=50")).await);
    let p2 = ids(&admin_get(&fake, &format!("{path}?page=2&limit=50")).await);
    assert!(!p1.contains(&moving) && !p2.contains(&moving), "skipped");
    assert_eq!(p2[0], p1[49], "the first page's last row is repeated");
    let now = ids(&admin_get(&fake, &format!("{path}?page=1&limit=50")).await);
    assert_eq!(now[0], moving, "it is first now");
}

/// A registered runner is offline until its daemon calls in: Gitea's `Register`
/// (`routers/api/actions/runner/runner.go`, v1.25.0/v1.26.0) sets no `LastOnline`, and the
/// `withRunner` interceptor (`routers/api/actions/runner/interceptor.go`) returns early for
/// `Register`, stamping `last_online` only on the later calls (`Declare`, `FetchTask`, …).
/// `status` is `online` only when `last_online` is within `RunnerOfflineTime` (one minute,
/// `models/actions/runner.go` `Status`, `services/convert/convert.go` `ToActionRunner`).
#[tokio::test]
async fn a_registered_runner_is_offline_until_it_calls_in() {
    use forgerunner_testkit::forge_common::rpc::RunnerClient;
    let fake = GiteaFakeHandle::start(FakeConfig::default()).await.unwrap();
    let token = fake.registration_token(&FakeScope::Global);
    let mut rpc = RunnerClient::new(&fake.url()).unwrap();
    let (status, v) = rpc
        .call(
            "Register",
            json!({"name": "grp-abcde", "token": token, "labels": ["linux"], "ephemeral": true}),
        )
        .await
        .unwrap();
    assert_eq!(status, 200);
    let status_of =
        || async { admin_get(&fake, "/api/v1/admin/actions/runners").await["runners"][0]["status"].clone() };
    assert_eq!(status_of().await, "offline", "registered, never called in");
    rpc.uuid = v["runner"]["uuid"].as_str().unwrap().to_string();
    rpc.token = v["runner"]["token"].as_str().unwrap().to_string();
    let (status, _) = rpc.call("Declare", json!({"labels": ["linux"]})).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(status_of().await, "online", "Declare stamps last_online");
}
