# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""A stage's metrics, pushed to a Prometheus Pushgateway (collection-internal).

A stage is a batch job: Prometheus cannot scrape it while it runs, so it
pushes its result once, at the end, to a Pushgateway (the convention
Prometheus documents for batch jobs), which Prometheus scrapes. The metrics
come from the ledger entry the run just recorded (pure: ``stage_metrics``);
``push_stage_metrics`` sends them with the ``prometheus_client`` library, a
PUT that replaces the group ``job="gpufleet_upgrade", cluster, stage`` so each
run of a stage replaces the previous run's numbers for that cluster.

Metrics (all gauges; ``METRICS`` names them with their help):

* ``gpufleet_upgrade_nodes{component, state}``: nodes of the run's component
  group per state (``done``, ``failed``, ``in_progress``, ``pending``), from
  the component's timeline;
* ``gpufleet_upgrade_stage_duration_seconds``: from the plan to the record,
  on the cluster's clock;
* ``gpufleet_upgrade_stage_success``: 1 when the stage succeeded (or had
  nothing to do), 0 when it failed or was refused; with
  ``gpufleet_upgrade_stage_info{outcome, group, campaign}`` = 1;
* ``gpufleet_upgrade_budget_headroom_nodes``: the capacity budget
  (``max_unavailable`` as nodes) minus the most nodes seen unavailable at once
  during the run; only when a budget is given;
* ``gpufleet_upgrade_allocatable_gpus_min``: the fewest allocatable GPUs seen;
* ``gpufleet_upgrade_gate_passed{node, gate}``: 1 or 0 per gate verdict, and
  ``gpufleet_upgrade_gate_duration_seconds{node, gate}``;
* ``gpufleet_upgrade_last_run_timestamp_seconds``: when the run was recorded
  (cluster clock), so an alert can say a scheduled bake stopped running.
"""

from __future__ import annotations

import traceback
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError, PushError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_budget import scaled_max_unavailable
from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import parse_time

PROMETHEUS_CLIENT_IMPORT_ERROR: Optional[str]
try:
    from prometheus_client import CollectorRegistry, Gauge
    from prometheus_client.exposition import push_to_gateway

    PROMETHEUS_CLIENT_IMPORT_ERROR = None
except ImportError:  # pragma: no cover - reported by the module with missing_required_lib
    PROMETHEUS_CLIENT_IMPORT_ERROR = traceback.format_exc()

JOB = "gpufleet_upgrade"
PREFIX = "gpufleet_upgrade"
NODE_STATES = ("done", "failed", "in_progress", "pending")
METRICS: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "nodes": ("Nodes of the component group per state at the end of the run", ("component", "state")),
    "stage_duration_seconds": ("Seconds from the plan to the record of the run (cluster clock)", ()),
    "stage_success": ("1 when the stage succeeded or had nothing to do, 0 when it failed or was refused", ()),
    "stage_info": ("The run's outcome, component group and campaign (value 1)", ("outcome", "group", "campaign")),
    "budget_headroom_nodes": ("Capacity budget in nodes minus the most nodes unavailable at once during the run", ()),
    "allocatable_gpus_min": ("Fewest allocatable GPUs seen during the run", ()),
    "gate_passed": ("1 when the validation gate passed on the node, 0 when it failed", ("node", "gate")),
    "gate_duration_seconds": ("Seconds the validation gate took on the node", ("node", "gate")),
    "last_run_timestamp_seconds": ("When the run was recorded, Unix seconds on the cluster's clock", ()),
}
_DONE = {"done", "upgrade-done", "succeeded", "success", "updated", "skipped", "at-target", "released"}
_PENDING = {"", "pending", "not-started", "upgrade-required", "waiting"}


def node_state(last: Mapping[str, Any]) -> str:
    """done, failed, in_progress or pending, from a node's last timeline entry (any component's shape)."""
    text = str(last.get("outcome") or last.get("state") or last.get("step") or "").strip().lower()
    if "fail" in text or "degraded" in text:
        return "failed"
    if text in _DONE or text.endswith("-done"):
        return "done"
    if text in _PENDING:
        return "pending"
    return "in_progress"


def node_states(timeline: Any) -> Dict[str, str]:
    """Each node's state from a component timeline: a mapping node -> [states...] or a list of node entries."""
    found: Dict[str, str] = {}
    if isinstance(timeline, Mapping):
        for node, events in timeline.items():
            history = [
                event for event in (events if isinstance(events, list) else [events]) if isinstance(event, Mapping)
            ]
            if history:
                found[str(node)] = node_state(history[-1])
    elif isinstance(timeline, list):
        for event in timeline:
            if isinstance(event, Mapping) and event.get("node"):
                found[str(event["node"])] = node_state(event)
    return found


