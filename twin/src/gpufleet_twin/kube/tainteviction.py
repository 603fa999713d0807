"""kube-controller-manager's taint-eviction controller (upstream ``pkg/controller/tainteviction``).

The one path by which NoExecute taints evict pods: the node lifecycle
controller's ``not-ready``/``unreachable`` taints and any taint someone puts
on a node (``kubectl taint nodes X k=v:NoExecute``) alike.  For every pod
bound to a node with NoExecute taints, as upstream's ``processPodOnNode``:

- a taint that none of the pod's tolerations tolerates: the pod is deleted
  at once;
- all tolerated: the pod is deleted after the smallest ``tolerationSeconds``
  of the tolerations used (the first one tolerating each taint; zero or
  less means now), counted from when the controller first saw the pod
  under those taints; if none of them has ``tolerationSeconds`` the pod
  stays (a DaemonSet pod's tolerations are of that kind);
- the taints removed before the time is up: the deletion is cancelled.

Before deleting, the controller adds the ``DisruptionTarget`` condition
(reason ``DeletionByTaintManager``) to the pod, and records a
``TaintManagerEviction`` Event ("Marking for deletion Pod ns/name"; on a
cancellation "Cancelling deletion Pod ns/name").  Finished pods (Succeeded,
Failed) and pods already terminating are left alone.  A pod without the
not-ready/unreachable tolerations that the DefaultTolerationSeconds admission
plugin adds to every pod (one restored from a snapshot) is treated as if it
had them (300 s).  Evictions of running pods are recorded as disruptions.
"""

from __future__ import annotations

import logging
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
PodKey = tuple[str, str]

COMPONENT = "taint-eviction-controller"
DEFAULT_TOLERATION_SECONDS = 300
_DEFAULTED_TAINTS = (podutil.NOT_READY_TAINT, podutil.UNREACHABLE_TAINT)


def no_execute_taints(node: Obj | None) -> list[Obj]:
    return [t for t in podutil.node_taints(node or {}) if t.get("effect") == "NoExecute"]


def effective_tolerations(pod: Obj) -> list[Obj]:
    """The pod's tolerations, with the DefaultTolerationSeconds ones if admission never added them."""
    tolerations = list((pod.get("spec") or {}).get("tolerations") or ())
    for key in _DEFAULTED_TAINTS:
        if not any(t.get("key") == key and t.get("effect") in (None, "", "NoExecute") for t in tolerations):
            tolerations.append(
                {
                    "key": key,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
                }
            )
    return tolerations


def eviction_delay(taints: list[Obj], tolerations: list[Obj]) -> float | None:
    """Seconds until a pod under ``taints`` is evicted: 0 now, None never (upstream getMinTolerationTime)."""
    used: list[Obj] = []
    for taint in taints:
        match = next((t for t in tolerations if podutil.tolerates(t, taint)), None)
        if match is None:
            return 0.0
        used.append(match)
    if not used:
        return None
    seconds = [int(t["tolerationSeconds"]) for t in used if t.get("tolerationSeconds") is not None]
    if not seconds:
        return None
    return float(max(0, min(seconds)))


