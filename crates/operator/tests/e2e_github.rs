//! End-to-end (GitHub issue 4): the real `forgerunner` binary against the fake API server, the
//! cluster simulator and the scaleset emulator. 50 jobs with `maxRunners: 10` all complete,
//! never more than 10 runners exist, and nothing is left registered or running afterwards.
#![cfg(feature = "github")]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use forgerunner_core::RunnerGroup;
use forgerunner_testkit::apiserver::{FakeApiServer, install_crypto_provider};
use forgerunner_testkit::github::{
    EmulatorOptions, Endpoint, JobState, RunnerOptions, runner_behaviour, start_emulator,
};
use forgerunner_testkit::sim::{SimConfig, Simulator};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, PostParams};
use kube::{Api, CustomResourceExt};

const NS: &str = "e2e-github";
const GROUP: &str = "gh-runners";
const JOBS: usize = 50;
const MAX_RUNNERS: usize = 10;

/// `forgerunner run` as a child process, its output kept for failure messages.
struct Operator {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Operator {
    fn start(kubeconfig: &str) -> Operator {
        let mut child = Command::new(env!("CARGO_BIN_EXE_forgerunner"))
            .args([
                "run",
                "--http-addr",
                "127.0.0.1:0",
                "--log-format",
                "json",
                "--forges",
                "github",
            ])
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAME", "forgerunner-e2e-github")
            .env("POD_NAMESPACE", "default")
            .env("FORGERUNNER_LEADER_ELECTION_ENABLED", "false")
            .env("FORGERUNNER_LOG_LEVEL", "info")
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn forgerunner");
        let lines = Arc::new(Mutex::new(Vec::new()));
        for pipe in [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let sink = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    sink.lock().expect("lines").push(line);
                }
            });
        }
        Operator { child, lines }
    }

    fn tail(&self) -> String {
        let lines = self.lines.lock().expect("lines");
        lines
            .iter()
            .rev()
            .take(40)
            .rev()
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn is_active(job: &Job) -> bool {
    let s = job.status.clone().unwrap_or_default();
    job.metadata.deletion_timestamp.is_none() && s.succeeded.unwrap_or(0) == 0 && s.failed.unwrap_or(0) == 0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_jobs_with_max_ten_runners_all_complete_and_clean_up() {
    install_crypto_provider();
    let server = FakeApiServer::start().await.expect("fake API server");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let client = server.client().expect("client");
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &RunnerGroup::crd())
        .await
        .expect("install CRD");
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": NS}})).expect("ns");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");

    let gh = start_emulator(EmulatorOptions {
        long_poll: Duration::from_secs(1),
        ..EmulatorOptions::default()
    })
    .await;
    let sim = Simulator::start(
        client.clone(),
        SimConfig {
            namespaces: vec![NS.into()],
            ..SimConfig::default()
        },
    );
    let runner_opts = RunnerOptions {
        work_time: Duration::from_millis(300),
        ..RunnerOptions::default()
    };
    sim.register_behaviour(
        "ghcr.io/actions/actions-runner",
        runner_behaviour(gh.emu.clone(), runner_opts),
    );
    sim.wait_ready().await;

    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "gh-creds", "namespace": NS},
        "stringData": gh.pat_secret_data(),
    }))
    .expect("secret");
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret");
    let group: RunnerGroup = serde_json::from_value(serde_json::json!({
        "apiVersion": "forgerunner.dev/v1alpha1",
        "kind": "RunnerGroup",
        "metadata": {"name": GROUP, "namespace": NS},
        "spec": {
            "forge": "github",
            "github": {"configUrl": gh.config_url(), "credentials": "gh-creds"},
            "minRunners": 0,
            "maxRunners": MAX_RUNNERS,
        },
    }))
    .expect("group");
    Api::<RunnerGroup>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &group)
        .await
        .expect("group");

    let op = Operator::start(&kubeconfig.to_string_lossy());
    let emu = gh.emu.clone();

    // The operator creates the scale set (named after the group) and opens its session.
    let deadline = Instant::now() + Duration::from_secs(90);
    let set_id = loop {
        let state = emu.state();
        if let Some(set) = state.scale_sets.iter().find(|s| s.name == GROUP)
            && state.sessions.iter().any(|s| s.scale_set_id == set.id)
        {
            break set.id;
        }
        assert!(
            Instant::now() < deadline,
            "no scale set/session; operator log:\n{}",
            op.tail()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    let queued: Vec<_> = (0..JOBS)
        .map(|_| emu.queue_job(set_id, Vec::<String>::new()))
        .collect();
    let jobs_api: Api<Job> = Api::namespaced(client.clone(), NS);
    let selector = ListParams::default().labels(&format!("forgerunner.dev/group={GROUP}"));
    let (mut max_active, mut max_registered, mut max_busy) = (0usize, 0usize, 0usize);
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let state = emu.state();
        max_registered =
            max_registered.max(state.runners.iter().filter(|r| r.scale_set_id == set_id).count());
        max_busy = max_busy.max(state.jobs_in(set_id, JobState::Running).count());
        let jobs = jobs_api.list(&selector).await.expect("list Jobs");
        max_active = max_active.max(jobs.items.iter().filter(|j| is_active(j)).count());
        let done = state.jobs_in(set_id, JobState::Completed).count();
        if done == JOBS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {done}/{JOBS} jobs completed (max active {max_active}); operator log:\n{}",
            op.tail()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let state = emu.state();
    assert!(
        state
            .jobs
            .iter()
            .filter(|j| queued.contains(&j.id))
            .all(|j| j.result.as_deref() == Some("succeeded")),
        "every job succeeded: {:?}",
        state.jobs.iter().map(|j| j.result.clone()).collect::<Vec<_>>()
    );
    assert!(
        max_active <= MAX_RUNNERS,
        "{max_active} runner Jobs active at once (max {MAX_RUNNERS})"
    );
    assert!(
        max_registered <= MAX_RUNNERS,
        "{max_registered} runners registered at once (max {MAX_RUNNERS})"
    );
    assert!(max_busy > 1, "runners worked in parallel (max busy {max_busy})");
    assert!(
        emu.requests_to(Endpoint::GetMessage)
            .iter()
            .all(|r| r.max_capacity == Some(MAX_RUNNERS as u32)),
        "X-ScaleSetMaxCapacity = maxRunners"
    );

    // Afterwards: no runner left registered at the service, no runner Job left in the cluster.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let registered = emu.state().runners.len();
        let jobs = jobs_api.list(&selector).await.expect("list Jobs").items.len();
        if registered == 0 && jobs == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{registered} runners registered and {jobs} Jobs left; operator log:\n{}",
            op.tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(op);
    sim.shutdown().await;
    server.shutdown().await;
}
