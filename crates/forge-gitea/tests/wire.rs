//! Wire tests: the Gitea client and `GiteaForge` against the testkit's fake Gitea.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

mod common;

use forgerunner_core::forge::RunnerRequest;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use forgerunner_core::crd::{GiteaScope, GiteaSpec};
use forgerunner_core::forge::{
    Forge, ForgeError, ForgeRunnerState, GroupContext, ReconcileTrigger, RemoveOutcome, RunnerRef,
    SecretValue,
};
use forgerunner_core::metrics::Metrics;
use forgerunner_core::reconcile::ledger::{Ledger, OfflineRows};
use forgerunner_gitea::{ClientOptions, GiteaClient, GiteaError, GiteaForge, GiteaOptions, Scope};
use forgerunner_testkit::gitea::{ADMIN_TOKEN, FakeConfig, FakeScope, Fault, GiteaFakeHandle};

async fn fake(version: &str) -> GiteaFakeHandle {
    GiteaFakeHandle::start(FakeConfig {
        version: version.to_string(),
        ..FakeConfig::default()
    })
    .await
    .unwrap()
}

fn fast_opts() -> GiteaOptions {
    GiteaOptions {
        client: ClientOptions {
            request_timeout: Duration::from_millis(800),
            backoff: Duration::from_millis(10),
            ..ClientOptions::default()
        },
        ..GiteaOptions::default()
    }
}

fn forge() -> (GiteaForge, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::default());
    let (trigger, _rx) = ReconcileTrigger::channel();
    (
        GiteaForge::with_options(metrics.clone(), trigger, fast_opts()),
        metrics,
    )
}

fn ctx(
    name: &str,
    url: &str,
    scope: GiteaScope,
    target: Option<&str>,
    labels: &[&str],
    token: &str,
) -> GroupContext {
    let gitea = GiteaSpec {
        url: url.to_string(),
        scope,
        org: (scope == GiteaScope::Org).then(|| target.unwrap_or_default().to_string()),
        user: (scope == GiteaScope::User).then(|| target.unwrap_or_default().to_string()),
        repo: (scope == GiteaScope::Repo).then(|| target.unwrap_or_default().to_string()),
        credentials: "creds".into(),
        labels: labels.iter().map(|s| s.to_string()).collect(),
        poll_interval_seconds: Some(30),
        webhook_secret: None,
        ca_bundle_config_map: None,
        proxy_url: None,
    };
    common::group_context(name, gitea, token)
}

fn count(fake: &GiteaFakeHandle, path_part: &str) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.path.contains(path_part))
        .count()
}

#[tokio::test]
async fn version_gate() {
    let old = fake("1.24.3").await;
    let (f, _) = forge();
    let c = ctx("g", &old.url(), GiteaScope::Global, None, &["linux"], ADMIN_TOKEN);
    let err = f.open(&c.key).snapshot(&c, &[]).await.unwrap_err();
    assert!(
        matches!(&err, ForgeError::Config(m) if m.contains("1.25")),
        "{err}"
    );

    let new = fake("1.25.1").await;
    let c = ctx("g", &new.url(), GiteaScope::Global, None, &["linux"], ADMIN_TOKEN);
    let d = f.open(&c.key).snapshot(&c, &[]).await.unwrap();
    assert_eq!(d.facts.forge_version.as_deref(), Some("1.25.1"));
}

