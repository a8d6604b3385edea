#!/usr/bin/env sh
# The project's test command (the README's second command): every Rust test in the workspace,
# then the Helm chart tests. Installs the Python packages the chart tests need if missing.
set -eu
cd "$(dirname "$0")/.."

if ! python3 -c "import helm_python, pytest, yaml" >/dev/null 2>&1; then
  python3 -m pip install --quiet --disable-pip-version-check -r tests/chart/requirements.txt
fi

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --all-targets --no-fail-fast
else
  cargo test --workspace --all-targets --no-fail-fast
fi
python3 -m pytest -q tests/chart
