use std::collections::BTreeMap;

use super::*;
use crate::crd::ForgeKind;
use crate::runner_job::JOB_BINDING_ANNOTATION;
use crate::testing::{RunnerGroupBuilder, bound_jobs, runner_ref};

fn spec() -> RunnerGroupSpec {
    RunnerGroupBuilder::new(ForgeKind::Forgejo).build().spec
}

/// A runner of the group; `binding` `None` stands for one created in flight whose Job the store
/// does not show yet, unless `stored` says otherwise.
fn r(name: &str, phase: RunnerPhase, binding: Option<&str>) -> RunnerRef {
    let annotations: BTreeMap<String, String> = binding
        .map(|b| (JOB_BINDING_ANNOTATION.to_owned(), b.to_owned()))
        .into_iter()
        .collect();
    runner_ref(name, phase, annotations)
}

/// A view listing `bindings` waiting, fetched at `listed_at`.
fn view(bindings: &[&str], listed_at: Instant) -> ForgeView {
    ForgeView {
        waiting_jobs: u32::try_from(bindings.len()).expect("few"),
        waiting: bound_jobs(bindings),
        listed_at: Some(listed_at),
        ..ForgeView::default()
    }
}

fn reserve(b: &mut Reservations, v: &ForgeView, runner: &str, now: Instant) -> Option<String> {
    b.reserve(&spec(), v, None, runner, now).and_then(|j| j.binding)
}

/// The view as a pass plans on it: netted for `refs`.
fn netted(
    b: &mut Reservations,
    bindings: &[&str],
    listed_at: Instant,
    refs: &[RunnerRef],
    now: Instant,
) -> ForgeView {
    let mut v = view(bindings, listed_at);
    b.observe(refs, now);
    b.net(&mut v, refs, now);
    v
}

/// A runner created in flight comes without its Job's annotations: its job must stay reserved
/// until the store shows the Job, or a second runner gets the same job.
#[test]
fn a_runner_created_in_flight_keeps_its_job() {
    let mut b = Reservations::default();
    let now = Instant::now();
    let v = view(&["h1", "h2"], now);
    assert_eq!(reserve(&mut b, &v, "g-aaaaa", now).as_deref(), Some("h1"));
    b.observe(&[r("g-aaaaa", RunnerPhase::Pending, None)], now);
    assert_eq!(reserve(&mut b, &v, "g-bbbbb", now).as_deref(), Some("h2"));
    // The store shows the Job with its binding: the reservation is read from it.
    b.observe(&[r("g-aaaaa", RunnerPhase::Pending, Some("h1"))], now);
    assert_eq!(reserve(&mut b, &view(&["h1"], now), "g-ccccc", now), None);
}

#[test]
fn jobs_bound_by_runners_and_handouts_are_never_reserved_twice() {
    let mut b = Reservations::default();
    let now = Instant::now();
    let v = view(&["h1", "h2", "h3"], now);
    b.observe(&[r("g-aaaaa", RunnerPhase::Running, Some("h1"))], now);
    assert_eq!(reserve(&mut b, &v, "g-bbbbb", now).as_deref(), Some("h2"));
    assert_eq!(reserve(&mut b, &v, "g-ccccc", now).as_deref(), Some("h3"));
    assert_eq!(reserve(&mut b, &v, "g-ddddd", now), None);
    b.release("h3");
    assert_eq!(
        reserve(&mut b, &view(&["h3"], now), "g-eeeee", now).as_deref(),
        Some("h3")
    );
    // A failed runner frees its job once its Job is seen, for a listing fetched since.
    b.observe(&[r("g-aaaaa", RunnerPhase::Failed, Some("h1"))], now);
    let fresh = now + Duration::from_millis(1);
    assert_eq!(
        reserve(&mut b, &view(&["h1"], fresh), "g-fffff", fresh).as_deref(),
        Some("h1")
    );
    // Handouts whose Job never appears expire.
    let later = now + HANDED_OUT_GRACE;
    b.observe(&[], later);
    assert_eq!(
        reserve(&mut b, &view(&["h2"], later), "g-ggggg", later).as_deref(),
        Some("h2")
    );
}

/// A runner lost while it worked on its job fails; a listing fetched before that still shows its
/// job waiting (from before the runner took it), and must not bind a second runner to the job,
/// nor count it as waiting. A listing fetched after the failure can.
#[test]
fn a_failed_runners_job_is_free_only_for_a_listing_fetched_after_the_failure() {
    let mut b = Reservations::default();
    let listing = Instant::now();
    let now = listing + Duration::from_millis(5);
    b.observe(&[r("g-aaaaa", RunnerPhase::Running, Some("h1"))], listing);
    let failed = [r("g-aaaaa", RunnerPhase::Failed, Some("h1"))];
    let v = netted(&mut b, &["h1", "h2"], listing, &failed, now);
    assert_eq!(v.waiting_jobs, 1);
    assert_eq!(
        v.waiting.len(),
        1,
        "the failed runner's job is not listed for a class"
    );
    assert_eq!(reserve(&mut b, &view(&["h1"], listing), "g-bbbbb", now), None);
    let fresh = now + Duration::from_millis(1);
    let v = netted(&mut b, &["h1", "h2"], fresh, &failed, fresh);
    assert_eq!(v.waiting_jobs, 2);
    assert_eq!(reserve(&mut b, &v, "g-bbbbb", fresh).as_deref(), Some("h1"));
}

