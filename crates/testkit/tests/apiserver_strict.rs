//! The fake API server refuses what a real kube-apiserver refuses: label selectors, object
//! names, labels and annotations checked as apimachinery checks them. Each test names the
//! upstream function it mirrors.

// Test code: a failed step should fail the test loudly.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use forgerunner_core::RunnerGroup;
use forgerunner_testkit::apiserver::FakeApiServer;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service};
use k8s_openapi::api::rbac::v1::Role;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::Status;
use kube::{CustomResourceExt, Resource};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

async fn server() -> (FakeApiServer, kube::Client) {
    let srv = FakeApiServer::start().await.unwrap();
    let client = srv.client().unwrap();
    (srv, client)
}

fn status(e: kube::Error) -> Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn obj<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn pod(name: &str, labels: Value) -> Pod {
    obj(json!({"metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}}))
}

fn job(name: &str) -> Job {
    obj(json!({"metadata": {"name": name}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1"}]}}}}))
}

fn cm(name: &str, annotations: Value) -> ConfigMap {
    obj(json!({"metadata": {"name": name, "annotations": annotations}}))
}

/// The causes' fields of a 422.
fn cause_fields(s: &Status) -> Vec<String> {
    s.details
        .as_ref()
        .map(|d| d.causes.iter().map(|c| c.field.clone()).collect())
        .unwrap_or_default()
}

/// apimachinery `pkg/labels/selector.go` `Parse` → `NewRequirement` → `validateLabelValue`:
/// a value over 63 characters makes the list a 400, as it does on a real cluster (finding 1 of
/// the fidelity review: a RunnerGroup with a longer name could never be cleaned up).
#[tokio::test]
async fn label_selector_values_and_keys_are_validated() {
    let (_srv, client) = server().await;
    let jobs: Api<Job> = Api::namespaced(client, "default");
    let name = format!("{}.build", "x".repeat(60));
    let err = jobs
        .list(&ListParams::default().labels(&format!("forgerunner.dev/group={name}")))
        .await
        .map_err(status)
        .expect_err("64-character label value");
    assert_eq!((err.code, err.reason.as_str()), (400, "BadRequest"));
    assert_eq!(
        err.message,
        format!(
            "unable to parse requirement: values[0][forgerunner.dev/group]: Invalid value: \"{name}\": \
             must be no more than 63 characters"
        )
    );
    let err = jobs
        .list(&ListParams::default().labels("app in (ok, -bad)"))
        .await
        .map_err(status)
        .expect_err("bad value in a set");
    assert!(
        err.message.starts_with(
            "unable to parse requirement: values[0][app]: Invalid value: \"-bad\": a valid label must be"
        ),
        "{}",
        err.message
    );
    let err = jobs
        .list(&ListParams::default().labels("bad/key/x=1"))
        .await
        .map_err(status)
        .expect_err("bad key");
    assert!(
        err.message.starts_with(
            "unable to parse requirement: <nil>: Invalid value: \"bad/key/x\": a qualified name"
        ),
        "{}",
        err.message
    );
    // Still fine: exactly 63 characters, set syntax with an empty value, numeric comparison.
    let ok = format!("forgerunner.dev/group={}", "g".repeat(63));
    jobs.list(&ListParams::default().labels(&ok)).await.unwrap();
    jobs.list(&ListParams::default().labels("a in (,b),!c,n>3"))
        .await
        .unwrap();
}

/// apimachinery `pkg/apis/meta/v1/validation/validation.go` `ValidateLabels` via
/// `pkg/api/validation/objectmeta.go` `ValidateObjectMetaAccessor`: bad label keys or values
/// on create, update or patch are a 422 naming `metadata.labels`.
#[tokio::test]
async fn object_labels_are_validated_on_create_update_and_patch() {
    let (_srv, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let long = "v".repeat(64);
    let err = pods
        .create(&PostParams::default(), &pod("p", json!({"app": long})))
        .await
        .map_err(status)
        .expect_err("long label value");
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        err.message,
        format!(
            "Pod \"p\" is invalid: metadata.labels: Invalid value: \"{long}\": must be no more than 63 characters"
        )
    );
    assert_eq!(cause_fields(&err), vec!["metadata.labels"]);

    pods.create(&PostParams::default(), &pod("p", json!({"app": "x"})))
        .await
        .unwrap();
    let err = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"bad key": "x"}}})),
        )
        .await
        .map_err(status)
        .expect_err("bad key by patch");
    assert_eq!(err.code, 422);
    assert!(
        err.message
            .contains("metadata.labels: Invalid value: \"bad key\": name part must consist of alphanumeric"),
        "{}",
        err.message
    );
    let mut current = pods.get("p").await.unwrap();
    let labels: BTreeMap<String, String> = [("app".to_string(), "-x".to_string())].into();
    current.metadata.labels = Some(labels);
    let err = pods
        .replace("p", &PostParams::default(), &current)
        .await
        .map_err(status)
        .expect_err("bad value by update");
    assert_eq!(cause_fields(&err), vec!["metadata.labels"]);

    // Custom resources get the same generic metadata checks.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &RunnerGroup::crd())
        .await
        .unwrap();
    let rgs: Api<RunnerGroup> = Api::namespaced(client, "default");
    let rg: RunnerGroup = obj(json!({
        "apiVersion": "forgerunner.dev/v1alpha1", "kind": "RunnerGroup",
        "metadata": {"name": "g", "labels": {"team": "platform team"}},
        "spec": {"forge": "github", "maxRunners": 1,
                 "github": {"configUrl": "https://github.com/org", "credentials": "gh"}},
    }));
    let err = rgs
        .create(&PostParams::default(), &rg)
        .await
        .map_err(status)
        .expect_err("space in a CR label value");
    assert_eq!(cause_fields(&err), vec!["metadata.labels"]);
}

