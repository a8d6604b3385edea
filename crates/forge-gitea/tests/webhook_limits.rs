//! What one webhook delivery may cost and do: an unauthenticated delivery costs a bounded
//! number of signature checks however many groups (and webhook Secrets) the backend serves,
//! and a delivery the forge sends twice (same delivery id) wakes its groups once.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

mod common;

use common::webhook::{checks, forge, headers, woken};

use forgerunner_core::crd::{GiteaScope, GiteaSpec};
use forgerunner_core::forge::{GroupContext, SecretValue};
use forgerunner_gitea::{MAX_SECRETS_PER_DELIVERY, sign};
use forgerunner_testkit::gitea::{ADMIN_TOKEN, FakeConfig, GiteaFakeHandle};
use http::StatusCode;

const REPO: &str = "acme/app";

async fn fake() -> GiteaFakeHandle {
    GiteaFakeHandle::start(FakeConfig {
        version: "1.26.0".into(),
        ..FakeConfig::default()
    })
    .await
    .unwrap()
}

/// A group `name` at `scope` (`org`/`repo` filled from [`REPO`] as the scope needs) whose
/// webhook Secret holds `secret`.
fn ctx(name: &str, url: &str, scope: GiteaScope, org: &str, secret: &str) -> GroupContext {
    let gitea = GiteaSpec {
        url: url.to_string(),
        scope,
        org: matches!(scope, GiteaScope::Org).then(|| org.to_string()),
        user: None,
        repo: matches!(scope, GiteaScope::Repo).then(|| REPO.to_string()),
        credentials: "creds".into(),
        labels: vec!["linux".into()],
        poll_interval_seconds: Some(300),
        webhook_secret: Some("hook".into()),
        ca_bundle_config_map: None,
        proxy_url: None,
    };
    let mut c = common::group_context(name, gitea, ADMIN_TOKEN);
    c.webhook_secret = Some(SecretValue::new(secret));
    c
}

#[tokio::test]
async fn forged_deliveries_cost_a_bounded_number_of_signature_checks() {
    let fake = fake().await;
    let (f, metrics, mut rx) = forge();
    // Many groups, each with its own webhook Secret: some can see the repository (global),
    // many cannot (another organization), and one is scoped to exactly this repository.
    let mut groups = Vec::new();
    for n in 0..40 {
        groups.push(ctx(
            &format!("global-{n}"),
            &fake.url(),
            GiteaScope::Global,
            "",
            &format!("g-{n}"),
        ));
    }
    for n in 0..200 {
        groups.push(ctx(
            &format!("other-{n}"),
            &fake.url(),
            GiteaScope::Org,
            "other",
            &format!("o-{n}"),
        ));
    }
    groups.push(ctx("exact", &fake.url(), GiteaScope::Repo, "", "exact-secret"));
    for g in &groups {
        // Remembered before any request: errors (an unknown org) do not matter here.
        let _ = common::view(&f, g).await;
    }
    let _ = woken(&mut rx);

    let id = fake.queue_job(REPO, &["linux"]);
    let body = fake.workflow_job_payload(&fake.job(id).expect("job"));
    let before = checks(&metrics);
    let forged = 100u64;
    for n in 0..forged {
        let reply = f.receive_webhook(&headers(&"ab".repeat(32), &format!("forged-{n}")), &body);
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{}", reply.body);
    }
    let spent = checks(&metrics) - before;
    let bound = forged * MAX_SECRETS_PER_DELIVERY as u64;
    assert!(
        spent <= bound,
        "{spent} signature checks for {forged} forged deliveries (bound {bound})"
    );
    assert!(spent > 0, "the checks are counted");
    assert!(woken(&mut rx).is_empty(), "a forged delivery wakes nobody");

    // The most specific group's secret is always among those tried.
    let genuine = sign(b"exact-secret", &body);
    let reply = f.receive_webhook(&headers(&genuine, "genuine-1"), &body);
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.body);
    assert_eq!(woken(&mut rx), ["exact"]);
}

