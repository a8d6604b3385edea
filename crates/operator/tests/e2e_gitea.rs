//! End-to-end (GitHub issue 5): the real `forgerunner` binary against the fake API server, the
//! cluster simulator and the Gitea fake. 50 queued jobs across two label sets are served by two
//! RunnerGroups (`maxRunners: 8`): every job runs on a runner whose labels match, no group ever
//! has more than 8 runners, nothing stays registered and no Job is left; jobs no group matches
//! stay queued and get no runner.
#![cfg(feature = "gitea")]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use forgerunner_core::RunnerGroup;
use forgerunner_testkit::apiserver::{FakeApiServer, install_crypto_provider};
use forgerunner_testkit::gitea::{
    ADMIN_TOKEN, Conclusion, FakeConfig, GiteaFakeHandle, JobState, RunnerOptions, runner_behaviour,
};
use forgerunner_testkit::sim::{SimConfig, Simulator};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, PostParams};
use kube::{Api, CustomResourceExt};

const NS: &str = "e2e-gitea";
const GROUPS: [(&str, &str); 2] = [("gt-linux", "linux"), ("gt-gpu", "gpu")];
const JOBS: usize = 50;
const MAX_RUNNERS: usize = 8;

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
                "gitea",
            ])
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAME", "forgerunner-e2e-gitea")
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
async fn fifty_jobs_two_label_sets_two_groups_max_eight() {
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

    let gitea = GiteaFakeHandle::start(FakeConfig::default())
        .await
        .expect("gitea fake");
    gitea.add_repo("acme/app");
    let sim = Simulator::start(
        client.clone(),
        SimConfig {
            namespaces: vec![NS.into()],
            ..SimConfig::default()
        },
    );
    let runner_opts = RunnerOptions {
        work: Duration::from_millis(300),
        ..RunnerOptions::default()
    };
    sim.register_behaviour("gitea/act_runner", runner_behaviour(gitea.clone(), runner_opts));
    sim.wait_ready().await;

    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "gitea-creds", "namespace": NS},
        "stringData": {"token": ADMIN_TOKEN},
    }))
    .expect("secret");
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret");
    for (name, label) in GROUPS {
        let group: RunnerGroup = serde_json::from_value(serde_json::json!({
            "apiVersion": "forgerunner.dev/v1alpha1",
            "kind": "RunnerGroup",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "forge": "gitea",
                "gitea": {
                    "url": gitea.url(),
                    "scope": "global",
                    "credentials": "gitea-creds",
                    "labels": [format!("{label}:host")],
                    "pollIntervalSeconds": 1,
                },
                "minRunners": 0,
                "maxRunners": MAX_RUNNERS,
                "idleTimeoutSeconds": 5,
            },
        }))
        .expect("group");
        Api::<RunnerGroup>::namespaced(client.clone(), NS)
            .create(&PostParams::default(), &group)
            .await
            .expect("group");
    }

    let op = Operator::start(&kubeconfig.to_string_lossy());
    let unmatched: Vec<i64> = (0..3)
        .map(|_| gitea.queue_job("acme/app", &["windows"]))
        .collect();
    let queued: Vec<i64> = (0..JOBS)
        .map(|i| gitea.queue_job("acme/app", &[GROUPS[i % 2].1]))
        .collect();

    let jobs_api: Api<Job> = Api::namespaced(client.clone(), NS);
    let mut max_active = [0usize; 2];
    let mut max_registered = [0usize; 2];
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let runners = gitea.runners();
        for (i, (name, _)) in GROUPS.iter().enumerate() {
            let prefix = format!("{name}-");
            max_registered[i] =
                max_registered[i].max(runners.iter().filter(|r| r.name.starts_with(&prefix)).count());
            let selector = ListParams::default().labels(&format!("forgerunner.dev/group={name}"));
            let jobs = jobs_api.list(&selector).await.expect("list Jobs");
            max_active[i] = max_active[i].max(jobs.items.iter().filter(|j| is_active(j)).count());
        }
        let done = gitea
            .jobs()
            .iter()
            .filter(|j| queued.contains(&j.id) && matches!(j.state, JobState::Done(_)))
            .count();
        if done == JOBS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {done}/{JOBS} jobs completed (max active {max_active:?}); operator log:\n{}",
            op.tail()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for job in gitea.jobs().iter().filter(|j| queued.contains(&j.id)) {
        assert_eq!(job.state, JobState::Done(Conclusion::Success), "job {}", job.id);
        assert!(
            job.labels.iter().all(|l| job.runner_labels.contains(l)),
            "job {} ({:?}) ran on a runner with labels {:?}",
            job.id,
            job.labels,
            job.runner_labels
        );
        let (group, _) = GROUPS.iter().find(|(_, l)| job.labels[0] == *l).expect("group");
        assert!(
            job.runner_name.starts_with(&format!("{group}-")),
            "job {} on {}",
            job.id,
            job.runner_name
        );
    }
    for i in 0..2 {
        assert!(
            max_active[i] <= MAX_RUNNERS,
            "{}: {} runner Jobs at once",
            GROUPS[i].0,
            max_active[i]
        );
        assert!(
            max_registered[i] <= MAX_RUNNERS,
            "{}: {} runners registered",
            GROUPS[i].0,
            max_registered[i]
        );
        assert!(max_active[i] > 1, "{}: runners worked in parallel", GROUPS[i].0);
    }

    // Afterwards: nothing registered at Gitea, no runner Job in the cluster; the unmatched jobs
    // are still queued and nobody took them.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let registered = gitea.runners().len();
        let jobs = jobs_api
            .list(&ListParams::default())
            .await
            .expect("list Jobs")
            .items
            .len();
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
    for id in unmatched {
        let job = gitea.job(id).expect("job");
        assert_eq!(job.state, JobState::Waiting, "unmatched job {id} stays queued");
        assert!(job.runner_name.is_empty());
    }
    drop(op);
    sim.shutdown().await;
    server.shutdown().await;
}
