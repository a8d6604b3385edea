use crate::labels::parse_labels;
use crate::state::{JOB_HANDLE_ANNOTATION, RUNNER_ID_ANNOTATION};

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
    }
}

fn rref(name: &str, phase: RunnerPhase, id: Option<i64>, handle: Option<&str>) -> RunnerRef {
    let mut annotations = BTreeMap::new();
    if let Some(id) = id {
        annotations.insert(RUNNER_ID_ANNOTATION.to_string(), id.to_string());
    }
    if let Some(h) = handle {
        annotations.insert(JOB_HANDLE_ANNOTATION.to_string(), h.to_string());
    }
    RunnerRef {
        name: name.into(),
        annotations,
        phase,
    }
}

const GRACES: Graces = Graces {
    offline: Duration::from_secs(60),
    ghost: Duration::from_secs(60),
};

#[test]
fn v15_states_ghosts_and_demand() {
    let labels = parse_labels(&["debian"]).expect("labels");
    let mut book = GroupBook::default();
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
        row(13, "web-zzzzz", RunnerStatus::Offline),
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
        labels: &labels,
    };
    let seen = view_v15(
        group(),
        &mut book,
        &refs,
        Listing { rows: &jobs, at: t0 },
        Listing { rows: &rows, at: t0 },
        GRACES,
        t0,
    );
    assert_eq!(seen.waiting_jobs, 2, "h5 and h3; gpu is not ours");
    let state = |n: &str| seen.runners.get(n).copied().unwrap_or_default();
    assert_eq!(state("web-aaaaa"), ForgeRunnerState::Idle);
    assert_eq!(state("web-bbbbb"), ForgeRunnerState::Idle, "offline within grace");
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
    assert_eq!(seen.ghosts, ["web-zzzzz"]);

    // Later: b is still offline past the grace; a succeeded, but the listing still shows h3.
    let later = t0 + GRACES.offline;
    let refs2 = [
        rref("web-aaaaa", RunnerPhase::Succeeded, Some(10), Some("h3")),
        rref("web-bbbbb", RunnerPhase::Pending, Some(11), None),
    ];
    let seen = view_v15(
        group(),
        &mut book,
        &refs2,
        Listing { rows: &jobs, at: t0 },
        Listing { rows: &rows, at: t0 },
        GRACES,
        later,
    );
    assert_eq!(seen.runners.get("web-bbbbb"), Some(&ForgeRunnerState::Offline));
    assert_eq!(
        seen.waiting_jobs, 1,
        "h3 is done although the listing shows it waiting"
    );
    // A newer listing without h3 ends the cover.
    let jobs2 = [job(5, "waiting", "h5")];
    let seen = view_v15(
        group(),
        &mut book,
        &[],
        Listing {
            rows: &jobs2,
            at: later,
        },
        Listing {
            rows: &rows,
            at: later,
        },
        GRACES,
        later,
    );
    assert_eq!(seen.waiting_jobs, 1);
}

#[test]
fn v15_runner_created_after_the_listing_is_not_finished() {
    let labels = parse_labels(&["debian"]).expect("labels");
    let mut book = GroupBook::default();
    let listing = Instant::now();
    let created = listing + Duration::from_millis(1);
    book.created("web-aaaaa", created);
    let refs = [rref("web-aaaaa", RunnerPhase::Pending, Some(10), None)];
    let seen = view_v15(
        Group {
            name: "web",
            labels: &labels,
        },
        &mut book,
        &refs,
        Listing {
            rows: &[],
            at: listing,
        },
        Listing {
            rows: &[],
            at: listing,
        },
        GRACES,
        created,
    );
    assert!(
        seen.runners.is_empty(),
        "unknown, not finished: {:?}",
        seen.runners
    );
    // Nor is its offline row a ghost while it is fresh and its Job not yet seen.
    let rows = [row(10, "web-aaaaa", RunnerStatus::Offline)];
    let seen = view_v15(
        Group {
            name: "web",
            labels: &labels,
        },
        &mut book,
        &[],
        Listing {
            rows: &[],
            at: created,
        },
        Listing {
            rows: &rows,
            at: created,
        },
        GRACES,
        created,
    );
    assert!(seen.ghosts.is_empty());
}

#[test]
fn token_path_reports_the_oldest_runners_busy_per_running_job() {
    let labels = parse_labels(&["debian"]).expect("labels");
    let mut book = GroupBook::default();
    let t0 = Instant::now();
    book.created("web-bbbbb", t0);
    book.created("web-aaaaa", t0 + Duration::from_secs(1));
    let jobs = [
        job(3, "running", ""),
        job(2, "waiting", ""),
        job(1, "waiting", ""),
    ];
    let refs = [
        rref("web-aaaaa", RunnerPhase::Running, None, None),
        rref("web-bbbbb", RunnerPhase::Running, None, None),
        rref("web-ccccc", RunnerPhase::Pending, None, None),
    ];
    let seen = view_token(&labels, &mut book, &refs, Listing { rows: &jobs, at: t0 }, t0);
    assert_eq!(seen.waiting_jobs, 2);
    assert_eq!(
        seen.runners.into_iter().collect::<Vec<_>>(),
        [("web-bbbbb".to_string(), ForgeRunnerState::Busy)]
    );
    assert!(seen.ghosts.is_empty());
}

/// A bound runner whose job another runner took: its own row is idle, so it stays idle (the idle
/// timeout removes it) instead of being marked busy for good.
#[test]
fn a_bound_runner_whose_job_another_runner_runs_stays_idle() {
    let labels = parse_labels(&["debian"]).expect("labels");
    let mut book = GroupBook::default();
    let t0 = Instant::now();
    let jobs = [job(4, "running", "h4")];
    let rows = [row(10, "web-aaaaa", RunnerStatus::Idle)];
    let refs = [rref("web-aaaaa", RunnerPhase::Running, Some(10), Some("h4"))];
    let seen = view_v15(
        Group {
            name: "web",
            labels: &labels,
        },
        &mut book,
        &refs,
        Listing { rows: &jobs, at: t0 },
        Listing { rows: &rows, at: t0 },
        GRACES,
        t0,
    );
    assert_eq!(seen.runners.get("web-aaaaa"), Some(&ForgeRunnerState::Idle));
    assert_eq!(seen.waiting_jobs, 0);
}

/// The jobs listing can be older than the runner listing: a job it still shows waiting whose
/// bound runner is already at work is not demand (else a spare runner is made).
#[test]
fn a_waiting_job_whose_bound_runner_is_at_work_is_not_demand() {
    let labels = parse_labels(&["debian"]).expect("labels");
    let mut book = GroupBook::default();
    let t0 = Instant::now();
    let jobs = [job(4, "waiting", "h4"), job(5, "waiting", "h5")];
    let rows = [row(10, "web-aaaaa", RunnerStatus::Active)];
    let refs = [rref("web-aaaaa", RunnerPhase::Running, Some(10), Some("h4"))];
    let seen = view_v15(
        Group {
            name: "web",
            labels: &labels,
        },
        &mut book,
        &refs,
        Listing { rows: &jobs, at: t0 },
        Listing { rows: &rows, at: t0 },
        GRACES,
        t0,
    );
    assert_eq!(seen.runners.get("web-aaaaa"), Some(&ForgeRunnerState::Busy));
    assert_eq!(seen.waiting_jobs, 1, "only h5 waits for a runner");
}
