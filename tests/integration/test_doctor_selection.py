"""playbooks/diagnose.yml where the driver is managed with NVIDIADriver resources (``useNvidiaDriverCRD``): a GPU node
no NVIDIADriver selects, and a driver upgrade held by a DaemonSet that uses the GPUs without requesting them.

The twin (3 GPU workers, OpenShift profile) moves its driver to the NVIDIADriver ``main``, which selects
``driver-pool=main``: gpu-worker-001 and -002 carry the label, gpu-worker-003 does not, so no driver runs there. A
DaemonSet of the user's own (a standalone dcgm-exporter, say) runs on gpu-worker-002 with the ``nvidia``
runtimeClass and no ``nvidia.com/gpu`` request: the upgrade controller does not evict it (its filter keys on the
request, and drain leaves DaemonSets), so the new driver finds the old module in use (gpu-operator #2509). Evicting
that pod would only bring it back, so the doctor names the DaemonSet and offers no eviction even when the user's
selector matches it; keeping the DaemonSet off the node lets the upgrade finish.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpufleet_twin.process import TwinProcess

from .conftest import kubectl
from .test_clusterpolicy_upgrade import NEW, driver_versions, get_json, settled_policy, states, wait_for, write_requests
from .test_clusterpolicy_upgrade import twin_factory as start_twin_fixture
from .test_doctor import apply, diagnose, driver_pod, restarts

pytestmark = pytest.mark.slow
twin_factory = start_twin_fixture

NS = "doctor-ds"
HELD = "gpu-worker-002"
OUTSIDE = "gpu-worker-003"


def daemon_pods(twin: TwinProcess) -> list[dict[str, Any]]:
    pods = get_json(twin, "pods", "-n", NS, "-l", "app=dcgm-standalone")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def driver_loaded(twin: TwinProcess, node: str) -> bool:
    """The node's driver pod is Ready: its container loaded the module."""
    conditions = ((driver_pod(twin, node) or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def gpu_driver_findings(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["node"]: f for f in result["findings"] if f["component"] == "gpu-driver"}


@pytest.fixture
def held_twin(twin_factory, tmp_path):
    twin = twin_factory(nodes=3, scenario={"nodes": 3, "profile": "openshift", "workloads": False})
    version = settled_policy(twin, timeout=120)["spec"]["driver"]["version"]
    for node in ("gpu-worker-001", HELD):
        kubectl(twin, "label", "node", node, "driver-pool=main")
    apply(twin, tmp_path, [{
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": "main"},
        "spec": {"driverType": "gpu", "repository": "nvcr.io/nvidia", "image": "driver", "version": version,
                 "nodeSelector": {"driver-pool": "main"}},
    }])  # fmt: skip
    upgrade = {"autoUpgrade": True, "maxParallelUpgrades": 0, "maxUnavailable": "100%"}
    patch = {"spec": {"driver": {"useNvidiaDriverCRD": True, "upgradePolicy": upgrade}}}
    kubectl(twin, "patch", "clusterpolicy", "gpu-cluster-policy", "--type", "merge", "-p", json.dumps(patch))
    # Ready, not only there: a driver pod replaced before it loaded its module leaves none loaded, and then nothing
    # holds the driver when the version changes.
    wait_for(
        lambda: (
            set(driver_versions(twin)) == {"gpu-worker-001", HELD}
            and all(driver_loaded(twin, node) for node in ("gpu-worker-001", HELD))
        ),
        what="the NVIDIADriver's pods on the two selected nodes only, their driver loaded",
        timeout=120,
        seen=lambda: {node: driver_pod(twin, node) for node in ("gpu-worker-001", HELD)},
    )
    kubectl(twin, "create", "namespace", NS)
    apply(twin, tmp_path, [{
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "dcgm-standalone", "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": "dcgm-standalone"}},
            "template": {
                "metadata": {"labels": {"app": "dcgm-standalone", "team": "mon"}},
                "spec": {"runtimeClassName": "nvidia", "nodeSelector": {"kubernetes.io/hostname": HELD},
                         "containers": [{"name": "exporter", "image": "registry.example/dcgm-exporter:3"}]},
            },
        },
    }])  # fmt: skip
    wait_for(lambda: any(p["status"].get("phase") == "Running" for p in daemon_pods(twin)), what="the DaemonSet pod")
    kubectl(twin, "patch", "nvidiadriver", "main", "--type", "merge", "-p", json.dumps({"spec": {"version": NEW}}))
    wait_for(
        lambda: (
            driver_versions(twin).get("gpu-worker-001") == NEW
            and states(twin).get(HELD) in ("pod-restart-required", "upgrade-failed")
            and restarts(driver_pod(twin, HELD)) >= 1
        ),
        what=f"gpu-worker-001 upgraded and {HELD} held by the driver in use",
        timeout=300,
        seen=lambda: (driver_versions(twin), states(twin), driver_pod(twin, HELD), daemon_pods(twin)),
    )
    return twin


def test_a_node_no_nvidiadriver_selects_and_a_daemonset_holding_the_driver(held_twin, tmp_path):
    twin = held_twin
    twin.admin("POST", "report/reset")
    args = {
        "doctor_remediate": True,
        "doctor_remediate_pod_selector": "team=mon",
        "doctor_remediate_actions": ["evict_pods"],
    }
    run, result = diagnose(twin, tmp_path, check=True, **args)
    assert run.returncode != 0, run.output[-3000:]
    assert write_requests(twin) == {}, "nothing to do, not even an eviction's dry run"
    assert result["changed"] is False and result["remediations"] == [], result["remediations"]
    found = gpu_driver_findings(result)
    assert found[OUTSIDE]["cause"] == "outside_selection", found
    assert "no NVIDIADriver's nodeSelector matches its labels" in found[OUTSIDE]["detail"]
    held = found[HELD]
    assert held["cause"] == "gpu_consumers_without_request", held
    (consumer,) = held["evidence"]["pods"]
    assert consumer["owner"] == "DaemonSet/dcgm-standalone" and consumer["how"] == "runtimeClassName nvidia"
    assert consumer["pod"].startswith(f"{NS}/dcgm-standalone-")
    assert "driver is in use" in held["evidence"]["last_message"]
    assert held["remediation"] is None, "a DaemonSet's pod is never evicted: it would come straight back"
    assert any("DaemonSet/dcgm-standalone: evicting would only bring them back" in w for w in held["warnings"])
    assert "keep the DaemonSet off the node" in held["remedy"]

    # What the doctor says: keep the DaemonSet off the node. The driver then unloads and the upgrade finishes.
    off = {"spec": {"template": {"spec": {"nodeSelector": {"kubernetes.io/hostname": "none"}}}}}
    kubectl(twin, "patch", "daemonset", "dcgm-standalone", "-n", NS, "--type", "merge", "-p", json.dumps(off))
    wait_for(
        lambda: states(twin).get(HELD) == "upgrade-done" and driver_versions(twin).get(HELD) == NEW,
        what=f"{HELD} on the new driver",
        timeout=300,
    )
    run, result = diagnose(twin, tmp_path)
    assert run.returncode != 0, "the node outside every NVIDIADriver is still stuck"
    assert {(f["node"], f["cause"]) for f in result["findings"]} == {(OUTSIDE, "outside_selection")}
