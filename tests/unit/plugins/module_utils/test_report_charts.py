"""The HTML report's pieces: SVG charts, the timeline read from each component's form, the page itself."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from ansible_collections.gpufleet.upgrade.plugins.module_utils._firmware_rollout import observed_versions
from ansible_collections.gpufleet.upgrade.plugins.module_utils._report import render_report
from ansible_collections.gpufleet.upgrade.plugins.module_utils._report_html import (
    CONTENT_SECURITY_POLICY,
    gpus_per_node,
    html_file_name,
    render_html,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._report_svg import (
    Axis,
    Bar,
    Lane,
    Sample,
    capacity_svg,
    gantt_svg,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._report_timeline import (
    capacity_samples,
    node_timelines,
    resumed_runs,
    timeline_rows,
)

SVG = "{http://www.w3.org/2000/svg}"

# The rollout engine's timeline (MOFED reload by hand, NIC firmware through the BMC), as a halted firmware canary
# records it: the first node done, the second failed at its reboot, the third not started.
ENGINE_TIMELINE = [
    {
        "node": "gpu-worker-001",
        "action": "run",
        "outcome": "done",
        "started": "2026-11-22T08:00:00Z",
        "ended": "2026-11-22T08:20:00Z",
        "seconds": 1200,
        "steps": [
            {"name": "cordon", "outcome": "done", "started": "2026-11-22T08:00:00Z", "ended": "2026-11-22T08:00:05Z"},
            {"name": "flash", "outcome": "done", "started": "2026-11-22T08:00:05Z", "ended": "2026-11-22T08:10:00Z"},
            {"name": "reboot", "outcome": "done", "started": "2026-11-22T08:10:00Z", "ended": "2026-11-22T08:19:55Z"},
            {"name": "uncordon", "outcome": "done", "started": "2026-11-22T08:19:55Z", "ended": "2026-11-22T08:20:00Z"},
        ],
    },
    {
        "node": "gpu-worker-002",
        "action": "run",
        "outcome": "failed",
        "started": "2026-11-22T08:20:00Z",
        "ended": "2026-11-22T08:31:00Z",
        "steps": [
            {"name": "cordon", "outcome": "done", "started": "2026-11-22T08:20:00Z", "ended": "2026-11-22T08:20:05Z"},
            {
                "name": "reboot",
                "outcome": "failed",
                "started": "2026-11-22T08:20:05Z",
                "ended": "2026-11-22T08:31:00Z",
                "error": "Unable to apply the update",
            },
        ],
        "failed_step": "reboot",
        "error": "Unable to apply the update",
    },
    {"node": "gpu-worker-003", "action": "run", "outcome": "not-started", "why": "halted"},
]


def firmware_entry(**extra) -> dict:
    entry = {
        "id": "canary-20261122T083200Z-aaaa",
        "stage": "canary",
        "outcome": "failed",
        "group": "firmware",
        "campaign": "firmware-1",
        "message": "NIC firmware halted on gpu-worker-002",
        "started_at": "2026-11-22T07:58:00Z",
        "recorded_at": "2026-11-22T08:32:00Z",
        "duration_seconds": 2040,
        "nodes": ENGINE_TIMELINE,
        "max_unavailable": 1,
        "versions_before": {"firmware_cx7": "28.39.1002"},
        "versions_after": {"firmware_cx7": "28.42.1000"},
        "changes": [{"component": "firmware_cx7", "from": "28.39.1002", "to": "28.42.1000"}],
    }
    entry.update(extra)
    return entry


def test_engine_steps_fill_the_markdown_timeline() -> None:
    """The MOFED and firmware rows were empty: the engine's node runs carry steps, not states."""
    text = render_report(firmware_entry())
    assert "| gpu-worker-001 | flash | 2026-11-22T08:00:05Z | 2026-11-22T08:10:00Z |  |" in text
    assert "| gpu-worker-002 | reboot (FAILED) | 2026-11-22T08:20:05Z | 2026-11-22T08:31:00Z | Unable to apply" in text
    assert "| gpu-worker-003 | not-started |  |  | halted |" in text
    assert "| gpu-worker-001 |  |" not in text


