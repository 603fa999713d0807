"""The run recorder behind GET /admin/report: requests, unavailability, GPU capacity, disruptions, budgets."""

from __future__ import annotations

from simharness import SimCluster, pod_manifest

from gpufleet_twin.apiserver.cluster import RequestInfo
from gpufleet_twin.harness.recorder import UPGRADE_STATE_LABEL
from gpufleet_twin.kube.podutil import MULTUS_NETWORKS_ANNOTATION


def cordon(cluster: SimCluster, name: str, value: bool = True) -> None:
    cluster.store.mutate(cluster.kinds.node, None, name, lambda n: n["spec"].update(unschedulable=value))


def label(cluster: SimCluster, name: str, key: str, value: str) -> None:
    cluster.store.mutate(cluster.kinds.node, None, name, lambda n: n["metadata"]["labels"].update({key: value}))


def test_requests_are_counted_by_verb_and_resource(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        recorder = cluster.sim.recorder
        recorder.after_request(RequestInfo("GET", "/api/v1/nodes", "list", resource="nodes"), 200)
        recorder.after_request(RequestInfo("PATCH", "/api/v1/nodes/x", "patch", resource="nodes", name="x"), 200)
        eviction = RequestInfo("POST", "/x", "create", resource="pods", subresource="eviction", namespace="ml")
        recorder.after_request(eviction, 429)
        daemonsets = RequestInfo("GET", "/apis/apps/v1/daemonsets", "list", group="apps", resource="daemonsets")
        recorder.after_request(daemonsets, 200)
        dry = RequestInfo("PATCH", "/api/v1/nodes/x", "patch", resource="nodes", name="x", dry_run=True)
        recorder.after_request(dry, 200)
        refused = RequestInfo("PATCH", "/api/v1/nodes/y", "patch", resource="nodes", subresource="status", name="y")
        recorder.after_request(refused, 403)
        requests = recorder.report()["requests"]
        assert requests["total"] == 6
        assert requests["dry_run_by_verb_resource"] == {"patch nodes": 1}
        assert requests["forbidden_by_verb_resource"] == {"patch nodes/status": 1}
        assert requests["by_verb"] == {"create": 1, "list": 2, "patch": 1}
        assert requests["by_resource"]["pods/eviction"] == 1
        assert requests["by_resource"]["daemonsets.apps"] == 1
        assert requests["by_verb_resource"]["patch nodes"] == 1
        assert requests["by_code"] == {"200": 4, "403": 1, "429": 1}
        # Which request met each error answer (403s have their own count above).
        assert requests["errors_by_code_verb_resource"] == {"429 create pods/eviction": 1}
        recorder.reset()
        assert recorder.report()["requests"]["total"] == 0
        assert recorder.report()["requests"]["errors_by_code_verb_resource"] == {}

    simulate(scenario, nodes=1, with_recorder=True)


def test_unavailable_intervals_and_gpu_capacity(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        recorder = cluster.sim.recorder
        first = cluster.workers[0]
        assert recorder.report()["gpu_capacity"]["current"] == 16
        cordon(cluster, first)
        await cluster.run_for(30)
        cluster.sim.nodes[first].driver_version = None
        await cluster.run_for(30)
        cordon(cluster, first, False)
        await cluster.settle()
        report = recorder.report()
        [span] = report["nodes"]["unavailable_intervals"][first]
        assert span["reason"] == "cordoned" and span["seconds"] >= 60 and span["to"] is not None
        assert report["nodes"]["currently_unavailable"] == []
        capacity = report["gpu_capacity"]
        assert capacity["current"] == 8 and capacity["min"] == 8
        assert [s["allocatable"] for s in capacity["samples"]] == [16, 8]

    simulate(scenario, nodes=2, with_recorder=True)


def test_explicit_budget_violation_is_recorded(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        recorder = cluster.sim.recorder
        recorder.set_budget(1, source="test", scope={"matchLabels": {"nvidia.com/gpu.present": "true"}})
        cordon(cluster, cluster.workers[0])
        await cluster.run_for(5)
        assert recorder.report()["budget_violations"] == []
        cordon(cluster, cluster.workers[1])
        cluster.sim.reboot(cluster.workers[2], 600)
        await cluster.run_for(60)
        report = recorder.report()
        assert report["budget"]["allowed_unavailable"] == 1 and report["budget"]["nodes_in_scope"] == 4
        [violation] = report["budget_violations"]
        assert violation["to"] is None and violation["peak_unavailable"] == 3
        assert violation["nodes"] == cluster.workers[:3]
        cordon(cluster, cluster.workers[1], False)
        cordon(cluster, cluster.workers[0], False)
        await cluster.settle()
        [closed] = recorder.report()["budget_violations"]
        assert closed["to"] is not None

    simulate(scenario, nodes=4, with_recorder=True)


def test_budget_derived_from_the_gpu_rollout(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        recorder = cluster.sim.recorder
        assert recorder.report()["budget"] is None
        label(cluster, cluster.workers[0], UPGRADE_STATE_LABEL, "cordon-required")
        await cluster.settle()
        budget = recorder.report()["budget"]
        assert budget["source"] == "clusterpolicy" and budget["maxUnavailable"] == "25%"
        assert budget["allowed_unavailable"] == 1  # 25% of 4 GPU nodes
        cordon(cluster, cluster.workers[0])
        cordon(cluster, cluster.workers[1])
        await cluster.settle()
        assert len(recorder.report()["budget_violations"]) == 1
        label(cluster, cluster.workers[0], UPGRADE_STATE_LABEL, "upgrade-done")
        await cluster.settle()
        assert recorder.report()["budget"] is None
        assert recorder.report()["budget_violations"][0]["to"] is not None

    simulate(scenario, nodes=4, with_recorder=True)


def test_disrupted_pods_reboot_and_secondary_network(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        first, second = cluster.workers
        cluster.create("pod", pod_manifest("trainer", node=first))
        multus = {MULTUS_NETWORKS_ANNOTATION: '[{"name": "ib-sriov-net"}]'}
        cluster.create("pod", pod_manifest("rdma-user", node=second, annotations=multus))
        cluster.create("pod", pod_manifest("plain", node=second))
        await cluster.run_for(10)
        cluster.sim.reboot(first, 60)
        cluster.sim.nodes[second].secondary_network_up = False
        await cluster.settle()
        disrupted = {(d["name"], d["node"], d["why"]) for d in cluster.sim.recorder.report()["disrupted_pods"]}
        assert disrupted == {
            ("trainer", first, "node rebooted"),
            ("rdma-user", second, "secondary network went down"),
        }

    simulate(scenario, nodes=2, with_recorder=True)
