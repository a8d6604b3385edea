//! The operator's optional allowlist of forge hosts (config key [`FORGE_HOSTS_SETTING`]).
//!
//! A `RunnerGroup` author chooses the forge URL (and proxy) the operator connects to, with the
//! credentials of that group. With an allowlist, a group whose URLs leave it is refused before
//! any request: the operator cannot be pointed at an internal service or an unknown host.

use std::fmt;

use crate::forge::OutboundUrl;

/// The operator config key holding the allowlist (also the chart value's name).
pub const FORGE_HOSTS_SETTING: &str = "forgeHosts.allowed";

/// One allowed host: exact (`github.com`) or every subdomain of a domain (`*.example.com`).
#[derive(Clone, Debug, PartialEq, Eq)]
enum HostPattern {
    Exact(String),
    /// The suffix with its leading dot (`.example.com`).
    Subdomains(String),
}

/// Hosts the operator may connect to for forge calls; empty allows any host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ForgeHostAllowlist {
    patterns: Vec<HostPattern>,
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

/// A group URL whose host the allowlist refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "host {host} ({field}) is not in the operator's {FORGE_HOSTS_SETTING} ({allowed}); add it to \
     the operator's configuration or point the group at an allowed host"
)]
pub struct HostRefused {
    /// The refused host (or the URL, when it has no host).
    pub host: String,
    /// The spec field the URL comes from.
    pub field: &'static str,
    /// The allowlist, as configured.
    pub allowed: String,
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
    pub fn parse<S: AsRef<str>>(patterns: &[S]) -> Result<ForgeHostAllowlist, HostPatternError> {
        let mut out: Vec<HostPattern> = Vec::new();
        for p in patterns {
            let pattern = HostPattern::parse(p.as_ref())?;
            if !out.contains(&pattern) {
                out.push(pattern);
            }
        }
        Ok(ForgeHostAllowlist { patterns: out })
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
    /// names no URL is refused too: the operator could not tell where it would connect.
    pub fn check(&self, urls: &[OutboundUrl]) -> Result<(), HostRefused> {
        if self.allows_any() {
            return Ok(());
        }
        let refused = |host: String, field| HostRefused {
            host,
            field,
            allowed: self.to_string(),
        };
        if urls.is_empty() {
            return Err(refused("<unknown>".to_owned(), "the forge names no URL"));
        }
        for u in urls {
            match url_host(&u.url) {
                Some(host) if self.allows(&host) => {}
                Some(host) => return Err(refused(host, u.field)),
                None => return Err(refused(u.url.clone(), u.field)),
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
}
