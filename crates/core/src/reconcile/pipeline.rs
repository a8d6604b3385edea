//! One reconcile of one `RunnerGroup`: validate → forge → credentials → observe → plan → apply →
//! status, wrapped in the cleanup finalizer.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use tracing::{Instrument, debug, info, instrument, warn};

use super::apply::{Target, apply_plan};
use super::cleanup::{cleanup, needs_cleanup};
use super::context::{Context, USER_ACTION_RETRY, WrittenStatus, with_jitter};
use super::error::ReconcileError;
use super::events;
use super::hook_leftovers;
use super::identity::{identities_to_record, spawn_record_identities};
use super::observe::{belongs_to, observe_runners, runner_refs, with_forge_states};
use super::pass_metrics::record_pass;
use super::repair::retire_runners_without_secret;
use super::runner_rbac::{ensure_runner_rbac, must_reapply, rules_fingerprint};
use super::spans::forge_call;
use super::startup_check::find_stuck;
use super::status::{
    PassSummary, build_status, creation_held, error_conditions, failures_so_far, next_failure_count,
    outdated_persists, runner_started_since, startup_failure_persists, success_conditions,
};
use super::status_write::{StatusWrite, status_write};
use super::{FIELD_MANAGER, FINALIZER};
use crate::budget::creation_allowance;
use crate::conditions::{GroupCondition, transitions};
use crate::crd::{RunnerGroup, RunnerGroupStatus};
use crate::error::ErrorCategory;
use crate::forge::{
    CA_BUNDLE_KEY, Credentials, Forge, GroupContext, GroupKey, SecretValue, WEBHOOK_SECRET_KEY,
};
use crate::metrics::{ForgeLabels, ReconcileErrorLabels, ReconcileLabels};
use crate::names::group_name_problem;
use crate::plan::{PlanInput, plan};
use crate::runner_job::template_hash;
use crate::validate::validate_spec;

/// The group's identity.
pub(super) fn group_key(g: &RunnerGroup) -> GroupKey {
    GroupKey {
        namespace: g.namespace().unwrap_or_default(),
        name: g.name_any(),
    }
}

/// The controller's reconcile function. Its span names the group and forge, so every line
/// logged during the pass does too.
#[instrument(
    name = "reconcile",
    skip_all,
    fields(group = %group_key(&group), forge = group.spec.forge.as_str())
)]
pub async fn reconcile(group: Arc<RunnerGroup>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let started = Instant::now();
    let forge_label = group.spec.forge.as_str();
    ctx.metrics
        .reconciles
        .get_or_create(&ReconcileLabels { forge: forge_label })
        .inc();
    let ns = group.namespace().unwrap_or_default();
    let api: Api<RunnerGroup> = Api::namespaced(ctx.client.clone(), &ns);
    // Deletion is handled here rather than by `kube::runtime::finalizer`, which releases the
    // finalizer as soon as cleanup returns Ok: cleanup needs to keep it while the runner Jobs
    // disappear and while the forge gets its budget, without reporting a failure for it.
    let result = if needs_cleanup(&group) {
        cleanup(group, &ctx).await
    } else if group.metadata.deletion_timestamp.is_some() {
        Ok(Action::await_change())
    } else {
        match ensure_finalizer(&api, group).await {
            Ok(g) => apply(g, &ctx).await,
            Err(e) => Err(e),
        }
    };
    ctx.metrics
        .reconcile_duration
        .get_or_create(&ReconcileLabels { forge: forge_label })
        .observe(started.elapsed().as_secs_f64());
    result
}

/// Adds our finalizer to a live group that lacks it and returns the updated object.
///
/// `kube::runtime::finalizer` would do this itself, but with a JSON-patch `test` of a missing
/// path that not every API server implementation accepts; a merge patch guarded by the
/// resourceVersion is equally safe against lost updates and works everywhere. Continuing with
/// the returned object also saves a round trip through the watch.
async fn ensure_finalizer(
    api: &Api<RunnerGroup>,
    group: Arc<RunnerGroup>,
) -> Result<Arc<RunnerGroup>, ReconcileError> {
    if group.metadata.deletion_timestamp.is_some() || group.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(group);
    }
    if group_name_problem(&group.name_any()).is_some() {
        // Such a group never gets a runner (the pass stops at `InvalidSpec`), and a finalizer
        // would hold its deletion on a cleanup with nothing to clean.
        return Ok(group);
    }
    let mut finalizers = group.finalizers().to_vec();
    finalizers.push(FINALIZER.to_owned());
    let patch = serde_json::json!({
        "metadata": {"finalizers": finalizers, "resourceVersion": group.resource_version()}
    });
    let updated = api
        .patch(&group.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(ReconcileError::kube("add finalizer"))?;
    Ok(Arc::new(updated))
}

