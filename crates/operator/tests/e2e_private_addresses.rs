//! Issue 26, item 3: `forgeHosts.refusePrivateAddresses`. With it on, the real binary connects
//! to no loopback, private or link-local address for a group: a forge URL naming one as a
//! literal is refused before any call (`Ready=False` / `ForgeHostNotAllowed`, naming the host,
//! the address class and the setting), and a name resolving only to such addresses
//! (`localhost`) is refused when the client resolves it (`Ready=False` / `ForgeConfig`, naming
//! the host, the address and its class). The Gitea fake on 127.0.0.1 sees no request. Off (the
//! default), the same groups reach it and get ready.
#![cfg(feature = "gitea")]

#[allow(dead_code)]
mod common;

use std::time::Duration;

use common::e2e::start_operator_with;
use common::gitea_world::{condition, gitea_world, patch_spec, wait_or_fail};
use common::group::{Group, is_ready};
use forgerunner_sandbox::world::operator::OperatorSettings;

const NS: &str = "private-addresses";
const LABEL: &str = "private-linux";
const SETTING: &str = "forgeHosts.refusePrivateAddresses";

fn settings(refuse: bool) -> OperatorSettings {
    OperatorSettings {
        forges: vec!["gitea".into()],
        env: vec![(
            "FORGERUNNER_FORGE_HOSTS_REFUSE_PRIVATE_ADDRESSES".into(),
            refuse.to_string(),
        )],
        ..OperatorSettings::default()
    }
}

fn missing(message: &str, parts: &[&str]) -> Vec<String> {
    parts
        .iter()
        .filter(|p| !message.contains(*p))
        .map(|p| (*p).to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_addresses_are_refused_when_configured() {
    let world = gitea_world(NS, Duration::from_millis(200)).await;
    let gitea = world.gitea.clone().expect("gitea fake");
    let port = reqwest::Url::parse(&gitea.url())
        .ok()
        .and_then(|u| u.port())
        .expect("the fake's port");
    assert!(
        gitea.url().contains("127.0.0.1"),
        "the fake listens on loopback: {}",
        gitea.url()
    );
    for name in ["literal", "named"] {
        Group::gitea(name)
            .host_label(LABEL)
            .max(2)
            .create(&world, NS)
            .await;
    }
    // The same fake, by a name that passes any host check and resolves to 127.0.0.1 and ::1.
    patch_spec(
        &world,
        NS,
        "named",
        serde_json::json!({"gitea": {"url": format!("http://localhost:{port}")}}),
    )
    .await;
    world.queue_gitea_job(&[LABEL]).expect("queue a job");
    gitea.clear_requests();

    let mut op = start_operator_with(&world, &settings(true));
    wait_or_fail(
        &op,
        "the literal group Ready=False ForgeHostNotAllowed",
        || async {
            condition(&world, NS, "literal", "Ready")
                .await
                .is_some_and(|(s, r, _)| s == "False" && r == "ForgeHostNotAllowed")
        },
    )
    .await;
    wait_or_fail(&op, "the named group Ready=False naming the setting", || async {
        condition(&world, NS, "named", "Ready")
            .await
            .is_some_and(|(s, _, m)| s == "False" && m.contains(SETTING))
    })
    .await;
    let (_, _, literal) = condition(&world, NS, "literal", "Ready").await.expect("Ready");
    let gaps = missing(
        &literal,
        &["host 127.0.0.1", "spec.gitea.url", "loopback", SETTING],
    );
    assert!(gaps.is_empty(), "{gaps:?} missing from {literal:?}");
    let (_, reason, named) = condition(&world, NS, "named", "Ready").await.expect("Ready");
    let gaps = missing(&named, &["localhost resolves only to", "(loopback)", SETTING]);
    assert!(gaps.is_empty(), "{gaps:?} missing from {named:?}");
    assert_eq!(
        reason, "ForgeConfig",
        "the configuration's to fix, not a forge outage"
    );
    // A few passes more: each is refused before a connection.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let sent = gitea.requests();
    assert!(sent.is_empty(), "the operator called the fake: {sent:?}");
    assert!(world.runner_jobs(NS, None).await.expect("jobs").is_empty());
    op.stop(Duration::from_secs(10));

    // Control: with the refusal off the same groups reach the fake and get ready.
    let op = start_operator_with(&world, &settings(false));
    for name in ["literal", "named"] {
        wait_or_fail(&op, &format!("{name} Ready=True with the refusal off"), || {
            is_ready(&world, NS, name)
        })
        .await;
    }
    assert!(
        !gitea.requests().is_empty(),
        "an allowed group talks to its forge"
    );
}
