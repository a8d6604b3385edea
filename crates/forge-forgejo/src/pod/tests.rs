use forgerunner_core::forge::SecretValue;

use super::*;

fn creds(key: &str, env: &[(&str, &str)]) -> RunnerCredentials {
    RunnerCredentials {
        secret_data: BTreeMap::from([(key.to_string(), SecretValue::new("s3cr3t"))]),
        env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        annotations: BTreeMap::new(),
    }
}

fn labels() -> Vec<String> {
    vec!["debian:docker://node:22".into(), "self-hosted:host".into()]
}

#[test]
fn v15_bound_pod_contract() {
    let c = creds(
        TOKEN_KEY,
        &[
            (ENV_INSTANCE_URL, "https://code.example.com"),
            (ENV_RUNNER_UUID, "uuid-1"),
            (ENV_JOB_HANDLE, "handle-1"),
        ],
    );
    let pod = default_runner_pod(&labels(), None, "g-abcde", &c);
    let k = &pod.containers[0];
    assert_eq!(k.name, "runner");
    assert_eq!(k.image.as_deref(), Some(RUNNER_IMAGE));
    assert_eq!(k.command.as_deref(), Some(&["forgejo-runner".to_string()][..]));
    let want: Vec<String> = [
        "one-job",
        "--wait",
        "--url",
        "$(FORGEJO_INSTANCE_URL)",
        "--uuid",
        "$(FORGEJO_RUNNER_UUID)",
        "--token-url",
        "file:/var/run/forgejo-runner/token",
        "--handle",
        "$(FORGEJO_JOB_HANDLE)",
        "--label",
        "debian:docker://node:22",
        "--label",
        "self-hosted:host",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(k.args.as_ref(), Some(&want));
    let env = k.env.as_ref().expect("env");
    let get = |n: &str| env.iter().find(|e| e.name == n).and_then(|e| e.value.clone());
    assert_eq!(get(ENV_INSTANCE_URL).as_deref(), Some("https://code.example.com"));
    assert_eq!(get(ENV_RUNNER_UUID).as_deref(), Some("uuid-1"));
    assert_eq!(get(ENV_JOB_HANDLE).as_deref(), Some("handle-1"));
    let mount = &k.volume_mounts.as_ref().expect("mounts")[0];
    assert_eq!(
        (mount.mount_path.as_str(), mount.read_only),
        ("/var/run/forgejo-runner", Some(true))
    );
    let vol = &pod.volumes.as_ref().expect("volumes")[0];
    assert_eq!(vol.name, mount.name);
    let sec = vol.secret.as_ref().expect("secret volume");
    assert_eq!(sec.secret_name.as_deref(), Some("g-abcde"));
    let item = &sec.items.as_ref().expect("items")[0];
    assert_eq!((item.key.as_str(), item.path.as_str()), ("token", "token"));
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert!(!format!("{pod:?}").contains("s3cr3t"), "no secret inlined");
}

#[test]
fn v15_unbound_pod_has_no_handle() {
    let c = creds(TOKEN_KEY, &[(ENV_INSTANCE_URL, "u"), (ENV_RUNNER_UUID, "x")]);
    let pod = default_runner_pod(&labels(), Some("my/runner:1"), "g-abcde", &c);
    let k = &pod.containers[0];
    assert_eq!(k.image.as_deref(), Some("my/runner:1"));
    let args = k.args.as_ref().expect("args");
    assert!(
        !args
            .iter()
            .any(|a| a == "--handle" || a.contains("FORGEJO_JOB_HANDLE"))
    );
    assert_eq!(&args[..2], ["one-job", "--wait"]);
}

#[test]
fn token_path_pod_contract() {
    let env = register_env("https://code.example.com/", "g-abcde", &labels());
    let c = RunnerCredentials {
        env,
        ..creds(REGISTRATION_TOKEN_KEY, &[])
    };
    let pod = default_runner_pod(&labels(), None, "g-abcde", &c);
    let init = pod.init_containers.as_ref().expect("init containers");
    assert_eq!(init.len(), 1);
    let reg = &init[0];
    assert_eq!(reg.name, REGISTER_CONTAINER);
    assert_eq!(
        reg.command.as_deref(),
        Some(&["/bin/sh".to_string(), "-c".to_string()][..])
    );
    let script = &reg.args.as_ref().expect("args")[0];
    assert!(script.contains(
        r#"forgejo-runner register --no-interactive ${CONFIG_FILE:+--config "$CONFIG_FILE"} --instance "$FORGEJO_INSTANCE_URL" --token "$(cat /var/run/forgejo-runner/registration-token)" --name "$FORGEJO_RUNNER_NAME" --labels "$FORGEJO_RUNNER_LABELS""#
    ));
    assert_eq!(reg.working_dir.as_deref(), Some(DATA_DIR));
    let env = reg.env.as_ref().expect("env");
    let get = |n: &str| env.iter().find(|e| e.name == n).and_then(|e| e.value.clone());
    assert_eq!(
        get(ENV_RUNNER_LABELS).as_deref(),
        Some("debian:docker://node:22,self-hosted:host")
    );
    assert_eq!(get(ENV_RUNNER_NAME).as_deref(), Some("g-abcde"));

    let k = &pod.containers[0];
    assert_eq!(k.name, RUNNER_CONTAINER);
    assert_eq!(k.command.as_deref(), Some(&["forgejo-runner".to_string()][..]));
    assert_eq!(
        k.args.as_deref(),
        Some(&["one-job".to_string(), "--wait".to_string()][..])
    );
    assert_eq!(k.working_dir.as_deref(), Some(DATA_DIR));
    let shares_data = |c: &Container| {
        c.volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == "data" && m.mount_path == DATA_DIR)
    };
    assert!(shares_data(reg) && shares_data(k));

    // No container but `register` can reach the registration token.
    let sees_secret = |c: &Container| {
        c.volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == "forgejo-runner-secret")
            || c.env
                .iter()
                .flatten()
                .any(|e| e.value_from.is_some() || e.name.contains("TOKEN"))
    };
    let seeing: Vec<&str> = pod
        .containers
        .iter()
        .chain(init)
        .filter(|c| sees_secret(c))
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(seeing, [REGISTER_CONTAINER]);
    let sec = pod.volumes.as_ref().expect("volumes")[0]
        .secret
        .clone()
        .expect("secret");
    let item = &sec.items.expect("items")[0];
    assert_eq!(
        (item.key.as_str(), item.path.as_str()),
        ("registration-token", "registration-token")
    );
    assert!(!format!("{pod:?}").contains("s3cr3t"), "no secret inlined");
}