/// The controller's error policy: bounded retries by error category.
pub fn error_policy(group: Arc<RunnerGroup>, err: &ReconcileError, ctx: Arc<Context>) -> Action {
    let category = err.category();
    ctx.metrics
        .reconcile_errors
        .get_or_create(&ReconcileErrorLabels {
            forge: group.spec.forge.as_str(),
            category: category.as_str(),
        })
        .inc();
    let key = group_key(&group);
    let delay = ctx.record_failure(&key);
    warn!(group = %key, category = category.as_str(), error = %err, "reconcile failed");
    match category {
        // Only a spec change (or an operator restart with other forges) can help.
        ErrorCategory::InvalidSpec | ErrorCategory::ForgeDisabled | ErrorCategory::ForgeHostNotAllowed => {
            Action::await_change()
        }
        _ if category.needs_user_action() => Action::requeue(with_jitter(USER_ACTION_RETRY)),
        _ => Action::requeue(err.retry_after().map_or(delay, |d| d.max(delay))),
    }
}

/// Requeue after a successful pass: the forge's resync interval, or `sooner` when something is
/// due earlier (a deferred status write).
fn success_requeue(forge: &dyn Forge, group: &RunnerGroup, sooner: Option<Duration>) -> Action {
    let regular = forge.resync_interval(&group.spec);
    Action::requeue(sooner.map_or(regular, |d| d.min(regular)))
}

/// Checks the spec: the common rules, then the forge's own rules. An error here is what the
/// reconciler reports as `Ready=False` with reason `InvalidSpec` ([`super::status::error_conditions`]).
pub fn check_spec(group: &RunnerGroup, forge: Option<&dyn Forge>) -> Result<(), ReconcileError> {
    let mut msgs: Vec<String> = validate_spec(&group.spec)
        .iter()
        .chain(forge.map(|f| f.validate(&group.spec)).iter().flatten())
        .map(ToString::to_string)
        .collect();
    if let Some(problem) = group_name_problem(&group.name_any()) {
        msgs.push(format!("metadata.name: {problem}"));
    }
    if msgs.is_empty() {
        Ok(())
    } else {
        Err(ReconcileError::InvalidSpec(msgs.join("; ")))
    }
}

/// The group's forge, its spec checked (the common rules even when the forge is disabled) and
/// its URLs inside the operator's forge host allowlist. Cleanup goes through here too, so a
/// refused group is never sent a request, not even on deletion.
fn checked_forge<'a>(ctx: &'a Context, group: &RunnerGroup) -> Result<&'a dyn Forge, ReconcileError> {
    let forge = ctx.forges.for_spec(&group.spec);
    check_spec(group, forge)?;
    let forge = forge.ok_or(ReconcileError::ForgeDisabled(group.spec.forge.as_str()))?;
    ctx.forge_hosts.check(&forge.outbound_urls(&group.spec))?;
    Ok(forge)
}

