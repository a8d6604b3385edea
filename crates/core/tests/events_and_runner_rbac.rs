//! The reconciler's Events and runner RBAC against the testkit's fake API server: one Event per
//! change of note, and a runner ServiceAccount removed behind the operator's back re-applied as
//! soon as a runner pod is refused for it. No cluster simulator runs: runner Jobs stay pending
//! and the Job controller's `FailedCreate` Event is written by the test.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use k8s_openapi::api::core::v1::{Event as CoreEvent, ServiceAccount};
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};

use common::*;

fn service_accounts(h: &Harness) -> Api<ServiceAccount> {
    Api::namespaced(h.client.clone(), NS)
}

/// kube's Recorder (kube-runtime 5.0 `src/events.rs`) keys an Event series by type, action,
/// reason, reporter and object, not by note, and a repeat within its six-minute cache patches
/// the first Event's `series`, keeping the first note (which `ValidateEventUpdate`,
/// `pkg/apis/core/validation/events.go`, makes immutable anyway). A second scale-up must show
/// as its own Event with its own count, not as the first one counted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_new_scale_up_note_is_its_own_event() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    h.forge.jobs.store(1, Ordering::SeqCst);
    h.create_group("notes", gitea_spec(0, 5, 600)).await;
    wait_for("the first ScaledUp Event", || async {
        !h.notes("ScaledUp").await.is_empty()
    })
    .await;
    let first = h.notes("ScaledUp").await;

    h.forge.jobs.store(3, Ordering::SeqCst);
    wait_for("3 runner jobs", || async {
        h.runner_jobs("notes").await.len() == 3
    })
    .await;
    wait_for("a second ScaledUp Event with its own note", || async {
        let notes = h.notes("ScaledUp").await;
        notes.len() >= 2 && notes.iter().collect::<BTreeSet<_>>().len() == notes.len()
    })
    .await;
    let notes = h.notes("ScaledUp").await;
    assert!(notes.contains(&first[0]), "{notes:?}");
    assert!(
        notes.iter().any(|n| n != &first[0]),
        "the second scale-up's note is shown: {notes:?}"
    );
    h.stop().await;
}

/// The Job controller's `FailedCreate` Event for a pod refused by the ServiceAccount admission
/// plugin (`plugin/pkg/admission/serviceaccount/admission.go`, `Plugin.Admit`: `error looking
/// up service account <ns>/<name>: serviceaccount "<name>" not found`, 403), as
/// `RealPodControl.createPods` (`pkg/controller/controller_utils.go`) records it on the Job.
async fn refuse_runner_pod(client: &Client, job: &str, account: &str) {
    let ev: CoreEvent = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{job}.sa-missing"), "namespace": NS},
        "involvedObject": {"kind": "Job", "apiVersion": "batch/v1", "name": job, "namespace": NS},
        "reason": "FailedCreate",
        "type": "Warning",
        "message": format!(
            "Error creating: pods \"{job}-\" is forbidden: error looking up service account \
             {NS}/{account}: serviceaccount \"{account}\" not found"
        ),
        "source": {"component": "job-controller"},
        "count": 1,
        "lastTimestamp": jiff::Timestamp::now().to_string(),
    }))
    .expect("event");
    Api::<CoreEvent>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &ev)
        .await
        .expect("create FailedCreate event");
}

/// The runner ServiceAccount removed out of band is applied again as soon as a runner pod is
/// refused for it, not only after an operator restart; the group says why its runners failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_refused_for_a_missing_service_account_brings_the_account_back() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    *h.forge.role_rules.lock().expect("lock") = vec![PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(vec!["pods".into()]),
        verbs: vec!["get".into(), "create".into()],
        ..PolicyRule::default()
    }];
    // `runner_service_account_name`: the group's name and `-runner`.
    let account = "hooks-runner";
    h.forge.jobs.store(1, Ordering::SeqCst);
    h.create_group("hooks", gitea_spec(0, 1, 600)).await;
    wait_for("the runner ServiceAccount and one runner Job", || async {
        let sa = service_accounts(&h).get_opt(account).await.ok().flatten();
        sa.is_some() && h.runner_jobs("hooks").await.len() == 1
    })
    .await;

    service_accounts(&h)
        .delete(account, &DeleteParams::default())
        .await
        .expect("delete the runner ServiceAccount");
    let job = h.runner_jobs("hooks").await[0]
        .metadata
        .name
        .clone()
        .expect("job name");
    refuse_runner_pod(&h.client, &job, account).await;

    // The runner is looked at once it has been pending for `LOOK_AFTER` (5 s).
    wait_for("the runner ServiceAccount applied again", || async {
        service_accounts(&h)
            .get_opt(account)
            .await
            .ok()
            .flatten()
            .is_some()
    })
    .await;
    wait_for("Degraded=True ServiceAccountMissing", || async {
        h.condition("hooks", "Degraded")
            .await
            .is_some_and(|(s, r, _)| s == "True" && r == "ServiceAccountMissing")
    })
    .await;
    h.stop().await;
}
