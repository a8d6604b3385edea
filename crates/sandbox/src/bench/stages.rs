//! The latency per stage as the operator itself measured it: its `/metrics` stage histograms,
//! summed over groups, read once at the end of a run and reduced to p50 and p95 the way
//! Prometheus' `histogram_quantile` does (linear within a bucket).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::world::operator::OperatorProcess;

/// The operator's stage histograms (without the `forgerunner_` prefix and `_seconds` unit), in
/// the order a job goes through them.
pub const STAGES: [&str; 6] = [
    "job_queued_to_seen",
    "job_seen_to_runner",
    "job_queue_to_runner",
    "runner_created_to_running",
    "runner_running_to_job_started",
    "job_execution",
];

/// One stage's numbers.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct StageLatency {
    /// Samples recorded.
    pub count: u64,
    /// 50th percentile, milliseconds.
    pub p50_ms: f64,
    /// 95th percentile, milliseconds.
    pub p95_ms: f64,
}

/// Cumulative bucket counts by upper bound, of one histogram summed over its label sets.
type Buckets = BTreeMap<u64, (f64, u64)>;

/// Every stage with samples in `scrape`, by name.
pub fn from_scrape(scrape: &str) -> BTreeMap<String, StageLatency> {
    let mut hist: BTreeMap<&str, Buckets> = BTreeMap::new();
    for line in scrape.lines() {
        let Some(rest) = line.strip_prefix("forgerunner_") else {
            continue;
        };
        let Some((name, tail)) = rest.split_once("_seconds_bucket{") else {
            continue;
        };
        let Some(stage) = STAGES.iter().find(|s| **s == name) else {
            continue;
        };
        let le = tail
            .split("le=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .map(|s| {
                if s == "+Inf" {
                    f64::INFINITY
                } else {
                    s.parse().unwrap_or(f64::NAN)
                }
            });
        let count = tail.rsplit(' ').next().and_then(|c| c.parse::<u64>().ok());
        if let (Some(le), Some(count)) = (le, count)
            && !le.is_nan()
        {
            // Keyed by the bound's bits so equal bounds of several groups add up, in order.
            let e = hist
                .entry(stage)
                .or_default()
                .entry(le.to_bits())
                .or_insert((le, 0));
            e.1 += count;
        }
    }
    hist.into_iter()
        .filter_map(|(stage, buckets)| {
            let mut sorted: Vec<(f64, u64)> = buckets.into_values().collect();
            sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
            let count = sorted.last().map_or(0, |b| b.1);
            (count > 0).then(|| {
                let ms = |q| (quantile(q, &sorted) * 1000.0 * 100.0).round() / 100.0;
                (
                    stage.to_owned(),
                    StageLatency {
                        count,
                        p50_ms: ms(0.5),
                        p95_ms: ms(0.95),
                    },
                )
            })
        })
        .collect()
}

/// The `q` quantile of cumulative `buckets` (sorted by bound), interpolated within its bucket;
/// a quantile in the `+Inf` bucket is the highest finite bound.
fn quantile(q: f64, buckets: &[(f64, u64)]) -> f64 {
    let total = buckets.last().map_or(0, |b| b.1) as f64;
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for &(le, cum) in buckets {
        let cum = cum as f64;
        if cum >= rank {
            if le.is_infinite() {
                return lower.0;
            }
            let inside = cum - lower.1;
            let frac = if inside > 0.0 {
                (rank - lower.1) / inside
            } else {
                1.0
            };
            return lower.0 + (le - lower.0) * frac;
        }
        lower = (le, cum);
    }
    lower.0
}