/// Reads what the forge's block names (credentials Secret, CA bundle) into the forge's group
/// context.
pub(super) async fn group_context(
    ctx: &Context,
    forge: &dyn Forge,
    group: &RunnerGroup,
) -> Result<GroupContext, ReconcileError> {
    let key = group_key(group);
    let refs = forge.cluster_refs(&group.spec);
    let secret_name = refs.credentials_secret;
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &key.namespace);
    let secret = secrets
        .get_opt(&secret_name)
        .await
        .map_err(ReconcileError::kube("get secret"))?
        .ok_or_else(|| ReconcileError::SecretNotFound {
            namespace: key.namespace.clone(),
            name: secret_name.clone(),
        })?;
    let credentials = Credentials {
        data: secret_values(&secret),
        secret_name,
        version: secret.resource_version().unwrap_or_default(),
    };
    let webhook_secret = match refs.webhook_secret {
        Some(name) => match secrets.get_opt(&name).await {
            Ok(Some(s)) => secret_values(&s).remove(WEBHOOK_SECRET_KEY),
            Ok(None) => {
                warn!(group = %key, secret = %name, "webhook Secret not found; polling only");
                None
            }
            Err(e) => {
                warn!(group = %key, secret = %name, error = %e, "cannot read the webhook Secret; polling only");
                None
            }
        },
        None => None,
    };
    let ca_bundle = match refs.ca_bundle_config_map {
        Some(cm_name) => {
            let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &key.namespace);
            let cm = cms
                .get_opt(&cm_name)
                .await
                .map_err(ReconcileError::kube("get configmap"))?;
            let ca = cm.and_then(|c| c.data).and_then(|mut d| d.remove(CA_BUNDLE_KEY));
            Some(ca.ok_or_else(|| ReconcileError::ConfigMapNotFound {
                namespace: key.namespace.clone(),
                name: cm_name,
            })?)
        }
        None => None,
    };
    Ok(GroupContext {
        uid: group.uid().unwrap_or_default(),
        key,
        group: group.clone(),
        credentials,
        ca_bundle,
        webhook_secret,
    })
}

/// A Secret's values by key (`stringData` over `data`); values that are not UTF-8 cannot be
/// tokens or keys and are left out (the backend then reports the missing key).
fn secret_values(secret: &Secret) -> BTreeMap<String, SecretValue> {
    let mut data: BTreeMap<String, SecretValue> = BTreeMap::new();
    for (k, v) in secret.data.iter().flatten() {
        if let Ok(s) = std::str::from_utf8(&v.0) {
            data.insert(k.clone(), SecretValue::new(s.trim_end_matches(['\n', '\r'])));
        }
    }
    for (k, v) in secret.string_data.iter().flatten() {
        data.insert(k.clone(), SecretValue::new(v.clone()));
    }
    data
}

/// The group's runner Jobs from the store.
fn group_jobs(ctx: &Context, group: &RunnerGroup) -> Vec<Arc<Job>> {
    ctx.jobs
        .state()
        .into_iter()
        .filter(|j| belongs_to(j, group))
        .collect()
}

async fn apply(group: Arc<RunnerGroup>, ctx: &Context) -> Result<Action, ReconcileError> {
    let group = with_own_status(ctx, group);
    match run_pass(&group, ctx).await {
        Ok(action) => {
            ctx.record_success(&group_key(&group));
            Ok(action)
        }
        Err(e) => {
            let conds = error_conditions(e.category(), &e.to_string());
            write_status(ctx, &group, &conds, None, false).await;
            Err(e)
        }
    }
}

/// The group with the status this process last wrote, when the store has not caught up with
/// that write yet. The status carries state between passes (failure count, sticky conditions);
/// a pass right after a write must not plan on, and write back, the older one.
fn with_own_status(ctx: &Context, group: Arc<RunnerGroup>) -> Arc<RunnerGroup> {
    let written = ctx.with_memory(&group_key(&group), |m| {
        let stale = m
            .written_status
            .as_ref()
            .is_some_and(|w| w.based_on.is_some() && w.based_on == group.metadata.resource_version);
        if stale {
            m.written_status.as_ref().map(|w| w.status.clone())
        } else {
            // The store has moved on (our write, or someone else's): trust it from now on.
            m.written_status = None;
            None
        }
    });
    match written {
        Some(status) => {
            let mut g = (*group).clone();
            g.status = Some(status);
            Arc::new(g)
        }
        None => group,
    }
}