/// apimachinery `pkg/util/validation/validation.go` `IsDNS1123Subdomain` (`dns1123SubdomainFmt`:
/// every dot-separated label starts and ends alphanumeric), as batch `ValidateJob` →
/// `ValidateObjectMeta(..., ValidateReplicationControllerName)` applies it (finding 3).
#[tokio::test]
async fn job_names_are_dns_subdomains_label_by_label() {
    let (_srv, client) = server().await;
    let jobs: Api<Job> = Api::namespaced(client, "default");
    let name = "linux-amd64-large.ci-runners.platform-team-eu.-abc12";
    let err = jobs
        .create(&PostParams::default(), &job(name))
        .await
        .map_err(status)
        .expect_err("'.-' inside a subdomain");
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        err.message,
        format!(
            "Job.batch \"{name}\" is invalid: metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 \
             subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end \
             with an alphanumeric character (e.g. 'example.com', regex used for validation is \
             '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        )
    );
    jobs.create(
        &PostParams::default(),
        &job("linux-amd64-large.ci-runners.platform-team-eu-abc12"),
    )
    .await
    .unwrap();
}

/// The name function each strategy passes to `ValidateObjectMeta`: core validation
/// `ValidateNamespaceName` (DNS label), `ValidateServiceName` (DNS-1035 label), rbac
/// `ValidateRBACName` (`path.IsValidPathSegmentName`), `NameIsDNSSubdomain` for ConfigMaps;
/// generateName prefixes are cut to 58 characters (`names.SimpleNameGenerator`).
#[tokio::test]
async fn each_kind_checks_its_own_name_format() {
    let (_srv, client) = server().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let err = namespaces
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "team.a"}})),
        )
        .await
        .map_err(status)
        .expect_err("dot in a namespace");
    assert_eq!(
        err.message,
        "Namespace \"team.a\" is invalid: metadata.name: Invalid value: \"team.a\": must not contain dots"
    );
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let err = services
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "1svc"}})),
        )
        .await
        .map_err(status)
        .expect_err("service starting with a digit");
    assert!(
        err.message.contains("a DNS-1035 label must consist"),
        "{}",
        err.message
    );

    let roles: Api<Role> = Api::namespaced(client.clone(), "default");
    roles
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "system:runner"}})),
        )
        .await
        .unwrap();
    let err = roles
        .create(&PostParams::default(), &obj(json!({"metadata": {"name": "a%b"}})))
        .await
        .map_err(status)
        .expect_err("percent in an RBAC name");
    assert!(err.message.ends_with("may not contain '%'"), "{}", err.message);
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let err = cms
        .create(&PostParams::default(), &cm("system:runner", json!({})))
        .await
        .map_err(status)
        .expect_err("colon in a ConfigMap name");
    assert_eq!(cause_fields(&err), vec!["metadata.name"]);

    let long: ConfigMap = obj(json!({"metadata": {"generateName": format!("{}-", "p".repeat(70))}}));
    let made = cms.create(&PostParams::default(), &long).await.unwrap();
    assert_eq!(made.metadata.name.unwrap().len(), 63, "58-character prefix + 5");
}

