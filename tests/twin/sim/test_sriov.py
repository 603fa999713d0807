"""The twin's SR-IOV operator (operators/sriov.py) and the Network Operator 24.10 upgrade hazard.

In-process clusters are built with ``build.populate`` (the path ``serve`` takes) and driven by advancing the
simulated clock by hand; one test starts ``python -m gpufleet_twin serve`` and uses the kubernetes client.
"""

from __future__ import annotations

import asyncio
import pathlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from gpufleet_twin.apiserver.cluster import Twin
from gpufleet_twin.apiserver.server import install_api_machinery, install_crds, load_crd_manifests, own_crds_directory
from gpufleet_twin.harness.build import populate
from gpufleet_twin.kube.podutil import MULTUS_NETWORKS_ANNOTATION
from gpufleet_twin.kube.state import IbPort, NodeHealth, SimState
from gpufleet_twin.machinery.clock import SimClock
from gpufleet_twin.machinery.kinds import Kinds
from gpufleet_twin.machinery.registry import Registry, ResourceType
from gpufleet_twin.machinery.store import Store
from gpufleet_twin.operators import network_operator as netop
from gpufleet_twin.operators import sriov

Obj = dict[str, Any]
OPERATOR_IMAGE = netop.NetworkOperatorRelease().operator_image


# -- pure ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("old", "new", "crosses"),
    [
        ("24.7.0", "24.10.0", True),
        ("v24.7.1", "v24.10.0-rc.1", True),
        ("24.4.1", "25.4.0", True),
        ("24.7.0", "24.7.1", False),
        ("24.10.0", "25.1.0", False),
        ("25.1.0", "24.7.0", False),  # a downgrade needs no pre-steps
        (None, "24.10.0", False),  # an install is no upgrade
        ("latest", "24.10.0", False),
    ],
)
def test_crossing_the_24_10_boundary(old: str | None, new: str, crosses: bool) -> None:
    assert sriov.crosses_boundary(old, new) is crosses


def test_version_of_image_reads_the_tag() -> None:
    assert sriov.version_of_image(f"{OPERATOR_IMAGE}:v24.10.0") == "v24.10.0"
    assert sriov.version_of_image("registry:5000/network-operator") is None
    assert sriov.version_of_image("nvcr.io/x/network-operator:v25.1.0@sha256:abc") == "v25.1.0"
    assert sriov.parse_version("v24.10.0") == (24, 10, 0)
    assert sriov.parse_version("sha256") is None


def test_node_state_spec_takes_matching_policies_and_ignores_default() -> None:
    namespace = sriov.KUBERNETES_NAMESPACE
    policies = [sriov.default_policy(namespace=namespace), sriov.ib_policy(namespace=namespace)]
    health = NodeHealth(name="n", kernel="k", os_image="o", ostree_version=None)
    health.ib_ports = [IbPort(device=f"mlx5_{i}", port=1) for i in (0, 1, 10, 2)]
    ports = sriov.nic_ports(health)
    assert [p.pci_address for p in ports] == ["0000:18:00.0", "0000:28:00.0", "0000:38:00.0", "0000:48:00.0"]
    gpu_node = {sriov.GPU_PRESENT_LABEL: "true", sriov.SRIOV_CAPABLE_LABEL: "true"}
    spec = sriov.render_node_state_spec(policies=policies, node_labels=gpu_node, ports=ports)
    assert len(spec["interfaces"]) == 4
    first = spec["interfaces"][0]
    assert first["numVfs"] == 8
    assert first["linkType"] == "ib"
    assert first["vfGroups"][0]["policyName"] == sriov.IB_POLICY
    assert first["vfGroups"][0]["vfRange"] == "0-7"
    other_node = {sriov.SRIOV_CAPABLE_LABEL: "true"}
    assert sriov.render_node_state_spec(policies=policies, node_labels=other_node, ports=ports) == {"interfaces": []}


