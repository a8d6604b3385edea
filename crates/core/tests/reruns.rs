//! Jobs the cluster killed: a runner Job whose pod carries the `DisruptionTarget` condition
//! (k8s.io/api `core/v1` types.go, `DisruptionTarget`, set by the eviction API, preemption, the
//! taint manager and the pod GC) has its job re-run through the forge within `spec.rerun`; a
//! runner that failed on its own never has.

mod common;

use std::sync::atomic::Ordering;

use forgerunner_core::forge::RerunOutcome;
use forgerunner_core::job_identity::JobIdentity;

use common::*;

fn build_job() -> JobIdentity {
    JobIdentity {
        repository: Some("octo/app".into()),
        run_id: Some("77".into()),
        job_name: Some("build".into()),
        job_id: Some("901".into()),
        ..JobIdentity::default()
    }
}

/// One runner Job, busy with `build_job()` as the forge reports it; its name.
async fn busy_runner(h: &Harness, group: &str, spec: serde_json::Value) -> String {
    h.forge.jobs.store(1, Ordering::SeqCst);
    h.create_group(group, spec).await;
    wait_for("a runner", || async { !h.runner_jobs(group).await.is_empty() }).await;
    let name = h.runner_jobs(group).await[0].metadata.name.clone().expect("name");
    h.forge
        .identities
        .lock()
        .expect("lock")
        .insert(name.clone(), build_job());
    h.forge.jobs.store(0, Ordering::SeqCst);
    name
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_runner_s_job_is_re_run_once() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    *h.forge.rerun_answer.lock().expect("lock") = RerunOutcome::Requested;
    let mut spec = gitea_spec(0, 2, 600);
    spec["rerun"] = serde_json::json!({"maxPerHour": 5});
    let runner = busy_runner(&h, "pool", spec).await;
    h.disrupted_runner_pod(&runner, "EvictionByEvictionAPI").await;
    h.fail_job(&runner).await;
    wait_for("the job re-run at the forge", || async {
        !h.forge.reruns.lock().expect("lock").is_empty()
    })
    .await;
    wait_for("a JobRerun Event naming the runner and how it died", || async {
        h.notes("JobRerun")
            .await
            .iter()
            .any(|n| n.contains(&runner) && n.contains("EvictionByEvictionAPI") && n.contains("run 77"))
    })
    .await;
    let reruns = h.forge.reruns.lock().expect("lock").clone();
    assert_eq!(reruns, vec![(runner.clone(), build_job())], "once, for that job");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_spec_rerun_the_killed_job_is_reported_not_re_run() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    *h.forge.rerun_answer.lock().expect("lock") = RerunOutcome::Requested;
    let runner = busy_runner(&h, "pool", gitea_spec(0, 2, 600)).await;
    h.disrupted_runner_pod(&runner, "PreemptionByScheduler").await;
    h.fail_job(&runner).await;
    wait_for("a JobNotRerun Event pointing at spec.rerun", || async {
        h.notes("JobNotRerun")
            .await
            .iter()
            .any(|n| n.contains(&runner) && n.contains("spec.rerun"))
    })
    .await;
    assert!(h.forge.reruns.lock().expect("lock").is_empty());
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_that_failed_on_its_own_is_never_re_run() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    *h.forge.rerun_answer.lock().expect("lock") = RerunOutcome::Requested;
    let mut spec = gitea_spec(0, 2, 600);
    spec["rerun"] = serde_json::json!({"maxPerHour": 5});
    let runner = busy_runner(&h, "pool", spec).await;
    h.failed_runner_pod(&runner, 1).await;
    h.fail_job(&runner).await;
    wait_for("the failed runner Job removed", || async {
        h.runner_jobs("pool")
            .await
            .iter()
            .all(|j| j.metadata.name.as_deref() != Some(runner.as_str()))
    })
    .await;
    assert!(h.forge.reruns.lock().expect("lock").is_empty());
    assert!(h.notes("JobNotRerun").await.is_empty());
    assert!(h.notes("JobRerun").await.is_empty());
    h.stop().await;
}