#[tokio::test]
async fn paging_collects_every_queued_job_and_counts_only_matching_ones() {
    let fake = fake("1.25.0").await;
    for i in 0..120 {
        fake.queue_job(
            "acme/app",
            if i % 2 == 0 { &["linux"] } else { &["linux", "x64"] },
        );
    }
    for _ in 0..5 {
        fake.queue_job("acme/app", &["gpu"]);
    }
    for _ in 0..3 {
        fake.queue_blocked_job("acme/app", &["linux"]);
    }
    let client = GiteaClient::new(
        &fake.url(),
        SecretValue::new(ADMIN_TOKEN),
        Arc::default(),
        ClientOptions::default(),
    )
    .unwrap();
    let jobs = client.list_jobs(&Scope::Global, &["queued"]).await.unwrap();
    assert_eq!(jobs.len(), 125);
    assert_eq!(count(&fake, "/actions/jobs"), 3, "ceil(125/50) pages");
    assert!(fake.requests().iter().all(|r| r.authorized));

    let (f, metrics) = forge();
    let c = ctx(
        "g",
        &fake.url(),
        GiteaScope::Global,
        None,
        &["linux:host", "x64:docker://node:20"],
        ADMIN_TOKEN,
    );
    assert_eq!(
        common::view(&f, &c).await.unwrap().waiting_jobs,
        120,
        "blocked and gpu jobs are not demand"
    );
    let only_linux = ctx(
        "h",
        &fake.url(),
        GiteaScope::Global,
        None,
        &["linux"],
        ADMIN_TOKEN,
    );
    assert_eq!(common::view(&f, &only_linux).await.unwrap().waiting_jobs, 60);
    let success = metrics
        .forge_requests
        .get_or_create(&forgerunner_core::metrics::ForgeRequestLabels {
            forge: "gitea",
            operation: "list_jobs",
            outcome: forgerunner_core::metrics::Outcome::Success,
        })
        .get();
    assert_eq!(success, 3, "two groups on one listing share one poll (3 pages)");
}

#[tokio::test]
async fn scopes_and_permissions() {
    let fake = fake("1.26.0").await;
    fake.add_org("acme", &["alice"]);
    let alice = fake.add_token("alice", false);
    let bob = fake.add_token("bob", false);
    fake.queue_job("acme/app", &["linux"]);
    fake.queue_job("acme/web", &["linux"]);
    fake.queue_job("bob/tool", &["linux"]);
    fake.queue_job("carol/x", &["linux"]);
    let (f, _) = forge();
    let url = fake.url();
    let demand = |c: GroupContext| {
        let f = &f;
        async move { common::view(f, &c).await }
    };
    assert_eq!(
        demand(ctx("a", &url, GiteaScope::Global, None, &["linux"], ADMIN_TOKEN))
            .await
            .unwrap()
            .waiting_jobs,
        4
    );
    assert_eq!(
        demand(ctx("b", &url, GiteaScope::Org, Some("acme"), &["linux"], &alice))
            .await
            .unwrap()
            .waiting_jobs,
        2
    );
    assert_eq!(
        demand(ctx("c", &url, GiteaScope::User, Some("bob"), &["linux"], &bob))
            .await
            .unwrap()
            .waiting_jobs,
        1
    );
    assert_eq!(
        demand(ctx(
            "d",
            &url,
            GiteaScope::Repo,
            Some("acme/web"),
            &["linux"],
            &alice
        ))
        .await
        .unwrap()
        .waiting_jobs,
        1
    );

    let err = demand(ctx("e", &url, GiteaScope::Org, Some("acme"), &["linux"], &bob))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ForgeError::Unauthorized(m) if m.contains("organization")),
        "{err}"
    );
    let err = demand(ctx("f", &url, GiteaScope::Global, None, &["linux"], &bob))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ForgeError::Unauthorized(m) if m.contains("admin")),
        "{err}"
    );
    let err = demand(ctx("g", &url, GiteaScope::Org, Some("nope"), &["linux"], &alice))
        .await
        .unwrap_err();
    assert!(matches!(err, ForgeError::NotFound(_)), "{err}");
    let err = demand(ctx("h", &url, GiteaScope::User, Some("alice"), &["linux"], &bob))
        .await
        .unwrap_err();
    assert!(matches!(err, ForgeError::Unauthorized(_)), "wrong user: {err}");
    let err = demand(ctx("i", &url, GiteaScope::Global, None, &["linux"], "bad-token"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ForgeError::Unauthorized(m) if m.contains("401")),
        "{err}"
    );
    let err = demand(ctx(
        "j",
        &url,
        GiteaScope::Global,
        None,
        &["bad label"],
        ADMIN_TOKEN,
    ))
    .await
    .unwrap_err();
    assert!(matches!(err, ForgeError::Config(_)), "{err}");
}

