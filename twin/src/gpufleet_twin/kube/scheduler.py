"""A small default-scheduler: binds pods that have no ``spec.nodeName``.

Filters as the real scheduler's plugins do for what the twin models:
NodeUnschedulable (``spec.unschedulable`` unless tolerated), TaintToleration
(NoSchedule/NoExecute taints), NodeAffinity (``nodeSelector`` and required
node affinity, including the ``matchFields metadata.name`` pin of DaemonSet
pods), node Ready, and NodeResourcesFit for ``nvidia.com/gpu`` (requests vs
allocatable minus what bound, non-terminal pods hold).  CPU and memory are
not accounted.  Among the nodes that fit it picks the one with the most free
GPUs (the LeastAllocated score), then the name, so workloads spread.

Pods that fit nowhere get ``PodScheduled=False`` with reason
``Unschedulable`` and a message in the scheduler's
"0/N nodes are available: ..." form, and are retried when nodes or pods
change.  Pods of the same shape (same constraints and GPU request) share one
feasibility pass, so binding hundreds of replicas on 10,000 nodes stays
cheap.
"""

from __future__ import annotations

import heapq
import json
import logging
from collections import Counter
from typing import Any

from ..machinery import errors
from ..machinery.kinds import Kinds
from ..machinery.store import Store, WatchEvent
from ..machinery.wake import Pacer, Waker
from . import podutil
from .events import EventRecorder
from .index import ClusterIndex

log = logging.getLogger(__name__)

Obj = dict[str, Any]
PodKey = tuple[str, str]

SCHEDULER_COMPONENT = "default-scheduler"
RETRY_SECONDS = 60.0


