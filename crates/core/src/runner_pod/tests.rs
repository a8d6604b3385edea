use k8s_openapi::api::core::v1::{Container, EmptyDirVolumeSource, EnvVar, PodSpec, Volume, VolumeMount};

use super::dind::*;
use super::*;

const RUN_AS: RunAs = RunAs {
    user: 1001,
    group: 123,
};

const GITHUB_LIKE: RunnerPodProfile<'static> = RunnerPodProfile {
    run_as: RUN_AS,
    home: None,
    dind: DindProfile {
        work_dir: "/home/runner/_work",
        externals_dir: Some("/home/runner/externals"),
        runner_env: &[("RUNNER_WAIT_FOR_DOCKER_IN_SECONDS", "120")],
    },
};

fn runner_pod() -> PodSpec {
    PodSpec {
        containers: vec![Container {
            name: "runner".into(),
            image: Some("runner-image:1".into()),
            ..Container::default()
        }],
        ..PodSpec::default()
    }
}

/// A pod whose runner already has a volume at its work directory (Gitea's and Forgejo's `/data`).
fn data_pod() -> PodSpec {
    let mut p = runner_pod();
    p.containers[0].volume_mounts = Some(vec![VolumeMount {
        name: "data".into(),
        mount_path: "/data".into(),
        ..VolumeMount::default()
    }]);
    p.volumes = Some(vec![Volume {
        name: "data".into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }]);
    p
}

fn env<'a>(c: &'a Container, name: &str) -> Option<&'a EnvVar> {
    c.env.iter().flatten().find(|e| e.name == name)
}

fn mount_of<'a>(c: &'a Container, path: &str) -> Option<&'a str> {
    c.volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == path)
        .map(|m| m.name.as_str())
}

fn init<'a>(p: &'a PodSpec, name: &str) -> &'a Container {
    p.init_containers
        .iter()
        .flatten()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("init container {name}"))
}

fn volume_names(p: &PodSpec) -> Vec<&str> {
    p.volumes.iter().flatten().map(|v| v.name.as_str()).collect()
}

#[test]
fn no_mode_is_hardened_and_restricted() {
    let mut p = runner_pod();
    finish_default_pod(&mut p, &GITHUB_LIKE, None);
    assert_eq!(restricted_violations(&p), []);
    assert_eq!(p.init_containers, None);
    assert_eq!(env(&p.containers[0], "DOCKER_HOST"), None);
    assert_eq!(p.automount_service_account_token, Some(false));
}

#[test]
fn dind_is_a_privileged_native_sidecar_sharing_socket_and_work() {
    let mut p = runner_pod();
    finish_default_pod(&mut p, &GITHUB_LIKE, Some(ContainerModeType::Dind));
    let names: Vec<&str> = p
        .init_containers
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        names,
        ["init-dind-externals", "dind"],
        "externals are copied before the daemon starts"
    );

    let dind = init(&p, "dind");
    assert_eq!(dind.image.as_deref(), Some("docker:28-dind"));
    assert_eq!(dind.restart_policy.as_deref(), Some("Always"));
    assert_eq!(
        dind.args.clone().unwrap_or_default(),
        [
            "dockerd",
            "--host=unix:///run/dind/docker.sock",
            "--host=unix:///var/run/docker.sock",
            "--group=123"
        ]
    );
    let probe = dind.startup_probe.as_ref().and_then(|p| p.exec.as_ref());
    assert_eq!(
        probe.and_then(|e| e.command.clone()),
        Some(vec!["docker".to_owned(), "info".to_owned()])
    );
    let sc = dind.security_context.as_ref().expect("dind context");
    assert_eq!(
        (sc.privileged, sc.run_as_user, sc.run_as_non_root),
        (Some(true), Some(0), Some(false))
    );
    assert_eq!(mount_of(dind, "/run/dind"), Some("dind-sock"));
    assert_eq!(mount_of(dind, "/home/runner/_work"), Some("work"));
    assert_eq!(mount_of(dind, "/home/runner/externals"), Some("dind-externals"));
    assert_eq!(mount_of(dind, "/var/lib/docker"), Some("dind-storage"));

    let copy = init(&p, "init-dind-externals");
    assert_eq!(copy.image.as_deref(), Some("runner-image:1"));
    assert_eq!(mount_of(copy, "/dind-externals"), Some("dind-externals"));

    let runner = &p.containers[0];
    assert_eq!(
        env(runner, "DOCKER_HOST").and_then(|e| e.value.as_deref()),
        Some("unix:///run/dind/docker.sock")
    );
    assert_eq!(
        env(runner, "RUNNER_WAIT_FOR_DOCKER_IN_SECONDS").and_then(|e| e.value.as_deref()),
        Some("120")
    );
    assert_eq!(mount_of(runner, "/run/dind"), Some("dind-sock"));
    assert_eq!(mount_of(runner, "/home/runner/_work"), Some("work"));
    let mut vols = volume_names(&p);
    vols.sort_unstable();
    assert_eq!(vols, ["dind-externals", "dind-sock", "dind-storage", "work"]);
    for v in p.volumes.iter().flatten() {
        assert!(v.empty_dir.is_some(), "{} is an emptyDir", v.name);
    }
}

