use super::*;

use jiff::SignedDuration;
use proptest::prelude::*;

/// `spec.maxRunners` of the tests' groups.
const SPEC_MAX: u32 = 10;

fn entry(name: &str, start: &str, end: &str, tz: Option<&str>, min: u32, max: Option<u32>) -> Schedule {
    Schedule {
        name: name.to_owned(),
        start: start.to_owned(),
        end: end.to_owned(),
        time_zone: tz.map(str::to_owned),
        min_runners: min,
        max_runners: max,
    }
}

/// Weekdays 08:00–18:00 in Berlin, five warm runners.
fn office_hours() -> Schedule {
    entry(
        "office-hours",
        "0 8 * * MON-FRI",
        "0 18 * * MON-FRI",
        Some("Europe/Berlin"),
        5,
        None,
    )
}

/// The instant a wall clock time in `tz` names (the earlier one where it is ambiguous).
fn at(local: &str, tz: &str) -> Timestamp {
    format!("{local}[{tz}]")
        .parse::<Zoned>()
        .expect("zoned time")
        .timestamp()
}

fn berlin(local: &str) -> Timestamp {
    at(local, "Europe/Berlin")
}

fn utc(s: &str) -> Timestamp {
    s.parse().expect("UTC timestamp")
}

fn calendar(schedules: &[Schedule]) -> Calendar {
    Calendar::parse(schedules, SPEC_MAX).expect("valid schedules")
}

fn open_names(state: &ScheduleState) -> Vec<&str> {
    state.open.iter().map(|w| w.name.as_str()).collect()
}

// --- when a window is open ---------------------------------------------------------------------

#[test]
fn weekday_window_is_open_on_monday_morning_only_within_its_hours() {
    let cal = calendar(&[office_hours()]);
    let monday_9 = cal.at(berlin("2026-06-01T09:00"));
    assert_eq!(open_names(&monday_9), ["office-hours"]);
    assert_eq!(monday_9.open[0].since, berlin("2026-06-01T08:00"));
    assert_eq!(monday_9.open[0].until, Some(berlin("2026-06-01T18:00")));
    assert!(cal.at(berlin("2026-06-01T19:00")).open.is_empty());
    assert!(cal.at(berlin("2026-06-06T09:00")).open.is_empty(), "Saturday");
    assert!(cal.at(berlin("2026-06-01T07:59:59.999")).open.is_empty());
}

#[test]
fn a_window_is_open_from_its_start_instant_and_closed_at_its_end_instant() {
    let cal = calendar(&[office_hours()]);
    assert_eq!(open_names(&cal.at(berlin("2026-06-01T08:00"))), ["office-hours"]);
    assert_eq!(
        open_names(&cal.at(berlin("2026-06-01T17:59:59.999999999"))),
        ["office-hours"]
    );
    assert!(cal.at(berlin("2026-06-01T18:00")).open.is_empty());
}

#[test]
fn next_change_is_the_close_while_open_and_the_next_opening_while_closed() {
    let cal = calendar(&[office_hours()]);
    let cases = [
        ("2026-06-01T09:00", "2026-06-01T18:00"), // Monday, open: closes at 18:00
        ("2026-06-01T19:00", "2026-06-02T08:00"), // Monday evening: Tuesday 08:00
        ("2026-06-05T18:00", "2026-06-08T08:00"), // Friday close: next Monday
        ("2026-06-06T09:00", "2026-06-08T08:00"), // Saturday: Monday
        ("2026-06-01T07:59:59", "2026-06-01T08:00"), // a second before opening
    ];
    for (now, change) in cases {
        assert_eq!(cal.at(berlin(now)).next_change, Some(berlin(change)), "at {now}");
    }
}

