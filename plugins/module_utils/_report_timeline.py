# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""A run's node timeline and capacity, read from its ledger entry (collection-internal, pure).

Each component role hands the ledger its timeline in the form its controller
or engine gives it:

- the GPU Operator's upgrade controller: a mapping node -> states
  (``state``, ``entered_at`` from the controller's Event, ``observed_at``);
- the rollout engine (MOFED reload by hand, NIC firmware through the BMC): a
  list of node runs, each with its ``steps`` (``name``, ``outcome``,
  ``started``, ``ended``);
- the Network Operator's auto upgrade: a list of nodes with their ``states``;
- the Machine Config Operator: a list of nodes with ``pool``, ``started_at``
  and ``done_at``.

``node_timelines`` reads all of them into one shape (per node, its phases
with start and end), which the Markdown table and the HTML Gantt chart both
show; ``capacity_samples`` gives the capacity curve (the GPU Operator role's
samples, or, for the engine's rollouts, the nodes unavailable at each node's
start and end).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import iso, parse_time

DONE_STATES = ("upgrade-done", "done")
FAILED_STATES = ("upgrade-failed", "failed")
WAITING_STATES = ("upgrade-required", "pending", "not-started", "skipped")


@dataclass(frozen=True)
class Phase:
    """One state or step of a node; ``end`` None: it had not ended when the run was recorded."""

    label: str
    start: Optional[datetime.datetime]
    end: Optional[datetime.datetime]
    status: str  # done, running, waiting, failed
    note: str = ""


@dataclass(frozen=True)
class NodeTimeline:
    node: str
    outcome: str
    phases: Tuple[Phase, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class CapacitySample:
    at: datetime.datetime
    allocatable_gpus: Optional[int]
    nodes_unavailable: int
    unavailable: Tuple[str, ...] = field(default=())


def _status_of(state: str, *, last: bool) -> str:
    if state in FAILED_STATES:
        return "failed"
    if state in DONE_STATES:
        return "done"
    if state in WAITING_STATES:
        return "waiting"
    return "running" if last else "done"


def _state_phases(rows: Sequence[Mapping[str, Any]], *, end: Optional[datetime.datetime]) -> Tuple[Phase, ...]:
    """States entered one after another: each lasts until the next one is entered."""
    moments = [
        (
            str(row.get("state") or row.get("step") or ""),
            parse_time(row.get("entered_at") or row.get("observed_at") or row.get("at") or row.get("time")),
            str(row.get("reason") or row.get("message") or ""),
        )
        for row in rows
        if isinstance(row, Mapping)
    ]
    phases: List[Phase] = []
    for index, (state, start, note) in enumerate(moments):
        last = index == len(moments) - 1
        following = next((moment for _s, moment, _n in moments[index + 1 :] if moment is not None), None)
        # The last state lasts until the run was recorded, unless it is the end of the road.
        stop = (start if state in DONE_STATES else end) if last else following
        phases.append(Phase(state or "(unknown)", start, stop, _status_of(state, last=last), note))
    return tuple(phases)


def _engine_timeline(run: Mapping[str, Any]) -> NodeTimeline:
    phases = []
    for step in run.get("steps") or []:
        if not isinstance(step, Mapping):
            continue
        outcome = str(step.get("outcome") or "")
        status = {"done": "done", "failed": "failed", "running": "running"}.get(outcome, "done")
        phases.append(
            Phase(
                str(step.get("name") or "?"),
                parse_time(step.get("started")),
                parse_time(step.get("ended")),
                status,
                str(step.get("error") or ""),
            )
        )
    note = str(run.get("error") or run.get("why") or "")
    if run.get("failed_step"):
        note = f"failed at {run['failed_step']}: {run.get('error') or ''}"
    return NodeTimeline(str(run.get("node")), str(run.get("outcome") or ""), tuple(phases), note)


def _pool_timeline(row: Mapping[str, Any], *, end: Optional[datetime.datetime]) -> NodeTimeline:
    start = parse_time(row.get("started_at"))
    done = parse_time(row.get("done_at"))
    state = str(row.get("state") or "")
    status = "done" if done else ("failed" if state == "Degraded" else "running")
    label = f"MachineConfigPool {row.get('pool')}" + (" (rebooted)" if row.get("rebooted") else "")
    note = f"{row.get('from_config') or '?'} -> {row.get('to_config') or '?'}"
    outcome = "done" if done else state or "in progress"
    return NodeTimeline(str(row.get("node")), outcome, (Phase(label, start or done, done or end, status, note),))


def node_timelines(entry: Mapping[str, Any]) -> List[NodeTimeline]:
    """Every node of the run's timeline, in the order the component gave them (a mapping: by name)."""
    nodes = entry.get("nodes")
    end = parse_time(entry.get("recorded_at"))
    found: List[NodeTimeline] = []
    if isinstance(nodes, Mapping):
        for name, states in sorted(nodes.items()):
            listed = states if isinstance(states, list) else [states]
            phases = _state_phases([row if isinstance(row, Mapping) else {"state": row} for row in listed], end=end)
            outcome = phases[-1].label if phases else ""
            found.append(NodeTimeline(str(name), outcome, phases))
        return found
    if not isinstance(nodes, list):
        return found
    loose: Dict[str, List[Mapping[str, Any]]] = {}
    for row in nodes:
        if not isinstance(row, Mapping) or not row.get("node"):
            continue
        if "steps" in row or "action" in row:
            found.append(_engine_timeline(row))
        elif "states" in row:
            phases = _state_phases([s for s in row.get("states") or [] if isinstance(s, Mapping)], end=end)
            found.append(NodeTimeline(str(row["node"]), str(row.get("outcome") or ""), phases))
        elif "pool" in row:
            found.append(_pool_timeline(row, end=end))
        else:
            loose.setdefault(str(row["node"]), []).append(row)
    for name, rows in loose.items():
        phases = _state_phases(rows, end=end)
        found.append(NodeTimeline(name, phases[-1].label if phases else "", phases))
    return found


def timeline_rows(entry: Mapping[str, Any]) -> List[List[str]]:
    """(node, state or step, from, to, note) per phase; a node with no phase gets one row with its outcome."""
    rows: List[List[str]] = []
    for timeline in node_timelines(entry):
        if not timeline.phases:
            rows.append([timeline.node, timeline.outcome, "", "", timeline.note])
        for phase in timeline.phases:
            rows.append(
                [
                    timeline.node,
                    phase.label if phase.status != "failed" else f"{phase.label} (FAILED)",
                    iso(phase.start) if phase.start else "",
                    iso(phase.end) if phase.end else "",
                    phase.note,
                ]
            )
    return rows


def capacity_samples(entry: Mapping[str, Any]) -> List[CapacitySample]:
    """The capacity curve: the component's own samples, else the engine's node runs as samples."""
    samples = []
    for point in entry.get("capacity") or []:
        if not isinstance(point, Mapping):
            continue
        at = parse_time(point.get("at"))
        if at is None:
            continue
        unavailable = tuple(str(node) for node in point.get("unavailable_nodes") or [])
        gpus = point.get("allocatable_gpus")
        samples.append(CapacitySample(at, gpus if isinstance(gpus, int) else None, len(unavailable), unavailable))
    if samples:
        return samples
    # Engine rollouts: a node is unavailable from its first step (cordon) to its last (uncordon).
    edges: List[Tuple[datetime.datetime, int, str]] = []
    for timeline in node_timelines(entry):
        starts = [phase.start for phase in timeline.phases if phase.start]
        if not starts or not any(phase.label == "cordon" for phase in timeline.phases):
            continue
        ends = [phase.end for phase in timeline.phases if phase.end]
        uncordoned = any(p.label == "uncordon" and p.status == "done" for p in timeline.phases)
        edges.append((min(starts), 1, timeline.node))
        if uncordoned and ends:
            edges.append((max(ends), -1, timeline.node))
    down: List[str] = []
    # At one moment, a node coming back counts before the next going away (the engine releases, then starts).
    for moment, change, node in sorted(edges, key=lambda edge: (edge[0], edge[1])):
        if change > 0:
            down.append(node)
        elif node in down:
            down.remove(node)
        samples.append(CapacitySample(moment, None, len(down), tuple(down)))
    return samples


def capacity_text(entry: Mapping[str, Any]) -> str:
    """Lowest and highest allocatable GPUs (or nodes down) during the run, and from how many samples."""
    samples = capacity_samples(entry)
    counts = [sample.allocatable_gpus for sample in samples if sample.allocatable_gpus is not None]
    if counts:
        return f"{min(counts)} to {max(counts)} allocatable GPUs during the rollout ({len(samples)} samples)"
    if samples:
        most = max(sample.nodes_unavailable for sample in samples)
        return f"at most {most} node(s) unavailable at once ({len(samples)} samples)"
    return ""


def run_part(entry: Mapping[str, Any]) -> str:
    """What one run did to the nodes, in a few words (its share of a campaign)."""
    timelines = node_timelines(entry)
    done = [t.node for t in timelines if t.outcome in DONE_STATES or t.outcome.startswith("done")]
    failed = [t.node for t in timelines if t.outcome in FAILED_STATES or any(p.status == "failed" for p in t.phases)]
    parts = []
    if done:
        parts.append(f"{len(done)} node(s) done: {', '.join(done)}")
    if failed:
        parts.append(f"failed on {', '.join(failed)}")
    return "; ".join(parts) or str(entry.get("message") or entry.get("outcome") or "")


def resumed_runs(entries: Sequence[Mapping[str, Any]], entry: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The earlier runs of this stage of this change that this run resumes, oldest first.

    Walking back through the ledger: the runs of the same change and stage that failed after changing the
    cluster, up to the first run that ended the campaign otherwise (a success, a rollback, another stage).
    Refusals changed nothing and are passed over.
    """
    stage, campaign = entry.get("stage"), entry.get("campaign")
    if stage not in ("canary", "promote", "rollback") or not campaign:
        return []
    found: List[Dict[str, Any]] = []
    for earlier in reversed([e for e in entries if isinstance(e, Mapping) and e.get("id") != entry.get("id")]):
        if earlier.get("outcome") in ("refused", "unchanged"):
            continue
        if earlier.get("campaign") != campaign or earlier.get("stage") != stage or earlier.get("outcome") != "failed":
            break
        if earlier.get("cluster_changed") is False:
            continue
        found.append(
            {
                "id": earlier.get("id"),
                "started_at": earlier.get("started_at"),
                "recorded_at": earlier.get("recorded_at"),
                "duration_seconds": earlier.get("duration_seconds"),
                "outcome": earlier.get("outcome"),
                "message": earlier.get("message"),
                "part": run_part(earlier),
            }
        )
    return list(reversed(found))
