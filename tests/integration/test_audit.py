"""playbooks/audit.yml against the twin: reports, drift, request budget, malformed matrices."""

from __future__ import annotations

import json
import math
import pathlib
import xml.etree.ElementTree as ET

import pytest

from .conftest import ROOT, kubectl, run_playbook

MATRIX = ROOT / "examples" / "gpu-version-matrix.yaml"
NODES = 6  # GPU workers in the shared twin


def audit(twin, out: pathlib.Path, **extra):
    variables = {"audit_matrix_file": str(MATRIX), "audit_output_dir": str(out)}
    variables.update(extra)
    return run_playbook("playbooks/audit.yml", twin=twin, extra_vars=variables)


def test_matching_cluster_passes_and_reports_in_three_formats(shared_twin, tmp_path):
    shared_twin.admin("POST", "report/reset")
    run = audit(shared_twin, tmp_path)
    assert run.returncode == 0, run.output
    result = json.loads((tmp_path / "audit.json").read_text())
    assert result["valid"] is True
    assert result["drift"]["nodes_with_drift"] == []
    production = [node for node in result["drift"]["nodes"] if node["role"] == "production"]
    assert len(production) == NODES
    driver_rows = [row for node in production for row in node["components"] if row["component"] == "gpu_driver"]
    assert {row["found"] for row in driver_rows} == {"550.127.05"}
    assert all(row["status"] == "ok" for row in driver_rows)
    # The audit reads the cluster with paginated lists only: at most ceil(N/500) + 15
    # requests, whatever N is (the twin counts what it served).
    served = shared_twin.report()["requests"]
    assert result["api_requests"] <= math.ceil(NODES / 500) + 15
    assert served["total"] == result["api_requests"], served
    assert not any(key.startswith("get nodes") for key in served["by_verb_resource"]), served
    junit = ET.parse(tmp_path / "audit.xml").getroot()
    assert junit.tag == "testsuites"
    assert sum(int(suite.get("failures")) for suite in junit) == 0
    summary = (tmp_path / "audit.md").read_text()
    assert "Plan from current_production to canary_testing" in summary
    assert "**gpu_operator**" in summary


def test_drift_on_one_node_is_named_and_fails_the_run(shared_twin, tmp_path):
    # The canary label moves gpu-worker-002 to the canary stage (driver 570.124.06),
    # which it does not run yet: drift on exactly that node.
    kubectl(shared_twin, "label", "node", "gpu-worker-002", "gpu-canary=true")
    try:
        run = audit(shared_twin, tmp_path)
    finally:
        kubectl(shared_twin, "label", "node", "gpu-worker-002", "gpu-canary-")
    assert run.returncode != 0
    assert "Drift on nodes gpu-worker-002" in run.output
    result = json.loads((tmp_path / "audit.json").read_text())
    assert result["drift"]["nodes_with_drift"] == ["gpu-worker-002"]
    canary = next(node for node in result["drift"]["nodes"] if node["node"] == "gpu-worker-002")
    driver = next(row for row in canary["components"] if row["component"] == "gpu_driver")
    assert (driver["expected"], driver["found"], driver["status"]) == ("570.124.06", "550.127.05", "drift")
    failures = [
        case.get("name")
        for case in ET.parse(tmp_path / "audit.xml").iter("testcase")
        if case.find("failure") is not None
    ]
    assert failures == ["gpu-worker-002"]
    assert "| gpu-worker-002 | canary | gpu_driver | 570.124.06 | 550.127.05 |" in (tmp_path / "audit.md").read_text()


def test_drift_can_be_reported_without_failing(shared_twin, tmp_path):
    kubectl(shared_twin, "label", "node", "gpu-worker-003", "gpu-canary=true")
    try:
        run = audit(shared_twin, tmp_path, audit_fail_on_drift=False)
    finally:
        kubectl(shared_twin, "label", "node", "gpu-worker-003", "gpu-canary-")
    assert run.returncode == 0, run.output
    assert json.loads((tmp_path / "audit.json").read_text())["drift"]["nodes_with_drift"] == ["gpu-worker-003"]


