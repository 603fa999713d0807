"""Recording core/v1 Events like client-go's recorder: naming, source, aggregation of repeats, expiry."""

from __future__ import annotations

import asyncio

from simharness import make_cluster

from gpufleet_twin.kube.events import EventRecorder, kubelet_node_reference


def test_repeated_events_aggregate_and_expire() -> None:
    async def check() -> None:
        cluster = make_cluster(nodes=1)
        events = EventRecorder(cluster.store, cluster.kinds.event, cluster.twin.clock, ttl_seconds=600)
        node = cluster.node(cluster.workers[0])
        first = events.record(
            node,
            reason="GPUDriverUpgrade",
            message="Successfully updated node state label to [upgrade-required]",
            component="nvidia-gpu-operator",
        )
        assert first is not None
        assert first["metadata"]["namespace"] == "default", "events about cluster-scoped objects live in default"
        assert first["metadata"]["name"].startswith(f"{cluster.workers[0]}.")
        assert first["involvedObject"] == {
            "apiVersion": "v1",
            "kind": "Node",
            "name": cluster.workers[0],
            "uid": node["metadata"]["uid"],
            "resourceVersion": node["metadata"]["resourceVersion"],
        }
        assert first["source"] == {"component": "nvidia-gpu-operator"}
        assert (first["count"], first["type"], first["reportingComponent"]) == (1, "Normal", "nvidia-gpu-operator")
        cluster.twin.clock.advance(30)
        repeat = events.record(
            node, reason="GPUDriverUpgrade", message=first["message"], component="nvidia-gpu-operator"
        )
        assert repeat["metadata"]["name"] == first["metadata"]["name"]
        assert repeat["count"] == 2 and repeat["lastTimestamp"] > repeat["firstTimestamp"]
        other = events.record(
            node,
            reason="GPUDriverUpgrade",
            message="Successfully updated node state label to [cordon-required]",
            component="nvidia-gpu-operator",
        )
        assert other["metadata"]["name"] != first["metadata"]["name"]
        kubelet = events.record(
            kubelet_node_reference(cluster.workers[0]),
            reason="NodeNotSchedulable",
            message="x",
            component="kubelet",
            host=cluster.workers[0],
        )
        assert kubelet["involvedObject"]["uid"] == cluster.workers[0]
        assert kubelet["source"] == {"component": "kubelet", "host": cluster.workers[0]}
        cluster.twin.clock.advance(601)
        events.record(node, reason="Fresh", message="y", component="test")
        remaining = {e["reason"] for e in cluster.store.list(cluster.kinds.event)}
        assert remaining == {"Fresh"}, "events older than the TTL are gone"
        assert (
            events.record({"kind": "Pod", "namespace": "missing", "name": "p"}, reason="R", message="m", component="c")
            is None
        )

    asyncio.run(check())


def test_events_recorded_while_simulated_time_stands_still_are_all_kept() -> None:
    # On a busy machine one turn of the twin's loop counts max_step at most, so the kubelet's Pulled, Created and
    # Started of one container can carry the same simulated instant: all three are Events of their own (the third
    # used to be dropped, its name taken twice), and the StatefulSet test's outages end at their Started.
    async def check() -> None:
        cluster = make_cluster(nodes=1)
        clock = cluster.twin.clock
        instant = clock.now()
        clock.now = lambda: instant  # type: ignore[method-assign]
        events = EventRecorder(cluster.store, cluster.kinds.event, clock)
        node = cluster.node(cluster.workers[0])
        recorded = [
            events.record(node, reason=reason, message=f"{reason} container x", component="kubelet")
            for reason in ("Pulled", "Created", "Started")
        ]
        assert all(event is not None for event in recorded), recorded
        stored = {e["reason"] for e in cluster.store.list(cluster.kinds.event)}
        assert stored == {"Pulled", "Created", "Started"}

    asyncio.run(check())
