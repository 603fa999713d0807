"""kube-controller-manager's garbage collector (and PodGC's orphaned-pod cleanup), simulated.

The API server only sets the collector's finalizers when an owner is deleted
(``store.gc_finalizers``: ``foregroundDeletion`` for Foreground, ``orphan``
for Orphan, none for Background); this controller does the rest, as
pkg/controller/garbagecollector/garbagecollector.go does:

- an owner that is gone (Background, or a finalizer done): every dependent
  whose owners are all gone or being deleted in the foreground is deleted
  (``attemptToDeleteItem``): in the foreground itself when it has
  dependents of its own and an owner waits for it, else with the policy its
  own collector finalizer names, else in the background.  A dependent that
  still has a live owner only loses the references to the gone ones;
- an owner with ``foregroundDeletion`` (``processDeletingDependentsItem``):
  its dependents are deleted as above, and the finalizer is removed (so the
  owner goes) once no dependent whose reference to it has
  ``blockOwnerDeletion: true`` exists any more, terminating ones included:
  a pod deleted gracefully blocks its owner until the kubelet removed it;
- an owner with ``orphan`` (``orphanDependents``): the reference to it is
  removed from every dependent, then the finalizer.

Its deletions carry the dependent's UID as a precondition and no grace
period, so pods still go through the kubelet's graceful termination.  Pods
bound to a Node that no longer exists are deleted at once (PodGC's
``gcOrphaned``).  Not modelled: the graph's "virtual" owners (a dependent
created with an owner that never existed is collected only once some owner
of it is deleted), the cycle detection between foreground owners, and the
owner's namespace/kind verification of references.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from ..machinery import errors
from ..machinery.clock import SimClock
from ..machinery.kinds import Kinds
from ..machinery.registry import ResourceType
from ..machinery.store import FOREGROUND_FINALIZER, ORPHAN_FINALIZER, Store, WatchEvent
from ..machinery.wake import Waker
from .index import ClusterIndex, ObjectKey

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class GarbageCollector:
    """Deletion propagation by ownerReferences; PodGC for pods of deleted nodes."""

    name = "garbage-collector"

    def __init__(self, *, kinds: Kinds, index: ClusterIndex) -> None:
        self._kinds = kinds
        self._index = index
        # Dependents to look at (the upstream attemptToDelete queue), by object key.
        self._attempt: set[ObjectKey] = set()
        # Owners being deleted with a collector finalizer (the upstream attemptToOrphan queue and the
        # owners in the deletingDependents state).
        self._foreground: set[ObjectKey] = set()
        self._orphaning: set[ObjectKey] = set()
        self._lost_nodes: set[str] = set()
        self._store: Store | None = None
        self._waker: Waker | None = None

    def attach(self, store: Store, clock: SimClock) -> None:
        self._store = store
        self._waker = Waker(store, clock, on_event=self._on_event)
        # Objects already being deleted when the collector starts (a restarted controller-manager resyncs).
        for rtype in store.registry.all():
            for obj in store.list(rtype):
                if obj["metadata"].get("deletionTimestamp"):
                    self._note_finalizers(rtype, obj)

    # -- watching ---------------------------------------------------------------------------------------
    def _on_event(self, event: WatchEvent) -> bool:
        meta = event.obj.get("metadata") or {}
        woke = False
        if event.type == "DELETED":
            uid = meta.get("uid")
            if uid in self._index.dependents:
                self._attempt.update(self._index.dependents[uid])
                woke = True
            if event.rtype.key == self._kinds.node.key:
                self._lost_nodes.add(meta["name"])
                woke = True
        elif meta.get("deletionTimestamp"):
            woke = self._note_finalizers(event.rtype, event.obj)
        old_refs = ((event.old or {}).get("metadata") or {}).get("ownerReferences")
        if self._foreground and (event.type == "DELETED" or meta.get("ownerReferences") or old_refs):
            # A dependent went or changed its references: an owner waiting for it may be free now.
            woke = True
        return woke

    def _note_finalizers(self, rtype: ResourceType, obj: Obj) -> bool:
        meta = obj["metadata"]
        finalizers = meta.get("finalizers") or ()
        key: ObjectKey = (rtype.group, rtype.plural, meta.get("namespace") or "", meta["name"])
        if FOREGROUND_FINALIZER in finalizers:
            if key not in self._foreground:
                self._foreground.add(key)
                # startsWaitingForDependentsDeleted: every dependent is attempted once.
                self._attempt.update(self._index.dependents.get(meta.get("uid", ""), ()))
            return True
        if ORPHAN_FINALIZER in finalizers:
            self._orphaning.add(key)
            return True
        return False

    async def run(self, twin: Any) -> None:
        self.attach(twin.store, twin.clock)
        assert self._waker is not None
        while True:
            await self.sync_once()
            await self._waker.wait(None)

    # -- one pass ---------------------------------------------------------------------------------------
    async def sync_once(self) -> None:
        for key in sorted(self._orphaning):
            self._orphaning.discard(key)
            self._orphan_dependents(key)
        attempts = sorted(self._attempt)
        self._attempt.clear()
        for key in attempts:
            self._attempt_to_delete(key)
        for key in sorted(self._foreground):
            self._process_deleting_dependents(key)
        for node_name in sorted(self._lost_nodes):
            self._lost_nodes.discard(node_name)
            if node_name in self._index.nodes:
                continue
            for pod in self._index.pods_on(node_name):
                self._delete(self._kinds.pod, pod, immediate=True)
        await asyncio.sleep(0)

    def _attempt_to_delete(self, key: ObjectKey) -> None:
        """attemptToDeleteItem for one dependent."""
        found = self._get(key)
        if found is None:
            return
        rtype, item = found
        meta = item["metadata"]
        if meta.get("deletionTimestamp") and FOREGROUND_FINALIZER not in (meta.get("finalizers") or ()):
            return  # already being deleted
        solid, dangling, waiting = [], [], []
        for ref in meta.get("ownerReferences") or ():
            owner = self._get(self._index.by_uid[ref["uid"]]) if ref.get("uid") in self._index.by_uid else None
            if owner is None:
                dangling.append(ref)
                continue
            owner_meta = owner[1]["metadata"]
            if owner_meta.get("deletionTimestamp") and FOREGROUND_FINALIZER in (owner_meta.get("finalizers") or ()):
                waiting.append(ref)
            else:
                solid.append(ref)
        if not dangling and not waiting:
            return
        if solid:
            gone = {ref.get("uid") for ref in dangling + waiting}

            def drop_refs(obj: Obj) -> None:
                obj["metadata"]["ownerReferences"] = [
                    r for r in obj["metadata"].get("ownerReferences") or () if r.get("uid") not in gone
                ]

            self._mutate(rtype, item, drop_refs)
            return
        if waiting and self._index.dependents.get(meta.get("uid", "")):
            policy = "Foreground"
        elif ORPHAN_FINALIZER in (meta.get("finalizers") or ()):
            policy = "Orphan"
        elif FOREGROUND_FINALIZER in (meta.get("finalizers") or ()):
            policy = "Foreground"
        else:
            policy = "Background"
        self._delete(rtype, item, propagation_policy=policy)

    def _process_deleting_dependents(self, key: ObjectKey) -> None:
        """processDeletingDependentsItem for one owner in the foreground."""
        found = self._get(key)
        if found is None:
            self._foreground.discard(key)
            return
        rtype, owner = found
        meta = owner["metadata"]
        if not meta.get("deletionTimestamp") or FOREGROUND_FINALIZER not in (meta.get("finalizers") or ()):
            self._foreground.discard(key)
            return
        uid = meta["uid"]
        blocking = []
        for dependent_key in sorted(self._index.dependents.get(uid, ())):
            dependent = self._get(dependent_key)
            if dependent is None:
                continue
            refs = dependent[1]["metadata"].get("ownerReferences") or ()
            if any(ref.get("uid") == uid and ref.get("blockOwnerDeletion") for ref in refs):
                blocking.append(dependent_key)
        if not blocking:
            self._foreground.discard(key)
            self._remove_finalizer(rtype, owner, FOREGROUND_FINALIZER)
            return
        for dependent_key in blocking:
            self._attempt_to_delete(dependent_key)

    def _orphan_dependents(self, key: ObjectKey) -> None:
        found = self._get(key)
        if found is None:
            return
        rtype, owner = found
        meta = owner["metadata"]
        if not meta.get("deletionTimestamp") or ORPHAN_FINALIZER not in (meta.get("finalizers") or ()):
            return
        uid = meta["uid"]

        def drop_ref(obj: Obj) -> None:
            refs = [r for r in obj["metadata"].get("ownerReferences") or () if r.get("uid") != uid]
            if refs:
                obj["metadata"]["ownerReferences"] = refs
            else:
                obj["metadata"].pop("ownerReferences", None)

        for dependent_key in sorted(self._index.dependents.get(uid, ())):
            dependent = self._get(dependent_key)
            if dependent is not None:
                self._mutate(dependent[0], dependent[1], drop_ref)
        self._remove_finalizer(rtype, owner, ORPHAN_FINALIZER)

    # -- store access -----------------------------------------------------------------------------------
    def _get(self, key: ObjectKey) -> tuple[ResourceType, Obj] | None:
        store = self._require_store()
        rtype = store.registry.get(key[0], key[1])
        if rtype is None:
            return None
        obj = store.try_get(rtype, key[2] or None, key[3])
        return None if obj is None else (rtype, obj)

    def _remove_finalizer(self, rtype: ResourceType, obj: Obj, finalizer: str) -> None:
        def release(edited: Obj) -> None:
            kept = [f for f in edited["metadata"].get("finalizers") or () if f != finalizer]
            if kept:
                edited["metadata"]["finalizers"] = kept
            else:
                edited["metadata"].pop("finalizers", None)

        self._mutate(rtype, obj, release)

    def _delete(
        self, rtype: ResourceType, obj: Obj, *, propagation_policy: str | None = None, immediate: bool = False
    ) -> None:
        meta = obj["metadata"]
        try:
            self._require_store().delete(
                rtype,
                meta.get("namespace"),
                meta["name"],
                precondition_uid=meta.get("uid"),
                propagation_policy=propagation_policy,
                immediate=immediate,
            )
        except errors.ApiError as exc:
            log.debug("garbage collector: %s", exc)

    def _mutate(self, rtype: ResourceType, obj: Obj, change: Callable[[Obj], None]) -> None:
        meta = obj["metadata"]
        try:
            self._require_store().mutate(rtype, meta.get("namespace"), meta["name"], change)
        except errors.ApiError as exc:
            log.debug("garbage collector: %s", exc)

    def _require_store(self) -> Store:
        if self._store is None:
            raise RuntimeError("GarbageCollector.attach() was not called")
        return self._store
