//! Scheduled warm pools: `spec.schedules`, recurring windows that set `minRunners` (and
//! optionally `maxRunners`) while they are open, e.g. five warm runners on weekdays from 08:00 to
//! 18:00 Berlin time and none at night.
//!
//! # Shape: a start and an end expression
//! Each entry opens at `start` and closes at `end`, two 5-field cron expressions read in the
//! entry's `timeZone` (IANA name, default `UTC`): KEDA's cron scaler shape (`start`, `end`,
//! `timezone`). ARC legacy's `scheduledOverrides` (one `startTime`/`endTime` pair repeated
//! `Daily`/`Weekly`/`Monthly`/`Yearly`) needs five entries to say "weekdays", and a
//! `durationMinutes` makes a reader compute "600" and drifts off the wall clock across a DST
//! change; `end: "0 18 * * MON-FRI"` reads as the clock its author thinks in.
//!
//! # When a window is open
//! At instant `t` an entry is open when its latest `start` at or before `t` is later than its
//! latest `end` at or before `t` (KEDA's cron scaler decides it forwards: open unless the next
//! start comes before the next end). An instant at which both fire closes the window, so `end`
//! equal to `start` would never open and is refused. A window is open on `[opening, closing)`.
//!
//! # Overlapping windows: the largest wins
//! While several windows are open, `minRunners` is the largest of theirs and `maxRunners` the
//! largest of theirs (a window without `maxRunners` counts as `spec.maxRunners`). The result
//! never depends on the list's order (ARC legacy's "first in the list wins" makes reordering a
//! behaviour change) and an extra window (a release day) can only add warm runners, never take
//! away those another open window asked for ("the one started last wins" would let a routine
//! 08:00 window undo a 07:00 release-day window). Each window's own minimum is at most its own
//! maximum, so the combined minimum is at most the combined maximum.
//!
//! # Daylight saving time
//! [croner](https://docs.rs/croner) follows the Open Cron Pattern Specification: a fixed time
//! that a spring-forward gap skips fires at the first instant after the gap (a window starting at
//! 02:30 in Berlin opens at 03:00 CEST on the last Sunday of March), and a fixed time that a
//! fall-back repeats fires once, the first time the clock reads it (a window starting at 01:30 in
//! New York opens at 01:30 EDT on the first Sunday of November and does not open again at 01:30
//! EST). Windows follow the wall clock, so one from 01:00 to 02:00 lasts two hours that night.
//!
//! # Time zone data
//! jiff reads the system's time zone database (`/usr/share/zoneinfo`, which the distroless image
//! ships through its `tzdata` package) and, with the `tzdb-bundle-always` feature this crate
//! enables, falls back to a bundled copy where there is none (a scratch image, a bare binary).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::validate::{MAX_RUNNERS_LIMIT, SpecViolation, chars, violation};

/// Most entries in `spec.schedules`.
pub const MAX_SCHEDULES: usize = 32;
/// Longest schedule name (the status and Events quote it).
pub const MAX_SCHEDULE_NAME_LEN: usize = 63;
/// Longest cron expression of `start` or `end`.
pub const MAX_CRON_LEN: usize = 128;
/// Longest time zone name (the longest IANA name has 32 characters).
pub const MAX_TIME_ZONE_LEN: usize = 64;
/// Time zone of an entry without `timeZone`.
pub const DEFAULT_TIME_ZONE: &str = "UTC";

/// JSON path of the list, named by violations about the list as a whole.
pub const SCHEDULES_FIELD: &str = "spec.schedules";
/// JSON path of an entry's name (`SpecViolation::field` is static, so the entry is named in the
/// message).
pub const NAME_FIELD: &str = "spec.schedules[].name";
/// JSON path of an entry's start expression.
pub const START_FIELD: &str = "spec.schedules[].start";
/// JSON path of an entry's end expression.
pub const END_FIELD: &str = "spec.schedules[].end";
/// JSON path of an entry's time zone.
pub const TIME_ZONE_FIELD: &str = "spec.schedules[].timeZone";
/// JSON path of an entry's minimum.
pub const MIN_RUNNERS_FIELD: &str = "spec.schedules[].minRunners";
/// JSON path of an entry's maximum.
pub const MAX_RUNNERS_FIELD: &str = "spec.schedules[].maxRunners";

/// Closed windows whose next starts all coincide with an end (so do not open) are followed this
/// many starts ahead; past that the last start examined is returned as a time to look again.
const MAX_COINCIDENT_STARTS: usize = 64;

