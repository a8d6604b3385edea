//! The API paths of a group's scope at Gitea, and the rights each needs. The scope itself
//! (which level, with which names) is the one Gitea shares with Forgejo, in
//! [`forgerunner_http::scope`].

use forgerunner_core::crd::{GiteaScope, GiteaSpec};
pub use forgerunner_http::scope::{Scope, ScopeError};
use forgerunner_http::scope::{ScopeFields, ScopeKind};

/// Whether two owner or repository names are the same to Gitea.
///
/// Gitea looks owners and repositories up by their lower-cased names (`models/user/user.go`
/// `getUserByNameWithTypes` and `models/repo/repo.go` `GetRepositoryByOwnerAndName`:
/// `lower_name = strings.ToLower(name)`), so a spec's `ACME` lists the jobs of `acme`, while
/// deliveries name the canonical spelling. Valid names are ASCII (`modules/validation/helpers.go`
/// `validUsernamePattern`, `models/repo/repo.go` `validRepoNamePattern`: `[-.\w]`), where
/// `strings.ToLower` is ASCII lower-casing.
pub fn same_name(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

/// Whether repository `owner/repo` belongs to `scope`, names compared as Gitea compares them
/// ([`same_name`]).
pub fn contains_repo(scope: &Scope, owner: &str, repo: &str) -> bool {
    match scope {
        Scope::Global => true,
        Scope::Org(o) | Scope::User(o) => same_name(o, owner),
        Scope::Repo { owner: o, name } => same_name(o, owner) && same_name(name, repo),
    }
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

/// Gitea's side of a [`Scope`]: how `spec.gitea` names it, and its routes.
pub trait Routes: Sized {
    /// Reads the scope from the spec.
    fn from_spec(spec: &GiteaSpec) -> Result<Self, ScopeError>;
    /// Segments of the jobs list.
    fn jobs_path(&self) -> Vec<&str>;
    /// Segments of the runners list.
    fn runners_path(&self) -> Vec<&str>;
    /// Segments of the registration-token route (POST, Gitea 1.24+).
    fn registration_token_path(&self) -> Vec<&str>;
    /// The token rights an operation at this scope needs, for 403 messages.
    fn rights_hint(&self, access: Access) -> &'static str;
}

/// Path segments (below `/api/v1`) of the `actions` folder of `scope`.
fn actions_base(scope: &Scope) -> Vec<&str> {
    match scope {
        Scope::Global => vec!["admin", "actions"],
        Scope::Org(org) => vec!["orgs", org, "actions"],
        Scope::User(_) => vec!["user", "actions"],
        Scope::Repo { owner, name } => vec!["repos", owner, name, "actions"],
    }
}

impl Routes for Scope {
    fn from_spec(spec: &GiteaSpec) -> Result<Scope, ScopeError> {
        Scope::from_fields(ScopeFields {
            spec: "spec.gitea",
            kind: match spec.scope {
                GiteaScope::Global => ScopeKind::Global,
                GiteaScope::Org => ScopeKind::Org,
                GiteaScope::User => ScopeKind::User,
                GiteaScope::Repo => ScopeKind::Repo,
            },
            org: spec.org.as_deref(),
            user: spec.user.as_deref(),
            repo: spec.repo.as_deref(),
        })
    }

    fn jobs_path(&self) -> Vec<&str> {
        let mut p = actions_base(self);
        p.push("jobs");
        p
    }

    fn runners_path(&self) -> Vec<&str> {
        let mut p = actions_base(self);
        p.push("runners");
        p
    }

    fn registration_token_path(&self) -> Vec<&str> {
        let mut p = self.runners_path();
        p.push("registration-token");
        p
    }

    /// Gitea 1.26 (`routers/api/v1/api.go` `addActionsRoutes`) checks job listings with the
    /// reader check (`reqRepoReader(unit.TypeActions)`, `reqOrgMembership()`) and everything
    /// under `/runners`, listing included, with the owner check (`reqOwner()`,
    /// `reqOrgOwnership()`); 1.25 has one check, the owner one, for both. The user routes check
    /// no more than the token's scope.
    fn rights_hint(&self, access: Access) -> &'static str {
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
    fn repositories_belong_to_scopes_by_gitea_names() {
        let repo = |o: &str, n: &str| Scope::Repo {
            owner: o.into(),
            name: n.into(),
        };
        assert!(contains_repo(&Scope::Org("ACME".into()), "acme", "app"));
        assert!(contains_repo(&Scope::User("Bob".into()), "bob", "x"));
        assert!(contains_repo(&repo("Acme", "App"), "acme", "app"));
        assert!(!contains_repo(&repo("acme", "app"), "acme", "web"));
        assert!(!contains_repo(&Scope::Org("acme".into()), "acme2", "app"));
        assert!(contains_repo(&Scope::Global, "anyone", "anything"));
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
}
