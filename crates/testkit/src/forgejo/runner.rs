//! A simulated forgejo-runner for the pod shapes in [`super::runner_args`]: `register` (an init
//! container) registers and leaves the runner's state file; `one-job` declares its label names,
//! polls for one task (bound to a job handle when given), works on it with log and task
//! heartbeats, reports success and exits 0.
//!
//! Exit codes: 0 after a task (also when the job was cancelled at the forge); 2 for `one-job`
//! without `--wait` when the first poll finds nothing; 143 when the pod is cancelled; 1 for a
//! bad pod (flags, missing token file), rejected credentials or a server without the RPC.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::control::ForgejoFakeHandle;
use super::runner_args::{PodShape, STATE_FILE, parse_pod};
use crate::forge_common::rpc::RunnerClient;
use crate::sim::behaviour::{ContainerBehaviour, PodInfo};

/// Image prefix to register the behaviour for.
pub const RUNNER_IMAGE_PREFIX: &str = "code.forgejo.org/forgejo/runner";

/// Version the simulated runner declares.
const SIM_VERSION: &str = "12.8.2-sim";

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
}

impl Default for RunnerOptions {
    fn default() -> Self {
        RunnerOptions {
            work: Duration::from_millis(200),
            fetch_interval: Duration::from_millis(100),
            heartbeat: Duration::from_millis(100),
            connect_attempts: 10,
            connect_retry: Duration::from_millis(200),
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

    /// Polls until a task arrives; its id.
    async fn poll(
        &self,
        pod: &PodInfo,
        c: &RunnerClient,
        handle: Option<&str>,
        wait: bool,
        every: Duration,
    ) -> Result<i64, Exit> {
        let (method, body) = match handle {
            Some(h) => ("FetchSingleTask", json!({"handle": h})),
            None => ("FetchTask", json!({})),
        };
        loop {
            match c.call(method, body.clone()).await {
                Ok((200, v)) => {
                    if let Some(id) = v["task"]["id"].as_i64() {
                        return Ok(id);
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

    async fn play(&self, pod: &PodInfo) -> Result<i32, Exit> {
        let shape = parse_pod(pod).map_err(|e| {
            tracing::warn!(pod = %pod.name, error = %e, "forgejo-runner sim: bad pod");
            Exit(1)
        })?;
        let (client, handle, wait, every) = match shape {
            PodShape::OneJob {
                url,
                uuid,
                token,
                handle,
                labels,
                wait,
                fetch_interval,
            } => {
                let mut c = RunnerClient::new(&url).map_err(|_| Exit(1))?;
                c.uuid = uuid;
                c.token = token;
                let declare = json!({"labels": labels, "version": SIM_VERSION});
                self.first_call(pod, &c, "Declare", declare).await?;
                (
                    c,
                    handle,
                    wait,
                    fetch_interval.unwrap_or(self.opts.fetch_interval),
                )
            }
            PodShape::Register {
                url,
                name,
                labels,
                full_labels,
                token,
            } => {
                let c = RunnerClient::new(&url).map_err(|_| Exit(1))?;
                // `forgejo-runner register` on 11–14: never ephemeral.
                let body = json!({"name": name, "token": token, "labels": labels, "ephemeral": false, "version": SIM_VERSION});
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
        let task = self.poll(pod, &client, handle.as_deref(), wait, every).await?;
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
