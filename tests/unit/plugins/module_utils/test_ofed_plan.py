"""MOFED rollout decisions (pure): image versions, pod failure, targets, the NicClusterPolicy patch, holds."""

from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._ofed_plan import (
    HOLD_ANNOTATION,
    SKIP_LABEL,
    STATE_LABEL,
    AutoUpgradeSettings,
    auto_node,
    daemonsets_render,
    image_runs_version,
    image_tag,
    mofed_pod,
    mofed_pods_by_node,
    new_pod_ready,
    ofed_diff,
    ofed_policy_patch,
    pod_failure,
    select_targets,
)

OLD = "24.07-0.6.1.0"
NEW = "25.01-0.6.0.0-0"


def pod(
    name: str,
    node: str,
    version: str,
    *,
    ready: bool = True,
    restarts: int = 0,
    waiting: str = "",
    terminating: bool = False,
    uid: str = "",
) -> dict[str, Any]:
    status: dict[str, Any] = {"name": "mofed-container", "ready": ready, "restartCount": restarts, "state": {}}
    if waiting:
        status["state"] = {"waiting": {"reason": waiting, "message": "back-off restarting"}}
        status["lastState"] = {"terminated": {"message": "no driver package for kernel 5.14"}}
    meta: dict[str, Any] = {"name": name, "namespace": "nvidia-network-operator", "uid": uid or name}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "mofed-container", "image": f"nvcr.io/nvidia/mellanox/doca-driver:{version}-rhcos4.16-amd64"}
            ],
        },
        "status": {"phase": "Running", "containerStatuses": [status]},
    }


