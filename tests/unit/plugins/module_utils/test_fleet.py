"""The fleet summary: one entry per cluster, failed clusters named, job slices merged; cluster names in file names."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._audit_report import report_files
from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._fleet import (
    SUMMARY_KIND,
    build_summary,
    check_cluster_name,
    render_html,
    render_markdown,
    summary_file_names,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._report import render_report, report_file_name


def result(cluster: str, outcome: str = "success", **more):
    return dict({"cluster": cluster, "outcome": outcome, "finished_at": "2026-11-25T10:00:00Z"}, **more)


def test_every_cluster_is_listed_and_the_failed_ones_named():
    summary = build_summary(
        run="audit",
        results=[
            result("gpu-west", "drift", drift={"nodes_with_drift": ["gpu-worker-002"], "nodes_total": 6}),
            result("gpu-east", versions={"gpu_operator": "v24.9.2"}),
            result("gpu-north", "failed", message="API server unreachable"),
        ],
        actor="alice",
    )
    assert [entry["cluster"] for entry in summary["clusters"]] == ["gpu-east", "gpu-north", "gpu-west"]
    assert summary["failed"] is True
    assert summary["failed_clusters"] == ["gpu-north", "gpu-west"]
    assert summary["by_outcome"] == {"success": ["gpu-east"], "drift": ["gpu-west"], "failed": ["gpu-north"]}
    assert summary["kind"] == SUMMARY_KIND and summary["slices"] == 1 and summary["clusters_total"] == 3
    text = render_markdown(summary)
    assert text.startswith("# Fleet audit: 2 of 3 clusters FAILED (gpu-north, gpu-west)")
    assert "| gpu-west | drift | - | 1 of 6 nodes (gpu-worker-002) |" in text
    assert "| gpu-east | success | gpu_operator v24.9.2 | none |" in text
    assert "by alice" in text
    page = render_html(summary)
    assert "default-src 'none'" in page and "<script" not in page
    assert "Fleet audit: 2 of 3 clusters FAILED (gpu-north, gpu-west)" in page
    assert "Open the reports of gpu-north, gpu-west" in page
    assert '<td>gpu-west</td><td class="fail">drift</td>' in page
    # The fleet module compares files without their generation time: that line stands alone.
    assert any(line.startswith("Generated ") for line in page.splitlines())


def test_a_fleet_that_passed_says_so():
    summary = build_summary(run="canary", results=[result("a", "success"), result("b", "unchanged")])
    assert summary["failed"] is False and summary["failed_clusters"] == []
    assert render_markdown(summary).startswith("# Fleet canary: all 2 clusters passed")


def test_upgrade_versions_show_what_moved():
    summary = build_summary(
        run="canary",
        results=[result("a", versions={"gpu_driver": "570.124.06"}, versions_before={"gpu_driver": "550.127.05"})],
    )
    assert "gpu_driver 550.127.05 -> 570.124.06" in render_markdown(summary)


def test_slice_summaries_merge_into_one():
    first = build_summary(run="audit", results=[result("a"), result("b", "failed")])
    second = build_summary(run="audit", results=[result("c"), result("d", "drift")])
    merged = build_summary(run="audit", summaries=[first, second])
    assert [entry["cluster"] for entry in merged["clusters"]] == ["a", "b", "c", "d"]
    assert merged["failed_clusters"] == ["b", "d"]
    assert merged["slices"] == 2
    # Merging a merge counts the slices it holds.
    assert build_summary(run="audit", summaries=[merged], results=[result("e")])["slices"] == 3


def test_a_cluster_run_again_keeps_its_latest_result():
    early = build_summary(run="audit", results=[result("a", "failed", finished_at="2026-11-25T09:00:00Z")])
    late = build_summary(run="audit", results=[result("a", "success", finished_at="2026-11-25T11:00:00Z")])
    assert build_summary(run="audit", summaries=[late, early])["clusters"][0]["outcome"] == "success"
    assert build_summary(run="audit", summaries=[early, late])["clusters"][0]["outcome"] == "success"


@pytest.mark.parametrize(
    ("summaries", "results", "words"),
    [
        ([{"kind": "something else"}], [], "summary 1 is not a fleet summary"),
        ([{"kind": SUMMARY_KIND, "run": "canary", "clusters": []}], [], "summarises run 'canary', not 'audit'"),
        ([], [{"outcome": "success"}], "result 1 has no cluster name"),
        ([], [{"cluster": "a", "outcome": "great"}], "result 1 (cluster a): outcome 'great' is not one of"),
        ([], [{"cluster": "../etc", "outcome": "success"}], "result 1: cluster '../etc' cannot name a file"),
    ],
)
def test_bad_input_is_named(summaries, results, words):
    with pytest.raises(InvalidInputError, match=words.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        build_summary(run="audit", summaries=summaries, results=results)


def test_file_names_carry_the_cluster():
    assert summary_file_names("canary") == {
        "json": "fleet-summary-canary.json",
        "markdown": "fleet-summary-canary.md",
        "html": "fleet-summary-canary.html",
    }
    with pytest.raises(InvalidInputError, match="run 'a/b' cannot name a file"):
        summary_file_names("a/b")
    assert report_files("gpu-east") == {
        "json": "audit-gpu-east.json",
        "junit": "audit-gpu-east.xml",
        "markdown": "audit-gpu-east.md",
        "html": "audit-gpu-east.html",
    }
    assert report_files() == {"json": "audit.json", "junit": "audit.xml", "markdown": "audit.md", "html": "audit.html"}
    assert report_file_name("canary", "2026-11-25T10:00:00Z", cluster="gpu-east") == (
        "upgrade-gpu-east-canary-20261125T100000Z.md"
    )
    assert report_file_name("canary", "2026-11-25T10:00:00Z") == "upgrade-canary-20261125T100000Z.md"
    assert check_cluster_name("") == ""
    with pytest.raises(InvalidInputError, match="cluster_name 'x y' cannot name a file"):
        check_cluster_name("x y")


def test_the_upgrade_report_names_its_cluster():
    entry = {"stage": "canary", "outcome": "success", "cluster_name": "gpu-east", "cluster": "https://10.0.0.1:6443"}
    text = render_report(entry)
    assert text.startswith("# Canary on gpu-east succeeded")
    assert "| Cluster | gpu-east (API server https://10.0.0.1:6443) |" in text
    assert "| Cluster |" not in render_report({"stage": "canary", "outcome": "success"})
