//! Conformance of the fake API server: finalizers, garbage collection, propagation policies,
//! 410 Gone, bookmarks, server-initiated disconnects and fault injection.

use std::time::Duration;

use forgerunner_testkit::apiserver::{FakeApiServer, Fault, ServerConfig, Verb};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

fn cm(name: &str, owner: Option<&ConfigMap>, finalizers: &[&str]) -> ConfigMap {
    let orefs: Vec<_> = owner
        .and_then(|o| o.controller_owner_ref(&()))
        .into_iter()
        .collect();
    serde_json::from_value(
        json!({"metadata": {"name": name, "ownerReferences": orefs, "finalizers": finalizers}}),
    )
    .expect("cm")
}

async fn eventually<F: std::future::Future<Output = bool>>(what: &str, f: impl Fn() -> F) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !f().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn code(e: kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("expected API error, got {other:?}"),
    }
}

#[tokio::test]
async fn finalizer_holds_deletion_until_removed() {
    let srv = FakeApiServer::start().await.expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(srv.client().expect("client"), "default");
    cms.create(&PostParams::default(), &cm("f", None, &["example.com/hold"]))
        .await
        .expect("create");
    let held = cms.delete("f", &DeleteParams::default()).await.expect("delete");
    let obj = held.left().expect("object still present");
    assert!(obj.metadata.deletion_timestamp.is_some());
    assert!(cms.get("f").await.is_ok(), "held by its finalizer");
    // New finalizers cannot be added while deleting.
    let add = json!([{"op": "add", "path": "/metadata/finalizers/-", "value": "x/y"}]);
    let patch: json_patch::Patch = serde_json::from_value(add).expect("patch");
    assert_eq!(
        code(
            cms.patch("f", &PatchParams::default(), &Patch::<()>::Json(patch))
                .await
                .expect_err("forbidden")
        ),
        403
    );
    cms.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("remove finalizer");
    assert_eq!(code(cms.get("f").await.expect_err("gone")), 404);
    srv.shutdown().await;
}

