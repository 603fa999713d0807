"""The upgrade controller's state and skip labels and the pacing, one implementation for the GPU and the OFED driver
rollouts."""

from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_scope import hold_write, release_write
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_schedule import PoolNode, ScheduleLimits
from ansible_collections.gpufleet.upgrade.plugins.module_utils._skip_label import (
    GPU_DRIVER,
    OFED_DRIVER,
    PROGRESS_DONE,
    PROGRESS_FAILED,
    PROGRESS_IN_PROGRESS,
    PROGRESS_PENDING,
    STATE_DONE,
    STATE_FAILED,
    STATE_REQUIRED,
    SkipLabel,
    SkipLabelPacer,
    hold_not_started,
    progress_of,
)


def node(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "n1", "labels": labels or {}, "annotations": annotations or {}}}


def test_the_keys_are_the_upgrade_controllers_for_each_driver() -> None:
    # k8s-operator-libs consts.go: nvidia.com/%s-driver-upgrade.skip, with gpu and ofed.
    assert GPU_DRIVER.label == "nvidia.com/gpu-driver-upgrade.skip"
    assert OFED_DRIVER.label == "nvidia.com/ofed-driver-upgrade.skip"
    assert GPU_DRIVER.annotation != OFED_DRIVER.annotation


@pytest.mark.parametrize("skip", [GPU_DRIVER, OFED_DRIVER], ids=["gpu", "ofed"])
def test_a_hold_is_ours_only_with_our_mark(skip: SkipLabel) -> None:
    ours = node({skip.label: "true"}, {skip.annotation: "canary"})
    theirs = node({skip.label: "true"})
    free = node({skip.label: "false"})
    assert skip.held(ours) and skip.held_by_us(ours) and not skip.held_by_others(ours)
    assert skip.held(theirs) and skip.held_by_others(theirs)
    assert not skip.held(free) and not skip.held_by_others(free)
    assert skip.hold_patch("halt") == {
        "metadata": {"labels": {skip.label: "true"}, "annotations": {skip.annotation: "halt"}}
    }
    both = {"metadata": {"labels": {skip.label: None}, "annotations": {skip.annotation: None}}}
    assert skip.release_patch() == both and skip.release_patch(ours) == both
    # A mark whose label someone already removed: only the mark goes.
    assert skip.release_patch(node({}, {skip.annotation: "canary"})) == {
        "metadata": {"annotations": {skip.annotation: None}}
    }


def test_the_gpu_writes_hold_and_release_only_our_own() -> None:
    assert hold_write(node(), reason="canary", why="hold").desired == GPU_DRIVER.hold_patch("canary")
    held = node({GPU_DRIVER.label: "true"}, {GPU_DRIVER.annotation: "canary"})
    assert hold_write(held, reason="canary", why="hold") is None
    assert release_write(held, why="release").desired == GPU_DRIVER.release_patch(held)
    assert release_write(node({GPU_DRIVER.label: "true"}), why="release") is None  # a person's hold


# -- where a node stands, and the pacing ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "at_target", "failing", "expected"),
    [
        ("", False, False, PROGRESS_PENDING),
        (STATE_REQUIRED, False, False, PROGRESS_PENDING),
        # Right after the target changes every node still says upgrade-done with the old pod: not done.
        (STATE_DONE, False, False, PROGRESS_PENDING),
        (STATE_DONE, True, False, PROGRESS_DONE),
        ("drain-required", False, False, PROGRESS_IN_PROGRESS),
        ("pod-restart-required", False, True, PROGRESS_FAILED),
        (STATE_FAILED, False, False, PROGRESS_FAILED),
    ],
)
def test_progress_of_a_node(state: str, at_target: bool, failing: bool, expected: str) -> None:
    assert progress_of(state, at_target=at_target, failing=failing) == expected


def test_both_drivers_read_their_own_state_label() -> None:
    assert GPU_DRIVER.state(node({"nvidia.com/gpu-driver-upgrade-state": "drain-required"})) == "drain-required"
    assert OFED_DRIVER.state(node({"nvidia.com/gpu-driver-upgrade-state": "drain-required"})) == ""
    assert OFED_DRIVER.state_label == "nvidia.com/ofed-driver-upgrade-state"


def test_without_limits_the_controller_paces_and_every_hold_of_ours_on_a_target_is_released() -> None:
    pacer = SkipLabelPacer(order=("n1", "n2", "n3"))
    progress = {"n1": PROGRESS_IN_PROGRESS, "n2": PROGRESS_PENDING, "n3": PROGRESS_PENDING}
    pace = pacer.pace(progress, held_by_us=["n2", "n3", "n9"])  # n9 is no target: its hold is not ours to end
    assert pace.release == ("n2", "n3") and pace.waiting == {}


def test_with_limits_targets_are_released_in_order_within_the_budget_and_one_per_domain() -> None:
    pool = {
        "n1": PoolNode("n1", domain="rack-a"),
        "n2": PoolNode("n2", domain="rack-a"),
        "n3": PoolNode("n3", domain="rack-b"),
        "n4": PoolNode("n4", domain="rack-b", unavailable=True),  # someone else's cordon counts
    }
    pacer = SkipLabelPacer(order=("n1", "n2", "n3"), limits=ScheduleLimits(max_unavailable=2, max_per_domain=1))
    pending = dict.fromkeys(pacer.order, PROGRESS_PENDING)
    first = pacer.pace(pending, held_by_us=pacer.order, held=pacer.order, pool=pool)
    # n4 already takes one of the two and rack-b's only slot: n1 alone may go.
    assert first.release == ("n1",) and set(first.waiting) == {"n2", "n3"}
    # n1 released a moment ago, its state label still upgrade-required: it runs, so nothing else starts yet.
    again = pacer.pace(pending, held_by_us=("n2", "n3"), released=("n1",), held=("n2", "n3"), pool=pool)
    assert again.release == ()
    # n1 done: n2 (rack-a) may go; rack-b still has n4 away.
    done = {**pending, "n1": PROGRESS_DONE}
    assert pacer.pace(done, held_by_us=("n2", "n3"), released=("n1",), held=("n2", "n3"), pool=pool).release == ("n2",)
    # A target done while held (a killed run's hold) loses the hold at once, outside the budget.
    leftover = pacer.pace(done, held_by_us=("n1",), released=(), held=("n1",), pool=pool)
    assert leftover.release == ("n2", "n1")


def test_a_failed_target_releases_nothing_and_every_target_not_started_is_held() -> None:
    pacer = SkipLabelPacer(order=("n1", "n2", "n3", "n4"), limits=ScheduleLimits(max_unavailable=3))
    progress = {"n1": PROGRESS_FAILED, "n2": PROGRESS_PENDING, "n3": PROGRESS_PENDING, "n4": PROGRESS_IN_PROGRESS}
    assert pacer.pace(progress, held_by_us=("n3",), released=("n2",), held=("n3",), pool={}).release == ()
    # n2 was released a moment ago and the controller has not taken it yet: a halt holds it again; n4 is under way.
    assert pacer.to_hold(progress, held=("n3",)) == ("n2",)
    assert hold_not_started({"a": PROGRESS_PENDING, "b": PROGRESS_DONE, "c": PROGRESS_PENDING}, held=("c",)) == ("a",)
