"""The twin's GPU Operator (operators/gpu_operator.py), in-process against the store and the simulated
kubelet, scheduler and workload controllers, on a fast simulated clock.

Each test seeds a small GPU cluster, lets the controllers run for a bounded
real time, and asserts on the API objects (node labels, DaemonSets, pods,
Events) the way a client of the real cluster would see them.
"""

from __future__ import annotations

import asyncio
import copy
import json
import pathlib
import subprocess
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpufleet_twin.apiserver.cluster import Twin
from gpufleet_twin.apiserver.server import install_api_machinery
from gpufleet_twin.harness.build import install_core
from gpufleet_twin.harness.seed import SeedSpec, seed_cluster
from gpufleet_twin.kube import nodelabels, podutil
from gpufleet_twin.kube.state import SimState
from gpufleet_twin.machinery import crd_schema
from gpufleet_twin.machinery.clock import SimClock
from gpufleet_twin.machinery.kinds import Kinds
from gpufleet_twin.machinery.registry import Registry, ResourceType
from gpufleet_twin.machinery.store import Store, WatchEvent
from gpufleet_twin.operators import gpu_operator as gop
from gpufleet_twin.operators import upgrade_apply
from gpufleet_twin.operators import upgrade_model as um

Obj = dict[str, Any]

OLD_DRIVER = "550.127.05"  # what the seeder loads on the workers
NEW_DRIVER = "560.35.03"
KERNEL = "5.15.0-124-generic"  # the seeder's Ubuntu 22.04 kernel
UNBUILDABLE_KERNEL = "5.15.0-999-generic"
OSTREE = "416.94.202410211619-0"
STATE = um.GPU_DRIVER.state_label
TIME_SCALE = 2000.0  # simulated seconds per real second
REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]


# -- a small cluster -----------------------------------------------------------------------------------
def install_gpu_crds(twin: Twin) -> None:
    """ClusterPolicy and NVIDIADriver: the twin's own CRDs, else the upstream ones, created through the API."""
    crd_type = twin.registry.get("apiextensions.k8s.io", "customresourcedefinitions")
    assert crd_type is not None
    for folder in (
        REPO_ROOT / "twin" / "src" / "gpufleet_twin" / "crds",
        REPO_ROOT.parent / "shared" / "reference" / "crds",
    ):
        manifests = sorted(folder.glob("*.yaml")) if folder.is_dir() else []
        crds = [crd for path in manifests for crd in crd_schema.crds_from_yaml(path.read_text())]
        wanted = [crd for crd in crds if crd["spec"]["group"] == "nvidia.com"]
        if {crd["spec"]["names"]["plural"] for crd in wanted} >= {"clusterpolicies", "nvidiadrivers"}:
            for crd in wanted:
                twin.store.create(crd_type, crd)
            return
    pytest.skip("no ClusterPolicy/NVIDIADriver CRDs found (twin/src/gpufleet_twin/crds or ../shared/reference/crds)")


@dataclass
class Cluster:
    twin: Twin
    sim: SimState
    kinds: Kinds
    operator: gop.GpuOperator
    policy_type: ResourceType
    driver_type: ResourceType
    # Largest number of GPU nodes that were unavailable (cordoned or NotReady) at once.
    max_unavailable_seen: int = 0
    unavailable: set[str] = field(default_factory=set)

    @property
    def store(self) -> Store:
        return self.twin.store

    def nodes(self) -> list[Obj]:
        return [n for n in self.store.list(self.kinds.node) if n["metadata"]["name"].startswith("gpu-worker-")]

    def node(self, name: str) -> Obj:
        return self.store.get(self.kinds.node, None, name)

    def state_of(self, name: str) -> str:
        return (self.node(name)["metadata"].get("labels") or {}).get(STATE, "")

    def driver_pods(self) -> dict[str, Obj]:
        pods = self.store.list(
            self.kinds.pod,
            self.operator.namespace,
            lambda p: (p["metadata"].get("labels") or {}).get(gop.COMPONENT_LABEL) == gop.DRIVER_COMPONENT,
        )
        return {p["spec"].get("nodeName", ""): p for p in pods if not p["metadata"].get("deletionTimestamp")}

    def driver_image(self, node_name: str) -> str:
        """The driver image of the node's live driver pod ("" while it has none)."""
        pod = self.driver_pods().get(node_name)
        if pod is None:
            return ""
        return next(c["image"] for c in pod["spec"]["containers"] if c["name"] == "nvidia-driver-ctr")

    def policy(self) -> Obj:
        return self.store.get(self.policy_type, None, gop.CLUSTER_POLICY_NAME)

    def patch_policy(self, change: Callable[[Obj], None]) -> None:
        self.store.mutate(self.policy_type, None, gop.CLUSTER_POLICY_NAME, change)

    def events(self, reason: str) -> list[Obj]:
        return [e for e in self.store.list(self.kinds.event) if e.get("reason") == reason]

    def track(self, event: WatchEvent) -> None:
        if event.rtype.key != self.kinds.node.key or not event.obj["metadata"]["name"].startswith("gpu-worker-"):
            return
        name = event.obj["metadata"]["name"]
        ready = all(
            c.get("status") == "True"
            for c in (event.obj.get("status") or {}).get("conditions") or ()
            if c.get("type") == "Ready"
        )
        if event.type != "DELETED" and ((event.obj.get("spec") or {}).get("unschedulable") or not ready):
            self.unavailable.add(name)
        else:
            self.unavailable.discard(name)
        self.max_unavailable_seen = max(self.max_unavailable_seen, len(self.unavailable))


