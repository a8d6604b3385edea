//! The operator's optional allowlist of forge hosts (config key [`FORGE_HOSTS_SETTING`]) and
//! its optional refusal of private addresses ([`addresses`]).
//!
//! A `RunnerGroup` author chooses the forge URL (and proxy) the operator connects to, with the
//! credentials of that group. With an allowlist, a group whose URLs leave it is refused before
//! any request: the operator cannot be pointed at an internal service or an unknown host. With
//! `forgeHosts.refusePrivateAddresses`, a URL naming a private, loopback or link-local IP
//! literal is refused here too; names are judged by the forge clients once resolved.

pub mod addresses;

use std::fmt;

use crate::forge::OutboundUrl;
use crate::forge_hosts::addresses::{AddressClass, AddressPolicy, REFUSE_PRIVATE_SETTING};

/// The operator config key holding the allowlist (also the chart value's name).
pub const FORGE_HOSTS_SETTING: &str = "forgeHosts.allowed";

/// One allowed host: exact (`github.com`) or every subdomain of a domain (`*.example.com`).
#[derive(Clone, Debug, PartialEq, Eq)]
enum HostPattern {
    Exact(String),
    /// The suffix with its leading dot (`.example.com`).
    Subdomains(String),
}

/// Hosts the operator may connect to for forge calls (empty allows any host), and whether
/// private addresses are refused.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ForgeHostAllowlist {
    patterns: Vec<HostPattern>,
    addresses: AddressPolicy,
}

/// Why an allowlist entry is not a host pattern.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("'{pattern}' is not a host name or *.domain pattern ({reason})")]
pub struct HostPatternError {
    /// The entry as given.
    pub pattern: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Which rule refused a host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The host is not in `forgeHosts.allowed`.
    NotAllowed {
        /// The allowlist, as configured.
        allowed: String,
    },
    /// The host is an IP literal of a class `forgeHosts.refusePrivateAddresses` refuses.
    PrivateAddress(AddressClass),
}

/// A group URL whose host the operator refuses to connect to.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct HostRefused {
    /// The refused host (or the URL, when it has no host).
    pub host: String,
    /// The spec field the URL comes from.
    pub field: &'static str,
    /// Which rule refused it.
    pub reason: Refusal,
}

impl fmt::Display for HostRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let HostRefused { host, field, reason } = self;
        match reason {
            Refusal::NotAllowed { allowed } => write!(
                f,
                "host {host} ({field}) is not in the operator's {FORGE_HOSTS_SETTING} ({allowed}); add \
                 it to the operator's configuration or point the group at an allowed host"
            ),
            Refusal::PrivateAddress(class) => write!(
                f,
                "host {host} ({field}) is a {class} address, which the operator's \
                 {REFUSE_PRIVATE_SETTING} refuses; point the group at the forge's public address"
            ),
        }
    }
}

fn is_host_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A host as compared: lowercase, without a trailing dot.
fn normalized(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

impl HostPattern {
    fn parse(raw: &str) -> Result<HostPattern, HostPatternError> {
        let err = |reason| HostPatternError {
            pattern: raw.to_owned(),
            reason,
        };
        let text = normalized(raw.trim());
        if text.contains("://") || text.contains(['/', ':', '@']) {
            return Err(err("give the host only, without scheme, port or path"));
        }
        let (wildcard, domain) = match text.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, text.as_str()),
        };
        // An IPv6 literal cannot be written without ':' (refused above); IPv4 passes as labels.
        if domain.is_empty() || !domain.split('.').all(is_host_label) {
            return Err(err(
                "only letters, digits, '-' and '.', with '*.' allowed in front",
            ));
        }
        Ok(if wildcard {
            HostPattern::Subdomains(format!(".{domain}"))
        } else {
            HostPattern::Exact(domain.to_owned())
        })
    }

    fn matches(&self, host: &str) -> bool {
        match self {
            HostPattern::Exact(h) => host == h,
            HostPattern::Subdomains(suffix) => host.len() > suffix.len() && host.ends_with(suffix.as_str()),
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Exact(h) => f.write_str(h),
            HostPattern::Subdomains(suffix) => write!(f, "*{suffix}"),
        }
    }
}

/// The host of a URL as the forge clients' HTTP stack parses it (the `url` crate, WHATWG
/// rules: `\` ends the authority, userinfo is dropped, IDNA applied), lowercase, without a
/// trailing dot; IPv6 literals keep their brackets. `None` when the URL has no host.
pub fn url_host(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url.trim()).ok()?;
    let host = normalized(parsed.host_str()?);
    (!host.is_empty()).then_some(host)
}

