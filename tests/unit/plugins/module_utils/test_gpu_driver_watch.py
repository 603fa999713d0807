"""Reading a rollout off the cluster: driver pods, progress, halt decision, timeline, failure reasons (pure)."""

from __future__ import annotations

import copy
import json
import pathlib

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_scope import (
    HOLD_ANNOTATION,
    SKIP_LABEL,
    STATE_LABEL,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_watch import (
    EventLog,
    Tracker,
    build_timeline,
    driver_pod_view,
    driver_pods_by_node,
    failure_reason,
    halt_decision,
    latest_cycle,
    node_progress,
    node_views,
    pool_settled,
    rollout_progress,
    rollout_settled,
    state_events,
)

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "gpu_driver"
NEW, OLD = "570.124.06", "560.35.03"


def load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def gpu_node(name: str, state: str = "upgrade-done", *, gpus: int = 8, cordoned: bool = False, **labels: str) -> dict:
    return {
        "metadata": {"name": name, "labels": {STATE_LABEL: state, **labels}, "annotations": {}},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def driver_pod(node: str, version: str, *, ready: bool = True, restarts: int = 0, terminating: bool = False) -> dict:
    pod = {
        "metadata": {
            "name": f"nvidia-driver-{node}-{version}",
            "namespace": "nvidia-gpu-operator",
            "ownerReferences": [{"kind": "DaemonSet", "name": "nvidia-driver-daemonset", "controller": True}],
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "nvidia-driver-ctr", "image": f"nvcr.io/nvidia/driver:{version}-rhcos4.16"}],
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [{"name": "nvidia-driver-ctr", "ready": ready, "restartCount": restarts}],
        },
    }
    if terminating:
        pod["metadata"]["deletionTimestamp"] = "2026-11-22T08:00:00Z"
    return pod


def views_of(*pairs: tuple[dict, dict | None]) -> dict:
    return node_views([n for n, _p in pairs], [p for _n, p in pairs if p is not None])


# -- driver pods -------------------------------------------------------------------------------------------


def test_crashlooping_driver_pod_from_the_cluster():
    view = driver_pod_view(load("driver-pod-crashloop.json"))
    assert view.version == "575.57.08"
    assert view.failing and not view.ready
    assert view.waiting_reason == "CrashLoopBackOff"
    assert view.restart_count == 43
    assert view.daemonset == "nvidia-driver-daemonset-416.94.202410211619-0"
    # The failing container speaks, not the init container that exited 0.
    assert "no kernel-devel package matches the running kernel 5.14.0-427.40.1.el9_4.x86_64" in view.last_message
    assert "CrashLoopBackOff after 43 restarts" in view.describe()


def test_ten_restarts_are_not_yet_failing():
    assert not driver_pod_view(driver_pod("n", NEW, ready=False, restarts=10)).failing
    assert driver_pod_view(driver_pod("n", NEW, ready=False, restarts=11)).failing
    assert not driver_pod_view(driver_pod("n", NEW, ready=True, restarts=30)).failing


def test_the_live_pod_wins_over_a_terminating_one():
    pods = driver_pods_by_node([driver_pod("n1", OLD, terminating=True), driver_pod("n1", NEW, ready=False)])
    assert pods["n1"].version == NEW and not pods["n1"].terminating


# -- progress --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "version", "ready", "restarts", "expected"),
    [
        ("upgrade-done", OLD, True, 0, "pending"),  # right after the target changed
        ("upgrade-done", NEW, False, 0, "pending"),
        ("upgrade-done", NEW, True, 0, "done"),
        ("", OLD, True, 0, "pending"),
        ("upgrade-required", OLD, True, 0, "pending"),
        ("cordon-required", OLD, True, 0, "in-progress"),
        ("pod-restart-required", NEW, False, 3, "in-progress"),
        ("pod-restart-required", NEW, False, 11, "failed"),
        ("validation-required", NEW, True, 0, "in-progress"),
        ("upgrade-failed", NEW, False, 0, "failed"),
    ],
)
def test_node_progress(state, version, ready, restarts, expected):
    views = views_of((gpu_node("n1", state), driver_pod("n1", version, ready=ready, restarts=restarts)))
    assert node_progress(views["n1"], target_version=NEW) == expected


def test_rollout_progress_and_when_the_wait_ends():
    views = views_of(
        (gpu_node("n1", "upgrade-done"), driver_pod("n1", NEW)),
        (gpu_node("n2", "validation-required"), driver_pod("n2", NEW)),
        (gpu_node("n3", "upgrade-required"), driver_pod("n3", OLD)),
    )
    progress = rollout_progress(views, targets=["n1", "n2", "n3", "gone"], target_version=NEW)
    assert (progress.done, progress.in_progress, progress.pending) == (("n1",), ("n2",), ("gone", "n3"))
    assert not rollout_settled(progress)
    assert progress.as_dict()["states"] == {"upgrade-done": 1, "upgrade-required": 1, "validation-required": 1}
    only_done = rollout_progress(views, targets=["n1"], target_version=NEW)
    assert only_done.complete and rollout_settled(only_done)