def make_cluster(
    *,
    workers: int = 4,
    profile: str = "kubernetes",
    kernels: dict[int, str] | None = None,
    node_labels: dict[int, dict[str, str]] | None = None,
    cordoned: tuple[int, ...] = (),
    workloads: bool = True,
) -> Cluster:
    """A seeded twin (``seed.seed_cluster``) with the core controllers and the GPU Operator installed.

    Worker ``i`` (0-based here) is ``gpu-worker-00{i+1}``; ``kernels`` and
    ``node_labels`` change single workers after seeding.
    """
    clock = SimClock(time_scale=TIME_SCALE, start=1_760_000_000.0)
    registry = Registry()
    twin = Twin(registry=registry, store=Store(registry, clock), clock=clock)
    install_api_machinery(twin)  # built-in kinds, defaulting, graceful pod deletion, live CRDs
    install_gpu_crds(twin)
    store = twin.store
    types = {plural: _registered(registry, "nvidia.com", plural) for plural in ("clusterpolicies", "nvidiadrivers")}
    sim = SimState(clock=clock, profile=profile, started_at=clock.now())
    spec = SeedSpec(
        nodes=workers,
        profile=profile,
        driver_version=OLD_DRIVER,
        workloads=False,
        cordoned=tuple(worker(i) for i in cordoned),
    )
    seed_cluster(twin, sim, spec)
    kinds = Kinds.from_registry(registry)
    for i, kernel in (kernels or {}).items():
        sim.nodes[worker(i)].kernel = kernel
    for i, labels in (node_labels or {}).items():
        store.mutate(kinds.node, None, worker(i), lambda node, labels=labels: node["metadata"]["labels"].update(labels))
    if store.try_get(kinds.namespace, None, "ml") is None:
        store.create(kinds.namespace, {"metadata": {"name": "ml"}})
    install_core(twin, sim)
    gop.install(twin)
    operator = next(c for c in twin.controllers if isinstance(c, gop.GpuOperator))
    cluster = Cluster(
        twin=twin,
        sim=sim,
        kinds=kinds,
        operator=operator,
        policy_type=types["clusterpolicies"],
        driver_type=types["nvidiadrivers"],
    )
    cluster.unavailable.update(n["metadata"]["name"] for n in cluster.nodes() if n["spec"].get("unschedulable"))
    store.add_listener(cluster.track)
    if workloads:
        add_training(cluster, replicas=workers)
    return cluster


def _registered(registry: Registry, group: str, plural: str) -> ResourceType:
    rtype = registry.get(group, plural)
    assert rtype is not None, f"{plural}.{group} is not registered"
    return rtype


def worker(index: int) -> str:
    return f"gpu-worker-{index + 1:03d}"


def add_training(cluster: Cluster, *, replicas: int) -> None:
    """A GPU training Deployment, one pod per node, guarded by a PodDisruptionBudget."""
    labels = {"app": "trainer"}
    cluster.store.create(
        cluster.kinds.deployment,
        {
            "metadata": {"name": "trainer", "namespace": "ml", "labels": labels},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [
                            {
                                "name": "train",
                                "image": "nvcr.io/nvidia/pytorch:24.09-py3",
                                "resources": {"limits": {"nvidia.com/gpu": 8}, "requests": {"nvidia.com/gpu": 8}},
                            }
                        ]
                    },
                },
            },
        },
    )
    cluster.store.create(
        cluster.kinds.pdb,
        {
            "metadata": {"name": "trainer", "namespace": "ml"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}},
        },
    )


@pytest.fixture
def run() -> Iterator[Callable[[Cluster, Callable[[Cluster], Awaitable[None]]], None]]:
    """Run the twin's controllers around an async scenario, always stopping them."""

    def runner(cluster: Cluster, scenario: Callable[[Cluster], Awaitable[None]]) -> None:
        async def main() -> None:
            cluster.twin.start_controllers()
            try:
                await scenario(cluster)
            finally:
                await cluster.twin.stop_controllers()

        asyncio.run(main())

    yield runner


async def until(check: Callable[[], bool], *, what: str, real_seconds: float = 15.0) -> None:
    """Wait (bounded, real time) until ``check()`` holds."""
    deadline = time.monotonic() + real_seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def settled(cluster: Cluster) -> None:
    """The seeded cluster is up: driver pods Ready on every node, workloads running, ClusterPolicy ready."""

    def ready() -> bool:
        pods = cluster.driver_pods()
        trainers_wanted = cluster.store.try_get(cluster.kinds.deployment, "ml", "trainer") is not None
        trainers = [p for p in cluster.store.list(cluster.kinds.pod, "ml") if _pod_ready(p)]
        return (
            len(pods) == len(cluster.nodes())
            and all(_pod_ready(p) for p in pods.values())
            and (bool(trainers) or not trainers_wanted)
            and (cluster.policy().get("status") or {}).get("state") == "ready"
        )

    await until(ready, what="the seeded cluster to settle")


def _pod_ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


def set_driver_version(version: str) -> Callable[[Obj], None]:
    def change(policy: Obj) -> None:
        policy["spec"]["driver"]["version"] = version

    return change


def set_upgrade_policy(**fields: Any) -> Callable[[Obj], None]:
    def change(policy: Obj) -> None:
        policy["spec"]["driver"]["upgradePolicy"].update(fields)

    return change


