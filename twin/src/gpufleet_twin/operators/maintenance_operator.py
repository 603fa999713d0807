"""The twin's NVIDIA Maintenance Operator: NodeMaintenance requests share one cluster-wide disruption budget.

Usage
-----
- Enable: ``python -m gpufleet_twin serve --maintenance-operator``, ``process.start_twin(maintenance_operator=True)``,
  the scenario key ``maintenance_operator: true`` (or a mapping: the MaintenanceOperatorConfig ``default``'s spec,
  created at start) or ``install(twin, config=None)`` in process.  Off by default: without it neither CRD nor
  controller exists.
- It installs the upstream CRDs ``nodemaintenances.maintenance.nvidia.com`` and
  ``maintenanceoperatorconfigs.maintenance.nvidia.com`` (``maintenance.nvidia.com/v1alpha1``, unmodified copies in
  ``crds/maintenance/``) and the namespace ``maintenance-operator`` (the operator's ``OPERATOR_NAMESPACE``).  The
  configuration read is the MaintenanceOperatorConfig ``default`` in that namespace; without one the upstream
  defaults hold (``maxParallelOperations`` 1, ``maxUnavailable`` unlimited, ``maxNodeMaintenanceTimeSeconds``
  3600), and the last one seen stays in force after it is deleted (as the operator's stored options).

What is modelled (Mellanox/maintenance-operator at e15d07b, ``internal/controller/nodemaintenance_controller.go``,
``nodemaintenancescheduler_controller.go``, ``garbage_collector_controller.go``, ``internal/scheduler``,
``internal/cordon``, ``internal/podcompletion``, ``internal/drain``, ``internal/webhook``; README "NodeMaintenance
Scheduling Process"):

- The Ready condition's reason moves ``"" -> Pending -> Scheduled -> Cordon -> WaitForPodCompletion -> Draining ->
  Ready`` (status True only at Ready), one step per reconcile, each step an Event ``ConditionChanged`` on the
  NodeMaintenance whose message is the new reason.  A ``RequestorFailed`` condition set True by the requestor turns a
  Ready request's reason into ``RequestorFailed`` (and back when cleared).
- Scheduling (every 10 simulated seconds): slots = ``maxParallelOperations`` (int or percent of all nodes, rounded
  up) minus the nodes under maintenance (a request past Pending); nodes that may still become unavailable =
  ``maxUnavailable`` (percent rounded down) minus the union of the nodes under maintenance and the nodes already
  unschedulable or not Ready.  Candidates are Pending requests on nodes that have none under maintenance, ranked by
  requestor already in progress (+1000), fewer pending requests of the same requestor (100 - pending, capped), then
  creation time, node name, requestorID, namespace/name; one per node; a request on an already unavailable node
  costs no ``maxUnavailable`` room.
- Scheduled: the finalizer ``maintenance.nvidia.com/finalizer`` is added and the NodeMaintenance gets an
  ownerReference to its Node.  Cordon (``spec.cordon``, default true): the node's state is remembered in the
  annotation ``maintenance.nvidia.com/node-initial-state.unschedulable`` and the node is cordoned only if it was
  schedulable.  WaitForPodCompletion: waits until no pod matching ``waitForPodCompletion.podSelector`` exists on
  the node (``status.waitForCompletion`` lists them; ``timeoutSeconds`` from the annotation
  ``maintenance.nvidia.com/wait-pod-completion-start-time``, 0 = forever).  Draining (``drainSpec``; none = no
  drain): kubectl's drain helper with ``IgnoreAllDaemonSets``, ``podSelector`` (plus the operator's own
  ``app.kubernetes.io/component!=maintenance-operator-controller-manager``), ``force``, ``deleteEmptyDir``,
  ``timeoutSeconds`` (0 = forever) and ``podEvictionFilters`` (a pod is evicted only if a container's
  ``resources.requests`` has a resource name matching one ``byResourceNameRegex``; the drain helper's
  local-storage and unreplicated refusals are checked first, as kubectl's filter order does).  Pods go through
  the twin's eviction (``upgrade_apply.evict_pod``), so PodDisruptionBudgets apply; a refused eviction is retried
  at the next pass (5 s); a refusal or a timeout ends that drain attempt and a new one starts (upstream removes the
  failed request and requeues), the request staying in Draining.  ``status.drain`` {totalPods, evictionPods,
  drainProgress, waitForEviction}.  Ready: the annotation ``maintenance.nvidia.com/ready-time`` is set.
- Deletion: a Pending request has no finalizer and goes at once.  From Scheduled to Draining the controller
  uncordons (only if the node was schedulable before and is cordoned now, then drops the initial-state
  annotation) and removes the finalizer.  A Ready or RequestorFailed request is held while
  ``spec.additionalRequestors`` is not empty: the requestorID's owner deletes the object, each other requestor
  removes its ID from the list (an update of the whole list) when done, and the node is uncordoned and the
  finalizer removed only once the list is empty.  Another requestor joins a request by adding its ID; a second
  NodeMaintenance on the same node stays Pending until the first is gone (one request per node in maintenance).
- Garbage collection: a request Ready for longer than ``maxNodeMaintenanceTimeSeconds`` (from its ready-time
  annotation) is deleted, unless annotated ``maintenance.nvidia.com/garbage-collector.ignore: "true"``.
- Admission (the validating webhook): creating a NodeMaintenance for a node that does not exist is refused.
- A request whose node is gone loses its finalizer.

Not modelled: the OpenShift MachineConfigPool pause (``internal/openshift``), log levels, the operator's own
Deployment and metrics.  Writes are the controller's: one store write per upstream API call where it matters.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..apiserver.server import install_crds, load_crd_manifests
from ..kube import podutil
from ..machinery import errors
from ..machinery.clock import parse_rfc3339
from ..machinery.kinds import Kinds
from ..machinery.registry import ResourceType
from ..machinery.selectors import parse_label_selector
from ..machinery.wake import Waker
from . import upgrade_model as um
from .upgrade_apply import evict_pod, node_condition_ready, node_pod

if TYPE_CHECKING:
    from ..apiserver.cluster import Twin

log = logging.getLogger(__name__)

Obj = dict[str, Any]

GROUP = "maintenance.nvidia.com"
API_VERSION = f"{GROUP}/v1alpha1"
NAMESPACE = "maintenance-operator"
CONFIG_NAME = "default"
FINALIZER = "maintenance.nvidia.com/finalizer"
INITIAL_STATE_ANNOTATION = "maintenance.nvidia.com/node-initial-state.unschedulable"
WAIT_START_ANNOTATION = "maintenance.nvidia.com/wait-pod-completion-start-time"
READY_TIME_ANNOTATION = "maintenance.nvidia.com/ready-time"
GC_IGNORE_ANNOTATION = "maintenance.nvidia.com/garbage-collector.ignore"
OWN_POD_SELECTOR = "app.kubernetes.io/component!=maintenance-operator-controller-manager"
CRD_DIR = Path(__file__).resolve().parent.parent / "crds" / "maintenance"

PENDING = "Pending"
SCHEDULED = "Scheduled"
CORDON = "Cordon"
WAIT_FOR_POD_COMPLETION = "WaitForPodCompletion"
DRAINING = "Draining"
READY = "Ready"
REQUESTOR_FAILED = "RequestorFailed"
SCHEDULER_SYNC_SECONDS = 10.0
PASS_SECONDS = 5.0  # kubectl's drain helper retries a refused eviction every 5 s
IN_PROGRESS_WEIGHT = 1000
LEAST_PENDING_MAX_WEIGHT = 100
DEFAULT_MAX_MAINTENANCE_SECONDS = 3600


# -- pure helpers -------------------------------------------------------------------------------------------------
def ready_reason(nm: Obj) -> str:
    for condition in (nm.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            return str(condition.get("reason") or "")
    return ""


def under_maintenance(nm: Obj) -> bool:
    return ready_reason(nm) not in ("", PENDING)


def _scaled(value: int | str | None, total: int, *, round_up: bool) -> int:
    return podutil.scaled_value(value, total, round_up=round_up)


def _rank(nm: Obj, in_progress: list[Obj], pending: list[Obj]) -> int:
    requestor = nm["spec"].get("requestorID")
    rank = IN_PROGRESS_WEIGHT if any(o["spec"].get("requestorID") == requestor for o in in_progress) else 0
    same = sum(1 for o in pending if o["spec"].get("requestorID") == requestor)
    return rank + LEAST_PENDING_MAX_WEIGHT - min(same, LEAST_PENDING_MAX_WEIGHT)


def schedule(
    nodes: list[Obj], nms: list[Obj], *, max_parallel: int | str | None, max_unavailable: int | str | None
) -> list[Obj]:
    """The NodeMaintenance requests to move from Pending to Scheduled now (preSchedule + defaultScheduler)."""
    by_name = {n["metadata"]["name"]: n for n in nodes}
    in_progress = [nm for nm in nms if under_maintenance(nm)]
    pending = [nm for nm in nms if ready_reason(nm) == PENDING]
    busy = {nm["spec"]["nodeName"] for nm in in_progress if nm["spec"]["nodeName"] in by_name}
    # IsNodeUnschedulable or not IsNodeReady (a node without a Ready condition counts as ready).
    unavailable = {
        name
        for name, node in by_name.items()
        if (node.get("spec") or {}).get("unschedulable") or not node_condition_ready(node)
    }
    parallel = 1 if max_parallel is None else _scaled(max_parallel, len(nodes), round_up=True)
    slots = min(max(0, parallel - len(busy)), len(nodes))
    room = slots
    if max_unavailable is not None:
        room = max(0, _scaled(max_unavailable, len(nodes), round_up=False) - len(busy | unavailable))
    # Nodes with a Pending request and none in maintenance; every request on them is a candidate (upstream takes
    # them all, so one not yet initialised can be scheduled too).
    candidate_nodes = {nm["spec"]["nodeName"] for nm in pending if nm["spec"]["nodeName"] in by_name} - busy
    candidates = [nm for nm in nms if nm["spec"]["nodeName"] in candidate_nodes]
    if not candidates or slots == 0:
        return []
    candidates.sort(
        key=lambda nm: (
            -_rank(nm, in_progress, pending),
            nm["metadata"].get("creationTimestamp") or "",
            nm["spec"]["nodeName"],
            nm["spec"].get("requestorID") or "",
            f"{nm['metadata'].get('namespace')}/{nm['metadata']['name']}",
        )
    )
    compacted: list[Obj] = []
    for nm in candidates:
        if all(other["spec"]["nodeName"] != nm["spec"]["nodeName"] for other in compacted):
            compacted.append(nm)
    chosen: list[Obj] = []
    for nm in compacted[:slots]:
        if nm["spec"]["nodeName"] in unavailable:
            chosen.append(nm)  # already unavailable: costs no maxUnavailable room
        elif room > 0:
            room -= 1
            chosen.append(nm)
    return chosen


def matches_eviction_filters(pod: Obj, filters: list[Obj]) -> bool:
    """PodEvictionFiterEntry.Match, OR-ed: a container requests a resource whose name matches a regex."""
    names = [
        name
        for container in (pod.get("spec") or {}).get("containers") or ()
        for name in ((container.get("resources") or {}).get("requests") or {})
    ]
    for entry in filters:
        pattern = entry.get("byResourceNameRegex")
        if pattern is None:
            continue
        try:
            regex = re.compile(pattern)
        except re.error:
            continue  # upstream: a regex that does not compile matches nothing
        if any(regex.search(name) for name in names):
            return True
    return False


@dataclass
class _Drain:
    """One drain request (the operator's in-memory DrainManager entry)."""

    started: float
    spec: Obj
    total_pods: int | None = None
    eviction_pods: int | None = None


# -- the controller -----------------------------------------------------------------------------------------------
class MaintenanceOperator:
    name = "maintenance-operator"

    def __init__(self, twin: Twin) -> None:
        self.twin = twin
        self.store = twin.store
        self.clock = twin.clock
        self.kinds = Kinds.from_registry(twin.registry)
        nm_type = twin.registry.get(GROUP, "nodemaintenances")
        config_type = twin.registry.get(GROUP, "maintenanceoperatorconfigs")
        assert nm_type is not None and config_type is not None, "install the maintenance CRDs first"
        self.nm_type: ResourceType = nm_type
        self.config_type: ResourceType = config_type
        self.options: Obj = {}
        self.drains: dict[str, _Drain] = {}
        self.next_schedule = 0.0

    async def run(self, twin: Twin) -> None:
        waker = Waker(
            self.store,
            twin.clock,
            resources=((GROUP, "nodemaintenances"), (GROUP, "maintenanceoperatorconfigs"), ("", "nodes")),
        )
        while True:
            try:
                self.reconcile_all()
            except Exception:
                log.exception("maintenance operator pass failed")
            await waker.wait(PASS_SECONDS)
            await asyncio.sleep(0)

    def reconcile_all(self) -> None:
        config = self.store.try_get(self.config_type, NAMESPACE, CONFIG_NAME)
        if config is not None:
            self.options = dict(config.get("spec") or {})
        self._collect_garbage()
        for nm in self.store.list(self.nm_type):
            try:
                self.reconcile(nm)
            except errors.ApiError as problem:  # a write lost a race: the next pass retries it
                log.debug("NodeMaintenance %s: %s", nm["metadata"]["name"], problem)
        if self.clock.now() >= self.next_schedule:
            self.next_schedule = self.clock.now() + SCHEDULER_SYNC_SECONDS
            self._schedule()

    # -- one NodeMaintenance ------------------------------------------------------------------------------------
    def reconcile(self, nm: Obj) -> None:
        node = self.store.try_get(self.kinds.node, None, nm["spec"]["nodeName"])
        if node is None:
            self._remove_finalizer(nm)
            return
        self._own(nm, node)
        reason = ready_reason(nm)
        deleting = bool(nm["metadata"].get("deletionTimestamp"))
        if reason == "":
            self._set_reason(nm, PENDING)
        elif reason == SCHEDULED:
            if deleting:
                self._remove_finalizer(nm)
                return
            self._mutate(nm, _add_finalizer)
            self._set_reason(nm, CORDON)
        elif reason in (CORDON, WAIT_FOR_POD_COMPLETION, DRAINING) and deleting:
            self.drains.pop(nm["metadata"]["uid"], None)
            self._release(nm, node)
        elif reason == CORDON:
            self._cordon(nm, node)
            self._set_reason(nm, WAIT_FOR_POD_COMPLETION)
        elif reason == WAIT_FOR_POD_COMPLETION:
            if self._waiting_for_pods(nm):
                return
            self._set_reason(nm, DRAINING)
        elif reason == DRAINING:
            if self._drained(nm, node):
                self._set_reason(nm, READY)
        elif reason in (READY, REQUESTOR_FAILED):
            self._terminal(nm, node, deleting=deleting)

    def _terminal(self, nm: Obj, node: Obj, *, deleting: bool) -> None:
        if deleting:
            if nm["spec"].get("additionalRequestors"):
                return  # held until every additional requestor has removed its ID
            self._release(nm, node)
            return
        if not (nm["metadata"].get("annotations") or {}).get(READY_TIME_ANNOTATION):
            nm = self._mutate(nm, lambda o: _annotate(o, READY_TIME_ANNOTATION, self.clock.iso()))
        failed = any(
            c.get("type") == REQUESTOR_FAILED and c.get("status") == "True"
            for c in (nm.get("status") or {}).get("conditions") or ()
        )
        reason = ready_reason(nm)
        if failed and reason == READY:
            self._set_reason(nm, REQUESTOR_FAILED)
        elif not failed and reason == REQUESTOR_FAILED:
            self._set_reason(nm, READY)

    def _cordon(self, nm: Obj, node: Obj) -> None:
        """cordonHandler.HandleCordon: remember the node's state, cordon only a node that was schedulable."""
        annotations = nm["metadata"].get("annotations") or {}
        initial = annotations.get(INITIAL_STATE_ANNOTATION)
        if initial is None:
            initial = "true" if (node.get("spec") or {}).get("unschedulable") else "false"
            nm = self._mutate(nm, lambda o: _annotate(o, INITIAL_STATE_ANNOTATION, initial))
        if initial == "false" and not (node.get("spec") or {}).get("unschedulable"):
            self.store.mutate(self.kinds.node, None, node["metadata"]["name"], _set_unschedulable(True))

    def _release(self, nm: Obj, node: Obj) -> None:
        """The deletion path: uncordon (HandleUnCordon) when ``spec.cordon``, then remove the finalizer."""
        if nm["spec"].get("cordon", True):
            annotations = nm["metadata"].get("annotations") or {}
            if annotations.get(INITIAL_STATE_ANNOTATION) == "false" and (node.get("spec") or {}).get("unschedulable"):
                self.store.mutate(self.kinds.node, None, node["metadata"]["name"], _set_unschedulable(False))
            if INITIAL_STATE_ANNOTATION in annotations:
                nm = self._mutate(nm, lambda o: o["metadata"]["annotations"].pop(INITIAL_STATE_ANNOTATION, None))
        self._remove_finalizer(nm)

    def _waiting_for_pods(self, nm: Obj) -> bool:
        """podCompletionHandler.HandlePodCompletion: True while selected pods still exist on the node."""
        wait = nm["spec"].get("waitForPodCompletion")
        if wait is None:
            return False
        started_text = (nm["metadata"].get("annotations") or {}).get(WAIT_START_ANNOTATION)
        if not started_text:
            started_text = self.clock.iso()
            nm = self._mutate(nm, lambda o: _annotate(o, WAIT_START_ANNOTATION, started_text))
        timeout = int(wait.get("timeoutSeconds") or 0)
        if timeout > 0 and self.clock.now() > parse_rfc3339(started_text) + timeout:
            return False  # ErrPodCompletionTimeout: go on to draining
        selector = parse_label_selector(wait.get("podSelector") or "")
        waiting = [
            f"{p['metadata']['namespace']}/{p['metadata']['name']}"
            for p in self.store.list(self.kinds.pod)
            if (p.get("spec") or {}).get("nodeName") == nm["spec"]["nodeName"]
            and selector.matches(p["metadata"].get("labels") or {})
        ]
        self._mutate(nm, lambda o: o.setdefault("status", {}).__setitem__("waitForCompletion", waiting), status=True)
        return bool(waiting)

    def _drained(self, nm: Obj, node: Obj) -> bool:
        """The Draining state with its drain request; True once every pod to evict is gone."""
        uid = nm["metadata"]["uid"]
        spec = nm["spec"].get("drainSpec")
        if spec is None:
            self.drains.pop(uid, None)
            self._mutate(nm, lambda o: (o.get("status") or {}).pop("drain", None), status=True)
            return True
        request = self.drains.get(uid)
        if request is None or request.spec != spec:
            # A new request (or the drain spec changed): reset the drain status.
            self.drains[uid] = request = _Drain(started=self.clock.now(), spec=copy.deepcopy(spec))
        timeout = int(spec.get("timeoutSeconds", 300) or 0)
        candidates, refusals = self._drain_candidates(node, spec)
        to_evict = [
            p
            for p in candidates
            if not spec.get("podEvictionFilters") or matches_eviction_filters(p, spec["podEvictionFilters"])
        ]
        if request.total_pods is None:
            request.total_pods = sum(
                1
                for p in self.store.list(self.kinds.pod)
                if (p.get("spec") or {}).get("nodeName") == node["metadata"]["name"]
            )
            request.eviction_pods = len(to_evict)
        if refusals or (timeout and self.clock.now() - request.started > timeout):
            log.info("drain of %s failed (%s); a new attempt follows", node["metadata"]["name"], refusals or "timeout")
            self.drains.pop(uid, None)
            return False
        for pod in to_evict:
            if not podutil.is_terminating(pod):
                evict_pod(self.store, self.kinds, pod["metadata"]["namespace"], pod["metadata"]["name"])
        left = [
            f"{p['metadata']['namespace']}/{p['metadata']['name']}"
            for p in to_evict
            if self.store.try_get(self.kinds.pod, p["metadata"]["namespace"], p["metadata"]["name"]) is not None
        ]
        evictions = request.eviction_pods or 0
        progress = 100 if evictions == 0 else int(max(evictions - len(left), 0) / evictions * 100)
        drain_status = {
            "totalPods": request.total_pods,
            "evictionPods": evictions,
            "drainProgress": progress,
            "waitForEviction": left,
        }
        self._mutate(nm, lambda o: o.setdefault("status", {}).__setitem__("drain", drain_status), status=True)
        if left:
            return False
        self.drains.pop(uid, None)
        return True

    def _drain_candidates(self, node: Obj, spec: Obj) -> tuple[list[Obj], str]:
        """kubectl's drain filters: DaemonSet and mirror pods stay; local storage and unmanaged pods refuse."""
        selector = parse_label_selector(",".join(p for p in (OWN_POD_SELECTOR, spec.get("podSelector") or "") if p))
        pods = [
            p
            for p in self.store.list(self.kinds.pod)
            if (p.get("spec") or {}).get("nodeName") == node["metadata"]["name"]
            and selector.matches(p["metadata"].get("labels") or {})
        ]
        snapshots = {id(p): node_pod(p) for p in pods}
        candidates = [
            p for p in pods if snapshots[id(p)].controller_kind != "DaemonSet" and not snapshots[id(p)].mirror
        ]
        refusals = um.drain_refusals(
            [snapshots[id(p)] for p in candidates],
            force=bool(spec.get("force")),
            delete_empty_dir=bool(spec.get("deleteEmptyDir")),
        )
        return candidates, refusals

    # -- scheduler and garbage collector ------------------------------------------------------------------------
    def _schedule(self) -> None:
        nodes = self.store.list(self.kinds.node)
        nms = self.store.list(self.nm_type)
        chosen = schedule(
            nodes,
            nms,
            max_parallel=self.options.get("maxParallelOperations"),
            max_unavailable=self.options.get("maxUnavailable"),
        )
        for nm in chosen:
            try:
                self._set_reason(nm, SCHEDULED, component="nodemaintenancescheduler")
            except errors.ApiError as problem:
                log.debug("scheduling %s: %s", nm["metadata"]["name"], problem)

    def _collect_garbage(self) -> None:
        limit = self.options.get("maxNodeMaintenanceTimeSeconds", DEFAULT_MAX_MAINTENANCE_SECONDS)
        for nm in self.store.list(self.nm_type):
            meta = nm["metadata"]
            annotations = meta.get("annotations") or {}
            ready_at = annotations.get(READY_TIME_ANNOTATION)
            if annotations.get(GC_IGNORE_ANNOTATION) == "true" or not ready_at or meta.get("deletionTimestamp"):
                continue
            if self.clock.now() > parse_rfc3339(ready_at) + int(limit or 0):
                try:
                    self.store.delete(self.nm_type, meta["namespace"], meta["name"])
                except errors.ApiError as problem:
                    log.debug("garbage collecting %s: %s", meta["name"], problem)

    # -- writes -------------------------------------------------------------------------------------------------
    def _mutate(self, nm: Obj, change: Any, *, status: bool = False) -> Obj:
        meta = nm["metadata"]
        return self.store.mutate(
            self.nm_type, meta["namespace"], meta["name"], change, subresource="status" if status else None
        )

    def _own(self, nm: Obj, node: Obj) -> None:
        """SetOwnerRef(node, nm): the Node owns the NodeMaintenance (not as controller)."""
        uid = node["metadata"].get("uid")
        if any(ref.get("uid") == uid for ref in nm["metadata"].get("ownerReferences") or ()):
            return
        ref = {"apiVersion": "v1", "kind": "Node", "name": node["metadata"]["name"], "uid": uid}
        self._mutate(nm, lambda o: o["metadata"].setdefault("ownerReferences", []).append(ref))

    def _remove_finalizer(self, nm: Obj) -> None:
        if FINALIZER not in (nm["metadata"].get("finalizers") or ()):
            return
        self._mutate(
            nm,
            lambda o: o["metadata"].__setitem__(
                "finalizers", [f for f in o["metadata"]["finalizers"] if f != FINALIZER]
            ),
        )

    def _set_reason(self, nm: Obj, reason: str, *, component: str = "nodemaintenancereconciler") -> None:
        """k8sutils.SetReadyConditionReason and the ConditionChanged Event."""
        meta = nm["metadata"]
        current = self.store.get(self.nm_type, meta["namespace"], meta["name"])
        condition = {
            "type": "Ready",
            "status": "True" if reason == READY else "False",
            "observedGeneration": current["metadata"].get("generation", 1),
            "reason": reason,
            "message": "",
            "lastTransitionTime": self.clock.iso(),
        }

        def change(obj: Obj) -> None:
            conditions = obj.setdefault("status", {}).setdefault("conditions", [])
            for index, existing in enumerate(conditions):
                if existing.get("type") == "Ready":
                    if existing.get("status") == condition["status"]:
                        condition["lastTransitionTime"] = existing.get("lastTransitionTime")
                    conditions[index] = condition
                    return
            conditions.append(condition)

        before = ready_reason(current)
        self._mutate(current, change, status=True)
        if before != reason:
            self._event(current, reason, component)

    def _event(self, nm: Obj, reason: str, component: str) -> None:
        events = getattr(self.twin.sim, "events", None)
        if events is None:
            return
        events.record(nm, reason="ConditionChanged", message=reason, component=component)

    def admit(self, operation: str, rtype: ResourceType, obj: Obj, old: Obj | None) -> None:
        """The validating webhook: a NodeMaintenance must name an existing node when it is created."""
        if operation != "CREATE" or rtype.key != self.nm_type.key:
            return
        name = (obj.get("spec") or {}).get("nodeName") or ""
        if self.store.try_get(self.kinds.node, None, name) is None:
            raise errors.ApiError(
                403,
                "Forbidden",
                f'admission webhook "vnodemaintenance.kb.io" denied the request: invalid spec.nodeName, failed to get '
                f'node {name} for NodeMaintenance. nodes "{name}" not found',
            )


def _add_finalizer(obj: Obj) -> None:
    finalizers = obj["metadata"].setdefault("finalizers", [])
    if FINALIZER not in finalizers:
        finalizers.append(FINALIZER)


def _annotate(obj: Obj, key: str, value: str) -> None:
    obj["metadata"].setdefault("annotations", {})[key] = value


def _set_unschedulable(value: bool) -> Any:
    def change(node: Obj) -> None:
        if value:
            node.setdefault("spec", {})["unschedulable"] = True
        else:
            node.setdefault("spec", {}).pop("unschedulable", None)

    return change


def install(twin: Twin, *, config: Obj | None = None) -> MaintenanceOperator:
    """Install the NodeMaintenance and MaintenanceOperatorConfig CRDs, the operator's namespace and its controller.

    ``config``: the spec of a MaintenanceOperatorConfig ``default`` to create (none when None).
    """
    if twin.registry.get(GROUP, "nodemaintenances") is None:
        install_crds(twin, load_crd_manifests(CRD_DIR))
    ns_type = twin.registry.get("", "namespaces")
    assert ns_type is not None
    if twin.store.try_get(ns_type, None, NAMESPACE) is None:
        twin.store.create(
            ns_type, {"metadata": {"name": NAMESPACE, "labels": {"kubernetes.io/metadata.name": NAMESPACE}}}
        )
    controller = MaintenanceOperator(twin)
    if config is not None and twin.store.try_get(controller.config_type, NAMESPACE, CONFIG_NAME) is None:
        body = {"metadata": {"name": CONFIG_NAME, "namespace": NAMESPACE}, "spec": dict(config)}
        twin.store.create(controller.config_type, body)
    twin.store.add_admission(controller.admit)
    twin.controllers.append(controller)
    twin.published["maintenance_operator"] = {"namespace": NAMESPACE, "config": CONFIG_NAME}
    return controller
