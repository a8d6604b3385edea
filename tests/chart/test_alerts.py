"""The PrometheusRule (templates/prometheusrule.yaml, rules in files/prometheus-rules.yaml): off by
default; every expression parses as PromQL, reads only this operator's series (the selector in
every selector) and only metrics crates/core registers; every alert has a severity, a summary and
a runbook section in docs/operations.md, and every runbook section an alert."""

import re

import helm_python as helm
import promql_parser as promql
import pytest
import yaml

import chartlib
import k8s_objects
from conftest import find, one
from test_docs import exposed_names, registered_metrics

RULES_FILE = chartlib.CHART_DIR / "files" / "prometheus-rules.yaml"
OPERATIONS = chartlib.ROOT / "docs" / "operations.md"
RUNBOOK_SECTION = "Alerts and runbooks"
DEFAULT_RUNBOOK_URL = "https://github.com/forgerunner/forgerunner/blob/main/docs/operations.md"
# Series Prometheus makes itself; `up` is how a scrape target that does not answer shows.
PROMETHEUS_SERIES = {"up"}
SEVERITIES = {"warning", "critical"}
ENABLED = {"prometheusRule": {"enabled": True}}
# What Prometheus's alert templates may use here: the labels, the value, its humanize* functions
# and text/template's `or` (docs/configuration/template_reference.md upstream).
TEMPLATE_ACTION = re.compile(r"^\{\{ (?:or )?(\$value|\$labels\.\w+)( \$labels\.\w+)*( \| humanize\w*)? \}\}$")


def rule_of(objects):
    return one(objects, "PrometheusRule")


def alerts(rule):
    return [r for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r]


def selectors(node):
    """Every vector selector of a parsed expression, those inside range vectors included."""
    found = []

    def visit(n):
        if isinstance(n, promql.VectorSelector):
            found.append(n)

    promql.walk(node, visit, None)
    return found


def is_scalar(node):
    if isinstance(node, promql.ParenExpr):
        return is_scalar(node.expr)
    return isinstance(node, promql.NumberLiteral) or (
        isinstance(node, promql.Call) and node.func.name in ("time", "scalar")
    )


def result_labels(node):
    """Labels the series an expression returns can carry; None when it may keep any label of
    its inputs (a plain selector, `without`). Enough for the operators the rules use."""
    if isinstance(node, (promql.ParenExpr, promql.UnaryExpr, promql.SubqueryExpr)):
        return result_labels(node.expr)
    if isinstance(node, promql.AggregateExpr):
        if node.modifier is None:
            return set()
        return set(node.modifier.labels) if node.modifier.type == promql.AggModifierType.By else None
    if isinstance(node, promql.BinaryExpr):
        if is_scalar(node.lhs) or is_scalar(node.rhs):
            return result_labels(node.rhs if is_scalar(node.lhs) else node.lhs)
        left, right = result_labels(node.lhs), result_labels(node.rhs)
        if str(node.op) == "or":
            return None if left is None or right is None else left | right
        # One-to-one, many-to-one (group_left), `and`, `unless`: the left side's series.
        return left
    if isinstance(node, promql.Call):
        if node.func.name == "absent":
            # Labels of the selector's equality matchers, and only for a bare selector.
            (arg,) = node.args
            if isinstance(arg, promql.VectorSelector):
                return {m.name for m in arg.matchers.matchers if str(m.op) == "MatchOp.Equal"}
            return set()
        vectors = [a for a in node.args if not is_scalar(a) and not isinstance(a, promql.StringLiteral)]
        inner = result_labels(vectors[0]) if vectors else set()
        if node.func.name == "histogram_quantile" and inner is not None:
            return inner - {"le"}
        return inner
    return None


def exported_series():
    return exposed_names(registered_metrics())