#[test]
fn a_window_may_span_the_weekend() {
    let weekend = entry(
        "weekend",
        "0 22 * * FRI",
        "0 6 * * MON",
        Some("Europe/Berlin"),
        1,
        None,
    );
    let cal = calendar(&[weekend]);
    let sunday = cal.at(berlin("2026-06-07T12:00"));
    assert_eq!(open_names(&sunday), ["weekend"]);
    assert_eq!(sunday.open[0].since, berlin("2026-06-05T22:00"));
    assert_eq!(sunday.next_change, Some(berlin("2026-06-08T06:00")));
    assert!(cal.at(berlin("2026-06-08T06:00")).open.is_empty());
    assert!(cal.at(berlin("2026-06-03T12:00")).open.is_empty(), "Wednesday");
}

#[test]
fn since_is_the_opening_even_when_start_fires_again_inside_the_window() {
    // Starts every hour from 08:00 to 17:00: the window opened at 08:00, not at the last start.
    let hourly = entry("hourly", "0 8-17 * * *", "0 18 * * *", None, 2, None);
    let state = calendar(&[hourly]).at(utc("2026-06-01T12:30:00Z"));
    assert_eq!(state.open[0].since, utc("2026-06-01T08:00:00Z"));
    assert_eq!(state.next_change, Some(utc("2026-06-01T18:00:00Z")));
}

#[test]
fn the_time_zone_defaults_to_utc() {
    let plain = entry("plain", "0 8 * * *", "0 9 * * *", None, 1, None);
    assert_eq!(plain.time_zone(), "UTC");
    let cal = calendar(&[plain]);
    assert_eq!(open_names(&cal.at(utc("2026-06-01T08:30:00Z"))), ["plain"]);
    // 08:30 UTC is 10:30 in Berlin: the same window in Berlin time is closed then.
    let in_berlin = entry("berlin", "0 8 * * *", "0 9 * * *", Some("Europe/Berlin"), 1, None);
    assert!(
        calendar(&[in_berlin])
            .at(utc("2026-06-01T08:30:00Z"))
            .open
            .is_empty()
    );
}

#[test]
fn a_start_that_coincides_with_an_end_does_not_open_the_window() {
    // Starts daily at 08:00; ends at 08:00 on weekdays and 18:00 every day: open only on
    // weekend days, from 08:00 to 18:00.
    let weekend_days = entry("w", "0 8 * * *", "0 8,18 * * MON-FRI", None, 1, None);
    let cal = calendar(&[weekend_days]);
    assert!(
        cal.at(utc("2026-06-01T09:00:00Z")).open.is_empty(),
        "Monday 08:00 both fire"
    );
    assert_eq!(
        cal.at(utc("2026-06-01T09:00:00Z")).next_change,
        Some(utc("2026-06-06T08:00:00Z")),
        "the Saturday start is the next one that opens"
    );
    assert_eq!(open_names(&cal.at(utc("2026-06-06T09:00:00Z"))), ["w"]);
}

#[test]
fn without_schedules_nothing_is_open_and_nothing_changes() {
    let cal = calendar(&[]);
    assert!(cal.is_empty());
    let state = cal.at(utc("2026-06-01T09:00:00Z"));
    assert_eq!(state.open, []);
    assert_eq!(state.next_change, None);
    assert_eq!(state.requeue_after(utc("2026-06-01T09:00:00Z")), None);
    assert_eq!(
        state.limits(2, 7),
        Limits {
            min_runners: 2,
            max_runners: 7
        }
    );
}

// --- limits and overlap ------------------------------------------------------------------------

#[test]
fn an_open_window_sets_min_and_max_and_a_closed_one_leaves_the_spec_s() {
    let capped = entry("day", "0 8 * * *", "0 18 * * *", None, 4, Some(20));
    let cal = calendar(&[capped]);
    assert_eq!(
        cal.at(utc("2026-06-01T09:00:00Z")).limits(1, SPEC_MAX),
        Limits {
            min_runners: 4,
            max_runners: 20
        }
    );
    assert_eq!(
        cal.at(utc("2026-06-01T19:00:00Z")).limits(1, SPEC_MAX),
        Limits {
            min_runners: 1,
            max_runners: SPEC_MAX
        }
    );
}

