//! The Helm chart rendered by real Helm through `tests/chart/render_defaults.py` (PyPI
//! `helm-python-sdk`, installed by `scripts/test.sh`), as JSON objects.

use std::path::Path;
use std::process::Command;

use serde::Deserialize;

/// Renders the chart with `args` (e.g. `["--set", "replicaCount=2"]`; none for the default
/// values) and returns every non-empty document of the output, converted to JSON.
pub fn render(args: &[&str]) -> Vec<serde_json::Value> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("python3")
        .arg("tests/chart/render_defaults.py")
        .args(args)
        .current_dir(&root)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "rendering the chart failed (install the chart test deps: pip install -r tests/chart/requirements.txt):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8 output");
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde_yaml::Value::deserialize(doc).expect("valid YAML"))
        .filter(|v| !v.is_null())
        .map(|v| serde_json::to_value(v).expect("YAML converts to JSON"))
        .collect()
}
