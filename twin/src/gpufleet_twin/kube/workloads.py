"""Workload controllers of kube-controller-manager, simulated.

- ``DaemonSetController``: one pod per eligible node (nodeSelector, required
  node affinity, NoSchedule/NoExecute taints against the template's
  tolerations plus the ones the real controller adds to every daemon pod,
  so cordoned and NotReady nodes keep their daemon pods).  Pods are pinned
  to their node with ``matchFields metadata.name`` node affinity and bound
  by the scheduler, as upstream does since 1.12.  Every template revision is
  a ControllerRevision ``<ds>-<hash>`` with an increasing ``revision``; pods
  carry the ``controller-revision-hash`` label.  ``OnDelete`` never replaces
  running pods (a deleted pod comes back at the current revision);
  ``RollingUpdate`` replaces old pods within ``maxUnavailable`` (``maxSurge``
  is not modelled).  A new pod is created only once the old one on that node
  is gone (not while it is Terminating).
- ``ReplicaSetController`` and ``DeploymentController`` (RollingUpdate with
  maxSurge/maxUnavailable, Recreate; ReplicaSets named
  ``<deployment>-<pod-template-hash>``; the scale subresource changes
  ``spec.replicas`` and the controllers follow).
- ``JobController``: pods run to completion per their ``PodPlan``;
  ``completions``/``parallelism``, ``backoffLimit`` (failed pods, and
  container restarts with ``restartPolicy: OnFailure``), back-off between
  retries, ``activeDeadlineSeconds``, ``ttlSecondsAfterFinished``; conditions
  ``Complete``/``Failed`` (the 1.31 ``SuccessCriteriaMet``/``FailureTarget``
  interim conditions and Indexed completion are not modelled).
- ``PdbStatusController``: ``status`` of every PodDisruptionBudget from
  ``disruption.pdb_status``; a PDB annotated ``twin.gpufleet.io/never-allow``
  (the fault) always reports ``disruptionsAllowed: 0``.

The garbage collector (deletion propagation by ownerReferences) lives in
``garbagecollector.py``.

Hashes (``controller-revision-hash``, ``pod-template-hash``) are FNV-1a of
the template as canonical JSON, encoded with the same "safe" alphabet
upstream uses: stable and short, not byte-identical to upstream's.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable, Iterable
from typing import Any

from ..machinery import errors
from ..machinery.clock import SimClock, parse_rfc3339
from ..machinery.kinds import Kinds
from ..machinery.registry import ResourceType
from ..machinery.store import Store, WatchEvent
from ..machinery.wake import DueTimes, Pacer, Waker
from ..machinery.writes import replace_status
from . import podutil
from .events import EventRecorder
from .index import ClusterIndex

log = logging.getLogger(__name__)

Obj = dict[str, Any]
ObjKey = tuple[str, str]

NEVER_ALLOW_ANNOTATION = "twin.gpufleet.io/never-allow"
REVISION_HASH_LABEL = "controller-revision-hash"
POD_TEMPLATE_HASH_LABEL = "pod-template-hash"
DEPLOYMENT_REVISION_ANNOTATION = "deployment.kubernetes.io/revision"
_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

# Tolerations the DaemonSet controller adds to every daemon pod (AddOrUpdateDaemonPodTolerations).
DAEMON_POD_TOLERATIONS: tuple[Obj, ...] = (
    {"key": podutil.NOT_READY_TAINT, "operator": "Exists", "effect": "NoExecute"},
    {"key": podutil.UNREACHABLE_TAINT, "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": podutil.UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"},
)
_HOST_NETWORK_TOLERATION = {
    "key": "node.kubernetes.io/network-unavailable",
    "operator": "Exists",
    "effect": "NoSchedule",
}


def template_hash(template: Obj, collision_count: int | None = None) -> str:
    """Short stable hash of a pod template (the shape of upstream's ``controller.ComputeHash``)."""
    data = json.dumps(template, sort_keys=True, separators=(",", ":"))
    if collision_count:
        data += str(collision_count)
    value = 0x811C9DC5
    for byte in data.encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(_SAFE_ALPHABET[ord(char) % len(_SAFE_ALPHABET)] for char in str(value))


# -- shared loop ----------------------------------------------------------------------------------
class _Controller:
    """Dirty-set driven reconcile loop shared by the workload controllers."""

    name = "controller"
    component = "controller-manager"

    def __init__(self, *, kinds: Kinds, index: ClusterIndex, events: EventRecorder) -> None:
        self._kinds = kinds
        self._index = index
        self._events = events
        self._dirty: set[ObjKey] = set()
        self._due = DueTimes()
        self._own_write = False
        self._pace = Pacer()
        self._store: Store | None = None
        self._clock: SimClock | None = None
        self._waker: Waker | None = None
        self._create_failures: dict[ObjKey, int] = {}
        self._create_errors: dict[ObjKey, str] = {}  # the last refusal of a pod create, per owner

    # What this controller owns, and which kinds wake it.
    def _primary(self) -> ResourceType:
        raise NotImplementedError

    def _watched(self) -> Iterable[ResourceType]:
        return (self._primary(), self._kinds.pod)

    def _on_other_event(self, event: WatchEvent) -> bool:
        """Map an event of a watched non-primary kind to dirty keys; True to wake."""
        controller = podutil.controller_of(event.obj)
        if controller is not None and controller.get("kind") == self._primary().kind:
            self._dirty.add((event.obj["metadata"].get("namespace", ""), controller["name"]))
            return True
        return False

    def attach(self, store: Store, clock: SimClock) -> None:
        self._store = store
        self._clock = clock
        self._waker = Waker(store, clock, resources=[r.key for r in self._watched()], on_event=self._on_event)
        for obj in store.list(self._primary()):
            self._dirty.add(podutil.key_of(obj))

    def _on_event(self, event: WatchEvent) -> bool:
        if self._own_write:
            return False
        if event.rtype.key == self._primary().key:
            self._dirty.add(podutil.key_of(event.obj))
            return True
        return self._on_other_event(event)

    async def run(self, twin: Any) -> None:
        self.attach(twin.store, twin.clock)
        assert self._waker is not None
        while True:
            await self.sync_once()
            next_due = self._due.next_due()
            await self._waker.wait(None if next_due is None else max(0.0, next_due - twin.clock.now()))

    async def sync_once(self) -> None:
        now = self.clock.now()
        for key in self._due.pop_due(now):
            self._dirty.add(key)  # type: ignore[arg-type]
        keys = sorted(self._dirty)
        self._dirty.clear()
        for key in keys:
            obj = self.store.try_get(self._primary(), key[0], key[1])
            await self.sync(key, obj, now)
            await self._pace()

    async def sync(self, key: ObjKey, obj: Obj | None, now: float) -> int:
        raise NotImplementedError

    # -- helpers ---------------------------------------------------------------------------------------
    @property
    def store(self) -> Store:
        if self._store is None:
            raise RuntimeError(f"{self.name}: attach() was not called")
        return self._store

    @property
    def clock(self) -> SimClock:
        if self._clock is None:
            raise RuntimeError(f"{self.name}: attach() was not called")
        return self._clock

    def _write(self, action: Callable[[], Obj]) -> Obj | None:
        try:
            self._own_write = True
            return action()
        except errors.ApiError as exc:
            log.debug("%s: write failed: %s", self.name, exc)
            return None
        finally:
            self._own_write = False

    def _create(self, rtype: ResourceType, obj: Obj, namespace: str) -> Obj | None:
        return self._write(lambda: self.store.create(rtype, obj, namespace=namespace))

    def _create_pod(self, owner: Obj, pod: Obj, now: float) -> Obj | None:
        """Create a pod for ``owner``; a refusal (a missing ServiceAccount...) is a ``FailedCreate`` Warning
        Event on the owner and a retry later, growing from 1 s to 5 min (RealPodControl and the work queue's
        rate limiter)."""
        key = podutil.key_of(owner)
        try:
            self._own_write = True
            created = self.store.create(self._kinds.pod, pod, namespace=owner["metadata"]["namespace"])
        except errors.ApiError as problem:
            self._event(owner, "FailedCreate", f"Error creating: {problem.message}", event_type="Warning")
            self._create_errors[key] = problem.message
            failures = self._create_failures.get(key, 0) + 1
            self._create_failures[key] = failures
            self._due.schedule_earliest(key, now + min(2.0 ** (failures - 1), 300.0))
            return None
        finally:
            self._own_write = False
        self._create_failures.pop(key, None)
        self._create_errors.pop(key, None)
        return created

    def _delete(self, rtype: ResourceType, obj: Obj, *, propagation_policy: str | None = None) -> Obj | None:
        meta = obj["metadata"]
        return self._write(
            lambda: self.store.delete(
                rtype,
                meta.get("namespace"),
                meta["name"],
                precondition_uid=meta.get("uid"),
                propagation_policy=propagation_policy,
            )
        )

    def _set_status(self, rtype: ResourceType, obj: Obj, status: Obj) -> int:
        if obj.get("status") == status:
            return 0
        written = self._write(lambda: replace_status(self.store, rtype, obj, status))
        return 0 if written is None else 1

    def _event(self, obj: Obj, reason: str, message: str, *, event_type: str = "Normal") -> None:
        self._write(
            lambda: (
                self._events.record(
                    obj, reason=reason, message=message, component=self.component, event_type=event_type
                )
                or {}
            )
        )

    def _pod_from_template(self, owner: Obj, template: Obj, *, generate_name: str, extra_labels: dict[str, str]) -> Obj:
        meta = template.get("metadata") or {}
        labels = dict(meta.get("labels") or {})
        labels.update(extra_labels)
        pod_meta: Obj = {
            "generateName": generate_name,
            "namespace": owner["metadata"]["namespace"],
            "labels": labels,
            "ownerReferences": [podutil.owner_reference(owner)],
        }
        if meta.get("annotations"):
            pod_meta["annotations"] = dict(meta["annotations"])
        spec = copy.deepcopy(template.get("spec") or {})
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec, "status": {"phase": "Pending"}}

    def _min_ready(self, obj: Obj) -> float:
        return float((obj.get("spec") or {}).get("minReadySeconds") or 0)

    def _available(self, pod: Obj, min_ready: float, now: float) -> bool:
        return podutil.is_pod_available(pod, min_ready_seconds=min_ready, now=now)


