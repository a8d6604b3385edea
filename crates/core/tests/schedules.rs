//! Scheduled warm pools end to end: the controller reads `spec.schedules` on a calendar clock
//! the test sets (`ControllerOptions::calendar`), so a window opens and closes without waiting
//! for the wall clock.

mod common;

use forgerunner_core::forge::GroupKey;

use common::*;

/// Office hours in Berlin: Monday 2026-11-30, 08:00–18:00 local (07:00–17:00 UTC).
fn office_hours(spec: &mut serde_json::Value) {
    spec["schedules"] = serde_json::json!([{
        "name": "office-hours",
        "start": "0 8 * * MON-FRI",
        "end": "0 18 * * MON-FRI",
        "timeZone": "Europe/Berlin",
        "minRunners": 2,
    }]);
}

async fn schedule_status(h: &Harness, group: &str) -> Option<serde_json::Value> {
    let g = h.groups().get(group).await.ok()?;
    let status = serde_json::to_value(g.status?).ok()?;
    status.get("schedule").cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_window_keeps_its_warm_runners_and_the_status_says_until_when() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    *h.calendar_at.lock().expect("calendar") = Some("2026-11-30T08:00:00Z".parse().expect("time"));
    let mut spec = gitea_spec(0, 4, 600);
    office_hours(&mut spec);
    h.create_group("warm", spec).await;

    wait_for("two warm runners while the window is open", || async {
        h.runner_jobs("warm").await.len() == 2
    })
    .await;
    wait_for("the status naming the window and its end", || async {
        schedule_status(&h, "warm").await.is_some_and(|s| {
            s["active"] == "office-hours"
                && s["activeUntil"] == "2026-11-30T17:00:00Z"
                && s["nextChange"] == "2026-11-30T17:00:00Z"
                && s["minRunners"] == 2
                && s["maxRunners"] == 4
        })
    })
    .await;

    // The evening: the window closed; the next change is Tuesday 08:00 Berlin.
    *h.calendar_at.lock().expect("calendar") = Some("2026-11-30T18:00:00Z".parse().expect("time"));
    h.trigger.wake(GroupKey {
        namespace: NS.into(),
        name: "warm".into(),
    });
    wait_for("the status without an open window", || async {
        schedule_status(&h, "warm").await.is_some_and(|s| {
            s.get("active").is_none() && s["nextChange"] == "2026-12-01T07:00:00Z" && s["minRunners"] == 0
        })
    })
    .await;
    let g = h.groups().get("warm").await.expect("group");
    assert_eq!(
        g.status.expect("status").desired_runners,
        0,
        "no warm pool at night"
    );
    h.stop().await;
}

/// A schedule the reconciler refuses (an unknown time zone) stops only its group, with the
/// field named; the schema cannot know time zones or cron syntax.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_time_zone_is_an_invalid_spec() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    let mut spec = gitea_spec(0, 4, 600);
    office_hours(&mut spec);
    spec["schedules"][0]["timeZone"] = serde_json::json!("Europe/Atlantis");
    h.create_group("typo", spec).await;
    wait_for("InvalidSpec naming the time zone", || async {
        h.condition("typo", "Ready").await.is_some_and(|(s, r, m)| {
            s == "False" && r == "InvalidSpec" && m.contains("spec.schedules[].timeZone")
        })
    })
    .await;
    assert!(h.runner_jobs("typo").await.is_empty());
    h.stop().await;
}
