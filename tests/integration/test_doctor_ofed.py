"""playbooks/diagnose.yml on the Network Operator's own driver upgrade: a MOFED reload held by a pod on a secondary
network is diagnosed, the doctor evicts the pod (check, real, check, real), relabels the node, and the upgrade then
finishes.

The twin's Network Operator runs upstream's upgrade controller (``autoUpgrade``, drain enabled without ``force``).
On gpu-worker-002 runs a pod attached to a Multus network that no controller owns: the drain refuses it ("cannot
delete Pods that declare no controller") and the node goes ``upgrade-failed``, where it stays, as its MOFED pod is
still the old one. The pod's RDMA interfaces would vanish with the reload: the doctor names it (its networks) and
evicts it only when the user's selector matches it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from gpufleet_twin.process import TwinProcess

from .conftest import kubectl
from .test_clusterpolicy_upgrade import get_json, wait_for, write_requests
from .test_clusterpolicy_upgrade import twin_factory as start_twin_fixture
from .test_doctor import diagnose
from .test_ofed_rolling_reload import NEW, mofed_ready, mofed_versions

pytestmark = pytest.mark.slow
twin_factory = start_twin_fixture

NODE = "gpu-worker-002"
NS = "doctor-ofed"
POD = "rdma-bare"
OFED_STATE = "nvidia.com/ofed-driver-upgrade-state"
NETWORKS = '[{"name": "ib-sriov-net"}]'


def ofed_states(twin: TwinProcess) -> dict[str, str]:
    nodes = get_json(twin, "nodes", "-l", "nvidia.com/gpu.present=true")["items"]
    return {n["metadata"]["name"]: n["metadata"]["labels"].get(OFED_STATE, "") for n in nodes}


def bare_pod(twin: TwinProcess) -> dict[str, Any] | None:
    pods = get_json(twin, "pods", "-n", NS, "--field-selector", f"metadata.name={POD}")["items"]
    return next((p for p in pods if not p["metadata"].get("deletionTimestamp")), None)


def ofed_finding(result: dict[str, Any]) -> dict[str, Any]:
    return next(f for f in result["findings"] if f["node"] == NODE and f["component"] == "ofed-driver")


@pytest.fixture
def held_twin(twin_factory, tmp_path):
    twin = twin_factory(scenario={"nodes": 6, "profile": "openshift", "workloads": False})
    mofed_ready(twin)
    kubectl(twin, "create", "namespace", NS)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": POD, "namespace": NS, "labels": {"team": "rdma"}, "annotations": {
            "k8s.v1.cni.cncf.io/networks": NETWORKS}},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": NODE},
                 "containers": [{"name": "main", "image": "registry.example/rdma:1"}]},
    }  # fmt: skip
    path = tmp_path / "bare-pod.yaml"
    path.write_text(yaml.safe_dump(pod))
    kubectl(twin, "create", "-f", str(path))
    wait_for(lambda: (bare_pod(twin) or {}).get("status", {}).get("phase") == "Running", what="the bare pod to run")
    upgrade = {
        "autoUpgrade": True,
        "maxParallelUpgrades": 0,
        "drain": {"enable": True, "force": False, "deleteEmptyDir": False, "timeoutSeconds": 300},
    }
    patch = {"spec": {"ofedDriver": {"version": NEW, "upgradePolicy": upgrade}}}
    kubectl(twin, "patch", "nicclusterpolicy", "nic-cluster-policy", "--type", "merge", "-p", json.dumps(patch))

    def held_as_planned() -> bool:
        states = ofed_states(twin)
        others = {name: state for name, state in states.items() if name != NODE}
        return states.get(NODE) == "upgrade-failed" and set(others.values()) == {"upgrade-done"}

    wait_for(held_as_planned, what=f"{NODE} upgrade-failed, the other nodes done", timeout=300)
    return twin


def test_secondary_network_pod_diagnosed_evicted_four_passes_then_the_reload_finishes(held_twin, tmp_path):
    twin = held_twin
    twin.admin("POST", "report/reset")
    run, result = diagnose(twin, tmp_path)
    assert run.returncode != 0, run.output
    assert write_requests(twin) == {}, "the diagnosis writes nothing"
    finding = ofed_finding(result)
    assert (finding["state"], finding["cause"]) == ("upgrade-failed", "ofed_secondary_network_pods"), finding
    assert finding["evidence"]["pods"] == [{"pod": f"{NS}/{POD}", "networks": NETWORKS, "owner": "none"}]
    assert finding["remediation"] is None, "nothing is evicted without the user's selector"
    assert mofed_versions(twin)[NODE] != NEW

    args = {
        "doctor_remediate": True,
        "doctor_remediate_pod_selector": "team=rdma",
        "doctor_max_actions": 1,
        "doctor_remediate_actions": ["evict_pods"],
    }
    uid = bare_pod(twin)["metadata"]["uid"]
    twin.admin("POST", "report/reset")
    run, result = diagnose(twin, tmp_path, check=True, **args)
    assert result["changed"] is True, run.output
    assert [(r["action"], r["node"]) for r in result["remediations"]] == [("evict_pods", NODE)]
    assert result["remediations"][0]["result"] == f"would evict {NS}/{POD} from {NODE}", result["remediations"]
    assert bare_pod(twin)["metadata"]["uid"] == uid
    assert set(write_requests(twin)) <= {"create pods/eviction"}  # the eviction's dry run

    run, result = diagnose(twin, tmp_path, **args)
    assert result["changed"] is True, run.output
    assert result["remediations"][0]["result"] == f"evicted {NS}/{POD} from {NODE}", result["remediations"]
    wait_for(lambda: bare_pod(twin) is None, what="the bare pod to leave")
    events = get_json(twin, "events", "-n", "default", "--field-selector", "reason=GPUFleetDoctor")["items"]
    assert [e["involvedObject"]["name"] for e in events] == [NODE]

    # Nothing blocks the node any more; relabelling is not among the allowed actions: nothing more to do.
    for check in (True, False):
        run, result = diagnose(twin, tmp_path, check=check, **args)
        assert result["changed"] is False, (check, result["remediations"], run.output[-3000:])
        assert ofed_finding(result)["cause"] == "upgrade_failed"

    # The upstream retry: relabelled upgrade-required, the controller drains and reloads the node.
    run, result = diagnose(twin, tmp_path, doctor_remediate=True, doctor_remediate_actions=["relabel_upgrade_required"])
    assert [(r["action"], r["node"], r["taken"]) for r in result["remediations"]] == [
        ("relabel_upgrade_required", NODE, True)
    ], run.output[-3000:]
    wait_for(
        lambda: ofed_states(twin).get(NODE) == "upgrade-done" and mofed_versions(twin).get(NODE) == NEW,
        what=f"{NODE} to reload MOFED {NEW}",
        timeout=300,
    )
    run, result = diagnose(twin, tmp_path)
    assert run.returncode == 0, run.output[-3000:]
    assert result["findings"] == [], result["findings"]