# -- DaemonSet ------------------------------------------------------------------------------------------
class DaemonSetController(_Controller):
    name = "daemonset-controller"
    component = "daemonset-controller"

    def __init__(self, *, kinds: Kinds, index: ClusterIndex, events: EventRecorder) -> None:
        super().__init__(kinds=kinds, index=index, events=events)
        # Per DaemonSet (uid): (generation, {node: should run}); refreshed per node on label/taint changes.
        self._eligibility: dict[str, tuple[int, dict[str, tuple[bool, bool]]]] = {}
        self._changed_nodes: set[str] = set()
        self._pass_changed_nodes: set[str] = set()

    def _primary(self) -> ResourceType:
        return self._kinds.daemonset

    def _watched(self) -> Iterable[ResourceType]:
        return (self._kinds.daemonset, self._kinds.pod, self._kinds.node)

    def _on_other_event(self, event: WatchEvent) -> bool:
        if event.rtype.key != self._kinds.node.key:
            return super()._on_other_event(event)
        old, new = event.old or {}, event.obj
        if event.type == "MODIFIED" and (
            (old.get("metadata") or {}).get("labels") == (new.get("metadata") or {}).get("labels")
            and (old.get("spec") or {}).get("taints") == (new.get("spec") or {}).get("taints")
            and bool((old.get("spec") or {}).get("unschedulable")) == bool((new.get("spec") or {}).get("unschedulable"))
        ):
            return False
        self._changed_nodes.add(new["metadata"]["name"])
        for ds in self.store.list(self._kinds.daemonset):
            self._dirty.add(podutil.key_of(ds))
        return True

    async def sync_once(self) -> None:
        # Nodes that change while this pass runs are picked up by the next one.
        self._pass_changed_nodes, self._changed_nodes = self._changed_nodes, set()
        await super().sync_once()

    async def sync(self, key: ObjKey, ds: Obj | None, now: float) -> int:
        if ds is None or podutil.is_terminating(ds):
            return 0
        uid = ds["metadata"]["uid"]
        spec = ds.get("spec") or {}
        template = spec.get("template") or {}
        revision_hash = template_hash(template, (ds.get("status") or {}).get("collisionCount"))
        writes, revision_hash = self._ensure_revision(ds, template, revision_hash)
        verdicts = self._eligible_nodes(ds)
        eligible = {name: verdict[0] for name, verdict in verdicts.items()}
        pods_by_node: dict[str, list[Obj]] = {}
        for pod in self._index.pods_of(uid):
            node_name = (pod.get("spec") or {}).get("nodeName") or podutil.pinned_node_name(pod.get("spec") or {})
            pods_by_node.setdefault(node_name or "", []).append(pod)
        # Pods where they should not continue (node gone, label removed, NoExecute taint): delete.
        # A NoSchedule taint added later keeps the running pod (shouldContinueRunning).
        for node_name, pods in pods_by_node.items():
            if not verdicts.get(node_name, (False, False))[1]:
                for pod in pods:
                    if not podutil.is_terminating(pod) and self._delete(self._kinds.pod, pod) is not None:
                        writes += 1
        strategy = spec.get("updateStrategy") or {}
        rolling = strategy.get("type", "RollingUpdate") == "RollingUpdate"
        min_ready = self._min_ready(ds)
        desired_nodes = [name for name in self._index.node_names() if eligible.get(name)]
        old_available: list[Obj] = []
        old_unavailable: list[Obj] = []
        unavailable = 0
        for node_name in desired_nodes:
            await self._pace()
            pods = pods_by_node.get(node_name, [])
            live = [p for p in pods if not podutil.is_terminating(p)]
            failed = [p for p in live if podutil.is_terminal(p)]
            for pod in failed:
                # A failed (or succeeded) daemon pod is deleted and replaced (podsShouldBeOnNode).
                if self._delete(self._kinds.pod, pod) is not None:
                    writes += 1
            live = [p for p in live if p not in failed]
            if not live:
                unavailable += 1
                if len(pods) == len(live):  # nothing terminating there: create
                    created = self._create_daemon_pod(ds, template, node_name, revision_hash)
                    writes += 1 if created else 0
                continue
            live.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""))
            for extra in live[1:]:
                if self._delete(self._kinds.pod, extra) is not None:
                    writes += 1
            pod = live[0]
            available = self._available(pod, min_ready, now)
            if not available:
                unavailable += 1
            if (pod["metadata"].get("labels") or {}).get(REVISION_HASH_LABEL) != revision_hash:
                (old_available if available else old_unavailable).append(pod)
        if rolling:
            max_unavailable = podutil.scaled_value(
                (strategy.get("rollingUpdate") or {}).get("maxUnavailable"),
                len(desired_nodes),
                round_up=True,
                default=1,
            )
            # Old pods that are not available anyway go first; available ones only within the budget.
            for pod in old_unavailable:
                if self._delete(self._kinds.pod, pod) is not None:
                    writes += 1
            room = max(0, max_unavailable - unavailable)
            for pod in sorted(old_available, key=lambda p: p["spec"].get("nodeName") or "")[:room]:
                if self._delete(self._kinds.pod, pod) is not None:
                    writes += 1
        writes += self._update_status(ds, desired_nodes, eligible, revision_hash, now)
        return writes

    def _eligible_nodes(self, ds: Obj) -> dict[str, tuple[bool, bool]]:
        """Per node (should run, should continue running), cached and refreshed per changed node."""
        uid = ds["metadata"]["uid"]
        generation = int(ds["metadata"].get("generation", 1))
        cached = self._eligibility.get(uid)
        template_spec = (ds.get("spec") or {}).get("template", {}).get("spec") or {}
        tolerations = daemon_pod_tolerations(template_spec)
        if cached is None or cached[0] != generation:
            names: Iterable[str] = self._index.nodes
            verdicts: dict[str, tuple[bool, bool]] = {}
        else:
            names = self._pass_changed_nodes
            verdicts = cached[1]
        for name in list(names):
            node = self._index.nodes.get(name)
            if node is None:
                verdicts.pop(name, None)
                continue
            verdicts[name] = node_should_run_daemon(template_spec, tolerations, node)
        self._eligibility[uid] = (generation, verdicts)
        return verdicts

    def _create_daemon_pod(self, ds: Obj, template: Obj, node_name: str, revision_hash: str) -> Obj | None:
        pod = self._pod_from_template(
            ds,
            template,
            generate_name=f"{ds['metadata']['name']}-",
            extra_labels={
                REVISION_HASH_LABEL: revision_hash,
                "pod-template-generation": str(ds["metadata"].get("generation", 1)),
            },
        )
        spec = pod["spec"]
        affinity = spec.setdefault("affinity", {})
        node_affinity = affinity.setdefault("nodeAffinity", {})
        # ReplaceDaemonSetPodNodeNameNodeAffinity: the controller already checked the
        # template's own terms, the pod is pinned to its node by name.
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]
        }
        spec["tolerations"] = daemon_pod_tolerations(spec)
        return self._create_pod(ds, pod, self.clock.now())

    def _ensure_revision(self, ds: Obj, template: Obj, revision_hash: str) -> tuple[int, str]:
        """Make sure a ControllerRevision holds the current template; returns (writes, its hash)."""
        meta = ds["metadata"]
        uid = meta["uid"]
        revisions = [
            rev
            for rev in (
                self.store.try_get(self._kinds.controllerrevision, key[2], key[3])
                for key in list(self._index.dependents.get(uid, ()))
                if key[:2] == self._kinds.controllerrevision.key
            )
            if rev is not None
        ]
        highest = max((int(r.get("revision", 0)) for r in revisions), default=0)
        name = f"{meta['name']}-{revision_hash}"
        current = next((r for r in revisions if r["metadata"]["name"] == name), None)
        if current is None:
            # A revision with the same template under another hash (a loaded snapshot,
            # hashed by the real controller) is the current one: upstream matches by content.
            current = next((r for r in revisions if _revision_template(r) == template), None)
            if current is not None:
                name = current["metadata"]["name"]
                revision_hash = (current["metadata"].get("labels") or {}).get(REVISION_HASH_LABEL, revision_hash)
        if current is None and not revisions:
            # Pods without any revision (a snapshot without ControllerRevisions): if they
            # all carry one hash, that hash names the template they were created from.
            pod_hashes = {
                (p["metadata"].get("labels") or {}).get(REVISION_HASH_LABEL) for p in self._index.pods_of(uid)
            }
            if len(pod_hashes) == 1 and None not in pod_hashes:
                revision_hash = str(pod_hashes.pop())
                name = f"{meta['name']}-{revision_hash}"
        writes = 0
        if current is None:
            labels = dict((template.get("metadata") or {}).get("labels") or {})
            labels[REVISION_HASH_LABEL] = revision_hash
            patch_template = copy.deepcopy(template)
            patch_template["$patch"] = "replace"
            revision = {
                "metadata": {
                    "name": name,
                    "namespace": meta["namespace"],
                    "labels": labels,
                    "ownerReferences": [podutil.owner_reference(ds)],
                },
                "data": {"spec": {"template": patch_template}},
                "revision": highest + 1,
            }
            writes += 1 if self._create(self._kinds.controllerrevision, revision, meta["namespace"]) else 0
        elif int(current.get("revision", 0)) < highest:
            # Rolling back to an older template bumps its revision to the newest (dedupCurHistories).
            def bump(rev: Obj) -> None:
                rev["revision"] = highest + 1

            writes += (
                1
                if self._write(lambda: self.store.mutate(self._kinds.controllerrevision, meta["namespace"], name, bump))
                else 0
            )
        limit = int((ds.get("spec") or {}).get("revisionHistoryLimit", 10))
        in_use = {(p["metadata"].get("labels") or {}).get(REVISION_HASH_LABEL) for p in self._index.pods_of(uid)}
        old = sorted(
            (
                r
                for r in revisions
                if r["metadata"]["name"] != name
                and (r["metadata"].get("labels") or {}).get(REVISION_HASH_LABEL) not in in_use
            ),
            key=lambda r: int(r.get("revision", 0)),
        )
        for rev in old[: max(0, len(old) - limit)]:
            writes += 1 if self._delete(self._kinds.controllerrevision, rev) else 0
        return writes, revision_hash

    def _update_status(
        self, ds: Obj, desired_nodes: list[str], eligible: dict[str, bool], revision_hash: str, now: float
    ) -> int:
        uid = ds["metadata"]["uid"]
        min_ready = self._min_ready(ds)
        scheduled = ready = updated = available = misscheduled = 0
        seen_nodes: set[str] = set()
        for pod in self._index.pods_of(uid):
            if podutil.is_terminating(pod) or podutil.phase_of(pod) == "Failed":
                continue
            node_name = (pod.get("spec") or {}).get("nodeName") or podutil.pinned_node_name(pod.get("spec") or {})
            if node_name is None or node_name in seen_nodes:
                continue
            seen_nodes.add(node_name)
            if not eligible.get(node_name):
                misscheduled += 1
                continue
            scheduled += 1
            if podutil.is_pod_ready(pod):
                ready += 1
            if (pod["metadata"].get("labels") or {}).get(REVISION_HASH_LABEL) == revision_hash:
                updated += 1
            if self._available(pod, min_ready, now):
                available += 1
        status = dict(ds.get("status") or {})
        status.update(
            {
                "currentNumberScheduled": scheduled,
                "desiredNumberScheduled": len(desired_nodes),
                "numberMisscheduled": misscheduled,
                "numberReady": ready,
                "updatedNumberScheduled": updated,
                "numberAvailable": available,
                "observedGeneration": ds["metadata"].get("generation", 1),
            }
        )
        unavailable = len(desired_nodes) - available
        if unavailable > 0:
            status["numberUnavailable"] = unavailable
        else:
            status.pop("numberUnavailable", None)
        if min_ready > 0 and ready > available:
            self._due.schedule(podutil.key_of(ds), now + min_ready)
        return self._set_status(self._kinds.daemonset, ds, status)


