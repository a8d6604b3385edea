//! The unmatched-jobs scan through the groups' snapshots (`ForgeSession::snapshot`), against the
//! testkit's fake Gitea: once per listing for all the groups of a scope.

use std::collections::BTreeMap;
use std::sync::Arc;

use forgerunner_core::crd::{ForgeKind, GiteaScope, GiteaSpec, RunnerGroup};
use forgerunner_core::forge::{Credentials, Forge, GroupContext, GroupKey, ReconcileTrigger, SecretValue};
use forgerunner_core::metrics::Metrics;
use forgerunner_testkit::gitea::{ADMIN_TOKEN, FakeConfig, GiteaFakeHandle};

use crate::GiteaForge;

/// Groups on the one global scope of the fake.
const GROUPS: usize = 8;

/// Global group `name` serving `label`.
fn group(fake: &GiteaFakeHandle, name: &str, label: &str) -> GroupContext {
    let gitea = GiteaSpec {
        url: fake.url(),
        scope: GiteaScope::Global,
        org: None,
        user: None,
        repo: None,
        credentials: "creds".into(),
        labels: vec![label.into()],
        poll_interval_seconds: Some(300),
        webhook_secret: None,
        ca_bundle_config_map: None,
        proxy_url: None,
    };
    GroupContext {
        key: GroupKey {
            namespace: "ns".into(),
            name: name.into(),
        },
        uid: format!("uid-{name}"),
        group: RunnerGroup::test(ForgeKind::Gitea)
            .named("ns", name)
            .gitea(gitea)
            .build(),
        credentials: Credentials {
            secret_name: "creds".into(),
            data: BTreeMap::from([("token".to_owned(), SecretValue::new(ADMIN_TOKEN))]),
            version: "1".into(),
        },
        ca_bundle: None,
        webhook_secret: None,
    }
}

/// One pass of every group; the unmatched job ids each saw.
async fn round(forge: &GiteaForge, groups: &[GroupContext]) -> Vec<Vec<String>> {
    let mut seen = Vec::new();
    for g in groups {
        let view = forge.open(&g.key).snapshot(g, &[]).await.expect("observe");
        seen.push(view.unmatched.into_iter().map(|j| j.id).collect());
    }
    seen
}

#[tokio::test]
async fn the_groups_of_a_scope_share_one_scan_per_listing() {
    let fake = GiteaFakeHandle::start(FakeConfig::default()).await.expect("fake");
    let (trigger, _rx) = ReconcileTrigger::channel();
    let forge = GiteaForge::new(Arc::new(Metrics::default()), trigger);
    let groups: Vec<GroupContext> = (0..GROUPS)
        .map(|n| group(&fake, &format!("g{n}"), &format!("l{n}")))
        .collect();
    let typo = fake.queue_job("acme/app", &["linx"]).to_string();
    fake.queue_job("acme/app", &["l0"]);

    // The first round meets the groups one by one: each new taker outdates the scan, so each
    // group scans once; the last scan is made with all of them.
    round(&forge, &groups).await;
    assert_eq!(forge.unmatched_scans.made(), GROUPS as u64);
    for _ in 0..3 {
        let seen = round(&forge, &groups).await;
        assert!(seen.iter().all(|ids| *ids == [typo.clone()]), "{seen:?}");
    }
    assert_eq!(
        forge.unmatched_scans.made(),
        GROUPS as u64,
        "{GROUPS} groups, three more rounds on one listing: no scan more"
    );

    // A new listing is scanned once, for all the groups.
    let listing = forge.groups.lock().expect("groups")[&groups[0].key]
        .listing
        .clone();
    forge.jobs.shared(&listing).expire().await;
    for _ in 0..2 {
        round(&forge, &groups).await;
    }
    assert_eq!(forge.unmatched_scans.made(), GROUPS as u64 + 1);

    // A group that takes the typo's label changes the answer as soon as its pass makes it
    // known, on the same listing.
    let mut all = groups.clone();
    all.push(group(&fake, "late", "linx"));
    round(&forge, &all).await;
    let seen = round(&forge, &all).await;
    assert!(seen.iter().all(Vec::is_empty), "{seen:?}");
    assert_eq!(forge.unmatched_scans.made(), GROUPS as u64 + 2);
}
