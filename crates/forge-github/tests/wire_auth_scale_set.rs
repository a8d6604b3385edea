//! Wire tests against the scaleset emulator: auth (PAT, App), error mapping, scale set
//! find/create/update/recreate, shutdown.

mod common;

use std::time::Duration;

use common::*;
use forgerunner_core::{Forge, ForgeError};
use scaleset::testing::{DEFAULT_PAT, Emulator, Endpoint, Fault};
use scaleset::{RunnerScaleSetSpec, ScaleSetId};

#[tokio::test]
async fn pat_creates_the_scale_set_once_and_reports_demand() {
    let emu = emulator().await;
    let h = harness();
    let ctx = context(
        group(
            "linux",
            &emu.config_url(),
            serde_json::json!({"labels": ["gpu", "linux"]}),
            10,
        ),
        pat_credentials(DEFAULT_PAT),
    );
    let d = demand(&h.forge, &ctx).await;
    assert_eq!(d.waiting_jobs, 0);
    let id = d.facts.scale_set_id.expect("scale set id");
    let state = emu.state();
    let set = state.scale_set(ScaleSetId(id)).expect("created");
    assert_eq!(set.name, "linux");
    let labels: Vec<_> = set.labels.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(labels, vec!["linux", "gpu"]);
    assert_eq!(set.runner_group_id.get(), 1);

    let again = demand(&h.forge, &ctx).await;
    assert_eq!(again.facts.scale_set_id, Some(id));
    let creates = emu
        .requests_to(Endpoint::ScaleSets)
        .into_iter()
        .filter(|r| r.method == "POST")
        .count();
    assert_eq!(creates, 1, "the scale set is created once");
    // Every Actions call carried the api-version; the chain used the registration token.
    assert!(emu.requests_to(Endpoint::ScaleSets).iter().all(|r| {
        r.query
            .as_deref()
            .unwrap_or("")
            .contains("api-version=6.0-preview")
    }));
    assert_eq!(
        emu.requests_to(Endpoint::AdminConnection).len(),
        1,
        "admin token cached"
    );
    let encoded = {
        h.metrics
            .forge_requests
            .get_or_create(&forgerunner_core::metrics::ForgeRequestLabels {
                forge: "github",
                operation: "create_scale_set",
                outcome: forgerunner_core::metrics::Outcome::Success,
            })
            .get()
    };
    assert_eq!(encoded, 1, "requests are counted by operation and outcome");
    h.forge.shutdown_all().await;
}

#[tokio::test]
async fn github_app_credentials_exchange_a_jwt_for_an_installation_token() {
    let emu = Emulator::builder()
        .long_poll(Duration::from_millis(200))
        .github_app(4242)
        .start()
        .await;
    let h = harness();
    let creds = credentials(&[
        ("github_app_id", "12345"),
        ("github_app_installation_id", "4242"),
        ("github_app_private_key", PKCS1),
    ]);
    let ctx = context(group("app", &emu.config_url(), serde_json::json!({}), 5), creds);
    let d = demand(&h.forge, &ctx).await;
    assert!(d.facts.scale_set_id.is_some());
    let tokens = emu.requests_to(Endpoint::AccessToken);
    assert!(!tokens.is_empty() && tokens.iter().all(|r| r.status == 201));
    assert!(tokens[0].path.ends_with("/app/installations/4242/access_tokens"));

    // A wrong installation id is a 404 at GitHub.
    let h2 = harness();
    let creds = credentials(&[
        ("github_app_id", "12345"),
        ("github_app_installation_id", "1"),
        ("github_app_private_key", PKCS1),
    ]);
    let ctx = context(group("app2", &emu.config_url(), serde_json::json!({}), 5), creds);
    assert!(matches!(
        h2.forge.session(&ctx).snapshot(&ctx, &[]).await,
        Err(ForgeError::NotFound(_))
    ));
    h.forge.shutdown_all().await;
}

