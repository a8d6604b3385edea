//! A simulated Gitea Runner (`gitea-runner`, or the legacy `act_runner`) in the operator's
//! two-container pod:
//!
//! - as the `register` init container (`pod.init`, or a command naming `register`): registers
//!   at the fake with the token from the mounted file [`REGISTRATION_TOKEN_FILE`] (env
//!   `GITEA_INSTANCE_URL`, `GITEA_RUNNER_NAME`, `GITEA_RUNNER_LABELS`; `--ephemeral` when the
//!   command says so) and writes the state file [`STATE_FILE`] on the shared emptyDir, in the
//!   real runner's JSON shape (`id`, `uuid`, `name`, `token`, `address`, `labels`,
//!   `ephemeral`), then exits 0;
//! - as the main container (`daemon`): reads [`STATE_FILE`], declares its labels with the
//!   runner's own credentials, polls for one task, works on it, reports it done and exits 0 —
//!   or polls forever, like the real one, until its pod is deleted. Without a state file it
//!   exits 1 ("registration file not found").
//!
//! Both read a config file only when the command line names one (`--config`/`-c`, a
//! persistent flag of the root command in act_runner's `internal/app/cmd/cmd.go`); the
//! `CONFIG_FILE` variable means nothing to the binary (only the image's entrypoint script,
//! `scripts/run.sh`, turns it into `--config`, and the operator's pod replaces that entrypoint).
//! A named file that is not mounted fails the container (`config.LoadDefault`: "open config
//! file"); a config's `runner.labels`, when not empty, replaces `--labels` at `register` and the
//! state file's labels at `daemon` (`register.go` `registerNoInteractive`, `daemon.go`
//! `runDaemon`).
//!
//! A job with a cache key ([`super::FakeJob::cache_key`]) plays its `actions/cache` step before
//! its work: against `cache.external_server` of the runner's config when it names one (reached
//! through the simulator's cluster network, [`RunnerOptions::cache`]), else against the
//! runner's embedded server, which starts empty in every pod; see
//! [`crate::sim::cache_server::client`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::control::GiteaFakeHandle;
use crate::forge_common::rpc::RunnerClient;
use crate::sim::behaviour::{ContainerBehaviour, PodInfo};
use crate::sim::cache_server::client::{CacheStep, ExternalCache, RunnerCache};

/// Image prefixes to register the behaviour for: Gitea Runner ≥ 1.0 and the legacy image.
pub const RUNNER_IMAGE_PREFIXES: [&str; 2] = ["gitea/runner", "gitea/act_runner"];
/// Where the register container reads the registration token.
pub const REGISTRATION_TOKEN_FILE: &str = "/var/run/gitea-runner/registration_token";
/// The runner's state file (`runner.file`, relative to the working directory `/data`).
pub const STATE_FILE: &str = "/data/.runner";

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
    /// Where jobs' cache steps go and are recorded ([`crate::sim::SimHandle::runner_cache`]).
    pub cache: RunnerCache,
}

impl Default for RunnerOptions {
    fn default() -> Self {
        RunnerOptions {
            work: Duration::from_millis(200),
            fetch_interval: Duration::from_millis(100),
            heartbeat: Duration::from_millis(100),
            register_attempts: 10,
            register_retry: Duration::from_millis(200),
            cache: RunnerCache::default(),
        }
    }
}

/// The behaviour for runner images; register it with the simulator for each of
/// [`RUNNER_IMAGE_PREFIXES`].
pub fn runner_behaviour(fake: GiteaFakeHandle, opts: RunnerOptions) -> Arc<dyn ContainerBehaviour> {
    Arc::new(GiteaRunner { fake, opts })
}

struct GiteaRunner {
    /// Keeps the fake alive while runner pods may still talk to it; holds the jobs' workflows.
    fake: GiteaFakeHandle,
    opts: RunnerOptions,
}

/// Exit code of a process stopped by SIGTERM.
const SIGTERM_EXIT: i32 = 143;

