//! One Event resource, two API groups: what is written through `events.k8s.io/v1` is read,
//! selected and watched through core `v1` (and back), converted as a real API server does.

// Test setup: a failed step should fail the test loudly.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use forgerunner_testkit::apiserver::FakeApiServer;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Event as CoreEvent, Namespace};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

const NS: &str = "ev-alias";

fn scaled_up(name: &str, group: &str) -> Event {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "forgerunner", "reportingInstance": "forgerunner-0",
        "action": "CreateRunners", "reason": "ScaledUp", "type": "Normal", "note": "2 runners",
        "regarding": {"apiVersion": "forgerunner.dev/v1alpha1", "kind": "RunnerGroup",
            "name": group, "namespace": NS, "uid": format!("uid-{group}")},
    }))
    .unwrap()
}

async fn names<K>(api: &Api<K>, fields: &str) -> Vec<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut names: Vec<String> = api
        .list(&ListParams::default().fields(fields))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.meta().name.clone())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn events_written_in_one_group_are_served_by_the_other() {
    let srv = FakeApiServer::start().await.unwrap();
    let client = srv.client().unwrap();
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let core: Api<CoreEvent> = Api::namespaced(client.clone(), NS);
    let pp = PostParams::default();

    // A core watch opened before the write sees it, converted.
    let rv = core
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut watch = core.watch(&WatchParams::default(), &rv).await.unwrap().boxed();

    let created = events.create(&pp, &scaled_up("rg-a.1", "rg-a")).await.unwrap();
    assert_eq!(
        created.note.as_deref(),
        Some("2 runners"),
        "served back as events.k8s.io"
    );
    events.create(&pp, &scaled_up("rg-b.1", "rg-b")).await.unwrap();

    let seen = tokio::time::timeout(Duration::from_secs(30), watch.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let WatchEvent::Added(seen) = seen else {
        panic!("expected ADDED, got {seen:?}")
    };
    assert_eq!(seen.metadata.name.as_deref(), Some("rg-a.1"));
    assert_eq!(seen.message.as_deref(), Some("2 runners"));
    assert_eq!(seen.involved_object.kind.as_deref(), Some("RunnerGroup"));
    assert_eq!(seen.reporting_component.as_deref(), Some("forgerunner"));
    assert_eq!(seen.reporting_instance.as_deref(), Some("forgerunner-0"));
    assert_eq!(seen.action.as_deref(), Some("CreateRunners"));

    // kubectl describe's query for a RunnerGroup's Events.
    let describe = "involvedObject.name=rg-a,involvedObject.namespace=ev-alias,\
                    involvedObject.kind=RunnerGroup,involvedObject.uid=uid-rg-a";
    assert_eq!(names(&core, describe).await, ["rg-a.1"]);
    assert_eq!(
        names(&core, "reason=ScaledUp,type=Normal").await,
        ["rg-a.1", "rg-b.1"]
    );
    assert_eq!(names(&events, "regarding.name=rg-b").await, ["rg-b.1"]);
    assert_eq!(
        names(&events, "regarding.kind=RunnerGroup,regarding.uid=uid-rg-a").await,
        ["rg-a.1"]
    );
    assert_eq!(
        names(&events, "reportingController=forgerunner").await,
        ["rg-a.1", "rg-b.1"]
    );

    // A series update through events.k8s.io (kube's Recorder merge-patches) is core's count.
    let series = json!({"series": {"count": 3, "lastObservedTime": "2026-01-01T00:05:00.000000Z"}});
    events
        .patch("rg-a.1", &PatchParams::default(), &Patch::Merge(&series))
        .await
        .unwrap();
    let read = core.get("rg-a.1").await.unwrap();
    assert_eq!(read.series.as_ref().and_then(|s| s.count), Some(3));
    assert_eq!(
        read.message.as_deref(),
        Some("2 runners"),
        "the patch kept the note"
    );

    // A core Event (kubectl, the kubelet) is served through events.k8s.io too.
    let legacy: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "pod.1", "namespace": NS},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": NS},
        "reason": "Scheduled", "type": "Normal", "message": "assigned",
        "source": {"component": "default-scheduler", "host": "node-1"}, "count": 2,
    }))
    .unwrap();
    core.create(&pp, &legacy).await.unwrap();
    let as_events = events.get("pod.1").await.unwrap();
    assert_eq!(as_events.note.as_deref(), Some("assigned"));
    assert_eq!(as_events.deprecated_count, Some(2));
    assert_eq!(
        as_events
            .deprecated_source
            .as_ref()
            .and_then(|s| s.host.as_deref()),
        Some("node-1")
    );
    assert_eq!(
        as_events.regarding.as_ref().and_then(|r| r.kind.as_deref()),
        Some("Pod")
    );

    // Deleting through one group removes it from the other.
    core.delete("rg-b.1", &DeleteParams::default()).await.unwrap();
    assert_eq!(names(&events, "").await, ["pod.1", "rg-a.1"]);
    srv.shutdown().await;
}
