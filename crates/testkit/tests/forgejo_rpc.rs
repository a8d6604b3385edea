//! The Forgejo fake's runner RPC over HTTP: handle binding, ephemeral runners, registration,
//! and the runner status it drives.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

mod forgejo_common;

use std::time::{Duration, Instant};

use forgejo_common::{V11, V14, V15, declared_runner, fake, get, rpc};
use forgerunner_testkit::forgejo::{
    Conclusion, FakeConfig, FakeScope, ForgejoFakeHandle, JobSpec, JobStatus,
};
use serde_json::{Value, json};

#[tokio::test]
async fn runner_status_thresholds() {
    let config = FakeConfig {
        idle_after: Duration::from_millis(1000),
        offline_after: Duration::from_millis(2500),
        ..FakeConfig::version(V15)
    };
    let f = ForgejoFakeHandle::start(config).await.unwrap();
    let status = |id: i64| {
        let f = f.clone();
        async move {
            get(&f, &format!("/api/v1/admin/actions/runners/{id}"))
                .await
                .json()["status"]
                .clone()
        }
    };
    let (id, uuid, token) = declared_runner(&f, "/api/v1/admin/actions/runners", &["a"], false).await;
    let job = f.queue_job("o/r", "j", &["a"]);
    let (_, t) = rpc(&f, "FetchTask", (&uuid, &token), json!({})).await;
    let task = t["task"]["id"].as_i64().unwrap();
    assert_eq!(f.job(job).unwrap().task_id, task);
    let (s, v) = rpc(
        &f,
        "UpdateLog",
        (&uuid, &token),
        json!({"taskId": task, "index": 0, "rows": [{}]}),
    )
    .await;
    assert_eq!((s, v["ackIndex"].as_i64()), (200, Some(1)));
    assert_eq!(status(id).await, "active");
    // Wait (bounded) for the configured thresholds to pass: idle, then offline.
    for want in ["idle", "offline"] {
        let deadline = Instant::now() + Duration::from_secs(20);
        while status(id).await != want {
            assert!(Instant::now() < deadline, "never became {want}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    rpc(&f, "UpdateTask", (&uuid, &token), json!({"state": {"id": task}})).await;
    assert_eq!(status(id).await, "active");
    f.set_runner_seen(id, Some(Duration::ZERO), None);
    assert_eq!(status(id).await, "idle");
    f.set_runner_seen(id, None, Some(Duration::ZERO));
    assert_eq!(status(id).await, "offline", "never online wins");
}

#[tokio::test]
async fn fetch_single_task_binds_a_handle_but_plain_runners_can_steal() {
    let f = fake(V15).await;
    let admin = "/api/v1/admin/actions/runners";
    let (_, bu, bt) = declared_runner(&f, admin, &["a", "b"], true).await;
    let (_, pu, pt) = declared_runner(&f, admin, &["a"], false).await;
    let wide = f.queue_job("o/r", "wide", &["a", "b"]);
    let narrow = f.queue_job("o/r", "narrow", &["a"]);
    let wide_handle = f.job(wide).unwrap().handle;
    let narrow_handle = f.job(narrow).unwrap().handle;
    let (_, t) = rpc(&f, "FetchSingleTask", (&pu, &pt), json!({"handle": wide_handle})).await;
    assert_eq!(t["task"], Value::Null, "labels must cover runs_on");
    // The plain runner takes the narrow job: the runner bound to it then never gets it.
    let (_, t) = rpc(&f, "FetchTask", (&pu, &pt), json!({})).await;
    assert_eq!(t["task"]["jobId"].as_i64(), Some(narrow));
    let (_, t) = rpc(
        &f,
        "FetchSingleTask",
        (&bu, &bt),
        json!({"handle": narrow_handle}),
    )
    .await;
    assert_eq!(t["task"], Value::Null);
    let (_, t) = rpc(&f, "FetchSingleTask", (&bu, &bt), json!({"handle": wide_handle})).await;
    assert_eq!(t["task"]["handle"].as_str(), Some(wide_handle.as_str()));
    assert_eq!(f.tasks_for_job(narrow).len(), 1);
    assert_eq!(f.tasks_for_job(wide)[0].runner_labels, ["a", "b"]);
    let old = fake(V14).await;
    let (s, v) = rpc(&old, "FetchSingleTask", ("x", "y"), json!({"handle": "h"})).await;
    assert_eq!((s, v["code"].as_str()), (404, Some("unimplemented")));
}

#[tokio::test]
async fn ephemeral_runner_is_deleted_after_its_final_result_only() {
    let f = fake(V15).await;
    let admin = "/api/v1/admin/actions/runners";
    let (id, uuid, token) = declared_runner(&f, admin, &["a"], true).await;
    let (idle, ..) = declared_runner(&f, admin, &["zzz"], true).await;
    let j1 = f.queue_job("o/r", "one", &["a"]);
    f.queue_job("o/r", "two", &["a"]);
    let (_, t) = rpc(&f, "FetchTask", (&uuid, &token), json!({})).await;
    let task = t["task"]["id"].as_i64().unwrap();
    let (_, t) = rpc(&f, "FetchTask", (&uuid, &token), json!({})).await;
    assert_eq!(t["task"], Value::Null, "one task per ephemeral runner");
    let (_, v) = rpc(
        &f,
        "UpdateTask",
        (&uuid, &token),
        json!({"state": {"id": task, "result": "RESULT_UNSPECIFIED"}}),
    )
    .await;
    assert_eq!(v["state"]["result"], "RESULT_UNSPECIFIED");
    assert!(f.runner(id).is_some(), "a heartbeat is not final");
    let (s, _) = rpc(
        &f,
        "UpdateTask",
        (&uuid, &token),
        json!({"state": {"id": task, "result": "RESULT_SUCCESS"}}),
    )
    .await;
    assert_eq!(s, 200);
    assert!(f.runner(id).is_none());
    assert_eq!(f.job(j1).unwrap().status, JobStatus::Done(Conclusion::Success));
    let (s, _) = rpc(&f, "FetchTask", (&uuid, &token), json!({})).await;
    assert_eq!(s, 401, "deleted runner");
    assert!(f.cleanup_ephemeral_runners().is_empty());
    assert!(f.runner(idle).is_some(), "never-tasked ephemeral runners stay");
}

#[tokio::test]
async fn registration_token_and_register_rpc() {
    let f = fake(V11).await;
    f.add_org("acme", &["alice"]);
    let r = get(&f, "/api/v1/orgs/acme/actions/runners/registration-token").await;
    let token = r.json()["token"].as_str().unwrap().to_string();
    assert_eq!(
        get(&f, "/api/v1/orgs/acme/actions/runners/registration-token")
            .await
            .json()["token"],
        token.as_str()
    );
    assert_eq!(f.registration_token(&FakeScope::Owner("acme".into())), token);
    let (s, _) = rpc(&f, "Register", ("", ""), json!({"name": "x", "token": "nope"})).await;
    assert_eq!(s, 401);
    let body = json!({"name": "x", "token": token, "labels": ["a"], "ephemeral": true});
    let (s, v) = rpc(&f, "Register", ("", ""), body).await;
    assert_eq!(
        (s, v["runner"]["ephemeral"].as_bool()),
        (200, Some(false)),
        "no ephemeral before v15"
    );
    let creds = (
        v["runner"]["uuid"].as_str().unwrap(),
        v["runner"]["token"].as_str().unwrap(),
    );
    f.queue_job("elsewhere/r", "out-of-scope", &["a"]);
    let mine = f.queue_job("acme/app", "mine", &["a"]);
    let (_, t) = rpc(&f, "FetchTask", creds, json!({})).await;
    assert_eq!(t["task"]["jobId"].as_i64(), Some(mine));
}

/// A re-run makes a new attempt with a new handle (`models/actions/run_job.go`
/// `PrepareNextAttempt@v15.0.0`: refused while the job is active, then `Handle = uuid`), and
/// `CreateTaskForRunner` hands a job only to the runner that asks for its current handle
/// (`IsRequestedByRunner`): a runner bound to the old handle never gets the re-run. Cancel ends
/// a waiting job at once; it is no longer listed.
#[tokio::test]
async fn a_rerun_gets_a_new_handle_the_old_binding_never_matches() {
    let f = fake(V15).await;
    let admin = "/api/v1/admin/actions/runners";
    let (_, bu, bt) = declared_runner(&f, admin, &["a"], true).await;
    let job = f.queue_job("o/r", "j", &["a"]);
    let old = f.job(job).unwrap().handle;
    assert_eq!(f.rerun_job(job), None, "a waiting job cannot be re-run");
    assert!(f.cancel_job(job));
    let listed = get(&f, "/api/v1/admin/actions/runners/jobs?labels=a")
        .await
        .json();
    assert_eq!(listed, Value::Null, "a cancelled job is not listed");
    let new = f.rerun_job(job).expect("a finished job can be re-run");
    assert_ne!(new, old);
    let j = f.job(job).unwrap();
    assert_eq!((j.attempt, j.status), (2, JobStatus::Waiting));
    let listed = get(&f, "/api/v1/admin/actions/runners/jobs?labels=a")
        .await
        .json();
    assert_eq!(listed[0]["handle"], new.as_str());
    let (_, t) = rpc(&f, "FetchSingleTask", (&bu, &bt), json!({"handle": old})).await;
    assert_eq!(t["task"], Value::Null, "the old handle matches nothing");
    let (_, t) = rpc(&f, "FetchSingleTask", (&bu, &bt), json!({"handle": new})).await;
    assert_eq!(t["task"]["jobId"].as_i64(), Some(job));
}

/// Forgejo 14+ queues a run behind a running (or older, unfinished) run of the same
/// concurrency group: `models/actions/task.go` `GetAvailableJobsForRunner@v15.0.0` adds
/// `getConcurrencyCondition()` when `[actions] CONCURRENCY_GROUP_QUEUE_ENABLED` (default true,
/// `modules/setting/actions.go@v14.0.0`), while the job lists
/// (`routers/api/v1/shared/runners.go` `GetActionRunJobs`) show the job `waiting`.
#[tokio::test]
async fn a_job_behind_its_concurrency_group_is_listed_waiting_but_never_handed_out() {
    for (version, queue, held) in [
        (V15, true, true),
        (V14, true, true),
        (V15, false, false),
        (V11, true, false),
    ] {
        let f = ForgejoFakeHandle::start(FakeConfig {
            concurrency_group_queue: queue,
            ..FakeConfig::version(version)
        })
        .await
        .unwrap();
        let admin = if version == V15 {
            "/api/v1/admin/actions/runners"
        } else {
            "/api/v1/admin/runners"
        };
        let token = f.registration_token(&FakeScope::Global);
        let reg = |name: &str| json!({"name": name, "token": token, "labels": ["a"]});
        let (_, first) = rpc(&f, "Register", ("", ""), reg("first")).await;
        let (_, second) = rpc(&f, "Register", ("", ""), reg("second")).await;
        let creds = |v: &Value| {
            (
                v["runner"]["uuid"].as_str().unwrap().to_string(),
                v["runner"]["token"].as_str().unwrap().to_string(),
            )
        };
        let (fu, ft) = creds(&first);
        let (su, st) = creds(&second);
        let deploy = f.queue(JobSpec::new("o/r", "deploy", &["a"]).concurrency("prod"));
        let next = f.queue(JobSpec::new("o/r", "deploy", &["a"]).concurrency("prod"));
        let other_repo = f.queue(JobSpec::new("o/other", "deploy", &["a"]).concurrency("prod"));
        let (_, t) = rpc(&f, "FetchTask", (&fu, &ft), json!({})).await;
        assert_eq!(t["task"]["jobId"].as_i64(), Some(deploy), "{version}");
        let listed = get(&f, &format!("{admin}/jobs?labels=a")).await.json();
        let waiting: Vec<i64> = listed
            .as_array()
            .unwrap()
            .iter()
            .filter(|j| j["status"] == "waiting")
            .map(|j| j["id"].as_i64().unwrap())
            .collect();
        assert_eq!(
            waiting,
            [other_repo, next],
            "{version}: listed waiting either way"
        );
        let (_, t) = rpc(&f, "FetchTask", (&su, &st), json!({})).await;
        let got = t["task"]["jobId"].as_i64();
        if held {
            assert_eq!(
                got,
                Some(other_repo),
                "{version}: another repository's group is free"
            );
            let (_, t) = rpc(&f, "FetchTask", (&su, &st), json!({})).await;
            assert_eq!(t["task"], Value::Null, "{version}: held behind the running run");
            assert!(f.complete_job(deploy, Conclusion::Success));
            let (_, t) = rpc(&f, "FetchTask", (&su, &st), json!({})).await;
            assert_eq!(t["task"]["jobId"].as_i64(), Some(next), "{version}: released");
        } else {
            assert_eq!(got, Some(next), "{version}: no queue");
        }
    }
}
