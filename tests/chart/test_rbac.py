"""RBAC: exactly the rules of the team contract, cluster-wide or per watched namespace."""

import chartlib
from conftest import find, one

NS = chartlib.NAMESPACE

# (apiGroup, resource) → verbs the operator uses with default values
# (crates/operator/tests/rbac_coverage.rs checks the same rules against what the operator really
# sends); nothing more may be granted. No runnergroups/finalizers: the operator's owner references
# never set blockOwnerDeletion, the only case in which OwnerReferencesPermissionEnforcement asks
# for `update` on the owner's finalizers.
NAMESPACED_RULES = {
    ("forgerunner.dev", "runnergroups"): {"list", "watch", "patch"},
    ("forgerunner.dev", "runnergroups/status"): {"patch"},
    ("batch", "jobs"): {"get", "list", "watch", "create", "delete", "patch"},
    ("", "pods"): {"list", "patch"},
    ("", "secrets"): {"get", "create", "update"},
    ("apps", "deployments"): {"get", "create", "update", "delete"},
    ("", "persistentvolumeclaims"): {"get", "list", "create", "update", "delete"},
    ("", "services"): {"get", "create", "delete"},
    ("networking.k8s.io", "networkpolicies"): {"get", "create", "delete"},
    ("", "configmaps"): {"get"},
    ("", "events"): {"list"},
    ("events.k8s.io", "events"): {"create", "patch"},
}
# With rbac.runnerContainerHooks: the runner ServiceAccount and RoleBindings of each
# kubernetes-mode group, and `bind` on the two hooks ClusterRoles by name; none of the hooks' own
# rights (pods create/delete, pods/exec, pods/log, secrets list/delete).
WITH_HOOKS = {
    **NAMESPACED_RULES,
    ("", "serviceaccounts"): {"get", "create", "delete"},
    ("rbac.authorization.k8s.io", "rolebindings"): {"get", "create", "delete"},
    ("rbac.authorization.k8s.io", "clusterroles"): {"bind"},
}
HOOKS_ROLE = "forgerunner-runner-hooks"
CLEANUP_ROLE = "forgerunner-runner-hooks-cleanup"
# The hooks' rules (ARC's runner Role), granted only through the operator's per-group bindings.
HOOKS_RULES = {
    ("", "pods"): {"get", "list", "create", "delete"},
    ("", "pods/exec"): {"get", "create"},
    ("", "pods/log"): {"get", "list", "watch"},
    ("batch", "jobs"): {"get", "list", "create", "delete"},
    ("", "secrets"): {"get", "list", "create", "delete"},
}
CLEANUP_RULES = {("", "pods"): {"delete"}, ("", "secrets"): {"list", "delete"}}
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
    # By default nothing of the hooks: no RBAC rights at all, and no hooks ClusterRoles.
    assert [r["metadata"]["name"] for r in find(objects, "ClusterRole")] == ["forgerunner"]
    binding = one(objects, "ClusterRoleBinding", "forgerunner")
    assert binding["roleRef"]["name"] == "forgerunner"
    assert bound_subject(binding) == ("ServiceAccount", "forgerunner", NS)
    namespaced_roles = [r for r in find(objects, "Role") if not r["metadata"]["name"].endswith("leader-election")]
    assert namespaced_roles == []


def bind_names(role):
    """The resourceNames of the role's `bind` rule on ClusterRoles."""
    (rule,) = [r for r in role["rules"] if "bind" in r["verbs"]]
    assert rule["resources"] == ["clusterroles"] and rule["verbs"] == ["bind"]
    return rule["resourceNames"]


def test_runner_container_hooks_are_bound_never_held(render):
    objects = render({"rbac": {"runnerContainerHooks": True}})
    role = one(objects, "ClusterRole", "forgerunner")
    assert grants(role) == WITH_HOOKS
    assert bind_names(role) == [HOOKS_ROLE, CLEANUP_ROLE], "bind only on the chart's two roles"
    assert grants(one(objects, "ClusterRole", HOOKS_ROLE)) == HOOKS_RULES
    assert grants(one(objects, "ClusterRole", CLEANUP_ROLE)) == CLEANUP_RULES
    # The chart binds neither: the operator does, per group and namespace.
    for binding in find(objects, "ClusterRoleBinding") + find(objects, "RoleBinding"):
        assert binding["roleRef"]["name"] not in (HOOKS_ROLE, CLEANUP_ROLE), binding["metadata"]["name"]


def test_namespaced_mode_with_hooks_binds_in_watched_namespaces_only(render):
    objects = render({"watchNamespaces": ["team-a"], "rbac": {"runnerContainerHooks": True}})
    role = one(objects, "Role", "forgerunner", "team-a")
    assert grants(role) == WITH_HOOKS
    assert bind_names(role) == [HOOKS_ROLE, CLEANUP_ROLE]
    assert sorted(r["metadata"]["name"] for r in find(objects, "ClusterRole")) == [HOOKS_ROLE, CLEANUP_ROLE]
    assert find(objects, "ClusterRoleBinding") == []


def test_no_wildcards_anywhere(render):
    hooks = {"rbac": {"runnerContainerHooks": True}}
    for values in ({}, {"watchNamespaces": ["a", "b"]}, hooks, {**hooks, "watchNamespaces": ["a"]}):
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
