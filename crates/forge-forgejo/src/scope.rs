//! The API paths of a group's scope at Forgejo (reference §1–3), and the rights each needs.
//! The scope itself (which level, with which names) is the one Forgejo shares with Gitea, in
//! [`forgerunner_http::scope`].

use forgerunner_core::crd::{ForgejoScope, ForgejoSpec};
pub use forgerunner_http::scope::{Scope, ScopeError};
use forgerunner_http::scope::{ScopeFields, ScopeKind};

use crate::version::ForgejoVersion;

/// Forgejo's side of a [`Scope`]: how `spec.forgejo` names it, and its routes.
pub trait Routes: Sized {
    /// Reads the scope from the spec.
    fn from_spec(spec: &ForgejoSpec) -> Result<Self, ScopeError>;
    /// Segments (below `/api/v1`) of the scope's `…/actions/runners` folder. The instance's
    /// folder moved to `/admin/actions/runners` in v15; `/admin/runners` is the older one.
    fn runners_path(&self, v: ForgejoVersion) -> Vec<&str>;
    /// Segments of the waiting-job list (v11+).
    fn jobs_path(&self, v: ForgejoVersion) -> Vec<&str>;
    /// Segments of the registration-token route (`GET`; the admin one is `/admin/runners/…`
    /// in every version, so the older path is used for the instance).
    fn registration_token_path(&self) -> Vec<&str>;
    /// The token rights an operation at this scope needs, for 403 messages.
    fn rights_hint(&self, write: bool) -> &'static str;
}

impl Routes for Scope {
    fn from_spec(spec: &ForgejoSpec) -> Result<Scope, ScopeError> {
        Scope::from_fields(ScopeFields {
            spec: "spec.forgejo",
            kind: match spec.scope {
                ForgejoScope::Global => ScopeKind::Global,
                ForgejoScope::Org => ScopeKind::Org,
                ForgejoScope::User => ScopeKind::User,
                ForgejoScope::Repo => ScopeKind::Repo,
            },
            org: spec.org.as_deref(),
            user: spec.user.as_deref(),
            repo: spec.repo.as_deref(),
        })
    }

    fn runners_path(&self, v: ForgejoVersion) -> Vec<&str> {
        match self {
            Scope::Global if v.admin_actions_paths() => vec!["admin", "actions", "runners"],
            Scope::Global => vec!["admin", "runners"],
            Scope::Org(org) => vec!["orgs", org, "actions", "runners"],
            Scope::User(_) => vec!["user", "actions", "runners"],
            Scope::Repo { owner, name } => vec!["repos", owner, name, "actions", "runners"],
        }
    }

    fn jobs_path(&self, v: ForgejoVersion) -> Vec<&str> {
        let mut p = self.runners_path(v);
        p.push("jobs");
        p
    }

    fn registration_token_path(&self) -> Vec<&str> {
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

    fn rights_hint(&self, write: bool) -> &'static str {
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
