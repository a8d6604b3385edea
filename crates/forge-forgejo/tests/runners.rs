//! Wire tests of runner life at the fake Forgejo: v15 create/bind/observe/remove, handles
//! never bound twice, finished runners covering their job, and the 11–14 token path.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

mod common;

use forgerunner_core::forge::RunnerRequest;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{ctx, declared, fake, forge, netted_view, register_in_a_pass, runner_ref, web};
use forgerunner_core::crd::{ContainerMode, ContainerModeType, ForgejoScope};
use forgerunner_core::forge::{Forge, ForgeRunnerState, RemoveOutcome, SecretValue};
use forgerunner_core::plan::RunnerPhase;
use forgerunner_core::reconcile::ledger::{Ledger, OfflineRows, Reservations, WithheldBackoff};
use forgerunner_core::runner_job::JOB_BINDING_ANNOTATION;
use forgerunner_forgejo::runner_id::RUNNER_ID_ANNOTATION;
use forgerunner_testkit::forge_common::rpc::RunnerClient;
use forgerunner_testkit::forgejo::{ADMIN_TOKEN, FakeConfig, FakeScope, ForgejoFakeHandle, JobSpec};
use serde_json::json;

/// Plays forgejo-runner over the runner RPC: declares `debian`, fetches one task (by
/// `handle`, if given) and, if `finish`, reports success. The task's id.
async fn take_task(
    fake: &ForgejoFakeHandle,
    uuid: &str,
    token: &str,
    handle: Option<&str>,
    finish: bool,
) -> i64 {
    let c = declared(fake, uuid, token, "12.8.2").await;
    let (method, body) = match handle {
        Some(h) => ("FetchSingleTask", json!({"handle": h})),
        None => ("FetchTask", json!({})),
    };
    let (_, v) = c.call(method, body).await.unwrap();
    let id = v["task"]["id"].as_i64().expect("a task");
    if finish {
        let done = json!({"state": {"id": id, "result": "RESULT_SUCCESS"}});
        c.call("UpdateTask", done).await.unwrap();
    }
    id
}

