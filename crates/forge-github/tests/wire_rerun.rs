//! Re-running the job of a runner the cluster killed, over the wire against the testkit's fake of
//! GitHub's REST jobs endpoints: the job is found by its runner's name across listing pages,
//! re-run by its REST id, and GitHub's refusals become outcomes or a permission error.

mod common;

use common::{OpenSession, PKCS1, context, credentials, group, harness, pat_credentials};
use forgerunner_core::ForgeError;
use forgerunner_core::forge::{GroupContext, RerunOutcome};
use forgerunner_core::job_identity::JobIdentity;
use forgerunner_github::rerun::NOT_CONCLUDED_RETRY;
use forgerunner_testkit::github::rest_jobs::{FakeRestJob, RestJobsFake};

const PAT: &str = "ghp_rerun_test";
const RUN: u64 = 30_225_287_326;

fn job(id: u64, name: &str, runner: Option<&str>) -> FakeRestJob {
    FakeRestJob {
        id,
        name: name.into(),
        runner_name: runner.map(Into::into),
        status: "in_progress".into(),
    }
}

/// A run of 250 jobs (three pages of 100) whose job 9_000_241 ran on `g-lost`; the others ran
/// on other runners under the same matrix name.
async fn fake_with_big_run() -> RestJobsFake {
    let fake = RestJobsFake::start(PAT).await.expect("fake starts");
    let jobs = (0..250u64)
        .map(|i| {
            let runner = if i == 241 {
                "g-lost".to_owned()
            } else {
                format!("g-{i}")
            };
            job(9_000_000 + i, "test (linux)", Some(&runner))
        })
        .collect();
    fake.add_run("octo/hello", RUN, jobs);
    fake
}

fn identity() -> JobIdentity {
    JobIdentity {
        repository: Some("octo/hello".into()),
        workflow: Some("octo/hello/.github/workflows/ci.yml@refs/heads/main".into()),
        run_id: Some(RUN.to_string()),
        job_name: Some("test (linux)".into()),
        // The orchestration GUID of the messages, which is no REST id.
        job_id: Some("bd59f43d-2e1a-567a-b5a4-c147b94d0766".into()),
    }
}

fn pat_ctx(fake: &RestJobsFake) -> GroupContext {
    context(
        group("g", &format!("{}/octo", fake.url()), serde_json::json!({}), 5),
        pat_credentials(PAT),
    )
}

#[tokio::test]
async fn finds_the_runners_job_across_pages_and_reruns_only_it() {
    let fake = fake_with_big_run().await;
    let h = harness();
    let ctx = pat_ctx(&fake);
    let outcome = h
        .forge
        .session(&ctx)
        .rerun_job(&ctx, "g-lost", &identity())
        .await
        .expect("re-run");
    assert_eq!(outcome, RerunOutcome::Requested);
    let reruns = fake.reruns();
    assert_eq!(reruns.len(), 1, "{reruns:?}");
    assert_eq!(reruns[0].repository, "octo/hello");
    assert_eq!(reruns[0].job_id, 9_000_241);
    let listed: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/jobs") && r.method == "GET")
        .collect();
    assert_eq!(listed.len(), 3, "read up to the page holding the job: {listed:?}");
    assert!(
        listed
            .iter()
            .all(|r| r.path == format!("/api/v3/repos/octo/hello/actions/runs/{RUN}/jobs"))
    );
    assert!(listed[2].query.contains("per_page=100") && listed[2].query.contains("page=3"));
    assert!(listed.iter().all(|r| r.authorized));
}