# -- in-process harness ---------------------------------------------------------------------------------------------
@dataclass
class SriovCluster:
    twin: Twin
    sim: SimState
    kinds: Kinds
    operator: sriov.SriovOperator

    @property
    def store(self) -> Store:
        return self.twin.store

    @property
    def namespace(self) -> str:
        return self.operator.namespace

    def rtype(self, plural: str) -> ResourceType:
        found = self.twin.registry.get(sriov.GROUP, plural)
        assert found is not None
        return found

    def workers(self) -> list[str]:
        return sorted(n for n in self.sim.nodes if n.startswith("gpu-worker-"))

    def sync_statuses(self) -> dict[str, str]:
        states = self.store.list(self.rtype(sriov.NODE_STATE_PLURAL), self.namespace)
        return {s["metadata"]["name"]: (s.get("status") or {}).get("syncStatus", "") for s in states}

    def daemon_pods(self) -> dict[str, Obj]:
        pods = self.store.list(
            self.kinds.pod,
            self.namespace,
            lambda p: (p["metadata"].get("labels") or {}).get("app") == sriov.CONFIG_DAEMON,
        )
        return {p["spec"].get("nodeName", ""): p for p in pods if not p["metadata"].get("deletionTimestamp")}

    def daemons_ready(self) -> bool:
        pods = self.daemon_pods()
        return set(pods) >= set(self.workers()) and all(
            any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in p.get("status", {}).get("conditions", [])
            )
            for p in pods.values()
        )

    def set_network_operator_version(self, version: str) -> None:
        def change(deployment: Obj) -> None:
            deployment["spec"]["template"]["spec"]["containers"][0]["image"] = f"{OPERATOR_IMAGE}:v{version}"

        self.store.mutate(self.kinds.deployment, netop.NAMESPACE, netop.OPERATOR_DEPLOYMENT, change)

    def scale_sriov_operator(self, replicas: int) -> None:
        def change(deployment: Obj) -> None:
            deployment["spec"]["replicas"] = replicas

        self.store.mutate(self.kinds.deployment, self.namespace, sriov.OPERATOR_DEPLOYMENT, change)

    async def do_pre_steps(self) -> None:
        self.scale_sriov_operator(0)
        self.store.delete(self.rtype(sriov.POLICY_PLURAL), self.namespace, sriov.DEFAULT_POLICY)
        await self.advance(5)

    async def restore(self) -> None:
        self.scale_sriov_operator(1)
        self.store.create(self.rtype(sriov.POLICY_PLURAL), sriov.default_policy(namespace=self.namespace))
        await self.advance(1)

    async def settle(self) -> None:
        for _ in range(6):
            await asyncio.sleep(0.002)

    async def advance(self, sim_seconds: float, *, step: float = 5.0) -> None:
        elapsed = 0.0
        while elapsed < sim_seconds:
            self.twin.clock.advance(min(step, sim_seconds - elapsed))
            elapsed += step
            await self.settle()

    async def wait_until(self, condition: Callable[[], bool], *, sim_seconds: float, what: str) -> None:
        await self.settle()
        elapsed = 0.0
        while not condition():
            assert elapsed < sim_seconds, f"timed out after {sim_seconds} simulated seconds waiting for {what}"
            self.twin.clock.advance(5.0)
            elapsed += 5.0
            await self.settle()

    def run(self, scenario: Callable[[SriovCluster], Awaitable[None]]) -> None:
        async def main() -> None:
            self.twin.start_controllers()
            try:
                await asyncio.wait_for(scenario(self), timeout=30)
            finally:
                await self.twin.stop_controllers()

        asyncio.run(main())


def make_sriov_cluster(*, nodes: int = 2, profile: str = "kubernetes") -> SriovCluster:
    clock = SimClock(time_scale=1.0, start=1_760_000_000.0)
    registry = Registry()
    twin = Twin(registry=registry, store=Store(registry, clock), clock=clock)
    install_api_machinery(twin)
    install_crds(twin, load_crd_manifests(own_crds_directory()))
    populate(twin, {"nodes": nodes, "profile": profile})
    assert isinstance(twin.sim, SimState)
    kinds = Kinds.from_registry(registry)
    for namespace in ("ml-training", "ml-batch", "ml-inference"):  # the seeded workloads are not needed here
        for kind in (kinds.deployment, kinds.job):
            for obj in twin.store.list(kind, namespace):
                twin.store.delete(kind, namespace, obj["metadata"]["name"])
    operator = next(c for c in twin.controllers if isinstance(c, sriov.SriovOperator))
    return SriovCluster(twin=twin, sim=twin.sim, kinds=kinds, operator=operator)


