//! Day one on a real cluster: a group's template that does not decode, a group name a label
//! cannot hold, a name whose runner-name cut ends in `.`, each judged as a real API server does
//! (the fake API server mirrors apimachinery's and apiextensions-apiserver's rules).

mod common;

use std::sync::atomic::Ordering;

use forgerunner_core::crd::RunnerGroup;
use forgerunner_core::reconcile::FINALIZER;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};

use common::*;

/// A group whose template does not decode (`env` a map, stored by a CRD whose template was
/// free-form) is that group's `InvalidSpec` naming the field. Before the template was kept as
/// stored, kube decoded the LIST of groups as one batch (kube-core `ObjectList`), so after a
/// restart the group reflector never synced and no group anywhere was reconciled again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_that_does_not_decode_stops_only_its_own_group_across_a_restart() {
    let mut h = Harness::start(true).await;
    h.create_secret("creds").await;
    let mut bad = gitea_spec(0, 2, 600);
    bad["template"] =
        serde_json::json!({"spec": {"containers": [{"name": "runner", "env": {"FOO": "bar"}}]}});
    h.create_group_under_older_crd("typo", bad, true).await;
    h.restart_controller().await;
    h.forge.jobs.store(1, Ordering::SeqCst);
    h.create_group("healthy", gitea_spec(0, 2, 600)).await;
    wait_for("a runner for the healthy group", || async {
        !h.runner_jobs("healthy").await.is_empty()
    })
    .await;
    wait_for("InvalidSpec naming the template's field", || async {
        h.condition("typo", "Ready").await.is_some_and(|(s, r, m)| {
            s == "False" && r == "InvalidSpec" && m.contains("spec.template: spec.containers[0].env")
        })
    })
    .await;
    assert!(h.runner_jobs("typo").await.is_empty());
    h.stop().await;
}

/// A spec only a person can fix is not retried for its own sake, but its report is: when the
/// status write saying `InvalidSpec` fails (an API server restarting, a 500), the group would
/// otherwise wait for a spec change with nothing telling anyone why it has no runners.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_spec_is_reported_even_when_its_first_status_write_fails() {
    use forgerunner_testkit::apiserver::{Fault, Verb};
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    h.server.inject(
        Fault::error(500)
            .verb(Verb::Patch)
            .resource("runnergroups/status")
            .times(1),
    );
    let mut bad = gitea_spec(0, 2, 600);
    bad["gitea"]["labels"] = serde_json::json!(["reserved"]);
    h.create_group("reserved", bad).await;
    wait_for("InvalidSpec after the failed status write", || async {
        h.condition("reserved", "Ready")
            .await
            .is_some_and(|(s, r, _)| s == "False" && r == "InvalidSpec")
    })
    .await;
    assert!(h.runner_jobs("reserved").await.is_empty());
    h.stop().await;
}

/// The CRD's template schema is the pod template's: the API server refuses a type error where
/// the user types it (the fake validates custom resources against `openAPIV3Schema` as
/// apiextensions-apiserver's schema validation does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_error_in_the_template_is_refused_at_admission() {
    let h = Harness::start(true).await;
    let mut bad = gitea_spec(0, 2, 600);
    bad["template"] =
        serde_json::json!({"spec": {"containers": [{"name": "runner", "env": {"FOO": "bar"}}]}});
    let g: RunnerGroup = serde_json::from_value(serde_json::json!({
        "apiVersion": "forgerunner.dev/v1alpha1", "kind": "RunnerGroup",
        "metadata": {"name": "typo", "namespace": NS}, "spec": bad,
    }))
    .expect("group");
    let err = h
        .groups()
        .create(&PostParams::default(), &g)
        .await
        .expect_err("env must be a list");
    let kube::Error::Api(status) = err else {
        panic!("not an API error: {err}")
    };
    assert_eq!(status.code, 422, "{status:?}");
    assert!(
        status.message.contains("spec.template.spec.containers[0].env"),
        "{}",
        status.message
    );
    h.stop().await;
}

/// A group name over 63 characters is refused at admission (CEL on `metadata.name`). One stored
/// before that rule gets no finalizer and deletes at once; one that already had the finalizer
/// (an older operator added it first) is released without the Job list a real server refuses
/// with 400 (apimachinery `labels.Parse` → `NewRequirement` → `validateLabelValue`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_long_group_name_is_refused_and_never_stuck_terminating() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    let long = "a".repeat(64);
    let g: RunnerGroup = serde_json::from_value(serde_json::json!({
        "apiVersion": "forgerunner.dev/v1alpha1", "kind": "RunnerGroup",
        "metadata": {"name": long, "namespace": NS}, "spec": gitea_spec(0, 2, 600),
    }))
    .expect("group");
    let err = h
        .groups()
        .create(&PostParams::default(), &g)
        .await
        .expect_err("64 characters");
    assert!(err.to_string().contains("at most 63 characters"), "{err}");

    h.create_group_before_rules(&long, gitea_spec(0, 2, 600)).await;
    wait_for("InvalidSpec naming metadata.name", || async {
        h.condition(&long, "Ready").await.is_some_and(|(s, r, m)| {
            s == "False" && r == "InvalidSpec" && m.contains("metadata.name: must be at most 63")
        })
    })
    .await;
    let stored = h.groups().get(&long).await.expect("group");
    assert!(stored.metadata.finalizers.unwrap_or_default().is_empty());

    // As an older operator left it: our finalizer on, then deleted.
    let patch = serde_json::json!({"metadata": {"finalizers": [FINALIZER]}});
    h.groups()
        .patch(&long, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("finalizer");
    h.groups()
        .delete(&long, &DeleteParams::default())
        .await
        .expect("delete");
    wait_for("the over-long group to be gone", || async {
        h.groups().get_opt(&long).await.expect("get").is_none()
    })
    .await;
    h.stop().await;
}

/// A valid group name whose runner-name cut ends in `.` still gets runner Jobs (the fake, as a
/// real server, refuses `…-eu.-abc12`: apimachinery `IsDNS1123Subdomain`, each dot-separated
/// part starts and ends alphanumeric).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dotted_group_name_gets_runner_jobs() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    h.forge.jobs.store(2, Ordering::SeqCst);
    let name = "linux-amd64-large.ci-runners.platform-team-eu.build";
    h.create_group(name, gitea_spec(0, 2, 600)).await;
    wait_for("two runner Jobs", || async {
        h.runner_jobs(name).await.len() == 2
    })
    .await;
    for job in h.runner_jobs(name).await {
        let job_name = job.metadata.name.unwrap_or_default();
        assert!(
            job_name.starts_with("linux-amd64-large.ci-runners.platform-team-eu-"),
            "{job_name}"
        );
    }
    h.stop().await;
}
