"""The image the Dockerfile builds by default serves every forge the chart enables by default.

A binary built without a forge's cargo feature exits with code 2 when its configuration enables
that forge, so an image built with fewer forges than the chart's default `forges.enabled` would
crash-loop on a plain `helm install`. The Dockerfile's default FEATURES must also be exactly the
operator crate's default cargo features, so `cargo build -p forgerunner` and the image agree.
"""

import re
import tomllib

import yaml

import chartlib

ROOT = chartlib.ROOT
DOCKERFILE = ROOT / "Dockerfile"
OPERATOR_CARGO = ROOT / "crates" / "operator" / "Cargo.toml"
FORGES = {"github", "gitea", "forgejo"}


def dockerfile_default_features():
    """The default of `ARG FEATURES=...` in the build stage, as a set of feature names."""
    found = re.findall(r"^ARG FEATURES=(\S*)\s*$", DOCKERFILE.read_text(), re.M)
    assert len(found) == 1, f"want one `ARG FEATURES=<list>` in the Dockerfile, found {found}"
    return {f for f in found[0].strip("\"'").split(",") if f}


def operator_default_features():
    features = tomllib.loads(OPERATOR_CARGO.read_text())["features"]
    return set(features["default"])


def chart_default_forges():
    values = yaml.safe_load((chartlib.CHART_DIR / "values.yaml").read_text())
    return set(values["forges"]["enabled"])


def test_every_default_chart_forge_is_built_into_the_default_image():
    forges = chart_default_forges()
    assert forges and forges <= FORGES, forges
    missing = forges - dockerfile_default_features()
    assert not missing, (
        f"the chart enables {sorted(missing)} by default but the Dockerfile's default FEATURES "
        f"does not build them: the image would exit 2 at start"
    )


def test_dockerfile_default_features_are_the_operator_default_features():
    assert dockerfile_default_features() == operator_default_features()


def test_image_description_names_every_default_forge():
    text = DOCKERFILE.read_text()
    (description,) = re.findall(r'org\.opencontainers\.image\.description="([^"]*)"', text)
    names = {"github": "GitHub", "gitea": "Gitea", "forgejo": "Forgejo"}
    for forge in sorted(dockerfile_default_features() & FORGES):
        assert names[forge] in description, f"image description {description!r} leaves out {forge}"


def test_image_doc_states_the_default_features():
    text = (ROOT / "docs" / "image.md").read_text()
    found = re.findall(r"build arg `FEATURES`, default `([^`]*)`", text)
    assert len(found) == 1, "docs/image.md should state the default FEATURES once"
    assert set(found[0].split(",")) == dockerfile_default_features()