#[test]
fn dind_breaks_restricted_only_through_the_sidecar() {
    let mut p = runner_pod();
    finish_default_pod(&mut p, &GITHUB_LIKE, Some(ContainerModeType::Dind));
    let v = restricted_violations(&p);
    assert!(!v.is_empty());
    assert!(v.iter().any(|v| v.rule == PssRule::Privileged));
    assert!(
        v.iter().all(|v| v.field.starts_with("spec.initContainers[dind]")),
        "only the daemon may break the profile: {v:?}"
    );
    // The runner and the externals copy are hardened.
    for c in [&p.containers[0], init(&p, "init-dind-externals")] {
        let sc = c.security_context.as_ref().expect("context");
        assert_eq!(sc.allow_privilege_escalation, Some(false), "{}", c.name);
        assert_eq!(sc.privileged, None, "{}", c.name);
    }
}

#[test]
fn dind_reuses_the_volume_at_the_work_dir() {
    let profile = RunnerPodProfile {
        run_as: RunAs {
            user: 1000,
            group: 1000,
        },
        home: Some("/data"),
        dind: DindProfile {
            work_dir: "/data",
            externals_dir: None,
            runner_env: &[],
        },
    };
    let mut p = data_pod();
    finish_default_pod(&mut p, &profile, Some(ContainerModeType::Dind));
    let names: Vec<&str> = p
        .init_containers
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["dind"]);
    assert_eq!(mount_of(init(&p, "dind"), "/data"), Some("data"));
    let runner = &p.containers[0];
    let at_data: Vec<_> = runner
        .volume_mounts
        .iter()
        .flatten()
        .filter(|m| m.mount_path == "/data")
        .collect();
    assert_eq!(at_data.len(), 1, "no second mount at /data");
    let mut vols = volume_names(&p);
    vols.sort_unstable();
    assert_eq!(vols, ["data", "dind-sock", "dind-storage"]);
    assert!(
        init(&p, "dind")
            .args
            .iter()
            .flatten()
            .any(|a| a == "--group=1000")
    );
    assert_eq!(
        env(runner, "HOME").and_then(|e| e.value.as_deref()),
        Some("/data")
    );
}

#[test]
fn env_the_forge_set_is_kept() {
    let mut p = runner_pod();
    p.containers[0].env = Some(vec![EnvVar {
        name: "DOCKER_HOST".into(),
        value: Some("unix:///elsewhere.sock".into()),
        value_from: None,
    }]);
    finish_default_pod(&mut p, &GITHUB_LIKE, Some(ContainerModeType::Dind));
    let hosts: Vec<_> = p.containers[0]
        .env
        .iter()
        .flatten()
        .filter(|e| e.name == "DOCKER_HOST")
        .collect();
    assert_eq!(hosts.len(), 1);
    assert_eq!(hosts[0].value.as_deref(), Some("unix:///elsewhere.sock"));
}

#[test]
fn kubernetes_modes_get_only_the_hardening_here() {
    for mode in [
        ContainerModeType::Kubernetes,
        ContainerModeType::KubernetesNoVolume,
    ] {
        let mut p = runner_pod();
        finish_default_pod(&mut p, &GITHUB_LIKE, Some(mode));
        assert_eq!(p.init_containers, None);
        assert_eq!(restricted_violations(&p), []);
    }
}

#[test]
fn ephemeral_work_volume_defaults_to_one_gibibyte_rwo() {
    let v = ephemeral_volume("work", None);
    let claim = v
        .ephemeral
        .and_then(|e| e.volume_claim_template)
        .expect("claim template");
    assert_eq!(claim.spec.access_modes, Some(vec!["ReadWriteOnce".to_owned()]));
    let size = claim
        .spec
        .resources
        .and_then(|r| r.requests)
        .and_then(|r| r.get("storage").cloned());
    assert_eq!(size.map(|q| q.0), Some("1Gi".to_owned()));
    assert_eq!(claim.spec.storage_class_name, None, "the default class");

    let mut custom = default_work_volume_claim();
    custom.spec.storage_class_name = Some("fast".into());
    let v = ephemeral_volume("work", Some(&custom));
    let class = v
        .ephemeral
        .and_then(|e| e.volume_claim_template)
        .and_then(|t| t.spec.storage_class_name);
    assert_eq!(class.as_deref(), Some("fast"));
}
