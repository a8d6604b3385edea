//! Re-running the one job a runner was running when the cluster killed its pod, through GitHub's
//! REST API, with the token the group already has (a PAT, or the App's installation token).
//!
//! Facts this rests on (GitHub REST docs, "workflow jobs" and "workflow runs" pages; the
//! scale-set messages and peers' measurements in `research-28.md` of issue 28):
//!
//! - The listener's messages carry `workflowRunId`, the REST run id, but their `jobId` is the
//!   orchestration GUID, not the REST job id. The REST id is found by listing the run's jobs,
//!   `GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs` (`filter=latest`, the default, lists
//!   the latest attempt only; `per_page` at most 100), and picking the job whose `runner_name`
//!   is our runner's name: the one identity GitHub itself records for who ran the job.
//! - `POST /repos/{owner}/{repo}/actions/jobs/{job_id}/rerun` re-runs "a job and its dependent
//!   jobs" (201 Created). `…/runs/{run_id}/rerun-failed-jobs` would also re-run jobs that failed
//!   on their own, so it is not used.
//! - Re-running needs the "Actions" repository permission (write) for fine-grained and App
//!   installation tokens, or the `repo` scope for a classic PAT; listing jobs needs Actions
//!   read. A scale set alone needs neither, so a 401/403 here names them.
//! - While the run has not concluded GitHub answers 403 "This workflow is already running"
//!   (measured for `rerun-failed-jobs`; the per-job call is assumed alike): ask again later.
//!   A runner killed without a goodbye keeps its job "in progress" for about ten minutes.
//! - Runs can be re-run up to 30 days after they started, never after their logs expired:
//!   then, as for a run or job GitHub no longer knows (404), the job is gone.

use std::time::Duration;

use forgerunner_core::ForgeError;
use forgerunner_core::forge::{RerunOutcome, SecretValue};
use forgerunner_core::job_identity::JobIdentity;
use reqwest::Method;
use serde::Deserialize;

use crate::client::{Auth, GithubClient, no_body};
use crate::config_url::Scope;
use crate::error::ApiError;

/// How long to wait before asking again while the run has not concluded (the pace peers use
/// against github.com).
pub const NOT_CONCLUDED_RETRY: Duration = Duration::from_secs(30);
/// Jobs per listing page: GitHub's maximum.
const PER_PAGE: usize = 100;
/// Listing pages read at most. A matrix makes at most 256 jobs; ten pages cover several.
const MAX_PAGES: usize = 10;
/// `Accept` of GitHub's REST API.
const ACCEPT: &str = "application/vnd.github+json";

/// One page of a run's jobs, the fields used here.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct JobsPage {
    /// Jobs of the run (latest attempt) in all pages.
    pub total_count: usize,
    /// This page's jobs.
    pub jobs: Vec<RestJob>,
}

/// A job as the REST API lists it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct RestJob {
    /// The REST job id.
    pub id: u64,
    /// The job's display name.
    pub name: String,
    /// The runner that ran (or runs) the job; `null` before one took it.
    pub runner_name: Option<String>,
}

/// The REST id of the job `runner` ran, among the jobs of its run.
///
/// By `runner_name` first. Failing that (no name recorded), by the display name, but only when
/// one job alone has it and no other runner is recorded on it: a matrix repeats names, and
/// re-running another runner's job would repeat work nobody lost.
pub fn pick_job(jobs: &[RestJob], runner: &str, display_name: Option<&str>) -> Option<u64> {
    if let Some(j) = jobs.iter().find(|j| j.runner_name.as_deref() == Some(runner)) {
        return Some(j.id);
    }
    let name = display_name?;
    let mut named = jobs.iter().filter(|j| j.name == name);
    let only = named.next()?;
    let unclaimed = only.runner_name.as_deref().is_none_or(str::is_empty);
    (named.next().is_none() && unclaimed).then_some(only.id)
}

/// What a refused re-run means, when it means more than an error.
fn refusal_outcome(e: &ApiError) -> Option<RerunOutcome> {
    let ApiError::Status {
        status,
        message,
        rate_limited: false,
        ..
    } = e
    else {
        return None;
    };
    let m = message.to_ascii_lowercase();
    match status {
        403 if m.contains("already running") => Some(RerunOutcome::NotYet {
            retry_after: NOT_CONCLUDED_RETRY,
        }),
        404 | 410 => Some(RerunOutcome::Gone),
        _ => None,
    }
}

