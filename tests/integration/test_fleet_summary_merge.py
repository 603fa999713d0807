"""playbooks/fleet_summary_merge.yml: the summaries of a sliced job's slices merge into one (files or artifacts)."""

from __future__ import annotations

import json

from .conftest import run_playbook

PLAYBOOK = "playbooks/fleet_summary_merge.yml"


def slice_summary(*clusters: tuple[str, str]) -> dict:
    return {
        "kind": "gpufleet.upgrade/fleet-summary",
        "run": "audit",
        "slices": 1,
        "clusters": [
            {"cluster": name, "outcome": outcome, "finished_at": "2026-11-25T10:00:00Z"} for name, outcome in clusters
        ],
    }


def test_slice_files_and_slice_artifacts_merge_into_one_summary(tmp_path):
    for number, clusters in enumerate([(("gpu-01", "success"), ("gpu-02", "drift")), (("gpu-03", "success"),)]):
        folder = tmp_path / "slices" / str(number + 1)
        folder.mkdir(parents=True)
        (folder / "fleet-summary-audit.json").write_text(json.dumps(slice_summary(*clusters)))
    merged_dir = tmp_path / "merged"
    run = run_playbook(
        PLAYBOOK,
        twin=None,
        extra_vars={
            "gpufleet_summary_dir": str(tmp_path / "slices"),
            "gpufleet_results_dir": str(merged_dir),
            # A third slice's artifacts, as an AWX workflow passes them on to the next node.
            "gpufleet_fleet_summary_job_103": slice_summary(("gpu-04", "failed")),
        },
        timeout=120,
    )
    assert run.returncode != 0
    assert "2 of 4 clusters failed (gpu-02, gpu-04)" in run.output
    merged = json.loads((merged_dir / "fleet-summary-audit.json").read_text())
    assert [entry["cluster"] for entry in merged["clusters"]] == ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]
    assert (merged["slices"], merged["failed_clusters"]) == (3, ["gpu-02", "gpu-04"])
    assert (merged_dir / "fleet-summary-audit.md").read_text().startswith("# Fleet audit: 2 of 4 clusters FAILED")


def test_nothing_to_merge_is_said_plainly(tmp_path):
    run = run_playbook(PLAYBOOK, twin=None, extra_vars={"gpufleet_summary_dir": str(tmp_path)}, timeout=120)
    assert run.returncode != 0
    assert "No fleet summary to merge" in run.output
