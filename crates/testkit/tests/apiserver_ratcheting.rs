//! Validation ratcheting of custom resources, as the real API server does it since 1.30
//! (feature `CRDValidationRatcheting`, beta default on in 1.30, GA and locked on in 1.33:
//! apiextensions-apiserver `pkg/features/kube_features.go`).
//!
//! - An update's schema errors are dropped where the value is unchanged from the stored object
//!   (`pkg/apiserver/validation/ratcheting.go`, `ratchetingValueValidator.Validate`: "ratchet
//!   errors if DeepEqual(old, new)"), so an object stored under an older, looser schema can still
//!   be edited elsewhere.
//! - A status update validates only `status` against the status schema
//!   (`pkg/registry/customresource/validator.go`, `ValidateStatusUpdate`; the spec is the stored
//!   one anyway), so a controller can always report on such an object.

use forgerunner_core::RunnerGroup;
use forgerunner_testkit::apiserver::FakeApiServer;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{CustomResourceExt, Resource};
use serde_json::json;

const BAD_ENV: &str = "/spec/template/spec/containers/0/env";

/// A server holding one group whose template was valid under an older CRD (a free-form
/// template) and is not under the current one (`env` is a map, not a list).
async fn group_stored_under_older_crd() -> (FakeApiServer, Api<DynamicObject>) {
    let srv = FakeApiServer::start().await.expect("start");
    let client = srv.client().expect("client");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut older = serde_json::to_value(RunnerGroup::crd()).expect("crd");
    older
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties")
        .expect("spec schema")["template"] =
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    let older: CustomResourceDefinition = serde_json::from_value(older).expect("older crd");
    let created = crds
        .create(&PostParams::default(), &older)
        .await
        .expect("older crd");
    let gvk = GroupVersionKind::gvk(
        &RunnerGroup::group(&()),
        &RunnerGroup::version(&()),
        &RunnerGroup::kind(&()),
    );
    let groups: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk(&gvk));
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "forgerunner.dev/v1alpha1", "kind": "RunnerGroup",
        "metadata": {"name": "typo", "namespace": "default"},
        "spec": {"forge": "github", "maxRunners": 2,
                 "github": {"configUrl": "https://github.com/org", "credentials": "gh"},
                 "template": {"spec": {"containers": [{"name": "runner", "env": {"FOO": "bar"}}]}}},
    }))
    .expect("group");
    groups
        .create(&PostParams::default(), &obj)
        .await
        .expect("stored under the older CRD");
    let mut current = RunnerGroup::crd();
    current.metadata.resource_version = created.metadata.resource_version;
    crds.replace(RunnerGroup::crd_name(), &PostParams::default(), &current)
        .await
        .expect("current crd");
    (srv, groups)
}

fn merge(v: serde_json::Value) -> Patch<serde_json::Value> {
    Patch::Merge(v)
}

#[tokio::test]
async fn a_status_write_is_not_refused_for_a_spec_the_current_schema_refuses() {
    let (_srv, groups) = group_stored_under_older_crd().await;
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "False",
        "reason": "InvalidSpec", "message": "spec.template: bad", "lastTransitionTime": "2026-11-26T00:00:00Z"}]}});
    let written = groups
        .patch_status("typo", &PatchParams::default(), &merge(status))
        .await
        .expect("status written");
    assert_eq!(
        written.data.pointer("/status/conditions/0/reason"),
        Some(&json!("InvalidSpec"))
    );
    assert_eq!(
        written.data.pointer(BAD_ENV),
        Some(&json!({"FOO": "bar"})),
        "spec untouched"
    );
}

#[tokio::test]
async fn an_unchanged_invalid_field_is_ratcheted_and_a_changed_one_refused() {
    let (_srv, groups) = group_stored_under_older_crd().await;
    let relabelled = groups
        .patch(
            "typo",
            &PatchParams::default(),
            &merge(json!({"metadata": {"labels": {"team": "a"}}})),
        )
        .await
        .expect("a label added beside an unchanged invalid template");
    assert_eq!(relabelled.data.pointer(BAD_ENV), Some(&json!({"FOO": "bar"})));
    groups
        .patch(
            "typo",
            &PatchParams::default(),
            &merge(json!({"spec": {"maxRunners": 3}})),
        )
        .await
        .expect("another spec field changed, the template not");
    let err = groups
        .patch(
            "typo",
            &PatchParams::default(),
            &merge(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "runner", "env": {"FOO": "baz"}}]}}}})),
        )
        .await
        .expect_err("the invalid field itself changed");
    let kube::Error::Api(status) = err else {
        panic!("not an API error: {err}")
    };
    assert_eq!(status.code, 422, "{status:?}");
    assert!(
        status.message.contains("spec.template.spec.containers[0].env"),
        "{}",
        status.message
    );
}