#[tokio::test]
async fn errors_map_to_forge_error_categories() {
    let emu = emulator().await;
    let h = harness();
    let bad_pat = context(
        group("a", &emu.config_url(), serde_json::json!({}), 5),
        pat_credentials("ghp_wrong"),
    );
    assert!(matches!(
        h.forge.session(&bad_pat).snapshot(&bad_pat, &[]).await,
        Err(ForgeError::Unauthorized(_))
    ));

    let no_keys = context(
        group("b", &emu.config_url(), serde_json::json!({}), 5),
        credentials(&[]),
    );
    assert!(matches!(
        h.forge.session(&no_keys).snapshot(&no_keys, &[]).await,
        Err(ForgeError::InvalidCredentials(_))
    ));

    let bad_key = context(
        group("c", &emu.config_url(), serde_json::json!({}), 5),
        credentials(&[
            ("github_app_id", "1"),
            ("github_app_installation_id", "2"),
            ("github_app_private_key", "nope"),
        ]),
    );
    assert!(matches!(
        h.forge.session(&bad_key).snapshot(&bad_key, &[]).await,
        Err(ForgeError::InvalidCredentials(_))
    ));

    let bad_url = context(
        group("d", &format!("{}/a/b/c", emu.uri()), serde_json::json!({}), 5),
        pat_credentials(DEFAULT_PAT),
    );
    assert!(matches!(
        h.forge.session(&bad_url).snapshot(&bad_url, &[]).await,
        Err(ForgeError::Config(_))
    ));

    let no_group = context(
        group(
            "e",
            &emu.config_url(),
            serde_json::json!({"runnerGroup": "missing"}),
            5,
        ),
        pat_credentials(DEFAULT_PAT),
    );
    assert!(matches!(
        h.forge.session(&no_group).snapshot(&no_group, &[]).await,
        Err(ForgeError::NotFound(_))
    ));

    // Unreachable: a port nobody listens on.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        format!("http://127.0.0.1:{port}/org")
    };
    let unreachable = context(
        group("f", &dead, serde_json::json!({}), 5),
        pat_credentials(DEFAULT_PAT),
    );
    assert!(matches!(
        h.forge.session(&unreachable).snapshot(&unreachable, &[]).await,
        Err(ForgeError::Unavailable(_))
    ));
}

#[tokio::test]
async fn runner_group_existing_scale_set_and_rename() {
    let emu = Emulator::builder()
        .long_poll(Duration::from_millis(200))
        .runner_group("gpu")
        .start()
        .await;
    let existing = emu
        .client()
        .create_runner_scale_set(&RunnerScaleSetSpec::new("prebuilt"))
        .await
        .unwrap();
    let h = harness();

    // An existing scale set of the same name in the same group is reused.
    let ctx = context(
        group(
            "g",
            &emu.config_url(),
            serde_json::json!({"scaleSetName": "prebuilt"}),
            5,
        ),
        pat_credentials(DEFAULT_PAT),
    );
    assert_eq!(
        demand(&h.forge, &ctx).await.facts.scale_set_id,
        Some(existing.id.get())
    );

    // Renaming and moving to another group patch the same scale set.
    let ctx = context(
        group(
            "g",
            &emu.config_url(),
            serde_json::json!({"scaleSetName": "renamed", "runnerGroup": "gpu"}),
            5,
        ),
        pat_credentials(DEFAULT_PAT),
    );
    assert_eq!(
        demand(&h.forge, &ctx).await.facts.scale_set_id,
        Some(existing.id.get())
    );
    let state = emu.state();
    let set = state.scale_set(existing.id).unwrap();
    assert_eq!(set.name, "renamed");
    assert_eq!(set.runner_group_name, "gpu");
    assert_eq!(state.scale_sets.len(), 1);
    h.forge.shutdown_all().await;
}

#[tokio::test]
async fn scale_set_deleted_at_the_service_is_recreated() {
    let emu = emulator().await;
    let h = harness();
    let ctx = pat_context(&emu, "phoenix");
    let first = demand(&h.forge, &ctx).await.facts.scale_set_id.unwrap();
    emu.wait_until(WAIT, |s| !s.sessions.is_empty()).await;
    emu.client()
        .delete_runner_scale_set(ScaleSetId(first))
        .await
        .unwrap();
    // The listener notices (poll 404, session create 404) and wakes the reconciler.
    let second = eventually(WAIT, "a recreated scale set", || async {
        let d = h.forge.session(&ctx).snapshot(&ctx, &[]).await.ok()?;
        d.facts.scale_set_id.filter(|id| *id != first)
    })
    .await;
    let state = emu
        .wait_until(WAIT, |s| {
            s.sessions.iter().any(|x| x.scale_set_id.get() == second)
        })
        .await;
    assert_eq!(state.scale_sets.len(), 1);
    assert_eq!(state.scale_sets[0].name, "phoenix");
    h.forge.shutdown_all().await;
}

