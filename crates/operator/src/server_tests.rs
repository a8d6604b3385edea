//! The server's limits against hostile clients: raw TCP slow-loris clients and a webhook flood.
//!
//! The server runs on its own runtime (its own threads), as in the binary, so a server starved
//! by the flood cannot hide behind a client that is starved too.

use std::io::ErrorKind;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use forgerunner_core::crd::{ForgeKind, RunnerGroupSpec};
use forgerunner_core::forge::{
    Forge, ForgeError, ForgeProfile, ForgeSession, ForgeView, GroupContext, GroupKey, RemoveOutcome,
    RunnerCredentials, RunnerPodRequest, RunnerRef, WebhookReply,
};
use forgerunner_core::metrics::Metrics;
use forgerunner_core::validate::SpecViolation;
use k8s_openapi::api::core::v1::PodSpec;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;
use crate::controller::ForgeSet;
use crate::forward::Forwarder;
use crate::health::Readiness;
use crate::http::{self, HttpState};
use crate::leader_route::{LeaderRoute, Route};
use crate::webhook_route::{WebhookState, webhook_router};

/// A Gitea-named forge whose webhook verification burns `cost` of CPU, like HMACs over many
/// secrets would, and counts its calls.
struct CostlyForge {
    cost: Duration,
    calls: AtomicUsize,
}

#[async_trait]
impl Forge for CostlyForge {
    fn kind(&self) -> ForgeKind {
        ForgeKind::Gitea
    }
    fn describe(&self, _spec: &RunnerGroupSpec) -> Result<ForgeProfile, Vec<SpecViolation>> {
        Ok(ForgeProfile {
            resync_interval: Duration::from_secs(60),
            ..ForgeProfile::default()
        })
    }
    fn open(&self, _key: &GroupKey) -> Box<dyn ForgeSession> {
        Box::new(NoSession)
    }
    fn receive_webhook(&self, _headers: &::http::HeaderMap, _body: &[u8]) -> Option<WebhookReply> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let until = Instant::now() + self.cost;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        Some(WebhookReply {
            status: ::http::StatusCode::UNAUTHORIZED,
            body: "signature missing or not valid\n".into(),
        })
    }
}

/// The session of a forge that only takes webhooks: every call fails.
struct NoSession;

#[async_trait]
impl ForgeSession for NoSession {
    async fn snapshot(&self, _: &GroupContext, _: &[RunnerRef]) -> Result<ForgeView, ForgeError> {
        Err(ForgeError::Config("test forge".into()))
    }
    async fn register(
        &self,
        _: &GroupContext,
        _: &forgerunner_core::forge::RunnerRequest<'_>,
    ) -> Result<RunnerCredentials, ForgeError> {
        Err(ForgeError::Config("test forge".into()))
    }
    fn runner_pod(&self, _: &RunnerPodRequest<'_>) -> PodSpec {
        PodSpec::default()
    }
    async fn deregister(&self, _: &GroupContext, _: &RunnerRef) -> Result<RemoveOutcome, ForgeError> {
        Err(ForgeError::Config("test forge".into()))
    }
    async fn delete_group(&self, _: &GroupContext) -> Result<(), ForgeError> {
        Ok(())
    }
}

struct OneForge(Arc<CostlyForge>);

impl ForgeSet for OneForge {
    fn enabled(&self) -> Vec<&dyn Forge> {
        vec![self.0.as_ref() as &dyn Forge]
    }
}

/// A running server: its address; dropping it stops the server's runtime.
struct Running {
    addr: std::net::SocketAddr,
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        // Not joined: a connection the test left open may hold the server's drain, and the
        // thread ends with the test process anyway.
        self.stop.cancel();
        drop(self.thread.take());
    }
}

