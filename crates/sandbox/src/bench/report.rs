//! The benchmark's output: one JSON object per scenario run, with stable key names.

use serde::Serialize;

/// One scenario's numbers. Keys are stable: scripts read them.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Report {
    /// Scenario name (`single`, `burst`, `steady`, `many-groups`).
    pub scenario: String,
    /// `github`, `gitea` or `forgejo`.
    pub forge: String,
    /// How demand reached the operator: `long-poll` (GitHub), `poll` or `webhook` (Gitea),
    /// `poll` (Forgejo).
    pub mode: String,
    /// Jobs queued.
    pub jobs: usize,
    /// Job queued → runner Job created, 50th percentile, milliseconds.
    pub p50_ms: f64,
    /// 95th percentile, milliseconds.
    pub p95_ms: f64,
    /// 99th percentile, milliseconds.
    pub p99_ms: f64,
    /// Runner Jobs created per second while scaling up.
    pub runners_per_second: f64,
    /// Seconds from the first job queued until every job completed and nothing is left.
    pub drain_seconds: f64,
    /// Requests the operator sent to the forge, per job.
    pub forge_requests_per_job: f64,
    /// Kubernetes API writes (create, update, patch, delete) by the operator, per runner.
    pub k8s_writes_per_runner: f64,
    /// Operator peak resident memory, MiB.
    pub peak_rss_mib: f64,
    /// Operator CPU seconds (user + system) over the whole run.
    pub cpu_seconds: f64,
    /// Operator CPU seconds during 10 idle seconds after the work (many-groups).
    pub idle_cpu_seconds: Option<f64>,
    /// Runner Jobs created beyond the jobs that needed them.
    pub duplicates: usize,
    /// Runners still registered at the forge plus runner Jobs left in the cluster at the end.
    pub leaks: usize,
    /// The most runner Jobs active at once in one group, and that group's maxRunners.
    pub peak_runners: usize,
    /// maxRunners of each group.
    pub max_runners: u32,
    /// RunnerGroups in the run.
    pub groups: usize,
    /// Gitea and Forgejo: job-list requests per shared scope per poll interval (the key keeps
    /// its first name: scripts read it).
    pub gitea_job_lists_per_poll: Option<f64>,
    /// Whether every job completed.
    pub completed: bool,
    /// Latency per stage from the operator's own histograms, by stage name
    /// ([`super::stages::STAGES`]); stages without samples are left out.
    pub stages: std::collections::BTreeMap<String, super::stages::StageLatency>,
}

impl Report {
    /// The report as one line of JSON.
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}