# -- seeding ------------------------------------------------------------------------------------------------
def test_install_seeds_operator_policy_and_daemonsets_on_kubernetes() -> None:
    cluster = make_cluster(workloads=False)
    store, kinds = cluster.store, cluster.kinds
    deployment = store.get(kinds.deployment, "gpu-operator", "gpu-operator")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "nvcr.io/nvidia/gpu-operator:v24.9.0"
    policy = cluster.policy()
    driver = policy["spec"]["driver"]
    assert (driver["repository"], driver["image"], driver["version"]) == ("nvcr.io/nvidia", "driver", OLD_DRIVER)
    assert driver["upgradePolicy"]["autoUpgrade"] is True
    assert driver["upgradePolicy"]["maxParallelUpgrades"] == 1
    assert driver["upgradePolicy"]["maxUnavailable"] == "25%"
    assert driver["upgradePolicy"]["drain"]["enable"] is False
    assert policy["spec"]["daemonsets"]["updateStrategy"] == "RollingUpdate"
    assert policy["status"]["state"] == "ready"
    daemonsets = {ds["metadata"]["name"]: ds for ds in store.list(kinds.daemonset, "gpu-operator")}
    assert {"nvidia-driver-daemonset", "nvidia-device-plugin-daemonset", "nvidia-operator-validator"} <= set(daemonsets)
    driver_ds = daemonsets["nvidia-driver-daemonset"]
    assert driver_ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
    template = driver_ds["spec"]["template"]
    assert template["metadata"]["labels"]["app"] == "nvidia-driver-daemonset"
    driver_image = next(c["image"] for c in template["spec"]["containers"] if c["name"] == "nvidia-driver-ctr")
    assert driver_image == f"nvcr.io/nvidia/driver:{OLD_DRIVER}-ubuntu22.04"
    assert (
        daemonsets["nvidia-operator-validator"]["spec"]["template"]["metadata"]["labels"]["app"]
        == "nvidia-operator-validator"
    )
    assert daemonsets["nvidia-device-plugin-daemonset"]["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    # Only seeded when absent: a second install changes nothing.
    version = store.resource_version
    gop.GpuOperator(cluster.twin).seed()
    assert len(store.list(cluster.policy_type)) == 1
    assert (
        store.get(kinds.deployment, "gpu-operator", "gpu-operator")["metadata"]["uid"] == deployment["metadata"]["uid"]
    )
    assert store.resource_version == version


def test_install_on_openshift_seeds_a_csv_and_one_driver_daemonset_per_rhcos() -> None:
    cluster = make_cluster(profile="openshift", workers=2, workloads=False)
    store, kinds = cluster.store, cluster.kinds
    namespace = "nvidia-gpu-operator"
    assert cluster.operator.namespace == namespace
    csv_type = cluster.twin.registry.get("operators.coreos.com", "clusterserviceversions")
    assert csv_type is not None
    csv = store.get(csv_type, namespace, "gpu-operator-certified.v24.9.0")
    assert csv["spec"]["version"] == "24.9.0"
    driver_ds = store.get(kinds.daemonset, namespace, f"nvidia-driver-daemonset-{OSTREE}")
    assert driver_ds["metadata"]["labels"][gop.DTK_LABEL] == "true"
    template = driver_ds["spec"]["template"]
    assert template["spec"]["nodeSelector"][nodelabels.OSTREE_LABEL] == OSTREE
    assert template["metadata"]["labels"]["app"] == f"nvidia-driver-daemonset-{OSTREE}"
    image = next(c["image"] for c in template["spec"]["containers"] if c["name"] == "nvidia-driver-ctr")
    assert image == f"nvcr.io/nvidia/driver:{OLD_DRIVER}-rhcos4.16"
    assert [c["name"] for c in template["spec"]["containers"]] == ["nvidia-driver-ctr", "openshift-driver-toolkit-ctr"]


# -- the driver upgrade -----------------------------------------------------------------------------------------
def test_new_driver_version_rolls_nodes_one_at_a_time_to_upgrade_done(run) -> None:
    cluster = make_cluster(workers=4)

    async def scenario(cluster: Cluster) -> None:
        await settled(cluster)
        cluster.max_unavailable_seen = len(cluster.unavailable)
        cluster.patch_policy(set_driver_version(NEW_DRIVER))
        await until(
            lambda: (
                all(cluster.state_of(n["metadata"]["name"]) == um.STATE_DONE for n in cluster.nodes())
                and all(
                    cluster.driver_image(n["metadata"]["name"]).endswith(f"{NEW_DRIVER}-ubuntu22.04")
                    for n in cluster.nodes()
                )
            ),
            what="every node to finish the upgrade",
        )
        await until(
            lambda: all(cluster.sim.nodes[n["metadata"]["name"]].driver_version == NEW_DRIVER for n in cluster.nodes()),
            what="new driver loaded",
        )

    run(cluster, scenario)
    assert cluster.max_unavailable_seen == 1  # maxParallelUpgrades 1: never two nodes cordoned at once
    assert not any(n["spec"].get("unschedulable") for n in cluster.nodes())
    messages = {e["message"] for e in cluster.events("GPUDriverUpgrade")}
    for state in (
        "upgrade-required",
        "cordon-required",
        "pod-deletion-required",
        "pod-restart-required",
        "upgrade-done",
    ):
        assert f"Successfully updated node state label to {state}" in messages
    assert "Deleted workload pods on the node for the driver upgrade" in messages
    event = cluster.events("GPUDriverUpgrade")[0]
    assert event["involvedObject"]["kind"] == "Node" and event["source"]["component"] == "nvidia-gpu-operator"
    labels = cluster.node("gpu-worker-001")["metadata"]["labels"]
    assert labels["nvidia.com/cuda.driver-version.full"] == NEW_DRIVER  # GFD saw the new driver


def test_a_driver_version_without_repository_and_image_is_refused_and_the_driver_stays(run) -> None:
    """imagePath: a repository or version without all three is an invalid image; state-driver fails before it
    renders, so the ClusterPolicy reports the error and the driver DaemonSet keeps its template."""
    cluster = make_cluster(workers=2, workloads=False)

    def version_only(policy: Obj) -> None:
        driver = policy["spec"]["driver"]
        driver.pop("repository", None)
        driver.pop("image", None)
        driver["version"] = NEW_DRIVER

    async def scenario(cluster: Cluster) -> None:
        await settled(cluster)
        cluster.patch_policy(version_only)
        await until(lambda: cluster.policy()["status"]["state"] == "notReady", what="the ClusterPolicy's error")

    run(cluster, scenario)
    (error,) = [c for c in cluster.policy()["status"]["conditions"] if c["type"] == "Error"]
    assert (error["status"], error["reason"]) == ("True", "ReconcileFailed")
    assert error["message"] == (
        "invalid image specification: repository, image and version must all be set "
        f"(repository=, image=, version={NEW_DRIVER})"
    )
    (daemonset,) = [
        ds
        for ds in cluster.twin.store.list(cluster.kinds.daemonset, "gpu-operator")
        if ds["metadata"]["name"] == gop.DRIVER_APP
    ]
    (container,) = [c for c in daemonset["spec"]["template"]["spec"]["containers"] if c["name"] == "nvidia-driver-ctr"]
    assert container["image"] == f"nvcr.io/nvidia/driver:{OLD_DRIVER}-ubuntu22.04"
    for node in cluster.nodes():
        assert cluster.driver_image(node["metadata"]["name"]).endswith(f"{OLD_DRIVER}-ubuntu22.04")
        assert cluster.sim.nodes[node["metadata"]["name"]].driver_version == OLD_DRIVER


def test_skip_label_holds_a_node_in_upgrade_required(run) -> None:
    cluster = make_cluster(workers=3, node_labels={1: {um.GPU_DRIVER.skip_label: "true"}}, workloads=False)

    async def scenario(cluster: Cluster) -> None:
        await settled(cluster)
        cluster.patch_policy(set_driver_version(NEW_DRIVER))
        await until(
            lambda: all(
                cluster.state_of(name) == um.STATE_DONE and cluster.sim.nodes[name].driver_version == NEW_DRIVER
                for name in ("gpu-worker-001", "gpu-worker-003")
            ),
            what="the nodes without the skip label to upgrade",
        )
        cluster.operator.reconcile_upgrade(cluster.twin.clock.now())

    run(cluster, scenario)
    assert cluster.state_of("gpu-worker-002") == um.STATE_UPGRADE_REQUIRED
    assert cluster.driver_image("gpu-worker-002").endswith(f"{OLD_DRIVER}-ubuntu22.04")
    assert cluster.sim.nodes["gpu-worker-002"].driver_version == OLD_DRIVER


def test_driver_without_a_build_for_the_kernel_fails_and_holds_the_rollout(run) -> None:
    cluster = make_cluster(workers=3, kernels={0: UNBUILDABLE_KERNEL}, workloads=False)
    cluster.sim.driver_builds[NEW_DRIVER] = {KERNEL}  # 560.35.03 builds for the common kernel only

    async def scenario(cluster: Cluster) -> None:
        await settled(cluster)
        cluster.patch_policy(set_driver_version(NEW_DRIVER))
        await until(
            lambda: cluster.state_of("gpu-worker-001") == um.STATE_FAILED, what="the node to fail", real_seconds=20
        )
        # Give the controller a few more requeues: nothing else may start.
        cluster.twin.clock.advance(3 * um.PLANNED_REQUEUE_SECONDS)
        await asyncio.sleep(0.2)

    run(cluster, scenario)
    assert cluster.state_of("gpu-worker-002") == um.STATE_UPGRADE_REQUIRED
    assert cluster.state_of("gpu-worker-003") == um.STATE_UPGRADE_REQUIRED
    failed = cluster.driver_pods()["gpu-worker-001"]
    status = failed["status"]["containerStatuses"][0]
    assert status["restartCount"] > um.DRIVER_POD_RESTART_LIMIT
    assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert UNBUILDABLE_KERNEL in status["lastState"]["terminated"]["message"]
    assert cluster.sim.nodes["gpu-worker-001"].driver_version is None
    assert cluster.sim.nodes["gpu-worker-001"].gpus_allocatable == 0
    assert cluster.node("gpu-worker-001")["spec"].get("unschedulable") is True
    assert cluster.policy()["status"]["state"] == "notReady"


def test_a_gpu_consumer_without_a_request_keeps_the_old_driver_in_use(run) -> None:
    """A runtimeClass-only pod is not evicted by the controller and holds the module: the new driver pod cannot
    unload it (gpu-operator issues 2509, 2570); a node without such a pod upgrades."""
    cluster = make_cluster(workers=2, workloads=False)
    holder = {
        "metadata": {"name": "rc-holder", "namespace": "ml"},
        "spec": {
            "nodeName": "gpu-worker-001",
            "runtimeClassName": "nvidia",
            "containers": [{"name": "main", "image": "registry.example/app:1"}],
        },
    }
    cluster.store.create(cluster.kinds.pod, holder, namespace="ml")

    async def scenario(cluster: Cluster) -> None:
        await settled(cluster)
        cluster.patch_policy(set_upgrade_policy(maxParallelUpgrades=2, maxUnavailable="100%"))
        cluster.patch_policy(set_driver_version(NEW_DRIVER))

        def crash_looping() -> bool:
            pod = cluster.driver_pods().get("gpu-worker-001") or {}
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            return bool(statuses) and statuses[0].get("restartCount", 0) >= 1

        await until(crash_looping, what="the held node's new driver pod to crash", real_seconds=20)
        await until(
            lambda: cluster.state_of("gpu-worker-002") == um.STATE_DONE, what="the free node to finish", real_seconds=20
        )

    run(cluster, scenario)
    assert cluster.operator.driver_held_by("gpu-worker-001") == ["ml/rc-holder"]
    assert cluster.operator.driver_held_by("gpu-worker-002") == []
    status = cluster.driver_pods()["gpu-worker-001"]["status"]["containerStatuses"][0]
    assert status["lastState"]["terminated"]["message"] == gop.DRIVER_IN_USE
    assert cluster.sim.nodes["gpu-worker-001"].driver_version == OLD_DRIVER  # the old module stays loaded
    assert cluster.sim.nodes["gpu-worker-002"].driver_version == NEW_DRIVER


def test_a_pod_whose_dra_claim_holds_an_nvidia_gpu_keeps_the_driver_in_use(run) -> None:
    """A pod with a ResourceClaim allocated a gpu.nvidia.com device holds the module like a runtimeClass pod; a
    claim of another driver, or one not allocated yet, does not."""
    cluster = make_cluster(workers=3, workloads=False)
    claims = cluster.twin.registry.get("resource.k8s.io", "resourceclaims")
    for name, driver in (("gpu", gop.DRA_GPU_DRIVER), ("nic", "net.example.com"), ("pending", "")):
        claim = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "x"}}]}},
        }
        if driver:
            result = {"request": "r", "driver": driver, "pool": "gpu-worker-001", "device": "d0"}
            status = {"allocation": {"devices": {"results": [result]}}}
        created = cluster.store.create(claims, claim, namespace="ml")
        if driver:  # the allocator's write, through the status subresource (create drops status)
            cluster.store.mutate(
                claims, "ml", created["metadata"]["name"], lambda c, s=status: c.update(status=s), subresource="status"
            )
    for index, claim_name in enumerate(("gpu", "nic", "pending"), start=1):
        pod = {
            "metadata": {"name": f"dra-{claim_name}", "namespace": "ml"},
            "spec": {
                "nodeName": f"gpu-worker-00{index}",
                "resourceClaims": [{"name": "c", "resourceClaimName": claim_name}],
                "containers": [{"name": "main", "image": "registry.example/app:1"}],
            },
        }
        cluster.store.create(cluster.kinds.pod, pod, namespace="ml")

    async def scenario(cluster: Cluster) -> None:
        await settled(cluster)

    run(cluster, scenario)
    assert cluster.operator.driver_held_by("gpu-worker-001") == ["ml/dra-gpu"]
    assert cluster.operator.driver_held_by("gpu-worker-002") == []
    assert cluster.operator.driver_held_by("gpu-worker-003") == []


