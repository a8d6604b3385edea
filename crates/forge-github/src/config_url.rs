//! Parsing of `spec.github.configUrl`: the scope (org, repo or enterprise) and the REST base.

use url::Url;

/// Where runners register: an organization, a repository or an enterprise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// `https://github.com/<org>`.
    Organization(String),
    /// `https://github.com/<owner>/<repo>`.
    Repository {
        /// Owner (user or org).
        owner: String,
        /// Repository name.
        repo: String,
    },
    /// `https://github.com/enterprises/<enterprise>`.
    Enterprise(String),
}

/// A parsed config URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigUrl {
    /// The URL as the user gave it (trailing `/` trimmed); sent to `runner-registration`.
    pub raw: String,
    /// What the URL points at.
    pub scope: Scope,
    /// GitHub REST API base, always ending in `/` (hosted: `https://api.<host>/`, GHES: `<host>/api/v3/`).
    pub rest_base: Url,
    /// Whether the host is github.com or GHE.com (not GHES).
    pub hosted: bool,
}

/// Why a config URL was rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigUrlError {
    /// Not a URL at all.
    #[error("configUrl is not a valid URL: {0}")]
    Invalid(String),
    /// A URL, but neither org, repo nor enterprise.
    #[error("invalid config URL {0:?}, should point to an enterprise, org, or repository")]
    WrongShape(String),
}

impl ConfigUrl {
    /// Parses a config URL as ARC does.
    pub fn parse(input: &str) -> Result<ConfigUrl, ConfigUrlError> {
        let raw = input.trim().trim_end_matches('/').to_string();
        let url = Url::parse(&raw).map_err(|e| ConfigUrlError::Invalid(e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ConfigUrlError::Invalid(format!(
                "unsupported scheme {}",
                url.scheme()
            )));
        }
        let host = url
            .host_str()
            .ok_or_else(|| ConfigUrlError::Invalid("missing host".into()))?
            .to_ascii_lowercase();
        let segments: Vec<&str> = url
            .path()
            .trim_matches('/')
            .split('/')
            .filter(|s| !s.is_empty())
            .collect();
        let scope = match segments.as_slice() {
            [org] => Scope::Organization((*org).to_string()),
            [first, ent] if first.eq_ignore_ascii_case("enterprises") => {
                Scope::Enterprise((*ent).to_string())
            }
            [owner, repo] => Scope::Repository {
                owner: (*owner).to_string(),
                repo: (*repo).to_string(),
            },
            _ => return Err(ConfigUrlError::WrongShape(raw)),
        };
        let hosted = is_hosted(&host) && std::env::var_os("GITHUB_ACTIONS_FORCE_GHES").is_none();
        let mut origin = format!("{}://", url.scheme());
        if hosted {
            let api_host = if host == "www.github.com" {
                "github.com"
            } else {
                host.as_str()
            };
            origin.push_str("api.");
            origin.push_str(api_host);
        } else {
            origin.push_str(&host);
        }
        if let Some(port) = url.port() {
            origin.push_str(&format!(":{port}"));
        }
        let rest = if hosted {
            format!("{origin}/")
        } else {
            format!("{origin}/api/v3/")
        };
        let rest_base = Url::parse(&rest).map_err(|e| ConfigUrlError::Invalid(e.to_string()))?;
        Ok(ConfigUrl {
            raw,
            scope,
            rest_base,
            hosted,
        })
    }

    /// REST path (relative to [`ConfigUrl::rest_base`]) that mints a runner registration token.
    pub fn registration_token_path(&self) -> String {
        match &self.scope {
            Scope::Organization(org) => format!("orgs/{org}/actions/runners/registration-token"),
            Scope::Repository { owner, repo } => {
                format!("repos/{owner}/{repo}/actions/runners/registration-token")
            }
            Scope::Enterprise(ent) => format!("enterprises/{ent}/actions/runners/registration-token"),
        }
    }

