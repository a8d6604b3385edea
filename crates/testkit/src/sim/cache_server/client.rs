//! A job's `actions/cache` step as a simulated runner plays it against an external cache
//! server, and the journal of what each such step found.
//!
//! The runner side follows gitea-runner v1.0.8: with `cache.external_server` and
//! `cache.external_secret` in its config the runner registers the job's runtime token with the
//! server before the job and revokes it after (`internal/app/run/runner.go`,
//! `registerCacheForTask`, `registerExternalCacheJob`: `POST <server>/_internal/register`
//! with `Authorization: Bearer <secret>`; a failure is only a warning), and hands the job
//! `external_server` verbatim as `ACTIONS_CACHE_URL`. The job then looks the key up, and on a
//! miss reserves, uploads and commits it (`@actions/cache`'s v1 protocol, see
//! [`super::protocol`]); on a hit it downloads the archive.
//!
//! What the job stores is the line `saved by job <id>`, so a hit tells which job saved it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::protocol::{API_PATH, INTERNAL_PATH};
use crate::sim::network::ClusterNetwork;

/// The cache `version` every simulated job uses (the real one hashes paths and compression).
pub const CACHE_VERSION: &str = "sim-v1";

/// The runner config's cache settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternalCache {
    /// `cache.external_server`.
    pub server: String,
    /// `cache.external_secret`, when set.
    pub secret: Option<String>,
}

impl ExternalCache {
    /// The external cache a runner config names (`cache.enabled` not false and
    /// `cache.external_server` set); `None` means the runner's own embedded server.
    pub fn from_config(yaml: &str) -> Option<ExternalCache> {
        let config: serde_yaml::Value = serde_yaml::from_str(yaml).ok()?;
        let cache = &config["cache"];
        if cache["enabled"].as_bool() == Some(false) {
            return None;
        }
        let text = |v: &serde_yaml::Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned);
        Some(ExternalCache {
            server: text(&cache["external_server"])?,
            secret: text(&cache["external_secret"]),
        })
    }
}

/// What one job's cache step found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheResult {
    /// The key was there; `saved_by` is the job whose upload came back.
    Hit {
        /// The job that saved the entry, read from the archive.
        saved_by: Option<i64>,
    },
    /// A miss at the shared server; the job saved the key there.
    Saved,
    /// No external server: the runner's embedded server in its own pod missed, and what the
    /// job saved goes with the pod.
    Embedded,
    /// The step failed (as `actions/cache` does, softly: the job still succeeds).
    Failed(String),
}

/// One job's cache step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheOutcome {
    /// The forge's job id.
    pub job: i64,
    /// The runner pod that ran it.
    pub pod: String,
    /// The key looked up.
    pub key: String,
    /// What happened.
    pub result: CacheResult,
}

/// Every cache step so far, in order; clones share one list.
#[derive(Clone, Debug, Default)]
pub struct CacheJournal {
    outcomes: Arc<Mutex<Vec<CacheOutcome>>>,
}

impl CacheJournal {
    /// Records one step.
    pub fn record(&self, outcome: CacheOutcome) {
        self.outcomes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(outcome);
    }

    /// The steps so far.
    pub fn outcomes(&self) -> Vec<CacheOutcome> {
        self.outcomes.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The step of job `job`, if it ran one.
    pub fn of_job(&self, job: i64) -> Option<CacheOutcome> {
        self.outcomes().into_iter().find(|o| o.job == job)
    }
}

/// What a simulated runner needs to play cache steps: the cluster network its pod resolves
/// names in, and the journal it reports to. `Default` is an empty network (no server
/// reachable) and a journal nobody reads.
#[derive(Clone, Debug, Default)]
pub struct RunnerCache {
    /// Where in-cluster names lead.
    pub network: ClusterNetwork,
    /// Where steps are recorded.
    pub journal: CacheJournal,
}

/// One job's cache step.
#[derive(Clone, Debug)]
pub struct CacheStep {
    /// The forge's job id.
    pub job: i64,
    /// The job's repository (`owner/name`), which the runtime token is registered for.
    pub repo: String,
    /// The key.
    pub key: String,
}

impl RunnerCache {
    /// Plays `step` against `cache` (or the embedded server when `None`) and records it.
    pub async fn run_step(&self, pod: &str, cache: Option<&ExternalCache>, step: &CacheStep) -> CacheResult {
        let result = match cache {
            None => CacheResult::Embedded,
            Some(cache) => match self.external(cache, step).await {
                Ok(result) => result,
                Err(e) => CacheResult::Failed(e),
            },
        };
        self.journal.record(CacheOutcome {
            job: step.job,
            pod: pod.to_owned(),
            key: step.key.clone(),
            result: result.clone(),
        });
        result
    }

