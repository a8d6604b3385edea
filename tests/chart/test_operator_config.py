"""The config.yaml the chart renders is accepted by the real operator binary.

Uses the binary the Rust build left behind (`target/debug/forgerunner`, or $FORGERUNNER_BIN);
skipped when there is none. With no reachable cluster, `run` must get past configuration
(exit code other than 2, the config-error code) and stop at the Kubernetes client instead.
"""

import os
import subprocess

import pytest
import yaml

import chartlib

CONFIG_ERROR_EXIT = 2


def operator_binary():
    candidates = [os.environ.get("FORGERUNNER_BIN")]
    target = os.environ.get("CARGO_TARGET_DIR")
    if target:
        candidates.append(os.path.join(target, "debug", "forgerunner"))
    candidates.append(str(chartlib.ROOT / "target" / "debug" / "forgerunner"))
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    pytest.skip("no forgerunner binary built yet (cargo build -p forgerunner)")


def run_with_config(binary, tmp_path, config_text):
    config = tmp_path / "config.yaml"
    config.write_text(config_text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FORGERUNNER_", "KUBERNETES_"))}
    env["KUBECONFIG"] = str(tmp_path / "no-such-kubeconfig")
    env["POD_NAMESPACE"] = chartlib.NAMESPACE
    return subprocess.run(
        [binary, "run", "--config", str(config)], env=env, capture_output=True, text=True, timeout=60
    )


def rendered_config(values):
    objects = chartlib.render_objects(chartlib.load_chart(), values)
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap"]
    return config_map["data"]["config.yaml"]


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"forges": {"enabled": ["github"]}},
        {"forges": {"enabled": ["gitea"]}},
        {"watchNamespaces": ["a", "b"], "logFormat": "text", "logLevel": "info,forgerunner=debug"},
        {"leaderElection": {"enabled": False, "leaseDurationSeconds": 30}},
        {"forgeHosts": {"allowed": ["github.com", "*.example.com"]}},
        {"forgeHosts": {"allowed": ["github.com"], "refusePrivateAddresses": True}},
        {"leaderElection": {"leaseDurationSeconds": 20, "renewDeadlineSeconds": 12, "retryPeriodSeconds": 3}},
        {"rbac": {"runnerContainerHooks": True}, "watchNamespaces": ["a"]},
        {"metrics": {"port": 9464}},
        yaml.safe_load((chartlib.CHART_DIR / "values-multi-tenant.yaml").read_text()),
    ],
    ids=[
        "defaults",
        "github",
        "gitea",
        "namespaced",
        "no-leader-election",
        "forge-hosts",
        "refuse-private-addresses",
        "lease-timing",
        "runner-hooks",
        "metrics-port",
        "multi-tenant-preset",
    ],
)
def test_operator_accepts_rendered_config(tmp_path, values):
    binary = operator_binary()
    text = rendered_config(values)
    assert yaml.safe_load(text)["forges"]
    result = run_with_config(binary, tmp_path, text)
    assert result.returncode != CONFIG_ERROR_EXIT, result.stderr
    assert "config key" not in result.stderr, result.stderr


def test_operator_rejects_a_bad_config(tmp_path):
    """Control: the same harness does see a config error, so the test above can fail."""
    binary = operator_binary()
    result = run_with_config(binary, tmp_path, rendered_config({}) + "bogus: 1\n")
    assert result.returncode == CONFIG_ERROR_EXIT
    assert "bogus" in result.stderr


def test_forge_hosts_reach_the_config():
    assert yaml.safe_load(rendered_config({}))["forgeHosts"] == {"allowed": [], "refusePrivateAddresses": False}
    text = rendered_config({"forgeHosts": {"allowed": ["github.com", "*.example.com"]}})
    assert yaml.safe_load(text)["forgeHosts"]["allowed"] == ["github.com", "*.example.com"]
    text = rendered_config({"forgeHosts": {"refusePrivateAddresses": True}})
    assert yaml.safe_load(text)["forgeHosts"]["refusePrivateAddresses"] is True