def test_max_unavailable_counts_a_node_cordoned_beforehand(run) -> None:
    # 4 nodes, maxUnavailable 50% = 2, no parallel limit; gpu-worker-004 was cordoned by hand.
    cluster = make_cluster(workers=4, cordoned=(3,), workloads=False)
    cluster.patch_policy(set_upgrade_policy(maxParallelUpgrades=0, maxUnavailable="50%"))

    async def scenario(cluster: Cluster) -> None:
        await settled(cluster)
        cluster.max_unavailable_seen = len(cluster.unavailable)
        cluster.patch_policy(set_driver_version(NEW_DRIVER))
        await until(
            lambda: (
                all(cluster.state_of(n["metadata"]["name"]) == um.STATE_DONE for n in cluster.nodes())
                and all(
                    cluster.driver_image(n["metadata"]["name"]).endswith(NEW_DRIVER + "-ubuntu22.04")
                    for n in cluster.nodes()
                )
            ),
            what="every node to finish the upgrade",
        )

    run(cluster, scenario)
    assert cluster.max_unavailable_seen == 2  # the hand-cordoned node counted against the budget
    hand_cordoned = cluster.node("gpu-worker-004")
    assert hand_cordoned["spec"].get("unschedulable") is True  # left as the person left it
    assert um.GPU_DRIVER.initial_state_annotation not in (hand_cordoned["metadata"].get("annotations") or {})
    assert not cluster.node("gpu-worker-001")["spec"].get("unschedulable")


