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

/// The last answer for one scope, and when it came.
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

/// One scope's [`ServedCache`], shared with the lookup running for it.
pub type SharedServed = std::sync::Arc<std::sync::Mutex<ServedCache>>;

/// Scopes whose answers are kept at most. Groups of one scope share an entry, so this only
/// bites with more distinct repositories, organizations and enterprises than that in use.
pub const MAX_SCOPES: usize = 4096;
/// An entry no pass has read for this long may make room for a new scope when the cache is
/// full (its groups' passes have stopped reaching GitHub; they ask again if they come back).
pub const UNUSED_AFTER: Duration = Duration::from_secs(12 * 60 * 60);

/// Which listing a client reads: its REST base and the config URL's scope, as the downloads
/// URL names them. GitHub serves one release to every token that may read the listing, so
/// groups on one scope share the answer whatever their credentials. Lowercased: GitHub's
/// owner, repository and enterprise names are case-insensitive.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ScopeKey(String);

impl ScopeKey {
    /// The key of the listing `client`'s config URL reads.
    pub fn of(client: &GithubClient) -> ScopeKey {
        let config = client.config();
        ScopeKey(format!("{}{}", config.rest_base, config.runner_downloads_path()).to_ascii_lowercase())
    }
}

/// A scope's answer and when a pass last read it.
#[derive(Debug)]
struct Entry {
    cache: SharedServed,
    used: Instant,
}

/// The served release per scope, beside the client pool: a thousand groups of one
/// organization ask GitHub once per [`SERVED_TTL`], not once each. An entry lives while a
/// group uses its scope (dropped with the scope's last group, as the transports are), and at
/// most [`MAX_SCOPES`] are kept: when full, entries unused for [`UNUSED_AFTER`] make room, and
/// if none is, a new scope's release stays unknown rather than evicting one in use (evicting
/// by recency would ask GitHub on every pass once more scopes than the cap take turns).
#[derive(Debug, Default)]
pub struct ServedReleases {
    entries: std::collections::HashMap<ScopeKey, Entry>,
    /// The scope each group last read; bounded by the groups.
    users: std::collections::HashMap<GroupKey, ScopeKey>,
}

impl ServedReleases {
    /// The cache of `scope`, which `group` uses from now on (and no longer the one it used
    /// before), made when there is none and there is room; marked read at `now`.
    pub fn cache_for(&mut self, group: &GroupKey, scope: &ScopeKey, now: Instant) -> Option<SharedServed> {
        if let Some(before) = self.users.insert(group.clone(), scope.clone())
            && &before != scope
        {
            self.drop_unused(&before);
        }
        if !self.entries.contains_key(scope) {
            if self.entries.len() >= MAX_SCOPES {
                self.make_room(now);
            }
            if self.entries.len() >= MAX_SCOPES {
                return None;
            }
        }
        let entry = self.entries.entry(scope.clone()).or_insert_with(|| Entry {
            cache: SharedServed::default(),
            used: now,
        });
        entry.used = now;
        Some(entry.cache.clone())
    }

    /// `group` reads no scope any more.
    pub fn release(&mut self, group: &GroupKey) {
        if let Some(scope) = self.users.remove(group) {
            self.drop_unused(&scope);
        }
    }

    /// Scopes held, for the cache gauge.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no scope is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Forgets everything (leadership lost).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.users.clear();
    }

    /// Drops `scope`'s entry when no group uses it.
    fn drop_unused(&mut self, scope: &ScopeKey) {
        if !self.users.values().any(|s| s == scope) {
            self.entries.remove(scope);
        }
    }

    /// Drops the entries no pass read for [`UNUSED_AFTER`], and forgets their groups.
    fn make_room(&mut self, now: Instant) {
        self.entries
            .retain(|_, e| now.saturating_duration_since(e.used) < UNUSED_AFTER);
        let entries = &self.entries;
        self.users.retain(|_, s| entries.contains_key(s));
    }
}

/// The per-scope cache shared by the forge's groups.
pub type SharedReleases = std::sync::Mutex<ServedReleases>;

/// The release GitHub serves the group's scope, as last told; when an answer is due, asks
/// through `client` in the background. The pass never waits for it: the downloads listing is a
/// REST call every scope would otherwise cost its groups' first passes, under their locks and
/// before their first runners (the bench's 100 GitHub groups drained in 74 s instead of 44 s).
/// A failure is logged (the error names no token: the bearer is never part of it) and leaves
/// the release unknown for every group of the scope until the next try.
pub fn served_release_of(
    releases: &SharedReleases,
    client: &std::sync::Arc<GithubClient>,
    group: &GroupKey,
) -> Option<RunnerRelease> {
    let now = Instant::now();
    let cache = releases
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .cache_for(group, &ScopeKey::of(client), now)?;
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

    fn group(name: &str) -> GroupKey {
        GroupKey {
            namespace: "ci".into(),
            name: name.into(),
        }
    }

    fn scope(name: &str) -> ScopeKey {
        ScopeKey(format!(
            "https://api.github.com/orgs/{name}/actions/runners/downloads"
        ))
    }

    #[test]
    fn groups_of_one_scope_share_its_answer_until_the_last_leaves() {
        let t0 = Instant::now();
        let mut r = ServedReleases::default();
        let a = r.cache_for(&group("a"), &scope("org"), t0).expect("room");
        let b = r.cache_for(&group("b"), &scope("org"), t0).expect("room");
        assert!(std::sync::Arc::ptr_eq(&a, &b), "one entry per scope");
        assert_eq!(r.len(), 1);
        // b moves to another scope: org stays, a still reads it.
        r.cache_for(&group("b"), &scope("other"), t0).expect("room");
        assert_eq!(r.len(), 2);
        r.release(&group("a"));
        assert_eq!(r.len(), 1, "org's last group left");
        r.release(&group("b"));
        r.release(&group("b"));
        assert!(r.is_empty());
        r.cache_for(&group("a"), &scope("org"), t0).expect("room");
        r.clear();
        assert!(r.is_empty());
    }

    #[test]
    fn a_full_cache_drops_only_long_unused_scopes() {
        let t0 = Instant::now();
        let mut r = ServedReleases::default();
        for i in 0..MAX_SCOPES {
            let n = i.to_string();
            r.cache_for(&group(&n), &scope(&n), t0).expect("room");
        }
        assert_eq!(r.len(), MAX_SCOPES);
        let later = t0 + UNUSED_AFTER - Duration::from_secs(1);
        // Scope 0 is read again; every other one stays unread.
        r.cache_for(&group("0"), &scope("0"), later).expect("held");
        assert!(
            r.cache_for(&group("new"), &scope("new"), later).is_none(),
            "nothing unused long enough: the new scope waits, no scope in use is evicted"
        );
        assert_eq!(r.len(), MAX_SCOPES);
        let t1 = t0 + UNUSED_AFTER;
        r.cache_for(&group("new"), &scope("new"), t1).expect("room made");
        assert_eq!(r.len(), 2, "scope 0 (read since) and the new one");
        assert!(r.users.len() <= 2, "the dropped scopes' groups are forgotten");
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
