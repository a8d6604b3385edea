//! The Forgejo fake's REST API over HTTP, against the facts of
//! `shared/reference/forgejo-actions.md`: routes per version, the `labels` filter, job and
//! runner shapes, runner REST, auth and faults.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

mod forgejo_common;

use std::time::Duration;

use forgejo_common::{V10, V11, V14, V15, call, declared_runner, fake, get, ids, rpc};
use forgerunner_testkit::forgejo::{ADMIN_TOKEN, Conclusion, Fault, JobSpec};
use serde_json::{Value, json};

#[tokio::test]
async fn routes_exist_only_from_their_version() {
    let paths = [
        ("/api/v1/admin/runners/jobs?labels=a", [false, true, true, true]),
        (
            "/api/v1/admin/actions/runners/jobs?labels=a",
            [false, false, false, true],
        ),
        (
            "/api/v1/orgs/acme/actions/runners/jobs?labels=a",
            [false, true, true, true],
        ),
        (
            "/api/v1/user/actions/runners/jobs?labels=a",
            [false, true, true, true],
        ),
        (
            "/api/v1/repos/acme/app/actions/runners/jobs?labels=a",
            [false, true, true, true],
        ),
        ("/api/v1/admin/runners/registration-token", [true; 4]),
        (
            "/api/v1/admin/actions/runners/registration-token",
            [false, false, false, true],
        ),
        ("/api/v1/orgs/acme/actions/runners/registration-token", [true; 4]),
        ("/api/v1/user/actions/runners/registration-token", [true; 4]),
        (
            "/api/v1/repos/acme/app/actions/runners/registration-token",
            [true; 4],
        ),
        ("/api/v1/admin/actions/runners", [false, false, false, true]),
        ("/api/v1/orgs/acme/actions/runners", [false, false, false, true]),
        ("/api/v1/user/actions/runners", [false, false, false, true]),
        (
            "/api/v1/repos/acme/app/actions/runners",
            [false, false, false, true],
        ),
        ("/api/v1/admin/actions/jobs", [false; 4]),
        ("/api/v1/repos/acme/app/actions/jobs", [false; 4]),
    ];
    for (i, version) in [V10, V11, V14, V15].into_iter().enumerate() {
        let f = fake(version).await;
        f.add_org("acme", &[]);
        f.add_repo("acme/app");
        let v = get(&f, "/api/v1/version").await.json();
        assert_eq!(v, json!({"version": version}));
        let v = get(&f, "/api/forgejo/v1/version").await.json();
        assert_eq!(v["version"], version.split('+').next().unwrap());
        for (path, present) in &paths {
            let r = get(&f, path).await;
            let want = if present[i] { 200 } else { 404 };
            assert_eq!(r.status, want, "{version} GET {path}: {}", r.text);
        }
        let r = call(
            &f,
            "POST",
            "/api/v1/orgs/acme/actions/runners/registration-token",
            Some(ADMIN_TOKEN),
            None,
        )
        .await;
        assert_eq!(r.status, 405, "no POST registration-token on {version}");
        let r = call(
            &f,
            "DELETE",
            "/api/v1/admin/actions/runners/1",
            Some(ADMIN_TOKEN),
            None,
        )
        .await;
        assert_eq!(r.status, 404, "{version}");
    }
}

