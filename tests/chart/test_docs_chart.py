"""What the docs say about the chart is what the chart does.

- Every table of chart defaults (a table whose second column is "Default") in docs/*.md, README.md
  and the chart's README agrees with values.yaml, row by row; so do the chart defaults stated in
  prose, listed in PROSE_DEFAULTS.
- Every instruction that applies the CRD uses server-side apply (see test_crd_is_applied_server_side).
"""

import re

import pytest
import yaml

import chartlib

ROOT = chartlib.ROOT
VALUES = yaml.safe_load((chartlib.CHART_DIR / "values.yaml").read_text())
# docs/architecture.md and docs/reference/ are generated; the rest is written by hand.
DOC_FILES = sorted(
    [p for p in (ROOT / "docs").glob("*.md") if p.name != "architecture.md"]
    + [ROOT / "README.md", chartlib.CHART_DIR / "README.md"]
)
# Words a table may give instead of a literal for a value that is empty in values.yaml because the
# chart derives it (the image tag from appVersion, the lease name from the full name, ...).
DERIVED = {"appVersion", "–", "—", "-"}
_MISSING = object()

# Chart defaults stated in running text: (doc, pattern, chart value). The pattern's one group is
# the stated default, read as YAML (a backticked literal, a bare scalar) or, for a value the chart
# derives, prose. Each pattern must match once: rewording the sentence means updating it here.
PROSE_DEFAULTS = [
    ("docs/operations.md", r"\(`leaderElection\.leaseName`, default (the release's full name),", "leaderElection.leaseName"),
    ("docs/operations.md", r"\(`leaseDurationSeconds`, default (\d+) s\)", "leaderElection.leaseDurationSeconds"),
    ("docs/operations.md", r"is `(\w+)` \(the chart's default\) or `text`", "logFormat"),
    ("docs/operations.md", r"`rbac\.runnerContainerHooks: (\w+)` \(the default\)", "rbac.runnerContainerHooks"),
    ("docs/operations.md", r"`networkPolicy\.egress\.ports` \(default (\d+ and \d+):", "networkPolicy.egress.ports"),
    ("docs/reliability.md", r"with `watchNamespaces` (empty) \(the default\)", "watchNamespaces"),
    ("docs/reliability.md", r"An (empty list) \(the default\) allows every host", "forgeHosts.allowed"),
    ("docs/migration.md", r"`leaderElection\.\*` \((on) by default\)", "leaderElection.enabled"),
    ("docs/quick-start.md", r"--set 'forges\.enabled=\{([a-z,]+)\}' +# the default", "forges.enabled"),
    ("docs/operations.md", r"the chart then adds a PodDisruptionBudget \((`minAvailable: \d+`)\)", "podDisruptionBudget.minAvailable"),
    ("docs/operations.md", r"The chart (requests \S+ CPU / \S+ memory and limits \S+ / \S+)\.", "resources"),
]


def flat_values(tree=VALUES, prefix=""):
    """Dotted key → value for every key of values.yaml, maps included."""
    out = {}
    for key, value in tree.items():
        out[prefix + key] = value
        if isinstance(value, dict):
            out.update(flat_values(value, prefix + key + "."))
    return out


FLAT = flat_values()


def resolve_key(key):
    """A dotted chart value, or a leaf name that only one chart value has (the leader election
    timings table names them without their `leaderElection.` prefix)."""
    if key in FLAT:
        return key
    matches = [k for k in FLAT if k.endswith("." + key)]
    assert len(matches) == 1, f"`{key}` is not a chart value (values.yaml)"
    return matches[0]


def split_outside_backticks(text, separators=(",", " / ")):
    """Splits a cell on separators that are not inside `code`."""
    parts, current, in_code, i = [], "", False, 0
    while i < len(text):
        if text[i] == "`":
            in_code = not in_code
        if not in_code:
            sep = next((s for s in separators if text.startswith(s, i)), None)
            if sep:
                parts.append(current.strip())
                current, i = "", i + len(sep)
                continue
        current += text[i]
        i += 1
    parts.append(current.strip())
    return parts


