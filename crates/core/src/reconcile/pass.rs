//! One pass over a live group, in typed steps: dereference → observe → decide → act → report.
//! Each step takes what the steps before it produced; the group's books are taken once for the
//! whole pass ([`Context::lease_ledger`]) and handed to the steps that keep them.

mod act;
mod decide;
mod dereference;
mod observe;
mod report;

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;

use super::context::Context;
use super::error::ReconcileError;
use super::ledger::Ledger;
use super::pipeline::{CheckedForge, group_key};
use super::status::error_conditions;
use crate::crd::RunnerGroup;

pub(super) use dereference::group_context;

/// Runs one pass over `group` and reports its outcome in the status: what the pass did, or why
/// it stopped.
///
/// `checked` is what the pipeline made of the spec ([`super::pipeline::checked_forge`]) before it took its turn.
pub(super) async fn run(
    group: Arc<RunnerGroup>,
    ctx: &Context,
    checked: CheckedForge<'_>,
) -> Result<Action, ReconcileError> {
    let key = group_key(&group);
    let mut ledger = ctx.lease_ledger(&key);
    let group = ledger.status.overlay(group);
    match steps(&group, ctx, checked, &mut ledger).await {
        Ok(action) => {
            ctx.record_success(&key);
            Ok(action)
        }
        Err(e) => {
            // A Secret fixed after this failure is read on the next try, not after the TTL.
            ledger.refs = None;
            let mut conds = error_conditions(e.category(), &e.to_string());
            conds.extend(report::watch_queue_after_error(
                ctx,
                &group,
                e.category(),
                &ledger.waits,
            ));
            report::write_status(ctx, &group, &conds, None, false, &mut ledger.status).await;
            if ledger.status.unreported() {
                return Err(ReconcileError::Unreported(Box::new(e)));
            }
            Err(e)
        }
    }
}

async fn steps(
    group: &RunnerGroup,
    ctx: &Context,
    checked: CheckedForge<'_>,
    ledger: &mut Ledger,
) -> Result<Action, ReconcileError> {
    if !ctx.jobs_synced.load(std::sync::atomic::Ordering::SeqCst) {
        // Planning on a store that has not listed yet would count no runners.
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    let found = dereference::dereference(ctx, group, checked, ledger).await?;
    let seen = observe::observe(ctx, group, &found, ledger).await?;
    let decided = decide::decide(group, &seen, ctx.calendar.now(), ledger);
    let done = act::act(ctx, group, &found, &seen, &decided, ledger).await;
    report::report(ctx, group, &found, &seen, decided, done, ledger).await
}
