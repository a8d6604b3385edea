//! What a deleted group, or a group that moved to other credentials, leaves in memory: the
//! clients, listings and tokens only it used are dropped, and the cache gauge shows it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

mod common;

use forgerunner_core::forge::RunnerRequest;

use std::sync::Arc;

use forgerunner_core::crd::{GiteaScope, GiteaSpec};
use forgerunner_core::forge::{Forge, GroupContext, ReconcileTrigger};
use forgerunner_core::metrics::{CacheLabels, Metrics};
use forgerunner_gitea::GiteaForge;
use forgerunner_testkit::gitea::{ADMIN_TOKEN, FakeConfig, GiteaFakeHandle};

fn ctx(name: &str, url: &str, token: &str) -> GroupContext {
    let gitea = GiteaSpec {
        url: url.to_string(),
        scope: GiteaScope::Global,
        org: None,
        user: None,
        repo: None,
        credentials: "creds".into(),
        labels: vec!["linux".into()],
        poll_interval_seconds: Some(30),
        webhook_secret: None,
        ca_bundle_config_map: None,
        proxy_url: None,
    };
    common::group_context(name, gitea, token)
}

fn entries(m: &Metrics, kind: &'static str) -> i64 {
    m.forge_cache_entries
        .get_or_create(&CacheLabels { forge: "gitea", kind })
        .get()
}

fn all(m: &Metrics) -> [i64; 4] {
    ["clients", "listings", "tokens", "groups"].map(|k| entries(m, k))
}

/// One pass of a group: observe, then a runner's registration token.
async fn pass(f: &GiteaForge, c: &GroupContext) {
    f.open(&c.key).snapshot(c, &[]).await.expect("observe");
    f.open(&c.key)
        .register(c, &RunnerRequest::unbound(&format!("{}-abcde", c.key.name), None))
        .await
        .expect("credentials");
}

#[tokio::test]
async fn release_and_credential_change_drop_what_only_that_group_used() {
    let fake = GiteaFakeHandle::start(FakeConfig::default()).await.unwrap();
    let metrics = Arc::new(Metrics::default());
    let (trigger, _rx) = ReconcileTrigger::channel();
    let f = GiteaForge::new(metrics.clone(), trigger);
    let other = fake.add_token("ops", true);
    let (a, b) = (ctx("a", &fake.url(), ADMIN_TOKEN), ctx("b", &fake.url(), &other));
    pass(&f, &a).await;
    pass(&f, &b).await;
    assert_eq!(entries(&metrics, "clients"), 2, "one client per token");
    assert_eq!(entries(&metrics, "tokens"), 2);
    // One map per group: the runners that took a job after a listing are core's books now.
    assert_eq!(entries(&metrics, "groups"), 2, "two groups, each in one map");

    // b's Secret now holds another token: b's old client, listings and token go.
    let rotated = fake.add_token("ops2", true);
    let b2 = ctx("b", &fake.url(), &rotated);
    pass(&f, &b2).await;
    f.open(&a.key).snapshot(&a, &[]).await.expect("observe");
    assert_eq!(
        all(&metrics)[..3],
        [2, 4, 2],
        "clients, listings, tokens of a and the new b"
    );

    f.open(&a.key).close().await;
    assert_eq!(all(&metrics), [1, 2, 1, 1], "only b's entries are left");
    f.open(&b2.key).close().await;
    f.open(&b2.key).close().await;
    assert_eq!(
        all(&metrics),
        [0, 0, 0, 0],
        "nothing left once no group uses the forge"
    );
}
