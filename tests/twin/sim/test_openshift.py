"""The twin's OpenShift profile (operators/openshift.py): MachineConfigPools and the ClusterVersion update."""

from __future__ import annotations

from typing import Any

import pytest
from test_network_operator import PlatformCluster, make_platform_cluster

from gpufleet_twin.operators import openshift as ocp

Obj = dict[str, Any]
TARGET = "4.17.3"


def pool(c: PlatformCluster, name: str) -> Obj:
    return c.store.get(c.rtype(ocp.MC_GROUP, "machineconfigpools"), None, name)


def cluster_version(c: PlatformCluster) -> Obj:
    return c.store.get(c.rtype(ocp.CONFIG_GROUP, "clusterversions"), None, ocp.CLUSTER_VERSION_NAME)


def condition(obj: Obj, kind: str) -> str:
    return next((x["status"] for x in obj.get("status", {}).get("conditions", []) if x["type"] == kind), "")


def test_rhcos_table_gives_new_kernels_per_release() -> None:
    assert ocp.rhcos_for("4.17.3").ostree.startswith("417.94.")
    assert ocp.rhcos_for("4.17.99").ostree.startswith("417.94.")
    assert ocp.rhcos_for("4.17.3").kernel != ocp.rhcos_for("4.16.20").kernel
    assert ocp.rendered_name("worker", ocp.rhcos_for("4.17.3")).startswith("rendered-worker-")


# pkg/controller/node maxUnavailable(): unset is 1; a percent of the pool's nodes is rounded down, 0 becomes 1.
@pytest.mark.parametrize(("max_unavailable", "at_once"), [(None, 1), ("50%", 1), ("67%", 2), ("10%", 1)])
def test_paused_pool_holds_during_the_cluster_update_and_unpausing_rolls_within_max_unavailable(
    max_unavailable: str | None, at_once: int
) -> None:
    cluster = make_platform_cluster(nodes=3, profile="openshift")
    new_kernel = ocp.rhcos_for(TARGET).kernel
    cluster.sim.kernels_without_driver_build.add(new_kernel)
    max_cordoned: list[int] = []

    def track(event: Any) -> None:
        if event.rtype.key == cluster.kinds.node.key:
            max_cordoned.append(
                sum(1 for n in cluster.store.list(cluster.kinds.node) if n["spec"].get("unschedulable"))
            )

    async def scenario(c: PlatformCluster) -> None:
        pools = c.rtype(ocp.MC_GROUP, "machineconfigpools")
        await c.wait_until(lambda: condition(pool(c, "worker"), "Updated") == "True", sim_seconds=600, what="pool")
        assert pool(c, "worker")["status"]["machineCount"] == 3
        assert pool(c, "master")["status"]["machineCount"] == 3
        c.store.mutate(pools, None, "worker", lambda p: p["spec"].update(paused=True))
        cv_type = c.rtype(ocp.CONFIG_GROUP, "clusterversions")
        c.store.mutate(cv_type, None, "version", lambda cv: cv["spec"].update(desiredUpdate={"version": TARGET}))
        await c.wait_until(
            lambda: cluster_version(c)["status"]["history"][0].get("state") == "Partial", sim_seconds=900, what="start"
        )
        assert condition(cluster_version(c), "Progressing") == "True"
        await c.wait_until(
            lambda: cluster_version(c)["status"]["history"][0].get("state") == "Completed",
            sim_seconds=20_000,
            what="control plane updated",
        )
        history = cluster_version(c)["status"]["history"]
        assert [h["version"] for h in history] == [TARGET, ocp.SEED_OPENSHIFT_VERSION]
        assert history[0]["completionTime"] >= history[0]["startedTime"]
        assert c.sim.nodes["master-0"].ostree_version == ocp.rhcos_for(TARGET).ostree
        workers = c.workers()
        assert all(c.sim.nodes[w].ostree_version != ocp.rhcos_for(TARGET).ostree for w in workers)  # paused holds
        worker_pool = pool(c, "worker")
        assert condition(worker_pool, "Updated") == "False"
        assert worker_pool["status"]["updatedMachineCount"] == 0
        c.store.add_listener(track)
        wanted = {"paused": False} if max_unavailable is None else {"paused": False, "maxUnavailable": max_unavailable}
        c.store.mutate(pools, None, "worker", lambda p: p["spec"].update(wanted))
        await c.wait_until(
            lambda: condition(pool(c, "worker"), "Updated") == "True", sim_seconds=20_000, what="workers updated"
        )
        assert all(c.sim.nodes[w].kernel == new_kernel for w in workers)
        node = c.node(workers[0])
        assert node["metadata"]["annotations"][ocp.CURRENT_CONFIG] == pool(c, "worker")["spec"]["configuration"]["name"]
        assert node["status"]["nodeInfo"]["kernelVersion"] == new_kernel
        # No GPU driver builds for the new kernel: the node comes back without GPUs.
        await c.wait_until(
            lambda: c.node(workers[0])["status"]["allocatable"].get("nvidia.com/gpu") == "0",
            sim_seconds=2_000,
            what="GPUs gone",
        )

    cluster.run(scenario)
    assert max(max_cordoned) == at_once


