//! A simulated forgejo-runner for the pod shapes in [`super::runner_args`]: `register` (an init
//! container) registers and leaves the runner's state file; `one-job` declares its label names,
//! polls for one task (bound to a job handle when given), works on it with log and task
//! heartbeats, reports success and exits 0.
//!
//! Before it declares anything, `one-job` runs forgejo-runner's `configCheck`
//! (`internal/app/cmd/job.go` `runJob` → `internal/app/cmd/daemon.go` `configCheck`): when a
//! label resolves to the docker scheme (a label without a scheme does) and the pod gives no
//! `DOCKER_HOST` and no socket at a common path, it exits 1 with "daemon Docker Engine socket not
//! found and docker_host config was invalid" without ever polling ([`super::config_check`]).
//!
//! A task whose `runs-on` picks an `lxc` label fails (the pod cannot run LXC); the runner still
//! exits 0.
//!
//! Exit codes: 0 after a task (also when the job was cancelled at the forge); 2 for `one-job`
//! without `--wait` when the first poll finds nothing; 143 when the pod is cancelled; 1 for a
//! bad pod (flags, missing token file), no Docker daemon for docker labels, rejected credentials
//! or a server without the RPC.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::config_check::config_check;
use super::control::ForgejoFakeHandle;
use super::labels::pick_scheme;
use super::runner_args::{PodShape, STATE_FILE, parse_pod};
use crate::forge_common::rpc::RunnerClient;
use crate::sim::behaviour::{ContainerBehaviour, PodInfo};

/// Image prefix to register the behaviour for.
pub const RUNNER_IMAGE_PREFIX: &str = "code.forgejo.org/forgejo/runner";

/// Version the simulated runner declares unless [`RunnerOptions::version`] says otherwise.
pub const SIM_VERSION: &str = "12.8.2-sim";

/// Exit code of a process stopped by SIGTERM.
const SIGTERM_EXIT: i32 = 143;

/// How the simulated runner behaves.
#[derive(Clone, Debug)]
pub struct RunnerOptions {
    /// Time spent on a task.
    pub work: Duration,
    /// Pause between polls when the pod gives no `--fetch-interval` (forgejo-runner: 2 s).
    pub fetch_interval: Duration,
    /// Pause between log/task heartbeats while working (also how fast a cancel is noticed).
    pub heartbeat: Duration,
    /// Attempts of the first call (`Register` or `Declare`) on transport or server errors.
    pub connect_attempts: u32,
    /// Pause between those attempts.
    pub connect_retry: Duration,
    /// The version the runner sends on `Register` and `Declare` (forgejo-runner sends its own
    /// build version), which Forgejo 15's runner listing then answers as `version`.
    pub version: String,
}

impl Default for RunnerOptions {
    fn default() -> Self {
        RunnerOptions {
            work: Duration::from_millis(200),
            fetch_interval: Duration::from_millis(100),
            heartbeat: Duration::from_millis(100),
            connect_attempts: 10,
            connect_retry: Duration::from_millis(200),
            version: SIM_VERSION.to_owned(),
        }
    }
}

/// The behaviour for [`RUNNER_IMAGE_PREFIX`]:
/// `sim.register_behaviour(RUNNER_IMAGE_PREFIX, runner_behaviour(fake, opts))`.
pub fn runner_behaviour(fake: ForgejoFakeHandle, opts: RunnerOptions) -> Arc<dyn ContainerBehaviour> {
    Arc::new(ForgejoRunner { _fake: fake, opts })
}

struct ForgejoRunner {
    /// Keeps the fake alive while runner pods may still talk to it.
    _fake: ForgejoFakeHandle,
    opts: RunnerOptions,
}

/// A step ended the process with this exit code instead of producing its value.
struct Exit(i32);

impl ForgejoRunner {
    /// Sleeps `d`, or stops with 143 if the pod is cancelled first.
    async fn nap(pod: &PodInfo, d: Duration) -> Result<(), Exit> {
        tokio::select! {
            _ = pod.cancel.cancelled() => Err(Exit(SIGTERM_EXIT)),
            _ = tokio::time::sleep(d) => Ok(()),
        }
    }

