# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The HTML report of one run of the upgrade flow (collection-internal, pure).

One self-contained file beside the Markdown report: inline CSS and SVG, no
script, nothing fetched (a Content-Security-Policy of ``default-src 'none'``
says so to the browser). Outcome and next step first, then what failed, the
per-node timeline, the capacity curve, the gates with their evidence, the
versions and the runs of the campaign. The facts come from ``_report`` (the
same rows the Markdown shows) and ``_report_timeline``; the charts from
``_report_svg``; the template below only lays them out. Jinja2 is
ansible-core's own dependency; the template lives here as a string because a
module's ``module_utils`` can carry only Python files to the target.
"""

from __future__ import annotations

import datetime
import traceback
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._report import (
    CLOCK_NOTE,
    OUTCOME_WORDS,
    diagnosis_rows,
    duration_text,
    failures,
    gate_rows,
    ledger_lines,
    next_step,
    pre_step_rows,
    report_title,
    summary_rows,
    version_rows,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._report_svg import (
    STATUS_COLOURS,
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
    run_part,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import iso, parse_time

try:
    from jinja2 import Environment
except ImportError:
    HAS_JINJA2 = False
    JINJA2_IMPORT_ERROR: Optional[str] = traceback.format_exc()
else:
    HAS_JINJA2 = True
    JINJA2_IMPORT_ERROR = None

# Inline styles only; no script, no font, no image from anywhere (style-src for the <style> element).
CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #212121; max-width: 1000px; }
h1 { font-size: 1.4em; margin-bottom: .2em; }
h2 { font-size: 1.1em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
.outcome { padding: .8em 1em; border-radius: 6px; margin: 1em 0; }
.outcome.success, .outcome.unchanged { background: #e8f5e9; border-left: 6px solid #2e7d32; }
.outcome.failed { background: #ffebee; border-left: 6px solid #c62828; }
.outcome.refused { background: #fff8e1; border-left: 6px solid #f9a825; }
.next { font-weight: 600; }
table { border-collapse: collapse; margin: .5em 0; font-size: .9em; }
th, td { border: 1px solid #ddd; padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #f5f5f5; }
td.fail { color: #c62828; font-weight: 600; }
td.pass { color: #2e7d32; }
pre { background: #fafafa; border: 1px solid #eee; padding: .5em; white-space: pre-wrap; font-size: .85em; }
.legend span { display: inline-block; margin-right: 1em; font-size: .85em; }
.legend i { display: inline-block; width: 1em; height: .8em; margin-right: .3em; vertical-align: middle; }
.muted { color: #757575; font-size: .85em; }
"""

TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{ csp | safe }}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
<style>{{ style }}</style>
</head>
<body>
<h1>{{ title }}</h1>
<p class="muted">{{ cluster }}{{ when }}</p>
<div class="outcome {{ outcome }}" id="outcome">
<p><strong>{{ outcome_word }}</strong>: {{ message }}</p>
<p class="next" id="next">Next: {{ next }}</p>
</div>
{% if problems %}<h2>What failed and why</h2>
<ul id="failures">{% for problem in problems %}<li>{{ problem }}</li>{% endfor %}</ul>{% endif %}
{% if diagnosis %}<h2>Why the halted nodes are stuck (the doctor)</h2>
<table id="diagnosis"><tr><th>node</th><th>waits in</th><th>for</th><th>cause</th><th>evidence</th>
<th>what unsticks it</th></tr>
{% for row in diagnosis %}<tr>{% for cell in row %}<td>{{ cell }}</td>{% endfor %}</tr>{% endfor %}</table>{% endif %}
<h2>Summary</h2>
<table id="summary">{% for label, text in summary %}<tr><th>{{ label }}</th><td>{{ text }}</td></tr>{% endfor %}
</table>
{% if runs|length > 1 %}<h2>Campaign: {{ runs|length }} runs of this stage</h2>
<table id="campaign"><tr><th>run</th><th>from</th><th>to</th><th>took</th><th>outcome</th><th>its part</th></tr>
{% for run in runs %}<tr><td>{{ run.id }}</td><td>{{ run.started_at }}</td><td>{{ run.recorded_at }}</td>
<td>{{ run.took }}</td><td>{{ run.outcome }}</td><td>{{ run.part }}</td></tr>{% endfor %}</table>{% endif %}
<h2>Node timeline</h2>
{% if lanes %}<div class="legend">{% for status, colour in colours %}<span><i style="background:{{ colour }}">
</i>{{ status }}</span>{% endfor %}</div>
{{ gantt | safe }}{% else %}<p class="muted">No node changed in this run.</p>{% endif %}
<h2>Capacity</h2>
{% if samples %}{{ capacity | safe }}
<p class="muted">{{ capacity_note }}</p>{% else %}<p class="muted">No capacity samples in this run.</p>{% endif %}
{% if gates %}<h2>Validation gates</h2>
<table id="gates"><tr><th>node</th><th>gate</th><th>result</th><th>why</th><th>took</th><th>started</th></tr>
{% for gate in gates %}<tr><td>{{ gate.node }}</td><td>{{ gate.gate }}</td>
<td class="{{ 'pass' if gate.passed else 'fail' }}">
{{ 'pass' if gate.passed else ('could not run' if gate.could_not_run else 'FAIL') }}</td>
<td>{{ gate.reason }}</td><td>{{ gate.took }}</td><td>{{ gate.started_at }}</td></tr>{% endfor %}</table>
{% for gate in gates if gate.evidence %}<details{% if not gate.passed %} open{% endif %}>
<summary>Evidence, {{ gate.gate }} on {{ gate.node }}</summary><pre>{{ gate.evidence }}</pre></details>{% endfor %}
{% endif %}
{% if pre_steps %}<h2>Pre-steps (changed before the upgrade, to be put back)</h2>
<table><tr><th>pre-step</th><th>object</th><th>what it replaced</th><th>now</th></tr>
{% for row in pre_steps %}<tr>{% for cell in row %}<td>{{ cell }}</td>{% endfor %}</tr>{% endfor %}</table>{% endif %}
{% if versions %}<h2>Versions</h2>
<table id="versions"><tr><th>component</th><th>before</th><th>after</th><th></th></tr>
{% for row in versions %}<tr>{% for cell in row %}<td>{{ cell }}</td>{% endfor %}</tr>{% endfor %}</table>{% endif %}
<h2>Ledger</h2>
<ul>{% for line in ledger %}<li>{{ line }}</li>{% endfor %}</ul>
<p class="muted" id="clock">{{ clock_note }}</p>
</body>
</html>
"""


def _seconds(moment: Optional[datetime.datetime], origin: datetime.datetime) -> float:
    return (moment - origin).total_seconds() if moment else 0.0


def chart_window(entry: Mapping[str, Any]) -> Tuple[datetime.datetime, datetime.datetime]:
    """The charts' time axis: from the first to the last node event or capacity sample (a run spends most of its
    time on preflight and gates, which would squeeze the nodes' bars into a sliver), else the run's own span."""
    moments: List[Optional[datetime.datetime]] = [sample.at for sample in capacity_samples(entry)]
    for timeline in node_timelines(entry):
        for phase in timeline.phases:
            moments += [phase.start, phase.end]
    moments.append(halt_moment(entry))
    known = [moment for moment in moments if moment is not None]
    if len(set(known)) < 2:
        known += [m for m in (parse_time(entry.get("started_at")), parse_time(entry.get("recorded_at"))) if m]
    if not known:
        epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
        return epoch, epoch
    start, end = min(known), max(known)
    margin = (end - start) * 0.03
    return start - margin, end + margin


def halt_moment(entry: Mapping[str, Any]) -> Optional[datetime.datetime]:
    """When the run halted: the first failed state or step, else the record of a failed run; None if it did not."""
    if entry.get("outcome") != "failed":
        return None
    moments = [
        phase.end or phase.start
        for timeline in node_timelines(entry)
        for phase in timeline.phases
        if phase.status == "failed"
    ]
    failed = [moment for moment in moments if moment is not None]
    return min(failed) if failed else parse_time(entry.get("recorded_at"))


def gpus_per_node(samples: Sequence[Any]) -> Optional[float]:
    """GPUs one unavailable node takes away, read off the samples (None when no sample shows a node away)."""
    counts = [s.allocatable_gpus for s in samples if s.allocatable_gpus is not None]
    if not counts:
        return None
    most = max(counts)
    losses = [
        (most - s.allocatable_gpus) / s.nodes_unavailable
        for s in samples
        if s.allocatable_gpus is not None and s.nodes_unavailable
    ]
    return max(losses) if losses else None


def _budget_nodes(entry: Mapping[str, Any], nodes: int) -> Optional[int]:
    value = entry.get("max_unavailable")
    text = str(value if value is not None else "").strip()
    if text.endswith("%"):
        try:
            # Kubernetes rounds a percentage of maxUnavailable down (intstr, roundUp false), but at least 1 node.
            return max(1, int(float(text[:-1]) * nodes / 100))
        except ValueError:
            return None
    try:
        return int(text) if text else None
    except ValueError:
        return None


def _ticks(origin: datetime.datetime, end: datetime.datetime) -> Tuple[Tuple[float, str], ...]:
    span = (end - origin).total_seconds()
    if span <= 0:
        return ()
    return tuple((span * k / 4, iso(origin + datetime.timedelta(seconds=span * k / 4))[11:16]) for k in (1, 2, 3))


def charts(entry: Mapping[str, Any]) -> Dict[str, Any]:
    """The two SVG charts of the run and what the template says about them."""
    origin, end = chart_window(entry)
    halt = halt_moment(entry)
    axis = Axis(
        span=(end - origin).total_seconds(),
        start_label=iso(origin),
        end_label=iso(end),
        halt_at=_seconds(halt, origin) if halt else None,
        ticks=_ticks(origin, end),
    )
    lanes = [
        Lane(
            name=timeline.node,
            outcome=timeline.outcome,
            bars=tuple(
                Bar(
                    label=phase.label,
                    start=_seconds(phase.start or phase.end or end, origin),
                    end=_seconds(phase.end or end, origin),
                    status=phase.status,
                    note=phase.note,
                )
                for phase in timeline.phases
            ),
        )
        for timeline in node_timelines(entry)
    ]
    found = capacity_samples(entry)
    samples = [
        Sample(at=_seconds(s.at, origin), allocatable_gpus=s.allocatable_gpus, nodes_unavailable=s.nodes_unavailable)
        for s in found
    ]
    budget = _budget_nodes(entry, len(lanes))
    per_node = gpus_per_node(found)
    counts = [s.allocatable_gpus for s in found if s.allocatable_gpus is not None]
    floor = max(counts) - budget * per_node if counts and budget is not None and per_node else None
    note = f"{len(samples)} samples"
    if budget is not None:
        note += f"; the budget lets {budget} node(s) be unavailable at once"
    if floor is not None:
        note += f", so at least {floor:g} allocatable GPUs (the dashed line)"
    if halt:
        note += f"; halted at {iso(halt)} (the red line)"
    return {
        "lanes": lanes,
        "samples": samples,
        "gantt": gantt_svg(lanes, axis=axis) if lanes else "",
        "capacity": capacity_svg(samples, axis=axis, floor_gpus=floor, max_unavailable=budget) if samples else "",
        "capacity_note": note + ".",
    }


def campaign_runs(entry: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """This run and the earlier runs of the same stage it resumed, oldest first, each with its part."""
    runs = []
    for run in [*(entry.get("resumed_runs") or []), entry]:
        if not isinstance(run, Mapping):
            continue
        part = run.get("part") or run_part(run)
        runs.append(
            {
                "id": run.get("id"),
                "started_at": run.get("started_at"),
                "recorded_at": run.get("recorded_at"),
                "took": duration_text(run.get("duration_seconds")),
                "outcome": run.get("outcome"),
                "part": part,
            }
        )
    return runs


def render_html(entry: Mapping[str, Any]) -> str:
    """The run's HTML report (Jinja2 must be importable: HAS_JINJA2)."""
    environment = Environment(autoescape=True, keep_trailing_newline=True)
    template = environment.from_string(TEMPLATE)
    outcome = str(entry.get("outcome") or "")
    cluster = entry.get("cluster_name") or ""
    return template.render(
        csp=CONTENT_SECURITY_POLICY,
        style=STYLE,
        title=report_title(entry),
        cluster=f"Cluster {cluster}" + (f" ({entry['cluster']})" if entry.get("cluster") else "") + " · "
        if cluster
        else "",
        when=f"{entry.get('started_at') or '?'} to {entry.get('recorded_at') or '?'} (cluster time)",
        outcome=outcome,
        outcome_word=OUTCOME_WORDS.get(outcome, outcome).capitalize(),
        message=entry.get("message") or outcome,
        next=next_step(entry),
        problems=failures(entry),
        diagnosis=diagnosis_rows(entry),
        summary=[row for row in summary_rows(entry) if row[0] not in ("Outcome", "Next")],
        runs=campaign_runs(entry),
        colours=sorted(STATUS_COLOURS.items()),
        gates=gate_rows(entry),
        pre_steps=pre_step_rows(entry),
        versions=version_rows(entry),
        ledger=ledger_lines(entry),
        clock_note=CLOCK_NOTE,
        **charts(entry),
    )