/// One recurring window of a scheduled warm pool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Schedule {
    /// Name of the window, unique in the group; the status names the open window by it.
    #[schemars(length(min = 1, max = MAX_SCHEDULE_NAME_LEN))]
    pub name: String,
    /// When the window opens: a 5-field cron expression (minute hour day-of-month month
    /// day-of-week) read in `timeZone`, e.g. `0 8 * * MON-FRI`.
    #[schemars(length(min = 1, max = MAX_CRON_LEN))]
    pub start: String,
    /// When the window closes, in the same form, e.g. `0 18 * * MON-FRI`.
    #[schemars(length(min = 1, max = MAX_CRON_LEN))]
    pub end: String,
    /// IANA time zone of `start` and `end`, e.g. `Europe/Berlin` (default `UTC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_TIME_ZONE_LEN))]
    pub time_zone: Option<String>,
    /// Idle runners kept ready while the window is open, in place of `spec.minRunners`
    /// (overlapping windows: the largest).
    #[schemars(range(min = 0), extend("format" = "int32"))]
    pub min_runners: u32,
    /// Upper bound on runners while the window is open, in place of `spec.maxRunners` (1 to
    /// 1000; overlapping windows: the largest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_RUNNERS_LIMIT), extend("format" = "int32"))]
    pub max_runners: Option<u32>,
}

impl Schedule {
    /// The time zone name with its default applied.
    pub fn time_zone(&self) -> &str {
        self.time_zone.as_deref().unwrap_or(DEFAULT_TIME_ZONE)
    }
}

/// Where a group's schedules stand, for its status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleStatus {
    /// The open window whose `minRunners` is in force (the largest; the first listed on a tie);
    /// unset while no window is open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<String>,
    /// Every open window, in the order of `spec.schedules` (several when windows overlap).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub open: Vec<String>,
    /// When the active window opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_since: Option<Time>,
    /// When the active window closes; unset if it never does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_until: Option<Time>,
    /// When a window next opens or closes; the limits below hold until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_change: Option<Time>,
    /// `minRunners` in force.
    #[serde(default)]
    #[schemars(extend("format" = "int32"))]
    pub min_runners: u32,
    /// `maxRunners` in force.
    #[serde(default)]
    #[schemars(extend("format" = "int32"))]
    pub max_runners: u32,
}

/// A group's schedules, checked and parsed, ready to be asked about any instant.
#[derive(Clone, Debug)]
pub struct Calendar {
    windows: Vec<Window>,
}

/// One parsed entry.
#[derive(Clone, Debug)]
struct Window {
    name: String,
    start: Cron,
    end: Cron,
    tz: TimeZone,
    min_runners: u32,
    max_runners: Option<u32>,
}

/// A window open at the instant asked about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenWindow {
    /// The entry's name.
    pub name: String,
    /// When it opened: its first start after its latest end.
    pub since: Timestamp,
    /// When it closes; `None` if its end never fires again.
    pub until: Option<Timestamp>,
    /// The entry's `minRunners`.
    pub min_runners: u32,
    /// The entry's `maxRunners`, if set.
    pub max_runners: Option<u32>,
}

/// The schedules at one instant: which windows are open and when that changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleState {
    /// The open windows, in the order of `spec.schedules`.
    pub open: Vec<OpenWindow>,
    /// When a window next opens or closes: the open windows stay the same on `[now,
    /// next_change)`. Exact, except for a closed window whose next 64 starts each coincide with
    /// an end: then the last start examined, a time to look again. `None` when no window ever
    /// changes again.
    pub next_change: Option<Timestamp>,
}

/// The runner limits in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Idle runners to keep ready.
    pub min_runners: u32,
    /// Upper bound on runners.
    pub max_runners: u32,
}

/// Checks `spec.schedules` (`spec_max_runners` bounds an entry without `maxRunners`); empty when
/// valid. The reconciler's twin of the CRD schema's rules, plus what no schema can say: the cron
/// expressions, the time zones and unique names.
pub fn validate_schedules(schedules: &[Schedule], spec_max_runners: u32) -> Vec<SpecViolation> {
    check(schedules, spec_max_runners).1
}

impl Calendar {
    /// Checks and parses `spec.schedules`; the violations when any entry is invalid (the same
    /// as [`validate_schedules`]).
    pub fn parse(schedules: &[Schedule], spec_max_runners: u32) -> Result<Calendar, Vec<SpecViolation>> {
        let (windows, violations) = check(schedules, spec_max_runners);
        if violations.is_empty() {
            Ok(Calendar { windows })
        } else {
            Err(violations)
        }
    }

