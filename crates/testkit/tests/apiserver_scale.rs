//! The fake API server at benchmark scale: thousands of objects, paged lists and a watcher that
//! sees every event.

use std::time::{Duration, Instant};

use forgerunner_testkit::apiserver::FakeApiServer;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_objects_stay_fast() {
    const N: usize = 3000;
    let srv = FakeApiServer::start().await.expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(srv.client().expect("client"), "default");
    let rv = cms
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    let mut watch = cms
        .watch(&WatchParams::default().timeout(120), &rv)
        .await
        .expect("watch")
        .boxed();
    let started = Instant::now();
    futures::stream::iter(0..N)
        .map(|i| {
            let cms = cms.clone();
            async move {
                let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("cm-{i:05}"),
                    "labels": {"shard": (i % 10).to_string()}}, "data": {"k": "v"}}))
                .expect("cm");
                cms.create(&PostParams::default(), &cm).await.map(|_| ())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await
        .expect("creates");
    let created_in = started.elapsed();

    let mut seen = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen < N {
        match tokio::time::timeout_at(deadline, watch.try_next())
            .await
            .expect("in time")
            .expect("ok")
        {
            Some(WatchEvent::Added(_)) => seen += 1,
            Some(_) => {}
            None => panic!("watch ended after {seen} events"),
        }
    }
    let mut total = 0;
    let mut token: Option<String> = None;
    loop {
        let mut lp = ListParams::default().limit(500);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = cms.list(&lp).await.expect("page");
        total += page.items.len();
        token = page.metadata.continue_.filter(|c| !c.is_empty());
        if token.is_none() {
            break;
        }
    }
    assert_eq!(total, N);
    let shard = cms
        .list(&ListParams::default().labels("shard=3"))
        .await
        .expect("selector");
    assert_eq!(shard.items.len(), N / 10);
    eprintln!(
        "{N} creates in {created_in:?}; everything in {:?}",
        started.elapsed()
    );
    // Generous bound for a busy 2-core machine; catches accidental O(n^2) paths.
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
    srv.shutdown().await;
}
