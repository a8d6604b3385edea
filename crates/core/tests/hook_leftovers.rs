//! What the runner container hooks leave when a runner pod dies mid-job (issue 25, D2): their
//! job pods and Secrets carry `runner-pod=<runner pod>` and no owner
//! (actions/runner-container-hooks `packages/k8s/src/hooks/constants.ts`,
//! `RunnerInstanceLabel`; `packages/k8s/src/k8s/index.ts`, `createJobPod`), so nothing removes
//! them with the runner. ARC deletes them with each runner (`ephemeralrunner_controller.go`,
//! `cleanupContainerHooksResources`); so must we. Against the testkit's fake API server, no
//! cluster simulator: the test writes the pods the hooks and the Job controller would.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::api::{Api, PostParams};
use kube::core::ObjectMeta;

use common::*;

fn hooks_pod(name: &str, labels: &[(&str, &str)]) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": NS, "labels": labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<BTreeMap<_, _>>()},
        "spec": {"containers": [{"name": "job", "image": "busybox", "command": ["tail", "-f", "/dev/null"]}]}
    }))
    .expect("pod")
}

fn hooks_secret(name: &str, runner_pod: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            labels: Some(BTreeMap::from([("runner-pod".to_owned(), runner_pod.to_owned())])),
            ..ObjectMeta::default()
        },
        ..Secret::default()
    }
}

async fn exists_pod(pods: &Api<Pod>, name: &str) -> bool {
    pods.get_opt(name).await.ok().flatten().is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_pods_and_secrets_of_a_dead_runner_pod_are_deleted_and_a_live_ones_kept() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    // A forge that gives its runners permissions runs job containers as pods (the hooks).
    *h.forge.role_rules.lock().expect("lock") = vec![PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(vec!["pods".into()]),
        verbs: vec!["get".into(), "create".into(), "delete".into()],
        ..PolicyRule::default()
    }];
    h.forge.jobs.store(1, Ordering::SeqCst);
    h.create_group("hk", gitea_spec(0, 1, 600)).await;
    wait_for("one runner Job", || async {
        h.runner_jobs("hk").await.len() == 1
    })
    .await;
    let job = h.runner_jobs("hk").await[0]
        .metadata
        .name
        .clone()
        .expect("job name");

    let pods: Api<Pod> = Api::namespaced(h.client.clone(), NS);
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), NS);
    // The live runner's pod (as the Job controller names it) and its job pod.
    let live = format!("{job}-abcde");
    let pp = PostParams::default();
    pods.create(&pp, &hooks_pod(&live, &[("forgerunner.dev/group", "hk")]))
        .await
        .expect("runner pod");
    pods.create(
        &pp,
        &hooks_pod(&format!("{live}-workflow"), &[("runner-pod", &live)]),
    )
    .await
    .expect("live job pod");
    // What a runner of this group that died mid-job left, and what another group's did.
    let dead = "hk-zzzzz-qwert";
    pods.create(
        &pp,
        &hooks_pod("hk-zzzzz-qwert-workflow", &[("runner-pod", dead)]),
    )
    .await
    .expect("dead job pod");
    secrets
        .create(&pp, &hooks_secret("hk-zzzzz-qwert-secret", dead))
        .await
        .expect("dead secret");
    pods.create(
        &pp,
        &hooks_pod(
            "other-yyyyy-asdfg-workflow",
            &[("runner-pod", "other-yyyyy-asdfg")],
        ),
    )
    .await
    .expect("other group's job pod");

    // A runner going away makes the next pass look at once.
    h.forge.jobs.store(0, Ordering::SeqCst);
    h.fail_job(&job).await;
    wait_for("the dead runner's job pod and Secret deleted", || async {
        !exists_pod(&pods, "hk-zzzzz-qwert-workflow").await
            && secrets
                .get_opt("hk-zzzzz-qwert-secret")
                .await
                .ok()
                .flatten()
                .is_none()
    })
    .await;
    assert!(
        exists_pod(&pods, &format!("{live}-workflow")).await,
        "a running runner pod's job pod is kept"
    );
    assert!(
        exists_pod(&pods, "other-yyyyy-asdfg-workflow").await,
        "another group's is not ours to delete"
    );
    h.stop().await;
}