def test_auto_upgrade_off_upgrades_nothing_but_a_deleted_pod_returns_at_the_new_revision(run) -> None:
    cluster = make_cluster(workers=2, workloads=False)

    async def scenario(cluster: Cluster) -> None:
        await settled(cluster)
        await until(lambda: cluster.state_of("gpu-worker-001") == um.STATE_DONE, what="the first reconcile")
        cluster.patch_policy(set_upgrade_policy(autoUpgrade=False))
        cluster.patch_policy(set_driver_version(NEW_DRIVER))
        await until(
            lambda: STATE not in cluster.node("gpu-worker-001")["metadata"]["labels"], what="state labels removed"
        )
        cluster.twin.clock.advance(600)
        await asyncio.sleep(0.2)
        assert all(cluster.driver_image(worker(i)).endswith(OLD_DRIVER + "-ubuntu22.04") for i in range(2))
        pod = cluster.driver_pods()["gpu-worker-002"]
        cluster.store.delete(cluster.kinds.pod, pod["metadata"]["namespace"], pod["metadata"]["name"])
        await until(
            lambda: (
                "gpu-worker-002" in cluster.driver_pods()
                and cluster.driver_image("gpu-worker-002").endswith(NEW_DRIVER + "-ubuntu22.04")
            ),
            what="the OnDelete DaemonSet to recreate the pod",
        )

    run(cluster, scenario)
    assert cluster.driver_image("gpu-worker-001").endswith(OLD_DRIVER + "-ubuntu22.04")
    assert not any(STATE in n["metadata"]["labels"] for n in cluster.nodes())