    /// Calls `method` until the server answers (retrying transport and 5xx errors).
    async fn first_call(
        &self,
        pod: &PodInfo,
        c: &RunnerClient,
        method: &str,
        body: Value,
    ) -> Result<Value, Exit> {
        for _ in 0..self.opts.connect_attempts.max(1) {
            match c.call(method, body.clone()).await {
                Ok((200, v)) => return Ok(v),
                Ok((s, _)) if s < 500 => return Err(Exit(1)),
                _ => Self::nap(pod, self.opts.connect_retry).await?,
            }
        }
        Err(Exit(1))
    }

    /// Polls until a task arrives; its id and its job's `runs-on`.
    async fn poll(
        &self,
        pod: &PodInfo,
        c: &RunnerClient,
        handle: Option<&str>,
        wait: bool,
        every: Duration,
    ) -> Result<(i64, Vec<String>), Exit> {
        let (method, body) = match handle {
            Some(h) => ("FetchSingleTask", json!({"handle": h})),
            None => ("FetchTask", json!({})),
        };
        loop {
            match c.call(method, body.clone()).await {
                Ok((200, v)) => {
                    if let Some(id) = v["task"]["id"].as_i64() {
                        let runs_on = v["task"]["runsOn"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|l| l.as_str().map(str::to_string))
                            .collect();
                        return Ok((id, runs_on));
                    }
                    if !wait {
                        return Err(Exit(2));
                    }
                }
                // Deleted runner, or a server without `FetchSingleTask`.
                Ok((401 | 404, _)) => return Err(Exit(1)),
                _ => {}
            }
            Self::nap(pod, every).await?;
        }
    }

    /// Works on task `id`; the final `UpdateTask` is sent before returning.
    async fn work(&self, pod: &PodInfo, c: &RunnerClient, id: i64) -> i32 {
        let deadline = tokio::time::Instant::now() + self.opts.work;
        let final_update = |result: &'static str| json!({"state": {"id": id, "result": result}});
        let mut index = 0i64;
        loop {
            let now = tokio::time::Instant::now();
            if now >= deadline {
                break;
            }
            if Self::nap(pod, self.opts.heartbeat.min(deadline - now))
                .await
                .is_err()
            {
                let _ = c.call("UpdateTask", final_update("RESULT_CANCELLED")).await;
                return SIGTERM_EXIT;
            }
            let rows = json!([{"content": format!("step output {index}")}]);
            let log = json!({"taskId": id, "index": index, "rows": rows, "noMore": false});
            if let Ok((200, v)) = c.call("UpdateLog", log).await {
                index = v["ackIndex"].as_i64().unwrap_or(index + 1);
            }
            let beat = c.call("UpdateTask", final_update("RESULT_UNSPECIFIED")).await;
            if let Ok((200, v)) = beat
                && v["state"]["result"] == "RESULT_CANCELLED"
            {
                // Cancelled at the forge: stop the job, report it, exit normally.
                let _ = c.call("UpdateTask", final_update("RESULT_CANCELLED")).await;
                return 0;
            }
        }
        let done = json!({"taskId": id, "index": index, "rows": [], "noMore": true});
        let _ = c.call("UpdateLog", done).await;
        let _ = c.call("UpdateTask", final_update("RESULT_SUCCESS")).await;
        0
    }

    /// A task picked by an `lxc` label: forgejo-runner runs it through `lxc-helpers.sh`
    /// (`act/runner/run_context.go`), which needs LXC and root on the host; neither is in the
    /// runner image (`Dockerfile`: alpine, git, bash, `USER 1000:1000`). The job fails; the
    /// runner reports it and exits 0 (`runJob` returns the poller's error, not the job's).
    async fn fail_lxc(c: &RunnerClient, id: i64) -> i32 {
        let rows = json!([{"content": "lxc-helpers.sh: cannot create LXC containers in this runner"}]);
        let log = json!({"taskId": id, "index": 0, "rows": rows, "noMore": true});
        let _ = c.call("UpdateLog", log).await;
        let done = json!({"state": {"id": id, "result": "RESULT_FAILURE"}});
        let _ = c.call("UpdateTask", done).await;
        0
    }