impl ForgeHostAllowlist {
    /// The allowlist of `patterns` (`github.com`, `*.example.com`); none allows every host.
    /// Private addresses are allowed until [`ForgeHostAllowlist::with_addresses`] says not.
    pub fn parse<S: AsRef<str>>(patterns: &[S]) -> Result<ForgeHostAllowlist, HostPatternError> {
        let mut out: Vec<HostPattern> = Vec::new();
        for p in patterns {
            let pattern = HostPattern::parse(p.as_ref())?;
            if !out.contains(&pattern) {
                out.push(pattern);
            }
        }
        Ok(ForgeHostAllowlist {
            patterns: out,
            addresses: AddressPolicy::default(),
        })
    }

    /// The same list under the address policy `addresses`.
    pub fn with_addresses(mut self, addresses: AddressPolicy) -> ForgeHostAllowlist {
        self.addresses = addresses;
        self
    }

    /// The address policy the forge clients resolve names under.
    pub fn addresses(&self) -> AddressPolicy {
        self.addresses
    }

    /// An entry the address policy would refuse anyway (an IPv4 literal such as `10.0.0.5`),
    /// with its class: a configuration that allows and refuses the same host.
    pub fn refused_entry(&self) -> Option<(&str, AddressClass)> {
        self.patterns.iter().find_map(|p| match p {
            HostPattern::Exact(h) => self.addresses.refuses_literal(h).map(|c| (h.as_str(), c)),
            HostPattern::Subdomains(_) => None,
        })
    }