def html_file_name(markdown_name: str) -> str:
    """The HTML report's name beside the Markdown one."""
    return markdown_name[: -len(".md")] + ".html" if markdown_name.endswith(".md") else markdown_name + ".html"


AUDIT_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{ csp | safe }}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
<style>{{ style }}</style>
</head>
<body>
<h1>{{ title }}</h1>
<p class="muted">{% if checked_at %}Checked at {{ checked_at }} (cluster time) · {% endif %}matrix {{ matrix }}</p>
<div class="outcome {{ 'failed' if violations or drifted else ('refused' if warnings else 'success') }}" id="outcome">
<p>
<strong>Rules: {{ rules_status }}</strong>
({{ violation_count }} violations, {{ warnings|length }} warnings){% if drift %}
· <strong>drift on {{ drift_nodes|length }} of {{ nodes_total }} nodes</strong>{% if drift_nodes %}
: {{ drift_nodes|join(', ') }}{% endif %}{% endif %}</p>
</div>
{% if violations %}<h2>Violations</h2>
<table id="violations"><tr><th>rule</th><th>stage</th><th>why it matters</th><th>finding</th></tr>
{% for row in violations %}<tr>{% for cell in row %}<td>{{ cell }}</td>{% endfor %}</tr>{% endfor %}
</table>{% endif %}
{% if warnings %}<h2>Warnings</h2>
<ul id="warnings">{% for warning in warnings %}<li>{{ warning }}</li>{% endfor %}</ul>{% endif %}
<h2>Plan from current_production to {{ plan_to }}</h2>
{% if plan_steps %}<ol>{% for step in plan_steps %}<li>
<strong>{{ step.group }}</strong>: {% for change in step.changes %}
{{ change.component }} {{ change.from }} &rarr; {{ change.to }}{% if not loop.last %}, {% endif %}{% endfor %}
</li>{% endfor %}</ol>{% else %}<p>Nothing to change.</p>{% endif %}
{% if components %}<h2>Drift by component</h2>
<table id="components"><tr><th>component</th><th>expected (nodes)</th><th>found (nodes)</th><th>ok</th><th>drift</th>
<th>unknown</th><th>where data is missing</th></tr>
{% for row in components %}<tr><td>{{ row.component }}</td><td>{{ row.expected }}</td><td>{{ row.found }}</td>
<td>{{ row.ok }}</td>
<td class="{{ 'fail' if row.drift else '' }}">{{ row.drift }}</td><td>{{ row.unknown }}</td>
<td class="muted">{{ row.hint }}</td></tr>{% endfor %}</table>{% endif %}
{% if cluster_rows %}<h2>Cluster-wide</h2>
<table id="cluster"><tr><th>component</th><th>expected</th><th>found</th><th>status</th><th>read from</th></tr>
{% for row in cluster_rows %}<tr><td>{{ row.component }}</td><td>{{ row.expected }}{% if row.expected_canary %}
 (canary: {{ row.expected_canary }}){% endif %}</td>
