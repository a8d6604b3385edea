//! A scripted HTTP/1.1 server for what the scaleset emulator cannot show: endpoints it does not
//! serve (`acquirablejobs`) and request details it does not record (headers, bodies). Plus a
//! TLS listener that only reads the ClientHello, to see which protocols a client offers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// One request as the stub received it.
#[derive(Clone, Debug)]
pub struct StubRequest {
    /// `GET`, `POST`, …
    pub method: String,
    /// Path and query.
    pub target: String,
    /// Headers, names in lowercase.
    pub headers: Vec<(String, String)>,
    /// The body (by `Content-Length`; the clients under test send no chunked bodies).
    pub body: Vec<u8>,
}

impl StubRequest {
    /// The path without the query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }

    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What the handler answers.
#[derive(Clone, Debug)]
pub struct StubReply {
    /// HTTP status.
    pub status: u16,
    /// JSON body (empty for none).
    pub body: String,
    /// Wait before answering (a long poll's hold).
    pub delay: Duration,
}

impl StubReply {
    /// `status` with a JSON body.
    pub fn json(status: u16, body: impl Into<String>) -> StubReply {
        StubReply {
            status,
            body: body.into(),
            delay: Duration::ZERO,
        }
    }

    /// `status` with no body.
    pub fn empty(status: u16) -> StubReply {
        StubReply::json(status, "")
    }
}

/// A running stub; it lives as long as the test's runtime.
pub struct Stub {
    /// Its port on 127.0.0.1.
    pub port: u16,
    requests: Arc<Mutex<Vec<StubRequest>>>,
}

impl Stub {
    /// `http://127.0.0.1:<port>`.
    pub fn uri(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<StubRequest> {
        self.requests.lock().expect("stub lock").clone()
    }

    /// The requests with this method whose path ends with `suffix`.
    pub fn requests_to(&self, method: &str, suffix: &str) -> Vec<StubRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == method && r.path().ends_with(suffix))
            .collect()
    }
}

/// Serves every connection on 127.0.0.1 (port 0), one request each (`connection: close`),
/// recording it and answering what `handler` returns.
pub async fn start<F>(handler: F) -> Stub
where
    F: Fn(&StubRequest) -> StubReply + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a local port");
    let port = listener.local_addr().expect("local address").port();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let handler = Arc::new(handler);
    let log = requests.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let handler = handler.clone();
            let log = log.clone();
            tokio::spawn(async move {
                let Some(req) = read_request(&mut socket).await else {
                    return;
                };
                log.lock().expect("stub lock").push(req.clone());
                let reply = handler(&req);
                tokio::time::sleep(reply.delay).await;
                let out = format!(
                    "HTTP/1.1 {} Stub\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{}",
                    reply.status,
                    reply.body.len(),
                    reply.body
                );
                let _ = socket.write_all(out.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    Stub { port, requests }
}

async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<StubRequest> {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => data.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&data[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split_whitespace();
    let method = first.next()?.to_owned();
    let target = first.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = data[head_end..].to_vec();
    while body.len() < length {
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => body.extend_from_slice(&buf[..n]),
        }
    }
    Some(StubRequest {
        method,
        target,
        headers,
        body,
    })
}

/// Accepts TLS connections on 127.0.0.1 (port 0) and records, per connection, the ALPN
/// protocols its ClientHello offers; then hangs up (the handshake never completes, so the
/// client's request fails, which the tests expect). The protocols a client offers bound what
/// it can speak: one that does not offer `h2` cannot multiplex requests on a connection.
pub async fn alpn_recorder() -> (u16, Arc<Mutex<Vec<Vec<String>>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a local port");
    let port = listener.local_addr().expect("local address").port();
    let offers = Arc::new(Mutex::new(Vec::new()));
    let log = offers.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                if let Some(hello) = read_tls_record(&mut socket).await {
                    log.lock()
                        .expect("alpn lock")
                        .push(alpn_of(&hello).unwrap_or_default());
                }
            });
        }
    });
    (port, offers)
}

/// The first TLS record's payload (the ClientHello fits in one record).
async fn read_tls_record(socket: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    let mut header = [0u8; 5];
    socket.read_exact(&mut header).await.ok()?;
    if header[0] != 0x16 {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
    let mut payload = vec![0u8; len];
    socket.read_exact(&mut payload).await.ok()?;
    Some(payload)
}

/// The ALPN protocol names of a ClientHello handshake message (RFC 8446 §4.1.2, RFC 7301).
fn alpn_of(hello: &[u8]) -> Option<Vec<String>> {
    let mut r = Reader(hello);
    if r.take(1)?[0] != 0x01 {
        return None;
    }
    r.take(3)?; // handshake length
    r.take(2 + 32)?; // legacy_version, random
    let n = usize::from(r.take(1)?[0]);
    r.take(n)?; // legacy_session_id
    let n = r.u16()?;
    r.take(n)?; // cipher_suites
    let n = usize::from(r.take(1)?[0]);
    r.take(n)?; // compression methods
    let n = r.u16()?;
    let mut exts = Reader(r.take(n)?);
    while !exts.0.is_empty() {
        let kind = exts.u16()?;
        let n = exts.u16()?;
        let data = exts.take(n)?;
        if kind == 0x0010 {
            let mut list = Reader(data);
            let n = list.u16()?;
            let mut names = Reader(list.take(n)?);
            let mut out = Vec::new();
            while !names.0.is_empty() {
                let n = usize::from(names.take(1)?[0]);
                out.push(String::from_utf8_lossy(names.take(n)?).to_string());
            }
            return Some(out);
        }
    }
    Some(Vec::new())
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u16(&mut self) -> Option<usize> {
        let b = self.take(2)?;
        Some(usize::from(u16::from_be_bytes([b[0], b[1]])))
    }
}
