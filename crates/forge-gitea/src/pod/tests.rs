use super::*;
use forgerunner_core::crd::{ForgeKind, GiteaScope, RunnerGroup};
use forgerunner_core::forge::{Forge, ReconcileTrigger, RunnerCredentials};
use forgerunner_core::metrics::Metrics;
use forgerunner_core::runner_pod::trust::GO_CA_FILE;
use forgerunner_http::act_runner::DATA_VOLUME;
use forgerunner_http::pod_checks::default_pod;
use std::sync::Arc;

fn spec() -> GiteaSpec {
    GiteaSpec {
        url: "https://git.example.com".into(),
        scope: GiteaScope::Global,
        org: None,
        user: None,
        repo: None,
        credentials: "creds".into(),
        labels: vec!["linux:host".into(), "ubuntu:docker://node:20".into()],
        poll_interval_seconds: None,
        webhook_secret: None,
        ca_bundle_config_map: None,
        proxy_url: None,
    }
}

fn env<'a>(c: &'a Container, name: &str) -> Option<&'a EnvVar> {
    c.env.iter().flatten().find(|e| e.name == name)
}

/// Whether `c` could read the registration token: through env (value or reference) or a
/// mount of the token volume.
fn sees_token(c: &Container) -> bool {
    let by_env = c.env.iter().flatten().any(|e| {
        e.name.contains("TOKEN")
            || e.value_from
                .as_ref()
                .and_then(|v| v.secret_key_ref.as_ref())
                .is_some_and(|s| s.key == REGISTRATION_TOKEN_KEY)
    });
    let by_mount = c.volume_mounts.iter().flatten().any(|m| m.name == TOKEN_VOLUME);
    by_env || by_mount
}

#[test]
fn register_init_container_holds_the_token_and_the_runner_does_not() {
    let pod = default_runner_pod(&spec(), None, "g-abcde", "g-abcde");
    let init = pod.init_containers.as_ref().unwrap();
    assert_eq!(init.len(), 1);
    let reg = &init[0];
    assert_eq!(reg.name, REGISTER_CONTAINER);
    assert_eq!(reg.image.as_deref(), Some(DEFAULT_IMAGE));
    assert_eq!(reg.working_dir.as_deref(), Some(DATA_DIR));
    let script = &reg.command.as_ref().unwrap()[2];
    assert!(script.starts_with("exec gitea-runner register --no-interactive --ephemeral"));
    assert!(script.contains("$(cat /var/run/gitea-runner/registration_token)"));
    let token_mount = reg
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == TOKEN_VOLUME)
        .unwrap();
    assert_eq!(
        (token_mount.mount_path.as_str(), token_mount.read_only),
        (TOKEN_DIR, Some(true))
    );

    let c = &pod.containers[0];
    assert_eq!(c.name, "runner");
    assert_eq!(c.image.as_deref(), Some(DEFAULT_IMAGE));
    assert_eq!(c.command.as_deref().unwrap(), ["gitea-runner", "daemon"]);
    assert_eq!(c.working_dir.as_deref(), Some(DATA_DIR));
    assert_eq!(
        env(c, "GITEA_RUNNER_LABELS").unwrap().value.as_deref(),
        Some("linux:host,ubuntu:docker://node:20")
    );
    assert_eq!(
        env(c, "GITEA_RUNNER_NAME").unwrap().value.as_deref(),
        Some("g-abcde")
    );

    // Only `register` can reach the token; the Secret volume holds just that key.
    let all = pod.containers.iter().chain(init);
    let seeing: Vec<&str> = all.filter(|c| sees_token(c)).map(|c| c.name.as_str()).collect();
    assert_eq!(seeing, [REGISTER_CONTAINER]);
    let vols = pod.volumes.as_ref().unwrap();
    let secret = vols
        .iter()
        .find(|v| v.name == TOKEN_VOLUME)
        .unwrap()
        .secret
        .as_ref()
        .unwrap();
    assert_eq!(secret.secret_name.as_deref(), Some("g-abcde"));
    assert_eq!(secret.items.as_ref().unwrap()[0].key, REGISTRATION_TOKEN_KEY);
    // Both share the fresh /data.
    assert!(
        vols.iter()
            .find(|v| v.name == DATA_VOLUME)
            .unwrap()
            .empty_dir
            .is_some()
    );
    for c in [reg, c] {
        assert!(
            c.volume_mounts
                .iter()
                .flatten()
                .any(|m| m.name == DATA_VOLUME && m.mount_path == DATA_DIR)
        );
    }
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
}

