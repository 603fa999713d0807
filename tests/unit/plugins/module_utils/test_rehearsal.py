"""The rehearsal's pure parts: calibration from history, jitter, the prediction's numbers and PDB naming."""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rehearsal import (
    DRIVER_SECONDS_ANNOTATION,
    apply_calibration,
    blocking_pdbs,
    build_estimate,
    calibrate,
    estimate_markdown,
    estimate_svg,
    gpu_hours_lost,
    jittered,
    peak_overlap,
    render_html,
    render_markdown,
    rollout_seconds,
    run_timeline,
    step_seconds,
    write_report_files,
)

ROWS = [
    {"state": "upgrade-required", "entered_at": "2026-01-01T00:00:00Z"},
    {"state": "cordon-required", "entered_at": "2026-01-01T00:00:10Z"},
    {"state": "pod-restart-required", "entered_at": "2026-01-01T00:01:00Z"},
    {"state": "validation-required", "entered_at": "2026-01-01T00:08:00Z"},
    {"state": "upgrade-done", "entered_at": "2026-01-01T00:09:00Z"},
]


def write_list(directory, name, items):
    (directory / name).write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))


def gpu_node(name):
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"}}}


def test_step_seconds_from_a_timeline():
    assert step_seconds(ROWS) == {"drain": 50.0, "driver": 420.0, "validation": 60.0}


def test_calibration_comes_from_the_ledger_and_is_written_into_the_nodes(tmp_path):
    ledger = json.dumps({"id": "1", "stage": "canary", "nodes": {"gpu-1": ROWS}})
    write_list(tmp_path, "api_v1_configmaps.json", [{"data": {"ledger.jsonl": ledger + "\n"}}])
    write_list(tmp_path, "api_v1_nodes.json", [gpu_node("gpu-1"), {"metadata": {"name": "master-0"}}])
    calibration = calibrate(str(tmp_path))
    assert calibration["source"] == "ledger"
    assert calibration["steps"]["driver"] == {"seconds": 420.0, "source": "ledger", "samples": 1}
    assert apply_calibration(str(tmp_path), calibration, jitter=0.0, seed=0) == (1, True)
    nodes = json.loads((tmp_path / "api_v1_nodes.json").read_text())["items"]
    assert nodes[0]["metadata"]["annotations"] == {DRIVER_SECONDS_ANNOTATION: "420.0"}
    assert "annotations" not in nodes[1]["metadata"]


def test_calibration_falls_back_to_events_then_to_the_documented_defaults(tmp_path):
    write_list(tmp_path, "api_v1_nodes.json", [gpu_node("gpu-1")])
    defaults = calibrate(str(tmp_path))
    assert defaults["source"] == "defaults" and defaults["steps"]["driver"]["seconds"] == 240.0
    # Without history nor jitter the copy keeps the twin's own (documented) timings.
    assert apply_calibration(str(tmp_path), defaults, jitter=0.0, seed=0) == (0, False)
    events = [
        {
            "reason": "GPUDriverUpgrade",
            "involvedObject": {"kind": "Node", "name": "gpu-1"},
            "message": f"Successfully updated node state label to {row['state']}",
            "lastTimestamp": row["entered_at"],
        }
        for row in ROWS
    ]
    write_list(tmp_path, "api_v1_events.json", events)
    from_events = calibrate(str(tmp_path))
    assert from_events["source"] == "events" and from_events["steps"]["driver"]["seconds"] == 420.0


def test_calibration_in_check_mode_says_it_would_change_and_writes_nothing_then_a_rerun_changes_nothing(tmp_path):
    write_list(tmp_path, "api_v1_nodes.json", [gpu_node("gpu-1")])
    nodes = tmp_path / "api_v1_nodes.json"
    before = nodes.read_bytes()
    calibration = calibrate(str(tmp_path))
    assert apply_calibration(str(tmp_path), calibration, jitter=0.2, seed=3, check_mode=True) == (1, True)
    assert nodes.read_bytes() == before
    assert apply_calibration(str(tmp_path), calibration, jitter=0.2, seed=3) == (1, True)
    written = nodes.read_bytes()
    assert written != before
    assert apply_calibration(str(tmp_path), calibration, jitter=0.2, seed=3, check_mode=True) == (1, False)
    assert apply_calibration(str(tmp_path), calibration, jitter=0.2, seed=3) == (1, False)
    assert nodes.read_bytes() == written


