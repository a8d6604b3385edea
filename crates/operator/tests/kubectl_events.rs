//! The operator's Events seen with the real kubectl (v1.32), as a user of the sandbox sees them:
//! the operator writes `events.k8s.io/v1` Events; `kubectl get events` (core v1) lists them and
//! `kubectl describe rg` shows them under `Events:`, because the fake API server, like a real
//! one, serves one Event resource in both API groups.
#![cfg(feature = "gitea")]

#[allow(dead_code)]
mod common;

use std::path::Path;

use common::e2e::start_operator;
use common::gitea_world::{gitea_world, wait_or_fail};
use common::group::Group;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;

const NS: &str = "kubectl-events";
const GROUP: &str = "evented";

/// Runs kubectl against `kubeconfig`; returns (success, stdout+stderr).
async fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let r = forgerunner_testkit::kubectl::run_async(kubeconfig, args)
        .await
        .expect("kubectl is on the PATH");
    (r.ok, r.text())
}

/// Reasons of the operator's Events about the group, read as the operator wrote them.
async fn group_event_reasons(api: &Api<Event>) -> Vec<String> {
    let fields = format!("regarding.kind=RunnerGroup,regarding.name={GROUP}");
    api.list(&ListParams::default().fields(&fields))
        .await
        .map(|l| l.items.into_iter().filter_map(|e| e.reason).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_events_and_describe_show_the_operators_events() {
    let world = gitea_world(NS, std::time::Duration::from_millis(200)).await;
    let op = start_operator(&world, "gitea", "forgerunner-events-0");
    Group::gitea(GROUP)
        .host_label("evented")
        .max(2)
        .create(&world, NS)
        .await;
    for _ in 0..2 {
        world.queue_gitea_job(&["evented"]).expect("queue job");
    }
    let events: Api<Event> = Api::namespaced(world.client.clone(), NS);
    wait_or_fail(&op, "the operator's ScaledUp Event", || async {
        group_event_reasons(&events).await.iter().any(|r| r == "ScaledUp")
    })
    .await;

    let kubeconfig = world.kubeconfig();
    let (ok, listed) = kubectl(kubeconfig, &["get", "events", "-n", NS]).await;
    assert!(ok, "kubectl get events failed:\n{listed}");
    assert!(
        listed.contains("ScaledUp") && listed.contains(&format!("runnergroup/{GROUP}")),
        "kubectl get events does not list the operator's ScaledUp Event:\n{listed}"
    );

    let (ok, selected) = kubectl(
        kubeconfig,
        &[
            "get",
            "events",
            "-n",
            NS,
            "--field-selector",
            &format!("involvedObject.kind=RunnerGroup,involvedObject.name={GROUP},reason=ScaledUp"),
            "-o",
            "jsonpath={.items[*].message}",
        ],
    )
    .await;
    assert!(ok, "kubectl get events --field-selector failed:\n{selected}");
    assert!(!selected.trim().is_empty(), "no message through the core form");

    let (ok, described) = kubectl(kubeconfig, &["describe", "rg", GROUP, "-n", NS]).await;
    assert!(ok, "kubectl describe rg failed:\n{described}");
    let section = described
        .split_once("\nEvents:")
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    assert!(
        section.contains("ScaledUp") && section.contains("forgerunner"),
        "kubectl describe rg shows no operator Events:\n{described}"
    );
    drop(op);
}
