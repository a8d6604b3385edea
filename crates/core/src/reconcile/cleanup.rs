//! Deleting a `RunnerGroup`: stop its background work, clean up at the forge within a time
//! budget, delete its runner Jobs whatever the forge does, then release the finalizer.
//!
//! Deletion must always finish: a missing Secret, a forge that rejects us or one that drops
//! traffic may leave registrations behind (the Events say which and how to remove them), but
//! never keep the group, its runners or its background work alive.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use tracing::{Instrument, info, warn};

use super::FINALIZER;
use super::apply::runner_ref;
use super::context::Context;
use super::error::ReconcileError;
use super::events;
use super::ledger::Registrations;
use super::observe::belongs_to;
use super::pass::group_context;
use super::pass_metrics::clear_runner_gauges;
use super::pipeline::{described_spec, group_key};
use super::spans::forge_call;
use crate::crd::RunnerGroup;
use crate::forge::{
    DEFAULT_CLEANUP_HINT, Forge, ForgeError, ForgeSession, GroupContext, GroupKey, RunnerRef,
};
use crate::names::is_label_value;
use crate::runner_job::{GROUP_LABEL, ObservedJob};

/// How long after its `deletionTimestamp` a group waits for the forge. A healthy forge cleans
/// up in seconds (one scale set delete, a few runner deletes in parallel); two minutes leave
/// room for a slow one and a few retries, and stay within what `kubectl delete` users wait
/// before they reach for the finalizer by hand.
pub const CLEANUP_BUDGET: Duration = Duration::from_secs(120);
/// Time a process that has not tried yet always gets, even when the budget is spent (an
/// operator that was down while the group was deleted still deletes the scale set).
const FIRST_ATTEMPT_MIN: Duration = Duration::from_secs(15);
/// Runners deregistered at once: enough that a large group cleans up in a few rounds, few
/// enough not to look like a burst to the forge's rate limits.
const REMOVE_PARALLELISM: usize = 8;
/// Pause between forge cleanup attempts while the budget lasts.
const RETRY_DELAY: Duration = Duration::from_secs(5);
/// Pause while deleted runner Jobs are still listed.
const JOBS_GONE_POLL: Duration = Duration::from_secs(1);
/// Most runner names an Event lists.
const NAMES_SHOWN: usize = 5;

/// What cleanup remembers between passes of one deleted group.
#[derive(Debug, Default)]
pub struct CleanupState {
    /// Runners not yet confirmed deregistered at the forge; their Jobs may already be gone.
    pending: BTreeMap<String, RunnerRef>,
    /// The forge deleted the group's own resources ([`ForgeSession::delete_group`]).
    shut_down: bool,
    /// This process has made a forge attempt.
    attempted: bool,
    /// The "Jobs deleted anyway" Event is out.
    reported_incomplete: bool,
    /// The "gave up" Event is out.
    reported_abandoned: bool,
}

/// How the forge side of one pass ended.
enum ForgeStep {
    /// Everything deregistered and released.
    Clean,
    /// A call failed or timed out; worth another try while the budget lasts.
    Failed(String),
    /// No forge call can work (forge disabled, invalid spec, missing Secret): give up now.
    Impossible(String),
}

