//! The rendered Helm chart installs into the testkit cluster with the real `kubectl`
//! (`kubectl apply -f`), and the Deployment's objects are then there to read back.

#[allow(dead_code)]
mod common;

use std::process::Command;

use forgerunner_testkit::apiserver::FakeApiServer;

fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("kubectl is on the PATH")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rendered_chart_applies_with_kubectl() {
    let api = FakeApiServer::start().await.expect("fake API server");
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kubeconfig).expect("kubeconfig");

    let objects = common::chart::render(&[]);
    // Helm installs crds/ before the templates; kubectl needs the same order.
    let (crds, rest): (Vec<_>, Vec<_>) = objects
        .into_iter()
        .partition(|o| o["kind"] == "CustomResourceDefinition");
    let namespace_of = |o: &serde_json::Value| o["metadata"]["namespace"].as_str().map(str::to_owned);
    let namespaces: std::collections::BTreeSet<String> = rest.iter().filter_map(namespace_of).collect();
    // `helm install --create-namespace` makes the release namespace; here it is applied first.
    let ns_docs: Vec<serde_json::Value> = namespaces
        .iter()
        .map(|ns| serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
        .collect();
    for (file, docs) in [
        ("crds.yaml", crds),
        ("namespaces.yaml", ns_docs),
        ("templates.yaml", rest),
    ] {
        let stream: Vec<String> = docs
            .iter()
            .map(|d| serde_yaml::to_string(d).expect("yaml"))
            .collect();
        let path = dir.path().join(file);
        std::fs::write(&path, stream.join("---\n")).expect("write manifest");
        let out = kubectl(&kubeconfig, &["apply", "-f", path.to_str().expect("utf-8 path")]);
        assert!(
            out.status.success(),
            "kubectl apply -f {file} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let ns = namespaces
        .iter()
        .next()
        .expect("the chart renders namespaced objects");
    let out = kubectl(
        &kubeconfig,
        &[
            "get",
            "deployment,serviceaccount,configmap,service,role,rolebinding",
            "-n",
            ns,
            "-o",
            "name",
        ],
    );
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubectl get failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for kind in ["deployment.apps/", "serviceaccount/", "configmap/", "service/"] {
        assert!(listed.contains(kind), "no {kind} after install:\n{listed}");
    }
    let out = kubectl(
        &kubeconfig,
        &["get", "clusterrole,clusterrolebinding,crd", "-o", "name"],
    );
    let cluster = String::from_utf8_lossy(&out.stdout);
    assert!(
        cluster.contains("clusterrole.rbac.authorization.k8s.io/"),
        "no ClusterRole:\n{cluster}"
    );
    assert!(
        cluster.contains("runnergroups.forgerunner.dev"),
        "no CRD:\n{cluster}"
    );
    api.shutdown().await;
}