#[tokio::test]
async fn label_filter_follows_forgejo() {
    let f = fake(V15).await;
    let a = f.queue_job("acme/app", "a", &["a"]);
    let ab = f.queue_job("acme/app", "ab", &["a", "b"]);
    let none = f.queue_job("acme/app", "none", &[]);
    let c = f.queue_job("acme/app", "c", &["c"]);
    let list = |q: &'static str| {
        let f = f.clone();
        async move {
            ids(&get(&f, &format!("/api/v1/admin/actions/runners/jobs{q}"))
                .await
                .json())
        }
    };
    assert_eq!(
        list("?labels=a,b,x").await,
        [ab, a],
        "subset match, id descending"
    );
    assert_eq!(list("?labels=a,%20b").await, [a], "items are not trimmed");
    assert_eq!(
        list("?labels=%20a,b%20").await,
        [ab, a],
        "the whole value is trimmed"
    );
    assert_eq!(list("?labels=a&labels=a,b").await, [a], "first occurrence only");
    assert_eq!(list("").await, [c, none, ab, a], "v14+: absent lists everything");
    assert_eq!(
        list("?labels=").await,
        [none],
        "v14+: empty lists jobs without runs_on"
    );
    assert_eq!(list("?labels=a,b&page=2&limit=1").await, [ab, a], "no paging");
    for version in [V11, "13.0.0+gitea-1.22.0"] {
        let old = fake(version).await;
        old.queue_job("acme/app", "a", &["a"]);
        old.queue_job("acme/app", "none", &[]);
        let r = get(&old, "/api/v1/admin/runners/jobs").await;
        assert_eq!(
            (r.status, r.text.as_str()),
            (200, "null"),
            "{version}: absent labels match nothing"
        );
        assert_eq!(get(&old, "/api/v1/admin/runners/jobs?labels=").await.text, "null");
    }
    let v14 = fake(V14).await;
    v14.queue_job("acme/app", "a", &["a"]);
    assert_eq!(
        ids(&get(&v14, "/api/v1/admin/runners/jobs").await.json()).len(),
        1
    );
}

#[tokio::test]
async fn job_list_shapes_statuses_and_scopes() {
    let f = fake(V15).await;
    f.add_org("acme", &[]);
    let blocked = f.queue(
        JobSpec::new("acme/app", "deploy", &["a"])
            .needs(&["build"])
            .blocked(),
    );
    let r = get(&f, "/api/v1/orgs/acme/actions/runners/jobs?labels=a").await;
    assert_eq!(
        (r.status, r.text.as_str()),
        (200, "null"),
        "blocked jobs are hidden"
    );
    assert!(r.headers.get("x-total-count").is_none());
    assert!(f.unblock_job(blocked));
    let other = f.queue_job("other/lib", "x", &["a"]);
    let j = get(&f, "/api/v1/orgs/acme/actions/runners/jobs?labels=a")
        .await
        .json();
    let job = f.job(blocked).unwrap();
    let want = json!([{
        "id": blocked, "repo_id": job.repo_id, "owner_id": job.owner_id, "name": "deploy",
        "needs": ["build"], "runs_on": ["a"], "task_id": 0, "status": "waiting",
        "attempt": 1, "handle": job.handle,
    }]);
    assert_eq!(j, want, "exact v15 fields, org scope only");
    let repo = get(&f, "/api/v1/repos/other/lib/actions/runners/jobs?labels=a")
        .await
        .json();
    assert_eq!(ids(&repo), [other]);
    assert_eq!(repo[0]["needs"], Value::Null);
    // A runner takes the job: still listed, now running with its task.
    let (_, uuid, token) = declared_runner(&f, "/api/v1/admin/actions/runners", &["a"], false).await;
    let (_, t) = rpc(
        &f,
        "FetchSingleTask",
        (&uuid, &token),
        json!({"handle": job.handle}),
    )
    .await;
    let task = t["task"]["id"].as_i64().unwrap();
    let j = get(&f, "/api/v1/orgs/acme/actions/runners/jobs?labels=a")
        .await
        .json();
    assert_eq!(
        (j[0]["status"].clone(), j[0]["task_id"].as_i64()),
        (json!("running"), Some(task))
    );
    assert!(f.complete_job(blocked, Conclusion::Success));
    assert_eq!(
        get(&f, "/api/v1/orgs/acme/actions/runners/jobs?labels=a")
            .await
            .text,
        "null"
    );
    // Rerun: same job, new attempt and handle.
    let handle = f.rerun_job(blocked).unwrap();
    assert_ne!(handle, job.handle);
    let j = get(&f, "/api/v1/orgs/acme/actions/runners/jobs?labels=a")
        .await
        .json();
    assert_eq!(
        (j[0]["attempt"].as_i64(), j[0]["handle"].as_str()),
        (Some(2), Some(handle.as_str()))
    );
    assert_eq!(j[0]["task_id"], 0);
    // v14 has no attempt/handle.
    let old = fake(V14).await;
    old.queue_job("acme/app", "a", &["a"]);
    let j = get(&old, "/api/v1/admin/runners/jobs").await.json();
    let keys: Vec<&String> = j[0].as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 8, "{keys:?}");
}

