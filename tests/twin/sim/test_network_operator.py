"""The twin's Network Operator (operators/network_operator.py): MOFED DaemonSets, driver reloads, OFED upgrades.

In-process clusters are built with ``build.populate`` (the same path ``serve`` takes) on a fast
simulated clock; one test drives ``python -m gpufleet_twin serve`` with kubectl.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gpufleet_twin.apiserver.cluster import Twin
from gpufleet_twin.apiserver.server import install_api_machinery, install_crds, load_crd_manifests, own_crds_directory
from gpufleet_twin.harness.build import populate
from gpufleet_twin.kube.podutil import MULTUS_NETWORKS_ANNOTATION
from gpufleet_twin.kube.state import SimState
from gpufleet_twin.machinery.clock import SimClock
from gpufleet_twin.machinery.kinds import Kinds
from gpufleet_twin.machinery.registry import Registry, ResourceType
from gpufleet_twin.machinery.store import Store
from gpufleet_twin.operators import network_operator as netop
from gpufleet_twin.operators import upgrade_model as um

Obj = dict[str, Any]

TIME_SCALE = 3000.0
LOAD_SLACK = 4.0
NEW_MOFED = "24.10-0.7.0.0"
STATE = um.OFED_DRIVER.state_label


@dataclass
class PlatformCluster:
    """A twin populated as ``serve`` does, with the controllers run by ``run``."""

    twin: Twin
    sim: SimState
    kinds: Kinds

    @property
    def store(self) -> Store:
        return self.twin.store

    def rtype(self, group: str, plural: str) -> ResourceType:
        rtype = self.twin.registry.get(group, plural)
        assert rtype is not None, f"{plural}.{group} is not registered"
        return rtype

    def workers(self) -> list[str]:
        return sorted(n for n in self.sim.nodes if n.startswith("gpu-worker-"))

    def node(self, name: str) -> Obj:
        return self.store.get(self.kinds.node, None, name)

    def mofed_pods(self) -> dict[str, Obj]:
        pods = self.store.list(
            self.kinds.pod, netop.NAMESPACE, lambda p: netop.OFED_LABEL in (p["metadata"].get("labels") or {})
        )
        return {p["spec"].get("nodeName", ""): p for p in pods if not p["metadata"].get("deletionTimestamp")}

    def run(self, scenario: Callable[[PlatformCluster], Awaitable[None]]) -> None:
        async def main() -> None:
            self.twin.start_controllers()
            try:
                await asyncio.wait_for(scenario(self), timeout=90)
            finally:
                await self.twin.stop_controllers()

        asyncio.run(main())

    async def wait_until(self, condition: Callable[[], bool], *, sim_seconds: float, what: str) -> None:
        # At 3000 simulated seconds per real second, a loaded 2-core machine's
        # event-loop latency alone is minutes of simulated time: allow slack
        # (the scenario's real-time bound in run() still ends a hung test).
        deadline = self.twin.clock.now() + sim_seconds * LOAD_SLACK
        while not condition():
            assert self.twin.clock.now() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.01)


def make_platform_cluster(*, nodes: int = 3, profile: str = "kubernetes", workloads: bool = False) -> PlatformCluster:
    clock = SimClock(time_scale=TIME_SCALE, start=1_760_000_000.0)
    registry = Registry()
    twin = Twin(registry=registry, store=Store(registry, clock), clock=clock)
    install_api_machinery(twin)
    install_crds(twin, load_crd_manifests(own_crds_directory()))
    populate(twin, {"nodes": nodes, "profile": profile})
    assert isinstance(twin.sim, SimState)
    cluster = PlatformCluster(twin=twin, sim=twin.sim, kinds=Kinds.from_registry(registry))
    if not workloads:
        for namespace in ("ml-training", "ml-batch", "ml-inference"):
            for kind in (cluster.kinds.deployment, cluster.kinds.job):
                for obj in cluster.store.list(kind, namespace):
                    cluster.store.delete(kind, namespace, obj["metadata"]["name"])
    return cluster


def secondary_network_pod(name: str, node: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"app": name},
            "annotations": {MULTUS_NETWORKS_ANNOTATION: '[{"name": "ib-sriov-net"}]'},
        },
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "registry.example/ml:1"}]},
    }


def patch_ofed(cluster: PlatformCluster, change: Callable[[Obj], None]) -> None:
    policy_type = cluster.rtype(netop.GROUP, netop.NIC_POLICY_PLURAL)
    cluster.store.mutate(policy_type, None, netop.NIC_POLICY_NAME, lambda p: change(p["spec"]["ofedDriver"]))


# -- pure rendering --------------------------------------------------------------------------------------
def test_mofed_image_round_trips_the_version() -> None:
    ofed = {"repository": "nvcr.io/nvidia/mellanox", "image": "doca-driver", "version": "24.07-0.6.1.0"}
    image = netop.mofed_image(ofed, "rhcos4.16")
    assert image == "nvcr.io/nvidia/mellanox/doca-driver:24.07-0.6.1.0-rhcos4.16-amd64"
    assert netop.mofed_version_of_image(image) == "24.07-0.6.1.0"


async def reload_to_new_mofed(c: PlatformCluster, node: str) -> None:
    """Once the node's MOFED pod runs: the policy names NEW_MOFED, and the node's pod is deleted (OnDelete)."""
    await c.wait_until(
        lambda: (c.mofed_pods().get(node, {}).get("status") or {}).get("phase") == "Running",
        sim_seconds=900,
        what="MOFED ready",
    )
    patch_ofed(c, lambda ofed: ofed.update(version=NEW_MOFED))
    await asyncio.sleep(0.05)  # the operator renders the new template
    c.store.delete(c.kinds.pod, netop.NAMESPACE, c.mofed_pods()[node]["metadata"]["name"])


def new_mofed_restarts(c: PlatformCluster, node: str) -> int:
    """Restarts of the node's MOFED pod once it runs NEW_MOFED (0 before)."""
    pod = c.mofed_pods().get(node)
    if pod is None or netop.mofed_version_of_pod(pod) != NEW_MOFED:
        return 0
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return max((s.get("restartCount", 0) for s in statuses), default=0)


