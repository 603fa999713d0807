"""A pod that gets its GPU through Dynamic Resource Allocation holds the driver like any GPU pod, against the twin:
the driver rollout without the upgrade controller evicts it (real ansible-playbook runs of clusterpolicy_upgrade).

The pod requests no ``nvidia.com/gpu``: its ResourceClaim was allocated a device of NVIDIA's DRA driver for GPUs
(``gpu.nvidia.com``). The GPU Operator's pod filter keys on the request, so such a pod would stay on the node and
keep the old kernel module loaded, and the new driver would crash-loop ("driver is in use", gpu-operator #2570);
the twin models exactly that. The collection reads the node's claims, evicts the pod with the GPU pods, and the
node gets its new driver. The preflight's capacity count and the free-GPU choice read the same claims.
"""

from __future__ import annotations

import json

import pytest

from .conftest import kubectl
from .test_clusterpolicy_upgrade import NEW, driver_versions, run_module, wait_for
from .test_clusterpolicy_upgrade import twin_factory as start_twin_fixture
from .test_doctor import apply
from .test_gpu_driver_without_controller import turn_the_controller_off

pytestmark = pytest.mark.slow
twin_factory = start_twin_fixture

NS = "dra-training"
NODE = "gpu-worker-002"
CLAIM = "trainer-gpus"


def trainer_pods(twin) -> list[dict]:
    pods = json.loads(kubectl(twin, "get", "pods", "-n", NS, "-l", "app=trainer", "-o", "json"))["items"]
    return [pod for pod in pods if not pod["metadata"].get("deletionTimestamp")]


def test_a_pod_holding_a_gpu_through_a_dra_claim_is_evicted_before_its_driver_is_replaced(twin_factory, tmp_path):
    twin = twin_factory(nodes=3, scenario={"nodes": 3, "profile": "openshift", "workloads": False})
    old = turn_the_controller_off(twin)
    kubectl(twin, "create", "namespace", NS)
    gpu_request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    apply(twin, tmp_path, [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
         "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": CLAIM, "namespace": NS},
         "spec": {"devices": {"requests": [gpu_request]}}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "trainer", "namespace": NS},
         "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "trainer"}},
                  "template": {"metadata": {"labels": {"app": "trainer"}},
                               "spec": {"nodeSelector": {"kubernetes.io/hostname": NODE},
                                        "resourceClaims": [{"name": "gpus", "resourceClaimName": CLAIM}],
                                        "containers": [{"name": "main", "image": "registry.example/trainer:1",
                                                        "resources": {"claims": [{"name": "gpus"}]}}]}}}},
    ])  # fmt: skip
    # The twin has no DRA allocator: write what the scheduler and NVIDIA's DRA driver would.
    result = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-0"}
    allocation = {"status": {"allocation": {"devices": {"results": [result]}}}}
    kubectl(twin, "patch", "resourceclaim", CLAIM, "-n", NS, "--subresource=status", "--type=merge",
            "-p", json.dumps(allocation))  # fmt: skip
    wait_for(lambda: any(p["status"].get("phase") == "Running" for p in trainer_pods(twin)), what="the trainer pod")
    (holder,) = trainer_pods(twin)

    run, result = run_module(twin, tmp_path, {"driver": {"version": NEW}, "node_maintenance": {"mode": "never"}})
    assert run.returncode == 0, run.output[-3000:]
    assert set(driver_versions(twin).values()) == {NEW} and old != NEW
    (evicted_on_node,) = [
        step["detail"]
        for row in result["rollout"]["timeline"]
        if row["node"] == NODE
        for step in row["steps"]
        if step["name"] == "evict-gpu-pods"
    ]
    assert evicted_on_node["evicted"] == [f"{NS}/{holder['metadata']['name']}"], evicted_on_node
    for row in result["rollout"]["timeline"]:
        if row["node"] != NODE:
            evict = next(step for step in row["steps"] if step["name"] == "evict-gpu-pods")
            assert evict["detail"]["evicted"] == [], "only the node whose pod holds a claimed GPU had one to evict"
    # Its replacement comes back on the node once it is uncordoned, on the new driver.
    wait_for(
        lambda: any(p["status"].get("phase") == "Running" for p in trainer_pods(twin)),
        what="the trainer pod back on its node",
    )
    assert trainer_pods(twin)[0]["metadata"]["name"] != holder["metadata"]["name"]
