"""The upgrade controller's skip label, one implementation for the GPU and the OFED driver rollouts."""

from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_scope import hold_write, release_write
from ansible_collections.gpufleet.upgrade.plugins.module_utils._skip_label import GPU_DRIVER, OFED_DRIVER, SkipLabel


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