def _revision_template(revision: Obj) -> Obj | None:
    template = copy.deepcopy(((revision.get("data") or {}).get("spec") or {}).get("template"))
    if isinstance(template, dict):
        template.pop("$patch", None)
    return template


def daemon_pod_tolerations(pod_spec: Obj) -> list[Obj]:
    tolerations = list(pod_spec.get("tolerations") or [])
    extra = list(DAEMON_POD_TOLERATIONS)
    if pod_spec.get("hostNetwork"):
        extra.append(_HOST_NETWORK_TOLERATION)
    for toleration in extra:
        if not any(
            t.get("key") == toleration["key"]
            and t.get("effect") == toleration["effect"]
            and t.get("operator") == "Exists"
            for t in tolerations
        ):
            tolerations.append(dict(toleration))
    return tolerations


def node_should_run_daemon(template_spec: Obj, tolerations: list[Obj], node: Obj) -> tuple[bool, bool]:
    """``NodeShouldRunDaemonPod``: (should run, should continue running).

    Node name and selector/affinity decide both; untolerated NoSchedule taints
    stop new daemon pods only, untolerated NoExecute taints stop both.
    """
    wanted_name = template_spec.get("nodeName")
    if wanted_name and wanted_name != node["metadata"]["name"]:
        return (False, False)
    if not podutil.pod_fits_node_labels(template_spec, node):
        return (False, False)
    taints = podutil.node_taints(node)
    if (node.get("spec") or {}).get("unschedulable"):
        taints.append({"key": podutil.UNSCHEDULABLE_TAINT, "effect": "NoSchedule"})
    if podutil.untolerated_taint(taints, tolerations, effects=frozenset({"NoExecute"})) is not None:
        return (False, False)
    return (podutil.untolerated_taint(taints, tolerations) is None, True)