#[test]
fn a_window_may_lower_min_runners_to_zero_at_night() {
    let night = entry("night", "0 20 * * *", "0 6 * * *", None, 0, None);
    let state = calendar(&[night]).at(utc("2026-06-01T23:00:00Z"));
    assert_eq!(state.limits(3, SPEC_MAX).min_runners, 0);
}

#[test]
fn overlapping_windows_give_the_largest_min_and_max_in_any_order() {
    let day = entry("day", "0 8 * * *", "0 18 * * *", None, 3, Some(4));
    let release = entry("release", "0 7 * * *", "0 12 * * *", None, 8, None);
    let cap = entry("cap", "0 9 * * *", "0 10 * * *", None, 0, Some(2));
    let now = utc("2026-06-01T09:30:00Z");
    let forward = calendar(&[day.clone(), release.clone(), cap.clone()]).at(now);
    let backward = calendar(&[cap, release, day]).at(now);
    assert_eq!(open_names(&forward), ["day", "release", "cap"]);
    let expected = Limits {
        min_runners: 8,
        // `release` has no maxRunners, so it counts as spec.maxRunners (10), above day's 4.
        max_runners: SPEC_MAX,
    };
    assert_eq!(forward.limits(0, SPEC_MAX), expected);
    assert_eq!(backward.limits(0, SPEC_MAX), expected);
    assert_eq!(forward.active().map(|w| w.name.as_str()), Some("release"));
    assert_eq!(backward.active().map(|w| w.name.as_str()), Some("release"));
    // The earliest change among all three: `cap` closes at 10:00.
    assert_eq!(forward.next_change, Some(utc("2026-06-01T10:00:00Z")));
}

#[test]
fn on_a_tie_the_first_listed_window_is_active() {
    let a = entry("a", "0 8 * * *", "0 18 * * *", None, 3, None);
    let b = entry("b", "0 9 * * *", "0 17 * * *", None, 3, None);
    let state = calendar(&[a, b]).at(utc("2026-06-01T10:00:00Z"));
    assert_eq!(state.active().map(|w| w.name.as_str()), Some("a"));
}

#[test]
fn status_names_the_active_window_its_bounds_and_the_next_change() {
    let cal = calendar(&[office_hours()]);
    let now = berlin("2026-06-01T09:00");
    let status = cal.at(now).status(1, SPEC_MAX);
    assert_eq!(
        status,
        ScheduleStatus {
            active: Some("office-hours".to_owned()),
            open: vec!["office-hours".to_owned()],
            active_since: Some(Time(berlin("2026-06-01T08:00"))),
            active_until: Some(Time(berlin("2026-06-01T18:00"))),
            next_change: Some(Time(berlin("2026-06-01T18:00"))),
            min_runners: 5,
            max_runners: SPEC_MAX,
        }
    );
    let json = serde_json::to_value(&status).expect("status JSON");
    assert_eq!(json["activeSince"], "2026-06-01T06:00:00Z");
    assert_eq!(json["nextChange"], "2026-06-01T16:00:00Z");
    assert_eq!(json["minRunners"], 5);

    let closed = cal.at(berlin("2026-06-01T19:00")).status(1, SPEC_MAX);
    assert_eq!(closed.active, None);
    assert_eq!(closed.open, Vec::<String>::new());
    assert_eq!(closed.next_change, Some(Time(berlin("2026-06-02T08:00"))));
    assert_eq!((closed.min_runners, closed.max_runners), (1, SPEC_MAX));
}

#[test]
fn requeue_after_is_the_time_until_the_next_change() {
    let cal = calendar(&[office_hours()]);
    let now = berlin("2026-06-01T17:59:30.5");
    assert_eq!(
        cal.at(now).requeue_after(now),
        Some(Duration::from_millis(29_500))
    );
    // A state computed earlier and used late asks for an immediate requeue.
    let state = cal.at(now);
    assert_eq!(
        state.requeue_after(berlin("2026-06-01T18:00:01")),
        Some(Duration::ZERO)
    );
}

