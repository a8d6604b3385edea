//! Events on a `RunnerGroup`: condition transitions, runner failures, scale summaries. Bounded:
//! at most a handful per reconcile, and only when something changed.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Resource;
use kube::runtime::events::{Event, EventType};
use tracing::warn;

use super::apply::ApplyReport;
use super::context::Context;
use super::error::ServerMessage;
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

/// Most bytes of an Event note a real API server stores: `legacyValidateEvent` refuses a longer
/// one with 422 (`NoteLengthLimit`, compared with Go's `len`, so in bytes;
/// `pkg/apis/core/validation/events.go`).
pub const NOTE_LIMIT: usize = 1024;
/// What ends a note cut to [`NOTE_LIMIT`].
const CUT_MARK: &str = "…";
/// Most bytes of an Event `action` (`ActionLengthLimit`, same file and function; no charset
/// rule applies to it).
const ACTION_LIMIT: usize = 128;

/// The Events a group got within the last [`EVENT_REPEAT_WINDOW`], by reason and note.
///
/// Agrees with kube's Recorder: the Recorder keys a series by type, action, reason, reporter and
/// object, not by note, so [`event_action`] puts a hash of the note into the action. A note this
/// filter lets through as new therefore starts a new Event, and a repeat it lets through after
/// the window counts on the series of an Event that carries the same note.
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

/// `note` cut to at most [`NOTE_LIMIT`] bytes at a char boundary, ending in [`CUT_MARK`] (counted
/// in the limit) when cut.
pub fn fit_note(mut note: String) -> String {
    if note.len() <= NOTE_LIMIT {
        return note;
    }
    let end = note.floor_char_boundary(NOTE_LIMIT - CUT_MARK.len());
    note.truncate(end);
    note.push_str(CUT_MARK);
    note
}

/// The Event `action` for `base` (e.g. `CreateRunners`) and `note`: `base-<8 hex>` of a hash of
/// the note.
///
/// kube's Recorder (kube-runtime 5.0 `src/events.rs`, `EventKey`, `Recorder::publish`) keys a
/// series without the note and, on a repeat within its six-minute cache, patches the cached
/// Event's `series`, which keeps the first note: "created 3 runners" showed as "created 1
/// runners" counted twice. The server cannot fix that either, since `ValidateEventUpdate` makes
/// the note immutable. With the note's hash in the action, each new note is its own Event.
pub fn event_action(base: &str, note: &str) -> String {
    // 32 bits tell the few notes a group gets within the recorder's cache TTL apart.
    let suffix = format!(
        "-{:08x}",
        crate::stable_hash::fnv1a(note.as_bytes()) & 0xffff_ffff
    );
    let base = &base[..base.floor_char_boundary(ACTION_LIMIT - suffix.len())];
    format!("{base}{suffix}")
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
    // Cut first: what the filter and the Recorder compare is the note the server stores.
    let note = fit_note(note);
    let key = super::pipeline::group_key(group);
    if !ctx.with_memory(&key, |m| m.recent_events.admit(reason, &note, Instant::now())) {
        return;
    }
    let ev = Event {
        type_,
        reason: reason.to_owned(),
        action: event_action(action, &note),
        note: Some(note),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &group.object_ref(&())).await {
        // Events are best effort (the status carries the same facts), but a refused one is
        // worth seeing: it is usually the one a user needed. Bounded by the repeat filter and
        // the few Events per pass; the note is left out, the server's message says what failed.
        warn!(group = %key, reason, error = %ServerMessage(&e), "event not published");
    }
}

/// Whether a condition in this state needs attention.
fn is_bad(c: &Condition) -> bool {
    match ConditionType::parse(&c.type_) {
        Some(ConditionType::Degraded | ConditionType::QueueStalled | ConditionType::RunnerOutdated) => {
            c.status == "True"
        }
        Some(ConditionType::Scaling) | None => false,
        Some(_) => c.status == "False",
    }
}

/// One Event per changed condition (Scaling transitions are covered by the scale summary, and
/// a stall by [`queue_stalled`], once per stall rather than per change of cause).
pub async fn transitions(ctx: &Context, group: &RunnerGroup, changed: &[Condition]) {
    let own_events = [
        ConditionType::Scaling.as_str(),
        ConditionType::QueueStalled.as_str(),
    ];
    for c in changed.iter().filter(|c| !own_events.contains(&c.type_.as_str())) {
        let type_ = if is_bad(c) {
            EventType::Warning
        } else {
            EventType::Normal
        };
        let note = format!("{} is {}: {}", c.type_, c.status, c.message);
        publish(ctx, group, type_, &c.reason, "Reconcile", note).await;
    }
}

/// The Warning Event of a stall that began ([`super::stalled::stall_began`]): reason
/// `QueueStalled`, the condition's message (job, since when, likely cause) as its note.
pub async fn queue_stalled(ctx: &Context, group: &RunnerGroup, stalled: &Condition) {
    let note = format!("{} ({}): {}", stalled.type_, stalled.reason, stalled.message);
    publish(
        ctx,
        group,
        EventType::Warning,
        ConditionType::QueueStalled.as_str(),
        "WatchQueue",
        note,
    )
    .await;
}

/// A Warning Event (reason `UnmatchedJob`) for a job of the group's scope that no group's
/// labels match ([`super::stalled::WaitBook::unmatched_due`] says when, once per job).
pub async fn unmatched_job(ctx: &Context, group: &RunnerGroup, job: &crate::forge::UnmatchedJob) {
    let note = super::stalled::unmatched_note(job);
    publish(ctx, group, EventType::Warning, "UnmatchedJob", "WatchQueue", note).await;
}