def test_failing_node_degrades_its_pool() -> None:
    cluster = make_platform_cluster(nodes=2, profile="openshift")
    bad = cluster.workers()[0]
    cluster.sim.machine_config_failures[bad] = "failed to apply OS update: rpm-ostree exited 1"

    async def scenario(c: PlatformCluster) -> None:
        cv_type = c.rtype(ocp.CONFIG_GROUP, "clusterversions")
        c.store.mutate(cv_type, None, "version", lambda cv: cv["spec"].update(desiredUpdate={"version": TARGET}))
        await c.wait_until(
            lambda: condition(pool(c, "worker"), "Degraded") == "True", sim_seconds=20_000, what="degraded"
        )
        status = pool(c, "worker")["status"]
        assert status["degradedMachineCount"] == 1
        annotations = c.node(bad)["metadata"]["annotations"]
        assert annotations[ocp.MCD_STATE] == "Degraded"
        assert "rpm-ostree" in annotations[ocp.MCD_REASON]
        assert condition(pool(c, "worker"), "NodeDegraded") == "True"

    cluster.run(scenario)


def test_a_node_moved_into_a_custom_pool_degrades_under_the_fault_and_a_paused_pool_keeps_its_node_behind() -> None:
    cluster = make_platform_cluster(nodes=3, profile="openshift")
    bad, held = cluster.workers()[0], cluster.workers()[1]
    cluster.sim.machine_config_failures[bad] = "unexpected on-disk state validating against rendered-gpu-bad"

    async def scenario(c: PlatformCluster) -> None:
        pools = c.rtype(ocp.MC_GROUP, "machineconfigpools")
        await c.wait_until(lambda: condition(pool(c, "worker"), "Updated") == "True", sim_seconds=600, what="pool")
        for name, node, paused in (("gpu-bad", bad, False), ("gpu-held", held, True)):
            c.store.create(
                pools,
                {
                    "apiVersion": f"{ocp.MC_GROUP}/v1",
                    "kind": "MachineConfigPool",
                    "metadata": {"name": name},
                    "spec": {"paused": paused, "nodeSelector": {"matchLabels": {"pool": name}}},
                },
            )
            c.store.mutate(c.kinds.node, None, node, lambda n, name=name: n["metadata"]["labels"].update(pool=name))
        await c.wait_until(
            lambda: condition(pool(c, "gpu-bad"), "Degraded") == "True", sim_seconds=600, what="gpu-bad Degraded"
        )
        annotations = c.node(bad)["metadata"]["annotations"]
        assert annotations[ocp.MCD_STATE] == "Degraded"
        assert "unexpected on-disk state" in annotations[ocp.MCD_REASON]
        target = pool(c, "gpu-held")["spec"]["configuration"]["name"]
        assert target.startswith("rendered-gpu-held-")
        assert c.node(held)["metadata"]["annotations"][ocp.CURRENT_CONFIG] != target  # paused: left behind
        c.store.mutate(pools, None, "gpu-held", lambda p: p["spec"].update(paused=False))
        await c.wait_until(
            lambda: c.node(held)["metadata"]["annotations"][ocp.CURRENT_CONFIG] == target,
            sim_seconds=600,
            what="the unpaused pool's node to take its config",
        )

    cluster.run(scenario)
