"""The window estimator's pure parts and its refusals (the in-process rollouts run in the bench and docs)."""

from __future__ import annotations

from pathlib import Path

from gpufleet_twin.estimate import failure_reasons, main, node_seconds, summarize


def test_node_seconds_are_seeded_per_node_and_bounded():
    assert node_seconds(400.0, jitter=0.0, seed=3, node="a") == 400.0
    drawn = [node_seconds(400.0, jitter=0.1, seed=3, node=f"n{i}") for i in range(30)]
    assert all(360.0 <= value <= 440.0 for value in drawn) and len(set(drawn)) > 5
    assert node_seconds(400.0, jitter=0.1, seed=3, node="n1") == drawn[1]


def test_summarize_measures_capacity_below_the_total_over_the_run():
    report = {
        "gpu_capacity": {
            "current": 16,
            "min": 8,
            "samples": [
                {"seconds": 0, "allocatable": 16},
                {"seconds": 600, "allocatable": 8},
                {"seconds": 1200, "allocatable": 16},
            ],
        }
    }
    result = summarize(report, started=1000.0, finished_at=2800.0, states={"a": "upgrade-done", "b": "upgrade-failed"})
    assert result["duration_seconds"] == 1800.0 and result["finished"]
    assert result["gpu_hours_lost"] == round(8 * 600 / 3600, 2)
    assert result["peak_capacity_loss"] == 0.5
    assert result["failed_nodes"] == ["b"]
    unfinished = summarize(report, started=0.0, finished_at=None, states={})
    assert unfinished["duration_seconds"] is None and not unfinished["finished"]


def test_bad_candidates_are_refused_naming_the_option(tmp_path: Path, capsys):
    out = tmp_path / "estimate.json"
    assert main(["--snapshot", str(tmp_path), "--candidates", "{nope", "--out", str(out)]) == 2
    assert "--candidates: not JSON" in capsys.readouterr().err
    assert main(["--snapshot", str(tmp_path), "--candidates", "[]", "--out", str(out)]) == 2
    capsys.readouterr()
    domains = '[{"maxUnavailable": "10%"}, {"maxPerDomain": 1, "autoUpgrade": false}]'
    assert main(["--snapshot", str(tmp_path), "--candidates", domains, "--out", str(out)]) == 2
    assert "--candidates: autoUpgrade, maxPerDomain not a field" in capsys.readouterr().err
    assert main(["--snapshot", str(tmp_path / "missing"), "--candidates", "[{}]", "--out", str(out)]) == 2
    assert not out.exists()


def test_failure_reasons_are_the_last_warning_on_each_failed_node_since_the_run_began():
    def event(name: str, kind: str, kind_of_event: str, stamp: str, message: str) -> dict:
        return {
            "involvedObject": {"kind": kind, "name": name},
            "type": kind_of_event,
            "lastTimestamp": stamp,
            "message": message,
        }

    events = [
        event("a", "Node", "Warning", "2026-01-01T00:00:00Z", "before the run"),
        event("a", "Node", "Warning", "2026-01-01T01:00:00Z", "Failed to drain the node, global timeout reached"),
        event("a", "Node", "Normal", "2026-01-01T02:00:00Z", "Successfully updated node state label"),
        event("a", "Pod", "Warning", "2026-01-01T03:00:00Z", "not the node"),
        event("b", "Node", "Warning", "2026-01-01T00:30:00Z", "b failed earlier"),
        event("b", "Node", "Warning", "2026-01-01T00:40:00Z", "b failed later"),
        event("c", "Node", "Warning", "2026-01-01T05:00:00Z", "c did not fail"),
        # e: no Warning, only the controller's state changes (a driver pod that kept failing).
        event("e", "Node", "Normal", "2026-01-01T01:00:00Z", "Successfully updated node state label to drain-required"),
        event("e", "Node", "Normal", "2026-01-01T01:10:00Z", "Successfully updated node state label to upgrade-failed"),
        event(
            "e",
            "Node",
            "Normal",
            "2026-01-01T01:05:00Z",
            "Successfully updated node state label to pod-restart-required",
        ),
    ]
    reasons = failure_reasons(events, ["a", "b", "d", "e"], since="2026-01-01T00:10:00Z")
    assert reasons == {
        "a": "Failed to drain the node, global timeout reached",
        "b": "b failed later",
        "d": "",
        "e": "failed in pod-restart-required",
    }
