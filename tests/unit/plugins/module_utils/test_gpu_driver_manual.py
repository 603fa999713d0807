"""Planning of the GPU driver rollout without the upgrade controller (pure)."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_manual import (
    EVICT_STEP,
    KEYS,
    REPLACE_STEP,
    clear_command,
    controller_absent,
    daemonsets_behind,
    failures_of,
    manual_settings,
    manual_targets,
    timeline_of,
    validator_ready,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_nodes import PodSelection, pods_to_evict
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_engine import CORDON_STEP

OLD, NEW = "550.127.05", "570.124.06"


def node(name: str, **annotations: str) -> dict:
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"}, "annotations": annotations}}


def driver_pod(node_name: str, version: str, *, terminating: bool = False) -> dict:
    meta: dict[str, Any] = {"name": f"driver-{node_name}", "namespace": "nvidia-gpu-operator"}
    if terminating:
        meta["deletionTimestamp"] = "2026-11-22T08:00:00Z"
    return {
        "metadata": meta,
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "nvidia-driver-ctr", "image": f"nvcr.io/nvidia/driver:{version}-rhcos4.16"}],
        },
        "status": {"phase": "Running", "containerStatuses": [{"name": "nvidia-driver-ctr", "ready": True}]},
    }


def test_the_controller_is_absent_when_auto_upgrade_is_off_or_not_served():
    assert controller_absent({"autoUpgrade": False}, served_upgrade_policy=True)
    assert controller_absent({}, served_upgrade_policy=True)
    assert controller_absent({"autoUpgrade": True}, served_upgrade_policy=False)
    assert not controller_absent({"autoUpgrade": True}, served_upgrade_policy=True)


def test_targets_are_the_nodes_behind_plus_the_unfinished_and_the_canary_only_when_asked():
    nodes = [
        node("w1"),
        node("w2"),
        node("w3", **{KEYS.state: "in-progress", KEYS.target: NEW, KEYS.started_at: "t"}),
        node("w4"),
        node("w5"),
    ]
    pods = [driver_pod("w1", NEW), driver_pod("w2", OLD), driver_pod("w3", NEW), driver_pod("w4", OLD)]
    pods.append(driver_pod("w5", NEW, terminating=True))
    managed = ["w1", "w2", "w3", "w4", "w5"]
    chosen = manual_targets(
        nodes=nodes,
        driver_pods=pods,
        target_version=NEW,
        managed=managed,
        canary_nodes=("w2",),
        held_by_others=("w4",),
        canary_only=False,
    )
    # w1 runs the target; w3 runs it but an earlier run left it unfinished (still cordoned): resume it;
    # w4 is held by someone else; w5's pod at the target is still terminating: not at the target.
    assert chosen.targets == ("w2", "w3", "w5")
    assert chosen.canaries == ("w2",) and chosen.at_target == ("w1", "w3")
    canary = manual_targets(
        nodes=nodes,
        driver_pods=pods,
        target_version=NEW,
        managed=managed,
        canary_nodes=("w2",),
        held_by_others=(),
        canary_only=True,
    )
    assert canary.targets == ("w2",)


def test_settings_come_from_the_cluster_policy_budget_and_the_replace_step_changes_the_node():
    settings = manual_settings(
        {"maxUnavailable": "50%", "maxParallelUpgrades": 0},
        target_version=NEW,
        canaries=("w2",),
        budget_wait_timeout=60,
        budget_wait_sleep=1,
        undo_other_targets=True,
    )
    assert (settings.max_unavailable, settings.max_parallel, settings.canary_nodes) == ("50%", 0, ("w2",))
    assert settings.steps_before_change([EVICT_STEP, REPLACE_STEP, "wait-validator"]) == (CORDON_STEP, EVICT_STEP)
    assert manual_settings({}, target_version=NEW, canaries=(), budget_wait_timeout=1, budget_wait_sleep=1,
                           undo_other_targets=False).max_unavailable == "25%"  # fmt: skip


def test_daemonsets_behind_and_validator_after_the_new_driver():
    current = {"metadata": {"name": "ds-a"}, "spec": {"template": {"spec": {"containers": [
        {"name": "nvidia-driver-ctr", "image": f"nvcr.io/nvidia/driver:{NEW}-rhcos4.16"}]}}}}  # fmt: skip
    stale = {"metadata": {"name": "ds-b"}, "spec": {"template": {"spec": {"containers": [
        {"name": "nvidia-driver-ctr", "image": f"nvcr.io/nvidia/driver:{OLD}-rhcos4.16"}]}}}}  # fmt: skip
    assert daemonsets_behind([current, stale], target_version=NEW) == ["ds-b"]

    def validator(created: str, ready: bool) -> dict:
        return {
            "metadata": {"creationTimestamp": created},
            "status": {"phase": "Running", "containerStatuses": [{"ready": ready}]},
        }

    assert not validator_ready([validator("2026-11-22T08:00:00Z", True)], not_before="2026-11-22T08:05:00Z")
    assert not validator_ready([validator("2026-11-22T08:06:00Z", False)], not_before="2026-11-22T08:05:00Z")
    assert validator_ready([validator("2026-11-22T08:06:00Z", True)], not_before="2026-11-22T08:05:00Z")


def test_timeline_failures_and_the_clear_command():
    engine = [
        {
            "node": "w1",
            "outcome": "done",
            "steps": [{"name": "cordon", "started": "a", "ended": "b", "outcome": "done"}],
        },
        {"node": "w2", "outcome": "failed", "failed_step": REPLACE_STEP, "error": "no build", "steps": []},
        {"node": "w3", "outcome": "not-started"},
    ]
    assert timeline_of(engine) == {
        "w1": [{"state": "cordon", "entered_at": "a", "observed_at": "b", "outcome": "done"}]
    }
    assert failures_of(engine) == [{"node": "w2", "state": REPLACE_STEP, "reason": "no build"}]
    assert clear_command("w2") == f"kubectl annotate node w2 {KEYS.state}=pending --overwrite"


def test_gpu_consumers_that_request_no_gpu_are_evicted_when_asked():
    owner = [{"kind": "ReplicaSet", "name": "rs", "controller": True}]
    runtime_only = {"metadata": {"name": "viz", "namespace": "a", "ownerReferences": owner},
                    "spec": {"runtimeClassName": "nvidia", "containers": [{"name": "c"}]}}  # fmt: skip
    volumes = [{"hostPath": {"path": "/dev/nvidia0"}}]
    device_mount = {"metadata": {"name": "mon", "namespace": "a", "ownerReferences": owner},
                    "spec": {"volumes": volumes, "containers": [{"name": "c"}]}}  # fmt: skip
    plain = {"metadata": {"name": "web", "namespace": "a", "ownerReferences": owner}, "spec": {"containers": [{}]}}
    pods = [runtime_only, device_mount, plain]
    chosen = pods_to_evict(pods, selection=PodSelection(gpu=True, gpu_consumers=True))
    assert [p["metadata"]["name"] for p in chosen.evict] == ["mon", "viz"]
    assert pods_to_evict(pods, selection=PodSelection(gpu=True)).evict == ()
