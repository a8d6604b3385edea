//! The HTTP/1 accept loop, with the limits an endpoint open to forges needs.
//!
//! `axum::serve` sets no header timeout and accepts any number of connections, so a client
//! sending headers one byte at a time holds a connection (and its task) forever. Here every
//! connection must deliver its request head within [`ServerLimits::header_timeout`] (also
//! bounding idle keep-alive connections), at most [`ServerLimits::max_connections`] are open
//! at once (more are closed at once, before any byte is read), each buffers at most
//! [`ServerLimits::max_head_bytes`] (a larger head is answered 431), and shutdown lets in-flight
//! requests finish. Body reads are bounded by the handlers that read bodies (webhooks).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// The smallest buffer hyper accepts (`MINIMUM_MAX_BUFFER_SIZE`, its initial buffer).
const MIN_HEAD_BYTES: usize = 8192;

/// Bounds of the HTTP server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// A request head (or the first byte of the next request on a kept-alive connection)
    /// must arrive within this.
    pub header_timeout: Duration,
    /// A webhook body must be read whole within this, counted from when reading starts.
    pub body_timeout: Duration,
    /// Connections open at once; more are closed at once.
    pub max_connections: usize,
    /// Bytes a connection may buffer; a request head larger than this is answered 431. hyper's
    /// default (about 408 KiB, `DEFAULT_MAX_BUFFER_SIZE` in hyper's `proto/h1/io.rs`) let
    /// 400 connections sending endless heads hold 198 MiB without any credentials.
    pub max_head_bytes: usize,
    /// Webhook deliveries handled at once (buffered bodies included); more wait for a turn.
    pub max_webhooks_in_flight: usize,
    /// How long a delivery may wait for a turn before it is answered 503 with `Retry-After`:
    /// a forge sends a burst of deliveries when many jobs are queued at once, and most forges
    /// never redeliver, so a burst is queued briefly rather than shed at once. Waiting holds
    /// only a connection (bounded by `max_connections`), never a buffered body.
    pub webhook_queue_wait: Duration,
    /// Deliveries verified (HMAC) at once, on blocking threads: fewer than the cores, so a
    /// flood cannot take the CPU the async workers need for `/healthz`.
    pub max_verifications: usize,
    /// Bound on relaying one delivery to the leader (connect, send, answer).
    pub forward_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            // A forge queuing many jobs at once sends a delivery per job, each on its own
            // connection: 1000 at once must fit. An idle HTTP/1 connection costs tens of KiB,
            // so this bounds a deliberate flood to a few tens of MiB.
            max_connections: 2048,
            // A forge's delivery head is 1–3 KiB (GitHub's is the largest, about 20 headers).
            // 2048 connections × 16 KiB bounds a flood of heads to 32 MiB.
            max_head_bytes: 16 * 1024,
            max_webhooks_in_flight: 32,
            webhook_queue_wait: Duration::from_secs(5),
            max_verifications: std::thread::available_parallelism()
                .map_or(1, |n| n.get().saturating_sub(1))
                .max(1),
            forward_timeout: Duration::from_secs(10),
        }
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown` fires, then lets open
/// connections finish their in-flight request and returns once all are closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ServerLimits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    // Far below both the semaphore's and `acquire_many`'s (u32) limits.
    let max = limits.max_connections.clamp(1, 1 << 16);
    let slots = Arc::new(Semaphore::new(max));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        // hyper refuses (panics on) less than its initial 8 KiB buffer.
        .max_buf_size(limits.max_head_bytes.max(MIN_HEAD_BYTES))
        .keep_alive(true);
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Per-connection failures (reset before accept, fd limits) must not end
                    // the server; back off briefly so an fd shortage is not a busy loop.
                    tracing::debug!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!("connection limit reached; closing a new connection");
            drop(stream);
            continue;
        };
        let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(router.clone()));
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let _slot = slot;
            tokio::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                _ = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                // Timeouts and resets by clients are routine; nothing to act on.
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    // Every slot back means every connection has finished.
    let all = u32::try_from(max).unwrap_or(u32::MAX);
    let _ = slots.acquire_many(all).await;
    Ok(())
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
