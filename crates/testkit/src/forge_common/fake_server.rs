//! One face for the three forge fakes (the GitHub emulator, the Gitea fake, the Forgejo fake),
//! so a world built on them can queue work, read it back and break the forge without knowing
//! which forge it drives.
//!
//! Jobs and runners are grouped into *pools*: the label set a job asks for and a runner
//! carries. At Gitea and Forgejo that is the job's `runs-on`; at GitHub it is the runner scale
//! set, whose runners take the jobs asking for its name, so the GitHub fake names a job's and a
//! runner's pool after their scale set. What only one forge has (GitHub's scale-set sessions,
//! Gitea's webhooks, Forgejo's tasks) stays in that fake; the trait exposes it only as
//! optional capabilities with neutral defaults.

use std::collections::BTreeMap;
use std::time::Duration;

use forgerunner_core::crd::ForgeKind;

use super::faults::Fault;

/// Where a job stands, in terms every forge shares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobPhase {
    /// Waiting for a runner (or for a job it needs).
    Queued,
    /// A runner works on it.
    Running,
    /// Finished successfully.
    Succeeded,
    /// Finished any other way (failed, cancelled, skipped).
    Failed,
}

impl JobPhase {
    /// The job has finished, whatever its result.
    pub fn is_done(self) -> bool {
        matches!(self, JobPhase::Succeeded | JobPhase::Failed)
    }
}

/// A job at a fake forge, forge-neutral.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolJob {
    /// Forge-side job id.
    pub id: i64,
    /// The labels it asks for (GitHub: its scale set's name).
    pub pool: Vec<String>,
    /// Where it stands.
    pub phase: JobPhase,
    /// The runner that took it, if any.
    pub runner: Option<i64>,
}

/// A runner registered at a fake forge, forge-neutral.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolRunner {
    /// Its name (the runner Job's name, for runners forgerunner made).
    pub name: String,
    /// The labels it carries (GitHub: its scale set's name); empty while undeclared.
    pub pool: Vec<String>,
    /// The job it works on now.
    pub job: Option<i64>,
}

/// Jobs and runners of a fake forge read together.
#[derive(Clone, Debug, Default)]
pub struct PoolSnapshot {
    /// Every job, finished ones included.
    pub jobs: Vec<PoolJob>,
    /// Every registered runner.
    pub runners: Vec<PoolRunner>,
}

/// A fake forge server a sandbox world drives: named `FakeForgeServer` apart from
/// `forgerunner_core::testing::FakeForge`, which fakes the operator's forge client in process,
/// where this serves the real client over HTTP.
pub trait FakeForgeServer: Send + Sync {
    /// Which forge it plays.
    fn kind(&self) -> ForgeKind;

    /// The URL a RunnerGroup served by this fake points at (GitHub: the config URL).
    fn url(&self) -> String;

    /// `stringData` of a credentials Secret this fake accepts (an admin token or PAT).
    fn credentials(&self) -> BTreeMap<String, String>;

    /// Queues one job in `repo` asking for `runs_on`; its id, or `None` when no pool serves
    /// those labels (GitHub: no scale set is named `runs_on[0]`). GitHub has no repository in
    /// its scale-set protocol and ignores `repo`.
    fn queue_job(&self, repo: &str, runs_on: &[&str]) -> Option<i64>;

    /// Every job, finished ones included.
    fn jobs(&self) -> Vec<PoolJob>;

    /// Every registered runner.
    fn runners(&self) -> Vec<PoolRunner>;

    /// Jobs and runners at once; one read of the fake where reading costs (the GitHub
    /// emulator copies its whole state, statistics included).
    fn snapshot(&self) -> PoolSnapshot {
        PoolSnapshot {
            jobs: self.jobs(),
            runners: self.runners(),
        }
    }

    /// Whether a runner that has declared no labels yet may belong to any pool, so counts of a
    /// pool's runners must include it lest a leaked one be missed (Forgejo: a runner row made
    /// over REST declares its labels only when its pod connects).
    fn unlabelled_runners_match(&self) -> bool {
        false
    }

