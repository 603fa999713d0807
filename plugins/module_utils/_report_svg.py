# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The report's two charts as inline SVG (collection-internal, pure).

A per-node Gantt timeline (one lane per node, one bar per state or step) and
the capacity curve (allocatable GPUs and nodes unavailable over time, the
budget's floor as a line, a halt marked). Plain data in, one ``<svg>`` string
out: no plotting library, no script, no external reference, so the HTML report
stays one file a browser shows offline. Times are seconds from the start of
the chart. Every text is escaped.

Elements carry classes the browser test counts: ``g.lane`` per node,
``rect.bar`` per state, ``circle.sample`` per capacity sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape
from typing import List, Optional, Sequence, Tuple

# Status of a bar to its fill: done green, in progress blue, waiting grey, failed red.
STATUS_COLOURS = {
    "done": "#2e7d32",
    "running": "#1565c0",
    "waiting": "#9e9e9e",
    "failed": "#c62828",
    "skipped": "#e0e0e0",
}
WIDTH = 960
LABEL_WIDTH = 240
LANE_HEIGHT = 22
AXIS_HEIGHT = 26
CAPACITY_HEIGHT = 220


@dataclass(frozen=True)
class Bar:
    """One state or step of a node, from ``start`` to ``end`` seconds."""

    label: str
    start: float
    end: float
    status: str = "done"
    note: str = ""


@dataclass(frozen=True)
class Lane:
    """One node's row of the timeline."""

    name: str
    bars: Tuple[Bar, ...] = ()
    outcome: str = ""


@dataclass(frozen=True)
class Sample:
    """One look at the capacity, ``at`` seconds from the start."""

    at: float
    allocatable_gpus: Optional[int]
    nodes_unavailable: int


@dataclass(frozen=True)
class Axis:
    """The time axis: its length in seconds and the labels of its two ends."""

    span: float
    start_label: str = ""
    end_label: str = ""
    halt_at: Optional[float] = None
    ticks: Tuple[Tuple[float, str], ...] = field(default=())


def _x(seconds: float, axis: Axis) -> float:
    span = axis.span if axis.span > 0 else 1.0
    fraction = min(max(seconds / span, 0.0), 1.0)
    return round(LABEL_WIDTH + fraction * (WIDTH - LABEL_WIDTH - 10), 1)


def _text(value: object) -> str:
    return escape(str(value), quote=True)


def _axis(axis: Axis, *, top: float, bottom: float) -> List[str]:
    parts = [
        f'<line class="axis" x1="{LABEL_WIDTH}" y1="{bottom}" x2="{WIDTH - 10}" y2="{bottom}" stroke="#555"/>',
        f'<text x="{LABEL_WIDTH}" y="{bottom + 16}" font-size="11">{_text(axis.start_label)}</text>',
        f'<text x="{WIDTH - 10}" y="{bottom + 16}" font-size="11" text-anchor="end">{_text(axis.end_label)}</text>',
    ]
    for seconds, label in axis.ticks:
        x = _x(seconds, axis)
        parts.append(f'<line x1="{x}" y1="{top}" x2="{x}" y2="{bottom}" stroke="#eee"/>')
        parts.append(f'<text x="{x}" y="{bottom + 16}" font-size="10" text-anchor="middle">{_text(label)}</text>')
    if axis.halt_at is not None:
        x = _x(axis.halt_at, axis)
        parts.append(
            f'<line class="halt" x1="{x}" y1="{top}" x2="{x}" y2="{bottom}" stroke="#c62828" stroke-width="2" '
            'stroke-dasharray="6 3"/>'
        )
        # Written on the side of the line that has room.
        anchor, shift = ("end", -3) if x > WIDTH - 60 else ("start", 3)
        parts.append(
            f'<text x="{x + shift}" y="{top + 10}" font-size="11" fill="#c62828" text-anchor="{anchor}">halted</text>'
        )
    return parts


def gantt_svg(lanes: Sequence[Lane], *, axis: Axis, title: str = "Node timeline") -> str:
    """One lane per node, its states as bars on the shared time axis."""
    height = len(lanes) * LANE_HEIGHT + AXIS_HEIGHT + 8
    bottom = len(lanes) * LANE_HEIGHT + 4
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="gantt" role="img" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" aria-label="{_text(title)}">',
        f"<title>{_text(title)}</title>",
    ]
    parts += _axis(axis, top=0, bottom=bottom)
    for index, lane in enumerate(lanes):
        top = index * LANE_HEIGHT + 4
        parts.append(f'<g class="lane" data-node="{_text(lane.name)}" data-outcome="{_text(lane.outcome)}">')
        parts.append(
            f'<text x="4" y="{top + 14}" font-size="11">{_text(lane.name)}'
            + (f" ({_text(lane.outcome)})" if lane.outcome else "")
            + "</text>"
        )
        for lane_bar in lane.bars:
            x1, x2 = _x(lane_bar.start, axis), _x(lane_bar.end, axis)
            width = max(x2 - x1, 2.0)
            colour = STATUS_COLOURS.get(lane_bar.status, STATUS_COLOURS["done"])
            tip = f"{lane_bar.label} ({lane_bar.status})" + (f": {lane_bar.note}" if lane_bar.note else "")
            parts.append(
                f'<rect class="bar" x="{x1}" y="{top + 2}" width="{round(width, 1)}" height="{LANE_HEIGHT - 6}" '
                f'fill="{colour}" stroke="#fff" stroke-width="0.5"><title>{_text(tip)}</title></rect>'
            )
            if width > 7 * len(lane_bar.label):
                parts.append(
                    f'<text x="{x1 + 3}" y="{top + 14}" font-size="10" fill="#fff">{_text(lane_bar.label)}</text>'
                )
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)


