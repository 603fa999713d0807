"""Events, Pushgateway metrics and the alerts gate of playbooks/upgrade.yml, against real servers.

One twin, one Prometheus (scraping the twin's dcgm-exporter endpoints every second, with an alert rule that
fires on any XID) and one Pushgateway for the module. The canary reads XIDs from Prometheus, records its
milestones as Events and pushes its metrics; a bake check is held by a firing alert and halts naming it, then
passes once the alert is gone.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest

from gpufleet_twin.process import start_twin
from tests.integration.conftest import ROOT, in_background, kubectl, run_playbook
from tests.integration.prometheus_servers import start_prometheus, start_pushgateway

pytestmark = pytest.mark.slow

CANARY = "gpu-worker-001"  # the example matrix's canary_node
FAULTY = "gpu-worker-003"
CLUSTER = "twin-east"
RULES = {
    "groups": [
        {
            "name": "gpu",
            "rules": [
                {
                    "alert": "GPUXidError",
                    "expr": "DCGM_FI_DEV_XID_ERRORS > 0",
                    "labels": {"severity": "critical"},
                    "annotations": {"summary": "XID {{ $value }} on {{ $labels.Hostname }} GPU {{ $labels.gpu }}"},
                },
                # Never fires, and does not match the filter: it must not hold anything either way.
                {"alert": "UnrelatedAlert", "expr": "vector(1) < 0"},
            ],
        }
    ]
}


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    twin = start_twin(nodes=4, profile="openshift", time_scale=600, workdir=tmp_path_factory.mktemp("twin"))
    yield twin
    assert twin.stop() == 0, twin.log_path.read_text()[-2000:]


@pytest.fixture(scope="module")
def prometheus(twin, tmp_path_factory):
    server = start_prometheus(twin, workdir=tmp_path_factory.mktemp("prometheus"), rules=RULES)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def pushgateway(tmp_path_factory):
    server = start_pushgateway(workdir=tmp_path_factory.mktemp("pushgateway"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> pathlib.Path:
    folder = tmp_path_factory.mktemp("workspace")
    shutil.copy(ROOT / "examples" / "gpu-version-matrix.yaml", folder / "matrix.yaml")
    return folder


def flow(twin, workspace, prometheus, pushgateway, stage: str, **extra):
    variables = {
        "stage": stage,
        "upgrade_cluster_name": CLUSTER,
        "upgrade_matrix_file": str(workspace / "matrix.yaml"),
        "upgrade_report_dir": str(workspace / "reports"),
        "upgrade_wait_timeout": 900,
        "upgrade_validate_gates": ["gpu_errors"],
        "upgrade_bake_gates": ["gpu_errors"],
        "validate_wait_sleep": 0.5,
        "gpu_operator_wait_sleep": 1,
        "validate_prometheus_url": prometheus.url,
        "validate_alert_filter": "^GPU",
        "upgrade_alert_wait_sleep": 1,
        "gpufleet_pushgateway_url": pushgateway.url,
    }
    variables.update(extra)
    return run_playbook("playbooks/upgrade.yml", twin=twin, extra_vars=variables, timeout=600)


def gpufleet_events(twin) -> list[dict]:
    found = json.loads(
        kubectl(twin, "get", "events", "-n", "default", "--field-selector", "reason=GPUFleetUpgrade", "-o", "json")
    )
    return sorted(found["items"], key=lambda event: (event["firstTimestamp"], event["metadata"]["name"]))


def actions_on(events: list[dict], kind: str, name: str) -> list[str]:
    return [e["action"] for e in events if e["involvedObject"]["kind"] == kind and e["involvedObject"]["name"] == name]


def pushed_group(pushgateway, stage: str) -> dict[str, dict]:
    """The metric families of the group job=gpufleet_upgrade, cluster, stage: name -> family."""
    for group in pushgateway.metrics():
        if group["labels"] == {"job": "gpufleet_upgrade", "cluster": CLUSTER, "stage": stage}:
            return {name: family for name, family in group.items() if name.startswith("gpufleet_upgrade_")}
    raise AssertionError(f"no pushed group for stage {stage}: {[g['labels'] for g in pushgateway.metrics()]}")


def value(family: dict, **labels: str) -> float:
    for metric in family["metrics"]:
        if all(metric["labels"].get(key) == wanted for key, wanted in labels.items()):
            return float(metric["value"])
    raise AssertionError(f"no sample with {labels} in {family['metrics']}")


def test_canary_records_events_annotates_the_node_and_pushes_metrics(twin, prometheus, pushgateway, workspace):
    prometheus.wait_for(lambda: prometheus.query(f'DCGM_FI_DEV_XID_ERRORS{{Hostname="{CANARY}"}}'), what="a scrape")
    clock_before = twin.admin("GET", "clock")["now"]
    run = flow(twin, workspace, prometheus, pushgateway, "canary")
    assert run.returncode == 0, run.output
    assert "Stage canary: success" in run.output

    events = gpufleet_events(twin)
    assert actions_on(events, "ClusterPolicy", "gpu-cluster-policy") == ["CanaryStarted", "CanaryPassed"], events
    assert actions_on(events, "Node", CANARY) == ["CanaryStarted", "CanaryPassed"]
    started = next(e for e in events if e["action"] == "CanaryStarted" and e["involvedObject"]["kind"] == "Node")
    assert started["type"] == "Normal" and started["source"]["component"] == "gpufleet.upgrade"
    assert "gpu_operator" in started["message"] and "campaign" in started["message"]
    # Stamped with the cluster's clock (the twin's runs ahead of the wall clock), not the controller's.
    assert started["firstTimestamp"] >= clock_before[:19], (started["firstTimestamp"], clock_before)

    node = json.loads(kubectl(twin, "get", "node", CANARY, "-o", "json"))
    reason = node["metadata"]["annotations"]["gpufleet.io/canary-reason"]
    assert "Canary of the gpu_operator change of campaign" in reason and "cluster time" in reason

    metrics = pushed_group(pushgateway, "canary")
    assert value(metrics["gpufleet_upgrade_stage_success"]) == 1
    assert value(metrics["gpufleet_upgrade_stage_info"], outcome="success", group="gpu_operator") == 1
    assert value(metrics["gpufleet_upgrade_gate_passed"], node=CANARY, gate="gpu_errors") == 1
    assert value(metrics["gpufleet_upgrade_nodes"], component="gpu_operator", state="done") >= 1
    assert value(metrics["gpufleet_upgrade_nodes"], component="gpu_operator", state="failed") == 0
    assert value(metrics["gpufleet_upgrade_stage_duration_seconds"]) > 0


def test_bake_check_is_held_by_a_firing_alert_then_passes_once_it_clears(twin, prometheus, pushgateway, workspace):
    twin.admin("POST", "faults", {"type": "ecc_errors", "node": FAULTY, "xid": [48]})
    try:
        prometheus.wait_for(lambda: "GPUXidError" in prometheus.firing(), what="the XID alert to fire")
        held = flow(twin, workspace, prometheus, pushgateway, "bake", upgrade_alert_wait_timeout=4)
    finally:
        twin.admin("DELETE", "faults")
    assert held.returncode != 0, held.output
    assert "alerts matching '^GPU' are firing: GPUXidError{" in held.output, held.output
    assert f"Hostname={FAULTY}" in held.output
    assert "UnrelatedAlert" not in held.output
    events = gpufleet_events(twin)
    assert not [e for e in events if e["action"].startswith("BakeCheck")], "a held check is no verdict"
    assert value(pushed_group(pushgateway, "bake")["gpufleet_upgrade_stage_success"]) == 0
    # The bake report (Markdown and HTML) names the alerts and says what works next: this very stage again.
    reports = workspace / "reports"
    markdown = sorted(reports.glob(f"upgrade-{CLUSTER}-bake-*.md"))[-1].read_text()
    page = sorted(reports.glob(f"upgrade-{CLUSTER}-bake-*.html"))[-1].read_text()
    next_line = next(line for line in markdown.splitlines() if line.startswith("| Next |"))
    assert "Prometheus alerts GPUXidError{" in next_line and "run stage=bake again" in next_line, next_line
    assert f"Hostname={FAULTY}" in markdown and "GPUXidError{" in page
    assert "Prometheus alerts GPUXidError{" in page and "run stage=bake again" in page

    prometheus.wait_for(lambda: "GPUXidError" not in prometheus.firing(), what="the XID alert to clear")
    # The report's Next, run.
    passed = flow(twin, workspace, prometheus, pushgateway, "bake", upgrade_alert_wait_timeout=30)
    assert passed.returncode == 0, passed.output
    events = gpufleet_events(twin)
    assert actions_on(events, "ClusterPolicy", "gpu-cluster-policy")[-1] == "BakeCheckPassed"
    assert actions_on(events, "Node", CANARY)[-1] == "BakeCheckPassed"
    assert value(pushed_group(pushgateway, "bake")["gpufleet_upgrade_stage_success"]) == 1


def test_a_promotion_holds_its_next_nodes_while_an_alert_fires_and_its_next_finishes_it(
    twin, prometheus, pushgateway, workspace
):
    """The alerts gate between the nodes of a promotion, through playbooks/upgrade.yml: an XID alert starts firing
    while the promotion's first nodes upgrade; the nodes not started stay held, the stage halts naming the alert and
    its report's Next says to run the promotion again once the alert stops; that Next finishes the promotion."""
    from tests.integration.test_clusterpolicy_upgrade import NEW, driver_versions, states, wait_for
    from tests.integration.test_upgrade_flow import cluster_ledger

    twin.advance(49 * 3600)  # past the bake window, on the twin's clock
    workers = sorted(twin.companion["published"]["gpu_worker_nodes"])
    for name in workers:  # two simulated hours a node (12 s here): time for Prometheus to see the XID
        kubectl(twin, "annotate", "node", name, "twin.gpufleet.io/driver-load-seconds=7200", "--overwrite")
    thread, box = in_background(
        lambda: flow(twin, workspace, prometheus, pushgateway, "promote", upgrade_alert_wait_timeout=4)
    )

    def started() -> bool:
        return any(n != CANARY and s not in ("", "upgrade-required") for n, s in states(twin).items())

    wait_for(started, what="the promotion to start a node", timeout=180)
    twin.admin("POST", "faults", {"type": "ecc_errors", "node": FAULTY, "xid": [48]})
    try:
        prometheus.wait_for(lambda: "GPUXidError" in prometheus.firing(), what="the XID alert to fire")
        thread.join(timeout=600)
        assert "value" in box, box.get("error")
        halted = box["value"]
    finally:
        twin.admin("DELETE", "faults")
    assert halted.returncode != 0, halted.output[-4000:]
    assert "alerts matching '^GPU' are firing: GPUXidError{" in halted.output, halted.output[-4000:]
    entry = cluster_ledger(twin)[-1]
    assert (entry["stage"], entry["outcome"]) == ("promote", "failed"), entry
    assert [alert.split("{")[0] for alert in entry["held_by_alerts"]] == ["GPUXidError"], entry
    held = [n for n in workers if driver_versions(twin)[n] != NEW]
    assert held, "the alert held some nodes back"
    markdown = sorted((workspace / "reports").glob(f"upgrade-{CLUSTER}-promote-*.md"))[-1].read_text()
    next_line = next(line for line in markdown.splitlines() if line.startswith("| Next |"))
    assert "Prometheus alerts GPUXidError{" in next_line and "run stage=promote again" in next_line, next_line

    prometheus.wait_for(lambda: "GPUXidError" not in prometheus.firing(), what="the XID alert to clear")
    finished = flow(
        twin, workspace, prometheus, pushgateway, "promote", upgrade_alert_wait_timeout=60, upgrade_max_unavailable=2
    )
    assert finished.returncode == 0, finished.output[-4000:]
    assert "Stage promote: success" in finished.output
    assert set(driver_versions(twin).values()) == {NEW}
    assert set(states(twin).values()) <= {"upgrade-done", ""}, states(twin)
    events = gpufleet_events(twin)
    assert actions_on(events, "ClusterPolicy", "gpu-cluster-policy")[-1] == "Promoted"
    metrics = pushed_group(pushgateway, "promote")
    assert value(metrics["gpufleet_upgrade_stage_success"]) == 1
    # The budget (2 nodes) was never exceeded, and the capacity it left is pushed.
    assert 0 <= value(metrics["gpufleet_upgrade_budget_headroom_nodes"]) <= 2
    assert value(metrics["gpufleet_upgrade_allocatable_gpus_min"]) > 0
