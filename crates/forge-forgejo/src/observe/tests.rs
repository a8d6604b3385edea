use std::time::Duration;

use crate::classes::Claim;
use crate::labels::parse_labels;
use crate::runner_id::RUNNER_ID_ANNOTATION;
use forgerunner_core::runner_job::JOB_BINDING_ANNOTATION;

use super::*;

fn job(id: i64, status: &str, handle: &str) -> RunJob {
    RunJob {
        id,
        runs_on: vec!["debian".into()],
        status: status.into(),
        task_id: 0,
        handle: handle.into(),
        name: String::new(),
        run_id: 0,
    }
}

fn row(id: i64, name: &str, status: RunnerStatus) -> Runner {
    Runner {
        id,
        name: name.into(),
        status,
        ephemeral: true,
        ..Runner::default()
    }
}

fn rref(name: &str, phase: RunnerPhase, id: Option<i64>, handle: Option<&str>) -> RunnerRef {
    let mut annotations = BTreeMap::new();
    if let Some(id) = id {
        annotations.insert(RUNNER_ID_ANNOTATION.to_string(), id.to_string());
    }
    if let Some(h) = handle {
        annotations.insert(JOB_BINDING_ANNOTATION.to_string(), h.to_string());
    }
    forgerunner_core::testing::runner_ref(name, phase, annotations)
}

/// A whole (one-page) runner listing fetched at `at`.
fn runners(rows: &[Runner], at: Instant) -> RunnerRows<'_> {
    static NONE: BTreeSet<i64> = BTreeSet::new();
    RunnerRows {
        rows,
        at,
        whole: true,
        gone: &NONE,
    }
}

