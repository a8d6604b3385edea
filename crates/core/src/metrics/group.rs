//! Per-group metrics: the gauges ARC users know from its `gha_*` names (assigned, running,
//! registered, busy, idle, pending, desired, min, max) and one latency histogram per stage of a
//! job's way from the forge's queue to its end.
//!
//! Group gauges are exported by the leader only: [`GroupMetrics::clear_gauges`] runs when a term
//! ends, so a deposed leader's stale values never add up with the new leader's on a dashboard.
//! The stage histograms and job counters are cumulative and stay (each process counts what it
//! saw).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of the per-group metrics. Cardinality is the number of groups.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct GroupLabels {
    /// The forge (`spec.forge`).
    pub forge: &'static str,
    /// Namespace of the group.
    pub namespace: String,
    /// Name of the group.
    pub group: String,
}

/// One stage of a job's way through the operator, each a histogram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Queued at the forge (the forge's own timestamp) → first seen by the operator.
    QueuedToSeen,
    /// First seen by the operator → its runner Job created.
    SeenToRunner,
    /// Runner Job created → its pod running (ready).
    RunnerToPodRunning,
    /// Runner pod running → the forge reports the job started on it.
    PodRunningToJobStarted,
    /// Job started → job finished.
    JobExecution,
}

impl Stage {
    /// Every stage, in the order a job goes through them.
    pub const ALL: [Stage; 5] = [
        Stage::QueuedToSeen,
        Stage::SeenToRunner,
        Stage::RunnerToPodRunning,
        Stage::PodRunningToJobStarted,
        Stage::JobExecution,
    ];

    /// Metric name without the `forgerunner_` prefix and the `_seconds` unit.
    pub fn metric_name(self) -> &'static str {
        match self {
            Stage::QueuedToSeen => "job_queued_to_seen",
            Stage::SeenToRunner => "job_seen_to_runner",
            Stage::RunnerToPodRunning => "runner_created_to_running",
            Stage::PodRunningToJobStarted => "runner_running_to_job_started",
            Stage::JobExecution => "job_execution",
        }
    }
}

/// The gauge values of one group after a pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupGauges {
    /// Jobs the forge has for the group: waiting plus running (ARC `gha_assigned_jobs`).
    pub assigned_jobs: u32,
    /// Jobs running on our runners (ARC `gha_running_jobs`).
    pub running_jobs: u32,
    /// Runners the forge knows as registered: idle, busy or offline (ARC `gha_registered_runners`).
    pub registered_runners: u32,
    /// Runners working on a job (ARC `gha_busy_runners`).
    pub busy_runners: u32,
    /// Runners registered and waiting for a job (ARC `gha_idle_runners`).
    pub idle_runners: u32,
    /// Runner Jobs whose pod is not running yet.
    pub pending_runners: u32,
    /// Runners the demand asks for (ARC `gha_desired_runners`).
    pub desired_runners: u32,
    /// `spec.minRunners` (ARC `gha_min_runners`).
    pub min_runners: u32,
    /// `spec.maxRunners` (ARC `gha_max_runners`).
    pub max_runners: u32,
}

/// The per-group gauges and stage histograms.
#[derive(Debug)]
pub struct GroupMetrics {
    /// Jobs the forge has for the group, waiting or running.
    pub assigned_jobs: Family<GroupLabels, Gauge>,
    /// Jobs running on the group's runners.
    pub running_jobs: Family<GroupLabels, Gauge>,
    /// Runners of the group registered at the forge.
    pub registered_runners: Family<GroupLabels, Gauge>,
    /// Runners of the group working on a job.
    pub busy_runners: Family<GroupLabels, Gauge>,
    /// Runners of the group registered and waiting for a job.
    pub idle_runners: Family<GroupLabels, Gauge>,
    /// Runner Jobs of the group whose pod is not running yet.
    pub pending_runners: Family<GroupLabels, Gauge>,
    /// Runners the group's demand asks for.
    pub desired_runners: Family<GroupLabels, Gauge>,
    /// spec.minRunners of the group.
    pub min_runners: Family<GroupLabels, Gauge>,
    /// spec.maxRunners of the group.
    pub max_runners: Family<GroupLabels, Gauge>,
    /// Seconds the oldest job waiting for the group has waited; 0 when none waits
    /// (`reconcile::stalled`).
    pub oldest_waiting_job_seconds: Family<GroupLabels, Gauge>,
    /// The runner releases the group runs ([`super::versions`]).
    pub runner_versions: super::versions::RunnerVersionSeries,
    /// Runners of each class of the group's `spec.classes` ([`super::classes`]).
    pub class_runners: super::classes::ClassSeries,
    /// Stage `QueuedToSeen` in seconds.
    pub job_queued_to_seen: Family<GroupLabels, Histogram>,
    /// Stage `SeenToRunner` in seconds.
    pub job_seen_to_runner: Family<GroupLabels, Histogram>,
    /// Stage `RunnerToPodRunning` in seconds.
    pub runner_created_to_running: Family<GroupLabels, Histogram>,
    /// Stage `PodRunningToJobStarted` in seconds.
    pub runner_running_to_job_started: Family<GroupLabels, Histogram>,
    /// Stage `JobExecution` in seconds.
    pub job_execution: Family<GroupLabels, Histogram>,
}

