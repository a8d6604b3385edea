use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use reqwest::header::{AUTHORIZATION, HeaderValue};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::TcpListener;

use super::*;

const SECOND: Duration = Duration::from_secs(1);
const TEST_CA: &str = include_str!("../tests/fixtures/long_poll_ca.pem");
const TEST_CERT: &str = include_str!("../tests/fixtures/long_poll_server.pem");
const TEST_KEY: &str = include_str!("../tests/fixtures/long_poll_server_key.pem");

/// What the test server does with one request.
#[derive(Clone, Copy)]
enum Act {
    /// Answers and keeps the connection.
    Answer(&'static str),
    /// Answers and closes the connection, without saying so in the answer.
    AnswerAndClose(&'static str),
    /// Never answers.
    Hang,
}

/// A local server (port 0) that plays `script(request number)` and counts the connections
/// it accepted and the requests it read.
struct Server {
    port: u16,
    accepted: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
}

impl Server {
    async fn start(script: fn(usize) -> Act) -> Server {
        Server::start_with(script, None).await
    }

    async fn start_with(script: fn(usize) -> Act, tls: Option<tokio_rustls::TlsAcceptor>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(AtomicUsize::new(0));
        let (a, r) = (accepted.clone(), requests.clone());
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                a.fetch_add(1, Ordering::SeqCst);
                let r = r.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    match tls {
                        Some(acceptor) => {
                            if let Ok(stream) = acceptor.accept(socket).await {
                                serve(stream, script, r).await;
                            }
                        }
                        None => serve(socket, script, r).await,
                    }
                });
            }
        });
        Server {
            port,
            accepted,
            requests,
        }
    }

    fn url(&self, scheme: &str, host: &str) -> Url {
        Url::parse(&format!(
            "{scheme}://{host}:{}/_apis/queue/messages?sessionId=s",
            self.port
        ))
        .unwrap()
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut socket: S,
    script: fn(usize) -> Act,
    requests: Arc<AtomicUsize>,
) {
    let mut buf = Vec::new();
    loop {
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            let mut chunk = [0u8; 1024];
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.clear();
        let n = requests.fetch_add(1, Ordering::SeqCst);
        match script(n) {
            Act::Answer(text) => {
                if socket.write_all(text.as_bytes()).await.is_err() {
                    return;
                }
            }
            Act::AnswerAndClose(text) => {
                let _ = socket.write_all(text.as_bytes()).await;
                let _ = socket.shutdown().await;
                return;
            }
            Act::Hang => std::future::pending::<()>().await,
        }
    }
}

fn client(policy: AddressPolicy, ca: Option<&str>) -> LongPollClient {
    LongPollClient::new(ca, policy, 5 * SECOND, 30 * SECOND).expect("client")
}

fn headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer secret-token"));
    h
}

const OK: &str = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
const NOTHING_YET: &str = "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n";