#[tokio::test]
async fn rate_limits_and_server_errors() {
    let emu = emulator().await;
    let h = harness();
    let ctx = pat_context(&emu, "limited");
    // A short Retry-After is waited for and retried inside the client.
    emu.inject(Fault::too_many_requests(Endpoint::ScaleSets, Some(Duration::from_secs(1))).times(1));
    emu.inject(Fault::status(Endpoint::RegistrationToken, 503).times(2));
    let started = std::time::Instant::now();
    assert!(demand(&h.forge, &ctx).await.facts.scale_set_id.is_some());
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After honoured"
    );
    assert_eq!(
        emu.requests_to(Endpoint::RegistrationToken)
            .iter()
            .filter(|r| r.status == 503)
            .count(),
        2
    );

    // A long one is handed to the reconciler as RateLimited.
    let h2 = harness();
    let ctx2 = pat_context(&emu, "limited2");
    emu.inject(Fault::too_many_requests(Endpoint::ScaleSets, Some(Duration::from_secs(120))).times(1));
    match h2.forge.session(&ctx2).snapshot(&ctx2, &[]).await {
        Err(ForgeError::RateLimited { retry_after_seconds }) => assert_eq!(retry_after_seconds, 120),
        other => panic!("expected RateLimited, got {other:?}"),
    }
    // Persistent 5xx ends as Unavailable after bounded retries.
    emu.inject(Fault::status(Endpoint::ScaleSets, 500).times(10));
    assert!(matches!(
        h2.forge.session(&ctx2).snapshot(&ctx2, &[]).await,
        Err(ForgeError::Unavailable(_))
    ));
    emu.clear_faults();
    h.forge.shutdown_all().await;
}

#[tokio::test]
async fn shutdown_deletes_session_and_scale_set() {
    let emu = emulator().await;
    let h = harness();
    let ctx = pat_context(&emu, "bye");
    demand(&h.forge, &ctx).await;
    emu.wait_until(WAIT, |s| s.sessions.len() == 1).await;
    h.forge.session(&ctx).delete_group(&ctx).await.unwrap();
    let state = emu.state();
    assert!(state.sessions.is_empty(), "session deleted");
    assert!(state.scale_sets.is_empty(), "scale set deleted");
    // Idempotent: a second shutdown (e.g. after a restart) finds nothing and succeeds.
    h.forge.session(&ctx).delete_group(&ctx).await.unwrap();
}

#[tokio::test]
async fn proxy_and_ca_bundle_settings_are_used() {
    let emu = emulator().await;
    let h = harness();
    // The config host does not resolve: only the proxy (the emulator, which also serves
    // absolute-form requests) can answer.
    let ctx = context(
        group(
            "proxied",
            "http://forge.invalid/org",
            serde_json::json!({"proxyUrl": emu.uri()}),
            5,
        ),
        pat_credentials(DEFAULT_PAT),
    );
    assert!(demand(&h.forge, &ctx).await.facts.scale_set_id.is_some());
    assert!(!emu.requests_to(Endpoint::RegistrationToken).is_empty());

    let mut bad_ca = pat_context(&emu, "badca");
    bad_ca.ca_bundle = Some("-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n".into());
    assert!(matches!(
        h.forge.session(&bad_ca).snapshot(&bad_ca, &[]).await,
        Err(ForgeError::Config(_))
    ));
    let mut bad_proxy = pat_context(&emu, "badproxy");
    if let Some(g) = bad_proxy.group.spec.github.as_mut() {
        g.proxy_url = Some("::not a url::".into());
    }
    match h.forge.session(&bad_proxy).snapshot(&bad_proxy, &[]).await {
        Err(ForgeError::Config(m)) => assert!(!m.contains("not a url"), "proxy URL never echoed: {m}"),
        other => panic!("expected Config, got {other:?}"),
    }
    h.forge.shutdown_all().await;
}

/// The label names of scale set `id` at the emulator, in its order.
fn labels_at(emu: &Emulator, id: i64) -> Vec<String> {
    let state = emu.state();
    let set = state.scale_set(ScaleSetId(id)).expect("scale set");
    set.labels.iter().map(|l| l.name.clone()).collect()
}

fn label_patches(emu: &Emulator) -> usize {
    emu.requests_to(Endpoint::ScaleSets)
        .into_iter()
        .filter(|r| r.method == "PATCH")
        .count()
}