def test_openshift_renders_one_mofed_daemonset_per_rhcos() -> None:
    policy = netop.default_nic_cluster_policy(release=netop.NetworkOperatorRelease(), mofed_version="24.07-0.6.1.0")
    policy["metadata"]["uid"] = "u1"
    base = {
        netop.MELLANOX_PRESENT_LABEL: "true",
        "feature.node.kubernetes.io/system-os_release.ID": "rhcos",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "4.16",
    }
    nodes = {
        "a": {**base, "feature.node.kubernetes.io/system-os_release.OSTREE_VERSION": "416.94.1-0"},
        "b": {**base, "feature.node.kubernetes.io/system-os_release.OSTREE_VERSION": "416.94.2-0"},
        "c": {"feature.node.kubernetes.io/system-os_release.ID": "rhcos"},  # no Mellanox NIC
    }
    daemonsets = netop.render_mofed_daemonsets(policy, node_labels=nodes, openshift=True)
    assert [ds["metadata"]["name"] for ds in daemonsets] == [
        "mofed-rhcos4.16-416.94.1-0-ds",
        "mofed-rhcos4.16-416.94.2-0-ds",
    ]
    template = daemonsets[0]["spec"]["template"]
    assert daemonsets[0]["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert template["metadata"]["labels"]["app"] == "mofed-rhcos4.16"
    assert netop.OFED_LABEL in template["metadata"]["labels"]
    assert template["spec"]["nodeSelector"]["feature.node.kubernetes.io/system-os_release.OSTREE_VERSION"] == (
        "416.94.1-0"
    )


# -- in-process ------------------------------------------------------------------------------------------------
def test_install_seeds_policy_deployment_and_mofed_pods() -> None:
    cluster = make_platform_cluster(nodes=2)

    async def scenario(c: PlatformCluster) -> None:
        await c.wait_until(lambda: set(c.mofed_pods()) >= set(c.workers()), sim_seconds=900, what="MOFED pods")

    cluster.run(scenario)
    policy = cluster.store.get(cluster.rtype(netop.GROUP, netop.NIC_POLICY_PLURAL), None, netop.NIC_POLICY_NAME)
    assert policy["spec"]["ofedDriver"]["version"] == "24.07-0.6.1.0"
    assert policy["spec"]["ofedDriver"]["upgradePolicy"]["drain"]["enable"] is True
    deployment = cluster.store.get(cluster.kinds.deployment, netop.NAMESPACE, netop.OPERATOR_DEPLOYMENT)
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":v24.7.0")
    pod = cluster.mofed_pods()[cluster.workers()[0]]
    assert pod["metadata"]["labels"]["app"] == "mofed-ubuntu22.04"


