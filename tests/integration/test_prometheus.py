"""The GPU-error gate's Prometheus path and the alerts gate between the nodes of a rollout, against a real
Prometheus scraping the twin's dcgm-exporter endpoints.

One Prometheus for the module (1 s scrapes, an alert rule that fires on any XID), one twin; each test puts back
the faults it injected. The MOFED rollout runs last: it changes the twin's MOFED version.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpufleet_twin.process import start_twin
from tests.integration.conftest import in_background, kubectl, run_playbook
from tests.integration.prometheus_servers import Prometheus, start_prometheus

NODE = "gpu-worker-002"
RULES = {
    "groups": [
        {"name": "gpu", "rules": [{"alert": "GPUXidError", "expr": "DCGM_FI_DEV_XID_ERRORS > 0"}]},
    ]
}


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    twin = start_twin(nodes=3, profile="openshift", time_scale=600, workdir=tmp_path_factory.mktemp("twin"))
    yield twin
    assert twin.stop() == 0, twin.log_path.read_text()[-2000:]


@pytest.fixture(scope="module")
def prometheus(twin, tmp_path_factory):
    server = start_prometheus(twin, workdir=tmp_path_factory.mktemp("prometheus"), rules=RULES)
    yield server
    server.stop()


def _scraped(prometheus: Prometheus, node: str) -> list[dict[str, Any]]:
    return prometheus.wait_for(
        lambda: prometheus.query(f'DCGM_FI_DEV_XID_ERRORS{{Hostname="{node}"}}'),
        what=f"Prometheus to scrape the dcgm-exporter of {node}",
    )


def _gate(twin, prometheus: Prometheus, tmp_path: Path, **extra: Any) -> dict[str, Any]:
    result_file = tmp_path / "gate.json"
    run = run_playbook(
        "tests/integration/playbooks/validation_gate.yml",
        twin=twin,
        extra_vars={
            "gate_node": NODE,
            "gate_names": ["gpu_errors"],
            "gate_namespace": twin.companion["published"]["gpu_operator_namespace"],
            "gate_prometheus_url": prometheus.url,
            "result_file": str(result_file),
            **extra,
        },
    )
    assert run.returncode == 0, run.output
    return json.loads(result_file.read_text())


def test_prometheus_scrapes_every_gpu_of_every_node(twin, prometheus) -> None:
    for node in twin.companion["published"]["gpu_worker_nodes"]:
        series = _scraped(prometheus, node)
        assert sorted(int(s["metric"]["gpu"]) for s in series) == list(range(8))
        assert {s["metric"]["instance"] for s in series} == {node}
        assert all(s["metric"]["UUID"].startswith("GPU-") and s["value"][1] == "0" for s in series)


def test_gpu_errors_gate_reads_xids_from_prometheus(twin, prometheus, tmp_path) -> None:
    _scraped(prometheus, NODE)
    healthy = _gate(twin, prometheus, tmp_path)
    assert healthy["passed"] is True, healthy["summary"]

    # An XID the kernel log would also show: the gate must take it from DCGM_FI_DEV_XID_ERRORS.
    twin.admin("POST", "faults", {"type": "ecc_errors", "node": NODE, "xid": [48]})
    try:
        prometheus.wait_for(
            lambda: prometheus.query(f'DCGM_FI_DEV_XID_ERRORS{{Hostname="{NODE}"}} == 48'),
            what="the XID to reach Prometheus",
        )
        failed = _gate(twin, prometheus, tmp_path)
    finally:
        twin.admin("DELETE", "faults")
    assert failed["passed"] is False
    gate = next(g for g in failed["gates"] if g["gate"] == "gpu_errors")
    assert "XID 48 on gpu-0" in gate["reason"], gate["reason"]
    assert gate["details"]["xid_events"] == [{"bus_id": "gpu 0", "xid": 48, "message": "DCGM_FI_DEV_XID_ERRORS"}]


def test_a_node_prometheus_has_no_series_for_fails_the_gate(twin, prometheus, tmp_path) -> None:
    # A wrong node label (or an exporter Prometheus does not scrape) finds no series: no evidence is no pass.
    _scraped(prometheus, NODE)
    result = _gate(twin, prometheus, tmp_path, gate_prometheus_node_label="kubernetes_node")
    assert result["passed"] is False
    gate = next(g for g in result["gates"] if g["gate"] == "gpu_errors")
    assert "no DCGM_FI_DEV_XID_ERRORS series" in gate["reason"], gate["reason"]


# -- the alerts gate between the nodes of a rollout ----------------------------------------------------------------

MOFED_NEW = "25.01-0.6.0.0"
MOFED_STATE = "gpufleet.io/rollout-ofed-state"
MOFED_STARTED = "gpufleet.io/rollout-ofed-started-at"
MOFED_RELOAD = "twin.gpufleet.io/mofed-reload-seconds"


def _mofed_rollout(twin, prometheus: Prometheus, tmp_path: Path, *, alert_wait: int) -> tuple[Any, dict[str, Any]]:
    out = tmp_path / f"ofed-{alert_wait}.json"
    args = {
        "target_version": MOFED_NEW,
        "wait_sleep": 0.3,
        "max_parallel": 1,
        # Three GPU nodes leave no room for the training pods a drain would move (their PDB would refuse): the
        # reload runs without evicting, which is not what this test is about.
        "evict": {"secondary_network": False},
        "alerts": {
            "prometheus_url": prometheus.url,
            "alert_filter": "^GPU",
            "wait_timeout": alert_wait,
            "wait_sleep": 1,
        },
    }
    run = run_playbook(
        "tests/integration/playbooks/ofed_rolling_reload.yml",
        twin=twin,
        extra_vars={"ofed_module_args": args, "ofed_result_file": str(out)},
    )
    return run, json.loads(out.read_text())


def _progress(twin) -> dict[str, dict[str, str]]:
    nodes = json.loads(kubectl(twin, "get", "nodes", "-l", "nvidia.com/gpu.present=true", "-o", "json"))["items"]
    return {node["metadata"]["name"]: node["metadata"].get("annotations") or {} for node in nodes}


def _hold_events(twin, node: str) -> list[dict[str, Any]]:
    found = json.loads(
        kubectl(twin, "get", "events", "-n", "default", "--field-selector", f"involvedObject.name={node}", "-o", "json")
    )["items"]
    return sorted((e for e in found if e.get("action") == "AlertsHold"), key=lambda e: e["firstTimestamp"])


def test_a_mofed_rollout_holds_before_each_node_while_an_alert_fires(twin, prometheus, tmp_path) -> None:
    """An XID alert starts firing while the first node reloads: the rollout holds before the second node and halts
    naming the alert after its bound, changing nothing more; the same task run again holds until the alert clears
    and then finishes (the twin's clock and the nodes' progress annotations, cluster time, say when)."""
    first, second, third = sorted(twin.companion["published"]["gpu_worker_nodes"])
    # The first node's reload takes 2 simulated hours (12 s at 600x): time for Prometheus to see the XID.
    kubectl(twin, "annotate", "node", first, f"{MOFED_RELOAD}=7200", "--overwrite")
    thread, box = in_background(lambda: _mofed_rollout(twin, prometheus, tmp_path, alert_wait=4))
    prometheus.wait_for(lambda: _progress(twin)[first].get(MOFED_STATE) == "in-progress", what="the first reload")
    twin.admin("POST", "faults", {"type": "ecc_errors", "node": NODE, "xid": [48]})
    try:
        prometheus.wait_for(lambda: "GPUXidError" in prometheus.firing(), what="the XID alert to fire")
        # The premise of the test: the alert fired before the first node was done (else the gate had no reason).
        assert _progress(twin)[first].get(MOFED_STATE) == "in-progress", "the first reload ended before the alert"
        thread.join(timeout=300)
        run, halted = box["value"]
        assert run.returncode != 0, run.output
        assert "alerts matching '^GPU' are firing: GPUXidError{" in halted["msg"], halted["msg"]
        assert f"before node {second} of rollout ofed" in halted["msg"]
        assert halted["nodes_done"] == [first] and halted["nodes_not_started"] == [second, third]
        assert [alert.split("{")[0] for alert in halted["held_by_alerts"]] == ["GPUXidError"]
        progress = _progress(twin)
        assert progress[first][MOFED_STATE] == "done"
        assert MOFED_STATE not in progress[second] and MOFED_STATE not in progress[third], "the halt changed more"

        assert len(_hold_events(twin, second)) == 1

        # The same task again (what the report's Next says): it holds before the second node until the alert clears.
        clock_before = twin.admin("GET", "clock")["now"]
        thread, box = in_background(lambda: _mofed_rollout(twin, prometheus, tmp_path, alert_wait=120))
        prometheus.wait_for(lambda: len(_hold_events(twin, second)) == 2, what="the second run to hold", timeout=120)
        cleared_at = twin.admin("GET", "clock")["now"]
        assert MOFED_STATE not in _progress(twin)[second], "the second node started while the alert fired"
        # The Event says why the node waits, stamped with the cluster's clock (the twin's, hours ahead of this
        # machine's at 600x), not the controller's: between two readings of the twin's clock around it.
        event = _hold_events(twin, second)[-1]
        assert "holds before node" in event["message"] and "GPUXidError{" in event["message"], event["message"]
        assert clock_before[:19] <= event["firstTimestamp"] == event["lastTimestamp"] <= cleared_at[:19] + "Z"
        assert event["eventTime"][:19] == event["firstTimestamp"][:19], event
    finally:
        twin.admin("DELETE", "faults")
    thread.join(timeout=300)
    assert "value" in box, (box.get("error"), prometheus.firing(), _progress(twin))
    run, finished = box["value"]
    assert run.returncode == 0, run.output
    assert finished["nodes_done"] == [second, third], finished
    assert [alert.split("{")[0] for alert in finished["alerts_held_for"]] == ["GPUXidError"]
    assert finished["held_by_alerts"] == []
    progress = _progress(twin)
    # Judged on the twin's clock: the second node started after the alert was cleared, not before.
    assert progress[second][MOFED_STARTED] >= cleared_at[:19], (progress[second][MOFED_STARTED], cleared_at)
    assert all(progress[name][MOFED_STATE] == "done" for name in (first, second, third))


DRIVER_NEW = "570.124.06"
DRIVER_STATE = "nvidia.com/gpu-driver-upgrade-state"
DRIVER_SKIP = "nvidia.com/gpu-driver-upgrade.skip"


def _driver_rollout(twin, prometheus: Prometheus, tmp_path: Path, *, alert_wait: int) -> tuple[Any, dict[str, Any]]:
    out = tmp_path / f"driver-{alert_wait}.json"
    args = {
        "driver": {"version": DRIVER_NEW},
        "upgrade_policy": {"maxParallelUpgrades": 1, "maxUnavailable": 1},
        "wait_sleep": 0.5,
        "wait_timeout": 600,
        "alerts": {
            "prometheus_url": prometheus.url,
            "alert_filter": "^GPU",
            "wait_timeout": alert_wait,
            "wait_sleep": 1,
        },
    }
    run = run_playbook(
        "tests/integration/playbooks/gpu_clusterpolicy_upgrade.yml",
        twin=twin,
        extra_vars={"gpu_module_args": args, "gpu_result_file": str(out)},
    )
    return run, json.loads(out.read_text())


def _labels(twin) -> dict[str, dict[str, str]]:
    nodes = json.loads(kubectl(twin, "get", "nodes", "-l", "nvidia.com/gpu.present=true", "-o", "json"))["items"]
    return {node["metadata"]["name"]: node["metadata"].get("labels") or {} for node in nodes}


def test_a_gpu_driver_rollout_holds_its_nodes_not_started_while_an_alert_fires(twin, prometheus, tmp_path) -> None:
    """The upgrade controller starts the driver's next node itself: while an alert fires the nodes not started get
    the skip label; the rollout halts naming the alert and leaves them held; once it clears, the same task finishes."""
    nodes = sorted(twin.companion["published"]["gpu_worker_nodes"])
    for name in nodes:  # 2 simulated hours per node (12 s at 600x): time for Prometheus to see the XID
        kubectl(twin, "annotate", "node", name, "twin.gpufleet.io/driver-load-seconds=7200", "--overwrite")
    thread, box = in_background(lambda: _driver_rollout(twin, prometheus, tmp_path, alert_wait=4))

    def started() -> list[str]:
        return [
            n
            for n, labels in _labels(twin).items()
            if labels.get(DRIVER_STATE) not in (None, "", "upgrade-done", "upgrade-required")
        ]

    prometheus.wait_for(started, what="the controller to start a node", timeout=120)
    twin.admin("POST", "faults", {"type": "ecc_errors", "node": NODE, "xid": [48]})
    try:
        prometheus.wait_for(lambda: "GPUXidError" in prometheus.firing(), what="the XID alert to fire")
        thread.join(timeout=300)
        assert "value" in box, box.get("error")
        run, halted = box["value"]
    finally:
        twin.admin("DELETE", "faults")
    assert run.returncode != 0, run.output
    assert "alerts matching '^GPU' are firing: GPUXidError{" in halted["msg"], halted["msg"]
    held = halted["halt"]["held"]
    assert held and [alert.split("{")[0] for alert in halted["held_by_alerts"]] == ["GPUXidError"]
    labels = _labels(twin)
    # The held nodes never started: still on the old driver's state, with the skip label the controller obeys.
    assert all(labels[name].get(DRIVER_SKIP) == "true" for name in held), labels
    assert all(labels[name].get(DRIVER_STATE) in ("", None, "upgrade-required", "upgrade-done") for name in held)

    # The Next: once the alert stops firing, the same task releases the held nodes and finishes.
    prometheus.wait_for(lambda: "GPUXidError" not in prometheus.firing(), what="the XID alert to clear")
    run, finished = _driver_rollout(twin, prometheus, tmp_path, alert_wait=60)
    assert run.returncode == 0, run.output
    assert finished["held_by_alerts"] == [] and finished["halted"] is False
    labels = _labels(twin)
    assert all(labels[name].get(DRIVER_STATE) == "upgrade-done" for name in nodes), labels
    assert not any(labels[name].get(DRIVER_SKIP) for name in nodes)
