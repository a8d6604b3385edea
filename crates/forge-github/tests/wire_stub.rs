//! Wire tests against a scripted stub server, for what the scaleset emulator cannot show: the
//! `acquirablejobs` endpoint it does not serve, the headers of bodyless requests, and which
//! HTTP versions the long poll and the other calls offer over TLS.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::service::{SCALE_SET, Script};
use common::stub::{self, Stub, StubReply, StubRequest};
use common::{WAIT, eventually, fast_options, listener};
use forgerunner_core::forge::SecretValue;
use forgerunner_github::client::{GithubClient, HttpOptions};
use forgerunner_github::listener::session::Session;
use forgerunner_github::listener::{Listener, poll, session};

/// A GHES-shaped config URL on the stub, so the whole token chain goes to it.
fn client(stub: &Stub, opts: HttpOptions) -> Arc<GithubClient> {
    listener::client(&format!("{}/acme", stub.uri()), "ghp_test", opts)
}

/// The Actions service whose sessions count `available` jobs, with `acquirable` answering
/// `acquirablejobs`.
fn service(available: u32, acquirable: StubReply) -> Script {
    Script {
        available,
        acquirable,
        poll_hold: Duration::from_millis(100),
    }
}

async fn service_stub(available: u32, acquirable: StubReply) -> Stub {
    service(available, acquirable).start().await
}

fn spawn_listener(client: Arc<GithubClient>) -> Listener {
    listener::spawn(
        client,
        SCALE_SET,
        10,
        forgerunner_github::listener::delivery::DEFAULT_EVERY,
    )
}

/// D4: a job queued while no session existed is offered to no session, so a new session must
/// ask for it. ARC's former listener did, on session open when the statistics counted any
/// (`cmd/githubrunnerscalesetlistener/autoScalerMessageListener.go`, `CreateSession`), through
/// `GetAcquirableJobs` of its old client (`github/actions/client.go`: `GET
/// runnerscalesets/{id}/acquirablejobs`, `{count, value:[{runnerRequestId, …}]}`). The list
/// is read with the admin token and the jobs acquired with the queue token, as `acquirejobs`
/// requires.
#[tokio::test]
async fn jobs_available_before_the_session_are_acquired_when_it_opens() {
    let stub = service_stub(
        2,
        StubReply::json(
            200,
            r#"{"count":3,"value":[
                {"acquireJobUrl":"","messageType":"JobAvailable","runnerRequestId":11,"repositoryName":"r","ownerName":"o","jobWorkflowRef":"w","eventName":"push","requestLabels":["g"]},
                {"runnerRequestId":12},
                {"runnerRequestId":11}
            ]}"#,
        ),
    )
    .await;
    let listener = spawn_listener(client(&stub, fast_options().http));
    let acquire = eventually(WAIT, "an acquire", || async {
        stub.requests_to("POST", "/acquirejobs").into_iter().next()
    })
    .await;
    let ids: Vec<i64> = serde_json::from_slice(&acquire.body).expect("a JSON array of ids");
    assert_eq!(ids, vec![11, 12], "each listed job once");
    assert_eq!(acquire.header("authorization"), Some("Bearer queue-token"));
    let listed = stub.requests_to("GET", "/acquirablejobs");
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].path(),
        format!("/tenant/_apis/runtime/runnerscalesets/{SCALE_SET}/acquirablejobs")
    );
    assert_eq!(listed[0].header("authorization"), Some("Bearer admin-token"));
    assert!(listed[0].target.contains("api-version=6.0-preview"));
    // Acquired before the first long poll, not ~50 s later.
    let order: Vec<String> = stub
        .requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path()))
        .collect();
    let acquired_at = order.iter().position(|r| r.ends_with("/acquirejobs"));
    let first_poll = order.iter().position(|r| r.starts_with("GET /queue/"));
    assert!(acquired_at < first_poll || first_poll.is_none(), "{order:?}");
    listener.stop().await;
}

