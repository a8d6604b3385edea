//! The benchmark scenarios: `single`, `burst`, `steady` and `many-groups`.

use std::time::{Duration, Instant};

use rand::Rng;

use super::harness::{BenchForge, Harness, POLL_SECONDS, round2};
use super::report::Report;
use crate::world::WorldError;
use crate::world::operator::OperatorCommand;
use crate::world::workload::{Queued, percentile_ms, queue_to_runner_latencies};

/// Settings shared by the scenarios.
#[derive(Clone, Debug)]
pub struct ScenarioOptions {
    /// How to start the operator.
    pub operator: OperatorCommand,
    /// Jobs to queue (per scenario default when `None`).
    pub jobs: Option<usize>,
    /// How long a simulated job runs.
    pub work_time: Duration,
    /// `steady`: arrivals per second.
    pub rate: f64,
    /// `steady`: seconds of arrivals.
    pub duration: Duration,
    /// `many-groups`: number of groups.
    pub groups: usize,
}

fn fill_latency(report: &mut Report, queued: &[Queued], h: &Harness, group: usize) {
    let tally = h.watch.group(&h.groups[group]);
    let l = queue_to_runner_latencies(queued, &tally);
    report.p50_ms = round2(percentile_ms(&l, 50.0));
    report.p95_ms = round2(percentile_ms(&l, 95.0));
    report.p99_ms = round2(percentile_ms(&l, 99.0));
}

/// Jobs queued one at a time; each waits for its runner Job and completion before the next.
pub async fn single(forge: BenchForge, o: &ScenarioOptions) -> Result<Report, WorldError> {
    let jobs = o.jobs.unwrap_or(20);
    let h = Harness::start(forge, &o.operator, 1, 10, o.work_time).await?;
    let start = Instant::now();
    let mut queued = Vec::new();
    let per_job = Duration::from_secs(u64::from(POLL_SECONDS) * 3 + 30);
    for i in 0..jobs {
        queued.push(h.queue(0)?);
        if !h.wait_created(0, i + 1, per_job).await {
            break;
        }
        let done = |h: &Harness| h.progress(0).done > i;
        let deadline = Instant::now() + per_job;
        while !done(&h) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Space arrivals so each job meets an idle operator.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut report = Report {
        scenario: "single".into(),
        ..Report::default()
    };
    fill_latency(&mut report, &queued, &h, 0);
    h.wait_drained(Duration::from_secs(60)).await;
    report.drain_seconds = round2(start.elapsed().as_secs_f64());
    h.finish(&mut report, queued.len()).await;
    Ok(report)
}

/// N jobs at once with `maxRunners` ≥ N.
pub async fn burst(forge: BenchForge, o: &ScenarioOptions) -> Result<Report, WorldError> {
    let jobs = o.jobs.unwrap_or(1000);
    let max = u32::try_from(jobs).unwrap_or(u32::MAX).max(1);
    let h = Harness::start(forge, &o.operator, 1, max, o.work_time).await?;
    let lists_before = h.job_lists();
    let start = Instant::now();
    let mut queued = Vec::with_capacity(jobs);
    for _ in 0..jobs {
        queued.push(h.queue(0)?);
    }
    let mut report = Report {
        scenario: "burst".into(),
        ..Report::default()
    };
    if h.wait_created(0, jobs, Duration::from_secs(600)).await {
        let tally = h.watch.group(&h.groups[0]);
        let first = tally.created.first().map(|(_, t)| *t).unwrap_or(start);
        let last = tally.created.last().map(|(_, t)| *t).unwrap_or(start);
        let span = last.saturating_duration_since(first).as_secs_f64().max(0.001);
        report.runners_per_second = round2(jobs as f64 / span);
    }
    fill_latency(&mut report, &queued, &h, 0);
    h.wait_drained(Duration::from_secs(600)).await;
    report.drain_seconds = round2(start.elapsed().as_secs_f64());
    if forge != BenchForge::Github {
        let polls = (start.elapsed().as_secs_f64() / f64::from(POLL_SECONDS)).max(1.0);
        report.gitea_job_lists_per_poll = Some(round2((h.job_lists() - lists_before) as f64 / polls));
    }
    h.finish(&mut report, jobs).await;
    Ok(report)
}

/// Poisson arrivals at `rate` per second for `duration`.
pub async fn steady(forge: BenchForge, o: &ScenarioOptions) -> Result<Report, WorldError> {
    let h = Harness::start(forge, &o.operator, 1, 100, o.work_time).await?;
    let lists_before = h.job_lists();
    let start = Instant::now();
    let mut queued = Vec::new();
    let limit = o.jobs.unwrap_or(usize::MAX);
    while start.elapsed() < o.duration && queued.len() < limit {
        queued.push(h.queue(0)?);
        // Exponential inter-arrival times make a Poisson process.
        let u: f64 = rand::rng().random_range(f64::EPSILON..1.0);
        tokio::time::sleep(Duration::from_secs_f64(-u.ln() / o.rate.max(0.001))).await;
    }
    let mut report = Report {
        scenario: "steady".into(),
        ..Report::default()
    };
    h.wait_created(0, queued.len(), Duration::from_secs(120)).await;
    fill_latency(&mut report, &queued, &h, 0);
    h.wait_drained(Duration::from_secs(300)).await;
    report.drain_seconds = round2(start.elapsed().as_secs_f64());
    if forge != BenchForge::Github {
        let polls = (start.elapsed().as_secs_f64() / f64::from(POLL_SECONDS)).max(1.0);
        report.gitea_job_lists_per_poll = Some(round2((h.job_lists() - lists_before) as f64 / polls));
    }
    h.finish(&mut report, queued.len()).await;
    Ok(report)
}

/// Many RunnerGroups at once: memory and CPU of the operator, then its idle CPU.
pub async fn many_groups(forge: BenchForge, o: &ScenarioOptions) -> Result<Report, WorldError> {
    let groups = o.groups.max(1);
    let jobs = o.jobs.unwrap_or(2000);
    let per_group = jobs.div_ceil(groups);
    let max = u32::try_from(per_group).unwrap_or(u32::MAX).max(1);
    let h = Harness::start(forge, &o.operator, groups, max, o.work_time).await?;
    let start = Instant::now();
    let mut queued: Vec<Vec<Queued>> = vec![Vec::new(); groups];
    for (g, list) in queued.iter_mut().enumerate() {
        for _ in 0..per_group {
            list.push(h.queue(g)?);
        }
    }
    let mut report = Report {
        scenario: "many-groups".into(),
        ..Report::default()
    };
    let mut all: Vec<Duration> = Vec::new();
    h.wait_drained(Duration::from_secs(900)).await;
    report.drain_seconds = round2(start.elapsed().as_secs_f64());
    for (g, list) in queued.iter().enumerate() {
        all.extend(queue_to_runner_latencies(list, &h.watch.group(&h.groups[g])));
    }
    report.p50_ms = round2(percentile_ms(&all, 50.0));
    report.p95_ms = round2(percentile_ms(&all, 95.0));
    report.p99_ms = round2(percentile_ms(&all, 99.0));
    let total = groups * per_group;
    report.runners_per_second = round2(total as f64 / start.elapsed().as_secs_f64().max(0.001));
    if let Some((_, before)) = h.operator.resource_usage() {
        tokio::time::sleep(Duration::from_secs(10)).await;
        if let Some((_, after)) = h.operator.resource_usage() {
            report.idle_cpu_seconds = Some(round2(after - before));
        }
    }
    h.finish(&mut report, total).await;
    Ok(report)
}