#[tokio::test]
async fn v15_create_bind_observe_remove() {
    let fake = fake("15.0.3+gitea-1.22.0").await;
    let first = fake.queue_job("o/r", "a", &["debian"]);
    fake.queue_job("o/r", "b", &["debian"]);
    let f = forge();
    let c = web(&fake, ForgejoScope::Repo, Some("o/r"));
    assert_eq!(f.open(&c.key).snapshot(&c, &[]).await.unwrap().waiting_jobs, 2);

    let mut books = Ledger::default();
    let creds = register_in_a_pass(&f, &c, &mut books, &[], "web-aaaaa", None).await;
    let handle = fake.job(first).unwrap().handle;
    assert_eq!(
        creds.env.get("FORGEJO_JOB_HANDLE"),
        Some(&handle),
        "oldest job first"
    );
    assert_eq!(creds.annotations.get(JOB_BINDING_ANNOTATION), Some(&handle));
    // Bound before its pod exists: the job's identity goes on at creation.
    assert_eq!(
        creds
            .annotations
            .get(forgerunner_core::job_identity::JOB_NAME_ANNOTATION),
        Some(&"a".to_owned())
    );
    assert_eq!(
        creds
            .annotations
            .get(forgerunner_core::job_identity::JOB_ID_ANNOTATION),
        Some(&first.to_string())
    );
    assert_eq!(creds.env.get("FORGEJO_INSTANCE_URL"), Some(&fake.url()));
    let id: i64 = creds.annotations[RUNNER_ID_ANNOTATION].parse().unwrap();
    let row = fake.runner(id).expect("runner row");
    assert!(row.ephemeral && row.name == "web-aaaaa");
    // Forgejo keeps the description it is given (`routers/api/v1/shared/runners.go`
    // `RegisterRunner`): the group's uid marks the row as its own.
    assert_eq!(
        row.description,
        format!(
            "ephemeral runner managed by forgerunner for RunnerGroup {}",
            c.uid
        )
    );
    assert_eq!(creds.env.get("FORGEJO_RUNNER_UUID"), Some(&row.uuid));
    assert_eq!(
        creds.secret_data.get("token").map(SecretValue::expose),
        Some(row.token.as_str())
    );
    assert!(!format!("{creds:?}").contains(&row.token), "no token in Debug");
    assert_eq!(
        fake.runner(id).unwrap().scope,
        FakeScope::Repo("o".into(), "r".into())
    );

    // Not connected yet: offline at Forgejo, and reported as its row shows it.
    let refs = [runner_ref("web-aaaaa", RunnerPhase::Pending, &creds.annotations)];
    let view = f.open(&c.key).snapshot(&c, &refs).await.unwrap();
    assert_eq!(view.runners.get("web-aaaaa"), Some(&ForgeRunnerState::Offline));
    assert_eq!(
        view.waiting_jobs, 2,
        "a bound job still waits; the planner counts the runner"
    );
    let listed = view.listed_rows.as_ref().expect("15+ lists runner rows");
    assert!(listed.offline.contains("web-aaaaa"), "its row is offline");
    assert!(listed.own.contains("web-aaaaa"), "and carries the group's mark");
    let ghosts = forgerunner_core::testing::settled_ghosts(view, &refs, &mut books);
    assert!(ghosts.is_empty(), "our own fresh runner is no ghost");

    // Remove (idle timeout): deleted at Forgejo; a second removal finds it gone.
    assert_eq!(
        f.open(&c.key).deregister(&c, &refs[0]).await.unwrap(),
        RemoveOutcome::Removed
    );
    assert!(fake.runner(id).is_none());
    assert!(fake.deleted_runners().contains(&id));
    assert_eq!(
        f.open(&c.key).deregister(&c, &refs[0]).await.unwrap(),
        RemoveOutcome::Removed
    );

    // A runner working on a task is busy and is not removed.
    let busy = f
        .open(&c.key)
        .register(&c, &RunnerRequest::unbound("web-bbbbb", None))
        .await
        .unwrap();
    let bid: i64 = busy.annotations[RUNNER_ID_ANNOTATION].parse().unwrap();
    fake.set_runner_seen(bid, Some(Duration::ZERO), Some(Duration::ZERO));
    let bref = runner_ref("web-bbbbb", RunnerPhase::Running, &busy.annotations);
    assert_eq!(
        f.open(&c.key).deregister(&c, &bref).await.unwrap(),
        RemoveOutcome::Busy
    );
    assert!(fake.runner(bid).is_some());
    // A ghost (offline, named like ours, no Job) is found by name and deleted.
    let ghost = fake.add_runner(
        FakeScope::Repo("o".into(), "r".into()),
        "web-zzzzz",
        &["debian"],
        true,
    );
    let f2 = forge();
    let view = f2
        .open(&c.key)
        .snapshot(&c, std::slice::from_ref(&bref))
        .await
        .unwrap();
    assert_eq!(
        view.listed_rows.as_ref().map(|r| r.offline.clone()),
        Some(BTreeSet::from(["web-zzzzz".to_owned()]))
    );
    assert_eq!(
        view.listed_rows.as_ref().map(|r| r.own.len()),
        Some(0),
        "a row registered without the group's mark may be a same-named group's"
    );
    // Core calls it a ghost: at first sight with no grace (core's `OfflineRows` tests the grace).
    let mut no_grace = Ledger {
        offline_rows: OfflineRows::with_grace(Duration::ZERO),
        ..Ledger::default()
    };
    let ghosts = forgerunner_core::testing::settled_ghosts(view, std::slice::from_ref(&bref), &mut no_grace);
    assert_eq!(ghosts, ["web-zzzzz"]);
    let gref = runner_ref("web-zzzzz", RunnerPhase::Failed, &BTreeMap::new());
    assert_eq!(
        f2.open(&c.key).deregister(&c, &gref).await.unwrap(),
        RemoveOutcome::Removed
    );
    assert!(fake.runner(ghost.id).is_none());
}