#[tokio::test]
async fn rate_limit_is_honoured() {
    let fake = fake("1.26.0").await;
    let (f, _) = forge();
    let c = ctx(
        "g",
        &fake.url(),
        GiteaScope::Global,
        None,
        &["linux"],
        ADMIN_TOKEN,
    );
    fake.inject_fault(Fault::status("/actions/jobs", 429).retry_after("30").times(1));
    let err = common::view(&f, &c).await.unwrap_err();
    assert!(
        matches!(
            err,
            ForgeError::RateLimited {
                retry_after_seconds: 30
            }
        ),
        "{err}"
    );
    let before = fake.requests().len();
    let err = common::view(&f, &c).await.unwrap_err();
    assert!(matches!(err, ForgeError::RateLimited { .. }), "{err}");
    assert_eq!(
        fake.requests().len(),
        before,
        "no request while the rate limit lasts"
    );

    // A short Retry-After is waited out inline.
    let fake2 = self::fake("1.26.0").await;
    fake2.inject_fault(Fault::status("/actions/jobs", 429).retry_after("1").times(1));
    let c2 = ctx(
        "g",
        &fake2.url(),
        GiteaScope::Global,
        None,
        &["linux"],
        ADMIN_TOKEN,
    );
    assert!(common::view(&f, &c2).await.is_ok());
    assert_eq!(count(&fake2, "/actions/jobs"), 2);
}

#[tokio::test]
async fn server_errors_and_timeouts() {
    let fake = fake("1.26.0").await;
    fake.queue_job("o/r", &["linux"]);
    let (f, _) = forge();
    let c = ctx(
        "g",
        &fake.url(),
        GiteaScope::Global,
        None,
        &["linux"],
        ADMIN_TOKEN,
    );
    fake.inject_fault(Fault::status("/actions/jobs", 502).times(1));
    assert_eq!(
        common::view(&f, &c).await.unwrap().waiting_jobs,
        1,
        "one 5xx is retried"
    );

    let fake = self::fake("1.26.0").await;
    fake.inject_fault(Fault::status("/actions/jobs", 503));
    let c = ctx(
        "g",
        &fake.url(),
        GiteaScope::Global,
        None,
        &["linux"],
        ADMIN_TOKEN,
    );
    let err = common::view(&f, &c).await.unwrap_err();
    assert!(matches!(err, ForgeError::Unavailable(_)), "{err}");
    assert_eq!(count(&fake, "/actions/jobs"), 3, "bounded attempts");

    let fake = self::fake("1.26.0").await;
    fake.inject_fault(Fault::latency("/actions/jobs", Duration::from_secs(5)));
    let c = ctx(
        "g",
        &fake.url(),
        GiteaScope::Global,
        None,
        &["linux"],
        ADMIN_TOKEN,
    );
    let err = common::view(&f, &c).await.unwrap_err();
    assert!(
        matches!(&err, ForgeError::Unavailable(m) if m.contains("timed out")),
        "{err}"
    );

    let (f2, _) = forge();
    let c = ctx(
        "g",
        "http://127.0.0.1:9",
        GiteaScope::Global,
        None,
        &["linux"],
        ADMIN_TOKEN,
    );
    assert!(matches!(
        common::view(&f2, &c).await.unwrap_err(),
        ForgeError::Unavailable(_)
    ));
}