#[test]
fn ca_bundle_and_proxy_reach_the_containers_that_talk_to_forgejo() {
    use forgerunner_core::runner_pod::trust::GO_CA_FILE;
    let mut spec: RunnerGroupSpec = serde_json::from_value(serde_json::json!({
        "forge": "forgejo", "maxRunners": 1,
        "forgejo": {"url": "https://code.example.com", "scope": "global", "credentials": "c", "labels": ["debian:host"]},
    }))
    .expect("spec");
    let c = RunnerCredentials {
        env: register_env("https://code.example.com/", "g-abcde", &labels()),
        ..creds(REGISTRATION_TOKEN_KEY, &[])
    };
    let has = |pod: &PodSpec, name: &str| {
        pod.containers
            .iter()
            .chain(pod.init_containers.iter().flatten())
            .all(|k| k.env.iter().flatten().any(|e| e.name == name))
    };
    let mut plain = default_runner_pod(&labels(), None, "g", &c);
    apply_trust(&spec, &mut plain);
    assert!(
        !plain
            .containers
            .iter()
            .any(|k| k.env.iter().flatten().any(|e| e.name == "HTTPS_PROXY"))
    );
    let fj = spec.forgejo.as_mut().expect("forgejo");
    fj.proxy_url = Some("http://proxy:3128".into());
    fj.ca_bundle_config_map = Some("corp-ca".into());
    let mut pod = default_runner_pod(&labels(), None, "g", &c);
    apply_trust(&spec, &mut pod);
    assert!(has(&pod, "HTTPS_PROXY") && has(&pod, "HTTP_PROXY") && has(&pod, "NO_PROXY"));
    for k in pod.containers.iter().chain(pod.init_containers.iter().flatten()) {
        assert!(
            k.volume_mounts
                .iter()
                .flatten()
                .any(|m| m.mount_path == GO_CA_FILE),
            "{}",
            k.name
        );
    }
}

