//! The real `forgerunner` binary against the testkit's fake API server: start-up checks,
//! leader election between two processes, graceful shutdown, and the HTTP endpoints.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use forgerunner_core::RunnerGroup;
use forgerunner_testkit::apiserver::FakeApiServer;
#[cfg(feature = "gitea")]
use k8s_openapi::ByteString;
use k8s_openapi::api::coordination::v1::Lease;
#[cfg(feature = "gitea")]
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
#[cfg(feature = "gitea")]
use kube::api::ObjectMeta;
use kube::api::PostParams;
use kube::{Api, CustomResourceExt};

const LEASE_SECONDS: u64 = 3;

/// A fake API server plus a kubeconfig file for the binary.
struct Cluster {
    server: FakeApiServer,
    dir: tempfile::TempDir,
}

impl Cluster {
    async fn start(with_crd: bool) -> Cluster {
        let server = FakeApiServer::start().await.expect("fake API server");
        let dir = tempfile::tempdir().expect("tempdir");
        server
            .write_kubeconfig(&dir.path().join("kubeconfig"))
            .expect("kubeconfig");
        let cluster = Cluster { server, dir };
        if with_crd {
            let crds: Api<CustomResourceDefinition> = Api::all(cluster.client());
            crds.create(&PostParams::default(), &RunnerGroup::crd())
                .await
                .expect("install CRD");
        }
        cluster
    }

    fn client(&self) -> kube::Client {
        self.server.client().expect("client")
    }

    fn kubeconfig(&self) -> String {
        self.dir.path().join("kubeconfig").to_string_lossy().into_owned()
    }

    async fn lease_holder(&self) -> Option<String> {
        let leases: Api<Lease> = Api::namespaced(self.client(), "default");
        leases
            .get_opt("forgerunner")
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty())
    }
}