#[tokio::test]
async fn runner_rest_create_list_page_get_delete() {
    let f = fake(V15).await;
    f.add_org("acme", &[]);
    f.add_repo("acme/app");
    let base = "/api/v1/orgs/acme/actions/runners";
    let missing = call(
        &f,
        "POST",
        base,
        Some(ADMIN_TOKEN),
        Some(json!({"description": "x"})),
    )
    .await;
    assert_eq!(missing.status, 422);
    let mut created = Vec::new();
    for i in 0..3 {
        let body = json!({"name": format!("r{i}"), "description": "d", "ephemeral": i == 0});
        let r = call(&f, "POST", base, Some(ADMIN_TOKEN), Some(body)).await;
        assert_eq!(r.status, 201);
        let v = r.json();
        assert_eq!(v.as_object().unwrap().len(), 3, "{{id, uuid, token}}");
        created.push(v["id"].as_i64().unwrap());
    }
    let repo_runner = declared_runner(&f, "/api/v1/repos/acme/app/actions/runners", &["a"], false).await;
    let page = get(&f, &format!("{base}?page=2&limit=2")).await;
    assert_eq!(page.headers["x-total-count"], "3");
    let link = page.headers["link"].to_str().unwrap();
    assert!(
        link.contains("rel=\"first\"") && link.contains("page=1"),
        "{link}"
    );
    assert_eq!(ids(&page.json()), [created[2]]);
    let all = get(&f, base).await.json();
    assert_eq!(all[0]["ephemeral"], true);
    let first = &all[0];
    let owner_id = f.job(f.queue_job("acme/x", "j", &[])).unwrap().owner_id;
    let want = json!({
        "id": created[0], "uuid": first["uuid"], "owner_id": owner_id, "repo_id": 0, "name": "r0",
        "status": "offline", "version": "", "labels": [], "description": "d", "ephemeral": true,
    });
    assert_eq!(first, &want);
    assert_eq!(
        get(&f, &format!("{base}?limit=100"))
            .await
            .json()
            .as_array()
            .unwrap()
            .len(),
        3
    );
    let visible = get(&f, "/api/v1/repos/acme/app/actions/runners?visible=true")
        .await
        .json();
    // The repository's runner called in (`Declare`): `last_online DESC` lists it first, the
    // never-online ones after it.
    let want = [repo_runner.0, created[0], created[1], created[2]];
    assert_eq!(ids(&visible), want, "visible adds the org's runners");
    let own = get(&f, "/api/v1/repos/acme/app/actions/runners").await.json();
    assert_eq!(ids(&own), [repo_runner.0]);
    let r = get(&f, &format!("{base}/{}", created[1])).await;
    assert_eq!((r.status, r.json()["name"].clone()), (200, json!("r1")));
    assert_eq!(
        get(&f, &format!("{base}/{}", repo_runner.0)).await.status,
        404,
        "not the org's own"
    );
    let del = call(
        &f,
        "DELETE",
        &format!("{base}/{}", repo_runner.0),
        Some(ADMIN_TOKEN),
        None,
    )
    .await;
    assert_eq!(del.status, 404, "owned by another scope");
    let del = call(
        &f,
        "DELETE",
        &format!("{base}/{}", created[1]),
        Some(ADMIN_TOKEN),
        None,
    )
    .await;
    assert_eq!(del.status, 204);
    assert_eq!(get(&f, &format!("{base}/{}", created[1])).await.status, 404);
    assert_eq!(f.deleted_runners(), [created[1]]);
    assert_eq!(
        ids(&get(&f, "/api/v1/admin/actions/runners").await.json()).len(),
        3,
        "admin sees all"
    );
}

