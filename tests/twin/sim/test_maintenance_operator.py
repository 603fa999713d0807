"""The twin's NVIDIA Maintenance Operator (operators/maintenance_operator.py), in process on the simulated clock.

NodeMaintenance requests of several requestors share one budget (MaintenanceOperatorConfig maxParallelOperations
and maxUnavailable, nodes already cordoned counting), a second requestor in ``additionalRequestors`` keeps the
node cordoned after the first deletes the request, and the drain honours PodDisruptionBudgets and
``podEvictionFilters``.  Every write goes through the twin's store with the upstream CRDs' schemas.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from simharness import SimCluster, make_cluster

from gpufleet_twin.harness.scenario import ScenarioError, parse_scenario
from gpufleet_twin.machinery import errors
from gpufleet_twin.machinery.registry import ResourceType
from gpufleet_twin.operators import maintenance_operator as mo

Obj = dict[str, Any]


def run(scenario: Any, **options: Any) -> None:
    async def main() -> None:
        cluster = make_cluster(**options)
        mo.install(cluster.twin)
        cluster.twin.start_controllers()
        try:
            await asyncio.wait_for(scenario(cluster), timeout=60)
        finally:
            await cluster.twin.stop_controllers()

    asyncio.run(main())


def rtype(cluster: SimCluster, plural: str) -> ResourceType:
    found = cluster.twin.registry.get(mo.GROUP, plural)
    assert found is not None
    return found


def request(cluster: SimCluster, name: str, node: str, requestor: str, **spec: Any) -> Obj:
    body = {
        "apiVersion": mo.API_VERSION,
        "kind": "NodeMaintenance",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"requestorID": requestor, "nodeName": node, **spec},
    }
    return cluster.store.create(rtype(cluster, "nodemaintenances"), body)


def configure(cluster: SimCluster, **spec: Any) -> None:
    body = {"metadata": {"name": mo.CONFIG_NAME, "namespace": mo.NAMESPACE}, "spec": spec}
    cluster.store.create(rtype(cluster, "maintenanceoperatorconfigs"), body)


def get(cluster: SimCluster, name: str) -> Obj | None:
    found = cluster.store.try_get(rtype(cluster, "nodemaintenances"), "default", name)
    return copy.deepcopy(found) if found is not None else None


def phase(cluster: SimCluster, name: str) -> str | None:
    nm = get(cluster, name)
    return None if nm is None else mo.ready_reason(nm)


def cordoned(cluster: SimCluster, node: str) -> bool:
    return bool(cluster.node(node)["spec"].get("unschedulable"))


def unavailable(cluster: SimCluster) -> set[str]:
    return {n["metadata"]["name"] for n in cluster.store.list(cluster.kinds.node) if n["spec"].get("unschedulable")}


def delete(cluster: SimCluster, name: str) -> None:
    cluster.store.delete(rtype(cluster, "nodemaintenances"), "default", name)


def test_requests_of_several_requestors_share_the_budget() -> None:
    """5 nodes, one already cordoned; maxParallelOperations 3 and maxUnavailable 2 let only 2 nodes go."""

    async def scenario(cluster: SimCluster) -> None:
        configure(cluster, maxParallelOperations=3, maxUnavailable=2)
        for index, node in enumerate(("gpu-worker-001", "gpu-worker-002", "gpu-worker-003"), start=1):
            request(cluster, f"gpu-{index}", node, "gpu.example.com")
        request(cluster, "net-4", "gpu-worker-004", "network.example.com", cordon=True)
        assert await cluster.wait_until(lambda: phase(cluster, "gpu-1") == mo.READY, sim_seconds=120)
        assert await cluster.wait_until(lambda: phase(cluster, "net-4") == mo.READY, sim_seconds=60)
        # The already cordoned node cost no room; gpu-1 took the one left (2 - 1 unavailable).
        await cluster.run_for(120, step=5)
        assert phase(cluster, "gpu-2") == mo.PENDING and phase(cluster, "gpu-3") == mo.PENDING
        assert unavailable(cluster) == {"gpu-worker-001", "gpu-worker-004"}
        scheduled = [e for e in cluster.events("ConditionChanged") if e.get("message") == mo.SCHEDULED]
        assert sorted(e["involvedObject"]["name"] for e in scheduled) == ["gpu-1", "net-4"]
        nm = get(cluster, "gpu-1")
        assert nm is not None
        assert nm["metadata"]["finalizers"] == [mo.FINALIZER]
        assert nm["metadata"]["annotations"][mo.INITIAL_STATE_ANNOTATION] == "false"
        assert nm["metadata"]["ownerReferences"][0]["kind"] == "Node"
        assert [c["status"] for c in nm["status"]["conditions"] if c["type"] == "Ready"] == ["True"]
        # Releasing gpu-1 uncordons its node and frees the room for the next request of the same requestor.
        delete(cluster, "gpu-1")
        assert await cluster.wait_until(lambda: get(cluster, "gpu-1") is None, sim_seconds=30)
        assert not cordoned(cluster, "gpu-worker-001")
        assert await cluster.wait_until(lambda: phase(cluster, "gpu-2") == mo.READY, sim_seconds=60)
        assert phase(cluster, "gpu-3") == mo.PENDING
        # A node cordoned before its maintenance stays cordoned after it.
        delete(cluster, "net-4")
        assert await cluster.wait_until(lambda: get(cluster, "net-4") is None, sim_seconds=30)
        assert cordoned(cluster, "gpu-worker-004")
        # The webhook: a request for a node that does not exist is refused.
        with pytest.raises(errors.ApiError) as refused:
            request(cluster, "ghost", "no-such-node", "gpu.example.com")
        assert refused.value.code == 403 and "no-such-node" in refused.value.message

    run(scenario, nodes=4, cordoned=("gpu-worker-004",))


def test_additional_requestor_keeps_the_node_cordoned_until_it_leaves() -> None:
    async def scenario(cluster: SimCluster) -> None:
        node = "gpu-worker-001"
        request(cluster, "upgrade", node, "gpufleet.upgrade", additionalRequestors=["network.example.com"])
        assert await cluster.wait_until(lambda: phase(cluster, "upgrade") == mo.READY, sim_seconds=60)
        # Another requestor's own request on the same node waits: one request per node is in maintenance.
        request(cluster, "other", node, "sriov.example.com")
        assert cordoned(cluster, node)
        delete(cluster, "upgrade")
        await cluster.run_for(120, step=5)
        held = get(cluster, "upgrade")
        assert held is not None and held["metadata"].get("deletionTimestamp")
        assert cordoned(cluster, node)
        assert phase(cluster, "other") == mo.PENDING
        # The second requestor removes its ID (an update of the whole list): the node is released.
        held["spec"]["additionalRequestors"] = []
        cluster.store.update(rtype(cluster, "nodemaintenances"), held)
        assert await cluster.wait_until(lambda: get(cluster, "upgrade") is None, sim_seconds=30)
        # Uncordoned, then the waiting request is scheduled and cordons it again.
        assert await cluster.wait_until(lambda: phase(cluster, "other") == mo.READY, sim_seconds=60)
        uncordons = [e for e in cluster.events("ConditionChanged") if e["involvedObject"]["name"] == "other"]
        assert [e["message"] for e in uncordons][:2] == [mo.PENDING, mo.SCHEDULED]
        assert cordoned(cluster, node)
        # The garbage collector removes a request left Ready longer than maxNodeMaintenanceTimeSeconds.
        await cluster.run_for(mo.DEFAULT_MAX_MAINTENANCE_SECONDS + 30, step=30)
        assert get(cluster, "other") is None
        assert not cordoned(cluster, node)

    run(scenario, nodes=2)


def pod(name: str, node: str, *, labels: dict[str, str], gpus: int = 0) -> Obj:
    resources = {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "registry.example/tools:1.0", "resources": resources}],
        },
    }


def test_drain_waits_for_pods_honours_budgets_and_eviction_filters() -> None:
    async def scenario(cluster: SimCluster) -> None:
        node = "gpu-worker-001"
        for name in ("web-0", "web-1"):
            cluster.create("pod", pod(name, node, labels={"app": "web"}, gpus=1))
        cluster.create("pod", pod("train", node, labels={"app": "train"}, gpus=1))
        cluster.create("pod", pod("cpu-only", node, labels={"app": "cpu"}))
        cluster.create("pod", pod("batch", node, labels={"app": "batch"}))
        budget = {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
        }
        cluster.create("pdb", budget)
        assert await cluster.wait_until(
            lambda: all(p["status"].get("phase") == "Running" for p in cluster.pods("default")), sim_seconds=60
        )
        request(
            cluster,
            "drain",
            node,
            "gpufleet.upgrade",
            waitForPodCompletion={"podSelector": "app=batch"},
            drainSpec={
                "force": True,
                "timeoutSeconds": 0,
                "podEvictionFilters": [{"byResourceNameRegex": "nvidia.com/gpu"}],
            },
        )
        assert await cluster.wait_until(lambda: phase(cluster, "drain") == mo.WAIT_FOR_POD_COMPLETION, sim_seconds=60)
        await cluster.run_for(60, step=5)
        nm = get(cluster, "drain")
        assert nm is not None and nm["status"]["waitForCompletion"] == ["default/batch"]
        assert phase(cluster, "drain") == mo.WAIT_FOR_POD_COMPLETION
        cluster.store.delete(cluster.kinds.pod, "default", "batch")
        assert await cluster.wait_until(lambda: phase(cluster, "drain") == mo.DRAINING, sim_seconds=60)
        # The unprotected GPU pod goes; the budget holds both web pods; the CPU-only pod is not selected.
        assert await cluster.wait_until(lambda: cluster.pod("default", "train") is None, sim_seconds=60)
        await cluster.run_for(120, step=5)
        assert phase(cluster, "drain") == mo.DRAINING
        status = (get(cluster, "drain") or {})["status"]["drain"]
        assert sorted(status["waitForEviction"]) == ["default/web-0", "default/web-1"]
        assert status["evictionPods"] == 3 and status["drainProgress"] == 33
        assert cluster.pod("default", "web-0") is not None and cluster.pod("default", "web-1") is not None
        # The budget allows disruptions again: the drain finishes.
        live = copy.deepcopy(cluster.store.get(cluster.kinds.pdb, "default", "web"))
        live["spec"]["minAvailable"] = 0
        cluster.store.update(cluster.kinds.pdb, live)
        assert await cluster.wait_until(lambda: phase(cluster, "drain") == mo.READY, sim_seconds=120)
        assert cluster.pod("default", "web-0") is None and cluster.pod("default", "web-1") is None
        assert cluster.pod("default", "cpu-only") is not None
        done = (get(cluster, "drain") or {})["status"]["drain"]
        assert done["drainProgress"] == 100 and not done.get("waitForEviction")

    run(scenario, nodes=1)


def test_drain_without_force_refuses_unmanaged_pods_and_keeps_draining() -> None:
    async def scenario(cluster: SimCluster) -> None:
        node = "gpu-worker-001"
        cluster.create("pod", pod("loose", node, labels={"app": "loose"}, gpus=1))
        request(cluster, "drain", node, "gpufleet.upgrade", drainSpec={"timeoutSeconds": 30})
        assert await cluster.wait_until(lambda: phase(cluster, "drain") == mo.DRAINING, sim_seconds=60)
        await cluster.run_for(120, step=5)
        assert phase(cluster, "drain") == mo.DRAINING
        assert cluster.pod("default", "loose") is not None
        # Deleting the request mid-drain uncordons the node and removes the finalizer.
        delete(cluster, "drain")
        assert await cluster.wait_until(lambda: get(cluster, "drain") is None, sim_seconds=30)
        assert not cordoned(cluster, node)

    run(scenario, nodes=1)


def test_schedule_is_pure_and_counts_percentages_as_upstream() -> None:
    def node(name: str, *, unschedulable: bool = False) -> Obj:
        return {"metadata": {"name": name}, "spec": {"unschedulable": unschedulable}, "status": {}}

    def nm(name: str, node_name: str, requestor: str, reason: str = mo.PENDING) -> Obj:
        conditions = [{"type": "Ready", "reason": reason}]
        return {
            "metadata": {"name": name, "namespace": "default", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeName": node_name, "requestorID": requestor},
            "status": {"conditions": conditions},
        }

    nodes = [node(f"n{i}") for i in range(10)]
    # Example 1 of the upstream README: maxParallelOperations 2 of 5 pending requests.
    pending = [nm(f"r{i}", f"n{i}", "a") for i in range(5)]
    assert len(mo.schedule(nodes, pending, max_parallel=2, max_unavailable=5)) == 2
    # Example 2: 2 nodes already unavailable, maxUnavailable 3: one more.
    nodes[8]["spec"]["unschedulable"] = nodes[9]["spec"]["unschedulable"] = True
    assert len(mo.schedule(nodes, pending[:3], max_parallel=5, max_unavailable=3)) == 1
    # Percentages: maxParallelOperations rounds up (10% of 10 = 1), maxUnavailable rounds down (25% = 2).
    assert len(mo.schedule(nodes, pending, max_parallel="10%", max_unavailable=None)) == 1
    assert mo.schedule(nodes, pending, max_parallel=5, max_unavailable="25%") == []
    # A requestor already in progress is preferred over an older one with fewer pending.
    busy = [nm("running", "n7", "b", reason=mo.DRAINING), nm("b1", "n5", "b"), nm("a1", "n6", "a")]
    chosen = mo.schedule(nodes, busy, max_parallel=2, max_unavailable=None)
    assert [c["metadata"]["name"] for c in chosen] == ["b1"]


def test_scenario_key_turns_it_on_with_a_config() -> None:
    scenario = parse_scenario({"maintenance_operator": {"maxParallelOperations": "50%", "maxUnavailable": 1}})
    assert scenario.maintenance_operator == {"maxParallelOperations": "50%", "maxUnavailable": 1}
    assert parse_scenario({"maintenance_operator": True}).maintenance_operator == {}
    assert parse_scenario({}).maintenance_operator is None
    with pytest.raises(ScenarioError, match="unknown keys"):
        parse_scenario({"maintenance_operator": {"maxParallel": 2}})

    async def scenario_run() -> None:
        cluster = make_cluster(nodes=1)
        assert cluster.twin.registry.get(mo.GROUP, "nodemaintenances") is None  # off by default
        mo.install(cluster.twin, config={"maxParallelOperations": 2})
        config = cluster.store.get(rtype(cluster, "maintenanceoperatorconfigs"), mo.NAMESPACE, mo.CONFIG_NAME)
        # The CRD's defaults apply to what the scenario left out.
        assert config["spec"] == {"maxParallelOperations": 2, "maxNodeMaintenanceTimeSeconds": 3600, "logLevel": "info"}

    asyncio.run(scenario_run())
