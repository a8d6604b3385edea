//! End to end, M2 of the security review: a namespace member with the stock `edit` role (Jobs
//! create and patch, no access to the forge token) creates a Job labelled as a group's runner,
//! annotated with the Forgejo runner id of someone else's runner, whose pod never starts. The
//! real `forgerunner` binary must not take it for the group's runner: not retire it as a runner
//! left without its Secret, not remove it as stuck, and above all never delete the victim runner
//! at the forge. The group keeps working meanwhile: a job is served and its runner cleaned up.
#![cfg(feature = "forgejo")]

#[allow(dead_code)]
mod common;

use std::time::Duration;

use common::e2e::{fail_with_output, start_operator, start_world};
use forgerunner_sandbox::world::groups::GroupSize;
use forgerunner_sandbox::world::{GROUP_LABEL, WorldOptions};
use forgerunner_testkit::forgejo::{Conclusion, FakeScope, JobStatus};
use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use kube::api::PostParams;

const NS: &str = "unowned-jobs";
const GROUP: &str = "guard";
const LABEL: &str = "guard-linux";
/// The stray Job's pod image: it never pulls.
const NEVER_PULLS: &str = "registry.invalid/never";
/// Every wait; generous for a busy 2-core machine.
const DEADLINE: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_labelled_job_without_the_group_as_owner_never_deletes_a_runner() {
    let opts = WorldOptions {
        github: false,
        gitea: false,
        forgejo: true,
        ..WorldOptions::default()
    };
    let world = start_world(opts, NS).await;
    let fake = world.forgejo.clone().expect("forgejo fake");
    world
        .sim
        .fail_image_pulls(NEVER_PULLS)
        .expect("image pull failures");
    // Someone else's runner at the group's scope (the world's organization), registered by hand.
    let victim = fake.add_runner(FakeScope::Owner("acme".into()), "build-box-1", &[LABEL], false);

    // The stray Job: our labels, the victim's id, no ownerReference; its pod never starts.
    let stray: Job = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "guard-strai", "namespace": NS, "labels": {
            "app.kubernetes.io/managed-by": "forgerunner",
            GROUP_LABEL: GROUP,
            "forgerunner.dev/forge": "forgejo",
        }, "annotations": {"forgerunner.dev/forgejo-runner-id": victim.id.to_string()}},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "runner", "image": format!("{NEVER_PULLS}:1")}
        ]}}},
    }))
    .expect("stray job");
    let jobs: Api<Job> = Api::namespaced(world.client.clone(), NS);
    jobs.create(&PostParams::default(), &stray)
        .await
        .expect("create the stray Job");

    let size = GroupSize {
        min: 0,
        max: 2,
        idle_timeout_seconds: Some(5),
        startup_timeout_seconds: Some(5),
        scale_down_delay_seconds: Some(0),
    };
    world
        .add_forgejo_group(NS, GROUP, &[LABEL], &size, 1)
        .await
        .expect("group");
    let op = start_operator(&world, "forgejo", "forgerunner-e2e-unowned-jobs");

    // The control: the group serves a job, and its own runner is deregistered and its Job
    // deleted afterwards. By then the operator has run its first pass (which retires pending
    // runners without a Secret) and more, past the stray pod's pull failure.
    let queued = world.queue_forgejo_job(&[LABEL]).expect("queue a job").id;
    let ran = forgerunner_sandbox::world::wait_until(DEADLINE, "the job done, its runner gone", || async {
        let done = fake
            .job(queued)
            .is_some_and(|j| j.status == JobStatus::Done(Conclusion::Success));
        let own_rows = fake.runners().iter().filter(|r| r.id != victim.id).count();
        let own_jobs = world
            .runner_jobs(NS, Some(GROUP))
            .await
            .map(|js| {
                js.iter()
                    .filter(|j| j.metadata.name.as_deref() != Some("guard-strai"))
                    .count()
            })
            .unwrap_or(usize::MAX);
        done && own_rows == 0 && own_jobs == 0
    })
    .await;
    if ran.is_err() {
        fail_with_output(&op, "timed out waiting for the job done and its runner gone");
    }
    if fake.runner(victim.id).is_none() || fake.deleted_runners().contains(&victim.id) {
        fail_with_output(&op, "the victim runner was deleted at Forgejo");
    }
    assert!(
        jobs.get_opt("guard-strai").await.expect("get").is_some(),
        "the stray Job was deleted"
    );
    // The status of a later pass counts no runner: the stray Job is none of the group's.
    let counted =
        forgerunner_sandbox::world::wait_until(DEADLINE, "no current runner in the status", || async {
            world
                .group(NS, GROUP)
                .await
                .ok()
                .and_then(|g| g.status)
                .is_some_and(|s| s.current_runners == 0 && s.pending_runners == 0)
        })
        .await;
    if counted.is_err() {
        fail_with_output(&op, "the stray Job is counted as a runner");
    }
    if fake.runner(victim.id).is_none() || fake.deleted_runners().contains(&victim.id) {
        fail_with_output(&op, "the victim runner was deleted at Forgejo");
    }
}