# -- NVIDIADriver ------------------------------------------------------------------------------------------------
def nvidia_driver(name: str, *, version: str, selector: dict[str, str]) -> Obj:
    return {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": name},
        "spec": {
            "driverType": "gpu",
            "repository": "nvcr.io/nvidia",
            "image": "driver",
            "version": version,
            "nodeSelector": selector,
        },
    }


def test_nvidiadriver_canary_pool_upgrades_only_its_nodes(run) -> None:
    canary = {"gpu-canary": "true"}
    cluster = make_cluster(
        workers=4,
        node_labels={0: canary, 1: {"gpu-pool": "fleet"}, 2: {"gpu-pool": "fleet"}, 3: {"gpu-pool": "fleet"}},
        workloads=False,
    )

    def use_crd(policy: Obj) -> None:
        policy["spec"]["driver"]["useNvidiaDriverCRD"] = True

    async def scenario(cluster: Cluster) -> None:
        await settled(cluster)
        cluster.store.create(cluster.driver_type, nvidia_driver("canary", version=OLD_DRIVER, selector=canary))
        cluster.store.create(
            cluster.driver_type, nvidia_driver("fleet", version=OLD_DRIVER, selector={"gpu-pool": "fleet"})
        )
        cluster.patch_policy(use_crd)

        def pools_ready() -> bool:
            pods = cluster.driver_pods()
            return len(pods) == 4 and all(
                (p["metadata"]["labels"].get("app") or "").startswith("nvidia-gpu-driver-ubuntu22.04-")
                and _pod_ready(p)
                for p in pods.values()
            )

        await until(pools_ready, what="one driver DaemonSet per NVIDIADriver")
        await until(lambda: all(cluster.state_of(worker(i)) == um.STATE_DONE for i in range(4)), what="nodes done")

        def bump(cr: Obj) -> None:
            cr["spec"]["version"] = NEW_DRIVER

        cluster.store.mutate(cluster.driver_type, None, "canary", bump)
        await until(
            lambda: (
                cluster.driver_image("gpu-worker-001").endswith(NEW_DRIVER + "-ubuntu22.04")
                and cluster.state_of("gpu-worker-001") == um.STATE_DONE
                and cluster.sim.nodes["gpu-worker-001"].driver_version == NEW_DRIVER
            ),
            what="the canary node to upgrade",
        )
        cluster.twin.clock.advance(3 * um.PLANNED_REQUEUE_SECONDS)
        await asyncio.sleep(0.2)

    run(cluster, scenario)
    owners = {n["metadata"]["name"]: n["metadata"]["labels"].get(gop.OWNER_LABEL) for n in cluster.nodes()}
    assert owners == {
        "gpu-worker-001": "canary",
        "gpu-worker-002": "fleet",
        "gpu-worker-003": "fleet",
        "gpu-worker-004": "fleet",
    }
    for i in (1, 2, 3):
        assert cluster.driver_image(worker(i)).endswith(OLD_DRIVER + "-ubuntu22.04")
        assert cluster.state_of(worker(i)) == um.STATE_DONE
    # The ClusterPolicy's own driver DaemonSet is gone once NVIDIADriver manages the driver.
    assert cluster.store.try_get(cluster.kinds.daemonset, "gpu-operator", "nvidia-driver-daemonset") is None
    assert cluster.store.get(cluster.driver_type, None, "canary")["status"]["state"] == "ready"


def test_overlapping_nvidiadriver_selectors_are_a_conflict() -> None:
    cluster = make_cluster(workers=2, node_labels={0: {"gpu-canary": "true"}}, workloads=False)

    def use_crd(policy: Obj) -> None:
        policy["spec"]["driver"]["useNvidiaDriverCRD"] = True

    cluster.patch_policy(use_crd)
    cluster.store.create(
        cluster.driver_type, nvidia_driver("canary", version=NEW_DRIVER, selector={"gpu-canary": "true"})
    )
    cluster.store.create(
        cluster.driver_type, nvidia_driver("everything", version=OLD_DRIVER, selector={gop.GPU_PRESENT_LABEL: "true"})
    )
    cluster.operator.reconcile_policies()
    for name in ("canary", "everything"):
        status = cluster.store.get(cluster.driver_type, None, name)["status"]
        assert status["state"] == "notReady"
        error = next(c for c in status["conditions"] if c["type"] == "Error")
        assert error["reason"] == "ConflictingNodeSelector"
        assert "gpu-worker-001" in error["message"]
    assert not any(gop.OWNER_LABEL in n["metadata"]["labels"] for n in cluster.nodes())


# -- pure helpers ----------------------------------------------------------------------------------------------
def test_image_paths_and_versions() -> None:
    assert (
        gop.image_path("nvcr.io/nvidia", "driver", "560.35.03-ubuntu22.04")
        == "nvcr.io/nvidia/driver:560.35.03-ubuntu22.04"
    )
    assert (
        gop.image_path(None, "nvcr.io/nvidia/driver", "560.35.03-rhcos4.16")
        == "nvcr.io/nvidia/driver:560.35.03-rhcos4.16"
    )
    assert gop.image_path("r", "driver@sha256:abc", "x") == "driver@sha256:abc"
    assert gop.driver_version_of_image("nvcr.io/nvidia/driver:595.80-rhcos4.16") == "595.80"
    assert nodelabels.node_os_tag({nodelabels.OS_ID_LABEL: "rhcos", nodelabels.OS_VERSION_LABEL: "4.16"}) == "rhcos4.16"


