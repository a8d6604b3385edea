"""values.schema.json: strict, in sync with its generator, and rejecting bad values."""

import json

import helm_python as helm
import pytest

import chartlib
import gen_values_schema


def test_schema_file_matches_generator():
    assert chartlib.CHART_DIR.joinpath("values.schema.json").read_text() == gen_values_schema.render(), (
        "values.schema.json is stale: run python3 tests/chart/gen_values_schema.py"
    )


def _objects(node, path="$"):
    if isinstance(node, dict):
        if node.get("type") == "object" or "properties" in node:
            yield path, node
        for key, value in node.items():
            yield from _objects(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _objects(value, f"{path}[{i}]")


def test_every_values_object_is_closed():
    schema = json.loads(chartlib.CHART_DIR.joinpath("values.schema.json").read_text())
    for path, node in _objects(schema):
        if "$comment" in node or path.endswith(".global") or path.startswith("$.if") or path.startswith("$.then"):
            continue  # pass-through Kubernetes objects and the cross-field rule
        assert "additionalProperties" in node, f"{path} accepts unknown keys"


def test_defaults_pass(chart):
    chart.validate_schema({})
    chart.validate_schema(chart.values)


@pytest.mark.parametrize(
    "values",
    [
        {"forges": {"enabled": ["github"]}},
        {"forges": {"enabled": ["gitea"]}},
        {"forges": {"enabled": ["github", "gitea"]}},
        {"replicaCount": 0},
        {"replicaCount": 3},
        {"watchNamespaces": ["ci", "team-b"]},
        {"logFormat": "text", "logLevel": "info,forgerunner=debug"},
        {"serviceMonitor": {"enabled": True, "interval": "15s", "scrapeTimeout": "10s"}},
        {"resources": {"requests": {"cpu": "100m", "memory": "1Gi"}, "limits": {"memory": "256Mi"}}},
        {"tolerations": [{"key": "ci", "operator": "Exists"}], "affinity": {"nodeAffinity": {}}},
        {"fullnameOverride": "ci-runners-" + "x" * 80, "nameOverride": "runners"},
        {"serviceAccount": {"name": "ci.runners"}, "leaderElection": {"leaseName": "ci.runners-lease"}},
        {"metrics": {"port": 9464, "serviceAnnotations": {"prometheus.io/scrape": "true"}}},
        {"podAntiAffinityPreset": "hard"},
        {"networkPolicy": {"ingress": {"metricsFrom": None}}},
        {"networkPolicy": {"ingress": {"metricsFrom": []}}},
        {"networkPolicy": {"egress": {"deniedCidrs": ["169.254.169.254/32", "fd00:ec2::254/128", "10.0.0.0/8"]}}},
    ],
)
def test_good_values_pass(chart, values):
    chart.validate_schema(values)


@pytest.mark.parametrize(
    "values, where",
    [
        ({"forges": {"enabled": ["gitlab"]}}, "/forges/enabled/0"),
        ({"forges": {"enabled": []}}, "/forges/enabled"),
        ({"forges": {"enabled": ["github", "github"]}}, "/forges/enabled"),
        ({"forges": {"enabled": "github"}}, "/forges/enabled"),
        ({"replicaCount": -1}, "/replicaCount"),
        ({"replicaCount": 1.5}, "/replicaCount"),
        ({"replicaCount": "2"}, "/replicaCount"),
        ({"unknownKey": True}, "unknownKey"),
        ({"image": {"repository": "x", "tga": "1"}}, "tga"),
        ({"leaderElection": {"enabled": True, "leaseNamespace": "x"}}, "leaseNamespace"),
        ({"replicaCount": 2, "leaderElection": {"enabled": False}}, "/leaderElection/enabled"),
        ({"logFormat": "xml"}, "/logFormat"),
        ({"watchNamespaces": ["Not_A_Namespace"]}, "/watchNamespaces/0"),
        ({"service": {"port": 0}}, "/service/port"),
        ({"securityContext": {"privileged": "yes"}}, "/securityContext/privileged"),
        ({"resources": {"requests": {"gpu": "1"}}}, "gpu"),
        ({"serviceMonitor": {"interval": "often"}}, "/serviceMonitor/interval"),
        ({"image": {"repository": "x", "digest": "latest"}}, "/image/digest"),
        # Names a real API server refuses (tests/chart/k8s_names.py): the Service takes the full
        # name, so a DNS-1035 label; the ServiceAccount and the Lease, DNS-1123 subdomains.
        ({"fullnameOverride": "ci.runners"}, "/fullnameOverride"),
        ({"fullnameOverride": "1-runners"}, "/fullnameOverride"),
        ({"fullnameOverride": "CI-Runners"}, "/fullnameOverride"),
        ({"nameOverride": "runners-"}, "/nameOverride"),
        ({"serviceAccount": {"name": "ci_runners"}}, "/serviceAccount/name"),
        ({"leaderElection": {"leaseName": "ci..lease"}}, "/leaderElection/leaseName"),
        ({"leaderElection": {"leaseName": "ci.-lease"}}, "/leaderElection/leaseName"),
        # The metrics listener cannot share the webhook port (the operator would not start).
        ({"metrics": {"port": 8080}}, "/metrics/port"),
        ({"metrics": {"port": 0}}, "/metrics/port"),
        ({"podAntiAffinityPreset": "always"}, "/podAntiAffinityPreset"),
        ({"networkPolicy": {"egress": {"deniedCidrs": ["169.254.169.254"]}}}, "/networkPolicy/egress/deniedCidrs/0"),
        ({"networkPolicy": {"ingress": {"metricsFrom": "monitoring"}}}, "/networkPolicy/ingress/metricsFrom"),
    ],
)
def test_bad_values_fail(chart, values, where):
    with pytest.raises(helm.HelmValuesError) as failure:
        chart.validate_schema(values)
    assert where in str(failure.value)


def test_render_refuses_bad_values(chart):
    with pytest.raises(helm.HelmValuesError):
        chartlib.render_files(chart, {"forges": {"enabled": ["gitlab"]}})
