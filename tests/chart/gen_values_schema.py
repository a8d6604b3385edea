#!/usr/bin/env python3
"""Writes charts/forgerunner/values.schema.json.

The schema is kept as Python data so every object gets `additionalProperties: false` from one
helper and cannot forget it; test_schema.py fails when the checked-in JSON drifts from this.
Run: python3 tests/chart/gen_values_schema.py
"""

import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCHEMA_PATH = ROOT / "charts" / "forgerunner" / "values.schema.json"

FORGES = ["github", "gitea", "forgejo"]
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_LABEL_OR_EMPTY = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$"
# Comma-separated PromQL label matchers (`name="value"`, `=~`, `!=`, `!~`), or empty: what the
# alert rules put inside every selector's braces. A value without `"` or `\` keeps quoting simple.
_MATCHER = r'[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"[^"\\]*"'
PROMQL_MATCHERS_OR_EMPTY = rf"^({_MATCHER}(\s*,\s*{_MATCHER})*)?$"
# A DNS-1123 subdomain (apimachinery IsDNS1123Subdomain: dot-separated DNS-1123 labels), or empty.
DNS_SUBDOMAIN_OR_EMPTY = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$"
# Name overrides become part of every object name, the Service's included (a DNS-1035 label: a
# letter first). No length limit: the chart cuts the full name to 63 characters.
NAME_OVERRIDE = {"type": "string", "pattern": r"^([a-z]([-a-z0-9]*[a-z0-9])?)?$"}
QUANTITY = {"type": ["string", "number"], "pattern": r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|E|Ei)?$"}
# Kubernetes objects handed through to the pod spec unchanged; the API server validates them.
K8S_OBJECT = {"type": "object", "$comment": "a Kubernetes API object, passed through unchanged"}
# The container port of webhooks (and, without a metrics port, of everything); fixed in the chart.
HTTP_PORT = 8080
# An IPv4 or IPv6 CIDR, as a NetworkPolicy ipBlock takes it (the API server parses it exactly).
CIDR = {
    "type": "string",
    "pattern": r"^([0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*/[0-9]{1,3})$",
}


def obj(properties, required=None, description=None):
    """A strict object: only the listed keys are allowed."""
    schema = {"type": "object", "additionalProperties": False, "properties": properties}
    if required:
        schema["required"] = required
    if description:
        schema["description"] = description
    return schema


def string_map(description):
    """A map of strings, such as labels or annotations."""
    return {"type": "object", "additionalProperties": {"type": "string"}, "description": description}


def k8s_list(description):
    return {"type": "array", "items": K8S_OBJECT, "description": description}


def security_context():
    """The fields of a Kubernetes SecurityContext / PodSecurityContext we allow to be set."""
    seccomp = obj(
        {
            "type": {"type": "string", "enum": ["RuntimeDefault", "Localhost", "Unconfined"]},
            "localhostProfile": {"type": "string"},
        },
        required=["type"],
    )
    return obj(
        {
            "runAsNonRoot": {"type": "boolean"},
            "runAsUser": {"type": "integer", "minimum": 0},
            "runAsGroup": {"type": "integer", "minimum": 0},
            "fsGroup": {"type": "integer", "minimum": 0},
            "supplementalGroups": {"type": "array", "items": {"type": "integer", "minimum": 0}},
            "readOnlyRootFilesystem": {"type": "boolean"},
            "allowPrivilegeEscalation": {"type": "boolean"},
            "privileged": {"type": "boolean"},
            "capabilities": obj(
                {
                    "add": {"type": "array", "items": {"type": "string"}},
                    "drop": {"type": "array", "items": {"type": "string"}},
                }
            ),
            "seccompProfile": seccomp,
            "appArmorProfile": K8S_OBJECT,
            "seLinuxOptions": K8S_OBJECT,
        }
    )


def resources():
    amounts = {
        "type": "object",
        "additionalProperties": False,
        "patternProperties": {r"^(cpu|memory|ephemeral-storage|hugepages-.+)$": QUANTITY},
    }
    return obj({"requests": amounts, "limits": amounts}, description="Kubernetes resource requests and limits")