# -- ReplicaSet --------------------------------------------------------------------------------------------
class ReplicaSetController(_Controller):
    name = "replicaset-controller"
    component = "replicaset-controller"

    def _primary(self) -> ResourceType:
        return self._kinds.replicaset

    async def sync(self, key: ObjKey, rs: Obj | None, now: float) -> int:
        if rs is None or podutil.is_terminating(rs):
            return 0
        spec = rs.get("spec") or {}
        wanted = int(spec.get("replicas", 1))
        pods = self._index.pods_of(rs["metadata"]["uid"])
        active = [p for p in pods if not podutil.is_terminating(p) and not podutil.is_terminal(p)]
        writes = 0
        if len(active) < wanted:
            template = spec.get("template") or {}
            for _ in range(wanted - len(active)):
                pod = self._pod_from_template(rs, template, generate_name=f"{rs['metadata']['name']}-", extra_labels={})
                created = self._create_pod(rs, pod, now)
                if created is None:
                    break
                writes += 1
                active.append(created)
                self._event(rs, "SuccessfulCreate", f"Created pod: {created['metadata']['name']}")
        elif len(active) > wanted:
            for pod in sorted(active, key=_deletion_rank)[: len(active) - wanted]:
                if self._delete(self._kinds.pod, pod) is not None:
                    writes += 1
                    active.remove(pod)
                    self._event(rs, "SuccessfulDelete", f"Deleted pod: {pod['metadata']['name']}")
        min_ready = self._min_ready(rs)
        ready = sum(1 for p in active if podutil.is_pod_ready(p))
        available = sum(1 for p in active if self._available(p, min_ready, now))
        status: Obj = {
            "replicas": len(active),
            "fullyLabeledReplicas": len(active),
            "observedGeneration": rs["metadata"].get("generation", 1),
        }
        if ready:
            status["readyReplicas"] = ready
        if available:
            status["availableReplicas"] = available
        if min_ready > 0 and ready > available:
            self._due.schedule(key, now + min_ready)
        # ReplicaFailure while pods cannot be created (the ReplicaSet controller's
        # manageReplicas error), kept with its transition time, dropped once they can.
        previous = next(
            (c for c in (rs.get("status") or {}).get("conditions") or () if c.get("type") == "ReplicaFailure"), None
        )
        refusal = self._create_errors.get(key)
        if refusal is not None and len(active) < wanted:
            status["conditions"] = [
                {
                    "type": "ReplicaFailure",
                    "status": "True",
                    "lastTransitionTime": previous["lastTransitionTime"] if previous else self.clock.iso(now),
                    "reason": "FailedCreate",
                    "message": refusal,
                }
            ]
        else:
            self._create_errors.pop(key, None)
        return writes + self._set_status(self._kinds.replicaset, rs, status)


