//! The metric names the user docs build on (the Grafana dashboard and the alerts the chart
//! ships, `charts/forgerunner/files/prometheus-rules.yaml`), and which of them a `/metrics`
//! scrape has no sample of.

use std::collections::BTreeSet;
use std::path::PathBuf;

use forgerunner_sandbox::world::operator::OperatorProcess;

fn docs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs")
}

/// Every `forgerunner_*` series name in `text`.
pub fn names_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("forgerunner_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(tail.len());
        out.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    out
}

/// Names the dashboard's queries and the shipped alerts use.
pub fn documented_names() -> BTreeSet<String> {
    let text = std::fs::read_to_string(docs().join("grafana-dashboard.json")).expect("dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let panels = dashboard["panels"].as_array().into_iter().flatten();
    let targets = panels.flat_map(|p| p["targets"].as_array().into_iter().flatten());
    let variables = dashboard["templating"]["list"].as_array().into_iter().flatten();
    let queries: Vec<&str> = targets
        .filter_map(|t| t["expr"].as_str())
        .chain(variables.filter_map(|v| v["definition"].as_str()))
        .collect();
    let rules = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../charts/forgerunner/files/prometheus-rules.yaml");
    let alerts = std::fs::read_to_string(rules).expect("the chart's alert rules");
    let mut names = names_in(&queries.join("\n"));
    names.extend(names_in(&alerts));
    names
}

/// Series names with at least one sample in an OpenMetrics scrape.
pub fn sampled(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

/// The operator's `/metrics` text (empty when it does not answer).
pub async fn scrape(op: &OperatorProcess) -> String {
    forgerunner_sandbox::bench::stages::scrape(op).await
}

/// Documented names without a sample in `scrape`, except those in `exempt`.
pub fn missing(scrape: &str, exempt: &[&str]) -> Vec<String> {
    let have = sampled(scrape);
    documented_names()
        .into_iter()
        .filter(|n| !have.contains(n) && !exempt.iter().any(|e| n.starts_with(e)))
        .collect()
}
