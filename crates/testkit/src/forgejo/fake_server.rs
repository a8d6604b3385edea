//! The Forgejo fake as a [`FakeForgeServer`]: pools are `runs-on` label sets; work is counted
//! by tasks, since Forgejo 15 binds each ephemeral runner to one job's handle.

use std::collections::BTreeMap;

use forgerunner_core::crd::ForgeKind;

use super::control::{ADMIN_TOKEN, ForgejoFakeHandle};
use super::model::{Conclusion, JobStatus};
use crate::forge_common::Fault;
use crate::forge_common::fake_server::{
    FakeForgeServer, JOB_LIST_FAULTS, JobPhase, PoolJob, PoolRunner, is_operator_path, job_list_faults,
    repeats,
};

/// Path suffix of Forgejo's waiting-job lists (at every scope).
const JOB_LIST: &str = "/runners/jobs";

/// Name of every job queued through the trait.
const JOB_NAME: &str = "build";

fn phase(status: JobStatus) -> JobPhase {
    match status {
        JobStatus::Waiting | JobStatus::Blocked => JobPhase::Queued,
        JobStatus::Running => JobPhase::Running,
        JobStatus::Done(Conclusion::Success) => JobPhase::Succeeded,
        JobStatus::Done(_) => JobPhase::Failed,
    }
}

impl FakeForgeServer for ForgejoFakeHandle {
    fn kind(&self) -> ForgeKind {
        ForgeKind::Forgejo
    }

    fn url(&self) -> String {
        ForgejoFakeHandle::url(self)
    }

    fn credentials(&self) -> BTreeMap<String, String> {
        BTreeMap::from([("token".to_owned(), ADMIN_TOKEN.to_owned())])
    }

    fn queue_job(&self, repo: &str, runs_on: &[&str]) -> Option<i64> {
        Some(ForgejoFakeHandle::queue_job(self, repo, JOB_NAME, runs_on))
    }

    fn jobs(&self) -> Vec<PoolJob> {
        ForgejoFakeHandle::jobs(self)
            .into_iter()
            .map(|j| PoolJob {
                id: j.id,
                phase: phase(j.status),
                runner: j.runner_id,
                pool: j.runs_on,
            })
            .collect()
    }

    fn runners(&self) -> Vec<PoolRunner> {
        ForgejoFakeHandle::runners(self)
            .into_iter()
            .map(|r| PoolRunner {
                name: r.name,
                pool: r.labels,
                job: r.task,
            })
            .collect()
    }

    fn unlabelled_runners_match(&self) -> bool {
        true
    }

    /// The runners of unfinished tasks: a runner row's task is not always set while its
    /// one task runs, the task is.
    fn busy_runners(&self) -> Vec<(String, i64)> {
        self.tasks()
            .into_iter()
            .filter(|t| t.result.is_none())
            .map(|t| (t.runner_name, t.job_id))
            .collect()
    }

    /// Every task counts, whatever pool: one job's attempt run by two tasks, or one runner
    /// that ran two tasks.
    fn ran_twice(&self, _jobs: &[PoolJob]) -> usize {
        let tasks = self.tasks();
        repeats(tasks.iter().map(|t| (t.job_id, t.attempt))) + repeats(tasks.iter().map(|t| t.runner_id))
    }

    fn operator_requests(&self) -> usize {
        self.requests()
            .iter()
            .filter(|r| is_operator_path(&r.path))
            .count()
    }

    fn job_list_requests(&self) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.path.ends_with(JOB_LIST))
            .count()
    }

    fn inject_faults(&self, _pool: &str) -> Option<String> {
        for f in job_list_faults(JOB_LIST) {
            self.inject_fault(f);
        }
        self.inject_fault(Fault::status("/actions/runners", 503).method("POST").times(2));
        Some(format!("{JOB_LIST_FAULTS}; 2x503 on runner creation"))
    }
}
