//! Field selectors on core/v1 Events, as the operator uses them to find why a Job has no pod.

// Test setup: a failed step should fail the test loudly.
#![allow(clippy::unwrap_used)]

use forgerunner_testkit::apiserver::FakeApiServer;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Event, Namespace};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

fn event(
    name: &str,
    ns: &str,
    kind: &str,
    object: &str,
    reason: &str,
    type_: &str,
    component: &str,
) -> Event {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "involvedObject": {"apiVersion": "batch/v1", "kind": kind, "name": object, "namespace": ns,
            "uid": format!("uid-{object}")},
        "reason": reason, "type": type_, "message": "m",
        "source": {"component": component}, "count": 1
    }))
    .unwrap()
}

async fn names(api: &Api<Event>, fields: &str) -> Vec<String> {
    let mut names: Vec<String> = api
        .list(&ListParams::default().fields(fields))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.metadata.name)
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn core_events_filter_by_involved_object_reason_type_and_source() {
    let srv = FakeApiServer::start().await.unwrap();
    let client = srv.client().unwrap();
    for ns in ["ev-a", "ev-b"] {
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap();
    }
    let a: Api<Event> = Api::namespaced(client.clone(), "ev-a");
    let b: Api<Event> = Api::namespaced(client.clone(), "ev-b");
    let all: Api<Event> = Api::all(client.clone());
    let pp = PostParams::default();
    a.create(
        &pp,
        &event(
            "j1.1",
            "ev-a",
            "Job",
            "j1",
            "FailedCreate",
            "Warning",
            "job-controller",
        ),
    )
    .await
    .unwrap();
    a.create(
        &pp,
        &event(
            "j1.2",
            "ev-a",
            "Job",
            "j1",
            "SuccessfulCreate",
            "Normal",
            "job-controller",
        ),
    )
    .await
    .unwrap();
    a.create(
        &pp,
        &event(
            "j2.1",
            "ev-a",
            "Job",
            "j2",
            "FailedCreate",
            "Warning",
            "job-controller",
        ),
    )
    .await
    .unwrap();
    a.create(
        &pp,
        &event(
            "p.1",
            "ev-a",
            "Pod",
            "j1",
            "Scheduled",
            "Normal",
            "default-scheduler",
        ),
    )
    .await
    .unwrap();
    b.create(
        &pp,
        &event(
            "j1.9",
            "ev-b",
            "Job",
            "j1",
            "FailedCreate",
            "Warning",
            "job-controller",
        ),
    )
    .await
    .unwrap();

    // The operator's query, namespace-scoped.
    let query = "involvedObject.kind=Job,involvedObject.name=j1,reason=FailedCreate";
    assert_eq!(names(&a, query).await, ["j1.1"]);
    assert_eq!(names(&b, query).await, ["j1.9"]);
    assert_eq!(names(&all, query).await, ["j1.1", "j1.9"]);
    assert_eq!(
        names(&a, "involvedObject.kind==Job,involvedObject.name==j1").await,
        ["j1.1", "j1.2"]
    );
    assert_eq!(names(&a, "involvedObject.kind!=Job").await, ["p.1"]);
    assert_eq!(names(&a, "type=Warning").await, ["j1.1", "j2.1"]);
    assert_eq!(names(&a, "source=default-scheduler").await, ["p.1"]);
    assert_eq!(names(&a, "source!=job-controller,type=Normal").await, ["p.1"]);
    assert_eq!(names(&a, "involvedObject.uid=uid-j2").await, ["j2.1"]);
    assert_eq!(names(&all, "involvedObject.namespace=ev-b").await, ["j1.9"]);
    assert_eq!(names(&all, "metadata.namespace=ev-b").await, ["j1.9"]);
    assert_eq!(names(&a, "metadata.name=j2.1").await, ["j2.1"]);

    // An unsupported field is refused, as the API server does.
    let err = a
        .list(&ListParams::default().fields("involvedObject.bogus=x"))
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 400));

    // A watch filters the same way.
    let wp = WatchParams::default().fields(query);
    let rv = a
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let stream = a.watch(&wp, &rv).await.unwrap();
    let mut stream = stream.boxed();
    a.create(
        &pp,
        &event(
            "j2.2",
            "ev-a",
            "Job",
            "j2",
            "FailedCreate",
            "Warning",
            "job-controller",
        ),
    )
    .await
    .unwrap();
    a.create(
        &pp,
        &event(
            "j1.3",
            "ev-a",
            "Job",
            "j1",
            "FailedCreate",
            "Warning",
            "job-controller",
        ),
    )
    .await
    .unwrap();
    let first = tokio::time::timeout(std::time::Duration::from_secs(30), stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let WatchEvent::Added(ev) = first else {
        panic!("expected an added event, got {first:?}")
    };
    assert_eq!(ev.metadata.name.as_deref(), Some("j1.3"), "j2.2 filtered out");
    srv.shutdown().await;
}
