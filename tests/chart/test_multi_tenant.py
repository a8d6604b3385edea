"""values-multi-tenant.yaml, the preset for a cluster shared by several teams (security review M6):
rendered with real Helm, it must give what docs/multi-tenant.md promises for each property."""

import ipaddress

import pytest
import yaml

import chartlib
from conftest import find, one

PRESET_PATH = chartlib.CHART_DIR / "values-multi-tenant.yaml"
PRESET = yaml.safe_load(PRESET_PATH.read_text())
IMDS = ipaddress.ip_address("169.254.169.254")


@pytest.fixture
def objects(render):
    return render(PRESET)


def config_of(objects):
    return yaml.safe_load(one(objects, "ConfigMap")["data"]["config.yaml"])


def test_the_preset_passes_the_schema(chart):
    chart.validate_schema(PRESET)


def test_watch_is_namespaced_and_nothing_is_granted_cluster_wide(objects):
    config = config_of(objects)
    assert config["watchNamespaces"] == PRESET["watchNamespaces"]
    assert len(config["watchNamespaces"]) >= 1
    # The operator's rules sit in a Role per watched namespace; no ClusterRoleBinding gives it any.
    assert find(objects, "ClusterRoleBinding") == []
    bound = {b["metadata"]["namespace"] for b in find(objects, "RoleBinding")}
    assert set(PRESET["watchNamespaces"]) <= bound


def test_forge_hosts_are_listed(objects, chart):
    config = config_of(objects)
    assert config["forgeHosts"]["allowed"], "an empty list allows every host"
    assert config["forgeHosts"]["allowed"] == PRESET["forgeHosts"]["allowed"]
    files = chartlib.render_files(chart, PRESET)
    notes = next(v for k, v in files.items() if k.endswith("NOTES.txt"))
    assert "WARNING: forgeHosts.allowed is empty" not in notes


def test_runner_hooks_are_off(objects):
    hooks = config_of(objects)["runnerHooks"]
    assert hooks["clusterRole"] == "" and hooks["cleanupClusterRole"] == ""
    for role in find(objects, "Role"):
        resources = {r for rule in role["rules"] for r in rule["resources"]}
        assert not {"serviceaccounts", "rolebindings", "clusterroles"} & resources, role["metadata"]


def test_metrics_are_on_their_own_port_and_service(objects):
    config = config_of(objects)
    metrics_port = int(config["metricsAddr"].rsplit(":", 1)[1])
    assert metrics_port == PRESET["metrics"]["port"]
    assert metrics_port != int(config["httpAddr"].rsplit(":", 1)[1])
    webhooks = one(objects, "Service", "forgerunner")
    assert [p["targetPort"] for p in webhooks["spec"]["ports"]] == ["http"]
    metrics = one(objects, "Service", "forgerunner-metrics")
    assert metrics["spec"]["type"] == "ClusterIP"
    assert [p["port"] for p in metrics["spec"]["ports"]] == [metrics_port]


def test_network_policy_admits_only_the_stated_peers(objects):
    policy = one(objects, "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    ingress = policy["spec"]["ingress"]
    # No rule without `from`: that would admit every peer on its ports.
    assert all(rule.get("from") for rule in ingress), ingress
    by_port = {}
    for rule in ingress:
        for port in rule["ports"]:
            by_port.setdefault(port["port"], []).extend(rule["from"])
    stated = PRESET["networkPolicy"]["ingress"]
    assert all(peer in by_port["http"] for peer in stated["from"])
    assert by_port["metrics"] == stated["metricsFrom"]
    # Webhook peers may not read the metrics, and the metrics' peers may not deliver webhooks.
    assert not any(peer in by_port["metrics"] for peer in stated["from"])
    operator_pods = [p for p in by_port["http"] if "podSelector" in p]
    assert all(p not in stated["metricsFrom"] for p in operator_pods)


def covers(rule, address):
    """Whether an egress rule lets the operator reach `address` (on some port it lists)."""
    peers = rule.get("to")
    if not peers:
        return True  # no `to`: every destination
    for peer in peers:
        block = peer.get("ipBlock")
        if block is None:
            continue  # pod and namespace selectors never select the metadata service
        net = ipaddress.ip_network(block["cidr"])
        if address.version != net.version or address not in net:
            continue
        if not any(address in ipaddress.ip_network(e) for e in block.get("except", [])):
            return True
    return False


def test_network_policy_never_reaches_the_metadata_service(objects):
    egress = one(objects, "NetworkPolicy")["spec"]["egress"]
    dns_only = [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]
    reaching = [r for r in egress if r["ports"] != dns_only and covers(r, IMDS)]
    assert reaching == [], reaching
    # The control: the same rules without the preset's deniedCidrs do reach it.
    open_egress = one(
        chartlib.render_objects(chartlib.load_chart(), {**PRESET, "networkPolicy": {"enabled": True}}), "NetworkPolicy"
    )["spec"]["egress"]
    assert any(covers(r, IMDS) for r in open_egress if r["ports"] != dns_only)


def test_replicas_are_spread_over_nodes(objects):
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert PRESET["replicaCount"] > 1
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    one(objects, "PodDisruptionBudget")
