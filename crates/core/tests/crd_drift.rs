//! The chart ships the CRD generated from the Rust types; this test fails when the copy drifts.

use std::path::PathBuf;

const REGENERATE: &str = "cargo run -p forgerunner -- crd > charts/forgerunner/crds/runnergroups.yaml";

fn chart_crd_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../charts/forgerunner/crds/runnergroups.yaml")
}

#[test]
fn chart_crd_matches_generated() {
    let path = chart_crd_path();
    let checked_in = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; regenerate it with `{REGENERATE}`",
            path.display()
        )
    });
    let generated = forgerunner_core::crd::crd_yaml();
    if checked_in != generated {
        let first_diff = checked_in
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map_or_else(
                || "length differs".to_owned(),
                |i| format!("first difference at line {}", i + 1),
            );
        panic!(
            "{} is out of date with the RunnerGroup types ({first_diff}).\nRegenerate it from the repo root with:\n  {REGENERATE}",
            path.display()
        );
    }
}

#[test]
fn generated_crd_starts_with_header_and_parses() {
    let yaml = forgerunner_core::crd::crd_yaml();
    assert!(yaml.starts_with(forgerunner_core::crd::CRD_YAML_HEADER));
    let value: serde_yaml::Value = serde_yaml::from_str(&yaml).expect("generated CRD is YAML");
    assert_eq!(value["kind"].as_str(), Some("CustomResourceDefinition"));
    assert_eq!(
        value["metadata"]["name"].as_str(),
        Some("runnergroups.forgerunner.dev")
    );
}
