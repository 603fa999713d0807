"""Role gpufleet.upgrade.gpu_operator against the twin: canary (both scopings), promotion, halt and rollback,
the operator's own upgrade through OLM, and check mode. Real ansible-playbook runs over HTTPS.
"""

from __future__ import annotations

import json

import pytest

from .conftest import kubectl
from .test_clusterpolicy_upgrade import (
    NEW,
    SKIP,
    STATE,
    UNBUILDABLE,
    driver_versions,
    get_json,
    gpu_nodes,
    policy,
    run_role,
    settled_policy,
    wait_for,
    write_requests,
)
from .test_clusterpolicy_upgrade import twin_factory as start_twin_fixture

pytestmark = pytest.mark.slow
# The same fixture as the module tests': a twin of each test's own.
twin_factory = start_twin_fixture

HOLD = "gpufleet.io/gpu-driver-upgrade-hold"
OWNER = "nvidia.com/gpu-operator.driver.owner"
NAMESPACE = "nvidia-gpu-operator"
CANARY = "gpu-worker-002"


def use_nvidia_driver_resources(twin) -> str:
    """Move the cluster's driver to a default NVIDIADriver, as the NVIDIA docs describe; returns its version."""
    version = policy(twin)["spec"]["driver"]["version"]
    manifest = {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": "default"},
        "spec": {"driverType": "gpu", "repository": "nvcr.io/nvidia", "image": "driver", "version": version},
    }
    path = twin.kubeconfig.parent / "nvidiadriver.json"
    path.write_text(json.dumps(manifest))
    kubectl(twin, "create", "-f", str(path))
    kubectl(twin, "patch", "clusterpolicy", "gpu-cluster-policy", "--type", "merge", "-p",
            json.dumps({"spec": {"driver": {"useNvidiaDriverCRD": True}}}))  # fmt: skip

    def moved() -> bool:
        pods = get_json(twin, "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=nvidia-driver")["items"]
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        return len(live) == len(gpu_nodes(twin)) and all(
            p["metadata"]["name"].startswith("nvidia-gpu-driver-")
            and all(c.get("ready") for c in p.get("status", {}).get("containerStatuses") or [{}])
            for p in live
        )

    wait_for(moved, what="the driver pods to move to the NVIDIADriver's DaemonSet")
    settled_policy(twin)
    return version


def add_gpu_workload(twin, replicas: int = 6) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "trainer", "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "trainer"}},
            "template": {
                "metadata": {"labels": {"app": "trainer"}},
                "spec": {
                    "containers": [
                        {
                            "name": "train",
                            "image": "nvcr.io/nvidia/pytorch:24.09-py3",
                            "resources": {"limits": {"nvidia.com/gpu": 4}, "requests": {"nvidia.com/gpu": 4}},
                        }
                    ]
                },
            },
        },
    }
    path = twin.kubeconfig.parent / "trainer.json"
    path.write_text(json.dumps(deployment))
    kubectl(twin, "create", "-f", str(path))

    def running() -> bool:
        pods = get_json(twin, "pods", "-n", "default", "-l", "app=trainer")["items"]
        return sum(1 for p in pods if p.get("status", {}).get("phase") == "Running") == replicas

    wait_for(running, what="the GPU workload to run")


def test_canary_with_skip_labels_then_promotion(twin_factory, tmp_path):
    twin = twin_factory()
    old = settled_policy(twin)["spec"]["driver"]["version"]
    kubectl(twin, "label", "node", CANARY, "gpu-canary=true")
    target = {"gpu_operator": "v24.9.0", "gpu_driver": NEW}  # operator unchanged: the driver step only

    run, result = run_role(
        twin,
        tmp_path,
        {"gpu_operator_action": "canary", "gpu_operator_target": target, "gpu_operator_canary_mode": "skip_label"},
    )
    assert run.returncode == 0, run.output
    assert result["changed"] is True and result["targets"] == [CANARY]
    assert result["operator"]["changed"] is False and result["operator"]["installed"] == "24.9.0"
    versions = driver_versions(twin)
    assert versions.pop(CANARY) == NEW and set(versions.values()) == {old}
    nodes = gpu_nodes(twin)
    for name, node in nodes.items():
        labels, annotations = node["metadata"]["labels"], node["metadata"].get("annotations", {})
        if name == CANARY:
            assert SKIP not in labels and labels[STATE] == "upgrade-done"
        else:
            assert (labels[SKIP], annotations[HOLD]) == ("true", "canary"), name
            assert labels[STATE] == "upgrade-required", name  # held by the controller, not upgraded
    assert [row["state"] for row in result["timeline"][CANARY]][-1] == "upgrade-done"
    assert any(f["check"] == "skip_label_not_a_pin" for f in result["preflight"]["findings"])

    run, result = run_role(
        twin,
        tmp_path,
        {"gpu_operator_action": "promote", "gpu_operator_target": target, "gpu_operator_max_unavailable": 2},
    )
    assert run.returncode == 0, run.output
    assert set(driver_versions(twin).values()) == {NEW}
    assert not any(SKIP in n["metadata"]["labels"] for n in gpu_nodes(twin).values())
    assert not any(HOLD in n["metadata"].get("annotations", {}) for n in gpu_nodes(twin).values())
    assert len(result["timeline"]) == 6
    assert policy(twin)["spec"]["driver"]["upgradePolicy"]["maxUnavailable"] == 2
    assert twin.report()["budget_violations"] == []