def _y(value: float, *, top: float, bottom: float, highest: float) -> float:
    highest = highest if highest > 0 else 1.0
    return round(bottom - min(max(value / highest, 0.0), 1.0) * (bottom - top), 1)


def capacity_svg(
    samples: Sequence[Sample], *, axis: Axis, floor_gpus: Optional[float] = None, max_unavailable: Optional[int] = None
) -> str:
    """Allocatable GPUs (left scale, line with one dot per sample) and nodes unavailable (right scale, steps).

    ``floor_gpus`` is the lowest allocatable GPU count the budget allows (a dashed line); ``max_unavailable``
    the budget's node count (a dotted line on the nodes' scale).
    """
    top, bottom = 12.0, CAPACITY_HEIGHT - AXIS_HEIGHT
    gpus = [s.allocatable_gpus for s in samples if s.allocatable_gpus is not None]
    highest_gpus = max(gpus + ([floor_gpus] if floor_gpus is not None else []) + [1])
    highest_nodes = max([s.nodes_unavailable for s in samples] + [max_unavailable or 0, 1])
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="capacity" role="img" width="{WIDTH}" '
        f'height="{CAPACITY_HEIGHT}" viewBox="0 0 {WIDTH} {CAPACITY_HEIGHT}" aria-label="Capacity over time">',
        "<title>Capacity over time</title>",
        f'<text x="4" y="{top + 26}" font-size="11" fill="#ef6c00">nodes down (0-{_text(highest_nodes)})</text>',
    ]
    if gpus:
        parts.append(f'<text x="4" y="{top + 10}" font-size="11" fill="#1565c0">GPUs (0-{_text(highest_gpus)})</text>')
    parts += _axis(axis, top=top, bottom=bottom)
    if floor_gpus is not None:
        y = _y(floor_gpus, top=top, bottom=bottom, highest=highest_gpus)
        parts.append(
            f'<line class="floor" x1="{LABEL_WIDTH}" y1="{y}" x2="{WIDTH - 10}" y2="{y}" stroke="#1565c0" '
            'stroke-dasharray="8 4"/>'
        )
        parts.append(
            f'<text x="{WIDTH - 12}" y="{y - 3}" font-size="10" text-anchor="end" fill="#1565c0">'
            f"budget floor {_text(floor_gpus)} GPUs</text>"
        )
    if max_unavailable is not None:
        y = _y(max_unavailable, top=top, bottom=bottom, highest=highest_nodes)
        parts.append(
            f'<line class="budget" x1="{LABEL_WIDTH}" y1="{y}" x2="{WIDTH - 10}" y2="{y}" stroke="#ef6c00" '
            'stroke-dasharray="2 3"/>'
        )
        parts.append(
            f'<text x="{LABEL_WIDTH + 2}" y="{y - 3}" font-size="10" fill="#ef6c00">'
            f"budget: {_text(max_unavailable)} node(s) down at most</text>"
        )
    ordered = sorted(samples, key=lambda sample: sample.at)
    steps: List[str] = []
    for index, sample in enumerate(ordered):
        x = _x(sample.at, axis)
        y = _y(sample.nodes_unavailable, top=top, bottom=bottom, highest=highest_nodes)
        if index:
            steps.append(
                f"{x},{_y(ordered[index - 1].nodes_unavailable, top=top, bottom=bottom, highest=highest_nodes)}"
            )
        steps.append(f"{x},{y}")
    if steps:
        parts.append(f'<polyline class="unavailable" fill="none" stroke="#ef6c00" points="{" ".join(steps)}"/>')
    line = [
        f"{_x(s.at, axis)},{_y(s.allocatable_gpus, top=top, bottom=bottom, highest=highest_gpus)}"
        for s in ordered
        if s.allocatable_gpus is not None
    ]
    if line:
        parts.append(f'<polyline class="gpus" fill="none" stroke="#1565c0" points="{" ".join(line)}"/>')
    for sample in ordered:
        value = sample.allocatable_gpus if sample.allocatable_gpus is not None else sample.nodes_unavailable
        highest = highest_gpus if sample.allocatable_gpus is not None else highest_nodes
        tip = (
            f"{sample.allocatable_gpus} allocatable GPUs, " if sample.allocatable_gpus is not None else ""
        ) + f"{sample.nodes_unavailable} node(s) unavailable"
        y = _y(value, top=top, bottom=bottom, highest=highest)
        parts.append(
            f'<circle class="sample" cx="{_x(sample.at, axis)}" cy="{y}" r="3" fill="#1565c0">'
            f"<title>{_text(tip)}</title></circle>"
        )
    parts.append("</svg>")
    return "".join(parts)
