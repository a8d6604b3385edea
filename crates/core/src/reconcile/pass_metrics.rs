//! What one pass tells the metrics: the group's gauges (leader only), the job counters and the
//! latency per stage ([`super::stage_track`]).

use std::sync::Arc;

use jiff::Timestamp;

use super::context::Context;
use super::pipeline::group_key;
use super::stage_track::{StageSamples, StageTracker};
use super::status::PassSummary;
use crate::crd::RunnerGroup;
use crate::forge::{ForgeRunnerState, ForgeView, GroupKey};
use crate::job_identity::JobIdentity;
use crate::metrics::{GroupGauges, GroupLabels, JobLabels, JobSeriesBook, RunnerLabels};
use crate::plan::ObservedRunner;
use crate::runner_job::ObservedJob;

/// States of the older `forgerunner_runners` gauge.
const RUNNER_STATES: [&str; 4] = ["idle", "busy", "pending", "failed"];

/// The labels of a group's metrics.
pub(super) fn group_labels(forge: &'static str, key: &GroupKey) -> GroupLabels {
    GroupLabels {
        forge,
        namespace: key.namespace.clone(),
        group: key.name.clone(),
    }
}

/// The ARC gauge values of a pass.
pub fn group_gauges(
    group: &RunnerGroup,
    observed: &[ObservedRunner],
    view: &ForgeView,
    s: &PassSummary,
) -> GroupGauges {
    let registered = observed
        .iter()
        .filter(|r| {
            matches!(
                r.forge_state,
                ForgeRunnerState::Idle | ForgeRunnerState::Busy | ForgeRunnerState::Offline
            )
        })
        .count();
    GroupGauges {
        assigned_jobs: view.waiting_jobs.saturating_add(s.counts.running_jobs),
        running_jobs: s.counts.running_jobs,
        registered_runners: u32::try_from(registered).unwrap_or(u32::MAX),
        busy_runners: s.counts.running_jobs,
        idle_runners: s.counts.idle.saturating_sub(s.counts.pending_runners),
        pending_runners: s.counts.pending_runners,
        desired_runners: s.counts.desired,
        min_runners: s
            .schedule
            .as_ref()
            .map_or(group.spec.min_runners, |w| w.min_runners),
        max_runners: s
            .schedule
            .as_ref()
            .map_or(group.spec.max_runners, |w| w.max_runners),
    }
}

/// What the latency per stage learns from one pass ([`StageTracker::pass`]).
pub(super) fn stage_samples(
    stages: &mut StageTracker,
    jobs: &[Arc<ObservedJob>],
    observed: &[ObservedRunner],
    view: &ForgeView,
    created: u32,
    now: Timestamp,
) -> StageSamples {
    let created_at = |name: &str| {
        jobs.iter()
            .find(|j| j.metadata.name.as_deref() == Some(name))
            .and_then(|j| j.metadata.creation_timestamp.as_ref())
            .map(|t| t.0)
    };
    stages.pass(&view.waiting, observed, created as usize, created_at, now)
}

/// Counts the jobs the pass saw start and complete, by the job's repository and workflow where
/// configured (at most [`crate::metrics::job::MAX_JOB_SERIES_PER_GROUP`] pairs per group).
pub(super) fn count_jobs(
    ctx: &Context,
    group: &RunnerGroup,
    jobs: &[Arc<ObservedJob>],
    view: &ForgeView,
    samples: &StageSamples,
    series: &mut JobSeriesBook,
) {
    let labels = group_labels(group.spec.forge.as_str(), &group_key(group));
    let m = &ctx.metrics;
    // The per-group series exist from the first pass, so a dashboard's rate() has a start.
    let base = JobLabels::of(&labels, None, false);
    m.jobs_started.get_or_create(&base).inc_by(0);
    m.jobs_completed.get_or_create(&base).inc_by(0);
    let identity = |runner: &str| job_identity(view, jobs, runner);
    let mut job_labels = |runner: &str| {
        series.admit(JobLabels::of(
            &labels,
            identity(runner).as_ref(),
            m.job_identity_labels,
        ))
    };
    for runner in &samples.started {
        m.jobs_started.get_or_create(&job_labels(runner)).inc();
    }
    for runner in &samples.completed {
        m.jobs_completed.get_or_create(&job_labels(runner)).inc();
    }
}

/// Records everything a successful pass observed.
pub(super) fn record_pass(
    ctx: &Context,
    group: &RunnerGroup,
    observed: &[ObservedRunner],
    view: &ForgeView,
    s: &PassSummary,
    samples: StageSamples,
) {
    let forge = group.spec.forge.as_str();
    let key = &group_key(group);
    let labels = group_labels(forge, key);
    let m = &ctx.metrics;
    for (stage, secs) in samples.stages {
        m.group.observe(stage, &labels, secs);
    }
    for secs in samples.queue_to_runner {
        m.job_queue_to_runner.get_or_create(&labels).observe(secs);
    }
    // A pass still running after leadership was lost must not bring back the gauges the term's
    // end cleared.
    if ctx.fence.is_held() {
        set_runner_gauges(ctx, key, forge, s);
        m.group
            .set_gauges(&labels, &group_gauges(group, observed, view, s));
        m.group.class_runners.set(&labels, &s.classes);
    }
}

/// The job a runner runs or ran: as the forge tells it this pass, else as recorded on the
/// runner Job (a finished runner's job is no longer in the forge's view).
pub(super) fn job_identity(view: &ForgeView, jobs: &[Arc<ObservedJob>], runner: &str) -> Option<JobIdentity> {
    if let Some(id) = view.job_identities.get(runner) {
        return Some(id.clone());
    }
    let job = jobs.iter().find(|j| j.metadata.name.as_deref() == Some(runner))?;
    let id = JobIdentity::from_annotations(job.metadata.annotations.as_ref()?);
    (!id.is_empty()).then_some(id)
}

fn set_runner_gauges(ctx: &Context, key: &GroupKey, forge: &'static str, s: &PassSummary) {
    let values: [i64; 4] = [
        i64::from(s.counts.idle),
        i64::from(s.counts.running_jobs),
        i64::from(s.counts.pending_runners),
        i64::from(s.failed_runners),
    ];
    for (state, v) in RUNNER_STATES.into_iter().zip(values) {
        let labels = RunnerLabels {
            forge,
            group: key.to_string(),
            state,
        };
        ctx.metrics.runners.get_or_create(&labels).set(v);
    }
}

/// Drops the gauges of a deleted group.
pub(super) fn clear_runner_gauges(ctx: &Context, key: &GroupKey, forge: &'static str) {
    for state in RUNNER_STATES {
        ctx.metrics.runners.remove(&RunnerLabels {
            forge,
            group: key.to_string(),
            state,
        });
    }
    ctx.metrics.group.remove_group(&group_labels(forge, key));
}
