//! The simulated ephemeral act_runner against the Gitea fake.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

use std::collections::BTreeMap;
use std::time::Duration;

use std::sync::Arc;

use forgerunner_testkit::gitea::{
    Conclusion, FakeConfig, FakeScope, GiteaFakeHandle, JobState, REGISTRATION_TOKEN_FILE, RunnerOptions,
    STATE_FILE, runner_behaviour,
};
use forgerunner_testkit::sim::behaviour::{ContainerBehaviour, PodInfo, PodScratch};
use tokio_util::sync::CancellationToken;

/// The `register` init container of a runner pod; its scratch volumes are the pod's.
fn register_pod(fake: &GiteaFakeHandle, name: &str, labels: &str, token: &str) -> PodInfo {
    PodInfo {
        namespace: "ns".into(),
        name: name.into(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        image: "gitea/runner:1.0.8".into(),
        command: vec![
            "sh".into(),
            "-c".into(),
            "exec gitea-runner register --no-interactive --ephemeral --instance \"$GITEA_INSTANCE_URL\" ..."
                .into(),
        ],
        args: Vec::new(),
        env: BTreeMap::from([
            ("GITEA_INSTANCE_URL".to_string(), fake.url()),
            ("GITEA_RUNNER_NAME".to_string(), name.to_string()),
            ("GITEA_RUNNER_LABELS".to_string(), labels.to_string()),
        ]),
        files: BTreeMap::from([(REGISTRATION_TOKEN_FILE.to_string(), format!("{token}\n"))]),
        cancel: CancellationToken::new(),
        container: "register".into(),
        init: true,
        scratch: PodScratch::default().with_mounts(vec![("/data".into(), "data".into())]),
    }
}

/// The `runner` container of the same pod: no token anywhere, the same `/data`.
fn daemon_pod(register: &PodInfo) -> PodInfo {
    let mut env = register.env.clone();
    env.retain(|k, _| !k.contains("TOKEN"));
    PodInfo {
        command: vec!["gitea-runner".into(), "daemon".into()],
        env,
        files: BTreeMap::new(),
        container: "runner".into(),
        init: false,
        scratch: register
            .scratch
            .with_mounts(vec![("/data".into(), "data".into())]),
        ..register.clone()
    }
}

/// Runs register, then (if it succeeded) the daemon, as the kubelet would; the daemon's exit
/// code, or register's when it failed.
async fn run_pod(b: &Arc<dyn ContainerBehaviour>, register: PodInfo) -> i32 {
    let daemon = daemon_pod(&register);
    match b.run(register).await {
        0 => b.run(daemon).await,
        code => code,
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
        run_pod(
            &b,
            register_pod(&fake, "grp-abcde", "linux:host,x64:docker://node:20", &token),
        ),
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
    let p = register_pod(&fake, "grp-idle0", "linux", &token);
    let cancel = p.cancel.clone();
    let task = tokio::spawn(async move { run_pod(&b, p).await });
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
    let p = register_pod(&fake, "grp-canc0", "linux", &token);
    let task = tokio::spawn(async move { run_pod(&b, p).await });
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
    assert_eq!(
        run_pod(&b, register_pod(&fake, "grp-bad00", "linux", "wrong")).await,
        1
    );
    assert!(fake.runners().is_empty());
}

#[tokio::test]
async fn register_writes_the_state_file_and_the_daemon_runs_from_it_alone() {
    let fake = start().await;
    let token = fake.registration_token(&FakeScope::Global);
    let id = fake.queue_job("o/r", &["linux"]);
    let b = runner_behaviour(fake.clone(), RunnerOptions::default());
    let reg = register_pod(&fake, "grp-state", "linux:host", &token);
    let daemon = daemon_pod(&reg);
    assert_eq!(b.run(reg.clone()).await, 0);
    let state: serde_json::Value = serde_json::from_str(&reg.read_scratch(STATE_FILE).unwrap()).unwrap();
    assert_eq!(state["name"], "grp-state");
    assert_eq!(state["ephemeral"], true);
    assert_eq!(state["address"], fake.url().trim_end_matches('/'));
    assert_eq!(state["labels"], serde_json::json!(["linux:host"]));
    assert!(state["id"].as_i64().is_some() && !state["uuid"].as_str().unwrap().is_empty());
    assert_ne!(
        state["token"],
        token.as_str(),
        "the runner's own token, not the registration token"
    );
    assert_eq!(fake.runners().len(), 1);
    // The daemon container has neither the token file nor any token env.
    assert!(daemon.files.is_empty() && daemon.env.keys().all(|k| !k.contains("TOKEN")));
    let code = tokio::time::timeout(Duration::from_secs(30), b.run(daemon))
        .await
        .unwrap();
    assert_eq!(code, 0);
    assert_eq!(fake.job(id).unwrap().state, JobState::Done(Conclusion::Success));
    assert!(
        fake.runners().is_empty(),
        "ephemeral runner deleted after its job"
    );
}

#[tokio::test]
async fn daemon_without_a_state_file_fails() {
    let fake = start().await;
    let b = runner_behaviour(fake.clone(), RunnerOptions::default());
    let reg = register_pod(&fake, "grp-nostate", "linux", "unused");
    assert_eq!(b.run(daemon_pod(&reg)).await, 1);
    assert!(fake.runners().is_empty());
}

/// act_runner reads a config file only when its command line names one: `--config`/`-c` is a
/// persistent flag of the root command (`internal/app/cmd/cmd.go`), and only the image's
/// entrypoint script turns `CONFIG_FILE` into it (`scripts/run.sh`: `CONFIG_ARG="--config
/// ${CONFIG_FILE}"`), which a pod with its own command never runs. A named file must be there
/// (`internal/pkg/config/config.go` `LoadDefault`: "open config file"), and its
/// `runner.labels`, when set, replace `--labels` (`internal/app/cmd/register.go`
/// `registerNoInteractive`) and the state file's labels (`daemon.go` `runDaemon`).
#[tokio::test]
async fn the_config_file_is_read_only_when_the_command_names_it() {
    const PATH: &str = "/etc/gitea-runner/config.yaml";
    let config = "runner:\n  labels:\n    - gpu:host\n";
    let fake = start().await;
    let token = fake.registration_token(&FakeScope::Global);
    let b = runner_behaviour(fake.clone(), RunnerOptions::default());
    let labels_of = |name: &str| {
        fake.runners()
            .into_iter()
            .find(|r| r.name == name)
            .map(|r| r.labels)
    };
    let with_config = |mut p: PodInfo| {
        p.env.insert("CONFIG_FILE".into(), PATH.into());
        p.files.insert(PATH.into(), config.into());
        p
    };

    // `CONFIG_FILE` alone changes nothing.
    let reg = with_config(register_pod(&fake, "grp-env00", "linux:host", &token));
    assert_eq!(b.run(reg).await, 0);
    assert_eq!(labels_of("grp-env00").unwrap(), ["linux"]);

    // Named on the command line: read, and its labels win over `--labels`.
    let mut reg = with_config(register_pod(&fake, "grp-cfg00", "linux:host", &token));
    reg.command[2].push_str(" --config \"$CONFIG_FILE\"");
    let mut daemon = daemon_pod(&reg);
    daemon.command = vec![
        "gitea-runner".into(),
        "daemon".into(),
        "--config".into(),
        PATH.into(),
    ];
    daemon.files.insert(PATH.into(), config.into());
    assert_eq!(b.run(reg).await, 0);
    assert_eq!(labels_of("grp-cfg00").unwrap(), ["gpu"]);
    let gpu = fake.queue_job("o/r", &["gpu"]);
    let code = tokio::time::timeout(Duration::from_secs(30), b.run(daemon))
        .await
        .unwrap();
    assert_eq!(code, 0);
    let job = fake.job(gpu).unwrap();
    assert_eq!(
        (job.state, job.runner_name.as_str()),
        (JobState::Done(Conclusion::Success), "grp-cfg00")
    );

    // Named but not mounted: the container fails before registering.
    let mut reg = register_pod(&fake, "grp-nocfg", "linux:host", &token);
    reg.command[2].push_str(&format!(" --config {PATH}"));
    assert_eq!(b.run(reg).await, 1);
    assert!(labels_of("grp-nocfg").is_none());
}