def secondary_network_pod(name: str, node: str) -> Obj:
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"app": name},
            "annotations": {MULTUS_NETWORKS_ANNOTATION: '[{"name": "ib-sriov-net"}]'},
        },
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "registry.example/ml:1"}]},
    }


def sriov_disruptions(cluster: SriovCluster) -> list[Obj]:
    return [d for d in cluster.sim.recorder.report()["disrupted_pods"] if "SR-IOV" in d["why"]]


async def running_workload(c: SriovCluster, node: str) -> None:
    c.store.create(c.kinds.pod, secondary_network_pod("rdma-job", node))
    await c.wait_until(
        lambda: (c.store.get(c.kinds.pod, "default", "rdma-job").get("status") or {}).get("phase") == "Running",
        sim_seconds=300,
        what="the secondary-network pod running",
    )
    await c.wait_until(c.daemons_ready, sim_seconds=300, what="config daemons ready")


# -- in-process -------------------------------------------------------------------------------------------------------
def test_seeds_operator_config_policies_daemon_and_node_states() -> None:
    cluster = make_sriov_cluster(nodes=2)

    async def scenario(c: SriovCluster) -> None:
        await c.wait_until(c.daemons_ready, sim_seconds=300, what="config daemons ready")

    cluster.run(scenario)
    namespace = sriov.KUBERNETES_NAMESPACE
    deployment = cluster.store.get(cluster.kinds.deployment, namespace, sriov.OPERATOR_DEPLOYMENT)
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":network-operator-24.7.0")
    config = cluster.store.get(cluster.rtype(sriov.CONFIG_PLURAL), namespace, sriov.CONFIG_NAME)
    assert config["spec"]["enableInjector"] is True
    assert config["spec"]["enableOperatorWebhook"] is True
    policies = {p["metadata"]["name"]: p for p in cluster.store.list(cluster.rtype(sriov.POLICY_PLURAL), namespace)}
    assert set(policies) == {sriov.DEFAULT_POLICY, sriov.IB_POLICY}
    assert policies[sriov.IB_POLICY]["spec"]["nicSelector"] == {"vendor": "15b3", "deviceID": "1021"}
    daemonset = cluster.store.get(cluster.kinds.daemonset, namespace, sriov.CONFIG_DAEMON)
    assert daemonset["spec"]["template"]["spec"]["nodeSelector"] == config["spec"]["configDaemonNodeSelector"]
    assert set(cluster.daemon_pods()) == set(cluster.workers())  # not on the control plane
    assert cluster.sync_statuses() == dict.fromkeys(cluster.workers(), sriov.SYNC_SUCCEEDED)
    state = cluster.store.get(cluster.rtype(sriov.NODE_STATE_PLURAL), namespace, cluster.workers()[0])
    assert len(state["spec"]["interfaces"]) == len(state["status"]["interfaces"]) == 8
    assert all(i["numVfs"] == 8 for i in state["status"]["interfaces"])
    assert cluster.twin.published["sriov"]["namespace"] == namespace


def test_openshift_seeds_its_own_namespace() -> None:
    cluster = make_sriov_cluster(nodes=1, profile="openshift")
    assert cluster.namespace == sriov.OPENSHIFT_NAMESPACE
    assert cluster.store.try_get(cluster.kinds.namespace, None, sriov.OPENSHIFT_NAMESPACE) is not None
    deployment = cluster.store.get(cluster.kinds.deployment, sriov.OPENSHIFT_NAMESPACE, sriov.OPERATOR_DEPLOYMENT)
    assert "ose-sriov-network" in deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert cluster.sync_statuses() == {cluster.workers()[0]: sriov.SYNC_SUCCEEDED}


