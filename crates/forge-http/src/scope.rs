//! The level a Gitea or Forgejo group's runners live at. Both forges know the same four
//! (instance, organization, the token's user, repository) and the same spec fields name them;
//! the API paths under each differ per forge and stay in the forge crates.
//!
//! Jobs, runners and registration tokens are always read at the *same* scope, so a runner can
//! take exactly the jobs that were counted for it.

use std::fmt;

/// A validated scope with its names.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// The whole instance (admin routes; site-admin token).
    Global,
    /// One organization (all its repositories).
    Org(String),
    /// The token's own user (`/user/actions/…`); the name is checked against the token's login.
    User(String),
    /// One repository.
    Repo {
        /// Owner (user or organization).
        owner: String,
        /// Repository name.
        name: String,
    },
}

/// Which scope a spec asks for, before its names are checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScopeKind {
    /// `scope: global`.
    Global,
    /// `scope: org`.
    Org,
    /// `scope: user`.
    User,
    /// `scope: repo`.
    Repo,
}

/// The scope fields of a spec block, as written.
#[derive(Clone, Copy, Debug)]
pub struct ScopeFields<'a> {
    /// The spec block the fields live in (`spec.gitea`), for messages.
    pub spec: &'static str,
    /// The `scope` field.
    pub kind: ScopeKind,
    /// The `org` field.
    pub org: Option<&'a str>,
    /// The `user` field.
    pub user: Option<&'a str>,
    /// The `repo` field (`owner/name`).
    pub repo: Option<&'a str>,
}

/// Why a spec's scope fields do not describe a scope.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    /// The field the scope needs is missing or empty.
    #[error("scope {scope} needs {spec}.{field}")]
    Missing {
        /// The spec block.
        spec: &'static str,
        /// Scope name.
        scope: &'static str,
        /// Missing field.
        field: &'static str,
    },
    /// `repo` is not `owner/name`.
    #[error("{spec}.repo {repo:?} is not of the form owner/name")]
    BadRepo {
        /// The spec block.
        spec: &'static str,
        /// The field as written.
        repo: String,
    },
}

impl Scope {
    /// Reads the scope from a spec's fields.
    pub fn from_fields(f: ScopeFields<'_>) -> Result<Scope, ScopeError> {
        let missing = |scope, field| ScopeError::Missing {
            spec: f.spec,
            scope,
            field,
        };
        // A name, never a path: a `/` would move the request to another route.
        let required = |value: Option<&str>, scope, field| match value.map(str::trim) {
            Some(v) if !v.is_empty() && !v.contains('/') => Ok(v.to_string()),
            _ => Err(missing(scope, field)),
        };
        match f.kind {
            ScopeKind::Global => Ok(Scope::Global),
            ScopeKind::Org => required(f.org, "org", "org").map(Scope::Org),
            ScopeKind::User => required(f.user, "user", "user").map(Scope::User),
            ScopeKind::Repo => {
                let raw = f.repo.unwrap_or_default();
                if raw.is_empty() {
                    return Err(missing("repo", "repo"));
                }
                match raw.split_once('/') {
                    Some((o, n)) if !o.is_empty() && !n.is_empty() && !n.contains('/') => Ok(Scope::Repo {
                        owner: o.to_string(),
                        name: n.to_string(),
                    }),
                    _ => Err(ScopeError::BadRepo {
                        spec: f.spec,
                        repo: raw.to_string(),
                    }),
                }
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

    /// Where a request went, for messages: the scope, or the instance for requests outside
    /// any scope (version, user).
    pub fn describe(scope: Option<&Scope>) -> String {
        scope.map_or_else(|| "the instance".to_string(), ToString::to_string)
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

    fn parse(
        kind: ScopeKind,
        org: Option<&str>,
        user: Option<&str>,
        repo: Option<&str>,
    ) -> Result<Scope, ScopeError> {
        Scope::from_fields(ScopeFields {
            spec: "spec.gitea",
            kind,
            org,
            user,
            repo,
        })
    }

    #[test]
    fn bad_specs() {
        assert!(parse(ScopeKind::Org, None, None, None).is_err());
        assert!(parse(ScopeKind::User, None, Some(" "), None).is_err());
        for bad in ["o", "o/", "/r", "o/r/x", ""] {
            assert!(parse(ScopeKind::Repo, None, None, Some(bad)).is_err(), "{bad}");
        }
        assert_eq!(
            parse(ScopeKind::Org, Some("a/b"), None, None)
                .expect_err("a path")
                .to_string(),
            "scope org needs spec.gitea.org"
        );
        assert_eq!(
            parse(ScopeKind::Repo, None, None, Some("o"))
                .expect_err("no name")
                .to_string(),
            "spec.gitea.repo \"o\" is not of the form owner/name"
        );
        assert_eq!(
            parse(ScopeKind::Repo, None, None, Some("o/r")),
            Ok(Scope::Repo {
                owner: "o".into(),
                name: "r".into()
            })
        );
        assert_eq!(
            parse(ScopeKind::User, None, Some(" bob "), None),
            Ok(Scope::User("bob".into()))
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
        assert_eq!(Scope::describe(Some(&r)), "repository a/x");
        assert_eq!(Scope::describe(None), "the instance");
    }
}
