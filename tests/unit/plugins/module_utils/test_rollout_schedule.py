"""The continuous scheduler: order, budget, parallelism, failure domains, halting (pure).

Several tests drive the scheduler with a small discrete-event loop of their own
(nodes take given durations; each time one finishes the scheduler is asked
again), checking invariants at every instant rather than only the end state.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_schedule import (
    ORDER_AS_GIVEN,
    ContinuousScheduler,
    PoolNode,
    ScheduleLimits,
    natural_key,
    next_nodes_to_start,
    pool_from_objects,
    rollout_order,
    simulate_schedule,
)


def make_pool(names, *, unavailable=(), domains=None) -> dict[str, PoolNode]:
    return {
        name: PoolNode(name=name, domain=(domains or {}).get(name, ""), unavailable=name in unavailable)
        for name in names
    }


@dataclass
class EventLoopRun:
    """What the test's discrete-event loop saw."""

    makespan: float = 0.0
    start_times: dict[str, float] = field(default_factory=dict)
    end_times: dict[str, float] = field(default_factory=dict)
    peak_unavailable: int = 0
    peak_running: int = 0
    peak_per_domain: dict[str, int] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    never_started: list[str] = field(default_factory=list)


def run_event_loop(
    *,
    order,
    pool,
    limits,
    durations,
    canaries=(),
    fails=(),
    stays_cordoned=(),
) -> EventLoopRun:
    """Simulated time: nodes run for their duration; the scheduler is asked at t=0 and at each finish.

    At every instant the unavailable nodes are the nodes unavailable at the start
    that have not been worked on, the nodes that stay cordoned, and the running
    or failed ones; the loop records the peaks of what it sees.
    """
    scheduler = ContinuousScheduler(order=tuple(order), limits=limits, canaries=tuple(canaries))
    view = dict(pool)
    seen = EventLoopRun()
    clock = 0.0
    heap: list[tuple[float, str]] = []
    for _attempt in range(2 * len(order) + 2):
        decision = scheduler.decide(view)
        for name in decision.start:
            seen.start_times[name] = clock
            heapq.heappush(heap, (clock + durations[name], name))
        unavailable = {name for name, node in view.items() if node.unavailable} | scheduler.running | scheduler.failed
        seen.peak_unavailable = max(seen.peak_unavailable, len(unavailable))
        seen.peak_running = max(seen.peak_running, len(scheduler.running))
        per_domain: dict[str, int] = {}
        for name in unavailable:
            domain = view[name].domain
            per_domain[domain] = per_domain.get(domain, 0) + 1
        for domain, count in per_domain.items():
            seen.peak_per_domain[domain] = max(seen.peak_per_domain.get(domain, 0), count)
        if not heap:
            break
        clock, name = heapq.heappop(heap)
        seen.end_times[name] = clock
        if name in fails:
            scheduler.node_failed(name)
            seen.failed.append(name)
        else:
            scheduler.node_finished(name)
            view[name] = PoolNode(name=name, domain=view[name].domain, unavailable=name in stays_cordoned)
    seen.makespan = max(seen.end_times.values(), default=0.0)
    seen.never_started = scheduler.pending
    return seen


# -- order ---------------------------------------------------------------------------------------


def test_natural_order_puts_worker_2_before_worker_10():
    names = ["gpu-worker-10", "gpu-worker-2", "gpu-worker-1"]
    assert sorted(names, key=natural_key) == ["gpu-worker-1", "gpu-worker-2", "gpu-worker-10"]


def test_order_is_resumed_then_canaries_as_given_then_domain_and_name():
    names = ["n-10", "n-2", "n-3", "n-1", "n-4", "n-5"]
    pool = make_pool(names, domains={"n-10": "rack-a", "n-2": "rack-b", "n-3": "rack-a", "n-1": "rack-b", "n-4": ""})
    order = rollout_order(names, pool=pool, canaries=["n-5", "n-3"], resumed=["n-4"])
    # n-4 resumed first; canaries n-5 then n-3 as given; rack-a (n-10), rack-b (n-1, n-2); unlabelled last.
    assert order == ["n-4", "n-5", "n-3", "n-10", "n-1", "n-2"]


def test_order_as_given_keeps_the_callers_order_after_canaries():
    names = ["c", "a", "d", "b"]
    order = rollout_order(names, pool=make_pool(names), canaries=["d"], order=ORDER_AS_GIVEN)
    assert order == ["d", "c", "a", "b"]


