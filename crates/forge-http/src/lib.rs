//! What the forge backends share.
//!
//! Every forge's HTTP client: trusting a group's extra CA bundle and sending through its proxy
//! (`caBundleConfigMap`, `proxyUrl`), reading bodies with a size cap, bounding paged listings
//! and what they decode to ([`bounded`]), clamping `Retry-After`, describing transport
//! failures without the request URL, refusing redirects ([`redirect`]) and, when configured,
//! private addresses ([`address_policy`]); and a lean HTTP/1.1 client for long polls that keeps
//! all of that ([`long_poll`]).
//!
//! Gitea and Forgejo (a fork of Gitea) beyond that: the REST client skeleton ([`rest`]) and how
//! its failures read ([`request_error`]), the
//! single-flight listing cache ([`single_flight`]) under one
//! budget for every cached listing ([`listing_memory`]), the pool of clients per instance and
//! credentials ([`pool`]), scopes ([`scope`]), version numbers ([`version`]), shared wire
//! types ([`wire`]), the runner pod profile ([`act_runner`]), the cache server
//! ([`cache_server`]) and what `Forge::describe` makes of a valid block ([`profile`]).
//!
//! Its own crate because `core` knows no HTTP and forge crates never import each other, yet the
//! forge clients must treat these settings and limits the same way.

pub mod act_runner;
pub mod address_policy;
pub mod body;
pub mod bounded;
#[cfg(any(test, feature = "testing"))]
pub mod cache_checks;
pub mod cache_server;
pub mod listing;
pub mod listing_memory;
pub mod long_poll;
#[cfg(any(test, feature = "testing"))]
pub mod pod_checks;
pub mod pool;
pub mod profile;
pub mod redirect;
pub mod request_error;
pub mod rest;
pub mod retry_after;
pub mod scope;
pub mod single_flight;
pub mod spec_rules;
#[cfg(any(test, feature = "testing"))]
pub mod test_server;
pub mod transport;
pub mod version;
pub mod wire;

pub use address_policy::{AddressClass, AddressPolicy, AddressRefused};
pub use body::{BodyError, ByteSize, read_capped};
pub use bounded::{Entries, Page, PageShape};
pub use listing::{ListingBudget, ListingError, ListingLimits};
pub use listing_memory::{Charge, ListingMemory, entries_of};
pub use long_poll::{LongPollClient, PollAnswer};
pub use pool::{Connection, Instance, InstanceKey, Pool, PoolError};
pub use redirect::{Redirected, no_redirects};
pub use request_error::{Asked, RequestError};
pub use rest::{CallError, ClientOptions, RestClient};
pub use retry_after::{MAX_RETRY_AFTER, retry_after_secs};
pub use scope::{Scope, ScopeError};
pub use single_flight::{Cell, Fetched};
pub use transport::{TransportFailure, TransportKind};

/// Why the trust settings cannot be applied to a client.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TrustError {
    /// The CA bundle holds no valid PEM certificate.
    #[error("the CA bundle is not valid PEM: {0}")]
    CaBundle(String),
    /// The proxy URL cannot be parsed. The URL itself is never part of the message: it may
    /// carry credentials.
    #[error("the proxy URL is not valid")]
    Proxy,
}

/// Applies `ca_bundle` (PEM, trusted on top of the system roots) and `proxy` (every request,
/// HTTP and HTTPS) to `builder`. Blank values count as unset, so a ConfigMap key or spec field
/// left empty changes nothing.
pub fn with_trust(
    mut builder: reqwest::ClientBuilder,
    ca_bundle: Option<&str>,
    proxy: Option<&str>,
) -> Result<reqwest::ClientBuilder, TrustError> {
    if let Some(pem) = ca_bundle.filter(|p| !p.trim().is_empty()) {
        let certs = reqwest::Certificate::from_pem_bundle(pem.as_bytes())
            .map_err(|e| TrustError::CaBundle(e.to_string()))?;
        if certs.is_empty() {
            return Err(TrustError::CaBundle("no certificate in it".into()));
        }
        builder = builder.tls_certs_merge(certs);
    }
    if let Some(p) = proxy.map(str::trim).filter(|p| !p.is_empty()) {
        let proxy = reqwest::Proxy::all(p).map_err(|_| TrustError::Proxy)?;
        builder = builder.proxy(proxy);
    }
    Ok(builder)
}

/// The process's one rustls crypto provider: its default, installed as ring's (the provider
/// kube uses too) when the binary has installed none; the operator installs it at start.
/// reqwest is built without a provider of its own, and the long poll's TLS takes this one, so
/// every connection the operator makes uses one provider and only ring is linked.
pub fn crypto_provider() -> std::sync::Arc<rustls::crypto::CryptoProvider> {
    use rustls::crypto::{CryptoProvider, ring};
    CryptoProvider::get_default().cloned().unwrap_or_else(|| {
        // An Err means another thread installed one meanwhile: that one is the default.
        let _ = ring::default_provider().install_default();
        CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| std::sync::Arc::new(ring::default_provider()))
    })
}

/// A reqwest client builder for a forge's calls, with [`crypto_provider`] installed (reqwest
/// panics building a client when the process has no provider).
pub fn client_builder() -> reqwest::ClientBuilder {
    let _ = crypto_provider();
    reqwest::Client::builder()
}

/// Whether `proxy` is set (not blank); groups without one share clients with each other.
pub fn proxy_of(proxy: Option<&str>) -> Option<&str> {
    proxy.map(str::trim).filter(|p| !p.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_settings_change_nothing_and_bad_ones_are_refused() {
        let b = || reqwest::Client::builder();
        assert!(with_trust(b(), None, None).is_ok());
        assert!(with_trust(b(), Some("  \n"), Some(" ")).is_ok());
        assert!(matches!(
            with_trust(
                b(),
                Some("-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n"),
                None
            ),
            Err(TrustError::CaBundle(_))
        ));
        assert!(matches!(
            with_trust(b(), Some("not pem at all"), None),
            Err(TrustError::CaBundle(_))
        ));
        let e = with_trust(b(), None, Some("http://user:hunter2@[::not")).unwrap_err();
        assert_eq!(e, TrustError::Proxy);
        assert!(
            !e.to_string().contains("hunter2"),
            "the proxy URL is never echoed"
        );
        assert!(with_trust(b(), None, Some("http://proxy.corp:3128")).is_ok());
        assert_eq!(proxy_of(Some("  ")), None);
        assert_eq!(proxy_of(Some(" http://p:1 ")), Some("http://p:1"));
    }
}
