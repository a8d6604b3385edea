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
    let k = &pod.containers[0];
    assert_eq!(
        k.command.as_deref(),
        Some(&["/bin/sh".to_string(), "-c".to_string()][..])
    );
    let script = &k.args.as_ref().expect("args")[0];
    assert!(script.contains(
        r#"forgejo-runner register --no-interactive --instance "$FORGEJO_INSTANCE_URL" --token "$(cat /var/run/forgejo-runner/registration-token)" --name "$FORGEJO_RUNNER_NAME" --labels "$FORGEJO_RUNNER_LABELS""#
    ));
    assert!(script.trim_end().ends_with("exec forgejo-runner one-job --wait"));
    let env = k.env.as_ref().expect("env");
    let get = |n: &str| env.iter().find(|e| e.name == n).and_then(|e| e.value.clone());
    assert_eq!(
        get(ENV_RUNNER_LABELS).as_deref(),
        Some("debian:docker://node:22,self-hosted:host")
    );
    assert_eq!(get(ENV_RUNNER_NAME).as_deref(), Some("g-abcde"));
    let sec = pod.volumes.as_ref().expect("volumes")[0]
        .secret
        .clone()
        .expect("secret");
    let item = &sec.items.expect("items")[0];
    assert_eq!(
        (item.key.as_str(), item.path.as_str()),
        ("registration-token", "registration-token")
    );
}
