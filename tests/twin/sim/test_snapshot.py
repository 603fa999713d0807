"""Loading ``kubectl get -o json|yaml`` dumps (``--from-snapshot``), with the real node samples."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path

import pytest
import yaml
from simharness import START

from gpufleet_twin.apiserver.cluster import Twin
from gpufleet_twin.apiserver.server import create_twin, install_api_machinery
from gpufleet_twin.harness.build import install_core, populate
from gpufleet_twin.harness.snapshot import driver_from_labels, health_from_node, load_snapshot
from gpufleet_twin.kube import podutil
from gpufleet_twin.kube.state import SimState
from gpufleet_twin.machinery.clock import SimClock
from gpufleet_twin.machinery.kinds import Kinds
from gpufleet_twin.machinery.registry import Registry
from gpufleet_twin.machinery.store import Store

SAMPLES = Path(__file__).resolve().parents[4] / "shared" / "reference" / "samples" / "nodes"
RKE2_NODES = SAMPLES / "rke2-a16-vgpu-550.90.07-get-nodes.json"


def new_twin() -> tuple[Twin, SimState]:
    clock = SimClock(start=START)
    registry = Registry()
    twin = Twin(registry=registry, store=Store(registry, clock), clock=clock)
    install_api_machinery(twin)
    return twin, SimState(clock=clock, started_at=START)


def dump_with_workloads(directory: Path) -> None:
    """A DaemonSet and its pod as ``kubectl get ds,pods -o yaml`` prints them (multi-document on purpose)."""
    ds_uid = "5f0e8a2c-0000-4000-8000-000000000001"
    template = {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "a", "image": "agent:1"}]}}
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": "agent",
            "namespace": "monitoring",
            "uid": ds_uid,
            "resourceVersion": "991",
            "generation": 3,
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "updateStrategy": {"type": "OnDelete"},
            "template": template,
        },
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "agent-x7k2p",
            "namespace": "monitoring",
            "uid": "5f0e8a2c-0000-4000-8000-000000000002",
            "labels": {"app": "agent", "controller-revision-hash": "6d4b9c7f5"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": "agent",
                    "uid": ds_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "finalizers": ["example.com/never-removed"],
        },
        "spec": {"nodeName": "nori", "containers": [{"name": "a", "image": "agent:1"}]},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "a", "ready": True, "restartCount": 2, "state": {"running": {}}}],
        },
    }
    (directory / "workloads.yaml").write_text(
        yaml.safe_dump_all([{"apiVersion": "v1", "kind": "List", "items": [daemonset]}, pod])
    )
    (directory / "labels-only.json").write_text(json.dumps({"nvidia.com/gpu.present": "true"}))
    (directory / "notes.txt").write_text("ignored: not a dump")


@pytest.fixture
def snapshot_dir(tmp_path: Path) -> Path:
    if not RKE2_NODES.is_file():
        pytest.skip("reference samples not available (../shared/reference/samples)")
    shutil.copy(RKE2_NODES, tmp_path / RKE2_NODES.name)
    dump_with_workloads(tmp_path)
    return tmp_path


def test_snapshot_loads_nodes_and_workloads(snapshot_dir: Path) -> None:
    async def check() -> None:
        twin, sim = new_twin()
        loaded = load_snapshot(twin, sim, snapshot_dir, profile="kubernetes")
        kinds = Kinds.from_registry(twin.registry)
        assert loaded.node_names == ["nori"]
        assert loaded.created == {"DaemonSet": 1, "Namespace": 1, "Node": 1, "Pod": 1}
        assert any("labels-only.json" in reason for reason in loaded.skipped)
        node = twin.store.get(kinds.node, None, "nori")
        assert node["metadata"]["uid"] != "a585cb64-68e9-4ee3-804e-754d7c13bbb1"
        assert "finalizers" not in node["metadata"]  # rke2's wrangler finalizers would never be removed here
        assert node["metadata"]["labels"]["nvidia.com/cuda.driver-version.full"] == "550.90.07"
        assert node["metadata"]["annotations"]["rke2.io/hostname"] == "nori"
        health = sim.nodes["nori"]
        assert health.driver_version == "550.90.07"
        assert health.kernel == "5.15.0-134-generic"
        assert health.gpu_count == 1 and health.gpus_allocatable == 1
        assert health.gpu_product.startswith("NVIDIA-A16")
        pod = twin.store.get(kinds.pod, "monitoring", "agent-x7k2p")
        ds = twin.store.get(kinds.daemonset, "monitoring", "agent")
        assert pod["metadata"]["ownerReferences"][0]["uid"] == ds["metadata"]["uid"], "owner UID rewritten"
        assert pod["status"]["phase"] == "Running"
        assert "managedFields" not in ds["metadata"] and ds["metadata"]["generation"] == 1

        # The simulation adopts what it loaded: the running pod stays, the DaemonSet keeps its pod's hash.
        install_core(twin, sim)
        twin.start_controllers()
        try:
            for _ in range(20):
                twin.clock.advance(1)
                await asyncio.sleep(0.002)
        finally:
            await twin.stop_controllers()
        pods = twin.store.list(kinds.pod, "monitoring")
        assert [p["metadata"]["name"] for p in pods] == ["agent-x7k2p"]
        assert podutil.is_pod_ready(pods[0])
        assert pods[0]["status"]["containerStatuses"][0]["restartCount"] == 2
        revisions = twin.store.list(kinds.controllerrevision, "monitoring")
        assert [r["metadata"]["name"] for r in revisions] == ["agent-6d4b9c7f5"]
        status = twin.store.get(kinds.daemonset, "monitoring", "agent")["status"]
        assert status["desiredNumberScheduled"] == 1 and status["updatedNumberScheduled"] == 1

    asyncio.run(check())


def test_health_from_labels_of_an_openshift_node() -> None:
    node = {
        "metadata": {
            "name": "worker-0",
            "labels": {
                "feature.node.kubernetes.io/system-os_release.OSTREE_VERSION": "417.94.202409121747-0",
                "nvidia.com/gpu.product": "Tesla-T4-SHARED",
                "nvidia.com/gpu.count": "1",
                "nvidia.com/gpu.memory": "16106127360",  # old GFD: bytes
                "nvidia.com/cuda.driver.major": "510",
                "nvidia.com/cuda.driver.minor": "73",
                "nvidia.com/cuda.driver.rev": "08",
            },
        },
        "status": {
            "nodeInfo": {
                "kernelVersion": "5.14.0-427.35.1.el9_4.x86_64",
                "osImage": "Red Hat Enterprise Linux CoreOS 417.94.202409121747-0",
            },
            "conditions": [{"type": "Ready", "status": "False"}],
            "allocatable": {"nvidia.com/gpu": "0"},
        },
    }
    health = health_from_node(node)
    assert health.ostree_version == "417.94.202409121747-0"
    assert health.driver_version == "510.73.08"
    assert health.gpu_memory_mib == 15360
    assert not health.ready and not health.device_plugin_up and health.gpus_allocatable == 0
    assert driver_from_labels({"nvidia.com/cuda.driver.major": "595", "nvidia.com/cuda.driver.minor": "80"}) == "595.80"
    assert driver_from_labels({}) is None


def test_populate_from_snapshot(snapshot_dir: Path) -> None:
    async def check() -> None:
        twin = create_twin()
        populate(twin, {"nodes": 3, "profile": "kubernetes", "scenario": None, "from_snapshot": str(snapshot_dir)})
        kinds = Kinds.from_registry(twin.registry)
        assert [n["metadata"]["name"] for n in twin.store.list(kinds.node)] == ["nori"], "no seeded nodes"
        assert twin.published["gpu_worker_nodes"] == ["nori"]
        assert twin.published["snapshot"]["created"]["Node"] == 1
        namespaces = {n["metadata"]["name"] for n in twin.store.list(kinds.namespace)}
        assert {"default", "kube-system", "gpu-operator", "monitoring"} <= namespaces

    asyncio.run(check())


def test_populate_loads_what_cluster_snapshot_writes(tmp_path: Path) -> None:
    """An OLM Subscription loads (its kind is served before the load) and the info file is not a skipped object."""
    subscription = {
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "Subscription",
        "metadata": {"name": "my-operator", "namespace": "my-operators", "uid": "u-1"},
        "spec": {"name": "my-operator", "channel": "stable", "source": "certified-operators"},
    }
    (tmp_path / "apis_operators.coreos.com_v1alpha1_subscriptions.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "SubscriptionList", "items": [subscription]})
    )
    (tmp_path / "snapshot-info.json").write_text(json.dumps({"format": 1, "counts": {}}))

    async def check() -> None:
        twin = create_twin()
        populate(twin, {"nodes": 0, "profile": "openshift", "scenario": None, "from_snapshot": str(tmp_path)})
        summary = twin.published["snapshot"]
        assert summary["created"].get("Subscription") == 1, summary
        assert not any("snapshot-info.json" in entry for entry in summary["skipped"]), summary
        assert "snapshot-info.json" not in summary["files"]

    asyncio.run(check())


def test_a_copy_continues_its_source_clock(tmp_path: Path) -> None:
    """A snapshot dated ahead of this machine's clock (a source twin at 600x) moves the copy's clock on to it, so
    what the copy does is dated after the history it carries; one dated in the past leaves the clock alone."""

    def taken(at: str) -> None:
        (tmp_path / "snapshot-info.json").write_text(json.dumps({"format": 1, "counts": {}, "taken_at": at}))

    async def check() -> None:
        taken("1970-01-01T00:00:00Z")
        twin = create_twin()  # time scale 1: its clock runs as this machine's
        before, began = twin.clock.now(), time.monotonic()
        populate(twin, {"nodes": 0, "profile": "kubernetes", "scenario": None, "from_snapshot": str(tmp_path)})
        moved = twin.clock.now() - before
        assert moved <= time.monotonic() - began + 1, "a snapshot of the past leaves the clock as it was"

        # The source's clock keeps running at 1x: judge by the moment the snapshot names, not by reading it again
        # later (on a busy machine that moment is seconds behind).
        ahead = twin.clock.now() + 3 * 86400
        taken(twin.clock.iso(ahead))
        copy = create_twin()
        populate(copy, {"nodes": 0, "profile": "kubernetes", "scenario": None, "from_snapshot": str(tmp_path)})
        assert copy.clock.now() >= ahead - 1
        assert copy.published["sim_started_at"] >= copy.clock.iso(ahead - 1)

    asyncio.run(check())