def test_evict_pod_honours_the_pdb() -> None:
    cluster = make_cluster(workers=2, workloads=False)
    store, kinds = cluster.store, cluster.kinds
    for i in range(2):
        pod = {
            "metadata": {"name": f"train-{i}", "namespace": "ml", "labels": {"app": "trainer"}},
            "spec": {"nodeName": worker(i), "containers": [{"name": "c", "image": "x"}]},
        }
        created = store.create(kinds.pod, pod)
        ready = copy.deepcopy(created)
        ready["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        store.update(kinds.pod, ready, subresource="status")
    store.create(
        kinds.pdb,
        {
            "metadata": {"name": "trainer", "namespace": "ml"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "trainer"}}},
        },
    )
    assert upgrade_apply.evict_pod(store, kinds, "ml", "train-0") is True
    evicted = store.try_get(kinds.pod, "ml", "train-0")
    assert evicted is None or evicted["metadata"].get("deletionTimestamp")  # graceful only with the server's handler
    assert upgrade_apply.evict_pod(store, kinds, "ml", "train-1") is False  # the budget is used up
    assert not store.get(kinds.pod, "ml", "train-1")["metadata"].get("deletionTimestamp")
    never = store.get(kinds.pdb, "ml", "trainer")
    never["metadata"].setdefault("annotations", {})["twin.gpufleet.io/never-allow"] = "true"
    never["spec"]["minAvailable"] = 0
    store.update(kinds.pdb, never)
    assert upgrade_apply.evict_pod(store, kinds, "ml", "train-1") is False  # the fault: this PDB never allows


def test_evict_pod_counts_a_statefulset_rank_that_is_gone_as_expected() -> None:
    # The disruption controller expects the StatefulSet's replicas (getExpectedScale), not the pods
    # that exist: while an evicted rank is gone and not yet recreated, its budget allows nothing more.
    cluster = make_cluster(workers=3, workloads=False)
    store, kinds = cluster.store, cluster.kinds
    sts = store.create(
        kinds.statefulset,
        {
            "metadata": {"name": "ranks", "namespace": "ml"},
            "spec": {
                "replicas": 3,
                "serviceName": "ranks",
                "selector": {"matchLabels": {"app": "ranks"}},
                "template": {
                    "metadata": {"labels": {"app": "ranks"}},
                    "spec": {"containers": [{"name": "c", "image": "x"}]},
                },
            },
        },
    )
    owner = podutil.owner_reference(sts)
    for i in range(3):
        pod = {
            "metadata": {
                "name": f"ranks-{i}",
                "namespace": "ml",
                "labels": {"app": "ranks"},
                "ownerReferences": [owner],
            },
            "spec": {"nodeName": worker(i), "containers": [{"name": "c", "image": "x"}]},
        }
        ready = copy.deepcopy(store.create(kinds.pod, pod))
        ready["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        store.update(kinds.pod, ready, subresource="status")
    store.create(
        kinds.pdb,
        {
            "metadata": {"name": "ranks", "namespace": "ml"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "ranks"}}},
        },
    )
    assert upgrade_apply.evict_pod(store, kinds, "ml", "ranks-0") is True
    if store.try_get(kinds.pod, "ml", "ranks-0") is not None:
        store.delete(kinds.pod, "ml", "ranks-0", immediate=True)
    assert store.try_get(kinds.pod, "ml", "ranks-0") is None  # gone, the controller has not recreated it yet
    assert upgrade_apply.evict_pod(store, kinds, "ml", "ranks-1") is False
    assert not store.get(kinds.pod, "ml", "ranks-1")["metadata"].get("deletionTimestamp")


def test_openshift_node_on_a_new_rhcos_moves_to_a_new_driver_daemonset() -> None:
    # An MCO update reboots nodes into a new RHCOS: the operator renders a DaemonSet for that
    # OSTREE version and deletes the old one once no node runs it.
    cluster = make_cluster(profile="openshift", workers=2, workloads=False)
    new_ostree = "416.94.202411041608-0"
    namespace = cluster.operator.namespace

    def move(node_name: str) -> None:
        cluster.store.mutate(
            cluster.kinds.node,
            None,
            node_name,
            lambda node: node["metadata"]["labels"].update({nodelabels.OSTREE_LABEL: new_ostree}),
        )
        cluster.operator.reconcile_policies()

    move(worker(0))
    names = {ds["metadata"]["name"] for ds in cluster.store.list(cluster.kinds.daemonset, namespace)}
    assert {f"nvidia-driver-daemonset-{OSTREE}", f"nvidia-driver-daemonset-{new_ostree}"} <= names
    move(worker(1))
    names = {ds["metadata"]["name"] for ds in cluster.store.list(cluster.kinds.daemonset, namespace)}
    assert f"nvidia-driver-daemonset-{new_ostree}" in names
    assert f"nvidia-driver-daemonset-{OSTREE}" not in names


