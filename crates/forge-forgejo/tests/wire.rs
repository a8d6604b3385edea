//! Wire tests: `ForgejoForge` against the testkit's fake Forgejo — scopes, the label filter,
//! the version gate and error mapping.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

mod common;

use forgerunner_core::forge::RunnerRequest;

use std::time::{Duration, Instant};

use common::{ctx, fake, forge, forge_and_wakes, group_context, spec};
use forgerunner_core::ErrorCategory;
use forgerunner_core::crd::{ContainerMode, ContainerModeType, ForgejoScope};
use forgerunner_core::forge::{Forge, ForgeError, GroupContext};
use forgerunner_testkit::forgejo::{ADMIN_TOKEN, Fault, ForgejoFakeHandle};

fn count(fake: &ForgejoFakeHandle, path_part: &str) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.path.contains(path_part))
        .count()
}

#[tokio::test]
async fn every_scope_counts_its_own_waiting_jobs() {
    let fake = fake("15.0.3+gitea-1.22.0").await;
    fake.add_org("acme", &["alice"]);
    let alice = fake.add_token("alice");
    let bob = fake.add_token("bob");
    fake.queue_job("acme/app", "a", &["debian"]);
    fake.queue_job("acme/web", "b", &["debian"]);
    fake.queue_job("bob/tool", "c", &["debian"]);
    fake.queue_job("carol/x", "d", &["debian"]);
    fake.queue_blocked_job("acme/app", "held", &["debian"]);
    let f = forge();
    let url = fake.url();
    let cases = [
        (
            ForgejoScope::Global,
            None,
            ADMIN_TOKEN.to_string(),
            4,
            "/admin/actions/runners/jobs",
        ),
        (
            ForgejoScope::Org,
            Some("acme"),
            alice.clone(),
            2,
            "/orgs/acme/actions/runners/jobs",
        ),
        (
            ForgejoScope::User,
            Some("bob"),
            bob.clone(),
            1,
            "/user/actions/runners/jobs",
        ),
        (
            ForgejoScope::Repo,
            Some("acme/app"),
            alice,
            1,
            "/repos/acme/app/actions/runners/jobs",
        ),
    ];
    for (i, (scope, target, token, want, path)) in cases.into_iter().enumerate() {
        let c = ctx(&format!("g{i}"), &url, scope, target, &["debian:host"], &token);
        let view = f.open(&c.key).snapshot(&c, &[]).await.unwrap();
        assert_eq!(view.waiting_jobs, want, "{scope:?}");
        assert!(!view.complete);
        assert_eq!(view.facts.forge_version.as_deref(), Some("15.0.3+gitea-1.22.0"));
        assert_eq!(count(&fake, path), 1, "{path}");
    }
}

#[tokio::test]
async fn the_label_filter_is_sent_and_the_listing_shared() {
    let fake = fake("15.0.3+gitea-1.22.0").await;
    fake.queue_job("o/r", "a", &["debian"]);
    fake.queue_job("o/r", "b", &["debian", "self-hosted"]);
    fake.queue_job("o/r", "c", &["gpu"]);
    fake.queue_job("o/r", "d", &["debian", "gpu"]);
    let f = forge();
    let labels = ["self-hosted:host", "debian:docker://node:22"];
    // Docker labels need a daemon (forgejo-runner's `configCheck` exits at start without one).
    let dind = |mut c: GroupContext| {
        c.group.spec.container_mode = Some(ContainerMode {
            type_: ContainerModeType::Dind,
            kubernetes_mode_work_volume_claim: None,
        });
        c
    };
    let a = dind(ctx(
        "a",
        &fake.url(),
        ForgejoScope::Global,
        None,
        &labels,
        ADMIN_TOKEN,
    ));
    let b = dind(ctx(
        "b",
        &fake.url(),
        ForgejoScope::Global,
        None,
        &labels,
        ADMIN_TOKEN,
    ));
    assert_eq!(f.open(&a.key).snapshot(&a, &[]).await.unwrap().waiting_jobs, 2);
    assert_eq!(f.open(&b.key).snapshot(&b, &[]).await.unwrap().waiting_jobs, 2);
    let lists: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/runners/jobs"))
        .collect();
    assert_eq!(lists.len(), 1, "two groups, one listing per poll interval");
    assert_eq!(lists[0].query, "labels=debian%2Cself-hosted");
    // `null` (nothing matches) is an empty list.
    let none = ctx(
        "c",
        &fake.url(),
        ForgejoScope::Global,
        None,
        &["windows:host"],
        ADMIN_TOKEN,
    );
    assert_eq!(
        f.open(&none.key).snapshot(&none, &[]).await.unwrap().waiting_jobs,
        0
    );
}

