//! A one-connection HTTP server that answers with a 100 MiB body, for tests of body caps here
//! and in the forge crates (feature `testing`).

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
