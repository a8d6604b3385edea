//! The simulator plays Gitea Runner's `cache-server` for a Deployment shaped as forgerunner
//! writes it (`spec.cache`), and the simulated Gitea runner plays its jobs' `actions/cache`
//! steps against it through the Service: the second job of a group finds what the first saved.
// Test helpers outside `#[test]` functions: a failed setup should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use forgerunner_testkit::apiserver::FakeApiServer;
use forgerunner_testkit::gitea::{
    FakeConfig, FakeScope, GiteaFakeHandle, REGISTRATION_TOKEN_FILE, RunnerOptions, runner_behaviour,
};
use forgerunner_testkit::sim::behaviour::{ContainerBehaviour, PodInfo, PodScratch};
use forgerunner_testkit::sim::{CacheResult, SimConfig, SimHandle, Simulator};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Secret, Service};
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const NS: &str = "ci";
const NAME: &str = "web-actions-cache";
const HOST: &str = "web-actions-cache.ci.svc.cluster.local";
const SECRET: &str = "0123456789abcdef0123456789abcdef";
const CONFIG: &str = "/etc/forgerunner-cache/config.yaml";
const DEADLINE: Duration = Duration::from_secs(30);

struct Cluster {
    _api: FakeApiServer,
    client: Client,
    sim: SimHandle,
    fake: GiteaFakeHandle,
    runner: Arc<dyn ContainerBehaviour>,
}

async fn cluster() -> Cluster {
    let api = FakeApiServer::start().await.unwrap();
    let client = api.client().unwrap();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let sim = Simulator::start(
        client.clone(),
        SimConfig {
            namespaces: vec![NS.to_owned()],
            ..SimConfig::default()
        },
    );
    sim.wait_ready().await;
    let fake = GiteaFakeHandle::start(FakeConfig::default()).await.unwrap();
    let runner = runner_behaviour(
        fake.clone(),
        RunnerOptions {
            work: Duration::from_millis(20),
            cache: sim.runner_cache(),
            ..RunnerOptions::default()
        },
    );
    Cluster {
        _api: api,
        client,
        sim,
        fake,
        runner,
    }
}

/// The cache objects as the operator writes them for Gitea (crates/forge-gitea/src/cache.rs,
/// crates/core/src/cache_server.rs); `server_yaml` is the server's config file.
async fn create_cache(c: &Cluster, server_yaml: &str, selector: &str) {
    let labels = json!({"app.kubernetes.io/component": "actions-cache", "forgerunner.dev/cache-of": "web"});
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": NAME},
        "stringData": {"server.yaml": server_yaml, "secret": SECRET},
    }))
    .unwrap();
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": NAME},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "strategy": {"type": "Recreate"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{
                        "name": "cache-server",
                        "image": "gitea/runner:1.0.8",
                        "command": ["gitea-runner"],
                        "args": ["cache-server", "--config", "/etc/forgerunner-cache/server.yaml",
                            "--dir", "/cache", "--host", HOST, "--port", "8088"],
                        "ports": [{"name": "http", "containerPort": 8088}],
                        "volumeMounts": [
                            {"name": "cache", "mountPath": "/cache"},
                            {"name": "config", "mountPath": "/etc/forgerunner-cache", "readOnly": true},
                        ],
                    }],
                    "volumes": [
                        {"name": "cache", "persistentVolumeClaim": {"claimName": NAME}},
                        {"name": "config", "secret": {"secretName": NAME,
                            "items": [{"key": "server.yaml", "path": "server.yaml"}]}},
                    ],
                },
            },
        },
    }))
    .unwrap();
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": NAME},
        "spec": {
            "selector": {"forgerunner.dev/cache-of": selector},
            "ports": [{"name": "http", "port": 8088, "targetPort": 8088}],
        },
    }))
    .unwrap();
    let pp = PostParams::default();
    // The operator creates the Secret after the Deployment (its owner): the server waits for it.
    Api::<Deployment>::namespaced(c.client.clone(), NS)
        .create(&pp, &deployment)
        .await
        .unwrap();
    Api::<Service>::namespaced(c.client.clone(), NS)
        .create(&pp, &service)
        .await
        .unwrap();
    Api::<Secret>::namespaced(c.client.clone(), NS)
        .create(&pp, &secret)
        .await
        .unwrap();
}

fn server_config(secret: &str) -> String {
    format!("cache:\n  external_secret: \"{secret}\"\n")
}

fn runner_config(secret: &str) -> String {
    format!(
        "cache:\n  enabled: true\n  external_server: \"http://{HOST}:8088/\"\n  external_secret: \"{secret}\"\n"
    )
}

