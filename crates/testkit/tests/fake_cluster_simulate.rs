//! `fake-cluster --simulate` as a process: a Job created with the real kubectl gets a Pod that
//! runs, and `--forges` announces each fake before `ready`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(60);

/// Kills the fake cluster when the test ends, passing or not.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        // Already exited is fine.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts fake-cluster with `args`; returns it and the lines it printed up to `ready <url>`.
fn start(kubeconfig: &Path, args: &[&str]) -> (Running, Vec<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fake-cluster"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn fake-cluster");
    let stdout = child.stdout.take().expect("stdout");
    let running = Running(child);
    let mut lines = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("read fake-cluster output");
        let ready = line.starts_with("ready http://");
        lines.push(line);
        if ready {
            return (running, lines);
        }
    }
    panic!("fake-cluster exited before ready: {lines:?}");
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let r = forgerunner_testkit::kubectl::run(kubeconfig, args).expect("run kubectl");
    (r.ok, r.text())
}

const JOB: &str = "apiVersion: batch/v1
kind: Job
metadata:
  name: hello
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: hello
        image: busybox:1.36
        command: [echo, hello]
";

#[test]
fn simulated_cluster_gives_a_kubectl_job_a_running_pod() {
    if !forgerunner_testkit::kubectl::installed() {
        eprintln!("skipping: kubectl not installed");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    let (_cluster, lines) = start(&kubeconfig, &["--simulate", "--forges", "gitea"]);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("forge gitea url=http://127.0.0.1:") && l.contains("token=")),
        "no gitea line before ready: {lines:?}"
    );

    let job = dir.path().join("job.yaml");
    std::fs::write(&job, JOB).expect("write job");
    let (ok, out) = kubectl(&kubeconfig, &["apply", "-f", job.to_str().expect("utf-8 path")]);
    assert!(ok, "kubectl apply job: {out}");

    let deadline = Instant::now() + DEADLINE;
    let mut last = String::new();
    while Instant::now() < deadline {
        let (ok, phases) = kubectl(
            &kubeconfig,
            &[
                "get",
                "pods",
                "-l",
                "job-name=hello",
                "-o",
                "jsonpath={.items[*].status.phase}",
            ],
        );
        if ok && (phases.contains("Running") || phases.contains("Succeeded")) {
            let (ok, jobs) = kubectl(&kubeconfig, &["get", "job", "hello"]);
            assert!(ok && jobs.contains("hello"), "kubectl get job: {jobs}");
            return;
        }
        last = phases;
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the Job's Pod did not run within {DEADLINE:?}; last phases: {last:?}");
}