def schema():
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "forgerunner chart values",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            # Helm may inject `global` for umbrella charts; accept it so the chart can be a subchart.
            "global": {"type": "object"},
            "replicaCount": {"type": "integer", "minimum": 0, "description": "operator replicas"},
            "image": obj(
                {
                    "repository": {"type": "string", "minLength": 1},
                    "tag": {"type": "string"},
                    "digest": {"type": "string", "pattern": r"^(sha256:[a-f0-9]{64})?$"},
                    "pullPolicy": {"type": "string", "enum": ["Always", "IfNotPresent", "Never"]},
                },
                required=["repository"],
            ),
            "imagePullSecrets": {
                "type": "array",
                "items": obj({"name": {"type": "string", "minLength": 1}}, required=["name"]),
            },
            "nameOverride": NAME_OVERRIDE,
            "fullnameOverride": NAME_OVERRIDE,
            "forges": obj(
                {
                    "enabled": {
                        "type": "array",
                        "minItems": 1,
                        "uniqueItems": True,
                        "items": {"type": "string", "enum": FORGES},
                        "description": "forges served by this operator",
                    }
                },
                required=["enabled"],
            ),
            "watchNamespaces": {
                "type": "array",
                "uniqueItems": True,
                "items": {"type": "string", "pattern": DNS_LABEL, "maxLength": 63},
                "description": "namespaces to watch; empty means all",
            },
            "metrics": obj(
                {
                    "jobLabels": {
                        "type": "boolean",
                        "description": "label the job counters with repository and workflow (one series per repository and workflow)",
                    },
                    "port": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": 65535,
                        "not": {"const": HTTP_PORT},
                        "description": "port of /metrics and the probes, apart from the webhook port 8080",
                    },
                    "serviceAnnotations": string_map("metrics Service annotations"),
                }
            ),
            "forgeHosts": obj(
                {
                    "allowed": {
                        "type": "array",
                        "uniqueItems": True,
                        "items": {
                            "type": "string",
                            "pattern": r"^(\*\.)?[A-Za-z0-9_]([-A-Za-z0-9_.]*[A-Za-z0-9_])?$",
                            "maxLength": 253,
                        },
                        "description": "hosts (or *.domain) the operator may connect to for forge URLs; empty means any",
                    },
                    "refusePrivateAddresses": {
                        "type": "boolean",
                        "description": "refuse loopback, private, link-local and CGNAT addresses for forge calls, after DNS resolution too",
                    },
                }
            ),
            "logFormat": {"type": "string", "enum": ["text", "json"]},
            "logLevel": {"type": "string", "minLength": 1, "pattern": r"^[A-Za-z0-9_:=,.\-]+$"},
            "listingCacheEntries": {
                "type": "integer",
                "minimum": 20000,
                "description": "entries (items and labels) all cached Gitea and Forgejo listings may hold together",
            },
            "leaderElection": obj(
                {
                    "enabled": {"type": "boolean"},
                    "leaseName": {"type": "string", "pattern": DNS_SUBDOMAIN_OR_EMPTY, "maxLength": 253},
                    "leaseDurationSeconds": {"type": "integer", "minimum": 5, "maximum": 300},
                    "renewDeadlineSeconds": {"type": ["integer", "null"], "minimum": 1, "maximum": 299},
                    "retryPeriodSeconds": {"type": ["integer", "null"], "minimum": 1, "maximum": 298},
                }
            ),
            "serviceAccount": obj(
                {
                    "create": {"type": "boolean"},
                    "name": {"type": "string", "pattern": DNS_SUBDOMAIN_OR_EMPTY, "maxLength": 253},
                    "annotations": string_map("ServiceAccount annotations"),
                }
            ),
            "rbac": obj({"create": {"type": "boolean"}, "runnerContainerHooks": {"type": "boolean"}}),
            "podAnnotations": string_map("operator pod annotations"),
            "podLabels": string_map("operator pod labels"),
            "podSecurityContext": security_context(),
            "securityContext": security_context(),
            "resources": resources(),
            "nodeSelector": string_map("node selector"),
            "tolerations": k8s_list("Kubernetes tolerations"),
            "affinity": K8S_OBJECT,
            "podAntiAffinityPreset": {
                "type": "string",
                "enum": ["soft", "hard", "none"],
                "description": "spread replicas over nodes when replicaCount > 1, unless affinity sets podAntiAffinity",
            },
            "topologySpreadConstraints": k8s_list("Kubernetes topology spread constraints"),
            "priorityClassName": {"type": "string"},
            "terminationGracePeriodSeconds": {"type": "integer", "minimum": 0},
            "extraEnv": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": {"type": "string", "minLength": 1}},
                    "$comment": "a Kubernetes EnvVar",
                },
            },
            "service": obj(
                {
                    "type": {"type": "string", "enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
                    "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                    "annotations": string_map("Service annotations"),
                }
            ),
            "serviceMonitor": obj(
                {
                    "enabled": {"type": "boolean"},
                    "interval": {"type": "string", "pattern": r"^([0-9]+(ms|s|m|h))+$"},
                    "scrapeTimeout": {"type": "string", "pattern": r"^(([0-9]+(ms|s|m|h))+)?$"},
                    "labels": string_map("ServiceMonitor labels"),
                }
            ),
            "prometheusRule": obj(
                {
                    "enabled": {"type": "boolean"},
                    "namespace": {"type": "string", "pattern": DNS_LABEL_OR_EMPTY, "maxLength": 63},
                    "labels": string_map("PrometheusRule labels"),
                    "selector": {
                        "type": "string",
                        "pattern": PROMQL_MATCHERS_OR_EMPTY,
                        "description": "PromQL label matchers of this operator's series; empty: the ServiceMonitor's job",
                    },
                    "runbookUrl": {
                        "type": "string",
                        "pattern": r"^https?://[^\s#]+$",
                        "description": "address of docs/operations.md the alerts' runbook_url anchors point into",
                    },
                }
            ),
            "podDisruptionBudget": obj(
                {
                    "enabled": {"type": "boolean"},
                    "minAvailable": {"type": ["integer", "string"], "minimum": 0},
                }
            ),
            "networkPolicy": obj(
                {
                    "enabled": {"type": "boolean"},
                    "ingress": obj(
                        {
                            "from": k8s_list("NetworkPolicy peers allowed to reach the webhook port 8080"),
                            "metricsFrom": {
                                "type": ["array", "null"],
                                "items": K8S_OBJECT,
                                "description": "NetworkPolicy peers allowed to reach the metrics port; null: as `from`",
                            },
                        }
                    ),
                    "egress": obj(
                        {
                            "ports": {
                                "type": "array",
                                "uniqueItems": True,
                                "items": {"type": "integer", "minimum": 1, "maximum": 65535},
                            },
                            "deniedCidrs": {
                                "type": "array",
                                "uniqueItems": True,
                                "items": CIDR,
                                "description": "CIDRs the egress port rule excepts, e.g. 169.254.169.254/32",
                            },
                            "extraRules": k8s_list("raw NetworkPolicy egress rules"),
                        }
                    ),
                }
            ),
        },
        # Standby replicas are safe only with a lease: two active operators would double-create runners.
        "if": {"properties": {"replicaCount": {"type": "integer", "minimum": 2}}, "required": ["replicaCount"]},
        "then": {
            "properties": {"leaderElection": {"properties": {"enabled": {"const": True}}}},
        },
    }


def render():
    return json.dumps(schema(), indent=2, sort_keys=False) + "\n"


def main(argv):
    text = render()
    if "--check" in argv:
        if SCHEMA_PATH.read_text() != text:
            print(f"{SCHEMA_PATH} is stale: run python3 tests/chart/gen_values_schema.py", file=sys.stderr)
            return 1
        return 0
    SCHEMA_PATH.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