def node(name: str, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict:
    return {"metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}}, "spec": {}}


@pytest.mark.parametrize(
    ("image", "version", "expected"),
    [
        ("nvcr.io/nvidia/mellanox/doca-driver:24.07-0.6.1.0-rhcos4.16-amd64", "24.07-0.6.1.0", True),
        ("nvcr.io/nvidia/mellanox/doca-driver:24.10-0.7.0.0-0-ubuntu22.04-amd64", "24.10-0.7.0.0-0", True),
        ("nvcr.io/nvidia/mellanox/doca-driver:24.10-0.7.0.0-0-ubuntu22.04-amd64", "24.10-0.7.0.0", True),
        ("nvcr.io/nvidia/mellanox/doca-driver:24.10-0.7.0.01-ubuntu22.04-amd64", "24.10-0.7.0.0", False),
        ("registry:5000/mofed:24.07-0.6.1.0", "24.07-0.6.1.0", True),
        ("registry:5000/mofed@sha256:abc", "24.07-0.6.1.0", False),
        ("mofed:24.07", "", False),
    ],
)
def test_image_runs_version(image: str, version: str, expected: bool) -> None:
    assert image_runs_version(image, version) is expected


def test_image_tag_ignores_registry_port_and_digest() -> None:
    assert image_tag("registry:5000/a/b:1.2-x@sha256:ff") == "1.2-x"
    assert image_tag("registry:5000/a/b") == ""


def test_mofed_pods_by_node_prefers_the_live_pod() -> None:
    pods = [pod("old", "n1", OLD, terminating=True), pod("new", "n1", NEW), pod("other", "n2", OLD)]
    chosen = mofed_pods_by_node(pods)
    assert chosen["n1"].name == "new" and chosen["n2"].name == "other"


def test_pod_failure_after_the_restart_limit() -> None:
    crashing = mofed_pod(pod("p", "n1", NEW, ready=False, restarts=2, waiting="CrashLoopBackOff"))
    assert pod_failure(crashing, restart_limit=3) == ""
    message = pod_failure(crashing, restart_limit=2)
    assert "node n1" in message and "CrashLoopBackOff" in message and "no driver package" in message
    assert pod_failure(mofed_pod(pod("p", "n1", NEW, ready=False, restarts=11)), restart_limit=10)
    assert pod_failure(mofed_pod(pod("p", "n1", NEW, restarts=50)), restart_limit=1) == ""  # Ready now


def test_new_pod_ready_needs_a_new_uid_the_version_and_readiness() -> None:
    assert new_pod_ready(mofed_pod(pod("p", "n1", NEW, uid="u2")), version=NEW, replaced_uids=["u1"])
    assert not new_pod_ready(mofed_pod(pod("p", "n1", NEW, uid="u1")), version=NEW, replaced_uids=["u1"])
    assert not new_pod_ready(mofed_pod(pod("p", "n1", OLD, uid="u2")), version=NEW, replaced_uids=["u1"])
    assert not new_pod_ready(mofed_pod(pod("p", "n1", NEW, ready=False)), version=NEW, replaced_uids=[])
    assert not new_pod_ready(None, version=NEW, replaced_uids=[])


def test_select_targets_filters_and_resumes_unfinished_nodes() -> None:
    nodes = [node("n1", {"gpu-canary": "true"}), node("n2"), node("n3"), node("cp")]
    pods = mofed_pods_by_node([pod("a", "n1", OLD), pod("b", "n2", NEW), pod("c", "n3", OLD)])
    selection = select_targets(nodes=nodes, pods=pods, version=NEW, canary_selector="gpu-canary=true")
    assert selection.pool == ("n1", "n2", "n3")
    assert selection.targets == ("n1", "n3") and selection.current == ("n2",)
    assert selection.canaries == ("n1",)
    only = select_targets(nodes=nodes, pods=pods, version=NEW, node_selector="gpu-canary=true")
    assert only.targets == ("n1",)
    resumed = select_targets(nodes=nodes, pods=pods, version=NEW, unfinished=["n2"])
    assert resumed.targets == ("n1", "n2", "n3")
    named = select_targets(nodes=nodes, pods=pods, version=NEW, node_names=["n3", "cp"])
    assert named.targets == ("n3",) and named.excluded == (("cp", "runs no MOFED pod"),)
    with pytest.raises(InvalidInputError, match="ghost"):
        select_targets(nodes=nodes, pods=pods, version=NEW, node_names=["ghost"])


def test_policy_patch_sets_only_what_differs() -> None:
    drain = {"enable": True, "podSelector": "", "timeoutSeconds": 300}
    upgrade_policy = {"autoUpgrade": False, "maxParallelUpgrades": 1, "drain": drain}
    policy = {
        "metadata": {"name": "nic-cluster-policy"},
        "spec": {"ofedDriver": {"version": OLD, "upgradePolicy": upgrade_policy}},
    }
    assert ofed_policy_patch(policy, version=NEW) == {"spec": {"ofedDriver": {"version": NEW}}}
    policy["spec"]["ofedDriver"]["version"] = NEW
    assert ofed_policy_patch(policy, version=NEW) == {}
    auto = AutoUpgradeSettings(max_parallel_upgrades=2, drain_pod_selector="app=rdma")
    assert ofed_policy_patch(policy, version=NEW, auto_upgrade=auto) == {
        "spec": {"ofedDriver": {"upgradePolicy": {"autoUpgrade": True, "maxParallelUpgrades": 2,
                                                  "drain": {"podSelector": "app=rdma"}}}}
    }  # fmt: skip
    with pytest.raises(InvalidInputError, match=r"no spec\.ofedDriver"):
        ofed_policy_patch({"metadata": {"name": "x"}, "spec": {}}, version=NEW)


def test_a_rolling_rollout_turns_the_operators_auto_upgrade_off() -> None:
    # Left on (by an earlier auto_upgrade run), the controller would reload nodes beside the rollout.
    upgrade_policy = {"autoUpgrade": True, "maxParallelUpgrades": 1}
    policy = {"metadata": {"name": "p"}, "spec": {"ofedDriver": {"version": OLD, "upgradePolicy": upgrade_policy}}}
    assert ofed_policy_patch(policy, version=NEW) == {
        "spec": {"ofedDriver": {"version": NEW, "upgradePolicy": {"autoUpgrade": False}}}
    }


def test_daemonsets_render_names_those_behind() -> None:
    def daemonset(name: str, version: str) -> dict:
        return {"metadata": {"name": name}, "spec": {"template": {"spec": pod("x", "n", version)["spec"]}}}

    assert daemonsets_render([daemonset("a", NEW), daemonset("b", OLD)], version=NEW) == ["b"]
    assert daemonsets_render([daemonset("a", NEW)], version=NEW) == []


def test_auto_node_reads_state_hold_and_version() -> None:
    held = node("n1", {STATE_LABEL: "upgrade-required", SKIP_LABEL: "true"}, {HOLD_ANNOTATION: "ofed"})
    entry = auto_node(held, mofed_pod(pod("p", "n1", OLD)), version=NEW)
    assert entry.held and entry.held_by_us and not entry.done and not entry.failed
    done = auto_node(node("n2", {STATE_LABEL: "upgrade-done"}), mofed_pod(pod("p", "n2", NEW)), version=NEW)
    assert done.done and not done.held
    failed = auto_node(node("n3", {STATE_LABEL: "upgrade-failed"}), None, version=NEW)
    assert failed.failed and not failed.at_target


def test_the_diff_shows_the_policy_and_each_target_node_before_and_after() -> None:
    policy = {
        "metadata": {"name": "nic-cluster-policy"},
        "spec": {"ofedDriver": {"version": OLD, "upgradePolicy": {"autoUpgrade": True, "maxParallelUpgrades": 1}}},
    }
    patch = ofed_policy_patch(policy, version=NEW)
    state = "gpufleet.io/rollout-ofed-state"
    nodes = [node("w1"), node("w2", annotations={state: "failed"}), node("w3", labels={SKIP_LABEL: "true"})]
    pods = mofed_pods_by_node([pod("m1", "w1", OLD), pod("m2", "w2", OLD), pod("m3", "w3", OLD)])
    diff = ofed_diff(policy, patch, nodes=nodes, pods=pods, targets=["w1", "w2"], version=NEW, state_key=state,
                     states={"w1": "done", "w2": "done"}, held={})  # fmt: skip
    assert diff["before"]["nic_cluster_policy"]["ofedDriver"] == policy["spec"]["ofedDriver"]
    assert diff["after"]["nic_cluster_policy"]["ofedDriver"] == {
        "version": NEW, "upgradePolicy": {"autoUpgrade": False, "maxParallelUpgrades": 1}}  # fmt: skip
    assert policy["spec"]["ofedDriver"]["version"] == OLD  # not changed in place
    assert list(diff["before"]["nodes"]) == ["w1", "w2"]  # the targets only
    assert OLD in diff["before"]["nodes"]["w1"]["mofed"] and diff["after"]["nodes"]["w1"]["mofed"] == NEW
    assert diff["before"]["nodes"]["w2"]["rollout_state"] == "failed"
    assert diff["after"]["nodes"]["w2"] == {"mofed": NEW, "rollout_state": "done", "held": False}
    # auto_upgrade: the hold on a node changes, no rollout state of ours; nothing to change: the same on both sides.
    auto = ofed_diff(policy, {}, nodes=nodes, pods=pods, targets=["w3", "w1"], version=NEW, state_key=state,
                     states={}, held={"w3": False, "w1": True})  # fmt: skip
    assert auto["before"]["nic_cluster_policy"] == auto["after"]["nic_cluster_policy"]
    assert [auto["before"]["nodes"][n]["held"] for n in ("w3", "w1")] == [True, False]
    assert [auto["after"]["nodes"][n]["held"] for n in ("w3", "w1")] == [False, True]
    assert auto["after"]["nodes"]["w3"]["rollout_state"] == ""