#[tokio::test]
async fn auth_401_403_404() {
    let f = fake(V15).await;
    f.add_org("acme", &["alice"]);
    f.add_repo("acme/app");
    f.add_repo("bob/tool");
    let alice = f.add_token("alice");
    let bob = f.add_token("bob");
    let reader = f.add_scoped_token("alice", &["read:organization"]);
    f.queue_job("alice/own", "mine", &["a"]);
    f.queue_job("bob/tool", "bobs", &["a"]);
    let jobs = "/api/v1/orgs/acme/actions/runners/jobs?labels=a";
    let cases = [
        (jobs, None, 401),
        (jobs, Some("wrong"), 401),
        (jobs, Some(bob.as_str()), 403),
        (jobs, Some(alice.as_str()), 200),
        (jobs, Some(reader.as_str()), 200),
        ("/api/v1/admin/actions/runners/jobs", Some(alice.as_str()), 403),
        (
            "/api/v1/orgs/nope/actions/runners/jobs",
            Some(alice.as_str()),
            404,
        ),
        (
            "/api/v1/repos/acme/app/actions/runners/jobs",
            Some(alice.as_str()),
            200,
        ),
        (
            "/api/v1/repos/acme/app/actions/runners/jobs",
            Some(bob.as_str()),
            403,
        ),
        (
            "/api/v1/repos/acme/app/actions/runners/jobs",
            Some(reader.as_str()),
            403,
        ),
        ("/api/v1/repos/bob/tool/actions/runners", Some(bob.as_str()), 200),
    ];
    for (path, tok, want) in cases {
        let r = call(&f, "GET", path, tok, None).await;
        assert_eq!(r.status, want, "{path} with {tok:?}: {}", r.text);
        if want >= 400 {
            assert!(r.json()["message"].is_string());
        }
    }
    let create = call(
        &f,
        "POST",
        "/api/v1/orgs/acme/actions/runners",
        Some(&reader),
        Some(json!({"name": "x"})),
    )
    .await;
    assert_eq!(create.status, 403, "read scope cannot create");
    let mine = call(&f, "GET", "/api/v1/user/actions/runners/jobs", Some(&alice), None)
        .await
        .json();
    assert_eq!(mine[0]["name"], "mine", "user scope is the token's owner");
    assert_eq!(mine.as_array().unwrap().len(), 1);
}

/// `GET /api/v1/user` answers the token's own user (`routers/api/v1/user/user.go`
/// `GetAuthenticatedUser@v15.0.0`, `convert.ToUser`: the name is `login`), behind the
/// `read:user` token scope (`routers/api/v1/api.go`: the `/user` group has
/// `tokenRequiresScopes(AccessTokenScopeCategoryUser)`).
#[tokio::test]
async fn the_current_user_is_the_tokens_owner() {
    let f = fake(V15).await;
    let alice = f.add_token("alice");
    let org_only = f.add_scoped_token("alice", &["read:organization"]);
    let me = call(&f, "GET", "/api/v1/user", Some(&alice), None).await;
    assert_eq!(me.status, 200);
    assert_eq!(me.json()["login"], "alice");
    assert_eq!(me.json()["id"], f.add_user("alice", false));
    let r = call(&f, "GET", "/api/v1/user", Some(&org_only), None).await;
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(call(&f, "GET", "/api/v1/user", None, None).await.status, 401);
}

