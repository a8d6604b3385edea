//! Webhooks per tenant: a delivery is matched to groups by the forge instance and the
//! repository it names, and no tenant's groups can crowd another tenant's webhook secret out of
//! the few tried per delivery.
//!
//! The deliveries are the Gitea fake's own `workflow_job` bodies. Like Gitea's
//! (`services/webhook/notifier.go` `WorkflowJobStatusUpdate`, which builds the payload's
//! `repository` with `convert.ToRepo`), each names its repository by `owner.login`, `name`,
//! `full_name` and `html_url`; `html_url` is the instance's own URL followed by
//! `owner/name` (`models/repo/repo.go` `Repository.HTMLURL` → `Repository.Link`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

mod common;

use common::webhook::{checks, forge, headers, woken};

use forgerunner_core::crd::{GiteaScope, GiteaSpec};
use forgerunner_core::forge::{GroupContext, SecretValue};
use forgerunner_gitea::{GiteaForge, MAX_SECRETS_PER_DELIVERY, sign};
use forgerunner_testkit::gitea::{ADMIN_TOKEN, FakeConfig, GiteaFakeHandle};
use http::StatusCode;

const REPO: &str = "acme/app";

async fn fake() -> GiteaFakeHandle {
    GiteaFakeHandle::start(FakeConfig::default()).await.unwrap()
}

/// A `scope: repo` group `name` in `namespace` for `repo` on the instance at `url`, whose webhook
/// Secret holds `secret`.
fn repo_group(namespace: &str, name: &str, url: &str, repo: &str, secret: &str) -> GroupContext {
    group(namespace, name, url, GiteaScope::Repo, None, Some(repo), secret)
}

fn group(
    namespace: &str,
    name: &str,
    url: &str,
    scope: GiteaScope,
    org: Option<&str>,
    repo: Option<&str>,
    secret: &str,
) -> GroupContext {
    let gitea = GiteaSpec {
        url: url.to_string(),
        scope,
        org: org.map(Into::into),
        user: None,
        repo: repo.map(Into::into),
        credentials: "creds".into(),
        labels: vec!["linux".into()],
        poll_interval_seconds: Some(300),
        webhook_secret: Some("hook".into()),
        ca_bundle_config_map: None,
        proxy_url: None,
    };
    let mut c = common::group_context_in(namespace, name, gitea, ADMIN_TOKEN);
    c.webhook_secret = Some(SecretValue::new(secret));
    c
}

/// Lets the backend learn `groups` as the reconciler does (each group's first pass); a pass that
/// fails at the forge (another tenant's repository, say) still counts, as in production.
async fn observe_all(f: &GiteaForge, groups: &[GroupContext]) {
    for g in groups {
        let _ = common::view(f, g).await;
    }
}

/// The delivery `fake` makes for a new queued job of `repo`.
fn queued_delivery(fake: &GiteaFakeHandle, repo: &str) -> Vec<u8> {
    let id = fake.queue_job(repo, &["linux"]);
    fake.workflow_job_payload(&fake.job(id).expect("job"))
}

/// Tenant B names tenant A's repository, on A's instance, in more groups (each with its own
/// secret) than secrets are tried per delivery, from a namespace that sorts first. A's genuine
/// deliveries must still verify: B can take at most its share of the tries.
#[tokio::test]
async fn another_tenants_groups_cannot_crowd_out_a_repositorys_secret() {
    let fake = fake().await;
    let (f, metrics, mut rx) = forge();
    let url = fake.url();
    let mut groups: Vec<GroupContext> = (0..2 * MAX_SECRETS_PER_DELIVERY)
        .map(|n| {
            repo_group(
                "aa-tenant-b",
                &format!("squat-{n}"),
                &url,
                REPO,
                &format!("b-{n}"),
            )
        })
        .collect();
    groups.push(repo_group("zz-tenant-a", "app-runners", &url, REPO, "a-secret"));
    observe_all(&f, &groups).await;
    let _ = woken(&mut rx);

    let before = checks(&metrics);
    let body = queued_delivery(&fake, REPO);
    let reply = f.receive_webhook(&headers(&sign(b"a-secret", &body), "a-1"), &body);
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.body);
    assert_eq!(woken(&mut rx), ["app-runners"]);
    let spent = checks(&metrics) - before;
    assert!(
        spent <= MAX_SECRETS_PER_DELIVERY as u64,
        "{spent} signature checks for one delivery"
    );

    // B's own deliveries verify too (B's first group is tried before B's others).
    let body = queued_delivery(&fake, REPO);
    let reply = f.receive_webhook(&headers(&sign(b"b-0", &body), "b-1"), &body);
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.body);
    assert_eq!(woken(&mut rx), ["squat-0"]);
}