#[tokio::test]
async fn polls_share_one_kept_connection() {
    let server = Server::start(|n| Act::Answer(if n % 2 == 0 { NOTHING_YET } else { OK })).await;
    let client = client(AddressPolicy::AllowPrivate, None);
    let url = server.url("http", "127.0.0.1");
    for expected in [StatusCode::ACCEPTED, StatusCode::OK, StatusCode::ACCEPTED] {
        let answer = client
            .get(&url, &headers(), 5 * SECOND, |_| 100)
            .await
            .expect("answer");
        assert_eq!(answer.status, expected);
        assert_eq!(client.idle_count(), 1);
    }
    assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
    assert_eq!(server.requests.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_poll_that_hangs_holds_only_its_own_connection() {
    // One client serves every group of a forge host: a poll the server never answers must not
    // hold up another poll, to the same origin or to another one.
    let same = Server::start(|n| if n == 0 { Act::Hang } else { Act::Answer(OK) }).await;
    let other = Server::start(|_| Act::Answer(OK)).await;
    let client = Arc::new(client(AddressPolicy::AllowPrivate, None));
    let hanging = {
        let (client, url) = (client.clone(), same.url("http", "127.0.0.1"));
        tokio::spawn(async move { client.get(&url, &headers(), 60 * SECOND, |_| 100).await })
    };
    // The hanging poll has its connection before the others start.
    let deadline = tokio::time::Instant::now() + 5 * SECOND;
    while same.requests.load(Ordering::SeqCst) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the first poll never arrived"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for url in [same.url("http", "127.0.0.1"), other.url("http", "127.0.0.1")] {
        let answer = tokio::time::timeout(5 * SECOND, client.get(&url, &headers(), 5 * SECOND, |_| 100))
            .await
            .expect("not held up by the hanging poll")
            .expect("answer");
        assert_eq!(answer.status, StatusCode::OK);
    }
    assert_eq!(
        same.accepted.load(Ordering::SeqCst),
        2,
        "a second connection to the same origin"
    );
    assert!(!hanging.is_finished(), "the hanging poll still waits");
    hanging.abort();
}

#[tokio::test]
async fn a_connection_the_server_closed_while_idle_is_replaced_once() {
    // Every answer closes its connection without `Connection: close`, as a server that
    // drops idle connections does.
    let server = Server::start(|_| Act::AnswerAndClose(OK)).await;
    let client = client(AddressPolicy::AllowPrivate, None);
    let url = server.url("http", "127.0.0.1");
    for _ in 0..3 {
        let answer = client
            .get(&url, &headers(), 5 * SECOND, |_| 100)
            .await
            .expect("answer");
        assert_eq!(answer.body.expect("body"), b"{}");
    }
    assert_eq!(server.accepted.load(Ordering::SeqCst), 3);
    assert_eq!(server.requests.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_poll_past_its_timeout_fails_as_a_timeout_naming_only_the_origin() {
    let server = Server::start(|_| Act::Hang).await;
    let client = client(AddressPolicy::AllowPrivate, None);
    let url = server.url("http", "127.0.0.1");
    let e = client
        .get(&url, &headers(), Duration::from_millis(200), |_| 100)
        .await
        .expect_err("hangs");
    assert!(e.is_timeout(), "{e}");
    let text = e.to_string();
    assert!(
        text.contains(&format!("http://127.0.0.1:{}", server.port)),
        "{text}"
    );
    for leak in ["sessionId", "_apis", "secret-token"] {
        assert!(!text.contains(leak), "{leak} in {text}");
    }
    assert_eq!(client.idle_count(), 0, "a timed-out connection is not kept");
}

#[tokio::test]
async fn the_address_policy_judges_literals_and_names() {
    let server = Server::start(|_| Act::Answer(OK)).await;
    let client = client(AddressPolicy::RefusePrivate, None);
    for host in ["127.0.0.1", "localhost"] {
        let e = client
            .get(&server.url("http", host), &headers(), 5 * SECOND, |_| 100)
            .await
            .expect_err("refused");
        assert!(e.is_address_refused(), "{host}: {e}");
    }
    assert_eq!(server.accepted.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_error_answer_keeps_its_status_when_its_body_is_too_large() {
    let server = Server::start(|_| {
        Act::Answer("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 20\r\n\r\n01234567890123456789")
    })
    .await;
    let client = client(AddressPolicy::AllowPrivate, None);
    let url = server.url("http", "127.0.0.1");
    let cap = |s: StatusCode| if s.is_success() { 100 } else { 10 };
    let answer = client
        .get(&url, &headers(), 5 * SECOND, cap)
        .await
        .expect("answer");
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(answer.body, Err(BodyError::TooLarge { limit: 10 }));
    assert_eq!(
        client.idle_count(),
        0,
        "an unread body leaves the connection unusable"
    );
}

#[tokio::test]
async fn nothing_listening_is_a_connect_failure() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let url = Url::parse(&format!("http://127.0.0.1:{port}/q")).unwrap();
    let e = client(AddressPolicy::AllowPrivate, None)
        .get(&url, &headers(), 5 * SECOND, |_| 100)
        .await
        .expect_err("nothing listens");
    assert_eq!(e.kind, TransportKind::Connect, "{e}");
}

fn acceptor() -> tokio_rustls::TlsAcceptor {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(TEST_CERT.as_bytes())
        .collect::<Result<_, _>>()
        .expect("certificate");
    let key = PrivateKeyDer::from_pem_slice(TEST_KEY.as_bytes()).expect("key");
    let config =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("server config");
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

#[tokio::test]
async fn https_trusts_the_ca_bundle_and_nothing_unknown() {
    let server = Server::start_with(|_| Act::Answer(OK), Some(acceptor())).await;
    let trusting = client(AddressPolicy::AllowPrivate, Some(TEST_CA));
    for host in ["localhost", "127.0.0.1"] {
        let answer = trusting
            .get(&server.url("https", host), &headers(), 5 * SECOND, |_| 100)
            .await
            .unwrap_or_else(|e| panic!("{host}: {e}"));
        assert_eq!(answer.body.expect("body"), b"{}");
    }
    let e = client(AddressPolicy::AllowPrivate, None)
        .get(&server.url("https", "localhost"), &headers(), 5 * SECOND, |_| 100)
        .await
        .expect_err("an unknown CA");
    assert_eq!(e.kind, TransportKind::Connect, "{e}");
}

#[test]
fn a_bad_ca_bundle_is_refused_and_a_proxy_keeps_reqwest() {
    let bad = LongPollClient::new(
        Some("-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n"),
        AddressPolicy::AllowPrivate,
        SECOND,
        SECOND,
    );
    assert!(matches!(bad, Err(TrustError::CaBundle(_))));
    assert!(matches!(
        LongPollClient::new(Some("not pem"), AddressPolicy::AllowPrivate, SECOND, SECOND),
        Err(TrustError::CaBundle(_))
    ));
    assert!(!LongPollClient::serves(Some("http://proxy.corp:3128")));
}

#[tokio::test]
async fn a_connection_idle_past_the_idle_timeout_is_not_reused() {
    let server = Server::start(|_| Act::Answer(OK)).await;
    let client =
        LongPollClient::new(None, AddressPolicy::AllowPrivate, 5 * SECOND, Duration::ZERO).expect("client");
    let url = server.url("http", "127.0.0.1");
    for _ in 0..2 {
        client
            .get(&url, &headers(), 5 * SECOND, |_| 100)
            .await
            .expect("answer");
    }
    assert_eq!(server.accepted.load(Ordering::SeqCst), 2);
    assert_eq!(
        client.idle_count(),
        1,
        "the old one was dropped when the new one came back"
    );
}

/// A listener whose accept queue is full drops new connection attempts, as an address behind a
/// route that drops packets does: connecting to it hangs.
async fn silent_address() -> (
    tokio::net::TcpListener,
    Vec<std::net::TcpStream>,
    std::net::SocketAddr,
) {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind("127.0.0.1:0".parse().expect("address"))
        .expect("bind");
    let listener = socket.listen(1).expect("listen");
    let addr = listener.local_addr().expect("address");
    // Fill the accept queue; nothing is ever accepted.
    let mut held = Vec::new();
    for _ in 0..4 {
        if let Ok(s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            held.push(s);
        }
    }
    (listener, held, addr)
}

#[tokio::test]
async fn an_address_that_drops_connections_leaves_the_others_their_share() {
    let (_silent, _held, silent) = silent_address().await;
    // The silent address hangs: it needs a share of the timeout to give up.
    let hung = tokio::time::timeout(Duration::from_millis(500), tokio::net::TcpStream::connect(silent)).await;
    assert!(hung.is_err(), "the full accept queue answered: {hung:?}");
    let server = Server::start(|_| Act::Answer(OK)).await;
    let good: std::net::SocketAddr = format!("127.0.0.1:{}", server.port).parse().expect("address");
    let started = Instant::now();
    let tcp = tokio::time::timeout(10 * SECOND, connect::connect_any(&[silent, good], 4 * SECOND))
        .await
        .expect("within the whole timeout");
    assert!(tcp.is_ok(), "{tcp:?}");
    assert!(
        started.elapsed() < 4 * SECOND,
        "the silent address took all the time"
    );
}
