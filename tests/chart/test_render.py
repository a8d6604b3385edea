"""Renders the chart for the supported configurations and checks what comes out."""

import pytest
import yaml

import chartlib
import k8s_objects
from conftest import find, one

NS = chartlib.NAMESPACE
CONFIG_KEYS = {
    "forges",
    "watchNamespaces",
    "httpAddr",
    "metricsAddr",
    "logFormat",
    "logLevel",
    "listingCacheEntries",
    "leaderElection",
    "forgeHosts",
    "metrics",
    "runnerHooks",
}
LEADER_KEYS = {
    "enabled",
    "leaseName",
    "leaseNamespace",
    "leaseDurationSeconds",
    "renewDeadlineSeconds",
    "retryPeriodSeconds",
}


def config_of(objects):
    cm = one(objects, "ConfigMap", "forgerunner")
    return yaml.safe_load(cm["data"]["config.yaml"])


def operator_container(objects):
    deployment = one(objects, "Deployment", "forgerunner")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["operator"]
    return deployment, containers[0]


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"forges": {"enabled": ["github"]}},
        {"forges": {"enabled": ["gitea"]}},
        {"watchNamespaces": ["ci", "ci-large"]},
        {"replicaCount": 3, "serviceMonitor": {"enabled": True}, "networkPolicy": {"enabled": True}},
    ],
    ids=["defaults", "github", "gitea", "namespaced", "everything"],
)
def test_every_object_is_structurally_valid(render, values):
    objects = render(values)
    assert objects, "nothing rendered"
    for obj in objects:
        assert k8s_objects.problems(obj) == [], obj["__source__"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "forgerunner"


def test_defaults_render_the_expected_objects(render):
    kinds = sorted(o["kind"] for o in render())
    assert kinds == sorted(
        [
            "ConfigMap",
            "Deployment",
            "Service",
            "Service",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
        ]
    )


def test_default_config_matches_the_operator_contract(render):
    config = config_of(render())
    assert set(config) <= CONFIG_KEYS, "unknown keys make the operator exit with code 2"
    assert set(config["leaderElection"]) <= LEADER_KEYS
    assert config["forges"] == ["github", "gitea", "forgejo"]
    assert config["watchNamespaces"] == []
    assert config["httpAddr"] == "0.0.0.0:8080"
    # Metrics on their own listener (security review L1).
    assert config["metricsAddr"] == "0.0.0.0:9090"
    assert config["logFormat"] == "json"
    assert config["logLevel"] == "info"
    assert config["listingCacheEntries"] == 500000
    assert config["metrics"] == {"jobLabels": False}
    assert config["leaderElection"] == {
        "enabled": True,
        "leaseName": "forgerunner",
        "leaseNamespace": NS,
        "leaseDurationSeconds": 15,
    }
    # Runner container hooks off by default: the operator binds nothing.
    assert config["runnerHooks"] == {
        "clusterRole": "",
        "cleanupClusterRole": "",
        "operatorServiceAccount": "",
        "operatorNamespace": NS,
    }


def test_config_names_the_hooks_cluster_roles_when_on(render):
    objects = render({"rbac": {"runnerContainerHooks": True}, "serviceAccount": {"name": "ops-sa"}})
    hooks = config_of(objects)["runnerHooks"]
    assert hooks == {
        "clusterRole": "forgerunner-runner-hooks",
        "cleanupClusterRole": "forgerunner-runner-hooks-cleanup",
        "operatorServiceAccount": "ops-sa",
        "operatorNamespace": NS,
    }
    # The names are those of the ClusterRoles rendered, and the operator runs as that account.
    one(objects, "ClusterRole", hooks["clusterRole"])
    one(objects, "ClusterRole", hooks["cleanupClusterRole"])
    pod = one(objects, "Deployment", "forgerunner")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "ops-sa"


@pytest.mark.parametrize("forges", [["github"], ["gitea"], ["forgejo"], ["gitea", "github"]])
def test_config_carries_the_enabled_forges(render, forges):
    assert config_of(render({"forges": {"enabled": forges}}))["forges"] == forges


def test_config_follows_values(render):
    config = config_of(
        render(
            {
                "logFormat": "text",
                "logLevel": "info,forgerunner=debug",
                "watchNamespaces": ["a"],
                "leaderElection": {"leaseName": "other", "leaseDurationSeconds": 30},
            }
        )
    )
    assert config["logFormat"] == "text"
    assert config["logLevel"] == "info,forgerunner=debug"
    assert config["watchNamespaces"] == ["a"]
    assert config["leaderElection"]["leaseName"] == "other"
    assert config["leaderElection"]["leaseDurationSeconds"] == 30


def test_lease_timing_is_passed_only_when_set(render):
    timing = {"leaseDurationSeconds": 20, "renewDeadlineSeconds": 12, "retryPeriodSeconds": 3}
    config = config_of(render({"leaderElection": timing}))
    assert {k: config["leaderElection"][k] for k in timing} == timing
    assert "renewDeadlineSeconds" not in config_of(render())["leaderElection"]


def test_config_change_rolls_the_pods(render):
    def checksum(objects):
        return one(objects, "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

    assert checksum(render()) != checksum(render({"forges": {"enabled": ["gitea"]}}))
    assert checksum(render()) == checksum(render())


def test_deployment_runs_the_operator_hardened(render):
    objects = render()
    deployment, container = operator_container(objects)
    pod = deployment["spec"]["template"]["spec"]
    assert container["args"] == ["run", "--config", "/etc/forgerunner/config.yaml"]
    assert container["image"] == "ghcr.io/forgerunner/forgerunner:0.1.0"
    assert container["ports"] == [
        {"name": "http", "containerPort": 8080, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
    ]
    # Probes on the metrics listener: a flood of webhook connections cannot fail them.
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["resources"]["requests"] == {"cpu": "50m", "memory": "64Mi"}
    assert container["resources"]["limits"] == {"cpu": "500m", "memory": "128Mi"}
    assert pod["serviceAccountName"] == "forgerunner"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {"config": "/etc/forgerunner", "tmp": "/tmp"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["config"]["configMap"]["name"] == "forgerunner"


def test_pod_identity_comes_from_the_downward_api(render):
    _, container = operator_container(render())
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    # The leader advertises http://$POD_IP:8080 so standbys can forward webhook deliveries.
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"


def test_extra_env_is_appended(render):
    _, container = operator_container(render({"extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}]}))
    names = [e["name"] for e in container["env"]]
    assert names == ["POD_NAME", "POD_NAMESPACE", "POD_IP", "HTTPS_PROXY"]


def test_image_digest_wins_over_tag(render):
    digest = "sha256:" + "a" * 64
    _, container = operator_container(render({"image": {"tag": "9.9.9", "digest": digest}}))
    assert container["image"] == f"ghcr.io/forgerunner/forgerunner@{digest}"
    _, container = operator_container(render({"image": {"tag": "9.9.9"}}))
    assert container["image"] == "ghcr.io/forgerunner/forgerunner:9.9.9"


def test_webhook_and_metrics_services_are_apart(render):
    """Security review L1: exposing the webhook Service (LoadBalancer, an Ingress) must not expose
    /metrics, so the metrics port is only on a ClusterIP Service of its own."""
    objects = render({"service": {"type": "LoadBalancer"}})
    service = one(objects, "Service", "forgerunner")
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}]
    metrics = one(objects, "Service", "forgerunner-metrics")
    assert metrics["spec"]["type"] == "ClusterIP"
    assert metrics["spec"]["ports"] == [{"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]
    pod_labels = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    for svc in (service, metrics):
        for key, value in svc["spec"]["selector"].items():
            assert pod_labels[key] == value


def test_metrics_port_follows_the_value(render):
    objects = render({"metrics": {"port": 9464, "serviceAnnotations": {"prometheus.io/scrape": "true"}}})
    assert config_of(objects)["metricsAddr"] == "0.0.0.0:9464"
    _, container = operator_container(objects)
    assert {"name": "metrics", "containerPort": 9464, "protocol": "TCP"} in container["ports"]
    metrics = one(objects, "Service", "forgerunner-metrics")
    assert metrics["spec"]["ports"][0]["port"] == 9464
    assert metrics["metadata"]["annotations"] == {"prometheus.io/scrape": "true"}


def test_metrics_port_cannot_be_the_webhook_port(chart):
    import helm_python as helm

    with pytest.raises(helm.HelmValuesError):
        chartlib.render_files(chart, {"metrics": {"port": 8080}})


def test_service_monitor_is_optional(render):
    assert find(render(), "ServiceMonitor") == []
    objects = render({"serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus"}}})
    monitor = one(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus"
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["port"] == "metrics"
    assert endpoint["path"] == "/metrics"
    # It selects the metrics Service alone, not the webhook Service.
    selector = monitor["spec"]["selector"]["matchLabels"]
    selected = [
        s["metadata"]["name"]
        for s in find(objects, "Service")
        if all(s["metadata"]["labels"].get(k) == v for k, v in selector.items())
    ]
    assert selected == ["forgerunner-metrics"]
    assert endpoint["interval"] == "30s"
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NS]


def test_replicas_spread_over_nodes_by_default(render):
    """Security review L9: two replicas on one node would lose the leader and its standby at once."""
    pod = one(render(), "Deployment")["spec"]["template"]["spec"]
    assert "affinity" not in pod, "one replica has nothing to spread"
    pod = one(render({"replicaCount": 2}), "Deployment")["spec"]["template"]["spec"]
    (preferred,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    term = preferred["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "forgerunner",
        "app.kubernetes.io/instance": "forgerunner",
    }
    pod = one(render({"replicaCount": 2, "podAntiAffinityPreset": "hard"}), "Deployment")["spec"]["template"]["spec"]
    (required,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["topologyKey"] == "kubernetes.io/hostname"
    pod = one(render({"replicaCount": 2, "podAntiAffinityPreset": "none"}), "Deployment")["spec"]["template"]["spec"]
    assert "affinity" not in pod


def test_own_affinity_is_kept_and_wins_over_the_preset(render):
    node = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": []}]}}
    pod = one(render({"replicaCount": 2, "affinity": {"nodeAffinity": node}}), "Deployment")["spec"]["template"]["spec"]
    assert pod["affinity"]["nodeAffinity"] == node
    assert "podAntiAffinity" in pod["affinity"], "the preset is added beside a node affinity"
    own = {"preferredDuringSchedulingIgnoredDuringExecution": []}
    pod = one(render({"replicaCount": 2, "affinity": {"podAntiAffinity": own}}), "Deployment")["spec"]["template"]["spec"]
    assert pod["affinity"] == {"podAntiAffinity": own}


def test_pdb_only_with_more_than_one_replica(render):
    assert find(render(), "PodDisruptionBudget") == []
    assert find(render({"replicaCount": 0}), "PodDisruptionBudget") == []
    pdb = one(render({"replicaCount": 2}), "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert find(render({"replicaCount": 2, "podDisruptionBudget": {"enabled": False}}), "PodDisruptionBudget") == []


def test_replica_count_reaches_the_deployment(render):
    assert one(render({"replicaCount": 3}), "Deployment")["spec"]["replicas"] == 3
    assert one(render({"replicaCount": 0}), "Deployment")["spec"]["replicas"] == 0


def test_network_policy_is_optional_and_allows_dns_and_ports(render):
    assert find(render(), "NetworkPolicy") == []
    policy = one(render({"networkPolicy": {"enabled": True, "egress": {"ports": [443, 3000]}}}), "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    egress_ports = [p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]]
    assert egress_ports == [53, 53, "http", 443, 3000]
    ingress = policy["spec"]["ingress"]
    assert ingress[0] == {"ports": [{"port": "http", "protocol": "TCP"}]}
    assert ingress[1] == {"ports": [{"port": "metrics", "protocol": "TCP"}]}
    assert all("to" not in rule for rule in policy["spec"]["egress"][2:]), "no deniedCidrs: anywhere"


def test_network_policy_lets_operator_pods_reach_each_other(render):
    # Standbys forward webhook deliveries to the leader's HTTP port.
    objects = render({"networkPolicy": {"enabled": True, "ingress": {"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}}})
    policy = one(objects, "NetworkPolicy")
    pod_labels = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    http = [{"port": "http", "protocol": "TCP"}]

    def selects_operator_pods(peers):
        return any(
            all(pod_labels.get(k) == v for k, v in p.get("podSelector", {}).get("matchLabels", {}).items())
            and p.get("podSelector", {}).get("matchLabels")
            for p in peers
        )

    assert any(r["ports"] == http and selects_operator_pods(r.get("from", [])) for r in policy["spec"]["ingress"])
    assert any(r["ports"] == http and selects_operator_pods(r.get("to", [])) for r in policy["spec"]["egress"])


def test_network_policy_ingress_peers(render):
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    policy = one(render({"networkPolicy": {"enabled": True, "ingress": {"from": [peer]}}}), "NetworkPolicy")
    assert policy["spec"]["ingress"][0]["from"] == [peer]
    # metricsFrom unset: the metrics port keeps the peers the one shared port had before.
    assert policy["spec"]["ingress"][1] == {"ports": [{"port": "metrics", "protocol": "TCP"}], "from": [peer]}


def test_network_policy_metrics_peers_apart_from_webhook_peers(render):
    gitea = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gitea"}}}
    prometheus = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    values = {"networkPolicy": {"enabled": True, "ingress": {"from": [gitea], "metricsFrom": [prometheus]}}}
    ingress = one(render(values), "NetworkPolicy")["spec"]["ingress"]
    assert ingress[0] == {"ports": [{"port": "http", "protocol": "TCP"}], "from": [gitea]}
    assert ingress[1] == {"ports": [{"port": "metrics", "protocol": "TCP"}], "from": [prometheus]}
    # An empty list opens the metrics port to all, as `from: []` does the webhook port.
    values["networkPolicy"]["ingress"]["metricsFrom"] = []
    ingress = one(render(values), "NetworkPolicy")["spec"]["ingress"]
    assert ingress[1] == {"ports": [{"port": "metrics", "protocol": "TCP"}]}


def test_network_policy_denied_cidrs_leave_the_port_rule(render):
    values = {"networkPolicy": {"enabled": True, "egress": {"deniedCidrs": ["169.254.169.254/32", "fd00:ec2::254/128"]}}}
    egress = one(render(values), "NetworkPolicy")["spec"]["egress"]
    (port_rule,) = [r for r in egress if {"port": 443, "protocol": "TCP"} in r["ports"]]
    assert port_rule["to"] == [
        {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}},
        {"ipBlock": {"cidr": "::/0", "except": ["fd00:ec2::254/128"]}},
    ]
    # IPv4 only: IPv6 destinations stay allowed as before.
    values["networkPolicy"]["egress"]["deniedCidrs"] = ["169.254.169.254/32"]
    egress = one(render(values), "NetworkPolicy")["spec"]["egress"]
    (port_rule,) = [r for r in egress if {"port": 443, "protocol": "TCP"} in r["ports"]]
    assert port_rule["to"][1] == {"ipBlock": {"cidr": "::/0"}}


def test_release_name_prefixes_objects(render):
    objects = render(release="ci")
    assert one(objects, "Deployment")["metadata"]["name"] == "ci-forgerunner"
    assert config_of_named(objects, "ci-forgerunner")["leaderElection"]["leaseName"] == "ci-forgerunner"


def config_of_named(objects, name):
    return yaml.safe_load(one(objects, "ConfigMap", name)["data"]["config.yaml"])


def notes_of(chart, values):
    files = chartlib.render_files(chart, values)
    return next(v for k, v in files.items() if k.endswith("NOTES.txt"))


def test_notes_warn_when_any_forge_host_is_allowed(chart):
    """Security review M6: an empty allowlist lets a group author aim the operator anywhere."""
    text = notes_of(chart, {})
    assert "WARNING: forgeHosts.allowed is empty" in text
    assert "Forge hosts:    any" in text
    text = notes_of(chart, {"forgeHosts": {"allowed": ["github.com"]}})
    assert "WARNING" not in text
    assert "Forge hosts:    github.com" in text


def test_notes_point_at_the_metrics_service(chart):
    assert "Metrics: http://forgerunner-metrics.forgerunner-system.svc:9090/metrics" in notes_of(chart, {})


def test_notes_name_the_webhook_only_with_gitea(chart):
    notes = chartlib.render_files(chart, {})
    text = next(v for k, v in notes.items() if k.endswith("NOTES.txt"))
    assert "/webhooks/gitea" in text
    notes = chartlib.render_files(chart, {"forges": {"enabled": ["github"]}})
    text = next(v for k, v in notes.items() if k.endswith("NOTES.txt"))
    assert "/webhooks/gitea" not in text
    assert "Forges enabled: github" in text