def heading_anchors(text):
    """GitHub's anchor of every heading: lower case, punctuation dropped, spaces as dashes,
    `-1`, `-2` ... after repeats."""
    anchors, seen = set(), {}
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def runbook_section():
    """The text of the alerts section of docs/operations.md, up to the next `## ` heading."""
    text = OPERATIONS.read_text()
    start = text.index(f"\n## {RUNBOOK_SECTION}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_absent_by_default(render):
    assert find(render(), "PrometheusRule") == []
    assert find(render({"serviceMonitor": {"enabled": True}}), "PrometheusRule") == []


def test_rule_is_the_rule_file(render):
    """Rendered with the defaults for a release named like the chart, the rule is the file as it
    is: the file's default job and runbook address are exactly what the template replaces."""
    rule = rule_of(render(ENABLED))
    assert k8s_objects.problems(rule) == []
    assert rule["metadata"]["name"] == "forgerunner"
    assert rule["metadata"]["namespace"] == chartlib.NAMESPACE
    assert rule["metadata"]["labels"]["app.kubernetes.io/part-of"] == "forgerunner"
    assert rule["spec"]["groups"] == yaml.safe_load(RULES_FILE.read_text())["groups"]
    assert len(alerts(rule)) >= 10


def test_namespace_and_labels(render):
    values = {"prometheusRule": {"enabled": True, "namespace": "monitoring", "labels": {"release": "kube-prometheus"}}}
    rule = rule_of(render(values))
    assert rule["metadata"]["namespace"] == "monitoring"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus"
    assert rule["metadata"]["labels"]["app.kubernetes.io/instance"] == chartlib.RELEASE


def test_every_expression_parses_and_reads_exported_metrics_only(render):
    exported = exported_series()
    allowed = exported | PROMETHEUS_SERIES
    used = set()
    for alert in alerts(rule_of(render(ENABLED))):
        try:
            expr = promql.parse(alert["expr"])
        except ValueError as e:
            pytest.fail(f"{alert['alert']}: {e}")
        names = [s.name for s in selectors(expr)]
        assert names and all(names), f"{alert['alert']}: a selector without a metric name"
        unknown = set(names) - allowed
        assert not unknown, f"{alert['alert']} reads {unknown}, which the operator does not export"
        used |= set(names)
    # The alerts watch the operator's own series, not just `up`.
    assert len(used & exported) >= 8, used


@pytest.mark.parametrize(
    "release, values, matchers",
    [
        ("forgerunner", {}, {("job", "forgerunner-metrics")}),
        ("ci", {}, {("job", "ci-forgerunner-metrics")}),
        ("ci", {"selector": 'job="runners", cluster=~"eu-.*"'}, {("job", "runners"), ("cluster", "eu-.*")}),
    ],
)
def test_every_selector_picks_this_operators_series(render, release, values, matchers):
    rule = rule_of(render({"prometheusRule": {"enabled": True, **values}}, release=release))
    for alert in alerts(rule):
        for selector in selectors(promql.parse(alert["expr"])):
            have = {(m.name, m.value) for m in selector.matchers.matchers}
            assert matchers <= have, f"{alert['alert']}: {selector.name} lacks {matchers - have}"


def test_default_job_is_the_service_monitors(render):
    """The Prometheus Operator names a ServiceMonitor's job after the Service it scrapes."""
    objects = render({"serviceMonitor": {"enabled": True}, **ENABLED}, release="ci")
    selector = one(objects, "ServiceMonitor")["spec"]["selector"]["matchLabels"]
    (service,) = [
        s["metadata"]["name"]
        for s in find(objects, "Service")
        if all(s["metadata"]["labels"].get(k) == v for k, v in selector.items())
    ]
    up = [
        s
        for alert in alerts(rule_of(objects))
        for s in selectors(promql.parse(alert["expr"]))
        if s.name == "up"
    ]
    assert up
    for s in up:
        assert ("job", service) in {(m.name, m.value) for m in s.matchers.matchers}


def test_every_alert_has_severity_summary_and_runbook(render):
    anchors = heading_anchors(runbook_section())
    names = []
    rule_alerts = alerts(rule_of(render(ENABLED)))
    for alert in rule_alerts:
        name = alert["alert"]
        names.append(name)
        assert re.fullmatch(r"Forgerunner(?:[A-Z][a-z0-9]*)+", name), name
        assert alert["labels"]["severity"] in SEVERITIES, name
        assert re.fullmatch(r"\d+[mh]", alert["for"]), name
        notes = alert["annotations"]
        assert notes["summary"].strip() and notes["description"].strip(), name
        url, _, anchor = notes["runbook_url"].partition("#")
        assert url == DEFAULT_RUNBOOK_URL, name
        assert anchor in anchors, f"{name}: no section #{anchor} under '{RUNBOOK_SECTION}' in docs/operations.md"
    assert len(names) == len(set(names)), names
    assert {a["labels"]["severity"] for a in rule_alerts} == SEVERITIES


def test_every_runbook_section_has_its_alert(render):
    sections = re.findall(r"^### (Forgerunner\w+)$", runbook_section(), re.M)
    assert sorted(sections) == sorted(a["alert"] for a in alerts(rule_of(render(ENABLED))))


def test_runbook_links_resolve():
    anchors = heading_anchors(OPERATIONS.read_text())
    for anchor in re.findall(r"\]\(#([^)]+)\)", runbook_section()):
        assert anchor in anchors, f"'{RUNBOOK_SECTION}' links to missing #{anchor}"


def test_runbook_url_follows_the_value(render):
    base = "https://wiki.example.com/ci/forgerunner-operations"
    rule = rule_of(render({"prometheusRule": {"enabled": True, "runbookUrl": base}}))
    for alert in alerts(rule):
        assert alert["annotations"]["runbook_url"] == f"{base}#{alert['alert'].lower()}"


def test_annotations_use_only_labels_the_expression_keeps(render):
    """A `{{ $labels.x }}` the result cannot carry prints nothing; Helm syntax must not leak in."""
    for alert in alerts(rule_of(render(ENABLED))):
        keeps = result_labels(promql.parse(alert["expr"]))
        for text in alert["annotations"].values():
            assert text.count("{{") == text.count("}}"), alert["alert"]
            for action in re.findall(r"\{\{.*?\}\}", text, re.S):
                action = " ".join(action.split())
                assert TEMPLATE_ACTION.match(action), f"{alert['alert']}: unexpected template {action}"
                named = set(re.findall(r"\$labels\.(\w+)", action))
                if keeps is not None:
                    assert named <= keeps, f"{alert['alert']}: {named - keeps} is not in the result ({keeps})"


def test_result_labels_reads_aggregations():
    assert result_labels(promql.parse("sum by (forge, le) (rate(x[5m])) > 1")) == {"forge", "le"}
    assert result_labels(promql.parse("histogram_quantile(0.9, sum by (forge, le) (rate(x[5m])))")) == {"forge"}
    assert result_labels(promql.parse('absent(up{job="a"})')) == {"job"}
    assert result_labels(promql.parse("max without (pod) (x)")) is None
    assert result_labels(promql.parse("sum by (a, b) (x) / ignoring (b) group_left sum by (a) (y)")) == {"a", "b"}


def test_docs_keep_no_copy_of_the_rules():
    text = OPERATIONS.read_text()
    assert not re.search(r"^\s*-?\s*alert: ", text, re.M), "docs/operations.md copies an alert rule"
    assert "charts/forgerunner/files/prometheus-rules.yaml" in runbook_section()


@pytest.mark.parametrize(
    "values",
    [
        {"selector": 'job="forgerunner-metrics",cluster!="test"'},
        {"selector": 'job =~ "forgerunner-.*" , namespace="ci"'},
        {"namespace": "monitoring", "labels": {"release": "prom"}},
        {"runbookUrl": "http://wiki.internal/forgerunner"},
    ],
)
def test_schema_accepts(chart, values):
    chart.validate_schema({"prometheusRule": {"enabled": True, **values}})


@pytest.mark.parametrize(
    "values, where",
    [
        ({"selector": "job=forgerunner-metrics"}, "/prometheusRule/selector"),
        ({"selector": '{job="x"}'}, "/prometheusRule/selector"),
        ({"selector": 'job="x",'}, "/prometheusRule/selector"),
        ({"namespace": "Monitoring"}, "/prometheusRule/namespace"),
        ({"runbookUrl": "https://example.com/ops.md#alerts"}, "/prometheusRule/runbookUrl"),
        ({"runbookUrl": ""}, "/prometheusRule/runbookUrl"),
        ({"additionalLabels": {"a": "b"}}, "additionalLabels"),
    ],
)
def test_schema_refuses(chart, values, where):
    with pytest.raises(helm.HelmValuesError) as failure:
        chart.validate_schema({"prometheusRule": values})
    assert where in str(failure.value)


def test_lint_is_clean_with_the_rule():
    values = {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True, "namespace": "monitoring"}}
    report = helm.lint(str(chartlib.CHART_DIR), values, strict=True, kube_version="v1.33.0")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []
