//! One benchmark run's setup and readings: the world with one forge, the operator in its own
//! process, the RunnerGroups, and the counters every scenario reports.

use std::time::{Duration, Instant};

use super::report::Report;
use crate::world::groups::{GroupSize, PoolOptions};
use crate::world::operator::{OperatorCommand, OperatorProcess, OperatorSettings, proc_usage};
use crate::world::watch::JobWatch;
use crate::world::workload::{ForgeTarget as Target, Progress, Queued};
use crate::world::{World, WorldError, WorldOptions, wait_until};
use forgerunner_core::crd::ForgeKind;
use forgerunner_testkit::apiserver::Verb;

/// Namespace of every benchmark run.
pub const NAMESPACE: &str = "bench";
/// User agent of the testkit's own clients; every other client is the operator.
const TESTKIT_USER_AGENT: &str = "forgerunner-testkit";
/// Seconds between Gitea and Forgejo polls in every run (the default of `pollIntervalSeconds`).
pub const POLL_SECONDS: u32 = 5;

/// Which forge a run drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchForge {
    /// GitHub through the scale set emulator (long poll).
    Github,
    /// Gitea through the fake, by polling only.
    GiteaPoll,
    /// Gitea through the fake, with `workflow_job` webhooks.
    GiteaWebhook,
    /// Forgejo (v15) through the fake, by polling only (Forgejo has no job-level webhook).
    Forgejo,
}

impl BenchForge {
    /// The forge it drives.
    pub fn kind(self) -> ForgeKind {
        match self {
            BenchForge::Github => ForgeKind::Github,
            BenchForge::GiteaPoll | BenchForge::GiteaWebhook => ForgeKind::Gitea,
            BenchForge::Forgejo => ForgeKind::Forgejo,
        }
    }

    /// `github`, `gitea` or `forgejo`.
    pub fn forge_name(self) -> &'static str {
        self.kind().as_str()
    }

    /// How demand reaches the operator.
    pub fn mode(self) -> &'static str {
        match self {
            BenchForge::Github => "long-poll",
            BenchForge::GiteaPoll | BenchForge::Forgejo => "poll",
            BenchForge::GiteaWebhook => "webhook",
        }
    }
}

/// A prepared run.
pub struct Harness {
    /// The fake world.
    pub world: World,
    /// The operator process.
    pub operator: OperatorProcess,
    /// Runner Jobs as seen by a watch.
    pub watch: JobWatch,
    /// Forge of the run.
    pub forge: BenchForge,
    /// Group names, index-aligned with the targets.
    pub groups: Vec<String>,
    targets: Vec<Target>,
    /// maxRunners of every group.
    pub max_runners: u32,
    /// When the groups were ready.
    pub ready_at: Instant,
    /// This process's CPU seconds when the run's setup began.
    cpu_at_start: f64,
}

const WEBHOOK_SECRET: &str = "bench-webhook-secret";

impl Harness {
    /// Starts the world, the operator and `groups` RunnerGroups of `max_runners` each.
    pub async fn start(
        forge: BenchForge,
        operator: &OperatorCommand,
        groups: usize,
        max_runners: u32,
        work_time: Duration,
    ) -> Result<Harness, WorldError> {
        let cpu_at_start = own_cpu_seconds();
        let world = World::start(WorldOptions {
            work_time,
            pod_start_delay: Duration::from_millis(20),
            ..WorldOptions::only(forge.kind())
        })
        .await?;
        world.create_namespace(NAMESPACE).await?;
        let watch = JobWatch::start(world.client.clone(), NAMESPACE);
        let settings = OperatorSettings {
            forges: vec![forge.forge_name().to_owned()],
            log_level: "warn".to_owned(),
            ..OperatorSettings::default()
        };
        let operator = OperatorProcess::spawn(operator, world.kubeconfig(), &settings)?;
        let size = GroupSize::up_to(max_runners);
        let names: Vec<String> = (0..groups).map(|i| format!("g{i:03}")).collect();
        let mut targets = Vec::new();
        for name in &names {
            let label = format!("bench-{name}");
            let pool = PoolOptions {
                label: &label,
                poll_interval_seconds: POLL_SECONDS,
                webhook_secret: (forge == BenchForge::GiteaWebhook).then_some(WEBHOOK_SECRET),
            };
            targets.push(
                world
                    .add_group(forge.kind(), NAMESPACE, name, &size, &pool)
                    .await?,
            );
        }
        if let (BenchForge::GiteaWebhook, Some(fake)) = (forge, &world.gitea) {
            fake.set_webhook(
                &format!("http://{}/webhooks/gitea", operator.http_addr().await?),
                WEBHOOK_SECRET,
            );
        }
        if forge == BenchForge::Github {
            // A GitHub group takes work once its scale set exists (the operator creates it).
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            if let Err(e) = world.github_scale_sets(&refs, Duration::from_secs(60)).await {
                for line in operator.output().iter().rev().take(15).rev() {
                    eprintln!("operator: {line}");
                }
                return Err(e);
            }
        } else {
            // The first poll checks the version and tokens; measure from a warm operator.
            // One list per check: a get per group made each check cost a thousand requests.
            let api = kube::Api::<forgerunner_core::RunnerGroup>::namespaced(world.client.clone(), NAMESPACE);
            let groups_ready = || async {
                let Ok(list) = api.list(&kube::api::ListParams::default()).await else {
                    return false;
                };
                let ready: std::collections::HashSet<String> = list
                    .items
                    .into_iter()
                    .filter(|g| {
                        g.status.as_ref().is_some_and(|s| {
                            s.conditions
                                .iter()
                                .any(|c| c.type_ == "Ready" && c.status == "True")
                        })
                    })
                    .filter_map(|g| g.metadata.name)
                    .collect();
                names.iter().all(|n| ready.contains(n))
            };
            wait_until(Duration::from_secs(60), "the groups to be Ready", groups_ready).await?;
        }
        Ok(Harness {
            world,
            operator,
            watch,
            forge,
            groups: names,
            targets,
            max_runners,
            ready_at: Instant::now(),
            cpu_at_start,
        })
    }

    /// Queues one job for group `idx`.
    pub fn queue(&self, idx: usize) -> Result<Queued, WorldError> {
        self.targets[idx].queue(&self.world)
    }

    /// Where group `idx`'s jobs stand.
    pub fn progress(&self, idx: usize) -> Progress {
        self.targets[idx].progress(&self.world)
    }

    /// Where every group's jobs stand, index-aligned with `groups`, from one read of the forge.
    pub fn progress_all(&self) -> Vec<Progress> {
        self.world.progress_all(&self.targets)
    }

    /// Waits until group `idx` has had `n` runner Jobs created.
    pub async fn wait_created(&self, idx: usize, n: usize, timeout: Duration) -> bool {
        let group = &self.groups[idx];
        wait_until(timeout, "runner Jobs", || async {
            self.watch.group(group).created.len() >= n
        })
        .await
        .is_ok()
    }

    /// Waits until every job is done, no runner is registered and no runner Job is left.
    pub async fn wait_drained(&self, timeout: Duration) -> bool {
        wait_until(timeout, "drain", || async {
            // Runner Jobs still at work mean no drain; this costs nothing, unlike reading the
            // forge (at 1,000 groups one emulator snapshot takes tens of milliseconds).
            if self.watch.active_count() > 0 {
                return false;
            }
            let forge_clean = self
                .progress_all()
                .iter()
                .all(|p| p.all_done() && p.registered_runners == 0);
            forge_clean
                && self
                    .world
                    .runner_jobs(NAMESPACE, None)
                    .await
                    .is_ok_and(|j| j.is_empty())
        })
        .await
        .is_ok()
    }

    /// Requests the operator made to the forge.
    pub fn forge_requests(&self) -> usize {
        self.world
            .forge(self.forge.kind())
            .map_or(0, |f| f.operator_requests())
    }

    /// Job-list requests to Gitea (`…/actions/jobs`) or Forgejo (`…/runners/jobs`) so far.
    pub fn job_lists(&self) -> usize {
        self.world
            .forge(self.forge.kind())
            .map_or(0, |f| f.job_list_requests())
    }

