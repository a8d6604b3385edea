//! The GitHub emulator as a [`FakeForgeServer`]: a pool is a runner scale set, named after it
//! (its runners take the jobs asking for its name). Sessions, JIT configs and the message
//! queue stay the emulator's own.

use std::collections::BTreeMap;
use std::time::Duration;

use forgerunner_core::crd::ForgeKind;
use scaleset::testing::{Endpoint, Fault, JobState};

use super::emulator::E2eEmulator;
use crate::forge_common::fake_server::{FakeForgeServer, JobPhase, PoolJob, PoolRunner, PoolSnapshot};

impl FakeForgeServer for E2eEmulator {
    fn kind(&self) -> ForgeKind {
        ForgeKind::Github
    }

    fn url(&self) -> String {
        self.config_url()
    }

    fn credentials(&self) -> BTreeMap<String, String> {
        self.pat_secret_data()
    }

    /// Queues on the scale set named `runs_on[0]`, asking for that label.
    fn queue_job(&self, _repo: &str, runs_on: &[&str]) -> Option<i64> {
        let label = runs_on.first()?;
        let scale_set = self.scale_set_named(label)?;
        Some(self.emu.queue_job(scale_set, [*label]).0)
    }

    fn jobs(&self) -> Vec<PoolJob> {
        self.snapshot().jobs
    }

    fn runners(&self) -> Vec<PoolRunner> {
        self.snapshot().runners
    }

    fn snapshot(&self) -> PoolSnapshot {
        let state = self.emu.state();
        let names = self.scale_set_names(&state.scale_sets);
        let pool = |id| names.get(&id).cloned().into_iter().collect::<Vec<String>>();
        let jobs = state
            .jobs
            .into_iter()
            .map(|j| PoolJob {
                id: j.id.0,
                pool: pool(j.scale_set_id),
                phase: match (j.state, j.result.as_deref()) {
                    (JobState::Available | JobState::Assigned, _) => JobPhase::Queued,
                    (JobState::Running, _) => JobPhase::Running,
                    (JobState::Completed, Some("succeeded")) => JobPhase::Succeeded,
                    (JobState::Completed, _) => JobPhase::Failed,
                },
                runner: j.runner_id.map(|r| r.get()),
            })
            .collect();
        let runners = state
            .runners
            .into_iter()
            .map(|r| PoolRunner {
                pool: pool(r.scale_set_id),
                name: r.name,
                job: r.job.map(|j| j.0),
            })
            .collect();
        PoolSnapshot { jobs, runners }
    }

    fn registers_without_runner_jobs(&self) -> bool {
        true
    }

    fn describe_runners(&self) -> Vec<String> {
        self.emu
            .state()
            .runners
            .iter()
            .map(|r| format!("{} (job {:?})", r.name, r.job))
            .collect()
    }

    fn operator_requests(&self) -> usize {
        self.emu.requests().len()
    }

    fn inject_faults(&self, pool: &str) -> Option<String> {
        let scale_set = self.scale_set_named(pool)?;
        let emu = &self.emu;
        emu.expire_admin_tokens();
        emu.expire_queue_token(scale_set);
        emu.inject(Fault::status(Endpoint::GenerateJitConfig, 401).times(1));
        emu.inject(Fault::too_many_requests(Endpoint::GetMessage, Some(Duration::from_secs(1))).times(1));
        emu.inject(Fault::status(Endpoint::GenerateJitConfig, 503).times(2));
        emu.inject(Fault::status(Endpoint::AcquireJobs, 500).times(1));
        emu.inject(Fault::delay(Endpoint::GenerateJitConfig, Duration::from_secs(3)).times(2));
        Some("tokens expired (401), 401 and 2x503 on JIT configs, 429 on the message poll, 500 on acquire, 3 s delays (the 60 s client timeout and garbage bodies are out of the emulator's reach)".to_owned())
    }
}
