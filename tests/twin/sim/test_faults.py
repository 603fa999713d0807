"""Fault injection: request faults through the before_request hook, node faults at their time."""

from __future__ import annotations

import asyncio
import time

import pytest
from simharness import SimCluster, make_cluster

from gpufleet_twin.apiserver.cluster import RequestInfo
from gpufleet_twin.harness.faults import FaultInjector, validate_fault
from gpufleet_twin.kube import podutil
from gpufleet_twin.kube.workloads import NEVER_ALLOW_ANNOTATION
from gpufleet_twin.machinery import errors
from gpufleet_twin.operators import argocd

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
            # A fault with a duration ends by itself; the others stay until removed.
            assert states.pop("secondary_network_down") == "done"
            assert set(states.values()) == {"active"}
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
        ({"type": "olm_bundle_pruned"}, "needs 'version'"),
        ({"type": "reboot", "node": "n", "at": -1}, "cannot be negative"),
        ({"type": "node_step_failures"}, "needs 'fraction', a number from 0 to 1"),
        ({"type": "node_step_failures", "fraction": 1.5}, "needs 'fraction', a number from 0 to 1"),
        ({"type": "node_step_failures", "fraction": 0.1, "steps": ["reboot", "fly"]}, "unknown steps .'fly'."),
    ],
)
def test_invalid_faults_are_explained(spec: dict, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        validate_fault(spec)


# -- every fault ends, restoring what it changed --------------------------------------------------------------

KERNEL = "5.15.0-999-generic"


def _seed_pdb(cluster: SimCluster) -> None:
    cluster.create(
        "pdb",
        {
            "metadata": {"name": "train", "namespace": "default"},
            "spec": {"maxUnavailable": 5, "selector": {"matchLabels": {"app": "train"}}},
        },
    )


def _state(cluster: SimCluster, node: str, faults: FaultInjector) -> dict:
    """Everything a fault may change, as plain data to compare before/after."""
    health = cluster.sim.nodes[node]
    spec = cluster.node(node)["spec"]
    pdb = cluster.store.try_get(cluster.kinds.pdb, "default", "train")
    return {
        "ready": health.ready,
        "never_returns": health.never_returns,
        "rebooting": health.rebooting_until is not None,
        "gpu_count": health.gpu_count,
        "ecc": (health.ecc_corrected, health.ecc_uncorrected),
        "xid": list(health.xid_events),
        "dcgm": list(health.dcgm_failures),
        "ib": [(p.device, p.port, p.state, p.physical_state) for p in health.ib_ports],
        "net": health.secondary_network_up,
        "cordoned": (bool(spec.get("unschedulable")), [t["key"] for t in spec.get("taints") or []]),
        "driver_kernels": set(cluster.sim.kernels_without_driver_build),
        "mofed_kernels": set(cluster.sim.kernels_without_mofed_build),
        "unpullable": dict(cluster.sim.unpullable_images),
        "mc_failures": dict(cluster.sim.machine_config_failures),
        "validator_failures": dict(cluster.sim.validator_failures),
        "pruned_bundles": set(cluster.sim.olm_pruned_bundles),
        "pdb_annotation": (pdb["metadata"].get("annotations") or {}).get(NEVER_ALLOW_ANNOTATION) if pdb else None,
        "never_allow": set(faults._never_allow),
        "step_draws": len(cluster.sim.step_failure_draws),
        "argocd": None
        if cluster.sim.argocd is None
        else (
            {k: list(v) for k, v in cluster.sim.argocd.stalled.items() if v},
            list(cluster.sim.argocd.unreachable),
        ),
    }


FAULT_CASES = {
    "node_never_returns": ({"node": "{node}"}, lambda s: s["never_returns"] is True),
    "reboot": ({"node": "{node}", "duration": 600}, lambda s: s["rebooting"] and not s["ready"]),
    "node_not_ready": ({"node": "{node}"}, lambda s: s["ready"] is False),
    "driver_build_fails": ({"kernel": KERNEL}, lambda s: KERNEL in s["driver_kernels"]),
    "mofed_build_fails": ({"kernel": KERNEL}, lambda s: KERNEL in s["mofed_kernels"]),
    "image_pull_fails": (
        {"image": "nvcr.io/nvidia/driver:570.124.06"},
        lambda s: list(s["unpullable"]) == ["nvcr.io/nvidia/driver:570.124.06"],
    ),
    "machine_config_fails": ({"node": "{node}"}, lambda s: bool(s["mc_failures"])),
    "validator_fails": (
        {"node": "{node}", "message": "failed"},
        lambda s: list(s["validator_failures"].values()) == ["failed"],
    ),
    "cordon": ({"node": "{node}"}, lambda s: s["cordoned"][0] is True),
    "ecc_errors": (
        {"node": "{node}", "corrected": 5, "uncorrected": 2, "xid": [48, 63]},
        lambda s: s["ecc"] == (5, 2) and s["xid"] == [48, 63],
    ),
    "dcgm_failure": ({"node": "{node}", "tests": ["pcie", "memory"]}, lambda s: s["dcgm"] == ["pcie", "memory"]),
    "gpu_lost": ({"node": "{node}", "count": 2}, lambda s: s["gpu_count"] == 6 and s["xid"] == [79]),
    "ib_port_down": (
        {"node": "{node}", "device": "mlx5_3"},
        lambda s: ("mlx5_3", 1, "Down", "Disabled") in s["ib"],
    ),
    "secondary_network_down": ({"node": "{node}"}, lambda s: s["net"] is False),
    "node_step_failures": (
        {"fraction": 1, "steps": ["driver_build", "mofed_build"]},
        lambda s: s["step_draws"] == 1,
    ),
    "pdb_never_allows": (
        {"namespace": "default", "name": "train"},
        lambda s: s["pdb_annotation"] == "true" and ("default", "train") in s["never_allow"],
    ),
    "olm_bundle_pruned": (
        {"version": "v24.9.0"},
        lambda s: s["pruned_bundles"] == {("gpu-operator-certified", "24.9.0")},
    ),
    "argocd_sync_stalls": ({"application": "gpu"}, lambda s: s["argocd"] == ({"argocd/gpu": ["sync"]}, [])),
    "argocd_repo_unreachable": (
        {"repoURL": "file:///srv/gitops"},
        lambda s: s["argocd"] == ({}, ["file:///srv/gitops"]),
    ),
}


def test_every_node_fault_kind_is_covered() -> None:
    from gpufleet_twin.harness.faults import NODE_FAULTS

    assert set(FAULT_CASES) == NODE_FAULTS


@pytest.mark.parametrize("how", ["remove", "clear", "duration"])
@pytest.mark.parametrize("kind", sorted(FAULT_CASES))
def test_every_fault_ends_and_restores_what_it_changed(simulate, kind: str, how: str) -> None:
    async def scenario(cluster: SimCluster) -> None:
        faults = injector(cluster)
        task = asyncio.create_task(faults.run(cluster.twin))
        try:
            node = cluster.workers[0]
            _seed_pdb(cluster)
            if kind.startswith("argocd_"):
                argocd.install(cluster.twin)  # the faults act on its controller (not started here)
            await cluster.run_for(5)
            before = _state(cluster, node, faults)
            params, applied = FAULT_CASES[kind]
            spec = {"type": kind, **{k: (v.format(node=node) if isinstance(v, str) else v) for k, v in params.items()}}
            if how == "duration":
                spec["duration"] = 600
            fault = faults.add(spec)
            await cluster.settle()
            during = _state(cluster, node, faults)
            assert applied(during), f"{kind} did not take effect: {during}"
            assert during != before
            if kind == "node_never_returns":
                # Its effect shows after a reboot: the node stays down until the fault ends.
                cluster.sim.reboot(node, 30)
                await cluster.run_for(60)
                assert cluster.sim.nodes[node].ready is False
            if how == "remove":
                assert faults.remove(fault.id) is fault
            elif how == "clear":
                assert faults.clear() == 1
            else:
                await cluster.run_for(300, step=10)
                assert fault.state == "active", "a fault lasts its whole duration"
                await cluster.run_for(310, step=10)
                assert fault.state == "done"
            await cluster.run_for(5)
            after = _state(cluster, node, faults)
            assert after == before, f"{kind} ({how}) left {after} instead of {before}"
            assert podutil.condition(cluster.node(node), "Ready")["status"] == "True"
        finally:
            task.cancel()

    simulate(scenario, nodes=2)


def test_a_flag_two_faults_hold_stays_until_both_end() -> None:
    cluster = make_cluster(nodes=1)
    faults = injector(cluster)
    first = faults.add({"type": "driver_build_fails", "kernel": KERNEL})
    second = faults.add({"type": "driver_build_fails", "kernel": KERNEL})
    faults.remove(first.id)
    assert KERNEL in cluster.sim.kernels_without_driver_build
    faults.remove(second.id)
    assert KERNEL not in cluster.sim.kernels_without_driver_build


def test_a_cordon_that_was_there_before_the_fault_stays() -> None:
    cluster = make_cluster(nodes=1)
    faults = injector(cluster)
    node = cluster.workers[0]
    from gpufleet_twin.harness.faults import cordon_node

    cordon_node(cluster.twin, cluster.kinds, node)
    fault = faults.add({"type": "cordon", "node": node})
    faults.remove(fault.id)
    assert cluster.node(node)["spec"]["unschedulable"] is True


def test_removing_a_request_fault_stops_it_and_a_pending_fault_never_applies() -> None:
    async def check() -> None:
        cluster = make_cluster(nodes=1)
        faults = injector(cluster)
        burst = faults.add({"type": "api_errors", "code": 503, "count": 5, "verb": "patch", "resource": "nodes"})
        later = faults.add({"type": "cordon", "node": cluster.workers[0], "at": 3600})
        assert await outcome(faults, PATCH_NODE) == 503
        assert faults.remove(burst.id) is burst and burst.state == "done"
        assert await outcome(faults, PATCH_NODE) == 200
        assert faults.remove(later.id) is later
        cluster.twin.clock.advance(7200)
        assert not cluster.node(cluster.workers[0])["spec"].get("unschedulable")
        assert faults.remove("no-such-fault") is None

    asyncio.run(check())


# -- faults drawn at random, seeded ------------------------------------------------------------------------------


def test_request_faults_with_the_same_seed_hit_the_same_requests() -> None:
    async def hits(seed: int) -> list[int]:
        faults = injector(make_cluster(nodes=1))
        faults.add({"type": "api_errors", "code": 503, "duration": 600, "fraction": 0.2, "seed": seed})
        return [await outcome(faults, GET_NODE) for _ in range(200)]

    async def check() -> None:
        first, again, other = await hits(7), await hits(7), await hits(8)
        assert first == again, "the same seed draws the same requests"
        assert first != other, "another seed draws others"
        assert 20 < first.count(503) < 60, "about a fifth fail"

    asyncio.run(check())


def test_node_steps_fail_at_random_reproducibly_by_seed() -> None:
    def failed(seed: int, fraction: float) -> list[tuple[str, str, str]]:
        cluster = make_cluster(nodes=1)
        faults = injector(cluster)
        fault = faults.add({"type": "node_step_failures", "fraction": fraction, "seed": seed})
        # The draws are asked in another order each time: the answer depends on the step, not on the timing.
        keys = [(f"node-{n:03d}", step, "570.124.06") for n in range(400) for step in ("driver_build", "mofed_build")]
        for order in (keys, list(reversed(keys))):
            answers = {key: cluster.sim.step_fails(*key) for key in order}
        assert fault.hits == sum(answers.values()), "each step counts once, however often it is asked"
        assert [(f["node"], f["step"], f["key"]) for f in fault.failed_steps] == sorted(
            (k for k, hit in answers.items() if hit), key=keys.index
        )
        return sorted(k for k, hit in answers.items() if hit)

    first = failed(42, 0.01)
    assert first == failed(42, 0.01), "the same seed fails the same steps"
    assert first != failed(43, 0.01)
    assert 1 <= len(first) <= 25, f"about 1% of 800 steps: {len(first)}"
    assert failed(42, 0) == []
    assert len(failed(42, 1)) == 800


def test_a_driver_build_drawn_to_fail_fails_on_that_node_only_until_the_fault_ends() -> None:
    cluster = make_cluster(nodes=2)
    faults = injector(cluster)
    fault = faults.add({"type": "node_step_failures", "fraction": 1, "steps": ["driver_build"], "nodes": ["a"]})
    sim = cluster.sim
    assert sim.driver_builds_for("570.124.06", KERNEL, node_name="a") is False
    assert sim.driver_builds_for("570.124.06", KERNEL, node_name="b") is True, "only the nodes it names"
    assert sim.mofed_builds_for("24.10-1.0.0.0", KERNEL, node_name="a") is True, "only the steps it names"
    assert fault.describe()["failed_steps"][0] | {"at": None} == {
        "node": "a",
        "step": "driver_build",
        "key": "570.124.06",
        "at": None,
    }
    faults.remove(fault.id)
    assert sim.driver_builds_for("570.124.06", KERNEL, node_name="a") is True
    assert sim.step_failure_draws == []


def test_a_reboot_drawn_to_fail_keeps_the_node_down_until_the_fault_ends(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        faults = injector(cluster)
        name = cluster.workers[0]
        fault = faults.add({"type": "node_step_failures", "fraction": 1, "steps": ["reboot"]})
        cluster.sim.reboot(name, 30)
        await cluster.run_for(120, step=5)
        assert cluster.sim.nodes[name].ready is False, "the reboot drawn to fail: the node stays down"
        assert [(f["node"], f["step"], f["key"]) for f in fault.failed_steps] == [(name, "reboot", "1")]
        faults.clear()
        await cluster.run_for(60, step=5)
        assert cluster.sim.nodes[name].ready is True
        assert podutil.condition(cluster.node(name), "Ready")["status"] == "True"

    simulate(scenario, nodes=1)
