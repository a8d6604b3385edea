//! Forgejo REST wire types (`modules/structs`), decoded leniently: `null` lists, missing
//! fields (`handle` before v15) and unknown status words decode without error.
//!
//! Listed items keep bounded strings and label lists ([`forgerunner_http::bounded`]): Forgejo
//! bounds neither the count nor the length of a job's `runs_on` (`ActionRunJob.RunsOn` is
//! `JSON TEXT`, `models/actions/run_job.go`), and a hostile server bounds nothing.

use serde::{Deserialize, Deserializer};

use forgerunner_core::forge::SecretValue;
use forgerunner_core::job_identity::JobIdentity;
use forgerunner_http::bounded::{self, Entries};
use forgerunner_http::wire::null_as_default;

/// One `ActionRunJob` of `…/runners/jobs` (waiting or running).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct RunJob {
    /// Job id.
    #[serde(default)]
    pub id: i64,
    /// `runs-on` label names of the job: the distinct ones, at most [`bounded::KEPT_LABELS`]
    /// of at most [`bounded::KEPT_LABEL_CHARS`] characters (a job past either bound matches
    /// no group, whole or cut).
    #[serde(default, deserialize_with = "bounded::labels")]
    pub runs_on: Vec<String>,
    /// `waiting` (ready for a runner) or `running`.
    #[serde(default, deserialize_with = "bounded::name")]
    pub status: String,
    /// Task id (0 until a runner picked it).
    #[serde(default)]
    pub task_id: i64,
    /// Handle of this attempt (v15+; empty before; at most [`bounded::KEPT_NAME_CHARS`]
    /// characters kept).
    #[serde(default, deserialize_with = "bounded::name")]
    pub handle: String,
    /// Job name (at most [`bounded::KEPT_NAME_CHARS`] characters kept).
    #[serde(default, deserialize_with = "bounded::name")]
    pub name: String,
    /// Workflow run id (v16+; 0 before).
    #[serde(default)]
    pub run_id: i64,
}

impl Entries for RunJob {
    fn entries(&self) -> usize {
        1 + self.runs_on.len()
    }
}

impl RunJob {
    /// What the listing tells about the job, for the annotations of the runner bound to it
    /// (the listing names neither the repository nor the workflow).
    pub fn identity(&self) -> JobIdentity {
        let positive = |id: i64| (id > 0).then(|| id.to_string());
        JobIdentity {
            run_id: positive(self.run_id),
            job_name: Some(self.name.clone()).filter(|n| !n.trim().is_empty()),
            job_id: positive(self.id),
            ..JobIdentity::default()
        }
    }

    /// Ready for a runner: demand.
    pub fn is_waiting(&self) -> bool {
        self.status == "waiting"
    }

    /// A runner has it.
    pub fn is_running(&self) -> bool {
        self.status == "running"
    }
}

/// Runner status words of `ActionRunner.status` (v15).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RunnerStatus {
    /// Not seen for a minute, or never connected.
    #[default]
    Offline,
    /// Online, no task activity in the last 10 s.
    Idle,
    /// Online and updating a task.
    Active,
}

impl<'de> Deserialize<'de> for RunnerStatus {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Bounded: the word is only compared, and `null` reads as empty, i.e. offline.
        Ok(match bounded::name(d)?.as_str() {
            "active" => RunnerStatus::Active,
            "idle" => RunnerStatus::Idle,
            _ => RunnerStatus::Offline,
        })
    }
}

/// One `ActionRunner` of `GET …/actions/runners` (v15).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct Runner {
    /// Runner id.
    #[serde(default)]
    pub id: i64,
    /// Name (at most [`bounded::KEPT_NAME_CHARS`] characters kept).
    #[serde(default, deserialize_with = "bounded::name")]
    pub name: String,
    /// Status.
    #[serde(default)]
    pub status: RunnerStatus,
    /// Ephemeral (one task, then deleted).
    #[serde(default)]
    pub ephemeral: bool,
    /// The description it was registered with (a group's mark, [`crate::row_mark`]); at most
    /// [`bounded::KEPT_NAME_CHARS`] characters kept, and a mark is far shorter.
    #[serde(default, deserialize_with = "bounded::name")]
    pub description: String,
    /// The version forgejo-runner reported on its last `Register` or `Declare`
    /// (`ActionRunner.Version`, `modules/structs/repo_actions.go@v15.0.3`); empty before it
    /// first connects, and in a listing that lacks it. At most [`bounded::KEPT_NAME_CHARS`]
    /// characters kept.
    #[serde(default, deserialize_with = "bounded::name")]
    pub version: String,
}

// A runner keeps no labels here: Forgejo lists them (`ActionRunner.Labels`), but nothing
// reads them, so they are parsed and dropped without being kept.
impl Entries for Runner {
    fn entries(&self) -> usize {
        1
    }
}

/// A scope's runners as one listing read them (v15).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunnerList {
    /// The rows, each id once.
    pub rows: Vec<Runner>,
    /// One page held them all. A page is one query, so its rows are all the runners at one
    /// instant; across pages they are not: Forgejo orders the list by `last_online DESC`
    /// (`models/actions/runner.go` `FindRunnerOptions.ToOrders`), which every runner call
    /// rewrites, so a runner that calls in between two page requests moves to an earlier page
    /// and is skipped. Only a whole listing proves a runner gone by its absence.
    pub whole: bool,
}

