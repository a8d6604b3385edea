//! Gitea REST wire types (1.25/1.26 `modules/structs`), decoded leniently.
//!
//! Every optional or `omitempty` field has a default, `steps` may be `null` (1.25), and unset
//! times arrive as `1970-01-01T00:00:00Z`; all of that decodes without error.

use forgerunner_core::job_identity::JobIdentity;
use forgerunner_http::wire::null_as_default;
use serde::{Deserialize, Deserializer};

/// `GET /user` body (only what we use).
#[derive(Clone, Debug, Deserialize)]
pub struct User {
    /// Login name.
    #[serde(default)]
    pub login: String,
}

/// API status of a job. Unknown words are kept, never an error.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum JobStatus {
    /// Ready for any matching runner (internal `Waiting`).
    Queued,
    /// Blocked by `needs`, concurrency or approval (internal `Blocked`); not demand.
    Waiting,
    /// Picked by a runner.
    InProgress,
    /// Done (see the conclusion).
    Completed,
    /// Anything else this version of forgerunner does not know.
    #[default]
    Other,
}

impl JobStatus {
    /// Maps the API word.
    pub fn from_api(s: &str) -> JobStatus {
        match s {
            "queued" => JobStatus::Queued,
            "waiting" => JobStatus::Waiting,
            "in_progress" => JobStatus::InProgress,
            "completed" => JobStatus::Completed,
            _ => JobStatus::Other,
        }
    }
}

impl<'de> Deserialize<'de> for JobStatus {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Option::<String>::deserialize(d)?;
        Ok(s.as_deref().map(JobStatus::from_api).unwrap_or_default())
    }
}

/// One `ActionWorkflowJob`.
#[derive(Clone, Debug, Deserialize)]
pub struct WorkflowJob {
    /// Job id; the dedupe key across pages.
    pub id: i64,
    /// Run id.
    #[serde(default)]
    pub run_id: i64,
    /// Job name.
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
    /// The job's evaluated `runs-on` (names only); may be empty.
    #[serde(default, deserialize_with = "null_as_default")]
    pub labels: Vec<String>,
    /// API status.
    #[serde(default)]
    pub status: JobStatus,
    /// Name of the runner that picked the job (empty while queued).
    #[serde(default, deserialize_with = "null_as_default")]
    pub runner_name: String,
    /// Id of that runner.
    #[serde(default)]
    pub runner_id: i64,
    /// API URL of the job (`…/repos/{owner}/{repo}/actions/jobs/{id}`).
    #[serde(default, deserialize_with = "null_as_default")]
    pub url: String,
    /// Creation time (RFC 3339); `None` when missing or the 1970 "unset" value.
    #[serde(default, deserialize_with = "timestamp")]
    pub created_at: Option<jiff::Timestamp>,
}

impl WorkflowJob {
    /// The job's identity for its runner's annotations: repository (from the job's API URL),
    /// run, job name and id. The listing names no workflow.
    pub fn identity(&self) -> JobIdentity {
        job_identity(repository_of(&self.url), self.run_id, &self.name, self.id)
    }
}

/// A Gitea job's identity (Gitea names no workflow); ids of 0 and blank names are unknown.
pub(crate) fn job_identity(repository: Option<String>, run_id: i64, name: &str, id: i64) -> JobIdentity {
    let positive = |id: i64| (id > 0).then(|| id.to_string());
    JobIdentity {
        repository,
        workflow: None,
        run_id: positive(run_id),
        job_name: Some(name.to_owned()).filter(|n| !n.trim().is_empty()),
        job_id: positive(id),
    }
}

/// `owner/repo` from a job URL `…/repos/{owner}/{repo}/actions/jobs/{id}`.
fn repository_of(url: &str) -> Option<String> {
    let (_, rest) = url.split_once("/repos/")?;
    let mut parts = rest.split('/');
    let (owner, repo) = (parts.next()?, parts.next()?);
    (!owner.is_empty() && !repo.is_empty() && parts.next() == Some("actions"))
        .then(|| format!("{owner}/{repo}"))
}

