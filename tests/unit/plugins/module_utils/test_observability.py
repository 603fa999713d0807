"""Stage metrics for the Pushgateway, the alerts gate and the stage Events' targets: pure logic."""

from __future__ import annotations

import pytest
from prometheus_client.exposition import generate_latest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._alerts import (
    compile_filter,
    firing_alerts,
    hold_while_firing,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import AlertsFiringError, InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gates_parse import UnreadableOutputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_events import pools_of_nodes
from ansible_collections.gpufleet.upgrade.plugins.module_utils._permissions import steps_for
from ansible_collections.gpufleet.upgrade.plugins.module_utils._run_metrics import (
    grouping_key,
    node_states,
    registry_of,
    stage_metrics,
)

ENTRY = {
    "stage": "promote",
    "outcome": "failed",
    "group": "network_operator",
    "campaign": "c-1",
    "started_at": "2026-11-25T10:00:00Z",
    "recorded_at": "2026-11-25T10:30:00Z",
    "nodes": [
        {"node": "gpu-worker-001", "action": "run", "outcome": "done"},
        {"node": "gpu-worker-002", "action": "run", "outcome": "failed", "failed_step": "reload"},
        {"node": "gpu-worker-003", "action": "run", "outcome": "running"},
        {"node": "gpu-worker-004", "action": "skip", "outcome": "not-started"},
    ],
    "capacity": [
        {"allocatable_gpus": 32, "unavailable_nodes": []},
        {"allocatable_gpus": 16, "unavailable_nodes": ["gpu-worker-002", "gpu-worker-003"]},
    ],
    "gates": [{"node": "gpu-worker-001", "gates": [{"gate": "rdma", "passed": False, "elapsed": 4.5}]}],
}


def _by_name(samples):
    found = {}
    for name, labels, value in samples:
        found.setdefault(name, []).append((labels, value))
    return found


def test_node_states_read_every_timeline_shape() -> None:
    assert node_states(ENTRY["nodes"]) == {
        "gpu-worker-001": "done",
        "gpu-worker-002": "failed",
        "gpu-worker-003": "in_progress",
        "gpu-worker-004": "pending",
    }
    driver = {
        "gpu-worker-001": [{"state": "upgrade-required"}, {"state": "upgrade-done"}],
        "gpu-worker-002": [{"state": "drain-required"}],
        "gpu-worker-003": [{"state": "upgrade-failed"}],
    }
    assert node_states(driver) == {
        "gpu-worker-001": "done",
        "gpu-worker-002": "in_progress",
        "gpu-worker-003": "failed",
    }
    assert node_states([{"node": "gpu-worker-005", "pool": "worker", "state": "Done"}]) == {"gpu-worker-005": "done"}
    assert node_states(None) == {}


def test_stage_metrics_from_a_ledger_entry() -> None:
    metrics = _by_name(stage_metrics(ENTRY, max_unavailable="50%", gpu_nodes=4))
    nodes = {labels["state"]: value for labels, value in metrics["nodes"]}
    assert nodes == {"done": 1, "failed": 1, "in_progress": 1, "pending": 1}
    assert all(labels["component"] == "network_operator" for labels, _value in metrics["nodes"])
    assert metrics["stage_duration_seconds"] == [({}, 1800.0)]
    assert metrics["stage_success"] == [({}, 0.0)]
    # 50% of 4 nodes is 2; at most 2 were unavailable at once: no headroom left.
    assert metrics["budget_headroom_nodes"] == [({}, 0.0)]
    assert metrics["allocatable_gpus_min"] == [({}, 16.0)]
    assert metrics["gate_passed"] == [({"node": "gpu-worker-001", "gate": "rdma"}, 0.0)]
    assert metrics["gate_duration_seconds"] == [({"node": "gpu-worker-001", "gate": "rdma"}, 4.5)]
    assert "budget_headroom_nodes" not in _by_name(stage_metrics(ENTRY))


def test_the_registry_holds_prefixed_gauges_and_the_group_needs_cluster_and_stage() -> None:
    text = generate_latest(registry_of(stage_metrics(ENTRY))).decode()
    assert 'gpufleet_upgrade_nodes{component="network_operator",state="failed"} 1.0' in text
    assert "# TYPE gpufleet_upgrade_stage_success gauge" in text
    assert grouping_key(cluster="east", stage="bake") == {"cluster": "east", "stage": "bake"}
    with pytest.raises(InvalidInputError, match="needs a cluster and a stage"):
        grouping_key(cluster="", stage="bake")


ALERTS = {
    "status": "success",
    "data": {
        "alerts": [
            {"labels": {"alertname": "GPUXidError", "Hostname": "gpu-worker-003", "gpu": "0"}, "state": "firing"},
            {"labels": {"alertname": "GPUTooHot"}, "state": "pending"},
            {"labels": {"alertname": "Watchdog"}, "state": "firing"},
        ]
    },
}


def test_firing_alerts_match_the_filter_and_skip_pending_ones() -> None:
    firing = firing_alerts(ALERTS, pattern=compile_filter("^GPU"))
    assert [alert.describe() for alert in firing] == ["GPUXidError{Hostname=gpu-worker-003, gpu=0}"]
    assert firing_alerts(ALERTS, pattern=compile_filter("Watch")) != []
    with pytest.raises(UnreadableOutputError, match="did not list its alerts"):
        firing_alerts({"status": "error", "error": "boom"}, pattern=compile_filter("x"))
    with pytest.raises(InvalidInputError, match="not a regular expression"):
        compile_filter("GPU(")
    with pytest.raises(InvalidInputError, match="empty"):
        compile_filter("")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def pause(self, seconds: float) -> None:
        self.now += seconds


def test_the_gate_holds_until_the_alert_clears() -> None:
    answers = [ALERTS, ALERTS, {"status": "success", "data": {"alerts": []}}]
    clock = FakeClock()
    result = hold_while_firing(
        lambda url: answers.pop(0),
        prometheus_url="http://prometheus:9090/",
        alert_filter="^GPU",
        timeout=60,
        sleep=10,
        what="bake check",
        clock=clock,
        pause=clock.pause,
        controller=None,
    )
    assert result["held"] is True and result["elapsed"] == 20
    assert result["held_for"] == ["GPUXidError{Hostname=gpu-worker-003, gpu=0}"]


def test_the_gate_halts_naming_the_alerts_after_its_wait() -> None:
    clock = FakeClock()
    urls = []
    with pytest.raises(AlertsFiringError, match=r"halted after 30s .* firing: GPUXidError\{Hostname=gpu-worker-003"):
        hold_while_firing(
            lambda url: urls.append(url) or ALERTS,
            prometheus_url="http://prometheus:9090",
            alert_filter="^GPU",
            timeout=30,
            sleep=10,
            what="promotion",
            clock=clock,
            pause=clock.pause,
            controller=None,
        )
    assert set(urls) == {"http://prometheus:9090/api/v1/alerts"}


def _node(name: str, **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": labels}}


def _pool(name: str, **match: str) -> dict:
    return {"kind": "MachineConfigPool", "metadata": {"name": name}, "spec": {"nodeSelector": {"matchLabels": match}}}


def test_events_go_to_the_most_specific_pool_of_each_node() -> None:
    worker = _pool("worker", **{"node-role.kubernetes.io/worker": ""})
    gpu = _pool("gpu-a", **{"node-role.kubernetes.io/worker": "", "gpufleet.io/pool": "a"})
    master = _pool("master", **{"node-role.kubernetes.io/master": ""})
    nodes = [_node("gpu-worker-001", **{"node-role.kubernetes.io/worker": "", "gpufleet.io/pool": "a"})]
    assert [p["metadata"]["name"] for p in pools_of_nodes([worker, gpu, master], nodes)] == ["gpu-a"]
    nodes.append(_node("cpu-1", **{"node-role.kubernetes.io/worker": ""}))
    assert [p["metadata"]["name"] for p in pools_of_nodes([worker, gpu, master], nodes)] == ["gpu-a", "worker"]


def test_every_stage_may_record_events_on_its_groups_object() -> None:
    steps = steps_for(playbook="upgrade", stage="bake", group="gpu_operator")
    assert "upgrade_events" in steps and "upgrade_events_gpu_operator" in steps
    assert "upgrade_events_firmware" not in steps_for(playbook="upgrade", stage="canary", group="firmware")