/// apimachinery `pkg/api/validation/objectmeta.go` `ValidateAnnotations`
/// (`TotalAnnotationSizeLimitB = 256 KiB`, keys plus values): a 422 on create, on patch, and for
/// a CRD carrying a big `kubectl.kubernetes.io/last-applied-configuration`.
#[tokio::test]
async fn annotations_are_limited_to_256_kib_in_total() {
    let (_srv, client) = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let key = "example.com/blob";
    let exact = "x".repeat(256 * 1024 - key.len());
    cms.create(&PostParams::default(), &cm("at-limit", json!({key: exact})))
        .await
        .unwrap();
    let err = cms
        .create(
            &PostParams::default(),
            &cm("over", json!({key: format!("{exact}x")})),
        )
        .await
        .map_err(status)
        .expect_err("one byte over");
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        err.message,
        "ConfigMap \"over\" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes"
    );
    assert_eq!(
        err.details.unwrap().causes[0].reason,
        "FieldValueTooLong",
        "cause reason"
    );
    let err = cms
        .patch(
            "at-limit",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"example.com/more": "y"}}})),
        )
        .await
        .map_err(status)
        .expect_err("patch over the limit");
    assert_eq!(err.code, 422);

    // Client-side `kubectl apply` of a big CRD: the last-applied annotation repeats the CRD.
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let mut crd = RunnerGroup::crd();
    let applied = "y".repeat(300 * 1024);
    crd.meta_mut().annotations = Some(
        [(
            "kubectl.kubernetes.io/last-applied-configuration".to_string(),
            applied,
        )]
        .into(),
    );
    let err = crds
        .create(&PostParams::default(), &crd)
        .await
        .map_err(status)
        .expect_err("CRD with a big last-applied annotation");
    assert_eq!(
        err.message,
        "CustomResourceDefinition.apiextensions.k8s.io \"runnergroups.forgerunner.dev\" is invalid: \
         metadata.annotations: Too long: may not be more than 262144 bytes"
    );
}

fn events_v1(name: &str, note: &str) -> k8s_openapi::api::events::v1::Event {
    obj(json!({
        "metadata": {"name": name, "namespace": "default"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "forgerunner", "reportingInstance": "forgerunner-0",
        "action": "Reconcile", "reason": "Failed", "type": "Warning", "note": note,
        "regarding": {"kind": "RunnerGroup", "name": "g", "namespace": "default"},
    }))
}

/// Kubernetes `pkg/apis/core/validation/events.go` `legacyValidateEvent` (`NoteLengthLimit =
/// 1024` bytes, for Events with an eventTime) and `ValidateEventCreate` (events.k8s.io wants the
/// reporting fields, an action and eventTime): 422, as the review's finding 4 describes; kube's
/// Recorder gets the error back.
#[tokio::test]
async fn event_notes_over_1024_bytes_are_refused() {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use k8s_openapi::api::events::v1::Event;
    use kube::runtime::events::{Event as RecorderEvent, EventType, Recorder, Reporter};

    let (_srv, client) = server().await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    events
        .create(&PostParams::default(), &events_v1("ok", &"n".repeat(1024)))
        .await
        .unwrap();
    let err = events
        .create(&PostParams::default(), &events_v1("long", &"n".repeat(1025)))
        .await
        .map_err(status)
        .expect_err("1025-byte note");
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        err.message,
        "Event \"long\" is invalid: message: Invalid value: \"\": can have at most 1024 characters"
    );
    let mut no_action = events_v1("no-action", "n");
    no_action.action = None;
    let err = events
        .create(&PostParams::default(), &no_action)
        .await
        .map_err(status)
        .expect_err("events.k8s.io wants an action");
    assert_eq!(
        err.message,
        "Event \"no-action\" is invalid: action: Required value"
    );

    // Through kube's Recorder, as the operator publishes.
    let reporter = Reporter {
        controller: "forgerunner".into(),
        instance: Some("forgerunner-0".into()),
    };
    let recorder = Recorder::new(client.clone(), reporter);
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        kind: Some("RunnerGroup".into()),
        name: Some("g".into()),
        namespace: Some("default".into()),
        ..Default::default()
    };
    let long = RecorderEvent {
        type_: EventType::Warning,
        reason: "ReconcileFailed".into(),
        note: Some("é".repeat(513)),
        action: "Reconcile".into(),
        secondary: None,
    };
    let err = recorder
        .publish(&long, &reference)
        .await
        .map_err(status)
        .expect_err("recorder");
    assert_eq!(err.code, 422);

    // A core Event with an eventTime is held to the same note limit; an old-style one is not.
    let core: Api<CoreEvent> = Api::namespaced(client, "default");
    let involved = json!({"kind": "Job", "name": "j", "namespace": "default"});
    let old_style: CoreEvent = obj(json!({"metadata": {"name": "old"}, "involvedObject": involved,
        "reason": "FailedCreate", "message": "m".repeat(4000), "type": "Warning"}));
    core.create(&PostParams::default(), &old_style).await.unwrap();
    let new_style: CoreEvent = obj(json!({"metadata": {"name": "new"}, "involvedObject": involved,
        "eventTime": "2026-01-01T00:00:00.000000Z", "reportingComponent": "c", "reportingInstance": "i",
        "action": "A", "reason": "R", "message": "m".repeat(1025), "type": "Warning"}));
    let err = core
        .create(&PostParams::default(), &new_style)
        .await
        .map_err(status)
        .expect_err("core Event with eventTime");
    assert_eq!(cause_fields(&err), vec!["message"]);
}

