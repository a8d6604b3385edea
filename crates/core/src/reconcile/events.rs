//! Events on a `RunnerGroup`: condition transitions, runner failures, scale summaries. Bounded:
//! at most a handful per reconcile, and only when something changed.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Resource;
use kube::runtime::events::{Event, EventType};
use tracing::debug;

use super::apply::ApplyReport;
use super::context::Context;
use super::status::PassSummary;
use crate::conditions::{ConditionReason, ConditionType};
use crate::crd::RunnerGroup;

/// Most "runner did not start" Events one pass publishes.
const MAX_STUCK_EVENTS: usize = 3;

/// Publishes one Event on `group`; best effort.
pub(super) async fn publish(
    ctx: &Context,
    group: &RunnerGroup,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let ev = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: action.to_owned(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &group.object_ref(&())).await {
        // Events are best effort; the status carries the same facts.
        debug!(error = %e, reason, "event not published");
    }
}

/// Whether a condition in this state needs attention.
fn is_bad(c: &Condition) -> bool {
    match ConditionType::parse(&c.type_) {
        Some(ConditionType::Degraded) => c.status == "True",
        Some(ConditionType::Scaling) | None => false,
        Some(_) => c.status == "False",
    }
}

/// One Event per changed condition (Scaling transitions are covered by the scale summary).
pub async fn transitions(ctx: &Context, group: &RunnerGroup, changed: &[Condition]) {
    for c in changed
        .iter()
        .filter(|c| c.type_ != ConditionType::Scaling.as_str())
    {
        let type_ = if is_bad(c) {
            EventType::Warning
        } else {
            EventType::Normal
        };
        let note = format!("{} is {}: {}", c.type_, c.status, c.message);
        publish(ctx, group, type_, &c.reason, "Reconcile", note).await;
    }
}

/// Scale up / down and runner failure summaries of one pass.
pub async fn scaling(ctx: &Context, group: &RunnerGroup, s: &PassSummary, r: &ApplyReport) {
    if s.created > 0 {
        publish(
            ctx,
            group,
            EventType::Normal,
            "ScaledUp",
            "CreateRunners",
            format!("created {} runners", s.created),
        )
        .await;
    }
    if s.scaled_down > 0 {
        let note = format!("removed {} idle runners", s.scaled_down);
        publish(ctx, group, EventType::Normal, "ScaledDown", "RemoveRunners", note).await;
    }
    if !r.failed_deleted.is_empty() {
        let shown: Vec<&str> = r.failed_deleted.iter().take(5).map(String::as_str).collect();
        let note = format!(
            "{} runners failed ({}{}); {} in a row",
            r.failed_deleted.len(),
            shown.join(", "),
            if r.failed_deleted.len() > shown.len() {
                ", …"
            } else {
                ""
            },
            s.failed_runners
        );
        publish(
            ctx,
            group,
            EventType::Warning,
            "RunnerFailed",
            "RemoveRunners",
            note,
        )
        .await;
    }
    // One Event per runner that did not start, quoting Kubernetes (bounded per pass; the
    // condition carries the latest).
    for (name, cause, message) in r.stuck.iter().take(MAX_STUCK_EVENTS) {
        let note = format!("runner {name} did not start and was removed: {message}");
        publish(
            ctx,
            group,
            EventType::Warning,
            cause.as_str(),
            "RemoveRunners",
            note,
        )
        .await;
    }
    if r.spec_replaced > 0 {
        let note = format!(
            "replacing {} idle runners built from an older spec; busy runners finish first",
            r.spec_replaced
        );
        publish(
            ctx,
            group,
            EventType::Normal,
            "SpecChanged",
            "RemoveRunners",
            note,
        )
        .await;
    }
    if !r.outdated.is_empty() {
        let shown: Vec<&str> = r.outdated.iter().take(5).map(String::as_str).collect();
        let note = format!(
            "outdated runner exited ({}): update spec.image (or the runner container's image in spec.template)",
            shown.join(", ")
        );
        publish(
            ctx,
            group,
            EventType::Warning,
            ConditionReason::RunnerOutdated.as_str(),
            "RemoveRunners",
            note,
        )
        .await;
    }
}

/// Once per spec generation: the group's runner pods break the `restricted` Pod Security
/// profile, so a namespace enforcing it refuses them (the refusal then shows as
/// `Degraded=True PodRejected`).
pub async fn pod_security(ctx: &Context, group: &RunnerGroup, violations: &[String]) {
    let shown: Vec<&str> = violations.iter().take(3).map(String::as_str).collect();
    let note = format!(
        "runner pods do not meet the restricted Pod Security Standard ({}{}); a namespace enforcing \
         restricted refuses them. Expected for containerMode dind (privileged sidecar); otherwise \
         check spec.template's securityContext",
        shown.join("; "),
        if violations.len() > shown.len() {
            "; …"
        } else {
            ""
        }
    );
    publish(
        ctx,
        group,
        EventType::Warning,
        "PodSecurityRestricted",
        "CreateRunners",
        note,
    )
    .await;
}