    /// Whether runners can be registered that no runner Job was made for (GitHub: a JIT
    /// config whose Job creation failed still registers a runner).
    fn registers_without_runner_jobs(&self) -> bool {
        false
    }

    /// Runners working on a job now: (runner name, job id).
    fn busy_runners(&self) -> Vec<(String, i64)> {
        self.runners()
            .into_iter()
            .filter_map(|r| r.job.map(|job| (r.name, job)))
            .collect()
    }

    /// Registered runners and what each works on, for a report of leftovers.
    fn describe_runners(&self) -> Vec<String> {
        self.runners()
            .iter()
            .map(|r| format!("{} (task {:?})", r.name, r.job))
            .collect()
    }

    /// How many times work ran twice among `jobs` (jobs of one pool): a runner that took two
    /// jobs counts once per extra job.
    fn ran_twice(&self, jobs: &[PoolJob]) -> usize {
        repeats(jobs.iter().filter_map(|j| j.runner))
    }

    /// Requests the operator made to the forge's API (not those of the simulated runners).
    fn operator_requests(&self) -> usize;

    /// Job-list requests so far (the polling forges' demand signal); 0 where demand is pushed.
    fn job_list_requests(&self) -> usize {
        0
    }

    /// Injects a representative set of this forge's failures around `pool` (expired tokens,
    /// error statuses, throttling, garbage and answers slower than the operator's client
    /// waits); what was injected, in words, or `None` when the pool is unknown.
    fn inject_faults(&self, pool: &str) -> Option<String>;
}

/// Longer than the Gitea and Forgejo clients' 15 s request timeout.
pub const PAST_CLIENT_TIMEOUT: Duration = Duration::from_secs(16);

/// The faults Gitea's and Forgejo's job listings at `path` get, in the order they hit (the
/// first matching rule wins).
pub fn job_list_faults(path: &str) -> [Fault; 4] {
    [
        Fault::status(path, 401).times(2),
        Fault::status(path, 429).retry_after("1").times(2),
        Fault::garbage(path).times(1),
        Fault::latency(path, PAST_CLIENT_TIMEOUT).times(1),
    ]
}

/// What [`job_list_faults`] injects, in words.
pub const JOB_LIST_FAULTS: &str =
    "job list: 2x401, 2x429 (Retry-After 1), a garbage body, a 16 s answer (past the 15 s timeout)";

/// Whether a request to a Gitea-family fake came from the operator: the simulated runners
/// speak the runner protocol under `/api/actions`, the operator REST.
pub fn is_operator_path(path: &str) -> bool {
    path.starts_with("/api/v1/") || path.starts_with("/api/forgejo/")
}

/// Values that occur more than once count once per extra occurrence.
pub fn repeats<T: Ord>(values: impl IntoIterator<Item = T>) -> usize {
    let mut seen: BTreeMap<T, usize> = BTreeMap::new();
    for v in values {
        *seen.entry(v).or_default() += 1;
    }
    seen.values().map(|n| n.saturating_sub(1)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_count_extra_occurrences() {
        assert_eq!(repeats([1, 2, 2, 3, 3, 3]), 3);
        assert_eq!(repeats(Vec::<i64>::new()), 0);
    }

    #[test]
    fn runner_protocol_requests_are_not_the_operators() {
        assert!(is_operator_path("/api/v1/orgs/acme/actions/jobs"));
        assert!(is_operator_path("/api/forgejo/v1/version"));
        assert!(!is_operator_path(
            "/api/actions/runner.v1.RunnerService/FetchTask"
        ));
    }

    #[test]
    fn only_finished_phases_are_done() {
        assert!(JobPhase::Succeeded.is_done());
        assert!(JobPhase::Failed.is_done());
        assert!(!JobPhase::Queued.is_done());
        assert!(!JobPhase::Running.is_done());
    }
}
