//! The Forgejo endpoints forgerunner uses, on top of the transport in `client`.

use reqwest::Method;
use serde::de::DeserializeOwned;

use forgerunner_core::forge::SecretValue;
use forgerunner_http::rest::{CallError, json};
use forgerunner_http::wire::{self, ServerVersion};
use forgerunner_http::{ListingBudget, ListingError, ListingLimits, Page, PageShape, RequestError};

use crate::client::{DeleteOutcome, ForgejoClient, Operation, Target};
use crate::error::ForgejoError;
use crate::scope::{Routes, Scope};
use crate::types::{CreatedRunner, CurrentUser, RegisterRunnerResponse, RunJob, Runner, RunnerList};
use crate::version::ForgejoVersion;

/// Page size of the runner list (Forgejo's default `MAX_RESPONSE_ITEMS` is 50).
const PAGE_LIMIT: usize = 50;

const API: [&str; 2] = ["api", "v1"];

impl ForgejoClient {
    async fn get<T: DeserializeOwned>(
        &self,
        t: Target<'_>,
        prefix: &[&str],
        segments: &[&str],
        query: &[(&str, String)],
    ) -> Result<(T, reqwest::header::HeaderMap), ForgejoError> {
        let url = self.url(prefix, segments, query);
        let r = self.request(t, Method::GET, url, None, &json::<T>).await?;
        Ok((r.value, r.headers))
    }

    /// `GET /api/v1/version`: the full version string (`15.0.3+gitea-1.22.0`).
    pub async fn version(&self) -> Result<String, ForgejoError> {
        let t = Target {
            op: Operation::Version,
            scope: None,
            missing: Some("the Forgejo API at spec.forgejo.url"),
        };
        let (v, _): (ServerVersion, _) = self.get(t, &API, &["version"], &[]).await?;
        Ok(v.version)
    }

    /// `GET /api/v1/user`: the login of the token's owner (`routers/api/v1/user/user.go`
    /// `GetAuthenticatedUser`), the user every `/user/actions/…` route acts for.
    pub async fn current_user(&self) -> Result<String, ForgejoError> {
        let t = Target {
            op: Operation::CurrentUser,
            scope: None,
            missing: Some("the token's user"),
        };
        let decode = |b: &[u8]| {
            serde_json::from_slice::<CurrentUser>(b)
                .ok()
                .map(|u| u.login)
                .filter(|l| !l.is_empty())
        };
        let url = self.url(&API, &["user"], &[]);
        let r = self.request(t, Method::GET, url, None, &decode).await?;
        Ok(r.value)
    }

