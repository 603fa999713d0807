"""NoExecute taints evict pods as the taint-eviction controller does (kube/tainteviction.py)."""

from __future__ import annotations

from simharness import pod_manifest

from gpufleet_twin.kube import podutil
from gpufleet_twin.kube.tainteviction import eviction_delay


def _taint(cluster, node: str, taints: list[dict]) -> None:
    cluster.store.mutate(cluster.kinds.node, None, node, lambda obj: obj["spec"].update(taints=taints))


def test_eviction_delay_is_the_smallest_toleration_seconds_of_the_tolerations_used() -> None:
    taints = [{"key": "a", "value": "1", "effect": "NoExecute"}, {"key": "b", "effect": "NoExecute"}]
    assert eviction_delay(taints, []) == 0
    assert eviction_delay(taints, [{"key": "a", "operator": "Exists"}]) == 0  # b is not tolerated
    forever = [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}]
    assert eviction_delay(taints, forever) is None
    timed = [
        {"key": "a", "operator": "Exists", "tolerationSeconds": 60},
        {"operator": "Exists", "tolerationSeconds": 30},
    ]
    assert eviction_delay(taints, timed) == 30
    assert eviction_delay(taints, [{"operator": "Exists", "tolerationSeconds": -5}]) == 0


def test_no_execute_taint_evicts_at_once_or_after_toleration_seconds(simulate) -> None:
    async def scenario(cluster) -> None:
        node = cluster.workers[0]
        intolerant = pod_manifest("intolerant", node=node)
        patient = pod_manifest("patient", node=node)
        patient["spec"]["tolerations"] = [
            {
                "key": "maintenance",
                "operator": "Equal",
                "value": "true",
                "effect": "NoExecute",
                "tolerationSeconds": 120,
            }
        ]
        forever = pod_manifest("forever", node=node)
        forever["spec"]["tolerations"] = [{"key": "maintenance", "operator": "Exists"}]
        for pod in (intolerant, patient, forever):
            cluster.create("pod", pod)
        await cluster.run_for(10)
        assert all(podutil.is_pod_ready(p) for p in cluster.pods("default"))
        tainted_at = cluster.twin.clock.now()
        _taint(cluster, node, [{"key": "maintenance", "value": "true", "effect": "NoExecute"}])
        await cluster.run_for(3)
        assert cluster.pod("default", "intolerant") is None or podutil.is_terminating(
            cluster.pod("default", "intolerant")
        )
        assert not podutil.is_terminating(cluster.pod("default", "patient"))
        marked = [e for e in cluster.events("TaintManagerEviction") if e["involvedObject"]["name"] == "intolerant"]
        assert marked and marked[0]["message"] == "Marking for deletion Pod default/intolerant"
        assert await cluster.wait_until(
            lambda: (
                cluster.pod("default", "patient") is None or podutil.is_terminating(cluster.pod("default", "patient"))
            ),
            sim_seconds=200,
        )
        assert cluster.twin.clock.now() - tainted_at >= 120
        await cluster.run_for(600, step=30)
        assert not podutil.is_terminating(cluster.pod("default", "forever"))

    simulate(scenario, nodes=1)


def test_untainting_in_time_cancels_the_eviction(simulate) -> None:
    async def scenario(cluster) -> None:
        node = cluster.workers[0]
        pod = pod_manifest("stays", node=node)
        pod["spec"]["tolerations"] = [
            {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}
        ]
        cluster.create("pod", pod)
        await cluster.run_for(5)
        _taint(cluster, node, [{"key": "k", "value": "v", "effect": "NoExecute"}])
        await cluster.run_for(30)
        _taint(cluster, node, [])
        await cluster.run_for(120, step=10)
        assert not podutil.is_terminating(cluster.pod("default", "stays"))
        messages = [e["message"] for e in cluster.events("TaintManagerEviction")]
        assert messages == ["Cancelling deletion of Pod default/stays"]

    simulate(scenario, nodes=1)


def test_daemon_pods_stay_on_a_not_ready_node_other_pods_go_after_300s(simulate) -> None:
    async def scenario(cluster) -> None:
        node = cluster.workers[0]
        cluster.create("pod", pod_manifest("worker", node=node))
        cluster.create(
            "daemonset",
            {
                "metadata": {"name": "agent", "namespace": "default"},
                "spec": {
                    "selector": {"matchLabels": {"app": "agent"}},
                    "template": {
                        "metadata": {"labels": {"app": "agent"}},
                        "spec": {"containers": [{"name": "a", "image": "registry.example/agent:1"}]},
                    },
                },
            },
        )
        await cluster.run_for(10)
        cluster.sim.nodes[node].ready = False  # the kubelet reports NotReady: not-ready:NoExecute
        await cluster.run_for(200, step=10)
        assert not podutil.is_terminating(cluster.pod("default", "worker"))
        await cluster.run_for(150, step=10)
        assert cluster.pod("default", "worker") is None or podutil.is_terminating(cluster.pod("default", "worker"))
        agents = [p for p in cluster.pods("default") if p["metadata"]["name"].startswith("agent-")]
        assert agents and not any(podutil.is_terminating(p) for p in agents)

    simulate(scenario, nodes=1)
