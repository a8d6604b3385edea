//! Relaying a webhook delivery from a standby to the leader, unchanged, and its answer back.
//!
//! The standby verifies nothing (it has no group state): the leader does, on the same path,
//! headers and body the forge sent. A marker header stops a delivery from being forwarded
//! twice, so two instances that each believe the other leads cannot bounce it between them.

use std::time::Duration;

use axum::body::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};

/// Set on forwarded deliveries; an instance that does not lead refuses them instead of
/// forwarding again.
pub const FORWARDED_HEADER: &str = "x-forgerunner-forwarded";

/// Largest answer relayed back; the leader answers a line or two of text.
const MAX_ANSWER_BYTES: usize = 16 * 1024;

/// Headers that describe one hop, not the delivery, and are never relayed.
const HOP_HEADERS: [HeaderName; 8] = [
    header::CONNECTION,
    header::HOST,
    header::CONTENT_LENGTH,
    header::TRANSFER_ENCODING,
    header::TE,
    header::TRAILER,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
];

/// Why a delivery could not be relayed.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// The HTTP client could not be built.
    #[error("cannot build the forwarding client: {0}")]
    Client(String),
    /// The leader could not be reached, or did not answer in time.
    #[error("the leader did not answer: {0}")]
    Unreachable(String),
}

/// The leader's answer to a relayed delivery.
#[derive(Debug)]
pub struct Relayed {
    /// Its status.
    pub status: StatusCode,
    /// Its content type, if any.
    pub content_type: Option<HeaderValue>,
    /// Its body, cut at [`MAX_ANSWER_BYTES`].
    pub body: Bytes,
}

/// Forwards deliveries to the leader's endpoint.
#[derive(Clone, Debug)]
pub struct Forwarder {
    client: reqwest::Client,
}

impl Forwarder {
    /// A forwarder whose every relay (connect, send, answer) ends within `timeout`.
    pub fn new(timeout: Duration) -> Result<Self, ForwardError> {
        let client = forgerunner_http::client_builder()
            // Pod to pod: a proxy configured for the forges must not see deliveries.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(timeout.min(Duration::from_secs(3)))
            .timeout(timeout)
            .build()
            .map_err(|e| ForwardError::Client(e.to_string()))?;
        Ok(Forwarder { client })
    }

    /// Sends `body` with `headers` to `path_and_query` on `endpoint` (`http://ip:port`) and
    /// returns the answer.
    pub async fn forward(
        &self,
        endpoint: &str,
        path_and_query: &str,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<Relayed, ForwardError> {
        let mut relayed = headers.clone();
        for h in &HOP_HEADERS {
            relayed.remove(h);
        }
        relayed.insert(FORWARDED_HEADER, HeaderValue::from_static("1"));
        let unreachable = |e: reqwest::Error| ForwardError::Unreachable(e.without_url().to_string());
        let mut res = self
            .client
            .post(format!("{endpoint}{path_and_query}"))
            .headers(relayed)
            .body(body)
            .send()
            .await
            .map_err(unreachable)?;
        let status = res.status();
        let content_type = res.headers().get(header::CONTENT_TYPE).cloned();
        let mut answer = Vec::new();
        while let Some(chunk) = res.chunk().await.map_err(unreachable)? {
            let room = MAX_ANSWER_BYTES.saturating_sub(answer.len());
            answer.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if answer.len() >= MAX_ANSWER_BYTES {
                break;
            }
        }
        Ok(Relayed {
            status,
            content_type,
            body: Bytes::from(answer),
        })
    }
}

/// Whether `headers` mark a delivery another instance already forwarded.
pub fn was_forwarded(headers: &HeaderMap) -> bool {
    headers.contains_key(FORWARDED_HEADER)
}