# -- end to end over HTTP ------------------------------------------------------------------------------------------
def test_upgrade_over_http_blocked_by_a_pdb_then_retried(tmp_path: pathlib.Path) -> None:
    """``python -m gpufleet_twin serve`` (OpenShift profile, seeded workloads) driven with kubectl and the client.

    PodDisruptionBudgets with ``maxUnavailable: 0`` guard the seeded GPU workloads, so the
    first node's pod deletion times out after 300 s and the node goes upgrade-failed with a
    Warning Event.  Deleting the PDBs and relabelling the node upgrade-required (the
    documented manual retry) lets the rollout finish.
    """
    from kubernetes import client, config

    from gpufleet_twin.process import start_twin

    twin = start_twin(nodes=3, profile="openshift", time_scale=1200, workdir=tmp_path)
    try:
        api = config.new_client_from_config(str(twin.kubeconfig))
        # Typed loosely: the client's models make every field Optional.
        core: Any = client.CoreV1Api(api)
        custom: Any = client.CustomObjectsApi(api)
        policy_api: Any = client.PolicyV1Api(api)

        def workers() -> dict[str, Any]:
            return {n.metadata.name: n for n in core.list_node().items if n.metadata.name.startswith("gpu-worker-")}

        def wait(check: Callable[[], bool], what: str, real_seconds: float = 40.0) -> None:
            deadline = time.monotonic() + real_seconds
            while not check():
                assert time.monotonic() < deadline, f"timed out waiting for {what}"
                time.sleep(0.2)

        gpu_apps = {
            (p.metadata.namespace, p.metadata.labels["app"])
            for p in core.list_pod_for_all_namespaces().items
            if p.spec.node_name in workers() and p.metadata.labels and "app" in p.metadata.labels
            and any("nvidia.com/gpu" in (c.resources.limits or {}) for c in p.spec.containers)
        }  # fmt: skip
        assert gpu_apps, "the seeded cluster runs GPU workloads"
        for i, (namespace, app) in enumerate(sorted(gpu_apps)):
            body = {
                "metadata": {"name": f"e2e-block-{i}"},
                "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": app}}},
            }
            policy_api.create_namespaced_pod_disruption_budget(namespace, body)
        # On OpenShift the documentation patches version, repository and image together.
        patch = {"spec": {"driver": {"version": NEW_DRIVER, "repository": "nvcr.io/nvidia", "image": "driver"}}}
        custom.patch_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", gop.CLUSTER_POLICY_NAME, patch)
        wait(lambda: any(n.metadata.labels.get(STATE) == um.STATE_FAILED for n in workers().values()), "a node to fail")
        failed = next(name for name, n in workers().items() if n.metadata.labels.get(STATE) == um.STATE_FAILED)
        assert sum(bool(n.spec.unschedulable) for n in workers().values()) == 1
        events = subprocess.run(
            ["kubectl", "--kubeconfig", str(twin.kubeconfig), "get", "events", "-n", "default", "-o", "json",
             "--field-selector", f"involvedObject.name={failed},reason=GPUDriverUpgrade"],
            capture_output=True, text=True, check=True, timeout=30,
        )  # fmt: skip
        messages = [e["message"] for e in json.loads(events.stdout)["items"]]
        assert any(m.startswith("Failed to delete workload pods on the node for the driver upgrade") for m in messages)

        for pdb in policy_api.list_pod_disruption_budget_for_all_namespaces().items:
            policy_api.delete_namespaced_pod_disruption_budget(pdb.metadata.name, pdb.metadata.namespace)
        core.patch_node(failed, {"metadata": {"labels": {STATE: um.STATE_UPGRADE_REQUIRED}}})
        wait(
            lambda: all(
                n.metadata.labels.get(STATE) == um.STATE_DONE
                and n.metadata.labels.get("nvidia.com/cuda.driver-version.full") == NEW_DRIVER
                and not n.spec.unschedulable
                for n in workers().values()
            ),
            "every node to run the new driver",
        )
        pods = core.list_namespaced_pod("nvidia-gpu-operator", label_selector="openshift.driver-toolkit=true").items
        images = {c.image for p in pods for c in p.spec.containers if c.name == "nvidia-driver-ctr"}
        assert images == {f"nvcr.io/nvidia/driver:{NEW_DRIVER}-rhcos4.16"}
        report = twin.report()
        assert report["budget_violations"] == []
        assert report["gpu_capacity"]["min"] < report["gpu_capacity"]["current"]  # GPUs went away during reloads
        metrics = _admin_text(twin, "gpu-operator/metrics")
        assert "gpu_operator_nodes_upgrades_done 3" in metrics
        assert "gpu_operator_driver_auto_upgrade_enabled 1" in metrics
    finally:
        assert twin.stop() == 0


def _admin_text(twin: Any, path: str) -> str:
    request = urllib.request.Request(f"{twin.admin_url}/{path}", headers={"Authorization": f"Bearer {twin.token}"})
    with urllib.request.urlopen(request, context=twin._context(), timeout=30) as response:
        return response.read().decode()


def test_switching_to_precompiled_replaces_the_driver_daemonset_and_restarts_every_pod_at_once(run) -> None:
    """NVIDIA/gpu-operator issues 2166, 2549: the switch bypasses the upgrade controller."""
    cluster = make_cluster(workers=3, workloads=False)
    before: dict[str, str] = {}

    async def scenario(cluster: Cluster) -> None:
        await settled(cluster)
        before.update({node: pod["metadata"]["uid"] for node, pod in cluster.driver_pods().items()})

        def precompiled(policy: Obj) -> None:
            policy["spec"]["driver"].update(usePrecompiled=True, version="550")

        cluster.patch_policy(precompiled)
        await until(
            lambda: (
                len(cluster.driver_pods()) == 3
                and all(pod["metadata"]["uid"] not in before.values() for pod in cluster.driver_pods().values())
            ),
            what="new driver pods on every node",
        )

    run(cluster, scenario)
    names = {ds["metadata"]["name"] for ds in cluster.store.list(cluster.kinds.daemonset, cluster.operator.namespace)}
    assert "nvidia-driver-daemonset" not in names
    assert f"nvidia-driver-daemonset-ubuntu22.04-{KERNEL}" in names
    assert cluster.driver_image("gpu-worker-001").endswith(f":550-{KERNEL}-ubuntu22.04")
    # No node went through the controller's states: the old pods went with their DaemonSet.
    assert not [e for e in cluster.events("GPUDriverUpgrade") if "cordon-required" in e["message"]]
    assert gop.sanitized_kernel("5.14.0-427.37.1.el9_4.x86_64_64k") == "5.14.0-427.37.1.el9.4"
