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

/// Job `killed` of `acme/app` running on runner `g-killed`, with a sibling in the same run
/// running on another runner; the identity the forge reports for `g-killed`.
async fn run_of_two(
    fake: &GiteaFakeHandle,
    forge: &GiteaForge,
    ctx: &GroupContext,
) -> (i64, i64, JobIdentity) {
    fake.add_org("acme", &["alice"]);
    let scope = FakeScope::Owner("acme".into());
    let killed_runner = fake.add_runner(scope.clone(), "g-killed", &["linux"], true);
    let sibling_runner = fake.add_runner(scope, "g-sibling", &["linux"], true);
    let killed = fake.queue_job("acme/app", &["linux"]);
    let sibling = fake.queue_job_in_run_of(killed, &["linux"]).unwrap();
    assert_eq!(fake.take_job(killed_runner), Some(killed));
    assert_eq!(fake.take_job(sibling_runner), Some(sibling));
    let view = forge.observe(ctx, &[common::running("g-killed")]).await.unwrap();
    let identity = view.job_identities["g-killed"].clone();
    (killed, sibling, identity)
}

fn rerun_posts(fake: &GiteaFakeHandle) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/rerun"))
        .count()
}

#[tokio::test]
async fn the_identity_the_forge_reports_names_what_the_rerun_route_needs() {
    let fake = fake("1.26.0").await;
    let forge = forge();
    let ctx = group(&fake, ADMIN_TOKEN);
    let (killed, _, identity) = run_of_two(&fake, &forge, &ctx).await;
    let run = fake.job(killed).unwrap().run_id;
    assert_eq!(identity.repository.as_deref(), Some("acme/app"));
    assert_eq!(identity.run_id, Some(run.to_string()));
    assert_eq!(identity.job_id, Some(killed.to_string()));
}

#[tokio::test]
async fn gitea_1_25_has_no_rerun_api_and_is_not_asked() {
    let fake = fake("1.25.2").await;
    let forge = forge();
    let ctx = group(&fake, ADMIN_TOKEN);
    let (killed, _, identity) = run_of_two(&fake, &forge, &ctx).await;
    fake.stop_zombie_task(killed);
    let outcome = forge.rerun_job(&ctx, "g-killed", &identity).await.unwrap();
    assert_eq!(outcome, RerunOutcome::Unsupported);
    assert_eq!(rerun_posts(&fake), 0, "no re-run request below 1.26");
    assert!(fake.reruns().is_empty());
    assert!(
        fake.requests().iter().all(|r| r.method == "GET"),
        "nothing but reads"
    );
}

#[tokio::test]
async fn a_run_still_going_is_asked_again_later_and_then_the_same_job_is_queued_again() {
    let fake = fake("1.26.0").await;
    let forge = forge();
    let ctx = group(&fake, ADMIN_TOKEN);
    let (killed, sibling, identity) = run_of_two(&fake, &forge, &ctx).await;
    // Gitea fails the vanished runner's task after ZOMBIE_TASK_TIMEOUT; the sibling still runs.
    assert!(fake.stop_zombie_task(killed));

    let outcome = forge.rerun_job(&ctx, "g-killed", &identity).await.unwrap();
    assert_eq!(
        outcome,
        RerunOutcome::NotYet {
            retry_after: Duration::from_secs(60)
        }
    );
    // The run is read first (`GetWorkflowRun`'s `status`): no re-run is asked for while it
    // goes on, so a 400 after it is done is a refusal, never a wait.
    assert_eq!(fake.reruns(), [], "not asked while the run goes on");

    assert!(fake.complete_job(sibling));
    let outcome = forge.rerun_job(&ctx, "g-killed", &identity).await.unwrap();
    assert_eq!(outcome, RerunOutcome::Requested);
    assert_eq!(fake.reruns().last().map(|r| r.status), Some(201));
    let again = fake.job(killed).unwrap();
    assert_eq!(again.id, killed, "Gitea 1.26 queues the same job row again");
    assert_eq!(again.state, JobState::Waiting);
    assert_eq!(again.runner_id, None, "its task is cleared");
    assert_eq!(
        fake.job(sibling).unwrap().state,
        JobState::Done(forgerunner_testkit::gitea::Conclusion::Success),
        "only the killed job is re-run"
    );
}