/// 50 ms … ~7 h: a pod start takes seconds, a job may run for hours.
pub(crate) fn stage_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.05, 2.0, 20))
}

impl Default for GroupMetrics {
    /// Unregistered metrics.
    fn default() -> Self {
        GroupMetrics {
            assigned_jobs: Family::default(),
            running_jobs: Family::default(),
            registered_runners: Family::default(),
            busy_runners: Family::default(),
            idle_runners: Family::default(),
            pending_runners: Family::default(),
            desired_runners: Family::default(),
            min_runners: Family::default(),
            max_runners: Family::default(),
            oldest_waiting_job_seconds: Family::default(),
            runner_versions: Default::default(),
            class_runners: Default::default(),
            job_queued_to_seen: Family::new_with_constructor(stage_histogram),
            job_seen_to_runner: Family::new_with_constructor(stage_histogram),
            runner_created_to_running: Family::new_with_constructor(stage_histogram),
            runner_running_to_job_started: Family::new_with_constructor(stage_histogram),
            job_execution: Family::new_with_constructor(stage_histogram),
        }
    }
}

impl GroupMetrics {
    /// Registers every family in `r` (already prefixed `forgerunner`).
    pub fn register(&self, r: &mut Registry) {
        let m = self;
        r.register(
            "assigned_jobs",
            "Jobs the forge has for the group, waiting or running",
            m.assigned_jobs.clone(),
        );
        r.register(
            "running_jobs",
            "Jobs running on the group's runners",
            m.running_jobs.clone(),
        );
        r.register(
            "registered_runners",
            "Runners of the group registered at the forge",
            m.registered_runners.clone(),
        );
        r.register(
            "busy_runners",
            "Runners of the group working on a job",
            m.busy_runners.clone(),
        );
        r.register(
            "idle_runners",
            "Runners of the group registered and waiting for a job",
            m.idle_runners.clone(),
        );
        r.register(
            "pending_runners",
            "Runner Jobs of the group whose pod is not running yet",
            m.pending_runners.clone(),
        );
        r.register(
            "desired_runners",
            "Runners the group's demand asks for",
            m.desired_runners.clone(),
        );
        r.register(
            "min_runners",
            "spec.minRunners of the group",
            m.min_runners.clone(),
        );
        r.register(
            "max_runners",
            "spec.maxRunners of the group",
            m.max_runners.clone(),
        );
        r.register(
            "oldest_waiting_job_seconds",
            "Seconds the oldest job waiting for the group has waited (0 when none waits)",
            m.oldest_waiting_job_seconds.clone(),
        );
        r.register(
            "runner_version_info",
            "Runner releases of the group: its image's tag (source=image, 1) and what its runners \
             report to the forge (source=forge, runners reporting it)",
            m.runner_versions.family.clone(),
        );
        r.register(
            "class_runners",
            "Runners of each class of the group's spec.classes (pending, running or terminating)",
            m.class_runners.family.clone(),
        );
        r.register(
            "job_queued_to_seen_seconds",
            "Seconds from a job queued at the forge to the operator seeing it",
            m.job_queued_to_seen.clone(),
        );
        r.register(
            "job_seen_to_runner_seconds",
            "Seconds from the operator seeing a job to creating its runner Job",
            m.job_seen_to_runner.clone(),
        );
        r.register(
            "runner_created_to_running_seconds",
            "Seconds from a runner Job created to its pod running",
            m.runner_created_to_running.clone(),
        );
        r.register(
            "runner_running_to_job_started_seconds",
            "Seconds from a runner pod running to the forge starting a job on it",
            m.runner_running_to_job_started.clone(),
        );
        r.register(
            "job_execution_seconds",
            "Seconds a job ran on a forgerunner runner",
            m.job_execution.clone(),
        );
    }

    fn gauges(&self) -> [&Family<GroupLabels, Gauge>; 9] {
        [
            &self.assigned_jobs,
            &self.running_jobs,
            &self.registered_runners,
            &self.busy_runners,
            &self.idle_runners,
            &self.pending_runners,
            &self.desired_runners,
            &self.min_runners,
            &self.max_runners,
        ]
    }