class Scheduler:
    name = "scheduler"

    def __init__(self, *, kinds: Kinds, index: ClusterIndex, events: EventRecorder, pod_events: bool = True) -> None:
        self._kinds = kinds
        self._index = index
        self._events = events
        self._pod_events = pod_events
        self._unschedulable: set[PodKey] = set()
        self._retry_all = False
        self._store: Store | None = None
        self._own_write = False
        self._pace = Pacer()

    async def run(self, twin: Any) -> None:
        self._store = twin.store
        waker = Waker(
            twin.store, twin.clock, resources=(self._kinds.pod.key, self._kinds.node.key), on_event=self._relevant
        )
        while True:
            await self.schedule_pending(twin.clock.iso())
            woke = await waker.wait(RETRY_SECONDS if self._unschedulable else None)
            if not woke:
                self._retry_all = True

    def _relevant(self, event: WatchEvent) -> bool:
        if self._own_write:
            return False
        if event.rtype.key == self._kinds.node.key:
            self._retry_all = True
            return bool(self._unschedulable)
        if event.type == "DELETED" or podutil.is_terminal(event.obj):
            # Freed GPUs may let a waiting pod fit.
            if self._unschedulable:
                self._retry_all = True
                return True
            return False
        return not (event.obj.get("spec") or {}).get("nodeName")

    async def schedule_pending(self, now_iso: str) -> int:
        """Bind what can be bound; returns the number of pods bound."""
        pending = set(self._index.unscheduled)
        if not self._retry_all:
            pending -= self._unschedulable
        self._retry_all = False
        if not pending:
            return 0
        shapes: dict[str, list[Obj]] = {}
        for key in sorted(pending):
            pod = self._index.pod(key)
            if pod is None or (pod.get("spec") or {}).get("nodeName"):
                self._unschedulable.discard(key)
                continue
            if podutil.is_terminating(pod):
                # An unscheduled pod has no kubelet to wait for: the API server removes it at once.
                self._delete_unbound(pod)
                continue
            if (pod.get("spec") or {}).get("schedulerName", SCHEDULER_COMPONENT) != SCHEDULER_COMPONENT:
                continue
            shapes.setdefault(_shape_of(pod), []).append(pod)
        bound = 0
        for pods in shapes.values():
            bound += await self._schedule_shape(pods, now_iso)
        return bound

    async def _schedule_shape(self, pods: list[Obj], now_iso: str) -> int:
        spec = pods[0].get("spec") or {}
        need = podutil.gpu_request(pods[0])
        pinned = podutil.pinned_node_name(spec)
        candidates = [pinned] if pinned is not None else self._index.node_names()
        reasons: Counter[str] = Counter()
        heap: list[tuple[int, str]] = []
        for name in candidates:
            node = self._index.nodes.get(name)
            if node is None:
                continue
            reason = self._filter(spec, node)
            if reason is not None:
                reasons[reason] += 1
                continue
            heap.append((-self._free_gpus(node), name))
        heapq.heapify(heap)
        bound = 0
        for pod in pods:
            chosen = None
            while heap:
                negative_free, name = heap[0]
                free = self._free_gpus(self._index.nodes[name])
                if -negative_free != free:
                    heapq.heapreplace(heap, (-free, name))  # stale entry: re-rank
                    continue
                # NodeResourcesFit checks only what a pod requests: a pod asking
                # for no GPU fits a node whose GPUs are over-committed (a
                # driver restart dropped allocatable below what pods hold).
                if need and free < need:
                    break
                chosen = name
                break
            if chosen is None:
                short = len(heap)
                message = _unschedulable_message(len(self._index.nodes) if pinned is None else 1, reasons, short, need)
                self._mark_unschedulable(pod, message, now_iso)
                continue
            if self._bind(pod, chosen):
                bound += 1
                free = self._free_gpus(self._index.nodes[chosen])
                heapq.heapreplace(heap, (-free, chosen))
            await self._pace()
        return bound

    def _filter(self, spec: Obj, node: Obj) -> str | None:
        """Why a node does not fit, in the scheduler's own words; None if it fits."""
        if not podutil.is_node_ready(node):
            return "node(s) were not ready"
        tolerations = spec.get("tolerations") or []
        if (node.get("spec") or {}).get("unschedulable"):
            unschedulable_taint = {"key": podutil.UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
            if not any(podutil.tolerates(t, unschedulable_taint) for t in tolerations):
                return "node(s) were unschedulable"
        if not podutil.pod_fits_node_labels(spec, node):
            return "node(s) didn't match Pod's node affinity/selector"
        taint = podutil.untolerated_taint(podutil.node_taints(node), tolerations)
        if taint is not None:
            value = taint.get("value")
            shown = f"{taint.get('key')}: {value}" if value else f"{taint.get('key')}: "
            return f"node(s) had untolerated taint {{{shown}}}"
        return None

    def _free_gpus(self, node: Obj) -> int:
        allocatable = podutil.quantity_int(
            ((node.get("status") or {}).get("allocatable") or {}).get(podutil.GPU_RESOURCE)
        )
        return allocatable - self._index.gpus_used.get(node["metadata"]["name"], 0)

    def _bind(self, pod: Obj, node_name: str) -> bool:
        store = self._require_store()
        meta = pod["metadata"]

        def assign(obj: Obj) -> None:
            obj.setdefault("spec", {})["nodeName"] = node_name

        try:
            self._own_write = True
            store.mutate(self._kinds.pod, meta.get("namespace"), meta["name"], assign)
        except errors.ApiError as exc:
            log.debug("binding %s failed: %s", meta["name"], exc)
            return False
        finally:
            self._own_write = False
        self._unschedulable.discard(podutil.key_of(pod))
        if self._pod_events:
            self._events.record(
                pod,
                reason="Scheduled",
                message=f"Successfully assigned {meta.get('namespace')}/{meta['name']} to {node_name}",
                component=SCHEDULER_COMPONENT,
            )
        return True

    def _mark_unschedulable(self, pod: Obj, message: str, now_iso: str) -> None:
        key = podutil.key_of(pod)
        first_time = key not in self._unschedulable
        self._unschedulable.add(key)
        current = podutil.condition(pod, "PodScheduled")
        if current is not None and current.get("message") == message:
            return
        store = self._require_store()

        def mark(obj: Obj) -> None:
            status = obj.setdefault("status", {})
            status.setdefault("phase", "Pending")
            conditions = [c for c in status.get("conditions") or () if c.get("type") != "PodScheduled"]
            conditions.append(
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": now_iso,
                    "reason": "Unschedulable",
                    "message": message,
                }
            )
            status["conditions"] = conditions

        try:
            self._own_write = True
            store.mutate(self._kinds.pod, key[0], key[1], mark, subresource="status")
        except errors.ApiError:
            return
        finally:
            self._own_write = False
        if first_time:
            self._events.record(
                pod, reason="FailedScheduling", message=message, component=SCHEDULER_COMPONENT, event_type="Warning"
            )

    def _delete_unbound(self, pod: Obj) -> None:
        store = self._require_store()
        meta = pod["metadata"]
        try:
            self._own_write = True
            store.delete(self._kinds.pod, meta.get("namespace"), meta["name"], immediate=True)
        except errors.ApiError:
            pass
        finally:
            self._own_write = False

    def _require_store(self) -> Store:
        if self._store is None:
            raise RuntimeError("the scheduler is not running")
        return self._store


def _shape_of(pod: Obj) -> str:
    spec = pod.get("spec") or {}
    return json.dumps(
        [
            spec.get("nodeSelector"),
            spec.get("affinity", {}).get("nodeAffinity") if spec.get("affinity") else None,
            spec.get("tolerations"),
            podutil.gpu_request(pod),
        ],
        sort_keys=True,
    )


def _unschedulable_message(total: int, reasons: Counter[str], fitting: int, need: int) -> str:
    parts = Counter(reasons)
    if fitting and need:
        parts[f"Insufficient {podutil.GPU_RESOURCE}"] += fitting
    available = 0
    detail = ", ".join(f"{count} {reason}" for reason, count in sorted(parts.items(), key=lambda item: item[0]))
    message = f"{available}/{total} nodes are available"
    if detail:
        message += f": {detail}"
    preemption = f"preemption: 0/{total} nodes are available: {total} Preemption is not helpful for scheduling."
    return f"{message}. {preemption}"