/// A pass reserves a job for each runner it makes before it registers them all at once: each
/// job gets one runner, and the runners without a job take any.
#[tokio::test]
async fn concurrent_creations_never_bind_one_handle_twice() {
    let fake = fake("15.0.3+gitea-1.22.0").await;
    for i in 0..10 {
        fake.queue_job("o/r", &format!("j{i}"), &["debian"]);
    }
    let f = forge();
    let c = web(&fake, ForgejoScope::Global, None);
    let mut books = Ledger::default();
    let view = netted_view(&f, &c, &[], &mut books).await;
    let now = std::time::Instant::now();
    let planned: Vec<(String, Option<_>)> = (0..20)
        .map(|i| {
            let name = format!("web-{i:05}");
            let job = books.reservations.reserve(&c.group.spec, &view, None, &name, now);
            (name, job)
        })
        .collect();
    let calls = planned.iter().map(|(name, job)| {
        let (f, c) = (&f, &c);
        let request = RunnerRequest {
            name,
            class: None,
            job: job.as_ref(),
        };
        async move { f.open(&c.key).register(c, &request).await }
    });
    let results = futures::future::join_all(calls).await;
    let handles: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().unwrap().env.get("FORGEJO_JOB_HANDLE").cloned())
        .collect();
    let distinct: BTreeSet<&String> = handles.iter().collect();
    assert_eq!(handles.len(), 10, "10 bound");
    assert_eq!(distinct.len(), 10, "each handle once");
    let listed: BTreeSet<String> = view.waiting.iter().filter_map(|j| j.binding.clone()).collect();
    assert_eq!(distinct.into_iter().cloned().collect::<BTreeSet<_>>(), listed);
    assert_eq!(fake.runners().len(), 20);
}

#[tokio::test]
async fn a_finished_runner_covers_its_job_until_a_new_listing() {
    let fake = fake("15.0.3+gitea-1.22.0").await;
    let job = fake.queue_job("o/r", "a", &["debian"]);
    let f = forge();
    let mut spec = common::spec(&fake.url(), ForgejoScope::Global, None, &["debian:host"]);
    spec.poll_interval_seconds = Some(1);
    let c = common::group_context("web", spec, ADMIN_TOKEN);
    let mut books = Ledger::default();
    let creds = register_in_a_pass(&f, &c, &mut books, &[], "web-aaaaa", None).await;
    let id: i64 = creds.annotations[RUNNER_ID_ANNOTATION].parse().unwrap();
    let running = [runner_ref("web-aaaaa", RunnerPhase::Running, &creds.annotations)];
    assert_eq!(netted_view(&f, &c, &running, &mut books).await.waiting_jobs, 1);

    // The runner runs the job at Forgejo (its ephemeral row goes), while our cached listing
    // still shows the job waiting; the runner's Job succeeded.
    let row = fake.runner(id).unwrap();
    let handle = creds.annotations.get(JOB_BINDING_ANNOTATION).cloned();
    take_task(&fake, &row.uuid, &row.token, handle.as_deref(), true).await;
    assert!(fake.runner(id).is_none(), "ephemeral row deleted after its task");
    assert_ne!(fake.job(job).unwrap().status.as_str(), "waiting");
    let done = [runner_ref(
        "web-aaaaa",
        RunnerPhase::Succeeded,
        &creds.annotations,
    )];
    let view = netted_view(&f, &c, &done, &mut books).await;
    assert_eq!(view.waiting_jobs, 0, "the finished runner covers its job");
    // Its Job is cleaned up: still covered while the old listing is in use.
    assert_eq!(netted_view(&f, &c, &[], &mut books).await.waiting_jobs, 0);
    // A newer listing no longer shows the job; new demand counts in full again.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    fake.queue_job("o/r", "b", &["debian"]);
    assert_eq!(netted_view(&f, &c, &[], &mut books).await.waiting_jobs, 1);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(netted_view(&f, &c, &[], &mut books).await.waiting_jobs, 1);
}