def test_every_component_form_becomes_phases() -> None:
    gpu = node_timelines(
        {
            "recorded_at": "2026-11-22T09:00:00Z",
            "nodes": {
                "n1": [
                    {"state": "upgrade-required", "entered_at": "2026-11-22T08:00:00Z"},
                    {"state": "pod-restart-required", "entered_at": "2026-11-22T08:05:00Z", "observed_at": None},
                    {"state": "upgrade-done", "entered_at": None, "observed_at": "2026-11-22T08:10:00Z"},
                ]
            },
        }
    )
    (n1,) = gpu
    assert [(p.label, p.status) for p in n1.phases] == [
        ("upgrade-required", "waiting"),
        ("pod-restart-required", "done"),
        ("upgrade-done", "done"),
    ]
    assert n1.phases[1].end == n1.phases[2].start
    auto = node_timelines(
        {
            "recorded_at": "2026-11-22T09:00:00Z",
            "nodes": [
                {
                    "node": "n2",
                    "outcome": "upgrade-failed",
                    "states": [{"state": "upgrade-failed", "observed_at": "2026-11-22T08:30:00Z"}],
                }
            ],
        }
    )
    assert auto[0].phases[0].status == "failed" and auto[0].phases[0].end.hour == 9
    pool = node_timelines(
        {
            "recorded_at": "2026-11-22T09:00:00Z",
            "nodes": [
                {
                    "node": "n3",
                    "pool": "gpu-canary",
                    "started_at": "2026-11-22T08:00:00Z",
                    "done_at": None,
                    "state": "Working",
                },
            ],
        }
    )
    assert pool[0].phases[0].label == "MachineConfigPool gpu-canary" and pool[0].phases[0].status == "running"


def test_engine_runs_give_the_capacity_curve() -> None:
    samples = capacity_samples(firmware_entry())
    # Node 1 away, back; node 2 away (never uncordoned: it failed).
    assert [(s.nodes_unavailable, s.unavailable) for s in samples] == [
        (1, ("gpu-worker-001",)),
        (0, ()),
        (1, ("gpu-worker-002",)),
    ]


def test_gantt_has_a_lane_per_node_and_escapes_text() -> None:
    lanes = [
        Lane("n<1>", (Bar("cordon", 0, 10), Bar("flash", 10, 50, "failed", note='"bad" & worse')), "failed"),
        Lane("n2", ()),
    ]
    svg = gantt_svg(lanes, axis=Axis(span=100, start_label="a", end_label="b", halt_at=50))
    root = ET.fromstring(svg)  # well-formed XML
    groups = root.findall(f".//{SVG}g[@class='lane']")
    assert [g.get("data-node") for g in groups] == ["n<1>", "n2"]
    assert len(root.findall(f".//{SVG}rect[@class='bar']")) == 2
    assert root.findall(f".//{SVG}line[@class='halt']")
    assert "&quot;bad&quot; &amp; worse" in svg


def test_capacity_curve_has_a_point_per_sample_and_the_floor() -> None:
    samples = [Sample(0, 64, 0), Sample(10, 56, 1), Sample(20, 48, 2), Sample(30, 64, 0)]
    svg = capacity_svg(samples, axis=Axis(span=30), floor_gpus=48, max_unavailable=2)
    root = ET.fromstring(svg)
    assert len(root.findall(f".//{SVG}circle[@class='sample']")) == 4
    assert root.findall(f".//{SVG}line[@class='floor']") and root.findall(f".//{SVG}line[@class='budget']")
    assert not root.findall(f".//{SVG}line[@class='halt']")
    assert (
        gpus_per_node([type("S", (), {"allocatable_gpus": g, "nodes_unavailable": n})() for g, n in ((64, 0), (56, 1))])
        == 8
    )


