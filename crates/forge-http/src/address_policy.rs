//! `forgeHosts.refusePrivateAddresses` in the forge clients: a resolver that drops private,
//! loopback and link-local addresses, and the check of IP literals it never sees.
//!
//! The host allowlist judges names; what the operator connects to is the addresses a name
//! resolves to, at the moment it connects. A tenant's own DNS name may point inside the
//! cluster, and a name may resolve differently for the check and for the connection (DNS
//! rebinding). So every forge client built under [`AddressPolicy::RefusePrivate`] resolves
//! names with [`PublicResolver`], judged per address ([`classify`]) on every connection.
//! hyper connects to an IP literal without asking the resolver, so literals are refused before
//! the call ([`check_url`]): by the reconciler's host check and again by the clients.
//!
//! With a proxy, the client connects to the proxy only: the resolver judges the proxy's host,
//! and the proxy resolves the forge's name itself, where this rule cannot see it.

use std::error::Error as StdError;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

pub use forgerunner_core::forge_hosts::addresses::{
    AddressClass, AddressPolicy, REFUSE_PRIVATE_SETTING, classify,
};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::Url;

/// Most refused addresses a message names (a name may resolve to many).
const MAX_NAMED: usize = 3;

/// A host the client would not connect to: every address it resolved to (or the literal it
/// is) falls in a refused class. Names the host, the addresses and their classes; never a
/// URL's path, query or credentials.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct AddressRefused {
    /// The host as the URL names it.
    pub host: String,
    /// The refused addresses (at most [`MAX_NAMED`]) and their classes; the first one's class
    /// is the one reported when a single class is wanted.
    pub refused: Vec<(IpAddr, AddressClass)>,
    /// Whether the host is an IP literal (no resolution took place).
    pub literal: bool,
}

impl AddressRefused {
    /// The class of the first refused address.
    pub fn class(&self) -> Option<AddressClass> {
        self.refused.first().map(|(_, c)| *c)
    }
}

impl fmt::Display for AddressRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let named: Vec<String> = self
            .refused
            .iter()
            .map(|(ip, class)| format!("{ip} ({class})"))
            .collect();
        if self.literal {
            write!(f, "{} is", self.host)?;
        } else {
            write!(f, "{} resolves only to", self.host)?;
        }
        write!(f, " {}, which {REFUSE_PRIVATE_SETTING} refuses", named.join(", "))
    }
}

/// The system resolver (getaddrinfo, as reqwest's default) keeping only the addresses
/// [`AddressPolicy::RefusePrivate`] allows; a name left with none fails with
/// [`AddressRefused`].
#[derive(Clone, Copy, Debug, Default)]
pub struct PublicResolver;

impl Resolve for PublicResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            // Port 0: reqwest puts the URL's port (or the scheme's) in.
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if found.is_empty() {
                return Err(format!("{host} resolves to no address").into());
            }
            let (kept, refused) = keep_public(found);
            if kept.is_empty() {
                return Err(Box::new(AddressRefused {
                    host,
                    refused,
                    literal: false,
                }) as Box<dyn StdError + Send + Sync>);
            }
            if !refused.is_empty() {
                tracing::debug!(%host, dropped = refused.len(), "dropped private addresses of a forge host");
            }
            Ok(Box::new(kept.into_iter()) as Addrs)
        })
    }
}

/// Splits resolved addresses into those the policy allows and (the first [`MAX_NAMED`] of)
/// those it refuses, with their classes.
pub(crate) fn keep_public(found: Vec<SocketAddr>) -> (Vec<SocketAddr>, Vec<(IpAddr, AddressClass)>) {
    let mut kept = Vec::new();
    let mut refused = Vec::new();
    for addr in found {
        match classify(addr.ip()) {
            None => kept.push(addr),
            Some(class) if refused.len() < MAX_NAMED => refused.push((addr.ip(), class)),
            Some(_) => {}
        }
    }
    (kept, refused)
}

/// `builder` resolving names under `policy`: unchanged for [`AddressPolicy::AllowPrivate`].
pub fn with_policy(builder: reqwest::ClientBuilder, policy: AddressPolicy) -> reqwest::ClientBuilder {
    match policy {
        AddressPolicy::AllowPrivate => builder,
        AddressPolicy::RefusePrivate => builder.dns_resolver(PublicResolver),
    }
}

/// Refuses `url` when its host is an IP literal of a class `policy` refuses: the resolver
/// never sees literals. Names pass; [`PublicResolver`] judges them when connecting.
pub fn check_url(policy: AddressPolicy, url: &Url) -> Result<(), AddressRefused> {
    let ip = match url.host() {
        Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip),
        Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip),
        Some(url::Host::Domain(_)) | None => return Ok(()),
    };
    match policy.refuses(ip) {
        None => Ok(()),
        Some(class) => Err(AddressRefused {
            host: url.host_str().unwrap_or_default().to_owned(),
            refused: vec![(ip, class)],
            literal: true,
        }),
    }
}

/// [`check_url`] for a proxy URL as a group writes it; one that does not parse is left to the
/// client builder, which refuses it without echoing it (it may carry credentials).
pub fn check_proxy(policy: AddressPolicy, proxy: Option<&str>) -> Result<(), AddressRefused> {
    match crate::proxy_of(proxy).and_then(|p| Url::parse(p).ok()) {
        Some(url) => check_url(policy, &url),
        None => Ok(()),
    }
}

/// The [`AddressRefused`] somewhere in `e`'s chain of causes: a connection the resolver
/// refused, as reqwest reports it (wrapped in its connect and DNS errors).
pub fn refusal_in<'a>(e: &'a (dyn StdError + 'static)) -> Option<&'a AddressRefused> {
    let mut next = Some(e);
    while let Some(cause) = next {
        if let Some(refused) = cause.downcast_ref::<AddressRefused>() {
            return Some(refused);
        }
        next = cause.source();
    }
    None
}

#[cfg(test)]
#[path = "address_policy_tests.rs"]
mod tests;