fn names(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

/// `r`, registered by this session at `at`.
fn registered(mut r: RunnerRef, at: Instant) -> RunnerRef {
    r.registered_at = Some(at);
    r
}

/// The description of the rows the group of these tests registers ([`crate::row_mark`]).
const MARK: &str = "ephemeral runner managed by forgerunner for RunnerGroup 6f1c";

#[test]
fn v15_states_rows_and_demand() {
    let labels = Claim::own(&parse_labels(&["debian"]).expect("labels"));
    let t0 = Instant::now();
    let jobs = [
        job(5, "waiting", "h5"),
        job(4, "running", "h4"),
        job(3, "waiting", "h3"),
        RunJob {
            runs_on: vec!["gpu".into()],
            ..job(2, "waiting", "h2")
        },
    ];
    let rows = [
        row(10, "web-aaaaa", RunnerStatus::Idle),
        row(11, "web-bbbbb", RunnerStatus::Offline),
        row(12, "web-ccccc", RunnerStatus::Active),
        Runner {
            description: MARK.into(),
            ..row(13, "web-zzzzz", RunnerStatus::Offline)
        },
        Runner {
            description: "ephemeral runner managed by forgerunner for RunnerGroup 0b7e".into(),
            ..row(17, "web-yyyyy", RunnerStatus::Offline)
        },
        Runner {
            description: MARK.into(),
            ..row(18, "web-xxxxx", RunnerStatus::Idle)
        },
        row(14, "other-zzzzz", RunnerStatus::Offline),
    ];
    let refs = [
        rref("web-aaaaa", RunnerPhase::Running, Some(10), Some("h3")),
        rref("web-bbbbb", RunnerPhase::Pending, Some(11), None),
        rref("web-ccccc", RunnerPhase::Running, Some(12), None),
        rref("web-ddddd", RunnerPhase::Running, Some(15), Some("h4")),
        rref("web-eeeee", RunnerPhase::Running, Some(16), None),
    ];
    let group = || Group {
        name: "web",
        claim: &labels,
        mark: Some(MARK),
    };
    let seen = view_v15(
        group(),
        &refs,
        Listing { rows: &jobs, at: t0 },
        runners(&rows, t0),
    );
    assert_eq!(seen.waiting_jobs, 2, "h5 and h3; gpu is not ours");
    let state = |n: &str| seen.runners.get(n).copied().unwrap_or_default();
    assert_eq!(state("web-aaaaa"), ForgeRunnerState::Idle);
    assert_eq!(
        state("web-bbbbb"),
        ForgeRunnerState::Offline,
        "as its row shows it: a new runner is offline until it connects"
    );
    assert_eq!(state("web-ccccc"), ForgeRunnerState::Busy);
    assert_eq!(
        state("web-ddddd"),
        ForgeRunnerState::Finished,
        "its row is gone: a running bound job alone never makes a runner busy"
    );
    assert_eq!(
        state("web-eeeee"),
        ForgeRunnerState::Finished,
        "row deleted after its task"
    );
    // Every row named like ours, offline or not, for core's ghost rule; none of another group.
    // Of the offline ones, those with the group's mark are its own: not a same-named group's
    // (another uid in the description), nor an online row.
    assert_eq!(
        seen.listed_rows,
        Some(ListedRows {
            offline: names(&["web-bbbbb", "web-yyyyy", "web-zzzzz"]),
            online: names(&["web-aaaaa", "web-ccccc", "web-xxxxx"]),
            own: names(&["web-zzzzz"]),
            whole: true,
            listed_at: t0,
        })
    );

    // Later: b is still offline; a succeeded, but the listing still shows h3.
    let later = t0 + Duration::from_secs(60);
    let refs2 = [
        rref("web-aaaaa", RunnerPhase::Succeeded, Some(10), Some("h3")),
        rref("web-bbbbb", RunnerPhase::Pending, Some(11), None),
    ];
    let seen = view_v15(
        group(),
        &refs2,
        Listing { rows: &jobs, at: t0 },
        runners(&rows, t0),
    );
    assert_eq!(seen.runners.get("web-bbbbb"), Some(&ForgeRunnerState::Offline));
    assert_eq!(
        seen.waiting_jobs, 2,
        "the listing's count: core nets h3, whose bound runner is done (`Reservations`)"
    );
    // A newer listing without h3 ends the cover.
    let jobs2 = [job(5, "waiting", "h5")];
    let seen = view_v15(
        group(),
        &[],
        Listing {
            rows: &jobs2,
            at: later,
        },
        runners(&rows, later),
    );
    assert_eq!(seen.waiting_jobs, 1);
}

#[test]
fn v15_runner_created_after_the_listing_is_not_finished() {
    let labels = Claim::own(&parse_labels(&["debian"]).expect("labels"));
    let listing = Instant::now();
    let created = listing + Duration::from_millis(1);
    let refs = [registered(
        rref("web-aaaaa", RunnerPhase::Pending, Some(10), None),
        created,
    )];
    let seen = view_v15(
        Group {
            name: "web",
            claim: &labels,
            mark: None,
        },
        &refs,
        Listing {
            rows: &[],
            at: listing,
        },
        runners(&[], listing),
    );
    assert!(
        seen.runners.is_empty(),
        "unknown, not finished: {:?}",
        seen.runners
    );
    // Its offline row, before its Job is seen, is reported as listed: whether it is a ghost is
    // core's to tell, a grace after that listing (`OfflineRows`).
    let rows = [row(10, "web-aaaaa", RunnerStatus::Offline)];
    let seen = view_v15(
        Group {
            name: "web",
            claim: &labels,
            mark: None,
        },
        &[],
        Listing {
            rows: &[],
            at: created,
        },
        runners(&rows, created),
    );
    let listed = seen.listed_rows.expect("rows");
    assert_eq!(listed.offline, names(&["web-aaaaa"]));
    assert_eq!(listed.listed_at, created);
}

#[test]
fn token_path_reports_the_oldest_runners_busy_per_running_job() {
    let labels = Claim::own(&parse_labels(&["debian"]).expect("labels"));
    let t0 = Instant::now();
    let jobs = [
        job(3, "running", ""),
        job(2, "waiting", ""),
        job(1, "waiting", ""),
    ];
    let refs = [
        registered(
            rref("web-aaaaa", RunnerPhase::Running, None, None),
            t0 + Duration::from_secs(1),
        ),
        registered(rref("web-bbbbb", RunnerPhase::Running, None, None), t0),
        rref("web-ccccc", RunnerPhase::Pending, None, None),
    ];
    let seen = view_token(&labels, &refs, Listing { rows: &jobs, at: t0 });
    assert_eq!(seen.waiting_jobs, 2);
    assert_eq!(
        seen.runners.into_iter().collect::<Vec<_>>(),
        [("web-bbbbb".to_string(), ForgeRunnerState::Busy)]
    );
    assert_eq!(seen.listed_rows, None, "11–14 list no runners");
}

/// A bound runner whose job another runner took: its own row is idle, so it stays idle (the idle
/// timeout removes it) instead of being marked busy for good.
#[test]
fn a_bound_runner_whose_job_another_runner_runs_stays_idle() {
    let labels = Claim::own(&parse_labels(&["debian"]).expect("labels"));
    let t0 = Instant::now();
    let jobs = [job(4, "running", "h4")];
    let rows = [row(10, "web-aaaaa", RunnerStatus::Idle)];
    let refs = [rref("web-aaaaa", RunnerPhase::Running, Some(10), Some("h4"))];
    let seen = view_v15(
        Group {
            name: "web",
            claim: &labels,
            mark: None,
        },
        &refs,
        Listing { rows: &jobs, at: t0 },
        runners(&rows, t0),
    );
    assert_eq!(seen.runners.get("web-aaaaa"), Some(&ForgeRunnerState::Idle));
    assert_eq!(seen.waiting_jobs, 0);
}

/// The jobs listing can be older than the runner listing: a job it still shows waiting whose
/// bound runner is already at work is reported busy by its row, and the listing's count stands;
/// core nets the job (`Reservations::net`), else a spare runner is made.
#[test]
fn a_waiting_job_whose_bound_runner_is_at_work_is_reported_busy() {
    let labels = Claim::own(&parse_labels(&["debian"]).expect("labels"));
    let t0 = Instant::now();
    let jobs = [job(4, "waiting", "h4"), job(5, "waiting", "h5")];
    let rows = [row(10, "web-aaaaa", RunnerStatus::Active)];
    let refs = [rref("web-aaaaa", RunnerPhase::Running, Some(10), Some("h4"))];
    let seen = view_v15(
        Group {
            name: "web",
            claim: &labels,
            mark: None,
        },
        &refs,
        Listing { rows: &jobs, at: t0 },
        runners(&rows, t0),
    );
    assert_eq!(seen.runners.get("web-aaaaa"), Some(&ForgeRunnerState::Busy));
    assert_eq!(seen.waiting_jobs, 2, "the listing's count");
}

/// Forgejo orders the runner list by `last_online DESC` (`models/actions/runner.go`
/// `FindRunnerOptions.ToOrders`), rewritten by every runner call: a paged listing may skip a
/// live runner. Its absence makes it finished only from a whole listing, or when a lookup by id
/// found it gone.
#[test]
fn absence_from_a_paged_listing_is_finished_only_when_a_lookup_says_so() {
    let labels = Claim::own(&parse_labels(&["debian"]).expect("labels"));
    let t0 = Instant::now();
    let jobs = [job(1, "waiting", "h1"), job(2, "waiting", "h2")];
    let rows = [row(11, "web-bbbbb", RunnerStatus::Idle)];
    let refs = [
        rref("web-aaaaa", RunnerPhase::Running, Some(10), Some("h1")),
        rref("web-bbbbb", RunnerPhase::Running, Some(11), Some("h2")),
    ];
    assert_eq!(unlisted_ids(&refs, &rows), [10]);
    let view = |gone: &BTreeSet<i64>| {
        view_v15(
            Group {
                name: "web",
                claim: &labels,
                mark: None,
            },
            &refs,
            Listing { rows: &jobs, at: t0 },
            RunnerRows {
                rows: &rows,
                at: t0,
                whole: false,
                gone,
            },
        )
    };
    let seen = view(&BTreeSet::new());
    assert_eq!(seen.runners.get("web-aaaaa"), None, "unknown, not finished");
    assert_eq!(seen.waiting_jobs, 2, "its job still waits for it");
    let seen = view(&[10].into());
    assert_eq!(seen.runners.get("web-aaaaa"), Some(&ForgeRunnerState::Finished));
}

/// A bound runner whose handle the jobs listing does not show is stranded (it can never take a
/// job) only when the runner row was read after that listing: read before it, the runner may
/// have taken its job and finished in between (the job leaves the listing, the row is deleted
/// only later than it was read). Nor when the runner was made after the jobs listing.
#[test]
fn a_bound_runner_is_stranded_only_on_listings_that_prove_it() {
    let labels = Claim::own(&parse_labels(&["debian"]).expect("labels"));
    let t0 = Instant::now();
    let t1 = t0 + Duration::from_millis(5);
    let jobs = [job(2, "waiting", "h2")];
    let rows = [row(10, "web-aaaaa", RunnerStatus::Idle)];
    let seen = |jobs_at: Instant, runners_at: Instant, created: Option<Instant>| {
        let mut r = rref("web-aaaaa", RunnerPhase::Running, Some(10), Some("h1"));
        r.registered_at = created;
        let refs = [r];
        view_v15(
            Group {
                name: "web",
                claim: &labels,
                mark: None,
            },
            &refs,
            Listing {
                rows: &jobs,
                at: jobs_at,
            },
            runners(&rows, runners_at),
        )
    };
    let stranded = seen(t0, t1, Some(t0));
    assert_eq!(
        stranded.runners.get("web-aaaaa"),
        Some(&ForgeRunnerState::Offline)
    );
    assert_eq!(stranded.waiting_jobs, 1, "h2");
    assert!(
        stranded.stranded.contains("web-aaaaa"),
        "the planner removes it at once"
    );
    for (jobs_at, runners_at, created) in [(t1, t0, None), (t0, t1, Some(t1))] {
        let s = seen(jobs_at, runners_at, created);
        assert_eq!(s.runners.get("web-aaaaa"), Some(&ForgeRunnerState::Idle));
        assert_eq!(s.waiting_jobs, 1);
        assert!(s.stranded.is_empty());
    }
}
