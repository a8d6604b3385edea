//! Report: what the pass did, told in metrics, Events and the status; and when the next pass is
//! due.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use tracing::{info, warn};

use super::decide::Decided;
use super::dereference::Found;
use super::observe::Seen;
use crate::conditions::{GroupCondition, transitions};
use crate::crd::{RunnerGroup, RunnerGroupStatus};
use crate::metrics::ForgeLabels;
use crate::plan::FAILURE_THROTTLE_THRESHOLD;
use crate::reconcile::FIELD_MANAGER;
use crate::reconcile::apply::ApplyReport;
use crate::reconcile::classes::class_statuses;
use crate::reconcile::context::Context;
use crate::reconcile::error::ReconcileError;
use crate::reconcile::events;
use crate::reconcile::ledger::{Ledger, StatusBook};
use crate::reconcile::pass_metrics::{count_jobs, group_labels, record_pass, stage_samples};
use crate::reconcile::pipeline::group_key;
use crate::reconcile::stalled::{Oldest, Signals, WaitBook, queue_condition, stall_began};
use crate::reconcile::status::{
    PassSummary, build_status, outdated_persists, runner_started_since, startup_failure_persists,
    success_conditions,
};
use crate::reconcile::status_write::{StatusWrite, status_write};
use crate::runner_version::{currency, outdated_condition};

/// Reports the pass and returns the first error the act step met, or when to come back.
pub(super) async fn report(
    ctx: &Context,
    group: &RunnerGroup,
    found: &Found,
    seen: &Seen,
    decided: Decided,
    mut done: ApplyReport,
    ledger: &mut Ledger,
) -> Result<Action, ReconcileError> {
    count_runners(ctx, group, &done);
    budget_event(ctx, group, seen, &decided, &mut ledger.budget_throttled).await;
    let mut summary = summarize(group, seen, &decided, &done);
    summary.cache.clone_from(&found.cache);
    record_metrics(ctx, group, seen, &summary, ledger);
    publish_events(ctx, group, seen, &decided, &summary, &done, ledger).await;
    let may_defer = done.first_error.is_none();
    let mut conditions = success_conditions(&summary);
    conditions.push(watch_queue(
        ctx,
        group,
        decided.oldest.as_ref(),
        &summary,
        &decided,
        &done,
        seen.now,
    ));
    conditions.extend(currency(&seen.view.versions).map(|c| outdated_condition(&c)));
    let deferred = write_status(
        ctx,
        group,
        &conditions,
        Some(&summary),
        may_defer,
        &mut ledger.status,
    )
    .await;
    match done.first_error.take() {
        Some(e) => Err(e),
        None => Ok(next_pass(found, &decided, deferred, ledger)),
    }
}

/// The pass's metrics: stage latencies, job counters, group gauges and runner versions.
fn record_metrics(
    ctx: &Context,
    group: &RunnerGroup,
    seen: &Seen,
    summary: &PassSummary,
    ledger: &mut Ledger,
) {
    let samples = stage_samples(
        &mut ledger.stages,
        &seen.jobs,
        &seen.runners,
        &seen.view,
        summary.created,
        seen.now,
    );
    count_jobs(
        ctx,
        group,
        &seen.jobs,
        &seen.view,
        &samples,
        &mut ledger.job_series,
    );
    record_pass(ctx, group, &seen.runners, &seen.view, summary, samples);
    let labels = group_labels(group.spec.forge.as_str(), &group_key(group));
    ctx.metrics
        .group
        .runner_versions
        .set(&labels, &seen.view.versions);
}

/// The pass's Events, except those of condition transitions (published with the status).
async fn publish_events(
    ctx: &Context,
    group: &RunnerGroup,
    seen: &Seen,
    decided: &Decided,
    summary: &PassSummary,
    done: &ApplyReport,
    ledger: &mut Ledger,
) {
    events::scaling(ctx, group, summary, done).await;
    events::waiting_out(ctx, group, &decided.plan.waiting_out).await;
    let threshold = group.spec.stalled_job_seconds();
    for job in ledger
        .waits
        .unmatched_due(&seen.view.unmatched, threshold, seen.now)
    {
        events::unmatched_job(ctx, group, job).await;
    }
    if !done.pod_security.is_empty() {
        events::pod_security(ctx, group, &done.pod_security).await;
    }
}