/// What the operator's `/metrics` shows now (empty when it does not answer).
pub async fn scrape(op: &OperatorProcess) -> String {
    let Ok(addr) = op.metrics_addr().await else {
        return String::new();
    };
    match reqwest::get(format!("http://{addr}/metrics")).await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// The stages as the operator's `/metrics` shows them now (empty when it does not answer).
pub async fn read(op: &OperatorProcess) -> BTreeMap<String, StageLatency> {
    from_scrape(&scrape(op).await)
}

/// Every stage with samples in `scrape` for the group named `group` alone.
pub fn of_group(scrape: &str, group: &str) -> BTreeMap<String, StageLatency> {
    let label = format!("group=\"{group}\"");
    let lines: Vec<&str> = scrape.lines().filter(|l| l.contains(&label)).collect();
    from_scrape(&lines.join("\n"))
}

/// A text table of the stages (rows) of `groups` (columns): samples and p50 from `scrape`, `—`
/// for a stage a group has no sample of.
pub fn table(scrape: &str, groups: &[&str]) -> Vec<String> {
    let per_group: Vec<BTreeMap<String, StageLatency>> = groups.iter().map(|g| of_group(scrape, g)).collect();
    let mut lines = vec![
        format!(
            "{:<30}{}",
            "STAGE (samples, p50)",
            groups.iter().map(|g| format!("{g:<22}")).collect::<String>()
        )
        .trim_end()
        .to_owned(),
    ];
    for stage in STAGES {
        let cells: String = per_group
            .iter()
            .map(|m| {
                let cell = m.get(stage).map_or("—".to_owned(), |l| {
                    format!("{:>3}  {:>8.1} ms", l.count, l.p50_ms)
                });
                format!("{cell:<22}")
            })
            .collect();
        lines.push(format!("{stage:<30}{cells}").trim_end().to_owned());
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scrape of `stage` holding `samples` (seconds) in the operator's stage buckets
    /// (`stage_histogram`: 50 ms doubling, 20 of them).
    fn histogram(stage: &str, samples: &[f64]) -> String {
        let mut bounds: Vec<f64> = (0..20).map(|i| 0.05 * 2f64.powi(i)).collect();
        bounds.push(f64::INFINITY);
        bounds
            .iter()
            .map(|le| {
                let n = samples.iter().filter(|s| *s <= le).count();
                let le = if le.is_infinite() {
                    "+Inf".to_owned()
                } else {
                    le.to_string()
                };
                format!("forgerunner_{stage}_seconds_bucket{{group=\"g\",le=\"{le}\"}} {n}\n")
            })
            .collect()
    }

    #[test]
    fn interpolation_keeps_a_longer_stage_longer() {
        // Each job's queue → runner is at least its seen → runner (by 0 to 0.9 s): whatever the
        // buckets do, no percentile may show it shorter.
        let seen: Vec<f64> = (0..20).map(|i| 0.03 + 0.17 * f64::from(i)).collect();
        for extra in [0.0, 0.01, 0.2, 0.45, 0.9] {
            let queue: Vec<f64> = seen.iter().map(|s| s + extra).collect();
            let scrape = histogram("job_seen_to_runner", &seen) + &histogram("job_queue_to_runner", &queue);
            let got = from_scrape(&scrape);
            let (s, q) = (&got["job_seen_to_runner"], &got["job_queue_to_runner"]);
            assert_eq!((s.count, q.count), (20, 20));
            assert!(
                q.p50_ms >= s.p50_ms && q.p95_ms >= s.p95_ms,
                "+{extra}: {s:?} {q:?}"
            );
        }
    }

    #[test]
    fn percentiles_sum_groups_and_interpolate() {
        let scrape = r#"# TYPE forgerunner_job_execution_seconds histogram
forgerunner_job_execution_seconds_bucket{forge="gitea",namespace="n",group="a",le="1.0"} 0
forgerunner_job_execution_seconds_bucket{forge="gitea",namespace="n",group="a",le="2.0"} 4
forgerunner_job_execution_seconds_bucket{forge="gitea",namespace="n",group="a",le="+Inf"} 4
forgerunner_job_execution_seconds_bucket{forge="gitea",namespace="n",group="b",le="1.0"} 0
forgerunner_job_execution_seconds_bucket{forge="gitea",namespace="n",group="b",le="2.0"} 4
forgerunner_job_execution_seconds_bucket{forge="gitea",namespace="n",group="b",le="+Inf"} 6
forgerunner_job_seen_to_runner_seconds_bucket{forge="gitea",namespace="n",group="b",le="+Inf"} 0
forgerunner_reconcile_duration_seconds_bucket{forge="gitea",le="1.0"} 9
"#;
        let got = from_scrape(scrape);
        assert_eq!(
            got.len(),
            1,
            "stages without samples and other histograms are left out"
        );
        let e = &got["job_execution"];
        assert_eq!(e.count, 10);
        // Rank 5 of 8 in (1, 2]: 1 + 5/8.
        assert_eq!(e.p50_ms, 1625.0);
        // Rank 9.5 falls in +Inf: the highest finite bound.
        assert_eq!(e.p95_ms, 2000.0);

        let only_a = of_group(scrape, "a");
        assert_eq!(only_a["job_execution"].count, 4);
        let rows = table(scrape, &["a", "b", "c"]);
        assert_eq!(rows.len(), 1 + STAGES.len());
        let exec = rows
            .iter()
            .find(|r| r.starts_with("job_execution"))
            .expect("a row per stage");
        assert!(exec.contains("  4    1500.0 ms"), "{exec}");
        assert!(exec.contains("  6"), "{exec}");
        assert!(exec.ends_with('—'), "no samples for c: {exec}");
    }
}
