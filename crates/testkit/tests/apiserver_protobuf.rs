//! Protobuf request bodies over HTTP: decoded kinds are stored and answered in JSON, kinds the
//! server cannot decode get a 415 Status naming them, and garbage gets a 400.

use forgerunner_testkit::apiserver::FakeApiServer;
use forgerunner_testkit::apiserver::protobuf::{CONTENT_TYPE, wrap};
use k8s_pb::api::coordination::v1::{Lease, LeaseSpec};
use k8s_pb::api::core::v1::{Container, Pod, PodSpec};
use k8s_pb::api::events::v1::Event;
use k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_pb::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use prost::Message;
use serde_json::{Value, json};

/// What kubectl 1.32 sends as Accept on a typed create.
const KUBECTL_ACCEPT: &str = "application/vnd.kubernetes.protobuf,application/json";

fn meta(name: &str) -> Option<ObjectMeta> {
    Some(ObjectMeta {
        name: Some(name.into()),
        ..Default::default()
    })
}

async fn post(srv: &FakeApiServer, path: &str, body: Vec<u8>) -> (u16, String, Value) {
    let resp = reqwest::Client::new()
        .post(format!("{}{path}", srv.url()))
        .header("content-type", CONTENT_TYPE)
        .header("accept", KUBECTL_ACCEPT)
        .body(body)
        .send()
        .await
        .expect("send");
    let code = resp.status().as_u16();
    let ct = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body: Value = resp.json().await.expect("a JSON body");
    (code, ct, body)
}

#[tokio::test]
async fn a_protobuf_pod_is_stored_and_answered_in_json() {
    let srv = FakeApiServer::start().await.expect("start");
    let pod = Pod {
        metadata: meta("p1"),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: Some("c".into()),
                image: Some("busybox:1".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    };
    let body = wrap("v1", "Pod", pod.encode_to_vec());
    let (code, ct, created) = post(&srv, "/api/v1/namespaces/default/pods", body).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(ct, "application/json");
    assert_eq!(created["kind"], "Pod");
    assert_eq!(created["spec"]["containers"][0]["image"], "busybox:1");
    // The JSON path's defaults apply to a protobuf body too.
    assert_eq!(created["spec"]["restartPolicy"], "Always");

    // Even a client that lists only protobuf is answered in JSON, and told so.
    let resp = reqwest::Client::new()
        .get(format!("{}/api/v1/namespaces/default/pods/p1", srv.url()))
        .header("accept", CONTENT_TYPE)
        .send()
        .await
        .expect("get");
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.headers().get("content-type").and_then(|v| v.to_str().ok()),
        Some("application/json")
    );
    let got: Value = resp.json().await.expect("JSON");
    assert_eq!(got["metadata"]["name"], "p1");

    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(srv.client().expect("client"), "default");
    let got = pods.get("p1").await.expect("stored");
    assert_eq!(
        got.metadata.uid,
        created["metadata"]["uid"].as_str().map(String::from)
    );
}

#[tokio::test]
async fn lease_and_events_v1_event_decode_with_micro_times() {
    let srv = FakeApiServer::start().await.expect("start");
    let lease = Lease {
        metadata: meta("leader"),
        spec: Some(LeaseSpec {
            holder_identity: Some("pod-a".into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime {
                seconds: Some(1_700_000_000),
                nanos: Some(250_000_000),
            }),
            ..Default::default()
        }),
    };
    let (code, _, got) = post(
        &srv,
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        wrap("coordination.k8s.io/v1", "Lease", lease.encode_to_vec()),
    )
    .await;
    assert_eq!(code, 201, "{got}");
    assert_eq!(got["spec"]["renewTime"], "2023-11-14T22:13:20.250000Z");
    assert_eq!(got["spec"]["holderIdentity"], "pod-a");

    let event = Event {
        metadata: meta("e1"),
        event_time: Some(MicroTime {
            seconds: Some(1_700_000_000),
            nanos: Some(0),
        }),
        reporting_controller: Some("forgerunner.dev/operator".into()),
        reporting_instance: Some("op-0".into()),
        action: Some("Scale".into()),
        reason: Some("Scaled".into()),
        note: Some("to 3".into()),
        r#type: Some("Normal".into()),
        ..Default::default()
    };
    let (code, _, got) = post(
        &srv,
        "/apis/events.k8s.io/v1/namespaces/default/events",
        wrap("events.k8s.io/v1", "Event", event.encode_to_vec()),
    )
    .await;
    assert_eq!(code, 201, "{got}");
    assert_eq!(got["note"], "to 3");
    assert_eq!(got["eventTime"], "2023-11-14T22:13:20.000000Z");
}

#[tokio::test]
async fn an_undecodable_kind_gets_415_naming_it() {
    let srv = FakeApiServer::start().await.expect("start");
    // A real API server serves CRDs in protobuf; this one only reads them as JSON.
    let crd = CustomResourceDefinition {
        metadata: meta("things.example.com"),
        ..Default::default()
    };
    let (code, ct, status) = post(
        &srv,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        wrap(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            crd.encode_to_vec(),
        ),
    )
    .await;
    assert_eq!(code, 415, "{status}");
    assert_eq!(ct, "application/json");
    assert_eq!(status["kind"], json!("Status"));
    assert_eq!(status["reason"], json!("UnsupportedMediaType"));
    assert_eq!(status["code"], json!(415));
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("apiextensions.k8s.io/v1, Kind=CustomResourceDefinition"),
        "{message}"
    );
}

#[tokio::test]
async fn a_malformed_protobuf_body_gets_400() {
    let srv = FakeApiServer::start().await.expect("start");
    let mut body = b"k8s\0".to_vec();
    body.extend([0x0a, 0xff, 0xff, 0xff]);
    let (code, _, status) = post(&srv, "/api/v1/namespaces", body).await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(status["reason"], json!("BadRequest"));
    let no_magic = wrap("v1", "Namespace", vec![])[4..].to_vec();
    let (code, _, status) = post(&srv, "/api/v1/namespaces", no_magic).await;
    assert_eq!(code, 400, "{status}");
    assert!(
        status["message"].as_str().unwrap_or_default().contains("k8s\\0"),
        "{status}"
    );
}

#[tokio::test]
async fn a_protobuf_update_replaces_the_object() {
    use k8s_pb::api::core::v1::ConfigMap;
    let srv = FakeApiServer::start().await.expect("start");
    let cm = |value: &str, rv: Option<String>| ConfigMap {
        metadata: Some(ObjectMeta {
            name: Some("settings".into()),
            resource_version: rv,
            ..Default::default()
        }),
        data: [("mode".to_string(), value.to_string())].into(),
        ..Default::default()
    };
    let (code, _, created) = post(
        &srv,
        "/api/v1/namespaces/default/configmaps",
        wrap("v1", "ConfigMap", cm("slow", None).encode_to_vec()),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    let rv = created["metadata"]["resourceVersion"].as_str().map(String::from);
    let resp = reqwest::Client::new()
        .put(format!(
            "{}/api/v1/namespaces/default/configmaps/settings",
            srv.url()
        ))
        .header("content-type", CONTENT_TYPE)
        .header("accept", KUBECTL_ACCEPT)
        .body(wrap("v1", "ConfigMap", cm("fast", rv).encode_to_vec()))
        .send()
        .await
        .expect("put");
    assert_eq!(resp.status().as_u16(), 200);
    let updated: Value = resp.json().await.expect("JSON");
    assert_eq!(updated["data"]["mode"], "fast");
    assert_ne!(
        updated["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );
}