#[tokio::test]
async fn the_app_installation_token_carries_the_rerun() {
    let fake = fake_with_big_run().await;
    let h = harness();
    let ctx = context(
        group("g", &format!("{}/octo", fake.url()), serde_json::json!({}), 5),
        credentials(&[
            ("github_app_id", "12345"),
            ("github_app_installation_id", "4242"),
            ("github_app_private_key", PKCS1),
        ]),
    );
    let outcome = h
        .forge
        .session(&ctx)
        .rerun_job(&ctx, "g-lost", &identity())
        .await
        .expect("re-run");
    assert_eq!(outcome, RerunOutcome::Requested);
    let minted = fake
        .requests()
        .into_iter()
        .filter(|r| r.path == "/api/v3/app/installations/4242/access_tokens")
        .count();
    assert_eq!(minted, 1, "one installation token for the listing and the re-run");
    // The fake takes the PAT or its installation token only, and the group has no PAT.
    assert_eq!(fake.reruns().len(), 1);
}

#[tokio::test]
async fn a_run_still_going_is_not_yet_then_the_rerun_goes_through() {
    let fake = fake_with_big_run().await;
    fake.refuse_while_running(2);
    let h = harness();
    let ctx = pat_ctx(&fake);
    for _ in 0..2 {
        let outcome = h
            .forge
            .session(&ctx)
            .rerun_job(&ctx, "g-lost", &identity())
            .await
            .expect("answered");
        assert_eq!(
            outcome,
            RerunOutcome::NotYet {
                retry_after: NOT_CONCLUDED_RETRY
            }
        );
    }
    assert!(fake.reruns().is_empty());
    let outcome = h
        .forge
        .session(&ctx)
        .rerun_job(&ctx, "g-lost", &identity())
        .await
        .expect("answered");
    assert_eq!(outcome, RerunOutcome::Requested);
    assert_eq!(fake.reruns().len(), 1);
}

#[tokio::test]
async fn an_unknown_run_or_runner_is_gone() {
    let fake = fake_with_big_run().await;
    let h = harness();
    let ctx = pat_ctx(&fake);
    let other_run = JobIdentity {
        run_id: Some("1".into()),
        ..identity()
    };
    assert_eq!(
        h.forge
            .session(&ctx)
            .rerun_job(&ctx, "g-lost", &other_run)
            .await
            .expect("answered"),
        RerunOutcome::Gone
    );
    assert_eq!(
        h.forge
            .session(&ctx)
            .rerun_job(&ctx, "g-never-ran", &identity())
            .await
            .expect("answered"),
        RerunOutcome::Gone,
        "matrix twins share the display name: no guessing"
    );
    assert_eq!(
        h.forge
            .session(&ctx)
            .rerun_job(&ctx, "g-lost", &JobIdentity::default())
            .await
            .expect("answered"),
        RerunOutcome::Gone,
        "nothing known of the job"
    );
    assert!(fake.reruns().is_empty());
}

#[tokio::test]
async fn a_job_gone_between_listing_and_rerun_is_gone() {
    let fake = fake_with_big_run().await;
    fake.push_fault(forgerunner_testkit::forge_common::Fault::status(
        "/actions/jobs/9000241/rerun",
        404,
    ));
    let h = harness();
    let ctx = pat_ctx(&fake);
    let outcome = h
        .forge
        .session(&ctx)
        .rerun_job(&ctx, "g-lost", &identity())
        .await
        .expect("answered");
    assert_eq!(outcome, RerunOutcome::Gone);
}

#[tokio::test]
async fn a_token_without_actions_write_is_told_which_permission_to_grant() {
    let fake = fake_with_big_run().await;
    fake.deny_reruns();
    let h = harness();
    let ctx = pat_ctx(&fake);
    let err = h
        .forge
        .session(&ctx)
        .rerun_job(&ctx, "g-lost", &identity())
        .await
        .expect_err("refused");
    match err {
        ForgeError::Unauthorized(m) => {
            assert!(m.contains("\"Actions\" repository permission (write)"), "{m}");
            assert!(m.contains("repo scope"), "{m}");
            assert!(m.contains("Resource not accessible by integration"), "{m}");
        }
        other => panic!("expected Unauthorized, got {other:?}"),
    }
    assert!(fake.reruns().is_empty());
}
