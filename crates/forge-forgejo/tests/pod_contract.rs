//! The default pod, as built, played by the testkit's simulated forgejo-runner against the
//! fake Forgejo: the v15 one-job shape (bound and unbound) and the 11–14 register shape (init
//! container, then one-job from the state file) must each take a job and exit 0.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{ctx, fake, forge};
use forgerunner_core::crd::ForgejoScope;
use forgerunner_core::forge::{Forge, RunnerCredentials};
use forgerunner_testkit::forgejo::{ADMIN_TOKEN, RunnerOptions, runner_behaviour};
use forgerunner_testkit::sim::PodInfo;
use forgerunner_testkit::sim::behaviour::PodScratch;
use k8s_openapi::api::core::v1::{Container, PodSpec};
use tokio_util::sync::CancellationToken;

/// What the kubelet would hand the runner container: `$(VAR)` expanded from the env, the
/// Secret's keys mounted as files.
fn pod_info(
    c: &forgerunner_core::forge::GroupContext,
    f: &dyn Forge,
    name: &str,
    creds: &RunnerCredentials,
) -> PodInfo {
    let pod = f.default_runner_pod(&c.group, name, name, creds);
    container_info(
        &pod,
        &pod.containers[0],
        false,
        name,
        creds,
        &PodScratch::default(),
    )
}

/// What the kubelet would hand container `k` of `pod`: `$(VAR)` expanded from the env, the
/// Secret's keys mounted as files where `k` mounts them, `emptyDir` mounts over `scratch`.
fn container_info(
    pod: &PodSpec,
    k: &Container,
    init: bool,
    name: &str,
    creds: &RunnerCredentials,
    scratch: &PodScratch,
) -> PodInfo {
    let env: BTreeMap<String, String> = k
        .env
        .iter()
        .flatten()
        .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
        .collect();
    let expand = |s: &String| {
        env.iter()
            .fold(s.clone(), |acc, (k, v)| acc.replace(&format!("$({k})"), v))
    };
    let mut files = BTreeMap::new();
    let mut dirs = Vec::new();
    for mount in k.volume_mounts.iter().flatten() {
        let vol = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == mount.name)
            .unwrap();
        if vol.empty_dir.is_some() {
            dirs.push((mount.mount_path.clone(), vol.name.clone()));
        }
        for item in vol.secret.iter().flat_map(|s| s.items.iter().flatten()) {
            let value = creds.secret_data[&item.key].expose().to_string();
            files.insert(format!("{}/{}", mount.mount_path, item.path), value);
        }
    }
    PodInfo {
        namespace: "ns".into(),
        name: name.into(),
        labels: BTreeMap::new(),
        annotations: creds.annotations.clone(),
        image: k.image.clone().unwrap(),
        command: k.command.iter().flatten().map(expand).collect(),
        args: k.args.iter().flatten().map(expand).collect(),
        env,
        files,
        cancel: CancellationToken::new(),
        container: k.name.clone(),
        init,
        scratch: scratch.with_mounts(dirs),
    }
}

fn opts() -> RunnerOptions {
    RunnerOptions {
        work: Duration::from_millis(50),
        ..RunnerOptions::default()
    }
}

#[tokio::test]
async fn v15_pods_take_their_job_and_exit_zero() {
    let fake = fake("15.0.3+gitea-1.22.0").await;
    let a = fake.queue_job("o/r", "a", &["debian"]);
    let b = fake.queue_job("o/r", "b", &["debian"]);
    let f = forge();
    let c = ctx(
        "web",
        &fake.url(),
        ForgejoScope::Global,
        None,
        &["debian:docker://node:22"],
        ADMIN_TOKEN,
    );
    let bound = f.runner_credentials(&c, "web-aaaaa").await.unwrap();
    assert!(bound.env.contains_key("FORGEJO_JOB_HANDLE"));
    // The second runner's handle is dropped: the pod then has no `--handle` and takes any
    // matching job, as a warm (unbound) runner does.
    let mut unbound = f.runner_credentials(&c, "web-bbbbb").await.unwrap();
    unbound.env.remove("FORGEJO_JOB_HANDLE");
    unbound
        .annotations
        .remove(forgerunner_forgejo::state::JOB_HANDLE_ANNOTATION);
    let sim = runner_behaviour(fake.clone(), opts());
    let code = sim.run(pod_info(&c, &f, "web-aaaaa", &bound)).await;
    assert_eq!(code, 0);
    let job_a = fake.job(a).unwrap();
    assert_eq!(
        job_a.status.as_str(),
        "success",
        "the bound runner ran the oldest job"
    );
    let code = sim.run(pod_info(&c, &f, "web-bbbbb", &unbound)).await;
    assert_eq!(code, 0);
    assert_eq!(
        fake.job(b).unwrap().status.as_str(),
        "success",
        "the unbound one took any job"
    );
    assert!(
        fake.runners().is_empty(),
        "ephemeral runners are gone after their task"
    );
}

#[tokio::test]
async fn register_pod_on_14_takes_a_job_and_exits_zero() {
    let fake = fake("14.0.4+gitea-1.22.0").await;
    let a = fake.queue_job("o/r", "a", &["debian"]);
    let f = forge();
    let c = ctx(
        "web",
        &fake.url(),
        ForgejoScope::Global,
        None,
        &["debian:docker://node:22"],
        ADMIN_TOKEN,
    );
    let creds = f.runner_credentials(&c, "web-aaaaa").await.unwrap();
    let pod = f.default_runner_pod(&c.group, "web-aaaaa", "web-aaaaa", &creds);
    // The kubelet's order: the `register` init container, then the runner, sharing /data.
    let scratch = PodScratch::default();
    let sim = runner_behaviour(fake.clone(), opts());
    let init = &pod.init_containers.as_ref().unwrap()[0];
    assert_eq!(init.name, "register");
    let reg = container_info(&pod, init, true, "web-aaaaa", &creds, &scratch);
    assert!(
        reg.files
            .contains_key("/var/run/forgejo-runner/registration-token")
    );
    assert_eq!(sim.run(reg).await, 0);
    let main = container_info(&pod, &pod.containers[0], false, "web-aaaaa", &creds, &scratch);
    assert!(main.files.is_empty(), "the runner container sees no Secret file");
    assert_eq!(sim.run(main).await, 0);
    assert_eq!(fake.job(a).unwrap().status.as_str(), "success");
    assert_eq!(fake.runners()[0].name, "web-aaaaa");
}