/// events.go `ValidateEventUpdate`: through events.k8s.io only `series` (and metadata) may
/// change; the Recorder's series patch passes, a changed note does not.
#[tokio::test]
async fn event_updates_through_events_v1_change_only_the_series() {
    use k8s_openapi::api::events::v1::Event;

    let (_srv, client) = server().await;
    let events: Api<Event> = Api::namespaced(client, "default");
    events
        .create(&PostParams::default(), &events_v1("e", "first"))
        .await
        .unwrap();
    let series = json!({"series": {"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000000Z"}});
    events
        .patch("e", &PatchParams::default(), &Patch::Merge(series))
        .await
        .unwrap();
    let err = events
        .patch(
            "e",
            &PatchParams::default(),
            &Patch::Merge(json!({"note": "second"})),
        )
        .await
        .map_err(status)
        .expect_err("note is immutable");
    assert_eq!(
        err.message,
        "Event \"e\" is invalid: message: Invalid value: \"second\": field is immutable"
    );
    let err = events
        .patch(
            "e",
            &PatchParams::default(),
            &Patch::Merge(json!({"series": {"count": 1}})),
        )
        .await
        .map_err(status)
        .expect_err("series count below 2");
    assert_eq!(cause_fields(&err), vec!["series.count"]);
}

/// Kubernetes `plugin/pkg/admission/serviceaccount/admission.go` `Admit` → `getServiceAccount`
/// → `admission.NewForbidden`: a pod whose ServiceAccount does not exist is a 403 naming the
/// pod (or its generateName); `default` always exists (the ServiceAccount controller's job).
#[tokio::test]
async fn pods_need_their_service_account() {
    use k8s_openapi::api::core::v1::ServiceAccount;

    let (_srv, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let with_sa = |meta: Value| -> Pod {
        obj(
            json!({"metadata": meta, "spec": {"serviceAccountName": "g-runner",
            "containers": [{"name": "c", "image": "busybox:1"}]}}),
        )
    };
    let err = pods
        .create(&PostParams::default(), &with_sa(json!({"name": "p"})))
        .await
        .map_err(status)
        .expect_err("missing account");
    assert_eq!((err.code, err.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        err.message,
        "pods \"p\" is forbidden: error looking up service account default/g-runner: serviceaccount \
         \"g-runner\" not found"
    );
    let err = pods
        .create(
            &PostParams::default(),
            &with_sa(json!({"generateName": "g-runner-"})),
        )
        .await
        .map_err(status)
        .expect_err("missing account, generated name");
    assert!(
        err.message.starts_with("pods \"g-runner-\" is forbidden"),
        "{}",
        err.message
    );
    // Admission comes before validation: an otherwise invalid pod still gets the 403.
    let mut bad = with_sa(json!({"name": "Bad_Name"}));
    bad.spec.as_mut().unwrap().containers.clear();
    assert_eq!(
        pods.create(&PostParams::default(), &bad)
            .await
            .map_err(status)
            .unwrap_err()
            .code,
        403
    );

    pods.create(&PostParams::default(), &pod("plain", json!({})))
        .await
        .unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(client, "default");
    accounts
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "g-runner"}})),
        )
        .await
        .unwrap();
    pods.create(&PostParams::default(), &with_sa(json!({"name": "p"})))
        .await
        .unwrap();
}

