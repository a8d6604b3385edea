//! Re-running the job of a runner the cluster killed, against the testkit's fake Gitea: the
//! version gate (1.26), the "run not done" refusal, the same job id queued again, and what a
//! missing job or right means.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

mod common;

use std::sync::Arc;
use std::time::Duration;

use forgerunner_core::crd::{GiteaScope, GiteaSpec};
use forgerunner_core::forge::{Forge, ForgeError, GroupContext, ReconcileTrigger, RerunOutcome};
use forgerunner_core::job_identity::JobIdentity;
use forgerunner_core::metrics::Metrics;
use forgerunner_gitea::{ClientOptions, GiteaForge, GiteaOptions};
use forgerunner_testkit::gitea::{ADMIN_TOKEN, FakeConfig, FakeScope, Fault, GiteaFakeHandle, JobState};

async fn fake(version: &str) -> GiteaFakeHandle {
    GiteaFakeHandle::start(FakeConfig {
        version: version.to_string(),
        ..FakeConfig::default()
    })
    .await
    .unwrap()
}

fn forge() -> GiteaForge {
    let (trigger, _rx) = ReconcileTrigger::channel();
    let opts = GiteaOptions {
        client: ClientOptions {
            request_timeout: Duration::from_millis(800),
            backoff: Duration::from_millis(10),
            ..ClientOptions::default()
        },
        ..GiteaOptions::default()
    };
    GiteaForge::with_options(Arc::new(Metrics::default()), trigger, opts)
}

/// A group at organization `acme` of `fake`, its Secret holding `token`.
fn group(fake: &GiteaFakeHandle, token: &str) -> GroupContext {
    let gitea = GiteaSpec {
        url: fake.url(),
        scope: GiteaScope::Org,
        org: Some("acme".into()),
        user: None,
        repo: None,
        credentials: "creds".into(),
        labels: vec!["linux".into()],
        poll_interval_seconds: Some(30),
        webhook_secret: None,
        ca_bundle_config_map: None,
        proxy_url: None,
    };
    common::group_context("g", gitea, token)
}

/// A fake Gitea with job `killed` of `acme/app` running on runner `g-killed`, and a sibling in
/// the same run running on another runner; the group (admin token) and its forge, and the
/// identity the forge reports for `g-killed`.
struct RunOfTwo {
    fake: GiteaFakeHandle,
    forge: GiteaForge,
    ctx: GroupContext,
    killed: i64,
    sibling: i64,
    identity: JobIdentity,
}

impl RunOfTwo {
    /// The run at Gitea `version`, both jobs running.
    async fn start(version: &str) -> RunOfTwo {
        let fake = fake(version).await;
        let forge = forge();
        let ctx = group(&fake, ADMIN_TOKEN);
        fake.add_org("acme", &["alice"]);
        let scope = FakeScope::Owner("acme".into());
        let killed_runner = fake.add_runner(scope.clone(), "g-killed", &["linux"], true);
        let sibling_runner = fake.add_runner(scope, "g-sibling", &["linux"], true);
        let killed = fake.queue_job("acme/app", &["linux"]);
        let sibling = fake.queue_job_in_run_of(killed, &["linux"]).unwrap();
        assert_eq!(fake.take_job(killed_runner), Some(killed));
        assert_eq!(fake.take_job(sibling_runner), Some(sibling));
        let view = forge
            .open(&ctx.key)
            .snapshot(&ctx, &[common::running("g-killed")])
            .await
            .unwrap();
        let identity = view.job_identities["g-killed"].clone();
        RunOfTwo {
            fake,
            forge,
            ctx,
            killed,
            sibling,
            identity,
        }
    }

    /// The run at Gitea 1.26 once it is done: Gitea failed the killed job's task as a zombie,
    /// the sibling completed.
    async fn done() -> RunOfTwo {
        let run = RunOfTwo::start("1.26.0").await;
        run.fake.stop_zombie_task(run.killed);
        run.fake.complete_job(run.sibling);
        run
    }

    /// The identity the forge reports for `g-killed`, with `change` made to it.
    fn identity_but(&self, change: impl FnOnce(&mut JobIdentity)) -> JobIdentity {
        let mut identity = self.identity.clone();
        change(&mut identity);
        identity
    }

    /// Makes Gitea answer `status` to every re-run.
    fn fail_reruns_with(&self, status: u16) {
        self.fake.inject_fault(Fault {
            path_contains: "/rerun".into(),
            status: Some(status),
            ..Fault::default()
        });
    }

    /// Asks the forge to re-run the job of `g-killed` that `identity` names.
    async fn rerun(&self, identity: &JobIdentity) -> Result<RerunOutcome, ForgeError> {
        self.forge
            .open(&self.ctx.key)
            .rerun_job(&self.ctx, "g-killed", identity)
            .await
    }
}

fn rerun_posts(fake: &GiteaFakeHandle) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/rerun"))
        .count()
}

#[tokio::test]
async fn the_identity_the_forge_reports_names_what_the_rerun_route_needs() {
    let run = RunOfTwo::start("1.26.0").await;
    let run_id = run.fake.job(run.killed).unwrap().run_id;
    assert_eq!(run.identity.repository.as_deref(), Some("acme/app"));
    assert_eq!(run.identity.run_id, Some(run_id.to_string()));
    assert_eq!(run.identity.job_id, Some(run.killed.to_string()));
}

