"""Seeding: node names, labels and status as real GPU nodes carry them; workloads; scale."""

from __future__ import annotations

import asyncio
import time

import pytest
from simharness import make_cluster

from gpufleet_twin.apiserver.server import create_twin
from gpufleet_twin.harness.seed import SeedSpec, seed_cluster, worker_name_width, workload_objects
from gpufleet_twin.kube import podutil
from gpufleet_twin.kube.state import SimState


def test_openshift_nodes_look_like_rhcos_gpu_nodes() -> None:
    async def check() -> None:
        cluster = make_cluster(nodes=10, profile="openshift")
        assert cluster.workers[0] == "gpu-worker-001" and cluster.workers[-1] == "gpu-worker-010"
        masters = [
            n["metadata"]["name"]
            for n in cluster.store.list(cluster.kinds.node)
            if "node-role.kubernetes.io/master" in n["metadata"]["labels"]
        ]
        assert masters == ["master-0", "master-1", "master-2"]
        master = cluster.node("master-0")
        assert {"key": "node-role.kubernetes.io/master", "effect": "NoSchedule"} in master["spec"]["taints"]
        assert "nvidia.com/gpu" not in master["status"]["capacity"]
        node = cluster.node("gpu-worker-009")
        labels = node["metadata"]["labels"]
        assert labels["node-role.kubernetes.io/worker"] == ""
        assert labels["gpufleet.io/rack"] == "rack-2"  # 8 nodes per rack
        assert labels["topology.kubernetes.io/zone"].startswith("zone-")
        assert labels["feature.node.kubernetes.io/system-os_release.ID"] == "rhcos"
        assert labels["feature.node.kubernetes.io/system-os_release.OSTREE_VERSION"] == "416.94.202410211619-0"
        assert labels["feature.node.kubernetes.io/system-os_release.VERSION_ID"] == "4.16"
        assert labels["feature.node.kubernetes.io/kernel-version.full"] == "5.14.0-427.40.1.el9_4.x86_64"
        assert labels["feature.node.kubernetes.io/pci-10de.present"] == "true"
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert labels["nvidia.com/gpu.count"] == "8"
        assert labels["nvidia.com/gpu.memory"] == "81559"
        assert labels["nvidia.com/gpu.present"] == "true"
        assert labels["nvidia.com/gpu.deploy.driver"] == "true"
        assert labels["nvidia.com/mig.strategy"] == "single"
        assert labels["nvidia.com/cuda.driver-version.full"] == "550.127.05"
        assert (
            labels["nvidia.com/cuda.driver.major"],
            labels["nvidia.com/cuda.driver.minor"],
            labels["nvidia.com/cuda.driver.rev"],
        ) == ("550", "127", "05")
        info = node["status"]["nodeInfo"]
        assert info["kernelVersion"] == "5.14.0-427.40.1.el9_4.x86_64"
        assert info["osImage"] == "Red Hat Enterprise Linux CoreOS 416.94.202410211619-0"
        assert info["containerRuntimeVersion"].startswith("cri-o://")
        assert info["kubeletVersion"].startswith("v1.29.")
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert {c["type"] for c in node["status"]["conditions"]} == {
            "Ready",
            "MemoryPressure",
            "DiskPressure",
            "PIDPressure",
        }
        assert all(c["lastHeartbeatTime"] for c in node["status"]["conditions"])
        address = node["status"]["addresses"][0]
        assert address["type"] == "InternalIP" and address["address"].startswith("10.")
        namespaces = {n["metadata"]["name"] for n in cluster.store.list(cluster.kinds.namespace)}
        assert {"nvidia-gpu-operator", "nvidia-network-operator", "openshift-machine-config-operator"} <= namespaces
        health = cluster.sim.nodes["gpu-worker-001"]
        assert health.gpus_allocatable == 8 and len(health.ib_ports) == 8

    asyncio.run(check())