class TaintEvictionController:
    name = "taint-eviction-controller"

    def __init__(self, *, sim: SimState, kinds: Kinds, index: ClusterIndex, events: EventRecorder) -> None:
        self._sim = sim
        self._kinds = kinds
        self._index = index
        self._events = events
        self._dirty: set[PodKey] = set()
        self._dirty_nodes: set[str] = set()
        self._due = DueTimes()
        # Pods with a deletion scheduled: key -> (uid, when the controller first saw them tainted).
        self._scheduled: dict[PodKey, tuple[str, float]] = {}
        self._pace = Pacer()
        self._store: Store | None = None
        self._clock: SimClock | None = None
        self._waker: Waker | None = None

    def attach(self, store: Store, clock: SimClock) -> None:
        self._store = store
        self._clock = clock
        keys = (self._kinds.node.key, self._kinds.pod.key)
        self._waker = Waker(store, clock, resources=keys, on_event=self._on_event)
        for node in store.list(self._kinds.node):
            if no_execute_taints(node):
                self._dirty_nodes.add(node["metadata"]["name"])

    def _on_event(self, event: WatchEvent) -> bool:
        if event.rtype.key == self._kinds.node.key:
            if event.type == "DELETED":
                return False
            old_taints = no_execute_taints(event.old) if event.old is not None else []
            new_taints = no_execute_taints(event.obj)
            if old_taints == new_taints:
                return False
            self._dirty_nodes.add(event.obj["metadata"]["name"])
            return True
        key = podutil.key_of(event.obj)
        if event.type == "DELETED":
            self._scheduled.pop(key, None)
            return False
        node_name = (event.obj.get("spec") or {}).get("nodeName")
        old_node = ((event.old or {}).get("spec") or {}).get("nodeName")
        old_tolerations = ((event.old or {}).get("spec") or {}).get("tolerations")
        if not node_name or (
            event.type == "MODIFIED"
            and old_node == node_name
            and old_tolerations == (event.obj.get("spec") or {}).get("tolerations")
        ):
            return False
        if not no_execute_taints(self._index.nodes.get(node_name)) and key not in self._scheduled:
            return False
        self._dirty.add(key)
        return True

    async def run(self, twin: Any) -> None:
        self.attach(twin.store, twin.clock)
        assert self._waker is not None
        while True:
            await self.sync_once()
            next_due = self._due.next_due()
            await self._waker.wait(None if next_due is None else max(0.0, next_due - twin.clock.now()))

    async def sync_once(self) -> None:
        now = self._require_clock().now()
        for key in self._due.pop_due(now):
            self._dirty.add(key)  # type: ignore[arg-type]
        nodes = sorted(self._dirty_nodes)
        self._dirty_nodes.clear()
        for node_name in nodes:
            self._dirty.update(podutil.key_of(pod) for pod in self._index.pods_on(node_name))
            # Pods that were scheduled for eviction on that node and are no longer listed there.
            self._dirty.update(key for key in self._scheduled)
        keys = sorted(self._dirty)
        self._dirty.clear()
        for key in keys:
            self._sync_pod(key, now)
            await self._pace()

    def _sync_pod(self, key: PodKey, now: float) -> None:
        store = self._require_store()
        pod = store.try_get(self._kinds.pod, key[0], key[1])
        if pod is None or podutil.is_terminating(pod) or podutil.is_terminal(pod):
            self._scheduled.pop(key, None)
            return
        node_name = (pod.get("spec") or {}).get("nodeName")
        taints = no_execute_taints(self._index.nodes.get(node_name or "")) if node_name else []
        uid = pod["metadata"].get("uid", "")
        delay = eviction_delay(taints, effective_tolerations(pod)) if taints else None
        scheduled = self._scheduled.get(key)
        if scheduled is not None and scheduled[0] != uid:
            scheduled = None
        if delay is None:
            if scheduled is not None:
                del self._scheduled[key]
                self._event(pod, f"Cancelling deletion of Pod {key[0]}/{key[1]}")
            return
        started = scheduled[1] if scheduled is not None else now
        self._scheduled[key] = (uid, started)
        deadline = started + delay
        if now >= deadline:
            self._evict(pod, node_name or "", taints, now)
        else:
            self._due.schedule(key, deadline)

    def _evict(self, pod: Obj, node_name: str, taints: list[Obj], now: float) -> None:
        store = self._require_store()
        meta = pod["metadata"]
        key = podutil.key_of(pod)
        self._scheduled.pop(key, None)
        stamp = self._require_clock().iso(now)

        def disruption_target(obj: Obj) -> None:
            status = obj.setdefault("status", {})
            conditions = [c for c in status.get("conditions") or () if c.get("type") != "DisruptionTarget"]
            conditions.append(
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": stamp,
                    "reason": "DeletionByTaintManager",
                    "message": "Taint manager: deleting due to NoExecute taint",
                }
            )
            status["conditions"] = conditions

        try:
            store.mutate(self._kinds.pod, key[0], key[1], disruption_target, subresource="status")
            store.delete(self._kinds.pod, key[0], key[1], precondition_uid=meta.get("uid"))
        except errors.ApiError as exc:
            log.debug("taint eviction of %s/%s: %s", key[0], key[1], exc)
            return
        self._event(pod, f"Marking for deletion Pod {key[0]}/{key[1]}")
        if self._sim.recorder is not None and podutil.phase_of(pod) == "Running":
            keys = {t.get("key") for t in taints}
            if podutil.UNREACHABLE_TAINT in keys:
                why = "evicted: node unreachable"
            elif podutil.NOT_READY_TAINT in keys:
                why = "evicted: node not ready"
            else:
                why = f"evicted: NoExecute taint {sorted(str(k) for k in keys)[0]}"
            self._sim.recorder.record_disruption(pod, node=node_name, why=why)

    def _event(self, pod: Obj, message: str) -> None:
        try:
            self._events.record(pod, reason="TaintManagerEviction", message=message, component=COMPONENT)
        except errors.ApiError as exc:
            log.debug("taint eviction event: %s", exc)

    def _require_store(self) -> Store:
        if self._store is None:
            raise RuntimeError("TaintEvictionController.attach() was not called")
        return self._store

    def _require_clock(self) -> SimClock:
        if self._clock is None:
            raise RuntimeError("TaintEvictionController.attach() was not called")
        return self._clock
