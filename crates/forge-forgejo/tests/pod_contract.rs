//! The default pod, as built, played by the testkit's simulated forgejo-runner against the
//! fake Forgejo: the v15 one-job shape (bound and unbound) and the 11–14 register shape (init
//! container, then one-job from the state file) must each take a job and exit 0. And validation
//! agrees with the runner: every spec `Forge::describe` accepts makes a pod that starts and runs
//! its job, every docker or lxc setup it refuses would have made pods that cannot.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on broken setup

mod common;

use forgerunner_core::forge::RunnerRequest;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{ctx, fake, forge};
use forgerunner_core::crd::{ContainerMode, ContainerModeType, ForgejoScope};
use forgerunner_core::embedded::Embedded;
use forgerunner_core::forge::{Forge, GroupContext, RunnerCredentials};
use forgerunner_core::runner_job::{RunnerJobInput, build_runner_job};
use forgerunner_forgejo::forge::ForgejoForge;
use forgerunner_http::pod_checks::default_pod;
use forgerunner_testkit::forgejo::{ADMIN_TOKEN, Conclusion, JobStatus, RunnerOptions, runner_behaviour};
use forgerunner_testkit::sim::PodInfo;
use forgerunner_testkit::sim::behaviour::PodScratch;
use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec, PodTemplateSpec};
use tokio_util::sync::CancellationToken;

/// What the kubelet would hand the runner container: `$(VAR)` expanded from the env, the
/// Secret's keys mounted as files.
fn pod_info(
    c: &forgerunner_core::forge::GroupContext,
    f: &ForgejoForge,
    name: &str,
    creds: &RunnerCredentials,
) -> PodInfo {
    let pod = default_pod(f, &c.group, name, name, creds, None);
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
        // The tests' ConfigMaps all hold the runner config below.
        for item in vol.config_map.iter().flat_map(|c| c.items.iter().flatten()) {
            files.insert(
                format!("{}/{}", mount.mount_path, item.path),
                RUNNER_CONFIG.to_string(),
            );
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

/// The forgejo-runner config the tests' ConfigMaps hold: labels the `--label` flags override.
const RUNNER_CONFIG: &str = "runner:\n  labels: [\"gpu:host\"]\n  timeout: 1h\n";

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
    let mut c = ctx(
        "web",
        &fake.url(),
        ForgejoScope::Global,
        None,
        &["debian:docker://node:22"],
        ADMIN_TOKEN,
    );
    // Docker labels need a daemon: forgejo-runner's `configCheck` exits at start without one.
    with_dind(&mut c);
    let mut books = forgerunner_core::reconcile::ledger::Ledger::default();
    let bound = common::register_in_a_pass(&f, &c, &mut books, &[], "web-aaaaa", None).await;
    assert!(bound.env.contains_key("FORGEJO_JOB_HANDLE"));
    // The second runner is bound to no job: its pod has no `--handle` and takes any matching
    // job, as a warm runner does.
    let unbound = f
        .open(&c.key)
        .register(&c, &RunnerRequest::unbound("web-bbbbb", None))
        .await
        .unwrap();
    assert!(!unbound.env.contains_key("FORGEJO_JOB_HANDLE"));
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
    let mut c = ctx(
        "web",
        &fake.url(),
        ForgejoScope::Global,
        None,
        &["debian:docker://node:22"],
        ADMIN_TOKEN,
    );
    // Docker labels need a daemon: forgejo-runner's `configCheck` exits at start without one.
    with_dind(&mut c);
    let creds = f
        .open(&c.key)
        .register(&c, &RunnerRequest::unbound("web-aaaaa", None))
        .await
        .unwrap();
    let pod = default_pod(&f, &c.group, "web-aaaaa", "web-aaaaa", &creds, None);
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

/// `containerMode: dind` on a test group.
fn with_dind(c: &mut GroupContext) {
    c.group.spec.container_mode = Some(ContainerMode {
        type_: ContainerModeType::Dind,
        kubernetes_mode_work_volume_claim: None,
    });
}

/// A template whose runner container sets `DOCKER_HOST` (a daemon the user runs elsewhere).
fn docker_host_template(value: &str) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: None,
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "runner".into(),
                env: Some(vec![EnvVar {
                    name: "DOCKER_HOST".into(),
                    value: Some(value.into()),
                    value_from: None,
                }]),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
    }
}

/// Validation and forgejo-runner agree on Docker and LXC. Upstream (forgejo-runner 12.8.x):
/// `internal/pkg/labels/labels.go` `Parse` makes a label without a scheme docker;
/// `internal/app/cmd/job.go` `runJob` calls `internal/app/cmd/daemon.go` `configCheck` before it
/// declares or polls, which exits 1 ("daemon Docker Engine socket not found and docker_host
/// config was invalid") when a label is docker and neither `DOCKER_HOST` nor a socket is there;
/// `configCheck` ignores `lxc`, so an `lxc` label's job is taken and fails (no LXC in the image).
/// For each setup the group's whole runner pod (default pod, container mode, template) is played
/// by the simulated runner: a spec `Forge::describe` accepts must run its job to success.
#[tokio::test]
async fn validation_accepts_exactly_the_setups_forgejo_runner_can_run() {
    struct Case {
        labels: &'static [&'static str],
        dind: bool,
        docker_host: Option<&'static str>,
        valid: bool,
    }
    let cases = [
        // The Forgejo idiom: a bare label is docker://node:22-bookworm.
        Case {
            labels: &["ubuntu-latest"],
            dind: false,
            docker_host: None,
            valid: false,
        },
        Case {
            labels: &["ubuntu-latest:docker://node:22", "linux:host"],
            dind: false,
            docker_host: None,
            valid: false,
        },
        Case {
            labels: &["ubuntu-latest:lxc://debian:bookworm"],
            dind: false,
            docker_host: None,
            valid: false,
        },
        Case {
            labels: &["ubuntu-latest:lxc"],
            dind: true,
            docker_host: None,
            valid: false,
        },
        Case {
            labels: &["ubuntu-latest"],
            dind: true,
            docker_host: None,
            valid: true,
        },
        Case {
            labels: &["ubuntu-latest:docker://node:22", "linux:host"],
            dind: true,
            docker_host: None,
            valid: true,
        },
        Case {
            labels: &["ubuntu-latest:host"],
            dind: false,
            docker_host: None,
            valid: true,
        },
        Case {
            labels: &["ubuntu-latest"],
            dind: false,
            docker_host: Some("tcp://docker.ci.svc:2375"),
            valid: true,
        },
    ];
    let f = forge();
    for (i, case) in cases.iter().enumerate() {
        // A fresh Forgejo per case, so a job a failed case left waiting binds no later runner.
        let fake = fake("15.0.3+gitea-1.22.0").await;
        let sim = runner_behaviour(fake.clone(), opts());
        let job = fake.queue_job("o/r", "build", &["ubuntu-latest"]);
        let mut c = ctx(
            "web",
            &fake.url(),
            ForgejoScope::Global,
            None,
            case.labels,
            ADMIN_TOKEN,
        );
        c.group.metadata.uid = Some("uid-web".into());
        if case.dind {
            with_dind(&mut c);
        }
        if let Some(host) = case.docker_host {
            c.group.spec.template = Some(Embedded::new(&docker_host_template(host)));
        }
        let what = format!(
            "case {i}: labels {:?}, dind {}, template DOCKER_HOST {:?}",
            case.labels, case.dind, case.docker_host
        );
        // The runner pod the reconciler would create, played by the simulated forgejo-runner.
        let name = "web-abcde";
        let creds = f
            .open(&c.key)
            .register(&c, &RunnerRequest::unbound(name, None))
            .await
            .unwrap();
        let default_pod = default_pod(&f, &c.group, name, name, &creds, None);
        let runner_job = build_runner_job(RunnerJobInput {
            group: &c.group,
            runner_name: name,
            default_pod,
            credentials: &creds,
        })
        .expect("runner job");
        let pod = runner_job.spec.and_then(|s| s.template.spec).expect("pod");
        let runner = pod
            .containers
            .iter()
            .find(|k| k.name == "runner")
            .expect("runner");
        let info = container_info(&pod, runner, false, name, &creds, &PodScratch::default());
        let code = sim.run(info).await;
        let status = fake.job(job).unwrap().status;
        let runs = code == 0 && status == JobStatus::Done(Conclusion::Success);
        assert_eq!(runs, case.valid, "{what}: exit {code}, job {status:?}");
        let violations = f.describe(&c.group.spec).err().unwrap_or_default();
        assert_eq!(
            violations.is_empty(),
            runs,
            "{what}: validation says {violations:?}, but forgejo-runner exits {code} and the job is {status:?}"
        );
    }
}

