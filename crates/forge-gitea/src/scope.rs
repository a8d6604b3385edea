//! The level a group's runners live at, and the API paths that belong to it.
//!
//! Jobs, runners and registration tokens are always read at the *same* scope, so a runner can
//! take exactly the jobs that were counted for it.

use std::fmt;

use forgerunner_core::crd::{GiteaScope, GiteaSpec};

/// A validated scope with its names.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// The whole instance (`/admin/actions/...`; site-admin token).
    Global,
    /// One organization.
    Org(String),
    /// The token's user (`/user/actions/...`); the name is checked against the token's login.
    User(String),
    /// One repository.
    Repo {
        /// Owner (user or organization).
        owner: String,
        /// Repository name.
        name: String,
    },
}

/// The right an operation needs at a scope (what a 403 means).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Reading jobs: read access from Gitea 1.26, owner rights in 1.25.
    Read,
    /// Reading runners: owner rights in every version, although it only reads.
    OwnerRead,
    /// Creating registration tokens and deleting runners: owner rights.
    Write,
}

/// Why a spec's scope fields do not describe a scope.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    /// The field the scope needs is missing or empty.
    #[error("scope {scope} needs spec.gitea.{field}")]
    Missing {
        /// Scope name.
        scope: &'static str,
        /// Missing field.
        field: &'static str,
    },
    /// `repo` is not `owner/name`.
    #[error("spec.gitea.repo {0:?} is not of the form owner/name")]
    BadRepo(String),
}

fn required(value: &Option<String>, scope: &'static str, field: &'static str) -> Result<String, ScopeError> {
    match value.as_deref().map(str::trim) {
        Some(v) if !v.is_empty() && !v.contains('/') => Ok(v.to_string()),
        _ => Err(ScopeError::Missing { scope, field }),
    }
}

impl Scope {
    /// Reads the scope from the spec.
    pub fn from_spec(spec: &GiteaSpec) -> Result<Scope, ScopeError> {
        match spec.scope {
            GiteaScope::Global => Ok(Scope::Global),
            GiteaScope::Org => required(&spec.org, "org", "org").map(Scope::Org),
            GiteaScope::User => required(&spec.user, "user", "user").map(Scope::User),
            GiteaScope::Repo => {
                let raw = spec.repo.as_deref().unwrap_or_default();
                if raw.is_empty() {
                    return Err(ScopeError::Missing {
                        scope: "repo",
                        field: "repo",
                    });
                }
                match raw.split_once('/') {
                    Some((o, n)) if !o.is_empty() && !n.is_empty() && !n.contains('/') => Ok(Scope::Repo {
                        owner: o.to_string(),
                        name: n.to_string(),
                    }),
                    _ => Err(ScopeError::BadRepo(raw.to_string())),
                }
            }
        }
    }

    /// Path segments (below `/api/v1`) of the `actions` folder of this scope.
    fn actions_base(&self) -> Vec<&str> {
        match self {
            Scope::Global => vec!["admin", "actions"],
            Scope::Org(org) => vec!["orgs", org, "actions"],
            Scope::User(_) => vec!["user", "actions"],
            Scope::Repo { owner, name } => vec!["repos", owner, name, "actions"],
        }
    }

    /// Segments of the jobs list.
    pub fn jobs_path(&self) -> Vec<&str> {
        let mut p = self.actions_base();
        p.push("jobs");
        p
    }

    /// Segments of the runners list.
    pub fn runners_path(&self) -> Vec<&str> {
        let mut p = self.actions_base();
        p.push("runners");
        p
    }

    /// Segments of the registration-token route (POST, Gitea 1.24+).
    pub fn registration_token_path(&self) -> Vec<&str> {
        let mut p = self.runners_path();
        p.push("registration-token");
        p
    }

