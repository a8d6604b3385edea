//! End-to-end (issue 13): a runner pod is attributed to the job it runs.
//!
//! The real binary against the scaleset emulator: when `JobStarted` names the runner, its pod
//! and Job get the `forgerunner.dev/job-*` annotations (repository, workflow, run id, job name,
//! job id), the operator logs one line tying the runner to that job, and its JSON log lines
//! carry the reconcile span's group and forge.
#![cfg(feature = "github")]

#[allow(dead_code)]
mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::e2e::{fail_with_output, github_world, start_operator};
use common::group::Group;
use forgerunner_core::job_identity::{
    JOB_ID_ANNOTATION, JOB_NAME_ANNOTATION, JOB_REPOSITORY_ANNOTATION, JOB_RUN_ID_ANNOTATION,
    JOB_WORKFLOW_ANNOTATION,
};
use forgerunner_sandbox::world::{GROUP_LABEL, wait_until};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;

const NS: &str = "e2e-identity";
const GROUP: &str = "gh-identity";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_runner_pod_carries_its_job_identity() {
    // Long enough for the pod to be seen busy, and annotated, before it ends.
    let world = github_world(NS, Duration::from_secs(30)).await;
    Group::github(GROUP).max(2).create(&world, NS).await;
    let op = start_operator(&world, "github", "forgerunner-e2e-identity");
    let Ok(set_id) = world.github_scale_set(GROUP, Duration::from_secs(90)).await else {
        fail_with_output(&op, "no scale set");
    };
    let queued = world.queue_github_job(set_id, GROUP).expect("queue");

    let pods: Api<Pod> = Api::namespaced(world.client.clone(), NS);
    let selector = ListParams::default().labels(&format!("{GROUP_LABEL}={GROUP}"));
    let annotated = wait_until(Duration::from_secs(120), "an annotated runner pod", || {
        let (pods, selector) = (pods.clone(), selector.clone());
        async move {
            pods.list(&selector)
                .await
                .map(|l| {
                    l.items.iter().any(|p| {
                        p.metadata
                            .annotations
                            .as_ref()
                            .is_some_and(|a| a.contains_key(JOB_RUN_ID_ANNOTATION))
                    })
                })
                .unwrap_or(false)
        }
    })
    .await;
    if annotated.is_err() {
        fail_with_output(&op, "no runner pod got its job's annotations");
    }
    let pod = pods
        .list(&selector)
        .await
        .expect("pods")
        .items
        .into_iter()
        .find(|p| {
            p.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(JOB_RUN_ID_ANNOTATION))
        })
        .expect("annotated pod");
    let a: BTreeMap<String, String> = pod.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(a[JOB_REPOSITORY_ANNOTATION], "org/repo");
    assert_eq!(
        a[JOB_WORKFLOW_ANNOTATION],
        "org/repo/.github/workflows/ci.yml@refs/heads/main"
    );
    assert_eq!(a[JOB_NAME_ANNOTATION], format!("job-{}", queued.id));
    assert!(a[JOB_RUN_ID_ANNOTATION].parse::<i64>().is_ok_and(|id| id > 0));
    assert!(!a[JOB_ID_ANNOTATION].is_empty());

    // The runner Job carries the same, so the identity survives the pod.
    let runner = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("job-name"))
        .cloned()
        .expect("job-name label");
    let jobs: Api<Job> = Api::namespaced(world.client.clone(), NS);
    let job = jobs.get(&runner).await.expect("runner Job");
    let ja = job.metadata.annotations.unwrap_or_default();
    for key in [
        JOB_REPOSITORY_ANNOTATION,
        JOB_RUN_ID_ANNOTATION,
        JOB_NAME_ANNOTATION,
    ] {
        assert_eq!(ja.get(key), a.get(key), "{key} on the Job");
    }

    // The operator's log names the runner's job, and its JSON lines carry the group's span.
    let lines: Vec<serde_json::Value> = op
        .output()
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let group = format!("{NS}/{GROUP}");
    let took = lines
        .iter()
        .find(|l| l["message"] == "runner is running a job" && l["runner"] == runner.as_str());
    let Some(took) = took else {
        fail_with_output(&op, "no log line ties the runner to its job");
    };
    assert_eq!(took["group"], group.as_str());
    assert_eq!(took["repository"], "org/repo");
    assert_eq!(took["job_name"], format!("job-{}", queued.id).as_str());
    assert!(
        lines.iter().any(|l| l["span"]["name"] == "reconcile"
            && l["span"]["group"] == group.as_str()
            && l["span"]["forge"] == "github"),
        "a JSON log line inside a reconcile span carries its group and forge"
    );
    assert!(
        lines.iter().any(|l| l["spans"].as_array().is_some_and(|s| s
            .iter()
            .any(|s| s["name"] == "forge_call" && s["operation"] == "observe"))),
        "forge calls have their own span"
    );
}