/// `201` body of `POST …/actions/runners` (v15), read into [`CreatedRunner`] at once.
#[derive(Deserialize)]
pub(crate) struct RegisterRunnerResponse {
    pub(crate) id: i64,
    pub(crate) uuid: String,
    pub(crate) token: String,
}

/// A runner created over REST: its id and its own login (the token is secret).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreatedRunner {
    /// Runner id (for `DELETE …/runners/{id}`).
    pub id: i64,
    /// UUID the runner authenticates with.
    pub uuid: String,
    /// Token the runner authenticates with.
    pub token: SecretValue,
}

/// `GET /api/v1/user` body (`modules/structs/user.go` `User`: the user name is `login`).
#[derive(Deserialize)]
pub(crate) struct CurrentUser {
    #[serde(default, deserialize_with = "null_as_default")]
    pub(crate) login: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lenient_decoding() {
        let jobs: Option<Vec<RunJob>> = serde_json::from_str("null").expect("null");
        assert!(jobs.is_none());
        let j: RunJob = serde_json::from_str(
            r#"{"id":982,"attempt":1,"handle":"33ba","repo_id":1,"owner_id":1,"name":"build","needs":null,"runs_on":["debian"],"task_id":0,"status":"waiting"}"#,
        )
        .expect("job");
        assert!(j.is_waiting() && j.handle == "33ba" && j.runs_on == ["debian"]);
        let old: RunJob =
            serde_json::from_str(r#"{"id":1,"runs_on":null,"status":"running"}"#).expect("v14 job");
        assert!(old.is_running() && old.handle.is_empty());
        let r: Runner =
            serde_json::from_str(r#"{"id":3,"name":"g-abcde","status":"weird"}"#).expect("runner");
        assert_eq!(r.status, RunnerStatus::Offline);
        assert_eq!(r.version, "", "no version in the listing");
        let r: Runner = serde_json::from_str(r#"{"id":3,"version":"12.8.2"}"#).expect("runner");
        assert_eq!(r.version, "12.8.2");
        let r: Runner = serde_json::from_str(r#"{"id":3,"version":null}"#).expect("runner");
        assert_eq!(r.version, "");
    }

    /// H3c of the security review. Forgejo sends a job's `runs-on` as `runs_on`
    /// (`ActionRunJob.RunsOn []string`, `modules/structs/action.go`), stored as `JSON TEXT`
    /// with no bound on count or length (`models/actions/run_job.go`), and matches by set
    /// containment (`ActionRunJob.ItRunsOn`, `IsSubset`). So a job keeps its distinct labels
    /// up to one past the CRD's bounds, and strings up to one past Forgejo's `VARCHAR(255)`.
    #[test]
    fn a_job_keeps_bounded_runs_on_and_strings() {
        let repeats = format!(r#"{{"id":1,"runs_on":[{}"debian"]}}"#, r#""","#.repeat(1_000_000));
        let j: RunJob = serde_json::from_str(&repeats).expect("job");
        assert_eq!(j.runs_on, ["", "debian"], "a million empty labels are one");
        assert_eq!(j.entries(), 3);
        let many: Vec<String> = (0..1000).map(|i| format!("l{i}")).collect();
        let long = "x".repeat(10_000);
        let j: RunJob = serde_json::from_value(serde_json::json!({"id": 2, "runs_on": many,
            "name": long, "handle": long, "status": long}))
        .expect("job");
        assert_eq!(j.runs_on, many[..bounded::KEPT_LABELS]);
        for s in [&j.name, &j.handle, &j.status] {
            assert_eq!(s.len(), bounded::KEPT_NAME_CHARS);
        }
        let j: RunJob = serde_json::from_value(serde_json::json!({"id": 3, "runs_on": [long]})).expect("job");
        assert_eq!(j.runs_on, ["x".repeat(bounded::KEPT_LABEL_CHARS)]);
        let r: Runner = serde_json::from_value(serde_json::json!({"id": 4, "name": long, "status": "idle",
            "labels": vec![""; 100_000], "version": long}))
        .expect("runner");
        assert_eq!(
            (r.name.len(), r.status, r.entries(), r.version.len()),
            (
                bounded::KEPT_NAME_CHARS,
                RunnerStatus::Idle,
                1,
                bounded::KEPT_NAME_CHARS
            )
        );
    }

    #[test]
    fn a_bound_job_names_its_run_and_name() {
        let j: RunJob = serde_json::from_str(
            r#"{"id":982,"attempt":1,"handle":"33ba","repo_id":1,"owner_id":1,"name":"build","needs":null,
                "runs_on":["debian"],"task_id":0,"status":"waiting","run_id":12}"#,
        )
        .expect("job");
        let id = j.identity();
        assert_eq!(id.job_id.as_deref(), Some("982"));
        assert_eq!(id.job_name.as_deref(), Some("build"));
        assert_eq!(id.run_id.as_deref(), Some("12"));
        let old: RunJob = serde_json::from_str(r#"{"id":5,"name":null}"#).expect("job");
        assert_eq!(old.identity().run_id, None, "no run id before v16");
        assert_eq!(old.identity().job_name, None);
    }
}