    /// `http://<in-cluster>…` → the local URL behind it, or why not.
    fn local(&self, url: &str) -> Result<String, String> {
        self.network
            .local_url(url)
            .ok_or_else(|| format!("cannot reach {url}: no such Service or no pod behind it"))
    }

    async fn external(&self, cache: &ExternalCache, step: &CacheStep) -> Result<CacheResult, String> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| e.to_string())?;
        let token = format!("runtime-{}-{:016x}", step.job, rand::random::<u64>());
        let base = cache.server.trim_end_matches('/');
        if let Some(secret) = &cache.secret {
            // A failed registration is only a warning for the runner; the job's calls then 401.
            let _ = internal(
                &http,
                &self.local(&format!("{base}{INTERNAL_PATH}/register"))?,
                secret,
                json!({"token": token, "repo": step.repo}),
            )
            .await;
        }
        let result = self.job_step(&http, &cache.server, &token, step).await;
        if let Some(secret) = &cache.secret {
            let _ = internal(
                &http,
                &self.local(&format!("{base}{INTERNAL_PATH}/revoke"))?,
                secret,
                json!({"token": token}),
            )
            .await;
        }
        result
    }

    /// The job's side: `ACTIONS_CACHE_URL` is `external_server` verbatim.
    async fn job_step(
        &self,
        http: &reqwest::Client,
        cache_url: &str,
        token: &str,
        step: &CacheStep,
    ) -> Result<CacheResult, String> {
        let api = format!("{cache_url}{}", API_PATH.trim_start_matches('/'));
        let auth = format!("Bearer {token}");
        let call = |r: reqwest::RequestBuilder| r.header("authorization", auth.clone()).send();
        let find = self.local(&format!("{api}/cache?keys={}&version={CACHE_VERSION}", step.key))?;
        let found = call(http.get(find)).await.map_err(|e| e.to_string())?;
        match found.status() {
            StatusCode::OK => {
                let body: Value = found.json().await.map_err(|e| e.to_string())?;
                let location = body["archiveLocation"].as_str().unwrap_or_default();
                let archive = http
                    .get(self.local(location)?)
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                if !archive.status().is_success() {
                    return Err(format!("download: {}", archive.status()));
                }
                let text = archive.text().await.map_err(|e| e.to_string())?;
                let saved_by = text
                    .trim()
                    .strip_prefix("saved by job ")
                    .and_then(|n| n.parse().ok());
                Ok(CacheResult::Hit { saved_by })
            }
            StatusCode::NO_CONTENT => {
                let archive = format!("saved by job {}\n", step.job);
                let reserved = call(http.post(self.local(&format!("{api}/caches"))?).json(&json!({
                    "key": step.key, "version": CACHE_VERSION, "cacheSize": archive.len(),
                })))
                .await
                .map_err(|e| e.to_string())?;
                if !reserved.status().is_success() {
                    return Err(format!("reserve: {}", reserved.status()));
                }
                let id = reserved.json::<Value>().await.map_err(|e| e.to_string())?["cacheId"]
                    .as_u64()
                    .ok_or("reserve: no cacheId")?;
                let entry = self.local(&format!("{api}/caches/{id}"))?;
                let range = format!("bytes 0-{}/*", archive.len() - 1);
                let uploaded = call(http.patch(&entry).header("content-range", range).body(archive))
                    .await
                    .map_err(|e| e.to_string())?;
                if !uploaded.status().is_success() {
                    return Err(format!("upload: {}", uploaded.status()));
                }
                let committed = call(http.post(&entry).json(&json!({"size": 0})))
                    .await
                    .map_err(|e| e.to_string())?;
                if !committed.status().is_success() {
                    return Err(format!("commit: {}", committed.status()));
                }
                Ok(CacheResult::Saved)
            }
            other => Err(format!("lookup: {other}")),
        }
    }
}

/// A control-plane call with the shared secret.
async fn internal(http: &reqwest::Client, url: &str, secret: &str, body: Value) -> Result<(), String> {
    let response = http
        .post(url)
        .header("authorization", format!("Bearer {secret}"))
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if response.status().is_success() {
        Ok(())
    } else {
        Err(format!("status {}", response.status()))
    }
}