#[test]
fn custom_and_legacy_images() {
    let pod = default_runner_pod(&spec(), Some("registry.local/gitea/runner:1.1.0"), "r", "r");
    assert_eq!(
        pod.containers[0].image.as_deref(),
        Some("registry.local/gitea/runner:1.1.0")
    );
    assert_eq!(
        pod.init_containers.as_ref().unwrap()[0].image.as_deref(),
        Some("registry.local/gitea/runner:1.1.0")
    );
    let pod = default_runner_pod(&spec(), Some("  "), "r", "r");
    assert_eq!(pod.containers[0].image.as_deref(), Some(DEFAULT_IMAGE));
    let pod = default_runner_pod(&spec(), Some("gitea/act_runner:0.2.13"), "r", "r");
    assert_eq!(
        pod.containers[0].command.as_deref().unwrap(),
        ["act_runner", "daemon"]
    );
    assert!(
        pod.init_containers.as_ref().unwrap()[0].command.as_ref().unwrap()[2]
            .starts_with("exec act_runner register")
    );
    assert_eq!(
        runner_binary("docker.io/gitea/act_runner@sha256:abc"),
        "act_runner"
    );
    assert_eq!(runner_binary("gitea/runner:1.0.8-dind-rootless"), "gitea-runner");
    assert_eq!(runner_binary("localhost:5000/act_runner"), "act_runner");
}

fn group(gitea: GiteaSpec) -> RunnerGroup {
    let mut spec: forgerunner_core::crd::RunnerGroupSpec = serde_json::from_value(serde_json::json!({
        "forge": "gitea", "maxRunners": 2,
    }))
    .unwrap();
    spec.forge = ForgeKind::Gitea;
    spec.gitea = Some(gitea);
    RunnerGroup::new("g", spec)
}

fn forge_pod(gitea: GiteaSpec) -> PodSpec {
    let (trigger, _rx) = ReconcileTrigger::channel();
    let forge = crate::GiteaForge::new(Arc::new(Metrics::default()), trigger);
    let creds = RunnerCredentials {
        secret_data: BTreeMap::new(),
        env: BTreeMap::new(),
        annotations: BTreeMap::new(),
    };
    default_pod(&forge, &group(gitea), "g-abcde", "g-abcde", &creds, None)
}

#[test]
fn ca_bundle_and_proxy_reach_both_containers_only_when_set() {
    let plain = forge_pod(spec());
    for c in plain
        .containers
        .iter()
        .chain(plain.init_containers.iter().flatten())
    {
        assert!(env(c, "HTTPS_PROXY").is_none() && env(c, "HTTP_PROXY").is_none());
        assert!(
            !c.volume_mounts
                .iter()
                .flatten()
                .any(|m| m.mount_path == GO_CA_FILE)
        );
    }
    let mut s = spec();
    s.ca_bundle_config_map = Some("corp-ca".into());
    s.proxy_url = Some("http://proxy.corp:3128".into());
    let pod = forge_pod(s);
    for c in pod.containers.iter().chain(pod.init_containers.iter().flatten()) {
        assert_eq!(
            env(c, "HTTPS_PROXY").unwrap().value.as_deref(),
            Some("http://proxy.corp:3128")
        );
        assert_eq!(
            env(c, "HTTP_PROXY").unwrap().value.as_deref(),
            Some("http://proxy.corp:3128")
        );
        assert!(env(c, "NO_PROXY").is_some());
        assert!(env(c, "SSL_CERT_DIR").is_none());
        let m = c
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.mount_path == GO_CA_FILE)
            .unwrap();
        assert_eq!(m.sub_path.as_deref(), Some("ca.crt"));
    }
    let cm = pod
        .volumes
        .iter()
        .flatten()
        .find_map(|v| v.config_map.as_ref())
        .unwrap();
    assert_eq!(cm.name, "corp-ca");
}

#[test]
fn no_exit_code_means_outdated() {
    let (trigger, _rx) = ReconcileTrigger::channel();
    let forge = crate::GiteaForge::new(Arc::new(Metrics::default()), trigger);
    let profile = forge.describe(&group(spec()).spec).expect("valid");
    for code in [1, 2, 7, 137, 143] {
        assert_eq!(profile.runner_exit(code), None, "exit {code}");
    }
}

fn group_with_template(template: serde_json::Value) -> RunnerGroup {
    let mut g = group(spec());
    g.spec.template = Some(serde_json::from_value(template).unwrap());
    g
}

fn pod_of(g: &RunnerGroup) -> PodSpec {
    let (trigger, _rx) = ReconcileTrigger::channel();
    let forge = crate::GiteaForge::new(Arc::new(Metrics::default()), trigger);
    let creds = RunnerCredentials {
        secret_data: BTreeMap::new(),
        env: BTreeMap::new(),
        annotations: BTreeMap::new(),
    };
    default_pod(&forge, g, "g-abcde", "g-abcde", &creds, None)
}

