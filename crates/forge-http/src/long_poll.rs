//! A lean HTTP/1.1 client for long polls: one GET at a time on a connection kept between
//! polls.
//!
//! Every GitHub group holds a message poll open for about 50 seconds, each on its own
//! HTTP/1.1 connection (see `forge-github`'s `Transport::poll`). Through reqwest each such
//! connection costs about 45 KiB of heap while it waits: hyper's request queue, reqwest's and
//! hyper-util's boxed futures, and 8 KiB read and write buffers (measured with heaptrack,
//! `docs/performance.md`). Here a waiting poll holds its socket and a 1 KiB read buffer.
//!
//! It serves the direct case only. With a proxy, whether the group's `proxyUrl` or one the
//! environment names (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`, which reqwest honours), the
//! caller keeps reqwest: [`LongPollClient::serves`] says which. Everything else matches the
//! reqwest clients of the forges: the same trust ([`crate::with_trust`]), the address policy
//! ([`crate::address_policy`]) on every connection, no redirects (a 3xx is the answer), a
//! connect timeout and a capped body.

mod connect;
mod wire;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use tokio::io::AsyncWriteExt;
use tokio_rustls::TlsConnector;
use url::Url;

use crate::address_policy::{self, AddressPolicy};
use crate::transport::{TransportFailure, TransportKind};
use crate::{BodyError, TrustError};
use connect::{ConnectError, Stream};
use wire::WireError;