def test_report_files_are_written_when_they_differ_and_never_in_check_mode(tmp_path):
    texts = {str(tmp_path / "reports" / "rehearsal-canary.md"): "# one\n", str(tmp_path / "reports" / "x.html"): "<p>"}
    assert write_report_files(texts, check_mode=True) is True
    assert not (tmp_path / "reports").exists()
    assert write_report_files(texts, check_mode=False) is True
    assert {path: pathlib.Path(path).read_text() for path in texts} == texts
    assert write_report_files(texts, check_mode=True) is False
    assert write_report_files(texts, check_mode=False) is False
    changed = {**texts, str(tmp_path / "reports" / "x.html"): "<p>two"}
    assert write_report_files(changed, check_mode=False) is True
    assert (tmp_path / "reports" / "x.html").read_text() == "<p>two"


def test_jitter_is_seeded_per_node_and_bounded():
    values = {jittered(400.0, jitter=0.2, seed=7, node=f"n{i}") for i in range(50)}
    assert all(320.0 <= v <= 480.0 for v in values) and len(values) > 10
    assert jittered(400.0, jitter=0.2, seed=7, node="n1") == jittered(400.0, jitter=0.2, seed=7, node="n1")
    assert jittered(400.0, jitter=0.2, seed=8, node="n1") != jittered(400.0, jitter=0.2, seed=7, node="n1")
    with pytest.raises(InvalidInputError, match="jitter"):
        apply_calibration("/nonexistent", {"steps": {"driver": {}}}, jitter=1.5, seed=0)


def test_rollout_seconds_leave_out_states_of_earlier_runs():
    entry = {"started_at": "2026-01-01T00:00:05Z", "nodes": {"gpu-1": ROWS}}
    assert rollout_seconds(entry) == 530.0


def test_peak_overlap_and_gpu_hours_lost():
    intervals = {
        "a": [{"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T00:10:00Z"}],
        "b": [{"from": "2026-01-01T00:05:00Z", "to": None}],
        "c": [{"from": "2026-01-01T00:10:00Z", "to": "2026-01-01T00:20:00Z"}],
    }
    assert peak_overlap(intervals) == 2
    samples = [
        {"seconds": 0, "allocatable": 16},
        {"seconds": 3600, "allocatable": 8},
        {"seconds": 7200, "allocatable": 16},
    ]
    assert gpu_hours_lost(samples, total=16, until=9000) == 8.0


def test_blocking_pdbs_are_named_from_the_failed_nodes_evictions():
    pods = [{"metadata": {"namespace": "ml", "name": "train-x", "labels": {"app": "train"}}}]
    pdbs = [
        {
            "metadata": {"namespace": "ml", "name": "train-pdb"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "train"}}},
            "status": {"disruptionsAllowed": 0},
        }
    ]
    failures = [{"node": "gpu-3", "reason": 'error when evicting pods/"train-x" -n "ml": global timeout reached: 5m0s'}]
    (found,) = blocking_pdbs(failures, pods=pods, pdbs=pdbs)
    assert found["pdb"] == "ml/train-pdb" and found["nodes"] == ["gpu-3"] and found["pods"] == ["ml/train-x"]
    assert blocking_pdbs([{"node": "gpu-3", "reason": "driver crash"}], pods=pods, pdbs=pdbs) == []


def test_reports_escape_and_carry_the_same_tables():
    prediction = {
        "outcome": "failed",
        "message": "<b>halted</b> | here",
        "capacity_curve": [{"seconds": 0, "allocatable": 8}, {"seconds": 60, "allocatable": 4}],
        "gpus_total": 8,
        "blocking_pdbs": [{"pdb": "ml/p", "describe": "d", "nodes": ["n"], "pods": ["ml/x"]}],
    }
    markdown = render_markdown(prediction, title="T")
    page = render_html(prediction, title="T")
    assert "| ml/p | d | n | ml/x |" in markdown and "halted</b> \\| here" in markdown
    assert "&lt;b&gt;halted" in page and "<b>halted" not in page and "<svg" in page


def run(candidate, seed, hours, lost, loss, *, finished=True):
    return {
        "candidate": candidate,
        "seed": seed,
        "duration_seconds": hours * 3600,
        "finished": finished,
        "gpu_hours_lost": lost,
        "peak_capacity_loss": loss,
    }