#[tokio::test]
async fn credentials_state_removal_and_ghosts() {
    let fake = fake("1.26.0").await;
    let (f, _) = forge();
    let c = ctx(
        "grp",
        &fake.url(),
        GiteaScope::Repo,
        Some("acme/app"),
        &["linux:host"],
        ADMIN_TOKEN,
    );
    fake.add_repo("acme/app");
    let creds = f
        .open(&c.key)
        .register(&c, &RunnerRequest::unbound("grp-abcde", None))
        .await
        .unwrap();
    let expected = fake.registration_token(&FakeScope::Repo("acme".into(), "app".into()));
    assert_eq!(creds.secret_data["registration_token"].expose(), expected);
    // The labels are the pod's to say (a class's runner registers with its class's): none
    // here that would overwrite them on the runner container.
    assert!(!creds.env.contains_key("GITEA_RUNNER_LABELS"));
    assert_eq!(creds.env["GITEA_RUNNER_NAME"], "grp-abcde");
    // Ephemeral is a `register` flag now; no variable carries it (nor the token).
    assert!(!creds.env.contains_key("GITEA_RUNNER_EPHEMERAL"));
    assert!(creds.env.keys().all(|k| !k.contains("TOKEN")));
    assert!(!format!("{creds:?}").contains(&expected), "token never printed");

    // In a global group a fixed token from the Secret wins and costs no request (other
    // scopes refuse it: `fixed_instance_registration_token_is_refused_outside_global_scope`).
    let mut fixed = ctx(
        "glob",
        &fake.url(),
        GiteaScope::Global,
        None,
        &["linux:host"],
        ADMIN_TOKEN,
    );
    fixed
        .credentials
        .data
        .insert("registration_token".into(), SecretValue::new("fixed"));
    let before = count(&fake, "registration-token");
    let creds = f
        .open(&fixed.key)
        .register(&fixed, &RunnerRequest::unbound("glob-abcde", None))
        .await
        .unwrap();
    assert_eq!(creds.secret_data["registration_token"].expose(), "fixed");
    assert_eq!(count(&fake, "registration-token"), before);

    let scope = FakeScope::Repo("acme".into(), "app".into());
    let ghost = fake.add_runner(scope.clone(), "grp-zz9zz", &["linux"], false);
    fake.add_runner(scope.clone(), "grp-idle1", &["linux"], true);
    fake.add_runner(scope.clone(), "other-abcde", &["linux"], false);
    let d = common::view(&f, &c).await.unwrap();
    let rows = d.listed_rows.clone().expect("Gitea lists runner rows");
    assert_eq!(rows.offline, BTreeSet::from(["grp-zz9zz".to_owned()]));
    assert_eq!(rows.online, BTreeSet::from(["grp-idle1".to_owned()]));
    assert!(rows.whole);
    // Core calls the offline row a ghost: at first sight here, the grace has its own tests
    // (core's `OfflineRows`, and `listings.rs`).
    let mut books = Ledger {
        offline_rows: OfflineRows::with_grace(Duration::ZERO),
        ..Ledger::default()
    };
    let ghosts = forgerunner_core::testing::settled_ghosts(d, &[], &mut books);
    assert_eq!(ghosts, ["grp-zz9zz"]);

    let refs: Vec<RunnerRef> = ["grp-zz9zz", "grp-idle1", "grp-nope0"]
        .iter()
        .map(|n| common::running(n))
        .collect();
    let states = f.open(&c.key).snapshot(&c, &refs).await.unwrap().runners;
    assert_eq!(states.get("grp-zz9zz"), Some(&ForgeRunnerState::Offline));
    assert_eq!(states.get("grp-idle1"), Some(&ForgeRunnerState::Idle));
    assert_eq!(states.get("grp-nope0"), None);

    assert_eq!(
        f.open(&c.key).deregister(&c, &refs[0]).await.unwrap(),
        RemoveOutcome::Removed
    );
    assert!(fake.runners().iter().all(|r| r.id != ghost));
    assert_eq!(
        f.open(&c.key).deregister(&c, &refs[2]).await.unwrap(),
        RemoveOutcome::Removed,
        "unknown = removed"
    );

    // A runner that took a job is never removed.
    fake.queue_job("acme/app", &["linux"]);
    let busy_id = fake
        .runners()
        .iter()
        .find(|r| r.name == "grp-idle1")
        .map(|r| r.id)
        .unwrap();
    let http = reqwest::Client::new();
    let r = fake.runners().into_iter().find(|r| r.id == busy_id).unwrap();
    let resp = http
        .post(format!(
            "{}/api/actions/runner.v1.RunnerService/FetchTask",
            fake.url()
        ))
        .header("x-runner-uuid", &r.uuid)
        .header("x-runner-token", &r.token)
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success());
    assert_eq!(
        f.open(&c.key).deregister(&c, &refs[1]).await.unwrap(),
        RemoveOutcome::Busy
    );
    assert!(fake.runners().iter().any(|r| r.id == busy_id));
}