def test_kubernetes_profile_and_cordoned_node() -> None:
    async def check() -> None:
        cluster = make_cluster(nodes=2, profile="kubernetes", cordoned=("gpu-worker-002",))
        names = {n["metadata"]["name"] for n in cluster.store.list(cluster.kinds.node)}
        assert names == {"control-plane-0", "gpu-worker-001", "gpu-worker-002"}
        node = cluster.node("gpu-worker-001")
        assert node["status"]["nodeInfo"]["osImage"] == "Ubuntu 22.04.5 LTS"
        assert "feature.node.kubernetes.io/system-os_release.OSTREE_VERSION" not in node["metadata"]["labels"]
        assert node["metadata"]["labels"]["feature.node.kubernetes.io/system-os_release.VERSION_ID"] == "22.04"
        cordoned = cluster.node("gpu-worker-002")
        assert cordoned["spec"]["unschedulable"] is True
        assert cordoned["spec"]["taints"] == [{"key": podutil.UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}]
        assert "gpu-operator" in {n["metadata"]["name"] for n in cluster.store.list(cluster.kinds.namespace)}

    asyncio.run(check())


def test_name_width_sorts_naturally() -> None:
    assert worker_name_width(5) == 3
    assert worker_name_width(10_000) == 5
    spec = SeedSpec(nodes=10_000)
    assert spec.worker_name(7) == "gpu-worker-00007"
    assert sorted(spec.worker_name(i) for i in (9, 10, 100)) == [spec.worker_name(i) for i in (9, 10, 100)]


def test_workload_rule_is_bounded() -> None:
    small = workload_objects(SeedSpec(nodes=8))
    big = workload_objects(SeedSpec(nodes=10_000))
    kinds_small = [kind for kind, _ in small]
    assert kinds_small.count("deployment") == 3  # 2 training (4 replicas each) + inference
    assert kinds_small.count("job") == 1
    assert kinds_small.count("pdb") == 2
    replicas = sum(o["spec"]["replicas"] for kind, o in big if kind == "deployment")
    assert replicas == 256 + 2, "training pods stop growing at 256 workers"
    assert sum(1 for kind, _ in big if kind == "job") == 32
    multus = [
        o
        for kind, o in small
        if kind == "deployment"
        and podutil.MULTUS_NETWORKS_ANNOTATION in (o["spec"]["template"]["metadata"].get("annotations") or {})
    ]
    assert len(multus) == 1


def test_seeded_workloads_start_running(simulate) -> None:
    async def scenario(cluster) -> None:
        await cluster.run_for(15)
        training = cluster.pods("ml-training", live=True)
        assert len(training) == 8 and all(podutil.is_pod_ready(p) for p in training)
        assert all(p["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet" for p in training)
        gpus = {}
        for pod in training:
            gpus[pod["spec"]["nodeName"]] = gpus.get(pod["spec"]["nodeName"], 0) + podutil.gpu_request(pod)
        assert max(gpus.values()) <= 8
        assert len(cluster.pods("ml-batch", live=True)) == 2
        pdb = cluster.store.get(cluster.kinds.pdb, "ml-training", "llm-train-01")
        assert pdb["status"]["disruptionsAllowed"] == 1

    simulate(scenario, nodes=8, workloads=True)


@pytest.mark.slow
def test_ten_thousand_nodes_seed() -> None:
    async def check() -> None:
        twin = create_twin()
        sim = SimState(clock=twin.clock)
        started = time.perf_counter()
        result = seed_cluster(twin, sim, SeedSpec(nodes=10_000, profile="openshift"))
        elapsed = time.perf_counter() - started
        print(f"seeded 10,000 GPU nodes and their workloads in {elapsed:.2f} s")
        assert len(result.worker_names) == 10_000
        assert twin.store.count(twin.registry.get("", "nodes")) == 10_003
        assert result.worker_names[-1] == "gpu-worker-10000"
        assert len(sim.nodes) == 10_003

    asyncio.run(check())
