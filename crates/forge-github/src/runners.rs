//! Runners at the Actions service (admin token): JIT configs, lookup by name, removal.

use forgerunner_core::forge::SecretValue;
use reqwest::Method;
use serde::Deserialize;
use serde_json::json;

use crate::client::GithubClient;
use crate::error::ApiError;
use crate::scale_set;
use crate::types::ListOf;

const AGENTS: &str = "_apis/distributedtask/pools/0/agents";

/// A registered runner.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RunnerInfo {
    /// Runner id.
    pub id: i64,
    /// Runner name.
    #[serde(default)]
    pub name: String,
    /// Scale set it belongs to.
    #[serde(default)]
    pub runner_scale_set_id: i64,
    /// `online` / `offline`, when the service reports it.
    #[serde(default)]
    pub status: Option<String>,
}

/// A generated JIT config. `Debug` hides the config.
#[derive(Clone, Debug)]
pub struct JitConfig {
    /// The runner registered for it.
    pub runner: RunnerInfo,
    /// Base64 JIT config blob for `run.sh --jitconfig`.
    pub encoded: SecretValue,
}

#[derive(Deserialize)]
struct JitReply {
    runner: Option<RunnerInfo>,
    #[serde(rename = "encodedJITConfig", default)]
    encoded: String,
}

/// Result of a runner removal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    /// Gone (or never there).
    Removed,
    /// Running a job (`JobStillRunningException`); left alone.
    Busy,
}

/// Generates a JIT config for `name` in scale set `scale_set_id`. On 409 `AgentExists` the old
/// registration of the same scale set is removed and the call retried once (as ARC does).
pub async fn generate_jit_config(
    client: &GithubClient,
    scale_set_id: i64,
    name: &str,
    work_folder: &str,
) -> Result<JitConfig, ApiError> {
    let body = json!({ "name": name, "workFolder": work_folder });
    let path = scale_set::path(scale_set_id, "generatejitconfig");
    let mut retried = false;
    loop {
        match client
            .actions("generate_jit_config", Method::POST, &path, &[], Some(&body))
            .await
        {
            Ok(reply) => {
                let r: JitReply = reply.json("generate_jit_config")?;
                let runner = r.runner.ok_or_else(|| ApiError::BadResponse {
                    operation: "generate_jit_config",
                    message: "no runner in the JIT config reply".into(),
                })?;
                if r.encoded.is_empty() {
                    return Err(ApiError::BadResponse {
                        operation: "generate_jit_config",
                        message: "empty JIT config".into(),
                    });
                }
                return Ok(JitConfig {
                    runner,
                    encoded: SecretValue::new(r.encoded),
                });
            }
            Err(e) if e.status() == Some(409) && !retried => {
                retried = true;
                if let Some(existing) = find_by_name(client, name).await? {
                    if existing.runner_scale_set_id != scale_set_id && existing.runner_scale_set_id != 0 {
                        return Err(ApiError::Config(format!(
                            "a runner named {name:?} is registered in another scale set ({})",
                            existing.runner_scale_set_id
                        )));
                    }
                    // A leftover of an earlier attempt (e.g. the Secret was never written).
                    if remove(client, existing.id).await? == Removal::Busy {
                        return Err(e);
                    }
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// Looks a runner up by name.
pub async fn find_by_name(client: &GithubClient, name: &str) -> Result<Option<RunnerInfo>, ApiError> {
    let reply = client
        .actions("get_runner", Method::GET, AGENTS, &[("agentName", name)], None)
        .await?;
    let list: ListOf<RunnerInfo> = reply.json("get_runner")?;
    Ok(list.value.into_iter().find(|r| r.name == name))
}

/// Removes a runner by id: 204/404 → removed, 400 `JobStillRunning` → busy. Never forced.
pub async fn remove(client: &GithubClient, id: i64) -> Result<Removal, ApiError> {
    match client
        .actions(
            "delete_runner",
            Method::DELETE,
            &format!("{AGENTS}/{id}"),
            &[],
            None,
        )
        .await
    {
        Ok(_) => Ok(Removal::Removed),
        Err(e) if e.status() == Some(404) => Ok(Removal::Removed),
        Err(e)
            if e.is_exception("JobStillRunning")
                || (e.status() == Some(400) && e.to_string().contains("running")) =>
        {
            Ok(Removal::Busy)
        }
        Err(e) => Err(e),
    }
}