    /// `GET /api/forgejo/v1/version`, the Forgejo-only probe: `Ok(None)` on 404 (not Forgejo).
    pub async fn forgejo_version(&self) -> Result<Option<String>, ForgejoError> {
        let t = Target {
            op: Operation::ForgejoVersion,
            scope: None,
            missing: None,
        };
        match self
            .get::<ServerVersion>(t, &["api", "forgejo", "v1"], &["version"], &[])
            .await
        {
            Ok((v, _)) => Ok(Some(v.version)),
            Err(ForgejoError::Request(RequestError::NotFound(_))) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Waiting and running jobs at `scope` whose `runs-on` is a subset of `labels` (the label
    /// names, sent comma-joined without spaces; Forgejo filters on the server). `null` is an
    /// empty list. The list is unpaged, so its one page is a whole listing: within
    /// [`ListingLimits::FORGE_DEFAULT`] entries (jobs and their labels) or an error.
    pub async fn list_jobs(
        &self,
        v: ForgejoVersion,
        scope: &Scope,
        labels: &[&str],
    ) -> Result<Vec<RunJob>, ForgejoError> {
        let t = Target {
            op: Operation::ListJobs,
            scope: Some(scope),
            missing: None,
        };
        let over = |e: ListingError| t.error(CallError::from(e));
        let mut budget = ListingBudget::new(ListingLimits::FORGE_DEFAULT);
        budget.next_page().map_err(over)?;
        let query = [("labels", labels.join(","))];
        let url = self.url(&API, &scope.jobs_path(v), &query);
        let decode = |body: &[u8]| budget.decode_page::<RunJob>(body, PageShape::List);
        let page = self
            .request(t, Method::GET, url, None, &decode)
            .await?
            .value
            .map_err(over)?;
        budget.charge_page(&page).map_err(over)?;
        Ok(page.items)
    }

    /// Every runner registered at `scope` (v15), across pages, and whether one page held them
    /// all (see [`RunnerList::whole`] for why that matters). A listing over
    /// [`ListingLimits::FORGE_DEFAULT`] fails whole (see [`ListingBudget`] for why).
    pub async fn list_runners(&self, v: ForgejoVersion, scope: &Scope) -> Result<RunnerList, ForgejoError> {
        let t = Target {
            op: Operation::ListRunners,
            scope: Some(scope),
            missing: None,
        };
        let over = |e: ListingError| t.error(CallError::from(e));
        let mut budget = ListingBudget::new(ListingLimits::FORGE_DEFAULT);
        let mut all: Vec<Runner> = Vec::new();
        let mut pages = 0usize;
        loop {
            pages += 1;
            let page = budget.next_page().map_err(over)?;
            let query = [("page", page.to_string()), ("limit", PAGE_LIMIT.to_string())];
            let url = self.url(&API, &scope.runners_path(v), &query);
            // Decoded within the listing's room: nothing past it is kept, even while decoding.
            let decode = |body: &[u8]| budget.decode_page::<Runner>(body, PageShape::List);
            let reply = self.request(t, Method::GET, url, None, &decode).await?;
            let page: Page<Runner> = reply.value.map_err(over)?;
            budget.charge_page(&page).map_err(over)?;
            let n = page.items.len();
            for r in page.items {
                if !all.iter().any(|x| x.id == r.id) {
                    all.push(r);
                }
            }
            let total = reply
                .headers
                .get("x-total-count")
                .and_then(|h| h.to_str().ok())
                .and_then(|s| s.trim().parse::<usize>().ok());
            // Without the header, a short page is the last one (the server may cap `limit`).
            let done = match total {
                Some(total) => all.len() >= total,
                None => n < PAGE_LIMIT,
            };
            if n == 0 || done {
                break;
            }
        }
        Ok(RunnerList {
            rows: all,
            whole: pages == 1,
        })
    }

    /// One runner by id (v15); `None` when it is gone (404).
    pub async fn get_runner(
        &self,
        v: ForgejoVersion,
        scope: &Scope,
        id: i64,
    ) -> Result<Option<Runner>, ForgejoError> {
        let t = Target {
            op: Operation::ListRunners,
            scope: Some(scope),
            missing: Some("the runner"),
        };
        let id = id.to_string();
        let mut segs = scope.runners_path(v);
        segs.push(&id);
        match self.get::<Runner>(t, &API, &segs, &[]).await {
            Ok((r, _)) => Ok(Some(r)),
            Err(ForgejoError::Request(RequestError::NotFound(_))) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `POST …/actions/runners {name, description, ephemeral: true}` (v15): a runner that
    /// takes one task.
    pub async fn create_runner(
        &self,
        v: ForgejoVersion,
        scope: &Scope,
        name: &str,
        description: &str,
    ) -> Result<CreatedRunner, ForgejoError> {
        let t = Target {
            op: Operation::CreateRunner,
            scope: Some(scope),
            missing: None,
        };
        let url = self.url(&API, &scope.runners_path(v), &[]);
        let body = serde_json::json!({
            "name": name,
            "description": description,
            "ephemeral": true,
        });
        // Decoded straight into a `SecretValue`, so the token is never held in plain form.
        let decode = |b: &[u8]| {
            let r: RegisterRunnerResponse = serde_json::from_slice(b).ok()?;
            (!r.uuid.is_empty() && !r.token.is_empty()).then(|| CreatedRunner {
                id: r.id,
                uuid: r.uuid,
                token: SecretValue::new(r.token),
            })
        };
        let r = self.request(t, Method::POST, url, Some(body), &decode).await?;
        Ok(r.value)
    }

    /// Deletes runner `id` at `scope` (v15); 404 means it is already gone.
    pub async fn delete_runner(
        &self,
        v: ForgejoVersion,
        scope: &Scope,
        id: i64,
    ) -> Result<DeleteOutcome, ForgejoError> {
        let t = Target {
            op: Operation::DeleteRunner,
            scope: Some(scope),
            missing: Some("the runner"),
        };
        let id = id.to_string();
        let mut segs = scope.runners_path(v);
        segs.push(&id);
        let url = self.url(&API, &segs, &[]);
        match self.request(t, Method::DELETE, url, None, &|_| Some(())).await {
            Ok(_) => Ok(DeleteOutcome::Deleted),
            Err(ForgejoError::Request(RequestError::NotFound(_))) => Ok(DeleteOutcome::AlreadyGone),
            Err(e) => Err(e),
        }
    }

    /// The scope's registration token (`GET …/registration-token`; reading does not rotate it).
    pub async fn registration_token(&self, scope: &Scope) -> Result<SecretValue, ForgejoError> {
        let t = Target {
            op: Operation::RegistrationToken,
            scope: Some(scope),
            missing: None,
        };
        let url = self.url(&API, &scope.registration_token_path(), &[]);
        let r = self
            .request(t, Method::GET, url, None, &wire::registration_token)
            .await?;
        Ok(r.value)
    }
}