def test_a_matrix_with_production_only_audits_without_a_plan(shared_twin, tmp_path):
    # Every stage but current_production is optional; the role's default target (canary_testing) is then empty.
    text = MATRIX.read_text()
    production_only = tmp_path / "production-only.yaml"
    production_only.write_text(text[: text.index("    canary_testing:")])
    run = audit(shared_twin, tmp_path / "out", audit_matrix_file=str(production_only))
    assert run.returncode == 0, run.output
    result = json.loads((tmp_path / "out" / "audit.json").read_text())
    assert result["valid"] is True and result["plan"]["steps"] == []
    assert any("canary_testing is not in the matrix" in w["message"] for w in result["matrix_warnings"])
    assert result["drift"]["nodes_with_drift"] == []


def test_driver_type_is_audited_from_the_clusterpolicy(shared_twin, tmp_path):
    # The twin's ClusterPolicy builds the driver on the node (usePrecompiled false): a matrix asking for
    # precompiled drivers is drift, reported cluster-wide with where the audit read it.
    text = MATRIX.read_text()
    pinned = tmp_path / "precompiled.yaml"
    pinned.write_text(
        text.replace(
            '      gpu_driver: "550.127.05"\n', '      gpu_driver: "550.127.05"\n      driver_type: "precompiled"\n', 1
        )
    )
    run = audit(shared_twin, tmp_path / "out", audit_matrix_file=str(pinned), audit_fail_on_drift=False)
    assert run.returncode == 0, run.output
    result = json.loads((tmp_path / "out" / "audit.json").read_text())
    (row,) = [row for row in result["drift"]["cluster"] if row["component"] == "driver_type"]
    assert (row["expected"], row["found"], row["status"]) == ("precompiled", "compiled", "drift")
    assert row["source"] == "ClusterPolicy gpu-cluster-policy spec.driver.usePrecompiled"


MALFORMED = {
    "unknown_key": (
        "current_production:\n  gpu_operator: v24.9.0\n  gpu_drvier: 560.35.03\n",
        ["current_production", "gpu_drvier", "gpu_driver"],
    ),
    "bad_driver_version": (
        "current_production:\n  gpu_operator: v24.9.0\n  gpu_driver: '56x.1'\n",
        ["current_production", "gpu_driver", "56x.1"],
    ),
    "stage_not_a_mapping": ("current_production: [v24.9.0]\n", ["current_production"]),
    "yaml_syntax": ("current_production:\n  gpu_driver: [560.35.03\n", ["yaml"]),
    # Plain YAML would keep the second value without a word.
    "duplicate_key": (
        "current_production:\n  gpu_operator: v24.9.0\n  gpu_operator: v25.3.0\n",
        ["gpu_operator", "a second gpu_operator at line 3"],
    ),
    # YAML reads 12.10 as the float 12.1: the message shows what the file says.
    "unquoted_cuda": ("current_production:\n  gpu_operator: v24.9.0\n  cuda: 12.10\n", ["cuda", "found 12.10"]),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_matrix_fails_clearly_before_any_api_call(shared_twin, tmp_path, case):
    text, must_mention = MALFORMED[case]
    matrix = tmp_path / f"{case}.yaml"
    matrix.write_text(text)
    shared_twin.admin("POST", "report/reset")
    run = run_playbook(
        "playbooks/audit.yml",
        twin=shared_twin,
        extra_vars={"audit_matrix_file": str(matrix), "audit_output_dir": str(tmp_path / "out")},
    )
    assert run.returncode != 0
    message = run.output.lower()
    assert str(matrix).lower() in message
    for word in must_mention:
        assert word.lower() in message, (word, run.output)
    assert shared_twin.report()["requests"]["total"] == 0
    assert not (tmp_path / "out").exists()