/// The words of the container's command line; a `sh -c` script counts word by word, with
/// quotes dropped and `$VAR`/`${VAR}` taken from the container's environment (what the shell
/// would pass on). `$(VAR)` in command and args is already expanded, as the kubelet does.
fn words(pod: &PodInfo) -> Vec<String> {
    // `sh -c SCRIPT`: the shell's own `-c` is not the runner's.
    let shell = pod.command.len() > 2
        && pod.command[1] == "-c"
        && pod.command[0]
            .rsplit('/')
            .next()
            .is_some_and(|s| s == "sh" || s == "bash");
    let command = if shell {
        &pod.command[2..]
    } else {
        &pod.command[..]
    };
    command
        .iter()
        .chain(&pod.args)
        .flat_map(|a| a.split_whitespace())
        .map(|w| {
            let w = w.trim_matches(|c| c == '"' || c == '\'');
            match w.strip_prefix('$') {
                Some(var) => {
                    let var = var.trim_start_matches('{').trim_end_matches('}');
                    pod.env.get(var).cloned().unwrap_or_default()
                }
                None => w.to_string(),
            }
        })
        .collect()
}

/// The config file the command line names (`--config X`, `--config=X`, `-c X`), if any.
fn config_flag(pod: &PodInfo) -> Option<String> {
    let words = words(pod);
    words.iter().enumerate().find_map(|(i, w)| {
        if let Some(v) = w.strip_prefix("--config=") {
            return Some(v.to_string());
        }
        (w == "--config" || w == "-c")
            .then(|| words.get(i + 1).cloned())
            .flatten()
    })
}

/// `config.LoadDefault`: no flag, no file (defaults); a named file must be readable and parse.
/// The config's `runner.labels` (empty when unset).
fn config_labels(pod: &PodInfo) -> Result<Vec<String>, i32> {
    let Some(path) = config_flag(pod) else {
        return Ok(Vec::new());
    };
    let text = pod.files.get(&path).ok_or(1)?;
    let cfg: serde_yaml::Value = serde_yaml::from_str(text).map_err(|_| 1)?;
    Ok(cfg["runner"]["labels"]
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(|l| l.as_str().map(str::to_string))
        .collect())
}

/// Whether the container plays `register` (else `daemon`).
fn is_register(pod: &PodInfo) -> bool {
    pod.init
        || pod
            .command
            .iter()
            .chain(&pod.args)
            .any(|a| a.split_whitespace().any(|w| w == "register"))
}

impl GiteaRunner {
    /// `register`: the runner's state file content, or the exit code.
    async fn register(&self, pod: &PodInfo) -> Result<Value, i32> {
        let env = |k: &str| pod.env.get(k).cloned().unwrap_or_default();
        let base = env("GITEA_INSTANCE_URL").trim_end_matches('/').to_string();
        let token = pod
            .files
            .get(REGISTRATION_TOKEN_FILE)
            .map(|t| t.trim().to_string())
            .unwrap_or_default();
        if base.is_empty() || token.is_empty() {
            return Err(1);
        }
        let name = Some(env("GITEA_RUNNER_NAME"))
            .filter(|n| !n.is_empty())
            .unwrap_or(pod.name.clone());
        // A config's `runner.labels` wins over `--labels` (`registerNoInteractive`).
        let configured = config_labels(pod)?;
        let full: Vec<String> = if configured.is_empty() {
            env("GITEA_RUNNER_LABELS")
                .split(',')
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect()
        } else {
            configured
        };
        // The runner registers label *names*: `name:docker://img` → `name`.
        let labels: Vec<String> = full
            .iter()
            .map(|l| l.split(':').next().unwrap_or_default().trim().to_string())
            .filter(|l| !l.is_empty())
            .collect();
        let ephemeral = pod
            .command
            .iter()
            .chain(&pod.args)
            .any(|a| a.contains("--ephemeral"));
        let session = RunnerClient::new(&base).map_err(|_| 1)?;
        let body = json!({"name": name, "token": token, "labels": labels, "ephemeral": ephemeral});
        for _ in 0..self.opts.register_attempts.max(1) {
            if let Ok((200, v)) = session.call("Register", body.clone()).await {
                let r = &v["runner"];
                return Ok(json!({
                    "id": r["id"], "uuid": r["uuid"], "name": name, "token": r["token"],
                    "address": base, "labels": full,
                    "ephemeral": r["ephemeral"].as_bool().unwrap_or(ephemeral),
                }));
            }
            tokio::select! {
                _ = pod.cancel.cancelled() => return Err(SIGTERM_EXIT),
                _ = tokio::time::sleep(self.opts.register_retry) => {}
            }
        }
        Err(1)
    }