def test_the_first_failure_ends_the_wait():
    views = views_of(
        (gpu_node("n1", "upgrade-failed"), driver_pod("n1", NEW, ready=False)),
        (gpu_node("n2", "upgrade-required"), driver_pod("n2", OLD)),
    )
    progress = rollout_progress(views, targets=["n1", "n2"], target_version=NEW)
    assert progress.failed == ("n1",) and rollout_settled(progress)


def test_halt_holds_what_has_not_started_and_lets_running_nodes_finish():
    views = views_of(
        (gpu_node("n1", "upgrade-failed"), driver_pod("n1", NEW, ready=False)),
        (gpu_node("n2", "pod-restart-required"), driver_pod("n2", NEW, ready=False)),
        (gpu_node("n3", "upgrade-required"), driver_pod("n3", OLD)),
        (gpu_node("n4", "upgrade-done"), driver_pod("n4", OLD)),  # not noticed by the controller yet
        (gpu_node("n5", "upgrade-done"), driver_pod("n5", NEW)),  # finished
        (gpu_node("n6", "upgrade-required", **{SKIP_LABEL: "true"}), driver_pod("n6", OLD)),  # held already
    )
    decision = halt_decision(views, managed=[f"n{i}" for i in range(1, 7)], failed=["n1"], target_version=NEW)
    assert decision.failed == ("n1",)
    assert decision.hold == ("n3", "n4")
    assert decision.in_progress == ("n2",)


def test_node_views_read_holds_owner_and_capacity():
    node = gpu_node("n1", cordoned=True, gpus=4, **{SKIP_LABEL: "true", "nvidia.com/gpu-operator.driver.owner": "c"})
    node["metadata"]["annotations"][HOLD_ANNOTATION] = "halt"
    view = node_views([node], [])["n1"]
    assert (view.skipped, view.hold, view.owner, view.gpus, view.unavailable) == (True, "halt", "c", 4, True)
    assert view.pod is None


def test_pool_settled_checks_the_daemonset_owner_and_the_node_owner():
    node = gpu_node("n1", **{"nvidia.com/gpu-operator.driver.owner": "gpu-canary"})
    pod = driver_pod("n1", OLD)
    pod["metadata"]["ownerReferences"][0]["name"] = "nvidia-gpu-driver-rhcos4.16-abc"
    views = node_views([node], [pod])
    owners = {"nvidia-gpu-driver-rhcos4.16-abc": "gpu-canary"}
    assert pool_settled(views, nodes=["n1"], driver_name="gpu-canary", daemonset_owners=owners, member=True)
    assert not pool_settled(views, nodes=["n1"], driver_name="gpu-canary", daemonset_owners=owners, member=False)
    assert not pool_settled(views, nodes=["n1"], driver_name="gpu-canary", daemonset_owners={}, member=True)


# -- timeline ----------------------------------------------------------------------------------------------------


def test_timeline_takes_the_latest_cycle_of_aggregated_events():
    events = load("node-events-two-cycles.json")["items"]
    cycle = latest_cycle([e for e in state_events(events) if e.node == "gpu-worker-001"])
    # The second cycle failed in pod-restart-required; the first cycle's later states are left out.
    assert [entry.state for entry in cycle] == [
        "upgrade-required",
        "cordon-required",
        "wait-for-jobs-required",
        "pod-deletion-required",
        "pod-restart-required",
        "upgrade-failed",
    ]
    timeline = build_timeline(nodes=["gpu-worker-001"], events=events, observed={})
    assert timeline["gpu-worker-001"][0] == {
        "state": "upgrade-required",
        "entered_at": "2026-11-22T12:00:05Z",
        "observed_at": None,
    }


def test_states_entered_within_one_second_keep_the_state_machine_order():
    events = load("node-events-two-cycles.json")["items"]
    timeline = build_timeline(nodes=["gpu-worker-001"], events=events, observed={})
    states = [row["state"] for row in timeline["gpu-worker-001"]]
    # cordon-required and wait-for-jobs-required share 12:00:07.
    assert states.index("cordon-required") < states.index("wait-for-jobs-required")