#[tokio::test]
async fn token_path_on_forgejo_14() {
    let fake = fake("14.0.4+gitea-1.22.0").await;
    fake.queue_job("o/r", "a", &["debian"]);
    fake.queue_job("o/r", "b", &["debian"]);
    let f = forge();
    let labels = ["debian:docker://node:22", "self-hosted:host"];
    let mut c = ctx(
        "web",
        &fake.url(),
        ForgejoScope::Global,
        None,
        &labels,
        ADMIN_TOKEN,
    );
    // A docker label needs a daemon (forgejo-runner's `configCheck` exits at start without one).
    c.group.spec.container_mode = Some(ContainerMode {
        type_: ContainerModeType::Dind,
        kubernetes_mode_work_volume_claim: None,
    });
    let view = f.open(&c.key).snapshot(&c, &[]).await.unwrap();
    assert_eq!(view.waiting_jobs, 2);
    assert_eq!(view.facts.forge_version.as_deref(), Some("14.0.4+gitea-1.22.0"));
    assert!(
        fake.requests()
            .iter()
            .any(|r| r.path == "/api/v1/admin/runners/jobs")
    );

    let creds = f
        .open(&c.key)
        .register(&c, &RunnerRequest::unbound("web-aaaaa", None))
        .await
        .unwrap();
    let token = fake.registration_token(&FakeScope::Global);
    assert_eq!(
        creds
            .secret_data
            .get("registration-token")
            .map(SecretValue::expose),
        Some(token.as_str())
    );
    assert!(!format!("{creds:?}").contains(&token));
    assert_eq!(
        creds.env.get("FORGEJO_RUNNER_NAME").map(String::as_str),
        Some("web-aaaaa")
    );
    assert_eq!(
        creds.env.get("FORGEJO_RUNNER_LABELS").map(String::as_str),
        Some("debian:docker://node:22,self-hosted:host")
    );
    assert!(creds.annotations.is_empty());

    // A fixed registration token in the Secret is used as is, without a request.
    let mut fixed = c.clone();
    fixed
        .credentials
        .data
        .insert("registration_token".into(), SecretValue::new("fixed-token"));
    fake.clear_requests();
    let creds = f
        .open(&fixed.key)
        .register(&fixed, &RunnerRequest::unbound("web-bbbbb", None))
        .await
        .unwrap();
    assert_eq!(creds.secret_data["registration-token"].expose(), "fixed-token");
    assert!(
        !fake
            .requests()
            .iter()
            .any(|r| r.path.contains("registration-token"))
    );

    // A running job makes the oldest runner busy; removal makes no call.
    let row = fake.add_runner(FakeScope::Global, "web-aaaaa", &["debian"], false);
    take_task(&fake, &row.uuid, &row.token, None, false).await;
    let refs = [
        runner_ref("web-aaaaa", RunnerPhase::Running, &BTreeMap::new()),
        runner_ref("web-bbbbb", RunnerPhase::Running, &BTreeMap::new()),
    ];
    // A fresh backend: the first one's cached listing predates the task.
    let f = forge();
    let view = f.open(&c.key).snapshot(&c, &refs).await.unwrap();
    assert_eq!(view.waiting_jobs, 1);
    assert_eq!(view.runners.len(), 1, "one running job: one runner busy");
    assert!(view.runners.values().all(|s| *s == ForgeRunnerState::Busy));
    assert_eq!(view.listed_rows, None, "11–14 list no runner rows");
    fake.clear_requests();
    assert_eq!(
        f.open(&c.key).deregister(&c, &refs[1]).await.unwrap(),
        RemoveOutcome::Removed
    );
    assert!(fake.requests().is_empty(), "no runner API before 15");
}

/// 11–14: a runner (bound to no job) whose Job succeeded after the cached jobs listing was
/// fetched took a job that listing may still show waiting. Forgejo reports the listing's count
/// and when it was fetched; core's ledger nets the runner out until a newer listing.
#[tokio::test]
async fn token_path_a_runner_that_finished_after_the_listing_is_netted_by_core() {
    let fake = fake("14.0.4+gitea-1.22.0").await;
    fake.queue_job("o/r", "a", &["debian"]);
    fake.queue_job("o/r", "b", &["debian"]);
    let f = forge();
    let mut spec = common::spec(&fake.url(), ForgejoScope::Global, None, &["debian:host"]);
    spec.poll_interval_seconds = Some(1);
    let c = common::group_context("web", spec, ADMIN_TOKEN);
    let mut books = forgerunner_core::reconcile::ledger::Ledger::default();
    let view = netted_view(&f, &c, &[], &mut books).await;
    assert_eq!(view.waiting_jobs, 2);
    assert!(view.listed_at.is_some() && view.takes_by_success_only);

    // A runner registers with the token, runs one job and its Job succeeds; the cached listing
    // still shows both jobs waiting.
    let row = fake.add_runner(FakeScope::Global, "web-aaaaa", &["debian"], false);
    take_task(&fake, &row.uuid, &row.token, None, true).await;
    let done = [forgerunner_core::forge::RunnerRef {
        stored: true,
        registered_at: None,
        connected_since: None,
        ..runner_ref("web-aaaaa", RunnerPhase::Succeeded, &BTreeMap::new())
    }];
    let view = netted_view(&f, &c, &done, &mut books).await;
    assert_eq!(view.waiting_jobs, 1, "the finished runner covers one job");
    assert!(
        view.accounted.is_empty(),
        "a runner bound to no job is core's to net"
    );
    // Its Job is cleaned up: still covered while the old listing is in use.
    assert_eq!(netted_view(&f, &c, &[], &mut books).await.waiting_jobs, 1);
    // A newer listing shows the job taken: the one still waiting counts in full.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(netted_view(&f, &c, &[], &mut books).await.waiting_jobs, 1);
}

