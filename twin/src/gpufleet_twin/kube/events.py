"""Recording core/v1 Events the way Kubernetes components do.

Shape and naming follow client-go's event recorder: the Event lives in the
involved object's namespace (``default`` for cluster-scoped objects such as
Nodes), is named ``<object name>.<hex of the creation time in ns>``, carries
``source.component``/``source.host`` and the same ``reportingComponent``, and
an identical event (same object, type, reason, message and source) repeated
later is aggregated into the existing Event: ``count`` grows and
``lastTimestamp`` moves, instead of a new object appearing (client-go's
``EventCorrelator`` dedup).  The correlator's second stage, which merges
*similar* events (same reason, different messages) into "(combined from
similar events)", is not modelled.

Events expire after ``ttl_seconds`` of simulated time (the API server's
``--event-ttl`` defaults to one hour).
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ..machinery import errors
from ..machinery.clock import SimClock
from ..machinery.registry import ResourceType
from ..machinery.store import Store

Obj = dict[str, Any]
_EventKey = tuple[str, ...]


@dataclass
class _Recorded:
    namespace: str
    name: str
    last_seen: float


def reference_to(obj: Obj, *, field_path: str | None = None) -> Obj:
    """An ObjectReference to ``obj`` as event recorders build it."""
    meta = obj.get("metadata") or {}
    ref: Obj = {
        "apiVersion": obj.get("apiVersion", "v1"),
        "kind": obj.get("kind", ""),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
    }
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    if meta.get("resourceVersion"):
        ref["resourceVersion"] = meta["resourceVersion"]
    if field_path:
        ref["fieldPath"] = field_path
    return ref


def kubelet_node_reference(node_name: str) -> Obj:
    """The kubelet refers to its Node by name, with the name as UID (kubelet.go nodeRef)."""
    return {"kind": "Node", "name": node_name, "uid": node_name}


# kube-apiserver's --event-ttl default: one hour.
DEFAULT_EVENT_TTL_SECONDS = 3600.0


class EventRecorder:
    def __init__(
        self,
        store: Store,
        event_type: ResourceType,
        clock: SimClock,
        *,
        ttl_seconds: float = DEFAULT_EVENT_TTL_SECONDS,
        max_events: int = 50_000,
    ) -> None:
        self._store = store
        self._type = event_type
        self._clock = clock
        self._ttl = ttl_seconds
        self._max = max_events
        self._recorded: OrderedDict[_EventKey, _Recorded] = OrderedDict()
        # The nanosecond stamp of the last Event's name: names stay unique when simulated time stands still
        # between two Events (one busy loop turn counts max_step at most, see machinery/clock.py), as client-go's names
        # do with the wall clock's nanoseconds.
        self._last_nanos = 0

    def record(
        self,
        involved: Obj,
        *,
        reason: str,
        message: str,
        component: str,
        event_type: str = "Normal",
        host: str | None = None,
        action: str | None = None,
    ) -> Obj | None:
        """Record an Event about ``involved`` (an object or an ObjectReference); None if it cannot be stored."""
        ref = involved if "metadata" not in involved else reference_to(involved)
        namespace = ref.get("namespace") or "default"
        key: _EventKey = (
            namespace,
            ref.get("kind", ""),
            ref.get("name", ""),
            ref.get("uid", ""),
            ref.get("fieldPath", ""),
            event_type,
            reason,
            message,
            component,
            host or "",
        )
        now = self._clock.now()
        self._expire(now)
        stamp = self._clock.iso(now)
        previous = self._recorded.get(key)
        if previous is not None:
            try:
                updated = self._store.mutate(
                    self._type, previous.namespace, previous.name, lambda ev: _repeat(ev, stamp)
                )
            except errors.ApiError:
                self._recorded.pop(key, None)
            else:
                previous.last_seen = now
                self._recorded.move_to_end(key)
                return updated
        source: Obj = {"component": component}
        if host:
            source["host"] = host
        self._last_nanos = max(int(now * 1e9), self._last_nanos + 1)
        event: Obj = {
            "metadata": {"name": f"{ref.get('name', 'unknown')}.{self._last_nanos:x}", "namespace": namespace},
            "involvedObject": ref,
            "reason": reason,
            "message": message,
            "type": event_type,
            "source": source,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "eventTime": None,
            "reportingComponent": component,
            "reportingInstance": host or "",
        }
        if action:
            event["action"] = action
        try:
            created = self._store.create(self._type, event, namespace=namespace)
        except errors.ApiError as exc:
            if exc.code != 409:
                return None  # namespace missing or terminating: real recorders drop the event too
            # Two events in the same nanosecond: client-go would retry with a new timestamp.
            event["metadata"]["name"] += "1"
            try:
                created = self._store.create(self._type, event, namespace=namespace)
            except errors.ApiError:
                return None
        self._recorded[key] = _Recorded(namespace, created["metadata"]["name"], now)
        return created

    def _expire(self, now: float) -> None:
        while self._recorded:
            key, oldest = next(iter(self._recorded.items()))
            if oldest.last_seen >= now - self._ttl and len(self._recorded) < self._max:
                return
            del self._recorded[key]
            with contextlib.suppress(errors.ApiError):
                self._store.delete(self._type, oldest.namespace, oldest.name, immediate=True)


def _repeat(event: Obj, stamp: str) -> None:
    event["count"] = int(event.get("count") or 1) + 1
    event["lastTimestamp"] = stamp
