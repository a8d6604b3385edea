//! The real kubectl (v1.32) against the fake API server: apply a CRD and a RunnerGroup without
//! --validate=false, get with printer columns, get -w, describe, and a cascading delete.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use forgerunner_core::RunnerGroup;
use forgerunner_testkit::apiserver::FakeApiServer;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{CustomResourceExt, Resource};
use serde_json::json;

const KUBECTL: &str = "/usr/bin/kubectl";

/// Runs kubectl with the fake's kubeconfig; returns (success, stdout+stderr).
async fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let r = forgerunner_testkit::kubectl::run_async(kubeconfig, args)
        .await
        .expect("run kubectl");
    (r.ok, r.text())
}

async fn next_line(rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> Option<String> {
    tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .ok()
        .flatten()
}

fn rg_yaml(name: &str) -> String {
    format!(
        "apiVersion: forgerunner.dev/v1alpha1\nkind: RunnerGroup\nmetadata:\n  name: {name}\n  namespace: default\n\
         spec:\n  forge: github\n  minRunners: 1\n  maxRunners: 4\n  github:\n    configUrl: https://github.com/org\n    credentials: gh\n"
    )
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_get_watch_describe_delete() {
    if !Path::new(KUBECTL).exists() {
        eprintln!("skipping: {KUBECTL} not installed");
        return;
    }
    let srv = FakeApiServer::start().await.expect("start");
    let dir = tempfile::tempdir().expect("tmp");
    let kc = dir.path().join("kubeconfig");
    srv.write_kubeconfig(&kc).expect("kubeconfig");

    let crd = write(
        dir.path(),
        "crd.yaml",
        &serde_yaml::to_string(&RunnerGroup::crd()).expect("yaml"),
    );
    let (ok, out) = kubectl(&kc, &["apply", "-f", crd.to_str().expect("path")]).await;
    assert!(ok, "apply crd: {out}");
    assert!(out.contains("created"), "{out}");

    let rg = write(dir.path(), "rg.yaml", &rg_yaml("pool"));
    let (ok, out) = kubectl(&kc, &["apply", "-f", rg.to_str().expect("path")]).await;
    assert!(
        ok && out.contains("runnergroup.forgerunner.dev/pool created"),
        "apply rg: {out}"
    );
    let (ok, out) = kubectl(&kc, &["apply", "-f", rg.to_str().expect("path")]).await;
    assert!(ok && out.contains("unchanged"), "re-apply: {out}");
    let (ok, out) = kubectl(&kc, &["apply", "--server-side", "-f", rg.to_str().expect("path")]).await;
    assert!(ok, "server-side apply: {out}");
    let bad = write(
        dir.path(),
        "bad.yaml",
        &rg_yaml("bad").replace("maxRunners: 4", "maxRunners: 0"),
    );
    let (ok, out) = kubectl(&kc, &["apply", "-f", bad.to_str().expect("path")]).await;
    assert!(
        !ok && out.contains("spec.maxRunners"),
        "invalid apply must fail: {out}"
    );

    let (ok, out) = kubectl(&kc, &["get", "rg"]).await;
    assert!(ok, "get: {out}");
    let header = out.lines().next().unwrap_or_default();
    for col in ["NAME", "FORGE", "MIN", "MAX", "CURRENT", "AGE"] {
        assert!(header.contains(col), "missing column {col}: {out}");
    }
    assert!(
        out.lines().any(|l| l.starts_with("pool") && l.contains("github")),
        "{out}"
    );
    let (ok, out) = kubectl(
        &kc,
        &["get", "runnergroups.forgerunner.dev", "pool", "-o", "json"],
    )
    .await;
    assert!(ok && out.contains("\"maxRunners\": 4"), "{out}");

    // get -w: the initial row, then a row per change; read with a deadline.
    let mut child = Command::new(KUBECTL)
        .args(["get", "rg", "-w"])
        .env("KUBECONFIG", &kc)
        .env("HOME", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn kubectl -w");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    while lines.len() < 2 {
        lines.push(next_line(&mut rx).await.expect("watch output"));
    }
    assert!(
        lines[0].contains("NAME") && lines[1].starts_with("pool"),
        "{lines:?}"
    );
    let client = srv.client().expect("client");
    let rgs: Api<RunnerGroup> = Api::namespaced(client.clone(), "default");
    rgs.patch_status(
        "pool",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"currentRunners": 3}})),
    )
    .await
    .expect("status");
    let changed = next_line(&mut rx).await.expect("watch row after change");
    assert!(changed.starts_with("pool"), "{changed}");
    let _ = child.kill();
    let _ = child.wait();

    // describe, then a cascading delete through ownerReferences.
    let (ok, out) = kubectl(&kc, &["describe", "rg", "pool"]).await;
    assert!(
        ok && out.contains("Name:") && out.contains("pool"),
        "describe: {out}"
    );
    let owner = rgs.get("pool").await.expect("rg");
    let oref = owner.controller_owner_ref(&()).expect("oref");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    for i in 0..2 {
        let job: Job = serde_json::from_value(
            json!({"metadata": {"name": format!("pool-job{i}"), "ownerReferences": [oref],
            "labels": {"app.kubernetes.io/managed-by": "forgerunner"}},
            "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "runner", "image": "runner:1"}]}}}}),
        )
        .expect("job");
        jobs.create(&PostParams::default(), &job).await.expect("job");
    }
    let (ok, out) = kubectl(&kc, &["get", "jobs"]).await;
    assert!(ok && out.contains("pool-job0"), "get jobs: {out}");
    let (ok, out) = kubectl(&kc, &["delete", "rg", "pool"]).await;
    assert!(ok && out.contains("deleted"), "delete: {out}");
    let (ok, out) = kubectl(
        &kc,
        &["get", "jobs", "-l", "app.kubernetes.io/managed-by=forgerunner"],
    )
    .await;
    assert!(
        ok && out.contains("No resources found"),
        "jobs must be collected: {out}"
    );
    srv.shutdown().await;
}