/// Two instances with the same repository name: a delivery tries the secrets of the groups on
/// the instance it names first, so groups of another instance cannot take its tries. Only the
/// tries those leave go to groups of other instances: Gitea writes its `ROOT_URL` into the
/// deliveries of jobs queued without a request (`modules/httplib/url.go`
/// `GuessCurrentHostURL`), so a group reaching its Gitea by another address (an in-cluster
/// Service) must still be reachable.
#[tokio::test]
async fn a_delivery_tries_the_secrets_of_its_own_instance_first() {
    let here = fake().await;
    let there = fake().await;
    let (f, metrics, mut rx) = forge();
    let mut groups: Vec<GroupContext> = (0..2 * MAX_SECRETS_PER_DELIVERY)
        .map(|n| {
            repo_group(
                "aa-tenant-y",
                &format!("on-there-{n}"),
                &there.url(),
                REPO,
                &format!("y-{n}"),
            )
        })
        .collect();
    groups.push(repo_group(
        "zz-tenant-x",
        "on-here",
        &here.url(),
        REPO,
        "x-secret",
    ));
    observe_all(&f, &groups).await;
    let _ = woken(&mut rx);

    // Signed with the secret of the group on this instance: the first and only try.
    let body = queued_delivery(&here, REPO);
    let before = checks(&metrics);
    let reply = f.receive_webhook(&headers(&sign(b"x-secret", &body), "h-1"), &body);
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.body);
    assert_eq!(checks(&metrics) - before, 1, "on-here's secret is tried first");
    assert_eq!(woken(&mut rx), ["on-here"]);

    // Signed with another instance's secret: tried only after on-here's, within the bound.
    let body = queued_delivery(&here, REPO);
    let before = checks(&metrics);
    let reply = f.receive_webhook(&headers(&sign(b"y-0", &body), "h-2"), &body);
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.body);
    assert_eq!(
        checks(&metrics) - before,
        2,
        "on-here's secret, then on-there-0's"
    );
    assert_eq!(woken(&mut rx), ["on-there-0"]);
}

/// Gitea finds owners and repositories by their lower-cased names (`models/user/user.go`
/// `getUserByNameWithTypes`, `models/repo/repo.go` `GetRepositoryByOwnerAndName`: `lower_name =
/// strings.ToLower(name)`), so a group written `org: ACME` or `repo: Acme/App` lists `acme`'s
/// jobs; deliveries name the canonical `acme/app` (`owner.login` is the user's `Name`). Such
/// groups must get their deliveries too.
#[tokio::test]
async fn owner_and_repository_names_match_as_gitea_compares_them() {
    let fake = fake().await;
    let (f, _metrics, mut rx) = forge();
    let url = fake.url();
    let groups = [
        group(
            "t-org",
            "org-upper",
            &url,
            GiteaScope::Org,
            Some("ACME"),
            None,
            "org-secret",
        ),
        repo_group("t-repo", "repo-mixed", &url, "Acme/App", "repo-secret"),
    ];
    observe_all(&f, &groups).await;
    let _ = woken(&mut rx);

    let body = queued_delivery(&fake, REPO);
    let reply = f.receive_webhook(&headers(&sign(b"org-secret", &body), "o-1"), &body);
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.body);
    assert_eq!(woken(&mut rx), ["org-upper"]);

    let body = queued_delivery(&fake, REPO);
    let reply = f.receive_webhook(&headers(&sign(b"repo-secret", &body), "r-1"), &body);
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.body);
    assert_eq!(woken(&mut rx), ["repo-mixed"]);
}