/// Reads an RFC 3339 time, mapping absent, null, unparsable and the Unix epoch to `None`.
pub(crate) fn timestamp<'de, D: Deserializer<'de>>(d: D) -> Result<Option<jiff::Timestamp>, D::Error> {
    let s = Option::<String>::deserialize(d)?;
    Ok(s.and_then(|s| s.parse::<jiff::Timestamp>().ok())
        .filter(|t| t.as_second() > 0))
}

/// `ActionWorkflowJobsResponse`.
#[derive(Clone, Debug, Deserialize)]
pub struct WorkflowJobsPage {
    /// The page's jobs.
    #[serde(default, deserialize_with = "null_as_default")]
    pub jobs: Vec<WorkflowJob>,
    /// Jobs across all pages.
    #[serde(default)]
    pub total_count: i64,
}

/// `ActionRunnerLabel`.
#[derive(Clone, Debug, Deserialize)]
pub struct RunnerLabelInfo {
    /// Label name.
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
}

/// `ActionRunner`.
#[derive(Clone, Debug, Deserialize)]
pub struct Runner {
    /// Runner id (names need not be unique).
    pub id: i64,
    /// Runner name.
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
    /// `online` or `offline`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub status: String,
    /// Reported task activity recently.
    #[serde(default)]
    pub busy: bool,
    /// Registered as ephemeral.
    #[serde(default)]
    pub ephemeral: bool,
    /// Disabled (1.26+).
    #[serde(default)]
    pub disabled: bool,
    /// Label names.
    #[serde(default, deserialize_with = "null_as_default")]
    pub labels: Vec<RunnerLabelInfo>,
}

impl Runner {
    /// Whether Gitea lists the runner as online.
    pub fn is_online(&self) -> bool {
        self.status == "online"
    }
}

/// `ActionRunnersResponse`.
#[derive(Clone, Debug, Deserialize)]
pub struct RunnersPage {
    /// The page's runners.
    #[serde(default, deserialize_with = "null_as_default")]
    pub runners: Vec<Runner>,
    /// Runners across all pages.
    #[serde(default)]
    pub total_count: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_tolerates_nulls_epoch_and_unknown_status() {
        let body = r#"{"jobs":[{"id":7,"run_id":3,"name":"build","labels":null,"status":"weird",
            "steps":null,"created_at":"1970-01-01T00:00:00Z","started_at":"1970-01-01T00:00:00Z",
            "runner_name":null},
            {"id":8,"labels":["a"],"status":"queued","created_at":"2026-01-02T03:04:05Z","steps":[]}],
            "total_count":2}"#;
        let page: WorkflowJobsPage = serde_json::from_str(body).unwrap();
        assert_eq!(page.total_count, 2);
        assert_eq!(page.jobs[0].status, JobStatus::Other);
        assert!(page.jobs[0].labels.is_empty());
        assert_eq!(page.jobs[0].created_at, None);
        assert_eq!(page.jobs[1].status, JobStatus::Queued);
        assert!(page.jobs[1].created_at.is_some());
    }

    #[test]
    fn runners_decode() {
        let body = r#"{"runners":[{"id":1,"name":"g-abcde","status":"offline","busy":false,
            "ephemeral":true,"labels":[{"id":0,"name":"x","type":"custom"}]}],"total_count":1}"#;
        let page: RunnersPage = serde_json::from_str(body).unwrap();
        assert!(!page.runners[0].is_online());
        assert_eq!(page.runners[0].labels[0].name, "x");
    }

    #[test]
    fn a_job_names_its_repository_run_and_name() {
        let job: WorkflowJob = serde_json::from_str(
            r#"{"id":31,"run_id":9,"name":"test (1.22)","status":"in_progress","runner_name":"web-ab12c",
                "url":"https://gitea.example/api/v1/repos/acme/app/actions/jobs/31"}"#,
        )
        .unwrap();
        let id = job.identity();
        assert_eq!(id.repository.as_deref(), Some("acme/app"));
        assert_eq!(id.run_id.as_deref(), Some("9"));
        assert_eq!(id.job_name.as_deref(), Some("test (1.22)"));
        assert_eq!(id.job_id.as_deref(), Some("31"));
        assert_eq!(id.workflow, None);
        let bare: WorkflowJob =
            serde_json::from_str(r#"{"id":0,"url":"https://x/api/v1/repos/acme"}"#).unwrap();
        assert!(bare.identity().is_empty());
    }
}
