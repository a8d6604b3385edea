//! A simulated ephemeral act_runner: registers with the token from its environment, polls
//! for one job, works on it, reports it done and exits 0 — or polls forever, like the real
//! one, until its pod is deleted.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;

use super::control::GiteaFakeHandle;
use crate::forge_common::rpc::RunnerClient;
use crate::sim::behaviour::{ContainerBehaviour, PodInfo};

/// How the simulated runner behaves.
#[derive(Clone, Debug)]
pub struct RunnerOptions {
    /// Time spent on a job.
    pub work: Duration,
    /// Pause between `FetchTask` polls (act_runner: 2 s).
    pub fetch_interval: Duration,
    /// Pause between heartbeats while working (also how fast a cancel is noticed).
    pub heartbeat: Duration,
    /// Registration attempts before giving up with exit code 1 (run.sh: 10).
    pub register_attempts: u32,
    /// Pause between registration attempts.
    pub register_retry: Duration,
}

impl Default for RunnerOptions {
    fn default() -> Self {
        RunnerOptions {
            work: Duration::from_millis(200),
            fetch_interval: Duration::from_millis(100),
            heartbeat: Duration::from_millis(100),
            register_attempts: 10,
            register_retry: Duration::from_millis(200),
        }
    }
}

/// The behaviour for runner images; register it with the simulator for the Gitea image.
pub fn runner_behaviour(fake: GiteaFakeHandle, opts: RunnerOptions) -> Arc<dyn ContainerBehaviour> {
    Arc::new(ActRunner { _fake: fake, opts })
}

struct ActRunner {
    /// Keeps the fake alive while runner pods may still talk to it.
    _fake: GiteaFakeHandle,
    opts: RunnerOptions,
}

/// Exit code of a process stopped by SIGTERM.
const SIGTERM_EXIT: i32 = 143;

impl ActRunner {
    async fn register(&self, pod: &PodInfo) -> Option<RunnerClient> {
        let env = |k: &str| pod.env.get(k).cloned().unwrap_or_default();
        let base = env("GITEA_INSTANCE_URL").trim_end_matches('/').to_string();
        let token = env("GITEA_RUNNER_REGISTRATION_TOKEN");
        if base.is_empty() || token.is_empty() {
            return None;
        }
        let name = Some(env("GITEA_RUNNER_NAME"))
            .filter(|n| !n.is_empty())
            .unwrap_or(pod.name.clone());
        // act_runner registers label *names*: `name:docker://img` → `name`.
        let labels: Vec<String> = env("GITEA_RUNNER_LABELS")
            .split(',')
            .map(|l| l.split(':').next().unwrap_or_default().trim().to_string())
            .filter(|l| !l.is_empty())
            .collect();
        let ephemeral = !env("GITEA_RUNNER_EPHEMERAL").is_empty();
        let mut session = RunnerClient::new(&base).ok()?;
        let body = json!({"name": name, "token": token, "labels": labels, "ephemeral": ephemeral});
        for _ in 0..self.opts.register_attempts.max(1) {
            if let Ok((200, v)) = session.call("Register", body.clone()).await {
                let s = |k: &str| v["runner"][k].as_str().unwrap_or_default().to_string();
                session.uuid = s("uuid");
                session.token = s("token");
                let _ = session.call("Declare", json!({"labels": labels})).await;
                return Some(session);
            }
            tokio::select! {
                _ = pod.cancel.cancelled() => return None,
                _ = tokio::time::sleep(self.opts.register_retry) => {}
            }
        }
        None
    }
}

#[async_trait]
impl ContainerBehaviour for ActRunner {
    async fn run(&self, pod: PodInfo) -> i32 {
        let Some(session) = self.register(&pod).await else {
            return if pod.cancel.is_cancelled() {
                SIGTERM_EXIT
            } else {
                1
            };
        };
        // Poll until one task arrives (no idle limit, like act_runner's ephemeral mode).
        let task = loop {
            match session.call("FetchTask", json!({})).await {
                Ok((200, v)) => {
                    if let Some(id) = v["task"]["id"].as_i64() {
                        break id;
                    }
                }
                // The server removed us (ephemeral runner done or deleted): exit like act_runner.
                Ok((401 | 404, _)) => return 0,
                _ => {}
            }
            tokio::select! {
                _ = pod.cancel.cancelled() => return SIGTERM_EXIT,
                _ = tokio::time::sleep(self.opts.fetch_interval) => {}
            }
        };
        let deadline = tokio::time::Instant::now() + self.opts.work;
        loop {
            let now = tokio::time::Instant::now();
            if now >= deadline {
                break;
            }
            let nap = self.opts.heartbeat.min(deadline - now);
            tokio::select! {
                _ = pod.cancel.cancelled() => {
                    let _ = session
                        .call("UpdateTask", json!({"state": {"id": task, "result": "RESULT_CANCELLED"}}))
                        .await;
                    return SIGTERM_EXIT;
                }
                _ = tokio::time::sleep(nap) => {}
            }
            let beat = session
                .call(
                    "UpdateTask",
                    json!({"state": {"id": task, "result": "RESULT_UNSPECIFIED"}}),
                )
                .await;
            if let Ok((200, v)) = beat
                && v["state"]["result"] == "RESULT_CANCELLED"
            {
                let _ = session
                    .call(
                        "UpdateTask",
                        json!({"state": {"id": task, "result": "RESULT_CANCELLED"}}),
                    )
                    .await;
                return 0;
            }
        }
        let _ = session
            .call(
                "UpdateTask",
                json!({"state": {"id": task, "result": "RESULT_SUCCESS"}}),
            )
            .await;
        0
    }
}
