//! The real kubectl (v1.32) typed `create` subcommands send protobuf bodies; the fake API server
//! decodes them, stores the same objects as the JSON path would, and answers in JSON.

use std::path::Path;

use base64::Engine;
use forgerunner_testkit::apiserver::FakeApiServer;

/// Runs kubectl with the fake's kubeconfig; returns (success, stdout, stderr).
async fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let r = forgerunner_testkit::kubectl::run_async(kubeconfig, args)
        .await
        .expect("run kubectl");
    (r.ok, r.stdout, r.stderr)
}

async fn must(kc: &Path, args: &[&str]) -> String {
    let (ok, out, err) = kubectl(kc, args).await;
    assert!(ok, "kubectl {} failed:\n{out}\n{err}", args.join(" "));
    out
}

/// `kubectl -n ci get KIND NAME -o jsonpath=PATH`.
async fn get_path(kc: &Path, kind: &str, name: &str, path: &str) -> String {
    let output = format!("jsonpath={path}");
    must(kc, &["-n", "ci", "get", kind, name, "-o", &output]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_typed_create_subcommands_succeed() {
    if !forgerunner_testkit::kubectl::installed() {
        eprintln!("skipping: kubectl not installed");
        return;
    }
    let srv = FakeApiServer::start().await.expect("start");
    let dir = tempfile::tempdir().expect("tmp");
    let kc = dir.path().join("kubeconfig");
    srv.write_kubeconfig(&kc).expect("kubeconfig");

    let out = must(&kc, &["create", "namespace", "ci"]).await;
    assert!(out.contains("namespace/ci created"), "{out}");
    let secret_value = "tok=en with spaces/and+symbols";
    let literal = format!("--from-literal=github_token={secret_value}");
    must(
        &kc,
        &["-n", "ci", "create", "secret", "generic", "gh-creds", &literal],
    )
    .await;
    must(
        &kc,
        &[
            "-n",
            "ci",
            "create",
            "configmap",
            "settings",
            "--from-literal=mode=fast",
        ],
    )
    .await;
    must(&kc, &["-n", "ci", "create", "serviceaccount", "runner"]).await;
    must(
        &kc,
        &[
            "-n",
            "ci",
            "create",
            "job",
            "once",
            "--image=busybox:1.36",
            "--",
            "echo",
            "hi",
        ],
    )
    .await;
    must(
        &kc,
        &[
            "-n",
            "ci",
            "create",
            "role",
            "reader",
            "--verb=get,list",
            "--resource=pods",
        ],
    )
    .await;
    must(
        &kc,
        &[
            "-n",
            "ci",
            "create",
            "rolebinding",
            "reader",
            "--role=reader",
            "--serviceaccount=ci:runner",
        ],
    )
    .await;

    must(
        &kc,
        &[
            "-n",
            "ci",
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            "--replicas=2",
        ],
    )
    .await;
    must(
        &kc,
        &[
            "-n",
            "ci",
            "create",
            "service",
            "clusterip",
            "web",
            "--tcp=80:8080",
        ],
    )
    .await;
    must(
        &kc,
        &["create", "clusterrole", "viewer", "--verb=get", "--resource=pods"],
    )
    .await;
    must(
        &kc,
        &[
            "create",
            "clusterrolebinding",
            "viewer",
            "--clusterrole=viewer",
            "--user=alice",
        ],
    )
    .await;
    let ports = get_path(
        &kc,
        "service",
        "web",
        "{.spec.ports[0].port}:{.spec.ports[0].targetPort}",
    )
    .await;
    assert_eq!(ports, "80:8080");
    let replicas = get_path(&kc, "deployment", "web", "{.spec.replicas}").await;
    assert_eq!(replicas, "2");

    // The Secret's data round-trips as base64 of the literal.
    let data = get_path(&kc, "secret", "gh-creds", "{.data.github_token}").await;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .expect("base64 data");
    assert_eq!(String::from_utf8_lossy(&decoded), secret_value);

    let mode = get_path(&kc, "configmap", "settings", "{.data.mode}").await;
    assert_eq!(mode, "fast");
    let image = get_path(&kc, "job", "once", "{.spec.template.spec.containers[0].image}").await;
    assert_eq!(image, "busybox:1.36");
    let cmd = get_path(&kc, "job", "once", "{.spec.template.spec.containers[0].command}").await;
    assert_eq!(cmd, r#"["echo","hi"]"#);
    let subject = get_path(
        &kc,
        "rolebinding",
        "reader",
        "{.subjects[0].name}/{.roleRef.kind}",
    )
    .await;
    assert_eq!(subject, "runner/Role");
    let verbs = get_path(&kc, "role", "reader", "{.rules[0].verbs}").await;
    assert_eq!(verbs, r#"["get","list"]"#);
    let sa = must(
        &kc,
        &["-n", "ci", "get", "serviceaccount", "runner", "-o", "name"],
    )
    .await;
    assert_eq!(sa.trim(), "serviceaccount/runner");
}
