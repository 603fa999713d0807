"""The doctor unsticks an upgrade end to end on a twin: stuck -> diagnosed -> cause fixed -> remediated -> done.

A driver upgrade (maxParallelUpgrades 1, pod deletion timeout 300 s, drain off) meets
a pod on gpu-worker-001 whose PodDisruptionBudget allows no disruption: the pod
cannot be deleted in time, the controller marks the node upgrade-failed, and
that node holds the only upgrade slot, so every other node waits in
upgrade-required. The doctor names both. Once the PDB is relaxed (what a person
does), the node stays upgrade-failed (its driver pod is still the old one, so it
does not heal); the doctor relabels it upgrade-required (the upstream retry) and
the upgrade then finishes on every node. Check mode changes nothing (four passes).
"""

from __future__ import annotations

import json

import pytest

from gpufleet_twin.process import start_twin

from .conftest import kubectl
from .test_clusterpolicy_upgrade import driver_versions, get_json, settled_policy, states, wait_for, write_requests
from .test_doctor import NS, _pinned, apply, diagnose, pod_on

pytestmark = pytest.mark.slow

NEW = "570.124.06"
STATE = "nvidia.com/gpu-driver-upgrade-state"


@pytest.fixture(scope="module")
def failed_twin(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("doctor-remedy")
    twin = start_twin(nodes=6, profile="openshift", time_scale=600, workdir=tmp_path / "twin")
    try:
        settled_policy(twin, timeout=120)
        kubectl(twin, "create", "namespace", NS)
        apply(
            twin,
            tmp_path,
            [
                _pinned(
                    "Deployment",
                    "pinned",
                    "gpu-worker-001",
                    labels={"app": "pinned"},
                    extra={"container": {"resources": {"limits": {"nvidia.com/gpu": 1}}}},
                ),
                {
                    "apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": {"name": "pinned", "namespace": NS},
                    "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "pinned"}}},
                },
            ],
        )
        wait_for(lambda: pod_on(twin, "gpu-worker-001", "pinned") is not None, what="the pinned pod", timeout=120)
        patch = {
            "spec": {
                "driver": {
                    "version": NEW,
                    "upgradePolicy": {
                        "maxParallelUpgrades": 1,
                        "maxUnavailable": "25%",
                        "podDeletion": {"timeoutSeconds": 300},
                    },
                }
            }
        }
        kubectl(twin, "patch", "clusterpolicy", "gpu-cluster-policy", "--type", "merge", "-p", json.dumps(patch))
        wait_for(
            lambda: states(twin).get("gpu-worker-001") == "upgrade-failed",
            what="gpu-worker-001 to fail its upgrade",
            timeout=300,
        )
        yield twin
    finally:
        assert twin.stop() == 0, twin.log_path.read_text()[-2000:]


def test_stuck_then_remediated_then_finished(failed_twin, tmp_path):
    twin = failed_twin
    run, result = diagnose(twin, tmp_path, doctor_remediate=True)
    assert run.returncode != 0
    found = {item["node"]: item for item in result["findings"]}
    assert found["gpu-worker-001"]["state"] == "upgrade-failed"
    assert found["gpu-worker-001"]["cause"] == "pdb_blocks_eviction"
    assert found["gpu-worker-001"]["evidence"]["blocked"][0]["pdb"] == f"{NS}/pinned"
    assert any("global timeout reached" in e for e in found["gpu-worker-001"]["evidence"]["events"])
    for name in ("gpu-worker-002", "gpu-worker-003"):
        assert found[name]["cause"] == "slot_held_by_failed"
        assert found[name]["evidence"]["upgrade_failed_nodes"] == ["gpu-worker-001"]
    # The cause is still there: nothing is relabelled, even with remediate.
    assert result["remediations"] == [] and result["changed"] is False
    assert states(twin)["gpu-worker-001"] == "upgrade-failed"

    # A person relaxes the budget; the node does not heal by itself (its driver pod is still the old one).
    kubectl(
        twin,
        "patch",
        "pdb",
        "-n",
        NS,
        "pinned",
        "--type",
        "json",
        "-p",
        json.dumps(
            [{"op": "remove", "path": "/spec/minAvailable"}, {"op": "add", "path": "/spec/maxUnavailable", "value": 1}]
        ),
    )
    wait_for(
        lambda: get_json(twin, "pdb", "-n", NS, "pinned").get("status", {}).get("disruptionsAllowed") == 1,
        what="the PDB to allow a disruption",
        timeout=60,
    )
    args = {"doctor_remediate": True, "doctor_max_actions": 2}

    twin.admin("POST", "report/reset")
    run, result = diagnose(twin, tmp_path, check=True, **args)
    assert result["changed"] is True, run.output
    assert [(r["action"], r["node"]) for r in result["remediations"]] == [
        ("relabel_upgrade_required", "gpu-worker-001")
    ]
    assert result["remediations"][0]["result"].startswith("would have relabelled gpu-worker-001")
    assert "would have relabelled gpu-worker-001" in run.output
    assert states(twin)["gpu-worker-001"] == "upgrade-failed"
    assert write_requests(twin) == {}

    run, result = diagnose(twin, tmp_path, **args)
    assert result["changed"] is True, run.output
    assert result["remediations"][0]["result"] == (
        f"relabelled gpu-worker-001 {STATE} upgrade-failed -> upgrade-required"
    )
    events = get_json(twin, "events", "-n", "default", "--field-selector", "reason=GPUFleetDoctor")["items"]
    assert [e["involvedObject"]["name"] for e in events] == ["gpu-worker-001"]
    ledger = get_json(twin, "configmap", "-n", "nvidia-gpu-operator", "gpufleet-upgrade-ledger")["data"]["ledger.jsonl"]
    assert json.loads(ledger.splitlines()[-1])["remediations"][0]["action"] == "relabel_upgrade_required"

    for check in (True, False):
        run, result = diagnose(twin, tmp_path, check=check, **args)
        assert result["changed"] is False, run.output
        assert result["remediations"] == []

    # The upgrade goes on from the relabelled node and finishes everywhere.
    wait_for(
        lambda: set(states(twin).values()) == {"upgrade-done"} and set(driver_versions(twin).values()) == {NEW},
        what="the upgrade to finish",
        timeout=600,
    )
    run, result = diagnose(twin, tmp_path)
    assert run.returncode == 0, run.output
    assert result["stuck"] is False