    /// True when the group has no schedules (its limits are always the spec's).
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    /// The windows open at `now` and the next instant that changes.
    pub fn at(&self, now: Timestamp) -> ScheduleState {
        let mut open = Vec::new();
        let mut next_change: Option<Timestamp> = None;
        for w in &self.windows {
            let (window, change) = w.at(&now.to_zoned(w.tz.clone()));
            open.extend(window);
            next_change = match (next_change, change) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        ScheduleState { open, next_change }
    }
}

impl ScheduleState {
    /// The open window whose `minRunners` is in force: the largest, the first listed on a tie.
    pub fn active(&self) -> Option<&OpenWindow> {
        // `max_by_key` keeps the last of equal keys; the reversed walk makes that the first.
        self.open.iter().rev().max_by_key(|w| w.min_runners)
    }

    /// The limits in force given the spec's own `minRunners` and `maxRunners`: the spec's while
    /// no window is open, else the largest of the open windows' (see the module doc).
    pub fn limits(&self, spec_min_runners: u32, spec_max_runners: u32) -> Limits {
        let min = self.open.iter().map(|w| w.min_runners).max();
        let max = self
            .open
            .iter()
            .map(|w| w.max_runners.unwrap_or(spec_max_runners))
            .max();
        Limits {
            min_runners: min.unwrap_or(spec_min_runners),
            max_runners: max.unwrap_or(spec_max_runners),
        }
    }

    /// How long from `now` until [`ScheduleState::next_change`], to requeue the group exactly
    /// then; `None` when nothing changes again. Zero if `now` is already past it.
    pub fn requeue_after(&self, now: Timestamp) -> Option<Duration> {
        let change = self.next_change?;
        Some(now.duration_until(change).try_into().unwrap_or(Duration::ZERO))
    }

    /// The status block for these windows and limits.
    pub fn status(&self, spec_min_runners: u32, spec_max_runners: u32) -> ScheduleStatus {
        let limits = self.limits(spec_min_runners, spec_max_runners);
        let active = self.active();
        ScheduleStatus {
            active: active.map(|w| w.name.clone()),
            open: self.open.iter().map(|w| w.name.clone()).collect(),
            active_since: active.map(|w| Time(w.since)),
            active_until: active.and_then(|w| w.until).map(Time),
            next_change: self.next_change.map(Time),
            min_runners: limits.min_runners,
            max_runners: limits.max_runners,
        }
    }
}

impl Window {
    /// The window at `now` (in its own time zone): open or not, and when that changes.
    fn at(&self, now: &Zoned) -> (Option<OpenWindow>, Option<Timestamp>) {
        let last_start = previous(&self.start, now);
        let last_end = previous(&self.end, now);
        let is_open = match (&last_start, &last_end) {
            (Some(s), Some(e)) => s.timestamp() > e.timestamp(),
            (Some(_), None) => true,
            (None, _) => false,
        };
        let Some(last_start) = last_start.filter(|_| is_open) else {
            return (None, self.next_opening(now));
        };
        let since = last_end.and_then(|e| next(&self.start, &e)).unwrap_or(last_start);
        let until = next(&self.end, now).map(|z| z.timestamp());
        let window = OpenWindow {
            name: self.name.clone(),
            since: since.timestamp(),
            until,
            min_runners: self.min_runners,
            max_runners: self.max_runners,
        };
        (Some(window), until)
    }