/// The proxy variables of the environment reqwest reads on its own.
const PROXY_VARIABLES: [&str; 6] = [
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// An answer: the status and headers, and the body as far as the cap let it be read.
#[derive(Debug)]
pub struct PollAnswer {
    /// The status.
    pub status: StatusCode,
    /// The header fields.
    pub headers: HeaderMap,
    /// The body, or why it could not be read whole.
    pub body: Result<Vec<u8>, BodyError>,
}

/// An idle connection and since when.
struct Idle {
    stream: Stream,
    since: Instant,
}

/// Connections between polls, by origin (`scheme://host:port`).
#[derive(Default)]
struct IdlePool {
    by_origin: HashMap<String, Vec<Idle>>,
    /// When idle connections of every origin were last dropped for age.
    swept: Option<Instant>,
}

/// The long-poll client of one (CA bundle, address policy) pair, shared by every group with
/// that pair: it keeps each connection for the next poll to the same origin.
pub struct LongPollClient {
    tls: TlsConnector,
    policy: AddressPolicy,
    connect_timeout: Duration,
    idle_timeout: Duration,
    idle: Mutex<IdlePool>,
}

impl std::fmt::Debug for LongPollClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LongPollClient")
            .field("policy", &self.policy)
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

impl LongPollClient {
    /// Whether this client serves a group whose proxy setting is `proxy`: only when neither it
    /// nor the environment names a proxy.
    pub fn serves(proxy: Option<&str>) -> bool {
        crate::proxy_of(proxy).is_none()
            && PROXY_VARIABLES
                .iter()
                .all(|v| std::env::var_os(v).is_none_or(|value| value.is_empty()))
    }

    /// A client trusting `ca_bundle` (PEM) on top of the platform's roots, connecting under
    /// `policy` within `connect_timeout`, keeping a connection idle for up to `idle_timeout`.
    pub fn new(
        ca_bundle: Option<&str>,
        policy: AddressPolicy,
        connect_timeout: Duration,
        idle_timeout: Duration,
    ) -> Result<LongPollClient, TrustError> {
        Ok(LongPollClient {
            tls: connect::tls_connector(ca_bundle)?,
            policy,
            connect_timeout,
            idle_timeout,
            idle: Mutex::new(IdlePool::default()),
        })
    }

    /// `GET url` with `headers`, within `timeout` in all. The body is refused past
    /// `cap(status)` bytes. A failure before the head is a [`TransportFailure`] that names no
    /// more of the URL than its origin.
    pub async fn get(
        &self,
        url: &Url,
        headers: &HeaderMap,
        timeout: Duration,
        cap: impl Fn(StatusCode) -> usize,
    ) -> Result<PollAnswer, TransportFailure> {
        if let Err(refused) = address_policy::check_url(self.policy, url) {
            return Err(TransportFailure::new(
                TransportKind::AddressRefused,
                url,
                &refused.to_string(),
            ));
        }
        match tokio::time::timeout(timeout, self.exchange(url, headers, &cap)).await {
            Ok(answer) => answer,
            Err(_) => Err(TransportFailure::new(
                TransportKind::Timeout,
                url,
                "the request timed out",
            )),
        }
    }

    async fn exchange(
        &self,
        url: &Url,
        headers: &HeaderMap,
        cap: &impl Fn(StatusCode) -> usize,
    ) -> Result<PollAnswer, TransportFailure> {
        let origin = url.origin().ascii_serialization();
        let request = wire::request_bytes(url, headers);
        let mut buf = Vec::new();
        let (mut stream, head) = match self.checkout(&origin) {
            Some(mut stream) => match send(&mut stream, &request, &mut buf).await {
                Ok(head) => (stream, head),
                // Closed by the server while idle: a GET is safe to send again, once, on a
                // connection of its own.
                Err(WireError::ClosedBeforeReply) | Err(WireError::Io(_)) => {
                    buf.clear();
                    self.fresh(url, &request, &mut buf).await?
                }
                Err(e) => return Err(failure(url, TransportKind::Request, &e)),
            },
            None => self.fresh(url, &request, &mut buf).await?,
        };
        drop(request);
        let body = match wire::read_body(&mut stream, &mut buf, head.framing, cap(head.status)).await {
            Ok(body) => {
                if head.keep_alive && buf.is_empty() {
                    self.checkin(origin, stream);
                }
                Ok(body)
            }
            Err(WireError::TooLarge) => Err(BodyError::TooLarge {
                limit: cap(head.status),
            }),
            Err(e) => Err(BodyError::Read(failure(url, TransportKind::Body, &e))),
        };
        Ok(PollAnswer {
            status: head.status,
            headers: head.headers,
            body,
        })
    }

    /// Sends `request` on a new connection and reads the head.
    async fn fresh(
        &self,
        url: &Url,
        request: &[u8],
        buf: &mut Vec<u8>,
    ) -> Result<(Stream, wire::Head), TransportFailure> {
        // Boxed: held only while connecting, not for the rest of the poll.
        let mut stream = Box::pin(connect::open(url, self.policy, &self.tls, self.connect_timeout))
            .await
            .map_err(|e| match e {
                ConnectError::Refused(r) => {
                    TransportFailure::new(TransportKind::AddressRefused, url, &r.to_string())
                }
                ConnectError::Timeout => failure(url, TransportKind::Timeout, &e),
                other => failure(url, TransportKind::Connect, &other),
            })?;
        let head = send(&mut stream, request, buf)
            .await
            .map_err(|e| failure(url, TransportKind::Request, &e))?;
        Ok((stream, head))
    }

    /// The newest idle connection to `origin` younger than the idle timeout.
    fn checkout(&self, origin: &str) -> Option<Stream> {
        let mut pool = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let conns = pool.by_origin.get_mut(origin)?;
        let found = match conns.pop() {
            Some(idle) if idle.since.elapsed() < self.idle_timeout => Some(idle.stream),
            // Kept newest last: the others are older still.
            Some(_) => {
                conns.clear();
                None
            }
            None => None,
        };
        if conns.is_empty() {
            pool.by_origin.remove(origin);
        }
        found
    }

    /// Keeps `stream` for the next request to `origin`, dropping connections idle too long.
    fn checkin(&self, origin: String, stream: Stream) {
        let now = Instant::now();
        let mut pool = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if pool
            .swept
            .is_none_or(|at| now.duration_since(at) >= self.idle_timeout)
        {
            let timeout = self.idle_timeout;
            pool.by_origin.retain(|_, conns| {
                conns.retain(|c| now.duration_since(c.since) < timeout);
                !conns.is_empty()
            });
            pool.swept = Some(now);
        }
        pool.by_origin
            .entry(origin)
            .or_default()
            .push(Idle { stream, since: now });
    }

    /// Idle connections kept (for tests).
    #[cfg(test)]
    fn idle_count(&self) -> usize {
        let pool = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        pool.by_origin.values().map(Vec::len).sum()
    }
}

/// Writes `request` and reads the response head.
async fn send(stream: &mut Stream, request: &[u8], buf: &mut Vec<u8>) -> Result<wire::Head, WireError> {
    stream.write_all(request).await?;
    stream.flush().await?;
    wire::read_head(stream, buf).await
}

fn failure(url: &Url, kind: TransportKind, e: &dyn std::error::Error) -> TransportFailure {
    TransportFailure::new(kind, url, &e.to_string())
}

#[cfg(test)]
#[path = "long_poll_tests.rs"]
mod tests;