/// 15+: a bound runner that finished after the cached listing covers its own job by its handle
/// here; core's ledger must not net it a second time (it is `accounted`).
#[tokio::test]
async fn v15_a_finished_bound_runner_is_netted_once() {
    let fake = fake("15.0.3+gitea-1.22.0").await;
    fake.queue_job("o/r", "a", &["debian"]);
    fake.queue_job("o/r", "b", &["debian"]);
    let f = forge();
    let c = web(&fake, ForgejoScope::Repo, Some("o/r"));
    let mut books = Ledger::default();
    let creds = register_in_a_pass(&f, &c, &mut books, &[], "web-aaaaa", None).await;
    let running = [runner_ref("web-aaaaa", RunnerPhase::Running, &creds.annotations)];
    assert_eq!(netted_view(&f, &c, &running, &mut books).await.waiting_jobs, 2);
    let id: i64 = creds.annotations[RUNNER_ID_ANNOTATION].parse().unwrap();
    let row = fake.runner(id).unwrap();
    let handle = creds.annotations.get(JOB_BINDING_ANNOTATION).cloned();
    take_task(&fake, &row.uuid, &row.token, handle.as_deref(), true).await;
    let done = [runner_ref(
        "web-aaaaa",
        RunnerPhase::Succeeded,
        &creds.annotations,
    )];
    let view = netted_view(&f, &c, &done, &mut books).await;
    assert_eq!(view.accounted, BTreeSet::from(["web-aaaaa".to_owned()]));
    assert_eq!(view.waiting_jobs, 1, "b still waits for a runner");
}

/// Forgejo lists runners by `last_online DESC` (`models/actions/runner.go`
/// `FindRunnerOptions.ToOrders@v15.0.0`), rewritten on every runner call
/// (`routers/api/actions/runner/interceptor.go` `withRunner`), and caps `limit` at
/// `MAX_RESPONSE_ITEMS`: a runner that polls between two page requests moves to page 1 and the
/// listing never shows it. Its absence must not make it `Finished` (it would neither cover
/// demand nor ever be reaped); a lookup by id tells.
#[tokio::test]
async fn a_runner_a_shifting_page_skipped_is_not_finished() {
    let fake = ForgejoFakeHandle::start(FakeConfig {
        max_response_items: 2,
        ..FakeConfig::version("15.0.3+gitea-1.22.0")
    })
    .await
    .unwrap();
    for i in 0..3 {
        fake.queue_job("o/r", &format!("j{i}"), &["debian"]);
    }
    let f = forge();
    let c = web(&fake, ForgejoScope::Global, None);
    let (mut refs, mut ids, mut books) = (Vec::new(), Vec::new(), Ledger::default());
    for name in ["web-aaaaa", "web-bbbbb", "web-ccccc"] {
        let creds = register_in_a_pass(&f, &c, &mut books, &refs, name, None).await;
        ids.push(creds.annotations[RUNNER_ID_ANNOTATION].parse::<i64>().unwrap());
        refs.push(runner_ref(name, RunnerPhase::Running, &creds.annotations));
    }
    // All three poll; the oldest call first, so the list reads c, b | a.
    for (i, id) in ids.iter().enumerate() {
        let ago = Duration::from_secs(3 - i as u64);
        fake.set_runner_seen(*id, Some(ago), None);
    }
    // `a` polls after page 1 was read: page 2 then holds `b` again, and `a` is never seen.
    let a = ids[0];
    let once = std::sync::atomic::AtomicBool::new(false);
    fake.before_runner_page(move |page, m| {
        if page == 2 && !once.swap(true, std::sync::atomic::Ordering::SeqCst) {
            m.touch_runner(a);
        }
    });
    let view = f.open(&c.key).snapshot(&c, &refs).await.unwrap();
    assert_eq!(
        view.runners.get("web-aaaaa"),
        Some(&ForgeRunnerState::Idle),
        "a live runner the listing skipped: {:?}",
        view.runners
    );
    assert_eq!(view.runners.get("web-bbbbb"), Some(&ForgeRunnerState::Idle));
    assert_eq!(view.waiting_jobs, 3, "every job still waits for its runner");

    // A runner that is really gone is still seen as finished, by its id.
    fake.clear_runner_page_hook();
    let gone = fake.runner(a).unwrap();
    take_task(
        &fake,
        &gone.uuid,
        &gone.token,
        refs[0]
            .annotations
            .get(JOB_BINDING_ANNOTATION)
            .map(String::as_str),
        true,
    )
    .await;
    // Another group's runner keeps the listing at two pages: a's absence from it proves
    // nothing, the lookup by id does.
    fake.add_runner(FakeScope::Global, "other-zzzzz", &[], true);
    let f = forge();
    let view = f.open(&c.key).snapshot(&c, &refs).await.unwrap();
    assert_eq!(view.runners.get("web-aaaaa"), Some(&ForgeRunnerState::Finished));
    assert_eq!(view.runners.get("web-bbbbb"), Some(&ForgeRunnerState::Idle));
    assert_eq!(view.runners.get("web-ccccc"), Some(&ForgeRunnerState::Idle));
}

