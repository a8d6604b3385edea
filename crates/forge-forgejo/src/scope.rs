//! The level a group's runners live at, and the API paths that belong to it (reference §1–3).
//!
//! Jobs, runners and registration tokens are always read at the *same* scope, so a runner can
//! take exactly the jobs that were counted for it.

use std::fmt;

use forgerunner_core::crd::{ForgejoScope, ForgejoSpec};

use crate::version::ForgejoVersion;

/// A validated scope with its names.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// The whole instance (admin routes; site-admin token).
    Global,
    /// One organization (all its repositories).
    Org(String),
    /// The token's own user (`/user/actions/…`, all its repositories).
    User(String),
    /// One repository.
    Repo {
        /// Owner (user or organization).
        owner: String,
        /// Repository name.
        name: String,
    },
}

/// Why a spec's scope fields do not describe a scope.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    /// The field the scope needs is missing or empty.
    #[error("scope {scope} needs spec.forgejo.{field}")]
    Missing {
        /// Scope name.
        scope: &'static str,
        /// Missing field.
        field: &'static str,
    },
    /// `repo` is not `owner/name`.
    #[error("spec.forgejo.repo {0:?} is not of the form owner/name")]
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
    pub fn from_spec(spec: &ForgejoSpec) -> Result<Scope, ScopeError> {
        match spec.scope {
            ForgejoScope::Global => Ok(Scope::Global),
            ForgejoScope::Org => required(&spec.org, "org", "org").map(Scope::Org),
            ForgejoScope::User => required(&spec.user, "user", "user").map(Scope::User),
            ForgejoScope::Repo => {
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

    /// Segments (below `/api/v1`) of the scope's `…/actions/runners` folder. The instance's
    /// folder moved to `/admin/actions/runners` in v15; `/admin/runners` is the older one.
    pub fn runners_path(&self, v: ForgejoVersion) -> Vec<&str> {
        match self {
            Scope::Global if v.admin_actions_paths() => vec!["admin", "actions", "runners"],
            Scope::Global => vec!["admin", "runners"],
            Scope::Org(org) => vec!["orgs", org, "actions", "runners"],
            Scope::User(_) => vec!["user", "actions", "runners"],
            Scope::Repo { owner, name } => vec!["repos", owner, name, "actions", "runners"],
        }
    }

    /// Segments of the waiting-job list (v11+).
    pub fn jobs_path(&self, v: ForgejoVersion) -> Vec<&str> {
        let mut p = self.runners_path(v);
        p.push("jobs");
        p
    }

    /// Segments of the registration-token route (`GET`; the admin one is `/admin/runners/…`
    /// in every version, so the older path is used for the instance).
    pub fn registration_token_path(&self) -> Vec<&str> {
        let mut p = match self {
            Scope::Global => vec!["admin", "runners"],
            _ => self.runners_path(ForgejoVersion {
                major: 11,
                minor: 0,
                patch: 0,
            }),
        };
        p.push("registration-token");
        p
    }

    /// The token rights an operation at this scope needs, for 403 messages.
    pub fn rights_hint(&self, write: bool) -> &'static str {
        match (self, write) {
            (Scope::Global, false) => "a site-admin token with the read:admin scope",
            (Scope::Global, true) => "a site-admin token with the write:admin scope",
            (Scope::Org(_), false) => "the read:organization scope and ownership of the organization",
            (Scope::Org(_), true) => "the write:organization scope and ownership of the organization",
            (Scope::User(_), false) => "the read:user scope",
            (Scope::User(_), true) => "the write:user scope",
            (Scope::Repo { .. }, false) => "the read:repository scope and ownership of the repository",
            (Scope::Repo { .. }, true) => "the write:repository scope and ownership of the repository",
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

    const V14: ForgejoVersion = ForgejoVersion {
        major: 14,
        minor: 0,
        patch: 0,
    };
    const V15: ForgejoVersion = ForgejoVersion {
        major: 15,
        minor: 0,
        patch: 0,
    };

    #[test]
    fn paths_per_scope_and_version() {
        assert_eq!(
            Scope::Global.jobs_path(V15),
            ["admin", "actions", "runners", "jobs"]
        );
        assert_eq!(Scope::Global.jobs_path(V14), ["admin", "runners", "jobs"]);
        assert_eq!(
            Scope::Global.registration_token_path(),
            ["admin", "runners", "registration-token"]
        );
        let o = Scope::Org("acme".into());
        assert_eq!(o.jobs_path(V14), ["orgs", "acme", "actions", "runners", "jobs"]);
        assert_eq!(
            Scope::User("bob".into()).runners_path(V15),
            ["user", "actions", "runners"]
        );
        let r = Scope::Repo {
            owner: "o".into(),
            name: "r".into(),
        };
        assert_eq!(
            r.registration_token_path(),
            ["repos", "o", "r", "actions", "runners", "registration-token"]
        );
    }
}