def test_order_is_the_same_whatever_order_the_targets_arrive_in():
    names = [f"gpu-worker-{i}" for i in range(1, 13)]
    domains = {name: f"rack-{i % 3}" for i, name in enumerate(names)}
    pool = make_pool(names, domains=domains)
    shuffled = list(names)
    random.Random(7).shuffle(shuffled)
    assert rollout_order(shuffled, pool=pool) == rollout_order(names, pool=pool)


def test_order_rejects_duplicates_unknown_canaries_and_unknown_modes():
    pool = make_pool(["a", "b"])
    with pytest.raises(InvalidInputError, match="more than once"):
        rollout_order(["a", "a"], pool=pool)
    with pytest.raises(InvalidInputError, match="Canary"):
        rollout_order(["a"], pool=pool, canaries=["z"])
    with pytest.raises(InvalidInputError, match="order"):
        rollout_order(["a"], pool=pool, order="random")


def test_pool_from_node_objects_reads_domain_label_and_availability():
    nodes = [
        {
            "metadata": {"name": "a", "labels": {"rack": "r1"}},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        },
        {
            "metadata": {"name": "b"},
            "spec": {"unschedulable": True},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        },
    ]
    pool = pool_from_objects(nodes, domain_label="rack")
    assert pool["a"] == PoolNode(name="a", domain="r1", unavailable=False)
    assert pool["b"] == PoolNode(name="b", domain="", unavailable=True)


# -- single decisions ----------------------------------------------------------------------------


def test_budget_counts_nodes_already_unavailable_outside_the_rollout():
    names = ["a", "b", "c", "d"]
    pool = make_pool([*names, "other"], unavailable={"other"})
    decision = next_nodes_to_start(order=names, pool=pool, limits=ScheduleLimits(max_unavailable=2))
    assert decision.start == ("a",)
    assert decision.waiting["b"].startswith("budget: 2 of at most 2")


def test_nodes_already_unavailable_start_without_budget_like_hand_cordoned_nodes():
    names = ["a", "b", "c"]
    pool = make_pool(names, unavailable={"c"})
    decision = next_nodes_to_start(order=names, pool=pool, limits=ScheduleLimits(max_unavailable=1, max_parallel=0))
    # c is away anyway and costs nothing; then the budget (1) is full.
    assert decision.start == ("c",)
    over = next_nodes_to_start(order=names, pool=make_pool(names, unavailable={"b", "c"}), limits=ScheduleLimits(1))
    assert over.start == ("b", "c")
    assert "budget" in over.waiting["a"]


def test_parallelism_cap_counts_running_nodes():
    names = ["a", "b", "c", "d"]
    decision = next_nodes_to_start(
        order=names, pool=make_pool(names), limits=ScheduleLimits(max_unavailable=4, max_parallel=2), running={"a"}
    )
    assert decision.start == ("b",)
    assert decision.waiting["c"].startswith("parallelism")


def test_failure_domain_cap_skips_to_the_next_domain():
    names = ["a1", "a2", "b1", "b2"]
    domains = {"a1": "rack-a", "a2": "rack-a", "b1": "rack-b", "b2": "rack-b"}
    decision = next_nodes_to_start(
        order=names,
        pool=make_pool(names, domains=domains),
        limits=ScheduleLimits(max_unavailable=4, max_parallel=0, max_per_domain=1),
    )
    assert decision.start == ("a1", "b1")
    assert "failure domain rack-a" in decision.waiting["a2"]


def test_failure_domain_cap_counts_unavailable_nodes_outside_the_rollout():
    names = ["a1", "b1"]
    domains = {"a1": "rack-a", "b1": "rack-b", "a9": "rack-a"}
    pool = make_pool([*names, "a9"], domains=domains, unavailable={"a9"})
    decision = next_nodes_to_start(
        order=names, pool=pool, limits=ScheduleLimits(max_unavailable=5, max_parallel=0, max_per_domain=1)
    )
    assert decision.start == ("b1",)


def test_canaries_gate_the_rest_until_they_finish():
    names = ["c1", "x", "y"]
    limits = ScheduleLimits(max_unavailable=3, max_parallel=0)
    first = next_nodes_to_start(order=names, pool=make_pool(names), limits=limits, canaries=["c1"])
    assert first.start == ("c1",)
    assert first.waiting["x"].startswith("canary")
    later = next_nodes_to_start(order=names, pool=make_pool(names), limits=limits, canaries=["c1"], finished={"c1"})
    assert later.start == ("x", "y")