def test_observations_fill_in_what_events_lack():
    observed = {
        "n1": [
            ("upgrade-done", OLD, "2026-11-22T08:00:00Z"),  # resting from the previous cycle
            ("cordon-required", OLD, "2026-11-22T08:00:10Z"),
            ("validation-required", NEW, "2026-11-22T08:05:00Z"),
            ("upgrade-done", NEW, "2026-11-22T08:06:00Z"),
        ]
    }
    events = [
        {
            "reason": "GPUDriverUpgrade",
            "involvedObject": {"kind": "Node", "name": "n1"},
            "message": f"Successfully updated node state label to {state}",
            "lastTimestamp": stamp,
            "metadata": {"uid": state},
        }
        for state, stamp in (("cordon-required", "2026-11-22T08:00:09Z"), ("upgrade-done", "2026-11-22T08:05:59Z"))
    ]
    rows = build_timeline(nodes=["n1"], events=events, observed=observed)["n1"]
    assert [(r["state"], r["entered_at"], r["observed_at"]) for r in rows] == [
        ("cordon-required", "2026-11-22T08:00:09Z", "2026-11-22T08:00:10Z"),
        ("validation-required", None, "2026-11-22T08:05:00Z"),
        ("upgrade-done", "2026-11-22T08:05:59Z", "2026-11-22T08:06:00Z"),
    ]


def test_tracker_records_changes_and_capacity_only_when_they_happen():
    tracker = Tracker()
    first = views_of((gpu_node("n1"), driver_pod("n1", OLD)), (gpu_node("n2"), driver_pod("n2", OLD)))
    assert tracker.observe(first, nodes=["n1"], at="t0", elapsed=0.0)
    assert not tracker.observe(first, nodes=["n1"], at="t1", elapsed=1.0)
    cordoned = views_of(
        (gpu_node("n1", "cordon-required", cordoned=True, gpus=0), driver_pod("n1", OLD)),
        (gpu_node("n2"), driver_pod("n2", OLD)),
    )
    assert tracker.observe(cordoned, nodes=["n1"], at="t2", elapsed=2.0)
    # Same state, new driver: still a change (a node resting in upgrade-done after its upgrade).
    resting = views_of((gpu_node("n1"), driver_pod("n1", NEW)), (gpu_node("n2"), driver_pod("n2", OLD)))
    assert tracker.observe(resting, nodes=["n1"], at="t3", elapsed=3.0)
    tracker.close(at="t4", elapsed=4.0)
    assert [entry[0] for entry in tracker.observed["n1"]] == ["upgrade-done", "cordon-required", "upgrade-done"]
    assert [(c["at"], c["allocatable_gpus"], c["unavailable_nodes"]) for c in tracker.capacity] == [
        ("t0", 16, []),
        ("t2", 8, ["n1"]),
        ("t3", 16, []),
        ("t4", 16, []),
    ]


def test_event_log_keeps_the_latest_occurrence():
    events = load("node-events-two-cycles.json")["items"]
    log = EventLog()
    older = copy.deepcopy(events[0])
    older["lastTimestamp"] = "2026-11-22T08:25:11Z"
    log.add(events)
    log.add([older])
    kept = next(e for e in log.events if e["metadata"]["uid"] == events[0]["metadata"]["uid"])
    assert kept["lastTimestamp"] == "2026-11-22T12:00:05Z"
    assert len(log.events) == len(events)


# -- failure reasons -----------------------------------------------------------------------------------------------


def test_failure_reason_names_the_driver_pod_and_the_kernel():
    pod = load("driver-pod-crashloop.json")
    views = node_views([gpu_node("gpu-worker-001", "upgrade-failed")], [pod])
    reason = failure_reason(views["gpu-worker-001"], node_events=[], timeline=[])
    assert "driver 575.57.08" in reason
    assert "CrashLoopBackOff" in reason
    assert "5.14.0-427.40.1.el9_4.x86_64" in reason


def test_failure_reason_prefers_the_controllers_warning():
    warning = {
        "type": "Warning",
        "reason": "GPUDriverUpgrade",
        "message": 'Failed to delete workload pods on the node for the driver upgrade, error when evicting pods/"x" '
        '-n "ml": global timeout reached: 5m0s',
        "lastTimestamp": "2026-11-22T07:53:30Z",
    }
    views = views_of((gpu_node("n1", "upgrade-failed"), driver_pod("n1", OLD)))
    reason = failure_reason(views["n1"], node_events=[warning], timeline=[])
    assert reason.startswith("upgrade controller: Failed to delete workload pods")


def test_failure_in_validation_is_explained():
    views = views_of((gpu_node("n1", "upgrade-failed"), driver_pod("n1", NEW)))
    timeline = [{"state": "pod-restart-required"}, {"state": "validation-required"}, {"state": "upgrade-failed"}]
    assert "validation" in failure_reason(views["n1"], node_events=[], timeline=timeline)


def test_a_failure_that_healed_since_is_placed_where_it_happened():
    views = views_of((gpu_node("n1", "upgrade-failed"), driver_pod("n1", NEW)))
    timeline = [
        {"state": "pod-restart-required"},
        {"state": "validation-required"},
        {"state": "upgrade-failed"},
        {"state": "uncordon-required"},
        {"state": "upgrade-done"},
    ]
    assert "validation" in failure_reason(views["n1"], node_events=[], timeline=timeline)
