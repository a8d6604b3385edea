"""Every object name the chart derives from the release name (or from nameOverride,
fullnameOverride) is one a real API server accepts for its kind, for any release name Helm
accepts: up to 53 characters, dots and a leading digit allowed (k8s_names.py has the rules and
where they come from)."""

import pytest
import yaml

import k8s_names
import k8s_objects
from conftest import find, one

# Release names of Helm's maximum length (53), in the shapes Helm allows.
RELEASES = {
    "long": "platform-team-eu-west-1-production-ci-runner-operator",
    "dotted": "ci.platform-team.eu-west-1.production.runner-operator",
    "leading-digit": "2025-platform-team-eu-west-1-production-ci-operatorss",
    "contains-chart-name": "forgerunner-platform-team-eu-west-1-production-ci-ops",
}
# Every optional object on, so each kind is rendered.
EVERYTHING = {
    "replicaCount": 2,
    "serviceMonitor": {"enabled": True},
    "prometheusRule": {"enabled": True},
    "networkPolicy": {"enabled": True},
    "rbac": {"runnerContainerHooks": True},
}
OVERRIDES = {
    "none": {},
    # Truncating "<release>-<name>" at 63 characters leaves "...-runners--": a trailing "-" after
    # one trimSuffix.
    "name-override-cut-at-dashes": {"nameOverride": "runners--operator"},
    # Longer than 63, cut at 63 right after "--".
    "long-fullname-override": {"fullnameOverride": "forgerunner-" + "a" * 49 + "--runners-pool"},
    "fullname-override-63": {"fullnameOverride": "f" * 63},
    "name-override-63": {"nameOverride": "n" * 63},
}


def test_release_names_are_ones_helm_accepts():
    for release in RELEASES.values():
        assert len(release) == 53, release
        assert k8s_names.helm_release_name(release) == [], release


def test_validator_matches_upstream_examples():
    # The examples the upstream error messages give, and the edges they rule out.
    assert k8s_names.dns1123_label("my-name") == [] and k8s_names.dns1123_label("123-abc") == []
    assert k8s_names.dns1035_label("abc-123") == [] and k8s_names.dns1035_label("123-abc") != []
    assert k8s_names.dns1123_subdomain("example.com") == []
    for bad in ("a.", "a-", "-a", "a..b", "a.-b", "A", "a_b", "a" * 254):
        assert k8s_names.dns1123_subdomain(bad) != [], bad
    assert k8s_names.dns1123_label("a.b") != [] and k8s_names.dns1123_label("a" * 64) != []
    assert k8s_names.path_segment_name("x" * 300) == [] and k8s_names.path_segment_name("a/b") != []


def rendered_names(objects):
    """(kind, name) of every rendered object, plus the Lease the operator will create."""
    names = [(o["kind"], o["metadata"]["name"]) for o in objects]
    config = yaml.safe_load(one(objects, "ConfigMap")["data"]["config.yaml"])
    names.append(("Lease", config["leaderElection"]["leaseName"]))
    return names


@pytest.mark.parametrize("override", OVERRIDES, ids=list(OVERRIDES))
@pytest.mark.parametrize("release", RELEASES, ids=list(RELEASES))
@pytest.mark.parametrize("namespaced", [False, True], ids=["cluster", "namespaced"])
def test_every_name_is_valid_for_its_kind(render, release, override, namespaced):
    values = {**EVERYTHING, **OVERRIDES[override]}
    if namespaced:
        values["watchNamespaces"] = ["ci", "ci-large"]
    objects = render(values, release=RELEASES[release])
    kinds = {o["kind"] for o in objects}
    assert {"Service", "Deployment", "ConfigMap", "ServiceAccount", "PodDisruptionBudget"} <= kinds
    problems = []
    for kind, name in rendered_names(objects):
        problems += [f"{kind} {name!r}: {p}" for p in k8s_names.name_problems(kind, name)]
    for obj in objects:
        problems += k8s_objects.problems(obj)
    assert not problems, "\n".join(problems)

    # The names other objects refer to are the ones rendered.
    deployment = one(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    one(objects, "ServiceAccount", pod["serviceAccountName"])
    (config_volume,) = [v for v in pod["volumes"] if v["name"] == "config"]
    one(objects, "ConfigMap", config_volume["configMap"]["name"])
    for binding in find(objects, "RoleBinding") + find(objects, "ClusterRoleBinding"):
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
        one(objects, ref["kind"], ref["name"], namespace)
    # The hooks' ClusterRoles the operator is told to bind are the ones rendered.
    hooks = yaml.safe_load(one(objects, "ConfigMap")["data"]["config.yaml"])["runnerHooks"]
    one(objects, "ClusterRole", hooks["clusterRole"])
    one(objects, "ClusterRole", hooks["cleanupClusterRole"])
    assert hooks["operatorServiceAccount"] == pod["serviceAccountName"]
    # No two objects of a kind (in a namespace) share a name.
    keys = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects]
    assert len(keys) == len(set(keys)), keys


def test_names_of_ordinary_releases_do_not_change(render):
    """Upgrades keep their object names: only names a real server would refuse are changed."""
    cases = [
        ("forgerunner", {}, "forgerunner"),
        ("ci", {}, "ci-forgerunner"),
        ("my-forgerunner", {}, "my-forgerunner"),
        (RELEASES["long"], {}, RELEASES["long"] + "-forgerunn"),
        ("ci", {"nameOverride": "runners"}, "ci-runners"),
        ("ci", {"fullnameOverride": "ops-runners"}, "ops-runners"),
    ]
    for release, values, want in cases:
        assert one(render(values, release=release), "Deployment")["metadata"]["name"] == want, (release, values)