/// A permission refusal, with the permission to grant named.
fn permission_error(e: ApiError, what: &str, permission: &str) -> ForgeError {
    match &e {
        ApiError::Status {
            status: 401 | 403,
            rate_limited: false,
            ..
        } => ForgeError::Unauthorized(format!(
            "{what} needs {permission} on the job's repository; grant it to the GitHub App or \
                 token of the group, or turn re-runs off ({e})"
        )),
        _ => e.into(),
    }
}

/// The permission re-running takes, as GitHub's docs name it.
const RERUN_PERMISSION: &str =
    "the \"Actions\" repository permission (write) (classic personal access token: the repo scope)";
/// The permission listing a run's jobs takes.
const LIST_PERMISSION: &str =
    "the \"Actions\" repository permission (read) (classic personal access token: the repo scope)";

/// `owner/repo` of the job: as the message named it, or the owner of the config URL when the
/// message gave the repository's name alone. `None` when neither tells, or a part is not a name
/// GitHub allows (it becomes a URL path).
fn repository_of(job: &JobIdentity, scope: &Scope) -> Option<(String, String)> {
    let told = job.repository.as_deref()?;
    let (owner, repo) = match told.split_once('/') {
        Some((o, r)) => (o.to_owned(), r.to_owned()),
        None => match scope {
            Scope::Organization(org) => (org.clone(), told.to_owned()),
            Scope::Repository { owner, .. } => (owner.clone(), told.to_owned()),
            Scope::Enterprise(_) => return None,
        },
    };
    let fits = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    (fits(&owner) && fits(&repo)).then_some((owner, repo))
}

/// Re-runs the job `runner` was running ([`forgerunner_core::ForgeSession::rerun_job`]).
pub async fn rerun_job(
    client: &GithubClient,
    runner: &str,
    job: &JobIdentity,
) -> Result<RerunOutcome, ForgeError> {
    let Some((owner, repo)) = repository_of(job, &client.config().scope) else {
        tracing::debug!(
            runner,
            "no repository known for the runner's job; nothing to re-run"
        );
        return Ok(RerunOutcome::Gone);
    };
    let Some(run_id) = job.run_id.as_deref().and_then(|r| r.parse::<u64>().ok()) else {
        tracing::debug!(runner, "no run id known for the runner's job; nothing to re-run");
        return Ok(RerunOutcome::Gone);
    };
    let token = client.rest_token().await.map_err(ForgeError::from)?;
    let listed = find_job(
        client,
        &token,
        &owner,
        &repo,
        run_id,
        runner,
        job.job_name.as_deref(),
    )
    .await;
    let job_id = match listed {
        Ok(Some(id)) => id,
        Ok(None) => {
            tracing::info!(runner, repository = %format!("{owner}/{repo}"), run_id, "the run lists no job of this runner; nothing to re-run");
            return Ok(RerunOutcome::Gone);
        }
        Err(e) => {
            return match refusal_outcome(&e) {
                Some(RerunOutcome::Gone) => Ok(RerunOutcome::Gone),
                _ => Err(permission_error(
                    e,
                    "listing the jobs of a workflow run",
                    LIST_PERMISSION,
                )),
            };
        }
    };
    let url = client
        .rest_url(&format!("repos/{owner}/{repo}/actions/jobs/{job_id}/rerun"))
        .map_err(ForgeError::from)?;
    let sent = client
        .execute("rerun_job", client.request_timeout(), || {
            no_body(client.raw_request(Method::POST, url.clone(), Auth::Bearer(&token)))
                .header(reqwest::header::ACCEPT, ACCEPT)
        })
        .await;
    match sent {
        Ok(_) => Ok(RerunOutcome::Requested),
        Err(e) => match refusal_outcome(&e) {
            Some(outcome) => Ok(outcome),
            None => Err(permission_error(e, "re-running a job", RERUN_PERMISSION)),
        },
    }
}