// --- daylight saving time ----------------------------------------------------------------------

#[test]
fn a_window_starting_in_the_spring_forward_gap_opens_right_after_it() {
    // Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00 UTC); 02:30 does not exist.
    let early = entry("early", "30 2 * * *", "0 6 * * *", Some("Europe/Berlin"), 2, None);
    let cal = calendar(&[early]);
    assert_eq!(
        cal.at(utc("2026-03-29T00:30:00Z")).next_change,
        Some(utc("2026-03-29T01:00:00Z")),
        "opens at 03:00 CEST"
    );
    assert!(cal.at(utc("2026-03-29T00:59:59Z")).open.is_empty());
    let after = cal.at(utc("2026-03-29T01:00:00Z"));
    assert_eq!(open_names(&after), ["early"]);
    assert_eq!(after.open[0].since, utc("2026-03-29T01:00:00Z"));
    assert_eq!(after.open[0].until, Some(berlin("2026-03-29T06:00")));
    // The next day 02:30 exists again (00:30 UTC in summer time).
    assert_eq!(
        cal.at(utc("2026-03-29T12:00:00Z")).next_change,
        Some(utc("2026-03-30T00:30:00Z"))
    );
}

#[test]
fn a_window_ending_in_the_spring_forward_gap_closes_right_after_it() {
    let night = entry("night", "0 1 * * *", "30 2 * * *", Some("Europe/Berlin"), 2, None);
    let cal = calendar(&[night]);
    // 01:00 CET is 00:00 UTC; 02:30 is skipped, so the window closes at 03:00 CEST (01:00 UTC).
    let state = cal.at(utc("2026-03-29T00:30:00Z"));
    assert_eq!(open_names(&state), ["night"]);
    assert_eq!(state.next_change, Some(utc("2026-03-29T01:00:00Z")));
    assert!(cal.at(utc("2026-03-29T01:00:00Z")).open.is_empty());
}

#[test]
fn a_window_starting_at_a_repeated_time_on_the_fall_back_day_opens_once() {
    // New York, 2026-11-01: 02:00 EDT falls back to 01:00 EST; 01:30 comes twice, at 05:30 UTC
    // (EDT) and 06:30 UTC (EST).
    let ny = "America/New_York";
    let late = entry("late", "30 1 * * *", "0 3 * * *", Some(ny), 2, None);
    let cal = calendar(&[late]);
    assert_eq!(
        cal.at(utc("2026-11-01T05:00:00Z")).next_change,
        Some(utc("2026-11-01T05:30:00Z")),
        "opens at the first 01:30 (EDT)"
    );
    for now in [
        "2026-11-01T05:30:00Z",
        "2026-11-01T06:15:00Z",
        "2026-11-01T06:45:00Z",
    ] {
        let state = cal.at(utc(now));
        assert_eq!(open_names(&state), ["late"], "at {now}");
        assert_eq!(state.open[0].since, utc("2026-11-01T05:30:00Z"), "at {now}");
        // 03:00 EST is 08:00 UTC: the window lasts two and a half hours that night.
        assert_eq!(state.next_change, Some(utc("2026-11-01T08:00:00Z")), "at {now}");
    }
}

#[test]
fn a_window_ending_at_a_repeated_time_on_the_fall_back_day_closes_at_its_first_pass() {
    let ny = "America/New_York";
    let evening = entry("evening", "0 0 * * *", "30 1 * * *", Some(ny), 2, None);
    let cal = calendar(&[evening]);
    assert_eq!(
        cal.at(utc("2026-11-01T05:00:00Z")).next_change,
        Some(utc("2026-11-01T05:30:00Z"))
    );
    // 01:15 EST (06:15 UTC) reads as inside 00:00–01:30, but the window closed at 01:30 EDT
    // and nothing opened it again.
    let second_pass = cal.at(utc("2026-11-01T06:15:00Z"));
    assert!(second_pass.open.is_empty());
    assert_eq!(second_pass.next_change, Some(at("2026-11-02T00:00", ny)));
}