def _seconds_between(start: Any, end: Any) -> Optional[float]:
    began, ended = parse_time(start), parse_time(end)
    if began is None or ended is None:
        return None
    return max((ended - began).total_seconds(), 0.0)


def stage_metrics(
    entry: Mapping[str, Any],
    *,
    max_unavailable: Union[int, str, None] = None,
    gpu_nodes: int = 0,
) -> List[Tuple[str, Dict[str, str], float]]:
    """(metric name without prefix, labels, value) for every sample of the run. Pure."""
    samples: List[Tuple[str, Dict[str, str], float]] = []
    group = str(entry.get("group") or "")
    states = node_states(entry.get("nodes"))
    for state in NODE_STATES:
        count = sum(1 for value in states.values() if value == state)
        samples.append(("nodes", {"component": group, "state": state}, float(count)))
    duration = _seconds_between(entry.get("started_at"), entry.get("recorded_at"))
    if duration is not None:
        samples.append(("stage_duration_seconds", {}, duration))
    outcome = str(entry.get("outcome") or "")
    samples.append(("stage_success", {}, 1.0 if outcome in ("success", "unchanged") else 0.0))
    samples.append(
        ("stage_info", {"outcome": outcome, "group": group, "campaign": str(entry.get("campaign") or "")}, 1.0)
    )
    capacity = [point for point in entry.get("capacity") or [] if isinstance(point, Mapping)]
    if max_unavailable not in (None, ""):
        budget = scaled_max_unavailable(max_unavailable, total=gpu_nodes)
        peak = max((len(point.get("unavailable_nodes") or []) for point in capacity), default=0)
        samples.append(("budget_headroom_nodes", {}, float(budget - peak)))
    allocatable = [point["allocatable_gpus"] for point in capacity if isinstance(point.get("allocatable_gpus"), int)]
    if allocatable:
        samples.append(("allocatable_gpus_min", {}, float(min(allocatable))))
    for report in entry.get("gates") or []:
        if not isinstance(report, Mapping):
            continue
        for verdict in report.get("gates") or []:
            if not isinstance(verdict, Mapping):
                continue
            labels = {"node": str(verdict.get("node") or report.get("node") or ""), "gate": str(verdict.get("gate"))}
            samples.append(("gate_passed", labels, 1.0 if verdict.get("passed") else 0.0))
            if isinstance(verdict.get("elapsed"), (int, float)):
                samples.append(("gate_duration_seconds", dict(labels), float(verdict["elapsed"])))
    recorded = parse_time(entry.get("recorded_at"))
    if recorded is not None:
        samples.append(("last_run_timestamp_seconds", {}, recorded.timestamp()))
    return samples


def grouping_key(*, cluster: str, stage: str) -> Dict[str, str]:
    """The Pushgateway group of a run (``job`` is its own argument of the push)."""
    if not cluster or not stage:
        raise InvalidInputError(f"the Pushgateway group needs a cluster and a stage (got {cluster!r}, {stage!r})")
    return {"cluster": cluster, "stage": stage}


def registry_of(samples: List[Tuple[str, Dict[str, str], float]]) -> Any:
    """A ``prometheus_client`` registry holding the samples (gauges named ``gpufleet_upgrade_<name>``)."""
    registry = CollectorRegistry()
    gauges: Dict[str, Any] = {}
    for name, labels, value in samples:
        help_text, label_names = METRICS[name]
        if name not in gauges:
            gauges[name] = Gauge(f"{PREFIX}_{name}", help_text, list(label_names), registry=registry)
        gauge = gauges[name].labels(**labels) if label_names else gauges[name]
        gauge.set(value)
    return registry


def push_stage_metrics(
    url: str,
    *,
    samples: List[Tuple[str, Dict[str, str], float]],
    cluster: str,
    stage: str,
    handler: Callable[..., Callable[[], None]],
    timeout: float = 30.0,
) -> Dict[str, Any]:
    """PUT the samples to the Pushgateway at ``url`` as the group job/cluster/stage (replacing its last push)."""
    key = grouping_key(cluster=cluster, stage=stage)
    try:
        push_to_gateway(url, job=JOB, registry=registry_of(samples), grouping_key=key, timeout=timeout, handler=handler)
    except (OSError, ValueError) as err:
        raise PushError(f"cannot push to the Pushgateway {url}: {err}") from err
    return {"job": JOB, **key}
