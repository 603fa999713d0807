"""Capacity budget arithmetic and the GPU Operator's slot formula (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_budget import (
    capacity_budget,
    gpu_operator_slots_from_nodes,
    gpu_operator_upgrade_slots,
    node_is_unavailable,
    nodes_at_once,
    scaled_max_unavailable,
)


def node(name: str, *, ready: str | None = "True", unschedulable: bool = False, state: str | None = None) -> dict:
    conditions = [] if ready is None else [{"type": "Ready", "status": ready}]
    labels = {} if state is None else {"nvidia.com/gpu-driver-upgrade-state": state}
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}, *conditions]},
    }
    if unschedulable:
        obj["spec"]["unschedulable"] = True
    return obj


@pytest.mark.parametrize(
    ("value", "total", "expected"),
    [
        (2, 10, 2),
        ("3", 10, 3),
        ("25%", 10, 3),  # 2.5 rounds up, like intstr with roundUp=true
        ("25%", 8, 2),
        ("1%", 3, 1),
        ("29%", 100, 29),  # no float drift
        ("100%", 7, 7),
        ("0%", 50, 0),
        (" 50% ", 5, 3),
        ("150%", 4, 6),
    ],
)
def test_scaled_max_unavailable_counts_and_percents(value, total, expected):
    assert scaled_max_unavailable(value, total=total) == expected


@pytest.mark.parametrize("value", ["abc", "-1", "10.5%", "%", -1, True, None, 2.5])
def test_scaled_max_unavailable_rejects_what_kubernetes_rejects(value):
    with pytest.raises(InvalidInputError):
        scaled_max_unavailable(value, total=10)


def test_node_availability_counts_cordoned_notready_unknown_and_silent_nodes():
    assert not node_is_unavailable(node("ok"))
    assert node_is_unavailable(node("cordoned", unschedulable=True))
    assert node_is_unavailable(node("down", ready="False"))
    assert node_is_unavailable(node("lost", ready="Unknown"))
    assert node_is_unavailable(node("no-ready-condition", ready=None))


def test_budget_counts_nodes_already_unavailable():
    pool = [node(f"gpu-{i}") for i in range(8)]
    pool[1] = node("gpu-1", unschedulable=True)
    pool[5] = node("gpu-5", ready="False")
    budget = capacity_budget(max_unavailable="25%", pool_nodes=pool)
    assert budget.pool_size == 8
    assert budget.max_unavailable == 2
    assert budget.unavailable == ("gpu-1", "gpu-5")
    assert budget.headroom == 0
    assert budget.exhausted
    assert budget.as_dict()["max_unavailable_requested"] == "25%"


def test_budget_headroom_never_negative_when_over_budget():
    pool = [node(f"gpu-{i}", ready="False") for i in range(4)]
    budget = capacity_budget(max_unavailable=1, pool_nodes=pool)
    assert budget.unavailable_count == 4
    assert budget.headroom == 0


def test_budget_of_zero_is_refused_for_a_rollout():
    with pytest.raises(InvalidInputError, match="allows no node"):
        capacity_budget(max_unavailable="0%", pool_nodes=[node("a"), node("b")])
    # An empty pool has nothing to protect.
    assert capacity_budget(max_unavailable=0, pool_nodes=[]).max_unavailable == 0


def test_nodes_at_once_combines_budget_parallelism_and_already_unavailable_candidates():
    pool = [node(f"gpu-{i}") for i in range(10)]
    pool[0] = node("gpu-0", unschedulable=True)
    budget = capacity_budget(max_unavailable=3, pool_nodes=pool)  # 1 already away, headroom 2
    names = [f"gpu-{i}" for i in range(10)]
    assert nodes_at_once(budget=budget, max_parallel=0, candidates=names) == 3  # gpu-0 costs nothing
    assert nodes_at_once(budget=budget, max_parallel=2, candidates=names) == 2
    assert nodes_at_once(budget=budget, max_parallel=0, candidates=names[1:]) == 2
    assert nodes_at_once(budget=budget, max_parallel=0, candidates=["gpu-4"]) == 1


# -- GPU Operator (k8s-operator-libs GetUpgradesAvailable) -------------------------------------


def test_gpu_operator_default_policy_one_at_a_time():
    slots = gpu_operator_upgrade_slots(
        total_nodes=10,
        in_progress=0,
        upgrade_required=10,
        unavailable_nodes=0,
        cordon_required=0,
        max_parallel_upgrades=1,
        max_unavailable="25%",
    )
    assert slots.max_unavailable == 3
    assert slots.available == 1


def test_gpu_operator_parallel_zero_means_every_required_node_but_max_unavailable_caps_it():
    slots = gpu_operator_upgrade_slots(
        total_nodes=10,
        in_progress=0,
        upgrade_required=10,
        unavailable_nodes=0,
        cordon_required=0,
        max_parallel_upgrades=0,
        max_unavailable="25%",
    )
    assert slots.available == 3


def test_gpu_operator_counts_cordoned_notready_and_cordon_required_nodes():
    slots = gpu_operator_upgrade_slots(
        total_nodes=10,
        in_progress=1,
        upgrade_required=8,
        unavailable_nodes=1,
        cordon_required=1,
        max_parallel_upgrades=4,
        max_unavailable=3,
    )
    # avail 4-1=3, capped at 3; 2 already unavailable -> 3-2 = 1
    assert slots.current_unavailable == 2
    assert slots.available == 1
    full = gpu_operator_upgrade_slots(
        total_nodes=10,
        in_progress=0,
        upgrade_required=8,
        unavailable_nodes=3,
        cordon_required=0,
        max_parallel_upgrades=4,
        max_unavailable=3,
    )
    assert full.available == 0


def test_gpu_operator_skips_the_clamp_when_max_unavailable_covers_the_pool():
    # Upstream quirk: with maxUnavailable >= total, unavailable nodes do not reduce the slots.
    slots = gpu_operator_upgrade_slots(
        total_nodes=4,
        in_progress=0,
        upgrade_required=4,
        unavailable_nodes=2,
        cordon_required=0,
        max_parallel_upgrades=0,
        max_unavailable=None,
    )
    assert slots.max_unavailable == 4
    assert slots.available == 4


def test_gpu_operator_more_in_progress_than_parallel_gives_negative_slots_like_upstream():
    slots = gpu_operator_upgrade_slots(
        total_nodes=10,
        in_progress=3,
        upgrade_required=5,
        unavailable_nodes=3,
        cordon_required=0,
        max_parallel_upgrades=1,
        max_unavailable="50%",
    )
    assert slots.available == -2


def test_gpu_operator_slots_from_node_objects():
    nodes = [
        node("a", state="upgrade-done"),
        node("b", state="upgrade-required"),
        node("c", state="upgrade-required"),
        node("d", state="drain-required", unschedulable=True),
        node("e", state="upgrade-required", ready="False"),
        node("f", state="upgrade-required", ready=None),  # no Ready condition: upstream counts it as ready
        node("g"),  # no label yet: unknown state, counted in the total
        node("h", state="node-maintenance-required"),  # requestor-mode state: not in the in-place total
    ]
    slots = gpu_operator_slots_from_nodes(nodes, max_parallel_upgrades=2, max_unavailable="50%")
    assert slots.total_nodes == 7
    assert slots.in_progress == 1
    assert slots.upgrade_required == 4
    assert slots.current_unavailable == 2
    assert slots.max_unavailable == 4
    assert slots.available == 1  # min(2-1, 4) = 1, and 2 + 1 <= 4
    assert slots.as_dict()["available"] == 1