#[tokio::test]
async fn a_listings_groups_are_woken_when_it_expires() {
    let fake = fake("15.0.3+gitea-1.22.0").await;
    let (f, mut wakes) = forge_and_wakes();
    let group = |name: &str| {
        let mut s = spec(&fake.url(), ForgejoScope::Global, None, &["debian:host"]);
        s.poll_interval_seconds = Some(1);
        group_context(name, s, ADMIN_TOKEN)
    };
    let (a, b) = (group("a"), group("b"));
    let mut next_wake = async || {
        tokio::time::timeout(Duration::from_secs(30), wakes.recv())
            .await
            .expect("woken when the listing expires")
            .expect("trigger open")
            .name
    };
    let first = Instant::now();
    f.open(&a.key).snapshot(&a, &[]).await.unwrap();
    assert_eq!(next_wake().await, "a");
    assert!(
        first.elapsed() >= Duration::from_secs(1),
        "not before the interval: {:?}",
        first.elapsed()
    );
    assert_eq!(count(&fake, "/runners/jobs"), 1, "nothing listed meanwhile");
    fake.queue_job("o/r", "x", &["debian"]);
    // b joins: the listing it fetches is a's too, and both are woken when it expires.
    assert_eq!(
        f.open(&b.key).snapshot(&b, &[]).await.unwrap().waiting_jobs,
        1,
        "an expired listing is fetched afresh"
    );
    assert_eq!(f.open(&a.key).snapshot(&a, &[]).await.unwrap().waiting_jobs, 1);
    let mut woken = [next_wake().await, next_wake().await];
    woken.sort();
    assert_eq!(woken, ["a", "b"]);
}

#[tokio::test]
async fn unsupported_versions_are_config_errors_that_say_what_to_do() {
    let old = fake("10.0.1+gitea-1.22.0").await;
    let f = forge();
    let c = ctx(
        "g",
        &old.url(),
        ForgejoScope::Global,
        None,
        &["debian:host"],
        ADMIN_TOKEN,
    );
    let err = f.open(&c.key).snapshot(&c, &[]).await.unwrap_err();
    assert_eq!(err.category(), ErrorCategory::ForgeConfig);
    assert!(
        err.to_string().contains(
            "Forgejo 10.0.1 is not supported: forgerunner needs Forgejo 11 or newer (15+ recommended)"
        ),
        "{err}"
    );
    let err = f
        .open(&c.key)
        .register(&c, &RunnerRequest::unbound("g-abcde", None))
        .await
        .unwrap_err();
    assert_eq!(err.category(), ErrorCategory::ForgeConfig);
}

async fn observe_error(fake: &ForgejoFakeHandle, name: &str, token: &str) -> ForgeError {
    let f = forge();
    let c = ctx(
        name,
        &fake.url(),
        ForgejoScope::Global,
        None,
        &["debian:host"],
        token,
    );
    f.open(&c.key).snapshot(&c, &[]).await.unwrap_err()
}