#[tokio::test]
async fn gitea_1_25_has_no_rerun_api_and_is_not_asked() {
    let run = RunOfTwo::start("1.25.2").await;
    run.fake.stop_zombie_task(run.killed);
    let outcome = run.rerun(&run.identity).await.unwrap();
    assert_eq!(outcome, RerunOutcome::Unsupported);
    assert_eq!(rerun_posts(&run.fake), 0, "no re-run request below 1.26");
    assert!(run.fake.reruns().is_empty());
    assert!(
        run.fake.requests().iter().all(|r| r.method == "GET"),
        "nothing but reads"
    );
}

#[tokio::test]
async fn a_run_still_going_is_asked_again_later_and_then_the_same_job_is_queued_again() {
    let run = RunOfTwo::start("1.26.0").await;
    // Gitea fails the vanished runner's task after ZOMBIE_TASK_TIMEOUT; the sibling still runs.
    assert!(run.fake.stop_zombie_task(run.killed));

    let outcome = run.rerun(&run.identity).await.unwrap();
    assert_eq!(
        outcome,
        RerunOutcome::NotYet {
            retry_after: Duration::from_secs(60)
        }
    );
    // The run is read first (`GetWorkflowRun`'s `status`): no re-run is asked for while it
    // goes on, so a 400 after it is done is a refusal, never a wait.
    assert_eq!(run.fake.reruns(), [], "not asked while the run goes on");

    assert!(run.fake.complete_job(run.sibling));
    let outcome = run.rerun(&run.identity).await.unwrap();
    assert_eq!(outcome, RerunOutcome::Requested);
    assert_eq!(run.fake.reruns().last().map(|r| r.status), Some(201));
    let again = run.fake.job(run.killed).unwrap();
    assert_eq!(again.id, run.killed, "Gitea 1.26 queues the same job row again");
    assert_eq!(again.state, JobState::Waiting);
    assert_eq!(again.runner_id, None, "its task is cleared");
    assert_eq!(
        run.fake.job(run.sibling).unwrap().state,
        JobState::Done(forgerunner_testkit::gitea::Conclusion::Success),
        "only the killed job is re-run"
    );
}

#[tokio::test]
async fn a_job_gitea_does_not_know_is_gone() {
    let run = RunOfTwo::done().await;
    let unknown_job = run.identity_but(|i| i.job_id = Some("999999".into()));
    let unknown_run = run.identity_but(|i| i.run_id = Some("999999".into()));
    let unknown_repo = run.identity_but(|i| i.repository = Some("acme/gone".into()));
    for id in [&unknown_job, &unknown_run, &unknown_repo] {
        let outcome = run.rerun(id).await.unwrap();
        assert_eq!(outcome, RerunOutcome::Gone, "{id:?}");
    }
    // An unknown run or repository is known gone from reading the run; an unknown job of a
    // known run only from the re-run's 404.
    assert_eq!(rerun_posts(&run.fake), 1);
    assert_eq!(
        run.fake.job(run.killed).unwrap().state,
        JobState::Done(forgerunner_testkit::gitea::Conclusion::Failure)
    );
}

#[tokio::test]
async fn an_identity_without_what_the_route_needs_is_not_sent() {
    let run = RunOfTwo::start("1.26.0").await;
    let cases = [
        run.identity_but(|i| i.job_id = None),
        run.identity_but(|i| i.run_id = Some("not-a-number".into())),
        run.identity_but(|i| i.repository = Some("app".into())),
        run.identity_but(|i| i.repository = Some("acme/../admin".into())),
        // Not a repository of the group's scope (organization acme).
        run.identity_but(|i| i.repository = Some("other/app".into())),
        JobIdentity::default(),
    ];
    for id in &cases {
        let outcome = run.rerun(id).await.unwrap();
        assert_eq!(outcome, RerunOutcome::Gone, "{id:?}");
    }
    assert_eq!(rerun_posts(&run.fake), 0);
}

#[tokio::test]
async fn a_token_without_write_access_is_told_which_right_it_needs() {
    let run = RunOfTwo::done().await;
    let reader = group(&run.fake, &run.fake.add_token("bob", false));
    let err = run
        .forge
        .open(&reader.key)
        .rerun_job(&reader, "g-killed", &run.identity)
        .await
        .unwrap_err();
    match err {
        ForgeError::Unauthorized(m) => {
            assert!(m.contains("write"), "{m}");
            assert!(m.contains("Actions"), "{m}");
            assert!(m.contains("write:repository"), "{m}");
            assert!(!m.contains("tok-"), "never the token: {m}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(run.fake.reruns().last().map(|r| r.status), Some(403));
    assert_eq!(
        run.fake.job(run.killed).unwrap().state,
        JobState::Done(forgerunner_testkit::gitea::Conclusion::Failure)
    );
}

#[tokio::test]
async fn a_rerun_is_sent_once_even_when_the_server_fails() {
    let run = RunOfTwo::done().await;
    run.fail_reruns_with(502);
    let err = run.rerun(&run.identity).await.unwrap_err();
    assert!(matches!(err, ForgeError::Unavailable(_)), "{err:?}");
    // A retry after a lost answer could queue the job twice.
    assert_eq!(rerun_posts(&run.fake), 1);
}

/// Gitea answers 400 to a re-run of a done run too (`handleWorkflowRerunError` in
/// `routers/api/v1/repo/action.go`: a disabled workflow in 1.26, the attempt limit in 1.27):
/// that is a refusal to report, not a run to wait for.
#[tokio::test]
async fn a_refusal_of_a_done_run_is_reported_not_waited_for() {
    let run = RunOfTwo::done().await;
    run.fail_reruns_with(400);
    let err = run.rerun(&run.identity).await.unwrap_err();
    assert!(
        matches!(&err, ForgeError::Config(m) if m.contains("disabled")),
        "{err:?}"
    );
    assert_eq!(rerun_posts(&run.fake), 1);
}