/// D4: nothing available means no call; an empty answer (204) or a failing one acquires
/// nothing and leaves the session polling (ARC's old listener gave up the session on a
/// failure; a job it would have found is worth less than the session).
#[tokio::test]
async fn no_or_failing_acquirable_jobs_keep_the_session() {
    for (available, reply, listed) in [
        (
            0,
            StubReply::json(200, r#"{"count":1,"value":[{"runnerRequestId":5}]}"#),
            0,
        ),
        (3, StubReply::empty(204), 1),
        (3, StubReply::json(200, ""), 1),
        (3, StubReply::json(500, r#"{"message":"down"}"#), 4),
        (3, StubReply::json(200, "not json"), 1),
    ] {
        let stub = service_stub(available, reply).await;
        let listener = spawn_listener(client(&stub, fast_options().http));
        eventually(WAIT, "polls after the session opened", || async {
            (stub.requests_to("GET", "/s-1").len() >= 3).then_some(())
        })
        .await;
        assert_eq!(
            stub.requests_to("GET", "/acquirablejobs").len(),
            listed,
            "available {available}"
        );
        assert!(stub.requests_to("POST", "/acquirejobs").is_empty());
        assert_eq!(
            stub.requests_to("POST", "/sessions").len(),
            1,
            "the session was kept"
        );
        assert!(stub.requests_to("DELETE", "/sessions/s-1").is_empty());
        listener.stop().await;
        assert_eq!(stub.requests_to("DELETE", "/sessions/s-1").len(), 1);
    }
}

/// C8: Go's `net/http`, which GitHub sees from ARC and scaleset, sends `Content-Length: 0` on a
/// POST or PATCH without a body; hyper sends no length for an empty HTTP/1.1 body
/// (`proto/h1/role.rs`, `set_length`), which a strict proxy may refuse with 411. The
/// bodyless calls are `registration-token`, `access_tokens` and the session refresh (scaleset
/// `session_client.go`, `refreshMessageSession`).
#[tokio::test]
async fn bodyless_posts_and_patches_send_a_zero_content_length() {
    let stub = service_stub(0, StubReply::empty(204)).await;
    let client = client(&stub, fast_options().http);
    let s = session::create(&client, SCALE_SET, "owner")
        .await
        .expect("session");
    session::refresh(&client, &s).await.expect("refresh");
    let token = stub.requests_to("POST", "/registration-token");
    assert_eq!(token.len(), 1);
    assert_eq!(token[0].header("content-length"), Some("0"));
    let refresh = stub.requests_to("PATCH", "/sessions/s-1");
    assert_eq!(refresh[0].header("content-length"), Some("0"));
    // A body keeps its own length.
    let created = stub.requests_to("POST", "/sessions");
    assert_eq!(
        created[0].header("content-length"),
        Some(created[0].body.len().to_string().as_str())
    );
    assert!(!created[0].body.is_empty());
    let registration = stub.requests_to("POST", "/runner-registration");
    assert_eq!(
        registration[0].header("content-length"),
        Some(registration[0].body.len().to_string().as_str())
    );
}

/// D11: the message long poll offers only HTTP/1.1, so it never becomes one more stream of
/// the HTTP/2 connection every group shares (where polls beyond the server's
/// `SETTINGS_MAX_CONCURRENT_STREAMS` would queue); ARC runs one listener process, hence one
/// connection, per scale set (`cmd/ghalistener/main.go`). Every other call keeps the shared
/// transport, which offers HTTP/2.
#[tokio::test]
async fn the_long_poll_offers_only_http1_and_other_calls_keep_http2() {
    let (port, offers) = stub::alpn_recorder().await;
    let opts = HttpOptions {
        max_retries: 0,
        ..fast_options().http
    };
    let client = listener::client("https://github.com/acme", "ghp_test", opts);
    let session = Session {
        scale_set_id: SCALE_SET,
        id: "s-1".into(),
        queue_url: format!("https://127.0.0.1:{port}/queue/{SCALE_SET}/s-1"),
        token: SecretValue::new("queue-token"),
        statistics: None,
    };
    let offered = |n: usize| {
        let offers = offers.clone();
        async move {
            eventually(WAIT, "a ClientHello", || async {
                offers.lock().expect("alpn lock").get(n).cloned()
            })
            .await
        }
    };
    poll::get_message(&client, &session, 0, 10)
        .await
        .expect_err("the recorder ends the handshake");
    assert_eq!(offered(0).await, vec!["http/1.1".to_owned()], "the long poll");
    poll::delete_message(&client, &session, 1)
        .await
        .expect_err("the recorder ends the handshake");
    let ack = offered(1).await;
    assert!(
        ack.contains(&"h2".to_owned()),
        "an ordinary call offers HTTP/2: {ack:?}"
    );
}

/// D7: a session reply with an id but no queue URL (seen while the broker had trouble,
/// actions-runner-controller#4370: "CreateMessageSession succeeded but returned an empty
/// messageQueueUrl") is refused, and the session it names is deleted: the service holds it,
/// and the next create would meet our own 409 until it expired.
#[tokio::test]
async fn a_session_without_a_queue_is_refused_and_deleted() {
    let port = Arc::new(std::sync::OnceLock::new());
    let inner = service(0, StubReply::empty(204)).handler(&port);
    let stub = stub::start(move |req: &StubRequest| {
        if req.method == "POST" && req.path().ends_with("/sessions") {
            return StubReply::json(
                200,
                r#"{"sessionId":"s-broken","ownerName":"t","messageQueueUrl":"","messageQueueAccessToken":"queue-token"}"#,
            );
        }
        inner(req)
    })
    .await;
    port.set(stub.port).expect("set once");
    let client = client(&stub, fast_options().http);
    let err = session::create(&client, SCALE_SET, "owner")
        .await
        .expect_err("an unusable session is refused");
    assert!(err.to_string().contains("queue URL"), "{err}");
    assert_eq!(
        stub.requests_to("DELETE", "/sessions/s-broken").len(),
        1,
        "the session the service holds is deleted"
    );
}
