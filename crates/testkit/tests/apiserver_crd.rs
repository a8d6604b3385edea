//! Conformance of the fake API server: CRDs, custom resources validated against their schema,
//! the status subresource, server-side apply, and kube-runtime's reflector and Controller.

use std::sync::Arc;
use std::time::Duration;

use forgerunner_core::RunnerGroup;
use forgerunner_testkit::apiserver::FakeApiServer;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{CustomResourceExt, Resource, ResourceExt};
use serde_json::json;

async fn with_crd() -> (FakeApiServer, kube::Client) {
    let srv = FakeApiServer::start().await.expect("start");
    let client = srv.client().expect("client");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &RunnerGroup::crd())
        .await
        .expect("create crd");
    (srv, client)
}

fn rg(name: &str, max: u32) -> RunnerGroup {
    serde_json::from_value(json!({
        "apiVersion": "forgerunner.dev/v1alpha1", "kind": "RunnerGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"forge": "github", "maxRunners": max,
                 "github": {"configUrl": "https://github.com/org", "credentials": "gh"}},
    }))
    .expect("rg")
}

fn err_of(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected API error, got {other:?}"),
    }
}

#[tokio::test]
async fn crd_is_established_and_custom_resources_work() {
    let (srv, client) = with_crd().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds.get("runnergroups.forgerunner.dev").await.expect("get crd");
    let conds = crd.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(
        conds
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );

    let rgs: Api<RunnerGroup> = Api::namespaced(client.clone(), "default");
    let created = rgs
        .create(&PostParams::default(), &rg("a", 3))
        .await
        .expect("create rg");
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(
        rgs.list(&ListParams::default()).await.expect("list").items.len(),
        1
    );
    assert_eq!(srv.requests().cel_skipped, 0, "every CEL rule was evaluated");
    let mut over = rg("over", 2);
    over.spec.min_runners = 5;
    let err = rgs
        .create(&PostParams::default(), &over)
        .await
        .map_err(err_of)
        .expect_err("CEL: minRunners over maxRunners");
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        err.message,
        "RunnerGroup.forgerunner.dev \"over\" is invalid: spec.minRunners: Invalid value: \"object\": \
         minRunners must not exceed maxRunners"
    );

    // Schema validation: minimum, enum, type.
    let err = rgs
        .create(&PostParams::default(), &rg("b", 0))
        .await
        .map_err(err_of)
        .expect_err("min");
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert!(err.message.contains("spec.maxRunners"), "{}", err.message);
    let dynapi: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "forgerunner.dev",
            "v1alpha1",
            "RunnerGroup",
        )),
    );
    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "forgerunner.dev/v1alpha1", "kind": "RunnerGroup", "metadata": {"name": "c"},
        "spec": {"forge": "svn", "maxRunners": "many"},
    }))
    .expect("dyn");
    let err = dynapi
        .create(&PostParams::default(), &bad)
        .await
        .map_err(err_of)
        .expect_err("enum");
    assert_eq!(err.code, 422);
    assert!(
        err.message.contains("spec.forge") && err.message.contains("spec.maxRunners"),
        "{}",
        err.message
    );
    // An enum or type error blocks CEL, says so, and counts the rules it kept from running.
    assert!(
        err.message
            .contains("<nil>: Invalid value: \"null\": some validation rules were not checked"),
        "{}",
        err.message
    );
    assert!(
        srv.requests().cel_skipped >= 20,
        "{:?}",
        srv.requests().cel_skipped
    );

    // Unknown fields are pruned.
    let extra: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "forgerunner.dev/v1alpha1", "kind": "RunnerGroup", "metadata": {"name": "d"},
        "spec": {"forge": "github", "maxRunners": 1, "bogus": true,
                 "github": {"configUrl": "https://github.com/o", "credentials": "gh"}},
    }))
    .expect("dyn");
    let stored = dynapi
        .create(&PostParams::default(), &extra)
        .await
        .expect("create pruned");
    assert!(stored.data.pointer("/spec/bogus").is_none());

    // Status subresource: ignored on the main endpoint, spec ignored on /status; generation
    // moves only with the spec.
    let p = rgs
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"currentRunners": 5}})),
        )
        .await
        .expect("main");
    assert!(p.status.is_none());
    let p = rgs
        .patch_status(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"currentRunners": 2}, "spec": {"maxRunners": 9}})),
        )
        .await
        .expect("status");
    assert_eq!(p.status.as_ref().map(|s| s.current_runners), Some(2));
    assert_eq!(p.spec.max_runners, 3);
    assert_eq!(p.metadata.generation, Some(1));
    let p = rgs
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"maxRunners": 4}})),
        )
        .await
        .expect("spec");
    assert_eq!(p.metadata.generation, Some(2));

    // Strategic merge patch is not for custom resources, as on a real server.
    let err = rgs
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"maxRunners": 4}})),
        )
        .await
        .map_err(err_of)
        .expect_err("415");
    assert_eq!(err.code, 415);

    // Deleting the CRD removes its objects and its endpoint.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete("runnergroups.forgerunner.dev", &DeleteParams::default())
        .await
        .expect("delete crd");
    let err = rgs
        .list(&ListParams::default())
        .await
        .map_err(err_of)
        .expect_err("gone");
    assert_eq!(err.code, 404);
    srv.shutdown().await;
}

