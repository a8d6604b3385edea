//! Gitea REST wire types (1.25/1.26 `modules/structs`), decoded leniently.
//!
//! Every optional or `omitempty` field has a default, `steps` may be `null` (1.25), and unset
//! times arrive as `1970-01-01T00:00:00Z`; all of that decodes without error.
//!
//! Listed items keep bounded strings and label lists ([`forgerunner_http::bounded`]): Gitea
//! bounds neither the count nor the length of a job's labels (`ActionRunJob.RunsOn` is
//! `JSON TEXT`, `models/actions/run_job.go`) nor of a runner's (`AgentLabels`, `TEXT`,
//! `models/actions/runner.go`), and a hostile server bounds nothing.

use forgerunner_core::job_identity::JobIdentity;
use forgerunner_http::bounded::{self, Entries, PageShape};
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
        // Bounded: the word is only compared, and `null` reads as empty, i.e. `Other`.
        Ok(JobStatus::from_api(&bounded::name(d)?))
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
    /// Job name (at most [`bounded::KEPT_NAME_CHARS`] characters kept).
    #[serde(default, deserialize_with = "bounded::name")]
    pub name: String,
    /// The job's evaluated `runs-on` (names only); may be empty. Its distinct labels, at most
    /// [`bounded::KEPT_LABELS`] of at most [`bounded::KEPT_LABEL_CHARS`] characters: a job past
    /// either bound matches no group, whole or cut.
    #[serde(default, deserialize_with = "bounded::labels")]
    pub labels: Vec<String>,
    /// API status.
    #[serde(default)]
    pub status: JobStatus,
    /// Name of the runner that picked the job (empty while queued; at most
    /// [`bounded::KEPT_NAME_CHARS`] characters kept).
    #[serde(default, deserialize_with = "bounded::name")]
    pub runner_name: String,
    /// Id of that runner.
    #[serde(default)]
    pub runner_id: i64,
    /// API URL of the job (`…/repos/{owner}/{repo}/actions/jobs/{id}`; at most
    /// [`bounded::KEPT_URL_CHARS`] characters kept).
    #[serde(default, deserialize_with = "bounded::url")]
    pub url: String,
    /// Creation time (RFC 3339); `None` when missing or the 1970 "unset" value.
    #[serde(default, deserialize_with = "timestamp")]
    pub created_at: Option<jiff::Timestamp>,
}

impl Entries for WorkflowJob {
    fn entries(&self) -> usize {
        1 + self.labels.len()
    }
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
    // Bounded like a name: a time is some 30 characters, so a longer string is no time.
    let s = bounded::name(d)?;
    Ok(s.parse::<jiff::Timestamp>().ok().filter(|t| t.as_second() > 0))
}

/// Where a page of `ActionWorkflowJobsResponse` keeps its jobs (`jobs`, with `total_count`).
pub const JOBS_PAGE: PageShape = PageShape::Object { items: "jobs" };

/// `ActionRunnerLabel`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct RunnerLabelInfo {
    /// Label name (at most [`bounded::KEPT_LABEL_CHARS`] characters kept).
    #[serde(default, deserialize_with = "bounded::label")]
    pub name: String,
}

/// `ActionRunner`.
#[derive(Clone, Debug, Deserialize)]
pub struct Runner {
    /// Runner id (names need not be unique).
    pub id: i64,
    /// Runner name (at most [`bounded::KEPT_NAME_CHARS`] characters kept).
    #[serde(default, deserialize_with = "bounded::name")]
    pub name: String,
    /// `online` or `offline`.
    #[serde(default, deserialize_with = "bounded::name")]
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
    /// Label names: the distinct ones, at most [`bounded::KEPT_LABELS`].
    #[serde(default, deserialize_with = "bounded::distinct")]
    pub labels: Vec<RunnerLabelInfo>,
}

impl Entries for Runner {
    fn entries(&self) -> usize {
        1 + self.labels.len()
    }
}

impl Runner {
    /// Whether Gitea lists the runner as online.
    pub fn is_online(&self) -> bool {
        self.status == "online"
    }
}

/// Where a page of `ActionRunnersResponse` keeps its runners (`runners`, with `total_count`).
pub const RUNNERS_PAGE: PageShape = PageShape::Object { items: "runners" };

#[cfg(test)]
mod tests {
    use forgerunner_http::{ListingBudget, ListingLimits, Page};

    use super::*;

    fn page<T: for<'de> Deserialize<'de> + Entries>(body: &str, shape: PageShape) -> Page<T> {
        ListingBudget::new(ListingLimits::FORGE_DEFAULT)
            .decode_page(body.as_bytes(), shape)
            .expect("a page")
            .expect("within the budget")
    }

