"""docs/reference/runnergroup.md is generated from the chart's CRD and must not drift."""

import pytest

import gen_crd_reference as gen

SYNTHETIC = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "spec": {
        "group": "example.dev",
        "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"]},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-validations": [{"rule": "self.a || self.b", "message": "a or b"}],
                        "properties": {
                            "spec": {
                                "type": "object",
                                "description": "What a widget should be.",
                                "required": ["size"],
                                "properties": {
                                    "size": {"type": "integer", "format": "int32", "minimum": 1.0,
                                             "description": "How big."},
                                    "mode": {"type": "string", "enum": ["a", "b"], "description": "A | B."},
                                    "parts": {
                                        "type": "array",
                                        "items": {"type": "object", "required": ["id"],
                                                  "properties": {"id": {"type": "string"}}},
                                    },
                                    "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                    "template": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}


def test_renders_fields_constraints_and_rules():
    text = gen.render(SYNTHETIC)
    assert text.startswith("# Widget reference\n")
    assert "| `spec.size` | integer (int32) | yes | How big. (≥ 1) |" in text
    assert "| `spec.mode` | string |  | A \\| B. (one of `a`, `b`) |" in text, "pipes must be escaped"
    assert "| `spec.parts[].id` | string | yes |  |" in text
    assert "| `spec.extra` | object (free-form) |" in text
    # An embedded Kubernetes type is named, not listed (gen_crd_reference.EMBEDDED).
    assert "| `spec.template` | PodTemplateSpec (core/v1) |" in text
    assert "- `self.a || self.b` — a or b" in text
    assert "| Size | integer | `.spec.size` |" in text
    assert "Served, storage version, status subresource." in text
    assert "### `status`" not in text


def test_rendering_is_deterministic():
    assert gen.render(SYNTHETIC) == gen.render(SYNTHETIC)


def test_checked_in_reference_matches_the_chart_crd():
    if not gen.CRD_PATH.exists():
        pytest.skip(f"{gen.CRD_PATH} not generated yet (forgerunner crd > {gen.CRD_PATH})")
    expected = gen.render(gen.load_crd(gen.CRD_PATH))
    actual = gen.OUT_PATH.read_text(encoding="utf-8") if gen.OUT_PATH.exists() else ""
    assert actual == expected, f"{gen.OUT_PATH} is stale: run {gen.REGENERATE}"


def test_reference_documents_the_runnergroup_spec():
    text = gen.OUT_PATH.read_text(encoding="utf-8")
    for field in ("spec.forge", "spec.maxRunners", "spec.github.configUrl", "spec.gitea.labels", "status.conditions"):
        assert f"`{field}`" in text, field