/// Serves health, metrics and webhooks (handled here, as the leader) on loopback port 0, on a
/// runtime of two worker threads of its own.
fn start(limits: ServerLimits, forge: Arc<CostlyForge>) -> Running {
    let stop = CancellationToken::new();
    let (tx, rx) = std::sync::mpsc::channel();
    let server_stop = stop.clone();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            tx.send(listener.local_addr().expect("addr")).expect("send addr");
            let mut registry = Registry::default();
            let metrics = Arc::new(Metrics::register(&mut registry));
            let state = HttpState {
                last_metrics_len: Default::default(),
                readiness: Arc::new(Readiness::new()),
                registry: Arc::new(registry),
            };
            let route = LeaderRoute::default();
            route.set(Route::Local);
            let webhooks = WebhookState::new(
                Arc::new(OneForge(forge)),
                metrics,
                route,
                Forwarder::new(limits.forward_timeout).expect("forwarder"),
                &limits,
            );
            let router = http::router(state).merge(webhook_router(webhooks));
            serve(listener, router, limits, server_stop).await.expect("serve");
        });
        rt.shutdown_timeout(Duration::from_secs(1));
    });
    let addr = rx.recv_timeout(Duration::from_secs(10)).expect("server address");
    Running {
        addr,
        stop,
        thread: Some(thread),
    }
}

fn quick_limits() -> ServerLimits {
    ServerLimits {
        header_timeout: Duration::from_secs(1),
        body_timeout: Duration::from_secs(1),
        ..ServerLimits::default()
    }
}

fn forge(cost: Duration) -> Arc<CostlyForge> {
    Arc::new(CostlyForge {
        cost,
        calls: AtomicUsize::new(0),
    })
}

/// Reads from `stream` until the server closes it or answers; `Ok(bytes read)` on close,
/// `Err` when nothing happened within `within`.
async fn read_until_closed(
    stream: &mut tokio::net::tcp::OwnedReadHalf,
    within: Duration,
) -> Result<Vec<u8>, ()> {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return Err(()),
            Ok(Ok(0)) => return Ok(got),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Ok(Err(e)) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) => {
                return Ok(got);
            }
            Ok(Err(e)) => panic!("read failed: {e}"),
        }
    }
}

/// Writes `bytes` one at a time, `every` apart, until done or the server hangs up.
fn trickle(
    mut w: tokio::net::tcp::OwnedWriteHalf,
    bytes: Vec<u8>,
    every: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        for b in bytes {
            if w.write_all(&[b]).await.is_err() {
                return;
            }
            tokio::time::sleep(every).await;
        }
    })
}

#[tokio::test]
async fn a_client_sending_headers_byte_by_byte_is_disconnected() {
    let limits = quick_limits();
    let server = start(limits, forge(Duration::ZERO));
    let stream = TcpStream::connect(server.addr).await.expect("connect");
    let (mut r, w) = stream.into_split();
    let head =
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n".to_vec();
    // About 18 s to send the whole head: far beyond the header timeout.
    let writer = trickle(w, head, Duration::from_millis(250));
    let started = Instant::now();
    let closed = read_until_closed(&mut r, limits.header_timeout + Duration::from_secs(4)).await;
    writer.abort();
    let got = closed.expect("the server keeps a slow-loris connection open");
    assert!(
        !String::from_utf8_lossy(&got).contains("200 OK"),
        "the trickled request must not be served"
    );
    eprintln!("disconnected after {:?}", started.elapsed());
}

/// hyper buffers a head up to `max_buf_size` and answers 431 past it
/// (`hyper/src/proto/h1/role.rs`, `Server::on_error` for `Parse::TooLarge`); its default of
/// about 408 KiB let unauthenticated heads take hundreds of MiB.
#[tokio::test]
async fn a_head_larger_than_the_buffer_is_answered_431() {
    let limits = ServerLimits {
        header_timeout: Duration::from_secs(30),
        ..quick_limits()
    };
    let server = start(limits, forge(Duration::ZERO));
    let stream = TcpStream::connect(server.addr).await.expect("connect");
    let (mut r, mut w) = stream.into_split();
    let mut head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: ".to_vec();
    head.resize(head.len() + 4 * limits.max_head_bytes, b'a');
    // The server may hang up part way; what it answered is what counts.
    let _ = w.write_all(&head).await;
    let got = read_until_closed(&mut r, Duration::from_secs(20))
        .await
        .expect("the server keeps a connection whose head outgrew its buffer");
    let answer = String::from_utf8_lossy(&got);
    assert!(answer.starts_with("HTTP/1.1 431"), "answered: {answer:?}");
}

