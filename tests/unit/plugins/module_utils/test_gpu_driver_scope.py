"""Canary scoping plans: skip labels, NVIDIADriver pools, promotion clean-up, halts (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_runner import plan_diff
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_scope import (
    HOLD_ANNOTATION,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    PHASE_CLEANUP,
    PHASE_HOLD,
    PHASE_SCOPE,
    PHASE_TARGET,
    SKIP_LABEL,
    STATE_LABEL,
    ClusterView,
    RolloutRequest,
    halt_writes,
    plan_rollout,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_spec import DriverTarget

TARGET = DriverTarget(version="570.124.06")


def node(name: str, *, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"nvidia.com/gpu.present": "true", **(labels or {})},
            "annotations": dict(annotations or {}),
        },
        "spec": {},
    }


def cluster_policy(*, use_crd: bool = False) -> dict:
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "gpu-cluster-policy", "resourceVersion": "7"},
        "spec": {
            "driver": {
                "useNvidiaDriverCRD": use_crd,
                "version": "560.35.03",
                "repository": "nvcr.io/nvidia",
                "image": "driver",
                "upgradePolicy": {"autoUpgrade": True, "maxParallelUpgrades": 1, "maxUnavailable": "25%"},
            }
        },
    }


def nvidia_driver(name: str, *, selector: dict[str, str] | None = None, default: bool = False, **spec: Any) -> dict:
    body: dict[str, Any] = {
        "driverType": "gpu",
        "repository": "nvcr.io/nvidia",
        "image": "driver",
        "version": "560.35.03",
        "default": default,
        "manager": {"env": [{"name": "ENABLE_GPU_POD_EVICTION", "value": "true"}]},
    }
    if selector is not None:
        body["nodeSelector"] = selector
    body.update(spec)
    return {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": name, "resourceVersion": "3", "labels": spec.pop("labels", {})},
        "spec": body,
    }


CANARY = {"gpu-canary": "true"}


def view(nodes: list[dict], *, drivers: list[dict] | None = None, crd_has_default: bool = True) -> ClusterView:
    return ClusterView(
        policy=cluster_policy(use_crd=drivers is not None),
        drivers=tuple(drivers or ()),
        nodes=tuple(nodes),
        managed=frozenset(n["metadata"]["name"] for n in nodes),
        crd_has_default=crd_has_default,
    )


def request(scope: str = "canary", mode: str | None = "skip_label", **kwargs: Any) -> RolloutRequest:
    return RolloutRequest(
        scope=scope, target=TARGET, upgrade_policy=kwargs.pop("upgrade_policy", {}), canary_mode=mode, **kwargs
    )


def fleet(canaries: tuple[str, ...] = ("gpu-worker-001",), count: int = 4, **extra: dict) -> list[dict]:
    names = [f"gpu-worker-{i:03d}" for i in range(1, count + 1)]
    return [node(name, labels={**(CANARY if name in canaries else {}), **extra.get(name, {})}) for name in names]


def writes_of(plan, *, kind: str | None = None, phase: str | None = None) -> list:
    return [w for w in plan.writes if (kind is None or w.kind == kind) and (phase is None or w.phase == phase)]


# -- skip_label --------------------------------------------------------------------------------------------


def test_skip_label_canary_holds_every_other_node_before_the_target_changes():
    plan = plan_rollout(view(fleet()), request())
    assert plan.targets == ("gpu-worker-001",)
    holds = writes_of(plan, kind="Node")
    assert [w.name for w in holds] == ["gpu-worker-002", "gpu-worker-003", "gpu-worker-004"]
    assert all(w.phase == PHASE_SCOPE for w in holds)
    assert holds[0].patch == {"metadata": {"labels": {SKIP_LABEL: "true"}, "annotations": {HOLD_ANNOTATION: "canary"}}}
    # The target comes last: holds first, so no other node can start meanwhile.
    assert plan.writes[-1].kind == "ClusterPolicy" and plan.writes[-1].phase == PHASE_TARGET
    assert plan.writes[-1].patch["spec"]["driver"]["version"] == "570.124.06"


def test_a_rerun_of_the_canary_changes_nothing():
    held = {"labels": {SKIP_LABEL: "true"}, "annotations": {HOLD_ANNOTATION: "canary"}}
    nodes = [node("gpu-worker-001", labels=CANARY)] + [
        node(f"gpu-worker-00{i}", labels=held["labels"], annotations=held["annotations"]) for i in (2, 3)
    ]
    current = view(nodes)
    current.policy["spec"]["driver"]["version"] = "570.124.06"
    plan = plan_rollout(current, request())
    assert not plan.changes
    assert plan.as_dict()["writes"] == []


def test_promotion_releases_only_the_holds_this_collection_set():
    nodes = [
        node("gpu-worker-001", labels=CANARY),
        node("gpu-worker-002", labels={SKIP_LABEL: "true"}, annotations={HOLD_ANNOTATION: "canary"}),
        node("gpu-worker-003", labels={SKIP_LABEL: "true"}),  # somebody else's hold
        node("gpu-worker-004", labels={SKIP_LABEL: "true"}, annotations={HOLD_ANNOTATION: "halt"}),
    ]
    plan = plan_rollout(view(nodes), request(scope="all", mode=None))
    assert plan.targets == ("gpu-worker-001", "gpu-worker-002", "gpu-worker-004")
    assert plan.held_by_others == ("gpu-worker-003",)
    releases = {w.name: w.patch for w in writes_of(plan, kind="Node")}
    assert set(releases) == {"gpu-worker-002", "gpu-worker-004"}
    assert releases["gpu-worker-002"] == {
        "metadata": {"annotations": {HOLD_ANNOTATION: None}, "labels": {SKIP_LABEL: None}}
    }


def test_a_paced_promotion_holds_every_target_before_the_target_changes_and_keeps_our_holds():
    nodes = [
        node("gpu-worker-001", labels=CANARY),
        node("gpu-worker-002", labels={SKIP_LABEL: "true"}, annotations={HOLD_ANNOTATION: "canary"}),
        node("gpu-worker-003", labels={SKIP_LABEL: "true"}),  # somebody else's hold: no target, untouched
    ]
    plan = plan_rollout(view(nodes), request(scope="all", mode=None, paced=True))
    assert plan.targets == ("gpu-worker-001", "gpu-worker-002")
    # The canary's hold stays (the run releases it in turn); only the unheld target gets one, first of all writes.
    (hold,) = writes_of(plan, kind="Node")
    assert (hold.name, hold.phase) == ("gpu-worker-001", PHASE_HOLD)
    assert hold.patch == {"metadata": {"labels": {SKIP_LABEL: "true"}, "annotations": {HOLD_ANNOTATION: "paced"}}}
    assert [w.kind for w in writes_of(plan, phase=PHASE_TARGET)] == ["ClusterPolicy"]
    # A target already done at the target waits for nothing: no hold.
    plan = plan_rollout(view(nodes), request(scope="all", mode=None, paced=True, done=frozenset({"gpu-worker-001"})))
    assert writes_of(plan, kind="Node") == []


def test_no_canary_node_is_refused():
    with pytest.raises(InvalidInputError, match="gpu-canary=true"):
        plan_rollout(view(fleet(canaries=())), request())


def test_a_canary_somebody_else_holds_is_refused():
    nodes = fleet(**{"gpu-worker-001": {SKIP_LABEL: "true"}})
    with pytest.raises(InvalidInputError, match=r"gpu-worker-001.*someone else"):
        plan_rollout(view(nodes), request())


def test_canary_scope_needs_a_mode():
    with pytest.raises(InvalidInputError, match="canary_mode"):
        plan_rollout(view(fleet()), request(mode=None))


def test_retry_failed_nodes_relabels_them_upgrade_required():
    nodes = fleet(**{"gpu-worker-002": {STATE_LABEL: "upgrade-failed"}})
    plan = plan_rollout(view(nodes), request(scope="all", mode=None, retry_failed_nodes=True))
    retry = [w for w in writes_of(plan, kind="Node") if w.name == "gpu-worker-002"]
    assert retry[0].patch == {"metadata": {"labels": {STATE_LABEL: "upgrade-required"}}}
    # Only once the target changed: before, the controller would retry the driver that failed.
    assert retry[0].phase == PHASE_TARGET
    assert plan.writes.index(retry[0]) > plan.writes.index(writes_of(plan, kind="ClusterPolicy")[0])
    plain = plan_rollout(view(nodes), request(scope="all", mode=None))
    assert not writes_of(plain, kind="Node")


# -- nvidiadriver ------------------------------------------------------------------------------------------


def test_nvidiadriver_mode_needs_a_cluster_that_uses_nvidia_driver():
    with pytest.raises(InvalidInputError, match="useNvidiaDriverCRD"):
        plan_rollout(view(fleet()), request(mode="nvidiadriver"))


def test_new_canary_pool_is_created_at_the_production_driver_then_bumped():
    production = nvidia_driver("default", default=True)
    plan = plan_rollout(view(fleet(), drivers=[production]), request(mode="nvidiadriver"))
    assert plan.pin is not None and plan.pin.nodes == ("gpu-worker-001",)
    create = next(w for w in plan.writes if w.op == "create")
    assert create.phase == PHASE_SCOPE
    spec = create.desired["spec"]
    assert spec["version"] == "560.35.03"  # pinned at production first
    assert spec["nodeSelector"] == CANARY and spec["default"] is False
    assert spec["manager"] == production["spec"]["manager"]  # the production CR's settings carry over
    assert create.desired["metadata"]["labels"] == {MANAGED_BY_LABEL: MANAGED_BY}
    bump = next(w for w in plan.writes if w.kind == "NVIDIADriver" and w.phase == PHASE_TARGET)
    assert bump.patch == {"spec": {"version": "570.124.06", "repository": "nvcr.io/nvidia", "image": "driver"}}
    # The default CR needs nothing: it only owns nodes no other NVIDIADriver selects.
    assert not [w for w in plan.writes if w.name == "default"]


def test_production_without_selector_becomes_the_default_when_the_crd_allows():
    production = nvidia_driver("fleet")
    plan = plan_rollout(view(fleet(), drivers=[production]), request(mode="nvidiadriver"))
    change = next(w for w in plan.writes if w.name == "fleet")
    assert change.patch == {"spec": {"default": True}}
    assert plan.writes.index(change) < plan.writes.index(next(w for w in plan.writes if w.op == "create"))
    assert not plan.warnings


def test_without_default_in_the_crd_the_production_pool_is_labelled_first():
    production = nvidia_driver("fleet")
    nodes = fleet(**{"gpu-worker-004": {"gpu-canary": "false"}})
    plan = plan_rollout(view(nodes, drivers=[production], crd_has_default=False), request(mode="nvidiadriver"))
    labels = [w for w in plan.writes if w.kind == "Node"]
    assert [w.name for w in labels] == ["gpu-worker-002", "gpu-worker-003"]  # 004 is labelled already
    assert labels[0].patch == {"metadata": {"labels": {"gpu-canary": "false"}}}
    selector = next(w for w in plan.writes if w.name == "fleet")
    assert selector.patch == {"spec": {"nodeSelector": {"gpu-canary": "false"}}}
    order = [w.name for w in plan.writes]
    assert order.index("gpu-worker-003") < order.index("fleet") < order.index("gpu-canary")
    assert any("restarts the driver pod" in warning for warning in plan.warnings)


def test_pool_label_exclusion_needs_a_single_true_label():
    production = nvidia_driver("fleet")
    nodes = fleet(**{"gpu-worker-001": {"zone": "a"}})
    with pytest.raises(InvalidInputError, match="one label"):
        plan_rollout(
            view(nodes, drivers=[production], crd_has_default=False),
            request(mode="nvidiadriver", canary_selector={"gpu-canary": "true", "zone": "a"}),
        )


def test_a_node_with_another_value_of_the_pool_label_is_refused():
    production = nvidia_driver("fleet")
    nodes = fleet(**{"gpu-worker-003": {"gpu-canary": "maybe"}})
    with pytest.raises(InvalidInputError, match="gpu-worker-003 carries gpu-canary=maybe"):
        plan_rollout(view(nodes, drivers=[production], crd_has_default=False), request(mode="nvidiadriver"))


def test_existing_canary_pool_is_bumped_in_place():
    drivers = [
        nvidia_driver("default", default=True),
        nvidia_driver("gpu-canary", selector=CANARY, version="565.57.01"),
    ]
    plan = plan_rollout(view(fleet(), drivers=drivers), request(mode="nvidiadriver"))
    assert plan.pin is None
    assert not [w for w in plan.writes if w.op == "create"]
    bump = next(w for w in plan.writes if w.name == "gpu-canary" and w.phase == PHASE_TARGET)
    assert bump.patch["spec"]["version"] == "570.124.06"


def test_promotion_patches_every_nvidia_driver_and_removes_our_canary_pool():
    drivers = [
        nvidia_driver("default", default=True),
        nvidia_driver("gpu-canary", selector=CANARY, version="570.124.06", labels={MANAGED_BY_LABEL: MANAGED_BY}),
    ]
    plan = plan_rollout(
        view(fleet(), drivers=drivers), request(scope="all", mode=None, upgrade_policy={"maxUnavailable": 2})
    )
    assert plan.targets == ("gpu-worker-001", "gpu-worker-002", "gpu-worker-003", "gpu-worker-004")
    target_writes = writes_of(plan, phase=PHASE_TARGET)
    assert [w.kind for w in target_writes] == ["ClusterPolicy", "NVIDIADriver", "NVIDIADriver"]
    assert target_writes[0].patch == {"spec": {"driver": {"upgradePolicy": {"maxUnavailable": 2}}}}
    assert target_writes[1].patch["spec"]["version"] == "570.124.06"
    assert target_writes[2].patch == {}  # the canary pool runs the target already
    cleanup = writes_of(plan, phase=PHASE_CLEANUP)
    assert [(w.op, w.name) for w in cleanup] == [("delete", "gpu-canary")]


def test_promotion_leaves_a_canary_pool_somebody_else_made():
    drivers = [nvidia_driver("default", default=True), nvidia_driver("gpu-canary", selector=CANARY)]
    plan = plan_rollout(view(fleet(), drivers=drivers), request(scope="all", mode=None))
    assert not writes_of(plan, phase=PHASE_CLEANUP)
    assert any("left in place" in warning for warning in plan.warnings)


def test_promotion_can_keep_the_canary_pool():
    drivers = [
        nvidia_driver("default", default=True),
        nvidia_driver("gpu-canary", selector=CANARY, labels={MANAGED_BY_LABEL: MANAGED_BY}),
    ]
    plan = plan_rollout(view(fleet(), drivers=drivers), request(scope="all", mode=None, remove_canary_driver=False))
    assert not writes_of(plan, phase=PHASE_CLEANUP)


# -- halts and diffs -------------------------------------------------------------------------------------------


def test_halt_holds_the_named_nodes_and_skips_those_already_held():
    nodes = [
        node("gpu-worker-002"),
        node("gpu-worker-003", labels={SKIP_LABEL: "true"}, annotations={HOLD_ANNOTATION: "canary"}),
    ]
    writes = halt_writes(nodes, hold=["gpu-worker-002", "gpu-worker-003"])
    assert [(w.name, w.patch["metadata"]["annotations"][HOLD_ANNOTATION]) for w in writes] == [
        ("gpu-worker-002", "halt")
    ]


def test_plan_diff_shows_objects_and_node_labels_once():
    production = nvidia_driver("fleet")
    plan = plan_rollout(view(fleet(), drivers=[production]), request(mode="nvidiadriver"))
    diff = plan_diff(plan)
    headers = [entry["before_header"] for entry in diff]
    assert headers == ["NVIDIADriver fleet", "NVIDIADriver gpu-canary"]
    canary = diff[1]
    assert canary["before"] == {}
    assert canary["after"]["spec"]["version"] == "570.124.06"  # where the pinned pool ends
    assert "resourceVersion" not in diff[0]["after"]["metadata"]
    skip = plan_diff(plan_rollout(view(fleet()), request()))
    labels = next(entry for entry in skip if entry["before_header"] == "Node labels")
    assert labels["after"]["nodes"]["gpu-worker-002"]["labels"][SKIP_LABEL] == "true"
    assert SKIP_LABEL not in labels["before"]["nodes"]["gpu-worker-002"]["labels"]
