//! Issue 14: the operator's forge host allowlist (`forgeHosts.allowed`). A group whose forge URL
//! is outside it reports `Ready=False` / `ForgeHostNotAllowed` naming the host and the setting,
//! and the forge never sees a request from the operator, not even when the group is deleted.
//! A forge that answers with a redirect cannot lead the operator past the allowlist either: no
//! redirect is followed, and the group says why (M1 of the security review).
#![cfg(feature = "gitea")]

#[allow(dead_code)]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::e2e::{fail_with_output, start_operator, start_operator_with};
use common::gitea_world::{condition, gitea_world, wait_or_fail};
use common::group::{Group, is_ready};
use forgerunner_core::RunnerGroup;
use forgerunner_core::forge_hosts::url_host;
use forgerunner_sandbox::world::operator::OperatorSettings;
use forgerunner_testkit::gitea::Fault;
use kube::Api;
use kube::api::DeleteParams;

const NS: &str = "hosts";
const LABEL: &str = "hosts-linux";
/// The redirect test's own namespace.
const REDIRECT_NS: &str = "hosts-redirect";

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
    Group::gitea("refused")
        .host_label(LABEL)
        .max(2)
        .create(&world, NS)
        .await;
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
    Group::gitea("allowed")
        .host_label(LABEL)
        .max(2)
        .create(&world, NS)
        .await;
    let op = start_operator_with(&world, &settings(&format!("gitea.example.com,{host}")));
    wait_or_fail(&op, "Ready=True with the host allowed", || {
        is_ready(&world, NS, "allowed")
    })
    .await;
    assert!(
        !gitea.requests().is_empty(),
        "an allowed group talks to its forge"
    );
}

/// A server on 127.0.0.1 (port 0) that counts the connections it accepts and closes each at
/// once: the address a redirect points at, which must never be reached.
async fn counting_server() -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a local port");
    let port = listener.local_addr().expect("local address").port();
    let reached = Arc::new(AtomicUsize::new(0));
    let counter = reached.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            drop(socket);
        }
    });
    (port, reached)
}

/// M1 of the security review: the group's Gitea answers every API request with a 307 to another
/// address (where, in the attack, cloud metadata or an in-cluster service would listen). The real
/// binary follows none of them: the target gets no connection while the operator keeps trying,
/// and the group's `Ready` condition tells the user to point `spec.gitea.url` at the final
/// address, naming only the target's origin, never its path or query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forge_that_redirects_elsewhere_is_not_followed() {
    let world = gitea_world(REDIRECT_NS, Duration::from_millis(200)).await;
    let gitea = world.gitea.clone().expect("gitea fake");
    let (target, reached) = counting_server().await;
    let location = format!("http://127.0.0.1:{target}/latest/meta-data?token=hunter2");
    gitea.inject_fault(Fault::redirect("/api/v1/", 307, &location));
    Group::gitea("redirected")
        .host_label(LABEL)
        .max(2)
        .create(&world, REDIRECT_NS)
        .await;

    let op = start_operator(&world, "gitea", "forgerunner-e2e-redirect");
    wait_or_fail(
        &op,
        "Ready=False ForgeConfig saying the forge redirected",
        || async {
            condition(&world, REDIRECT_NS, "redirected", "Ready")
                .await
                .is_some_and(|(s, r, m)| s == "False" && r == "ForgeConfig" && m.contains("redirect"))
        },
    )
    .await;
    // The operator keeps retrying (backing off): each try is refused at the forge's answer.
    wait_or_fail(&op, "three redirects answered", || async {
        gitea.requests().iter().filter(|r| r.status == 307).count() >= 3
    })
    .await;
    let reached = reached.load(Ordering::SeqCst);
    if reached != 0 {
        fail_with_output(&op, &format!("the redirect target got {reached} connections"));
    }
    let (_, _, message) = condition(&world, REDIRECT_NS, "redirected", "Ready")
        .await
        .expect("Ready");
    for part in [
        format!("http://127.0.0.1:{target}"),
        "does not follow redirects".to_owned(),
        "spec.gitea.url".to_owned(),
    ] {
        assert!(message.contains(&part), "{part:?} missing from {message:?}");
    }
    for leak in ["latest", "meta-data", "token", "hunter2"] {
        assert!(!message.contains(leak), "{leak:?} leaked into {message:?}");
    }
    let (status, reason, _) = condition(&world, REDIRECT_NS, "redirected", "ForgeConnected")
        .await
        .expect("ForgeConnected");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "ForgeConfig"));
    assert!(
        world
            .runner_jobs(REDIRECT_NS, None)
            .await
            .expect("jobs")
            .is_empty()
    );
}
