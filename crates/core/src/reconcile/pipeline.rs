//! One reconcile of one `RunnerGroup`: the finalizer, then either the cleanup of a deleted
//! group or a pass over a live one ([`super::pass`]); and the error policy.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use tracing::{debug, instrument, warn};

use super::FINALIZER;
use super::cleanup::{cleanup, needs_cleanup};
use super::context::{Context, USER_ACTION_RETRY, backoff_delay, with_jitter};
use super::error::ReconcileError;
use super::fair_share::{TURN_WAIT, Turn, instance_key};
use crate::crd::RunnerGroup;
use crate::error::ErrorCategory;
use crate::forge::{Forge, ForgeProfile, GroupKey, OutboundUrl};
use crate::metrics::{ReconcileErrorLabels, ReconcileLabels};
use crate::names::group_name_problem;
use crate::validate::validate_spec;

/// When a group whose turn did not come tries again (jittered): long enough for the passes
/// holding the turns to move on, short next to a poll interval.
const TURN_RETRY: Duration = Duration::from_secs(2);

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
    // The spec is described once per pass: the turn is taken on its forge instance, and the
    // pass goes on with the same profile.
    let checked = checked_forge(&ctx, &group);
    let urls = checked
        .as_ref()
        .map(|(_, p)| p.outbound_urls.as_slice())
        .unwrap_or_default();
    let Some(_turn) = take_turn(urls, &ctx, &ns).await else {
        ctx.metrics
            .reconciles_deferred
            .get_or_create(&ReconcileLabels { forge: forge_label })
            .inc();
        debug!("forge instance or namespace at its share of the reconcile slots; later");
        return Ok(Action::requeue(with_jitter(TURN_RETRY)));
    };
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
            Ok(g) => super::pass::run(g, &ctx, checked).await,
            Err(e) => Err(e),
        }
    };
    ctx.metrics
        .reconcile_duration
        .get_or_create(&ReconcileLabels { forge: forge_label })
        .observe(started.elapsed().as_secs_f64());
    result
}

/// Waits (briefly) for a turn of the forge instance behind `urls` (none for a spec refused,
/// whose pass fails at once) and of the namespace ([`super::fair_share`]); `None` when they
/// stayed taken.
async fn take_turn(urls: &[OutboundUrl], ctx: &Context, namespace: &str) -> Option<Turn> {
    ctx.fair_share
        .enter(&instance_key(urls), namespace, TURN_WAIT)
        .await
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
    let failures = ctx.record_failure(&key);
    warn!(group = %key, category = category.as_str(), error = %err, "reconcile failed");
    let delay = retry_delay(category, failures, err.retry_after()).or_else(|| {
        err.unreported()
            .then(|| backoff_delay(failures).min(USER_ACTION_RETRY))
    });
    match delay {
        Some(delay) => Action::requeue(with_jitter(delay)),
        None => Action::await_change(),
    }
}

/// When to retry after the `failures`-th failure in a row of `category`; `None`: only a change
/// of the group can help (a spec it refuses, a forge it does not run, a host it may not call).
///
/// Errors only a person can fix (a missing Secret, a refused token) back off like the others
/// but no further than [`USER_ACTION_RETRY`]: Secrets are not watched, so the group polls for
/// the fix, and a one-off 401 (a token rotated a moment ago, a proxy's hiccup) costs seconds,
/// not a minute. A forge's own `Retry-After` is honoured when it asks for longer.
pub fn retry_delay(
    category: ErrorCategory,
    failures: u32,
    retry_after: Option<Duration>,
) -> Option<Duration> {
    match category {
        ErrorCategory::InvalidSpec | ErrorCategory::ForgeDisabled | ErrorCategory::ForgeHostNotAllowed => {
            None
        }
        _ if category.needs_user_action() => Some(backoff_delay(failures).min(USER_ACTION_RETRY)),
        _ => Some(retry_after.map_or(backoff_delay(failures), |d| d.max(backoff_delay(failures)))),
    }
}

/// Checks the spec: the common rules, then the forge's own rules. An error here is what the
/// reconciler reports as `Ready=False` with reason `InvalidSpec` ([`super::status::error_conditions`]).
pub fn check_spec(group: &RunnerGroup, forge: Option<&dyn Forge>) -> Result<(), ReconcileError> {
    described_spec(group, forge).map(drop)
}

/// [`check_spec`], keeping what the forge makes of the valid spec (`None` without a forge).
pub fn described_spec(
    group: &RunnerGroup,
    forge: Option<&dyn Forge>,
) -> Result<Option<ForgeProfile>, ReconcileError> {
    let described = forge.map(|f| f.describe(&group.spec));
    let refused = match &described {
        Some(Err(violations)) => violations.as_slice(),
        _ => &[],
    };
    let mut msgs: Vec<String> = validate_spec(&group.spec)
        .iter()
        .chain(refused)
        .map(ToString::to_string)
        .collect();
    if let Some(problem) = group_name_problem(&group.name_any()) {
        msgs.push(format!("metadata.name: {problem}"));
    }
    if msgs.is_empty() {
        Ok(described.and_then(Result::ok))
    } else {
        Err(ReconcileError::InvalidSpec(msgs.join("; ")))
    }
}

/// A live group's forge and what it makes of the spec, or why the pass cannot go on.
pub(super) type CheckedForge<'a> = Result<(&'a dyn Forge, ForgeProfile), ReconcileError>;

/// The group's forge and what it makes of the spec, the spec checked (the common rules even
/// when the forge is disabled) and its URLs inside the operator's forge host allowlist.
/// Cleanup goes through here too, so a refused group is never sent a request, not even on
/// deletion.
pub(super) fn checked_forge<'a>(ctx: &'a Context, group: &RunnerGroup) -> CheckedForge<'a> {
    let forge = ctx.forges.for_spec(&group.spec);
    let profile = described_spec(group, forge)?;
    let (Some(forge), Some(profile)) = (forge, profile) else {
        return Err(ReconcileError::ForgeDisabled(group.spec.forge.as_str()));
    };
    ctx.forge_hosts.check(&profile.outbound_urls)?;
    Ok((forge, profile))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_a_person_fixes_back_off_up_to_a_minute() {
        let d = |n| retry_delay(ErrorCategory::Unauthorized, n, None);
        // A one-off 401 (a token rotated a moment ago) costs a second, not a minute.
        assert_eq!(d(1), Some(Duration::from_secs(1)));
        assert_eq!(d(3), Some(Duration::from_secs(4)));
        assert_eq!(d(7), Some(USER_ACTION_RETRY), "capped at the minute");
        assert_eq!(d(40), Some(USER_ACTION_RETRY));
        assert_eq!(
            retry_delay(ErrorCategory::SecretNotFound, 9, None),
            Some(USER_ACTION_RETRY)
        );
    }

    #[test]
    fn only_a_change_helps_a_refused_spec_and_a_forge_s_delay_is_honoured() {
        for c in [
            ErrorCategory::InvalidSpec,
            ErrorCategory::ForgeDisabled,
            ErrorCategory::ForgeHostNotAllowed,
        ] {
            assert_eq!(retry_delay(c, 1, None), None, "{c:?}");
        }
        let long = Some(Duration::from_secs(30));
        assert_eq!(
            retry_delay(ErrorCategory::RateLimited, 1, long),
            long,
            "the forge asked for longer"
        );
        assert_eq!(
            retry_delay(ErrorCategory::ForgeUnavailable, 10, Some(Duration::from_secs(1))),
            Some(crate::reconcile::context::BACKOFF_MAX),
            "our own backoff when it is longer"
        );
    }
}
