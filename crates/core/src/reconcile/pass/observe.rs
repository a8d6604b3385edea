//! Observe: the group's runner Jobs from the store, our writes it does not show yet, runners
//! that will not start, and the forge's view, joined into one observation.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Pod};
use kube::api::Api;
use tracing::info;

use super::dereference::{Found, ensure_runner_permissions};
use crate::crd::RunnerGroup;
use crate::forge::ForgeView;
use crate::plan::ObservedRunner;
use crate::reconcile::context::Context;
use crate::reconcile::error::ReconcileError;
use crate::reconcile::forge_call::bounded;
use crate::reconcile::ledger::Ledger;
use crate::reconcile::observe::{belongs_to, mark_killed, observe_runners, runner_refs, with_forge_states};
use crate::reconcile::runner_exit::killed_runners;
use crate::reconcile::runner_rbac::must_reapply;
use crate::reconcile::startup_check::find_stuck;
use crate::runner_job::{ObservedJob, template_hash};
use crate::runner_pod::disruption::Disruption;

/// What the observe step saw.
pub(super) struct Seen {
    /// The group's runner Jobs in the store.
    pub jobs: Vec<Arc<ObservedJob>>,
    /// Every runner of the group (in-flight creations included), with the forge's state.
    pub runners: Vec<ObservedRunner>,
    /// The forge's view of the group.
    pub view: ForgeView,
    /// Runner rows offline at the forge for the ghost grace ([`Ledger::settle_view`]).
    pub ghosts: Vec<String>,
    /// Runners the cluster is killing while their Jobs still run, and how; failed in `runners`
    /// ([`crate::reconcile::runner_exit::killed_runners`]).
    pub killed: BTreeMap<String, Disruption>,
    /// The clock of the pass.
    pub now: Timestamp,
}

/// Observes the group: cluster first, then the forge, told about every runner of the cluster.
pub(super) async fn observe(
    ctx: &Context,
    group: &RunnerGroup,
    found: &Found,
    ledger: &mut Ledger,
) -> Result<Seen, ReconcileError> {
    let jobs: Vec<Arc<ObservedJob>> = ctx
        .jobs
        .state()
        .into_iter()
        .filter(|j| belongs_to(j, group))
        .collect();
    ledger.writes.settle(&jobs);
    let now = Timestamp::now();
    let mut runners = observe_runners(&jobs, &ledger.writes, &template_hash(&group.spec), now);
    ledger.plan.note_running(&mut runners, now);
    ledger.plan.note_seen(&mut runners, now);
    mark_stuck(ctx, group, found, &mut runners, ledger).await?;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &found.group.key.namespace);
    let killed = killed_runners(&pods, &found.group.key.name, &jobs, &runners).await;
    mark_killed(&mut runners, &killed);
    ledger.registrations.retain_observed(&runners);
    let refs = runner_refs(&jobs, &runners, &ledger.registrations, &ledger.connected);
    let observed = found.session.snapshot(&found.group, &refs);
    let mut view = bounded(ctx.forge_deadline, "observe", &found.group, observed).await?;
    let runners = with_forge_states(runners, &view);
    let ghosts = ledger.settle_view(&mut view, &runners, &refs, std::time::Instant::now());
    Ok(Seen {
        jobs,
        runners,
        view,
        ghosts,
        killed,
        now,
    })
}

/// Marks the runners that will not start, with what Kubernetes says about each.
async fn mark_stuck(
    ctx: &Context,
    group: &RunnerGroup,
    found: &Found,
    runners: &mut [ObservedRunner],
    ledger: &mut Ledger,
) -> Result<(), ReconcileError> {
    let key = &found.group.key;
    let startup_timeout = Duration::from_secs(u64::from(group.spec.startup_timeout_seconds()));
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &key.namespace);
    let events: Api<CoreEvent> = Api::namespaced(ctx.client.clone(), &key.namespace);
    let mut stuck = find_stuck(&pods, &events, &key.name, runners, startup_timeout).await;
    if must_reapply(stuck.values()) {
        // The runner ServiceAccount was removed behind our back: every runner pod is refused
        // until it is back, so create it (and check its RoleBindings) again now.
        info!(group = %key, "runner ServiceAccount missing; applying the runner RBAC again");
        ledger.upkeep.runner_rbac = None;
        ensure_runner_permissions(ctx, &found.profile, group, &mut ledger.upkeep).await?;
    }
    for r in runners.iter_mut() {
        r.stuck = stuck.remove(&r.name);
    }
    Ok(())
}