    async fn play(&self, pod: &PodInfo) -> Result<i32, Exit> {
        let shape = parse_pod(pod).map_err(|e| {
            tracing::warn!(pod = %pod.name, error = %e, "forgejo-runner sim: bad pod");
            Exit(1)
        })?;
        let (client, handle, wait, every, full_labels) = match shape {
            PodShape::OneJob {
                url,
                uuid,
                token,
                handle,
                labels,
                full_labels,
                wait,
                fetch_interval,
                ..
            } => {
                // `runJob` checks the Docker daemon before `createRunner` (`Declare`).
                config_check(pod, &full_labels).map_err(|e| {
                    tracing::warn!(pod = %pod.name, error = %e, "forgejo-runner sim: configCheck failed");
                    Exit(1)
                })?;
                let mut c = RunnerClient::new(&url).map_err(|_| Exit(1))?;
                c.uuid = uuid;
                c.token = token;
                let declare = json!({"labels": labels, "version": self.opts.version});
                self.first_call(pod, &c, "Declare", declare).await?;
                (
                    c,
                    handle,
                    wait,
                    fetch_interval.unwrap_or(self.opts.fetch_interval),
                    full_labels,
                )
            }
            PodShape::Register {
                url,
                name,
                labels,
                full_labels,
                token,
                ..
            } => {
                let c = RunnerClient::new(&url).map_err(|_| Exit(1))?;
                // `forgejo-runner register` on 11–14: never ephemeral.
                let body = json!({"name": name, "token": token, "labels": labels, "ephemeral": false, "version": self.opts.version});
                let v = self.first_call(pod, &c, "Register", body).await?;
                let r = &v["runner"];
                let state = json!({
                    "id": r["id"], "uuid": r["uuid"], "name": name, "token": r["token"],
                    "address": url, "labels": full_labels, "ephemeral": false,
                });
                // Registration ends here; `one-job` in the main container runs from the file.
                return if pod.write_scratch(STATE_FILE, &state.to_string()) {
                    Ok(0)
                } else {
                    Err(Exit(1))
                };
            }
        };
        let (task, runs_on) = self.poll(pod, &client, handle.as_deref(), wait, every).await?;
        if pick_scheme(&full_labels, &runs_on) == "lxc" {
            return Ok(Self::fail_lxc(&client, task).await);
        }
        Ok(self.work(pod, &client, task).await)
    }
}