def controller_scale(store: Store, kinds: Kinds) -> Callable[[str, Obj], tuple[str, int] | None]:
    """``scale_of`` for ``disruption.expected_from_controllers``: the disruption controller's finders.

    A ReplicaSet's scale is its Deployment's when a Deployment controls it; a
    StatefulSet, ReplicaSet or Deployment answers its own ``spec.replicas``;
    other kinds (a DaemonSet has no scale) are unknown.
    """
    by_kind = {"StatefulSet": kinds.statefulset, "ReplicaSet": kinds.replicaset, "Deployment": kinds.deployment}

    def scale_of(namespace: str, ref: Obj) -> tuple[str, int] | None:
        rtype = by_kind.get(ref.get("kind", ""))
        owner = None if rtype is None else store.try_get(rtype, namespace, ref.get("name", ""))
        if owner is None or owner["metadata"].get("uid") != ref.get("uid"):
            return None
        parent = podutil.controller_of(owner)
        if ref.get("kind") == "ReplicaSet" and parent is not None and parent.get("kind") == "Deployment":
            return scale_of(namespace, parent)
        return owner["metadata"]["uid"], int((owner.get("spec") or {}).get("replicas", 1))

    return scale_of


def _deletion_rank(pod: Obj) -> tuple[int, int, int, str]:
    """Which pods a ReplicaSet deletes first (ActivePods ordering): unscheduled, pending, not ready, newest."""
    scheduled = 1 if (pod.get("spec") or {}).get("nodeName") else 0
    phase_rank = {"Pending": 0, "Unknown": 1, "Running": 2}.get(podutil.phase_of(pod), 2)
    ready = 1 if podutil.is_pod_ready(pod) else 0
    created = pod["metadata"].get("creationTimestamp", "")
    # Newer first: invert the timestamp ordering by sorting on its negation.
    inverted = "".join(chr(0x10FFFF - ord(c)) for c in created)
    return (scheduled, phase_rank, ready, inverted)