#[test]
fn berlin_fall_back_repeats_02_30_and_a_window_opens_only_at_the_first() {
    // Berlin, 2026-10-25: 03:00 CEST falls back to 02:00 CET; 02:30 is 00:30 and 01:30 UTC.
    let early = entry("early", "30 2 * * *", "0 4 * * *", Some("Europe/Berlin"), 2, None);
    let cal = calendar(&[early]);
    let state = cal.at(utc("2026-10-25T01:45:00Z"));
    assert_eq!(state.open[0].since, utc("2026-10-25T00:30:00Z"));
    assert_eq!(state.next_change, Some(utc("2026-10-25T03:00:00Z")), "04:00 CET");
}

#[test]
fn an_hourly_start_fires_on_both_passes_of_the_repeated_hour() {
    // An interval pattern (not a fixed time) runs on both passes; while the window is open
    // that changes nothing, and the window still closes at 03:00 EST.
    let ny = "America/New_York";
    let hourly = entry("hourly", "30 * * * *", "0 3 * * *", Some(ny), 1, None);
    let state = calendar(&[hourly]).at(utc("2026-11-01T06:45:00Z"));
    assert_eq!(open_names(&state), ["hourly"]);
    assert_eq!(state.next_change, Some(utc("2026-11-01T08:00:00Z")));
}

#[test]
fn time_zones_resolve_without_a_system_database() {
    // The `tzdb-bundle-always` feature compiles the database in: a scratch image or a bare
    // binary without /usr/share/zoneinfo still knows the zones (jiff prefers the system copy).
    let bundled = jiff::tz::TimeZoneDatabase::bundled();
    for name in ["Europe/Berlin", "America/New_York", "Asia/Kolkata"] {
        assert!(bundled.get(name).is_ok(), "{name} not bundled");
    }
}

// --- validation --------------------------------------------------------------------------------

fn fields(schedules: &[Schedule], spec_max: u32) -> Vec<&'static str> {
    validate_schedules(schedules, spec_max)
        .into_iter()
        .map(|v| v.field)
        .collect()
}

#[test]
fn valid_schedules_have_no_violations_and_parse() {
    let list = [
        office_hours(),
        entry("night", "0 20 * * *", "0 6 * * *", None, 0, Some(2)),
        entry("nick", "@daily", "0 1 * * *", Some("utc"), 1, None),
        entry(
            "last",
            "0 8 L * *",
            "0 18 L * *",
            Some("America/New_York"),
            1,
            Some(1),
        ),
    ];
    assert_eq!(validate_schedules(&list, SPEC_MAX), []);
    assert!(Calendar::parse(&list, SPEC_MAX).is_ok());
}

#[test]
fn a_bad_cron_expression_is_named_at_its_field() {
    let bad_start = entry("a", "0 25 * * *", "0 18 * * *", None, 1, None);
    let six_fields = entry("b", "0 0 8 * * *", "0 18 * * *", None, 1, None);
    let bad_end = entry("c", "0 8 * * *", "0 18 * *", None, 1, None);
    let v = validate_schedules(&[bad_start, six_fields, bad_end], SPEC_MAX);
    assert_eq!(
        v.iter().map(|v| v.field).collect::<Vec<_>>(),
        [START_FIELD, START_FIELD, END_FIELD]
    );
    assert!(
        v[0].message
            .starts_with("schedule \"a\": start \"0 25 * * *\" is not a 5-field cron"),
        "{}",
        v[0]
    );
    assert!(v[2].message.contains("schedule \"c\": end"), "{}", v[2]);
    assert_eq!(v[0].to_string().split(':').next(), Some("spec.schedules[].start"));
}

#[test]
fn an_expression_that_never_fires_is_refused() {
    let feb30 = entry("a", "0 0 30 2 *", "0 1 * * *", None, 1, None);
    let v = validate_schedules(&[feb30], SPEC_MAX);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].field, START_FIELD);
    assert!(v[0].message.contains("never fires"), "{}", v[0]);
}