def test_the_smallest_setting_that_fits_the_window_and_the_capacity_limit_is_chosen():
    slow, mid, wide = {"maxParallelUpgrades": 1}, {"maxParallelUpgrades": 4}, {"maxParallelUpgrades": 16}
    runs = [
        *(run(slow, seed, hours, 40, 0.05) for seed, hours in enumerate((10, 11, 12))),
        *(run(mid, seed, hours, 42, 0.10) for seed, hours in enumerate((3, 3.5, 4))),
        *(run(wide, seed, hours, 45, 0.40) for seed, hours in enumerate((1, 1, 1.2))),
    ]
    estimate = build_estimate({"runs": runs, "seeds": 3}, window_hours=8, max_capacity_loss=0.25)
    rows = {row["label"]: row for row in estimate["rows"]}
    assert rows["maxParallelUpgrades 1"]["p90_hours"] == 12.0 and not rows["maxParallelUpgrades 1"]["fits"]
    assert rows["maxParallelUpgrades 4"]["p50_hours"] == 3.5 and rows["maxParallelUpgrades 4"]["fits"]
    assert not rows["maxParallelUpgrades 16"]["fits"], "too much capacity away"
    assert estimate["chosen"] == mid
    markdown = estimate_markdown(estimate["rows"], window_hours=8, max_capacity_loss=0.25)
    assert "Smallest setting that fits (8 h window, at most 25% of GPUs away): **maxParallelUpgrades 4**" in markdown
    assert estimate_svg(estimate["rows"]).count("<circle") == 3


def test_a_setting_under_which_nodes_fail_never_fits_and_the_table_says_how_often():
    """The 200-node estimate of docs/rehearse.md: at 20 nodes at once, drains ran past their timeout on some nodes
    (upgrade-failed) in two runs of three. The stage halts at such a node: fast as it is, the setting does not fit."""
    wide, mid = {"maxParallelUpgrades": 20}, {"maxParallelUpgrades": 10}
    runs = [
        dict(
            run(wide, 0, 2.7, 194, 0.09),
            failed_nodes=["n1", "n2", "n3"],
            failure_reasons={"n1": "Failed to drain the node, global timeout reached", "n2": "", "n3": ""},
        ),
        run(wide, 1, 2.2, 192, 0.10),
        dict(run(wide, 2, 2.4, 188, 0.085), failed_nodes=["n3", "n4"], failure_reasons={"n3": "driver pod failing"}),
        *(run(mid, seed, hours, 188, 0.05) for seed, hours in enumerate((3.7, 3.6, 3.5))),
    ]
    estimate = build_estimate({"runs": runs}, window_hours=8, max_capacity_loss=0.15)
    rows = {row["label"]: row for row in estimate["rows"]}
    assert not rows["maxParallelUpgrades 20"]["fits"] and rows["maxParallelUpgrades 10"]["fits"]
    assert estimate["chosen"] == mid
    markdown = estimate_markdown(estimate["rows"], window_hours=8, max_capacity_loss=0.15)
    assert "| maxParallelUpgrades 20 | 3 | 2.4 h | 2.7 h | 192.0 | 10.0% | 4, in 2 of 3 runs | no |" in markdown
    assert "| maxParallelUpgrades 10 | 3 | 3.6 h | 3.7 h | 188.0 | 5.0% | 0 | yes |" in markdown
    assert "- maxParallelUpgrades 20: n1: Failed to drain the node, global timeout reached" in markdown
    assert "- maxParallelUpgrades 20: n2: no reason recorded" in markdown
    assert "- maxParallelUpgrades 20: n3: driver pod failing" in markdown
    assert "n4: no reason recorded" in markdown


def test_a_setting_with_an_unfinished_run_never_fits():
    runs = [run({"a": 1}, 0, 1, 1, 0.0), run({"a": 1}, 1, 1, 1, 0.0, finished=False)]
    (row,) = build_estimate({"runs": runs}, window_hours=8, max_capacity_loss=1)["rows"]
    assert row["p90_hours"] is None and not row["fits"]
    markdown = estimate_markdown([row], window_hours=8, max_capacity_loss=1)
    assert "| a 1 | 2 | 1.0 h | did not finish | 1.0 | 0.0% | 0 | no |" in markdown


def test_the_run_timeline_keeps_only_states_the_cluster_dated_while_the_run_ran():
    """Copied Events of the source's runs (dated after the rehearsal ended) and controller-clock rows are left out."""
    rows = [
        {"state": "upgrade-required", "entered_at": None, "observed_at": "2026-01-01T18:00:00Z"},
        {"state": "cordon-required", "entered_at": "2026-01-01T00:01:00Z", "observed_at": None},
        {"state": "upgrade-done", "entered_at": "2026-01-01T00:11:00Z", "observed_at": "2026-01-01T18:00:01Z"},
        {"state": "validation-required", "entered_at": "2026-01-01T05:00:00Z"},
    ]
    entry = {"started_at": "2026-01-01T00:00:00Z", "recorded_at": "2026-01-01T01:00:00Z", "nodes": {"n": rows}}
    assert [row["state"] for row in run_timeline(entry)["n"]] == ["cordon-required", "upgrade-done"]
    assert rollout_seconds(entry) == 600.0