# -- Deployment ---------------------------------------------------------------------------------------------
class DeploymentController(_Controller):
    name = "deployment-controller"
    component = "deployment-controller"

    def _primary(self) -> ResourceType:
        return self._kinds.deployment

    def _watched(self) -> Iterable[ResourceType]:
        return (self._kinds.deployment, self._kinds.replicaset, self._kinds.pod)

    def _on_other_event(self, event: WatchEvent) -> bool:
        if event.rtype.key != self._kinds.pod.key:
            return super()._on_other_event(event)
        # A Recreate rollout waits until every old pod is gone, and the last pod's
        # removal changes no ReplicaSet: upstream's deletePod handler enqueues the
        # Deployment of a deleted pod when its strategy is Recreate. Only then.
        if event.type != "DELETED":
            return False
        owner = podutil.controller_of(event.obj)
        if owner is None or owner.get("kind") != "ReplicaSet":
            return False
        namespace = event.obj["metadata"].get("namespace", "")
        replicaset = self.store.try_get(self._kinds.replicaset, namespace, owner["name"])
        deployment_ref = podutil.controller_of(replicaset) if replicaset is not None else None
        if deployment_ref is None or deployment_ref.get("kind") != "Deployment":
            return False
        deployment = self.store.try_get(self._kinds.deployment, namespace, deployment_ref["name"])
        if deployment is None or ((deployment.get("spec") or {}).get("strategy") or {}).get("type") != "Recreate":
            return False
        self._dirty.add((namespace, deployment_ref["name"]))
        return True

    async def sync(self, key: ObjKey, deployment: Obj | None, now: float) -> int:
        if deployment is None or podutil.is_terminating(deployment):
            return 0
        meta = deployment["metadata"]
        spec = deployment.get("spec") or {}
        replicas = int(spec.get("replicas", 1))
        template = spec.get("template") or {}
        pod_hash = template_hash(template, (deployment.get("status") or {}).get("collisionCount"))
        owned = [
            rs
            for rs in (
                self.store.try_get(self._kinds.replicaset, k[2], k[3])
                for k in list(self._index.dependents.get(meta["uid"], ()))
                if k[:2] == self._kinds.replicaset.key
            )
            if rs is not None and not podutil.is_terminating(rs)
        ]
        # The new ReplicaSet is the one whose template equals ours apart from the hash
        # label (FindNewReplicaSet / EqualIgnoreHash), whatever hash named it.
        new_rs = next((rs for rs in owned if _same_template_ignoring_hash(rs, template)), None)
        old_sets = [rs for rs in owned if rs is not new_rs]
        writes = 0
        revision = max((_revision_of(rs) for rs in owned), default=0)
        strategy = spec.get("strategy") or {}
        rolling = strategy.get("type", "RollingUpdate") == "RollingUpdate"
        max_surge = podutil.scaled_value(
            (strategy.get("rollingUpdate") or {}).get("maxSurge"), replicas, round_up=True, default="25%"
        )
        max_unavailable = podutil.scaled_value(
            (strategy.get("rollingUpdate") or {}).get("maxUnavailable"), replicas, round_up=False, default="25%"
        )
        if max_surge == 0 and max_unavailable == 0:
            max_unavailable = 1
        if not rolling:
            max_surge, max_unavailable = 0, replicas
        if spec.get("paused"):
            return writes + self._update_status(
                deployment, new_rs, owned=owned, replicas=replicas, max_unavailable=max_unavailable, now=now
            )
        if new_rs is None:
            new_revision = revision + 1
            if rolling:
                total = sum(_spec_replicas(rs) for rs in old_sets)
                initial = max(0, min(replicas, replicas + max_surge - total))
            else:
                initial = 0 if any(_spec_replicas(rs) or _status_replicas(rs) for rs in old_sets) else replicas
            new_rs = self._create_replicaset(
                deployment, template, pod_hash=pod_hash, replicas=initial, revision=new_revision, max_surge=max_surge
            )
            if new_rs is None:
                return writes
            writes += 1
            owned.append(new_rs)
            self._event(
                deployment,
                "ScalingReplicaSet",
                f"Scaled up replica set {new_rs['metadata']['name']} from 0 to {initial}",
            )
        elif _revision_of(new_rs) < revision:
            writes += self._scale(
                new_rs, _spec_replicas(new_rs), annotations={DEPLOYMENT_REVISION_ANNOTATION: str(revision + 1)}
            )
        if rolling:
            writes += self._rolling(
                deployment,
                new_rs,
                old_sets=old_sets,
                replicas=replicas,
                max_surge=max_surge,
                max_unavailable=max_unavailable,
            )
        else:
            for rs in old_sets:
                if _spec_replicas(rs):
                    writes += self._scale_logged(deployment, rs, 0)
            old_pods = sum(len(self._index.pods_of(rs["metadata"]["uid"])) for rs in old_sets)
            if old_pods == 0 and _spec_replicas(new_rs) != replicas:
                writes += self._scale_logged(deployment, new_rs, replicas)
        fresh = self.store.try_get(self._kinds.replicaset, new_rs["metadata"]["namespace"], new_rs["metadata"]["name"])
        new_rs = fresh or new_rs
        if (meta.get("annotations") or {}).get(DEPLOYMENT_REVISION_ANNOTATION) != str(_revision_of(new_rs)):
            rev_text = str(_revision_of(new_rs))

            def annotate(obj: Obj) -> None:
                obj["metadata"].setdefault("annotations", {})[DEPLOYMENT_REVISION_ANNOTATION] = rev_text

            if self._write(
                lambda: self.store.mutate(self._kinds.deployment, meta["namespace"], meta["name"], annotate)
            ):
                writes += 1
            deployment = self.store.try_get(self._kinds.deployment, meta["namespace"], meta["name"]) or deployment
        owned = [
            self.store.try_get(self._kinds.replicaset, rs["metadata"]["namespace"], rs["metadata"]["name"]) or rs
            for rs in owned
        ]
        writes += self._cleanup_history(deployment, new_rs, owned)
        return writes + self._update_status(
            deployment, new_rs, owned=owned, replicas=replicas, max_unavailable=max_unavailable, now=now
        )

    def _rolling(
        self, deployment: Obj, new_rs: Obj, *, old_sets: list[Obj], replicas: int, max_surge: int, max_unavailable: int
    ) -> int:
        writes = 0
        all_sets = [new_rs, *old_sets]
        total = sum(_spec_replicas(rs) for rs in all_sets)
        new_replicas = _spec_replicas(new_rs)
        if new_replicas < replicas:
            target = min(replicas, new_replicas + max(0, replicas + max_surge - total))
            if target != new_replicas:
                writes += self._scale_logged(deployment, new_rs, target)
                total += target - new_replicas
                new_replicas = target
        elif new_replicas > replicas:
            writes += self._scale_logged(deployment, new_rs, replicas)
            total -= new_replicas - replicas
            new_replicas = replicas
        # Scale old sets down as far as availability allows (reconcileOldReplicaSets).
        min_available = replicas - max_unavailable
        new_unavailable = new_replicas - _available_replicas(new_rs)
        budget = total - min_available - new_unavailable
        for rs in sorted(old_sets, key=lambda r: r["metadata"].get("creationTimestamp", "")):
            current = _spec_replicas(rs)
            if current == 0:
                continue
            # Replicas that are not available anyway can always go (cleanupUnhealthyReplicas).
            unhealthy = max(0, current - _available_replicas(rs))
            reduce_by = min(current, unhealthy + max(0, budget))
            if reduce_by <= 0:
                continue
            budget -= max(0, reduce_by - unhealthy)
            writes += self._scale_logged(deployment, rs, current - reduce_by)
        return writes

    def _create_replicaset(
        self, deployment: Obj, template: Obj, *, pod_hash: str, replicas: int, revision: int, max_surge: int
    ) -> Obj | None:
        meta = deployment["metadata"]
        rs_template = copy.deepcopy(template)
        labels = rs_template.setdefault("metadata", {}).setdefault("labels", {})
        labels[POD_TEMPLATE_HASH_LABEL] = pod_hash
        selector = copy.deepcopy((deployment.get("spec") or {}).get("selector") or {})
        selector.setdefault("matchLabels", {})[POD_TEMPLATE_HASH_LABEL] = pod_hash
        desired = int((deployment.get("spec") or {}).get("replicas", 1))
        rs = {
            "metadata": {
                "name": f"{meta['name']}-{pod_hash}",
                "namespace": meta["namespace"],
                "labels": dict(labels),
                "annotations": {
                    DEPLOYMENT_REVISION_ANNOTATION: str(revision),
                    "deployment.kubernetes.io/desired-replicas": str(desired),
                    "deployment.kubernetes.io/max-replicas": str(desired + max_surge),
                },
                "ownerReferences": [podutil.owner_reference(deployment)],
            },
            "spec": {
                "replicas": replicas,
                "minReadySeconds": (deployment.get("spec") or {}).get("minReadySeconds", 0),
                "selector": selector,
                "template": rs_template,
            },
        }
        return self._create(self._kinds.replicaset, rs, meta["namespace"])

    def _scale_logged(self, deployment: Obj, rs: Obj, replicas: int) -> int:
        current = _spec_replicas(rs)
        written = self._scale(rs, replicas)
        if written:
            direction = "up" if replicas > current else "down"
            self._event(
                deployment,
                "ScalingReplicaSet",
                f"Scaled {direction} replica set {rs['metadata']['name']} from {current} to {replicas}",
            )
        return written

    def _scale(self, rs: Obj, replicas: int, *, annotations: dict[str, str] | None = None) -> int:
        meta = rs["metadata"]

        def change(obj: Obj) -> None:
            obj.setdefault("spec", {})["replicas"] = replicas
            if annotations:
                obj["metadata"].setdefault("annotations", {}).update(annotations)

        updated = self._write(
            lambda: self.store.mutate(self._kinds.replicaset, meta["namespace"], meta["name"], change)
        )
        return 0 if updated is None else 1

    def _cleanup_history(self, deployment: Obj, new_rs: Obj, owned: list[Obj]) -> int:
        limit = int((deployment.get("spec") or {}).get("revisionHistoryLimit", 10))
        idle = sorted(
            (
                rs
                for rs in owned
                if rs is not new_rs
                and rs["metadata"]["name"] != new_rs["metadata"]["name"]
                and _spec_replicas(rs) == 0
                and _status_replicas(rs) == 0
            ),
            key=_revision_of,
        )
        writes = 0
        for rs in idle[: max(0, len(idle) - limit)]:
            writes += 1 if self._delete(self._kinds.replicaset, rs) else 0
        return writes

    def _update_status(
        self, deployment: Obj, new_rs: Obj | None, *, owned: list[Obj], replicas: int, max_unavailable: int, now: float
    ) -> int:
        stamp = self.clock.iso(now)
        total = sum(_status_replicas(rs) for rs in owned)
        spec_total = sum(_spec_replicas(rs) for rs in owned)
        ready = sum(int((rs.get("status") or {}).get("readyReplicas") or 0) for rs in owned)
        available = sum(_available_replicas(rs) for rs in owned)
        updated = _status_replicas(new_rs) if new_rs is not None else 0
        status: Obj = {
            "observedGeneration": deployment["metadata"].get("generation", 1),
            "replicas": total,
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": available,
        }
        status = {k: v for k, v in status.items() if v or k == "observedGeneration"}
        unavailable = max(0, spec_total - available)
        if unavailable:
            status["unavailableReplicas"] = unavailable
        previous = {c.get("type"): c for c in (deployment.get("status") or {}).get("conditions") or ()}
        is_available = available >= replicas - max_unavailable
        name = new_rs["metadata"]["name"] if new_rs else deployment["metadata"]["name"]
        complete = new_rs is not None and updated == replicas and available == replicas and total == replicas
        conditions = [
            _deployment_condition(
                previous.get("Available"),
                kind="Available",
                value=is_available,
                reason="MinimumReplicasAvailable" if is_available else "MinimumReplicasUnavailable",
                message=(
                    "Deployment has minimum availability."
                    if is_available
                    else "Deployment does not have minimum availability."
                ),
                stamp=stamp,
            ),
            _deployment_condition(
                previous.get("Progressing"),
                kind="Progressing",
                value=True,
                reason="NewReplicaSetAvailable" if complete else "ReplicaSetUpdated",
                message=(
                    f'ReplicaSet "{name}" has successfully progressed.'
                    if complete
                    else f'ReplicaSet "{name}" is progressing.'
                ),
                stamp=stamp,
            ),
        ]
        failure = next(
            (
                c
                for rs in owned
                for c in (rs.get("status") or {}).get("conditions") or ()
                if c.get("type") == "ReplicaFailure" and c.get("status") == "True"
            ),
            None,
        )
        if failure is not None:
            # getReplicaFailures: the Deployment shows why its ReplicaSet cannot make pods.
            conditions.append(
                _deployment_condition(
                    previous.get("ReplicaFailure"),
                    kind="ReplicaFailure",
                    value=True,
                    reason=failure.get("reason", "FailedCreate"),
                    message=failure.get("message", ""),
                    stamp=stamp,
                )
            )
        status["conditions"] = conditions
        return self._set_status(self._kinds.deployment, deployment, status)


