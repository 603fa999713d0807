"""The control plane's side of node health: the node lifecycle controller.

- A node whose kubelet stopped (machine rebooting or dead) has its
  conditions set to ``Unknown`` ("Kubelet stopped posting node status.")
  after ``node_monitor_grace`` simulated seconds (kube-controller-manager's
  ``--node-monitor-grace-period``, 40 s).  The twin has no Leases, so the
  kubelet's liveness is read from ``NodeHealth`` instead of a Lease renewal.
Only nodes with a ``NodeHealth`` are managed (see the kubelet).

- Taints follow conditions (TaintNodesByCondition and taint-based
  eviction): ``node.kubernetes.io/unschedulable:NoSchedule`` while
  ``spec.unschedulable``, ``not-ready`` for Ready=False and ``unreachable``
  for Ready=Unknown, each with NoSchedule and NoExecute.
- While a node is not Ready its pods' Ready condition is set to False
  (``MarkPodsNotReady``).

Evicting the pods of a NoExecute-tainted node is the taint-eviction
controller's (``kube/tainteviction.py``), for these taints as for any other.
Deleting a pod on an unreachable node leaves it Terminating until the node
returns (its kubelet finishes the deletion), as in a real cluster; its
controller replaces it elsewhere meanwhile.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ..machinery import errors
from ..machinery.clock import SimClock
from ..machinery.kinds import Kinds
from ..machinery.store import Store, WatchEvent
from ..machinery.wake import DueTimes, Pacer, Waker
from . import podutil
from .events import EventRecorder
from .index import ClusterIndex
from .state import SimState

log = logging.getLogger(__name__)

Obj = dict[str, Any]

NODE_CONTROLLER = "node-controller"
MANAGED_TAINT_KEYS = frozenset({podutil.UNSCHEDULABLE_TAINT, podutil.NOT_READY_TAINT, podutil.UNREACHABLE_TAINT})


@dataclass(frozen=True)
class LifecycleTimings:
    node_monitor_grace: float = 40.0


class NodeLifecycleController:
    name = "node-lifecycle"

    def __init__(
        self,
        *,
        sim: SimState,
        kinds: Kinds,
        index: ClusterIndex,
        events: EventRecorder,
        timings: LifecycleTimings | None = None,
    ) -> None:
        self._sim = sim
        self._kinds = kinds
        self._index = index
        self._events = events
        self._timings = timings or LifecycleTimings()
        self._dirty: set[str] = set()
        self._due = DueTimes()
        self._down_since: dict[str, float] = {}
        self._own_write = False
        self._pace = Pacer()
        self._store: Store | None = None
        self._clock: SimClock | None = None
        self._waker: Waker | None = None
        sim.node_listeners.append(self._on_health_change)

    def attach(self, store: Store, clock: SimClock) -> None:
        self._store = store
        self._clock = clock
        self._waker = Waker(store, clock, resources=(self._kinds.node.key,), on_event=self._on_node_event)
        self._dirty.update(self._sim.nodes)

    async def run(self, twin: Any) -> None:
        self.attach(twin.store, twin.clock)
        assert self._waker is not None
        while True:
            await self.sync_once()
            next_due = self._due.next_due()
            await self._waker.wait(None if next_due is None else max(0.0, next_due - twin.clock.now()))

    async def sync_once(self) -> None:
        clock = self._require_clock()
        now = clock.now()
        self._dirty.update(str(name) for name in self._due.pop_due(now))
        names = sorted(self._dirty)
        self._dirty.clear()
        for name in names:
            self._sync_node(name, now)
            await self._pace()

    def _on_health_change(self, node_name: str) -> None:
        self._dirty.add(node_name)
        if self._waker is not None:
            self._waker.poke()

    def _on_node_event(self, event: WatchEvent) -> bool:
        if self._own_write or event.type == "DELETED" or event.obj["metadata"]["name"] not in self._sim.nodes:
            return False
        old = event.old or {}
        new = event.obj
        changed = (
            bool((old.get("spec") or {}).get("unschedulable")) != bool((new.get("spec") or {}).get("unschedulable"))
            or _ready_status(old) != _ready_status(new)
            or (old.get("spec") or {}).get("taints") != (new.get("spec") or {}).get("taints")
            or event.type == "ADDED"
        )
        if changed:
            self._dirty.add(new["metadata"]["name"])
        return changed

    # -- per node -------------------------------------------------------------------------------------
    def _sync_node(self, name: str, now: float) -> None:
        store = self._require_store()
        node = store.try_get(self._kinds.node, None, name)
        health = self._sim.nodes.get(name)
        if node is None or health is None:
            # Only nodes the simulation runs are managed: a Node created through the
            # API without a NodeHealth has no kubelet, and is left as it was written.
            self._down_since.pop(name, None)
            return
        if not health.kubelet_running:
            since = self._down_since.setdefault(name, now)
            deadline = since + self._timings.node_monitor_grace
            if now >= deadline:
                if _ready_status(node) != "Unknown":
                    node = self._mark_unknown(node, now)
            else:
                self._due.schedule(name, deadline)
        else:
            self._down_since.pop(name, None)
        node = self._sync_taints(node, now)
        if _ready_status(node) != "True":
            self._mark_pods_not_ready(node, now)

    def _mark_unknown(self, node: Obj, now: float) -> Obj:
        stamp = self._iso(now)
        name = node["metadata"]["name"]

        def unknown(obj: Obj) -> None:
            for cond in (obj.get("status") or {}).get("conditions") or ():
                if cond.get("type") in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure"):
                    if cond.get("status") != "Unknown":
                        cond["lastTransitionTime"] = stamp
                    cond["status"] = "Unknown"
                    cond["reason"] = "NodeStatusUnknown"
                    cond["message"] = "Kubelet stopped posting node status."

        updated = self._write(
            lambda: self._require_store().mutate(self._kinds.node, None, name, unknown, subresource="status")
        )
        self._events.record(
            {"kind": "Node", "name": name, "uid": node["metadata"].get("uid", ""), "apiVersion": "v1"},
            reason="NodeNotReady",
            message=f"Node {name} status is now: NodeNotReady",
            component=NODE_CONTROLLER,
        )
        return updated or node

    def _sync_taints(self, node: Obj, now: float) -> Obj:
        name = node["metadata"]["name"]
        ready = _ready_status(node)
        wanted: list[tuple[str, str]] = []
        if (node.get("spec") or {}).get("unschedulable"):
            wanted.append((podutil.UNSCHEDULABLE_TAINT, "NoSchedule"))
        if ready == "False":
            wanted += [(podutil.NOT_READY_TAINT, "NoSchedule"), (podutil.NOT_READY_TAINT, "NoExecute")]
        elif ready in ("Unknown", None):
            wanted += [(podutil.UNREACHABLE_TAINT, "NoSchedule"), (podutil.UNREACHABLE_TAINT, "NoExecute")]
        current = [
            (t.get("key"), t.get("effect")) for t in podutil.node_taints(node) if t.get("key") in MANAGED_TAINT_KEYS
        ]
        if sorted(current) == sorted(wanted):
            return node
        stamp = self._iso(now)

        def retaint(obj: Obj) -> None:
            spec = obj.setdefault("spec", {})
            kept = [t for t in spec.get("taints") or () if t.get("key") not in MANAGED_TAINT_KEYS]
            existing = {(t.get("key"), t.get("effect")): t for t in spec.get("taints") or ()}
            for key, effect in wanted:
                taint = existing.get((key, effect)) or {"key": key, "effect": effect}
                if effect == "NoExecute":
                    taint.setdefault("timeAdded", stamp)
                kept.append(taint)
            if kept:
                spec["taints"] = kept
            else:
                spec.pop("taints", None)

        updated = self._write(lambda: self._require_store().mutate(self._kinds.node, None, name, retaint))
        return updated or node

    def _mark_pods_not_ready(self, node: Obj, now: float) -> None:
        stamp = self._iso(now)
        for pod in self._index.pods_on(node["metadata"]["name"]):
            if not podutil.is_terminal(pod) and podutil.is_pod_ready(pod):
                self._mark_pod_not_ready(pod, stamp)

    def _mark_pod_not_ready(self, pod: Obj, stamp: str) -> None:
        meta = pod["metadata"]

        def not_ready(obj: Obj) -> None:
            for cond in (obj.get("status") or {}).get("conditions") or ():
                if cond.get("type") == "Ready" and cond.get("status") != "False":
                    cond["status"] = "False"
                    cond["lastTransitionTime"] = stamp

        self._write(
            lambda: self._require_store().mutate(
                self._kinds.pod, meta.get("namespace"), meta["name"], not_ready, subresource="status"
            )
        )

    # -- helpers ---------------------------------------------------------------------------------------
    def _write(self, action: Any) -> Obj | None:
        try:
            self._own_write = True
            result: Obj | None = action()
            return result
        except errors.ApiError as exc:
            log.debug("node lifecycle write failed: %s", exc)
            return None
        finally:
            self._own_write = False

    def _require_store(self) -> Store:
        if self._store is None:
            raise RuntimeError("NodeLifecycleController.attach() was not called")
        return self._store

    def _require_clock(self) -> SimClock:
        if self._clock is None:
            raise RuntimeError("NodeLifecycleController.attach() was not called")
        return self._clock

    def _iso(self, moment: float) -> str:
        return self._require_clock().iso(moment)


def _ready_status(node: Obj) -> str | None:
    cond = podutil.condition(node, "Ready")
    return None if cond is None else cond.get("status")
