//! End to end: capacity is never lost silently. The real `forgerunner` binary against the fake
//! API server, the cluster simulator and the Gitea fake:
//! - a runner image that cannot be pulled turns the group `Degraded=True ImagePullFailed`, with
//!   an Event quoting Kubernetes, and creation backs off instead of churning; fixing the image
//!   recovers the group;
//! - a warm pool (`minRunners: 3`) outlives two idle timeouts without a single recreation;
//! - an image change replaces the idle runners and leaves the busy one to finish its job.
#![cfg(feature = "gitea")]

#[allow(dead_code)]
mod common;

use std::time::{Duration, Instant};

use common::e2e::start_operator;
use common::gitea_world::{condition, gitea_world as world, patch_spec, wait_or_fail};
use common::group::Group;
use forgerunner_core::runner_job::TEMPLATE_HASH_ANNOTATION;
use forgerunner_sandbox::world::groups::GITEA_RUNNER_IMAGES;
use forgerunner_sandbox::world::watch::JobWatch;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};

const BROKEN_REGISTRY: &str = "registry.invalid/";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unpullable_image_degrades_backs_off_and_recovers() {
    const NS: &str = "e2e-pull";
    let world = world(NS, Duration::from_millis(300)).await;
    world
        .sim
        .fail_image_pulls(BROKEN_REGISTRY)
        .expect("pull failures");
    let watch = JobWatch::start(world.client.clone(), NS);
    Group::gitea("pull")
        .host_label("pull")
        .max(3)
        .idle_timeout(600)
        .startup_timeout(90)
        .spec(serde_json::json!({"image": format!("{BROKEN_REGISTRY}runner:1")}))
        .create(&world, NS)
        .await;
    let started = Instant::now();
    let op = start_operator(&world, "gitea", "forgerunner-e2e-pull");
    let jobs: Vec<i64> = (0..3)
        .map(|_| world.queue_gitea_job(&["pull"]).expect("queue").id)
        .collect();

    wait_or_fail(&op, "Degraded=True ImagePullFailed", || async {
        condition(&world, NS, "pull", "Degraded")
            .await
            .is_some_and(|(s, r, _)| s == "True" && r == "ImagePullFailed")
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(90),
        "reported within the startup timeout, not by it: {:?}",
        started.elapsed()
    );
    let (_, _, message) = condition(&world, NS, "pull", "Degraded").await.expect("degraded");
    assert!(
        message.contains("Back-off pulling image"),
        "quotes Kubernetes: {message}"
    );
    let events: Api<Event> = Api::namespaced(world.client.clone(), NS);
    wait_or_fail(&op, "an ImagePullFailed Event quoting the kubelet", || async {
        events.list(&ListParams::default()).await.is_ok_and(|l| {
            l.items.iter().any(|e| {
                e.reason.as_deref() == Some("ImagePullFailed")
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains("Back-off pulling image"))
            })
        })
    })
    .await;

    // Once the failures reach the throttle, at most one runner exists at a time, and creation
    // waits out the backoff instead of churning.
    wait_or_fail(&op, "five failures in a row", || async {
        world
            .group(NS, "pull")
            .await
            .ok()
            .and_then(|g| g.status)
            .is_some_and(|s| s.failed_runners >= 5)
    })
    .await;
    let created_before = watch.group("pull").created.len();
    let window = Instant::now();
    while window.elapsed() < Duration::from_secs(12) {
        let active = watch.group("pull").active.len();
        assert!(active <= 1, "{active} runners at once while backing off");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let created_in_window = watch.group("pull").created.len() - created_before;
    assert!(
        created_in_window <= 1,
        "{created_in_window} runners created in 12 s of a 40 s+ backoff"
    );
    let tally = watch.group("pull");
    assert!(tally.peak_active <= 3, "peak {} > maxRunners", tally.peak_active);

    // Fixing the image (a spec change) resets the backoff; the jobs run and Degraded clears.
    patch_spec(&world, NS, "pull", serde_json::json!({"image": null})).await;
    wait_or_fail(&op, "every job done after the fix", || async {
        world.gitea_progress(&["pull"]).done == jobs.len()
    })
    .await;
    wait_or_fail(&op, "Degraded=False", || async {
        condition(&world, NS, "pull", "Degraded")
            .await
            .is_some_and(|(s, _, _)| s == "False")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_pool_outlives_two_idle_timeouts() {
    const NS: &str = "e2e-warm";
    const IDLE_TIMEOUT: u32 = 4;
    let world = world(NS, Duration::from_millis(300)).await;
    let watch = JobWatch::start(world.client.clone(), NS);
    Group::gitea("warm")
        .host_label("warm")
        .min(3)
        .max(5)
        .idle_timeout(IDLE_TIMEOUT)
        .create(&world, NS)
        .await;
    let op = start_operator(&world, "gitea", "forgerunner-e2e-warm");
    wait_or_fail(&op, "three idle runners registered", || async {
        world.gitea_progress(&["warm"]).registered_runners == 3
            && world
                .group(NS, "warm")
                .await
                .ok()
                .and_then(|g| g.status)
                .is_some_and(|s| s.idle_runners == 3)
    })
    .await;
    let first: Vec<String> = watch.group("warm").created.into_iter().map(|(n, _)| n).collect();
    assert_eq!(first.len(), 3);

    // Two idle timeouts and a margin; the same three runners must still be there.
    let window = Instant::now();
    while window.elapsed() < Duration::from_secs(u64::from(IDLE_TIMEOUT) * 2 + 3) {
        let tally = watch.group("warm");
        assert_eq!(
            tally.created.len(),
            3,
            "a warm runner was recreated: {:?}",
            tally.created
        );
        assert_eq!(tally.active.len(), 3, "a warm runner left: {:?}", tally.active);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(world.gitea_progress(&["warm"]).registered_runners, 3);
    assert!(
        op.output().iter().all(|l| !l.contains("IdleTimeout")),
        "no idle-timeout removal"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_change_replaces_idle_runners_and_busy_ones_finish() {
    const NS: &str = "e2e-roll";
    let world = world(NS, Duration::from_secs(15)).await;
    let watch = JobWatch::start(world.client.clone(), NS);
    Group::gitea("roll")
        .host_label("roll")
        .min(2)
        .max(4)
        .idle_timeout(600)
        .create(&world, NS)
        .await;
    let op = start_operator(&world, "gitea", "forgerunner-e2e-roll");
    let job = world.queue_gitea_job(&["roll"]).expect("queue").id;

    // One runner busy with the long job, two idle beside it.
    let busy_runner = || async {
        let jobs = world.runner_jobs(NS, Some("roll")).await.unwrap_or_default();
        jobs.into_iter()
            .find(|j| {
                j.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.get("forgerunner.dev/busy").is_some_and(|v| v == "true"))
            })
            .and_then(|j| j.metadata.name)
    };
    wait_or_fail(&op, "one busy and two idle runners", || async {
        busy_runner().await.is_some()
            && world
                .group(NS, "roll")
                .await
                .ok()
                .and_then(|g| g.status)
                .is_some_and(|s| s.idle_runners == 2 && s.running_jobs == 1)
    })
    .await;
    let busy = busy_runner().await.expect("busy runner");
    let before: Vec<String> = watch.group("roll").active.into_iter().collect();
    let old_hash = world
        .runner_jobs(NS, Some("roll"))
        .await
        .expect("jobs")
        .into_iter()
        .find_map(|j| j.metadata.annotations?.get(TEMPLATE_HASH_ANNOTATION).cloned())
        .expect("hash");

    patch_spec(
        &world,
        NS,
        "roll",
        serde_json::json!({"image": format!("{}:next", GITEA_RUNNER_IMAGES[0])}),
    )
    .await;
    wait_or_fail(
        &op,
        "the idle runners replaced by two of the new spec",
        || async {
            let jobs = world.runner_jobs(NS, Some("roll")).await.unwrap_or_default();
            let old_idle_left = jobs.iter().any(|j| {
                let name = j.metadata.name.clone().unwrap_or_default();
                name != busy && before.contains(&name)
            });
            let new = jobs
                .iter()
                .filter(|j| {
                    j.metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(TEMPLATE_HASH_ANNOTATION))
                        .is_some_and(|h| *h != old_hash)
                })
                .count();
            !old_idle_left && new == 2
        },
    )
    .await;
    let tally = watch.group("roll");
    assert!(
        !tally.succeeded.contains(&busy) && !tally.failed.contains(&busy),
        "the busy runner is still at work while the idle ones were replaced"
    );
    assert!(
        world
            .runner_jobs(NS, Some("roll"))
            .await
            .expect("jobs")
            .iter()
            .any(|j| j.metadata.name.as_deref() == Some(busy.as_str())),
        "the busy runner's Job was not deleted"
    );
    wait_or_fail(&op, "the busy runner finishing its job", || async {
        world.gitea_progress(&["roll"]).done == 1 && watch.group("roll").succeeded.contains(&busy)
    })
    .await;
    let _ = job;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restricted_namespace_refuses_dind_and_says_so() {
    const NS: &str = "e2e-psa";
    let world = world(NS, Duration::from_millis(300)).await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(world.client.clone());
    namespaces
        .patch(
            NS,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}
            })),
        )
        .await
        .expect("label namespace");
    Group::gitea("psa")
        .host_label("psa")
        .max(2)
        .idle_timeout(600)
        .spec(serde_json::json!({"containerMode": {"type": "dind"}}))
        .create(&world, NS)
        .await;
    let op = start_operator(&world, "gitea", "forgerunner-e2e-psa");
    let jobs: Vec<i64> = (0..2)
        .map(|_| world.queue_gitea_job(&["psa"]).expect("queue").id)
        .collect();

    wait_or_fail(&op, "Degraded=True PodRejected", || async {
        condition(&world, NS, "psa", "Degraded")
            .await
            .is_some_and(|(s, r, m)| s == "True" && r == "PodRejected" && m.contains("violates PodSecurity"))
    })
    .await;
    let events: Api<Event> = Api::namespaced(world.client.clone(), NS);
    let warned = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .any(|e| {
            e.reason.as_deref() == Some("PodSecurityRestricted")
                && e.note.as_deref().is_some_and(|n| n.contains("privileged"))
        });
    assert!(
        warned,
        "a PodSecurityRestricted Event names the privileged sidecar"
    );

    // Without the privileged sidecar the default pod passes, and the jobs run.
    patch_spec(&world, NS, "psa", serde_json::json!({"containerMode": null})).await;
    wait_or_fail(&op, "every job done without dind", || async {
        world.gitea_progress(&["psa"]).done == jobs.len()
    })
    .await;
}
