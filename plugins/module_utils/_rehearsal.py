# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Rehearsing a stage on a twin loaded from a snapshot: calibration and the prediction (collection-internal).

Pure, on local files only: the snapshot folder ``cluster_snapshot`` wrote, the
rehearsal run's ledger entry and the rehearsal twin's recorder report.

Calibration: the per-node step durations of a GPU driver rollout (drain, driver
build and load, validation) come from the cluster's own history where it has
one (the timelines the ledger kept of earlier runs, else the upgrade
controller's ``GPUDriverUpgrade`` state Events), otherwise from documented
defaults (the twin's timings, which follow the GPU Operator's: a driver-toolkit
build of about six minutes on RHCOS). The driver step is what the twin can be
told per node (its ``twin.gpufleet.io/driver-load-seconds`` Node annotation),
with an optional seeded jitter so several rehearsals spread like real runs do.
"""

from __future__ import annotations

import html
import json
import os
import random
import re
import statistics
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_watch import latest_cycle, state_events
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_nodes import describe_pdb, pdbs_covering_pod
from ansible_collections.gpufleet.upgrade.plugins.module_utils._ledger import LEDGER_DATA_KEY, parse_jsonl
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_write import write_text_atomically
from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import parse_time

Obj = Dict[str, Any]

DRIVER_SECONDS_ANNOTATION = "twin.gpufleet.io/driver-load-seconds"
NODES_FILE = "api_v1_nodes.json"
PODS_FILE = "api_v1_pods.json"
PDBS_FILE = "apis_policy_v1_poddisruptionbudgets.json"
EVENTS_FILE = "api_v1_events.json"
CONFIGMAPS_FILE = "api_v1_configmaps.json"
CLUSTER_VERSIONS_FILE = "apis_config.openshift.io_v1_clusterversions.json"

# Each step: from the state the node enters it to the state that ends it (k8s-operator-libs' state machine).
STEPS: Tuple[Tuple[str, str, Tuple[str, ...]], ...] = (
    ("drain", "cordon-required", ("pod-restart-required",)),
    ("driver", "pod-restart-required", ("validation-required",)),
    ("validation", "validation-required", ("uncordon-required", "upgrade-done")),
)
# Documented defaults (simulated seconds): the twin's GpuOperatorTimings, which follow the GPU Operator's.
DEFAULT_STEP_SECONDS = {
    "openshift": {"drain": 30.0, "driver": 360.0, "validation": 75.0},
    "kubernetes": {"drain": 30.0, "driver": 240.0, "validation": 75.0},
}
_EVICTED_POD = re.compile(r'pods/"([^"]+)" -n "([^"]+)"')


def read_list(directory: str, name: str) -> List[Obj]:
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        document = json.load(handle)
    return list(document.get("items") or [])


def profile_of(directory: str) -> str:
    """openshift when the snapshot has a ClusterVersion (the twin's profile to load it with)."""
    return "openshift" if read_list(directory, CLUSTER_VERSIONS_FILE) else "kubernetes"


# -- calibration ------------------------------------------------------------------------------------
def step_seconds(rows: Sequence[Mapping[str, Any]]) -> Dict[str, float]:
    """One node's step durations from its timeline rows (``state``, ``entered_at``: the cluster's clock)."""
    entered: Dict[str, float] = {}
    for row in rows:
        moment = parse_time(row.get("entered_at"))
        if moment is not None and str(row.get("state")) not in entered:
            entered[str(row.get("state"))] = moment.timestamp()
    found: Dict[str, float] = {}
    for step, start, ends in STEPS:
        end = next((entered[state] for state in ends if state in entered), None)
        if start in entered and end is not None and end >= entered[start]:
            found[step] = end - entered[start]
    return found


def history_timelines(directory: str) -> Tuple[str, List[List[Mapping[str, Any]]]]:
    """(source, timelines) of earlier rollouts: the ledger's, else the upgrade controller's Events."""
    timelines: List[List[Mapping[str, Any]]] = []
    for configmap in read_list(directory, CONFIGMAPS_FILE):
        text = (configmap.get("data") or {}).get(LEDGER_DATA_KEY) or ""
        for entry in parse_jsonl(text, source="the snapshot's ledger"):
            nodes = entry.get("nodes")
            if isinstance(nodes, dict):
                timelines += [rows for rows in nodes.values() if isinstance(rows, list)]
    if any(step_seconds(rows) for rows in timelines):
        return "ledger", timelines
    by_node: Dict[str, list] = {}
    for state_event in state_events(read_list(directory, EVENTS_FILE)):
        by_node.setdefault(state_event.node, []).append(state_event)
    timelines = [
        [{"state": e.state, "entered_at": e.at.isoformat()} for e in latest_cycle(entries)]
        for entries in by_node.values()
    ]
    if any(step_seconds(rows) for rows in timelines):
        return "events", timelines
    return "defaults", []


def calibrate(directory: str) -> Dict[str, Any]:
    """Median step durations from the cluster's history, else the documented defaults; says which per step."""
    profile = profile_of(directory)
    source, timelines = history_timelines(directory)
    samples: Dict[str, List[float]] = {}
    for rows in timelines:
        for step, seconds in step_seconds(rows).items():
            samples.setdefault(step, []).append(seconds)
    steps = {}
    for step, _start, _ends in STEPS:
        if samples.get(step):
            steps[step] = {
                "seconds": round(statistics.median(samples[step]), 1),
                "source": source,
                "samples": len(samples[step]),
            }
        else:
            steps[step] = {"seconds": DEFAULT_STEP_SECONDS[profile][step], "source": "defaults", "samples": 0}
    return {"profile": profile, "source": source, "steps": steps}


def jittered(seconds: float, *, jitter: float, seed: int, node: str) -> float:
    """``seconds`` varied by up to +/- ``jitter`` (a fraction), the same for one (seed, node)."""
    if jitter <= 0:
        return seconds
    draw = random.Random(f"{seed}:{node}").uniform(-jitter, jitter)
    return round(max(1.0, seconds * (1 + draw)), 1)


def apply_calibration(
    directory: str, calibration: Mapping[str, Any], *, jitter: float, seed: int, check_mode: bool = False
) -> Tuple[int, bool]:
    """Annotate the snapshot's GPU nodes with their driver step for the twin: how many nodes carry the annotation,
    and whether the nodes file changed (or, in check mode, would change; it is then left as it was).

    Only a calibrated driver step (from history) or a jitter changes the copy: with neither the twin keeps its
    own default timings, which are the documented defaults. The same calibration, jitter and seed write the same
    file, so a second run changes nothing.
    """
    if not 0 <= jitter < 1:
        raise InvalidInputError(f"jitter must be a fraction in [0, 1), got {jitter}")
    driver = calibration["steps"]["driver"]
    if driver["source"] == "defaults" and jitter <= 0:
        return 0, False
    path = os.path.join(directory, NODES_FILE)
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    document = json.loads(text)
    annotated = 0
    for node in document.get("items") or []:
        meta = node.setdefault("metadata", {})
        if (meta.get("labels") or {}).get("nvidia.com/gpu.present") != "true":
            continue
        seconds = jittered(float(driver["seconds"]), jitter=jitter, seed=seed, node=str(meta.get("name")))
        meta.setdefault("annotations", {})[DRIVER_SECONDS_ANNOTATION] = str(seconds)
        annotated += 1
    written = json.dumps(document, separators=(",", ":"))
    changed = written != text
    if changed and not check_mode:
        write_text_atomically(path, written)
    return annotated, changed


def write_report_files(texts: Mapping[str, str], *, check_mode: bool) -> bool:
    """Write each report (path: text) whose file does not hold that text already; whether any did not (in check
    mode nothing is written)."""
    stale = []
    for path, text in texts.items():
        try:
            with open(path, encoding="utf-8") as handle:
                same = handle.read() == text
        except OSError:
            same = False
        if not same:
            stale.append(path)
    if not check_mode:
        for path in stale:
            write_text_atomically(path, texts[path])
    return bool(stale)


# -- the prediction -----------------------------------------------------------------------------------
def run_timeline(entry: Mapping[str, Any]) -> Dict[str, List[Dict[str, Any]]]:
    """The entry's per-node timeline on the cluster's clock, only the states entered while the run ran.

    Rows the controller's Events do not date (``observed_at`` only) are on the controller's own clock and are
    left out, as are states of earlier runs (and, on a twin of a snapshot, the copied Events of the source's
    runs, whose times may even lie ahead of the twin's clock).
    """
    start = parse_time(entry.get("started_at"))
    end = parse_time(entry.get("recorded_at"))
    timeline: Dict[str, List[Dict[str, Any]]] = {}
    for node, rows in (entry.get("nodes") or {}).items():
        kept = []
        for row in rows if isinstance(rows, list) else []:
            moment = parse_time(row.get("entered_at"))
            if moment is not None and (start is None or moment >= start) and (end is None or moment <= end):
                kept.append(dict(row))
        timeline[str(node)] = kept
    return timeline


def rollout_seconds(entry: Mapping[str, Any]) -> Optional[float]:
    """How long the nodes' work took on the cluster's clock: the run's first node state change to its last.

    The stage's whole span (``duration_seconds`` of the entry) also holds the controller's own pauses between
    requests, which a twin at a high time scale multiplies; the node work is what the cluster's clock measures.
    """
    moments = [
        moment
        for rows in run_timeline(entry).values()
        for row in rows
        if (moment := parse_time(row.get("entered_at"))) is not None
    ]
    if not moments:
        return None
    return round((max(moments) - min(moments)).total_seconds(), 1)


def blocking_pdbs(
    failures: Iterable[Mapping[str, Any]], *, pods: Sequence[Mapping[str, Any]], pdbs: Sequence[Mapping[str, Any]]
) -> List[Dict[str, Any]]:
    """The PDBs covering the pods a failed node could not evict (named in its failure reason)."""
    by_key = {
        ((pod.get("metadata") or {}).get("namespace"), (pod.get("metadata") or {}).get("name")): pod for pod in pods
    }
    found: Dict[str, Dict[str, Any]] = {}
    for failure in failures:
        for name, namespace in _EVICTED_POD.findall(str(failure.get("reason") or "")):
            pod = by_key.get((namespace, name)) or {"metadata": {"namespace": namespace, "name": name, "labels": {}}}
            for pdb in pdbs_covering_pod(pdbs, pod):
                meta = pdb.get("metadata") or {}
                key = f"{meta.get('namespace')}/{meta.get('name')}"
                found.setdefault(key, {"pdb": key, "describe": describe_pdb(pdb), "nodes": [], "pods": []})
                found[key]["nodes"].append(str(failure.get("node")))
                found[key]["pods"].append(f"{namespace}/{name}")
    return [found[key] for key in sorted(found)]


def unavailable_now(nodes: Sequence[Mapping[str, Any]]) -> List[str]:
    """GPU nodes the snapshot shows cordoned or not Ready (preflight counts them against the budget)."""
    names = []
    for node in nodes:
        meta = node.get("metadata") or {}
        if (meta.get("labels") or {}).get("nvidia.com/gpu.present") != "true":
            continue
        conditions = (node.get("status") or {}).get("conditions") or []
        ready = next((c.get("status") for c in conditions if c.get("type") == "Ready"), "True")
        if (node.get("spec") or {}).get("unschedulable") or ready != "True":
            names.append(str(meta.get("name")))
    return sorted(names)


def predict(
    *, directory: str, entry: Mapping[str, Any], recorder: Mapping[str, Any], calibration: Mapping[str, Any]
) -> Dict[str, Any]:
    """What the rehearsal says the stage will do on the cluster."""
    failures = [dict(f) for f in entry.get("failures") or []]
    capacity = recorder.get("gpu_capacity") or {}
    samples = capacity.get("samples") or []
    total = max([s.get("allocatable", 0) for s in samples] + [capacity.get("current") or 0])
    intervals = (recorder.get("nodes") or {}).get("unavailable_intervals") or {}
    requests = recorder.get("requests") or {}
    return {
        "stage": entry.get("stage"),
        "outcome": entry.get("outcome"),
        "message": entry.get("message"),
        "duration_seconds": rollout_seconds(entry),
        "stage_seconds": entry.get("duration_seconds"),
        "timeline": run_timeline(entry),
        "capacity_curve": [{"seconds": s.get("seconds"), "allocatable": s.get("allocatable")} for s in samples],
        "gpus_total": total,
        "gpus_min": capacity.get("min", total),
        "peak_capacity_loss": round(1 - (capacity.get("min", total) / total), 4) if total else 0.0,
        "peak_unavailable": peak_overlap(intervals),
        "gpu_hours_lost": gpu_hours_lost(samples, total=total, until=_seconds_between(recorder)),
        "pods_disrupted": len(recorder.get("disrupted_pods") or []),
        "blocking_pdbs": blocking_pdbs(
            failures, pods=read_list(directory, PODS_FILE), pdbs=read_list(directory, PDBS_FILE)
        ),
        "failed_nodes": failures,
        "unavailable_before": unavailable_now(read_list(directory, NODES_FILE)),
        "api_requests": {
            "total": requests.get("total", 0),
            "by_verb": requests.get("by_verb", {}),
            "writes": {
                key: count
                for key, count in (requests.get("by_verb_resource") or {}).items()
                if key.split(" ", 1)[0] in ("create", "update", "patch", "delete", "deletecollection")
            },
        },
        "calibration": dict(calibration),
    }


def _seconds_between(recorder: Mapping[str, Any]) -> float:
    start, end = parse_time(recorder.get("since")), parse_time(recorder.get("now"))
    return (end - start).total_seconds() if start and end else 0.0


def peak_overlap(intervals: Mapping[str, Sequence[Mapping[str, Any]]]) -> int:
    """Most nodes unavailable at one moment, from the recorder's per-node intervals."""
    edges: List[Tuple[float, int]] = []
    for spans in intervals.values():
        for span in spans:
            start = parse_time(span.get("from"))
            end = parse_time(span.get("to")) if span.get("to") else None
            if start is None:
                continue
            edges.append((start.timestamp(), 1))
            if end is not None:
                edges.append((end.timestamp(), -1))
    peak = current = 0
    for _moment, step in sorted(edges, key=lambda edge: (edge[0], edge[1])):
        current += step
        peak = max(peak, current)
    return peak


def gpu_hours_lost(samples: Sequence[Mapping[str, Any]], *, total: int, until: float) -> float:
    """GPU-hours below full capacity: the area between ``total`` and the allocatable curve."""
    lost = 0.0
    ordered = sorted(samples, key=lambda s: float(s.get("seconds") or 0))
    for index, sample in enumerate(ordered):
        start = float(sample.get("seconds") or 0)
        end = float(ordered[index + 1].get("seconds") or 0) if index + 1 < len(ordered) else max(until, start)
        lost += max(0, total - int(sample.get("allocatable") or 0)) * (end - start)
    return round(lost / 3600.0, 2)


# -- the report ----------------------------------------------------------------------------------------
def _hms(seconds: Optional[float]) -> str:
    if seconds is None:
        return "unknown"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s"


def report_sections(prediction: Mapping[str, Any]) -> List[Tuple[str, List[str], List[List[str]]]]:
    """(title, header, rows) of each table: one source for the Markdown and the HTML report."""
    calibration = prediction.get("calibration") or {}
    summary = [
        ["Outcome on the copy", f"{prediction.get('outcome')}: {prediction.get('message')}"],
        ["Duration of the node work (twin clock)", _hms(prediction.get("duration_seconds"))],
        ["Whole stage incl. the controller's pauses (twin clock)", _hms(prediction.get("stage_seconds"))],
        ["Peak unavailable nodes", str(prediction.get("peak_unavailable"))],
        ["GPUs (min / total)", f"{prediction.get('gpus_min')} / {prediction.get('gpus_total')}"],
        ["Peak capacity loss", f"{100 * float(prediction.get('peak_capacity_loss') or 0):.1f}%"],
        ["GPU-hours lost", str(prediction.get("gpu_hours_lost"))],
        ["Pods disrupted", str(prediction.get("pods_disrupted"))],
        ["API requests the run sent", str((prediction.get("api_requests") or {}).get("total"))],
    ]
    steps = [
        [step, f"{info.get('seconds')} s", str(info.get("source")), str(info.get("samples"))]
        for step, info in (calibration.get("steps") or {}).items()
    ]
    blocks = [
        [b["pdb"], b["describe"], ", ".join(sorted(set(b["nodes"]))), ", ".join(b["pods"])]
        for b in prediction.get("blocking_pdbs") or []
    ]
    failed = [
        [str(f.get("node")), str(f.get("state")), str(f.get("reason"))] for f in prediction.get("failed_nodes") or []
    ]
    unavailable = [
        [name, "cordoned or NotReady before the stage: counts against maxUnavailable"]
        for name in prediction.get("unavailable_before") or []
    ]
    timeline = []
    for node, rows in sorted((prediction.get("timeline") or {}).items()):
        states = " -> ".join(f"{r.get('state')}@{str(r.get('entered_at') or '')[11:19]}" for r in rows)
        timeline.append([node, states])
    writes = [
        [key, str(count)] for key, count in sorted(((prediction.get("api_requests") or {}).get("writes") or {}).items())
    ]
    return [
        ("Prediction", ["What", "Value"], summary),
        ("Calibration (per-node step durations)", ["Step", "Duration", "Source", "Samples"], steps),
        ("PodDisruptionBudgets that blocked", ["PDB", "Budget", "Nodes", "Pods"], blocks),
        ("Nodes that failed or halted", ["Node", "State", "Reason"], failed),
        ("Nodes unavailable before the stage", ["Node", "Why"], unavailable),
        ("Per-node timeline", ["Node", "States (twin clock)"], timeline),
        ("Writes the run would send", ["Verb and resource", "Requests"], writes),
    ]


def render_markdown(prediction: Mapping[str, Any], *, title: str) -> str:
    lines = [f"# {title}", ""]
    for heading, header, rows in report_sections(prediction):
        lines += [f"## {heading}", ""]
        if not rows:
            lines += ["None.", ""]
            continue
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
        lines.append("")
    estimate = prediction.get("estimate")
    if estimate:
        lines += [f"## {ESTIMATE_HEADING}", "", estimate_note(estimate), ""]
        lines.append(
            estimate_markdown(
                estimate["rows"], window_hours=estimate["window_hours"], max_capacity_loss=estimate["max_capacity_loss"]
            )
        )
        lines.append("![duration against GPU-hours lost](rehearsal-estimate.svg)\n")
    return "\n".join(lines)


ESTIMATE_HEADING = "Window estimate (candidate settings, seeded step durations)"


def estimate_note(estimate: Mapping[str, Any]) -> str:
    return (
        f"{estimate.get('seeds')} seeded run(s) per setting, driver step varied by up to "
        f"{100 * float(estimate.get('jitter') or 0):.0f}% per node, on the twin's upgrade model driven in process "
        f"({estimate.get('wall_seconds')} s of wall time). The in-process runs do not halt at the first failed node "
        "nor run the validation gates."
    )


def build_estimate(document: Mapping[str, Any], *, window_hours: float, max_capacity_loss: float) -> Dict[str, Any]:
    """The estimator's runs (``python -m gpufleet_twin.estimate``) as table rows and the chosen setting."""
    rows = estimate_rows(document.get("runs") or [], window_hours=window_hours, max_capacity_loss=max_capacity_loss)
    chosen = smallest_fitting(rows)
    return {
        "rows": rows,
        "chosen": dict(chosen["candidate"]) if chosen else None,
        "window_hours": window_hours,
        "max_capacity_loss": max_capacity_loss,
        "seeds": document.get("seeds"),
        "jitter": document.get("jitter"),
        "wall_seconds": document.get("wall_seconds"),
    }


def capacity_svg(curve: Sequence[Mapping[str, Any]], *, total: int, width: int = 640, height: int = 160) -> str:
    """The GPU capacity curve as a self-contained SVG step line."""
    if not curve or not total:
        return ""
    end = max(float(point.get("seconds") or 0) for point in curve) or 1.0
    points = []
    previous_y = None
    for point in sorted(curve, key=lambda p: float(p.get("seconds") or 0)):
        x = 40 + (width - 50) * float(point.get("seconds") or 0) / end
        y = 10 + (height - 30) * (1 - float(point.get("allocatable") or 0) / total)
        if previous_y is not None:
            points.append(f"{x:.1f},{previous_y:.1f}")
        points.append(f"{x:.1f},{y:.1f}")
        previous_y = y
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="allocatable GPUs over time">'
        f'<text x="2" y="14" font-size="10">{total}</text><text x="2" y="{height - 20}" font-size="10">0</text>'
        f'<polyline fill="none" stroke="#1f6feb" stroke-width="2" points="{" ".join(points)}"/>'
        f'<text x="40" y="{height - 4}" font-size="10">0 s</text>'
        f'<text x="{width - 60}" y="{height - 4}" font-size="10">{int(end)} s</text></svg>'
    )


def render_html(prediction: Mapping[str, Any], *, title: str) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse;margin:.5em 0}"
        "td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}"
        "th{background:#f3f3f3}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    for heading, header, rows in report_sections(prediction):
        parts.append(f"<h2>{html.escape(heading)}</h2>")
        if heading.startswith("Prediction"):
            parts.append(
                capacity_svg(prediction.get("capacity_curve") or [], total=int(prediction.get("gpus_total") or 0))
            )
        if not rows:
            parts.append("<p>None.</p>")
            continue
        parts.append("<table><tr>" + "".join(f"<th>{html.escape(cell)}</th>" for cell in header) + "</tr>")
        parts += ["<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in rows]
        parts.append("</table>")
    estimate = prediction.get("estimate")
    if estimate:
        parts.append(f"<h2>{html.escape(ESTIMATE_HEADING)}</h2><p>{html.escape(estimate_note(estimate))}</p>")
        parts.append(estimate_svg(estimate["rows"]))
        parts.append("<table><tr>" + "".join(f"<th>{html.escape(cell)}</th>" for cell in ESTIMATE_HEADER) + "</tr>")
        for row in estimate["rows"]:
            parts.append("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in estimate_cells(row)) + "</tr>")
        parts.append("</table>")
        failures = estimate_failures(estimate["rows"])
        if failures:
            parts.append("<p>Nodes that ended upgrade-failed:</p><ul>")
            parts += [f"<li>{html.escape(line)}</li>" for line in failures]
            parts.append("</ul>")
        chosen = estimate.get("chosen")
        parts.append(
            f"<p>Smallest setting that fits: <strong>{html.escape(candidate_label(chosen))}</strong></p>"
            if chosen
            else "<p>No candidate fits.</p>"
        )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


# -- the window estimate -------------------------------------------------------------------------------
def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (p50, p90) of a few runs."""
    ordered = sorted(values)
    rank = max(1, -(-round(fraction * 100) * len(ordered) // 100))
    return ordered[min(rank, len(ordered)) - 1]


def candidate_label(candidate: Mapping[str, Any]) -> str:
    return ", ".join(f"{key} {value}" for key, value in sorted(candidate.items()))


def estimate_rows(
    runs: Sequence[Mapping[str, Any]], *, window_hours: float, max_capacity_loss: float
) -> List[Dict[str, Any]]:
    """Per candidate: duration p50/p90, GPU-hours lost (p50), peak capacity loss (max) and whether it fits."""
    by_candidate: Dict[str, List[Mapping[str, Any]]] = {}
    settings: Dict[str, Mapping[str, Any]] = {}
    for run in runs:
        label = candidate_label(run.get("candidate") or {})
        by_candidate.setdefault(label, []).append(run)
        settings[label] = run.get("candidate") or {}
    rows = []
    for label, group in by_candidate.items():
        finished = [float(r["duration_seconds"]) for r in group if r.get("finished") and r.get("duration_seconds")]
        p90 = percentile(finished, 0.9) if len(finished) == len(group) and finished else None
        loss = max(float(r.get("peak_capacity_loss") or 0) for r in group)
        failing = [r for r in group if r.get("failed_nodes")]
        rows.append(
            {
                "candidate": dict(settings[label]),
                "label": label,
                "runs": len(group),
                "p50_hours": round(percentile(finished, 0.5) / 3600, 2) if finished else None,
                "p90_hours": round(p90 / 3600, 2) if p90 is not None else None,
                "gpu_hours_lost": round(statistics.median(float(r.get("gpu_hours_lost") or 0) for r in group), 2),
                "peak_capacity_loss": round(loss, 4),
                "failed_nodes": sorted({n for r in group for n in r.get("failed_nodes") or []}),
                "runs_with_failed_nodes": len(failing),
                # Why, as the upgrade controller said it (its last Warning Event on the node), from the first run
                # that gives a reason.
                "failure_reasons": {
                    node: next(
                        (
                            str(r["failure_reasons"][node])
                            for r in failing
                            if (r.get("failure_reasons") or {}).get(node)
                        ),
                        "",
                    )
                    for node in sorted({n for r in failing for n in r.get("failed_nodes") or []})
                },
                # A node that ends upgrade-failed (a drain past its timeout, a driver that does not start) halts the
                # collection's stage there: a setting under which any run has one does not fit, however fast.
                "fits": p90 is not None and p90 / 3600 <= window_hours and loss <= max_capacity_loss and not failing,
            }
        )
    return rows


def smallest_fitting(rows: Sequence[Mapping[str, Any]]) -> Optional[Mapping[str, Any]]:
    """The fitting candidate that takes the fewest GPUs away (then the shortest p90): the gentlest that fits."""
    fitting = [row for row in rows if row.get("fits")]
    if not fitting:
        return None
    return min(fitting, key=lambda row: (row["peak_capacity_loss"], row["p90_hours"], row["label"]))


ESTIMATE_HEADER = (
    "Setting",
    "Runs",
    "Duration p50",
    "Duration p90",
    "GPU-hours lost (p50)",
    "Peak capacity loss",
    "Nodes failed",
    "Fits",
)


def estimate_cells(row: Mapping[str, Any]) -> List[str]:
    """One candidate's row of the estimate table (ESTIMATE_HEADER), for the Markdown and the HTML report."""
    failed = row.get("failed_nodes") or []
    return [
        str(row["label"]),
        str(row["runs"]),
        # None: not every run finished within the estimator's bound (a PDB that never allows, say).
        "did not finish" if row["p50_hours"] is None else f"{row['p50_hours']} h",
        "did not finish" if row["p90_hours"] is None else f"{row['p90_hours']} h",
        str(row["gpu_hours_lost"]),
        f"{100 * row['peak_capacity_loss']:.1f}%",
        f"{len(failed)}, in {row.get('runs_with_failed_nodes', 0)} of {row['runs']} runs" if failed else "0",
        "yes" if row["fits"] else "no",
    ]


def estimate_failures(rows: Sequence[Mapping[str, Any]]) -> List[str]:
    """One line per node that failed under a candidate: the setting, the node and why."""
    return [
        f"{row['label']}: {node}: {reason or 'no reason recorded'}"
        for row in rows
        for node, reason in sorted((row.get("failure_reasons") or {}).items())
    ]


def estimate_markdown(rows: Sequence[Mapping[str, Any]], *, window_hours: float, max_capacity_loss: float) -> str:
    lines = ["| " + " | ".join(ESTIMATE_HEADER) + " |", "|" + "---|" * len(ESTIMATE_HEADER)]
    lines += ["| " + " | ".join(estimate_cells(row)) + " |" for row in rows]
    failures = estimate_failures(rows)
    if failures:
        lines += ["", "Nodes that ended upgrade-failed:", ""] + [f"- {line}" for line in failures]
    chosen = smallest_fitting(rows)
    lines.append("")
    limits = f"{window_hours} h window, at most {100 * max_capacity_loss:.0f}% of GPUs away"
    lines.append(
        f"Smallest setting that fits ({limits}): **{chosen['label']}**." if chosen else f"No candidate fits ({limits})."
    )
    return "\n".join(lines) + "\n"


def estimate_svg(rows: Sequence[Mapping[str, Any]], *, width: int = 640, height: int = 240) -> str:
    """Duration p50-p90 (a bar) against GPU-hours lost, one point per candidate, labelled."""
    points = [row for row in rows if row.get("p90_hours") is not None]
    if not points:
        return ""
    max_hours = max(float(row["p90_hours"]) for row in points) or 1.0
    max_lost = max(float(row["gpu_hours_lost"]) for row in points) or 1.0
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        'aria-label="duration against GPU-hours lost per candidate">',
        f'<line x1="50" y1="{height - 30}" x2="{width - 10}" y2="{height - 30}" stroke="#888"/>',
        f'<line x1="50" y1="10" x2="50" y2="{height - 30}" stroke="#888"/>',
        f'<text x="{width // 2}" y="{height - 5}" font-size="11">GPU-hours lost (max {max_lost:.1f})</text>',
        f'<text x="2" y="20" font-size="11">{max_hours:.1f} h</text>',
    ]
    for row in points:
        x = 50 + (width - 80) * float(row["gpu_hours_lost"]) / max_lost
        y50 = (height - 30) - (height - 50) * float(row["p50_hours"]) / max_hours
        y90 = (height - 30) - (height - 50) * float(row["p90_hours"]) / max_hours
        colour = "#1a7f37" if row.get("fits") else "#cf222e"
        parts.append(
            f'<line x1="{x:.1f}" y1="{y50:.1f}" x2="{x:.1f}" y2="{y90:.1f}" stroke="{colour}" stroke-width="4"/>'
        )
        parts.append(f'<circle cx="{x:.1f}" cy="{y50:.1f}" r="4" fill="{colour}"/>')
        label = html.escape(f"{row['label']} ({100 * row['peak_capacity_loss']:.0f}% GPUs away)")
        parts.append(f'<text x="{x + 6:.1f}" y="{y90:.1f}" font-size="10">{label}</text>')
    parts.append("</svg>")
    return "".join(parts)