/// What the planner does with `view` for these runners (running, never busy, young).
fn plan_for(view: &forgerunner_core::forge::ForgeView, names: &[&str]) -> forgerunner_core::plan::Plan {
    use forgerunner_core::plan::{FailureHistory, ObservedRunner, PlanInput, plan};
    let runners: Vec<ObservedRunner> = names
        .iter()
        .map(|n| ObservedRunner {
            name: n.to_string(),
            phase: RunnerPhase::Running,
            forge_state: view.runners.get(*n).copied().unwrap_or_default(),
            age_seconds: 30,
            running_seconds: 30,
            ever_busy: false,
            stuck: None,
            outdated: false,
        })
        .collect();
    plan(&PlanInput {
        min_runners: 0,
        max_runners: 8,
        idle_timeout_seconds: 600,
        runners: &runners,
        view,
        ghosts: &[],
        failures: FailureHistory::default(),
        budget: None,
        now: jiff::Timestamp::now(),
        scale_down_delay_seconds: 0,
        surplus: None,
        classes: forgerunner_core::plan::Classes::NONE,
    })
}

/// A re-run gives the job a new handle (`models/actions/run_job.go`
/// `PrepareNextAttempt@v15.0.0`) and a cancel ends it; a runner bound to the old handle never
/// matches again (`IsRequestedByRunner`) and polls until its idle timeout. Meanwhile it must not
/// hide the re-run from the planner: the re-run gets its own runner at once.
#[tokio::test]
async fn a_runner_whose_job_was_rerun_or_cancelled_hides_no_demand() {
    let fake = fake("15.0.3+gitea-1.22.0").await;
    let job = fake.queue_job("o/r", "a", &["debian"]);
    let f = forge();
    let mut spec = common::spec(&fake.url(), ForgejoScope::Global, None, &["debian:host"]);
    spec.poll_interval_seconds = Some(1);
    let c = common::group_context("web", spec, ADMIN_TOKEN);
    let mut books = Ledger::default();
    let creds = register_in_a_pass(&f, &c, &mut books, &[], "web-aaaaa", None).await;
    let old = fake.job(job).unwrap().handle;
    assert_eq!(creds.annotations.get(JOB_BINDING_ANNOTATION), Some(&old));
    let id: i64 = creds.annotations[RUNNER_ID_ANNOTATION].parse().unwrap();
    // The runner polls for its handle.
    fake.set_runner_seen(id, Some(Duration::ZERO), None);
    let refs = [runner_ref("web-aaaaa", RunnerPhase::Running, &creds.annotations)];
    let view = f.open(&c.key).snapshot(&c, &refs).await.unwrap();
    assert_eq!(view.runners.get("web-aaaaa"), Some(&ForgeRunnerState::Idle));
    assert_eq!(
        plan_for(&view, &["web-aaaaa"]).create,
        0,
        "the runner covers its job"
    );

    // The job is cancelled and re-run before the runner got it.
    assert!(fake.cancel_job(job));
    let new = fake.rerun_job(job).unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    fake.set_runner_seen(id, Some(Duration::ZERO), None);
    let view = f.open(&c.key).snapshot(&c, &refs).await.unwrap();
    assert_eq!(
        view.runners.get("web-aaaaa"),
        Some(&ForgeRunnerState::Offline),
        "it will never take a job"
    );
    let plan = plan_for(&view, &["web-aaaaa"]);
    assert_eq!(
        plan.create, 1,
        "the re-run gets a runner now, not after the idle timeout"
    );
    assert!(
        plan.remove
            .iter()
            .any(|r| r.name == "web-aaaaa" && r.reason == forgerunner_core::plan::RemovalReason::JobGone),
        "the stranded runner goes at once: {plan:?}"
    );
    let second = register_in_a_pass(&f, &c, &mut books, &refs, "web-bbbbb", None).await;
    assert_eq!(second.annotations.get(JOB_BINDING_ANNOTATION), Some(&new));
}