def test_html_report_is_self_contained_and_leads_with_outcome_and_next() -> None:
    page = render_html(firmware_entry())
    assert f'content="{CONTENT_SECURITY_POLICY}"' in page and "default-src 'none'" in page
    assert "<script" not in page.lower()
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", page)
    assert page.index('id="outcome"') < page.index('id="next"') < page.index("Node timeline")
    assert "NIC firmware halted on gpu-worker-002" in page
    assert page.count('class="lane"') == 3
    assert page.count('class="sample"') == 3
    assert 'class="halt"' in page  # the failed reboot, marked on both charts
    assert "the budget lets 1 node(s) be unavailable at once" in page
    assert "API server&#39;s Date header" in page
    assert html_file_name("upgrade-c1-canary-20261122T083200Z.md") == "upgrade-c1-canary-20261122T083200Z.html"


def test_a_resumed_promote_says_so_and_shows_the_campaign() -> None:
    first = firmware_entry(id="promote-1", stage="promote", recorded_at="2026-11-22T08:32:00Z", cluster_changed=True)
    refused = firmware_entry(id="promote-2", stage="promote", outcome="refused", started_at="2026-11-22T08:40:00Z")
    second = firmware_entry(
        id="promote-3",
        stage="promote",
        outcome="success",
        message="Promoted",
        started_at="2026-11-22T09:00:00Z",
        recorded_at="2026-11-22T09:30:00Z",
        duration_seconds=1800,
    )
    earlier = resumed_runs([firmware_entry(id="canary-0", outcome="success"), first, refused], second)
    assert [run["id"] for run in earlier] == ["promote-1"]
    assert "failed on gpu-worker-002" in earlier[0]["part"]
    second["resumed_runs"] = earlier
    text = render_report(second)
    assert (
        "| Resumed | yes: this run resumed promote-1 (failed, 2026-11-22T07:58:00Z to 2026-11-22T08:32:00Z); "
        "2 runs, 1 h 32 min in all |" in text
    )
    page = render_html(second)
    assert "Campaign: 2 runs of this stage" in page and "promote-1" in page
    # A rollback in between ends the campaign: nothing is resumed.
    rollback = firmware_entry(id="rollback-1", stage="rollback", outcome="success")
    assert resumed_runs([first, rollback], second) == []


def test_openshift_canary_says_the_control_plane_moved_and_the_pools_wait() -> None:
    entry = firmware_entry(
        group="openshift",
        outcome="success",
        canary_node="gpu-worker-003",
        paused_pools=["worker"],
        versions_after={"openshift": "4.16.21"},
    )
    text = render_report(entry)
    assert (
        "| Where | the control plane (ClusterVersion to 4.16.21, cluster-wide), then canary node gpu-worker-003 in its "
        "own MachineConfigPool; worker stay paused until promote |"
    ) in text


def test_timeline_rows_of_an_entry_without_nodes() -> None:
    assert timeline_rows({}) == []
    assert capacity_samples({"capacity": [{"at": "not a time"}]}) == []


def test_firmware_before_is_what_the_bmcs_showed_not_the_matrix() -> None:
    reports = [
        {"node": n, "components": [{"component": "firmware_cx7", "devices": [{"installed": "28.39.1002"}] * 2}]}
        for n in ("gpu-worker-001", "gpu-worker-002")
    ]
    observed = observed_versions(reports)
    assert observed == {
        "firmware_cx7": {
            "version": "28.39.1002",
            "source": "BMC FirmwareInventory of 2 node(s): 28.39.1002 (4 devices)",
        }
    }
    # The matrix said 28.42.1000 was production; the BMCs say otherwise, and the report shows what they said.
    entry = firmware_entry(versions_before={"firmware_cx7": "28.42.1000"}, versions_observed=observed)
    assert "| firmware_cx7 | 28.39.1002 (observed: BMC FirmwareInventory of 2 node(s)" in render_report(entry)
