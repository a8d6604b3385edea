//! The runner release GitHub serves, over the wire: `observe` reads it from the runner downloads
//! of the config URL's scope (the testkit's fake, in front of the scaleset emulator), asks at
//! most once per scope per six hours and ten minutes after a failure, and a failing or garbage
//! answer leaves it unknown without failing the pass. The pass never waits for the answer: it
//! is asked for in the background and shows in a later view.

mod common;

use common::{OpenSession, context, demand, emulator, group, harness, pat_credentials};
use forgerunner_core::forge::GroupContext;
use forgerunner_core::runner_version::RunnerRelease;
use forgerunner_github::DEFAULT_RUNNER_IMAGE;
use forgerunner_testkit::forge_common::Fault;
use forgerunner_testkit::github::runner_downloads::{DOWNLOADS_PATH, RunnerDownloadsFake};
use scaleset::testing::{DEFAULT_PAT, Emulator};

/// The emulator, the fake in front of it, and a group whose config URL is on the fake, with
/// `image` as its `spec.image`.
async fn setup(image: Option<&str>) -> (Emulator, RunnerDownloadsFake, GroupContext) {
    let emu = emulator().await;
    let fake = RunnerDownloadsFake::in_front_of(&emu.uri(), DEFAULT_PAT)
        .await
        .expect("fake starts");
    let mut g = group("g", &fake.config_url(), serde_json::json!({}), 5);
    g.spec.image = image.map(str::to_owned);
    (emu, fake, context(g, pat_credentials(DEFAULT_PAT)))
}

/// Observes until the view's served release is `want` (the lookup runs in the background), or
/// panics after a deadline.
async fn served_becomes(
    forge: &forgerunner_github::GithubForge,
    ctx: &GroupContext,
    want: Option<RunnerRelease>,
) -> forgerunner_core::forge::ForgeView {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let view = demand(forge, ctx).await;
        if view.versions.served == want {
            return view;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "served stayed {:?}, not {want:?}",
            view.versions.served
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Waits until the fake has received `n` downloads requests and the answer is recorded (one
/// more view shows it), or panics after a deadline.
async fn asked(fake: &RunnerDownloadsFake, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while fake.downloads_requests() < n {
        assert!(std::time::Instant::now() < deadline, "never asked");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_first_view_does_not_wait_for_the_served_release() {
    let (_emu, fake, ctx) = setup(None).await;
    fake.push_fault(Fault {
        path_contains: DOWNLOADS_PATH.into(),
        latency: std::time::Duration::from_secs(5),
        ..Fault::default()
    });
    let h = harness();
    let started = std::time::Instant::now();
    let view = demand(&h.forge, &ctx).await;
    assert_eq!(view.versions.served, None, "not known yet");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "the pass did not wait for the slow listing"
    );
    served_becomes(&h.forge, &ctx, Some(RunnerRelease(2, 331, 0))).await;
}

#[tokio::test]
async fn observe_reports_the_served_release_and_asks_once_per_ttl() {
    let (_emu, fake, ctx) = setup(None).await;
    let h = harness();
    let view = served_becomes(&h.forge, &ctx, Some(RunnerRelease(2, 331, 0))).await;
    assert_eq!(
        view.versions.image,
        Some((DEFAULT_RUNNER_IMAGE.to_owned(), None)),
        "the default image is on latest: no release to compare"
    );
    assert!(
        view.versions.reported.is_empty(),
        "GitHub lists no runner versions"
    );
    assert_eq!(fake.downloads_requests(), 1);
    let paths: Vec<String> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with(DOWNLOADS_PATH))
        .map(|r| r.path)
        .collect();
    assert_eq!(paths, ["/api/v3/orgs/org/actions/runners/downloads"]);

    fake.set_served("2.332.0");
    let again = h.forge.session(&ctx).snapshot(&ctx, &[]).await.expect("observe");
    assert_eq!(
        again.versions.served,
        Some(RunnerRelease(2, 331, 0)),
        "the answer is kept for the TTL"
    );
    assert_eq!(fake.downloads_requests(), 1, "no second call within the TTL");

    // Releasing the scope's last group forgets what it was told.
    h.forge.session(&ctx).close().await;
    served_becomes(&h.forge, &ctx, Some(RunnerRelease(2, 332, 0))).await;
    assert_eq!(fake.downloads_requests(), 2);

    // A new client on the same scope keeps its answer: GitHub serves one release to every
    // token that may read the listing.
    fake.set_served("2.333.0");
    let mut rotated = ctx.clone();
    rotated.credentials.version = "2".into();
    let view = demand(&h.forge, &rotated).await;
    assert_eq!(view.versions.served, Some(RunnerRelease(2, 332, 0)));
    assert_eq!(fake.downloads_requests(), 2);
}

#[tokio::test]
async fn groups_of_one_scope_share_one_downloads_lookup() {
    let (_emu, fake, ctx) = setup(None).await;
    let other = context(
        group("h", &fake.config_url(), serde_json::json!({}), 5),
        pat_credentials(DEFAULT_PAT),
    );
    let h = harness();
    served_becomes(&h.forge, &ctx, Some(RunnerRelease(2, 331, 0))).await;
    served_becomes(&h.forge, &other, Some(RunnerRelease(2, 331, 0))).await;
    assert_eq!(
        fake.downloads_requests(),
        1,
        "the organization's answer serves both groups"
    );
}

#[tokio::test]
async fn the_groups_image_and_its_release_are_reported() {
    let (_emu, _fake, ctx) = setup(Some("ghcr.io/actions/actions-runner:2.329.0")).await;
    let h = harness();
    let view = demand(&h.forge, &ctx).await;
    assert_eq!(
        view.versions.image,
        Some((
            "ghcr.io/actions/actions-runner:2.329.0".to_owned(),
            Some(RunnerRelease(2, 329, 0))
        ))
    );
}

#[tokio::test]
async fn a_failing_answer_leaves_the_release_unknown_and_is_not_asked_again_soon() {
    let (_emu, fake, ctx) = setup(None).await;
    // A 404 (a token that may not list runner downloads), which the client does not retry:
    // one request, and the lookup ends with it.
    fake.fail_with(Some(404));
    let h = harness();
    let view = demand(&h.forge, &ctx).await;
    assert_eq!(view.versions.served, None);
    assert!(view.facts.scale_set_id.is_some(), "the rest of the pass went on");
    asked(&fake, 1).await;
    let asked = fake.downloads_requests();
    fake.fail_with(None);
    let again = h.forge.session(&ctx).snapshot(&ctx, &[]).await.expect("observe");
    assert_eq!(again.versions.served, None, "not asked again within ten minutes");
    assert_eq!(fake.downloads_requests(), asked);
}

#[tokio::test]
async fn a_garbage_answer_leaves_the_release_unknown() {
    let (_emu, fake, ctx) = setup(None).await;
    fake.push_fault(Fault::garbage(DOWNLOADS_PATH));
    let h = harness();
    let view = demand(&h.forge, &ctx).await;
    assert_eq!(view.versions.served, None);
    asked(&fake, 1).await;
    let again = demand(&h.forge, &ctx).await;
    assert_eq!(again.versions.served, None);
    assert_eq!(fake.downloads_requests(), 1);
}
