"""Scenario files and ``build.populate``, the entry point the CLI calls."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from gpufleet_twin.apiserver.server import create_twin
from gpufleet_twin.harness.build import populate
from gpufleet_twin.harness.faults import FaultInjector
from gpufleet_twin.harness.scenario import ScenarioError, load_scenario, parse_scenario
from gpufleet_twin.kube import podutil
from gpufleet_twin.machinery.kinds import Kinds
from gpufleet_twin.operators import gpu_operator

SCENARIO = """\
description: canary pool with a node that never comes back
nodes: 4
profile: openshift
gpu: {product: NVIDIA-A100-SXM4-80GB, count: 4}
driver_version: 535.183.01
dcgm_version: 4.2.3
workloads: false
cordoned: [gpu-worker-002]
driver_builds:
  "565.57.01": [5.14.0-427.40.1.el9_4.x86_64]
faults:
  - type: node_never_returns
    node: gpu-worker-003
  - type: api_errors
    at: 120
    code: 503
    count: 5
    verb: patch
    resource: nodes
"""


def test_scenario_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "canary.yaml"
    path.write_text(SCENARIO)
    scenario = load_scenario(path)
    spec = scenario.seed_spec(nodes=scenario.nodes or 0, profile=scenario.profile or "kubernetes")
    assert (spec.nodes, spec.profile, spec.gpu_product, spec.gpu_count) == (4, "openshift", "NVIDIA-A100-SXM4-80GB", 4)
    assert spec.driver_version == "535.183.01" and spec.dcgm_version == "4.2.3"
    assert spec.cordoned == ("gpu-worker-002",) and spec.workloads is False
    assert scenario.driver_builds == {"565.57.01": ["5.14.0-427.40.1.el9_4.x86_64"]}
    assert [f["type"] for f in scenario.faults] == ["node_never_returns", "api_errors"]


@pytest.mark.parametrize(
    "text, problem",
    [
        ("nodes: 3\nnode_count: 4\n", "unknown keys \\['node_count'\\]"),
        ("profile: eks\n", "profile must be one of"),
        ("nodes: -1\n", "non-negative integer"),
        ("gpu: {model: H100}\n", "'gpu' takes only"),
        ("faults:\n  - type: reboot\n", "fault #1: fault reboot needs 'node'"),
        ("- just\n- a list\n", "expected a mapping"),
        ("argocd: {poll: 30}\n", "argocd: unknown keys \\['poll'\\]"),
        ("argocd: yes please\n", "argocd is true, false or a mapping"),
        ("event_ttl_seconds: 0\n", "event_ttl_seconds must be a positive number"),
        ("olm_cluster_policy: olm\n", "olm_cluster_policy is true or false"),
        ("event_ttl_seconds: 1h\n", "event_ttl_seconds must be a positive number"),
        ("faults:\n  - type: argocd_sync_stalls\n    mode: forever\n", "mode must be one of sync, controller"),
    ],
)
def test_bad_scenarios_name_the_problem(text: str, problem: str) -> None:
    with pytest.raises(ScenarioError, match=problem):
        parse_scenario(yaml.safe_load(text), source="bad.yaml")


def test_populate_builds_the_cluster_from_options_and_scenario(tmp_path: Path) -> None:
    path = tmp_path / "canary.yaml"
    path.write_text(SCENARIO)

    async def check() -> None:
        twin = create_twin()
        populate(twin, {"nodes": 99, "profile": "kubernetes", "scenario": str(path), "from_snapshot": None})
        kinds = Kinds.from_registry(twin.registry)
        names = [n["metadata"]["name"] for n in twin.store.list(kinds.node)]
        assert names == [
            "gpu-worker-001",
            "gpu-worker-002",
            "gpu-worker-003",
            "gpu-worker-004",
            "master-0",
            "master-1",
            "master-2",
        ]
        node = twin.store.get(kinds.node, None, "gpu-worker-001")
        assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
        assert twin.store.get(kinds.node, None, "gpu-worker-002")["spec"]["unschedulable"] is True
        assert twin.sim.nodes["gpu-worker-003"].never_returns is True
        assert twin.sim.driver_builds == {"565.57.01": {"5.14.0-427.40.1.el9_4.x86_64"}}
        assert twin.pod_logs is not None and twin.sim.recorder is not None
        routes = {(method, path) for method, path, _ in twin.routes}
        assert {
            ("POST", "/admin/faults"),
            ("GET", "/admin/faults"),
            ("DELETE", "/admin/faults"),
            ("DELETE", "/admin/faults/{id}"),
            ("POST", "/admin/clock/advance"),
            ("GET", "/admin/clock"),
            ("GET", "/admin/report"),
            ("POST", "/admin/report/reset"),
            ("POST", "/admin/budget"),
        } <= routes
        assert twin.before_request and twin.after_request
        assert twin.published["profile"] == "openshift"
        assert twin.published["gpu_worker_nodes"][0] == "gpu-worker-001"
        assert twin.published["gpu_operator_namespace"] == "nvidia-gpu-operator"
        names = {c.name for c in twin.controllers}
        assert {
            "kubelet",
            "scheduler",
            "node-lifecycle",
            "daemonset-controller",
            "deployment-controller",
            "replicaset-controller",
            "job-controller",
            "disruption-controller",
            "garbage-collector",
            "fault-injector",
        } <= names
        injector = next(c for c in twin.controllers if isinstance(c, FaultInjector))
        pending = [f for f in injector.faults() if f.state == "pending"]
        assert [f.type for f in pending] == ["api_errors"]
        twin.start_controllers()
        try:
            for _ in range(30):
                twin.clock.advance(5)
                await asyncio.sleep(0.002)
        finally:
            await twin.stop_controllers()
        # node_never_returns holds until removed; the api_errors window is still open.
        assert [f.state for f in injector.faults()] == ["active", "active"]
        assert podutil.is_node_ready(twin.store.get(kinds.node, None, "gpu-worker-001"))

    asyncio.run(check())


@pytest.mark.parametrize("ttl, kept", [(None, False), (86400, True)])
def test_event_ttl_is_the_api_servers_hour_unless_the_scenario_sets_it(tmp_path: Path, ttl, kept) -> None:
    """kube-apiserver --event-ttl: an hour by default (6 real seconds at 600x), longer when the scenario says."""
    path = tmp_path / "ttl.yaml"
    path.write_text(yaml.safe_dump({"workloads": False, **({"event_ttl_seconds": ttl} if ttl else {})}))
    twin = create_twin()
    populate(twin, {"nodes": 1, "profile": "kubernetes", "scenario": str(path), "from_snapshot": None})
    kinds = Kinds.from_registry(twin.registry)
    node = twin.store.get(kinds.node, None, "gpu-worker-001")
    twin.sim.events.record(node, reason="Old", message="x", component="test")
    twin.clock.advance(2 * 3600)
    twin.sim.events.record(node, reason="Fresh", message="y", component="test")
    reasons = {e["reason"] for e in twin.store.list(kinds.event)}
    assert ("Old" in reasons) is kept and "Fresh" in reasons


def test_distributed_training_is_opt_in_by_scenario_key_or_option(tmp_path: Path) -> None:
    path = tmp_path / "dist.yaml"
    path.write_text("nodes: 4\nprofile: kubernetes\ndistributed_training: true\n")

    async def check() -> None:
        for options in (
            {"nodes": 4, "profile": "kubernetes", "scenario": str(path)},
            {"nodes": 4, "profile": "kubernetes", "distributed_training": True},
            {"nodes": 4, "profile": "kubernetes"},
        ):
            twin = create_twin()
            populate(twin, options)
            kinds = Kinds.from_registry(twin.registry)
            found = twin.store.try_get(kinds.statefulset, "ml-training", "dist-train")
            wanted = options.get("distributed_training") or "scenario" in options
            assert (found is not None) == bool(wanted), options
            if found is not None:
                assert twin.store.get(kinds.pdb, "ml-training", "dist-train")["spec"]["maxUnavailable"] == 1
                assert twin.store.get(kinds.service, "ml-training", "dist-train")["spec"]["clusterIP"] == "None"

    asyncio.run(check())


def test_olm_cluster_policy_seeds_the_clusterpolicy_as_olm_creates_it(tmp_path: Path) -> None:
    path = tmp_path / "olm.yaml"
    path.write_text("nodes: 1\nprofile: openshift\nworkloads: false\nolm_cluster_policy: true\n")

    async def check() -> None:
        for options, olm in (({"scenario": str(path)}, True), ({"nodes": 1, "profile": "openshift"}, False)):
            twin = create_twin()
            populate(twin, options)
            assert twin.sim.olm_cluster_policy is olm, options

    asyncio.run(check())
    release = gpu_operator.GpuOperatorRelease()
    for olm in (True, False):
        policy = gpu_operator.default_cluster_policy(
            profile="openshift", release=release, driver_version="550.127.05", olm_defaults=olm
        )
        driver = policy["spec"]["driver"]
        for section in (driver, driver["manager"]):
            assert ("repository" in section, "image" in section, "version" in section) == (not olm,) * 3
        assert driver["manager"]["env"]  # the driver manager's settings stay either way


def test_argocd_is_opt_in_by_scenario_key_or_option(tmp_path: Path) -> None:
    """Off by default (no Application kind, no argocd namespace); on with the option or the scenario key, whose
    poll and faults reach the controller (a scenario's Argo CD fault is applied once the controller exists)."""
    path = tmp_path / "argo.yaml"
    path.write_text(
        "nodes: 1\nprofile: kubernetes\nargocd: {poll_seconds: 30}\n"
        "faults:\n  - type: argocd_sync_stalls\n    application: gpu\n"
    )

    async def check() -> None:
        for options in (
            {"nodes": 1, "profile": "kubernetes"},
            {"nodes": 1, "profile": "kubernetes", "argocd": True, "argocd_poll": 60},
            {"nodes": 1, "profile": "kubernetes", "scenario": str(path)},
        ):
            twin = create_twin()
            populate(twin, options)
            kinds = Kinds.from_registry(twin.registry)
            enabled = twin.registry.get("argoproj.io", "applications") is not None
            assert enabled == (len(options) > 2), options
            assert (twin.store.try_get(kinds.namespace, None, "argocd") is not None) == enabled
            assert (twin.sim.argocd is not None) == enabled
            if "scenario" in options:
                assert twin.sim.argocd.poll_seconds == 30
                assert twin.sim.argocd.stalled == {"argocd/gpu": ["sync"]}
            elif enabled:
                assert twin.sim.argocd.poll_seconds == 60

    asyncio.run(check())