#[tokio::test]
async fn a_delivery_sent_twice_wakes_its_groups_once() {
    let fake = fake().await;
    let (f, _metrics, mut rx) = forge();
    let g = ctx("g", &fake.url(), GiteaScope::Global, "", "s3cret");
    common::view(&f, &g).await.expect("observe");
    let id = fake.queue_job(REPO, &["linux"]);
    let body = fake.workflow_job_payload(&fake.job(id).expect("job"));
    let sig = sign(b"s3cret", &body);

    let first = f.receive_webhook(&headers(&sig, "d-1"), &body);
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.body);
    assert_eq!(woken(&mut rx), ["g"]);
    let again = f.receive_webhook(&headers(&sig, "d-1"), &body);
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
    assert!(woken(&mut rx).is_empty(), "the duplicate triggers nothing");
    assert_eq!(
        common::view(&f, &g).await.expect("observe").waiting_jobs,
        1,
        "the job is announced once"
    );

    // A forged request reusing a seen id is still refused, and a new id with a new body (another
    // job) is a new delivery.
    let forged = f.receive_webhook(&headers(&"00".repeat(32), "d-1"), &body);
    assert_eq!(forged.status, StatusCode::UNAUTHORIZED);
    let id = fake.queue_job(REPO, &["linux"]);
    let body = fake.workflow_job_payload(&fake.job(id).expect("job"));
    let other = f.receive_webhook(&headers(&sign(b"s3cret", &body), "d-2"), &body);
    assert_eq!(other.status, StatusCode::ACCEPTED, "{}", other.body);
    assert_eq!(woken(&mut rx), ["g"]);
}

/// The delivery id is a header the signature does not cover: anyone who captured one signed body
/// could send it again under fresh ids (the server is plain HTTP). The body itself is covered, so
/// a body already accepted counts once whatever id it comes with, or without one.
#[tokio::test]
async fn a_replayed_body_under_a_fresh_delivery_id_wakes_nobody() {
    let fake = fake().await;
    let (f, _metrics, mut rx) = forge();
    let g = ctx("g", &fake.url(), GiteaScope::Global, "", "s3cret");
    common::view(&f, &g).await.expect("observe");
    let id = fake.queue_job(REPO, &["linux"]);
    let body = fake.workflow_job_payload(&fake.job(id).expect("job"));
    let sig = sign(b"s3cret", &body);

    let first = f.receive_webhook(&headers(&sig, "d-1"), &body);
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.body);
    assert_eq!(woken(&mut rx), ["g"]);
    for (n, replay) in ["d-2", "d-3"].into_iter().enumerate() {
        let again = f.receive_webhook(&headers(&sig, replay), &body);
        assert_eq!(again.status, StatusCode::OK, "replay {n}: {}", again.body);
    }
    let mut no_id = headers(&sig, "x");
    no_id.remove("x-gitea-delivery");
    let again = f.receive_webhook(&no_id, &body);
    assert_eq!(again.status, StatusCode::OK, "without an id: {}", again.body);
    assert!(woken(&mut rx).is_empty(), "a replay triggers nothing");
    assert_eq!(
        common::view(&f, &g).await.expect("observe").waiting_jobs,
        1,
        "the job is announced once"
    );

    // The job's next state is a new body: accepted.
    let runner = fake.add_runner(
        forgerunner_testkit::gitea::FakeScope::Global,
        "g-abc12",
        &["linux"],
        true,
    );
    assert_eq!(fake.take_job(runner), Some(id));
    let taken = fake.workflow_job_payload(&fake.job(id).expect("job"));
    let next = f.receive_webhook(&headers(&sign(b"s3cret", &taken), "d-4"), &taken);
    assert_eq!(next.status, StatusCode::ACCEPTED, "{}", next.body);
}
