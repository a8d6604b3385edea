//! Issue 14: the operator's forge host allowlist (`forgeHosts.allowed`). A group whose forge URL
//! is outside it reports `Ready=False` / `ForgeHostNotAllowed` naming the host and the setting,
//! and the forge never sees a request from the operator, not even when the group is deleted.
#![cfg(feature = "gitea")]

#[allow(dead_code)]
mod common;

use std::time::Duration;

use common::e2e::start_operator_with;
use common::gitea_world::{condition, gitea_group, gitea_world, wait_or_fail};
use forgerunner_core::RunnerGroup;
use forgerunner_core::forge_hosts::url_host;
use forgerunner_sandbox::world::groups::GroupSize;
use forgerunner_sandbox::world::operator::OperatorSettings;
use kube::Api;
use kube::api::DeleteParams;

const NS: &str = "hosts";
const LABEL: &str = "hosts-linux";

fn settings(allowed: &str) -> OperatorSettings {
    OperatorSettings {
        forges: vec!["gitea".into()],
        env: vec![("FORGERUNNER_FORGE_HOSTS_ALLOWED".into(), allowed.into())],
        ..OperatorSettings::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_outside_the_allowlist_is_refused_without_a_request() {
    let world = gitea_world(NS, Duration::from_millis(200)).await;
    let gitea = world.gitea.clone().expect("gitea fake");
    let host = url_host(&gitea.url()).expect("the fake's host");
    world
        .add_gitea_group_with(NS, "refused", &gitea_group(LABEL), &GroupSize::up_to(2))
        .await
        .expect("group");
    world.queue_gitea_job(&[LABEL]).expect("queue a job");
    gitea.clear_requests();

    let mut op = start_operator_with(&world, &settings("gitea.example.com,*.example.org"));
    wait_or_fail(&op, "Ready=False ForgeHostNotAllowed", || async {
        condition(&world, NS, "refused", "Ready")
            .await
            .is_some_and(|(s, r, _)| s == "False" && r == "ForgeHostNotAllowed")
    })
    .await;
    let (_, _, message) = condition(&world, NS, "refused", "Ready").await.expect("Ready");
    for part in [
        host.as_str(),
        "spec.gitea.url",
        "forgeHosts.allowed",
        "*.example.org",
    ] {
        assert!(message.contains(part), "{part:?} missing from {message:?}");
    }
    assert!(world.runner_jobs(NS, None).await.expect("jobs").is_empty());

    // Deleting the refused group releases it without a forge call either.
    let groups: Api<RunnerGroup> = Api::namespaced(world.client.clone(), NS);
    groups
        .delete("refused", &DeleteParams::default())
        .await
        .expect("delete");
    wait_or_fail(&op, "the refused group deleted", || async {
        matches!(groups.get_opt("refused").await, Ok(None))
    })
    .await;
    let sent = gitea.requests();
    assert!(sent.is_empty(), "the operator called the refused forge: {sent:?}");
    op.stop(Duration::from_secs(10));

    // Control: with the fake's host allowed, the same setup reaches the forge and gets Ready.
    world
        .add_gitea_group_with(NS, "allowed", &gitea_group(LABEL), &GroupSize::up_to(2))
        .await
        .expect("group");
    let op = start_operator_with(&world, &settings(&format!("gitea.example.com,{host}")));
    wait_or_fail(&op, "Ready=True with the host allowed", || async {
        condition(&world, NS, "allowed", "Ready")
            .await
            .is_some_and(|(s, _, _)| s == "True")
    })
    .await;
    assert!(
        !gitea.requests().is_empty(),
        "an allowed group talks to its forge"
    );
}