/// A group spec whose template's runner container sets `CONFIG_FILE` (a literal path) and
/// mounts a ConfigMap at `/etc/forgejo-runner`.
fn config_file_group(entry: EnvVar) -> RunnerGroupSpec {
    use forgerunner_core::crd::{ForgeKind, RunnerGroupSpec};
    use forgerunner_core::embedded::Embedded;
    use k8s_openapi::api::core::v1::PodTemplateSpec;
    let tpl = PodTemplateSpec {
        metadata: None,
        spec: Some(PodSpec {
            containers: vec![Container {
                name: RUNNER_CONTAINER.into(),
                env: Some(vec![entry]),
                volume_mounts: Some(vec![
                    VolumeMount {
                        name: "runner-config".into(),
                        mount_path: "/etc/forgejo-runner".into(),
                        ..VolumeMount::default()
                    },
                    VolumeMount {
                        name: "cache".into(),
                        mount_path: "/cache".into(),
                        ..VolumeMount::default()
                    },
                ]),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
    };
    RunnerGroupSpec {
        forge: ForgeKind::Forgejo,
        github: None,
        gitea: None,
        forgejo: None,
        min_runners: 0,
        max_runners: 1,
        image: None,
        template: Some(Embedded::new(&tpl)),
        ttl_seconds_after_finished: None,
        active_deadline_seconds: None,
        idle_timeout_seconds: None,
        startup_timeout_seconds: None,
        scale_down_delay_seconds: None,
        stalled_job_seconds: None,
        schedules: Vec::new(),
        rerun: None,
        container_mode: None,
        cache: None,
        docker_cache: None,
        classes: Vec::new(),
    }
}

fn config_env(value: &str) -> EnvVar {
    EnvVar {
        name: ENV_CONFIG_FILE.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

/// forgejo-runner reads a config only from `--config` (`internal/app/cmd/cmd.go`) and knows no
/// `CONFIG_FILE` (nor does its `Dockerfile`; it is the Gitea runner image's convention). A
/// template `CONFIG_FILE` becomes `--config $(CONFIG_FILE)` for `one-job`, and on 11–14
/// reaches `register` too, with the mount that holds the file.
#[test]
fn a_template_config_file_is_passed_as_config() {
    let v15 = creds(
        TOKEN_KEY,
        &[
            (ENV_INSTANCE_URL, "https://code.example.com"),
            (ENV_RUNNER_UUID, "u"),
        ],
    );
    let group = config_file_group(config_env("/etc/forgejo-runner/config.yaml"));
    let mut pod = default_runner_pod(&labels(), None, "g-abcde", &v15);
    apply_config_file(&group, &mut pod);
    let args = pod.containers[0].args.clone().expect("args");
    assert_eq!(args[..3], ["one-job", "--config", "$(CONFIG_FILE)"]);
    assert!(pod.init_containers.is_none());

    let c = RunnerCredentials {
        env: register_env("https://code.example.com/", "g-abcde", &labels()),
        ..creds(REGISTRATION_TOKEN_KEY, &[])
    };
    let mut pod = default_runner_pod(&labels(), None, "g-abcde", &c);
    apply_config_file(&group, &mut pod);
    assert_eq!(
        pod.containers[0].args.as_deref(),
        Some(&["one-job", "--config", "$(CONFIG_FILE)", "--wait"].map(String::from)[..])
    );
    let reg = &pod.init_containers.as_ref().expect("init")[0];
    let env = reg.env.as_ref().expect("env");
    assert!(
        env.iter()
            .any(|e| e == &config_env("/etc/forgejo-runner/config.yaml"))
    );
    let mounts: Vec<(&str, Option<bool>)> = reg
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.mount_path.as_str(), m.read_only))
        .collect();
    assert!(
        mounts.contains(&("/etc/forgejo-runner", Some(true))),
        "{mounts:?}"
    );
    assert!(
        !mounts.iter().any(|(p, _)| *p == "/cache"),
        "only the mount holding the file"
    );

    // No CONFIG_FILE (or an empty one): the pod is left as it is.
    for group in [
        config_file_group(config_env(" ")),
        config_file_group(EnvVar {
            name: "OTHER".into(),
            value: Some("x".into()),
            value_from: None,
        }),
    ] {
        let mut pod = default_runner_pod(&labels(), None, "g-abcde", &c);
        let before = pod.clone();
        apply_config_file(&group, &mut pod);
        assert_eq!(pod, before);
    }
}
