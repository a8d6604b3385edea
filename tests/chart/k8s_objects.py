"""A small structural check of rendered Kubernetes objects: known kind/apiVersion pairs, valid
names, and the fields each kind needs. Stands in for kubeconform, which cannot be fetched here."""

import re

import k8s_names

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

# kind → (apiVersion, namespaced, required dotted paths)
KINDS = {
    "ConfigMap": ("v1", True, ["data"]),
    "ServiceAccount": ("v1", True, []),
    "Service": ("v1", True, ["spec.selector", "spec.ports"]),
    "Deployment": ("apps/v1", True, ["spec.selector.matchLabels", "spec.template.spec.containers"]),
    "ClusterRole": ("rbac.authorization.k8s.io/v1", False, ["rules"]),
    "ClusterRoleBinding": ("rbac.authorization.k8s.io/v1", False, ["roleRef", "subjects"]),
    "Role": ("rbac.authorization.k8s.io/v1", True, ["rules"]),
    "RoleBinding": ("rbac.authorization.k8s.io/v1", True, ["roleRef", "subjects"]),
    "PodDisruptionBudget": ("policy/v1", True, ["spec.selector"]),
    "NetworkPolicy": ("networking.k8s.io/v1", True, ["spec.podSelector", "spec.policyTypes"]),
    "ServiceMonitor": ("monitoring.coreos.com/v1", True, ["spec.selector", "spec.endpoints"]),
    "PrometheusRule": ("monitoring.coreos.com/v1", True, ["spec.groups"]),
    "CustomResourceDefinition": ("apiextensions.k8s.io/v1", False, ["spec.group", "spec.names", "spec.versions"]),
}


def _get(obj, dotted):
    for part in dotted.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def problems(obj):
    """Human-readable problems with one object; empty when it looks valid."""
    out = []
    kind = obj.get("kind")
    if kind not in KINDS:
        return [f"unexpected kind {kind!r}"]
    api_version, namespaced, required = KINDS[kind]
    if obj.get("apiVersion") != api_version:
        out.append(f"{kind}: apiVersion {obj.get('apiVersion')!r}, want {api_version!r}")
    meta = obj.get("metadata") or {}
    name = meta.get("name", "")
    out.extend(f"{kind}: bad name {name!r}: {p}" for p in k8s_names.name_problems(kind, name))
    if namespaced and not meta.get("namespace"):
        out.append(f"{kind} {name}: no namespace")
    if not namespaced and "namespace" in meta:
        out.append(f"{kind} {name}: cluster-scoped object has a namespace")
    for key, value in (meta.get("labels") or {}).items():
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
            out.append(f"{kind} {name}: bad label value {key}={value!r}")
    for path in required:
        if _get(obj, path) in (None, "", [], {}):
            out.append(f"{kind} {name}: missing {path}")
    if kind == "Deployment":
        out.extend(_deployment_problems(obj))
    return out


def _deployment_problems(obj):
    out = []
    selector = _get(obj, "spec.selector.matchLabels") or {}
    labels = _get(obj, "spec.template.metadata.labels") or {}
    for key, value in selector.items():
        if labels.get(key) != value:
            out.append(f"Deployment: selector {key}={value} does not match the pod labels")
    for container in _get(obj, "spec.template.spec.containers") or []:
        if not container.get("name") or not container.get("image"):
            out.append("Deployment: container without name or image")
        for env in container.get("env") or []:
            if "value" in env and not isinstance(env["value"], str):
                out.append(f"Deployment: env {env.get('name')} value is not a string")
    return out
