//! The shared cache (`spec.cache`) and runner classes (`spec.classes`) of a Gitea group, shown
//! end to end: the group's cache server is played by the simulator
//! (`forgerunner_testkit::sim::cache_server`), its runners play each job's `actions/cache`
//! step against it, and its runner Jobs carry their class and size.
//!
//! [`World::add_gitea_cache_group`] creates the group; [`run_demo`] queues two cached jobs
//! (the second once the first is done) and one job per class (one after the other), and says
//! what happened.

use std::time::Duration;

use forgerunner_core::RunnerGroup;
use forgerunner_testkit::gitea::{Conclusion, JobState};
use forgerunner_testkit::sim::{CacheOutcome, CacheResult};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::groups::{GiteaGroup, GiteaRunnerScope, GroupSize};
use super::watch::JobWatch;
use super::{GITEA_REPO, World, WorldError, wait_until};

/// The group's own label: no demo job names it, so every job gets a class.
pub const GROUP_LABEL: &str = "sandbox-demo";
/// `runs-on` of a job of class `small` (and of the cached jobs).
pub const SMALL_RUNS_ON: [&str; 1] = ["linux"];
/// `runs-on` of a job of class `large`.
pub const LARGE_RUNS_ON: [&str; 2] = ["linux", "large"];
/// The cache key of the cached jobs.
pub const CACHE_KEY: &str = "sandbox-deps-v1";
/// CPUs of the template's runner container (class `small` keeps them).
pub const SMALL_CPU: &str = "1";
/// CPUs of class `large`.
pub const LARGE_CPU: &str = "4";

/// `spec.cache`, `spec.classes` and the template of the demo group.
fn cache_and_classes() -> serde_json::Value {
    json!({"spec": {
        "cache": {"size": "1Gi"},
        "template": {"spec": {"containers": [{
            "name": "runner",
            "resources": {"requests": {"cpu": SMALL_CPU, "memory": "2Gi"}},
        }]}},
        "classes": [
            {"name": "small", "labels": ["linux:host"]},
            {"name": "large", "labels": ["linux:host", "large:host"], "maxRunners": 1,
             "resources": {"requests": {"cpu": LARGE_CPU, "memory": "16Gi"}}},
        ],
    }})
}

impl World {
    /// Creates a Gitea group (org scope, label [`GROUP_LABEL`]) with a shared cache and the
    /// classes `small` (the template's 1 CPU) and `large` (4 CPUs).
    pub async fn add_gitea_cache_group(
        &self,
        namespace: &str,
        name: &str,
        size: &GroupSize,
        poll_interval_seconds: u32,
        webhook_secret: Option<&str>,
    ) -> Result<(), WorldError> {
        let group = GiteaGroup {
            scope: GiteaRunnerScope::world_org(),
            labels: vec![format!("{GROUP_LABEL}:host")],
            poll_interval_seconds,
            webhook_secret: webhook_secret.map(str::to_owned),
        };
        self.add_gitea_group_with(namespace, name, &group, size).await?;
        Api::<RunnerGroup>::namespaced(self.client.clone(), namespace)
            .patch(name, &PatchParams::default(), &Patch::Merge(&cache_and_classes()))
            .await?;
        Ok(())
    }

    /// Queues a Gitea job in the world's repository whose workflow caches [`CACHE_KEY`].
    pub fn queue_gitea_cached_job(&self, runs_on: &[&str]) -> Result<i64, WorldError> {
        let fake = self
            .gitea
            .as_ref()
            .ok_or_else(|| WorldError::Timeout("a Gitea fake".into()))?;
        Ok(fake.queue_cached_job(GITEA_REPO, runs_on, CACHE_KEY))
    }

    /// The cache URL in the group's `status.cache`, once set.
    pub async fn cache_url(&self, namespace: &str, name: &str) -> Option<String> {
        let group = self.group(namespace, name).await.ok()?;
        group.status?.cache.map(|c| c.url).filter(|u| !u.is_empty())
    }
}

/// What the demo saw.
#[derive(Clone, Debug, Default)]
pub struct DemoReport {
    /// Lines to print.
    pub lines: Vec<String>,
    /// Whether the second job hit what the first saved and each job got its class.
    pub ok: bool,
}

/// Waits until Gitea job `id` is done; its runner's name (= its runner Job's name).
async fn finished_runner(world: &World, id: i64, timeout: Duration) -> Result<String, WorldError> {
    let fake = world
        .gitea
        .as_ref()
        .ok_or_else(|| WorldError::Timeout("a Gitea fake".into()))?;
    wait_until(timeout, &format!("Gitea job {id} to finish"), || async {
        fake.job(id)
            .is_some_and(|j| j.state == JobState::Done(Conclusion::Success))
    })
    .await?;
    Ok(fake.job(id).map(|j| j.runner_name).unwrap_or_default())
}