/// One Event per runner kept though it has not started in time, because a waiting job needs it
/// (bounded per pass; a repeat of the same note is not written again at once).
pub async fn waiting_out(ctx: &Context, group: &RunnerGroup, runners: &[(String, crate::startup::Stuck)]) {
    for (name, stuck) in runners.iter().take(MAX_STUCK_EVENTS) {
        let note = format!(
            "runner {name} has not started: {}; kept while a job waits for it",
            stuck.message
        );
        publish(
            ctx,
            group,
            EventType::Warning,
            stuck.cause.as_str(),
            "WaitForRunners",
            note,
        )
        .await;
    }
}

/// Scale up / down and runner failure summaries of one pass.
pub async fn scaling(ctx: &Context, group: &RunnerGroup, s: &PassSummary, r: &ApplyReport) {
    for n in scaling_notes(s, r) {
        publish(ctx, group, n.type_, n.reason, n.action, n.note).await;
    }
}

/// One Event to publish.
struct Note {
    type_: EventType,
    reason: &'static str,
    action: &'static str,
    note: String,
}

/// The Events that tell what one pass created and removed.
fn scaling_notes(s: &PassSummary, r: &ApplyReport) -> Vec<Note> {
    let note = |type_, reason, action, note| Note {
        type_,
        reason,
        action,
        note,
    };
    let mut out = Vec::new();
    if s.created > 0 {
        let text = format!("created {} runners", s.created);
        out.push(note(EventType::Normal, "ScaledUp", "CreateRunners", text));
    }
    if s.scaled_down > 0 {
        let text = format!("removed {} idle runners", s.scaled_down);
        out.push(note(EventType::Normal, "ScaledDown", "RemoveRunners", text));
    }
    if !r.failed_deleted.is_empty() {
        let shown: Vec<&str> = r.failed_deleted.iter().take(5).map(String::as_str).collect();
        let more = if r.failed_deleted.len() > shown.len() {
            ", …"
        } else {
            ""
        };
        let text = format!(
            "{} runners failed ({}{more}); {} in a row",
            r.failed_deleted.len(),
            shown.join(", "),
            s.failed_runners
        );
        out.push(note(EventType::Warning, "RunnerFailed", "RemoveRunners", text));
    }
    // One Event per runner that did not start, quoting Kubernetes (bounded per pass; the
    // condition carries the latest).
    for (name, cause, message) in r.stuck.iter().take(MAX_STUCK_EVENTS) {
        let text = format!("runner {name} did not start and was removed: {message}");
        out.push(note(EventType::Warning, cause.as_str(), "RemoveRunners", text));
    }
    if r.spec_replaced > 0 {
        let text = format!(
            "replacing {} idle runners built from an older spec; busy runners finish first",
            r.spec_replaced
        );
        out.push(note(EventType::Normal, "SpecChanged", "RemoveRunners", text));
    }
    if !r.outdated.is_empty() {
        let shown: Vec<&str> = r.outdated.iter().take(5).map(String::as_str).collect();
        let text = format!(
            "outdated runner exited ({}): update spec.image (or the runner container's image in spec.template)",
            shown.join(", ")
        );
        let reason = ConditionReason::RunnerOutdated.as_str();
        out.push(note(EventType::Warning, reason, "RemoveRunners", text));
    }
    out
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

    /// `legacyValidateEvent` (k8s.io/kubernetes `pkg/apis/core/validation/events.go`) refuses
    /// `len(event.Message) > NoteLengthLimit` (1024), Go's `len` counting bytes.
    #[test]
    fn long_notes_are_cut_to_the_servers_byte_limit_at_a_char_boundary() {
        // 'é' is 2 bytes and '€' 3: 1100 bytes, and the cut point falls inside a character.
        let note = format!("x{}", "é€".repeat(220));
        assert_eq!(note.len(), 1101);
        let cut = fit_note(note.clone());
        assert!(cut.len() <= NOTE_LIMIT, "{} bytes", cut.len());
        assert!(cut.len() > NOTE_LIMIT - 4, "cut no shorter than needed");
        assert!(cut.ends_with(CUT_MARK));
        assert!(note.starts_with(cut.trim_end_matches(CUT_MARK)));

        let exact = "a".repeat(NOTE_LIMIT);
        assert_eq!(
            fit_note(exact.clone()),
            exact,
            "a note at the limit is kept whole"
        );
        assert_eq!(fit_note("short".into()), "short");
    }

    /// kube-runtime 5.0 `src/events.rs`: `EventKey` holds the action but not the note, and a
    /// repeat of a key within `CACHE_TTL` patches the cached Event's series (old note kept).
    #[test]
    fn a_new_note_gets_a_new_action_so_a_new_event() {
        let one = event_action("CreateRunners", "created 1 runners");
        let three = event_action("CreateRunners", "created 3 runners");
        assert_ne!(one, three);
        assert_eq!(one, event_action("CreateRunners", "created 1 runners"), "stable");
        assert!(one.starts_with("CreateRunners-") && one.len() == "CreateRunners-".len() + 8);
        let long = event_action(&"A".repeat(300), "n");
        assert!(long.len() <= ACTION_LIMIT, "{}", long.len());
    }

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