<td>{{ row.found or 'unknown' }}</td><td class="{{ 'fail' if row.status == 'drift' else '' }}">{{ row.status }}</td>
<td>{{ row.source or '' }}</td></tr>{% endfor %}</table>{% endif %}
{% if drifted %}<h2>Nodes that drifted</h2>
<table id="drift"><tr><th>node</th><th>role</th><th>component</th><th>expected</th><th>found</th><th>read from</th>
</tr>
{% for row in drifted %}<tr>{% for cell in row %}<td>{{ cell if cell is not none else 'unknown' }}</td>{% endfor %}
</tr>{% endfor %}</table>{% endif %}
<p class="muted" id="clock">Times are the cluster's (the API server's Date header).</p>
</body>
</html>
"""


def render_audit_html(
    result: Mapping[str, Any],
    *,
    warnings: Sequence[str],
    components: Sequence[Mapping[str, Any]],
    drifted: Sequence[Sequence[Any]],
) -> str:
    """The audit's HTML report, in the run report's style; the rows come from ``_audit_report``."""
    environment = Environment(autoescape=True, keep_trailing_newline=True)
    drift = result.get("drift")
    cluster = result.get("cluster_name") or ""
    violations = [
        [rule["rule"], rule["stage"], rule["reason"], finding["message"]]
        for rule in result.get("violations") or []
        for finding in rule["findings"]
        if finding["status"] == "violation"
    ]
    return environment.from_string(AUDIT_TEMPLATE).render(
        csp=CONTENT_SECURITY_POLICY,
        style=STYLE,
        title=f"GPU cluster audit: {cluster}" if cluster else "GPU cluster audit",
        checked_at=result.get("checked_at") or "",
        matrix=result.get("matrix_source"),
        rules_status=result["rules"]["status"],
        violation_count=result["rules"]["counts"]["violation"],
        violations=violations,
        warnings=list(warnings),
        drift=drift is not None,
        drift_nodes=(drift or {}).get("nodes_with_drift") or [],
        nodes_total=(drift or {}).get("nodes_total") or 0,
        plan_to=result["plan"]["to"],
        plan_steps=result["plan"]["steps"],
        components=list(components),
        cluster_rows=(drift or {}).get("cluster") or [],
        drifted=[list(row) for row in drifted],
    )


FLEET_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{ csp | safe }}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
<style>{{ style }}</style>
</head>
<body>
<h1>{{ title }}</h1>
<p class="muted">
Generated {{ generated_at }} by {{ actor }} from {{ slices }} job slice(s) · {{ counts }}
</p>
<div class="outcome {{ 'failed' if failed else 'success' }}" id="outcome"><p><strong>{{ verdict }}</strong></p>
<p class="next" id="next">Next: {{ next }}</p></div>
<h2>Clusters</h2>
<table id="clusters"><tr><th>cluster</th><th>outcome</th><th>versions</th><th>drift</th><th>message</th>
<th>reports</th></tr>
{% for row in rows %}<tr>
<td>{{ row.cluster }}</td><td class="{{ 'fail' if row.failed else 'pass' }}">{{ row.outcome }}</td>
<td>{{ row.versions }}</td><td>{{ row.drift }}</td><td>{{ row.message }}</td>
<td>{% for path in row.files %}{{ path }}{% if not loop.last %}<br>{% endif %}{% endfor %}</td></tr>{% endfor %}
</table>
<p class="muted" id="clock">Each cluster's times are its own API server's (Date header); the generation time is the
controller's.</p>
</body>
</html>
"""


def render_fleet_html(summary: Mapping[str, Any], *, rows: Sequence[Mapping[str, Any]], verdict: str) -> str:
    """The fleet summary as a page in the run report's style; ``rows`` and ``verdict`` come from ``_fleet``."""
    environment = Environment(autoescape=True, keep_trailing_newline=True)
    failed = summary.get("failed_clusters") or []
    counts = ", ".join(f"{outcome} {len(names)}" for outcome, names in (summary.get("by_outcome") or {}).items())
    return environment.from_string(FLEET_TEMPLATE).render(
        csp=CONTENT_SECURITY_POLICY,
        style=STYLE,
        title=f"Fleet {summary.get('run')}: {verdict}",
        generated_at=summary.get("generated_at") or "?",
        actor=summary.get("actor") or "unknown",
        slices=summary.get("slices") or 1,
        counts=counts or "no clusters",
        failed=bool(failed),
        verdict=verdict,
        next=(
            f"Open the reports of {', '.join(failed)} (their Next says what to do); the other clusters are done."
            if failed
            else "Nothing: every cluster passed."
        ),
        rows=list(rows),
    )