def test_canary_with_an_nvidiadriver_pool_after_the_operator_upgrade_then_promotion(twin_factory, tmp_path):
    # Without seeded workloads: the switch to NVIDIADriver below replaces every driver pod at once.
    twin = twin_factory(scenario={"workloads": False})
    old = use_nvidia_driver_resources(twin)
    add_gpu_workload(twin)
    kubectl(twin, "label", "node", CANARY, "gpu-canary=true")
    target = {"gpu_operator": "v25.3.0", "gpu_driver": NEW, "dcgm": "4.1.1-4.0.4"}

    run, result = run_role(
        twin,
        tmp_path,
        {"gpu_operator_action": "canary", "gpu_operator_target": target, "gpu_operator_canary_mode": "nvidiadriver"},
    )
    assert run.returncode == 0, run.output
    # The operator went first, through OLM.
    assert result["operator"]["method"] == "olm" and result["operator"]["changed"] is True
    csv = get_json(twin, "csv", "-n", NAMESPACE, "gpu-operator-certified.v25.3.0")
    assert csv["status"]["phase"] == "Succeeded"
    deployment = get_json(twin, "deployment", "-n", NAMESPACE, "gpu-operator")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":v25.3.0")
    # Then the canary pool: its own NVIDIADriver at the target, the production one untouched but default.
    canary_cr = get_json(twin, "nvidiadriver", "gpu-canary")
    assert canary_cr["spec"]["nodeSelector"] == {"gpu-canary": "true"} and canary_cr["spec"]["version"] == NEW
    production = get_json(twin, "nvidiadriver", "default")
    assert production["spec"]["version"] == old and production["spec"]["default"] is True
    # The production NVIDIADriver named no driver manager, so the operator's release would have replaced it on
    # every node: the one that ran (v24.9.0's bundle's) was pinned before the operator moved.
    (pinned,) = result["operator"]["pinned_before_upgrade"]
    assert (pinned["kind"], pinned["name"]) == ("NVIDIADriver", "default")
    ((what, image),) = [(found["what"], found["image"]) for found in pinned["images"]]
    assert what == "driver manager" and "@sha256:b072c579" in image
    assert production["spec"]["manager"] == {"image": image}
    nodes = gpu_nodes(twin)
    assert nodes[CANARY]["metadata"]["labels"][OWNER] == "gpu-canary"
    assert not any(n["spec"].get("unschedulable") for n in nodes.values())  # the pool move uncordoned it
    versions = driver_versions(twin)
    assert versions.pop(CANARY) == NEW and set(versions.values()) == {old}
    assert result["timeline"][CANARY][-1]["state"] == "upgrade-done"
    assert "cordon-required" in [row["state"] for row in result["timeline"][CANARY]]  # through the controller

    run, result = run_role(twin, tmp_path, {"gpu_operator_action": "promote", "gpu_operator_target": target})
    assert run.returncode == 0, run.output
    assert set(driver_versions(twin).values()) == {NEW}
    assert [cr["metadata"]["name"] for cr in get_json(twin, "nvidiadrivers")["items"]] == ["default"]
    nodes = gpu_nodes(twin)
    assert nodes[CANARY]["metadata"]["labels"][OWNER] == "default"
    assert not any(n["spec"].get("unschedulable") for n in nodes.values())
    assert any(w["op"] == "delete" and w["name"] == "gpu-canary" for w in result["patches"])


