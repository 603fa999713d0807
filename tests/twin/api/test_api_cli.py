"""The command line: a full (simulated) twin, its files, and a clean stop on SIGINT."""

from __future__ import annotations

import importlib.util
import json
import signal
import stat
import subprocess
import sys

import pytest
import yaml

from gpufleet_twin.cli import companion_path


def test_kubeconfig_and_companion_of_the_session_twin(twin):
    config = yaml.safe_load(twin.kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    assert cluster["server"] == twin.api_url and cluster["server"].startswith("https://127.0.0.1:")
    assert "certificate-authority-data" in cluster and "insecure-skip-tls-verify" not in cluster
    assert config["users"][0]["user"]["token"] == twin.token
    assert stat.S_IMODE(twin.kubeconfig.stat().st_mode) == 0o600
    companion = json.loads(companion_path(twin.kubeconfig).read_text())
    assert companion["pid"] == twin.process.pid
    assert companion["admin"] == f"{twin.api_url}/admin"
    assert isinstance(companion["published"], dict)


def test_the_kubernetes_client_loads_the_kubeconfig_as_is(twin):
    from kubernetes import client, config

    loaded = client.Configuration()
    config.load_kube_config(config_file=str(twin.kubeconfig), client_configuration=loaded)
    with client.ApiClient(loaded) as api_client:
        names = [ns.metadata.name for ns in client.CoreV1Api(api_client).list_namespace().items]
    assert {"default", "kube-system", "gpu-operator", "nvidia-network-operator"} <= set(names)


def test_bad_arguments_exit_2(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpufleet_twin",
            "serve",
            "--kubeconfig",
            str(tmp_path / "kc"),
            "--crds",
            str(tmp_path / "missing"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == ""


@pytest.mark.skipif(importlib.util.find_spec("gpufleet_twin.harness.build") is None, reason="no simulation package yet")
def test_a_simulated_cluster_serves_its_nodes_and_stops_on_sigint(tmp_path, launcher):
    served = launcher.start(
        tmp_path,
        "--nodes",
        "2",
        "--profile",
        "kubernetes",
        "--time-scale",
        "60",
        "--state-dir",
        str(tmp_path / "state"),
    )
    try:
        nodes = served.kubectl("get", "nodes", "-l", "node-role.kubernetes.io/worker", "-o", "name").stdout.split()
        assert len(nodes) == 2
        assert served.companion["published"]
    finally:
        code = launcher.stop(served, signal.SIGINT)
    assert code == 0


def test_sigterm_with_open_watches_stops_cleanly(tmp_path, launcher):
    served = launcher.start(tmp_path, "--bare", "--state-dir", str(tmp_path / "state"))
    watcher = subprocess.Popen(
        ["kubectl", "--kubeconfig", str(served.kubeconfig), "get", "namespaces", "-w"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=served.env,
    )
    try:
        assert watcher.stdout is not None
        assert watcher.stdout.readline().split()[:2] == ["NAME", "STATUS"]
        assert launcher.stop(served) == 0
    finally:
        watcher.kill()
        watcher.wait(timeout=10)