def _deployment_condition(
    previous: Obj | None, *, kind: str, value: bool, reason: str, message: str, stamp: str
) -> Obj:
    text = "True" if value else "False"
    same = previous is not None and previous.get("status") == text
    unchanged = (
        same and previous is not None and previous.get("reason") == reason and previous.get("message") == message
    )
    return {
        "type": kind,
        "status": text,
        "lastUpdateTime": previous["lastUpdateTime"] if unchanged and previous else stamp,
        "lastTransitionTime": previous["lastTransitionTime"] if same and previous else stamp,
        "reason": reason,
        "message": message,
    }


def _same_template_ignoring_hash(rs: Obj, template: Obj) -> bool:
    theirs = copy.deepcopy((rs.get("spec") or {}).get("template") or {})
    labels = (theirs.get("metadata") or {}).get("labels")
    if labels:
        labels.pop(POD_TEMPLATE_HASH_LABEL, None)
    ours = copy.deepcopy(template)
    for candidate in (theirs, ours):
        meta = candidate.get("metadata")
        if meta is not None and not meta.get("labels"):
            meta.pop("labels", None)
        if meta is not None and not meta:
            candidate.pop("metadata")
    return theirs == ours


def _spec_replicas(rs: Obj) -> int:
    return int((rs.get("spec") or {}).get("replicas", 1))


def _status_replicas(rs: Obj | None) -> int:
    return int(((rs or {}).get("status") or {}).get("replicas") or 0)


def _available_replicas(rs: Obj) -> int:
    return int((rs.get("status") or {}).get("availableReplicas") or 0)


def _revision_of(rs: Obj) -> int:
    try:
        return int((rs["metadata"].get("annotations") or {}).get(DEPLOYMENT_REVISION_ANNOTATION, 0))
    except ValueError:
        return 0