/// C3: a change of `spec.github.labels` reaches the existing scale set. scaleset updates a scale
/// set with a PATCH carrying the labels (`client.go`, `UpdateRunnerScaleSet`, after
/// `applyDefaultLabelTypes`); the emulator serves it. A rename changes the name label too,
/// and a restarted operator finds the scale set and corrects labels changed meanwhile.
#[tokio::test]
async fn label_changes_are_patched_onto_the_scale_set() {
    let emu = emulator().await;
    let h = harness();
    let ctx = |extra: serde_json::Value| {
        context(
            group("relabel", &emu.config_url(), extra, 5),
            pat_credentials(DEFAULT_PAT),
        )
    };
    let id = demand(&h.forge, &ctx(serde_json::json!({"labels": ["gpu"]})))
        .await
        .facts
        .scale_set_id
        .expect("scale set id");
    assert_eq!(labels_at(&emu, id), vec!["relabel", "gpu"]);
    assert_eq!(label_patches(&emu), 0, "created with its labels");

    // Changed labels: the same scale set gets them.
    let changed = ctx(serde_json::json!({"labels": ["gpu", "x64"]}));
    assert_eq!(demand(&h.forge, &changed).await.facts.scale_set_id, Some(id));
    assert_eq!(labels_at(&emu, id), vec!["relabel", "gpu", "x64"]);
    let patches = label_patches(&emu);
    assert_eq!(patches, 1);
    // Nothing changed: no more PATCHes.
    demand(&h.forge, &changed).await;
    assert_eq!(label_patches(&emu), patches);

    // A rename moves the name label along.
    let renamed = ctx(serde_json::json!({"labels": ["gpu", "x64"], "scaleSetName": "renamed"}));
    assert_eq!(demand(&h.forge, &renamed).await.facts.scale_set_id, Some(id));
    assert_eq!(labels_at(&emu, id), vec!["renamed", "gpu", "x64"]);
    h.forge.shutdown_all().await;

    // A new process (no cached state) with labels changed while it was down.
    let h = harness();
    let later = ctx(serde_json::json!({"labels": ["arm64"], "scaleSetName": "renamed"}));
    assert_eq!(demand(&h.forge, &later).await.facts.scale_set_id, Some(id));
    assert_eq!(labels_at(&emu, id), vec!["renamed", "arm64"]);
    assert_eq!(emu.state().scale_sets.len(), 1);
    h.forge.shutdown_all().await;
}

/// C2: the User-Agent carries the fields of scaleset's (`client.go`, `SystemInfo` and
/// `userAgent`, set by `common_client.go` `setUserAgent`) that apply: our version, the scale
/// set id once known (ARC's listener sets `ScaleSetID`, `cmd/ghalistener/config/config.go`
/// `ActionsClient`), and whether a proxy is used (`HasProxy` of ARC's former
/// `UserAgentInfo`, `github/actions/client.go`).
#[tokio::test]
async fn the_user_agent_names_version_scale_set_and_proxy() {
    let emu = emulator().await;
    let h = harness();
    let agent = |r: &scaleset::testing::RecordedRequest| -> serde_json::Value {
        serde_json::from_str(r.user_agent.as_deref().expect("a User-Agent")).expect("JSON")
    };
    let id = demand(&h.forge, &pat_context(&emu, "agent"))
        .await
        .facts
        .scale_set_id
        .expect("scale set id");
    emu.wait_until(WAIT, |s| s.sessions.len() == 1).await;
    let session = emu.requests_to(Endpoint::Sessions);
    let ua = agent(&session[0]);
    assert_eq!(ua["system"], "forgerunner");
    assert_eq!(ua["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(ua["kind"], "scaleset");
    assert_eq!(ua["scale_set_id"], id);
    assert_eq!(ua["has_proxy"], false);
    let poll = eventually(WAIT, "a poll", || async {
        emu.requests_to(Endpoint::GetMessage).into_iter().next()
    })
    .await;
    assert_eq!(agent(&poll)["scale_set_id"], id, "the long poll's client too");
    // Before the scale set is known there is no id to name.
    let first = emu.requests_to(Endpoint::RegistrationToken);
    assert_eq!(agent(&first[0])["scale_set_id"], 0);
    h.forge.shutdown_all().await;

    // Through a proxy (the emulator serves absolute-form requests).
    let emu = emulator().await;
    let h = harness();
    let ctx = context(
        group(
            "proxied",
            "http://forge.invalid/org",
            serde_json::json!({"proxyUrl": emu.uri()}),
            5,
        ),
        pat_credentials(DEFAULT_PAT),
    );
    demand(&h.forge, &ctx).await;
    let requests = emu.requests();
    assert!(!requests.is_empty());
    assert!(requests.iter().all(|r| agent(r)["has_proxy"] == true));
    h.forge.shutdown_all().await;
}