/// A job cancelled before its bound runner got it (`Status = cancelled`, no longer listed by
/// `shared.GetActionRunJobs`): the runner will never get a job, and nothing else waits, so
/// nothing new is made.
#[tokio::test]
async fn a_runner_whose_job_was_cancelled_makes_no_new_runner() {
    let fake = fake("15.0.3+gitea-1.22.0").await;
    let job = fake.queue_job("o/r", "a", &["debian"]);
    let f = forge();
    let mut spec = common::spec(&fake.url(), ForgejoScope::Global, None, &["debian:host"]);
    spec.poll_interval_seconds = Some(1);
    let c = common::group_context("web", spec, ADMIN_TOKEN);
    let mut books = Ledger::default();
    let creds = register_in_a_pass(&f, &c, &mut books, &[], "web-aaaaa", None).await;
    assert!(
        creds.annotations.contains_key(JOB_BINDING_ANNOTATION),
        "bound to the job"
    );
    let id: i64 = creds.annotations[RUNNER_ID_ANNOTATION].parse().unwrap();
    assert!(fake.cancel_job(job));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    fake.set_runner_seen(id, Some(Duration::ZERO), None);
    let refs = [runner_ref("web-aaaaa", RunnerPhase::Running, &creds.annotations)];
    let view = f.open(&c.key).snapshot(&c, &refs).await.unwrap();
    assert_eq!(view.runners.get("web-aaaaa"), Some(&ForgeRunnerState::Offline));
    let plan = plan_for(&view, &["web-aaaaa"]);
    assert_eq!(plan.create, 0);
    assert_eq!(
        plan.remove.len(),
        1,
        "removed at once, not at the idle timeout: {plan:?}"
    );
}

/// Forgejo 14+ hands no job queued behind its concurrency group to any runner
/// (`models/actions/task.go` `GetAvailableJobsForRunner@v15.0.0` with
/// `CONCURRENCY_GROUP_QUEUE_ENABLED`, default true), while `…/runners/jobs` lists it `waiting`.
/// A runner bound to it polls until its idle timeout; once one was removed that way, the job
/// is backed off instead of getting the next runner at once.
#[tokio::test]
async fn a_job_held_by_its_concurrency_group_is_backed_off_after_an_idle_removal() {
    let fake = fake("15.0.3+gitea-1.22.0").await;
    // Another runner works on the group's first run; the second run waits behind it.
    let row = fake.add_runner(FakeScope::Global, "elsewhere", &[], false);
    fake.queue(JobSpec::new("o/r", "deploy", &["debian"]).concurrency("prod"));
    take_task(&fake, &row.uuid, &row.token, None, false).await;
    let held = fake.queue(JobSpec::new("o/r", "deploy", &["debian"]).concurrency("prod"));
    let handle = fake.job(held).unwrap().handle;
    let f = forge();
    let mut books = Ledger {
        reservations: Reservations::with_backoff(WithheldBackoff {
            first: Duration::from_millis(1500),
            max: Duration::from_secs(60),
        }),
        ..Ledger::default()
    };
    let mut spec = common::spec(&fake.url(), ForgejoScope::Global, None, &["debian:host"]);
    spec.poll_interval_seconds = Some(1);
    let c = common::group_context("web", spec, ADMIN_TOKEN);
    assert_eq!(
        f.open(&c.key).snapshot(&c, &[]).await.unwrap().waiting_jobs,
        1,
        "listed waiting"
    );

    // A runner is bound to it and polls for it: Forgejo hands it nothing.
    let creds = register_in_a_pass(&f, &c, &mut books, &[], "web-aaaaa", None).await;
    assert_eq!(creds.annotations.get(JOB_BINDING_ANNOTATION), Some(&handle));
    let id: i64 = creds.annotations[RUNNER_ID_ANNOTATION].parse().unwrap();
    let r = fake.runner(id).unwrap();
    let mut client = RunnerClient::new(&fake.url()).unwrap();
    client.uuid = r.uuid.clone();
    client.token = r.token.clone();
    let (_, t) = client
        .call("FetchSingleTask", json!({"handle": handle}))
        .await
        .unwrap();
    assert_eq!(t["task"], serde_json::Value::Null, "held behind the running run");
    let refs = [runner_ref("web-aaaaa", RunnerPhase::Running, &creds.annotations)];
    let view = f.open(&c.key).snapshot(&c, &refs).await.unwrap();
    assert_eq!(view.runners.get("web-aaaaa"), Some(&ForgeRunnerState::Idle));

    // Its idle timeout removes it after core has seen it connected for longer than the minute
    // forgejo-runner needs to get an available job (`held_evidence`): that tells that Forgejo
    // withholds the job. The job still waits, but core makes no new runner for it for a while.
    let connected_since = std::time::Instant::now().checked_sub(Duration::from_secs(61));
    assert!(connected_since.is_some(), "the clock reaches a minute back");
    let refs = [forgerunner_core::forge::RunnerRef {
        connected_since,
        ..refs[0].clone()
    }];
    assert_eq!(
        f.open(&c.key).deregister(&c, &refs[0]).await.unwrap(),
        RemoveOutcome::Withheld
    );
    books.reservations.withhold(&handle, std::time::Instant::now());
    let view = netted_view(&f, &c, &[], &mut books).await;
    assert_eq!(view.waiting_jobs, 0, "backed off");
    let spare = register_in_a_pass(&f, &c, &mut books, &[], "web-bbbbb", None).await;
    assert_eq!(
        spare.annotations.get(JOB_BINDING_ANNOTATION),
        None,
        "not bound to it"
    );

    // After the backoff it is demand again.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert_eq!(netted_view(&f, &c, &[], &mut books).await.waiting_jobs, 1);
}