/// When the next pass is due: the forge's resync, or sooner for a deferred status write, a
/// surplus runner's quiet period, a schedule change or a re-run to ask again.
fn next_pass(found: &Found, decided: &Decided, deferred: Option<Duration>, ledger: &Ledger) -> Action {
    let regular = found.profile.resync_interval;
    let rerun_due = ledger.reruns.next_due(std::time::Instant::now());
    let sooner = [
        deferred,
        decided.surplus_due_in,
        decided.schedule_due_in,
        rerun_due,
    ]
    .into_iter()
    .flatten()
    .min();
    Action::requeue(sooner.map_or(regular, |d| d.min(regular)))
}

/// What the status says of a pass that reached the forge.
fn summarize(group: &RunnerGroup, seen: &Seen, decided: &Decided, done: &ApplyReport) -> PassSummary {
    let prev = group.status.as_ref();
    let generation = group.metadata.generation;
    let plan = &decided.plan;
    let failed_now = u32::try_from(done.failed_deleted.len()).unwrap_or(u32::MAX);
    let recovered_since = |since: jiff::Timestamp| {
        done.succeeded_deleted > 0 || runner_started_since(&seen.runners, since, seen.now)
    };
    let waiting_out = plan
        .waiting_out
        .first()
        .map(|(_, stuck)| (stuck.cause, stuck.message.clone()));
    // A runner kept while its job waits says itself what holds it up; a failure condition from
    // an earlier pass is not carried over meanwhile.
    let startup_failure = done
        .stuck
        .last()
        .map(|(_, cause, msg)| (*cause, msg.clone()))
        .or_else(|| {
            waiting_out
                .is_none()
                .then(|| startup_failure_persists(prev, generation, recovered_since))
                .flatten()
        });
    PassSummary {
        startup_failure,
        waiting_out,
        failed_now,
        counts: plan.counts,
        facts: seen.view.facts.clone(),
        failed_runners: decided.failures.next_count(done.succeeded_deleted, failed_now),
        created: u32::try_from(done.created.len()).unwrap_or(u32::MAX),
        scaled_down: done.scaled_down,
        throttled: plan.throttled,
        at_max: plan.at_max,
        apply_error: done.first_error.as_ref().map(|e| (e.category(), e.to_string())),
        runner_outdated: !done.outdated.is_empty()
            || outdated_persists(prev, generation, done.succeeded_deleted),
        schedule: decided
            .schedule
            .as_ref()
            .map(|s| s.status(group.spec.min_runners, group.spec.max_runners)),
        // Set by `report` from what the dereference step kept.
        cache: None,
        classes: class_statuses(&group.spec, &seen.runners, &decided.runner_classes),
    }
}

/// Counts the runners the pass created and removed.
fn count_runners(ctx: &Context, group: &RunnerGroup, done: &ApplyReport) {
    let forge = ForgeLabels {
        forge: group.spec.forge.as_str(),
    };
    let created = u64::try_from(done.created.len()).unwrap_or(u64::MAX);
    let removed = u64::try_from(done.deleted.len()).unwrap_or(u64::MAX);
    ctx.metrics.runners_created.get_or_create(&forge).inc_by(created);
    ctx.metrics.runners_removed.get_or_create(&forge).inc_by(removed);
}

/// Logs a creation the API budget cut, and publishes an Event when such cuts start.
async fn budget_event(
    ctx: &Context,
    group: &RunnerGroup,
    seen: &Seen,
    decided: &Decided,
    was_cut: &mut bool,
) {
    let planned = decided.plan.cut_by_budget;
    let started = planned.is_some() && !*was_cut;
    *was_cut = planned.is_some();
    let Some(planned) = planned else {
        return;
    };
    let budget = seen.view.budget;
    let (remaining, limit) = budget.map_or((0, 0), |b| (b.remaining, b.limit));
    let reset = budget
        .and_then(|b| b.reset)
        .map_or_else(|| "unknown".to_owned(), |r| r.to_string());
    let allowed = decided.plan.create;
    info!(group = %group_key(group), planned, allowed, remaining, limit, reset = %reset,
        "forge API budget low: creating fewer runners");
    if started {
        let note = format!(
            "forge API budget low ({remaining} of {limit} requests left, reset at {reset}): creating \
             {allowed} of {planned} runners this pass until the budget recovers"
        );
        events::publish(
            ctx,
            group,
            EventType::Warning,
            "ApiBudgetLow",
            "CreateRunners",
            note,
        )
        .await;
    }
}

