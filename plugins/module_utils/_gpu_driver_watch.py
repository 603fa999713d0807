# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Reading a driver rollout off the cluster: per-node progress, timeline, halt decision (collection-internal, pure).

The GPU Operator's upgrade controller does the node work; this module only
reads what it leaves behind:

- the node label ``nvidia.com/gpu-driver-upgrade-state`` (its state machine),
- the node's driver pod (image tag = driver version, readiness, restarts),
- the controller's ``GPUDriverUpgrade`` Events ("Successfully updated node
  state label to <state>", with the cluster's timestamps).

A node is *done* only when its state is ``upgrade-done`` and its driver pod
runs the target driver and is Ready: right after the target changes every
node still says ``upgrade-done`` with the old pod, and must not count.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_scope import (
    DRIVER_OWNER_LABEL,
    HOLD_ANNOTATION,
    SKIP_LABEL,
    STATE_LABEL,
    annotations_of,
    labels_of,
    name_of,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_spec import driver_version_of_image
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_budget import node_ready_status
from ansible_collections.gpufleet.upgrade.plugins.module_utils._skip_label import (
    PROGRESS_DONE,
    PROGRESS_FAILED,
    PROGRESS_IN_PROGRESS,
    PROGRESS_PENDING,
    STATE_DONE,
    STATE_FAILED,
    hold_not_started,
    progress_of,
    state_rank,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import iso, parse_time

DRIVER_COMPONENT_SELECTOR = "app.kubernetes.io/component=nvidia-driver"
DRIVER_CONTAINER = "nvidia-driver-ctr"
GPU_RESOURCE = "nvidia.com/gpu"
UPGRADE_EVENT_REASON = "GPUDriverUpgrade"
# k8s-operator-libs isDriverPodFailing: a container not Ready that restarted more than this many times.
DRIVER_RESTART_LIMIT = 10

_STATE_MESSAGE = re.compile(r"node state label to \[?([a-z-]*)\]?\s*$")


# -- views of nodes and driver pods ----------------------------------------------------------------


@dataclass(frozen=True)
class DriverPodView:
    namespace: str
    name: str
    version: str
    ready: bool
    phase: str
    restart_count: int
    failing: bool
    waiting_reason: str = ""
    last_message: str = ""
    daemonset: str = ""
    terminating: bool = False

    def describe(self) -> str:
        parts = [f"driver pod {self.namespace}/{self.name} (driver {self.version or 'unknown'})"]
        state = self.waiting_reason or self.phase
        parts.append(f"is {state}" + (f" after {self.restart_count} restarts" if self.restart_count else ""))
        text = " ".join(parts)
        return f"{text}: {self.last_message}" if self.last_message else text


@dataclass(frozen=True)
class NodeView:
    name: str
    state: str
    skipped: bool
    hold: str  # this collection's hold reason ("" when it set none)
    unschedulable: bool
    ready: bool
    gpus: int  # allocatable nvidia.com/gpu
    owner: str  # NVIDIADriver owning the node ("" without NVIDIADriver)
    pod: Optional[DriverPodView]

    @property
    def unavailable(self) -> bool:
        return self.unschedulable or not self.ready


def driver_pod_view(pod: Mapping[str, Any]) -> DriverPodView:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    image = ""
    for container in spec.get("containers") or []:
        if container.get("name") == DRIVER_CONTAINER:
            image = str(container.get("image") or "")
    if not image and spec.get("containers"):
        image = str(spec["containers"][0].get("image") or "")
    statuses = list(status.get("initContainerStatuses") or []) + list(status.get("containerStatuses") or [])
    main = list(status.get("containerStatuses") or [])
    ready = status.get("phase") == "Running" and bool(main) and all(s.get("ready") for s in main)
    failing = any(not s.get("ready") and int(s.get("restartCount") or 0) > DRIVER_RESTART_LIMIT for s in statuses)
    restart_count = max([int(s.get("restartCount") or 0) for s in statuses] or [0])
    waiting_reason, last_message = "", ""
    # The container that restarted most tells why; an init container that exited 0 tells nothing.
    for item in sorted(statuses, key=lambda s: (bool(s.get("ready")), -int(s.get("restartCount") or 0))):
        waiting = (item.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") and not waiting_reason:
            waiting_reason = str(waiting["reason"])
        terminated = (item.get("lastState") or {}).get("terminated") or (item.get("state") or {}).get("terminated")
        if terminated and int(terminated.get("exitCode") or 0) != 0 and not last_message:
            last_message = str(terminated.get("message") or terminated.get("reason") or "")
    owner = next((ref for ref in meta.get("ownerReferences") or [] if ref.get("controller")), None)
    return DriverPodView(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        version=driver_version_of_image(image),
        ready=ready,
        phase=str(status.get("phase") or "Pending"),
        restart_count=restart_count,
        failing=failing,
        waiting_reason=waiting_reason,
        last_message=last_message,
        daemonset=str(owner.get("name")) if owner and owner.get("kind") == "DaemonSet" else "",
        terminating=bool(meta.get("deletionTimestamp")),
    )


def driver_pods_by_node(pods: Iterable[Mapping[str, Any]]) -> Dict[str, DriverPodView]:
    """Each node's driver pod; a live pod wins over one that is terminating (the DaemonSet's replacement)."""
    chosen: Dict[str, DriverPodView] = {}
    for pod in pods:
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if not node:
            continue
        view = driver_pod_view(pod)
        current = chosen.get(node)
        if current is None or (current.terminating and not view.terminating):
            chosen[node] = view
    return chosen


def gpu_quantity(value: Any) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def node_views(nodes: Iterable[Mapping[str, Any]], driver_pods: Iterable[Mapping[str, Any]]) -> Dict[str, NodeView]:
    pods = driver_pods_by_node(driver_pods)
    views: Dict[str, NodeView] = {}
    for node in nodes:
        name = name_of(node)
        labels = labels_of(node)
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        views[name] = NodeView(
            name=name,
            state=str(labels.get(STATE_LABEL, "")),
            skipped=labels.get(SKIP_LABEL) == "true",
            hold=str(annotations_of(node).get(HOLD_ANNOTATION, "")),
            unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
            # As the upgrade controller: only a Ready condition that is not True makes a node NotReady.
            ready=node_ready_status(node) in ("True", ""),
            gpus=gpu_quantity(allocatable.get(GPU_RESOURCE)),
            owner=str(labels.get(DRIVER_OWNER_LABEL, "")),
            pod=pods.get(name),
        )
    return views


# -- progress ----------------------------------------------------------------------------------------


def node_progress(view: NodeView, *, target_version: str) -> str:
    """done, failed, in-progress or pending (not started) for a node that should run ``target_version``."""
    pod = view.pod
    runs_target = pod is not None and not pod.terminating and pod.version == target_version
    return progress_of(
        view.state,
        at_target=runs_target and pod is not None and pod.ready,
        failing=runs_target and pod is not None and pod.failing,
    )


@dataclass(frozen=True)
class Progress:
    done: Tuple[str, ...]
    failed: Tuple[str, ...]
    in_progress: Tuple[str, ...]
    pending: Tuple[str, ...]
    states: Dict[str, str]

    @property
    def complete(self) -> bool:
        return not (self.failed or self.in_progress or self.pending)

    def by_node(self) -> Dict[str, str]:
        """Each target's progress (PROGRESS_*)."""
        buckets = (
            (PROGRESS_DONE, self.done),
            (PROGRESS_FAILED, self.failed),
            (PROGRESS_IN_PROGRESS, self.in_progress),
            (PROGRESS_PENDING, self.pending),
        )
        return {name: where for where, names in buckets for name in names}

    def as_dict(self) -> Dict[str, Any]:
        counts: Dict[str, int] = {}
        for state in self.states.values():
            counts[state or "unknown"] = counts.get(state or "unknown", 0) + 1
        return {
            "done": list(self.done),
            "failed": list(self.failed),
            "in_progress": list(self.in_progress),
            "pending": list(self.pending),
            "states": dict(sorted(counts.items())),
        }


def rollout_progress(views: Mapping[str, NodeView], *, targets: Sequence[str], target_version: str) -> Progress:
    buckets: Dict[str, List[str]] = {
        PROGRESS_DONE: [],
        PROGRESS_FAILED: [],
        PROGRESS_IN_PROGRESS: [],
        PROGRESS_PENDING: [],
    }
    states: Dict[str, str] = {}
    for name in targets:
        view = views.get(name)
        if view is None:
            # A node that vanished (deleted, or its driver pod is gone) cannot be done.
            buckets[PROGRESS_PENDING].append(name)
            continue
        states[name] = view.state
        buckets[node_progress(view, target_version=target_version)].append(name)
    return Progress(
        done=tuple(sorted(buckets[PROGRESS_DONE])),
        failed=tuple(sorted(buckets[PROGRESS_FAILED])),
        in_progress=tuple(sorted(buckets[PROGRESS_IN_PROGRESS])),
        pending=tuple(sorted(buckets[PROGRESS_PENDING])),
        states=states,
    )


def rollout_settled(progress: Progress) -> bool:
    """The wait ends when every target is done or any target failed (halt at the first failure)."""
    return progress.complete or bool(progress.failed)


@dataclass(frozen=True)
class HaltDecision:
    failed: Tuple[str, ...]
    hold: Tuple[str, ...]  # not started yet: they get the skip label
    in_progress: Tuple[str, ...]  # already under way: the controller finishes them


def halt_decision(
    views: Mapping[str, NodeView], *, managed: Iterable[str], failed: Sequence[str], target_version: str
) -> HaltDecision:
    """Which nodes to hold so the controller starts no other node; the failed ones stay as they are."""
    progress = {
        name: node_progress(views[name], target_version=target_version)
        for name in sorted(managed)
        if name in views and name not in failed
    }
    hold = hold_not_started(progress, held=[name for name in progress if views[name].skipped])
    running = [name for name, where in progress.items() if where == PROGRESS_IN_PROGRESS]
    return HaltDecision(failed=tuple(sorted(failed)), hold=tuple(hold), in_progress=tuple(running))


# -- pools of NVIDIADriver --------------------------------------------------------------------------


def pool_settled(
    views: Mapping[str, NodeView],
    *,
    nodes: Sequence[str],
    driver_name: str,
    daemonset_owners: Mapping[str, str],
    member: bool,
) -> bool:
    """Every node's live driver pod is Ready and comes from a DaemonSet of ``driver_name`` (``member``)
    or of another NVIDIADriver (not ``member``); ``daemonset_owners`` maps DaemonSet -> owning NVIDIADriver."""
    for name in nodes:
        view = views.get(name)
        if view is None or view.pod is None or view.pod.terminating or not view.pod.ready:
            return False
        owned = daemonset_owners.get(view.pod.daemonset, "") == driver_name and view.owner == driver_name
        if owned != member:
            return False
    return True


# -- timeline ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StateEvent:
    node: str
    state: str
    at: datetime.datetime


def state_events(events: Iterable[Mapping[str, Any]]) -> List[StateEvent]:
    """The controller's "state label to <state>" Events, each at its latest occurrence.

    Identical Events are aggregated (count, lastTimestamp) by client-go's
    correlator, so a repeated state shows only its latest entry; that is
    the one the current cycle needs.
    """
    found: List[StateEvent] = []
    for event in events:
        if event.get("reason") != UPGRADE_EVENT_REASON:
            continue
        involved = event.get("involvedObject") or {}
        if involved.get("kind") not in (None, "Node"):
            continue
        match = _STATE_MESSAGE.search(str(event.get("message") or ""))
        if match is None:
            continue
        moment = event_time(event)
        if moment is None:
            continue
        found.append(StateEvent(node=str(involved.get("name") or ""), state=match.group(1), at=moment))
    return found


def event_time(event: Mapping[str, Any]) -> Optional[datetime.datetime]:
    series = event.get("series") or {}
    for value in (
        event.get("lastTimestamp"),
        series.get("lastObservedTime"),
        event.get("eventTime"),
        event.get("firstTimestamp"),
        (event.get("metadata") or {}).get("creationTimestamp"),
    ):
        moment = parse_time(value)
        if moment is not None:
            return moment
    return None


def latest_cycle(entries: Sequence[StateEvent]) -> List[StateEvent]:
    """A node's state changes from its latest entry into upgrade-required on, in order.

    Ties within a second are ordered by the state machine (a reconcile moves
    a node one state at a time, several within a second at speed).
    """
    ordered = sorted(entries, key=lambda entry: (entry.at, state_rank(entry.state)))
    starts = [index for index, entry in enumerate(ordered) if entry.state == "upgrade-required"]
    return ordered[starts[-1] :] if starts else ordered


@dataclass
class Tracker:
    """What the module saw while it waited: each node's state changes and GPU capacity over time."""

    # node -> [(state, driver version, observed_at)], one entry per change of either
    observed: Dict[str, List[Tuple[str, str, str]]] = field(default_factory=dict)
    capacity: List[Dict[str, Any]] = field(default_factory=list)

    def observe(self, views: Mapping[str, NodeView], *, nodes: Sequence[str], at: str, elapsed: float) -> bool:
        """Record one look; True when a node's state or driver changed since the last one."""
        changed = False
        for name in nodes:
            view = views.get(name)
            if view is None:
                continue
            version = view.pod.version if view.pod is not None and not view.pod.terminating else ""
            history = self.observed.setdefault(name, [])
            # A node resting in upgrade-done shows a new cycle only by its driver version.
            if not history or history[-1][:2] != (view.state, version):
                history.append((view.state, version, at))
                changed = True
        allocatable = sum(view.gpus for view in views.values())
        unavailable = sorted(name for name, view in views.items() if view.unavailable)
        last = self.capacity[-1] if self.capacity else None
        if last is None or last["allocatable_gpus"] != allocatable or last["unavailable_nodes"] != unavailable:
            self.capacity.append(
                {
                    "at": at,
                    "elapsed": round(elapsed, 3),
                    "allocatable_gpus": allocatable,
                    "unavailable_nodes": unavailable,
                }
            )
        return changed

    def close(self, *, at: str, elapsed: float) -> None:
        """Repeat the last capacity sample at the end, so the series spans the whole wait."""
        if self.capacity and self.capacity[-1]["at"] != at:
            last = dict(self.capacity[-1])
            last.update(at=at, elapsed=round(elapsed, 3))
            self.capacity.append(last)


@dataclass
class EventLog:
    """The controller's Events collected over a long wait.

    The API server keeps Events for an hour (``--event-ttl``), so a rollout of
    hours must collect them as it goes; an aggregated Event keeps its latest
    occurrence.
    """

    by_key: Dict[str, Dict[str, Any]] = field(default_factory=dict)

    def add(self, events: Iterable[Mapping[str, Any]]) -> None:
        for event in events:
            meta = event.get("metadata") or {}
            key = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
            known = self.by_key.get(key)
            if known is None or (event_time(event) or _EPOCH) >= (event_time(known) or _EPOCH):
                self.by_key[key] = dict(event)

    @property
    def events(self) -> List[Dict[str, Any]]:
        return list(self.by_key.values())


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def build_timeline(
    *,
    nodes: Sequence[str],
    events: Iterable[Mapping[str, Any]],
    observed: Mapping[str, Sequence[Tuple[str, str, str]]],
) -> Dict[str, List[Dict[str, Any]]]:
    """Per node: each state of its latest upgrade cycle and when it was entered.

    ``entered_at`` is the cluster's time, from the controller's Event;
    ``observed_at`` is when this module first saw the state (its own clock).
    A state only one of the two knows keeps the other null: Events may be
    rate-limited or expired, and a poll can miss a state that lasted a moment.
    """
    by_node: Dict[str, List[StateEvent]] = {}
    wanted = set(nodes)
    for entry in state_events(events):
        if entry.node in wanted:
            by_node.setdefault(entry.node, []).append(entry)
    timeline: Dict[str, List[Dict[str, Any]]] = {}
    for name in sorted(wanted):
        cycle = latest_cycle(by_node.get(name, []))
        rows: List[Dict[str, Any]] = [{"state": e.state, "entered_at": iso(e.at), "observed_at": None} for e in cycle]
        seen = [(state, seen_at) for state, _version, seen_at in observed.get(name, [])]
        if len(seen) > 1 and seen[0][0] in ("", STATE_DONE):
            # The first look found the node resting from its previous cycle.
            seen = seen[1:]
        # Consecutive looks at one state (the driver changed under it) are one entry.
        seen = [entry for index, entry in enumerate(seen) if index == 0 or seen[index - 1][0] != entry[0]]
        cursor = 0
        for state, seen_at in seen:
            index = next((i for i in range(cursor, len(rows)) if rows[i]["state"] == state), None)
            if index is not None:
                rows[index]["observed_at"] = seen_at
                cursor = index + 1
                continue
            position = next(
                (i for i in range(cursor, len(rows)) if state_rank(rows[i]["state"]) > state_rank(state)), len(rows)
            )
            rows.insert(position, {"state": state, "entered_at": None, "observed_at": seen_at})
            cursor = position + 1
        timeline[name] = rows
    return timeline


# -- failures ----------------------------------------------------------------------------------------


def failure_reason(
    view: Optional[NodeView], *, node_events: Sequence[Mapping[str, Any]], timeline: Sequence[Mapping[str, Any]]
) -> str:
    """Why a node failed, from what the cluster says: Warning Events, the driver pod, the last state."""
    reasons: List[str] = []
    warnings = sorted(
        (e for e in node_events if e.get("type") == "Warning" and e.get("reason") == UPGRADE_EVENT_REASON),
        key=lambda e: event_time(e) or datetime.datetime.min.replace(tzinfo=datetime.timezone.utc),
    )
    if warnings:
        reasons.append(f"upgrade controller: {warnings[-1].get('message')}")
    if view is not None and view.pod is not None and (view.pod.failing or not view.pod.ready):
        reasons.append(view.pod.describe())
    states = [str(row.get("state")) for row in timeline]
    # The state the node failed in is the one before its (last) entry into upgrade-failed; it may have
    # healed since (the controller moves a failed node on once its driver pod is in sync and Ready).
    failed_at = max((index for index, state in enumerate(states) if state == STATE_FAILED), default=len(states))
    before = [state for state in states[:failed_at] if state != STATE_FAILED]
    if before and not reasons:
        last = before[-1]
        if last == "validation-required":
            reasons.append("validation pods were not Ready within the controller's 600 s validation timeout")
        elif last in ("pod-deletion-required", "drain-required"):
            reasons.append(f"the controller could not empty the node in {last}")
        else:
            reasons.append(f"it failed in {last}")
    if view is not None and view.pod is None:
        reasons.append("no driver pod runs on the node")
    return "; ".join(reasons) or "the upgrade controller marked it upgrade-failed"


def allocatable_gpus(views: Mapping[str, NodeView]) -> int:
    return sum(view.gpus for view in views.values())