/// forgejo-runner reads its config only from `--config` (`internal/app/cmd/cmd.go`); neither it
/// nor its image knows `CONFIG_FILE` (the Gitea runner image's convention, which users carry
/// over). A template that sets `CONFIG_FILE` and mounts the file must make the runner read it, and the
/// runner must still take its job: on 15 the `--label` flags win over the config's
/// `runner.labels` (`internal/pkg/config/config.go` `New`).
#[tokio::test]
async fn a_config_file_from_the_template_is_read_by_the_runner() {
    use k8s_openapi::api::core::v1::{ConfigMapVolumeSource, KeyToPath, Volume, VolumeMount};
    let fake = fake("15.0.3+gitea-1.22.0").await;
    let job = fake.queue_job("o/r", "build", &["debian"]);
    let f = forge();
    let mut c = ctx(
        "web",
        &fake.url(),
        ForgejoScope::Global,
        None,
        &["debian:host"],
        ADMIN_TOKEN,
    );
    c.group.metadata.uid = Some("uid-web".into());
    let tpl = PodTemplateSpec {
        metadata: None,
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "runner".into(),
                env: Some(vec![EnvVar {
                    name: "CONFIG_FILE".into(),
                    value: Some("/etc/forgejo-runner/config.yaml".into()),
                    value_from: None,
                }]),
                volume_mounts: Some(vec![VolumeMount {
                    name: "runner-config".into(),
                    mount_path: "/etc/forgejo-runner".into(),
                    ..VolumeMount::default()
                }]),
                ..Container::default()
            }],
            volumes: Some(vec![Volume {
                name: "runner-config".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: "runner-config".into(),
                    items: Some(vec![KeyToPath {
                        key: "config.yaml".into(),
                        path: "config.yaml".into(),
                        ..KeyToPath::default()
                    }]),
                    ..ConfigMapVolumeSource::default()
                }),
                ..Volume::default()
            }]),
            ..PodSpec::default()
        }),
    };
    c.group.spec.template = Some(Embedded::new(&tpl));
    let name = "web-abcde";
    let creds = f
        .open(&c.key)
        .register(&c, &RunnerRequest::unbound(name, None))
        .await
        .unwrap();
    let default_pod = default_pod(&f, &c.group, name, name, &creds, None);
    let runner_job = build_runner_job(RunnerJobInput {
        group: &c.group,
        runner_name: name,
        default_pod,
        credentials: &creds,
    })
    .expect("runner job");
    let pod = runner_job.spec.and_then(|s| s.template.spec).expect("pod");
    let runner = pod.containers.iter().find(|k| k.name == "runner").unwrap();
    let info = container_info(&pod, runner, false, name, &creds, &PodScratch::default());
    let at = info.args.iter().position(|a| a == "--config").expect("--config");
    assert_eq!(info.args[at + 1], "/etc/forgejo-runner/config.yaml");
    let sim = runner_behaviour(fake.clone(), opts());
    assert_eq!(sim.run(info).await, 0);
    assert_eq!(
        fake.job(job).unwrap().status,
        JobStatus::Done(Conclusion::Success)
    );
    assert_eq!(fake.tasks_for_job(job)[0].runner_labels, ["debian"]);
}
