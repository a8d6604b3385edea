"""Object names as a real API server judges them, per kind.

The rules, written from their upstream definitions:
- kubernetes/apimachinery pkg/util/validation/validation.go: IsDNS1123Label (at most 63
  characters of [a-z0-9-], starting and ending alphanumeric), IsDNS1123Subdomain (at most 253
  characters; dot-separated parts, each as a DNS-1123 label) and IsDNS1035Label (as a DNS-1123
  label, but starting with a letter).
- kubernetes/apimachinery pkg/api/validation/path/name.go (content.IsPathSegmentName): not "."
  or "..", and no "/" or "%"; no length limit.
- Which rule each kind uses (kubernetes/kubernetes pkg/apis/*/validation): Service names are
  DNS-1035 labels (core ValidateServiceName = NameIsDNS1035Label); Role, ClusterRole and their
  bindings are path segment names (rbac ValidateRBACName); ConfigMap, ServiceAccount, Deployment,
  PodDisruptionBudget, NetworkPolicy, Lease and custom resources (ServiceMonitor, PrometheusRule)
  are DNS-1123 subdomains.
- Helm's release names (helm pkg/chart/v2/util/validate_name.go ValidateReleaseName): a DNS-1123
  subdomain of at most 53 characters, so dots and a leading digit are allowed.
"""

import re

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL = re.compile(rf"^{_LABEL}$")
_DNS1123_SUBDOMAIN = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def dns1123_label(name):
    errors = []
    if len(name) > 63:
        errors.append("must be no more than 63 characters")
    if not _DNS1123_LABEL.match(name):
        errors.append("a DNS-1123 label: lower case alphanumerics or '-', alphanumeric at both ends")
    return errors


def dns1123_subdomain(name):
    errors = []
    if len(name) > 253:
        errors.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN.match(name):
        errors.append("a DNS-1123 subdomain: dot-separated parts, each alphanumeric at both ends")
    return errors


def dns1035_label(name):
    errors = []
    if len(name) > 63:
        errors.append("must be no more than 63 characters")
    if not _DNS1035_LABEL.match(name):
        errors.append("a DNS-1035 label: lower case alphanumerics or '-', a letter first, alphanumeric last")
    return errors


def path_segment_name(name):
    if name in (".", ".."):
        return [f"may not be {name!r}"]
    return [f"may not contain {c!r}" for c in ("/", "%") if c in name]


def helm_release_name(name):
    errors = dns1123_subdomain(name)
    if len(name) > 53:
        errors.append("a release name must be no more than 53 characters")
    return errors


# kind → the rule the real API server applies to metadata.name.
NAME_RULES = {
    "Service": dns1035_label,
    "ConfigMap": dns1123_subdomain,
    "ServiceAccount": dns1123_subdomain,
    "Deployment": dns1123_subdomain,
    "PodDisruptionBudget": dns1123_subdomain,
    "NetworkPolicy": dns1123_subdomain,
    "Lease": dns1123_subdomain,
    "ServiceMonitor": dns1123_subdomain,
    "PrometheusRule": dns1123_subdomain,
    "CustomResourceDefinition": dns1123_subdomain,
    "Role": path_segment_name,
    "ClusterRole": path_segment_name,
    "RoleBinding": path_segment_name,
    "ClusterRoleBinding": path_segment_name,
}


def name_problems(kind, name):
    """Why a real API server would refuse `name` for an object of `kind` (empty when it accepts it)."""
    if not name:
        return ["name is required"]
    return NAME_RULES[kind](name)
