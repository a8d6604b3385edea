#!/usr/bin/env python3
"""Prints the chart rendered with its default values (CRDs first) as one YAML stream.

For a Rust-side test that parses every object as its k8s-openapi type:
    python3 tests/chart/render_defaults.py > /tmp/forgerunner.yaml
Extra `--set key=value` arguments are applied like `helm template --set`.
"""

import sys

import helm_python as helm

import chartlib


def main(argv):
    values = {}
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--set" and args:
            values = _merge(values, helm.parse_set_string(args.pop(0)))
        else:
            print(f"usage: {sys.argv[0]} [--set key=value]...", file=sys.stderr)
            return 2
    sys.stdout.write(chartlib.manifest_text(chartlib.load_chart(), values))
    return 0


def _merge(base, extra):
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
