//! Reading a response body with a size cap.
//!
//! The author of any RunnerGroup picks its forge URL, so a body's size is chosen by whoever
//! runs that server. Reading it whole would let one tenant exhaust the memory every group
//! shares; these helpers stop as soon as a body is known to be too large.

use std::fmt;

use crate::transport::TransportFailure;

/// Why a body could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// The body is larger than the cap (by `Content-Length` or by what arrived).
    #[error("{}", TooLarge(*limit))]
    TooLarge {
        /// The cap, in bytes.
        limit: usize,
    },
    /// The connection failed while reading.
    #[error("{0}")]
    Read(TransportFailure),
}

/// Reads `resp`'s body, refusing one larger than `max_bytes`.
///
/// A `Content-Length` above the cap is refused before reading anything. Otherwise chunks are
/// appended until the total would pass the cap, so at most `max_bytes` plus the chunk in hand
/// are ever held. Dropping the response on refusal closes the connection instead of draining
/// the rest, so the server cannot make us download what we will not keep.
pub async fn read_capped(mut resp: reqwest::Response, max_bytes: usize) -> Result<Vec<u8>, BodyError> {
    let too_large = BodyError::TooLarge { limit: max_bytes };
    let announced = resp.content_length();
    if announced.is_some_and(|n| n > max_bytes as u64) {
        return Err(too_large);
    }
    // Trust the announced length only as a hint, and only up to the cap.
    let hint = announced.map_or(0, |n| usize::try_from(n).unwrap_or(max_bytes).min(max_bytes));
    let mut body = Vec::with_capacity(hint);
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                if body.len().saturating_add(chunk.len()) > max_bytes {
                    return Err(too_large);
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(e) => return Err(BodyError::Read(TransportFailure::from_reqwest(&e))),
        }
    }
}

/// A byte count in the unit people read: `4 MiB`, `64 KiB`, `100 bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteSize(pub usize);

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const KIB: usize = 1024;
        const MIB: usize = 1024 * KIB;
        match self.0 {
            n if n >= MIB && n % MIB == 0 => write!(f, "{} MiB", n / MIB),
            n if n >= KIB && n % KIB == 0 => write!(f, "{} KiB", n / KIB),
            n => write!(f, "{n} bytes"),
        }
    }
}

/// The words of an over-cap body, shared so every forge says it the same way.
struct TooLarge(usize);

impl fmt::Display for TooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the response body is larger than {}", ByteSize(self.0))
    }
}

#[cfg(test)]
#[path = "body_tests.rs"]
mod tests;