    /// Kubernetes writes by the operator, by (verb, resource).
    pub fn k8s_writes_by_kind(&self) -> std::collections::BTreeMap<(Verb, String), usize> {
        let writes = [
            Verb::Create,
            Verb::Update,
            Verb::Patch,
            Verb::Delete,
            Verb::DeleteCollection,
        ];
        let mut out = std::collections::BTreeMap::new();
        for r in self.world.api.requests().records.iter() {
            if r.user_agent.starts_with(TESTKIT_USER_AGENT) {
                continue;
            }
            if let Some(v) = r.verb.filter(|v| writes.contains(v)) {
                *out.entry((v, r.resource.clone())).or_insert(0) += 1;
            }
        }
        out
    }

    /// Kubernetes writes by the operator.
    pub fn k8s_writes(&self) -> usize {
        self.k8s_writes_by_kind().values().sum()
    }

    /// Fills the counters every scenario reports; `jobs` is the number of jobs queued.
    pub async fn finish(&self, report: &mut Report, jobs: usize) {
        report.forge = self.forge.forge_name().to_owned();
        report.mode = self.forge.mode().to_owned();
        report.jobs = jobs;
        report.groups = self.groups.len();
        report.max_runners = self.max_runners;
        // Memory and CPU of the run itself, before the bench's own /metrics scrape (which
        // encodes every group's histograms at once) adds to them.
        if let Some((rss, cpu)) = self.operator.resource_usage() {
            report.peak_rss_mib = round2(rss);
            report.cpu_seconds = round2(cpu);
        }
        report.stages = super::stages::read(&self.operator).await;
        let tallies = self.watch.all();
        let created: usize = tallies.values().map(|t| t.created.len()).sum();
        report.peak_runners = tallies.values().map(|t| t.peak_active).max().unwrap_or(0);
        report.duplicates = created.saturating_sub(jobs);
        report.forge_requests_per_job = ratio(self.forge_requests(), jobs);
        report.k8s_writes_per_runner = ratio(self.k8s_writes(), created);
        if std::env::var_os("BENCH_VERBOSE").is_some() {
            eprintln!("operator writes by kind: {:?}", self.k8s_writes_by_kind());
        }
        let progress = self.progress_all();
        report.completed = progress.iter().all(Progress::all_done);
        if !report.completed || std::env::var_os("BENCH_VERBOSE").is_some() {
            for (i, name) in self.groups.iter().enumerate() {
                let p = progress[i];
                if !p.all_done() {
                    eprintln!("group {name}: {p:?}");
                    eprintln!("operator output (last lines):\n{}", self.operator.output_tail(20));
                    if let Ok(g) = self.world.group(NAMESPACE, name).await {
                        eprintln!("  status {:?}", g.status);
                    }
                    let scale_set = self
                        .world
                        .github
                        .as_ref()
                        .filter(|_| self.forge == BenchForge::Github)
                        .and_then(|emu| Some((emu, emu.scale_set_named(&self.targets[i].label)?)));
                    if let Some((emu, scale_set)) = scale_set {
                        let state = emu.emu.state();
                        let stuck: Vec<_> = state
                            .jobs
                            .iter()
                            .filter(|j| {
                                j.scale_set_id == scale_set
                                    && j.state != scaleset::testing::JobState::Completed
                            })
                            .map(|j| (j.id, j.state))
                            .collect();
                        eprintln!(
                            "  statistics {:?}; unfinished jobs {stuck:?}",
                            emu.emu.statistics(scale_set)
                        );
                    }
                }
            }
        }
        let registered: usize = progress.iter().map(|p| p.registered_runners).sum();
        let left = self
            .world
            .runner_jobs(NAMESPACE, None)
            .await
            .map(|j| j.len())
            .unwrap_or(0);
        report.leaks = registered + left;
        report.harness_cpu_seconds = round2(own_cpu_seconds() - self.cpu_at_start);
    }
}

/// CPU seconds (user + system, all threads) this process used so far; 0 where `/proc` is
/// missing. The operator is a child process and is not included.
fn own_cpu_seconds() -> f64 {
    proc_usage(std::process::id()).map_or(0.0, |(_, cpu)| cpu)
}

/// `a / b`, 0 when `b` is 0, rounded to two decimals.
pub fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 { 0.0 } else { round2(a as f64 / b as f64) }
}

/// Rounds to two decimals for readable JSON.
pub fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