/// M2 of the security review: the runner id on a runner's Job is only a hint, since anyone who
/// may edit Jobs in the namespace can rewrite it. The row it names is deleted only when its
/// `name` is the runner's (Forgejo's `GET …/actions/runners/{id}` answers `ActionRunner` with the
/// row's `name`: `routers/api/v1/shared/runners.go` `GetRunner`, `services/convert/convert.go`
/// `ToActionRunner`; the fake answers the same, `testkit/src/forgejo/rest.rs` `runner_by_id`).
/// Someone else's runner at the scope survives, and one of our runners whose annotation was
/// rewritten is still found by its name and removed.
#[tokio::test]
async fn a_runner_id_naming_another_runner_never_deletes_it() {
    let fake = fake("15.0.3+gitea-1.22.0").await;
    fake.add_repo("o/r");
    let f = forge();
    let c = web(&fake, ForgejoScope::Repo, Some("o/r"));
    // A runner registered by hand at the group's scope, not forgerunner's.
    let victim = fake.add_runner(
        FakeScope::Repo("o".into(), "r".into()),
        "build-box-1",
        &["debian"],
        false,
    );
    let forged = BTreeMap::from([(RUNNER_ID_ANNOTATION.to_string(), victim.id.to_string())]);

    // A stuck runner whose Job names the victim's id: nothing of that name is registered.
    let stuck = runner_ref("web-qqqqq", RunnerPhase::Pending, &forged);
    assert_eq!(
        f.open(&c.key).deregister(&c, &stuck).await.unwrap(),
        RemoveOutcome::Removed
    );
    assert!(fake.runner(victim.id).is_some(), "the victim runner was deleted");
    assert!(!fake.deleted_runners().contains(&victim.id));

    // One of ours with the annotation rewritten: removed by its name, the victim kept.
    let ours = f
        .open(&c.key)
        .register(&c, &RunnerRequest::unbound("web-ppppp", None))
        .await
        .unwrap();
    let id: i64 = ours.annotations[RUNNER_ID_ANNOTATION].parse().unwrap();
    let rewritten = runner_ref("web-ppppp", RunnerPhase::Pending, &forged);
    assert_eq!(
        f.open(&c.key).deregister(&c, &rewritten).await.unwrap(),
        RemoveOutcome::Removed
    );
    assert!(fake.runner(id).is_none(), "our runner is removed by its name");
    assert!(fake.runner(victim.id).is_some(), "the victim runner was deleted");
    assert_eq!(fake.deleted_runners(), [id]);
}