/// Gitea's fixed registration token (`GITEA_RUNNER_REGISTRATION_TOKEN`) is the *global* token:
/// `services/actions/init.go` `initGlobalRunnerToken` stores it with
/// `NewRunnerTokenWithValue(ctx, 0, 0, token)`, and `routers/api/actions/runner/runner.go`
/// `Register` gives the runner the token's `OwnerID`/`RepoID` (0, 0). An org group that hands
/// it to its runners gets global runners: they take every repository's jobs, the org's runner
/// list (`FindRunnerOptions.ToConds`: `owner_id = X`) never shows them, and an org `DELETE` is
/// 404 (`EditableInContext`). So the key is refused outside `scope: global`.
#[tokio::test]
async fn fixed_instance_registration_token_is_refused_outside_global_scope() {
    const FIXED: &str = "0123456789abcdef0123456789abcdef01234567";
    let fake = GiteaFakeHandle::start(FakeConfig {
        version: "1.26.0".into(),
        runner_registration_token: Some(FIXED.into()),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    fake.add_org("acme", &["alice"]);
    fake.add_repo("acme/app");
    let alice = fake.add_token("alice", false);
    let foreign = fake.queue_job("other/secret", &["linux"]);
    let (f, _) = forge();
    let org = ctx(
        "org",
        &fake.url(),
        GiteaScope::Org,
        Some("acme"),
        &["linux"],
        &alice,
    );
    let mut org_fixed = org.clone();
    org_fixed
        .credentials
        .data
        .insert("registration_token".into(), SecretValue::new(FIXED));

    // What the real server does with that token, whatever the operator meant: a runner
    // registered with it is global, takes another owner's job, is invisible to the org group
    // (state unknown) and its removal deletes nothing.
    let http = reqwest::Client::new();
    let reg: serde_json::Value = http
        .post(format!(
            "{}/api/actions/runner.v1.RunnerService/Register",
            fake.url()
        ))
        .json(&serde_json::json!({
            "name": "org-abcde", "token": FIXED, "labels": ["linux"], "ephemeral": true
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = reg["runner"]["id"].as_i64().unwrap();
    assert_eq!(fake.runners()[0].scope, FakeScope::Global);
    let refs = [common::running("org-abcde")];
    let view = f.open(&org.key).snapshot(&org, &refs).await.unwrap();
    assert_eq!(
        view.runners.get("org-abcde"),
        None,
        "not in the org's runner list"
    );
    assert_eq!(
        f.open(&org.key).deregister(&org, &refs[0]).await.unwrap(),
        RemoveOutcome::Removed
    );
    assert!(
        fake.runners().iter().any(|r| r.id == id),
        "the org DELETE cannot reach it"
    );
    assert_eq!(fake.take_job(id), Some(foreign), "it serves every repository");

    // So the org group refuses the key: a credentials problem of this group, before any
    // runner is made and before any request.
    let before = fake.requests().len();
    match f
        .open(&org_fixed.key)
        .register(&org_fixed, &RunnerRequest::unbound("org-fghij", None))
        .await
    {
        Err(ForgeError::InvalidCredentials(m)) => {
            assert!(
                m.contains("registration_token") && m.contains("scope: global"),
                "{m}"
            );
            assert!(m.contains("organization acme"), "{m}");
            assert!(!m.contains(FIXED), "never echoes the token: {m}");
        }
        Err(e) => panic!("expected InvalidCredentials, got {e}"),
        Ok(c) => panic!(
            "an org group accepted the instance-wide token: its runners would be global \
             (it handed out the fixed token: {})",
            c.secret_data["registration_token"].expose() == FIXED
        ),
    }
    match f.open(&org_fixed.key).snapshot(&org_fixed, &[]).await {
        Err(ForgeError::InvalidCredentials(m)) => assert!(m.contains("registration_token"), "{m}"),
        other => panic!("observe must report the key too, got {other:?}"),
    }
    assert_eq!(fake.requests().len(), before, "refused without a request");
    // Repo and user groups alike.
    for (scope, target) in [(GiteaScope::Repo, "acme/app"), (GiteaScope::User, "alice")] {
        let mut c = ctx("other", &fake.url(), scope, Some(target), &["linux"], &alice);
        c.credentials
            .data
            .insert("registration_token".into(), SecretValue::new(FIXED));
        assert!(
            matches!(
                f.open(&c.key)
                    .register(&c, &RunnerRequest::unbound("other-abcde", None))
                    .await,
                Err(ForgeError::InvalidCredentials(_))
            ),
            "{scope:?}"
        );
    }

    // A global group may use it: its runners are meant to be global.
    let mut global = ctx(
        "glob",
        &fake.url(),
        GiteaScope::Global,
        None,
        &["linux"],
        ADMIN_TOKEN,
    );
    global
        .credentials
        .data
        .insert("registration_token".into(), SecretValue::new(FIXED));
    assert!(f.open(&global.key).snapshot(&global, &[]).await.is_ok());
    let creds = f
        .open(&global.key)
        .register(&global, &RunnerRequest::unbound("glob-abcde", None))
        .await
        .unwrap();
    assert_eq!(creds.secret_data["registration_token"].expose(), FIXED);
}

#[tokio::test]
async fn missing_token_is_invalid_credentials() {
    let fake = fake("1.26.0").await;
    let (f, _) = forge();
    let mut c = ctx(
        "g",
        &fake.url(),
        GiteaScope::Global,
        None,
        &["linux"],
        ADMIN_TOKEN,
    );
    c.credentials.data.clear();
    assert!(matches!(
        common::view(&f, &c).await.unwrap_err(),
        ForgeError::InvalidCredentials(_)
    ));
    assert!(fake.requests().is_empty());
}

#[tokio::test]
async fn delete_of_unknown_runner_is_already_gone() {
    let fake = fake("1.26.0").await;
    let client = GiteaClient::new(
        &fake.url(),
        SecretValue::new(ADMIN_TOKEN),
        Arc::default(),
        ClientOptions::default(),
    )
    .unwrap();
    let out = client.delete_runner(&Scope::Global, 424242).await.unwrap();
    assert_eq!(out, forgerunner_gitea::DeleteOutcome::AlreadyGone);
    let err = client
        .registration_token(&Scope::Org("ghost".into()))
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        GiteaError::Request(forgerunner_http::RequestError::NotFound(_))
    ));
}

/// A self-signed CA (P-256, made for this test only); valid PEM the client must accept.
const TEST_CA: &str = "-----BEGIN CERTIFICATE-----
MIIBkjCCATmgAwIBAgIUW9WEKO/YPI0N4HixsGeXbMpfKtUwCgYIKoZIzj0EAwIw
HjEcMBoGA1UEAwwTZm9yZ2VydW5uZXIgdGVzdCBDQTAgFw0yNjExMjMyMzMwMTVa
GA8yMTI2MTAzMDIzMzAxNVowHjEcMBoGA1UEAwwTZm9yZ2VydW5uZXIgdGVzdCBD
QTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABH7f1miDQadsujyiVV8rIQQ7p4j5
DR+BQ5yEQuBblHCtd4pScc0r6h3MxvuK7aRBFBE3WGJ+HekmZJV6Y2Xa2bWjUzBR
MB0GA1UdDgQWBBQzXdhdmxCdRPa+RZ2r2/+yTgLW4jAfBgNVHSMEGDAWgBQzXdhd
mxCdRPa+RZ2r2/+yTgLW4jAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0cA
MEQCIACFyzUzo9JKdd3Cd6CxnoinNl19V1wQKaku+qpdlqHXAiAvIEEo9Aejh7cW
1TxNt/ndImsQysS+SIpmV8QC8Rj/fQ==
-----END CERTIFICATE-----
";

#[tokio::test]
async fn proxy_and_ca_bundle_are_used() {
    let fake = fake("1.25.0").await;
    fake.queue_job("acme/app", &["linux"]);
    let (f, _) = forge();
    // The instance host does not resolve: only the proxy (the fake, which also serves
    // absolute-form requests) can answer.
    let mut proxied = ctx(
        "proxied",
        "http://gitea.invalid",
        GiteaScope::Global,
        None,
        &["linux"],
        ADMIN_TOKEN,
    );
    if let Some(g) = proxied.group.spec.gitea.as_mut() {
        g.proxy_url = Some(fake.url());
        g.ca_bundle_config_map = Some("corp-ca".into());
    }
    proxied.ca_bundle = Some(TEST_CA.into());
    let view = f.open(&proxied.key).snapshot(&proxied, &[]).await.unwrap();
    assert_eq!(view.waiting_jobs, 1);
    assert_eq!(
        f.describe(&proxied.group.spec)
            .expect("valid")
            .cluster_refs
            .ca_bundle_config_map
            .as_deref(),
        Some("corp-ca")
    );

    // Without the proxy the same URL cannot be reached: the client is keyed by the proxy too.
    let direct = ctx(
        "direct",
        "http://gitea.invalid",
        GiteaScope::Global,
        None,
        &["linux"],
        ADMIN_TOKEN,
    );
    assert!(matches!(
        f.open(&direct.key).snapshot(&direct, &[]).await,
        Err(ForgeError::Unavailable(_))
    ));

    let mut bad_ca = ctx(
        "badca",
        &fake.url(),
        GiteaScope::Global,
        None,
        &["linux"],
        ADMIN_TOKEN,
    );
    bad_ca.ca_bundle = Some("-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n".into());
    assert!(matches!(
        f.open(&bad_ca.key).snapshot(&bad_ca, &[]).await,
        Err(ForgeError::Config(_))
    ));
    let mut bad_proxy = ctx(
        "badproxy",
        &fake.url(),
        GiteaScope::Global,
        None,
        &["linux"],
        ADMIN_TOKEN,
    );
    if let Some(g) = bad_proxy.group.spec.gitea.as_mut() {
        g.proxy_url = Some("http://user:hunter2@[::not".into());
    }
    match f.open(&bad_proxy.key).snapshot(&bad_proxy, &[]).await {
        Err(ForgeError::Config(m)) => assert!(!m.contains("hunter2"), "proxy URL never echoed: {m}"),
        other => panic!("expected Config, got {other:?}"),
    }
}

/// Runner listings need owner rights, job listings only read rights: Gitea 1.26
/// `routers/api/v1/api.go` `addActionsRoutes` registers `GET …/runners` with `reqOwnerCheck`
/// (`reqOwner()` for a repository, `reqOrgOwnership()` for an organization) and `GET …/jobs`
/// with `reqReaderCheck` (`reqRepoReader(unit.TypeActions)`); 1.25 uses the owner check for
/// both. A token that may read the repository lists its jobs and then fails on the runner
/// listing every pass makes: the message must name ownership, not read access.
#[tokio::test]
async fn forbidden_runner_listing_names_ownership() {
    for version in ["1.26.0", "1.25.0"] {
        let fake = fake(version).await;
        fake.add_org("acme", &["alice"]);
        let bob = fake.add_token("bob", false);
        fake.queue_job("acme/app", &["linux"]);
        let (f, _) = forge();
        let c = ctx(
            "r",
            &fake.url(),
            GiteaScope::Repo,
            Some("acme/app"),
            &["linux"],
            &bob,
        );
        let err = common::view(&f, &c).await.unwrap_err();
        let want = if version == "1.26.0" {
            "may not list runners"
        } else {
            "may not list Actions jobs"
        };
        assert!(
            matches!(&err, ForgeError::Unauthorized(m) if m.contains(want)
                && m.contains("ownership of the repository")),
            "{version}: {err}"
        );
    }
}
