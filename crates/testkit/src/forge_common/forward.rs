//! Forwarding for a fake that stands in front of another server (the GitHub fronts before the
//! `scaleset` emulator): a front is its own routes plus a fallback that sends the rest upstream
//! ([`Upstream::send`]) and passes the answer back, after looking at it or changing it if the
//! front needs to ([`Reply`]).

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Largest request body passed on (the token chain's and the listener's bodies are small JSON).
pub const MAX_FORWARDED_BODY: usize = 1024 * 1024;

/// Why a request got no answer from the upstream.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// The request body is over [`MAX_FORWARDED_BODY`] (or could not be read).
    #[error("request body too large")]
    BodyTooLarge,
    /// The upstream did not answer.
    #[error("upstream unreachable")]
    Unreachable,
    /// The upstream's answer broke off.
    #[error("upstream body unreadable")]
    BodyUnreadable,
}

impl ForwardError {
    /// The status a front answers with: 413 for the request's fault, else 502.
    pub fn status(&self) -> StatusCode {
        match self {
            ForwardError::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ForwardError::Unreachable | ForwardError::BodyUnreadable => StatusCode::BAD_GATEWAY,
        }
    }
}

/// The upstream's answer, read whole so that a front can look at it or change it.
#[derive(Debug)]
pub struct Reply {
    /// Its status.
    pub status: StatusCode,
    /// Its headers, as the upstream sent them.
    pub headers: HeaderMap,
    /// Its body.
    pub body: Bytes,
}

impl Reply {
    /// The answer to pass back, with the upstream's headers that `keep` lets through. Those of
    /// the upstream connection never are ([`end_to_end`]): the body is framed anew here.
    pub fn into_response(self, keep: impl Fn(&HeaderName) -> bool) -> Response {
        let mut resp = Response::new(Body::from(self.body));
        *resp.status_mut() = self.status;
        let out = resp.headers_mut();
        for (name, value) in &self.headers {
            if end_to_end(name) && keep(name) {
                out.append(name.clone(), value.clone());
            }
        }
        resp
    }
}

/// Whether a reply header belongs to the message rather than to the connection it came on
/// (the body's length and transfer coding are the new connection's to set).
pub fn end_to_end(name: &HeaderName) -> bool {
    name != header::CONTENT_LENGTH && name != header::TRANSFER_ENCODING && name != header::CONNECTION
}

/// The server a front forwards to.
#[derive(Clone, Debug)]
pub struct Upstream {
    /// `http://host:port`, no trailing `/`.
    base: String,
    http: reqwest::Client,
}

impl Upstream {
    /// An upstream at `base` (`http://host:port`; a trailing `/` is ignored). Its redirects are
    /// passed back, not followed: they are the client's to follow.
    pub fn new(base: &str) -> std::io::Result<Upstream> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(std::io::Error::other)?;
        Ok(Upstream {
            base: base.trim_end_matches('/').to_owned(),
            http,
        })
    }

    /// `http://host:port`, no trailing `/`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// A request of the front's own to `target` (path and query) upstream.
    pub fn request(&self, method: reqwest::Method, target: &str) -> reqwest::RequestBuilder {
        self.http.request(method, format!("{}{target}", self.base))
    }

    /// Sends `req` on with its method, path, query, headers and body, and reads the answer.
    pub async fn send(&self, req: Request) -> Result<Reply, ForwardError> {
        let (parts, body) = req.into_parts();
        let body = axum::body::to_bytes(body, MAX_FORWARDED_BODY)
            .await
            .map_err(|_| ForwardError::BodyTooLarge)?;
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let mut out = self.request(parts.method.clone(), target).body(body);
        for (name, value) in &parts.headers {
            // The host is the upstream's; the length is set from the body again.
            if name != header::HOST && name != header::CONTENT_LENGTH {
                out = out.header(name, value);
            }
        }
        let reply = out.send().await.map_err(|_| ForwardError::Unreachable)?;
        let status = reply.status();
        let headers = reply.headers().clone();
        let body = reply.bytes().await.map_err(|_| ForwardError::BodyUnreadable)?;
        Ok(Reply {
            status,
            headers,
            body,
        })
    }

    /// Sends `req` on and passes the answer back as it came, or the failure as plain text.
    pub async fn forward(&self, req: Request) -> Response {
        match self.send(req).await {
            Ok(reply) => reply.into_response(|_| true),
            Err(e) => (e.status(), e.to_string()).into_response(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply() -> Reply {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("content-type", "application/json"),
            ("content-length", "2"),
            ("transfer-encoding", "chunked"),
            ("connection", "keep-alive"),
            ("retry-after", "3"),
            ("x-ratelimit-remaining", "1"),
        ] {
            headers.insert(
                HeaderName::from_static(name),
                value.parse().expect("a header value"),
            );
        }
        Reply {
            status: StatusCode::TOO_MANY_REQUESTS,
            headers,
            body: Bytes::from_static(b"{}"),
        }
    }

    fn names(resp: &Response) -> Vec<&str> {
        let mut names: Vec<&str> = resp.headers().keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        names
    }

    #[test]
    fn only_kept_end_to_end_headers_pass() {
        let all = reply().into_response(|_| true);
        assert_eq!(all.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            names(&all),
            ["content-type", "retry-after", "x-ratelimit-remaining"]
        );
        let some = reply().into_response(|n| n == header::CONTENT_TYPE);
        assert_eq!(names(&some), ["content-type"]);
    }
}