/// Runs one runner pod (register, then daemon with `config` mounted and named by `--config`)
/// to completion; its daemon's exit code.
async fn run_runner(c: &Cluster, name: &str, config: Option<String>) -> i32 {
    let token = c.fake.registration_token(&FakeScope::Owner("acme".into()));
    let register = PodInfo {
        namespace: NS.into(),
        name: name.into(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        image: "gitea/runner:1.0.8".into(),
        command: vec![
            "sh".into(),
            "-c".into(),
            "exec gitea-runner register --ephemeral".into(),
        ],
        args: Vec::new(),
        env: BTreeMap::from([
            ("GITEA_INSTANCE_URL".to_owned(), c.fake.url()),
            ("GITEA_RUNNER_LABELS".to_owned(), "linux".to_owned()),
        ]),
        files: BTreeMap::from([(REGISTRATION_TOKEN_FILE.to_owned(), token)]),
        cancel: CancellationToken::new(),
        container: "register".into(),
        init: true,
        scratch: PodScratch::default().with_mounts(vec![("/data".into(), "data".into())]),
    };
    let mut command = vec!["gitea-runner".to_owned(), "daemon".to_owned()];
    let mut files = BTreeMap::new();
    if let Some(config) = config {
        command.extend(["--config".to_owned(), CONFIG.to_owned()]);
        files.insert(CONFIG.to_owned(), config);
    }
    let daemon = PodInfo {
        command,
        files,
        container: "runner".into(),
        init: false,
        ..register.clone()
    };
    let run = async {
        assert_eq!(c.runner.run(register).await, 0, "register");
        c.runner.run(daemon).await
    };
    tokio::time::timeout(DEADLINE, run)
        .await
        .expect("runner pod ends")
}

/// Queues a cached job and runs one runner pod for it; what its cache step found.
async fn cached_job(c: &Cluster, pod: &str, config: Option<String>) -> (i64, CacheResult) {
    let job = c.fake.queue_cached_job("acme/app", &["linux"], "deps-v1");
    assert_eq!(run_runner(c, pod, config).await, 0);
    let outcome = c.sim.runner_cache().journal.of_job(job).expect("a cache step");
    assert_eq!(outcome.pod, pod);
    assert_eq!(outcome.key, "deps-v1");
    (job, outcome.result)
}

async fn wait_for_server(c: &Cluster) {
    let net = c.sim.runner_cache().network;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while net.resolve(HOST, 8088).is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the cache Service never led to a server"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_second_job_hits_the_key_the_first_saved() {
    let c = cluster().await;
    create_cache(&c, &server_config(SECRET), "web").await;
    wait_for_server(&c).await;
    let (first, result) = cached_job(&c, "web-a", Some(runner_config(SECRET))).await;
    assert_eq!(result, CacheResult::Saved, "job 1 misses and saves");
    let (_, result) = cached_job(&c, "web-b", Some(runner_config(SECRET))).await;
    assert_eq!(
        result,
        CacheResult::Hit {
            saved_by: Some(first)
        },
        "job 2 finds what job 1 saved"
    );
    let stats = c.sim.cache_server_stats(NS, NAME).expect("the server ran");
    assert_eq!(
        (stats.misses, stats.hits, stats.commits, stats.unauthorized),
        (1, 1, 1, 0)
    );
    let deployment = Api::<Deployment>::namespaced(c.client.clone(), NS)
        .get(NAME)
        .await
        .unwrap();
    assert_eq!(
        deployment.status.and_then(|s| s.ready_replicas),
        Some(1),
        "kubectl shows the server ready"
    );
}

#[tokio::test]
async fn a_runner_with_another_secret_is_refused() {
    let c = cluster().await;
    create_cache(&c, &server_config(SECRET), "web").await;
    wait_for_server(&c).await;
    let (_, result) = cached_job(&c, "web-a", Some(runner_config("not-the-secret"))).await;
    assert_eq!(result, CacheResult::Failed("lookup: 401 Unauthorized".into()));
    let stats = c.sim.cache_server_stats(NS, NAME).expect("the server ran");
    assert!(stats.unauthorized >= 2, "register and lookup refused: {stats:?}");
    assert_eq!(stats.commits, 0);
}

#[tokio::test]
async fn without_an_external_server_each_pod_starts_empty() {
    let c = cluster().await;
    let (_, first) = cached_job(&c, "web-a", None).await;
    let (_, second) = cached_job(&c, "web-b", None).await;
    assert_eq!((first, second), (CacheResult::Embedded, CacheResult::Embedded));
}

#[tokio::test]
async fn a_service_that_selects_no_server_leads_nowhere() {
    let c = cluster().await;
    create_cache(&c, &server_config(SECRET), "someone-else").await;
    // The server itself runs (its status says so) but the Service selects other pods.
    let deployments = Api::<Deployment>::namespaced(c.client.clone(), NS);
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while c.sim.cache_server_stats(NS, NAME).is_none() {
        assert!(tokio::time::Instant::now() < deadline, "the server never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(deployments.get(NAME).await.is_ok());
    let (_, result) = cached_job(&c, "web-a", Some(runner_config(SECRET))).await;
    assert!(
        matches!(&result, CacheResult::Failed(why) if why.contains("cannot reach")),
        "{result:?}"
    );
}

#[tokio::test]
async fn a_server_without_its_secret_does_not_start() {
    let c = cluster().await;
    create_cache(&c, "cache: {}\n", "web").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        c.sim.cache_server_stats(NS, NAME),
        None,
        "gitea-runner refuses to start"
    );
    assert_eq!(c.sim.runner_cache().network.resolve(HOST, 8088), None);
}