# -- Job ---------------------------------------------------------------------------------------------------
class JobController(_Controller):
    name = "job-controller"
    component = "job-controller"
    backoff_initial = 10.0
    backoff_max = 360.0

    def _primary(self) -> ResourceType:
        return self._kinds.job

    async def sync(self, key: ObjKey, job: Obj | None, now: float) -> int:
        if job is None or podutil.is_terminating(job):
            return 0
        meta = job["metadata"]
        spec = job.get("spec") or {}
        status = copy.deepcopy(job.get("status") or {})
        stamp = self.clock.iso(now)
        if _finished(job):
            ttl = spec.get("ttlSecondsAfterFinished")
            if ttl is not None:
                done_at = parse_rfc3339(status.get("completionTime") or _finish_time(job) or stamp)
                if now >= done_at + float(ttl):
                    # The TTL-after-finished controller deletes in the foreground (pkg/controller/ttlafterfinished).
                    return 1 if self._delete(self._kinds.job, job, propagation_policy="Foreground") else 0
                self._due.schedule(key, done_at + float(ttl))
            return 0
        if spec.get("suspend"):
            return 0
        pods = self._index.pods_of(meta["uid"])
        live = [p for p in pods if not podutil.is_terminating(p)]
        active = [p for p in live if not podutil.is_terminal(p)]
        succeeded = sum(1 for p in live if podutil.phase_of(p) == "Succeeded")
        failed_pods = [p for p in live if podutil.phase_of(p) == "Failed"]
        restarts = 0
        if (spec.get("template", {}).get("spec") or {}).get("restartPolicy") == "OnFailure":
            restarts = sum(
                int(cs.get("restartCount") or 0)
                for p in active
                for cs in (p.get("status") or {}).get("containerStatuses") or ()
            )
        # Failed pods stay (nothing prunes them here), but keep the count if someone deleted them.
        failed = max(len(failed_pods), int(status.get("failed", 0)))
        completions = spec.get("completions")
        parallelism = int(spec.get("parallelism", 1))
        backoff_limit = int(spec.get("backoffLimit", 6))
        status.setdefault("startTime", stamp)
        writes = 0
        outcome: tuple[str, str, str] | None = None
        deadline = spec.get("activeDeadlineSeconds")
        if failed + restarts > backoff_limit:
            outcome = ("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        elif deadline is not None and now >= parse_rfc3339(status["startTime"]) + float(deadline):
            outcome = ("Failed", "DeadlineExceeded", "Job was active longer than specified deadline")
        elif (completions is not None and succeeded >= int(completions)) or (
            completions is None and succeeded > 0 and not active
        ):
            outcome = ("Complete", "", "")
        if outcome is not None:
            if outcome[0] == "Failed":
                for pod in active:
                    writes += 1 if self._delete(self._kinds.pod, pod) else 0
                active = []
            condition: Obj = {
                "type": outcome[0],
                "status": "True",
                "lastProbeTime": stamp,
                "lastTransitionTime": stamp,
            }
            if outcome[1]:
                condition["reason"] = outcome[1]
                condition["message"] = outcome[2]
            status["conditions"] = [*(status.get("conditions") or []), condition]
            if outcome[0] == "Complete":
                status["completionTime"] = stamp
                self._event(job, "Completed", "Job completed")
            else:
                self._event(job, outcome[1], outcome[2], event_type="Warning")
            if spec.get("ttlSecondsAfterFinished") is not None:
                self._due.schedule(key, now + float(spec["ttlSecondsAfterFinished"]))
        else:
            remaining = parallelism if completions is None else min(parallelism, int(completions) - succeeded)
            missing = remaining - len(active)
            if missing > 0:
                ready_at = self._retry_time(failed_pods, failed)
                if ready_at is not None and ready_at > now:
                    self._due.schedule(key, ready_at)
                else:
                    for _ in range(missing):
                        writes += self._create_job_pod(job)
            if deadline is not None:
                self._due.schedule_earliest(key, parse_rfc3339(status["startTime"]) + float(deadline))
        status["active"] = len(active)
        status["succeeded"] = succeeded
        status["failed"] = failed
        status["ready"] = sum(1 for p in active if podutil.is_pod_ready(p))
        status["terminating"] = sum(1 for p in pods if podutil.is_terminating(p))
        status["uncountedTerminatedPods"] = {}
        for field_name in ("active", "succeeded", "failed"):
            if not status[field_name]:
                status.pop(field_name)
        return writes + self._set_status(self._kinds.job, job, status)

    def _retry_time(self, failed_pods: list[Obj], failures: int) -> float | None:
        """Pods of a failing Job are recreated after 10 s, 20 s, 40 s... (capped at 6 min)."""
        if not failures or not failed_pods:
            return None
        finished = [
            parse_rfc3339(t)
            for p in failed_pods
            for cs in (p.get("status") or {}).get("containerStatuses") or ()
            if (t := (cs.get("state") or {}).get("terminated", {}).get("finishedAt"))
        ]
        if not finished:
            return None
        delay = min(self.backoff_initial * 2 ** (failures - 1), self.backoff_max)
        return max(finished) + delay

    def _create_job_pod(self, job: Obj) -> int:
        meta = job["metadata"]
        labels = {
            "batch.kubernetes.io/controller-uid": meta["uid"],
            "batch.kubernetes.io/job-name": meta["name"],
            "controller-uid": meta["uid"],
            "job-name": meta["name"],
        }
        pod = self._pod_from_template(
            job, (job.get("spec") or {}).get("template") or {}, generate_name=f"{meta['name']}-", extra_labels=labels
        )
        created = self._create_pod(job, pod, self.clock.now())
        if created is None:
            return 0
        self._event(job, "SuccessfulCreate", f"Created pod: {created['metadata']['name']}")
        return 1


def _finished(job: Obj) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or ()
    )


def _finish_time(job: Obj) -> str | None:
    for cond in (job.get("status") or {}).get("conditions") or ():
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return cond.get("lastTransitionTime")
    return None


# -- PodDisruptionBudget status ---------------------------------------------------------------------------------
class PdbStatusController(_Controller):
    name = "disruption-controller"
    component = "controllermanager"

    def _primary(self) -> ResourceType:
        return self._kinds.pdb

    def _on_other_event(self, event: WatchEvent) -> bool:
        namespace = event.obj["metadata"].get("namespace", "")
        marked = False
        for pdb_key in self._pdbs_by_namespace.get(namespace, ()):
            self._dirty.add(pdb_key)
            marked = True
        return marked

    def attach(self, store: Store, clock: SimClock) -> None:
        self._pdbs_by_namespace: dict[str, set[ObjKey]] = {}
        for pdb in store.list(self._kinds.pdb):
            self._pdbs_by_namespace.setdefault(pdb["metadata"]["namespace"], set()).add(podutil.key_of(pdb))
        super().attach(store, clock)

    def _on_event(self, event: WatchEvent) -> bool:
        if event.rtype.key == self._kinds.pdb.key:
            key = podutil.key_of(event.obj)
            bucket = self._pdbs_by_namespace.setdefault(key[0], set())
            if event.type == "DELETED":
                bucket.discard(key)
            else:
                bucket.add(key)
        return super()._on_event(event)

    async def sync(self, key: ObjKey, pdb: Obj | None, now: float) -> int:
        if pdb is None:
            return 0
        from ..machinery import disruption  # noqa: PLC0415 - the API layer's module; one import site

        pods = self._index.pods_in(key[0])
        expected = disruption.expected_from_controllers(pdb, pods, controller_scale(self.store, self._kinds))
        status = disruption.pdb_status(pdb, pods, expected_pods=expected, now=self.clock.iso(now))
        if (pdb["metadata"].get("annotations") or {}).get(NEVER_ALLOW_ANNOTATION) == "true":
            status["disruptionsAllowed"] = 0
            for cond in status.get("conditions") or ():
                if cond.get("type") == "DisruptionAllowed":
                    previous = next(
                        (
                            c
                            for c in (pdb.get("status") or {}).get("conditions") or ()
                            if c.get("type") == "DisruptionAllowed"
                        ),
                        None,
                    )
                    if cond.get("status") != "False":
                        cond["lastTransitionTime"] = (
                            previous.get("lastTransitionTime")
                            if previous and previous.get("status") == "False"
                            else self.clock.iso(now)
                        )
                    cond.update({"status": "False", "reason": "InsufficientPods"})
        if "disruptedPods" in (pdb.get("status") or {}):
            status["disruptedPods"] = pdb["status"]["disruptedPods"]
        return self._set_status(self._kinds.pdb, pdb, status)