def test_resumed_nodes_are_not_held_by_the_canary_gate():
    names = ["r", "c1", "x"]
    decision = next_nodes_to_start(
        order=names,
        pool=make_pool(names, unavailable={"r"}),
        limits=ScheduleLimits(max_unavailable=2, max_parallel=0),
        canaries=["c1"],
        resumed=["r"],
    )
    assert decision.start == ("r", "c1")


def test_a_failed_node_halts_every_new_start():
    names = ["a", "b", "c"]
    decision = next_nodes_to_start(
        order=names, pool=make_pool(names), limits=ScheduleLimits(max_unavailable=3, max_parallel=0), failed={"a"}
    )
    assert decision.halted
    assert decision.start == ()
    assert decision.waiting == {"b": "halted: a failed", "c": "halted: a failed"}


def test_decision_reports_completion_and_blocking():
    names = ["a"]
    done = next_nodes_to_start(order=names, pool=make_pool(names), limits=ScheduleLimits(1), finished={"a"})
    assert done.complete
    blocked = next_nodes_to_start(
        order=names, pool=make_pool([*names, "z"], unavailable={"z"}), limits=ScheduleLimits(max_unavailable=1)
    )
    assert not blocked.start
    assert blocked.blocked_reason.startswith("budget")


def test_limits_refuse_negative_values():
    with pytest.raises(InvalidInputError):
        ScheduleLimits(max_unavailable=-1)


# -- continuous scheduling, simulated -------------------------------------------------------------


def test_continuous_start_on_finish_reaches_the_lower_bound_where_batches_do_not():
    # P = 2. Batches of two would take 6 + 3 = 9; continuous scheduling fills the
    # slot freed at t=3 at once and finishes at max(sum/P, max t) = max(12/2, 6) = 6.
    names = ["long", "short-1", "short-2"]
    durations = {"long": 6.0, "short-1": 3.0, "short-2": 3.0}
    seen = run_event_loop(
        order=names,
        pool=make_pool(names),
        limits=ScheduleLimits(max_unavailable=2, max_parallel=0),
        durations=durations,
    )
    assert seen.makespan == max(sum(durations.values()) / 2, *durations.values()) == 6.0
    assert seen.start_times["short-2"] == 3.0  # started the moment short-1 finished


@pytest.mark.parametrize(("count", "parallel"), [(12, 3), (8, 4), (5, 1), (6, 6)])
def test_makespan_equals_the_lower_bound_for_equal_durations(count, parallel):
    names = [f"gpu-{i}" for i in range(count)]
    durations = dict.fromkeys(names, 5.0)
    seen = run_event_loop(
        order=names,
        pool=make_pool(names),
        limits=ScheduleLimits(max_unavailable=parallel, max_parallel=0),
        durations=durations,
    )
    lower_bound = max(sum(durations.values()) / parallel, *durations.values())
    assert seen.makespan == lower_bound
    assert seen.peak_running == parallel


def test_budget_allows_p_when_parallel_cap_is_larger_and_some_nodes_are_already_away():
    # Pool of 10, maxUnavailable 4, one unrelated node NotReady: P = 3 at once.
    names = [f"gpu-{i}" for i in range(9)]
    pool = make_pool([*names, "sick"], unavailable={"sick"})
    durations = dict.fromkeys(names, 2.0)
    seen = run_event_loop(
        order=names, pool=pool, limits=ScheduleLimits(max_unavailable=4, max_parallel=8), durations=durations
    )
    assert seen.peak_running == 3
    assert seen.peak_unavailable == 4
    assert seen.makespan == max(sum(durations.values()) / 3, 2.0)


