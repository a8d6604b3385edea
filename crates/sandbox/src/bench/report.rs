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
    /// CPU seconds (user + system) of the bench process itself (fake API server, simulator,
    /// forge fakes) from the start of the run's setup to its end, apart from the operator's.
    pub harness_cpu_seconds: f64,
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

    /// The header of the Markdown table `docs/performance.md` uses, with its separator line.
    pub fn table_header() -> String {
        let columns = [
            "scenario",
            "forge / mode",
            "groups",
            "jobs",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "runners/s",
            "drain s",
            "forge req/job",
            "k8s writes/runner",
            "peak RSS MiB",
            "CPU s",
            "harness CPU s",
            "dup",
            "leaks",
        ];
        let separator = vec!["---"; columns.len()].join("|");
        format!("| {} |\n|{separator}|", columns.join(" | "))
    }

    /// This report as one row of [`Report::table_header`]'s table.
    pub fn to_table_row(&self) -> String {
        let rate = if self.runners_per_second > 0.0 && self.scenario != "single" && self.scenario != "steady"
        {
            self.runners_per_second.to_string()
        } else {
            "—".to_owned()
        };
        let cells = [
            self.scenario.clone(),
            format!("{} / {}", self.forge, self.mode),
            self.groups.to_string(),
            self.jobs.to_string(),
            self.p50_ms.to_string(),
            self.p95_ms.to_string(),
            self.p99_ms.to_string(),
            rate,
            self.drain_seconds.to_string(),
            self.forge_requests_per_job.to_string(),
            self.k8s_writes_per_runner.to_string(),
            self.peak_rss_mib.to_string(),
            self.cpu_seconds.to_string(),
            self.harness_cpu_seconds.to_string(),
            self.duplicates.to_string(),
            self.leaks.to_string(),
        ];
        format!("| {} |", cells.join(" | "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_row_has_a_cell_per_column_and_shows_both_cpus() {
        let report = Report {
            scenario: "many-groups".into(),
            forge: "github".into(),
            mode: "long-poll".into(),
            cpu_seconds: 12.5,
            harness_cpu_seconds: 80.25,
            runners_per_second: 33.0,
            ..Report::default()
        };
        let header = Report::table_header();
        let columns = header.lines().next().unwrap().matches('|').count();
        let row = report.to_table_row();
        assert_eq!(row.matches('|').count(), columns);
        assert!(row.contains("| 12.5 | 80.25 |"), "{row}");
        assert!(row.contains("| 33 |"), "{row}");
        let json: serde_json::Value = serde_json::from_str(&report.to_json_line()).unwrap();
        assert_eq!(json["harness_cpu_seconds"], 80.25);
    }
}