/// Kubernetes `pkg/apis/batch/validation/validation.go` `ValidateJobSpecUpdate`: the template,
/// selector and completions of a Job are fixed at create; parallelism, suspend,
/// activeDeadlineSeconds and metadata (what the operator patches) are not.
#[tokio::test]
async fn job_spec_is_immutable_where_upstream_says() {
    let (_srv, client) = server().await;
    let jobs: Api<Job> = Api::namespaced(client, "default");
    jobs.create(&PostParams::default(), &job("j")).await.unwrap();
    let patch = |v: Value| Patch::Merge(v);
    jobs.patch(
        "j",
        &PatchParams::default(),
        &patch(json!({"metadata": {"annotations": {"forgerunner.dev/job": "42"}},
            "spec": {"parallelism": 2, "activeDeadlineSeconds": 600, "suspend": true}})),
    )
    .await
    .unwrap();
    let err = jobs
        .patch(
            "j",
            &PatchParams::default(),
            &patch(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}}}})),
        )
        .await
        .map_err(status)
        .expect_err("template change");
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert!(
        err.message
            .starts_with("Job.batch \"j\" is invalid: spec.template: Invalid value: {"),
        "{}",
        err.message
    );
    assert!(err.message.ends_with("}: field is immutable"), "{}", err.message);
    let err = jobs
        .patch(
            "j",
            &PatchParams::default(),
            &patch(json!({"spec": {"completions": 3}})),
        )
        .await
        .map_err(status)
        .expect_err("completions change");
    assert_eq!(
        err.message,
        "Job.batch \"j\" is invalid: spec.completions: Invalid value: 3: field is immutable"
    );
    // Suspended and never started: scheduling directives may change (strategy.go
    // `validationOptionsForJob` → AllowMutableSchedulingDirectives).
    jobs.patch(
        "j",
        &PatchParams::default(),
        &patch(json!({"spec": {"template": {"spec": {"nodeSelector": {"pool": "big"}}}}})),
    )
    .await
    .unwrap();
}

fn widget_crd(spec_schema: Value) -> CustomResourceDefinition {
    obj(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec_schema}}}}]},
    }))
}

/// apiextensions-apiserver `pkg/apiserver/schema/validation.go` `ValidateStructural` →
/// `validateStructuralInvariants`: every specified field needs a `type`.
#[tokio::test]
async fn crd_schemas_must_be_structural() {
    let (_srv, client) = server().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let untyped = widget_crd(json!({"type": "object", "properties": {"size": {"description": "how big"}}}));
    let err = crds
        .create(&PostParams::default(), &untyped)
        .await
        .map_err(status)
        .expect_err("untyped field");
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        err.message,
        "CustomResourceDefinition.apiextensions.k8s.io \"widgets.example.com\" is invalid: \
         spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[size].type: Required value: \
         must not be empty for specified object fields"
    );
    let typed = widget_crd(
        json!({"type": "object", "properties": {"size": {"type": "integer"},
        "port": {"x-kubernetes-int-or-string": true}, "extra": {"x-kubernetes-preserve-unknown-fields": true}}}),
    );
    crds.create(&PostParams::default(), &typed).await.unwrap();
}

/// apiextensions-apiserver `pkg/apis/apiextensions/validation/validation.go`
/// (`StaticEstimatedCostLimit`, `getExpressionCost`, `getCostErrorMessage`): a rule over a
/// list and strings without maxItems/maxLength is refused at CRD create; bounding them fixes it.
#[tokio::test]
async fn crd_rules_over_unbounded_data_exceed_the_cost_budget() {
    let (_srv, client) = server().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let rule = json!([{"rule": "self.hosts.all(h, h.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$'))"}]);
    let unbounded = widget_crd(json!({"type": "object", "x-kubernetes-validations": rule,
        "properties": {"hosts": {"type": "array", "items": {"type": "string"}}}}));
    let err = crds
        .create(&PostParams::default(), &unbounded)
        .await
        .map_err(status)
        .expect_err("cost over budget");
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    // The rule alone is over its budget, and so the schema's total is over the CRD's.
    let hint = "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, \
                maps, and strings are declared)";
    let rule_path =
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule";
    assert_eq!(
        err.message,
        format!(
            "CustomResourceDefinition.apiextensions.k8s.io \"widgets.example.com\" is invalid: [\
             {rule_path}: Forbidden: estimated rule cost exceeds budget by factor of more than 100x {hint}, \
             {rule_path}: Forbidden: contributed to estimated rule cost total exceeding cost limit for entire \
             OpenAPIv3 schema, spec.versions[0].schema.openAPIV3Schema: Forbidden: x-kubernetes-validations \
             estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of more than 100x \
             {hint}]"
        )
    );
    assert_eq!(err.details.unwrap().causes[0].reason, "FieldValueForbidden");
    let bounded = widget_crd(json!({"type": "object", "x-kubernetes-validations": rule,
        "properties": {"hosts": {"type": "array", "maxItems": 16,
            "items": {"type": "string", "maxLength": 253}}}}));
    crds.create(&PostParams::default(), &bounded).await.unwrap();
}

