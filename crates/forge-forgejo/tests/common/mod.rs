//! Fixtures shared by the Forgejo test suites.
#![allow(dead_code)] // each suite uses a subset

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use forgerunner_core::crd::{ForgeKind, ForgejoScope, ForgejoSpec, RunnerGroup};
use forgerunner_core::forge::{
    Credentials, Forge, GroupContext, GroupKey, ReconcileTrigger, RunnerRef, SecretValue,
};
use forgerunner_core::metrics::Metrics;
use forgerunner_core::plan::RunnerPhase;
use forgerunner_forgejo::{ClientOptions, ForgejoForge, ForgejoOptions};
use forgerunner_testkit::forge_common::rpc::RunnerClient;
use forgerunner_testkit::forgejo::{ADMIN_TOKEN, FakeConfig, ForgejoFakeHandle};
use serde_json::json;
use tokio::sync::mpsc::UnboundedReceiver;

/// A fake Forgejo playing `version`.
pub async fn fake(version: &str) -> ForgejoFakeHandle {
    ForgejoFakeHandle::start(FakeConfig::version(version))
        .await
        .expect("fake forgejo")
}

/// A backend with short timeouts and backoffs.
pub fn forge() -> ForgejoForge {
    forge_and_wakes().0
}

/// A backend with short timeouts and backoffs, and the groups it asks to reconcile.
pub fn forge_and_wakes() -> (ForgejoForge, UnboundedReceiver<GroupKey>) {
    forge_with(|_| {})
}

/// A backend with short timeouts and backoffs, further tuned by `tune`.
pub fn forge_with(tune: impl FnOnce(&mut ForgejoOptions)) -> (ForgejoForge, UnboundedReceiver<GroupKey>) {
    let (trigger, wakes) = ReconcileTrigger::channel();
    let mut opts = ForgejoOptions {
        client: ClientOptions {
            request_timeout: Duration::from_millis(500),
            backoff: Duration::from_millis(10),
            ..ClientOptions::default()
        },
        ..ForgejoOptions::default()
    };
    tune(&mut opts);
    let forge = ForgejoForge::with_options(Arc::new(Metrics::default()), trigger, opts);
    (forge, wakes)
}

/// A Forgejo block at `scope` (`target` is the org, user or `owner/repo`).
pub fn spec(url: &str, scope: ForgejoScope, target: Option<&str>, labels: &[&str]) -> ForgejoSpec {
    let t = || target.map(str::to_string);
    ForgejoSpec {
        url: url.to_string(),
        scope,
        org: (scope == ForgejoScope::Org).then(t).flatten(),
        user: (scope == ForgejoScope::User).then(t).flatten(),
        repo: (scope == ForgejoScope::Repo).then(t).flatten(),
        credentials: "creds".into(),
        labels: labels.iter().map(|s| s.to_string()).collect(),
        poll_interval_seconds: Some(30),
        ca_bundle_config_map: None,
        proxy_url: None,
    }
}

/// The group `name` as the reconciler hands it to the forge, its Secret holding `token`.
pub fn group_context(name: &str, forgejo: ForgejoSpec, token: &str) -> GroupContext {
    let group = RunnerGroup::test(ForgeKind::Forgejo)
        .named("ns", name)
        .forgejo(forgejo)
        .max(32)
        .build();
    GroupContext {
        key: GroupKey {
            namespace: "ns".into(),
            name: name.into(),
        },
        uid: format!("uid-{name}"),
        group,
        credentials: Credentials {
            secret_name: "creds".into(),
            data: BTreeMap::from([("token".to_string(), SecretValue::new(token))]),
            version: "1".into(),
        },
        ca_bundle: None,
        webhook_secret: None,
    }
}

/// A shorthand: `ctx(name, url, scope, target, labels, token)`.
pub fn ctx(
    name: &str,
    url: &str,
    scope: ForgejoScope,
    target: Option<&str>,
    labels: &[&str],
    token: &str,
) -> GroupContext {
    group_context(name, spec(url, scope, target, labels), token)
}

/// Group `web` at `fake` with label `debian:host`, its Secret holding the admin token.
pub fn web(fake: &ForgejoFakeHandle, scope: ForgejoScope, target: Option<&str>) -> GroupContext {
    ctx("web", &fake.url(), scope, target, &["debian:host"], ADMIN_TOKEN)
}

/// The runner RPC as runner `uuid` (secret `token`) at `fake`, once it declared label `debian`
/// and `version` as forgejo-runner does on start.
pub async fn declared(fake: &ForgejoFakeHandle, uuid: &str, token: &str, version: &str) -> RunnerClient {
    let mut rpc = RunnerClient::new(&fake.url()).expect("runner client");
    rpc.uuid = uuid.to_string();
    rpc.token = token.to_string();
    let (s, _) = rpc
        .call("Declare", json!({"labels": ["debian"], "version": version}))
        .await
        .expect("Declare");
    assert_eq!(s, 200);
    rpc
}

/// A runner of ours as the cluster shows it.
pub fn runner_ref(name: &str, phase: RunnerPhase, annotations: &BTreeMap<String, String>) -> RunnerRef {
    forgerunner_core::testing::runner_ref(name, phase, annotations.clone())
}

/// The view a pass plans on: `f`'s snapshot of `refs`, netted by the group's core `books`.
pub async fn netted_view(
    f: &ForgejoForge,
    c: &GroupContext,
    refs: &[RunnerRef],
    books: &mut forgerunner_core::reconcile::ledger::Ledger,
) -> forgerunner_core::forge::ForgeView {
    let view = f.open(&c.key).snapshot(c, refs).await.expect("snapshot");
    forgerunner_core::testing::netted_view(view, refs, books)
}

/// Registers the new runner `name` of `class` as a pass does after observing `refs`: bound to
/// the job core's `books` reserve for it (the oldest free job of its class), with the binding
/// among its Job's annotations.
pub async fn register_in_a_pass(
    f: &ForgejoForge,
    c: &GroupContext,
    books: &mut forgerunner_core::reconcile::ledger::Ledger,
    refs: &[RunnerRef],
    name: &str,
    class: Option<&forgerunner_core::crd::RunnerClass>,
) -> forgerunner_core::forge::RunnerCredentials {
    let view = netted_view(f, c, refs, books).await;
    let session = f.open(&c.key);
    forgerunner_core::testing::register_as_a_pass_does(session.as_ref(), c, books, &view, name, class)
        .await
        .expect("register")
}
