"""helm lint (strict) passes for the default and the other supported configurations."""

import helm_python as helm
import pytest
import yaml

import chartlib


@pytest.mark.parametrize(
    "values",
    [
        None,
        {"forges": {"enabled": ["github"]}},
        {"forges": {"enabled": ["gitea"]}},
        {"watchNamespaces": ["ci"], "replicaCount": 2, "serviceMonitor": {"enabled": True}},
        {"networkPolicy": {"enabled": True}},
        yaml.safe_load((chartlib.CHART_DIR / "values-multi-tenant.yaml").read_text()),
    ],
)
def test_lint_is_clean(values):
    report = helm.lint(str(chartlib.CHART_DIR), values, strict=True, kube_version="v1.33.0")
    assert report["errors"] == []
    serious = [m for m in report["messages"] if m["severity"] >= 2]
    assert serious == [], serious
    assert report["total_charts_linted"] == 1


def test_lint_reports_schema_violations():
    report = helm.lint(str(chartlib.CHART_DIR), {"forges": {"enabled": ["gitlab"]}}, strict=True)
    messages = " ".join(m["error"] for m in report["messages"]) + " ".join(report["errors"])
    assert "forges" in messages


def test_chart_metadata():
    chart = chartlib.load_chart()
    meta = chart.metadata
    assert meta["name"] == "forgerunner"
    assert meta["apiVersion"] == "v2"
    assert meta["version"]
    assert meta["appVersion"]