def test_deleted_mofed_pod_reloads_the_driver_and_disrupts_secondary_network_pods() -> None:
    cluster = make_platform_cluster(nodes=2)
    target = cluster.workers()[0]

    async def scenario(c: PlatformCluster) -> None:
        await c.wait_until(lambda: target in c.mofed_pods(), sim_seconds=900, what="MOFED pod")
        c.store.create(c.kinds.pod, secondary_network_pod("rdma-job", target))
        await c.wait_until(
            lambda: (c.store.get(c.kinds.pod, "default", "rdma-job").get("status") or {}).get("phase") == "Running",
            sim_seconds=900,
            what="workload running",
        )
        await c.wait_until(
            lambda: (c.mofed_pods()[target].get("status") or {}).get("phase") == "Running",
            sim_seconds=900,
            what="MOFED ready",
        )
        old = c.mofed_pods()[target]
        c.store.delete(c.kinds.pod, netop.NAMESPACE, old["metadata"]["name"])
        await c.wait_until(lambda: not c.sim.nodes[target].secondary_network_up, sim_seconds=300, what="net down")
        assert c.sim.nodes[target].mofed_version is None
        assert c.sim.nodes[c.workers()[1]].secondary_network_up  # only that node
        down_at = c.twin.clock.now()
        await c.wait_until(lambda: c.sim.nodes[target].secondary_network_up, sim_seconds=600, what="reload")
        assert (
            c.twin.clock.now() - down_at >= netop.NetworkOperatorTimings().mofed_reload / 2
        )  # observed late under load
        assert c.sim.nodes[target].mofed_version == "24.07-0.6.1.0"

    cluster.run(scenario)
    disrupted = cluster.sim.recorder.report()["disrupted_pods"]
    entries = [d for d in disrupted if d["name"] == "rdma-job"]
    assert entries and entries[0]["node"] == target
    assert "secondary network" in entries[0]["why"]


def test_mofed_without_a_build_for_the_kernel_crash_loops_and_keeps_the_network_down() -> None:
    cluster = make_platform_cluster(nodes=2)
    target = cluster.workers()[0]
    cluster.sim.mofed_builds[NEW_MOFED] = {"5.15.0-1-other"}

    async def scenario(c: PlatformCluster) -> None:
        await reload_to_new_mofed(c, target)
        await c.wait_until(lambda: new_mofed_restarts(c, target) >= 1, sim_seconds=900, what="crash loop")
        assert not c.sim.nodes[target].secondary_network_up
        assert c.sim.nodes[target].mofed_version is None
        # The container installs at each start: once a package for the kernel exists, a restart of the same
        # pod loads the driver (nobody deletes it).
        pod = c.mofed_pods()[target]["metadata"]["uid"]
        c.sim.mofed_builds.pop(NEW_MOFED)
        await c.wait_until(lambda: c.sim.nodes[target].secondary_network_up, sim_seconds=1800, what="recovered")
        assert c.sim.nodes[target].mofed_version == NEW_MOFED
        assert c.mofed_pods()[target]["metadata"]["uid"] == pod

    cluster.run(scenario)


def test_storage_modules_without_unload_crash_loop_until_the_policy_unloads_them() -> None:
    cluster = make_platform_cluster(nodes=2)
    target = cluster.workers()[0]

    def label(node: Obj) -> None:
        node["metadata"].setdefault("labels", {})[netop.STORAGE_MODULES_LABEL] = "true"

    cluster.store.mutate(cluster.kinds.node, None, target, label)

    async def scenario(c: PlatformCluster) -> None:
        await reload_to_new_mofed(c, target)
        await c.wait_until(lambda: new_mofed_restarts(c, target) >= 1, sim_seconds=1800, what="crash loop")
        pod = c.mofed_pods()[target]
        assert "UNLOAD_STORAGE_MODULES" in json.dumps(pod["status"]), pod["status"]
        assert not c.sim.nodes[target].secondary_network_up

        # The fix: spec.ofedDriver.env UNLOAD_STORAGE_MODULES=true; the next pod reloads.
        patch_ofed(c, lambda ofed: ofed.update(env=[{"name": "UNLOAD_STORAGE_MODULES", "value": "true"}]))
        c.store.delete(c.kinds.pod, netop.NAMESPACE, pod["metadata"]["name"])
        await c.wait_until(lambda: c.sim.nodes[target].mofed_version == NEW_MOFED, sim_seconds=1800, what="reload")
        assert c.sim.nodes[target].secondary_network_up

    cluster.run(scenario)