async fn run_pass(group: &RunnerGroup, ctx: &Context) -> Result<Action, ReconcileError> {
    if !ctx.jobs_synced.load(std::sync::atomic::Ordering::SeqCst) {
        // Planning on a store that has not listed yet would count no runners.
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    let forge = checked_forge(ctx, group)?;
    let gctx = group_context(ctx, forge, group).await?;
    let key = gctx.key.clone();

    ensure_runner_permissions(ctx, forge, group, &key).await?;

    let jobs = group_jobs(ctx, group);
    let in_flight = ctx.with_memory(&key, |m| {
        m.in_flight.settle(&jobs);
        m.in_flight.clone()
    });
    let now = Timestamp::now();
    let mut cluster = observe_runners(&jobs, &in_flight, &template_hash(&group.spec), now);
    let surplus = ctx.with_memory(&key, |m| {
        m.plan.note_running(&mut cluster, now);
        m.plan.surplus(now)
    });
    let startup_timeout = Duration::from_secs(u64::from(group.spec.startup_timeout_seconds()));
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &key.namespace);
    let check_pod_security = ctx.with_memory(&key, |m| m.pod_security_checked != group.metadata.generation);
    let events: Api<CoreEvent> = Api::namespaced(ctx.client.clone(), &key.namespace);
    let mut stuck = find_stuck(&pods, &events, &key.name, &cluster, startup_timeout).await;
    if must_reapply(stuck.values()) {
        // The runner ServiceAccount was removed behind our back: every runner pod is refused
        // until it is back, so apply it (with its Role and RoleBinding) again now.
        info!(group = %key, "runner ServiceAccount missing; applying the runner RBAC again");
        ctx.with_memory(&key, |m| m.runner_rbac = None);
        ensure_runner_permissions(ctx, forge, group, &key).await?;
    }
    for r in &mut cluster {
        r.stuck = stuck.remove(&r.name);
    }
    let view = forge
        .observe(&gctx, &runner_refs(&jobs, &cluster))
        .instrument(forge_call("observe", &gctx))
        .await?;
    let observed = with_forge_states(cluster, &view);
    let prev = group.status.as_ref();
    let prev_failures = failures_so_far(prev, group.metadata.generation);
    let mut the_plan = plan(&PlanInput {
        min_runners: group.spec.min_runners,
        max_runners: group.spec.max_runners,
        idle_timeout_seconds: group.spec.idle_timeout_seconds(),
        runners: &observed,
        view: &view,
        consecutive_failures: prev_failures,
        creation_held: creation_held(prev, prev_failures, now),
        scale_down_delay_seconds: group.spec.scale_down_delay_seconds(),
        surplus,
    });
    let surplus_due_in = ctx.with_memory(&key, |m| {
        m.plan.record_surplus(the_plan.surplus, now);
        let delay = Duration::from_secs(u64::from(group.spec.scale_down_delay_seconds()));
        m.plan.surplus_due_in(delay, now)
    });
    slow_down_on_budget(ctx, group, &key, &mut the_plan.create, &view, now).await;
    debug!(
        group = %key,
        waiting_jobs = view.waiting_jobs,
        create = the_plan.create,
        remove = the_plan.remove.len(),
        "plan"
    );

    let mut identities = identities_to_record(&jobs, &view.job_identities);
    let identity_writes = ctx.with_memory(&key, |m| m.identity_writes.clone());
    identity_writes.claim(&mut identities, &jobs);
    let target = Target {
        jobs: Api::namespaced(ctx.client.clone(), &key.namespace),
        secrets: Api::namespaced(ctx.client.clone(), &key.namespace),
        pods,
        forge,
        fence: &ctx.fence,
        group: &gctx,
        observed: &jobs,
        check_pod_security,
        identities: &identities,
    };
    // A predecessor killed between a runner's Job and its Secret, or a failed pass whose Secret
    // write and undo both failed, leaves a Job that can never start.
    let retired = if ctx.with_memory(&key, |m| m.secrets_checked) {
        Vec::new()
    } else {
        match retire_runners_without_secret(&target).await {
            Ok(names) => {
                ctx.with_memory(&key, |m| m.secrets_checked = true);
                names
            }
            Err(e) => {
                warn!(group = %key, error = %e, "could not check runner Secrets; retrying next pass");
                Vec::new()
            }
        }
    };
    let mut report = apply_plan(&target, &the_plan).await;
    spawn_record_identities(
        target.jobs.clone(),
        target.pods.clone(),
        key.clone(),
        identities.clone(),
        the_plan.mark_busy.clone(),
        identity_writes,
    );
    report.deleted.extend(retired);
    sweep_hook_leftovers(ctx, forge, group, &key, &target, !report.deleted.is_empty()).await;
    if report.first_error.is_some() {
        ctx.with_memory(&key, |m| m.secrets_checked = false);
    }
    ctx.with_memory(&key, |m| {
        m.in_flight.created.extend(report.created.iter().cloned());
        // A runner removed before the store ever listed it must stop counting as created:
        // the store may see it come and go between two passes, and it would then stay a
        // phantom pending runner that holds demand back forever.
        for name in &report.deleted {
            m.in_flight.created.remove(name);
        }
        m.in_flight.deleted.extend(report.deleted.iter().cloned());
    });

    let forge_label = ForgeLabels {
        forge: group.spec.forge.as_str(),
    };
    let created = u32::try_from(report.created.len()).unwrap_or(u32::MAX);
    let removed = u32::try_from(report.deleted.len()).unwrap_or(u32::MAX);
    ctx.metrics
        .runners_created
        .get_or_create(&forge_label)
        .inc_by(u64::from(created));
    ctx.metrics
        .runners_removed
        .get_or_create(&forge_label)
        .inc_by(u64::from(removed));
    let failed_now = u32::try_from(report.failed_deleted.len()).unwrap_or(u32::MAX);
    let recovered_since =
        |since: Timestamp| report.succeeded_deleted > 0 || runner_started_since(&observed, since, now);
    let waiting_out = the_plan
        .waiting_out
        .first()
        .map(|(_, stuck)| (stuck.cause, stuck.message.clone()));
    // A runner kept while its job waits says itself what holds it up; a failure condition from
    // an earlier pass is not carried over meanwhile.
    let startup_failure = report
        .stuck
        .last()
        .map(|(_, cause, msg)| (*cause, msg.clone()))
        .or_else(|| {
            waiting_out
                .is_none()
                .then(|| startup_failure_persists(prev, group.metadata.generation, recovered_since))
                .flatten()
        });
    let summary = PassSummary {
        startup_failure,
        waiting_out,
        failed_now,
        counts: the_plan.counts,
        facts: view.facts.clone(),
        failed_runners: next_failure_count(prev_failures, report.succeeded_deleted, failed_now),
        created,
        scaled_down: report.scaled_down,
        throttled: the_plan.throttled,
        at_max: the_plan
            .counts
            .running_jobs
            .saturating_add(view.waiting_jobs)
            .saturating_add(group.spec.min_runners)
            > group.spec.max_runners,
        apply_error: report.first_error.as_ref().map(|e| (e.category(), e.to_string())),
        runner_outdated: !report.outdated.is_empty()
            || outdated_persists(
                group.status.as_ref(),
                group.metadata.generation,
                report.succeeded_deleted,
            ),
    };
    record_pass(ctx, group, &jobs, &observed, &view, &summary, now);
    events::scaling(ctx, group, &summary, &report).await;
    events::waiting_out(ctx, group, &the_plan.waiting_out).await;
    if check_pod_security && !report.created.is_empty() {
        ctx.with_memory(&key, |m| m.pod_security_checked = group.metadata.generation);
    }
    if !report.pod_security.is_empty() {
        events::pod_security(ctx, group, &report.pod_security).await;
    }
    let may_defer = report.first_error.is_none();
    let deferred = write_status(
        ctx,
        group,
        &success_conditions(&summary),
        Some(&summary),
        may_defer,
    )
    .await;
    match report.first_error.take() {
        Some(e) => Err(e),
        None => Ok(success_requeue(
            forge,
            group,
            [deferred, surplus_due_in].into_iter().flatten().min(),
        )),
    }
}

