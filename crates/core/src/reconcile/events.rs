//! Events on a `RunnerGroup`: condition transitions, runner failures, scale summaries. Bounded:
//! at most a handful per reconcile, and only when something changed.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
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

/// How long a written Event is remembered so that a repeat counts on its `series` instead of
/// making a new Event: kube's Recorder's `CACHE_TTL` (kube-runtime 5.0 `src/events.rs`), counted
/// from the last time the Event was observed, as there.
pub const SERIES_TTL: Duration = Duration::from_secs(6 * 60);

/// The Events a group wrote lately, by reason and note: what the repeat filter and an Event's
/// series need.
///
/// Agrees with kube's Recorder, which kept a copy of every Event for the series and no longer
/// writes them ([`super::event_writer`]): the Recorder keys a series by type, action, reason,
/// reporter and object, not by note, so [`event_action`] puts a hash of the note into the
/// action. A note this filter lets through as new therefore starts a new Event, and a repeat it
/// lets through after the window counts on the series of the Event that carries the same note.
#[derive(Debug, Default)]
pub struct RecentEvents(HashMap<(String, String), Recent>);

/// One Event of [`RecentEvents`].
#[derive(Debug)]
struct Recent {
    /// When the filter last let it through.
    admitted: Instant,
    /// The Event on the server its repeats count on, once one was written.
    written: Option<Written>,
}

/// An Event on the server and how often it was observed.
#[derive(Debug)]
struct Written {
    /// What else the Recorder keyed the series by.
    key: SeriesKey,
    /// The Event's name.
    name: String,
    /// Observations so far (1: just created).
    count: i32,
    /// When it was last written.
    observed: Instant,
}

/// What, beside reason and note, kube's Recorder keys an Event series by (`EventKey`): the
/// type, the action, and the object down to its uid and resourceVersion (`ObjectReference`'s
/// equality; the reporter and the object's kind, namespace and name are the same for every
/// Event of a group).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesKey {
    type_: EventType,
    action: String,
    uid: Option<String>,
    resource_version: Option<String>,
}

impl SeriesKey {
    /// The key of an Event of this type and action about `regarding`.
    pub fn new(type_: EventType, action: &str, regarding: &ObjectReference) -> SeriesKey {
        SeriesKey {
            type_,
            action: action.to_owned(),
            uid: regarding.uid.clone(),
            resource_version: regarding.resource_version.clone(),
        }
    }
}

/// What to write for an Event the filter let through.
#[derive(Debug, PartialEq, Eq)]
pub enum Write {
    /// A new Event.
    Create,
    /// Count one more observation on the Event `name`: `count` in all.
    Count {
        /// The Event's name.
        name: String,
        /// Observations with this one.
        count: i32,
    },
}

impl RecentEvents {
    /// What to write for an Event with this reason, note and key at `now`: nothing when the
    /// same one was let through within the window; a count on its series when it was written
    /// within [`SERIES_TTL`] under the same key; else a new Event. Remembers the admission.
    pub fn admit(&mut self, reason: &str, note: &str, key: &SeriesKey, now: Instant) -> Option<Write> {
        self.0.retain(|_, r| {
            now.saturating_duration_since(r.admitted) < EVENT_REPEAT_WINDOW
                || r.written
                    .as_ref()
                    .is_some_and(|w| now.saturating_duration_since(w.observed) < SERIES_TTL)
        });
        let recent = match self.0.entry((reason.to_owned(), note.to_owned())) {
            Entry::Vacant(v) => {
                v.insert(Recent {
                    admitted: now,
                    written: None,
                });
                return Some(Write::Create);
            }
            Entry::Occupied(o) => o.into_mut(),
        };
        if now.saturating_duration_since(recent.admitted) < EVENT_REPEAT_WINDOW {
            return None;
        }
        recent.admitted = now;
        Some(match &recent.written {
            Some(w) if w.key == *key && now.saturating_duration_since(w.observed) < SERIES_TTL => {
                Write::Count {
                    name: w.name.clone(),
                    count: w.count.saturating_add(1),
                }
            }
            _ => Write::Create,
        })
    }