def test_crossing_24_10_without_pre_steps_breaks_nodes_until_steps_and_restore() -> None:
    cluster = make_sriov_cluster(nodes=2)
    target = cluster.workers()[0]

    async def scenario(c: SriovCluster) -> None:
        await running_workload(c, target)
        c.set_network_operator_version("24.10.0")
        await c.wait_until(
            lambda: set(c.sync_statuses().values()) == {sriov.SYNC_FAILED}, sim_seconds=30, what="Failed states"
        )
        state = c.store.get(c.rtype(sriov.NODE_STATE_PLURAL), c.namespace, target)
        assert "24.10.0" in state["status"]["lastSyncError"]

        def crash_looping() -> bool:
            pods = c.daemon_pods()
            if set(pods) != set(c.workers()):
                return False
            statuses = [s for p in pods.values() for s in (p.get("status") or {}).get("containerStatuses") or []]
            return len(statuses) == len(pods) and all(s.get("restartCount", 0) >= 1 for s in statuses)

        await c.wait_until(crash_looping, sim_seconds=300, what="config daemons crash-looping")
        warnings = [
            e
            for e in c.store.list(c.kinds.event, c.namespace)
            if e.get("reason") == "SyncStatusChanged" and e.get("type") == "Warning"
        ]
        assert {e["involvedObject"]["name"] for e in warnings} == set(c.workers())
        assert warnings[0]["involvedObject"]["kind"] == "SriovNetworkNodeState"

        # Restoring alone does not heal: the steps were never done.
        await c.advance(60)
        assert set(c.sync_statuses().values()) == {sriov.SYNC_FAILED}
        await c.do_pre_steps()
        assert set(c.sync_statuses().values()) == {sriov.SYNC_FAILED}
        await c.restore()
        await c.wait_until(
            lambda: set(c.sync_statuses().values()) == {sriov.SYNC_SUCCEEDED} and c.daemons_ready(),
            sim_seconds=300,
            what="healed node states",
        )
        state = c.store.get(c.rtype(sriov.NODE_STATE_PLURAL), c.namespace, target)
        assert "lastSyncError" not in state["status"]

    cluster.run(scenario)
    disrupted = sriov_disruptions(cluster)
    assert [(d["name"], d["node"]) for d in disrupted] == [("rdma-job", target)]
    assert cluster.operator.failure is None
    assert [(x.from_version, x.to_version) for x in cluster.operator.crossings] == [("24.7.0", "24.10.0")]


def test_crossing_with_pre_steps_breaks_nothing_and_restore_resyncs() -> None:
    cluster = make_sriov_cluster(nodes=2)
    target = cluster.workers()[0]

    async def scenario(c: SriovCluster) -> None:
        await running_workload(c, target)
        before = {node: pod["metadata"]["uid"] for node, pod in c.daemon_pods().items()}
        await c.do_pre_steps()
        c.set_network_operator_version("24.10.0")
        await c.advance(60)
        assert set(c.sync_statuses().values()) == {sriov.SYNC_SUCCEEDED}
        await c.restore()
        assert set(c.sync_statuses().values()) == {sriov.SYNC_IN_PROGRESS}  # the restored operator resyncs
        await c.wait_until(
            lambda: set(c.sync_statuses().values()) == {sriov.SYNC_SUCCEEDED}, sim_seconds=120, what="resync"
        )
        assert {node: pod["metadata"]["uid"] for node, pod in c.daemon_pods().items()} == before
        assert c.daemons_ready()

    cluster.run(scenario)
    assert sriov_disruptions(cluster) == []
    assert cluster.operator.failure is None
    assert [x.pre_steps_done for x in cluster.operator.crossings] == [True]
    sync_warnings = [
        e
        for e in cluster.store.list(cluster.kinds.event)
        if e.get("reason") == "SyncStatusChanged" and e.get("type") == "Warning"
    ]
    assert sync_warnings == []


def test_upgrade_within_24_7_breaks_nothing() -> None:
    cluster = make_sriov_cluster(nodes=2)

    async def scenario(c: SriovCluster) -> None:
        await running_workload(c, c.workers()[0])
        c.set_network_operator_version("24.7.1")
        await c.advance(120)

    cluster.run(scenario)
    assert set(cluster.sync_statuses().values()) == {sriov.SYNC_SUCCEEDED}
    assert cluster.operator.crossings == []
    assert sriov_disruptions(cluster) == []
    assert cluster.daemons_ready()


