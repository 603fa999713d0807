"""Drains through the NVIDIA Maintenance Operator: the driver rollout without the upgrade controller shares one
cluster-wide budget with another requestor, against the twin (its Maintenance Operator on, real ansible-playbook
runs of clusterpolicy_upgrade over HTTPS).

The operator's MaintenanceOperatorConfig allows one node under maintenance at a time. Another requestor (the
Network Operator's ID) holds gpu-worker-001, the first in the rollout's order, with a NodeMaintenance under the
shared name. The collection's own budget (the ClusterPolicy's maxUnavailable 2) would let it take a second node;
the operator's does not:

1. The first run joins the other requestor's request on gpu-worker-001 (its ID in additionalRequestors), upgrades
   that node while it is held, and leaves the request to its owner. Its request for the next node stays Pending,
   so after node_maintenance.timeout it is withdrawn and the run halts: no node failed, nothing of its own is left
   (no NodeMaintenance, no progress marks on the untouched node), the held node stays cordoned for its owner.
2. The other requestor finishes (deletes its request; the operator uncordons). The same run again upgrades the
   rest, one node at a time as the operator grants them, and leaves no request and no cordoned node behind.
"""

from __future__ import annotations

import pytest

from .conftest import kubectl
from .test_clusterpolicy_upgrade import (
    NEW,
    driver_versions,
    get_json,
    gpu_nodes,
    max_unavailable_at_once,
    run_module,
    settled_policy,
    wait_for,
)
from .test_clusterpolicy_upgrade import twin_factory as start_twin_fixture
from .test_doctor import apply
from .test_gpu_driver_without_controller import PROGRESS, turn_the_controller_off
from .test_ofed_rolling_reload import NEW as OFED_NEW
from .test_ofed_rolling_reload import STATE as OFED_STATE
from .test_ofed_rolling_reload import mofed_ready, mofed_versions, workers
from .test_ofed_rolling_reload import run_module as run_ofed

pytestmark = pytest.mark.slow
twin_factory = start_twin_fixture

HELD = "gpu-worker-001"
OTHER = "nvidia.network.operator"
OURS = "gpufleet.upgrade"
SHARED_NAME = f"nvidia-operator-{HELD}"


def node_maintenances(twin) -> dict[str, dict]:
    return {item["metadata"]["name"]: item for item in get_json(twin, "nodemaintenances", "-A")["items"]}


def ready_reason(obj: dict) -> str:
    return next((c.get("reason", "") for c in obj.get("status", {}).get("conditions", []) if c["type"] == "Ready"), "")


def cordoned(twin) -> set[str]:
    return {name for name, node in gpu_nodes(twin).items() if node["spec"].get("unschedulable")}


def test_a_rollout_shares_the_maintenance_operators_budget_with_another_requestor(twin_factory, tmp_path):
    scenario = {
        "nodes": 4,
        "profile": "openshift",
        "workloads": False,
        # A day: the operator's garbage collector would end the other requestor's request after the default hour
        # (six seconds at the twin's pace); ours carry the annotation that exempts them.
        "maintenance_operator": {
            "maxParallelOperations": 2,
            "maxUnavailable": 1,
            "maxNodeMaintenanceTimeSeconds": 86400,
        },
    }
    twin = twin_factory(nodes=4, scenario=scenario)
    old = turn_the_controller_off(twin)
    assert old != NEW
    other = {
        "apiVersion": "maintenance.nvidia.com/v1alpha1",
        "kind": "NodeMaintenance",
        "metadata": {"name": SHARED_NAME, "namespace": "default"},
        "spec": {"requestorID": OTHER, "nodeName": HELD, "cordon": True},
    }
    apply(twin, tmp_path, [other])
    wait_for(lambda: ready_reason(node_maintenances(twin)[SHARED_NAME]) == "Ready", what="the other requestor's node")
    assert cordoned(twin) == {HELD}
    twin.admin("POST", "report/reset")

    args = {
        "driver": {"version": NEW},
        "upgrade_policy": {"maxUnavailable": 2},
        "node_maintenance": {"timeout": 20},
    }
    run, result = run_module(twin, tmp_path, args)
    assert run.returncode != 0, run.output[-3000:]
    assert "was not started" in result["msg"] and "did not schedule NodeMaintenance" in result["msg"], result["msg"]
    assert "kubectl get nodemaintenances -A" in result["msg"]
    assert driver_versions(twin)[HELD] == NEW, "the held node was upgraded while the other requestor held it"
    timeline = {row["node"]: row for row in result["rollout"]["timeline"]}
    assert timeline[HELD]["outcome"] == "done", timeline[HELD]
    assert timeline[HELD]["steps"][0]["detail"]["request"] == "join"
    assert timeline[HELD]["steps"][-1]["detail"] == {"release": "leave"}
    assert result["rollout"]["nodes_failed"] == []
    (withdrawn,) = [row["node"] for row in timeline.values() if row["outcome"] == "not-granted"]
    assert withdrawn in result["rollout"]["nodes_not_started"]
    assert result["nodes_not_granted"] == [withdrawn] and result["failures"] == []  # what the report's Next reads
    # What is left: the other requestor's request only, without our ID; the held node cordoned for its owner; the
    # withdrawn node untouched (no progress marks, schedulable, its old driver).
    left = node_maintenances(twin)
    assert list(left) == [SHARED_NAME] and left[SHARED_NAME]["spec"].get("additionalRequestors", []) == []
    assert cordoned(twin) == {HELD}
    nodes = gpu_nodes(twin)
    assert PROGRESS not in nodes[withdrawn]["metadata"].get("annotations", {})
    assert driver_versions(twin)[withdrawn] == old
    assert max_unavailable_at_once(twin.report()) == 1, "the operator never let a second node go"

    # The other requestor finishes; the operator uncordons the node. The same run again finishes the rollout.
    kubectl(twin, "delete", "nodemaintenance", SHARED_NAME, "-n", "default")
    wait_for(lambda: not cordoned(twin), what="the operator to uncordon the node its requestors gave back")
    twin.admin("POST", "report/reset")
    run, result = run_module(twin, tmp_path, {**args, "node_maintenance": {"timeout": 240}})
    assert run.returncode == 0, run.output[-3000:]
    assert set(driver_versions(twin).values()) == {NEW}
    requests = {row["node"]: row["steps"][0]["detail"]["request"] for row in result["rollout"]["timeline"]}
    assert set(requests.values()) == {"create"} and HELD not in requests, requests
    assert node_maintenances(twin) == {} and not cordoned(twin)
    assert max_unavailable_at_once(twin.report()) == 1
    assert settled_policy(twin)["spec"]["driver"]["upgradePolicy"]["autoUpgrade"] is False