    /// The token rights an operation at this scope needs, for 403 messages.
    ///
    /// Gitea 1.26 (`routers/api/v1/api.go` `addActionsRoutes`) checks job listings with the
    /// reader check (`reqRepoReader(unit.TypeActions)`, `reqOrgMembership()`) and everything
    /// under `/runners`, listing included, with the owner check (`reqOwner()`,
    /// `reqOrgOwnership()`); 1.25 has one check, the owner one, for both. The user routes check
    /// no more than the token's scope.
    pub fn rights_hint(&self, access: Access) -> &'static str {
        match (self, access) {
            (Scope::Global, Access::Read | Access::OwnerRead) => {
                "a site-admin token with the read:admin scope"
            }
            (Scope::Global, Access::Write) => "a site-admin token with the write:admin scope",
            (Scope::Org(_), Access::Read) => {
                "the read:organization scope and membership (Gitea 1.25: ownership) of the organization"
            }
            (Scope::Org(_), Access::OwnerRead) => {
                "the read:organization scope and ownership of the organization (membership is not \
                 enough to list runners)"
            }
            (Scope::Org(_), Access::Write) => {
                "the write:organization scope and ownership of the organization"
            }
            (Scope::User(_), Access::Read | Access::OwnerRead) => "the read:user scope",
            (Scope::User(_), Access::Write) => "the write:user scope",
            (Scope::Repo { .. }, Access::Read) => {
                "the read:repository scope and read access to the repository's Actions (Gitea \
                 1.25: ownership of the repository)"
            }
            (Scope::Repo { .. }, Access::OwnerRead) => {
                "the read:repository scope and ownership of the repository (or a site admin); read \
                 access is not enough to list runners"
            }
            (Scope::Repo { .. }, Access::Write) => {
                "the write:repository scope and ownership of the repository (or a site admin)"
            }
        }
    }

    /// Whether a repository (`owner/name`) belongs to this scope.
    pub fn contains_repo(&self, owner: &str, repo: &str) -> bool {
        match self {
            Scope::Global => true,
            Scope::Org(o) | Scope::User(o) => o == owner,
            Scope::Repo { owner: o, name } => o == owner && name == repo,
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Global => f.write_str("the instance"),
            Scope::Org(o) => write!(f, "organization {o}"),
            Scope::User(u) => write!(f, "user {u}"),
            Scope::Repo { owner, name } => write!(f, "repository {owner}/{name}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(scope: GiteaScope, org: Option<&str>, user: Option<&str>, repo: Option<&str>) -> GiteaSpec {
        GiteaSpec {
            url: "https://g".into(),
            scope,
            org: org.map(Into::into),
            user: user.map(Into::into),
            repo: repo.map(Into::into),
            credentials: "c".into(),
            labels: vec!["x".into()],
            poll_interval_seconds: None,
            webhook_secret: None,
            ca_bundle_config_map: None,
            proxy_url: None,
        }
    }

    #[test]
    fn paths_per_scope() {
        let r = Scope::from_spec(&spec(GiteaScope::Repo, None, None, Some("o/r"))).unwrap();
        assert_eq!(r.jobs_path(), ["repos", "o", "r", "actions", "jobs"]);
        assert_eq!(
            r.registration_token_path(),
            ["repos", "o", "r", "actions", "runners", "registration-token"]
        );
        let g = Scope::from_spec(&spec(GiteaScope::Global, None, None, None)).unwrap();
        assert_eq!(g.runners_path(), ["admin", "actions", "runners"]);
        let o = Scope::from_spec(&spec(GiteaScope::Org, Some("acme"), None, None)).unwrap();
        assert_eq!(o.jobs_path(), ["orgs", "acme", "actions", "jobs"]);
        let u = Scope::from_spec(&spec(GiteaScope::User, None, Some("bob"), None)).unwrap();
        assert_eq!(u.jobs_path(), ["user", "actions", "jobs"]);
    }

    #[test]
    fn bad_specs() {
        assert!(Scope::from_spec(&spec(GiteaScope::Org, None, None, None)).is_err());
        assert!(Scope::from_spec(&spec(GiteaScope::User, None, Some(" "), None)).is_err());
        for bad in ["o", "o/", "/r", "o/r/x", ""] {
            assert!(
                Scope::from_spec(&spec(GiteaScope::Repo, None, None, Some(bad))).is_err(),
                "{bad}"
            );
        }
    }

    /// Runner listings need owner rights although they only read (`addActionsRoutes` in
    /// `routers/api/v1/api.go`, 1.25 and 1.26: `reqOwnerCheck`/`reqChecker` on `GET
    /// …/runners`); job listings need read access from 1.26.
    #[test]
    fn hints_name_the_right_each_access_needs() {
        let repo = Scope::Repo {
            owner: "a".into(),
            name: "x".into(),
        };
        assert!(
            repo.rights_hint(Access::OwnerRead)
                .contains("ownership of the repository")
        );
        assert!(repo.rights_hint(Access::Read).contains("read access"));
        assert!(repo.rights_hint(Access::Read).contains("1.25: ownership"));
        let org = Scope::Org("a".into());
        assert!(
            org.rights_hint(Access::OwnerRead)
                .contains("ownership of the organization")
        );
        assert!(org.rights_hint(Access::Read).contains("membership"));
        assert!(org.rights_hint(Access::Write).contains("write:organization"));
        assert!(
            Scope::Global
                .rights_hint(Access::OwnerRead)
                .contains("read:admin")
        );
        assert!(
            Scope::User("u".into())
                .rights_hint(Access::OwnerRead)
                .contains("read:user")
        );
    }

    #[test]
    fn repo_membership() {
        assert!(Scope::Org("a".into()).contains_repo("a", "x"));
        assert!(!Scope::Org("a".into()).contains_repo("A", "x"));
        let r = Scope::Repo {
            owner: "a".into(),
            name: "x".into(),
        };
        assert!(r.contains_repo("a", "x") && !r.contains_repo("a", "y"));
    }
}