def test_openshift_csv_crossing_without_pre_steps_breaks_nodes() -> None:
    cluster = make_sriov_cluster(nodes=1, profile="openshift")

    async def scenario(c: SriovCluster) -> None:
        csv_type = c.twin.registry.get("operators.coreos.com", "clusterserviceversions")
        assert csv_type is not None
        new_csv = netop.operator_csv(release=netop.NetworkOperatorRelease(operator_version="24.10.0"))
        c.store.create(csv_type, new_csv)  # OLM creates the new CSV before the Deployment rolls
        await c.wait_until(
            lambda: set(c.sync_statuses().values()) == {sriov.SYNC_FAILED}, sim_seconds=30, what="Failed states"
        )
        c.set_network_operator_version("24.10.0")  # the Deployment following is no second crossing
        await c.advance(10)

    cluster.run(scenario)
    assert [(x.from_version, x.to_version) for x in cluster.operator.crossings] == [("24.7.0", "24.10.0")]


# -- over HTTP --------------------------------------------------------------------------------------------------------
def test_served_twin_breaks_sriov_on_a_careless_upgrade(tmp_path: pathlib.Path) -> None:
    kubernetes = pytest.importorskip("kubernetes")
    from gpufleet_twin.process import start_twin

    twin = start_twin(nodes=2, profile="kubernetes", time_scale=300, workdir=tmp_path)
    try:
        api = kubernetes.config.new_client_from_config(config_file=str(twin.kubeconfig))
        custom = kubernetes.client.CustomObjectsApi(api)
        apps = kubernetes.client.AppsV1Api(api)
        core = kubernetes.client.CoreV1Api(api)
        namespace = sriov.KUBERNETES_NAMESPACE

        def sync_statuses() -> dict[str, str]:
            states = custom.list_namespaced_custom_object(sriov.GROUP, "v1", namespace, sriov.NODE_STATE_PLURAL)
            return {s["metadata"]["name"]: s.get("status", {}).get("syncStatus") for s in states["items"]}

        assert set(sync_statuses().values()) == {sriov.SYNC_SUCCEEDED}
        assert len(sync_statuses()) == 2
        policy = custom.get_namespaced_custom_object(
            sriov.GROUP, "v1", namespace, sriov.POLICY_PLURAL, sriov.DEFAULT_POLICY
        )
        assert policy["spec"]["numVfs"] == 0
        assert apps.read_namespaced_deployment_scale(sriov.OPERATOR_DEPLOYMENT, namespace).spec.replicas == 1
        apps.patch_namespaced_deployment(
            netop.OPERATOR_DEPLOYMENT,
            netop.NAMESPACE,
            {
                "spec": {
                    "template": {
                        "spec": {"containers": [{"name": "network-operator", "image": f"{OPERATOR_IMAGE}:v24.10.0"}]}
                    }
                }
            },
        )
        deadline = time.monotonic() + 30
        while set(sync_statuses().values()) != {sriov.SYNC_FAILED}:
            assert time.monotonic() < deadline, f"node states did not fail: {sync_statuses()}"
            time.sleep(0.2)
        events = core.list_namespaced_event(namespace, field_selector="reason=SyncStatusChanged").items
        assert any(e.type == "Warning" and e.involved_object.kind == "SriovNetworkNodeState" for e in events)
        deadline = time.monotonic() + 30
        while True:
            pods = core.list_namespaced_pod(namespace, label_selector=f"app={sriov.CONFIG_DAEMON}").items
            waiting = [
                s.state.waiting.reason
                for p in pods
                for s in p.status.container_statuses or []
                if s.state and s.state.waiting
            ]
            if waiting.count("CrashLoopBackOff") >= 2:
                break
            assert time.monotonic() < deadline, f"config daemons not crash-looping: {waiting}"
            time.sleep(0.3)
    finally:
        assert twin.stop() == 0
