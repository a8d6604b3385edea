//! What a deleted group, or a group that moved to other credentials, leaves in memory: the
//! clients, listings and tokens only it used are dropped, and the cache gauge shows it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

mod common;

use forgerunner_core::forge::RunnerRequest;

use std::sync::Arc;

use common::{fake, group_context, spec};
use forgerunner_core::crd::ForgejoScope;
use forgerunner_core::forge::{Forge, GroupContext, ReconcileTrigger};
use forgerunner_core::metrics::{CacheLabels, Metrics};
use forgerunner_forgejo::ForgejoForge;
use forgerunner_testkit::forgejo::ADMIN_TOKEN;

fn all(m: &Metrics) -> [i64; 4] {
    ["clients", "listings", "tokens", "groups"].map(|kind| {
        m.forge_cache_entries
            .get_or_create(&CacheLabels {
                forge: "forgejo",
                kind,
            })
            .get()
    })
}

fn ctx(name: &str, url: &str, token: &str) -> GroupContext {
    group_context(
        name,
        spec(url, ForgejoScope::Repo, Some("o/r"), &["debian:host"]),
        token,
    )
}

#[tokio::test]
async fn release_and_credential_change_drop_what_only_that_group_used() {
    // 14: the registration-token path, so a token is cached too.
    let fake = fake("14.0.2+gitea-1.22.0").await;
    fake.add_repo("o/r");
    let metrics = Arc::new(Metrics::default());
    let f = ForgejoForge::new(metrics.clone(), ReconcileTrigger::channel().0);
    let other = fake.add_token("o");
    let (a, b) = (ctx("a", &fake.url(), ADMIN_TOKEN), ctx("b", &fake.url(), &other));
    for c in [&a, &b] {
        f.open(&c.key).snapshot(c, &[]).await.expect("observe");
        f.open(&c.key)
            .register(c, &RunnerRequest::unbound(&format!("{}-abcde", c.key.name), None))
            .await
            .expect("credentials");
    }
    assert_eq!(
        all(&metrics),
        [2, 2, 2, 2],
        "a client, listing and token per token; a group entry per group"
    );

    // b's Secret now holds another token: what only the old one used goes.
    let b2 = ctx("b", &fake.url(), &fake.add_token("o"));
    f.open(&b2.key).snapshot(&b2, &[]).await.expect("observe");
    assert_eq!(
        all(&metrics),
        [2, 2, 1, 2],
        "b's old client, listing and token are gone"
    );

    f.open(&a.key).close().await;
    assert_eq!(all(&metrics), [1, 1, 0, 1], "only b's entries are left");
    f.open(&b2.key).close().await;
    f.open(&b2.key).close().await;
    assert_eq!(
        all(&metrics),
        [0, 0, 0, 0],
        "nothing left once no group uses the forge"
    );
}