def scalars(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from scalars(v)
    elif isinstance(value, list):
        for v in value:
            yield from scalars(v)
    else:
        yield value


def problem(stated, key):
    """Why the documented default `stated` of chart value `key` is wrong, or None."""
    actual = FLAT[key]
    code = re.findall(r"`([^`]*)`", stated)
    if code:
        documented = yaml.safe_load(code[0])
        if isinstance(documented, dict) and len(documented) == 1:
            # `minAvailable: 1` names the key's leaf and its value.
            (leaf, documented), = documented.items()
            if not key.endswith(leaf):
                return f"{key}: docs name `{leaf}`"
        if documented == actual:
            return None
        return f"{key}: docs say {code[0]!r}, values.yaml has {actual!r}"
    if isinstance(actual, dict):
        # A summary such as "50m/64Mi requests, 500m/128Mi limits": every scalar, in order.
        pattern = ".*".join(re.escape(str(s)) for s in scalars(actual)) + r"(?![\w.])"
        ok = re.search(r"(?<![\w.])" + pattern, stated)
        return None if ok else f"{key}: docs say {stated!r}, values.yaml has {actual!r}"
    text = stated.strip()
    if text in DERIVED or " " in text:
        # Prose stands for a value the chart derives: values.yaml must leave it empty.
        if actual in (None, ""):
            return None
        return f"{key}: docs describe {stated!r}, but values.yaml sets {actual!r}"
    documented = yaml.safe_load(text)
    return None if documented == actual else f"{key}: docs say {text!r}, values.yaml has {actual!r}"


def defaults_tables():
    """(doc, line number, key cell, default cell) of every row of every chart defaults table."""
    rows = []
    for doc in DOC_FILES:
        lines = doc.read_text().splitlines()
        for i, line in enumerate(lines):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not (line.startswith("|") and len(cells) >= 2 and cells[1].lower() == "default"):
                continue
            for j in range(i + 2, len(lines)):
                if not lines[j].startswith("|"):
                    break
                row = [c.strip() for c in lines[j].strip().strip("|").split("|")]
                rows.append((doc.relative_to(ROOT), j + 1, row[0], row[1]))
    return rows


def test_defaults_tables_exist():
    docs = {str(doc) for doc, *_ in defaults_tables()}
    assert {"docs/quick-start.md", "charts/forgerunner/README.md", "docs/reliability.md"} <= docs, docs


@pytest.mark.parametrize(
    "doc,line,keys_cell,default_cell", defaults_tables(), ids=[f"{r[0]}:{r[1]}" for r in defaults_tables()]
)
def test_defaults_table_row_matches_values_yaml(doc, line, keys_cell, default_cell):
    keys = [resolve_key(k) for k in re.findall(r"`([^`]+)`", keys_cell)]
    assert keys, f"{doc}:{line}: no chart value named in {keys_cell!r}"
    parts = split_outside_backticks(default_cell) if len(keys) > 1 else [default_cell]
    if len(parts) == 1:
        parts = parts * len(keys)
    assert len(parts) == len(keys), f"{doc}:{line}: {len(keys)} values but {len(parts)} defaults"
    problems = [p for p in (problem(stated, key) for stated, key in zip(parts, keys)) if p]
    assert not problems, f"{doc}:{line}: " + "; ".join(problems)


def normalized(text):
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize("doc,pattern,key", PROSE_DEFAULTS, ids=[p[2] + "@" + p[0] for p in PROSE_DEFAULTS])
def test_prose_default_matches_values_yaml(doc, pattern, key):
    found = re.findall(pattern, normalized((ROOT / doc).read_text()))
    assert len(found) == 1, f"{doc}: want one match of {pattern!r}, found {len(found)}"
    stated = found[0]
    actual = FLAT[key]
    if isinstance(actual, list) and not stated.startswith("`"):
        # "443 and 6443", "github,gitea,forgejo", "empty list", "empty"
        words = re.split(r",\s*|\s+and\s+", stated)
        documented = [] if stated.startswith("empty") else [yaml.safe_load(w) for w in words]
        assert documented == actual, f"{doc}: {key} stated as {stated!r}, values.yaml has {actual!r}"
    elif isinstance(actual, bool) and stated in ("on", "off"):
        assert actual == (stated == "on"), f"{doc}: {key} stated as {stated!r}, values.yaml has {actual!r}"
    else:
        assert problem(stated, key) is None, f"{doc}: " + problem(stated, key)


# ---------------------------------------------------------------------------------------------
# The CRD is applied server-side. Client-side `kubectl apply` stores the whole object in the
# kubectl.kubernetes.io/last-applied-configuration annotation, and a real API server refuses an
# object whose annotations total over 256 KiB (apimachinery pkg/api/validation/objectmeta.go,
# ValidateAnnotations with TotalAnnotationSizeLimitB); a CRD with a full pod template schema is
# past that. Server-side apply keeps no such annotation.

NOTES = chartlib.CHART_DIR / "templates" / "NOTES.txt"
# `kubectl apply` of the chart's crds/ folder or of `forgerunner crd` / `cargo run ... -- crd` output.
CRD_APPLY = re.compile(r"(?:\bcrd\s*\|\s*)?kubectl\s+apply\b[^\n`]*")


def crd_applies(text, markdown=True):
    """Every `kubectl apply` command that applies the CRD: one per line of a code block (shell
    line continuations joined) or of a plain text file, or a span of a prose paragraph (whose
    lines are joined first, as a command in prose may wrap)."""
    chunks = []
    if markdown:
        parts = re.split(r"^```.*$", text, flags=re.M)
        for i, part in enumerate(parts):
            if i % 2:  # inside a fence
                chunks.extend(re.sub(r"\\\n\s*", " ", part).splitlines())
            else:
                chunks.extend(re.sub(r"\s*\n\s*", " ", para) for para in re.split(r"\n\s*\n", part))
    else:
        chunks = re.sub(r"\\\n\s*", " ", text).splitlines()
    out = []
    for chunk in chunks:
        for match in CRD_APPLY.finditer(chunk):
            command = re.sub(r"\s+", " ", match.group(0)).strip()
            if re.search(r"\bcrd \|", command) or re.search(r"-f \S*crds\b", command):
                out.append(command)
    return out


def test_crd_apply_detection():
    assert crd_applies("kubectl apply -f charts/forgerunner/crds/") == ["kubectl apply -f charts/forgerunner/crds/"]
    assert crd_applies("`forgerunner crd | kubectl\napply -f -` is") == ["crd | kubectl apply -f -"]
    assert crd_applies("```sh\nkubectl apply \\\n  -f crds/\n```\n") == ["kubectl apply -f crds/"]
    assert crd_applies("```sh\nkubectl apply -f crds/\nkubectl apply --server-side -f x\n```") == [
        "kubectl apply -f crds/"
    ]
    assert crd_applies("kubectl apply -f docs/examples/github-pat.yaml") == []


@pytest.mark.parametrize("path", DOC_FILES + [NOTES], ids=lambda p: str(p.relative_to(ROOT)))
def test_crd_is_applied_server_side(path):
    commands = crd_applies(path.read_text(), markdown=path.suffix == ".md")
    client_side = [c for c in commands if "--server-side" not in c]
    assert not client_side, f"{path.name} applies the CRD client-side: {client_side}"


def test_the_supported_kubernetes_floor_is_the_charts_kube_version():
    """The minimum Kubernetes version the docs state is the one the chart's kubeVersion enforces."""
    chart = yaml.safe_load((ROOT / "charts" / "forgerunner" / "Chart.yaml").read_text(encoding="utf-8"))
    floor = re.fullmatch(r">=(\d+\.\d+)\.0-0", chart["kubeVersion"])
    assert floor, chart["kubeVersion"]
    stated = {
        "docs/operations.md": r"\*\*Kubernetes (\d+\.\d+) or newer\.\*\*",
        "docs/quick-start.md": r"Needs Kubernetes \*\*(\d+\.\d+) or newer\*\*",
        "README.md": r"Kubernetes (\d+\.\d+) or newer",
    }
    for path, pattern in stated.items():
        found = re.search(pattern, (ROOT / path).read_text(encoding="utf-8"))
        assert found, f"{path} does not state the minimum Kubernetes version"
        assert found.group(1) == floor.group(1), f"{path} says {found.group(1)}, Chart.yaml {floor.group(1)}"
