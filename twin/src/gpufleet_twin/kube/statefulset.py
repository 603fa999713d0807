"""kube-controller-manager's StatefulSet controller (upstream ``pkg/controller/statefulset``), simulated.

What ``stateful_set_control.go`` does, per StatefulSet:

- Revisions: every template is a ControllerRevision ``<set>-<hash>`` (data
  ``{"spec": {"template": ..., "$patch": "replace"}}``, an increasing
  ``revision``); ``status.updateRevision`` names the current template's,
  ``status.currentRevision`` the one the set rolled out last (it moves to the
  update revision once every pod runs it and is Ready, RollingUpdate only).
- Pods ``<set>-<ordinal>`` (``spec.ordinals.start`` first), owned with
  ``controller``/``blockOwnerDeletion``, labelled ``controller-revision-hash``
  (the revision's name), ``statefulset.kubernetes.io/pod-name`` and
  ``apps.kubernetes.io/pod-index``, with ``hostname`` the pod name and
  ``subdomain`` the ``serviceName``.  A missing pod below the partition is
  made from the current revision, others from the update revision.
- ``OrderedReady``: one pod at a time, the next only once every lower one is
  Running and Ready (and available after ``minReadySeconds``); scale down
  from the highest ordinal, one at a time, only while the rest are healthy.
  ``Parallel``: all missing pods at once, condemned ones deleted at once.
  A Failed or Succeeded pod is deleted and made again.
- ``RollingUpdate``: the highest ordinal at or above ``partition`` that does
  not run the update revision is deleted (and made again at it), one at a
  time, waiting for each to be Running and Ready; ``OnDelete`` replaces a pod
  only when someone deletes it.
- ``volumeClaimTemplates`` are data: each pod gets a volume
  ``<template>`` naming the claim ``<template>-<set>-<ordinal>`` as upstream,
  but no PersistentVolumeClaim objects are made (the twin serves none).
- status: ``replicas``, ``readyReplicas``, ``currentReplicas``,
  ``updatedReplicas``, ``availableReplicas``, ``currentRevision``,
  ``updateRevision``, ``observedGeneration``, ``collisionCount``.

A pod the API refuses (a missing ServiceAccount) is a ``FailedCreate``
Warning Event, "create Pod <pod> in StatefulSet <set> failed error: ...",
and the set is tried again later, as upstream requeues it.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Any

from ..machinery import errors
from ..machinery.registry import ResourceType
from . import podutil
from .workloads import REVISION_HASH_LABEL, _Controller, _revision_template, template_hash

log = logging.getLogger(__name__)

Obj = dict[str, Any]
ObjKey = tuple[str, str]

POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
RETRY_INITIAL = 1.0
RETRY_MAX = 300.0


@dataclass(frozen=True)
class _Revisions:
    current: Obj
    update: Obj
    collisions: int


class StatefulSetController(_Controller):
    name = "statefulset-controller"
    component = "statefulset-controller"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._failures: dict[ObjKey, int] = {}

    def _primary(self) -> ResourceType:
        return self._kinds.statefulset

    async def sync(self, key: ObjKey, sts: Obj | None, now: float) -> int:
        if sts is None or podutil.is_terminating(sts):
            self._failures.pop(key, None)
            return 0
        meta = sts["metadata"]
        spec = sts.get("spec") or {}
        status = sts.get("status") or {}
        writes, revisions = self._revisions(sts)
        if revisions is None:
            self._due.schedule(key, now + RETRY_INITIAL)
            return writes
        current_rev, update_rev = revisions.current, revisions.update
        replicas = int(spec.get("replicas", 1))
        start = int((spec.get("ordinals") or {}).get("start") or 0)
        monotonic = spec.get("podManagementPolicy", "OrderedReady") != "Parallel"
        min_ready = self._min_ready(sts)
        strategy = spec.get("updateStrategy") or {}
        rolling = strategy.get("type", "RollingUpdate") == "RollingUpdate"
        partition = int((strategy.get("rollingUpdate") or {}).get("partition") or 0)
        slots: dict[int, Obj | None] = dict.fromkeys(range(start, start + replicas))
        condemned: list[tuple[int, Obj]] = []
        for pod in self._index.pods_of(meta["uid"]):
            ordinal = _ordinal_of(meta["name"], pod["metadata"]["name"])
            if ordinal is None:
                continue
            if ordinal in slots:
                slots[ordinal] = pod
            else:
                condemned.append((ordinal, pod))
        condemned.sort(key=lambda item: item[0])
        writes_pass, stop, failed = self._replicas_pass(
            sts,
            slots,
            condemned,
            current_rev=current_rev,
            update_rev=update_rev,
            monotonic=monotonic,
            partition=partition if rolling else None,
            start=start,
            min_ready=min_ready,
            now=now,
        )
        writes += writes_pass
        if rolling and not stop:
            writes += self._roll(sts, slots, update_rev=update_rev, partition=partition, start=start)
        if failed:
            count = self._failures.get(key, 0) + 1
            self._failures[key] = count
            self._due.schedule(key, now + min(RETRY_INITIAL * 2 ** (count - 1), RETRY_MAX))
        else:
            self._failures.pop(key, None)
        return writes + self._update_status(
            sts,
            status,
            current_rev=current_rev,
            update_rev=update_rev,
            collisions=revisions.collisions,
            rolling=rolling,
            min_ready=min_ready,
            now=now,
        )

    # -- pods ------------------------------------------------------------------------------------------------
    def _replicas_pass(
        self,
        sts: Obj,
        slots: dict[int, Obj | None],
        condemned: list[tuple[int, Obj]],
        *,
        current_rev: Obj,
        update_rev: Obj,
        monotonic: bool,
        partition: int | None,
        start: int,
        min_ready: float,
        now: float,
    ) -> tuple[int, bool, bool]:
        """Create, replace and delete pods (processReplica, then the condemned loop of updateStatefulSet).

        Returns (writes, stop here: no rolling update this pass, a pod could not be created).
        """
        writes = 0
        first_unhealthy: Obj | None = None
        for ordinal in sorted(slots):
            pod = slots[ordinal]
            if pod is not None and podutil.is_terminal(pod):
                # A Failed or Succeeded pod is deleted; the next pass makes it again.
                if not podutil.is_terminating(pod) and self._delete(self._kinds.pod, pod) is not None:
                    writes += 1
                    self._deleted_event(sts, pod)
                return writes, True, False
            if pod is None:
                # newVersionedStatefulSetPod: below the partition from the current revision.
                below = partition is not None and ordinal - start < partition
                created = self._create_ordinal_pod(sts, ordinal, current_rev if below else update_rev)
                if created is None:
                    return writes, True, True
                slots[ordinal] = created
                writes += 1
                if monotonic:
                    return writes, True, False
                continue
            if podutil.is_terminating(pod):
                if monotonic:
                    return writes, True, False
                continue
            if not (_running_and_ready(pod) and self._available(pod, min_ready, now)):
                if first_unhealthy is None:
                    first_unhealthy = pod
                if min_ready > 0 and _running_and_ready(pod):
                    self._due.schedule(podutil.key_of(sts), now + min_ready)
                if monotonic:
                    return writes, True, False
        if first_unhealthy is None:
            first_unhealthy = next(
                (p for _, p in condemned if not (_running_and_ready(p) and not podutil.is_terminating(p))), None
            )
        # Scale down from the highest ordinal; in OrderedReady one at a time, and an unhealthy pod
        # only if it is the first unhealthy one.
        for _, pod in reversed(condemned):
            if podutil.is_terminating(pod):
                if monotonic:
                    return writes, True, False
                continue
            healthy = _running_and_ready(pod) and self._available(pod, min_ready, now)
            if monotonic and not healthy and pod is not first_unhealthy:
                return writes, True, False
            if self._delete(self._kinds.pod, pod) is not None:
                writes += 1
                self._deleted_event(sts, pod)
            if monotonic:
                return writes, True, False
        return writes, False, False

    def _deleted_event(self, sts: Obj, pod: Obj) -> None:
        self._event(
            sts,
            "SuccessfulDelete",
            f"delete Pod {pod['metadata']['name']} in StatefulSet {sts['metadata']['name']} successful",
        )

    def _roll(self, sts: Obj, slots: dict[int, Obj | None], *, update_rev: Obj, partition: int, start: int) -> int:
        """RollingUpdate: replace the highest ordinal >= partition not at the update revision, one at a time."""
        update_name = update_rev["metadata"]["name"]
        for ordinal in sorted(slots, reverse=True):
            if ordinal - start < partition:
                break
            pod = slots[ordinal]
            if pod is None:
                return 0
            if _revision_of(pod) != update_name and not podutil.is_terminating(pod):
                if self._delete(self._kinds.pod, pod) is None:
                    return 0
                self._deleted_event(sts, pod)
                return 1
            if not _running_and_ready(pod) or podutil.is_terminating(pod):
                return 0
        return 0

    def _create_ordinal_pod(self, sts: Obj, ordinal: int, revision: Obj) -> Obj | None:
        meta = sts["metadata"]
        spec = sts.get("spec") or {}
        template = _revision_template(revision) or spec.get("template") or {}
        name = f"{meta['name']}-{ordinal}"
        pod = self._pod_from_template(
            sts,
            template,
            generate_name="",
            extra_labels={
                REVISION_HASH_LABEL: revision["metadata"]["name"],
                POD_NAME_LABEL: name,
                POD_INDEX_LABEL: str(ordinal),
            },
        )
        pod["metadata"].pop("generateName", None)
        pod["metadata"]["name"] = name
        pod_spec = pod["spec"]
        pod_spec["hostname"] = name
        if spec.get("serviceName"):
            pod_spec["subdomain"] = spec["serviceName"]
        volumes = [v for v in pod_spec.get("volumes") or () if isinstance(v, dict)]
        for claim in spec.get("volumeClaimTemplates") or ():
            claim_name = (claim.get("metadata") or {}).get("name")
            if not claim_name:
                continue
            volume = {
                "name": claim_name,
                "persistentVolumeClaim": {"claimName": f"{claim_name}-{meta['name']}-{ordinal}"},
            }
            volumes = [v for v in volumes if v.get("name") != claim_name] + [volume]
        if volumes:
            pod_spec["volumes"] = volumes
        try:
            self._own_write = True
            created = self.store.create(self._kinds.pod, pod, namespace=meta["namespace"])
        except errors.ApiError as problem:
            self._event(
                sts,
                "FailedCreate",
                f"create Pod {name} in StatefulSet {meta['name']} failed error: {problem.message}",
                event_type="Warning",
            )
            return None
        finally:
            self._own_write = False
        self._event(sts, "SuccessfulCreate", f"create Pod {name} in StatefulSet {meta['name']} successful")
        return created

    # -- revisions -----------------------------------------------------------------------------------------
    def _revisions(self, sts: Obj) -> tuple[int, _Revisions | None]:
        """(writes, current and update ControllerRevisions): the template's made if missing; None if it cannot be."""
        meta = sts["metadata"]
        spec = sts.get("spec") or {}
        status = sts.get("status") or {}
        template = spec.get("template") or {}
        revisions = [
            rev
            for rev in (
                self.store.try_get(self._kinds.controllerrevision, key[2], key[3])
                for key in list(self._index.dependents.get(meta["uid"], ()))
                if key[:2] == self._kinds.controllerrevision.key
            )
            if rev is not None
        ]
        highest = max((int(r.get("revision", 0)) for r in revisions), default=0)
        writes = 0
        update = next((r for r in revisions if _revision_template(r) == template), None)
        collisions = int(status.get("collisionCount") or 0)
        if update is None:
            # A name taken by a revision of another template: count the collision and hash again
            # (upstream's collisionCount), a bounded number of times.
            for _ in range(10):
                revision_hash = template_hash(template, collisions)
                name = f"{meta['name']}-{revision_hash}"
                if self.store.try_get(self._kinds.controllerrevision, meta["namespace"], name) is None:
                    break
                collisions += 1
            labels = dict((template.get("metadata") or {}).get("labels") or {})
            labels[REVISION_HASH_LABEL] = revision_hash
            patch_template = copy.deepcopy(template)
            patch_template["$patch"] = "replace"
            body: Obj = {
                "metadata": {
                    "name": name,
                    "namespace": meta["namespace"],
                    "labels": labels,
                    "ownerReferences": [podutil.owner_reference(sts)],
                },
                "data": {"spec": {"template": patch_template}},
                "revision": highest + 1,
            }
            created = self._create(self._kinds.controllerrevision, body, meta["namespace"])
            if created is None:
                return writes, None
            update = created
            writes += 1
            revisions.append(update)
        elif int(update.get("revision", 0)) < highest:
            # Back to an older template: its revision becomes the newest.
            name = update["metadata"]["name"]

            def bump(rev: Obj) -> None:
                rev["revision"] = highest + 1

            update = (
                self._write(lambda: self.store.mutate(self._kinds.controllerrevision, meta["namespace"], name, bump))
                or update
            )
            writes += 1
        current_name = status.get("currentRevision")
        current = next((r for r in revisions if r["metadata"]["name"] == current_name), None) or update
        writes += self._truncate_history(sts, revisions, keep={current["metadata"]["name"], update["metadata"]["name"]})
        return writes, _Revisions(current=current, update=update, collisions=collisions)

    def _truncate_history(self, sts: Obj, revisions: list[Obj], *, keep: set[str]) -> int:
        limit = int((sts.get("spec") or {}).get("revisionHistoryLimit", 10))
        in_use = {_revision_of(p) for p in self._index.pods_of(sts["metadata"]["uid"])}
        old = sorted(
            (r for r in revisions if r["metadata"]["name"] not in keep | in_use),
            key=lambda r: int(r.get("revision", 0)),
        )
        writes = 0
        for rev in old[: max(0, len(old) - limit)]:
            writes += 1 if self._delete(self._kinds.controllerrevision, rev) else 0
        return writes

    # -- status ------------------------------------------------------------------------------------------------
    def _update_status(
        self,
        sts: Obj,
        previous: Obj,
        *,
        current_rev: Obj,
        update_rev: Obj,
        collisions: int,
        rolling: bool,
        min_ready: float,
        now: float,
    ) -> int:
        current_name = current_rev["metadata"]["name"]
        update_name = update_rev["metadata"]["name"]
        counts = {"replicas": 0, "readyReplicas": 0, "availableReplicas": 0, "currentReplicas": 0, "updatedReplicas": 0}
        for pod in self._index.pods_of(sts["metadata"]["uid"]):
            if _ordinal_of(sts["metadata"]["name"], pod["metadata"]["name"]) is None:
                continue
            counts["replicas"] += 1
            if _running_and_ready(pod):
                counts["readyReplicas"] += 1
                if self._available(pod, min_ready, now):
                    counts["availableReplicas"] += 1
            if not podutil.is_terminating(pod):
                revision = _revision_of(pod)
                if revision == current_name:
                    counts["currentReplicas"] += 1
                if revision == update_name:
                    counts["updatedReplicas"] += 1
        if (
            rolling
            and counts["updatedReplicas"] == counts["replicas"]
            and counts["readyReplicas"] == counts["replicas"]
        ):
            # completeRollingUpdate: the update revision is now the current one.
            counts["currentReplicas"] = counts["updatedReplicas"]
            current_name = update_name
        status: Obj = {
            "observedGeneration": sts["metadata"].get("generation", 1),
            "replicas": counts["replicas"],
            "currentRevision": current_name,
            "updateRevision": update_name,
            "collisionCount": collisions,
            "availableReplicas": counts["availableReplicas"],
        }
        # omitempty int32 fields of StatefulSetStatus: readyReplicas, currentReplicas, updatedReplicas.
        for field_name in ("readyReplicas", "currentReplicas", "updatedReplicas"):
            if counts[field_name]:
                status[field_name] = counts[field_name]
        if previous.get("conditions"):
            status["conditions"] = previous["conditions"]
        return self._set_status(self._kinds.statefulset, sts, status)


def _ordinal_of(set_name: str, pod_name: str) -> int | None:
    prefix, _, suffix = pod_name.rpartition("-")
    if prefix != set_name or not suffix.isdigit():
        return None
    return int(suffix)


def _revision_of(pod: Obj) -> str | None:
    return (pod["metadata"].get("labels") or {}).get(REVISION_HASH_LABEL)


def _running_and_ready(pod: Obj) -> bool:
    return podutil.phase_of(pod) == "Running" and podutil.is_pod_ready(pod)
