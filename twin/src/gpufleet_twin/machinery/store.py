"""The twin's object store: etcd and the generic registry of a real API server.

Objects are plain JSON dicts.  Every write replaces the stored dict with a new
one and never mutates it in place, so readers may keep the dicts that ``get``
and ``list`` return as long as they do not mutate them (copy first).

What a real server does and this store does too: a cluster-wide
``resourceVersion`` that grows with every write, ``uid``, ``generation``
bumped on spec changes, ``generateName``, optimistic concurrency (409 on a
stale resourceVersion), the status subresource split, finalizers and graceful
deletion (``deletionTimestamp``), and a bounded history of watch events from
which a watch resumes (410 Gone once that history has been compacted).
"""

from __future__ import annotations

import asyncio
import bisect
import builtins
import contextlib
import copy
import datetime as dt
import json
import os
import secrets
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from . import errors
from .clock import SimClock
from .registry import Registry, ResourceType

Obj = dict[str, Any]
Predicate = Callable[[Obj], bool]
# An admission hook sees ("CREATE"|"UPDATE", type, new object, old object or
# None); it may default or prune fields of the new object in place, or raise
# an ApiError to refuse the write.
Admission = Callable[[str, ResourceType, Obj, "Obj | None"], None]
# A delete handler decides how a deletion proceeds: return the object with
# deletionTimestamp set to delete gracefully (something else finishes the
# deletion later), or None to remove it now.  The object it gets carries the
# grace period the request asked for, if any, as deletionGracePeriodSeconds.
DeleteHandler = Callable[["Store", ResourceType, Obj], "Obj | None"]
Listener = Callable[["WatchEvent"], None]
# Set to "1" to check every cached encoding against the object (see Store.encoded).
VERIFY_ENCODED_ENV = "GPUFLEET_TWIN_VERIFY_ENCODED"

# Built-in kinds whose registry strategy keeps no metadata.generation (kube-apiserver 1.32; Pods get one
# from 1.33). Workloads, PDBs, CRDs and every custom resource count generations of their spec.
WITHOUT_GENERATION = frozenset(
    {
        ("", "namespaces"),
        ("", "nodes"),
        ("", "pods"),
        ("", "events"),
        ("events.k8s.io", "events"),
        ("", "configmaps"),
        ("", "secrets"),
        ("", "serviceaccounts"),
        ("", "services"),
        ("", "endpoints"),
        ("apps", "controllerrevisions"),
        ("coordination.k8s.io", "leases"),
        ("rbac.authorization.k8s.io", "roles"),
        ("rbac.authorization.k8s.io", "clusterroles"),
        ("rbac.authorization.k8s.io", "rolebindings"),
        ("rbac.authorization.k8s.io", "clusterrolebindings"),
    }
)


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED
    rtype: ResourceType
    obj: Obj
    old: Obj | None
    resource_version: int


class Watch:
    """A subscription to one resource type; iterate it for ``(type, obj)`` pairs."""

    def __init__(self, store: Store, rtype: ResourceType, namespace: str | None, predicate: Predicate | None):
        self._store = store
        self.rtype = rtype
        self.namespace = namespace
        self.predicate = predicate
        self.queue: asyncio.Queue[tuple[str, Obj] | None] = asyncio.Queue()
        self.closed = False

    def offer(self, event: WatchEvent) -> None:
        """Translate a store event into what this watcher sees (selectors apply to old and new)."""
        if self.closed:
            return
        new_matches = self._matches(event.obj)
        old_matches = event.old is not None and self._matches(event.old)
        if event.type == "ADDED" and new_matches:
            self.queue.put_nowait(("ADDED", event.obj))
        elif event.type == "DELETED" and new_matches:
            self.queue.put_nowait(("DELETED", event.obj))
        elif event.type == "MODIFIED":
            if new_matches and old_matches:
                self.queue.put_nowait(("MODIFIED", event.obj))
            elif new_matches:
                self.queue.put_nowait(("ADDED", event.obj))
            elif old_matches:
                self.queue.put_nowait(("DELETED", event.obj))

    def _matches(self, obj: Obj) -> bool:
        if self.namespace and obj.get("metadata", {}).get("namespace") != self.namespace:
            return False
        return self.predicate is None or self.predicate(obj)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._store._watchers.discard(self)
            self.queue.put_nowait(None)

    async def events(self) -> AsyncIterator[tuple[str, Obj]]:
        while True:
            item = await self.queue.get()
            if item is None:
                return
            yield item