/// Cleanup of a group being deleted; releases our finalizer when done.
pub async fn cleanup(group: Arc<RunnerGroup>, ctx: &Context) -> Result<Action, ReconcileError> {
    // A deposed leader neither deregisters runners nor deletes Jobs: the new leader does.
    ctx.fence.check()?;
    let key = group_key(&group);
    clear_runner_gauges(ctx, &key, group.spec.forge.as_str());
    let forge = ctx.forges.for_spec(&group.spec);
    let session = forge.map(|f| ctx.with_memory(&key, |m| m.ledger.session_to_close(f, &key)));
    // First of all: nothing may keep acting for a deleted group, whatever happens below.
    if let Some(s) = &session {
        s.close().await;
    }
    let jobs_api: Api<ObservedJob> = Api::namespaced(ctx.client.clone(), &key.namespace);
    let jobs = list_group_jobs(&jobs_api, &group).await?;
    let first_attempt = ctx.with_memory(&key, |m| {
        let st = m.cleanup.get_or_insert_with(CleanupState::default);
        for j in &jobs {
            if let Some(name) = j.metadata.name.as_deref()
                && !st.pending.contains_key(name)
            {
                // The session is closed: it remembers no runner it registered.
                let none = Registrations::default();
                st.pending.insert(name.to_owned(), runner_ref(&jobs, &none, name));
            }
        }
        !std::mem::replace(&mut st.attempted, true)
    });
    let remaining = remaining_budget(&group, Timestamp::now(), first_attempt);
    let step = match (forge, &session) {
        (Some(_), Some(_)) if remaining.is_zero() => ForgeStep::Failed("the cleanup budget is spent".into()),
        (Some(f), Some(s)) => forge_step(ctx, f, s.as_ref(), &group, &key, remaining).await,
        _ => ForgeStep::Impossible(format!(
            "forge {} is not enabled in this operator",
            group.spec.forge.as_str()
        )),
    };
    let out_of_time = remaining_budget(&group, Timestamp::now(), false).is_zero();
    let final_step = match &step {
        ForgeStep::Clean | ForgeStep::Impossible(_) => true,
        ForgeStep::Failed(_) => out_of_time,
    };
    // Runner Jobs go now: deregistered, or never to be (the forge failed once already).
    let left = delete_jobs(&jobs_api, &jobs).await?;
    report(ctx, &group, forge, &key, &step, final_step).await;
    if !final_step {
        let retry = RETRY_DELAY.min(remaining_budget(&group, Timestamp::now(), false));
        return Ok(Action::requeue(retry.max(JOBS_GONE_POLL)));
    }
    if left > 0 {
        return Ok(Action::requeue(JOBS_GONE_POLL));
    }
    let runner_rules = forge.and_then(|f| f.describe(&group.spec).ok());
    if ctx.runner_hooks.is_some() && runner_rules.is_some_and(|p| !p.runner_role_rules.is_empty()) {
        // The runner pods are gone with their Jobs; what their hooks made has no owner. The
        // group's cleanup RoleBinding lets the operator delete it, and goes with the group only
        // after the finalizer is released.
        let pods = Api::namespaced(ctx.client.clone(), &key.namespace);
        let secrets = Api::namespaced(ctx.client.clone(), &key.namespace);
        super::hook_leftovers::sweep(&pods, &secrets, &key.name).await;
    }
    remove_finalizer(ctx, &group).await?;
    if let Some(s) = &session {
        // Forge calls above may have cached a client for the group.
        s.close().await;
    }
    ctx.forget(&key);
    info!(group = %key, clean = matches!(step, ForgeStep::Clean), "cleaned up; finalizer released");
    Ok(Action::await_change())
}

/// What is left of the budget at `now`; at least [`FIRST_ATTEMPT_MIN`] on a first attempt.
fn remaining_budget(group: &RunnerGroup, now: Timestamp, first_attempt: bool) -> Duration {
    let since_deletion = group
        .metadata
        .deletion_timestamp
        .as_ref()
        .and_then(|t| now.duration_since(t.0).try_into().ok())
        .unwrap_or(Duration::ZERO);
    let left = CLEANUP_BUDGET.saturating_sub(since_deletion);
    if first_attempt {
        left.max(FIRST_ATTEMPT_MIN)
    } else {
        left
    }
}

/// The group's runner Jobs, straight from the API server: the decision to release the
/// finalizer must not rest on a store that lags.
async fn list_group_jobs(
    api: &Api<ObservedJob>,
    group: &RunnerGroup,
) -> Result<Vec<Arc<ObservedJob>>, ReconcileError> {
    let name = group.name_any();
    if !is_label_value(&name) {
        // A real server refuses such a selector with 400 (apimachinery `labels.Parse` →
        // `validateLabelValue`), and no runner Job can carry such a label: there is none.
        return Ok(Vec::new());
    }
    let lp = ListParams::default().labels(&format!("{GROUP_LABEL}={name}"));
    let list = api.list(&lp).await.map_err(ReconcileError::kube("list jobs"))?;
    Ok(list
        .items
        .into_iter()
        .filter(|j| belongs_to(j, group))
        .map(Arc::new)
        .collect())
}

/// Deregisters the pending runners and releases the group at the forge, every call bounded by
/// what is left of the budget.
async fn forge_step(
    ctx: &Context,
    forge: &dyn Forge,
    session: &dyn ForgeSession,
    group: &RunnerGroup,
    key: &GroupKey,
    budget: Duration,
) -> ForgeStep {
    let deadline = tokio::time::Instant::now() + budget;
    let done = ctx.with_memory(key, |m| {
        m.cleanup
            .as_ref()
            .is_some_and(|c| c.shut_down && c.pending.is_empty())
    });
    if done {
        // Only waiting for Jobs to go: no reason to read a Secret that may be gone by now.
        return ForgeStep::Clean;
    }
    let profile = match described_spec(group, Some(forge)) {
        Ok(Some(profile)) => profile,
        Ok(None) => return ForgeStep::Impossible("the forge described no spec".into()),
        Err(e) => return ForgeStep::Impossible(e.to_string()),
    };
    // A host the allowlist refuses is never called, not even to clean up.
    if let Err(e) = ctx.forge_hosts.check(&profile.outbound_urls) {
        return ForgeStep::Impossible(e.to_string());
    }
    let gctx = match tokio::time::timeout_at(deadline, group_context(ctx, &profile, group)).await {
        Ok(Ok(g)) => g,
        Ok(Err(e)) if e.category().needs_user_action() => return ForgeStep::Impossible(e.to_string()),
        Ok(Err(e)) => return ForgeStep::Failed(e.to_string()),
        Err(_) => return ForgeStep::Failed(timed_out("reading the credentials")),
    };
    let deregistered = deregister_pending(ctx, session, key, &gctx, deadline).await;
    let released = release_at_forge(ctx, session, key, &gctx, deadline).await;
    match deregistered.or(released) {
        None => ForgeStep::Clean,
        Some(f) if f.permanent => ForgeStep::Impossible(f.message),
        Some(f) => ForgeStep::Failed(f.message),
    }
}

