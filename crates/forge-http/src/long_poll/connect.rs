//! Opening a long-poll connection: resolving under the address policy, TCP, and TLS trusting
//! what reqwest's clients trust (the platform's roots plus the group's CA bundle).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use url::Url;

use crate::TrustError;
use crate::address_policy::{AddressPolicy, AddressRefused, keep_public};

/// A connection's byte stream, plain or TLS.
pub(super) trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// An open connection.
pub(super) type Stream = Box<dyn Io>;

/// Why a connection could not be opened.
#[derive(Debug, thiserror::Error)]
pub(super) enum ConnectError {
    /// The policy refused every address of the host.
    #[error(transparent)]
    Refused(AddressRefused),
    /// Resolving, connecting or the TLS handshake failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// Not within the connect timeout.
    #[error("connecting timed out")]
    Timeout,
    /// The URL names no host, or a scheme other than `http` and `https`.
    #[error("{0}")]
    Url(&'static str),
}

/// TLS settings for `https` URLs: reqwest's with ALPN `http/1.1` (see
/// [`crate::with_trust`]): the platform verifier, with `ca_bundle` (PEM) trusted on top of the
/// platform's roots. The crypto provider is reqwest's too ([`crate::crypto_provider`]).
pub(super) fn tls_connector(ca_bundle: Option<&str>) -> Result<TlsConnector, TrustError> {
    let provider = crate::crypto_provider();
    let verifier = match ca_bundle.filter(|p| !p.trim().is_empty()) {
        None => rustls_platform_verifier::Verifier::new(provider.clone()),
        Some(pem) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| TrustError::CaBundle(e.to_string()))?;
            if certs.is_empty() {
                return Err(TrustError::CaBundle("no certificate in it".into()));
            }
            rustls_platform_verifier::Verifier::new_with_extra_roots(certs, provider.clone())
        }
    }
    .map_err(|e| TrustError::CaBundle(e.to_string()))?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TrustError::CaBundle(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}

/// Opens a connection to `url`'s host and port within `timeout`: TLS for `https`.
pub(super) async fn open(
    url: &Url,
    policy: AddressPolicy,
    tls: &TlsConnector,
    timeout: Duration,
) -> Result<Stream, ConnectError> {
    tokio::time::timeout(timeout, open_now(url, policy, tls, timeout))
        .await
        .unwrap_or(Err(ConnectError::Timeout))
}

async fn open_now(
    url: &Url,
    policy: AddressPolicy,
    tls: &TlsConnector,
    timeout: Duration,
) -> Result<Stream, ConnectError> {
    let https = match url.scheme() {
        "https" => true,
        "http" => false,
        _ => return Err(ConnectError::Url("the URL's scheme is neither http nor https")),
    };
    let port = url
        .port_or_known_default()
        .ok_or(ConnectError::Url("the URL names no port"))?;
    let (addresses, server_name) = match url.host() {
        Some(url::Host::Domain(name)) => (
            resolve(name, port, policy).await?,
            ServerName::try_from(name.to_owned())
                .map_err(|_| ConnectError::Url("the host is not a valid name"))?,
        ),
        Some(url::Host::Ipv4(ip)) => (
            vec![SocketAddr::new(IpAddr::V4(ip), port)],
            ServerName::from(IpAddr::V4(ip)),
        ),
        Some(url::Host::Ipv6(ip)) => (
            vec![SocketAddr::new(IpAddr::V6(ip), port)],
            ServerName::from(IpAddr::V6(ip)),
        ),
        None => return Err(ConnectError::Url("the URL names no host")),
    };
    let tcp = connect_any(&addresses, timeout).await?;
    // Polls are small and latency matters more than packet count.
    let _ = tcp.set_nodelay(true);
    if https {
        Ok(Box::new(tls.connect(server_name, tcp).await?))
    } else {
        Ok(Box::new(tcp))
    }
}

/// The addresses `name` resolves to that `policy` allows.
async fn resolve(name: &str, port: u16, policy: AddressPolicy) -> Result<Vec<SocketAddr>, ConnectError> {
    let found: Vec<SocketAddr> = tokio::net::lookup_host((name, port)).await?.collect();
    if found.is_empty() {
        return Err(io::Error::new(io::ErrorKind::NotFound, format!("{name} resolves to no address")).into());
    }
    match policy {
        AddressPolicy::AllowPrivate => Ok(found),
        AddressPolicy::RefusePrivate => {
            let (kept, refused) = keep_public(found);
            if kept.is_empty() {
                return Err(ConnectError::Refused(AddressRefused {
                    host: name.to_owned(),
                    refused,
                    literal: false,
                }));
            }
            Ok(kept)
        }
    }
}

/// Connects to the first of `addresses` that accepts, in order; the last failure otherwise.
/// Each address gets an equal share of `timeout`, as hyper-util's connector gives it
/// (`ConnectingTcpRemote::new`), so one address that drops packets (an IPv6 route a cluster
/// lacks) does not use up the time of the others.
pub(super) async fn connect_any(
    addresses: &[SocketAddr],
    timeout: Duration,
) -> Result<TcpStream, ConnectError> {
    let share = timeout
        .checked_div(u32::try_from(addresses.len()).unwrap_or(u32::MAX))
        .unwrap_or(timeout);
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address to connect to");
    for addr in addresses {
        match tokio::time::timeout(share, TcpStream::connect(addr)).await {
            Ok(Ok(tcp)) => return Ok(tcp),
            Ok(Err(e)) => last = e,
            Err(_) => {
                last = io::Error::new(io::ErrorKind::TimedOut, format!("connecting to {addr} timed out"))
            }
        }
    }
    Err(last.into())
}