/// Lists the run's jobs page by page until `runner`'s job shows, or all are read.
async fn find_job(
    client: &GithubClient,
    token: &SecretValue,
    owner: &str,
    repo: &str,
    run_id: u64,
    runner: &str,
    display_name: Option<&str>,
) -> Result<Option<u64>, ApiError> {
    let mut jobs = Vec::new();
    for page in 1..=MAX_PAGES {
        let mut url = client.rest_url(&format!("repos/{owner}/{repo}/actions/runs/{run_id}/jobs"))?;
        url.query_pairs_mut()
            .append_pair("filter", "latest")
            .append_pair("per_page", &PER_PAGE.to_string())
            .append_pair("page", &page.to_string());
        let reply = client
            .execute("list_run_jobs", client.request_timeout(), || {
                client
                    .raw_request(Method::GET, url.clone(), Auth::Bearer(token))
                    .header(reqwest::header::ACCEPT, ACCEPT)
            })
            .await?;
        let listed: JobsPage = reply.json("list_run_jobs")?;
        let last = listed.jobs.len() < PER_PAGE;
        if let Some(j) = listed
            .jobs
            .iter()
            .find(|j| j.runner_name.as_deref() == Some(runner))
        {
            return Ok(Some(j.id));
        }
        jobs.extend(listed.jobs);
        if last || jobs.len() >= listed.total_count {
            break;
        }
    }
    Ok(pick_job(&jobs, runner, display_name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u64, name: &str, runner: Option<&str>) -> RestJob {
        RestJob {
            id,
            name: name.into(),
            runner_name: runner.map(Into::into),
        }
    }

    #[test]
    fn the_runner_name_picks_the_job_even_among_matrix_twins() {
        let jobs = [
            job(1, "test (linux)", Some("g-abc")),
            job(2, "test (linux)", Some("g-def")),
            job(3, "lint", None),
        ];
        assert_eq!(pick_job(&jobs, "g-def", Some("test (linux)")), Some(2));
    }

    #[test]
    fn the_display_name_is_a_fallback_only_when_unique_and_unclaimed() {
        let jobs = [
            job(1, "build", None),
            job(2, "test", None),
            job(3, "test", None),
            job(4, "deploy", Some("someone-else")),
        ];
        assert_eq!(pick_job(&jobs, "g-abc", Some("build")), Some(1));
        assert_eq!(
            pick_job(&jobs, "g-abc", Some("test")),
            None,
            "two jobs of that name"
        );
        assert_eq!(
            pick_job(&jobs, "g-abc", Some("deploy")),
            None,
            "another runner's job"
        );
        assert_eq!(pick_job(&jobs, "g-abc", None), None);
        assert_eq!(pick_job(&jobs, "g-abc", Some("missing")), None);
    }

    fn status(code: u16, message: &str, rate_limited: bool) -> ApiError {
        ApiError::Status {
            operation: "rerun_job",
            status: code,
            type_name: None,
            message: message.into(),
            retry_after: None,
            rate_limited,
            request_ids: None,
        }
    }

    #[test]
    fn refusals_are_read_by_status_and_message() {
        assert_eq!(
            refusal_outcome(&status(403, "This workflow is already running", false)),
            Some(RerunOutcome::NotYet {
                retry_after: NOT_CONCLUDED_RETRY
            })
        );
        assert_eq!(
            refusal_outcome(&status(404, "Not Found", false)),
            Some(RerunOutcome::Gone)
        );
        assert_eq!(
            refusal_outcome(&status(403, "Resource not accessible by integration", false)),
            None
        );
        assert_eq!(
            refusal_outcome(&status(403, "API rate limit exceeded", true)),
            None
        );
        assert!(matches!(
            permission_error(
                status(403, "Resource not accessible by integration", false),
                "re-running a job",
                RERUN_PERMISSION
            ),
            ForgeError::Unauthorized(m) if m.contains("\"Actions\" repository permission (write)") && m.contains("repo scope")
        ));
        assert!(matches!(
            permission_error(
                status(403, "API rate limit exceeded", true),
                "x",
                RERUN_PERMISSION
            ),
            ForgeError::RateLimited { .. }
        ));
    }

    #[test]
    fn the_repository_must_be_a_github_name() {
        let scope = Scope::Organization("octo".into());
        let id = |r: &str| JobIdentity {
            repository: Some(r.into()),
            ..JobIdentity::default()
        };
        assert_eq!(
            repository_of(&id("octo/hello.world"), &scope),
            Some(("octo".into(), "hello.world".into()))
        );
        assert_eq!(
            repository_of(&id("hello"), &scope),
            Some(("octo".into(), "hello".into())),
            "a bare repository name is the config URL owner's"
        );
        assert_eq!(repository_of(&id("octo/../admin"), &scope), None);
        assert_eq!(repository_of(&id("octo/.."), &scope), None);
        assert_eq!(repository_of(&id("octo/a?b"), &scope), None);
        assert_eq!(repository_of(&id("hello"), &Scope::Enterprise("e".into())), None);
        assert_eq!(repository_of(&JobIdentity::default(), &scope), None);
    }
}