#[test]
fn finished_runners_cover_their_job_until_a_listing_drops_it() {
    let mut b = Reservations::default();
    let listing = Instant::now();
    let now = listing + Duration::from_millis(5);
    let done = [r("g-aaaaa", RunnerPhase::Succeeded, Some("h1"))];
    let v = netted(&mut b, &["h1", "h2"], listing, &done, now);
    assert_eq!(v.waiting_jobs, 1);
    assert_eq!(
        v.accounted,
        BTreeSet::from(["g-aaaaa".to_owned()]),
        "netted here, not again"
    );
    assert_eq!(reserve(&mut b, &v, "g-bbbbb", now).as_deref(), Some("h2"));
    // The Job is cleaned up: still remembered while the listing shows h1 waiting.
    assert_eq!(netted(&mut b, &["h1", "h2"], listing, &[], now).waiting_jobs, 1);
    assert_eq!(netted(&mut b, &["h2"], now, &[], now).waiting_jobs, 1);
    assert_eq!(
        netted(&mut b, &["h1", "h2"], now, &[], now).waiting_jobs,
        2,
        "forgotten"
    );
    // A runner bound to no job is not netted here (core's book of takes does).
    let unbound = [r("g-ccccc", RunnerPhase::Succeeded, None)];
    let v = netted(&mut b, &["h1"], listing, &unbound, now);
    assert_eq!(v.waiting_jobs, 1);
    assert!(v.accounted.is_empty());
}

/// A job still listed waiting whose bound runner the forge already sees at work waits for no
/// new runner.
#[test]
fn a_job_whose_runner_is_at_work_waits_for_no_new_runner() {
    let mut b = Reservations::default();
    let now = Instant::now();
    let busy = [r("g-aaaaa", RunnerPhase::Running, Some("h1"))];
    let mut v = view(&["h1", "h2"], now);
    v.runners.insert("g-aaaaa".into(), ForgeRunnerState::Busy);
    b.observe(&busy, now);
    b.net(&mut v, &busy, now);
    assert_eq!(v.waiting_jobs, 1);
    assert_eq!(reserve(&mut b, &v, "g-bbbbb", now).as_deref(), Some("h2"));
}

/// A job the forge withholds from a connected bound runner backs off, doubling, up to the cap;
/// a listing fetched after the removal that no longer shows it waiting forgets it.
#[test]
fn withheld_jobs_back_off_doubling_until_a_listing_drops_them() {
    let s = Duration::from_secs(1);
    let mut b = Reservations::with_backoff(WithheldBackoff { first: s, max: 3 * s });
    let t0 = Instant::now();
    b.withhold("h1", t0);
    assert!(b.is_withheld("h1", t0) && !b.is_withheld("h1", t0 + s));
    let v = netted(&mut b, &["h1", "h2"], t0, &[], t0);
    assert_eq!(v.waiting_jobs, 1, "h1 needs no runner now");
    assert_eq!(v.waiting.len(), 1);
    assert_eq!(
        reserve(&mut b, &view(&["h1", "h2"], t0), "g-aaaaa", t0).as_deref(),
        Some("h2")
    );
    assert_eq!(
        netted(&mut b, &["h1", "h2"], t0, &[], t0 + s).waiting_jobs,
        2,
        "the wait is over"
    );
    b.withhold("h1", t0 + s);
    assert!(
        b.is_withheld("h1", t0 + 2 * s) && !b.is_withheld("h1", t0 + 3 * s),
        "doubled"
    );
    b.withhold("h1", t0 + 3 * s);
    b.withhold("h1", t0 + 6 * s);
    assert!(!b.is_withheld("h1", t0 + 9 * s), "capped at max");
    // An older listing without h1 proves nothing; a newer one ends the backoff.
    let later = t0 + 7 * s;
    netted(&mut b, &["h2"], t0, &[], later);
    assert!(b.is_withheld("h1", later));
    netted(&mut b, &["h2"], later, &[], later);
    assert!(!b.is_withheld("h1", later));
    b.withhold("h1", later);
    assert!(!b.is_withheld("h1", later + s), "strikes start over");
}

/// A runner of a class is only bound to a job of its class, and a runner of the group's own to
/// a job that names no class.
#[test]
fn a_runner_is_bound_only_to_a_job_of_its_class() {
    let mut spec = spec();
    spec.classes = serde_json::from_value(serde_json::json!([
        {"name": "large", "labels": ["large:docker://node:22"]}
    ]))
    .expect("classes");
    let now = Instant::now();
    let mut v = view(&["h1", "h2"], now);
    v.waiting[0].labels = vec!["large".into()];
    let mut b = Reservations::default();
    let own = b.reserve(&spec, &v, None, "g-aaaaa", now).and_then(|j| j.binding);
    assert_eq!(own.as_deref(), Some("h2"));
    let large = b.reserve(&spec, &v, Some("large"), "g-bbbbb", now);
    assert_eq!(large.map(|j| j.id).as_deref(), Some("0"));
    assert_eq!(b.reserve(&spec, &v, Some("large"), "g-ccccc", now), None);
}

/// A forge that binds no runner to a job has nothing reserved and nothing netted.
#[test]
fn a_forge_without_bindings_reserves_nothing() {
    let mut b = Reservations::default();
    let now = Instant::now();
    let mut v = view(&["h1"], now);
    v.waiting[0].binding = None;
    assert_eq!(b.reserve(&spec(), &v, None, "g-aaaaa", now), None);
    b.net(&mut v, &[], now);
    assert_eq!(v.waiting_jobs, 1);
    assert!(b.handed_out.is_empty());
}
