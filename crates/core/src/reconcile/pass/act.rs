//! Act: carry out the plan against the cluster and the forge, then book what was written.

use std::time::Instant;

use kube::api::Api;
use tracing::warn;

use super::decide::Decided;
use super::dereference::Found;
use super::observe::Seen;
use crate::crd::RunnerGroup;
use crate::names::runner_name;
use crate::reconcile::apply::{ApplyReport, NewRunner, Target, apply_plan};
use crate::reconcile::context::Context;
use crate::reconcile::hook_leftovers;
use crate::reconcile::identity::spawn_record_identities;
use crate::reconcile::ledger::{Ledger, Reservations, Upkeep};
use crate::reconcile::pass_metrics::job_identity;
use crate::reconcile::repair::retire_runners_without_secret;
use crate::reconcile::rerun;

/// Applies the plan; every write is attempted even when an earlier one failed
/// ([`ApplyReport::first_error`] says what went wrong).
pub(super) async fn act(
    ctx: &Context,
    group: &RunnerGroup,
    found: &Found,
    seen: &Seen,
    decided: &Decided,
    ledger: &mut Ledger,
) -> ApplyReport {
    let key = &found.group.key;
    let check_pod_security = ledger.upkeep.pod_security_checked != group.metadata.generation;
    let target = Target {
        jobs: Api::namespaced(ctx.client.clone(), &key.namespace),
        secrets: Api::namespaced(ctx.client.clone(), &key.namespace),
        pods: Api::namespaced(ctx.client.clone(), &key.namespace),
        forge: found.session.as_ref(),
        profile: &found.profile,
        fence: &ctx.fence,
        create_permits: &ctx.create_permits,
        forge_deadline: ctx.forge_deadline,
        group: &found.group,
        observed: &seen.jobs,
        killed: &seen.killed,
        check_pod_security,
        identities: &decided.identities,
        registrations: &ledger.registrations,
        connected: &ledger.connected,
    };
    let retired = retire_once(&target, &mut ledger.upkeep).await;
    let new_runners = new_runners(found, seen, decided, &mut ledger.reservations);
    let mut report = apply_plan(&target, &decided.plan, &new_runners).await;
    let disrupted: Vec<_> = report
        .disrupted
        .iter()
        .map(|(runner, how)| (runner.clone(), *how, job_identity(&seen.view, &seen.jobs, runner)))
        .collect();
    if !disrupted.is_empty() || ledger.reruns.next_due(Instant::now()).is_some() {
        rerun::after_disruptions(
            ctx,
            group,
            found.session.as_ref(),
            &found.group,
            &disrupted,
            &mut ledger.reruns,
        )
        .await;
    }
    spawn_record_identities(
        target.jobs.clone(),
        target.pods.clone(),
        key.clone(),
        decided.identities.clone(),
        decided.plan.mark_busy.clone(),
        ledger.identity_writes.clone(),
    );
    report.deleted.extend(retired);
    let runner_went = !report.deleted.is_empty();
    sweep_hook_leftovers(found, &target, runner_went, &mut ledger.upkeep).await;
    if report.first_error.is_some() {
        ledger.upkeep.secrets_checked = false;
    }
    if check_pod_security && !report.created.is_empty() {
        ledger.upkeep.pod_security_checked = group.metadata.generation;
    }
    for r in &report.registered {
        ledger.registrations.record(&r.runner, &r.annotations, r.at);
    }
    settle_reservations(&new_runners, &report, ledger);
    ledger.writes.record(&report.created, &report.deleted);
    ledger.classes.record(&report.created_classes, &report.deleted);
    report
}

/// The runners the plan makes, one per class it creates, each named and bound to the job the
/// group's reservations give it (where the forge binds runners to jobs).
fn new_runners(
    found: &Found,
    seen: &Seen,
    decided: &Decided,
    reservations: &mut Reservations,
) -> Vec<NewRunner> {
    let now = Instant::now();
    let group = &found.group;
    decided
        .plan
        .create_classes
        .iter()
        .map(|class| {
            let name = runner_name(&group.key.name);
            let job = reservations.reserve(&group.group.spec, &seen.view, class.as_deref(), &name, now);
            NewRunner {
                name,
                class: class.clone(),
                job,
            }
        })
        .collect()
}

/// Frees the jobs reserved for runners that were not made, and backs off the jobs the forge
/// withholds.
fn settle_reservations(new_runners: &[NewRunner], report: &ApplyReport, ledger: &mut Ledger) {
    for new in new_runners.iter().filter(|n| report.unmade.contains(&n.name)) {
        if let Some(binding) = new.job.as_ref().and_then(|j| j.binding.as_deref()) {
            ledger.reservations.release(binding);
        }
    }
    let now = Instant::now();
    for binding in &report.withheld {
        ledger.reservations.withhold(binding, now);
    }
}

/// Retires pending runners whose Secret is missing, once per process and after a failed pass:
/// a predecessor killed between a runner's Job and its Secret, or a failed pass whose Secret
/// write and undo both failed, leaves a Job that can never start.
async fn retire_once(target: &Target<'_>, upkeep: &mut Upkeep) -> Vec<String> {
    if upkeep.secrets_checked {
        return Vec::new();
    }
    match retire_runners_without_secret(target).await {
        Ok(names) => {
            upkeep.secrets_checked = true;
            names
        }
        Err(e) => {
            warn!(group = %target.group.key, error = %e, "could not check runner Secrets; retrying next pass");
            Vec::new()
        }
    }
}

/// In the container modes where runner pods make job pods of their own (the forge gives the
/// runners permissions), deletes what the hooks left of runner pods that are gone: at once when
/// a runner went this pass, otherwise every [`hook_leftovers::SWEEP_EVERY`].
async fn sweep_hook_leftovers(found: &Found, target: &Target<'_>, runner_went: bool, upkeep: &mut Upkeep) {
    if found.profile.runner_role_rules.is_empty() {
        return;
    }
    let now = Instant::now();
    if upkeep.hook_sweep.due(runner_went, now) {
        upkeep.hook_sweep.swept(now);
        hook_leftovers::sweep(&target.pods, &target.secrets, &found.group.key.name).await;
    }
}