/// The binary reads a config only from `--config` (act_runner `internal/app/cmd/cmd.go`, a
/// persistent flag); `CONFIG_FILE` only means something to the image's `scripts/run.sh`
/// (`CONFIG_ARG="--config ${CONFIG_FILE}"`), which this pod never runs.
#[test]
fn config_file_from_the_template_becomes_a_config_flag_of_both_steps() {
    let mounts = serde_json::json!([
        {"name": "config", "mountPath": "/etc/gitea-runner"},
        {"name": "cache", "mountPath": "/cache"},
    ]);
    let volumes = serde_json::json!([
        {"name": "config", "configMap": {"name": "runner-config"}},
        {"name": "cache", "emptyDir": {}},
    ]);
    // A literal path: passed as is; only the mount holding it goes to `register`.
    let literal = group_with_template(serde_json::json!({"spec": {
        "containers": [{"name": "runner", "volumeMounts": mounts,
            "env": [{"name": "CONFIG_FILE", "value": "/etc/gitea-runner/config.yaml"}]}],
        "volumes": volumes,
    }}));
    let pod = pod_of(&literal);
    assert_eq!(
        pod.containers[0].command.as_deref().unwrap(),
        [
            "gitea-runner",
            "daemon",
            "--config",
            "/etc/gitea-runner/config.yaml"
        ]
    );
    let reg = &pod.init_containers.as_ref().unwrap()[0];
    let script = &reg.command.as_ref().unwrap()[2];
    assert!(script.ends_with(" --config \"$CONFIG_FILE\""), "{script}");
    assert_eq!(
        env(reg, "CONFIG_FILE").unwrap().value.as_deref(),
        Some("/etc/gitea-runner/config.yaml")
    );
    let extra: Vec<(&str, Option<bool>)> = reg
        .volume_mounts
        .iter()
        .flatten()
        .filter(|m| m.name != DATA_VOLUME && m.name != TOKEN_VOLUME)
        .map(|m| (m.mount_path.as_str(), m.read_only))
        .collect();
    assert_eq!(extra, [("/etc/gitea-runner", Some(true))]);

    // From a ConfigMap key: the kubelet expands `$(CONFIG_FILE)`; file-volume mounts go along.
    let from = group_with_template(serde_json::json!({"spec": {
        "containers": [{"name": "runner", "volumeMounts": mounts, "env": [{"name": "CONFIG_FILE",
            "valueFrom": {"configMapKeyRef": {"name": "paths", "key": "config"}}}]}],
        "volumes": volumes,
    }}));
    let pod = pod_of(&from);
    assert_eq!(
        pod.containers[0].command.as_deref().unwrap(),
        ["gitea-runner", "daemon", "--config", "$(CONFIG_FILE)"]
    );
    let reg = &pod.init_containers.as_ref().unwrap()[0];
    assert!(env(reg, "CONFIG_FILE").unwrap().value_from.is_some());
    assert!(
        reg.volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path == "/etc/gitea-runner")
    );

    // Unset or empty: nothing changes.
    for tpl in [
        serde_json::json!({"spec": {"containers": [{"name": "runner"}]}}),
        serde_json::json!({"spec": {"containers": [{"name": "runner",
            "env": [{"name": "CONFIG_FILE", "value": ""}]}]}}),
    ] {
        let pod = pod_of(&group_with_template(tpl));
        assert_eq!(
            pod.containers[0].command.as_deref().unwrap(),
            ["gitea-runner", "daemon"]
        );
        let reg = &pod.init_containers.as_ref().unwrap()[0];
        assert!(!reg.command.as_ref().unwrap()[2].contains("--config"));
        assert!(env(reg, "CONFIG_FILE").is_none());
    }
}

/// Gitea's runner listing has no version (`modules/structs/repo_actions.go` `ActionRunner`,
/// v1.24.0 to v1.26.0): only the image's tag tells a release, of `gitea/runner` or the legacy
/// `gitea/act_runner`.
#[test]
fn runner_versions_tell_the_images_release_only() {
    use forgerunner_core::runner_version::RunnerRelease;
    let mut g = RunnerGroup::test(ForgeKind::Gitea).build();
    let v = runner_versions(&g.spec);
    assert_eq!(
        v.image,
        Some((DEFAULT_IMAGE.to_owned(), Some(RunnerRelease(1, 0, 8))))
    );
    assert!(v.served.is_none() && v.reported.is_empty());
    g.spec.image = Some("docker.io/gitea/act_runner:0.2.13-dind-rootless".into());
    assert_eq!(
        runner_versions(&g.spec).image.and_then(|i| i.1),
        Some(RunnerRelease(0, 2, 13))
    );
    g.spec.image = Some("gitea/act_runner:nightly".into());
    assert_eq!(runner_versions(&g.spec).image.and_then(|i| i.1), None);
}