    fn stage(&self, stage: Stage) -> &Family<GroupLabels, Histogram> {
        match stage {
            Stage::QueuedToSeen => &self.job_queued_to_seen,
            Stage::SeenToRunner => &self.job_seen_to_runner,
            Stage::RunnerToPodRunning => &self.runner_created_to_running,
            Stage::PodRunningToJobStarted => &self.runner_running_to_job_started,
            Stage::JobExecution => &self.job_execution,
        }
    }

    /// Sets the gauges of one group.
    pub fn set_gauges(&self, labels: &GroupLabels, values: &GroupGauges) {
        for (family, v) in self.gauges().into_iter().zip(values.values()) {
            family.get_or_create(labels).set(i64::from(v));
        }
    }

    /// Sets how long the oldest job waiting for one group has waited.
    pub fn set_oldest_waiting(&self, labels: &GroupLabels, seconds: u64) {
        self.oldest_waiting_job_seconds
            .get_or_create(labels)
            .set(i64::try_from(seconds).unwrap_or(i64::MAX));
    }

    /// Drops the gauges of one group (deleted).
    pub fn remove_group(&self, labels: &GroupLabels) {
        for family in self.gauges() {
            family.remove(labels);
        }
        self.oldest_waiting_job_seconds.remove(labels);
        self.runner_versions.remove_group(labels);
        self.class_runners.remove_group(labels);
    }

    /// Drops the gauges of every group (leadership lost: the new leader exports them).
    pub fn clear_gauges(&self) {
        for family in self.gauges() {
            family.clear();
        }
        self.oldest_waiting_job_seconds.clear();
        self.runner_versions.clear();
        self.class_runners.clear();
    }

    /// Records one stage duration.
    pub fn observe(&self, stage: Stage, labels: &GroupLabels, seconds: f64) {
        self.stage(stage).get_or_create(labels).observe(seconds.max(0.0));
    }
}

impl GroupGauges {
    /// The values in [`GroupMetrics::gauges`] order.
    fn values(&self) -> [u32; 9] {
        [
            self.assigned_jobs,
            self.running_jobs,
            self.registered_runners,
            self.busy_runners,
            self.idle_runners,
            self.pending_runners,
            self.desired_runners,
            self.min_runners,
            self.max_runners,
        ]
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;

    use super::*;

    fn labels(group: &str) -> GroupLabels {
        GroupLabels {
            forge: "gitea",
            namespace: "ci".into(),
            group: group.into(),
        }
    }

    fn scrape(m: &GroupMetrics) -> String {
        let mut reg = Registry::default();
        m.register(reg.sub_registry_with_prefix("forgerunner"));
        let mut out = String::new();
        encode(&mut out, &reg).expect("encode");
        out
    }

    #[test]
    fn gauges_set_and_clear() {
        let m = GroupMetrics::default();
        let v = GroupGauges {
            assigned_jobs: 3,
            max_runners: 7,
            ..GroupGauges::default()
        };
        m.set_gauges(&labels("a"), &v);
        m.set_gauges(&labels("b"), &v);
        m.set_oldest_waiting(&labels("a"), 620);
        m.set_oldest_waiting(&labels("b"), 0);
        let text = scrape(&m);
        assert!(text.contains(
            r#"forgerunner_oldest_waiting_job_seconds{forge="gitea",namespace="ci",group="a"} 620"#
        ));
        assert!(text.contains(r#"forgerunner_assigned_jobs{forge="gitea",namespace="ci",group="a"} 3"#));
        assert!(text.contains(r#"forgerunner_max_runners{forge="gitea",namespace="ci",group="b"} 7"#));
        m.remove_group(&labels("a"));
        let text = scrape(&m);
        assert!(!text.contains(r#"group="a""#) && text.contains(r#"group="b""#));
        m.clear_gauges();
        assert!(!scrape(&m).contains("group="), "no gauge sample is left");
    }

    #[test]
    fn stages_have_their_names() {
        let m = GroupMetrics::default();
        for s in Stage::ALL {
            m.observe(s, &labels("a"), 1.5);
        }
        m.observe(Stage::JobExecution, &labels("a"), -3.0);
        let text = scrape(&m);
        for s in Stage::ALL {
            let count = format!(
                "forgerunner_{}_seconds_count{{forge=\"gitea\",namespace=\"ci\",group=\"a\"}}",
                s.metric_name()
            );
            assert!(text.contains(&count), "{count} missing in {text}");
        }
        assert!(text.contains(
            r#"forgerunner_job_execution_seconds_sum{forge="gitea",namespace="ci",group="a"} 1.5"#
        ));
    }
}
