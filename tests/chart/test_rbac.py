"""RBAC: exactly the rules of the team contract, cluster-wide or per watched namespace."""

import chartlib
from conftest import find, one

NS = chartlib.NAMESPACE

# (apiGroup, resource) → verbs the operator uses (crates/operator/tests/rbac_coverage.rs checks
# the same rules against what the operator really sends); nothing more may be granted. No
# runnergroups/finalizers: the operator's owner references never set blockOwnerDeletion, the only
# case in which OwnerReferencesPermissionEnforcement asks for `update` on the owner's finalizers.
NAMESPACED_RULES = {
    ("forgerunner.dev", "runnergroups"): {"list", "watch", "patch"},
    ("forgerunner.dev", "runnergroups/status"): {"patch"},
    ("batch", "jobs"): {"get", "list", "watch", "create", "delete", "patch"},
    ("", "pods"): {"get", "list", "create", "delete", "patch"},
    ("", "pods/exec"): {"get", "create"},
    ("", "pods/log"): {"get", "list", "watch"},
    ("", "secrets"): {"get", "list", "create", "delete"},
    ("", "configmaps"): {"get"},
    ("", "events"): {"list"},
    ("events.k8s.io", "events"): {"create", "patch"},
    ("", "serviceaccounts"): {"create", "patch"},
    ("rbac.authorization.k8s.io", "roles"): {"create", "patch"},
    ("rbac.authorization.k8s.io", "rolebindings"): {"create", "patch"},
}
# Without rbac.runnerContainerHooks: no runner RBAC objects, and none of the hooks' permissions.
WITHOUT_HOOKS = {
    ("forgerunner.dev", "runnergroups"): {"list", "watch", "patch"},
    ("forgerunner.dev", "runnergroups/status"): {"patch"},
    ("batch", "jobs"): {"get", "list", "watch", "create", "delete", "patch"},
    ("", "pods"): {"list", "patch"},
    ("", "secrets"): {"get", "create"},
    ("", "configmaps"): {"get"},
    ("", "events"): {"list"},
    ("events.k8s.io", "events"): {"create", "patch"},
}
LEASE_RULE = {("coordination.k8s.io", "leases"): {"get", "create", "update"}}


def grants(role):
    """(apiGroup, resource) → verbs of a Role or ClusterRole, with rules flattened."""
    out = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def bound_subject(binding):
    (subject,) = binding["subjects"]
    return subject["kind"], subject["name"], subject["namespace"]


def test_cluster_mode_grants_the_contract_rules(render):
    objects = render()
    role = one(objects, "ClusterRole", "forgerunner")
    assert grants(role) == NAMESPACED_RULES
    binding = one(objects, "ClusterRoleBinding", "forgerunner")
    assert binding["roleRef"]["name"] == "forgerunner"
    assert bound_subject(binding) == ("ServiceAccount", "forgerunner", NS)
    namespaced_roles = [r for r in find(objects, "Role") if not r["metadata"]["name"].endswith("leader-election")]
    assert namespaced_roles == []


def test_runner_container_hooks_rules_can_be_turned_off(render):
    objects = render({"rbac": {"runnerContainerHooks": False}})
    assert grants(one(objects, "ClusterRole", "forgerunner")) == WITHOUT_HOOKS


def test_no_wildcards_anywhere(render):
    for values in ({}, {"watchNamespaces": ["a", "b"]}):
        for obj in render(values):
            for rule in obj.get("rules", []) if obj["kind"] in ("Role", "ClusterRole") else []:
                for field in ("apiGroups", "resources", "verbs"):
                    assert "*" not in rule[field], obj["metadata"]["name"]


def test_namespaced_mode_grants_roles_per_namespace(render):
    objects = render({"watchNamespaces": ["team-a", "team-b"]})
    for ns in ("team-a", "team-b"):
        role = one(objects, "Role", "forgerunner", ns)
        assert grants(role) == NAMESPACED_RULES
        binding = one(objects, "RoleBinding", "forgerunner", ns)
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "forgerunner"}
        assert bound_subject(binding) == ("ServiceAccount", "forgerunner", NS)
    # Nothing is granted cluster-wide: the start-up check lists RunnerGroups in a watched namespace.
    assert find(objects, "ClusterRole") == []
    assert find(objects, "ClusterRoleBinding") == []


def test_leader_election_role_lives_in_the_release_namespace(render):
    objects = render()
    role = one(objects, "Role", "forgerunner-leader-election", NS)
    assert grants(role) == LEASE_RULE
    binding = one(objects, "RoleBinding", "forgerunner-leader-election", NS)
    assert bound_subject(binding) == ("ServiceAccount", "forgerunner", NS)


def test_leader_election_off_drops_the_lease_role(render):
    objects = render({"leaderElection": {"enabled": False}})
    assert find(objects, "Role", "forgerunner-leader-election") == []


def test_rbac_and_service_account_can_be_disabled(render):
    objects = render({"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "mine"}})
    for kind in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "ServiceAccount"):
        assert find(objects, kind) == [], kind
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "mine"


def test_every_rule_has_a_reason(chart):
    """Each RBAC rule in the templates is preceded by a comment saying why it is needed."""
    sources = {t["name"]: t["data"] for t in chart.templates}
    for name in ("templates/_helpers.tpl", "templates/rbac.yaml"):
        data = sources[name]
        text = data.decode() if isinstance(data, (bytes, bytearray)) else data
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.strip().startswith("- apiGroups:"):
                assert lines[i - 1].strip().startswith("#"), f"{name}:{i + 1} rule without a reason"