def test_a_rolling_mofed_reload_goes_node_by_node_as_the_operator_grants(twin_factory, tmp_path):
    """The Network Operator's own drains go through the Maintenance Operator from 26.x; the module's rolling
    reload shares that budget: the operator cordons and drains each node it grants (at most one at a time here,
    though the module's own budget allows two), and every request is gone at the end."""
    scenario = {"profile": "openshift", "workloads": False, "maintenance_operator": {"maxUnavailable": 1}}
    twin = twin_factory(scenario=scenario)
    mofed_ready(twin)
    twin.admin("POST", "report/reset")
    args = {"max_unavailable": 2, "max_parallel": 2, "nodes": [f"gpu-worker-00{i}" for i in (1, 2, 3)]}
    run, result = run_ofed(twin, tmp_path, {**args, "node_maintenance": {"timeout": 240}})
    assert run.returncode == 0, run.output[-3000:]
    versions = mofed_versions(twin)
    assert {versions[name] for name in args["nodes"]} == {OFED_NEW}
    requests = {row["node"]: row["steps"][0]["detail"] for row in result["timeline"]}
    assert sorted(requests) == args["nodes"]
    assert all(detail["request"] == "create" and detail["holders"] == [OURS] for detail in requests.values())
    assert node_maintenances(twin) == {} and not cordoned(twin)
    assert max_unavailable_at_once(twin.report()) == 1, "the operator's budget, not the module's, paced the reload"


def test_a_node_that_fails_keeps_its_request_marked_requestor_failed_until_a_run_resumes_it(twin_factory, tmp_path):
    """maintenance-operator's RequestorFailed (reason FailedMaintenance): the requestor says its work on the node
    failed; the operator turns the request's Ready reason into RequestorFailed and keeps the node cordoned. A run that
    resumes the node takes the condition back, and gives the node back when it is done."""
    scenario = {"profile": "openshift", "workloads": False, "maintenance_operator": {"maxUnavailable": 1}}
    twin = twin_factory(scenario=scenario)
    mofed_ready(twin)
    first = "gpu-worker-001"
    kernel = workers(twin)[first]["status"]["nodeInfo"]["kernelVersion"]
    twin.admin("POST", "faults", {"type": "mofed_build_fails", "kernel": kernel})
    args = {"nodes": [first], "restart_limit": 1, "reload_timeout": 120, "node_maintenance": {"timeout": 240}}
    run, result = run_ofed(twin, tmp_path, args)
    assert run.returncode != 0, run.output[-3000:]
    assert [failure["node"] for failure in result["failures"]] == [first], result["failures"]
    request = node_maintenances(twin)[f"nvidia-operator-{first}"]
    failed = next(c for c in request["status"]["conditions"] if c["type"] == "RequestorFailed")
    assert (failed["status"], failed["reason"]) == ("True", "FailedMaintenance"), failed
    assert "reload-mofed" in failed["message"] or "CrashLoopBackOff" in failed["message"], failed
    wait_for(lambda: ready_reason(node_maintenances(twin)[f"nvidia-operator-{first}"]) == "RequestorFailed",
             what="the operator to see the requestor failed")  # fmt: skip
    assert cordoned(twin) == {first}

    # Fixed (the kernel packages found, the crash-looping pod replaced), the halt cleared as the module's message
    # says; the same run again.
    twin.admin("DELETE", "faults")
    kubectl(twin, "delete", "pod", "-n", "nvidia-network-operator", "-l", "nvidia.com/ofed-driver",
            "--field-selector", f"spec.nodeName={first}", "--wait=false")  # fmt: skip
    kubectl(twin, "annotate", "node", first, f"{OFED_STATE}=pending", "--overwrite")
    run, result = run_ofed(twin, tmp_path, args)
    assert run.returncode == 0, run.output[-3000:]
    assert mofed_versions(twin)[first] == OFED_NEW
    assert result["timeline"][0]["steps"][0]["detail"]["request"] == "ours", result["timeline"][0]
    assert node_maintenances(twin) == {} and not cordoned(twin)
