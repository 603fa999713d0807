"""The sriov_operator role without OLM: the SR-IOV Network Operator as the Network Operator's Helm sub-chart deploys
it on Kubernetes (the twin's kubernetes profile, namespace nvidia-network-operator), real ansible-playbook runs.

The OLM path (OpenShift) is tested at the end of test_openshift.py's full sequence.
"""

from __future__ import annotations

import json

import pytest

from gpufleet_twin.process import start_twin
from tests.integration.conftest import kubectl, run_playbook

PLAYBOOK = "tests/integration/playbooks/sriov_operator_role.yml"
NAMESPACE = "nvidia-network-operator"
BASE = "nvcr.io/nvidia/mellanox/sriov-network-operator"
OPERATOR_IMAGE = f"{BASE}:network-operator-24.10.0"
DAEMON_IMAGE = f"{BASE}-config-daemon:network-operator-24.10.0"
NODES = 3


@pytest.fixture
def twin(tmp_path):
    process = start_twin(nodes=NODES, profile="kubernetes", time_scale=600, workdir=tmp_path / "twin")
    yield process
    assert process.stop() == 0, process.log_path.read_text()[-2000:]


def get_json(twin, *args: str) -> dict:
    return json.loads(kubectl(twin, "get", *args, "-o", "json"))


def role(twin, result_file, **extra):
    variables = {
        "sriov_operator_action": "canary",
        "sriov_operator_namespace": NAMESPACE,
        "sriov_operator_image": OPERATOR_IMAGE,
        "sriov_operator_wait_sleep": 1,
        "sriov_operator_wait_timeout": 120,
        "result_file": str(result_file),
        **extra,
    }
    return run_playbook(PLAYBOOK, twin=twin, extra_vars=variables)


def test_operator_and_config_daemon_roll_together_without_olm(twin, tmp_path):
    result_file = tmp_path / "result.json"
    before = get_json(twin, "deployment", "-n", NAMESPACE, "sriov-network-operator")

    # A new operator with the old daemon image is refused before any write.
    refused = role(twin, result_file)
    assert refused.returncode != 0
    assert "sriov_operator_config_daemon_image is not" in refused.output
    # The Deployment controller keeps writing status, so compare what a write by the role would change.
    after = get_json(twin, "deployment", "-n", NAMESPACE, "sriov-network-operator")
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert after["spec"] == before["spec"]

    done = role(twin, result_file, sriov_operator_config_daemon_image=DAEMON_IMAGE)
    assert done.returncode == 0, done.output[-4000:]
    result = json.loads(result_file.read_text())
    assert result["changed"] is True and result["installed"] == OPERATOR_IMAGE
    assert result["node_states"] and set(result["node_states"].values()) == {"Succeeded"}
    operator = get_json(twin, "deployment", "-n", NAMESPACE, "sriov-network-operator")["spec"]["template"]["spec"]
    assert operator["containers"][0]["image"] == OPERATOR_IMAGE
    assert {"name": "SRIOV_NETWORK_CONFIG_DAEMON_IMAGE", "value": DAEMON_IMAGE} in operator["containers"][0]["env"]
    daemon = get_json(twin, "daemonset", "-n", NAMESPACE, "sriov-network-config-daemon")
    assert daemon["spec"]["template"]["spec"]["containers"][0]["image"] == DAEMON_IMAGE
    assert daemon["status"]["updatedNumberScheduled"] == daemon["status"]["desiredNumberScheduled"] == NODES
    pods = get_json(twin, "pods", "-n", NAMESPACE, "-l", "app=sriov-network-config-daemon")["items"]
    assert sorted(p["spec"]["containers"][0]["image"] for p in pods) == [DAEMON_IMAGE] * NODES

    again = role(twin, result_file, sriov_operator_config_daemon_image=DAEMON_IMAGE)
    assert again.returncode == 0, again.output[-4000:]
    assert json.loads(result_file.read_text())["changed"] is False
