"""Fault injection: request faults through the before_request hook, node faults at their time."""

from __future__ import annotations

import asyncio
import time

import pytest
from simharness import SimCluster, make_cluster

from gpufleet_twin import errors
from gpufleet_twin.cluster import RequestInfo
from gpufleet_twin.sim import podutil
from gpufleet_twin.sim.faults import FaultInjector, validate_fault
from gpufleet_twin.sim.workloads import NEVER_ALLOW_ANNOTATION

PATCH_NODE = RequestInfo(method="PATCH", path="/api/v1/nodes/n", verb="patch", resource="nodes", name="n")
GET_NODE = RequestInfo(method="GET", path="/api/v1/nodes/n", verb="get", resource="nodes", name="n")


def injector(cluster: SimCluster) -> FaultInjector:
    return FaultInjector(twin=cluster.twin, sim=cluster.sim, kinds=cluster.kinds)


async def outcome(faults: FaultInjector, info: RequestInfo) -> int:
    try:
        await faults.before_request(info)
    except errors.ApiError as exc:
        return exc.code
    return 200


def test_burst_of_errors_for_the_next_requests_only() -> None:
    async def check() -> None:
        faults = injector(make_cluster(nodes=1))
        faults.add({"type": "api_errors", "code": 503, "count": 2, "verb": "patch", "resource": "nodes"})
        assert await outcome(faults, GET_NODE) == 200, "other verbs pass"
        assert [await outcome(faults, PATCH_NODE) for _ in range(3)] == [503, 503, 200]
        assert faults.faults()[0].state == "done" and faults.faults()[0].hits == 2

    asyncio.run(check())


def test_throttling_429_carries_retry_after() -> None:
    async def check() -> None:
        faults = injector(make_cluster(nodes=1))
        faults.add({"type": "api_errors", "code": 429, "count": 1, "retry_after": 3})
        with pytest.raises(errors.ApiError) as raised:
            await faults.before_request(GET_NODE)
        assert raised.value.code == 429 and raised.value.reason == "TooManyRequests"
        assert raised.value.headers == {"Retry-After": "3"}
        assert raised.value.details["retryAfterSeconds"] == 3

    asyncio.run(check())


def test_window_fraction_and_conflicts() -> None:
    async def check() -> None:
        cluster = make_cluster(nodes=1)
        faults = injector(cluster)
        faults.add({"type": "api_errors", "code": 500, "duration": 60, "fraction": 0.5, "resource": "nodes"})
        results = [await outcome(faults, GET_NODE) for _ in range(200)]
        assert 60 < results.count(500) < 140, "about half of the requests fail during the window"
        cluster.twin.clock.advance(61)
        assert [await outcome(faults, GET_NODE) for _ in range(20)] == [200] * 20
        faults.add({"type": "conflict", "count": 1, "resource": "nodes"})
        assert await outcome(faults, GET_NODE) == 200, "conflicts hit writes only"
        assert await outcome(faults, PATCH_NODE) == 409

    asyncio.run(check())


def test_slow_responses_delay_in_real_time() -> None:
    async def check() -> None:
        faults = injector(make_cluster(nodes=1))
        faults.add({"type": "slow", "delay": 0.05, "count": 2, "verb": "get"})
        started = time.perf_counter()
        await faults.before_request(GET_NODE)
        await faults.before_request(GET_NODE)
        assert time.perf_counter() - started >= 0.1

    asyncio.run(check())


def test_pdb_that_never_allows_refuses_evictions() -> None:
    async def check() -> None:
        cluster = make_cluster(nodes=1)
        cluster.create(
            "pdb",
            {
                "metadata": {"name": "train", "namespace": "default"},
                "spec": {"maxUnavailable": 5, "selector": {"matchLabels": {"app": "train"}}},
            },
        )
        cluster.create(
            "pod",
            {
                "metadata": {"name": "t-1", "namespace": "default", "labels": {"app": "train"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            },
        )
        faults = injector(cluster)
        faults.add({"type": "pdb_never_allows", "namespace": "default", "name": "train"})
        pdb = cluster.store.get(cluster.kinds.pdb, "default", "train")
        assert pdb["metadata"]["annotations"][NEVER_ALLOW_ANNOTATION] == "true"
        evict = RequestInfo(
            method="POST",
            path="/api/v1/namespaces/default/pods/t-1/eviction",
            verb="create",
            resource="pods",
            subresource="eviction",
            namespace="default",
            name="t-1",
        )
        with pytest.raises(errors.ApiError) as refused:
            await faults.before_request(evict)
        assert refused.value.code == 429
        assert refused.value.message == "Cannot evict pod as it would violate the pod's disruption budget."
        assert refused.value.details["causes"][0]["reason"] == "DisruptionBudget"
        other = RequestInfo(
            method="POST",
            path="",
            verb="create",
            resource="pods",
            subresource="eviction",
            namespace="default",
            name="unrelated",
        )
        await faults.before_request(other)

    asyncio.run(check())


def test_node_faults_apply_at_their_time(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        faults = injector(cluster)
        worker, other = cluster.workers
        faults.add_many(
            [
                {"type": "ecc_errors", "at": 30, "node": worker, "corrected": 5, "uncorrected": 1, "xid": [48]},
                {"type": "cordon", "at": 10, "node": other},
                {"type": "ib_port_down", "at": 10, "node": worker, "device": "mlx5_3"},
                {"type": "driver_build_fails", "kernel": "5.15.0-999-generic"},
                {"type": "secondary_network_down", "at": 20, "node": other, "duration": 60},
            ]
        )
        task = asyncio.create_task(faults.run(cluster.twin))
        try:
            assert "5.15.0-999-generic" in cluster.sim.kernels_without_driver_build  # at 0: applied at once
            await cluster.run_for(15)
            health = cluster.sim.nodes[worker]
            assert health.ecc_uncorrected == 0
            assert cluster.node(other)["spec"]["unschedulable"] is True
            port = next(p for p in health.ib_ports if p.device == "mlx5_3")
            assert (port.state, port.physical_state) == ("Down", "Disabled")
            await cluster.run_for(20)
            assert (health.ecc_corrected, health.ecc_uncorrected, health.xid_events) == (5, 1, [48])
            assert cluster.sim.nodes[other].secondary_network_up is False
            await cluster.run_for(60)
            assert cluster.sim.nodes[other].secondary_network_up is True
            states = {f.type: f.state for f in faults.faults()}
            assert set(states.values()) == {"done"}
        finally:
            task.cancel()

    simulate(scenario, nodes=2)


def test_node_never_returns_after_reboot(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        faults = injector(cluster)
        name = cluster.workers[0]
        faults.add({"type": "node_never_returns", "node": name})
        faults.add({"type": "reboot", "node": name, "duration": 30})
        await cluster.run_for(120, step=5)
        assert cluster.sim.nodes[name].ready is False
        assert podutil.condition(cluster.node(name), "Ready")["status"] == "Unknown"

    simulate(scenario, nodes=1)


@pytest.mark.parametrize(
    "spec, problem",
    [
        ({"type": "meteor_strike"}, "unknown fault type"),
        ({"type": "reboot"}, "needs 'node'"),
        ({"type": "api_errors", "code": 418, "count": 1}, "code must be one of"),
        ({"type": "slow", "delay": 1}, "needs 'count'"),
        ({"type": "driver_build_fails"}, "needs 'kernel'"),
        ({"type": "reboot", "node": "n", "at": -1}, "cannot be negative"),
    ],
)
def test_invalid_faults_are_explained(spec: dict, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        validate_fault(spec)
