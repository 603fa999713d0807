"""The OFED auto_upgrade run's I/O around the shared pacer: what it patches when a target fails."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import RolloutHaltedError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import NODES
from ansible_collections.gpufleet.upgrade.plugins.module_utils._ofed_plan import (
    HOLD_ANNOTATION,
    SKIP_LABEL,
    STATE_LABEL,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._ofed_runner import (
    OfedRolloutOptions,
    _AutoPacer,
    _AutoSchedule,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_budget import capacity_budget
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_schedule import ScheduleLimits
from ansible_collections.gpufleet.upgrade.plugins.module_utils._skip_label import HOLD_HALT, OFED_DRIVER, SkipLabelPacer

NEW = "25.01-0.6.0.0"


class RecordingApi:
    """Serves the nodes given (no pods, no Events) and records each node patch."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes = nodes
        self.patches: list[tuple[str, dict[str, Any]]] = []

    def list(self, ref: Any, **_selectors: Any) -> list[dict[str, Any]]:
        return self.nodes if ref is NODES else []

    def patch(self, ref: Any, name: str, body: dict[str, Any], *, patch_type: str) -> dict[str, Any]:
        assert ref is NODES and patch_type == "merge"
        self.patches.append((name, body))
        return {}


def node(name: str, state: str, *, held: bool = False) -> dict[str, Any]:
    labels = {STATE_LABEL: state, **({SKIP_LABEL: "true"} if held else {})}
    annotations = {HOLD_ANNOTATION: "ofed"} if held else {}
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations}, "spec": {}}


def test_a_failed_target_halts_the_run_and_holds_the_one_released_but_not_yet_taken() -> None:
    nodes = [
        node("n1", "upgrade-failed"),
        node("n2", "upgrade-required"),  # released by this run a moment ago; the controller has not taken it yet
        node("n3", "upgrade-required", held=True),
        node("n4", "drain-required"),  # under way: a skip label would not stop it
    ]
    api = RecordingApi(nodes)
    order = ("n1", "n2", "n3", "n4")
    pacer = _AutoPacer(
        api=api,  # type: ignore[arg-type]
        options=OfedRolloutOptions(target_version=NEW, mode="auto_upgrade", max_unavailable=3),
        schedule=_AutoSchedule(
            budget=capacity_budget(max_unavailable=3, pool_nodes=nodes),
            pacer=SkipLabelPacer(order=order, limits=ScheduleLimits(max_unavailable=3)),
            observed={},
            held_by_others=[],
            pool={},
        ),
        pool=order,
        now=lambda: datetime.datetime(2026, 11, 29, tzinfo=datetime.UTC),
        released_now=["n1", "n2"],
    )
    with pytest.raises(RolloutHaltedError) as halted:
        pacer.observe()
    assert halted.value.node == "n1" and "Node n1 is upgrade-failed" in halted.value.msg
    # Held again with this collection's mark, so a later run (or the rollback) releases it; nothing else written.
    assert api.patches == [("n2", OFED_DRIVER.hold_patch(HOLD_HALT))]
