//! The Gitea fake as a [`FakeForgeServer`]: pools are `runs-on` label sets.

use std::collections::BTreeMap;

use forgerunner_core::crd::ForgeKind;

use super::control::{ADMIN_TOKEN, GiteaFakeHandle};
use super::model::{Conclusion, JobState};
use crate::forge_common::Fault;
use crate::forge_common::fake_server::{
    FakeForgeServer, JOB_LIST_FAULTS, JobPhase, PoolJob, PoolRunner, is_operator_path, job_list_faults,
};

/// Path suffix of Gitea's job lists (at every scope).
const JOB_LIST: &str = "/actions/jobs";

fn phase(state: JobState) -> JobPhase {
    match state {
        JobState::Waiting | JobState::Blocked => JobPhase::Queued,
        JobState::Running => JobPhase::Running,
        JobState::Done(Conclusion::Success) => JobPhase::Succeeded,
        JobState::Done(_) => JobPhase::Failed,
    }
}

impl FakeForgeServer for GiteaFakeHandle {
    fn kind(&self) -> ForgeKind {
        ForgeKind::Gitea
    }

    fn url(&self) -> String {
        GiteaFakeHandle::url(self)
    }

    fn credentials(&self) -> BTreeMap<String, String> {
        BTreeMap::from([("token".to_owned(), ADMIN_TOKEN.to_owned())])
    }

    fn queue_job(&self, repo: &str, runs_on: &[&str]) -> Option<i64> {
        Some(GiteaFakeHandle::queue_job(self, repo, runs_on))
    }

    fn jobs(&self) -> Vec<PoolJob> {
        GiteaFakeHandle::jobs(self)
            .into_iter()
            .map(|j| PoolJob {
                id: j.id,
                phase: phase(j.state),
                runner: j.runner_id,
                pool: j.labels,
            })
            .collect()
    }

    fn runners(&self) -> Vec<PoolRunner> {
        GiteaFakeHandle::runners(self)
            .into_iter()
            .map(|r| PoolRunner {
                name: r.name,
                pool: r.labels,
                job: r.task,
            })
            .collect()
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
        self.inject_fault(Fault::status("/registration-token", 503).times(2));
        self.inject_fault(Fault::status("/actions/runners", 500).method("GET").times(2));
        Some(format!(
            "{JOB_LIST_FAULTS}; 2x503 on registration tokens; 2x500 on runner lists"
        ))
    }
}