#[test]
fn an_unknown_time_zone_is_named_at_time_zone() {
    let typo = entry("a", "0 8 * * *", "0 18 * * *", Some("Europe/Berln"), 1, None);
    let v = validate_schedules(&[typo], SPEC_MAX);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].field, TIME_ZONE_FIELD);
    assert!(v[0].message.contains("\"Europe/Berln\""), "{}", v[0]);
    let long = entry("b", "0 8 * * *", "0 18 * * *", Some(&"x".repeat(65)), 1, None);
    assert_eq!(fields(&[long], SPEC_MAX), [TIME_ZONE_FIELD]);
}

#[test]
fn min_above_max_is_named_at_min_runners() {
    let own = entry("own", "0 8 * * *", "0 18 * * *", None, 6, Some(5));
    let spec = entry("spec", "0 8 * * *", "0 18 * * *", None, 11, None);
    let raised = entry("raised", "0 8 * * *", "0 18 * * *", None, 11, Some(20));
    let v = validate_schedules(&[own, spec, raised], SPEC_MAX);
    assert_eq!(
        v.iter().map(|v| v.field).collect::<Vec<_>>(),
        [MIN_RUNNERS_FIELD, MIN_RUNNERS_FIELD]
    );
    assert!(v[0].message.contains("6 exceeds its maxRunners 5"), "{}", v[0]);
    assert!(v[1].message.contains("11 exceeds spec.maxRunners 10"), "{}", v[1]);
}

#[test]
fn max_runners_out_of_range_is_named_at_max_runners() {
    let zero = entry("zero", "0 8 * * *", "0 18 * * *", None, 0, Some(0));
    let huge = entry(
        "huge",
        "0 8 * * *",
        "0 18 * * *",
        None,
        0,
        Some(MAX_RUNNERS_LIMIT + 1),
    );
    assert_eq!(
        fields(&[zero, huge], SPEC_MAX),
        [MAX_RUNNERS_FIELD, MAX_RUNNERS_FIELD]
    );
}

#[test]
fn names_must_be_present_unique_and_short() {
    let list = [
        entry("dup", "0 8 * * *", "0 18 * * *", None, 1, None),
        entry("", "0 8 * * *", "0 18 * * *", None, 1, None),
        entry("dup", "0 9 * * *", "0 17 * * *", None, 1, None),
        entry(&"n".repeat(64), "0 8 * * *", "0 18 * * *", None, 1, None),
    ];
    let v = validate_schedules(&list, SPEC_MAX);
    assert_eq!(
        v.iter().map(|v| v.field).collect::<Vec<_>>(),
        [NAME_FIELD, NAME_FIELD, NAME_FIELD]
    );
    assert!(
        v[0].message
            .contains("\"dup\" names more than one schedule (schedules[0], schedules[2])"),
        "{}",
        v[0]
    );
    assert_eq!(v[1].message, "schedules[1]: name must not be empty");
    assert!(v[2].message.contains("at most 63 characters"), "{}", v[2]);
}

#[test]
fn end_equal_to_start_is_refused() {
    let same = entry("same", "0 8 * * *", " 0 8 * * * ", None, 1, None);
    assert_eq!(fields(&[same], SPEC_MAX), [END_FIELD]);
}

#[test]
fn too_many_schedules_are_named_at_the_list() {
    let list: Vec<Schedule> = (0..=MAX_SCHEDULES)
        .map(|i| entry(&format!("s{i}"), "0 8 * * *", "0 18 * * *", None, 1, None))
        .collect();
    assert_eq!(fields(&list, SPEC_MAX), [SCHEDULES_FIELD]);
}

#[test]
fn parse_returns_the_same_violations_as_validate() {
    let list = [entry("a", "nope", "0 18 * * *", Some("Mars/Olympus"), 3, Some(2))];
    let Err(v) = Calendar::parse(&list, SPEC_MAX) else {
        panic!("invalid schedules parsed")
    };
    assert_eq!(v, validate_schedules(&list, SPEC_MAX));
    assert_eq!(
        v.iter().map(|v| v.field).collect::<Vec<_>>(),
        [TIME_ZONE_FIELD, START_FIELD, MIN_RUNNERS_FIELD]
    );
}