/// In the container modes where runner pods make job pods of their own (the forge gives the
/// runners permissions), deletes what the hooks left of runner pods that are gone: at once when
/// a runner went this pass, otherwise every [`hook_leftovers::SWEEP_EVERY`].
async fn sweep_hook_leftovers(
    ctx: &Context,
    forge: &dyn Forge,
    group: &RunnerGroup,
    key: &GroupKey,
    target: &Target<'_>,
    runner_went: bool,
) {
    if forge.runner_role_rules(&group.spec).is_empty() {
        return;
    }
    let now = std::time::Instant::now();
    let due = ctx.with_memory(key, |m| {
        let due = m.hook_sweep.due(runner_went, now);
        if due {
            m.hook_sweep.swept(now);
        }
        due
    });
    if due {
        hook_leftovers::sweep(&target.pods, &target.secrets, &key.name).await;
    }
}

/// Lowers `create` when the forge's API budget for the group's credential runs low
/// ([`creation_allowance`]), so the forge's rate limit is not hit by a burst; logs and publishes
/// an Event when throttling starts.
async fn slow_down_on_budget(
    ctx: &Context,
    group: &RunnerGroup,
    key: &GroupKey,
    create: &mut u32,
    view: &crate::forge::ForgeView,
    now: Timestamp,
) {
    let allowance = creation_allowance(*create, view.budget.as_ref(), now);
    let was = ctx.with_memory(key, |m| {
        std::mem::replace(&mut m.budget_throttled, allowance.throttled)
    });
    if !allowance.throttled {
        return;
    }
    let (remaining, limit) = view.budget.map_or((0, 0), |b| (b.remaining, b.limit));
    let reset = view
        .budget
        .and_then(|b| b.reset)
        .map_or_else(|| "unknown".to_owned(), |r| r.to_string());
    info!(
        group = %key,
        planned = *create,
        allowed = allowance.create,
        remaining,
        limit,
        reset = %reset,
        "forge API budget low: creating fewer runners"
    );
    if !was {
        let note = format!(
            "forge API budget low ({remaining} of {limit} requests left, reset at {reset}): creating {} of {} runners this pass until the budget recovers",
            allowance.create, *create
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
    *create = allowance.create;
}

/// Keeps the runner ServiceAccount, Role and RoleBinding the forge asks for; applied once per
/// process, whenever the rules change, and again when a runner is refused for a missing
/// ServiceAccount ([`must_reapply`]), not on every pass.
async fn ensure_runner_permissions(
    ctx: &Context,
    forge: &dyn Forge,
    group: &RunnerGroup,
    key: &GroupKey,
) -> Result<(), ReconcileError> {
    let rules = forge.runner_role_rules(&group.spec);
    if rules.is_empty() {
        return Ok(());
    }
    let fingerprint = rules_fingerprint(&rules);
    if ctx.with_memory(key, |m| m.runner_rbac.as_deref() == Some(fingerprint.as_str())) {
        return Ok(());
    }
    ensure_runner_rbac(&ctx.client, group, rules).await?;
    ctx.with_memory(key, |m| m.runner_rbac = Some(fingerprint));
    Ok(())
}

/// Writes the status by server-side apply and publishes Events for condition transitions.
/// Failures are logged, not returned: the next pass writes the status again.
///
/// With `may_defer`, a change of counts or messages only shortly after the last write is left to
/// a later pass ([`status_write`]); the returned delay is when that pass should run.
async fn write_status(
    ctx: &Context,
    group: &RunnerGroup,
    conds: &[GroupCondition],
    pass: Option<&PassSummary>,
    may_defer: bool,
) -> Option<Duration> {
    let now = Time(Timestamp::now());
    let prev: Option<&RunnerGroupStatus> = group.status.as_ref();
    let status = build_status(prev, group.metadata.generation, conds, pass, &now);
    let old = prev.map(|s| s.conditions.clone()).unwrap_or_default();
    let changed: Vec<_> = transitions(&old, &status.conditions)
        .into_iter()
        .cloned()
        .collect();
    let since_last_write = if may_defer {
        ctx.with_memory(&group_key(group), |m| m.last_status_write.map(|t| t.elapsed()))
    } else {
        None
    };
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
    if let Err(e) = api
        .patch_status(
            &group.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
    {
        warn!(group = %group_key(group), error = %e, "status update failed");
        return None;
    }
    ctx.with_memory(&group_key(group), |m| {
        m.written_status = Some(WrittenStatus {
            based_on: group.metadata.resource_version.clone(),
            status,
        });
        m.last_status_write = Some(Instant::now());
    });
    events::transitions(ctx, group, &changed).await;
    None
}
