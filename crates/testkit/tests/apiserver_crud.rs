//! Conformance of the fake API server: CRUD, resourceVersion semantics, selectors and watches
//! through kube::Client.

use std::collections::BTreeMap;
use std::time::Duration;

use forgerunner_testkit::apiserver::{FakeApiServer, Verb};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::core::Status as ErrorResponse;
use serde_json::json;

fn pod(name: &str, labels: &[(&str, &str)]) -> Pod {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox:1"}]},
    }))
    .expect("pod")
}

fn api_err(e: kube::Error) -> ErrorResponse {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn pods_crud_and_resource_versions() {
    let srv = FakeApiServer::start().await.expect("start");
    let pods: Api<Pod> = Api::namespaced(srv.client().expect("client"), "default");
    let created = pods
        .create(&PostParams::default(), &pod("a", &[("app", "x")]))
        .await
        .expect("create");
    let meta = &created.metadata;
    assert!(meta.uid.as_deref().is_some_and(|u| u.len() == 36));
    assert!(meta.creation_timestamp.is_some());
    assert_eq!(meta.generation, Some(1));
    assert_eq!(
        created.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending")
    );
    let rv1: u64 = meta
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .expect("rv");

    let dup = pods
        .create(&PostParams::default(), &pod("a", &[]))
        .await
        .map(|_| ())
        .map_err(api_err);
    let dup = dup.expect_err("duplicate");
    assert_eq!((dup.code, dup.reason.as_str()), (409, "AlreadyExists"));

    let got = pods.get("a").await.expect("get");
    assert_eq!(got.metadata.uid, created.metadata.uid);

    let patched = pods
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"tier": "web"}}})),
        )
        .await
        .expect("patch");
    let rv2: u64 = patched
        .metadata
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .expect("rv");
    assert!(rv2 > rv1);
    assert_eq!(
        patched.metadata.generation,
        Some(1),
        "metadata-only change keeps generation"
    );

    // A stale resourceVersion on replace is a 409 Conflict.
    let mut stale = created.clone();
    stale.metadata.labels = Some(BTreeMap::from([("x".to_string(), "y".to_string())]));
    let err = pods
        .replace("a", &PostParams::default(), &stale)
        .await
        .map_err(api_err)
        .expect_err("stale");
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));

    // A no-op patch does not bump the resourceVersion.
    let same = pods
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"tier": "web"}}})),
        )
        .await
        .expect("noop");
    assert_eq!(same.metadata.resource_version, patched.metadata.resource_version);

    // Status is ignored on the main endpoint and applied on /status.
    let ignored = pods
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running"}})),
        )
        .await
        .expect("main patch");
    assert_eq!(ignored.status.and_then(|s| s.phase).as_deref(), Some("Pending"));
    let running = pods
        .patch_status(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running"}, "spec": {"nodeName": "n"}})),
        )
        .await
        .expect("status patch");
    assert_eq!(running.status.and_then(|s| s.phase).as_deref(), Some("Running"));
    assert_eq!(
        running.spec.and_then(|s| s.node_name),
        None,
        "spec ignored on /status"
    );

    pods.delete("a", &DeleteParams::default()).await.expect("delete");
    let gone = pods.get("a").await.map_err(api_err).expect_err("deleted");
    assert_eq!((gone.code, gone.reason.as_str()), (404, "NotFound"));
    assert_eq!(gone.message, "pods \"a\" not found");
    assert_eq!(srv.requests().count(Verb::Create, "pods"), 2);
    assert_eq!(srv.requests().count_in(Verb::Patch, "pods/status", "default"), 1);
    srv.shutdown().await;
}