@dataclass
class ListPage:
    items: list[Obj]
    more: bool  # a matching object follows the last item
    remaining: int  # objects of the range from the first one left out (matching or not)


class Store:
    def __init__(self, registry: Registry, clock: SimClock, *, history_per_type: int = 50_000) -> None:
        self.registry = registry
        self.clock = clock
        self._objects: dict[tuple[str, str], dict[tuple[str, str], Obj]] = {}
        # Each type's keys in etcd order, kept until a create or delete: lists
        # (controllers' and clients') far outnumber the writes that add or remove keys.
        self._sorted_keys: dict[tuple[str, str], list[tuple[str, str]]] = {}
        self._history: dict[tuple[str, str], deque[WatchEvent]] = {}
        self._compacted: dict[tuple[str, str], int] = {}
        self._history_len = history_per_type
        self._rv = 1
        self._watchers: set[Watch] = set()
        self._admission: list[Admission] = []
        self._delete_handlers: dict[tuple[str, str], DeleteHandler] = {}
        self._listeners: list[Listener] = []
        # Around the listeners (controllers): they write as themselves, not as the request that woke them.
        self.listener_context: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
        # Each listed object's JSON, kept with the very dict it encodes: a write
        # stores a new dict, so an entry is current exactly while its dict is.
        self._encoded: dict[tuple[tuple[str, str], tuple[str, str]], tuple[Obj, bytes]] = {}
        self._verify_encoded = os.environ.get(VERIFY_ENCODED_ENV) == "1"

    # -- configuration -------------------------------------------------------------
    def add_admission(self, hook: Admission) -> None:
        self._admission.append(hook)

    def set_delete_handler(self, rtype: ResourceType, handler: DeleteHandler) -> None:
        self._delete_handlers[rtype.key] = handler

    def add_listener(self, listener: Listener) -> None:
        """Called synchronously after every write (controllers wake on it)."""
        self._listeners.append(listener)

    # -- reads ------------------------------------------------------------------------
    @property
    def resource_version(self) -> int:
        return self._rv

    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj:
        obj = self.try_get(rtype, namespace, name)
        if obj is None:
            raise errors.not_found(rtype.plural, name, rtype.group)
        return obj

    def try_get(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj | None:
        return self._bucket(rtype).get((self._ns(rtype, namespace), name))

    def list(
        self,
        rtype: ResourceType,
        namespace: str | None = None,
        predicate: Predicate | None = None,
    ) -> list[Obj]:
        """Objects sorted by (namespace, name), as etcd's key order gives them."""
        return self.list_page(rtype, namespace, predicate).items

    def list_page(
        self,
        rtype: ResourceType,
        namespace: str | None = None,
        predicate: Predicate | None = None,
        *,
        after: tuple[str, str] | None = None,
        limit: int = 0,
    ) -> ListPage:
        """Up to ``limit`` (0: all) matching objects whose key follows ``after``, in key order.

        The scan stops at the first match past the page, so paging through a
        large type costs one pass over it in all, not one pass per page.
        """
        bucket = self._bucket(rtype)
        keys = self._keys_in_order(rtype)
        begin, end = 0, len(keys)
        if namespace:
            begin = bisect.bisect_left(keys, (namespace, ""))
            # No name holds a NUL, so this sorts after every key of the namespace.
            end = bisect.bisect_left(keys, (namespace + "\0", ""))
        if after is not None:
            begin = max(begin, bisect.bisect_right(keys, after))
        found: list[Obj] = []
        for index in range(begin, end):
            obj = bucket[keys[index]]
            if predicate is not None and not predicate(obj):
                continue
            if limit and len(found) == limit:
                return ListPage(found, more=True, remaining=end - index)
            found.append(obj)
        return ListPage(found, more=False, remaining=0)

    def encoded(self, rtype: ResourceType, obj: Obj) -> bytes:
        """The compact JSON of a stored object, encoded once per version of it.

        kube-apiserver keeps serialized objects beside its watch cache for the
        same reason: a 10,000-node list re-encodes 60 MB of unchanged Nodes
        otherwise.  Relies on the store's rule that a stored dict never
        changes; with ``GPUFLEET_TWIN_VERIFY_ENCODED=1`` (the test suite)
        every cached answer is checked against a fresh encoding.
        """
        meta = obj["metadata"]
        key = (rtype.key, (self._ns(rtype, meta.get("namespace")), meta["name"]))
        cached = self._encoded.get(key)
        if cached is not None and cached[0] is obj:
            if self._verify_encoded and cached[1] != compact_json(obj):
                raise RuntimeError(f"{rtype.kind} {key[1]} was changed in place after it was stored")
            return cached[1]
        text = compact_json(obj)
        self._encoded[key] = (obj, text)
        return text

    def count(self, rtype: ResourceType) -> int:
        return len(self._bucket(rtype))

    def compacted_revision(self, rtype: ResourceType) -> int:
        """The newest resourceVersion of ``rtype`` whose watch history is gone (0: none)."""
        return self._compacted.get(rtype.key, 0)

    # -- writes -----------------------------------------------------------------------
    def create(
        self,
        rtype: ResourceType,
        obj: Obj,
        *,
        namespace: str | None = None,
        dry_run: bool = False,
        restore: bool = False,
    ) -> Obj:
        """Create; with ``dry_run`` every check and admission runs and nothing is stored.

        ``restore`` writes an object as if it had been in etcd all along (the
        simulation seeding 10,000 complete Nodes): admission hooks do not run,
        and ``obj`` itself is stored without a copy, so the caller must not
        use it afterwards.
        """
        new = obj if restore else copy.deepcopy(obj)
        meta = new.setdefault("metadata", {})
        if rtype.namespaced:
            ns = namespace or meta.get("namespace") or "default"
            if namespace and meta.get("namespace") and meta["namespace"] != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = ns
            self._require_namespace(ns)
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise errors.invalid(
                    rtype.kind,
                    "",
                    [_cause("metadata.name", "Required value: name or generateName is required")],
                    rtype.group,
                )
            meta["name"] = generate_name(prefix)
        new["apiVersion"] = rtype.api_version
        new["kind"] = rtype.kind
        key = (self._ns(rtype, meta.get("namespace")), meta["name"])
        if key in self._bucket(rtype):
            raise errors.already_exists(rtype.plural, meta["name"], rtype.group)
        for field_name in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(field_name, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self.clock.iso()
        if rtype.key in WITHOUT_GENERATION:
            meta.pop("generation", None)
        else:
            meta["generation"] = 1
        for hook in () if restore else self._admission:
            hook("CREATE", rtype, new, None)
        if dry_run:
            return new
        return self._write(rtype, key, new, None, "ADDED")

    def update(self, rtype: ResourceType, obj: Obj, *, subresource: str | None = None, dry_run: bool = False) -> Obj:
        """Replace an object (PUT). A non-empty resourceVersion must be the current one.

        With ``dry_run`` the would-be object is returned and nothing is stored.
        """
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if not name:
            raise errors.invalid(
                rtype.kind, "", [_cause("metadata.name", "Required value: name is required")], rtype.group
            )
        namespace = meta.get("namespace") if rtype.namespaced else None
        key = (self._ns(rtype, namespace), name)
        old = self._bucket(rtype).get(key)
        if old is None:
            raise errors.not_found(rtype.plural, name, rtype.group)
        sent_rv = meta.get("resourceVersion")
        if sent_rv and str(sent_rv) != old["metadata"]["resourceVersion"]:
            raise errors.conflict(rtype.plural, name, rtype.group)
        if meta.get("uid") and meta["uid"] != old["metadata"]["uid"]:
            raise errors.conflict(rtype.plural, name, rtype.group)
        new = copy.deepcopy(obj)
        new["apiVersion"] = rtype.api_version
        new["kind"] = rtype.kind
        self._carry_server_fields(rtype, old, new, subresource)
        for hook in self._admission:
            hook("UPDATE", rtype, new, old)
        if _semantically_equal(old, new):
            return old
        self._bump_generation(rtype, old, new)
        if dry_run:
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            return new
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            return self._remove(rtype, key, old)
        return self._write(rtype, key, new, old, "MODIFIED")

    def mutate(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        change: Callable[[Obj], None],
        *,
        subresource: str | None = None,
    ) -> Obj:
        """Read-modify-write for in-process controllers: ``change`` edits a copy.

        Nothing is written (and no resourceVersion consumed) when the copy
        comes back equal.
        """
        current = self.get(rtype, namespace, name)
        edited = copy.deepcopy(current)
        change(edited)
        if _semantically_equal(current, edited):
            return current
        return self.update(rtype, edited, subresource=subresource)

    def delete(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        *,
        precondition_uid: str | None = None,
        precondition_rv: str | None = None,
        immediate: bool = False,
        dry_run: bool = False,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
        orphan_dependents: bool | None = None,
    ) -> Obj:
        """Delete; returns the deleted object, or the object now terminating.

        As the generic registry's ``Store.Delete`` does: a pod (the type with a
        delete handler) may first be marked for graceful deletion; then the
        garbage collector's finalizers are set from ``propagation_policy`` /
        ``orphan_dependents`` (``gc_finalizers``), and an object left with any
        finalizer only gets ``deletionTimestamp`` and stays until they are
        removed.  With ``dry_run`` the result is computed and nothing changes.
        """
        key = (self._ns(rtype, namespace), name)
        current = self._bucket(rtype).get(key)
        if current is None:
            raise errors.not_found(rtype.plural, name, rtype.group)
        meta = current["metadata"]
        if precondition_uid and precondition_uid != meta["uid"]:
            raise errors.conflict(rtype.plural, name, rtype.group)
        if precondition_rv and precondition_rv != meta["resourceVersion"]:
            raise errors.conflict(rtype.plural, name, rtype.group)
        candidate = copy.deepcopy(current)
        graceful = False
        handler = None if immediate else self._delete_handlers.get(rtype.key)
        if handler is not None and meta.get("deletionTimestamp"):
            if meta.get("deletionGracePeriodSeconds"):
                # A graceful deletion is pending: its finalizers cannot change any more (rest.BeforeDelete).
                return current
            handler = None  # marked with grace 0 already: no second graceful period
        if handler is not None:
            if grace_period_seconds is not None:
                candidate["metadata"]["deletionGracePeriodSeconds"] = grace_period_seconds
            terminating = handler(self, rtype, candidate)
            graceful = terminating is not None
            candidate = copy.deepcopy(current) if terminating is None else terminating
        finalizers = gc_finalizers(
            rtype,
            meta.get("finalizers") or [],
            propagation_policy=propagation_policy,
            orphan_dependents=orphan_dependents,
        )
        if finalizers or graceful:
            cmeta = candidate["metadata"]
            if finalizers:
                cmeta["finalizers"] = finalizers
            else:
                cmeta.pop("finalizers", None)
            if not graceful:
                _mark_as_deleting(cmeta, self.clock)
            if _semantically_equal(current, candidate):
                return current
            if dry_run:
                return candidate
            return self._write(rtype, key, candidate, current, "MODIFIED")
        if dry_run:
            return current
        return self._remove(rtype, key, current)

    # -- watch --------------------------------------------------------------------------
    def watch(
        self,
        rtype: ResourceType,
        *,
        namespace: str | None = None,
        predicate: Predicate | None = None,
        since: int | None = None,
    ) -> Watch:
        """Open a watch.  ``since=None`` starts with ADDED for every matching object;
        ``since=N`` replays the history after N (410 Gone if compacted past it)."""
        watcher = Watch(self, rtype, namespace, predicate)
        if since is None:
            for obj in self.list(rtype, namespace, predicate):
                watcher.queue.put_nowait(("ADDED", obj))
        else:
            if since < self._compacted.get(rtype.key, 0):
                raise errors.gone(f"too old resource version: {since} ({self._compacted[rtype.key]})")
            for event in self._history.get(rtype.key, ()):
                if event.resource_version > since:
                    watcher.offer(event)
        self._watchers.add(watcher)
        return watcher

    # -- internals ----------------------------------------------------------------------
    def _bucket(self, rtype: ResourceType) -> dict[tuple[str, str], Obj]:
        return self._objects.setdefault(rtype.key, {})

    def _keys_in_order(self, rtype: ResourceType) -> builtins.list[tuple[str, str]]:  # ``list`` is a method here
        keys = self._sorted_keys.get(rtype.key)
        if keys is None:
            keys = self._sorted_keys[rtype.key] = sorted(self._bucket(rtype))
        return keys

    @staticmethod
    def _ns(rtype: ResourceType, namespace: str | None) -> str:
        return (namespace or "") if rtype.namespaced else ""

    def _require_namespace(self, namespace: str) -> None:
        ns_type = self.registry.get("", "namespaces")
        if ns_type is None:
            return
        found = self.try_get(ns_type, None, namespace)
        if found is None:
            raise errors.not_found("namespaces", namespace)
        if found["metadata"].get("deletionTimestamp"):
            raise errors.forbidden(
                f"unable to create new content in namespace {namespace} because it is being terminated"
            )

    def _carry_server_fields(self, rtype: ResourceType, old: Obj, new: Obj, subresource: str | None) -> None:
        old_meta, meta = old["metadata"], new.setdefault("metadata", {})
        for field_name in ("uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds"):
            if field_name in old_meta:
                meta[field_name] = old_meta[field_name]
            else:
                meta.pop(field_name, None)
        if rtype.namespaced:
            meta["namespace"] = old_meta["namespace"]
        if "status" not in rtype.subresources:
            return
        if subresource == "status":
            # A status write changes status only (metadata labels and annotations
            # are kept from the stored object, as the real status strategy does).
            status = new.get("status")
            replaced = copy.deepcopy(old)
            if status is None:
                replaced.pop("status", None)
            else:
                replaced["status"] = status
            replaced["metadata"]["resourceVersion"] = old_meta["resourceVersion"]
            new.clear()
            new.update(replaced)
        elif "status" in old:
            new["status"] = copy.deepcopy(old["status"])
        else:
            new.pop("status", None)

    @staticmethod
    def _bump_generation(rtype: ResourceType, old: Obj, new: Obj) -> None:
        if rtype.key in WITHOUT_GENERATION:
            return
        ignored = {"metadata", "status", "apiVersion", "kind"}
        old_body = {k: v for k, v in old.items() if k not in ignored}
        new_body = {k: v for k, v in new.items() if k not in ignored}
        if old_body != new_body:
            new["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _write(self, rtype: ResourceType, key: tuple[str, str], new: Obj, old: Obj | None, event_type: str) -> Obj:
        rv = self._next_rv()
        new["metadata"]["resourceVersion"] = str(rv)
        bucket = self._bucket(rtype)
        if key not in bucket:
            self._sorted_keys.pop(rtype.key, None)
        bucket[key] = new
        self._emit(WatchEvent(event_type, rtype, new, old, rv))
        return new

    def _remove(self, rtype: ResourceType, key: tuple[str, str], current: Obj) -> Obj:
        rv = self._next_rv()
        removed = copy.deepcopy(current)
        removed["metadata"]["resourceVersion"] = str(rv)
        del self._bucket(rtype)[key]
        self._sorted_keys.pop(rtype.key, None)
        self._encoded.pop((rtype.key, key), None)
        self._emit(WatchEvent("DELETED", rtype, removed, current, rv))
        return removed

    def _emit(self, event: WatchEvent) -> None:
        history = self._history.setdefault(event.rtype.key, deque())
        history.append(event)
        if len(history) > self._history_len:
            dropped = history.popleft()
            self._compacted[event.rtype.key] = dropped.resource_version
        for watcher in list(self._watchers):
            if watcher.rtype.key == event.rtype.key:
                watcher.offer(event)
        with self.listener_context():
            for listener in self._listeners:
                listener(event)


def compact_json(obj: Any) -> bytes:
    """JSON as the API server writes it: no spaces."""
    return json.dumps(obj, separators=(",", ":")).encode()


def _semantically_equal(old: Obj, new: Obj) -> bool:
    def strip(obj: Obj) -> Obj:
        trimmed = dict(obj)
        meta = dict(trimmed.get("metadata") or {})
        meta.pop("resourceVersion", None)
        meta.pop("managedFields", None)
        trimmed["metadata"] = meta
        return trimmed

    return strip(old) == strip(new)


# apiserver pkg/storage/names/generate.go (SimpleNameGenerator) and apimachinery pkg/util/rand/rand.go
# (String): the base cut to 63 - 5 characters, then 5 characters of an alphabet without vowels and
# look-alikes.
GENERATED_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
GENERATED_SUFFIX_LENGTH = 5
MAX_GENERATED_NAME_LENGTH = 63 - GENERATED_SUFFIX_LENGTH


def generate_name(base: str) -> str:
    suffix = "".join(secrets.choice(GENERATED_SUFFIX_ALPHABET) for _ in range(GENERATED_SUFFIX_LENGTH))
    return base[:MAX_GENERATED_NAME_LENGTH] + suffix


# Deletion propagation (k8s.io/apiserver pkg/registry/generic/registry/store.go, shouldOrphanDependents,
# shouldDeleteDependents, deletionFinalizersForGarbageCollection; metav1.FinalizerOrphanDependents and
# FinalizerDeleteDependents).
ORPHAN_FINALIZER = "orphan"
FOREGROUND_FINALIZER = "foregroundDeletion"
PROPAGATION_POLICIES = ("Orphan", "Background", "Foreground")
# The strategies' DefaultGarbageCollectionPolicy where it is not DeleteDependents: batch/v1 Jobs and
# core/v1 ReplicationControllers orphan by default "for backwards compatibility"
# (pkg/registry/batch/job/strategy.go, pkg/registry/core/replicationcontroller/strategy.go); events say
# Unsupported (pkg/registry/core/event/strategy.go), so no deletion of theirs ever waits on the collector.
DEFAULT_ORPHAN = frozenset({("batch", "jobs"), ("", "replicationcontrollers")})
GC_UNSUPPORTED = frozenset({("", "events"), ("events.k8s.io", "events")})


def gc_finalizers(
    rtype: ResourceType,
    finalizers: list[str],
    *,
    propagation_policy: str | None,
    orphan_dependents: bool | None,
) -> list[str]:
    """The object's finalizers once a deletion with these options has set the collector's ones.

    Priority as upstream: the legacy ``orphanDependents`` option, then ``propagationPolicy``, then a
    collector finalizer the object already carries, then the type's default policy.
    """
    if rtype.key in GC_UNSUPPORTED:
        return list(finalizers)
    orphan: bool
    foreground: bool
    if orphan_dependents is not None:
        orphan, foreground = orphan_dependents, False
    elif propagation_policy in PROPAGATION_POLICIES:
        orphan, foreground = propagation_policy == "Orphan", propagation_policy == "Foreground"
    else:
        existing = [f for f in finalizers if f in (ORPHAN_FINALIZER, FOREGROUND_FINALIZER)]
        if existing:
            orphan, foreground = existing[0] == ORPHAN_FINALIZER, existing[0] == FOREGROUND_FINALIZER
        else:
            orphan, foreground = rtype.key in DEFAULT_ORPHAN, False
    kept = [f for f in finalizers if f not in (ORPHAN_FINALIZER, FOREGROUND_FINALIZER)]
    if orphan:
        kept.append(ORPHAN_FINALIZER)
    if foreground:
        kept.append(FOREGROUND_FINALIZER)
    if set(kept) == set(finalizers):
        return list(finalizers)
    return kept


def _mark_as_deleting(meta: Obj, clock: SimClock) -> None:
    """markAsDeleting: deletionTimestamp now (or earlier if already set), grace 0, generation + 1 the first time."""
    now = clock.now()
    existing = meta.get("deletionTimestamp")
    if existing is None and int(meta.get("generation") or 0) > 0:
        meta["generation"] = int(meta["generation"]) + 1
    if existing is None or _epoch(existing) > now:
        meta["deletionTimestamp"] = clock.iso(now)
    meta["deletionGracePeriodSeconds"] = 0


def _epoch(timestamp: str) -> float:
    return dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def _cause(field_path: str, message: str) -> dict[str, str]:
    return {"reason": "FieldValueRequired", "field": field_path, "message": message}
