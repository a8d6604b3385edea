//! Tests of the lease decisions and timing; the timing ones drive a real [`LeaderElector`]
//! against an in-process Lease endpoint on a paused clock, so every instant is exact.

use std::sync::{Arc, Mutex};

use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use kube::client::Body;

use super::*;

const D: Duration = Duration::from_secs(15);

#[test]
fn we_renew_our_own_lease() {
    assert_eq!(decide(Some("me"), "me", Duration::ZERO, D), Step::Renew);
    assert_eq!(decide(Some("me"), "me", D * 10, D), Step::Renew);
}

#[test]
fn a_free_lease_is_taken_at_once() {
    assert_eq!(decide(None, "me", Duration::ZERO, D), Step::Take);
    assert_eq!(decide(Some(""), "me", Duration::ZERO, D), Step::Take);
}

#[test]
fn a_fresh_foreign_lease_is_left_alone() {
    assert_eq!(decide(Some("other"), "me", Duration::ZERO, D), Step::Wait);
    assert_eq!(
        decide(Some("other"), "me", D - Duration::from_millis(1), D),
        Step::Wait
    );
}

#[test]
fn a_foreign_lease_unchanged_for_its_duration_is_taken() {
    assert_eq!(decide(Some("other"), "me", D, D), Step::Take);
}

fn settings() -> LeaseSettings {
    LeaseSettings {
        name: "l".into(),
        namespace: "n".into(),
        identity: "me".into(),
        duration: D,
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
        advertise: None,
    }
}

#[test]
fn the_fence_closes_before_the_step_down_which_comes_before_a_takeover() {
    let s = settings();
    let sent = Instant::now();
    assert_eq!(s.step_down_at(sent), sent + Duration::from_secs(10));
    assert_eq!(s.fence_until(sent), sent + Duration::from_secs(9));
    // A follower saw the record change after `sent`, so it takes over at `sent + duration` at
    // the earliest.
    assert!(s.fence_until(sent) < s.step_down_at(sent));
    assert!(s.step_down_at(sent) < sent + s.duration);
    // Short deadlines keep a proportionate margin.
    assert_eq!(write_margin(Duration::from_secs(2)), Duration::from_millis(200));
    assert_eq!(write_margin(Duration::from_secs(60)), Duration::from_secs(1));
}

/// What the fake Lease endpoint does with writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Writes {
    Ok,
    Fail,
    Hang,
}

/// One Lease object behind the Lease REST paths, with optimistic concurrency.
#[derive(Default)]
struct FakeLease {
    object: Option<serde_json::Value>,
    version: u64,
    writes: Option<Writes>,
}

fn status(code: StatusCode) -> Response<Body> {
    // kube reads "not found" from the reason (`get_opt`).
    let reason = match code {
        StatusCode::NOT_FOUND => "NotFound",
        StatusCode::CONFLICT => "Conflict",
        _ => "InternalError",
    };
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": "fake", "reason": reason, "code": code.as_u16(),
    });
    let mut resp = Response::new(Body::from(body.to_string().into_bytes()));
    *resp.status_mut() = code;
    resp
}

fn ok(object: &serde_json::Value) -> Response<Body> {
    Response::new(Body::from(object.to_string().into_bytes()))
}

async fn serve(state: Arc<Mutex<FakeLease>>, req: Request<Body>) -> Response<Body> {
    let method = req.method().clone();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let writes = state.lock().expect("lock").writes.unwrap_or(Writes::Ok);
    if method != Method::GET {
        match writes {
            Writes::Ok => {}
            Writes::Fail => return status(StatusCode::INTERNAL_SERVER_ERROR),
            Writes::Hang => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return status(StatusCode::GATEWAY_TIMEOUT);
            }
        }
    }
    let mut st = state.lock().expect("lock");
    if method == Method::GET {
        return match &st.object {
            Some(o) => ok(o),
            None => status(StatusCode::NOT_FOUND),
        };
    }
    let mut object: serde_json::Value = serde_json::from_slice(&body).expect("lease JSON");
    let sent_version = object["metadata"]["resourceVersion"].as_str().map(str::to_owned);
    let current = st.version.to_string();
    if method == Method::PUT && sent_version.as_deref() != Some(current.as_str()) {
        return status(StatusCode::CONFLICT);
    }
    st.version += 1;
    object["metadata"]["resourceVersion"] = st.version.to_string().into();
    st.object = Some(object.clone());
    ok(&object)
}

fn elector(fence: Fence) -> (LeaderElector, Arc<Mutex<FakeLease>>) {
    let state = Arc::new(Mutex::new(FakeLease::default()));
    let shared = state.clone();
    let svc = tower::service_fn(move |req: Request<Body>| {
        let state = shared.clone();
        async move { Ok::<_, std::convert::Infallible>(serve(state, req).await) }
    });
    let client = Client::new(svc, "n");
    (LeaderElector::new(client, settings(), fence), state)
}

fn set_writes(state: &Arc<Mutex<FakeLease>>, w: Writes) {
    state.lock().expect("lock").writes = Some(w);
}

#[tokio::test(start_paused = true)]
async fn the_deadline_counts_from_the_acquiring_write_not_from_hold() {
    let fence = Fence::closed();
    let (mut el, state) = elector(fence.clone());
    let cancel = CancellationToken::new();
    let acquired_at = Instant::now();
    assert!(el.acquire(&cancel).await);
    assert!(fence.is_held());
    set_writes(&state, Writes::Fail);
    // The term starts late (a slow controller start); that must not stretch the deadline.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(el.hold(&cancel).await, HoldEnd::Lost);
    assert_eq!(acquired_at.elapsed(), Duration::from_secs(10));
    assert!(!fence.is_held(), "stepping down revokes the fence");
}

#[tokio::test(start_paused = true)]
async fn a_renewal_hanging_past_the_deadline_is_cut_off_at_it() {
    let fence = Fence::closed();
    let (mut el, state) = elector(fence.clone());
    let cancel = CancellationToken::new();
    assert!(el.acquire(&cancel).await);
    let start = Instant::now();
    let holder = tokio::spawn(async move { (el.hold(&cancel).await, Instant::now()) });
    // Two renewals succeed (at 2 s and 4 s), then every write hangs.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    assert!(fence.is_held_at(start + Duration::from_millis(12_900)));
    assert!(
        !fence.is_held_at(start + Duration::from_secs(13)),
        "fence closes 1 s early"
    );
    set_writes(&state, Writes::Hang);
    let (end, at) = holder.await.expect("hold");
    assert_eq!(end, HoldEnd::Lost);
    assert_eq!(
        at - start,
        Duration::from_secs(14),
        "steps down at 4 s + the 10 s deadline"
    );
    assert!(!fence.is_held());
}

#[tokio::test(start_paused = true)]
async fn renewals_every_retry_period_keep_the_fence_held() {
    let fence = Fence::closed();
    let (mut el, _state) = elector(fence.clone());
    let cancel = CancellationToken::new();
    assert!(el.acquire(&cancel).await);
    let stop = cancel.clone();
    let holder = tokio::spawn(async move { el.hold(&cancel).await });
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(fence.is_held());
    }
    stop.cancel();
    assert_eq!(holder.await.expect("hold"), HoldEnd::Cancelled);
    assert!(fence.is_held(), "a shutdown keeps the fence until the release");
}