/// Runs the cache and classes demo on group `namespace/name` (made by
/// [`World::add_gitea_cache_group`]); `watch` watches runner Jobs of `namespace`.
pub async fn run_demo(
    world: &World,
    watch: &JobWatch,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> Result<DemoReport, WorldError> {
    let mut report = DemoReport::default();
    let network = world.sim.runner_cache().network;
    wait_until(
        timeout,
        "the group's cache server to answer at status.cache.url",
        || async {
            let url = world.cache_url(namespace, name).await;
            url.is_some_and(|u| network.local_url(&u).is_some())
        },
    )
    .await?;
    let url = world.cache_url(namespace, name).await.unwrap_or_default();
    let journal = world.sim.runner_cache().journal;
    let first = world.queue_gitea_cached_job(&SMALL_RUNS_ON)?;
    finished_runner(world, first, timeout).await?;
    let second = world.queue_gitea_cached_job(&SMALL_RUNS_ON)?;
    finished_runner(world, second, timeout).await?;
    let outcome = |job: i64| journal.of_job(job);
    let (one, two) = (outcome(first), outcome(second));
    report.ok = matches!(
        &one,
        Some(CacheOutcome {
            result: CacheResult::Saved,
            ..
        })
    ) && matches!(&two, Some(CacheOutcome { result: CacheResult::Hit { saved_by: Some(by) }, .. }) if *by == first);
    report.lines.push(cache_line(1, first, one.as_ref(), &url, None));
    report
        .lines
        .push(cache_line(2, second, two.as_ref(), &url, Some(first)));
    let cache_deployment = forgerunner_core::names::cache_name(name);
    if let Some(stats) = world.sim.cache_server_stats(namespace, &cache_deployment) {
        report.lines.push(format!(
            "cache: the server ({cache_deployment}) counted {} miss(es), {} hit(s), {} entr{} saved",
            stats.misses,
            stats.hits,
            stats.commits,
            if stats.commits == 1 { "y" } else { "ies" }
        ));
    }

    // One after the other: at Gitea a `large` runner (labels linux, large) may take a
    // `[linux]` job too (docs/classes.md, Gitea), so both at once could swap.
    for (runs_on, want_class, want_cpu) in [
        (&SMALL_RUNS_ON[..], "small", SMALL_CPU),
        (&LARGE_RUNS_ON[..], "large", LARGE_CPU),
    ] {
        let job = world.queue_gitea_job(runs_on)?.id;
        let runner = finished_runner(world, job, timeout).await?;
        let size = watch.group(name).sizes.get(&runner).cloned().unwrap_or_default();
        let class = size.class.as_deref().unwrap_or("none");
        let cpu = size.cpu.as_deref().unwrap_or("unset");
        report.ok &= class == want_class && cpu == want_cpu;
        report.lines.push(format!(
            "classes: job {job} runs-on [{}] → runner {runner} of class {class} (cpu {cpu})",
            runs_on.join(", ")
        ));
    }
    Ok(report)
}

/// The line of cached job number `n` (`id`), which should hit what `saved_by_wanted` saved.
fn cache_line(
    n: u32,
    id: i64,
    outcome: Option<&CacheOutcome>,
    url: &str,
    saved_by_wanted: Option<i64>,
) -> String {
    let Some(outcome) = outcome else {
        return format!("cache: job {n} ({id}) ran no cache step");
    };
    let runner = &outcome.pod;
    match (&outcome.result, saved_by_wanted) {
        (CacheResult::Saved, _) => format!(
            "cache: job {n} ({id}) missed key {} and saved it to {url} (runner pod {runner})",
            outcome.key
        ),
        (CacheResult::Hit { saved_by: Some(by) }, Some(wanted)) if *by == wanted => {
            format!("cache: job {n} ({id}) hit the key job 1 ({by}) saved (runner pod {runner})")
        }
        (CacheResult::Hit { saved_by }, _) => format!(
            "cache: job {n} ({id}) hit key {} saved by {saved_by:?} (runner pod {runner})",
            outcome.key
        ),
        (CacheResult::Embedded, _) => {
            format!("cache: job {n} ({id}) used its pod's own cache: no shared server (runner pod {runner})")
        }
        (CacheResult::Failed(why), _) => format!("cache: job {n} ({id}) failed its cache step: {why}"),
    }
}