#[tokio::test]
async fn owner_deletion_collects_dependents_background_foreground_orphan() {
    let srv = FakeApiServer::start().await.expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(srv.client().expect("client"), "default");
    let names = || async {
        cms.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .into_iter()
            .map(|c| c.name_any())
            .collect::<Vec<_>>()
    };

    // Background: the owner goes at once, a chain of dependents follows.
    let owner = cms
        .create(&PostParams::default(), &cm("o", None, &[]))
        .await
        .expect("o");
    let child = cms
        .create(&PostParams::default(), &cm("o-child", Some(&owner), &[]))
        .await
        .expect("child");
    cms.create(&PostParams::default(), &cm("o-grandchild", Some(&child), &[]))
        .await
        .expect("gc");
    cms.delete("o", &DeleteParams::background())
        .await
        .expect("delete");
    eventually("background GC", || async { names().await.is_empty() }).await;

    // Foreground: the owner waits (deletionTimestamp + foregroundDeletion) for a held dependent.
    let owner = cms
        .create(&PostParams::default(), &cm("f", None, &[]))
        .await
        .expect("f");
    cms.create(&PostParams::default(), &cm("f-child", Some(&owner), &["x/hold"]))
        .await
        .expect("child");
    cms.delete("f", &DeleteParams::foreground())
        .await
        .expect("delete");
    let waiting = cms.get("f").await.expect("owner still there");
    assert!(waiting.finalizers().iter().any(|f| f == "foregroundDeletion"));
    assert!(
        cms.get("f-child")
            .await
            .expect("child")
            .metadata
            .deletion_timestamp
            .is_some()
    );
    cms.patch(
        "f-child",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release child");
    eventually("foreground completes", || async { names().await.is_empty() }).await;

    // Orphan: dependents stay, without the ownerReference.
    let owner = cms
        .create(&PostParams::default(), &cm("r", None, &[]))
        .await
        .expect("r");
    cms.create(&PostParams::default(), &cm("r-child", Some(&owner), &[]))
        .await
        .expect("child");
    cms.delete("r", &DeleteParams::orphan()).await.expect("delete");
    let kept = cms.get("r-child").await.expect("orphan kept");
    assert!(kept.owner_references().is_empty());
    srv.shutdown().await;
}

/// A dependent created after its owner is gone (a controller acting on a stale cache) is
/// collected, as the real garbage collector collects dependents of a dangling owner; one whose
/// owner lives stays.
#[tokio::test]
async fn a_dependent_of_an_owner_already_gone_is_collected() {
    let srv = FakeApiServer::start().await.expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(srv.client().expect("client"), "default");
    let owner = cms
        .create(&PostParams::default(), &cm("gone", None, &[]))
        .await
        .expect("owner");
    let live = cms
        .create(&PostParams::default(), &cm("live", None, &[]))
        .await
        .expect("live owner");
    cms.delete("gone", &DeleteParams::background())
        .await
        .expect("delete owner");
    cms.create(&PostParams::default(), &cm("late-child", Some(&owner), &[]))
        .await
        .expect("the create itself succeeds, as on a real server");
    cms.create(&PostParams::default(), &cm("kept-child", Some(&live), &[]))
        .await
        .expect("kept child");
    eventually("the dangling dependent to be collected", || async {
        cms.get_opt("late-child").await.expect("get").is_none()
    })
    .await;
    assert!(cms.get_opt("kept-child").await.expect("get").is_some());
}

#[tokio::test]
async fn jobs_orphan_pods_by_default_like_batch_v1() {
    let srv = FakeApiServer::start().await.expect("start");
    let client = srv.client().expect("client");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let job: Job = serde_json::from_value(json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "r", "image": "i:1"}]}}}}))
    .expect("job");
    for round in 0..2 {
        let j = jobs.create(&PostParams::default(), &job).await.expect("job");
        let oref = j.controller_owner_ref(&()).expect("oref");
        let pod: Pod = serde_json::from_value(
            json!({"metadata": {"name": format!("j-pod{round}"), "ownerReferences": [oref]},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "r", "image": "i:1"}]}}),
        )
        .expect("pod");
        pods.create(&PostParams::default(), &pod).await.expect("pod");
        let sec: Secret = serde_json::from_value(json!({"metadata": {"name": format!("j{round}"), "ownerReferences": [j.controller_owner_ref(&())]}}))
            .expect("secret");
        secrets
            .create(&PostParams::default(), &sec)
            .await
            .expect("secret");
        if round == 0 {
            jobs.delete("j", &DeleteParams::default())
                .await
                .expect("delete default");
            let p = pods.get("j-pod0").await.expect("pod orphaned by default");
            assert!(p.owner_references().is_empty());
        } else {
            jobs.delete("j", &DeleteParams::background())
                .await
                .expect("delete background");
            eventually("pod collected", || async {
                pods.get_opt("j-pod1").await.expect("get").is_none()
            })
            .await;
            eventually("secret collected", || async {
                secrets.get_opt("j1").await.expect("get").is_none()
            })
            .await;
        }
    }
    srv.shutdown().await;
}

#[tokio::test]
async fn namespace_deletion_removes_contents() {
    let srv = FakeApiServer::start().await.expect("start");
    let client = srv.client().expect("client");
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "t1"}})).expect("ns");
    nss.create(&PostParams::default(), &ns).await.expect("ns");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "t1");
    cms.create(&PostParams::default(), &cm("a", None, &[]))
        .await
        .expect("cm");
    nss.delete("t1", &DeleteParams::default())
        .await
        .expect("delete ns");
    eventually("namespace gone", || async {
        nss.get_opt("t1").await.expect("get").is_none()
    })
    .await;
    assert_eq!(code(cms.get("a").await.expect_err("gone")), 404);
    srv.shutdown().await;
}

#[tokio::test]
async fn watch_from_compacted_version_gets_410_and_bookmarks_flow() {
    let config = ServerConfig {
        bookmark_interval: Duration::from_millis(100),
        ..ServerConfig::default()
    };
    let srv = FakeApiServer::start_with(config).await.expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(srv.client().expect("client"), "default");
    let old = cms
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    cms.create(&PostParams::default(), &cm("a", None, &[]))
        .await
        .expect("cm");
    srv.compact();
    let mut s = cms
        .watch(&WatchParams::default(), &old)
        .await
        .expect("watch")
        .boxed();
    let ev = tokio::time::timeout(Duration::from_secs(10), s.try_next())
        .await
        .expect("in time")
        .expect("ok");
    match ev {
        Some(WatchEvent::Error(e)) => assert_eq!(e.code, 410),
        other => panic!("expected 410, got {other:?}"),
    }
    // Bookmarks when asked.
    let now = cms
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    let wp = WatchParams {
        bookmarks: true,
        ..WatchParams::default()
    }
    .timeout(30);
    let mut s = cms.watch(&wp, &now).await.expect("watch").boxed();
    let ev = tokio::time::timeout(Duration::from_secs(10), s.try_next())
        .await
        .expect("in time")
        .expect("ok");
    assert!(matches!(ev, Some(WatchEvent::Bookmark(_))), "{ev:?}");
    // A server-initiated disconnect ends the stream.
    srv.drop_watches();
    let end = tokio::time::timeout(Duration::from_secs(10), async {
        while let Ok(Some(_)) = s.try_next().await {}
    })
    .await;
    assert!(end.is_ok(), "stream must end after drop_watches");
    srv.shutdown().await;
}

