"""Fixtures for the Helm chart tests: one loaded chart per session, and a render helper."""

import pytest

import chartlib


@pytest.fixture(scope="session")
def chart():
    with chartlib.load_chart() as loaded:
        yield loaded


@pytest.fixture
def render(chart):
    """render(values) → list of parsed objects; render(values, namespace=...) for another namespace."""

    def _render(values=None, **kwargs):
        return chartlib.render_objects(chart, values, **kwargs)

    return _render


def find(objects, kind, name=None, namespace=None):
    """Objects of one kind, optionally filtered by name and namespace."""
    return [
        o
        for o in objects
        if o["kind"] == kind
        and (name is None or o["metadata"]["name"] == name)
        and (namespace is None or o["metadata"].get("namespace") == namespace)
    ]


def one(objects, kind, name=None, namespace=None):
    """The single object of a kind; fails the test when there is not exactly one."""
    found = find(objects, kind, name, namespace)
    assert len(found) == 1, f"want one {kind} {name or ''}, got {len(found)}"
    return found[0]