/// Forgejo lists runners by `last_online DESC` (`models/actions/runner.go`
/// `FindRunnerOptions.ToOrders@v15.0.0`; `shared.ListRunners` sets no `Sort` and has no sort
/// parameter), and every runner call but `Register` rewrites `last_online`
/// (`routers/api/actions/runner/interceptor.go` `withRunner`). A runner that calls in between
/// two page requests moves to page 1: the next page skips it and repeats another row.
#[tokio::test]
async fn the_runner_list_follows_last_online_and_its_pages_shift() {
    let f = fake(V15).await;
    let base = "/api/v1/admin/actions/runners";
    let mut made = Vec::new();
    for _ in 0..3 {
        made.push(declared_runner(&f, base, &["a"], false).await);
    }
    let never = call(&f, "POST", base, Some(ADMIN_TOKEN), Some(json!({"name": "n"})))
        .await
        .json()["id"]
        .as_i64()
        .unwrap();
    let [a, b, c] = [made[0].0, made[1].0, made[2].0];
    assert_eq!(ids(&get(&f, base).await.json()), [c, b, a, never]);
    // Any runner call (here a poll) puts the runner first.
    rpc(&f, "FetchTask", (&made[0].1, &made[0].2), json!({})).await;
    assert_eq!(ids(&get(&f, base).await.json()), [a, c, b, never]);
    // The list is read in pages; b polls after page 1 was read.
    f.before_runner_page(move |page, m| {
        if page == 2 {
            m.touch_runner(b);
        }
    });
    let first = ids(&get(&f, &format!("{base}?page=1&limit=2")).await.json());
    let second = get(&f, &format!("{base}?page=2&limit=2")).await;
    assert_eq!(second.headers["x-total-count"], "4");
    let second = ids(&second.json());
    assert_eq!(
        (first.as_slice(), second.as_slice()),
        ([a, c].as_slice(), [c, never].as_slice())
    );
    let seen: std::collections::BTreeSet<i64> = first.iter().chain(&second).copied().collect();
    assert!(!seen.contains(&b), "b was skipped");
    f.clear_runner_page_hook();
    assert_eq!(ids(&get(&f, base).await.json()), [b, a, c, never]);
}

#[tokio::test]
async fn faults_and_request_log() {
    let f = fake(V15).await;
    f.queue_job("o/r", "j", &["a"]);
    let path = "/api/v1/admin/actions/runners/jobs?labels=a";
    f.inject_fault(Fault::status("/runners/jobs", 503).times(2).retry_after("1"));
    let r = get(&f, path).await;
    assert_eq!((r.status, r.headers["retry-after"].to_str().unwrap()), (503, "1"));
    assert_eq!(get(&f, path).await.status, 503);
    assert_eq!(get(&f, path).await.status, 200, "fault used up");
    f.inject_fault(Fault::garbage("/runners/jobs").times(1));
    let r = get(&f, path).await;
    assert_eq!(r.status, 200);
    assert!(
        serde_json::from_str::<Value>(&r.text).is_err(),
        "garbage: {}",
        r.text
    );
    f.inject_fault(Fault::latency("/runners/jobs", Duration::from_secs(5)).times(1));
    let slow = reqwest::Client::builder()
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let err = slow.get(format!("{}{path}", f.url())).send().await;
    assert!(err.is_err_and(|e| e.is_timeout()));
    f.inject_fault(Fault::status("FetchTask", 500).method("POST"));
    let (s, _) = rpc(&f, "FetchTask", ("x", "y"), json!({})).await;
    assert_eq!(s, 500);
    f.clear_faults();
    let (s, _) = rpc(&f, "FetchTask", ("x", "y"), json!({})).await;
    assert_eq!(s, 401);
    let log = f.requests();
    let jobs: Vec<u16> = log
        .iter()
        .filter(|r| r.path.ends_with("/runners/jobs"))
        .map(|r| r.status)
        .collect();
    assert_eq!(&jobs[..4], [503, 503, 200, 200]);
    assert!(
        log.iter()
            .all(|r| !r.path.contains("/runners/jobs") || (r.authorized && r.query == "labels=a"))
    );
    f.clear_requests();
    assert!(f.requests().is_empty());
}
