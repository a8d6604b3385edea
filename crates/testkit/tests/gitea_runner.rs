//! The simulated ephemeral act_runner against the Gitea fake.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

use std::collections::BTreeMap;
use std::time::Duration;

use forgerunner_testkit::gitea::{
    Conclusion, FakeConfig, FakeScope, GiteaFakeHandle, JobState, RunnerOptions, runner_behaviour,
};
use forgerunner_testkit::sim::behaviour::PodInfo;
use tokio_util::sync::CancellationToken;

fn pod(fake: &GiteaFakeHandle, name: &str, labels: &str, token: &str) -> PodInfo {
    PodInfo {
        namespace: "ns".into(),
        name: name.into(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        image: "gitea/act_runner:latest".into(),
        command: Vec::new(),
        args: Vec::new(),
        env: BTreeMap::from([
            ("GITEA_INSTANCE_URL".to_string(), fake.url()),
            ("GITEA_RUNNER_REGISTRATION_TOKEN".to_string(), token.to_string()),
            ("GITEA_RUNNER_NAME".to_string(), name.to_string()),
            ("GITEA_RUNNER_LABELS".to_string(), labels.to_string()),
            ("GITEA_RUNNER_EPHEMERAL".to_string(), "1".to_string()),
        ]),
        files: BTreeMap::new(),
        cancel: CancellationToken::new(),
        container: "runner".into(),
        init: false,
        scratch: Default::default(),
    }
}

async fn start() -> GiteaFakeHandle {
    GiteaFakeHandle::start(FakeConfig::default()).await.unwrap()
}

#[tokio::test]
async fn takes_one_matching_job_and_leaves() {
    let fake = start().await;
    let token = fake.registration_token(&FakeScope::Owner("acme".into()));
    let other = fake.queue_job("elsewhere/x", &["linux"]);
    let gpu = fake.queue_job("acme/app", &["gpu"]);
    let mine = fake.queue_job("acme/app", &["linux", "x64"]);
    let b = runner_behaviour(fake.clone(), RunnerOptions::default());
    let code = tokio::time::timeout(
        Duration::from_secs(30),
        b.run(pod(&fake, "grp-abcde", "linux:host,x64:docker://node:20", &token)),
    )
    .await
    .unwrap();
    assert_eq!(code, 0);
    let job = fake.job(mine).unwrap();
    assert_eq!(job.state, JobState::Done(Conclusion::Success));
    assert_eq!(job.runner_name, "grp-abcde");
    assert_eq!(job.runner_labels, ["linux", "x64"], "names only are registered");
    assert_eq!(fake.job(gpu).unwrap().state, JobState::Waiting);
    assert_eq!(fake.job(other).unwrap().state, JobState::Waiting, "out of scope");
    assert!(
        fake.runners().is_empty(),
        "ephemeral runner deleted after its job"
    );
}

#[tokio::test]
async fn idle_runner_polls_until_its_pod_is_deleted() {
    let fake = start().await;
    let token = fake.registration_token(&FakeScope::Global);
    let b = runner_behaviour(fake.clone(), RunnerOptions::default());
    let p = pod(&fake, "grp-idle0", "linux", &token);
    let cancel = p.cancel.clone();
    let task = tokio::spawn(async move { b.run(p).await });
    assert!(
        fake.wait_until(Duration::from_secs(20), |_, r| r.len() == 1)
            .await
    );
    cancel.cancel();
    let code = tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(code, 143);
    // Gitea keeps a runner that never got a job: the operator must delete it.
    assert_eq!(fake.runners()[0].name, "grp-idle0");
}

#[tokio::test]
async fn cancelled_job_ends_the_runner() {
    let fake = start().await;
    let token = fake.registration_token(&FakeScope::Global);
    let id = fake.queue_job("o/r", &["linux"]);
    let opts = RunnerOptions {
        work: Duration::from_secs(600),
        ..RunnerOptions::default()
    };
    let b = runner_behaviour(fake.clone(), opts);
    let p = pod(&fake, "grp-canc0", "linux", &token);
    let task = tokio::spawn(async move { b.run(p).await });
    assert!(
        fake.wait_until(Duration::from_secs(20), |j, _| j[0].state == JobState::Running)
            .await
    );
    fake.cancel_job(id);
    let code = tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(code, 0);
    assert_eq!(fake.job(id).unwrap().state, JobState::Done(Conclusion::Cancelled));
    assert!(fake.runners().is_empty());
}

#[tokio::test]
async fn bad_registration_token_fails_the_container() {
    let fake = start().await;
    let opts = RunnerOptions {
        register_attempts: 2,
        register_retry: Duration::from_millis(10),
        ..RunnerOptions::default()
    };
    let b = runner_behaviour(fake.clone(), opts);
    assert_eq!(b.run(pod(&fake, "grp-bad00", "linux", "wrong")).await, 1);
    assert!(fake.runners().is_empty());
}