    /// `daemon`: runs one job as the runner the state file names.
    async fn daemon(&self, pod: &PodInfo) -> i32 {
        let Some(state) = pod
            .read_scratch(STATE_FILE)
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
        else {
            return 1;
        };
        let s = |k: &str| state[k].as_str().unwrap_or_default().to_string();
        let Ok(mut session) = RunnerClient::new(&s("address")) else {
            return 1;
        };
        session.uuid = s("uuid");
        session.token = s("token");
        // A config's `runner.labels` wins over the state file's (`runDaemon`).
        let configured = match config_labels(pod) {
            Ok(l) => l,
            Err(code) => return code,
        };
        let full: Vec<String> = if configured.is_empty() {
            state["labels"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        } else {
            configured
        };
        let names: Vec<String> = full
            .iter()
            .map(|l| l.split(':').next().unwrap_or_default().to_string())
            .collect();
        if !matches!(
            session.call("Declare", json!({"labels": names})).await,
            Ok((200, _))
        ) {
            return 1;
        }
        // Poll until one task arrives (no idle limit, like the runner's ephemeral mode).
        let task = loop {
            match session.call("FetchTask", json!({})).await {
                Ok((200, v)) => {
                    if let Some(id) = v["task"]["id"].as_i64() {
                        break id;
                    }
                }
                // The server removed us (ephemeral runner done or deleted): exit like the runner.
                Ok((401 | 404, _)) => return 0,
                _ => {}
            }
            tokio::select! {
                _ = pod.cancel.cancelled() => return SIGTERM_EXIT,
                _ = tokio::time::sleep(self.opts.fetch_interval) => {}
            }
        };
        self.cache_step(pod, task).await;
        self.work(pod, &session, task).await
    }

    /// The job's `actions/cache` step, when its workflow has one.
    async fn cache_step(&self, pod: &PodInfo, task: i64) {
        let Some(job) = self.fake.job(task) else {
            return;
        };
        let Some(key) = job.cache_key else {
            return;
        };
        let external = config_flag(pod)
            .and_then(|path| pod.files.get(&path))
            .and_then(|text| ExternalCache::from_config(text));
        let step = CacheStep {
            job: task,
            repo: format!("{}/{}", job.owner, job.repo),
            key,
        };
        self.opts
            .cache
            .run_step(&pod.name, external.as_ref(), &step)
            .await;
    }

    async fn work(&self, pod: &PodInfo, session: &RunnerClient, task: i64) -> i32 {
        let update = |result: &str| json!({"state": {"id": task, "result": result}});
        let deadline = tokio::time::Instant::now() + self.opts.work;
        loop {
            let now = tokio::time::Instant::now();
            if now >= deadline {
                break;
            }
            let nap = self.opts.heartbeat.min(deadline - now);
            tokio::select! {
                _ = pod.cancel.cancelled() => {
                    let _ = session.call("UpdateTask", update("RESULT_CANCELLED")).await;
                    return SIGTERM_EXIT;
                }
                _ = tokio::time::sleep(nap) => {}
            }
            let beat = session.call("UpdateTask", update("RESULT_UNSPECIFIED")).await;
            if let Ok((200, v)) = beat
                && v["state"]["result"] == "RESULT_CANCELLED"
            {
                let _ = session.call("UpdateTask", update("RESULT_CANCELLED")).await;
                return 0;
            }
        }
        let _ = session.call("UpdateTask", update("RESULT_SUCCESS")).await;
        0
    }
}

#[async_trait]
impl ContainerBehaviour for GiteaRunner {
    async fn run(&self, pod: PodInfo) -> i32 {
        if !is_register(&pod) {
            return self.daemon(&pod).await;
        }
        match self.register(&pod).await {
            Ok(state) => {
                if pod.write_scratch(STATE_FILE, &state.to_string()) {
                    0
                } else {
                    // No writable /data: the real runner fails to save `.runner`.
                    1
                }
            }
            Err(code) => code,
        }
    }
}