#[tokio::test]
async fn generate_name_secrets_configmaps_jobs() {
    let srv = FakeApiServer::start().await.expect("start");
    let client = srv.client().expect("client");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let s: Secret = serde_json::from_value(json!({
        "metadata": {"generateName": "tok-"}, "stringData": {"token": "abc"},
    }))
    .expect("secret");
    let s = secrets
        .create(&PostParams::default(), &s)
        .await
        .expect("create secret");
    let name = s.metadata.name.clone().expect("name");
    assert!(name.starts_with("tok-") && name.len() == 9, "{name}");
    assert_eq!(s.type_.as_deref(), Some("Opaque"));
    let data = s.data.expect("data");
    assert_eq!(data.get("token").map(|b| b.0.clone()), Some(b"abc".to_vec()));
    assert!(s.string_data.is_none());

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"k": "v"}})).expect("cm");
    cms.create(&PostParams::default(), &cm).await.expect("create cm");
    assert_eq!(
        cms.list(&ListParams::default()).await.expect("list").items.len(),
        1
    );

    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "j"},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "runner", "image": "runner:1"}]}}},
    }))
    .expect("job");
    let job = jobs
        .create(&PostParams::default(), &job)
        .await
        .expect("create job");
    let spec = job.spec.expect("spec");
    assert_eq!(spec.backoff_limit, Some(0));
    assert_eq!(spec.completions, Some(1));
    let uid = job.metadata.uid.expect("uid");
    let sel = spec.selector.and_then(|s| s.match_labels).unwrap_or_default();
    assert_eq!(sel.get("batch.kubernetes.io/controller-uid"), Some(&uid));
    let tl = spec.template.metadata.and_then(|m| m.labels).unwrap_or_default();
    assert_eq!(tl.get("job-name").map(String::as_str), Some("j"));

    let bad: Job = serde_json::from_value(json!({
        "metadata": {"name": "bad"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
    }))
    .expect("job");
    let err = jobs
        .create(&PostParams::default(), &bad)
        .await
        .map_err(api_err)
        .expect_err("invalid");
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));

    // Creating in a namespace that does not exist fails like the real server.
    let nowhere: Api<ConfigMap> = Api::namespaced(client.clone(), "nowhere");
    let err = nowhere
        .create(&PostParams::default(), &cm)
        .await
        .map_err(api_err)
        .expect_err("no ns");
    assert_eq!(
        (err.code, err.message.as_str()),
        (404, "namespaces \"nowhere\" not found")
    );
    let nss: Api<Namespace> = Api::all(client);
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "nowhere"}})).expect("ns");
    nss.create(&PostParams::default(), &ns).await.expect("ns");
    nowhere
        .create(&PostParams::default(), &cm)
        .await
        .expect("now it works");
    srv.shutdown().await;
}

#[tokio::test]
async fn label_and_field_selectors_and_pagination() {
    let srv = FakeApiServer::start().await.expect("start");
    let pods: Api<Pod> = Api::namespaced(srv.client().expect("client"), "default");
    for (i, app) in ["x", "y", "x", "z", "x"].iter().enumerate() {
        pods.create(&PostParams::default(), &pod(&format!("p{i}"), &[("app", app)]))
            .await
            .expect("create");
    }
    let names = |l: kube::core::ObjectList<Pod>| -> Vec<String> {
        l.items.into_iter().filter_map(|p| p.metadata.name).collect()
    };
    let lp = |s: &str| ListParams::default().labels(s);
    assert_eq!(
        names(pods.list(&lp("app=x")).await.expect("l")),
        ["p0", "p2", "p4"]
    );
    assert_eq!(names(pods.list(&lp("app!=x")).await.expect("l")), ["p1", "p3"]);
    assert_eq!(
        names(pods.list(&lp("app in (y,z)")).await.expect("l")),
        ["p1", "p3"]
    );
    assert_eq!(names(pods.list(&lp("app notin (x,y)")).await.expect("l")), ["p3"]);
    assert_eq!(pods.list(&lp("app")).await.expect("l").items.len(), 5);
    assert_eq!(pods.list(&lp("!app")).await.expect("l").items.len(), 0);
    let fp = ListParams::default().fields("metadata.name=p3");
    assert_eq!(names(pods.list(&fp).await.expect("l")), ["p3"]);
    let fp = ListParams::default().fields("status.phase=Pending,metadata.name!=p3");
    assert_eq!(pods.list(&fp).await.expect("l").items.len(), 4);
    let bad = pods
        .list(&ListParams::default().fields("spec.bogus=1"))
        .await
        .map_err(api_err)
        .expect_err("bad");
    assert_eq!(bad.code, 400);

    // Pagination: limit + continue walks the list in order.
    let first = pods.list(&ListParams::default().limit(2)).await.expect("page 1");
    assert_eq!(names(first.clone()), ["p0", "p1"]);
    let token = first.metadata.continue_.clone().expect("continue");
    let second = pods
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .expect("page 2");
    assert_eq!(names(second.clone()), ["p2", "p3"]);
    assert_eq!(second.metadata.resource_version, first.metadata.resource_version);
    let token = second.metadata.continue_.clone().expect("continue");
    let third = pods
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .expect("page 3");
    assert_eq!(names(third.clone()), ["p4"]);
    assert!(third.metadata.continue_.as_deref().is_none_or(str::is_empty));
    srv.shutdown().await;
}