/// validation.go `StaticEstimatedCRDCostLimit` and `TotalCost.ObserveExpressionCost`: rules
/// each within budget (9.4 × 10⁶: a 120-character regex over an unbounded string) that add up
/// to more than 10⁸ refuse the CRD, naming the four costliest and the schema total.
#[tokio::test]
async fn crd_rule_costs_add_up_per_schema() {
    let (_srv, client) = server().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let re = "[a-z]".repeat(24);
    let rules: Vec<Value> = (0..11)
        .map(|i| json!({"rule": format!("self.matches('{re}') || size(self) == {i}")}))
        .collect();
    let crd = widget_crd(json!({"type": "object", "properties": {
        "name": {"type": "string", "x-kubernetes-validations": rules}}}));
    let err = crds
        .create(&PostParams::default(), &crd)
        .await
        .map_err(status)
        .expect_err("total over budget");
    let causes = err.details.unwrap().causes;
    let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(fields.len(), 5, "{fields:?}");
    assert_eq!(fields[4], "spec.versions[0].schema.openAPIV3Schema");
    assert!(
        causes[4].message.starts_with(
            "Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema \
             exceeds budget by factor of 1.0"
        ),
        "{}",
        causes[4].message
    );
    assert!(causes[..4].iter().all(|c| c.message
        == "Forbidden: contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema"));
}

/// apiserver `pkg/server/config.go` `MaxRequestBodyBytes = 3 MiB` and `handlers/rest.go`
/// `limitedReadBody` → apimachinery `NewRequestEntityTooLargeError`: a bigger body is a 413.
/// Below that, etcd's 1.5 MiB request limit refuses a big custom resource with a 500 (`etcdserver:
/// request is too large`, passed on as is by `ErrorToAPIStatus`).
#[tokio::test]
async fn request_bodies_and_stored_objects_have_size_limits() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};

    let (_srv, client) = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let big: ConfigMap =
        obj(json!({"metadata": {"name": "big"}, "data": {"x": "d".repeat(3 * 1024 * 1024)}}));
    let err = cms
        .create(&PostParams::default(), &big)
        .await
        .map_err(status)
        .expect_err("body over 3 MiB");
    assert_eq!((err.code, err.reason.as_str()), (413, "RequestEntityTooLarge"));
    assert_eq!(err.message, "Request entity too large: limit is 3145728");

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(
        &PostParams::default(),
        &widget_crd(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})),
    )
    .await
    .unwrap();
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
    let widgets: Api<DynamicObject> = Api::namespaced_with(client, "default", &ApiResource::from_gvk(&gvk));
    let widget = |blob: String| -> DynamicObject {
        obj(
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"blob": blob}}),
        )
    };
    let err = widgets
        .create(&PostParams::default(), &widget("b".repeat(2 * 1024 * 1024)))
        .await
        .map_err(status)
        .expect_err("over etcd's limit");
    assert_eq!((err.code, err.reason.as_str()), (500, ""));
    assert_eq!(err.message, "etcdserver: request is too large");
    widgets
        .create(&PostParams::default(), &widget("b".repeat(1024 * 1024)))
        .await
        .unwrap();
}

/// Kubernetes `pkg/registry/batch/job/strategy.go` `WarningsOnCreate`: a Job whose name is a
/// valid subdomain but not a DNS label is created, with a `Warning` header saying so.
#[tokio::test]
async fn job_names_with_dots_are_accepted_with_a_warning() {
    let (srv, _client) = server().await;
    let url = format!("{}/apis/batch/v1/namespaces/default/jobs", srv.url());
    let body = serde_json::to_vec(&job("ci.runners-abc12")).unwrap();
    let resp = reqwest::Client::new()
        .post(&url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let warnings: Vec<String> = resp
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    assert_eq!(
        warnings,
        vec![
            "299 - \"metadata.name: this is used in Pod names and hostnames, which can result in surprising \
             behavior; a DNS label is recommended: [must not contain dots]\""
        ]
    );
}