#[async_trait]
impl ContainerBehaviour for ForgejoRunner {
    async fn run(&self, pod: PodInfo) -> i32 {
        match self.play(&pod).await {
            Ok(code) | Err(Exit(code)) => code,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::forgejo::runner_args::TOKEN_FILE;
    use crate::forgejo::{Conclusion, FakeConfig, FakeScope, JobStatus};

    /// A v15 one-job pod for a REST-created runner with `labels` and `env`; its runner id too.
    fn one_job_pod(fake: &ForgejoFakeHandle, labels: &[&str], env: &[(&str, &str)]) -> (PodInfo, i64) {
        let r = fake.add_runner(FakeScope::Global, "g-abcde", &[], true);
        let mut args: Vec<String> = vec!["one-job".into(), "--wait".into(), "--url".into(), fake.url()];
        args.extend(["--uuid".into(), r.uuid.clone()]);
        args.push(format!("--token-url=file:{TOKEN_FILE}"));
        for l in labels {
            args.extend(["--label".to_string(), l.to_string()]);
        }
        let pod = PodInfo {
            namespace: "ns".into(),
            name: "g-abcde".into(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            image: format!("{RUNNER_IMAGE_PREFIX}:12.8.2"),
            command: vec!["forgejo-runner".into()],
            args,
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            files: BTreeMap::from([(TOKEN_FILE.to_string(), r.token.clone())]),
            cancel: CancellationToken::new(),
            container: "runner".into(),
            init: false,
            scratch: Default::default(),
        };
        (pod, r.id)
    }

    /// forgejo-runner `internal/app/cmd/job.go` `runJob` calls `configCheck`
    /// (`internal/app/cmd/daemon.go`) before `Declare` and the first poll: a label without a
    /// scheme is docker (`internal/pkg/labels/labels.go` `Parse`), and without `DOCKER_HOST` or
    /// a socket `getDockerSocketPath` fails, so the runner exits 1 and never takes the job.
    #[tokio::test]
    async fn docker_labels_without_a_daemon_exit_1_before_declaring() {
        let fake = ForgejoFakeHandle::start(FakeConfig::default())
            .await
            .expect("fake");
        let job = fake.queue_job("o/r", "j", &["ubuntu-latest"]);
        let sim = runner_behaviour(fake.clone(), RunnerOptions::default());
        let (p, id) = one_job_pod(&fake, &["ubuntu-latest"], &[]);
        assert_eq!(sim.run(p).await, 1);
        let row = fake.runner(id).expect("runner row");
        assert!(row.labels.is_empty(), "never declared: {:?}", row.labels);
        assert_eq!(fake.job(job).expect("job").status, JobStatus::Waiting);

        // The same labels with a daemon (what `containerMode: dind` sets), or as host labels.
        let (p, _) = one_job_pod(
            &fake,
            &["ubuntu-latest"],
            &[("DOCKER_HOST", "unix:///run/dind/docker.sock")],
        );
        assert_eq!(sim.run(p).await, 0);
        assert!(matches!(fake.job(job).expect("job").status, JobStatus::Done(_)));
        let other = fake.queue_job("o/r", "k", &["ubuntu-latest"]);
        let (p, _) = one_job_pod(&fake, &["ubuntu-latest:host"], &[]);
        assert_eq!(sim.run(p).await, 0);
        assert!(matches!(fake.job(other).expect("job").status, JobStatus::Done(_)));
    }

    /// forgejo-runner sends its build version on `Declare` (`internal/app/run/runner.go`
    /// `Declare`: `Version: ver.Version()`) and Forgejo 15 lists it as `ActionRunner.version`
    /// (`modules/structs/repo_actions.go@v15.0.3`): the sim declares [`RunnerOptions::version`].
    #[tokio::test]
    async fn the_v15_listing_answers_the_version_the_runner_declared() {
        let fake = ForgejoFakeHandle::start(FakeConfig::default())
            .await
            .expect("fake");
        fake.queue_job("o/r", "j", &["debian"]);
        let listed = || async {
            let v: serde_json::Value = reqwest::Client::new()
                .get(format!("{}/api/v1/admin/actions/runners", fake.url()))
                .header("authorization", format!("token {}", crate::forgejo::ADMIN_TOKEN))
                .send()
                .await
                .expect("listing")
                .json()
                .await
                .expect("json");
            v.as_array()
                .expect("an array")
                .iter()
                .map(|r| r["version"].as_str().expect("a version").to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(RunnerOptions::default().version, SIM_VERSION);
        let opts = RunnerOptions {
            version: "12.9.1".into(),
            work: Duration::from_millis(400),
            ..RunnerOptions::default()
        };
        let (p, id) = one_job_pod(&fake, &["debian:host"], &[]);
        assert_eq!(
            listed().await,
            [""],
            "a row made by POST has reported nothing yet"
        );
        let sim = runner_behaviour(fake.clone(), opts);
        let run = tokio::spawn(async move { sim.run(p).await });
        let mut seen = Vec::new();
        for _ in 0..100 {
            seen = listed().await;
            if seen != [""] {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(seen, ["12.9.1"], "listed while it works");
        assert_eq!(run.await.expect("run"), 0);
        // The ephemeral row is gone after its task; a test sets a row's version directly.
        assert!(fake.runner(id).is_none());
        let row = fake.add_runner(FakeScope::Global, "g-fghij", &[], false);
        assert!(fake.set_runner_version(row.id, "11.3.0"));
        assert!(!fake.set_runner_version(-1, "11.3.0"));
        assert_eq!(listed().await, ["11.3.0"]);
    }

    /// forgejo-runner `internal/pkg/labels/labels.go` `PickPlatform` gives an `lxc` label's job
    /// the platform `lxc:…`, which `act/runner/run_context.go` runs through `lxc-helpers.sh`;
    /// the runner image has no LXC (`Dockerfile`). `configCheck` does not look at LXC, so the
    /// runner starts, takes the job, and the job fails.
    #[tokio::test]
    async fn an_lxc_label_takes_the_job_and_fails_it() {
        let fake = ForgejoFakeHandle::start(FakeConfig::default())
            .await
            .expect("fake");
        let job = fake.queue_job("o/r", "j", &["bookworm"]);
        let sim = runner_behaviour(fake.clone(), RunnerOptions::default());
        let (p, _) = one_job_pod(&fake, &["bookworm:lxc://debian:bookworm"], &[]);
        assert_eq!(sim.run(p).await, 0);
        assert_eq!(
            fake.job(job).expect("job").status,
            JobStatus::Done(Conclusion::Failure)
        );
    }
}