/// One `forgerunner run` process; its stdout (JSON logs) is collected line by line.
struct Operator {
    name: String,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Operator {
    fn start(cluster: &Cluster, name: &str, extra_env: &[(&str, &str)]) -> Operator {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_forgerunner"));
        cmd.args([
            "run",
            "--http-addr",
            "127.0.0.1:0",
            "--log-format",
            "json",
            "--log-level",
            "info",
        ])
        .env("KUBECONFIG", cluster.kubeconfig())
        .env("POD_NAME", name)
        .env("POD_NAMESPACE", "default")
        .env(
            "FORGERUNNER_LEADER_ELECTION_LEASE_DURATION_SECONDS",
            LEASE_SECONDS.to_string(),
        )
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn forgerunner");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().expect("stdout");
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                sink.lock().expect("lines").push(line);
            }
        });
        Operator {
            name: name.to_owned(),
            child,
            lines,
        }
    }

    fn log_contains(&self, text: &str) -> bool {
        self.lines.lock().expect("lines").iter().any(|l| l.contains(text))
    }

    /// The address of the listener serving `/metrics`, from its "serving" log line.
    fn http_addr(&self) -> Option<String> {
        self.logged_addr("serving /healthz, /readyz, /metrics")
    }

    /// The address of the log line whose message is `message`.
    fn logged_addr(&self, message: &str) -> Option<String> {
        self.lines.lock().expect("lines").iter().find_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            (v["message"].as_str()? == message).then(|| v["addr"].as_str().map(str::to_owned))?
        })
    }

    fn signal_term(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }

    fn stderr(&mut self) -> String {
        let mut out = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut out);
        }
        out
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `check` until it yields a value or `within` passes.
async fn wait_for<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn http_get(addr: &str, path: &str) -> Option<(u16, String, String)> {
    let res = reqwest::get(format!("http://{addr}{path}")).await.ok()?;
    let status = res.status().as_u16();
    let ctype = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    Some((status, ctype, res.text().await.ok()?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_crd_exits_1_with_install_hint() {
    let cluster = Cluster::start(false).await;
    let mut op = Operator::start(&cluster, "solo", &[]);
    let status = wait_for(Duration::from_secs(30), "exit", || {
        let s = op.exited();
        async move { s }
    })
    .await;
    assert_eq!(status.code(), Some(1));
    let err = op.stderr();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("RunnerGroup CRD"), "{err}");
    assert!(
        err.contains("forgerunner crd | kubectl apply --server-side -f -"),
        "{err}"
    );
    cluster.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_and_takeover_after_a_kill() {
    let cluster = Cluster::start(true).await;
    let a = Operator::start(&cluster, "op-a", &[]);
    let b = Operator::start(&cluster, "op-b", &[]);
    let first = wait_for(Duration::from_secs(30), "a lease holder", || {
        cluster.lease_holder()
    })
    .await;
    assert!(first == "op-a" || first == "op-b", "{first}");
    let (mut leader, standby) = if first == "op-a" { (a, b) } else { (b, a) };

    // Both serve HTTP and are ready: the leader once synced, the standby because it is healthy.
    for op in [&leader, &standby] {
        let addr = wait_for(Duration::from_secs(30), "HTTP address", || {
            let a = op.http_addr();
            async move { a }
        })
        .await;
        wait_for(Duration::from_secs(30), "ready", || {
            let addr = addr.clone();
            async move { http_get(&addr, "/readyz").await.filter(|r| r.0 == 200) }
        })
        .await;
    }
    // The holder stays put over more than a full lease duration: renewals work, no flapping.
    let steady_until = Instant::now() + Duration::from_secs(LEASE_SECONDS + 1);
    while Instant::now() < steady_until {
        assert_eq!(
            cluster.lease_holder().await.as_deref(),
            Some(leader.name.as_str())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(leader.log_contains("acquired the lease"));
    assert!(
        !standby.log_contains("acquired the lease"),
        "only one instance leads"
    );

    // SIGKILL: no release, so the standby must wait for expiry, then take over.
    leader.child.kill().expect("kill leader");
    let killed_at = Instant::now();
    let expected = standby.name.clone();
    wait_for(Duration::from_secs(LEASE_SECONDS * 3 + 2), "takeover", || {
        let holder = cluster.lease_holder();
        let expected = expected.clone();
        async move { holder.await.filter(|h| *h == expected) }
    })
    .await;
    let took = killed_at.elapsed();
    // The lease's duration plus at most two follower polls (0.6 s each for a 3 s lease).
    assert!(
        took <= Duration::from_secs(LEASE_SECONDS) + Duration::from_secs(2),
        "takeover took {took:?}"
    );
    drop(leader);
    drop(standby);
    cluster.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_releases_the_lease_and_exits_0() {
    let cluster = Cluster::start(true).await;
    let mut a = Operator::start(&cluster, "op-a", &[]);
    wait_for(Duration::from_secs(30), "op-a leads", || {
        let h = cluster.lease_holder();
        async move { h.await.filter(|h| h == "op-a") }
    })
    .await;
    let b = Operator::start(&cluster, "op-b", &[]);
    wait_for(Duration::from_secs(30), "op-b stands by", || {
        let seen = b.log_contains("standing by");
        async move { seen.then_some(()) }
    })
    .await;
    a.signal_term();
    let status = wait_for(Duration::from_secs(20), "op-a exits", || {
        let s = a.exited();
        async move { s }
    })
    .await;
    assert_eq!(status.code(), Some(0), "{}", a.stderr());
    assert!(a.log_contains("released the lease"));
    // Released, not expired: op-b takes over well before a lease duration has passed.
    let released_at = Instant::now();
    wait_for(Duration::from_secs(LEASE_SECONDS * 3), "op-b leads", || {
        let h = cluster.lease_holder();
        async move { h.await.filter(|h| h == "op-b") }
    })
    .await;
    assert!(
        released_at.elapsed() < Duration::from_secs(LEASE_SECONDS),
        "took {:?}",
        released_at.elapsed()
    );
    drop(b);
    cluster.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_readyz_and_webhook_auth_over_http() {
    let cluster = Cluster::start(true).await;
    let op = Operator::start(
        &cluster,
        "solo",
        &[("FORGERUNNER_LEADER_ELECTION_ENABLED", "false")],
    );
    let addr = wait_for(Duration::from_secs(30), "HTTP address", || {
        let a = op.http_addr();
        async move { a }
    })
    .await;
    let (status, _, _) = http_get(&addr, "/healthz").await.expect("healthz");
    assert_eq!(status, 200);
    wait_for(Duration::from_secs(30), "ready", || {
        let addr = addr.clone();
        async move { http_get(&addr, "/readyz").await.filter(|r| r.0 == 200) }
    })
    .await;
    let (status, ctype, body) = http_get(&addr, "/metrics").await.expect("metrics");
    assert_eq!(status, 200);
    assert_eq!(
        ctype,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");

    #[cfg(feature = "gitea")]
    webhook_auth(&cluster, &addr).await;
    drop(op);
    cluster.server.shutdown().await;
}

/// Unsigned, wrongly signed and oversized deliveries are refused; a delivery signed with a
/// group's webhook secret is accepted.
#[cfg(feature = "gitea")]
/// With `metricsAddr` set (the chart sets it), `/metrics` is served on its own listener and
/// not on the webhook listener, which an Ingress or LoadBalancer may expose (security review
/// L1); the probes answer on both, so probes pointed at either port keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_on_their_own_listener_and_not_beside_webhooks() {
    let cluster = Cluster::start(true).await;
    let op = Operator::start(
        &cluster,
        "solo",
        &[
            ("FORGERUNNER_LEADER_ELECTION_ENABLED", "false"),
            ("FORGERUNNER_METRICS_ADDR", "127.0.0.1:0"),
        ],
    );
    let webhooks = wait_for(Duration::from_secs(30), "webhook address", || {
        let a = op.logged_addr("serving webhooks, /healthz, /readyz");
        async move { a }
    })
    .await;
    let metrics = wait_for(Duration::from_secs(30), "metrics address", || {
        let a = op.http_addr();
        async move { a }
    })
    .await;
    assert_ne!(webhooks, metrics);
    for addr in [&webhooks, &metrics] {
        let (status, _, _) = http_get(addr, "/healthz").await.expect("healthz");
        assert_eq!(status, 200, "/healthz on {addr}");
        wait_for(Duration::from_secs(30), "ready", || {
            let addr = addr.clone();
            async move { http_get(&addr, "/readyz").await.filter(|r| r.0 == 200) }
        })
        .await;
    }
    let (status, ctype, body) = http_get(&metrics, "/metrics").await.expect("metrics");
    assert_eq!(status, 200);
    assert_eq!(
        ctype,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");
    let (status, _, _) = http_get(&webhooks, "/metrics").await.expect("no metrics");
    assert_eq!(status, 404, "/metrics must not be served beside the webhooks");
    // And no webhook route on the metrics listener.
    let res = reqwest::Client::new()
        .post(format!("http://{metrics}/webhooks/gitea"))
        .body("{}")
        .send()
        .await
        .expect("post");
    assert_eq!(res.status().as_u16(), 404);
    drop(op);
    cluster.server.shutdown().await;
}

async fn webhook_auth(cluster: &Cluster, addr: &str) {
    let secrets: Api<Secret> = Api::namespaced(cluster.client(), "default");
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("hook".into()),
            ..ObjectMeta::default()
        },
        data: Some([("secret".to_owned(), ByteString(b"s3cret".to_vec()))].into()),
        ..Secret::default()
    };
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("create secret");
    // The group's credentials: the forge learns a group, and its webhook secret, from a pass
    // that got as far as the forge (here the forge itself is unreachable).
    let creds = Secret {
        metadata: ObjectMeta {
            name: Some("creds".into()),
            ..ObjectMeta::default()
        },
        data: Some([("token".to_owned(), ByteString(b"t0ken".to_vec()))].into()),
        ..Secret::default()
    };
    secrets
        .create(&PostParams::default(), &creds)
        .await
        .expect("create credentials secret");
    let group: RunnerGroup = serde_json::from_value(serde_json::json!({
        "apiVersion": "forgerunner.dev/v1alpha1",
        "kind": "RunnerGroup",
        "metadata": {"name": "g", "namespace": "default"},
        "spec": {"forge": "gitea", "maxRunners": 1, "gitea": {
            "url": "http://127.0.0.1:1", "scope": "global", "credentials": "creds",
            "labels": ["linux"], "webhookSecret": "hook"}}
    }))
    .expect("group");
    let groups: Api<RunnerGroup> = Api::namespaced(cluster.client(), "default");
    groups
        .create(&PostParams::default(), &group)
        .await
        .expect("create group");

    let http = reqwest::Client::new();
    let url = format!("http://{addr}/webhooks/gitea");
    let body = br#"{"zen":"ping"}"#.to_vec();
    let post = |sig: Option<String>, body: Vec<u8>| {
        let mut req = http.post(&url).header("X-Gitea-Event", "ping").body(body);
        if let Some(s) = sig {
            req = req.header("X-Gitea-Signature", s);
        }
        async move { req.send().await.map(|r| r.status().as_u16()).unwrap_or(0) }
    };
    assert_eq!(post(None, body.clone()).await, 401);
    assert_eq!(post(Some("00".repeat(32)), body.clone()).await, 401);
    // The first pass may not have run yet: wait until a good signature verifies.
    let good = forgerunner_gitea::sign(b"s3cret", &body);
    wait_for(Duration::from_secs(20), "signed delivery accepted", || {
        let f = post(Some(good.clone()), body.clone());
        async move { (f.await == 204).then_some(()) }
    })
    .await;
    let huge = vec![b' '; 2 * 1024 * 1024];
    let sig = forgerunner_gitea::sign(b"s3cret", &huge);
    assert_eq!(post(Some(sig), huge).await, 413);
}
