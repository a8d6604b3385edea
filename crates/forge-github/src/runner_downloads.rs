//! The runner release GitHub serves now, read from its runner downloads.
//!
//! GitHub's REST API lists the runner packages it serves a scope ("List runner applications
//! for a repository / an organization / an enterprise", REST docs, self-hosted runners:
//! `GET /repos/{owner}/{repo}/actions/runners/downloads`, `/orgs/{org}/…`,
//! `/enterprises/{enterprise}/…`): a JSON array of `{os, architecture, download_url, filename,
//! sha256_checksum, temp_download_token}`. The filename carries the release, e.g.
//! `actions-runner-linux-x64-2.331.0.tar.gz`; every platform gets the same one, and the runner
//! images are Linux, so the `linux`/`x64` entry is read. It is the one place GitHub tells the
//! release it wants its runners on: neither the scale-set API nor the REST runner objects carry
//! a runner's version (issue 28 research, B1).
//!
//! The answer changes with each runner release, a few times a month: it is kept
//! [`SERVED_TTL`], and after a failure nothing is asked for [`RETRY_AFTER_FAILURE`]. A failing
//! or garbage answer leaves the release unknown; it never fails the pass that asked.

use std::time::{Duration, Instant};

use forgerunner_core::forge::GroupKey;
use forgerunner_core::runner_version::RunnerRelease;
use reqwest::Method;
use serde::Deserialize;

use crate::client::{Auth, GithubClient};
use crate::error::ApiError;

/// How long an answer is kept.
pub const SERVED_TTL: Duration = Duration::from_secs(6 * 60 * 60);
/// How long nothing is asked after a failed or unreadable answer.
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(10 * 60);
/// The most one lookup may take, retries included: it runs inside a reconcile pass, which it
/// must not hold up for the client's full timeouts.
const LOOKUP_DEADLINE: Duration = Duration::from_secs(10);
/// `Accept` of GitHub's REST API.
const ACCEPT: &str = "application/vnd.github+json";
/// The platform whose package names the release (the runner images are Linux on x64 or arm64,
/// and GitHub serves one release to all).
const OS: &str = "linux";
const ARCHITECTURE: &str = "x64";

/// One package of the listing, the fields used here.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct RunnerDownload {
    /// `linux`, `osx`, `win`.
    pub os: String,
    /// `x64`, `arm`, `arm64`.
    pub architecture: String,
    /// `actions-runner-{os}-{architecture}-{release}.tar.gz` (`.zip` on Windows).
    pub filename: String,
}

/// The release a package's filename names, when it is the package of its own platform.
fn release_of(download: &RunnerDownload) -> Option<RunnerRelease> {
    let prefix = format!("actions-runner-{}-{}-", download.os, download.architecture);
    let rest = download.filename.strip_prefix(&prefix)?;
    let release = rest
        .strip_suffix(".tar.gz")
        .or_else(|| rest.strip_suffix(".zip"))?;
    RunnerRelease::parse(release)
}

/// The release the listing serves: the one its `linux`/`x64` package names.
pub fn served_release(downloads: &[RunnerDownload]) -> Option<RunnerRelease> {
    downloads
        .iter()
        .find(|d| d.os == OS && d.architecture == ARCHITECTURE)
        .and_then(release_of)
}

/// Asks GitHub which release it serves the config URL's scope.
pub async fn fetch(client: &GithubClient) -> Result<RunnerRelease, ApiError> {
    const OPERATION: &str = "runner_downloads";
    let token = client.rest_token().await?;
    let url = client.rest_url(&client.config().runner_downloads_path())?;
    let timeout = client.request_timeout().min(LOOKUP_DEADLINE);
    let reply = client
        .execute(OPERATION, timeout, || {
            client
                .raw_request(Method::GET, url.clone(), Auth::Bearer(&token))
                .header(reqwest::header::ACCEPT, ACCEPT)
        })
        .await?;
    let downloads: Vec<RunnerDownload> = reply.json(OPERATION)?;
    served_release(&downloads).ok_or_else(|| ApiError::BadResponse {
        operation: OPERATION,
        message: format!("no {OS}/{ARCHITECTURE} package naming a runner release"),
    })
}

/// The last answer of one group's client, and when it came.
#[derive(Debug, Default)]
pub struct ServedCache {
    /// When GitHub was last asked, and what it said (`None`: it failed).
    last: Option<(Instant, Option<RunnerRelease>)>,
    /// A lookup is under way (in the background).
    asking: bool,
}

impl ServedCache {
    /// Whether GitHub is to be asked at `now`.
    pub fn due(&self, now: Instant) -> bool {
        if self.asking {
            return false;
        }
        match self.last {
            None => true,
            Some((at, served)) => {
                let wait = if served.is_some() {
                    SERVED_TTL
                } else {
                    RETRY_AFTER_FAILURE
                };
                now.saturating_duration_since(at) >= wait
            }
        }
    }