#[tokio::test]
async fn server_side_apply_twice_is_a_no_op() {
    let (srv, client) = with_crd().await;
    let rgs: Api<RunnerGroup> = Api::namespaced(client.clone(), "default");
    let pp = PatchParams::apply("forgerunner").force();
    let body = rg("ssa", 2);
    let first = rgs
        .patch("ssa", &pp, &Patch::Apply(&body))
        .await
        .expect("apply creates");
    let rv = first.resource_version().expect("rv");
    let managers: Vec<String> = first
        .managed_fields()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(managers, ["forgerunner"]);

    let mut events = rgs
        .watch(&WatchParams::default().timeout(20), &rv)
        .await
        .expect("watch")
        .boxed();
    let second = rgs
        .patch("ssa", &pp, &Patch::Apply(&body))
        .await
        .expect("apply again");
    assert_eq!(second.resource_version().as_deref(), Some(rv.as_str()));

    let status = json!({"apiVersion": "forgerunner.dev/v1alpha1", "kind": "RunnerGroup",
        "status": {"currentRunners": 1, "conditions": []}});
    let s1 = rgs
        .patch_status("ssa", &pp, &Patch::Apply(&status))
        .await
        .expect("status apply");
    let s2 = rgs
        .patch_status("ssa", &pp, &Patch::Apply(&status))
        .await
        .expect("status apply again");
    assert_eq!(s1.resource_version(), s2.resource_version());
    assert_eq!(s2.status.map(|s| s.current_runners), Some(1));

    // The only event after the first apply is the status change.
    let ev = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("in time");
    match ev {
        Some(Ok(WatchEvent::Modified(o))) => assert_eq!(o.resource_version(), s1.resource_version()),
        other => panic!("unexpected {other:?}"),
    }
    // Missing fieldManager on apply is a 400.
    let err = rgs
        .patch("ssa", &PatchParams::default(), &Patch::Apply(&body))
        .await
        .map_err(err_of)
        .expect_err("no manager");
    assert_eq!(err.code, 400);
    srv.shutdown().await;
}

