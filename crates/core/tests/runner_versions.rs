//! Runner version currency end to end: a forge that tells which runner release it serves gets
//! a `RunnerOutdated` condition on groups whose image is behind it, with a Warning Event naming
//! the image; a forge that tells nothing gets no such condition.

mod common;

use forgerunner_core::forge::GroupKey;
use forgerunner_core::runner_version::{RunnerRelease, RunnerVersions};

use common::*;

fn versions(image: RunnerRelease, served: Option<RunnerRelease>) -> RunnerVersions {
    RunnerVersions {
        image: Some((format!("ghcr.io/actions/actions-runner:{image}"), Some(image))),
        served,
        ..RunnerVersions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_behind_the_served_release_is_outdated_until_it_is_updated() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    *h.forge.versions.lock().expect("versions") =
        versions(RunnerRelease(2, 329, 0), Some(RunnerRelease(2, 331, 0)));
    h.create_group("old", gitea_spec(0, 2, 600)).await;

    wait_for("RunnerOutdated=True naming the image and the release", || async {
        h.condition("old", "RunnerOutdated")
            .await
            .is_some_and(|(status, reason, message)| {
                status == "True"
                    && reason == "NewerReleaseServed"
                    && message.contains("actions-runner:2.329.0")
                    && message.contains("2.331.0")
            })
    })
    .await;
    wait_for("a Warning Event of the transition", || async {
        h.notes("NewerReleaseServed")
            .await
            .iter()
            .any(|n| n.contains("actions-runner:2.329.0"))
    })
    .await;

    // The image is updated (the forge now sees the served release).
    *h.forge.versions.lock().expect("versions") =
        versions(RunnerRelease(2, 331, 0), Some(RunnerRelease(2, 331, 0)));
    h.trigger.wake(GroupKey {
        namespace: NS.into(),
        name: "old".into(),
    });
    wait_for("RunnerOutdated=False", || async {
        h.condition("old", "RunnerOutdated")
            .await
            .is_some_and(|(status, reason, _)| status == "False" && reason == "ReleaseCurrent")
    })
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forge_that_serves_no_release_gets_no_outdated_condition() {
    let h = Harness::start(true).await;
    h.create_secret("creds").await;
    *h.forge.versions.lock().expect("versions") = versions(RunnerRelease(0, 2, 11), None);
    h.create_group("quiet", gitea_spec(0, 2, 600)).await;
    wait_for("the group reconciled", || async {
        h.condition("quiet", "Ready")
            .await
            .is_some_and(|(status, _, _)| status == "True")
    })
    .await;
    assert_eq!(h.condition("quiet", "RunnerOutdated").await, None);
    h.stop().await;
}
