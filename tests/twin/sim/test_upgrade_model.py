"""Unit tests of the pure driver-upgrade state machine (operators/upgrade_model.py).

Each case names the upstream source or documentation it checks:
k8s-operator-libs pkg/upgrade (consts.go, common_manager.go, upgrade_inplace.go,
pod_manager.go, drain_manager.go, validation_manager.go), the GPU Operator
"GPU Driver Upgrades" documentation, and the Network Operator's
life-cycle-management documentation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import pytest

from gpufleet_twin.operators import upgrade_model as um
from gpufleet_twin.operators.upgrade_model import (
    GPU_DRIVER,
    OFED_DRIVER,
    ChangeState,
    ClusterSnapshot,
    ContainerState,
    Cordon,
    DeleteDriverPod,
    DrainPolicy,
    DriverDaemonSet,
    DriverPod,
    EvictPods,
    NodePod,
    NodeSnapshot,
    PodDeletionPolicy,
    PodRef,
    RecordEvent,
    RemoveAnnotation,
    SetAnnotation,
    StartEvictionClock,
    Uncordon,
    UpgradePolicy,
    WaitForCompletionPolicy,
)

NOW = 1_760_000_000.0
DS = "nvidia-driver-daemonset"
NEW_HASH = "7d9f8c6b5"
OLD_HASH = "5c4b3a291"
STATE = GPU_DRIVER.state_label

# The chart defaults (values.yaml driver.upgradePolicy): autoUpgrade true,
# maxParallelUpgrades 1, maxUnavailable 25%, drain disabled.
CHART_POLICY = UpgradePolicy(auto_upgrade=True)


def driver_pod(
    node: str,
    *,
    revision: str = NEW_HASH,
    ready: bool = True,
    restarts: int = 0,
    terminating: bool = False,
    daemonset: str | None = DS,
) -> DriverPod:
    return DriverPod(
        namespace="gpu-operator",
        name=f"{DS}-{node[-3:]}",
        daemonset=daemonset,
        revision_hash=revision,
        phase="Running",
        containers=(ContainerState("nvidia-driver-ctr", ready=ready, restart_count=restarts),),
        terminating=terminating,
    )


def node(
    name: str,
    state: str | None = None,
    *,
    revision: str = NEW_HASH,
    unschedulable: bool = False,
    ready: bool = True,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    pods: Iterable[NodePod] = (),
    pod: DriverPod | None = None,
    eviction_started_at: float | None = None,
) -> NodeSnapshot:
    node_labels = dict(labels or {})
    if state is not None:
        node_labels[STATE] = state
    return NodeSnapshot(
        name=name,
        driver_pod=pod or driver_pod(name, revision=revision),
        labels=node_labels,
        annotations=dict(annotations or {}),
        unschedulable=unschedulable,
        ready=ready,
        pods=tuple(pods),
        eviction_started_at=eviction_started_at,
    )


def snapshot(*nodes: NodeSnapshot, now: float = NOW) -> ClusterSnapshot:
    return ClusterSnapshot(
        now=now,
        nodes=tuple(nodes),
        daemonsets=(DriverDaemonSet(DS, len(nodes), len(nodes), NEW_HASH),),
    )


def gpu_job(name: str, **changes: object) -> NodePod:
    pod = NodePod(
        namespace="ml",
        name=name,
        labels={"app": "trainer"},
        requests_gpu=True,
        controller_kind="Job",
    )
    return dataclasses.replace(pod, **changes)


def validator(ready: bool) -> NodePod:
    return NodePod(
        namespace="gpu-operator",
        name="nvidia-operator-validator-x1",
        labels={"app": "nvidia-operator-validator"},
        ready=ready,
        controller_kind="DaemonSet",
    )


def decide(*nodes: NodeSnapshot, policy: UpgradePolicy = CHART_POLICY, flavor=GPU_DRIVER, now: float = NOW):
    return um.plan_upgrade(snapshot(*nodes, now=now), policy=policy, flavor=flavor)


def only(plan: um.UpgradePlan) -> um.NodeDecision:
    assert len(plan.decisions) == 1
    return plan.decisions[0]


# -- keys (consts.go, util.go) -------------------------------------------------------------------------
def test_keys_follow_the_driver_name_format_of_consts_go() -> None:
    assert GPU_DRIVER.state_label == "nvidia.com/gpu-driver-upgrade-state"
    assert GPU_DRIVER.skip_label == "nvidia.com/gpu-driver-upgrade.skip"
    assert GPU_DRIVER.drain_skip_label == "nvidia.com/gpu-driver-upgrade-drain.skip"
    assert GPU_DRIVER.initial_state_annotation == "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable"
    assert (
        GPU_DRIVER.wait_for_completion_start_annotation
        == "nvidia.com/gpu-driver-upgrade-wait-for-pod-completion-start-time"
    )
    assert GPU_DRIVER.validation_start_annotation == "nvidia.com/gpu-driver-upgrade-validation-start-time"
    assert GPU_DRIVER.upgrade_requested_annotation == "nvidia.com/gpu-driver-upgrade-requested"
    assert GPU_DRIVER.safe_load_annotation == "nvidia.com/gpu-driver-upgrade.driver-wait-for-safe-load"
    assert GPU_DRIVER.event_reason == "GPUDriverUpgrade"
    assert OFED_DRIVER.state_label == "nvidia.com/ofed-driver-upgrade-state"
    assert OFED_DRIVER.event_reason == "OFEDDriverUpgrade"


def test_ofed_flavor_has_no_pod_deletion_validation_or_max_unavailable() -> None:
    # Network Operator: upgrade states have no pod-deletion step, no maxUnavailable field.
    assert not OFED_DRIVER.pod_deletion_enabled
    assert not OFED_DRIVER.validation_enabled
    assert not OFED_DRIVER.has_max_unavailable
    assert GPU_DRIVER.pod_deletion_enabled and GPU_DRIVER.validation_enabled and GPU_DRIVER.has_max_unavailable


# -- policy --------------------------------------------------------------------------------------------
def test_policy_from_the_k3s_exported_clusterpolicy_sample() -> None:
    spec = {
        "autoUpgrade": True,
        "drain": {"deleteEmptyDir": False, "enable": False, "force": False, "timeoutSeconds": 300},
        "maxParallelUpgrades": 1,
        "maxUnavailable": "25%",
        "podDeletion": {"deleteEmptyDir": False, "force": False, "timeoutSeconds": 300},
        "waitForCompletion": {"timeoutSeconds": 0},
    }
    policy = UpgradePolicy.from_spec(spec)
    assert policy == UpgradePolicy(
        auto_upgrade=True,
        max_parallel_upgrades=1,
        max_unavailable="25%",
        wait_for_completion=WaitForCompletionPolicy("", 0),
        pod_deletion=PodDeletionPolicy(False, 300, False),
        drain=DrainPolicy(False, False, "", 300, False),
    )


def test_missing_upgrade_policy_means_no_auto_upgrade() -> None:
    # upgrade_controller.go: UpgradePolicy == nil || !AutoUpgrade -> cleanup and skip.
    assert UpgradePolicy.from_spec(None).auto_upgrade is False
    assert UpgradePolicy.from_spec({}).auto_upgrade is False


def test_ofed_policy_ignores_max_unavailable_and_drains_by_default() -> None:
    # NicClusterPolicy ofedDriver.upgradePolicy: drain.enable defaults to true, no maxUnavailable.
    policy = UpgradePolicy.from_spec({"autoUpgrade": True, "maxUnavailable": 1}, flavor=OFED_DRIVER)
    assert policy.max_unavailable is None
    assert policy.drain.enable is True


@pytest.mark.parametrize(
    ("value", "total", "expected"),
    [("25%", 8, 2), ("25%", 6, 2), ("25%", 1, 1), ("10%", 20, 2), ("0%", 8, 0), (3, 8, 3), (None, 8, 8)],
)
def test_max_unavailable_scales_int_or_percent_rounding_up(value: int | str | None, total: int, expected: int) -> None:
    # intstr.GetScaledValueFromIntOrPercent(value, total, roundUp=true).
    assert um.scaled_max_unavailable(value, total) == expected


def test_max_unavailable_string_without_percent_is_an_error() -> None:
    with pytest.raises(ValueError, match="not a percentage"):
        um.scaled_max_unavailable("1", 8)


# -- slot arithmetic (common_manager.go GetUpgradesAvailable, upgrade_inplace.go) -----------------------
def required_nodes(count: int) -> list[NodeSnapshot]:
    return [node(f"gpu-worker-{i:03d}", um.STATE_UPGRADE_REQUIRED, revision=OLD_HASH) for i in range(count)]


def test_max_parallel_upgrades_1_starts_one_node_at_a_time() -> None:
    # GPU Operator docs: maxParallelUpgrades 1 (default) upgrades one node at a time.
    plan = decide(*required_nodes(8), policy=UpgradePolicy(auto_upgrade=True, max_parallel_upgrades=1))
    assert plan.next_states() == {"gpu-worker-000": um.STATE_CORDON_REQUIRED}
    assert plan.counts == um.UpgradeCounts(
        total=8, in_progress=0, done=0, failed=0, pending=8, max_unavailable=2, current_unavailable=0, available=1
    )


def test_max_parallel_upgrades_0_is_unlimited_but_max_unavailable_still_caps() -> None:
    # Docs: maxParallelUpgrades 0 = no limit; maxUnavailable 25% of 8 nodes = 2 nodes at once.
    plan = decide(*required_nodes(8), policy=UpgradePolicy(auto_upgrade=True, max_parallel_upgrades=0))
    assert sorted(plan.next_states()) == ["gpu-worker-000", "gpu-worker-001"]
    unlimited = decide(
        *required_nodes(8), policy=UpgradePolicy(auto_upgrade=True, max_parallel_upgrades=0, max_unavailable="100%")
    )
    assert len(unlimited.next_states()) == 8


def test_nodes_in_progress_use_up_the_parallel_slots() -> None:
    nodes = [*required_nodes(3), node("gpu-worker-100", um.STATE_POD_RESTART_REQUIRED, unschedulable=True)]
    plan = decide(*nodes)
    assert plan.counts is not None and plan.counts.in_progress == 1 and plan.counts.available == 0
    assert um.STATE_CORDON_REQUIRED not in plan.next_states().values()


def test_max_unavailable_25_percent_of_8_with_one_node_already_cordoned() -> None:
    # maxUnavailable counts a node that is already unavailable: 2 allowed - 1 cordoned = 1 slot.
    cordoned_done = node("gpu-worker-100", um.STATE_DONE, unschedulable=True)
    nodes = [*required_nodes(7), cordoned_done]
    plan = decide(*nodes, policy=UpgradePolicy(auto_upgrade=True, max_parallel_upgrades=0))
    assert plan.counts is not None
    assert (plan.counts.max_unavailable, plan.counts.current_unavailable, plan.counts.available) == (2, 1, 1)
    assert plan.next_states() == {"gpu-worker-000": um.STATE_CORDON_REQUIRED}


def test_not_ready_nodes_and_cordon_required_nodes_count_as_unavailable() -> None:
    nodes = [
        *required_nodes(6),
        node("gpu-worker-100", um.STATE_DONE, ready=False),
        node("gpu-worker-101", um.STATE_CORDON_REQUIRED),
    ]
    plan = decide(*nodes, policy=UpgradePolicy(auto_upgrade=True, max_parallel_upgrades=0))
    assert plan.counts is not None
    assert plan.counts.current_unavailable == 2
    assert plan.counts.available == 0
    # The cordon-required node is still cordoned in this reconcile; nobody new starts.
    assert plan.next_states() == {"gpu-worker-101": um.STATE_WAIT_FOR_JOBS_REQUIRED}


def test_skip_label_holds_a_node_in_upgrade_required_without_using_a_slot() -> None:
    # Docs: label a node nvidia.com/gpu-driver-upgrade.skip=true to leave it out of the upgrade.
    skipped = node(
        "gpu-worker-000", um.STATE_UPGRADE_REQUIRED, revision=OLD_HASH, labels={GPU_DRIVER.skip_label: "true"}
    )
    plan = decide(skipped, *required_nodes(3)[1:])
    assert plan.next_states() == {"gpu-worker-001": um.STATE_CORDON_REQUIRED}
    assert plan.for_node("gpu-worker-000").actions == ()
    assert plan.counts is not None and plan.counts.total == 3  # skipped nodes stay in the total


def test_hand_cordoned_node_proceeds_without_a_free_slot() -> None:
    # upgrade_inplace.go: "Node is already cordoned, progressing for driver upgrade".
    busy = node("gpu-worker-100", um.STATE_DRAIN_REQUIRED, unschedulable=True)
    cordoned = node("gpu-worker-000", um.STATE_UPGRADE_REQUIRED, revision=OLD_HASH, unschedulable=True)
    waiting = node("gpu-worker-001", um.STATE_UPGRADE_REQUIRED, revision=OLD_HASH)
    plan = decide(busy, cordoned, waiting)
    assert plan.counts is not None and plan.counts.available == 0
    assert plan.next_states()["gpu-worker-000"] == um.STATE_CORDON_REQUIRED
    assert "gpu-worker-001" not in plan.next_states()


def test_foreign_state_values_are_not_managed_but_still_unavailable() -> None:
    odd = node("gpu-worker-100", "some-other-value", unschedulable=True)
    counts = um.count_upgrades([odd, *required_nodes(3)], policy=CHART_POLICY)
    assert counts.total == 3
    assert counts.current_unavailable == 1


# -- unknown / done (ProcessDoneOrUnknownNodes) -----------------------------------------------------------
def test_unknown_node_in_sync_becomes_done_with_an_event() -> None:
    decision = only(decide(node("gpu-worker-000")))
    assert decision.next_state == um.STATE_DONE
    assert RecordEvent("Normal", "GPUDriverUpgrade", "Successfully updated node state label to upgrade-done") in (
        decision.actions
    )


def test_unknown_or_done_node_out_of_sync_needs_upgrade() -> None:
    for state in (None, um.STATE_DONE):
        decision = only(decide(node("gpu-worker-000", state, revision=OLD_HASH)))
        assert decision.next_state == um.STATE_UPGRADE_REQUIRED


def test_done_node_in_sync_stays() -> None:
    assert only(decide(node("gpu-worker-000", um.STATE_DONE))).actions == ()


@pytest.mark.parametrize(
    "annotation",
    [GPU_DRIVER.upgrade_requested_annotation, GPU_DRIVER.safe_load_annotation],
    ids=["requested", "safe-load"],
)
def test_requested_or_safe_load_annotation_forces_upgrade_required(annotation: str) -> None:
    decision = only(decide(node("gpu-worker-000", um.STATE_DONE, annotations={annotation: "true"})))
    assert decision.next_state == um.STATE_UPGRADE_REQUIRED


def test_unschedulable_node_gets_the_initial_state_annotation() -> None:
    decision = only(decide(node("gpu-worker-000", um.STATE_DONE, revision=OLD_HASH, unschedulable=True)))
    assert SetAnnotation(GPU_DRIVER.initial_state_annotation, "true") in decision.actions
    assert decision.next_state == um.STATE_UPGRADE_REQUIRED


def test_orphaned_driver_pod_is_only_upgraded_on_request() -> None:
    orphan = driver_pod("gpu-worker-000", daemonset=None, revision=OLD_HASH)
    assert only(decide(node("gpu-worker-000", pod=orphan))).next_state == um.STATE_DONE
    requested = node("gpu-worker-000", pod=orphan, annotations={GPU_DRIVER.upgrade_requested_annotation: "true"})
    assert only(decide(requested)).next_state == um.STATE_UPGRADE_REQUIRED


def test_upgrade_required_removes_the_requested_annotation() -> None:
    requested = node(
        "gpu-worker-000",
        um.STATE_UPGRADE_REQUIRED,
        annotations={GPU_DRIVER.upgrade_requested_annotation: "true"},
        labels={GPU_DRIVER.skip_label: "true"},
    )
    decision = only(decide(requested))
    assert RemoveAnnotation(GPU_DRIVER.upgrade_requested_annotation) in decision.actions
    assert decision.next_state is None  # skipped, but the request is consumed


# -- cordon, wait for jobs -------------------------------------------------------------------------------
def test_cordon_required_cordons_then_waits_for_jobs() -> None:
    decision = only(decide(node("gpu-worker-000", um.STATE_CORDON_REQUIRED)))
    assert decision.actions[0] == Cordon()
    assert decision.next_state == um.STATE_WAIT_FOR_JOBS_REQUIRED


def test_wait_for_jobs_without_selector_goes_to_pod_deletion_or_drain() -> None:
    waiting = node("gpu-worker-000", um.STATE_WAIT_FOR_JOBS_REQUIRED, pods=[gpu_job("train-1")])
    assert only(decide(waiting)).next_state == um.STATE_POD_DELETION_REQUIRED
    ofed = dataclasses.replace(waiting, labels={OFED_DRIVER.state_label: um.STATE_WAIT_FOR_JOBS_REQUIRED})
    ofed_policy = UpgradePolicy.from_spec({"autoUpgrade": True}, flavor=OFED_DRIVER)
    assert only(decide(ofed, policy=ofed_policy, flavor=OFED_DRIVER)).next_state == um.STATE_DRAIN_REQUIRED


def test_wait_for_jobs_with_zero_timeout_waits_forever() -> None:
    policy = UpgradePolicy(auto_upgrade=True, wait_for_completion=WaitForCompletionPolicy("app=trainer", 0))
    waiting = node("gpu-worker-000", um.STATE_WAIT_FOR_JOBS_REQUIRED, pods=[gpu_job("train-1")])
    assert only(decide(waiting, policy=policy, now=NOW + 10 * 86400)).actions == ()


def test_wait_for_jobs_timeout_moves_on_to_pod_deletion() -> None:
    # pod_manager.go HandleTimeoutOnPodCompletions: a timeout is not a failure.
    policy = UpgradePolicy(auto_upgrade=True, wait_for_completion=WaitForCompletionPolicy("app=trainer", 600))
    key = GPU_DRIVER.wait_for_completion_start_annotation
    fresh = node("gpu-worker-000", um.STATE_WAIT_FOR_JOBS_REQUIRED, pods=[gpu_job("train-1")])
    assert only(decide(fresh, policy=policy)).actions[0] == SetAnnotation(key, str(int(NOW)))
    started = dataclasses.replace(fresh, annotations={key: str(int(NOW))})
    assert only(decide(started, policy=policy, now=NOW + 600)).actions == ()
    timed_out = only(decide(started, policy=policy, now=NOW + 601))
    assert timed_out.next_state == um.STATE_POD_DELETION_REQUIRED
    assert RemoveAnnotation(key) in timed_out.actions


def test_wait_for_jobs_finished_moves_on_and_clears_the_clock() -> None:
    policy = UpgradePolicy(auto_upgrade=True, wait_for_completion=WaitForCompletionPolicy("app=trainer", 600))
    key = GPU_DRIVER.wait_for_completion_start_annotation
    finished = node(
        "gpu-worker-000",
        um.STATE_WAIT_FOR_JOBS_REQUIRED,
        pods=[gpu_job("train-1", phase="Succeeded", ready=False)],
        annotations={key: str(int(NOW))},
    )
    decision = only(decide(finished, policy=policy))
    assert RemoveAnnotation(key) in decision.actions
    assert decision.next_state == um.STATE_POD_DELETION_REQUIRED


# -- pod deletion (pod_manager.go SchedulePodEviction) ---------------------------------------------------------
def test_pod_deletion_with_no_gpu_pods_goes_to_pod_restart() -> None:
    plain = NodePod(namespace="web", name="nginx-1", requests_gpu=False)
    decision = only(decide(node("gpu-worker-000", um.STATE_POD_DELETION_REQUIRED, pods=[plain])))
    assert decision.next_state == um.STATE_POD_RESTART_REQUIRED
    assert not decision.of_type(EvictPods)


def test_pod_deletion_evicts_gpu_pods_and_starts_the_clock() -> None:
    pods = [gpu_job("train-1"), gpu_job("train-2", terminating=True), NodePod(namespace="web", name="nginx-1")]
    decision = only(decide(node("gpu-worker-000", um.STATE_POD_DELETION_REQUIRED, pods=pods)))
    assert decision.actions == (
        StartEvictionClock(NOW),
        EvictPods(pods=(PodRef("ml", "train-1"),), purpose="pod-deletion"),
    )


def test_pod_deletion_keeps_retrying_a_pdb_refusal_until_the_timeout() -> None:
    blocked = node(
        "gpu-worker-000", um.STATE_POD_DELETION_REQUIRED, pods=[gpu_job("train-1")], eviction_started_at=NOW - 200
    )
    retry = only(decide(blocked))
    assert retry.actions == (EvictPods(pods=(PodRef("ml", "train-1"),), purpose="pod-deletion"),)
    failed = only(decide(blocked, now=NOW + 101))
    assert failed.next_state == um.STATE_FAILED
    warning = failed.of_type(RecordEvent)[0]
    assert warning.type == "Warning"
    assert warning.message == (
        "Failed to delete workload pods on the node for the driver upgrade, "
        'error when evicting pods/"train-1" -n "ml": global timeout reached: 5m0s'
    )


def test_pod_deletion_failure_falls_back_to_drain_when_enabled() -> None:
    policy = UpgradePolicy(auto_upgrade=True, drain=DrainPolicy(enable=True))
    blocked = node(
        "gpu-worker-000", um.STATE_POD_DELETION_REQUIRED, pods=[gpu_job("train-1")], eviction_started_at=NOW - 301
    )
    decision = only(decide(blocked, policy=policy))
    assert decision.next_state == um.STATE_DRAIN_REQUIRED
    messages = [e.message for e in decision.of_type(RecordEvent)]
    assert "Pod deletion failed but drain is enabled in spec. Will attempt a node drain" in messages


def test_pod_deletion_cannot_remove_unmanaged_or_emptydir_pods_without_the_flags() -> None:
    unmanaged = gpu_job("bare", controller_kind=None)
    scratch = gpu_job("scratch", uses_empty_dir=True)
    for pod, policy_flags in ((unmanaged, {"force": True}), (scratch, {"delete_empty_dir": True})):
        refused = only(decide(node("gpu-worker-000", um.STATE_POD_DELETION_REQUIRED, pods=[pod])))
        assert refused.next_state == um.STATE_FAILED
        allowed = UpgradePolicy(auto_upgrade=True, pod_deletion=PodDeletionPolicy(**policy_flags))
        evicted = only(decide(node("gpu-worker-000", um.STATE_POD_DELETION_REQUIRED, pods=[pod]), policy=allowed))
        assert evicted.of_type(EvictPods)


def test_pod_deletion_of_a_gpu_daemonset_pod_fails() -> None:
    # IgnoreAllDaemonSets skips the pod, so "cannot delete all required pods".
    ds_gpu_pod = gpu_job("gpu-agent", controller_kind="DaemonSet")
    assert only(decide(node("gpu-worker-000", um.STATE_POD_DELETION_REQUIRED, pods=[ds_gpu_pod]))).next_state == (
        um.STATE_FAILED
    )


def test_pod_deletion_waits_for_evicted_pods_then_reports() -> None:
    going = node(
        "gpu-worker-000",
        um.STATE_POD_DELETION_REQUIRED,
        pods=[gpu_job("train-1", terminating=True)],
        eviction_started_at=NOW - 10,
    )
    assert only(decide(going)).actions == ()
    gone = dataclasses.replace(going, pods=())
    decision = only(decide(gone))
    assert decision.next_state == um.STATE_POD_RESTART_REQUIRED
    assert decision.actions[0] == RecordEvent(
        "Normal", "GPUDriverUpgrade", "Deleted workload pods on the node for the driver upgrade"
    )


def test_ofed_has_no_pod_deletion_state() -> None:
    ofed_node = dataclasses.replace(
        node("gpu-worker-000", pods=[gpu_job("train-1")]),
        labels={OFED_DRIVER.state_label: um.STATE_POD_DELETION_REQUIRED},
    )
    policy = UpgradePolicy.from_spec({"autoUpgrade": True}, flavor=OFED_DRIVER)
    assert only(decide(ofed_node, policy=policy, flavor=OFED_DRIVER)).next_state == um.STATE_DRAIN_REQUIRED


# -- drain (drain_manager.go, kubectl drain helper) ------------------------------------------------------------
def test_drain_disabled_goes_straight_to_pod_restart() -> None:
    assert only(decide(node("gpu-worker-000", um.STATE_DRAIN_REQUIRED))).next_state == um.STATE_POD_RESTART_REQUIRED


def test_drain_evicts_every_pod_except_daemonsets_and_drain_skip_pods() -> None:
    policy = UpgradePolicy(auto_upgrade=True, drain=DrainPolicy(enable=True))
    pods = [
        gpu_job("train-1"),
        NodePod(namespace="web", name="nginx-1"),
        NodePod(namespace="mon", name="agent", labels={GPU_DRIVER.drain_skip_label: "true"}),
        validator(True),
    ]
    decision = only(decide(node("gpu-worker-000", um.STATE_DRAIN_REQUIRED, pods=pods), policy=policy))
    assert decision.actions[0] == RecordEvent("Normal", "GPUDriverUpgrade", "Scheduling drain of the node")
    evicted = decision.of_type(EvictPods)[0]
    assert evicted.pods == (PodRef("ml", "train-1"), PodRef("web", "nginx-1"))


def test_drain_pod_selector_narrows_the_pods() -> None:
    policy = UpgradePolicy(auto_upgrade=True, drain=DrainPolicy(enable=True, pod_selector="app=trainer"))
    pods = [gpu_job("train-1"), NodePod(namespace="web", name="nginx-1", labels={"app": "web"})]
    decision = only(decide(node("gpu-worker-000", um.STATE_DRAIN_REQUIRED, pods=pods), policy=policy))
    assert decision.of_type(EvictPods)[0].pods == (PodRef("ml", "train-1"),)


def test_drain_refuses_unmanaged_pods_without_force() -> None:
    policy = UpgradePolicy(auto_upgrade=True, drain=DrainPolicy(enable=True))
    bare = NodePod(namespace="dev", name="debug", controller_kind=None)
    decision = only(decide(node("gpu-worker-000", um.STATE_DRAIN_REQUIRED, pods=[bare]), policy=policy))
    assert decision.next_state == um.STATE_FAILED
    assert decision.of_type(RecordEvent)[-1].message == (
        "Failed to drain the node, cannot delete Pods that declare no controller (use --force to override): dev/debug"
    )


def test_drain_timeout_fails_the_node_and_success_moves_on() -> None:
    policy = UpgradePolicy(auto_upgrade=True, drain=DrainPolicy(enable=True, timeout_seconds=300))
    stuck = node("gpu-worker-000", um.STATE_DRAIN_REQUIRED, pods=[gpu_job("train-1")], eviction_started_at=NOW - 301)
    failed = only(decide(stuck, policy=policy))
    assert failed.next_state == um.STATE_FAILED
    assert failed.of_type(RecordEvent)[-1].message.startswith("Failed to drain the node, error when evicting")
    drained = only(decide(dataclasses.replace(stuck, pods=()), policy=policy))
    assert drained.next_state == um.STATE_POD_RESTART_REQUIRED
    assert RecordEvent("Normal", "GPUDriverUpgrade", "Successfully drained the node") in drained.actions


# -- pod restart (ProcessPodRestartNodes) ------------------------------------------------------------------------
def test_pod_restart_deletes_an_out_of_date_driver_pod_once() -> None:
    stale = node("gpu-worker-000", um.STATE_POD_RESTART_REQUIRED, revision=OLD_HASH)
    assert only(decide(stale)).actions == (DeleteDriverPod("gpu-operator", stale.driver_pod.name),)
    terminating = dataclasses.replace(
        stale, driver_pod=driver_pod("gpu-worker-000", revision=OLD_HASH, terminating=True)
    )
    assert only(decide(terminating)).actions == ()


def test_pod_restart_waits_for_the_new_pod_then_validates() -> None:
    loading = node("gpu-worker-000", um.STATE_POD_RESTART_REQUIRED, pod=driver_pod("gpu-worker-000", ready=False))
    assert only(decide(loading)).actions == ()
    ready = node("gpu-worker-000", um.STATE_POD_RESTART_REQUIRED)
    assert only(decide(ready)).next_state == um.STATE_VALIDATION_REQUIRED


def test_pod_restart_fails_after_more_than_ten_restarts() -> None:
    # isDriverPodFailing: container not Ready and restartCount > 10.
    ten = node(
        "gpu-worker-000", um.STATE_POD_RESTART_REQUIRED, pod=driver_pod("gpu-worker-000", ready=False, restarts=10)
    )
    assert only(decide(ten)).next_state is None
    eleven = dataclasses.replace(ten, driver_pod=driver_pod("gpu-worker-000", ready=False, restarts=11))
    assert only(decide(eleven)).next_state == um.STATE_FAILED


def test_pod_restart_unblocks_a_safe_load() -> None:
    waiting = node(
        "gpu-worker-000",
        um.STATE_POD_RESTART_REQUIRED,
        pod=driver_pod("gpu-worker-000", ready=False),
        annotations={GPU_DRIVER.safe_load_annotation: "true"},
    )
    assert RemoveAnnotation(GPU_DRIVER.safe_load_annotation) in only(decide(waiting)).actions


def test_ofed_pod_restart_skips_validation() -> None:
    ofed_node = dataclasses.replace(
        node("gpu-worker-000"), labels={OFED_DRIVER.state_label: um.STATE_POD_RESTART_REQUIRED}
    )
    policy = UpgradePolicy.from_spec({"autoUpgrade": True}, flavor=OFED_DRIVER)
    assert only(decide(ofed_node, policy=policy, flavor=OFED_DRIVER)).next_state == um.STATE_UNCORDON_REQUIRED


# -- validation (validation_manager.go) --------------------------------------------------------------------------
def test_validation_without_validator_pods_waits_without_a_clock() -> None:
    # No pod matches app=nvidia-operator-validator: stuck in validation-required (gpu-operator #626).
    assert only(decide(node("gpu-worker-000", um.STATE_VALIDATION_REQUIRED), now=NOW + 86400)).actions == ()


def test_validation_times_out_after_600_seconds() -> None:
    key = GPU_DRIVER.validation_start_annotation
    fresh = node("gpu-worker-000", um.STATE_VALIDATION_REQUIRED, pods=[validator(False)])
    assert only(decide(fresh)).actions[0] == SetAnnotation(key, str(int(NOW)))
    started = dataclasses.replace(fresh, annotations={key: str(int(NOW))})
    assert only(decide(started, now=NOW + 600)).next_state is None
    failed = only(decide(started, now=NOW + 601))
    assert failed.next_state == um.STATE_FAILED
    assert RemoveAnnotation(key) in failed.actions


def test_validation_passed_moves_to_uncordon() -> None:
    key = GPU_DRIVER.validation_start_annotation
    passed = node(
        "gpu-worker-000", um.STATE_VALIDATION_REQUIRED, pods=[validator(True)], annotations={key: str(int(NOW))}
    )
    decision = only(decide(passed))
    assert RemoveAnnotation(key) in decision.actions
    assert decision.next_state == um.STATE_UNCORDON_REQUIRED


def test_node_cordoned_before_the_upgrade_stays_cordoned() -> None:
    # updateNodeToUncordonOrDoneState: initial-state annotation -> upgrade-done, annotation removed, no uncordon.
    key = GPU_DRIVER.initial_state_annotation
    passed = node(
        "gpu-worker-000",
        um.STATE_VALIDATION_REQUIRED,
        unschedulable=True,
        pods=[validator(True)],
        annotations={key: "true"},
    )
    decision = only(decide(passed))
    assert decision.next_state == um.STATE_DONE
    assert RemoveAnnotation(key) in decision.actions
    assert not decision.of_type(Uncordon)


def test_uncordon_required_uncordons_and_finishes() -> None:
    decision = only(decide(node("gpu-worker-000", um.STATE_UNCORDON_REQUIRED, unschedulable=True)))
    assert decision.actions[0] == Uncordon()
    assert decision.next_state == um.STATE_DONE


# -- upgrade-failed (ProcessUpgradeFailedNodes) -------------------------------------------------------------------
def test_upgrade_failed_heals_when_the_driver_pod_is_in_sync_and_ready() -> None:
    healed = only(decide(node("gpu-worker-000", um.STATE_FAILED, unschedulable=True)))
    assert healed.next_state == um.STATE_UNCORDON_REQUIRED
    crashing = node("gpu-worker-000", um.STATE_FAILED, pod=driver_pod("gpu-worker-000", ready=False, restarts=30))
    assert only(decide(crashing)).actions == ()
    stale = node("gpu-worker-000", um.STATE_FAILED, revision=OLD_HASH)
    assert only(decide(stale)).actions == ()  # an old pod is never replaced from upgrade-failed


def test_upgrade_failed_with_initial_state_goes_to_done() -> None:
    key = GPU_DRIVER.initial_state_annotation
    decision = only(decide(node("gpu-worker-000", um.STATE_FAILED, unschedulable=True, annotations={key: "true"})))
    assert decision.next_state == um.STATE_DONE
    assert RemoveAnnotation(key) in decision.actions


# -- whole-reconcile guards ----------------------------------------------------------------------------------------
def test_daemonset_with_unscheduled_pods_stops_the_whole_reconcile() -> None:
    # BuildState: "driver DaemonSet should not have Unscheduled pods" (one NotReady node blocks all, #688).
    nodes = tuple(required_nodes(3))
    blocked = ClusterSnapshot(now=NOW, nodes=nodes, daemonsets=(DriverDaemonSet(DS, 4, 3, NEW_HASH),))
    plan = um.plan_upgrade(blocked, policy=CHART_POLICY)
    assert plan.decisions == ()
    assert "Unscheduled pods" in plan.blocked_reason


def test_auto_upgrade_off_decides_nothing_and_resets_labels() -> None:
    plan = decide(*required_nodes(2), policy=UpgradePolicy(auto_upgrade=False))
    assert plan.decisions == () and plan.blocked_reason
    labels = {"a": {STATE: "upgrade-done"}, "b": {}, "c": {STATE: ""}}
    assert um.nodes_to_reset(labels) == ["a", "c"]


def test_each_node_moves_at_most_one_state_per_reconcile() -> None:
    plan = decide(node("gpu-worker-000", revision=OLD_HASH))
    assert plan.next_states() == {"gpu-worker-000": um.STATE_UPGRADE_REQUIRED}  # not cordon-required yet


# -- a rollout through every state, applying the decisions as the controller would -------------------------------
def apply(snap: ClusterSnapshot, plan: um.UpgradePlan, *, step: float) -> ClusterSnapshot:
    """Apply decisions like the controller; the new driver pod comes up Ready at once, workloads leave on eviction."""
    nodes = []
    for current in snap.nodes:
        decision = plan.for_node(current.name)
        labels, annotations = dict(current.labels), dict(current.annotations)
        unschedulable, pods, pod = current.unschedulable, list(current.pods), current.driver_pod
        started = current.eviction_started_at
        for action in decision.actions if decision else ():
            if isinstance(action, ChangeState):
                labels[STATE] = action.state
                started = None
            elif isinstance(action, Cordon):
                unschedulable = True
            elif isinstance(action, Uncordon):
                unschedulable = False
            elif isinstance(action, SetAnnotation):
                annotations[action.key] = action.value
            elif isinstance(action, RemoveAnnotation):
                annotations.pop(action.key, None)
            elif isinstance(action, StartEvictionClock):
                started = action.at
            elif isinstance(action, EvictPods):
                evicted = set(action.pods)
                pods = [p for p in pods if p.ref not in evicted]
            elif isinstance(action, DeleteDriverPod):
                pod = driver_pod(current.name, revision=NEW_HASH)
        nodes.append(
            dataclasses.replace(
                current,
                labels=labels,
                annotations=annotations,
                unschedulable=unschedulable,
                pods=tuple(pods),
                driver_pod=pod,
                eviction_started_at=started,
            )
        )
    return dataclasses.replace(snap, now=snap.now + step, nodes=tuple(nodes))


def test_a_rollout_with_max_parallel_1_upgrades_every_node_one_at_a_time() -> None:
    nodes = [
        node(f"gpu-worker-{i:03d}", um.STATE_DONE, revision=OLD_HASH, pods=[gpu_job(f"train-{i}"), validator(True)])
        for i in range(4)
    ]
    snap = snapshot(*nodes)
    seen_states: set[str] = set()
    for _ in range(60):
        plan = um.plan_upgrade(snap, policy=CHART_POLICY)
        assert plan.counts is not None and plan.counts.in_progress <= 1
        assert sum(1 for n in snap.nodes if n.unschedulable) <= 1
        seen_states.update(plan.next_states().values())
        snap = apply(snap, plan, step=30)
        if all(n.state(GPU_DRIVER) == um.STATE_DONE and n.driver_pod.revision_hash == NEW_HASH for n in snap.nodes):
            break
    assert all(n.state(GPU_DRIVER) == um.STATE_DONE for n in snap.nodes)
    assert all(n.driver_pod.revision_hash == NEW_HASH and not n.unschedulable for n in snap.nodes)
    assert all(not any(p.requests_gpu for p in n.pods) for n in snap.nodes)  # GPU pods were evicted
    assert {
        um.STATE_UPGRADE_REQUIRED,
        um.STATE_CORDON_REQUIRED,
        um.STATE_WAIT_FOR_JOBS_REQUIRED,
        um.STATE_POD_DELETION_REQUIRED,
        um.STATE_POD_RESTART_REQUIRED,
        um.STATE_VALIDATION_REQUIRED,
        um.STATE_UNCORDON_REQUIRED,
        um.STATE_DONE,
    } <= seen_states


# -- helpers --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (45, "45s"), (300, "5m0s"), (3725, "1h2m5s")])
def test_go_duration_format(seconds: int, text: str) -> None:
    assert um.go_duration(seconds) == text


def test_requests_gpu_matches_gpu_and_mig_resources_in_limits_or_requests() -> None:
    def pod(resources: dict) -> dict:
        return {"spec": {"containers": [{"name": "c", "resources": resources}]}}

    assert um.requests_gpu(pod({"limits": {"nvidia.com/gpu": 1}}))
    assert um.requests_gpu(pod({"requests": {"nvidia.com/mig-1g.10gb": 1}}))
    assert not um.requests_gpu(pod({"limits": {"cpu": "1"}}))
    assert not um.requests_gpu({"spec": {}})