    /// Whether every host is allowed (no allowlist configured).
    pub fn allows_any(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Whether `host` is allowed.
    pub fn allows(&self, host: &str) -> bool {
        self.allows_any() || {
            let host = normalized(host);
            self.patterns.iter().any(|p| p.matches(&host))
        }
    }

    /// Checks the URLs a group makes the operator connect to. With an allowlist, a forge that
    /// names no URL is refused too: the operator could not tell where it would connect. Under
    /// [`AddressPolicy::RefusePrivate`], IP literals of a refused class are refused: the forge
    /// clients' resolver never sees a literal.
    pub fn check(&self, urls: &[OutboundUrl]) -> Result<(), HostRefused> {
        if self.allows_any() && self.addresses == AddressPolicy::AllowPrivate {
            return Ok(());
        }
        let not_allowed = |host: String, field| HostRefused {
            host,
            field,
            reason: Refusal::NotAllowed {
                allowed: self.to_string(),
            },
        };
        if urls.is_empty() && !self.allows_any() {
            return Err(not_allowed("<unknown>".to_owned(), "the forge names no URL"));
        }
        for u in urls {
            let host = match url_host(&u.url) {
                Some(host) => host,
                None if self.allows_any() => continue,
                None => return Err(not_allowed(u.url.clone(), u.field)),
            };
            if !self.allows(&host) {
                return Err(not_allowed(host, u.field));
            }
            if let Some(class) = self.addresses.refuses_literal(&host) {
                return Err(HostRefused {
                    host,
                    field: u.field,
                    reason: Refusal::PrivateAddress(class),
                });
            }
        }
        Ok(())
    }
}

impl fmt::Display for ForgeHostAllowlist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.patterns.is_empty() {
            return f.write_str("any host");
        }
        let list: Vec<String> = self.patterns.iter().map(ToString::to_string).collect();
        f.write_str(&list.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(p: &[&str]) -> ForgeHostAllowlist {
        ForgeHostAllowlist::parse(p).expect("patterns")
    }

    fn url(field: &'static str, url: &str) -> OutboundUrl {
        OutboundUrl {
            field,
            url: url.to_owned(),
        }
    }

    #[test]
    fn hosts_of_urls() {
        for (u, host) in [
            ("https://github.com/org", Some("github.com")),
            ("https://GitHub.COM./org", Some("github.com")),
            ("http://gitea.local:3000", Some("gitea.local")),
            ("https://user:pw@evil.example/x", Some("evil.example")),
            ("https://ok.example@evil.example/", Some("evil.example")),
            ("http://[::1]:8080/", Some("[::1]")),
            ("http://127.0.0.1:3000/api", Some("127.0.0.1")),
            ("https://h.example?x=a@b", Some("h.example")),
            ("https://evil.example\\@ok.example/", Some("evil.example")),
            ("https://bücher.example/", Some("xn--bcher-kva.example")),
            ("https://", None),
        ] {
            assert_eq!(url_host(u).as_deref(), host, "{u}");
        }
    }

    #[test]
    fn exact_and_wildcard_patterns() {
        let l = list(&["github.com", "*.example.com"]);
        assert!(l.allows("github.com"));
        assert!(l.allows("GITHUB.com."));
        assert!(!l.allows("api.github.com"));
        assert!(!l.allows("evilgithub.com"));
        assert!(l.allows("gitea.example.com"));
        assert!(l.allows("a.b.example.com"));
        assert!(!l.allows("example.com"), "the wildcard covers subdomains only");
        assert!(!l.allows("badexample.com"));
        assert_eq!(l.to_string(), "github.com, *.example.com");
    }

    #[test]
    fn empty_allows_any() {
        let l = list(&[]);
        assert!(l.allows_any());
        assert!(l.allows("anything.internal"));
        assert_eq!(l.check(&[]), Ok(()));
    }

    #[test]
    fn bad_patterns_are_refused() {
        for bad in [
            "https://github.com",
            "github.com:443",
            "github.com/org",
            "*",
            "*.",
            "a.*.com",
            "",
            "user@host",
        ] {
            assert!(ForgeHostAllowlist::parse(&[bad]).is_err(), "{bad:?}");
        }
        assert!(ForgeHostAllowlist::parse(&[" Gitea.Example.com "]).is_ok());
    }

    #[test]
    fn check_names_the_field_host_and_setting() {
        let l = list(&["*.example.com"]);
        let ok = [
            url("spec.gitea.url", "https://gitea.example.com"),
            url("spec.gitea.proxyUrl", "http://proxy.example.com:3128"),
        ];
        assert_eq!(l.check(&ok), Ok(()));
        let bad = [
            url("spec.gitea.url", "https://gitea.example.com"),
            url("spec.gitea.proxyUrl", "http://10.0.0.1:3128"),
        ];
        let e = l.check(&bad).expect_err("refused");
        assert_eq!((e.host.as_str(), e.field), ("10.0.0.1", "spec.gitea.proxyUrl"));
        let text = e.to_string();
        assert!(text.contains("forgeHosts.allowed"), "{text}");
        assert!(text.contains("*.example.com"), "{text}");
        // A forge that does not say where it connects is refused under an allowlist.
        assert!(l.check(&[]).is_err());
    }

    #[test]
    fn private_literals_are_refused_only_when_set() {
        let refuse = list(&[]).with_addresses(AddressPolicy::RefusePrivate);
        for (u, host, class) in [
            ("http://127.0.0.1:3000", "127.0.0.1", AddressClass::Loopback),
            ("http://[::1]:3000/", "[::1]", AddressClass::Loopback),
            (
                "http://169.254.169.254/",
                "169.254.169.254",
                AddressClass::LinkLocal,
            ),
            (
                "https://[::ffff:10.0.0.1]/",
                "[::ffff:a00:1]",
                AddressClass::Private,
            ),
            (
                "http://100.64.0.1",
                "100.64.0.1",
                AddressClass::SharedAddressSpace,
            ),
            // WHATWG URL parsing reads these as 127.0.0.1, as the HTTP client does.
            ("http://2130706433/", "127.0.0.1", AddressClass::Loopback),
            ("http://0x7f.1/", "127.0.0.1", AddressClass::Loopback),
        ] {
            let e = refuse.check(&[url("spec.gitea.url", u)]).expect_err(u);
            assert_eq!(
                (e.host.as_str(), e.field, &e.reason),
                (host, "spec.gitea.url", &Refusal::PrivateAddress(class)),
                "{u}"
            );
            let text = e.to_string();
            assert!(text.contains("forgeHosts.refusePrivateAddresses"), "{text}");
            assert!(text.contains(class.as_str()), "{text}");
            assert_eq!(list(&[]).check(&[url("spec.gitea.url", u)]), Ok(()), "off: {u}");
        }
        // The proxy is what the operator connects to when one is set.
        let e = refuse
            .check(&[
                url("spec.gitea.url", "https://gitea.example.com"),
                url("spec.gitea.proxyUrl", "http://10.0.0.1:3128"),
            ])
            .expect_err("a private proxy");
        assert_eq!(e.field, "spec.gitea.proxyUrl");
        // Names and public literals pass here; names are judged once resolved.
        for ok in [
            "https://gitea.internal",
            "https://140.82.121.4",
            "http://localhost:3000",
        ] {
            assert_eq!(refuse.check(&[url("spec.gitea.url", ok)]), Ok(()), "{ok}");
        }
        // Both rules: the allowlist speaks first, and a refused literal is refused even if listed.
        let both = list(&["10.0.0.5", "*.example.com"]).with_addresses(AddressPolicy::RefusePrivate);
        let e = both
            .check(&[url("spec.gitea.url", "http://10.0.0.5")])
            .expect_err("listed yet private");
        assert_eq!(e.reason, Refusal::PrivateAddress(AddressClass::Private));
        assert_eq!(both.refused_entry(), Some(("10.0.0.5", AddressClass::Private)));
        assert_eq!(
            list(&["10.0.0.5"]).refused_entry(),
            None,
            "off: nothing is refused"
        );
        assert!(matches!(
            both.check(&[url("spec.gitea.url", "http://127.0.0.1")]),
            Err(HostRefused {
                reason: Refusal::NotAllowed { .. },
                ..
            })
        ));
    }
}
