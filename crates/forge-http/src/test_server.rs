//! Local HTTP servers for tests here and in the forge crates (feature `testing`): one that
//! answers with a 100 MiB body (body caps), one that answers JSON and one that redirects.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Size of the body the server offers: far above any cap, so reading it whole is the bug.
pub const HUGE: usize = 100 * 1024 * 1024;
/// Size of each write; the body is JSON whitespace, so a client that read it all would then
/// fail to decode rather than succeed by accident.
const CHUNK: usize = 64 * 1024;

/// Serves one connection on 127.0.0.1 (port 0): reads the request head and answers 200 with
/// [`HUGE`] bytes, announced by `Content-Length` when `announce_length`, chunked otherwise.
/// The task ends when the body is out or the client hung up, returning the body bytes it got
/// out to the socket.
pub async fn serve_huge(announce_length: bool) -> (u16, JoinHandle<usize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a local port");
    let port = listener.local_addr().expect("local address").port();
    let task = tokio::spawn(async move {
        let Ok((mut socket, _)) = listener.accept().await else {
            return 0;
        };
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return 0,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let framing = if announce_length {
            format!("content-length: {HUGE}")
        } else {
            "transfer-encoding: chunked".to_string()
        };
        let head = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{framing}\r\n\r\n");
        if socket.write_all(head.as_bytes()).await.is_err() {
            return 0;
        }
        let data = vec![b' '; CHUNK];
        let mut sent = 0;
        while sent < HUGE {
            let ok = if announce_length {
                socket.write_all(&data).await.is_ok()
            } else {
                let frame = format!("{CHUNK:x}\r\n");
                socket.write_all(frame.as_bytes()).await.is_ok()
                    && socket.write_all(&data).await.is_ok()
                    && socket.write_all(b"\r\n").await.is_ok()
            };
            if !ok {
                break;
            }
            sent += CHUNK;
        }
        if !announce_length && sent >= HUGE {
            let _ = socket.write_all(b"0\r\n\r\n").await;
        }
        sent
    });
    (port, task)
}

/// What [`serve_json`]'s handler answers: extra headers and a JSON body (status 200).
pub type JsonReply = (Vec<(String, String)>, String);

/// Serves every connection on 127.0.0.1 (port 0), one request each (`connection: close`):
/// `handler` gets the request target (path and query) and returns the reply. The counter
/// counts requests served; the server lives as long as the runtime.
pub async fn serve_json<F>(handler: F) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>)
where
    F: Fn(&str) -> JsonReply + Send + Sync + 'static,
{
    serve(move |target| {
        let (headers, body) = handler(target);
        (200, headers, body)
    })
    .await
}

/// Serves every connection on 127.0.0.1 (port 0) like [`serve_json`], answering each request
/// `status` (a 3xx) with `Location: location` and an empty body: a forge URL whose server
/// sends its clients elsewhere. The counter counts requests answered.
pub async fn serve_redirect(
    status: u16,
    location: String,
) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    serve(move |_| {
        (
            status,
            vec![("location".to_string(), location.clone())],
            String::new(),
        )
    })
    .await
}

/// The `page` query parameter of a request target (`/api/…?page=3&limit=50`); 1, the first
/// page, when absent or unreadable, as the forges read it.
pub fn page_number(target: &str) -> usize {
    target
        .split(['?', '&'])
        .find_map(|kv| kv.strip_prefix("page="))
        .and_then(|p| p.parse().ok())
        .unwrap_or(1)
}

/// The server of [`serve_json`] and [`serve_redirect`]: `handler` returns status, extra headers
/// and a JSON body.
async fn serve<F>(handler: F) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>)
where
    F: Fn(&str) -> (u16, Vec<(String, String)>, String) + Send + Sync + 'static,
{
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a local port");
    let port = listener.local_addr().expect("local address").port();
    let served = Arc::new(AtomicUsize::new(0));
    let handler = Arc::new(handler);
    let counter = served.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let handler = handler.clone();
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&head);
                let target = text.split_whitespace().nth(1).unwrap_or("/").to_string();
                let (status, headers, body) = handler(&target);
                counter.fetch_add(1, Ordering::SeqCst);
                let reason = reqwest::StatusCode::from_u16(status)
                    .ok()
                    .and_then(|s| s.canonical_reason())
                    .unwrap_or("Status");
                let mut out = format!(
                    "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n",
                    body.len()
                );
                for (k, v) in headers {
                    out.push_str(&format!("{k}: {v}\r\n"));
                }
                out.push_str("\r\n");
                out.push_str(&body);
                let _ = socket.write_all(out.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    (port, served)
}
