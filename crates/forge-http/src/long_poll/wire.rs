//! HTTP/1.1 on the wire, one GET at a time: the request's bytes, the response's head, and its
//! body read by the framing the head names (RFC 9112, sections 6 and 7), under a size cap.

use std::io;

use reqwest::StatusCode;
use reqwest::header::{
    CONNECTION, CONTENT_LENGTH, HOST, HeaderMap, HeaderName, HeaderValue, TRANSFER_ENCODING,
};
use tokio::io::{AsyncRead, AsyncReadExt};
use url::Url;

/// Largest response head read: a server sending more is not answering a poll.
pub(super) const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Most header lines in a response head.
const MAX_HEADERS: usize = 64;
/// Longest chunk-size or trailer line.
const MAX_LINE_BYTES: usize = 4 * 1024;
/// What each read asks for while the head is incomplete: a poll's answer is small, and the
/// buffer is held for as long as the server holds the poll.
const READ_STEP: usize = 1024;

/// Why an exchange failed on the wire.
#[derive(Debug, thiserror::Error)]
pub(super) enum WireError {
    /// The connection failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The server closed the connection before a byte of the response: on a connection
    /// reused from the pool, the server had closed it while idle.
    #[error("the server closed the connection before answering")]
    ClosedBeforeReply,
    /// The connection closed in the middle of the response.
    #[error("the connection closed in the middle of the response")]
    Truncated,
    /// The response does not parse as HTTP/1.1.
    #[error("malformed response: {0}")]
    Malformed(&'static str),
    /// The body is larger than the cap.
    #[error("the body is larger than the cap")]
    TooLarge,
}

/// How the body of a response ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Framing {
    /// No body (1xx, 204, 304).
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the server closes the connection.
    UntilClose,
}

/// A parsed response head.
#[derive(Debug)]
pub(super) struct Head {
    /// The status.
    pub status: StatusCode,
    /// The header fields (names lowercased, invalid values dropped).
    pub headers: HeaderMap,
    /// How the body ends.
    pub framing: Framing,
    /// Whether the connection may carry another request after this response.
    pub keep_alive: bool,
}

/// The bytes of `GET url` with `headers` (a `Host` among them is replaced by the URL's).
pub(super) fn request_bytes(url: &Url, headers: &HeaderMap) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"GET ");
    out.extend_from_slice(url.path().as_bytes());
    if let Some(q) = url.query() {
        out.push(b'?');
        out.extend_from_slice(q.as_bytes());
    }
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(url.host_str().unwrap_or_default().as_bytes());
    if let Some(port) = url.port() {
        out.extend_from_slice(format!(":{port}").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        if name == HOST || name == CONNECTION || name == CONTENT_LENGTH || name == TRANSFER_ENCODING {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Reads up to the end of a final (non-1xx) response head. `buf` keeps what arrived after
/// the head: the first bytes of the body.
pub(super) async fn read_head<R: AsyncRead + Unpin>(
    io: &mut R,
    buf: &mut Vec<u8>,
) -> Result<Head, WireError> {
    let mut got_any = !buf.is_empty();
    loop {
        if let Some((len, head)) = parse_head(buf)? {
            buf.drain(..len);
            match head {
                Some(head) => return Ok(head),
                // An interim answer (100 Continue, 103 Early Hints): the final one follows.
                None => continue,
            }
        }
        if buf.len() >= MAX_HEAD_BYTES {
            return Err(WireError::Malformed("the response head is too large"));
        }
        buf.reserve(READ_STEP);
        if io.read_buf(buf).await? == 0 {
            return Err(if got_any {
                WireError::Truncated
            } else {
                WireError::ClosedBeforeReply
            });
        }
        got_any = true;
    }
}

/// Parses a complete head at the start of `buf`: its length, and the head (`None` for an
/// interim 1xx answer). `Ok(None)` while incomplete.
fn parse_head(buf: &[u8]) -> Result<Option<(usize, Option<Head>)>, WireError> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut fields);
    let len = match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(WireError::Malformed("too many header fields")),
        Err(_) => return Err(WireError::Malformed("the response head does not parse")),
    };
    let code = response.code.unwrap_or_default();
    let status =
        StatusCode::from_u16(code).map_err(|_| WireError::Malformed("the status code is invalid"))?;
    if status.is_informational() {
        if status == StatusCode::SWITCHING_PROTOCOLS {
            return Err(WireError::Malformed("the server switched protocols"));
        }
        return Ok(Some((len, None)));
    }
    let mut headers = HeaderMap::with_capacity(response.headers.len());
    for field in response.headers.iter() {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(field.name.as_bytes()),
            HeaderValue::from_bytes(field.value),
        ) {
            headers.append(name, value);
        }
    }
    let framing = framing_of(status, &headers)?;
    let http11 = response.version == Some(1);
    let keep_alive = http11 && framing != Framing::UntilClose && !has_token(&headers, &CONNECTION, "close");
    Ok(Some((
        len,
        Some(Head {
            status,
            headers,
            framing,
            keep_alive,
        }),
    )))
}