async fn next(rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> Option<String> {
    tokio::time::timeout(Duration::from_secs(15), rx.recv())
        .await
        .ok()
        .flatten()
}

async fn eventually<F: Fn() -> bool>(what: &str, f: F) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn reflector_and_controller_work_unchanged() {
    let (srv, client) = with_crd().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let (reader, writer) = reflector::store::<Pod>();
    let rf =
        reflector::reflector(writer, watcher(pods.clone(), watcher::Config::default())).applied_objects();
    let rf_task = tokio::spawn(async move { rf.for_each(|_| async {}).await });
    for i in 0..3 {
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": format!("p{i}")},
            "spec": {"containers": [{"name": "c", "image": "i:1"}]}}))
        .expect("pod");
        pods.create(&PostParams::default(), &p).await.expect("create");
    }
    eventually("reflector sees 3 pods", || reader.state().len() == 3).await;
    pods.delete("p1", &DeleteParams::default()).await.expect("delete");
    eventually("reflector sees the delete", || reader.state().len() == 2).await;

    let rgs: Api<RunnerGroup> = Api::namespaced(client.clone(), "default");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let ctx = Arc::new(tx);
    let controller = Controller::new(rgs.clone(), watcher::Config::default())
        .owns(jobs.clone(), watcher::Config::default())
        .run(
            |obj: Arc<RunnerGroup>, ctx: Arc<tokio::sync::mpsc::UnboundedSender<String>>| async move {
                let _ = ctx.send(format!(
                    "{}@{}",
                    obj.name_any(),
                    obj.metadata.generation.unwrap_or(0)
                ));
                Ok::<_, kube::Error>(Action::await_change())
            },
            |_, _, _| Action::requeue(Duration::from_secs(1)),
            ctx,
        );
    let ctl_task = tokio::spawn(async move { controller.for_each(|_| async {}).await });
    let created = rgs
        .create(&PostParams::default(), &rg("ctl", 2))
        .await
        .expect("rg");
    assert_eq!(next(&mut rx).await.as_deref(), Some("ctl@1"));
    rgs.patch(
        "ctl",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"maxRunners": 5}})),
    )
    .await
    .expect("spec change");
    assert_eq!(next(&mut rx).await.as_deref(), Some("ctl@2"));
    // An owned Job wakes the owner.
    let oref = created.controller_owner_ref(&()).expect("oref");
    let job: Job = serde_json::from_value(json!({"metadata": {"name": "ctl-abcde", "ownerReferences": [oref]},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "r", "image": "i:1"}]}}}}))
    .expect("job");
    jobs.create(&PostParams::default(), &job).await.expect("job");
    assert_eq!(next(&mut rx).await.as_deref(), Some("ctl@2"));
    rf_task.abort();
    ctl_task.abort();
    srv.shutdown().await;
}

/// A manager that applies again without a field it applied before removes that field
/// (structured-merge-diff `Updater.Apply` prunes what the manager no longer applies): how a
/// controller clears an optional status field.
#[tokio::test]
async fn a_field_left_out_of_the_next_apply_is_removed() {
    let (_srv, client) = with_crd().await;
    let groups: Api<RunnerGroup> = Api::namespaced(client, "default");
    groups
        .create(&PostParams::default(), &rg("sched", 2))
        .await
        .expect("create");
    let params = PatchParams::apply("forgerunner").force();
    let apply = |status: serde_json::Value| json!({"apiVersion": "forgerunner.dev/v1alpha1", "kind": "RunnerGroup", "status": status});
    let first = apply(
        json!({"desiredRunners": 1, "forgeVersion": "1.26", "schedule": {"active": "office", "minRunners": 2}}),
    );
    groups
        .patch_status("sched", &params, &Patch::Apply(&first))
        .await
        .expect("first apply");
    let second = apply(json!({"desiredRunners": 1, "schedule": {"minRunners": 0}}));
    let after = groups
        .patch_status("sched", &params, &Patch::Apply(&second))
        .await
        .expect("second apply");
    let status = serde_json::to_value(after.status.expect("status")).expect("json");
    assert_eq!(status.pointer("/schedule/active"), None, "{status}");
    assert_eq!(status.get("forgeVersion"), None, "{status}");
    assert_eq!(status.pointer("/schedule/minRunners"), Some(&json!(0)));
    assert_eq!(status.get("desiredRunners"), Some(&json!(1)));
}