#[tokio::test]
async fn http_failures_map_to_categories() {
    let fake = fake("15.0.3+gitea-1.22.0").await;
    let url = fake.url();
    // 401: unknown token.
    let e = observe_error(&fake, "a", "nope").await;
    assert_eq!(e.category(), ErrorCategory::Unauthorized, "{e}");
    // 403: not a site admin at the instance scope.
    let bob = fake.add_token("bob");
    let e = observe_error(&fake, "b", &bob).await;
    assert_eq!(e.category(), ErrorCategory::Unauthorized, "{e}");
    assert!(e.to_string().contains("site-admin"), "{e}");
    // 404: an organization that does not exist is named.
    let f = forge();
    let c = ctx(
        "c",
        &url,
        ForgejoScope::Org,
        Some("ghost"),
        &["debian:host"],
        ADMIN_TOKEN,
    );
    let e = f.open(&c.key).snapshot(&c, &[]).await.unwrap_err();
    assert_eq!(e.category(), ErrorCategory::ForgeNotFound, "{e}");
    assert!(e.to_string().contains("organization ghost"), "{e}");
    // 429 with a long Retry-After: returned, not waited out.
    fake.inject_fault(Fault::status("/runners/jobs", 429).retry_after("30").times(1));
    let e = observe_error(&fake, "d", ADMIN_TOKEN).await;
    assert!(
        matches!(
            e,
            ForgeError::RateLimited {
                retry_after_seconds: 30
            }
        ),
        "{e}"
    );
    fake.clear_faults();
    // 5xx: bounded retries, then unavailable.
    fake.clear_requests();
    fake.inject_fault(Fault::status("/runners/jobs", 502));
    let e = observe_error(&fake, "e", ADMIN_TOKEN).await;
    assert_eq!(e.category(), ErrorCategory::ForgeUnavailable, "{e}");
    assert_eq!(count(&fake, "/runners/jobs"), 3, "three attempts");
    fake.clear_faults();
    // A transient 503 is retried away.
    fake.inject_fault(Fault::status("/runners/jobs", 503).times(1));
    let f = forge();
    let c = ctx(
        "f",
        &url,
        ForgejoScope::Global,
        None,
        &["debian:host"],
        ADMIN_TOKEN,
    );
    assert!(f.open(&c.key).snapshot(&c, &[]).await.is_ok());
    fake.clear_faults();
    // Garbage and timeouts: unavailable.
    fake.inject_fault(Fault::garbage("/runners/jobs"));
    let e = observe_error(&fake, "g", ADMIN_TOKEN).await;
    assert_eq!(e.category(), ErrorCategory::ForgeUnavailable, "{e}");
    fake.clear_faults();
    fake.inject_fault(Fault::latency("/runners/jobs", Duration::from_secs(2)));
    let e = observe_error(&fake, "h", ADMIN_TOKEN).await;
    assert_eq!(e.category(), ErrorCategory::ForgeUnavailable, "{e}");
    assert!(e.to_string().contains("timed out"), "{e}");
    fake.clear_faults();
}

#[tokio::test]
async fn a_gitea_server_is_refused() {
    let fake = fake("15.0.3+gitea-1.22.0").await;
    fake.inject_fault(Fault::status("/api/forgejo/v1/version", 404));
    let e = observe_error(&fake, "g", ADMIN_TOKEN).await;
    assert_eq!(e.category(), ErrorCategory::ForgeConfig, "{e}");
    assert!(e.to_string().contains("not Forgejo"), "{e}");
}