// --- the CRD-facing shape ----------------------------------------------------------------------

#[test]
fn a_schedule_reads_from_camel_case_yaml() {
    let yaml = "
name: office-hours
start: 0 8 * * MON-FRI
end: 0 18 * * MON-FRI
timeZone: Europe/Berlin
minRunners: 5
";
    let parsed: Schedule = serde_yaml::from_str(yaml).expect("schedule YAML");
    assert_eq!(parsed, office_hours());
    let json = serde_json::to_value(&parsed).expect("JSON");
    assert_eq!(json["timeZone"], "Europe/Berlin");
    assert!(json.get("maxRunners").is_none(), "unset maxRunners is omitted");
}

#[test]
fn the_schema_requires_name_start_end_and_min_runners() {
    let schema = serde_json::to_value(schemars::schema_for!(Schedule)).expect("schema");
    let mut required: Vec<&str> = schema["required"]
        .as_array()
        .expect("required")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    required.sort_unstable();
    assert_eq!(required, ["end", "minRunners", "name", "start"]);
    let props = &schema["properties"];
    assert_eq!(props["name"]["maxLength"], MAX_SCHEDULE_NAME_LEN);
    assert_eq!(props["maxRunners"]["maximum"], MAX_RUNNERS_LIMIT);
    assert!(
        props["timeZone"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("IANA")),
        "doc comments become descriptions"
    );
}

// --- properties --------------------------------------------------------------------------------

fn cron_field(choices: &'static [&'static str]) -> impl Strategy<Value = &'static str> {
    proptest::sample::select(choices)
}

fn arb_cron() -> impl Strategy<Value = String> {
    (
        cron_field(&["0", "30", "0,30", "*/20", "15"]),
        cron_field(&["1", "2", "3", "8", "18", "1-3", "*", "22"]),
        cron_field(&["*", "*", "*", "1", "L"]),
        cron_field(&["*", "*", "3,10", "11"]),
        cron_field(&["*", "MON-FRI", "SAT,SUN", "0", "5"]),
    )
        .prop_map(|(m, h, dom, mon, dow)| format!("{m} {h} {dom} {mon} {dow}"))
}

fn arb_schedule(i: usize) -> impl Strategy<Value = Schedule> {
    (
        arb_cron(),
        arb_cron(),
        proptest::sample::select(&["UTC", "Europe/Berlin", "America/New_York"][..]),
        0u32..5,
        proptest::option::of(0u32..15),
    )
        .prop_map(move |(start, end, tz, min, headroom)| {
            // maxRunners, when set, is at least minRunners (so valid) and may lie below or above
            // the spec's.
            let max = headroom.map(|h| min + h).filter(|m| *m >= 1);
            entry(&format!("s{i}"), &start, &end, Some(tz), min, max)
        })
}

fn arb_schedules() -> impl Strategy<Value = Vec<Schedule>> {
    (1usize..=3).prop_flat_map(|n| (0..n).map(arb_schedule).collect::<Vec<_>>())
}

/// An instant in 2026 (both DST changes of both zones): any millisecond, or one within the first
/// second of a whole minute, where the expressions fire.
fn arb_now() -> impl Strategy<Value = Timestamp> {
    let start = utc("2026-01-01T00:00:00Z").as_millisecond();
    let end = utc("2027-01-01T00:00:00Z").as_millisecond();
    let any = (start..end).boxed();
    let at_a_minute = (start / 60_000..end / 60_000, 0i64..1000)
        .prop_map(|(minute, ms)| minute * 60_000 + ms)
        .boxed();
    prop_oneof![any, at_a_minute].prop_map(|ms| Timestamp::from_millisecond(ms).expect("in range"))
}