    #[test]
    fn job_tolerates_nulls_epoch_and_unknown_status() {
        let body = r#"{"jobs":[{"id":7,"run_id":3,"name":"build","labels":null,"status":"weird",
            "steps":null,"created_at":"1970-01-01T00:00:00Z","started_at":"1970-01-01T00:00:00Z",
            "runner_name":null},
            {"id":8,"labels":["a"],"status":"queued","created_at":"2026-01-02T03:04:05Z","steps":[]}],
            "total_count":2}"#;
        let page: Page<WorkflowJob> = page(body, JOBS_PAGE);
        assert_eq!(page.total_count, Some(2));
        assert_eq!(page.entries, 3, "two jobs and one label");
        let jobs = page.items;
        assert_eq!(jobs[0].status, JobStatus::Other);
        assert!(jobs[0].labels.is_empty());
        assert_eq!(jobs[0].created_at, None);
        assert_eq!(jobs[1].status, JobStatus::Queued);
        assert!(jobs[1].created_at.is_some());
        let job: WorkflowJob = serde_json::from_str(r#"{"id":1,"status":null,"created_at":null}"#).unwrap();
        assert_eq!((job.status, job.created_at), (JobStatus::Other, None));
    }

    /// H3c of the security review. Gitea sends a job's `runs-on` as `labels`
    /// (`ActionWorkflowJob.Labels []string`, `modules/structs/repo_actions.go`, filled from
    /// `ActionRunJob.RunsOn` in `services/convert/convert.go`); it bounds neither the count
    /// nor the length (`RunsOn []string` is `JSON TEXT`, `models/actions/run_job.go`), and
    /// matches runners by set containment (`ActionRunner.CanMatchLabels`,
    /// `models/actions/runner.go`). Names are `VARCHAR(255)` there. So a job keeps its
    /// distinct labels up to one past the CRD's bounds, and names up to one past 255.
    #[test]
    fn a_job_keeps_bounded_labels_and_names() {
        let repeats = format!(r#"{{"id":1,"labels":[{}"gpu"]}}"#, r#""","#.repeat(1_000_000));
        let job: WorkflowJob = serde_json::from_str(&repeats).unwrap();
        assert_eq!(job.labels, ["", "gpu"], "a million empty labels are one");
        assert_eq!(job.entries(), 3);

        let many: Vec<String> = (0..1000).map(|i| format!("l{i}")).collect();
        let body = serde_json::json!({"id": 2, "labels": many, "name": "n".repeat(5000),
            "runner_name": "r".repeat(5000), "url": "u".repeat(100_000), "status": "q".repeat(5000)});
        let job: WorkflowJob = serde_json::from_value(body).unwrap();
        assert_eq!(job.labels, many[..bounded::KEPT_LABELS]);
        assert_eq!(job.name.len(), bounded::KEPT_NAME_CHARS);
        assert_eq!(job.runner_name.len(), bounded::KEPT_NAME_CHARS);
        assert_eq!(job.url.len(), bounded::KEPT_URL_CHARS);
        assert_eq!(job.status, JobStatus::Other);

        let long = serde_json::json!({"id": 3, "labels": ["x".repeat(10_000)]});
        let job: WorkflowJob = serde_json::from_value(long).unwrap();
        assert_eq!(job.labels, ["x".repeat(bounded::KEPT_LABEL_CHARS)]);
    }

    #[test]
    fn runners_decode() {
        let body = r#"{"runners":[{"id":1,"name":"g-abcde","status":"offline","busy":false,
            "ephemeral":true,"labels":[{"id":0,"name":"x","type":"custom"}]}],"total_count":1}"#;
        let page: Page<Runner> = page(body, RUNNERS_PAGE);
        assert_eq!(page.total_count, Some(1));
        assert!(!page.items[0].is_online());
        assert_eq!(page.items[0].labels[0].name, "x");
        assert_eq!(page.entries, 2);
    }

    /// Gitea's `ActionRunner.Labels` are `[]*ActionRunnerLabel` (`modules/structs/repo_actions.go`)
    /// from `AgentLabels` (`TEXT`, `models/actions/runner.go`), which act_runner registers as
    /// configured (its `labels.Parse` refuses only an empty label): unbounded as well.
    #[test]
    fn a_runner_keeps_bounded_labels_and_name() {
        let one = r#"{"id":0,"name":"x","type":"custom"},"#.repeat(100_000);
        let body = format!(
            r#"{{"id":1,"name":"{}","status":"online","labels":[{one}{{"name":"y"}}]}}"#,
            "n".repeat(9000)
        );
        let r: Runner = serde_json::from_str(&body).unwrap();
        let names: Vec<&str> = r.labels.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["x", "y"]);
        assert_eq!(r.name.len(), bounded::KEPT_NAME_CHARS);
        assert!(r.is_online());
        let many: Vec<serde_json::Value> = (0..1000)
            .map(|i| serde_json::json!({"name": format!("l{i}:{}", "z".repeat(1000))}))
            .collect();
        let r: Runner = serde_json::from_value(serde_json::json!({"id": 2, "labels": many})).unwrap();
        assert_eq!(r.labels.len(), bounded::KEPT_LABELS);
        assert!(r.labels.iter().all(|l| l.name.len() == bounded::KEPT_LABEL_CHARS));
        assert_eq!(r.entries(), 1 + bounded::KEPT_LABELS);
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