def test_random_rollouts_never_exceed_budget_parallelism_or_domains():
    rng = random.Random(20261122)
    for _attempt in range(150):
        count = rng.randint(1, 25)
        names = [f"gpu-{i}" for i in range(count)]
        extra = [f"spare-{i}" for i in range(rng.randint(0, 5))]
        domains = {name: f"rack-{rng.randint(0, 3)}" for name in names + extra}
        # Unavailable nodes at the start, fewer than the budget so the budget can hold.
        max_unavailable = rng.randint(1, 6)
        already = set(rng.sample(names + extra, k=min(len(names + extra), rng.randint(0, max_unavailable - 1))))
        limits = ScheduleLimits(
            max_unavailable=max_unavailable, max_parallel=rng.randint(0, 4), max_per_domain=rng.randint(0, 2)
        )
        durations = {name: float(rng.randint(1, 9)) for name in names}
        pool = make_pool(names + extra, unavailable=already, domains=domains)
        order = rollout_order(names, pool=pool)
        seen = run_event_loop(
            order=order, pool=pool, limits=limits, durations=durations, stays_cordoned=already & set(names)
        )
        assert seen.peak_unavailable <= max_unavailable
        if limits.max_parallel:
            assert seen.peak_running <= limits.max_parallel
        if limits.max_per_domain:
            initial: dict[str, int] = {}
            for name in already:
                initial[domains[name]] = initial.get(domains[name], 0) + 1
            for domain, peak in seen.peak_per_domain.items():
                assert peak <= max(limits.max_per_domain, initial.get(domain, 0))
        if not already and not limits.max_per_domain:
            # Nothing blocks and the width is steady: every node runs, and continuous list
            # scheduling stays within Graham's bound sum/P + max for the width P it has.
            width = min(limits.max_parallel or count, max_unavailable - len(already))
            assert seen.never_started == []
            assert seen.peak_running == min(width, count)
            assert seen.makespan <= sum(durations.values()) / width + max(durations.values()) + 1e-9
            assert seen.makespan >= max(sum(durations.values()) / width, *durations.values()) - 1e-9


def test_halt_on_first_failure_lets_running_nodes_finish_and_starts_nothing_new():
    names = [f"gpu-{i}" for i in range(6)]
    durations = {"gpu-0": 1.0, "gpu-1": 4.0, "gpu-2": 1.0, "gpu-3": 1.0, "gpu-4": 1.0, "gpu-5": 1.0}
    seen = run_event_loop(
        order=names,
        pool=make_pool(names),
        limits=ScheduleLimits(max_unavailable=2, max_parallel=0),
        durations=durations,
        fails={"gpu-2"},
    )
    # t=0: gpu-0, gpu-1 start; t=1: gpu-0 done, gpu-2 starts; t=2: gpu-2 fails -> halt;
    # gpu-1 (running) still finishes at t=4; gpu-3.. never start.
    assert seen.failed == ["gpu-2"]
    assert seen.end_times["gpu-1"] == 4.0
    assert seen.never_started == ["gpu-3", "gpu-4", "gpu-5"]
    assert "gpu-3" not in seen.start_times


def test_nodes_that_stay_cordoned_keep_using_the_budget():
    # Budget 1; "a" was cordoned before the rollout and stays cordoned after it:
    # it starts for free, but afterwards nothing else fits. The rollout blocks, visibly.
    names = ["a", "b"]
    pool = make_pool(names, unavailable={"a"})
    forecast = simulate_schedule(
        order=names, pool=pool, limits=ScheduleLimits(max_unavailable=1), stay_unavailable={"a"}
    )
    assert [name for _when, name in forecast.starts] == ["a"]
    assert forecast.never_started == ("b",)
    assert forecast.blocked_reason.startswith("budget")


def test_simulated_schedule_matches_the_event_loop():
    names = [f"gpu-{i}" for i in range(7)]
    domains = {name: f"rack-{i % 2}" for i, name in enumerate(names)}
    pool = make_pool(names, domains=domains)
    limits = ScheduleLimits(max_unavailable=3, max_parallel=0, max_per_domain=1)
    durations = {name: float(1 + i % 3) for i, name in enumerate(names)}
    order = rollout_order(names, pool=pool, canaries=["gpu-3"])
    forecast = simulate_schedule(order=order, pool=pool, limits=limits, durations=durations, canaries=["gpu-3"])
    seen = run_event_loop(order=order, pool=pool, limits=limits, durations=durations, canaries=["gpu-3"])
    assert {name: start for start, name in forecast.starts} == seen.start_times
    assert forecast.makespan == seen.makespan
    assert forecast.starts[0] == (0.0, "gpu-3")  # the canary runs alone first
    assert all(start >= forecast.ends["gpu-3"] for start, name in forecast.starts[1:])
    assert forecast.peak_running == 2  # two racks, one node each