def test_auto_upgrade_respects_max_parallel_upgrades() -> None:
    cluster = make_platform_cluster(nodes=4)
    in_progress_seen: list[int] = []

    def track(event: Any) -> None:
        if event.rtype.key != cluster.kinds.node.key:
            return
        states = [
            (n["metadata"].get("labels") or {}).get(STATE, "")
            for n in cluster.store.list(cluster.kinds.node)
            if n["metadata"]["name"].startswith("gpu-worker-")
        ]
        in_progress_seen.append(sum(1 for s in states if s not in um.NOT_IN_PROGRESS_STATES))

    async def scenario(c: PlatformCluster) -> None:
        await c.wait_until(
            lambda: (
                all((p.get("status") or {}).get("phase") == "Running" for p in c.mofed_pods().values())
                and len(c.mofed_pods()) >= 4
            ),
            sim_seconds=900,
            what="MOFED running",
        )
        c.store.add_listener(track)
        patch_ofed(
            c,
            lambda ofed: (
                ofed.update(version=NEW_MOFED),
                ofed["upgradePolicy"].update(autoUpgrade=True, maxParallelUpgrades=2),
            ),
        )

        def all_done() -> bool:
            return all(
                (c.node(n)["metadata"].get("labels") or {}).get(STATE) == um.STATE_DONE
                and c.sim.nodes[n].mofed_version == NEW_MOFED
                for n in c.workers()
            )

        await c.wait_until(all_done, sim_seconds=20_000, what="every node upgraded")
        assert not any(c.node(n)["spec"].get("unschedulable") for n in c.workers())

    cluster.run(scenario)
    assert max(in_progress_seen) == 2
    assert cluster.sim.nodes[cluster.workers()[0]].secondary_network_up


# -- over HTTP -------------------------------------------------------------------------------------------------
def test_served_twin_reloads_mofed_with_kubectl(tmp_path: pathlib.Path) -> None:
    from gpufleet_twin.process import start_twin

    twin = start_twin(nodes=2, profile="openshift", time_scale=1500, workdir=tmp_path)
    kubectl = ["kubectl", "--kubeconfig", str(twin.kubeconfig)]
    try:

        def get(*args: str) -> Obj:
            out = subprocess.run(
                [*kubectl, "get", *args, "-o", "json"], check=False, capture_output=True, text=True, timeout=30
            )
            assert out.returncode == 0, out.stderr
            return json.loads(out.stdout)

        policy = get("nicclusterpolicies.mellanox.com", netop.NIC_POLICY_NAME)
        assert policy["spec"]["ofedDriver"]["upgradePolicy"]["maxParallelUpgrades"] == 1
        csvs = get("csv", "-n", netop.NAMESPACE)["items"]
        assert [c["spec"]["version"] for c in csvs] == ["24.7.0"]
        deadline = time.monotonic() + 40
        while True:
            pods = get("pods", "-n", netop.NAMESPACE, "-l", "nvidia.com/ofed-driver")["items"]
            running = [p for p in pods if p["status"].get("phase") == "Running"]
            if len(running) == 2:
                break
            assert time.monotonic() < deadline, "MOFED pods did not start"
            time.sleep(0.3)
        assert all(p["metadata"]["labels"]["app"] == "mofed-rhcos4.16" for p in running)
        victim = running[0]
        node = victim["spec"]["nodeName"]
        workload = secondary_network_pod("rdma-probe", node)
        created = subprocess.run(
            [*kubectl, "create", "-f", "-"],
            check=False,
            input=json.dumps(workload),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert created.returncode == 0, created.stderr
        deadline = time.monotonic() + 40
        while get("pod", "rdma-probe")["status"].get("phase") != "Running":
            assert time.monotonic() < deadline, f"the probe pod did not start: {get('pod', 'rdma-probe')['status']}"
            time.sleep(0.3)
        out = subprocess.run(
            [*kubectl, "delete", "pod", "-n", netop.NAMESPACE, victim["metadata"]["name"]],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 0, out.stderr
        deadline = time.monotonic() + 40
        while True:
            disrupted = [d for d in twin.report()["disrupted_pods"] if d["name"] == "rdma-probe"]
            if any("secondary network" in d["why"] and d["node"] == node for d in disrupted):
                break
            assert time.monotonic() < deadline, "no secondary-network pod was disrupted"
            time.sleep(0.3)
    finally:
        assert twin.stop() == 0