    /// REST path (relative to [`ConfigUrl::rest_base`]) that lists the runner packages GitHub
    /// serves the scope's runners now ("List runner applications for a repository / an
    /// organization / an enterprise", REST docs, self-hosted runners).
    pub fn runner_downloads_path(&self) -> String {
        match &self.scope {
            Scope::Organization(org) => format!("orgs/{org}/actions/runners/downloads"),
            Scope::Repository { owner, repo } => format!("repos/{owner}/{repo}/actions/runners/downloads"),
            Scope::Enterprise(ent) => format!("enterprises/{ent}/actions/runners/downloads"),
        }
    }
}

fn is_hosted(host: &str) -> bool {
    matches!(host, "github.com" | "www.github.com" | "github.localhost") || host.ends_with(".ghe.com")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn organization_on_github_com() {
        let c = ConfigUrl::parse("https://github.com/my-org/").unwrap();
        assert_eq!(c.scope, Scope::Organization("my-org".into()));
        assert_eq!(c.rest_base.as_str(), "https://api.github.com/");
        assert!(c.hosted);
        assert_eq!(c.raw, "https://github.com/my-org");
        assert_eq!(
            c.registration_token_path(),
            "orgs/my-org/actions/runners/registration-token"
        );
        assert_eq!(c.runner_downloads_path(), "orgs/my-org/actions/runners/downloads");
    }

    #[test]
    fn repository_and_www() {
        let c = ConfigUrl::parse("https://www.github.com/o/r").unwrap();
        assert_eq!(
            c.scope,
            Scope::Repository {
                owner: "o".into(),
                repo: "r".into()
            }
        );
        assert_eq!(c.rest_base.as_str(), "https://api.github.com/");
        assert_eq!(
            c.registration_token_path(),
            "repos/o/r/actions/runners/registration-token"
        );
        assert_eq!(c.runner_downloads_path(), "repos/o/r/actions/runners/downloads");
    }

    #[test]
    fn enterprise_case_insensitive() {
        let c = ConfigUrl::parse("https://github.com/Enterprises/acme").unwrap();
        assert_eq!(c.scope, Scope::Enterprise("acme".into()));
        assert_eq!(
            c.registration_token_path(),
            "enterprises/acme/actions/runners/registration-token"
        );
        assert_eq!(
            c.runner_downloads_path(),
            "enterprises/acme/actions/runners/downloads"
        );
    }

    #[test]
    fn ghe_com_is_hosted() {
        let c = ConfigUrl::parse("https://tenant.ghe.com/org").unwrap();
        assert!(c.hosted);
        assert_eq!(c.rest_base.as_str(), "https://api.tenant.ghe.com/");
    }

    #[test]
    fn ghes_uses_api_v3_and_keeps_port() {
        let c = ConfigUrl::parse("http://127.0.0.1:8443/org").unwrap();
        assert!(!c.hosted);
        assert_eq!(c.rest_base.as_str(), "http://127.0.0.1:8443/api/v3/");
        let c = ConfigUrl::parse("https://ghes.example.com/o/r").unwrap();
        assert_eq!(c.rest_base.as_str(), "https://ghes.example.com/api/v3/");
    }

    #[test]
    fn rejects_wrong_shapes() {
        assert!(matches!(
            ConfigUrl::parse("https://github.com"),
            Err(ConfigUrlError::WrongShape(_))
        ));
        assert!(matches!(
            ConfigUrl::parse("https://github.com/a/b/c"),
            Err(ConfigUrlError::WrongShape(_))
        ));
        assert!(matches!(
            ConfigUrl::parse("not a url"),
            Err(ConfigUrlError::Invalid(_))
        ));
        assert!(matches!(
            ConfigUrl::parse("ftp://github.com/a"),
            Err(ConfigUrlError::Invalid(_))
        ));
        assert!(matches!(ConfigUrl::parse(""), Err(ConfigUrlError::Invalid(_))));
    }
}