def test_check_mode_changes_nothing(twin_factory, tmp_path):
    twin = twin_factory()
    kubectl(twin, "label", "node", CANARY, "gpu-canary=true")
    before = settled_policy(twin)
    subscription = get_json(twin, "subscription", "-n", NAMESPACE, "gpu-operator-certified")
    twin.admin("POST", "report/reset")
    run, result = run_role(
        twin,
        tmp_path,
        {
            "gpu_operator_action": "canary",
            "gpu_operator_target": {"gpu_operator": "v24.9.0", "gpu_driver": NEW},
            "gpu_operator_max_unavailable": 1,
        },
        check=True,
    )
    assert run.returncode == 0, run.output
    assert result["changed"] is True
    assert [w["kind"] for w in result["plan"]["writes"]].count("Node") == 5
    assert write_requests(twin) == {}
    after = policy(twin)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["spec"] == before["spec"]
    assert (
        get_json(twin, "subscription", "-n", NAMESPACE, "gpu-operator-certified")["metadata"]["resourceVersion"]
        == (subscription["metadata"]["resourceVersion"])
    )
    assert not any(SKIP in n["metadata"]["labels"] for n in gpu_nodes(twin).values())


def test_a_failed_canary_halts_and_the_rollback_brings_every_node_back(twin_factory, tmp_path):
    twin = twin_factory(scenario={"workloads": False, "driver_builds": {UNBUILDABLE: ["5.14.0-999.el9.x86_64"]}})
    old = settled_policy(twin)["spec"]["driver"]["version"]
    kubectl(twin, "label", "node", CANARY, "gpu-canary=true")

    run, result = run_role(
        twin, tmp_path, {"gpu_operator_action": "canary", "gpu_operator_target": {"gpu_driver": UNBUILDABLE}}
    )
    assert run.returncode != 0
    assert f"halted at node {CANARY}" in run.output
    assert result["halted"] is True and result["failures"][0]["node"] == CANARY
    assert "kernel" in result["failures"][0]["reason"]
    versions = driver_versions(twin)
    assert versions.pop(CANARY) == UNBUILDABLE and set(versions.values()) == {old}

    run, result = run_role(
        twin, tmp_path, {"gpu_operator_action": "rollback", "gpu_operator_target": {"gpu_driver": old}}
    )
    assert run.returncode == 0, run.output
    assert set(driver_versions(twin).values()) == {old}
    nodes = gpu_nodes(twin)
    assert {n["metadata"]["labels"][STATE] for n in nodes.values()} == {"upgrade-done"}
    assert not any(SKIP in n["metadata"]["labels"] for n in nodes.values())
    assert not any(n["spec"].get("unschedulable") for n in nodes.values())
    retried = [w for w in result["patches"] if w["kind"] == "Node" and w["name"] == CANARY]
    assert retried and retried[0]["patch"]["metadata"]["labels"][STATE] == "upgrade-required"


def test_preflight_is_read_only_and_names_what_would_stall(twin_factory, tmp_path):
    twin = twin_factory(scenario={"cordoned": ["gpu-worker-004"]})
    twin.admin("POST", "report/reset")
    run, result = run_role(twin, tmp_path, {"gpu_operator_action": "preflight", "gpu_operator_max_unavailable": 1})
    assert run.returncode == 0, run.output
    assert write_requests(twin) == {}
    findings = {f["check"]: f for f in result["preflight"]["findings"]}
    assert findings["nodes_unavailable"]["nodes"] == ["gpu-worker-004"]
    assert findings["budget"]["severity"] == "error"  # 1 allowed, 1 already away
    assert "nodes_unavailable" in run.output


def test_a_driver_version_for_olms_clusterpolicy_without_its_image_is_refused_naming_the_settings(
    twin_factory, tmp_path
):
    """OLM's ClusterPolicy names no driver repository, image or version. The preflight of an operator upgrade says
    what the operator step will pin. Without that pin (the operator does not move here), a version alone is an image
    the operator refuses to render: the driver step fails naming the settings that give it, and nothing is
    written."""
    twin = twin_factory(scenario={"olm_cluster_policy": True, "workloads": False}, nodes=2)
    kubectl(twin, "label", "node", CANARY, "gpu-canary=true")
    twin.admin("POST", "report/reset")
    # The preflight of an operator upgrade says what its step will pin, reading only.
    moving = {"gpu_operator_action": "preflight", "gpu_operator_target": {"gpu_operator": "v25.3.0"}}
    run, _result = run_role(twin, tmp_path, moving)
    assert run.returncode == 0, run.output
    assert "names no driver or driver manager image, so the operator release would restart every driver" in run.output
    assert write_requests(twin) == {}

    target = {"gpu_operator": "v24.9.0", "gpu_driver": NEW}
    variables = {"gpu_operator_action": "canary", "gpu_operator_target": target, "gpu_operator_upgrade_operator": False}
    run, _result = run_role(twin, tmp_path, variables)
    assert run.returncode != 0
    assert "ClusterPolicy names no driver repository and image" in run.output
    assert "gpu_operator_driver_repository and gpu_operator_driver_image" in run.output
    assert write_requests(twin) == {}
    assert "version" not in policy(twin)["spec"]["driver"]
