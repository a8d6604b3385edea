//! API token authentication and scope checks (reference §1 "Auth"): a token belongs to a user
//! and carries scopes; GET needs `read:<category>`, POST/DELETE `write:<category>`; admin
//! routes need a site admin, org routes an org owner, repo routes the repo's owner (or an owner
//! of the owning org), user routes act on the token's own user.

// Handlers return a ready `Response` as their error: it is what axum sends.
#![allow(clippy::result_large_err)]

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::control::Shared;
use super::model::FakeScope;
use crate::forge_common::http::{lock, token_of};

/// Which route family a request came through.
#[derive(Clone, Debug)]
pub(crate) enum Route {
    /// `/admin/…`.
    Admin,
    /// `/orgs/{org}/…`.
    Org(String),
    /// `/user/…` (the token's user).
    User,
    /// `/repos/{owner}/{repo}/…`.
    Repo(String, String),
}

impl Route {
    /// The token-scope category of the route.
    fn category(&self) -> &'static str {
        match self {
            Route::Admin => "admin",
            Route::Org(_) => "organization",
            Route::User => "user",
            Route::Repo(..) => "repository",
        }
    }
}

/// A Forgejo API error.
pub(crate) fn api_error(status: StatusCode, message: &str) -> Response {
    crate::forge_common::http::api_error(status, message, "https://forgejo.org/api/swagger")
}

/// Authenticates the token and checks it may use `route` (`write`: POST/DELETE); the scope the
/// route acts on.
pub(crate) fn authorize(
    s: &Shared,
    headers: &HeaderMap,
    route: &Route,
    write: bool,
) -> Result<FakeScope, Response> {
    let tok = token_of(headers).ok_or_else(|| api_error(StatusCode::UNAUTHORIZED, "token is required"))?;
    let m = lock(&s.model);
    let token = m
        .tokens
        .get(&tok)
        .ok_or_else(|| api_error(StatusCode::UNAUTHORIZED, "user does not exist"))?;
    let cat = route.category();
    let needed = if write {
        format!("write:{cat}")
    } else {
        format!("read:{cat}")
    };
    let has = |sc: &str| token.scopes.contains(sc);
    if !(has("all") || has(&needed) || has(&format!("write:{cat}"))) {
        let msg = format!("token does not have at least one of required scope(s): [{needed}]");
        return Err(api_error(StatusCode::FORBIDDEN, &msg));
    }
    let login = token.login.as_str();
    let forbidden = |what: &str| Err(api_error(StatusCode::FORBIDDEN, what));
    match route {
        Route::Admin if m.admins.contains(login) => Ok(FakeScope::Global),
        Route::Admin => forbidden("user should be the site admin"),
        Route::Org(o) if !m.orgs.contains_key(o) => Err(api_error(StatusCode::NOT_FOUND, "org not found")),
        Route::Org(o) if m.owns(login, o) => Ok(FakeScope::Owner(o.clone())),
        Route::Org(_) => forbidden("must be an organization owner"),
        Route::User => Ok(FakeScope::Owner(login.to_string())),
        Route::Repo(o, r) if !m.repos.contains_key(&(o.clone(), r.clone())) => {
            Err(api_error(StatusCode::NOT_FOUND, "repo not found"))
        }
        Route::Repo(o, r) if m.owns(login, o) => Ok(FakeScope::Repo(o.clone(), r.clone())),
        Route::Repo(..) => forbidden("user should be the owner of the repo"),
    }
}