fn names(state: &ScheduleState) -> Vec<String> {
    state.open.iter().map(|w| w.name.clone()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// The next change lies ahead, the open set holds until just before it, and (where no start
    /// coincides with an end) it changes exactly then.
    #[test]
    fn the_open_set_is_constant_until_next_change(
        schedules in arb_schedules(),
        now in arb_now(),
        fractions in proptest::collection::vec(0.0f64..1.0, 4),
    ) {
        prop_assume!(validate_schedules(&schedules, SPEC_MAX).is_empty());
        let cal = calendar(&schedules);
        let state = cal.at(now);
        let horizon = match state.next_change {
            Some(change) => {
                prop_assert!(change > now, "next change {change} not after {now}");
                change
            }
            None => now.checked_add(SignedDuration::from_hours(400 * 24)).unwrap_or(now),
        };
        let span = now.duration_until(horizon);
        let last = horizon.checked_sub(SignedDuration::from_nanos(1)).unwrap_or(now);
        let mut probes = vec![last];
        for f in fractions {
            let offset = SignedDuration::from_secs_f64(span.as_secs_f64() * f);
            probes.push(now.checked_add(offset).unwrap_or(now).min(last));
        }
        for probe in probes {
            prop_assert_eq!(
                names(&cal.at(probe)),
                names(&state),
                "at {} (now {}, next change {:?})",
                probe,
                now,
                state.next_change
            );
        }
        if let Some(change) = state.next_change {
            let coincide = cal.windows.iter().any(|w| {
                let z = change.to_zoned(w.tz.clone());
                let before = z.checked_sub(SignedDuration::from_secs(1)).unwrap_or(z.clone());
                next(&w.start, &before).is_some_and(|s| s.timestamp() == change)
                    && next(&w.end, &before).is_some_and(|e| e.timestamp() == change)
            });
            if !coincide {
                prop_assert_ne!(
                    names(&cal.at(change)),
                    names(&state),
                    "nothing changed at {} (now {})",
                    change,
                    now
                );
            }
        }
    }

    /// The limits in force keep min ≤ max, and each is the spec's (no window open) or one an
    /// open window asks for.
    #[test]
    fn limits_keep_min_at_most_max(
        schedules in arb_schedules(),
        now in arb_now(),
        spec_min in 0u32..=SPEC_MAX,
    ) {
        prop_assume!(validate_schedules(&schedules, SPEC_MAX).is_empty());
        let state = calendar(&schedules).at(now);
        let limits = state.limits(spec_min, SPEC_MAX);
        prop_assert!(limits.min_runners <= limits.max_runners, "{limits:?}");
        if state.open.is_empty() {
            prop_assert_eq!((limits.min_runners, limits.max_runners), (spec_min, SPEC_MAX));
        } else {
            prop_assert!(state.open.iter().any(|w| w.min_runners == limits.min_runners));
            prop_assert!(
                state
                    .open
                    .iter()
                    .any(|w| w.max_runners.unwrap_or(SPEC_MAX) == limits.max_runners)
            );
        }
    }
}

#[test]
fn schedules_are_parsed_again_only_when_they_change() {
    let mut parsed = ParsedSchedules::default();
    assert!(parsed.calendar(&[], 4).is_none(), "no schedules, no calendar");
    let first = vec![office_hours()];
    let state = |p: &mut ParsedSchedules, s: &[Schedule]| {
        p.calendar(s, 10).map(|c| c.at(berlin("2026-11-30T09:00:00")))
    };
    let open = state(&mut parsed, &first).expect("a calendar");
    assert_eq!(open_names(&open), ["office-hours"]);
    // Another window: the kept calendar is not reused.
    let mut later = office_hours();
    later.start = "0 10 * * MON-FRI".into();
    let closed = state(&mut parsed, &[later]).expect("a calendar");
    assert!(open_names(&closed).is_empty(), "09:00 is before the new start");
    let mut bad = office_hours();
    bad.time_zone = Some("Mars/Olympus".into());
    assert!(
        parsed.calendar(&[bad], 10).is_none(),
        "a refused schedule has no calendar"
    );
}