/// How the body of a response with `status` and `headers` to a GET ends (RFC 9112, 6.3).
fn framing_of(status: StatusCode, headers: &HeaderMap) -> Result<Framing, WireError> {
    if status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        return Ok(Framing::Empty);
    }
    if headers.contains_key(TRANSFER_ENCODING) {
        // Chunked only when it is the last coding; otherwise the body runs to the close.
        let last = headers
            .get_all(TRANSFER_ENCODING)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .rfind(|c| !c.is_empty());
        return Ok(match last {
            Some(c) if c.eq_ignore_ascii_case("chunked") => Framing::Chunked,
            _ => Framing::UntilClose,
        });
    }
    let mut length = None;
    for value in headers.get_all(CONTENT_LENGTH) {
        for part in value.to_str().unwrap_or("x").split(',') {
            let n: u64 = part
                .trim()
                .parse()
                .map_err(|_| WireError::Malformed("Content-Length is not a number"))?;
            if length.is_some_and(|l| l != n) {
                return Err(WireError::Malformed("Content-Length values disagree"));
            }
            length = Some(n);
        }
    }
    Ok(length.map_or(Framing::UntilClose, Framing::Length))
}

/// Whether the comma-separated header `name` holds `token` (case-insensitive).
fn has_token(headers: &HeaderMap, name: &HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// Reads the body `framing` names, starting with what `buf` already holds, refusing one
/// larger than `cap` as soon as that is known. On success `buf` holds what arrived after the
/// body (nothing, from a server that waits for the next request).
pub(super) async fn read_body<R: AsyncRead + Unpin>(
    io: &mut R,
    buf: &mut Vec<u8>,
    framing: Framing,
    cap: usize,
) -> Result<Vec<u8>, WireError> {
    match framing {
        Framing::Empty => Ok(Vec::new()),
        Framing::Length(n) => {
            let n = usize::try_from(n).map_err(|_| WireError::TooLarge)?;
            if n > cap {
                return Err(WireError::TooLarge);
            }
            let mut body = Vec::with_capacity(n);
            take_exact(io, buf, n, &mut body).await?;
            Ok(body)
        }
        Framing::Chunked => read_chunked(io, buf, cap).await,
        Framing::UntilClose => {
            let mut body = std::mem::take(buf);
            loop {
                if body.len() > cap {
                    return Err(WireError::TooLarge);
                }
                body.reserve(READ_STEP.min(cap + 1 - body.len()));
                if io.read_buf(&mut body).await? == 0 {
                    return Ok(body);
                }
            }
        }
    }
}

/// Decodes a chunked body (trailers are read and dropped).
async fn read_chunked<R: AsyncRead + Unpin>(
    io: &mut R,
    buf: &mut Vec<u8>,
    cap: usize,
) -> Result<Vec<u8>, WireError> {
    let mut body = Vec::new();
    loop {
        let line = take_line(io, buf).await?;
        let digits = line.split(|b| *b == b';').next().unwrap_or_default();
        let size = std::str::from_utf8(digits)
            .ok()
            .and_then(|d| usize::from_str_radix(d.trim(), 16).ok())
            .ok_or(WireError::Malformed("a chunk size does not parse"))?;
        if size == 0 {
            // Trailer fields, up to the empty line.
            while !take_line(io, buf).await?.is_empty() {}
            return Ok(body);
        }
        if body.len().saturating_add(size) > cap {
            return Err(WireError::TooLarge);
        }
        take_exact(io, buf, size, &mut body).await?;
        if !take_line(io, buf).await?.is_empty() {
            return Err(WireError::Malformed("a chunk does not end with CRLF"));
        }
    }
}

/// Moves the next `n` bytes of the stream (`buf` first) to the end of `out`.
async fn take_exact<R: AsyncRead + Unpin>(
    io: &mut R,
    buf: &mut Vec<u8>,
    n: usize,
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    let mut left = n;
    let from_buf = left.min(buf.len());
    out.extend_from_slice(&buf[..from_buf]);
    buf.drain(..from_buf);
    left -= from_buf;
    while left > 0 {
        let before = out.len();
        out.reserve(left);
        let read = (&mut *io).take(left as u64).read_buf(out).await?;
        if read == 0 {
            return Err(WireError::Truncated);
        }
        left -= out.len() - before;
    }
    Ok(())
}

/// The next CRLF-terminated line of the stream (`buf` first), without its CRLF.
async fn take_line<R: AsyncRead + Unpin>(io: &mut R, buf: &mut Vec<u8>) -> Result<Vec<u8>, WireError> {
    loop {
        if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
            let line = buf[..end].to_vec();
            buf.drain(..end + 2);
            return Ok(line);
        }
        if buf.len() > MAX_LINE_BYTES {
            return Err(WireError::Malformed("a chunk line is too long"));
        }
        buf.reserve(READ_STEP);
        if io.read_buf(buf).await? == 0 {
            return Err(WireError::Truncated);
        }
    }
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
