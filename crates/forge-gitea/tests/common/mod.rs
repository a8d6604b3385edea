//! Fixtures shared by the Gitea test suites.

pub mod webhook;

use std::collections::BTreeMap;

use forgerunner_core::crd::{ForgeKind, GiteaSpec, RunnerGroup};
use forgerunner_core::forge::{Credentials, Forge, GroupContext, GroupKey, SecretValue};

/// A Gitea group `name` in namespace `ns` (at most 8 runners) with `gitea` as its forge block,
/// as the reconciler would hand it to the forge, its Secret holding `token`.
#[allow(dead_code)] // not every suite uses every fixture
pub fn group_context(name: &str, gitea: GiteaSpec, token: &str) -> GroupContext {
    group_context_in("ns", name, gitea, token)
}

/// [`group_context`] in namespace `namespace` (another tenant's, say).
pub fn group_context_in(namespace: &str, name: &str, gitea: GiteaSpec, token: &str) -> GroupContext {
    let group = RunnerGroup::test(ForgeKind::Gitea)
        .named(namespace, name)
        .gitea(gitea)
        .max(8)
        .build();
    GroupContext {
        key: GroupKey {
            namespace: namespace.into(),
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

/// What the forge reports for `c` with no runners in the cluster.
#[allow(dead_code)] // not every suite uses every fixture
pub async fn view(
    f: &forgerunner_gitea::GiteaForge,
    c: &GroupContext,
) -> Result<forgerunner_core::forge::ForgeView, forgerunner_core::ForgeError> {
    f.open(&c.key).snapshot(c, &[]).await
}

/// A running runner of ours named `name`, as the reconciler hands it to the forge.
#[allow(dead_code)] // not every suite uses every fixture
pub fn running(name: &str) -> forgerunner_core::forge::RunnerRef {
    forgerunner_core::forge::RunnerRef {
        name: name.to_string(),
        annotations: BTreeMap::new(),
        phase: forgerunner_core::plan::RunnerPhase::Running,
        stored: true,
        registered_at: None,
        connected_since: None,
    }
}
