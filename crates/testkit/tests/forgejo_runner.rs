//! The simulated forgejo-runner played directly with hand-made pods of both shapes the
//! operator makes (one-job on Forgejo 15, register on 11–14) against the Forgejo fake.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

use std::collections::BTreeMap;
use std::time::Duration;

use forgerunner_testkit::forgejo::{
    Conclusion, FakeConfig, FakeScope, ForgejoFakeHandle, JobStatus, REGISTRATION_TOKEN_FILE,
    RUNNER_IMAGE_PREFIX, RunnerOptions, STATE_FILE, TOKEN_FILE, runner_behaviour,
};
use forgerunner_testkit::sim::behaviour::{PodInfo, PodScratch};
use tokio_util::sync::CancellationToken;

const DEADLINE: Duration = Duration::from_secs(30);
/// What `containerMode: dind` gives the runner container. Docker labels need a daemon:
/// forgejo-runner's `runJob` (`internal/app/cmd/job.go`) runs `configCheck`
/// (`internal/app/cmd/daemon.go`) first and exits 1 without `DOCKER_HOST` or a socket.
const DIND_DOCKER_HOST: &str = "unix:///run/dind/docker.sock";

fn pod(command: &[&str], args: Vec<String>, env: &[(&str, String)], files: &[(&str, String)]) -> PodInfo {
    PodInfo {
        namespace: "ns".into(),
        name: "grp-abcde".into(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        image: format!("{RUNNER_IMAGE_PREFIX}:12.8.2"),
        command: command.iter().map(|s| s.to_string()).collect(),
        args,
        env: env.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
        files: files.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
        cancel: CancellationToken::new(),
        container: "runner".into(),
        init: false,
        scratch: Default::default(),
    }
}

/// A v15 one-job pod for a REST-created ephemeral runner; its runner id too.
fn one_job_pod(
    fake: &ForgejoFakeHandle,
    handle: Option<&str>,
    wait: bool,
    labels: &[&str],
) -> (PodInfo, i64) {
    let r = fake.add_runner(FakeScope::Global, "grp-abcde", &[], true);
    let mut args = vec!["one-job".to_string()];
    if wait {
        args.push("--wait".into());
    }
    for (k, v) in [("--url", fake.url()), ("--uuid", r.uuid.clone())] {
        args.extend([k.to_string(), v]);
    }
    args.push(format!("--token-url=file:{TOKEN_FILE}"));
    if let Some(h) = handle {
        args.extend(["--handle".to_string(), h.to_string()]);
    }
    for l in labels {
        args.extend(["--label".to_string(), l.to_string()]);
    }
    let p = pod(
        &["forgejo-runner"],
        args,
        &[("DOCKER_HOST", DIND_DOCKER_HOST.to_string())],
        &[(TOKEN_FILE, format!("{}\n", r.token))],
    );
    (p, r.id)
}

async fn run(fake: &ForgejoFakeHandle, opts: RunnerOptions, p: PodInfo) -> i32 {
    let b = runner_behaviour(fake.clone(), opts);
    tokio::time::timeout(DEADLINE, b.run(p))
        .await
        .expect("runner finished")
}

async fn v15() -> ForgejoFakeHandle {
    ForgejoFakeHandle::start(FakeConfig::default()).await.unwrap()
}

#[tokio::test]
async fn one_job_runs_exactly_its_handle() {
    let fake = v15().await;
    let other = fake.queue_job("o/r", "first", &["debian"]);
    let mine = fake.queue_job("o/r", "second", &["debian", "arm"]);
    let handle = fake.job(mine).unwrap().handle;
    let labels = ["debian:docker://node:22", "arm:host"];
    let (p, runner) = one_job_pod(&fake, Some(&handle), true, &labels);
    assert_eq!(run(&fake, RunnerOptions::default(), p).await, 0);
    assert_eq!(
        fake.job(mine).unwrap().status,
        JobStatus::Done(Conclusion::Success)
    );
    assert_eq!(fake.job(other).unwrap().status, JobStatus::Waiting);
    let tasks = fake.tasks_for_job(mine);
    assert_eq!(tasks.len(), 1);
    assert_eq!(
        (tasks[0].runner_id, tasks[0].runner_labels.clone()),
        (runner, vec!["debian".into(), "arm".into()])
    );
    assert!(
        fake.runner(runner).is_none(),
        "ephemeral runner deleted after its result"
    );
}

#[tokio::test]
async fn one_job_without_handle_takes_any_and_without_wait_exits_2() {
    let fake = v15().await;
    let (p, runner) = one_job_pod(&fake, None, false, &["debian"]);
    assert_eq!(run(&fake, RunnerOptions::default(), p).await, 2, "nothing to do");
    assert!(
        fake.runner(runner).is_some(),
        "never-tasked ephemeral runner stays"
    );
    let job = fake.queue_job("o/r", "j", &["debian"]);
    let (p, _) = one_job_pod(&fake, None, false, &["debian"]);
    assert_eq!(run(&fake, RunnerOptions::default(), p).await, 0);
    assert_eq!(
        fake.job(job).unwrap().status,
        JobStatus::Done(Conclusion::Success)
    );
}

#[tokio::test]
async fn cancelled_pod_exits_143_and_forge_cancel_exits_0() {
    let fake = v15().await;
    let (p, runner) = one_job_pod(&fake, Some("no-such-handle"), true, &["debian"]);
    let cancel = p.cancel.clone();
    let b = runner_behaviour(fake.clone(), RunnerOptions::default());
    let task = tokio::spawn(async move { b.run(p).await });
    assert!(
        fake.wait_until(DEADLINE, |_, r| r
            .iter()
            .any(|r| r.id == runner && r.labels == ["debian"]))
            .await
    );
    cancel.cancel();
    assert_eq!(tokio::time::timeout(DEADLINE, task).await.unwrap().unwrap(), 143);

    let job = fake.queue_job("o/r", "long", &["debian"]);
    let handle = fake.job(job).unwrap().handle;
    let (p, runner) = one_job_pod(&fake, Some(&handle), true, &["debian"]);
    let opts = RunnerOptions {
        work: Duration::from_secs(600),
        ..RunnerOptions::default()
    };
    let b = runner_behaviour(fake.clone(), opts);
    let task = tokio::spawn(async move { b.run(p).await });
    assert!(
        fake.wait_until(DEADLINE, |j, _| j
            .iter()
            .any(|j| j.id == job && j.status == JobStatus::Running))
            .await
    );
    assert!(fake.cancel_job(job));
    assert_eq!(tokio::time::timeout(DEADLINE, task).await.unwrap().unwrap(), 0);
    assert_eq!(
        fake.job(job).unwrap().status,
        JobStatus::Done(Conclusion::Cancelled)
    );
    assert!(
        fake.runner(runner).is_none(),
        "its final report deleted the ephemeral runner"
    );
}

#[tokio::test]
async fn bad_pods_exit_1() {
    let fake = v15().await;
    let (mut p, _) = one_job_pod(&fake, None, true, &["debian"]);
    p.files.clear();
    assert_eq!(run(&fake, RunnerOptions::default(), p).await, 1, "no token file");
    let (mut p, _) = one_job_pod(&fake, None, true, &["x:vm://y"]);
    assert_eq!(
        run(&fake, RunnerOptions::default(), p.clone()).await,
        1,
        "bad label scheme"
    );
    p.args.retain(|a| !a.starts_with("--label") && a != "x:vm://y");
    p.files.insert(TOKEN_FILE.into(), "wrong".into());
    assert_eq!(
        run(&fake, RunnerOptions::default(), p).await,
        1,
        "rejected credentials"
    );
}

#[tokio::test]
async fn register_shape_on_forgejo_14() {
    let fake = ForgejoFakeHandle::start(FakeConfig::version("14.0.4+gitea-1.22.0"))
        .await
        .unwrap();
    fake.add_org("acme", &[]);
    let token = fake.registration_token(&FakeScope::Owner("acme".into()));
    let elsewhere = fake.queue_job("other/r", "x", &["debian"]);
    let job = fake.queue_job("acme/app", "build", &["debian"]);
    let env = [
        ("DOCKER_HOST", DIND_DOCKER_HOST.to_string()),
        ("FORGEJO_INSTANCE_URL", fake.url()),
        ("FORGEJO_RUNNER_NAME", "grp-reg01".to_string()),
        (
            "FORGEJO_RUNNER_LABELS",
            "debian:docker://node:22,self-hosted:host".to_string(),
        ),
    ];
    let script = vec!["exec forgejo-runner register --no-interactive …".to_string()];
    let mut reg = pod(
        &["/bin/sh", "-c"],
        script,
        &env,
        &[(REGISTRATION_TOKEN_FILE, token)],
    );
    reg.container = "register".into();
    reg.init = true;
    reg.scratch = PodScratch::default().with_mounts(vec![("/data".into(), "data".into())]);
    // The main container: `one-job --wait` from the state file, no token anywhere.
    let mut main = pod(
        &["forgejo-runner"],
        vec!["one-job".into(), "--wait".into()],
        &env,
        &[],
    );
    main.scratch = reg.scratch.with_mounts(vec![("/data".into(), "data".into())]);
    assert_eq!(
        run(&fake, RunnerOptions::default(), main.clone()).await,
        1,
        "no state file yet"
    );
    assert_eq!(run(&fake, RunnerOptions::default(), reg.clone()).await, 0);
    let state: serde_json::Value = serde_json::from_str(&main.read_scratch(STATE_FILE).unwrap()).unwrap();
    assert_eq!(state["name"], "grp-reg01");
    assert_eq!(state["address"], fake.url());
    assert_eq!(
        state["labels"],
        serde_json::json!(["debian:docker://node:22", "self-hosted:host"])
    );
    assert_eq!(
        fake.job(job).unwrap().status,
        JobStatus::Waiting,
        "register takes no job"
    );
    assert_eq!(run(&fake, RunnerOptions::default(), main).await, 0);
    assert_eq!(
        fake.job(job).unwrap().status,
        JobStatus::Done(Conclusion::Success)
    );
    assert_eq!(
        fake.job(elsewhere).unwrap().status,
        JobStatus::Waiting,
        "out of scope"
    );
    let runners = fake.runners();
    assert_eq!(
        runners.len(),
        1,
        "register on 11–14 is not ephemeral: the row stays"
    );
    assert_eq!(
        (runners[0].name.as_str(), runners[0].labels.clone()),
        ("grp-reg01", vec!["debian".into(), "self-hosted".into()])
    );
    assert_eq!(fake.tasks_for_job(job)[0].runner_name, "grp-reg01");
}

/// forgejo-runner reads a config only from `--config`/`-c` (`internal/app/cmd/cmd.go`, a root
/// persistent flag); `config.FromFile` (`internal/pkg/config/config.go`) fails when the file
/// cannot be opened; `connectionFromArguments` (`internal/app/cmd/args.go`) refuses a config
/// with `server.connections` next to the connection flags; and `config.New` gives a connection
/// the config's `runner.labels` only when it has no labels, so `--label` flags win.
#[tokio::test]
async fn one_job_reads_its_config_file() {
    const CONFIG: &str = "/etc/forgejo-runner/config.yaml";
    let fake = v15().await;
    let job = fake.queue_job("o/r", "j", &["debian"]);
    let with_config = |fake: &ForgejoFakeHandle, yaml: Option<&str>| {
        let (mut p, id) = one_job_pod(fake, None, true, &["debian:host"]);
        p.args.insert(1, "--config".into());
        p.args.insert(2, CONFIG.into());
        if let Some(y) = yaml {
            p.files.insert(CONFIG.into(), y.into());
        }
        (p, id)
    };
    let (p, _) = with_config(&fake, None);
    assert_eq!(run(&fake, RunnerOptions::default(), p).await, 1, "no such file");
    let conflict = "server:\n  connections:\n    x:\n      url: https://example.org\n";
    let (p, _) = with_config(&fake, Some(conflict));
    assert_eq!(
        run(&fake, RunnerOptions::default(), p).await,
        1,
        "two connections"
    );
    let yaml = "runner:\n  labels: [\"gpu:host\"]\n  timeout: 1h\n";
    let (p, id) = with_config(&fake, Some(yaml));
    assert_eq!(run(&fake, RunnerOptions::default(), p).await, 0);
    assert_eq!(
        fake.job(job).unwrap().status,
        JobStatus::Done(Conclusion::Success)
    );
    assert_eq!(
        fake.tasks_for_job(job)[0].runner_labels,
        ["debian"],
        "the --label flags win over runner.labels"
    );
    assert!(fake.runner(id).is_none());
}

/// `register` with a config whose `runner.labels` is set registers those labels, not
/// `--labels` (`internal/app/cmd/register.go` `registerNoInteractive`: "Labels from command
/// will be ignored, use labels defined in config file.").
#[tokio::test]
async fn register_takes_the_configs_labels() {
    const CONFIG: &str = "/etc/forgejo-runner/config.yaml";
    let fake = ForgejoFakeHandle::start(FakeConfig::version("14.0.4+gitea-1.22.0"))
        .await
        .unwrap();
    let token = fake.registration_token(&FakeScope::Global);
    let env = [
        ("FORGEJO_INSTANCE_URL", fake.url()),
        ("FORGEJO_RUNNER_NAME", "grp-reg01".to_string()),
        ("FORGEJO_RUNNER_LABELS", "debian:host".to_string()),
        ("CONFIG_FILE", CONFIG.to_string()),
    ];
    let script = vec!["exec forgejo-runner register --no-interactive …".to_string()];
    let files = [
        (REGISTRATION_TOKEN_FILE, token),
        (CONFIG, "runner:\n  labels: [\"gpu:host\"]\n".to_string()),
    ];
    let mut reg = pod(&["/bin/sh", "-c"], script.clone(), &env, &files);
    reg.container = "register".into();
    reg.init = true;
    reg.scratch = PodScratch::default().with_mounts(vec![("/data".into(), "data".into())]);
    assert_eq!(run(&fake, RunnerOptions::default(), reg.clone()).await, 0);
    let state: serde_json::Value = serde_json::from_str(&reg.read_scratch(STATE_FILE).unwrap()).unwrap();
    assert_eq!(state["labels"], serde_json::json!(["gpu:host"]));
    let mut missing = pod(&["/bin/sh", "-c"], script, &env, &files[..1]);
    missing.scratch = PodScratch::default().with_mounts(vec![("/data".into(), "data".into())]);
    assert_eq!(
        run(&fake, RunnerOptions::default(), missing).await,
        1,
        "no such file"
    );
}