/// Writes the status by server-side apply and publishes Events for condition transitions.
/// Failures are logged, not returned: the next pass writes the status again.
///
/// With `may_defer`, a change of counts or messages only shortly after the last write is left to
/// a later pass ([`crate::reconcile::status_write`]); the returned delay is when that pass
/// should run.
pub(super) async fn write_status(
    ctx: &Context,
    group: &RunnerGroup,
    conds: &[GroupCondition],
    pass: Option<&PassSummary>,
    may_defer: bool,
    book: &mut StatusBook,
) -> Option<Duration> {
    let now = Time(jiff::Timestamp::now());
    let prev: Option<&RunnerGroupStatus> = group.status.as_ref();
    let status = build_status(prev, group.metadata.generation, conds, pass, &now);
    let old = prev.map(|s| s.conditions.clone()).unwrap_or_default();
    let changed: Vec<_> = transitions(&old, &status.conditions)
        .into_iter()
        .cloned()
        .collect();
    let since_last_write = if may_defer { book.since_last_write() } else { None };
    match status_write(prev, &status, since_last_write) {
        StatusWrite::Skip => return None,
        StatusWrite::Defer(delay) => return Some(delay),
        StatusWrite::Now => {}
    }
    let api: Api<RunnerGroup> = Api::namespaced(ctx.client.clone(), &group.namespace().unwrap_or_default());
    let body = serde_json::json!({
        "apiVersion": RunnerGroup::api_version(&()),
        "kind": RunnerGroup::kind(&()),
        "status": status,
    });
    let params = PatchParams::apply(FIELD_MANAGER).force();
    if let Err(e) = api
        .patch_status(&group.name_any(), &params, &Patch::Apply(&body))
        .await
    {
        warn!(group = %group_key(group), error = %e, "status update failed");
        book.write_failed();
        return None;
    }
    let began = stall_began(&old, &status.conditions).cloned();
    book.wrote(group.metadata.resource_version.clone(), status);
    events::transitions(ctx, group, &changed).await;
    if let Some(stalled) = began {
        events::queue_stalled(ctx, group, &stalled).await;
    }
    None
}

/// `QueueStalled` after a pass that reached the forge, and the oldest-waiting gauge.
fn watch_queue(
    ctx: &Context,
    group: &RunnerGroup,
    oldest: Option<&Oldest>,
    summary: &PassSummary,
    decided: &Decided,
    done: &ApplyReport,
    now: jiff::Timestamp,
) -> GroupCondition {
    let signals = Signals {
        error: done.first_error.as_ref().map(ReconcileError::category),
        budget_cut: decided.plan.cut_by_budget.is_some(),
        runners_failing: summary.startup_failure.is_some()
            || summary.waiting_out.is_some()
            || summary.throttled
            || summary.runner_outdated
            || summary.failed_runners >= FAILURE_THROTTLE_THRESHOLD,
        at_max: summary.at_max,
    };
    set_oldest_waiting(ctx, group, oldest, now);
    queue_condition(oldest, group.spec.stalled_job_seconds(), &signals, now)
}

/// `QueueStalled` after a pass that failed with `category`, from the waiting jobs the group's
/// last successful observation showed (`None` when it showed none: nothing is known to wait).
/// A forge that stops answering leaves those jobs waiting: their wait keeps growing, and the
/// stall is reported with the error as its cause.
pub(super) fn watch_queue_after_error(
    ctx: &Context,
    group: &RunnerGroup,
    category: crate::error::ErrorCategory,
    waits: &WaitBook,
) -> Option<GroupCondition> {
    let oldest = waits.oldest()?;
    let now = jiff::Timestamp::now();
    set_oldest_waiting(ctx, group, Some(&oldest), now);
    let signals = Signals {
        error: Some(category),
        ..Signals::default()
    };
    Some(queue_condition(
        Some(&oldest),
        group.spec.stalled_job_seconds(),
        &signals,
        now,
    ))
}

/// Sets `forgerunner_oldest_waiting_job_seconds` of the group (0 when no job waits), on the
/// leader only like the other group gauges.
fn set_oldest_waiting(ctx: &Context, group: &RunnerGroup, oldest: Option<&Oldest>, now: jiff::Timestamp) {
    if !ctx.fence.is_held() {
        return;
    }
    let labels = group_labels(group.spec.forge.as_str(), &group_key(group));
    let age = oldest.map_or(0, |o| o.age_seconds(now));
    ctx.metrics.group.set_oldest_waiting(&labels, age);
}