    /// The next start after `now` that opens the window (one at which `end` does not fire too).
    fn next_opening(&self, now: &Zoned) -> Option<Timestamp> {
        let mut from = now.clone();
        for _ in 0..MAX_COINCIDENT_STARTS {
            let start = next(&self.start, &from)?;
            let coincides = self
                .end
                .find_next_occurrence(&start, true)
                .is_ok_and(|e| e.timestamp() == start.timestamp());
            if !coincides {
                return Some(start.timestamp());
            }
            from = start;
        }
        Some(from.timestamp())
    }
}

/// The latest time `cron` fires at or before `at`. croner fails only when it finds none within
/// its search range, which is "never" here.
fn previous(cron: &Cron, at: &Zoned) -> Option<Zoned> {
    cron.find_previous_occurrence(at, true).ok()
}

/// The first time `cron` fires strictly after `at`. Exclusive, because the callers step from one
/// firing to the next (an inclusive search from a firing returns that firing again) and croner
/// truncates `at` to the second (an inclusive search from 08:00:00.5 returns 08:00:00).
fn next(cron: &Cron, at: &Zoned) -> Option<Zoned> {
    cron.find_next_occurrence(at, false).ok()
}

/// Parses a 5-field expression: no seconds and no year field, so `0 8 * * 1-5` means what it
/// means to crontab (croner's extensions `L`, `W`, `#` and nicknames like `@daily` are allowed).
fn parse_cron(expression: &str) -> Result<Cron, croner::errors::CronError> {
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(expression)
}

/// The parsed windows and every violation; the windows are complete only without violations.
fn check(schedules: &[Schedule], spec_max_runners: u32) -> (Vec<Window>, Vec<SpecViolation>) {
    let mut out = Vec::new();
    if schedules.len() > MAX_SCHEDULES {
        out.push(violation(
            SCHEDULES_FIELD,
            format!("must list at most {MAX_SCHEDULES} schedules"),
        ));
    }
    check_unique_names(schedules, &mut out);
    let windows = schedules
        .iter()
        .enumerate()
        .filter_map(|(i, s)| check_entry(i, s, spec_max_runners, &mut out))
        .collect();
    (windows, out)
}

/// How a message names entry `i`: by name, or by index when it has none.
fn entry_label(i: usize, s: &Schedule) -> String {
    if s.name.is_empty() {
        format!("schedules[{i}]")
    } else {
        format!("schedule {:?}", s.name)
    }
}

fn check_unique_names(schedules: &[Schedule], out: &mut Vec<SpecViolation>) {
    let mut by_name: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, s) in schedules.iter().enumerate().filter(|(_, s)| !s.name.is_empty()) {
        by_name.entry(s.name.as_str()).or_default().push(i);
    }
    for (name, indexes) in by_name.into_iter().filter(|(_, ix)| ix.len() > 1) {
        let at: Vec<String> = indexes.iter().map(|i| format!("schedules[{i}]")).collect();
        out.push(violation(
            NAME_FIELD,
            format!(
                "{name:?} names more than one schedule ({}); names must be unique",
                at.join(", ")
            ),
        ));
    }
}

/// Checks one entry; its parsed window when it is valid.
fn check_entry(
    i: usize,
    s: &Schedule,
    spec_max_runners: u32,
    out: &mut Vec<SpecViolation>,
) -> Option<Window> {
    let label = entry_label(i, s);
    let before = out.len();
    if s.name.is_empty() {
        out.push(violation(NAME_FIELD, format!("{label}: name must not be empty")));
    } else if chars(&s.name) > MAX_SCHEDULE_NAME_LEN {
        out.push(violation(
            NAME_FIELD,
            format!("{label}: name must be at most {MAX_SCHEDULE_NAME_LEN} characters"),
        ));
    }
    let tz = check_time_zone(&label, s, out);
    let start = check_cron(&label, "start", START_FIELD, &s.start, tz.as_ref(), out);
    let end = check_cron(&label, "end", END_FIELD, &s.end, tz.as_ref(), out);
    if start.is_some() && end.is_some() && s.start.trim().eq_ignore_ascii_case(s.end.trim()) {
        out.push(violation(
            END_FIELD,
            format!("{label}: end equals start, so the window would never open"),
        ));
    }
    check_limits(&label, s, spec_max_runners, out);
    if out.len() > before {
        return None;
    }
    Some(Window {
        name: s.name.clone(),
        start: start?,
        end: end?,
        tz: tz?,
        min_runners: s.min_runners,
        max_runners: s.max_runners,
    })
}

fn check_time_zone(label: &str, s: &Schedule, out: &mut Vec<SpecViolation>) -> Option<TimeZone> {
    let name = s.time_zone();
    if chars(name) > MAX_TIME_ZONE_LEN {
        out.push(violation(
            TIME_ZONE_FIELD,
            format!("{label}: timeZone must be at most {MAX_TIME_ZONE_LEN} characters"),
        ));
        return None;
    }
    match jiff::tz::db().get(name) {
        Ok(tz) => Some(tz),
        Err(_) => {
            out.push(violation(
                TIME_ZONE_FIELD,
                format!(
                    "{label}: unknown time zone {name:?} (use an IANA name such as Europe/Berlin or UTC)"
                ),
            ));
            None
        }
    }
}