#[tokio::test]
async fn an_idle_connection_is_disconnected() {
    let limits = quick_limits();
    let server = start(limits, forge(Duration::ZERO));
    let stream = TcpStream::connect(server.addr).await.expect("connect");
    let (mut r, _w) = stream.into_split();
    let closed = read_until_closed(&mut r, limits.header_timeout + Duration::from_secs(4)).await;
    assert!(closed.is_ok(), "a connection that sends nothing is kept open");
}

#[tokio::test]
async fn a_trickled_webhook_body_is_cut_off() {
    let limits = quick_limits();
    let server = start(limits, forge(Duration::ZERO));
    let stream = TcpStream::connect(server.addr).await.expect("connect");
    let (mut r, mut w) = stream.into_split();
    let head =
        b"POST /webhooks/gitea HTTP/1.1\r\nHost: x\r\nX-Gitea-Signature: ab\r\nContent-Length: 1000\r\n\r\n";
    w.write_all(head).await.expect("head");
    let writer = trickle(w, vec![b'{'; 1000], Duration::from_millis(250));
    let answer = read_until_closed(&mut r, limits.body_timeout + Duration::from_secs(4)).await;
    writer.abort();
    let answer =
        String::from_utf8_lossy(&answer.expect("a trickled body holds the request open")).into_owned();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
}

#[tokio::test]
async fn oversized_webhook_bodies_are_refused() {
    let server = start(quick_limits(), forge(Duration::ZERO));
    let client = reqwest::Client::new();
    let body = vec![b'x'; forgerunner_core::forge::MAX_WEBHOOK_BODY_BYTES + 1];
    let res = client
        .post(format!("http://{}/webhooks/gitea", server.addr))
        .body(body)
        .send()
        .await
        .expect("send");
    assert_eq!(res.status(), reqwest::StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_flood_is_shed_and_healthz_keeps_answering() {
    let limits = ServerLimits {
        max_webhooks_in_flight: 16,
        max_verifications: 1,
        webhook_queue_wait: Duration::ZERO,
        ..quick_limits()
    };
    let costly = forge(Duration::from_millis(20));
    let server = start(limits, costly.clone());
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client");
    let flood: Vec<_> = (0..500)
        .map(|n| {
            let client = client.clone();
            let url = format!("http://{}/webhooks/gitea", server.addr);
            tokio::spawn(async move {
                let res = client
                    .post(url)
                    .header("x-gitea-signature", "ab".repeat(32))
                    .header("x-gitea-delivery", format!("flood-{n}"))
                    .body(r#"{"repository":{"full_name":"acme/app"}}"#)
                    .send()
                    .await
                    .ok()?;
                let retry_after = res.headers().get("retry-after").is_some();
                Some((res.status().as_u16(), retry_after))
            })
        })
        .collect();
    // While the flood is being worked on, health answers promptly every time.
    let deadline = Instant::now() + Duration::from_secs(30);
    while costly.calls.load(Ordering::SeqCst) < 5 {
        assert!(Instant::now() < deadline, "the flood never reached the forge");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for _ in 0..5 {
        let asked = Instant::now();
        let res = tokio::time::timeout(
            Duration::from_secs(2),
            client.get(format!("http://{}/healthz", server.addr)).send(),
        )
        .await
        .expect("/healthz answered within 2 s during the flood")
        .expect("healthz");
        assert_eq!(res.status(), reqwest::StatusCode::OK);
        eprintln!("/healthz in {:?}", asked.elapsed());
    }
    let mut shed = 0;
    let mut refused = 0;
    for task in flood {
        match task.await.expect("task") {
            Some((503, true)) => shed += 1,
            Some((401, _)) => refused += 1,
            other => panic!("unexpected answer {other:?}"),
        }
    }
    assert!(shed > 0, "nothing was shed");
    assert_eq!(shed + refused, 500);
    assert_eq!(
        costly.calls.load(Ordering::SeqCst),
        refused,
        "shed deliveries cost no verification"
    );
    eprintln!("{shed} shed, {refused} verified and refused");
}
