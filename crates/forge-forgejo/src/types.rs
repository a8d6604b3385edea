//! Forgejo REST wire types (`modules/structs`), decoded leniently: `null` lists, missing
//! fields (`handle` before v15) and unknown status words decode without error.

use serde::{Deserialize, Deserializer};

use forgerunner_core::forge::SecretValue;
use forgerunner_core::job_identity::JobIdentity;
use forgerunner_http::wire::null_as_default;

/// One `ActionRunJob` of `…/runners/jobs` (waiting or running).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct RunJob {
    /// Job id.
    #[serde(default)]
    pub id: i64,
    /// `runs-on` label names of the job.
    #[serde(default, deserialize_with = "null_as_default")]
    pub runs_on: Vec<String>,
    /// `waiting` (ready for a runner) or `running`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub status: String,
    /// Task id (0 until a runner picked it).
    #[serde(default)]
    pub task_id: i64,
    /// Handle of this attempt (v15+; empty before).
    #[serde(default, deserialize_with = "null_as_default")]
    pub handle: String,
    /// Job name.
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
    /// Workflow run id (v16+; 0 before).
    #[serde(default)]
    pub run_id: i64,
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
        let s = Option::<String>::deserialize(d)?;
        Ok(match s.as_deref() {
            Some("active") => RunnerStatus::Active,
            Some("idle") => RunnerStatus::Idle,
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
    /// Name.
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
    /// Status.
    #[serde(default)]
    pub status: RunnerStatus,
    /// Ephemeral (one task, then deleted).
    #[serde(default)]
    pub ephemeral: bool,
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
