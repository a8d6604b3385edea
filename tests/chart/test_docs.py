"""The user docs and the Grafana dashboard name only metrics that crates/core/src/metrics.rs
registers, and document every one of them; condition reasons match core's ErrorCategory."""

import json
import re

import pytest

import chartlib

ROOT = chartlib.ROOT
METRICS_RS = ROOT / "crates" / "core" / "src" / "metrics.rs"
METRICS_DIR = ROOT / "crates" / "core" / "src" / "metrics"
BUDGET_RS = ROOT / "crates" / "core" / "src" / "budget.rs"
ERROR_RS = ROOT / "crates" / "core" / "src" / "error.rs"
DOCS = ROOT / "docs"
DASHBOARD = DOCS / "grafana-dashboard.json"


def registered_metrics():
    """name → kind for every metric registered under the forgerunner_ prefix."""
    out = {}
    # Families live in metrics.rs, its metrics/ module and budget.rs; some register through `self`.
    paths = [METRICS_RS, BUDGET_RS, *sorted(METRICS_DIR.glob("*.rs"))]
    text = "".join(p.read_text() for p in paths)
    kinds = {}
    for field, kind in re.findall(r"pub (\w+): Family<\w+, (Counter|Gauge|Histogram)>", text):
        kinds[field] = kind
    for field, kind in re.findall(r"pub (\w+): (Counter|Gauge|Histogram),", text):
        kinds[field] = kind
    # `m.field.clone()`, or `m.holder.field.clone()` for a family kept with its own bookkeeping.
    pattern = r'r\.register\(\s*"(\w+)",\s*"[^"]*",\s*(?:m|self)\.((?:\w+\.)?\w+)\.clone\(\)'
    for name, path in re.findall(pattern, text, re.S):
        out["forgerunner_" + name] = kinds[path.split(".")[-1]]
    assert out, "no metrics found in metrics.rs: did its registration code change shape?"
    return out


def exposed_names(metrics):
    """Every series name Prometheus sees (OpenMetrics suffixes included)."""
    names = set()
    for name, kind in metrics.items():
        if kind == "Counter":
            names.add(name + "_total")
        elif kind == "Histogram":
            names.update({name + "_bucket", name + "_sum", name + "_count"})
        else:
            names.add(name)
    return names


def used_names(text):
    return set(re.findall(r"\bforgerunner_[a-z_]+\b", text))


def test_dashboard_is_valid_and_uses_only_real_metrics():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["title"] == "forgerunner"
    exprs = []
    for panel in dashboard["panels"]:
        exprs += [t["expr"] for t in panel.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    used = used_names("\n".join(exprs))
    metrics = registered_metrics()
    assert used <= exposed_names(metrics), used - exposed_names(metrics)
    # Every metric has a panel.
    for name in metrics:
        assert any(u.startswith(name) for u in used), f"{name} has no panel"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"


def test_operations_doc_lists_every_metric_and_no_other():
    text = (DOCS / "operations.md").read_text()
    table = {m for m in re.findall(r"^\| `(forgerunner_[a-z_]+)` \|", text, re.M)}
    assert table == exposed_names_for_table(registered_metrics())


def exposed_names_for_table(metrics):
    """The name a user types in PromQL for each metric (counters with _total)."""
    return {name + "_total" if kind == "Counter" else name for name, kind in metrics.items()}


@pytest.mark.parametrize("doc", ["operations.md", "quick-start.md", "github.md", "gitea.md", "migration.md"])
def test_docs_name_only_real_metrics(doc):
    used = used_names((DOCS / doc).read_text())
    metrics = registered_metrics()
    # Prose may name a histogram by its family name; PromQL uses the suffixed series.
    allowed = exposed_names(metrics) | {n for n, k in metrics.items() if k == "Histogram"}
    assert used <= allowed, used - allowed


def test_troubleshooting_covers_every_error_category():
    reasons = re.findall(r'ErrorCategory::\w+ => "(\w+)"', ERROR_RS.read_text())
    assert len(reasons) >= 10
    text = (DOCS / "operations.md").read_text()
    for reason in reasons:
        assert f"| `{reason}` |" in text, f"operations.md has no troubleshooting row for {reason}"


def test_doc_links_resolve():
    for doc in DOCS.glob("*.md"):
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", doc.read_text()):
            assert (doc.parent / target).exists(), f"{doc.name} links to missing {target}"
