//! Redirects: no forge client follows one, and a 3xx answer becomes a failure that says so.
//!
//! The operator checks a group's forge URL against `forgeHosts.allowed` before any call, so a
//! client that followed a `Location` would let the forge (or whoever answers on its URL) send
//! the operator's requests anywhere its network reaches: cloud metadata, in-cluster services,
//! with 307/308 even the POST or DELETE again. Forge APIs never need a redirect, so every forge
//! client is built with [`no_redirects`] and a group whose URL is answered with one is told to
//! use the final address instead.

use std::fmt;

use reqwest::StatusCode;
use reqwest::header::{HeaderMap, LOCATION};
use url::Url;

/// Most characters of the target's origin kept (a hostile server picks its length).
const MAX_ORIGIN_CHARS: usize = 200;

/// The redirect policy of every forge client: none is followed, the 3xx is the answer.
///
/// reqwest's default ([`reqwest::redirect::Policy::default`], `limited(10)` in its
/// `src/redirect.rs`) follows up to 10 redirects to any host and scheme.
pub fn no_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::none()
}

/// A 3xx answer, described without the `Location`'s path or query (they may carry tokens or
/// private names): its status and where it pointed, as an origin only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redirected {
    /// The status (300–399).
    pub status: u16,
    target: Target,
}

/// Where a redirect pointed, as much of it as may be shown.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    /// Another origin: `scheme://host[:port]`.
    Origin(String),
    /// Another path (or query) of the request's own origin.
    SameOrigin,
    /// No `Location`, or one that does not parse into an http(s) address.
    Unnamed,
}

impl Redirected {
    /// Describes the 3xx answer `status` with `headers` to a request for `request`: a relative
    /// `Location` is resolved against it, as a client following it would.
    pub fn from_reply(status: StatusCode, headers: &HeaderMap, request: &Url) -> Redirected {
        let target = headers
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|l| request.join(l.trim()).ok())
            .map(|to| to.origin())
            .filter(url::Origin::is_tuple)
            .map_or(Target::Unnamed, |to| {
                if to == request.origin() {
                    Target::SameOrigin
                } else {
                    Target::Origin(clip(&to.ascii_serialization()))
                }
            });
        Redirected {
            status: status.as_u16(),
            target,
        }
    }
}

impl fmt::Display for Redirected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            Target::Origin(o) => write!(f, "a redirect ({}) to another address, {o}", self.status),
            Target::SameOrigin => write!(f, "a redirect ({}) to another path on the same host", self.status),
            Target::Unnamed => write!(f, "a redirect ({}) naming no usable address", self.status),
        }
    }
}

fn clip(text: &str) -> String {
    let mut out: String = text.chars().take(MAX_ORIGIN_CHARS).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    fn redirected(location: Option<&str>) -> Redirected {
        let mut h = HeaderMap::new();
        if let Some(l) = location {
            h.insert(LOCATION, HeaderValue::from_str(l).expect("header value"));
        }
        let request = Url::parse("https://forge.example.com/sub/api/v1/version").expect("URL");
        Redirected::from_reply(StatusCode::TEMPORARY_REDIRECT, &h, &request)
    }

    #[test]
    fn names_the_origin_only() {
        let r = redirected(Some(
            "http://user:hunter2@169.254.169.254:8080/latest/meta-data/iam?token=secret",
        ));
        let text = r.to_string();
        assert_eq!(
            text,
            "a redirect (307) to another address, http://169.254.169.254:8080"
        );
        for leak in ["hunter2", "user", "latest", "meta-data", "token", "secret"] {
            assert!(!text.contains(leak), "{leak} leaked into {text:?}");
        }
    }

    #[test]
    fn relative_missing_and_odd_locations() {
        assert_eq!(
            redirected(Some("/other/api/v1/version?x=1")).to_string(),
            "a redirect (307) to another path on the same host"
        );
        assert_eq!(
            redirected(Some("http://forge.example.com/sub/api/v1/version")).to_string(),
            "a redirect (307) to another address, http://forge.example.com",
            "https → http is another origin"
        );
        assert_eq!(
            redirected(None).to_string(),
            "a redirect (307) naming no usable address"
        );
        assert_eq!(
            redirected(Some("mailto:a@b")).to_string(),
            "a redirect (307) naming no usable address"
        );
        let long = format!("https://{}.example.com/x", "a".repeat(500));
        assert!(redirected(Some(&long)).to_string().chars().count() < 260);
    }
}