    /// Notes that the Event `name` (reason, note, key) was written at `now`, observed `count`
    /// times in all. Only a written Event is counted on: after a failed write the next repeat
    /// tries what it would have tried, as with kube's Recorder.
    pub fn wrote(
        &mut self,
        reason: &str,
        note: &str,
        key: SeriesKey,
        name: String,
        count: i32,
        now: Instant,
    ) {
        let recent = self
            .0
            .entry((reason.to_owned(), note.to_owned()))
            .or_insert(Recent {
                admitted: now,
                written: None,
            });
        recent.written = Some(Written {
            key,
            name,
            count,
            observed: now,
        });
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
    // Cut first: what the filter and the series compare is the note the server stores.
    let note = fit_note(note);
    let key = super::pipeline::group_key(group);
    let action = event_action(action, &note);
    let regarding = group.object_ref(&());
    let series = SeriesKey::new(type_, &action, &regarding);
    let admitted = ctx.with_memory(&key, |m| {
        m.recent_events.admit(reason, &note, &series, Instant::now())
    });
    let Some(write) = admitted else {
        return;
    };
    let written = match write {
        Write::Create => {
            let ev = Event {
                type_,
                reason: reason.to_owned(),
                action,
                note: Some(note.clone()),
                secondary: None,
            };
            ctx.recorder.create(&ev, &regarding).await.map(|name| (name, 1))
        }
        Write::Count { name, count } => ctx
            .recorder
            .count(&regarding, &name, count)
            .await
            .map(|()| (name, count)),
    };
    match written {
        Ok((name, count)) => ctx.with_memory(&key, |m| {
            m.recent_events
                .wrote(reason, &note, series, name, count, Instant::now());
        }),
        // Events are best effort (the status carries the same facts), but a refused one is
        // worth seeing: it is usually the one a user needed. Bounded by the repeat filter and
        // the few Events per pass; the note is left out, the server's message says what failed.
        Err(e) => warn!(group = %key, reason, error = %ServerMessage(&e), "event not published"),
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

    fn key(resource_version: &str) -> SeriesKey {
        let regarding = ObjectReference {
            uid: Some("uid-1".into()),
            resource_version: Some(resource_version.into()),
            ..Default::default()
        };
        SeriesKey::new(EventType::Normal, "CreateRunners-00000001", &regarding)
    }

    #[test]
    fn a_repeat_is_written_again_only_after_the_window() {
        let mut recent = RecentEvents::default();
        let k = key("1");
        let t0 = Instant::now();
        let admit = |r: &mut RecentEvents, reason, note, at| r.admit(reason, note, &k, at).is_some();
        assert!(admit(&mut recent, "ScaledUp", "created 1 runners", t0));
        assert!(!admit(
            &mut recent,
            "ScaledUp",
            "created 1 runners",
            t0 + Duration::from_secs(5)
        ));
        assert!(admit(
            &mut recent,
            "ScaledUp",
            "created 2 runners",
            t0 + Duration::from_secs(5)
        ));
        assert!(admit(
            &mut recent,
            "ScaledDown",
            "created 1 runners",
            t0 + Duration::from_secs(5)
        ));
        assert!(admit(
            &mut recent,
            "ScaledUp",
            "created 1 runners",
            t0 + EVENT_REPEAT_WINDOW
        ));
        let later = t0 + EVENT_REPEAT_WINDOW * 3;
        assert!(admit(&mut recent, "ScaledUp", "created 3 runners", later));
        assert_eq!(recent.0.len(), 1, "entries past the window are dropped");
    }

    /// kube-runtime 5.0 `Recorder::publish`: a repeat under the same key within `CACHE_TTL` of
    /// the last observation patches the cached Event's series (count + 1); past it, or under
    /// another key (the object's resourceVersion is part of it), a new Event is created.
    #[test]
    fn a_written_repeat_counts_on_its_series_while_the_recorder_would() {
        let mut recent = RecentEvents::default();
        let (note, t0) = ("created 1 runners", Instant::now());
        assert_eq!(recent.admit("ScaledUp", note, &key("1"), t0), Some(Write::Create));
        recent.wrote("ScaledUp", note, key("1"), "g.1".into(), 1, t0);

        let t1 = t0 + EVENT_REPEAT_WINDOW;
        let second = Write::Count {
            name: "g.1".into(),
            count: 2,
        };
        assert_eq!(recent.admit("ScaledUp", note, &key("1"), t1), Some(second));
        recent.wrote("ScaledUp", note, key("1"), "g.1".into(), 2, t1);

        // Not written (refused): the next repeat tries the same count again.
        let count_3 = || Write::Count {
            name: "g.1".into(),
            count: 3,
        };
        let t2 = t1 + EVENT_REPEAT_WINDOW * 2;
        assert_eq!(recent.admit("ScaledUp", note, &key("1"), t2), Some(count_3()));
        let t3 = t2 + EVENT_REPEAT_WINDOW;
        assert_eq!(recent.admit("ScaledUp", note, &key("1"), t3), Some(count_3()));
        recent.wrote("ScaledUp", note, key("1"), "g.1".into(), 3, t3);

        let t4 = t3 + EVENT_REPEAT_WINDOW;
        assert_eq!(
            recent.admit("ScaledUp", note, &key("2"), t4),
            Some(Write::Create),
            "the group changed since: another key"
        );
        recent.wrote("ScaledUp", note, key("2"), "g.2".into(), 1, t4);

        // Kept past the filter's window while the series lives, counted from its last write.
        let t5 = t4 + SERIES_TTL - Duration::from_secs(1);
        let count_2 = Write::Count {
            name: "g.2".into(),
            count: 2,
        };
        assert_eq!(recent.admit("ScaledUp", note, &key("2"), t5), Some(count_2));
        let t6 = t5 + EVENT_REPEAT_WINDOW;
        assert_eq!(
            recent.admit("ScaledUp", note, &key("2"), t6),
            Some(Write::Create),
            "the series ended six minutes after its last write"
        );
        assert_eq!(recent.0.len(), 1);
    }
}
