//! Describing a failed exchange without the request's path or query.
//!
//! reqwest's `Display` prints the full URL, and a forge URL's path or query may carry what a
//! user would not want in a status condition or an Event (tokens in query strings behind some
//! proxies, private repository names). Only the scheme, host and port are kept.

use std::error::Error as _;
use std::fmt;

/// Most characters of the underlying causes kept (their text comes from the network stack).
const MAX_CAUSE_CHARS: usize = 200;
/// Most links of the cause chain shown; the innermost ones name the real reason.
const MAX_CAUSES: usize = 3;

/// What kind of failure, as a closed set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportKind {
    /// A timeout (connect, request or body).
    Timeout,
    /// The connection could not be opened (DNS, TCP, TLS, proxy).
    Connect,
    /// The connection broke while the body was read.
    Body,
    /// A redirect could not be followed.
    Redirect,
    /// Every address of the host is one `forgeHosts.refusePrivateAddresses` refuses
    /// ([`crate::address_policy`]): no connection was opened.
    AddressRefused,
    /// Anything else while sending.
    Request,
}

impl TransportKind {
    fn words(self) -> &'static str {
        match self {
            TransportKind::Timeout => "timed out",
            TransportKind::Connect => "cannot connect",
            TransportKind::Body => "the connection broke while reading the response",
            TransportKind::Redirect => "cannot follow a redirect",
            TransportKind::AddressRefused => "refused to connect",
            TransportKind::Request => "the request failed",
        }
    }
}

/// A transport failure safe to show anywhere: kind, origin (`scheme://host[:port]`) and the
/// network stack's causes, never the URL's path or query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportFailure {
    /// What kind of failure.
    pub kind: TransportKind,
    origin: Option<String>,
    cause: Option<String>,
}

impl TransportFailure {
    /// Describes `e`, dropping any part of it that could echo the request URL.
    pub fn from_reqwest(e: &reqwest::Error) -> TransportFailure {
        let url = e.url();
        let origin = url.and_then(origin_of);
        // The resolver's own words say all: host, addresses, classes and the setting.
        if let Some(refused) = crate::address_policy::refusal_in(e) {
            return TransportFailure {
                kind: TransportKind::AddressRefused,
                origin,
                cause: Some(clip(&refused.to_string())),
            };
        }
        let kind = if e.is_timeout() {
            TransportKind::Timeout
        } else if e.is_connect() {
            TransportKind::Connect
        } else if e.is_body() || e.is_decode() {
            TransportKind::Body
        } else if e.is_redirect() {
            TransportKind::Redirect
        } else {
            TransportKind::Request
        };
        let path = url.map(|u| u.path()).filter(|p| p.len() > 1);
        let mut causes: Vec<String> = Vec::new();
        let mut next = e.source();
        while let Some(cause) = next {
            let text = cause.to_string();
            // A cause may quote a URL (a proxy's or a redirect's); leave such links out.
            let echoes_url = text.contains("://") || path.is_some_and(|p| text.contains(p));
            if !echoes_url && !text.is_empty() && !causes.contains(&text) {
                causes.push(text);
            }
            next = cause.source();
        }
        let skip = causes.len().saturating_sub(MAX_CAUSES);
        let cause = (!causes.is_empty()).then(|| clip(&causes[skip..].join(": ")));
        TransportFailure { kind, origin, cause }
    }

    /// A failure of `kind` talking to `url`, with `cause` from the network stack: only the
    /// URL's origin is kept.
    pub fn new(kind: TransportKind, url: &url::Url, cause: &str) -> TransportFailure {
        TransportFailure {
            kind,
            origin: origin_of(url),
            cause: (!cause.is_empty()).then(|| clip(cause)),
        }
    }

    /// Whether it was a timeout.
    pub fn is_timeout(&self) -> bool {
        self.kind == TransportKind::Timeout
    }

    /// Whether the address policy refused every address of the host.
    pub fn is_address_refused(&self) -> bool {
        self.kind == TransportKind::AddressRefused
    }
}

impl fmt::Display for TransportFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.words())?;
        if let Some(o) = &self.origin {
            write!(f, " ({o})")?;
        }
        if let Some(c) = &self.cause {
            write!(f, ": {c}")?;
        }
        Ok(())
    }
}

/// `scheme://host[:port]` of `url`, the only part of it a failure shows.
fn origin_of(url: &url::Url) -> Option<String> {
    Some(url.origin())
        .filter(url::Origin::is_tuple)
        .map(|o| o.ascii_serialization())
}

fn clip(text: &str) -> String {
    let mut out: String = text.chars().take(MAX_CAUSE_CHARS).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keeps_the_origin_and_drops_path_and_query() {
        // A port nothing listens on: bind one, then free it.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").port()
        };
        let url = format!("http://127.0.0.1:{port}/api/v1/repos/secret-org/private-repo?token=hunter2");
        let e = reqwest::Client::new()
            .get(&url)
            .send()
            .await
            .expect_err("nothing listens");
        let f = TransportFailure::from_reqwest(&e);
        let text = f.to_string();
        assert_eq!(f.kind, TransportKind::Connect, "{text}");
        assert!(text.contains(&format!("http://127.0.0.1:{port}")), "{text}");
        for leak in ["secret-org", "private-repo", "hunter2", "token=", "/api/v1"] {
            assert!(!text.contains(leak), "{leak} leaked into {text:?}");
        }
    }

    #[test]
    fn clips_long_causes() {
        let long = "x".repeat(1000);
        assert_eq!(clip(&long).chars().count(), MAX_CAUSE_CHARS + 1);
        assert_eq!(clip("short"), "short");
    }
}
