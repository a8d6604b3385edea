"""Helpers shared by the chart tests and render_defaults.py: load the chart, render it with Helm
(helm-python-sdk, which embeds Helm v4) and parse the manifests."""

import pathlib

import helm_python as helm
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / "charts" / "forgerunner"
RELEASE = "forgerunner"
NAMESPACE = "forgerunner-system"


def load_chart():
    """The chart as Helm loads it (templates, values, schema, CRDs)."""
    return helm.Chart.load(str(CHART_DIR))


def render_files(chart, values=None, namespace=NAMESPACE, release=RELEASE):
    """Template path → rendered text, as `helm template` would produce (schema checked first)."""
    return chart.render(values or {}, name=release, namespace=namespace, is_install=True)


def parse_objects(files):
    """Every Kubernetes object in the rendered files, skipping NOTES.txt and empty documents."""
    objects = []
    for path in sorted(files):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(files[path]):
            if doc is not None:
                doc.setdefault("__source__", path)
                objects.append(doc)
    return objects


def render_objects(chart, values=None, namespace=NAMESPACE, release=RELEASE):
    """Parsed objects of a render."""
    return parse_objects(render_files(chart, values, namespace, release))


def crd_objects(chart):
    """The CRDs shipped under crds/ (Helm installs them before the templates)."""
    objects = []
    for crd in chart.crds:
        data = crd["data"]
        text = data.decode() if isinstance(data, (bytes, bytearray)) else data
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc is not None)
    return objects


class _LiteralDumper(yaml.SafeDumper):
    """Dumps multi-line strings (config.yaml) as literal blocks so the output stays readable."""


def _str_representer(dumper, value):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_LiteralDumper.add_representer(str, _str_representer)


def manifest_text(chart, values=None, namespace=NAMESPACE, release=RELEASE):
    """One multi-document YAML stream: CRDs first, then the templates in file order."""
    docs = [yaml.dump(o, Dumper=_LiteralDumper, sort_keys=False) for o in crd_objects(chart)]
    for obj in render_objects(chart, values, namespace, release):
        obj = {k: v for k, v in obj.items() if k != "__source__"}
        docs.append(yaml.dump(obj, Dumper=_LiteralDumper, sort_keys=False))
    return "".join(f"---\n{d}" for d in docs)