#[tokio::test]
async fn watch_streams_events_in_order_with_selector_transitions() {
    let srv = FakeApiServer::start().await.expect("start");
    let pods: Api<Pod> = Api::namespaced(srv.client().expect("client"), "default");
    let list = pods.list(&ListParams::default()).await.expect("list");
    let rv = list.metadata.resource_version.expect("rv");
    let wp = WatchParams::default().labels("app=x").timeout(20);
    let mut stream = pods.watch(&wp, &rv).await.expect("watch").boxed();
    pods.create(&PostParams::default(), &pod("w", &[("app", "x")]))
        .await
        .expect("create");
    pods.create(&PostParams::default(), &pod("other", &[("app", "y")]))
        .await
        .expect("create");
    pods.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "y"}}})),
    )
    .await
    .expect("relabel");
    pods.patch(
        "other",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "x"}}})),
    )
    .await
    .expect("relabel");
    pods.delete("other", &DeleteParams::default())
        .await
        .expect("delete");
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while seen.len() < 4 {
        let ev = tokio::time::timeout_at(deadline, stream.try_next())
            .await
            .expect("in time")
            .expect("ok")
            .expect("event");
        match ev {
            WatchEvent::Added(p) => seen.push(format!("ADDED {}", p.metadata.name.unwrap_or_default())),
            WatchEvent::Modified(p) => seen.push(format!("MODIFIED {}", p.metadata.name.unwrap_or_default())),
            WatchEvent::Deleted(p) => seen.push(format!("DELETED {}", p.metadata.name.unwrap_or_default())),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("watch error {e:?}"),
        }
    }
    assert_eq!(seen, ["ADDED w", "DELETED w", "ADDED other", "DELETED other"]);
    srv.shutdown().await;
}

#[tokio::test]
async fn watcher_streaming_list_gets_initial_events_end_bookmark() {
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    let srv = FakeApiServer::start().await.expect("start");
    let pods: Api<Pod> = Api::namespaced(srv.client().expect("client"), "default");
    for i in 0..3 {
        pods.create(&PostParams::default(), &pod(&format!("s{i}"), &[]))
            .await
            .expect("create");
    }
    let (reader, writer) = reflector::store::<Pod>();
    let cfg = watcher::Config::default().streaming_lists();
    let rf = reflector::reflector(writer, watcher(pods.clone(), cfg)).applied_objects();
    let task = tokio::spawn(async move { rf.for_each(|_| async {}).await });
    let ready = tokio::time::timeout(Duration::from_secs(15), reader.wait_until_ready()).await;
    assert!(ready.is_ok(), "store never became ready");
    assert_eq!(reader.state().len(), 3);
    assert_eq!(
        srv.requests().count(Verb::List, "pods"),
        0,
        "streaming lists never list"
    );
    task.abort();
    srv.shutdown().await;
}

#[tokio::test]
async fn metadata_only_get_list_and_watch() {
    let srv = FakeApiServer::start().await.expect("start");
    let client = srv.client().expect("client");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for (name, app) in [("m0", "x"), ("m1", "y")] {
        pods.create(&PostParams::default(), &pod(name, &[("app", app)]))
            .await
            .expect("create");
    }
    let listed = pods
        .list_metadata(&ListParams::default().labels("app in (x)"))
        .await
        .expect("metadata list");
    let names: Vec<_> = listed
        .items
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(names, ["m0"]);
    assert_eq!(
        listed.items[0].types.as_ref().map(|t| t.kind.as_str()),
        Some("PartialObjectMetadata")
    );
    let one = pods.get_metadata("m1").await.expect("metadata get");
    assert_eq!(one.metadata.labels.unwrap_or_default()["app"], "y");

    // The raw answer carries no spec or status, only metadata.
    let req = http::Request::get("/api/v1/namespaces/default/pods")
        .header(
            "accept",
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        )
        .body(Vec::new())
        .expect("request");
    let raw: serde_json::Value =
        serde_json::from_str(&client.request_text(req).await.expect("raw list")).expect("json");
    assert_eq!(raw["kind"], "PartialObjectMetadataList");
    assert_eq!(raw["apiVersion"], "meta.k8s.io/v1");
    assert!(raw["items"][0].get("spec").is_none(), "{raw}");

    let mut stream = pods
        .watch_metadata(&WatchParams::default().labels("app=y"), "0")
        .await
        .expect("metadata watch")
        .boxed();
    let first = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
        .await
        .expect("an event within 10 s")
        .expect("watch stream");
    match first {
        Some(WatchEvent::Added(p)) => {
            assert_eq!(p.metadata.name.as_deref(), Some("m1"));
            assert_eq!(p.types.map(|t| t.kind), Some("PartialObjectMetadata".into()));
        }
        other => panic!("expected the pod added, got {other:?}"),
    }
    srv.shutdown().await;
}