/// Parses `expression` of field `what`; a violation when it does not parse or never fires.
fn check_cron(
    label: &str,
    what: &str,
    field: &'static str,
    expression: &str,
    tz: Option<&TimeZone>,
    out: &mut Vec<SpecViolation>,
) -> Option<Cron> {
    if chars(expression) > MAX_CRON_LEN {
        out.push(violation(
            field,
            format!("{label}: {what} must be at most {MAX_CRON_LEN} characters"),
        ));
        return None;
    }
    let cron = match parse_cron(expression) {
        Ok(cron) => cron,
        Err(e) => {
            out.push(violation(
                field,
                format!(
                    "{label}: {what} {expression:?} is not a 5-field cron expression \
                     (minute hour day-of-month month day-of-week): {e}"
                ),
            ));
            return None;
        }
    };
    // A day that no month has (`0 0 30 2 *`) parses but never comes; croner then searches its
    // whole range on every evaluation. Whether it ever fires does not depend on when one asks.
    let reference = Timestamp::UNIX_EPOCH.to_zoned(tz.cloned().unwrap_or(TimeZone::UTC));
    if next(&cron, &reference).is_none() {
        out.push(violation(
            field,
            format!("{label}: {what} {expression:?} never fires (no such day)"),
        ));
        return None;
    }
    Some(cron)
}

fn check_limits(label: &str, s: &Schedule, spec_max_runners: u32, out: &mut Vec<SpecViolation>) {
    match s.max_runners {
        Some(0) => out.push(violation(
            MAX_RUNNERS_FIELD,
            format!("{label}: maxRunners must be at least 1"),
        )),
        Some(max) if max > MAX_RUNNERS_LIMIT => out.push(violation(
            MAX_RUNNERS_FIELD,
            format!("{label}: maxRunners must be at most {MAX_RUNNERS_LIMIT}"),
        )),
        Some(max) if s.min_runners > max => out.push(violation(
            MIN_RUNNERS_FIELD,
            format!(
                "{label}: minRunners {} exceeds its maxRunners {max}",
                s.min_runners
            ),
        )),
        None if s.min_runners > spec_max_runners => out.push(violation(
            MIN_RUNNERS_FIELD,
            format!(
                "{label}: minRunners {} exceeds spec.maxRunners {spec_max_runners} \
                 (set maxRunners on the schedule to raise the bound while it is open)",
                s.min_runners
            ),
        )),
        _ => {}
    }
}

/// The wall clock schedules are read on: the system's, or in tests one set at will (a window's
/// opening is then tested without waiting for it).
#[derive(Clone)]
pub struct CalendarClock(Arc<dyn Fn() -> Timestamp + Send + Sync>);

impl CalendarClock {
    /// The system clock.
    pub fn system() -> CalendarClock {
        CalendarClock(Arc::new(Timestamp::now))
    }

    /// A clock reading `now()`.
    pub fn from_fn(now: impl Fn() -> Timestamp + Send + Sync + 'static) -> CalendarClock {
        CalendarClock(Arc::new(now))
    }

    /// What time it is.
    pub fn now(&self) -> Timestamp {
        (self.0)()
    }
}

impl Default for CalendarClock {
    fn default() -> Self {
        CalendarClock::system()
    }
}

impl std::fmt::Debug for CalendarClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CalendarClock").field(&self.now()).finish()
    }
}

/// A group's schedules as last parsed, kept in its ledger so a pass parses them only when they
/// change (the spec check parses them once per pass already).
#[derive(Debug, Default)]
pub struct ParsedSchedules {
    source: Vec<Schedule>,
    spec_max_runners: u32,
    calendar: Option<Calendar>,
}

impl ParsedSchedules {
    /// The calendar of `schedules`; `None` without schedules or when they do not parse.
    pub fn calendar(&mut self, schedules: &[Schedule], spec_max_runners: u32) -> Option<&Calendar> {
        if self.source != schedules || self.spec_max_runners != spec_max_runners {
            self.source = schedules.to_vec();
            self.spec_max_runners = spec_max_runners;
            self.calendar = Calendar::parse(schedules, spec_max_runners)
                .ok()
                .filter(|c| !c.is_empty());
        }
        self.calendar.as_ref()
    }
}

/// The limits in force for a group at `now`, and where its schedules stand (`None` without
/// a calendar). Schedules the spec check refuses are never evaluated (the pass stops at
/// `InvalidSpec` first); should they be, there is no calendar and the spec's own limits hold.
pub fn in_force(
    spec_min_runners: u32,
    spec_max_runners: u32,
    calendar: Option<&Calendar>,
    now: Timestamp,
) -> (Limits, Option<ScheduleState>) {
    match calendar {
        Some(calendar) => {
            let state = calendar.at(now);
            (state.limits(spec_min_runners, spec_max_runners), Some(state))
        }
        None => (
            Limits {
                min_runners: spec_min_runners,
                max_runners: spec_max_runners,
            },
            None,
        ),
    }
}

#[cfg(test)]
mod tests;
