"""Held nodes a fleet-wide driver run sets back to upgrade-done instead of cycling them (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_scope import (
    HOLD_ANNOTATION,
    SKIP_LABEL,
    STATE_LABEL,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_settle import (
    INITIAL_STATE_ANNOTATION,
    REQUESTED_ANNOTATION,
    daemonsets_run_target,
    needless_cycle_writes,
    newest_revision_hash,
)

DS_UID = "ds-uid"
OLD, NEW = "5d8f7c", "7b9c4d"


def daemonset(version: str = "550.90.07", *, generation: int = 3, observed: int = 3) -> dict:
    return {
        "metadata": {"name": "nvidia-driver-daemonset", "uid": DS_UID, "generation": generation},
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": "nvidia-driver-ctr", "image": f"nvcr.io/nvidia/driver:{version}-rhcos4.16"}]
                }
            }
        },
        "status": {"observedGeneration": observed},
    }


def revision(suffix: str, number: int, *, owner: str = DS_UID) -> dict:
    return {
        "metadata": {
            "name": f"nvidia-driver-daemonset-{suffix}",
            "ownerReferences": [{"kind": "DaemonSet", "uid": owner, "controller": True}],
        },
        "revision": number,
    }


def node(name: str, *, state: str = "upgrade-required", held: bool = True, **extra: Any) -> dict:
    labels = {"nvidia.com/gpu.present": "true", STATE_LABEL: state}
    annotations = dict(extra.pop("annotations", {}))
    if held:
        labels[SKIP_LABEL] = "true"
        annotations[HOLD_ANNOTATION] = "canary"
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations}, "spec": dict(extra)}


def pod(node_name: str, suffix: str, **meta: Any) -> dict:
    return {
        "metadata": {
            "name": f"nvidia-driver-daemonset-{node_name}",
            "labels": {"controller-revision-hash": suffix},
            "ownerReferences": [{"kind": "DaemonSet", "uid": DS_UID, "controller": True}],
            **meta,
        },
        "spec": {"nodeName": node_name},
    }


# A rollback re-used the old revision (OLD, bumped above NEW): pods still on it are in sync.
REVISIONS = (revision(NEW, 2), revision(OLD, 3), revision("other", 9, owner="another-ds"))


def writes_for(nodes: list[dict], pods: list[dict]) -> dict[str, dict]:
    found = needless_cycle_writes(
        nodes=nodes,
        driver_pods=pods,
        daemonsets=[daemonset()],
        revisions=REVISIONS,
        targets=[n["metadata"]["name"] for n in nodes],
    )
    return {write.name: write.patch for write in found}


def test_the_newest_revision_of_the_daemonset_names_the_hash_a_bumped_old_revision_included() -> None:
    assert newest_revision_hash(daemonset(), REVISIONS) == OLD
    assert newest_revision_hash(daemonset(), (revision(OLD, 1), revision(NEW, 2))) == NEW
    assert newest_revision_hash(daemonset(), (revision("x", 4, owner="another-ds"),)) is None


def test_daemonsets_run_the_target_only_when_rendered_and_seen_by_their_controller() -> None:
    assert daemonsets_run_target([daemonset()], target_version="550.90.07")
    assert not daemonsets_run_target([daemonset("570.124.06")], target_version="550.90.07")
    assert not daemonsets_run_target([daemonset(generation=4, observed=3)], target_version="550.90.07")
    assert not daemonsets_run_target([], target_version="550.90.07")


def test_a_held_node_whose_pod_is_in_sync_goes_to_upgrade_done() -> None:
    found = writes_for([node("gpu-1")], [pod("gpu-1", OLD)])
    assert found == {"gpu-1": {"metadata": {"labels": {STATE_LABEL: "upgrade-done"}}}}


@pytest.mark.parametrize(
    ("the_node", "the_pods"),
    [
        pytest.param(node("gpu-1"), [pod("gpu-1", NEW)], id="pod-on-another-revision"),
        pytest.param(node("gpu-1"), [], id="no-pod"),
        pytest.param(node("gpu-1"), [pod("gpu-1", OLD, deletionTimestamp="2026-01-01T00:00:00Z")], id="terminating"),
        pytest.param(node("gpu-1", held=False), [pod("gpu-1", OLD)], id="not-held-by-us"),
        pytest.param(node("gpu-1", state="upgrade-failed"), [pod("gpu-1", OLD)], id="not-upgrade-required"),
        pytest.param(node("gpu-1", unschedulable=True), [pod("gpu-1", OLD)], id="cordoned"),
        pytest.param(
            node("gpu-1", annotations={INITIAL_STATE_ANNOTATION: "true"}), [pod("gpu-1", OLD)], id="person-cordoned"
        ),
        pytest.param(
            node("gpu-1", annotations={REQUESTED_ANNOTATION: "true"}), [pod("gpu-1", OLD)], id="upgrade-requested"
        ),
    ],
)
def test_a_node_the_write_could_lose_something_on_is_left_to_the_controllers_cycle(
    the_node: dict, the_pods: list[dict]
) -> None:
    assert writes_for([the_node], the_pods) == {}


def test_only_the_runs_targets_are_written() -> None:
    found = needless_cycle_writes(
        nodes=[node("gpu-1"), node("gpu-2")],
        driver_pods=[pod("gpu-1", OLD), pod("gpu-2", OLD)],
        daemonsets=[daemonset()],
        revisions=REVISIONS,
        targets=["gpu-2"],
    )
    assert [write.name for write in found] == ["gpu-2"]
