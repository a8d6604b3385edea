//! Events on a `RunnerGroup`: condition transitions, runner failures, scale summaries. Bounded:
//! at most a handful per reconcile, and only when something changed.

use std::collections::HashMap;
use std::time::{Duration, Instant};

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

/// How long a repeat of an Event a group already got (same reason and note) is not written.
/// kube's recorder patches the Event's series on every repeat, so a group scaling up one runner
/// per pass wrote one Event per runner; client-go's recorder refreshes a series only every
/// 30 minutes. A minute keeps `kubectl get events` current at a fraction of the writes.
pub const EVENT_REPEAT_WINDOW: Duration = Duration::from_secs(60);

/// The Events a group got within the last [`EVENT_REPEAT_WINDOW`], by reason and note.
#[derive(Debug, Default)]
pub struct RecentEvents(HashMap<(String, String), Instant>);

impl RecentEvents {
    /// Whether an Event with this reason and note is to be written at `now` (and remembers it
    /// if so): not when the same one was written within the window.
    pub fn admit(&mut self, reason: &str, note: &str, now: Instant) -> bool {
        self.0
            .retain(|_, at| now.saturating_duration_since(*at) < EVENT_REPEAT_WINDOW);
        let key = (reason.to_owned(), note.to_owned());
        if self.0.contains_key(&key) {
            return false;
        }
        self.0.insert(key, now);
        true
    }
}

/// Publishes one Event on `group` unless it repeats a recent one; best effort.
pub(super) async fn publish(
    ctx: &Context,
    group: &RunnerGroup,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let key = super::pipeline::group_key(group);
    if !ctx.with_memory(&key, |m| m.recent_events.admit(reason, &note, Instant::now())) {
        return;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeat_is_written_again_only_after_the_window() {
        let mut recent = RecentEvents::default();
        let t0 = Instant::now();
        assert!(recent.admit("ScaledUp", "created 1 runners", t0));
        assert!(!recent.admit("ScaledUp", "created 1 runners", t0 + Duration::from_secs(5)));
        assert!(recent.admit("ScaledUp", "created 2 runners", t0 + Duration::from_secs(5)));
        assert!(recent.admit("ScaledDown", "created 1 runners", t0 + Duration::from_secs(5)));
        assert!(recent.admit("ScaledUp", "created 1 runners", t0 + EVENT_REPEAT_WINDOW));
        let later = t0 + EVENT_REPEAT_WINDOW * 3;
        assert!(recent.admit("ScaledUp", "created 3 runners", later));
        assert_eq!(recent.0.len(), 1, "entries past the window are dropped");
    }
}