#[tokio::test]
async fn injected_faults_and_request_log() {
    let srv = FakeApiServer::start().await.expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(srv.client().expect("client"), "default");
    srv.inject(
        Fault::error(500)
            .verb(Verb::Create)
            .resource("configmaps")
            .times(1),
    );
    assert_eq!(
        code(
            cms.create(&PostParams::default(), &cm("a", None, &[]))
                .await
                .expect_err("500")
        ),
        500
    );
    // kube's client retries 503 and 429 by itself: the fault shows in the log, the call succeeds.
    srv.inject(
        Fault::error(503)
            .verb(Verb::Create)
            .resource("configmaps")
            .times(1),
    );
    cms.create(&PostParams::default(), &cm("a", None, &[]))
        .await
        .expect("retried past 503");
    srv.inject(Fault::error(429).verb(Verb::Get).times(1).retry_after(0));
    cms.get("a").await.expect("retried past 429");
    let statuses: Vec<u16> = srv
        .requests()
        .records
        .iter()
        .filter(|r| r.resource == "configmaps")
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [500, 503, 201, 429, 200]);
    srv.inject(Fault::error(409).verb(Verb::Patch).namespace("default").times(1));
    let e = cms
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "v"}})),
        )
        .await;
    assert_eq!(code(e.expect_err("409")), 409);
    srv.inject(
        Fault::latency(Duration::from_millis(300))
            .verb(Verb::Get)
            .times(1),
    );
    let t0 = std::time::Instant::now();
    cms.get("a").await.expect("slow get");
    assert!(t0.elapsed() >= Duration::from_millis(300));
    // Dropped watches end early.
    srv.inject(Fault::drop_watch(Duration::ZERO).times(1));
    let mut s = cms
        .watch(&WatchParams::default().timeout(60), "0")
        .await
        .expect("watch")
        .boxed();
    let drained = tokio::time::timeout(Duration::from_secs(10), async {
        while let Ok(Some(_)) = s.try_next().await {}
    })
    .await;
    assert!(drained.is_ok());
    let log = srv.requests();
    assert_eq!(log.count(Verb::Create, "configmaps"), 3);
    assert_eq!(log.count_in(Verb::Get, "configmaps", "default"), 3);
    assert!(log.records.iter().all(|r| !r.user_agent.is_empty()));
    let footprint = log.rbac_footprint("forgerunner-testkit");
    assert!(footprint.contains(&(String::new(), "configmaps".to_string(), Verb::Watch)));
    srv.shutdown().await;
}

#[tokio::test]
async fn kube_event_recorder_creates_then_patches_a_series() {
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let srv = FakeApiServer::start().await.expect("start");
    let client = srv.client().expect("client");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let obj = cms
        .create(&PostParams::default(), &cm("target", None, &[]))
        .await
        .expect("cm");
    let reporter = Reporter {
        controller: "forgerunner".into(),
        instance: Some("pod-0".into()),
    };
    let recorder = Recorder::new(client.clone(), reporter);
    let ev = Event {
        type_: EventType::Normal,
        reason: "Scaled".into(),
        note: Some("scaled to 2".into()),
        action: "Scale".into(),
        secondary: None,
    };
    let oref = obj.object_ref(&());
    recorder.publish(&ev, &oref).await.expect("first");
    recorder.publish(&ev, &oref).await.expect("second");
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client, "default");
    let list = events.list(&ListParams::default()).await.expect("list");
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].series.as_ref().map(|s| s.count), Some(2));
    assert_eq!(srv.requests().count(Verb::Patch, "events"), 1);
    srv.shutdown().await;
}
