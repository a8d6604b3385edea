//! The real `forgerunner` binary: exit codes and one-line errors.

use std::io::Write;
use std::net::TcpListener;
use std::process::{Command, Output};

fn forgerunner(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_forgerunner"));
    cmd.args(args).env_remove("RUST_LOG").env_remove("RUST_BACKTRACE");
    for (name, _) in std::env::vars() {
        if name.starts_with("FORGERUNNER_") {
            cmd.env_remove(name);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run forgerunner")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A kubeconfig pointing at a loopback port nothing listens on.
fn dead_kubeconfig(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
        // dropped here: the port is closed again
    };
    let path = dir.path().join("kubeconfig");
    let mut f = std::fs::File::create(&path).expect("create kubeconfig");
    write!(
        f,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: dead\n  cluster:\n    server: http://127.0.0.1:{port}\n\
         contexts:\n- name: dead\n  context:\n    cluster: dead\n    user: nobody\n\
         current-context: dead\nusers:\n- name: nobody\n  user:\n    token: not-a-secret\n"
    )
    .expect("write kubeconfig");
    path
}

#[test]
fn bad_config_exits_2_naming_the_key() {
    let o = forgerunner(&["run", "--forges", "gitlab"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(
        stderr(&o).trim(),
        "error: config key 'forges': unknown forge 'gitlab' (known: github, gitea, forgejo)"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, "leaderElection:\n  leaseDurationSecs: 10\n").expect("write config");
    let o = forgerunner(&["run", "--config", file.to_str().expect("utf-8 path")], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("'leaderElection.leaseDurationSecs'"),
        "{}",
        stderr(&o)
    );

    let o = forgerunner(&["run"], &[("FORGERUNNER_LEADER_ELECTION_ENABLED", "perhaps")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("'leaderElection.enabled'"), "{}", stderr(&o));
}

#[test]
fn unreachable_cluster_is_one_line_without_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dead_kubeconfig(&dir);
    let o = forgerunner(
        &["run", "--http-addr", "127.0.0.1:0"],
        &[
            ("KUBECONFIG", kubeconfig.to_str().expect("utf-8 path")),
            ("RUST_BACKTRACE", "1"),
        ],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "exactly one line on stderr: {err}");
    assert!(
        lines[0].starts_with("error: cannot reach the Kubernetes API server at http://127.0.0.1:"),
        "{err}"
    );
    let all = format!("{err}{}", String::from_utf8_lossy(&o.stdout));
    assert!(
        !all.contains("panicked") && !all.contains("stack backtrace"),
        "{all}"
    );
    assert!(!all.contains("not-a-secret"), "the token must not be printed");
}

#[test]
fn crd_prints_the_runnergroup_definition() {
    let o = forgerunner(&["crd"], &[]);
    assert!(o.status.success());
    let yaml = String::from_utf8_lossy(&o.stdout);
    let doc: serde_yaml::Value = serde_yaml::from_str(&yaml).expect("valid YAML");
    assert_eq!(doc["kind"].as_str(), Some("CustomResourceDefinition"));
    assert_eq!(doc["spec"]["group"].as_str(), Some("forgerunner.dev"));
    assert_eq!(doc["spec"]["names"]["kind"].as_str(), Some("RunnerGroup"));
}

#[test]
fn version_prints_the_package_version() {
    let o = forgerunner(&["version"], &[]);
    assert!(o.status.success());
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        format!("forgerunner {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn unknown_subcommand_is_a_usage_error() {
    let o = forgerunner(&["frobnicate"], &[]);
    assert_eq!(o.status.code(), Some(2));
}