#[tokio::test]
async fn a_job_gitea_does_not_know_is_gone() {
    let fake = fake("1.26.0").await;
    let forge = forge();
    let ctx = group(&fake, ADMIN_TOKEN);
    let (killed, sibling, identity) = run_of_two(&fake, &forge, &ctx).await;
    fake.stop_zombie_task(killed);
    fake.complete_job(sibling);
    let unknown_job = JobIdentity {
        job_id: Some("999999".into()),
        ..identity.clone()
    };
    let unknown_run = JobIdentity {
        run_id: Some("999999".into()),
        ..identity.clone()
    };
    let unknown_repo = JobIdentity {
        repository: Some("acme/gone".into()),
        ..identity.clone()
    };
    for id in [&unknown_job, &unknown_run, &unknown_repo] {
        let outcome = forge.rerun_job(&ctx, "g-killed", id).await.unwrap();
        assert_eq!(outcome, RerunOutcome::Gone, "{id:?}");
    }
    // An unknown run or repository is known gone from reading the run; an unknown job of a
    // known run only from the re-run's 404.
    assert_eq!(rerun_posts(&fake), 1);
    assert_eq!(
        fake.job(killed).unwrap().state,
        JobState::Done(forgerunner_testkit::gitea::Conclusion::Failure)
    );
}

#[tokio::test]
async fn an_identity_without_what_the_route_needs_is_not_sent() {
    let fake = fake("1.26.0").await;
    let forge = forge();
    let ctx = group(&fake, ADMIN_TOKEN);
    let (_, _, identity) = run_of_two(&fake, &forge, &ctx).await;
    let cases = [
        JobIdentity {
            job_id: None,
            ..identity.clone()
        },
        JobIdentity {
            run_id: Some("not-a-number".into()),
            ..identity.clone()
        },
        JobIdentity {
            repository: Some("app".into()),
            ..identity.clone()
        },
        JobIdentity {
            repository: Some("acme/../admin".into()),
            ..identity.clone()
        },
        // Not a repository of the group's scope (organization acme).
        JobIdentity {
            repository: Some("other/app".into()),
            ..identity.clone()
        },
        JobIdentity::default(),
    ];
    for id in &cases {
        let outcome = forge.rerun_job(&ctx, "g-killed", id).await.unwrap();
        assert_eq!(outcome, RerunOutcome::Gone, "{id:?}");
    }
    assert_eq!(rerun_posts(&fake), 0);
}

#[tokio::test]
async fn a_token_without_write_access_is_told_which_right_it_needs() {
    let fake = fake("1.26.0").await;
    let forge = forge();
    let ctx = group(&fake, ADMIN_TOKEN);
    let (killed, sibling, identity) = run_of_two(&fake, &forge, &ctx).await;
    fake.stop_zombie_task(killed);
    fake.complete_job(sibling);
    let reader = group(&fake, &fake.add_token("bob", false));
    let err = forge.rerun_job(&reader, "g-killed", &identity).await.unwrap_err();
    match err {
        ForgeError::Unauthorized(m) => {
            assert!(m.contains("write"), "{m}");
            assert!(m.contains("Actions"), "{m}");
            assert!(m.contains("write:repository"), "{m}");
            assert!(!m.contains("tok-"), "never the token: {m}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fake.reruns().last().map(|r| r.status), Some(403));
    assert_eq!(
        fake.job(killed).unwrap().state,
        JobState::Done(forgerunner_testkit::gitea::Conclusion::Failure)
    );
}

#[tokio::test]
async fn a_rerun_is_sent_once_even_when_the_server_fails() {
    let fake = fake("1.26.0").await;
    let forge = forge();
    let ctx = group(&fake, ADMIN_TOKEN);
    let (killed, sibling, identity) = run_of_two(&fake, &forge, &ctx).await;
    fake.stop_zombie_task(killed);
    fake.complete_job(sibling);
    fake.inject_fault(Fault {
        path_contains: "/rerun".into(),
        status: Some(502),
        ..Fault::default()
    });
    let err = forge.rerun_job(&ctx, "g-killed", &identity).await.unwrap_err();
    assert!(matches!(err, ForgeError::Unavailable(_)), "{err:?}");
    // A retry after a lost answer could queue the job twice.
    assert_eq!(rerun_posts(&fake), 1);
}

/// Gitea answers 400 to a re-run of a done run too (`handleWorkflowRerunError` in
/// `routers/api/v1/repo/action.go`: a disabled workflow in 1.26, the attempt limit in 1.27):
/// that is a refusal to report, not a run to wait for.
#[tokio::test]
async fn a_refusal_of_a_done_run_is_reported_not_waited_for() {
    let fake = fake("1.26.0").await;
    let forge = forge();
    let ctx = group(&fake, ADMIN_TOKEN);
    let (killed, sibling, identity) = run_of_two(&fake, &forge, &ctx).await;
    fake.stop_zombie_task(killed);
    fake.complete_job(sibling);
    fake.inject_fault(Fault {
        path_contains: "/rerun".into(),
        status: Some(400),
        ..Fault::default()
    });
    let err = forge.rerun_job(&ctx, "g-killed", &identity).await.unwrap_err();
    assert!(
        matches!(&err, ForgeError::Config(m) if m.contains("disabled")),
        "{err:?}"
    );
    assert_eq!(rerun_posts(&fake), 1);
}