/// Every `/user/actions/…` route acts for the token's owner (`routers/api/v1/user/runners.go`
/// `ctx.Doer.ID`, v11–v15), so `scope: user` naming anyone else would silently serve (and make
/// runners for) the owner's repositories. `GET /api/v1/user` (`GetAuthenticatedUser`) tells
/// who that is; it is read once per version TTL.
#[tokio::test]
async fn a_user_scope_must_name_the_tokens_owner() {
    let fake = fake("15.0.3+gitea-1.22.0").await;
    let bob = fake.add_token("bob");
    fake.queue_job("bob/tool", "c", &["debian"]);
    let f = forge();
    let url = fake.url();
    let typo = ctx(
        "g",
        &url,
        ForgejoScope::User,
        Some("bobb"),
        &["debian:host"],
        &bob,
    );
    let err = f.open(&typo.key).snapshot(&typo, &[]).await.unwrap_err();
    assert_eq!(err.category(), ErrorCategory::Unauthorized, "{err}");
    assert!(
        err.to_string()
            .contains("spec.forgejo.user is \"bobb\" but the token belongs to \"bob\""),
        "{err}"
    );
    assert_eq!(
        count(&fake, "/user/actions"),
        0,
        "nothing listed for the wrong user"
    );
    let err = f
        .open(&typo.key)
        .register(&typo, &RunnerRequest::unbound("g-abcde", None))
        .await
        .unwrap_err();
    assert_eq!(err.category(), ErrorCategory::Unauthorized);
    assert!(fake.runners().is_empty(), "no runner made for the token's owner");

    // The owner, in any case: served, and the login is not read again.
    let ok = ctx("h", &url, ForgejoScope::User, Some("Bob"), &["debian:host"], &bob);
    assert_eq!(f.open(&ok.key).snapshot(&ok, &[]).await.unwrap().waiting_jobs, 1);
    assert_eq!(f.open(&ok.key).snapshot(&ok, &[]).await.unwrap().waiting_jobs, 1);
    let user_reads = fake
        .requests()
        .iter()
        .filter(|r| r.path == "/api/v1/user")
        .count();
    assert_eq!(user_reads, 1);
    // Other scopes never ask.
    fake.clear_requests();
    let org = ctx(
        "i",
        &url,
        ForgejoScope::Global,
        None,
        &["debian:host"],
        ADMIN_TOKEN,
    );
    f.open(&org.key).snapshot(&org, &[]).await.unwrap();
    assert!(!fake.requests().iter().any(|r| r.path == "/api/v1/user"));
}

/// Distribution builds of Forgejo report the version without the `+gitea-…` suffix
/// (`Makefile@v15.0.0`: with `GITEA_VERSION` set, `FORGEJO_VERSION` has none); the Forgejo-only
/// `/api/forgejo/v1/version` still tells it is Forgejo.
#[tokio::test]
async fn a_distribution_build_without_the_gitea_suffix_is_forgejo() {
    let fake = fake("15.0.3").await;
    fake.queue_job("o/r", "a", &["debian"]);
    let f = forge();
    let c = ctx(
        "g",
        &fake.url(),
        ForgejoScope::Global,
        None,
        &["debian:host"],
        ADMIN_TOKEN,
    );
    let view = f.open(&c.key).snapshot(&c, &[]).await.unwrap();
    assert_eq!(view.waiting_jobs, 1);
    assert_eq!(view.facts.forge_version.as_deref(), Some("15.0.3"));
}

/// The cleanup hint says what Forgejo's offline-runner cleanup really does
/// (`services/cron/tasks_actions.go` `registerOfflineRunnersCleanup@v12.0.0`: `Enabled: false`,
/// `GlobalScopeOnly: true`; none in v11.0.0).
#[tokio::test]
async fn the_cleanup_hint_names_the_settings_the_scope_needs() {
    let f = forge();
    let org = ctx(
        "g",
        "https://x",
        ForgejoScope::Org,
        Some("acme"),
        &["debian:host"],
        "t",
    );
    let hint = f.describe(&org.group.spec).expect("valid").cleanup_hint;
    assert!(
        hint.contains("ENABLED = true and GLOBAL_SCOPE_ONLY = false"),
        "{hint}"
    );
    assert!(hint.contains("Forgejo 11 has no such job"), "{hint}");
    let global = ctx(
        "g",
        "https://x",
        ForgejoScope::Global,
        None,
        &["debian:host"],
        "t",
    );
    let hint = f.describe(&global.group.spec).expect("valid").cleanup_hint;
    assert!(!hint.contains("GLOBAL_SCOPE_ONLY"), "{hint}");
}