/// Deregisters the runners still pending; returns the first failure.
async fn deregister_pending(
    ctx: &Context,
    forge: &dyn ForgeSession,
    key: &GroupKey,
    gctx: &GroupContext,
    deadline: tokio::time::Instant,
) -> Option<ForgeFailure> {
    let pending: Vec<RunnerRef> = ctx.with_memory(key, |m| {
        m.cleanup
            .as_ref()
            .map(|c| c.pending.values().cloned().collect())
            .unwrap_or_default()
    });
    let results: Vec<(String, Result<(), ForgeFailure>)> = futures::stream::iter(pending)
        .map(|rr| deregister(forge, gctx, rr, deadline))
        .buffer_unordered(REMOVE_PARALLELISM)
        .collect()
        .await;
    let mut first_error = None;
    ctx.with_memory(key, |m| {
        let st = m.cleanup.get_or_insert_with(CleanupState::default);
        for (name, r) in results {
            match r {
                Ok(()) => {
                    st.pending.remove(&name);
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
    });
    first_error
}

/// Releases the group at the forge (sessions, scale sets), once; returns the failure.
async fn release_at_forge(
    ctx: &Context,
    forge: &dyn ForgeSession,
    key: &GroupKey,
    gctx: &GroupContext,
    deadline: tokio::time::Instant,
) -> Option<ForgeFailure> {
    let shut_down = ctx.with_memory(key, |m| m.cleanup.as_ref().is_some_and(|c| c.shut_down));
    if shut_down {
        return None;
    }
    match tokio::time::timeout_at(
        deadline,
        forge.delete_group(gctx).instrument(forge_call("shutdown", gctx)),
    )
    .await
    {
        Ok(Ok(())) => {
            ctx.with_memory(key, |m| {
                if let Some(c) = m.cleanup.as_mut() {
                    c.shut_down = true;
                }
            });
            None
        }
        Ok(Err(e)) => Some(ForgeFailure::from(&e)),
        Err(_) => Some(ForgeFailure::timed_out("releasing the group")),
    }
}

/// A failed forge call: what to tell, and whether retrying can help.
struct ForgeFailure {
    message: String,
    /// Only a person can fix it (credentials rejected, scope gone): no retry.
    permanent: bool,
}

impl ForgeFailure {
    fn timed_out(what: &str) -> ForgeFailure {
        ForgeFailure {
            message: timed_out(what),
            permanent: false,
        }
    }
}

impl From<&ForgeError> for ForgeFailure {
    fn from(e: &ForgeError) -> ForgeFailure {
        ForgeFailure {
            message: e.to_string(),
            permanent: e.category().needs_user_action(),
        }
    }
}

async fn deregister(
    forge: &dyn ForgeSession,
    gctx: &GroupContext,
    rr: RunnerRef,
    deadline: tokio::time::Instant,
) -> (String, Result<(), ForgeFailure>) {
    // Busy or gone alike: the runner's Job is deleted next, which ends it either way.
    let r = match tokio::time::timeout_at(
        deadline,
        forge
            .deregister(gctx, &rr)
            .instrument(forge_call("remove_runner", gctx)),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(ForgeFailure::from(&e)),
        Err(_) => Err(ForgeFailure::timed_out("deregistering runners")),
    };
    (rr.name, r)
}

fn timed_out(what: &str) -> String {
    format!("the forge did not answer {what} within the cleanup budget")
}

/// Deletes the Jobs not yet on their way out; returns how many are still listed.
async fn delete_jobs(api: &Api<ObservedJob>, jobs: &[Arc<ObservedJob>]) -> Result<usize, ReconcileError> {
    for name in jobs
        .iter()
        .filter(|j| j.metadata.deletion_timestamp.is_none())
        .filter_map(|j| j.metadata.name.as_deref())
    {
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(ReconcileError::kube("delete job")(e)),
        }
    }
    Ok(jobs.len())
}

/// Tells the user when the forge side did not finish: once when the Jobs go without it, once
/// more when cleanup gives up.
async fn report(
    ctx: &Context,
    group: &RunnerGroup,
    forge: Option<&dyn Forge>,
    key: &GroupKey,
    step: &ForgeStep,
    final_step: bool,
) {
    let why = match step {
        ForgeStep::Clean => return,
        ForgeStep::Failed(e) | ForgeStep::Impossible(e) => e,
    };
    let (pending, reported) = ctx.with_memory(key, |m| {
        let st = m.cleanup.get_or_insert_with(CleanupState::default);
        let names: Vec<String> = st.pending.keys().cloned().collect();
        let flag = if final_step {
            &mut st.reported_abandoned
        } else {
            &mut st.reported_incomplete
        };
        (names, std::mem::replace(flag, true))
    });
    if reported {
        return;
    }
    let hint = forge.map_or_else(
        || "runners of the group may stay registered at the forge: remove them there".to_owned(),
        |f| {
            f.describe(&group.spec)
                .map_or_else(|_| DEFAULT_CLEANUP_HINT.to_owned(), |p| p.cleanup_hint)
        },
    );
    let runners = if pending.is_empty() {
        String::new()
    } else {
        let shown: Vec<&str> = pending.iter().take(NAMES_SHOWN).map(String::as_str).collect();
        let more = pending.len().saturating_sub(shown.len());
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        format!(" Not deregistered: {}{more}.", shown.join(", "))
    };
    if final_step {
        warn!(group = %key, reason = %why, "forge cleanup given up; finalizer released");
        let note = format!(
            "Gave up cleaning up at the forge ({why}); the runner Jobs are deleted. {hint}.{runners}"
        );
        events::publish(
            ctx,
            group,
            EventType::Warning,
            "CleanupAbandoned",
            "Cleanup",
            note,
        )
        .await;
    } else {
        warn!(group = %key, reason = %why, "forge cleanup failed; runner Jobs deleted anyway");
        let note = format!(
            "Cleanup at the forge failed ({why}); the runner Jobs are deleted anyway and cleanup is \
             retried for up to {}s after deletion. If it keeps failing: {hint}.{runners}",
            CLEANUP_BUDGET.as_secs()
        );
        events::publish(
            ctx,
            group,
            EventType::Warning,
            "CleanupIncomplete",
            "Cleanup",
            note,
        )
        .await;
    }
}

/// Removes our finalizer by a merge patch guarded by the `resourceVersion` (as
/// `ensure_finalizer` adds it), keeping any other finalizer.
async fn remove_finalizer(ctx: &Context, group: &RunnerGroup) -> Result<(), ReconcileError> {
    if !group.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(());
    }
    let rest: Vec<&String> = group.finalizers().iter().filter(|f| *f != FINALIZER).collect();
    let patch = serde_json::json!({
        "metadata": {"finalizers": rest, "resourceVersion": group.resource_version()}
    });
    let api: Api<RunnerGroup> = Api::namespaced(ctx.client.clone(), &group.namespace().unwrap_or_default());
    match api
        .patch(&group.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        // Already gone: someone removed the finalizer, or the group, first.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(ReconcileError::kube("remove finalizer")(e)),
    }
}

/// Whether `group` is being deleted and still carries our finalizer.
pub fn needs_cleanup(group: &RunnerGroup) -> bool {
    group.meta().deletion_timestamp.is_some() && group.finalizers().iter().any(|f| f == FINALIZER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn deleted_at(t: Timestamp) -> RunnerGroup {
        let mut g: RunnerGroup = serde_json::from_value(serde_json::json!({
            "apiVersion": "forgerunner.dev/v1alpha1", "kind": "RunnerGroup",
            "metadata": {"name": "g", "namespace": "ci", "finalizers": [FINALIZER]},
            "spec": {"forge": "gitea", "maxRunners": 1,
                "gitea": {"url": "https://x", "scope": "global", "credentials": "c", "labels": ["l"]}}
        }))
        .expect("group");
        g.metadata.deletion_timestamp = Some(Time(t));
        g
    }

    #[test]
    fn budget_counts_from_the_deletion_timestamp() {
        let now = Timestamp::now();
        let g = deleted_at(now);
        assert_eq!(remaining_budget(&g, now, false), CLEANUP_BUDGET);
        let later = now + jiff::SignedDuration::from_secs(100);
        assert_eq!(remaining_budget(&g, later, false), Duration::from_secs(20));
        let spent = now + jiff::SignedDuration::from_secs(600);
        assert_eq!(remaining_budget(&g, spent, false), Duration::ZERO);
        assert_eq!(
            remaining_budget(&g, spent, true),
            FIRST_ATTEMPT_MIN,
            "a process that never tried gets one bounded attempt"
        );
        assert!(needs_cleanup(&g));
        let mut other = g.clone();
        other.metadata.finalizers = Some(vec!["someone.else/x".into()]);
        assert!(!needs_cleanup(&other));
    }
}