    /// Keeps the answer of `at`.
    pub fn record(&mut self, at: Instant, served: Option<RunnerRelease>) {
        self.last = Some((at, served));
        self.asking = false;
    }

    /// The release last told, `None` if unknown or the last lookup failed.
    pub fn served(&self) -> Option<RunnerRelease> {
        self.last.and_then(|(_, served)| served)
    }
}

/// One group's [`ServedCache`], shared with the lookup running for it.
pub type SharedServed = std::sync::Arc<std::sync::Mutex<ServedCache>>;

/// The release GitHub serves the group's scope, as last told; when an answer is due, asks
/// through `client` in the background. The pass never waits for it: the downloads listing is a
/// REST call every group would otherwise make on its first pass, under its lock and before its
/// first runner (the bench's 100 GitHub groups drained in 74 s instead of 44 s). A failure is
/// logged (the error names no token: the bearer is never part of it) and leaves the release
/// unknown until the next try.
pub fn served_release_of(
    cache: &SharedServed,
    client: &std::sync::Arc<GithubClient>,
    group: &GroupKey,
) -> Option<RunnerRelease> {
    let now = Instant::now();
    let mut c = cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if c.due(now) {
        c.asking = true;
        let (cache, client, group) = (cache.clone(), client.clone(), group.clone());
        tokio::spawn(async move {
            let answer = match tokio::time::timeout(LOOKUP_DEADLINE, fetch(&client)).await {
                Ok(Ok(release)) => Some(release),
                Ok(Err(e)) => {
                    tracing::debug!(group = %group, error = %e, "could not read the runner release GitHub serves");
                    None
                }
                Err(_) => {
                    tracing::debug!(group = %group, "GitHub's runner downloads did not answer in time");
                    None
                }
            };
            cache
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .record(now, answer);
        });
    }
    c.served()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn download(os: &str, arch: &str, filename: &str) -> RunnerDownload {
        RunnerDownload {
            os: os.into(),
            architecture: arch.into(),
            filename: filename.into(),
        }
    }

    #[test]
    fn the_linux_x64_package_names_the_release() {
        let listing = [
            download("osx", "x64", "actions-runner-osx-x64-2.330.0.tar.gz"),
            download("win", "x64", "actions-runner-win-x64-2.330.0.zip"),
            download("linux", "arm64", "actions-runner-linux-arm64-2.329.0.tar.gz"),
            download("linux", "x64", "actions-runner-linux-x64-2.331.0.tar.gz"),
        ];
        assert_eq!(served_release(&listing), Some(RunnerRelease(2, 331, 0)));
        assert_eq!(
            release_of(&listing[1]),
            Some(RunnerRelease(2, 330, 0)),
            "Windows packages are zips"
        );
    }

    #[test]
    fn garbage_names_no_release() {
        let linux = |f: &str| served_release(&[download("linux", "x64", f)]);
        assert_eq!(linux("actions-runner-linux-x64-latest.tar.gz"), None);
        assert_eq!(linux("actions-runner-linux-x64-2.331.tar.gz"), None);
        assert_eq!(linux("actions-runner-linux-x64-2.331.0"), None, "no archive");
        assert_eq!(
            linux("actions-runner-osx-x64-2.331.0.tar.gz"),
            None,
            "another platform's package"
        );
        assert_eq!(linux(""), None);
        assert_eq!(
            served_release(&[download("osx", "x64", "actions-runner-osx-x64-2.331.0.tar.gz")]),
            None,
            "no linux/x64 package"
        );
        assert_eq!(served_release(&[]), None);
        let parsed: Result<Vec<RunnerDownload>, _> = serde_json::from_str(r#"{"message":"x"}"#);
        assert!(parsed.is_err(), "an object is no listing");
    }

    #[test]
    fn answers_are_kept_for_the_ttl_and_failures_wait_ten_minutes() {
        let t0 = Instant::now();
        let mut cache = ServedCache::default();
        assert!(cache.due(t0));
        assert_eq!(cache.served(), None);
        cache.record(t0, Some(RunnerRelease(2, 331, 0)));
        assert!(!cache.due(t0 + SERVED_TTL - Duration::from_secs(1)));
        assert!(cache.due(t0 + SERVED_TTL));
        assert_eq!(cache.served(), Some(RunnerRelease(2, 331, 0)));

        let t1 = t0 + SERVED_TTL;
        cache.record(t1, None);
        assert_eq!(cache.served(), None, "a failure leaves the release unknown");
        assert!(!cache.due(t1 + RETRY_AFTER_FAILURE - Duration::from_secs(1)));
        assert!(cache.due(t1 + RETRY_AFTER_FAILURE));
    }
}
