//! End to end: request heads that never end cost the real `forgerunner` binary a small,
//! bounded buffer per connection (security review H4, `../shared/reference/findings/security.md`).
//!
//! hyper's HTTP/1 server buffers a request head until it ends, up to its `max_buf_size`:
//! `DEFAULT_MAX_BUFFER_SIZE` is 8192 + 4096 × 100 bytes, about 408 KiB
//! (`hyper/src/proto/h1/io.rs`, hyper 1.12). Anyone who reaches the webhook port needs no
//! credentials to send a head, so 400 connections each sending 400 KiB of one header made the
//! operator hold about 160 MiB, above the chart's 128 MiB memory limit.
#![cfg(feature = "gitea")]

#[allow(dead_code)]
mod common;

use std::time::Duration;

use common::e2e::{assert_healthz, assert_peak_rss_under, fail_with_output, start_operator};
use common::gitea_world::gitea_world;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const NS: &str = "request-heads";
/// Connections sending a head that never ends.
const CONNECTIONS: usize = 400;
/// Bytes of one header each connection sends (hyper's default buffer takes up to ~408 KiB).
const HEAD_BYTES: usize = 400 * 1024;
/// How long the server may take to end a connection whose head never ends (its header timeout
/// is 10 s).
const CLOSE_DEADLINE: Duration = Duration::from_secs(60);
/// Peak resident memory the operator must stay under: well below the chart's 128 MiB limit.
const PEAK_RSS_MIB: f64 = 96.0;

/// Opens a connection to `addr` and sends a request head of [`HEAD_BYTES`] that never ends;
/// returns the socket (kept open) once everything is written or the server closed it.
async fn endless_head(addr: std::net::SocketAddr) -> Option<TcpStream> {
    let mut socket = TcpStream::connect(addr).await.ok()?;
    let start = b"POST /webhook/gitea HTTP/1.1\r\nHost: forgerunner\r\nX-Padding: ";
    if socket.write_all(start).await.is_err() {
        return None;
    }
    let chunk = vec![b'a'; 8 * 1024];
    for _ in 0..HEAD_BYTES / chunk.len() {
        // The server may answer 431 and close: that is the point; stop writing.
        if socket.write_all(&chunk).await.is_err() {
            break;
        }
    }
    Some(socket)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn endless_request_heads_cost_a_bounded_buffer() {
    let world = gitea_world(NS, Duration::from_millis(300)).await;
    let op = start_operator(&world, "gitea", "forgerunner-e2e-request-heads");
    let addr = op.http_addr().await.expect("operator listening");
    common::gitea_world::wait_or_fail(&op, "/healthz to answer", || async {
        reqwest::get(format!("http://{addr}/healthz"))
            .await
            .is_ok_and(|r| r.status().is_success())
    })
    .await;

    let senders: Vec<_> = (0..CONNECTIONS)
        .map(|_| tokio::spawn(endless_head(addr)))
        .collect();
    let mut open = Vec::new();
    for s in senders {
        if let Ok(Some(socket)) = s.await {
            open.push(socket);
        }
    }
    eprintln!("{} of {CONNECTIONS} connections sent their head", open.len());
    // Wait until the server has ended every connection: it answers 431 once a head outgrows its
    // buffer, or gives up at its header timeout (10 s); either way it has read all it will.
    let ended = futures::future::join_all(open.iter_mut().map(|socket| async move {
        let mut sink = Vec::new();
        tokio::time::timeout(CLOSE_DEADLINE, socket.read_to_end(&mut sink))
            .await
            .is_ok()
    }))
    .await;
    let ended = ended.iter().filter(|e| **e).count();
    if ended < open.len() {
        fail_with_output(
            &op,
            &format!(
                "only {ended} of {} connections were ended by the server",
                open.len()
            ),
        );
    }

    assert_healthz(&op).await;
    assert_peak_rss_under(&op, PEAK_RSS_MIB, &format!("{CONNECTIONS} endless heads"));
    drop(open);
}
