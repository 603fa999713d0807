"""The audit reports rendered from a gpu_matrix_check result, and how they are written."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._audit_report import (
    publish_result,
    render_junit,
    render_markdown,
    render_reports,
    write_reports,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError


def node(name: str, role: str, found: str, expected: str = "550.127.05") -> dict[str, Any]:
    status = "ok" if found == expected else "drift"
    row = {"component": "gpu_driver", "expected": expected, "found": found, "status": status, "source": "Pod x image"}
    return {"node": name, "role": role, "status": status, "components": [row]}


@pytest.fixture
def result() -> dict[str, Any]:
    violation = {
        "rule": "one_group_at_a_time",
        "stage": "next_planned",
        "status": "violation",
        "reason": "Two groups <at once> & more",
        "findings": [{"status": "violation", "message": "gpu_operator | network_operator change", "evidence": []}],
    }
    warning = {
        "rule": "known_versions",
        "stage": "canary_testing",
        "status": "warning",
        "reason": "typos",
        "findings": [{"status": "warning", "message": "CUDA 12.8 is not in catalog", "evidence": []}],
    }
    passing = {"rule": "driver_kernel", "stage": "current_production", "status": "pass", "reason": "r", "findings": []}
    nodes = [
        node("gpu-worker-001", "canary", "550.127.05", "570.124.06"),
        node("gpu-worker-002", "production", "550.127.05"),
    ]
    counts = {"pass": 1, "warning": 1, "violation": 1}
    change = {"component": "gpu_driver", "from": "550.127.05", "to": "570.124.06"}
    cluster_row = {"component": "openshift", "expected": "4.16.20", "found": "4.16.19", "status": "drift"}
    summary = {"gpu_driver": {"ok": 1, "drift": 1, "unknown": 0}, "openshift": {"ok": 0, "drift": 1, "unknown": 0}}
    return {
        "matrix_source": "matrix.yaml",
        "valid": False,
        "violations": [violation],
        "rules": {"status": "violation", "counts": counts, "results": [violation, warning, passing]},
        "plan": {"to": "canary_testing", "steps": [{"step": 1, "group": "gpu_operator", "changes": [change]}]},
        "drift": {
            "nodes": nodes,
            "nodes_total": 2,
            "cluster": [dict(cluster_row, source="CV")],
            "summary": summary,
            "nodes_with_drift": ["gpu-worker-001"],
        },
    }


def test_junit_has_a_case_per_rule_and_node_and_fails_violations_and_drift(result):
    suites = ET.fromstring(render_junit(result))
    rules, drift = suites.findall("testsuite")
    assert (rules.get("tests"), rules.get("failures")) == ("3", "1")
    failure = rules.find("testcase[@name='one_group_at_a_time']/failure")
    assert failure is not None and failure.text == "Two groups <at once> & more"  # escaped, read back intact
    assert "CUDA 12.8" in (rules.find("testcase[@name='known_versions']/system-out").text or "")
    assert (drift.get("tests"), drift.get("failures")) == ("3", "2")
    failed = [case.get("name") for case in drift.iter("testcase") if case.find("failure") is not None]
    assert failed == ["openshift", "gpu-worker-001"]
    assert drift.find("testcase[@name='gpu-worker-001']/failure").get("message") == (
        "gpu_driver: expected 570.124.06, found 550.127.05"
    )


def test_markdown_names_violations_plan_summary_and_drifted_nodes_only(result):
    text = render_markdown(result)
    assert "drift: **1 of 2 nodes**" in text
    assert (
        "| one_group_at_a_time | next_planned | Two groups <at once> & more "
        "| gpu_operator \\| network_operator change |" in text
    )
    assert "1. **gpu_operator**: gpu_driver 550.127.05 → 570.124.06" in text
    # Counts with what was expected and what was found (per value, how many nodes).
    assert "| gpu_driver | 550.127.05 (1), 570.124.06 (1) | 550.127.05 (2) | 1 | 1 | 0 |  |" in text
    assert "| gpu-worker-001 | canary | gpu_driver | 570.124.06 | 550.127.05 | Pod x image |" in text
    assert "gpu-worker-002" not in text
    # "1 warnings" is followed by the warning itself.
    assert "## Warnings\n\n- rule known_versions (canary_testing): CUDA 12.8 is not in catalog" in text


def test_unknown_firmware_gets_a_hint_and_the_html_report_says_it_all(result):
    row = {"component": "firmware_cx7", "expected": "28.42.1000", "found": None, "status": "unknown", "source": None}
    result["drift"]["nodes"][1]["components"].append(row)
    result["drift"]["summary"]["firmware_cx7"] = {"ok": 0, "drift": 0, "unknown": 1}
    result["cluster_name"] = "gpu-east"
    result["checked_at"] = "2026-11-22T08:00:00Z"
    text = render_markdown(result)
    assert "| firmware_cx7 | 28.42.1000 (1) | unknown (1) | 0 | 0 | 1 | NIC firmware is read from the BMCs'" in text
    assert "Checked at 2026-11-22T08:00:00Z (the cluster's clock" in text
    page = render_reports(result)["html"]
    assert "default-src 'none'" in page and "<script" not in page
    assert "GPU cluster audit: gpu-east" in page and "Checked at 2026-11-22T08:00:00Z" in page
    assert "CUDA 12.8 is not in catalog" in page and "audit_firmware_by_node" in page
    assert "<td>gpu-worker-001</td><td>canary</td><td>gpu_driver</td><td>570.124.06</td><td>550.127.05</td>" in page
    assert "Two groups &lt;at once&gt; &amp; more" in page  # escaped


def test_matrix_only_result_has_no_drift_suite_and_an_empty_plan_says_so(result):
    del result["drift"]
    result["plan"]["steps"] = []
    assert len(ET.fromstring(render_junit(result)).findall("testsuite")) == 1
    text = render_markdown(result)
    assert "Nothing to change." in text and "Drift summary" not in text


def test_reports_are_written_once_and_not_in_check_mode(result, tmp_path: Path):
    reports = render_reports(result)
    target = tmp_path / "out" / "audit"
    paths, changed = write_reports(str(target), reports, check_mode=True)
    assert changed and not target.exists()
    paths, changed = write_reports(str(target), reports, check_mode=False)
    assert changed and json.loads(Path(paths["json"]).read_text()) == result
    assert oct(os.stat(paths["junit"]).st_mode & 0o777) == "0o644"
    before = {kind: os.stat(path).st_mtime_ns for kind, path in paths.items()}
    assert write_reports(str(target), reports, check_mode=False) == (paths, False)
    assert {kind: os.stat(path).st_mtime_ns for kind, path in paths.items()} == before
    assert sorted(p.name for p in target.iterdir()) == [
        "audit.html",
        "audit.json",
        "audit.md",
        "audit.xml",
    ]  # no temporary left


def test_publish_trims_the_returned_table_after_writing_the_whole_one(result, tmp_path: Path):
    assert publish_result(result, report_dir=str(tmp_path), drift_nodes="drifted", check_mode=False) is True
    assert [n["node"] for n in result["drift"]["nodes"]] == ["gpu-worker-001"]
    written = json.loads((tmp_path / "audit.json").read_text())
    assert [n["node"] for n in written["drift"]["nodes"]] == ["gpu-worker-001", "gpu-worker-002"]
    assert result["reports"]["markdown"] == str(tmp_path / "audit.md")


def test_unwritable_report_dir_is_a_clear_error(result, tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(InvalidInputError, match=f"Cannot write the audit reports to {blocker}"):
        publish_result(result, report_dir=str(blocker), drift_nodes="all", check_mode=False)
