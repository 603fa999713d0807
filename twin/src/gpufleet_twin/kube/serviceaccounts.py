"""ServiceAccounts: kube-controller-manager's serviceaccounts controller and the admission plugin.

- ``ServiceAccountsController`` (upstream ``pkg/controller/serviceaccount``):
  every namespace that is not terminating has a ``default`` ServiceAccount;
  the controller makes it for every namespace at start, for every namespace
  created later, and again when someone deletes it.
- ``ServiceAccountAdmission`` (upstream
  ``plugin/pkg/admission/serviceaccount``): a new pod without
  ``serviceAccountName`` runs as ``default``; a pod naming a ServiceAccount
  that does not exist is refused with 403 Forbidden, ``pods "<name>" is
  forbidden: error looking up service account <ns>/<sa>: serviceaccount
  "<sa>" not found`` (the name is the ``generateName`` prefix when the pod
  has one: upstream reports it before names are generated).  Mirror pods are
  not checked.  Upstream looks the ``default`` ServiceAccount up again for
  up to about a second, since the controller creates it right after the
  namespace; the twin's admission runs synchronously, so it asks the
  controller to make it now instead, which is what those retries wait for.
  The admission does not add the projected token volume
  (``kube-api-access-*``) to the pod.

``ensure_service_account`` is for the simulated operators: a real operator
(GPU Operator, SR-IOV) ships or creates the ServiceAccounts its workloads
name, so their pods are admitted.
"""

from __future__ import annotations

import logging
from typing import Any

from ..machinery import errors
from ..machinery.clock import SimClock
from ..machinery.kinds import Kinds
from ..machinery.registry import ResourceType
from ..machinery.store import Store, WatchEvent
from ..machinery.wake import Pacer, Waker
from . import podutil

log = logging.getLogger(__name__)

Obj = dict[str, Any]

DEFAULT_SERVICE_ACCOUNT = "default"
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"


def ensure_service_account(store: Store, kinds: Kinds, namespace: str, name: str) -> Obj | None:
    """The ServiceAccount ``namespace/name``, created when missing (None if the namespace cannot hold one)."""
    found = store.try_get(kinds.serviceaccount, namespace, name)
    if found is not None:
        return found
    try:
        return store.create(kinds.serviceaccount, {"metadata": {"name": name, "namespace": namespace}})
    except errors.ApiError as exc:  # namespace gone or terminating, or created meanwhile
        log.debug("service account %s/%s not created: %s", namespace, name, exc)
        return store.try_get(kinds.serviceaccount, namespace, name)


def ensure_default_service_account(store: Store, kinds: Kinds, namespace: str) -> bool:
    """Make ``namespace``'s ``default`` ServiceAccount if missing (False: namespace gone or terminating)."""
    ns = store.try_get(kinds.namespace, None, namespace)
    if ns is None or podutil.is_terminating(ns):
        return False
    return ensure_service_account(store, kinds, namespace, DEFAULT_SERVICE_ACCOUNT) is not None


def ensure_referenced_service_accounts(store: Store, kinds: Kinds) -> int:
    """Make the ServiceAccounts that pods and pod templates name but that are missing; returns how many.

    For a snapshot: ``kubectl get pods,daemonsets,...`` dumps leave the accounts out, which the
    installs that made those workloads (Helm charts, OLM bundles) had created.
    """
    made = 0
    for rtype in (kinds.pod, kinds.daemonset, kinds.deployment, kinds.replicaset, kinds.statefulset, kinds.job):
        for obj in store.list(rtype):
            spec = obj.get("spec") or {}
            if rtype is not kinds.pod:
                spec = (spec.get("template") or {}).get("spec") or {}
            account = spec.get("serviceAccountName") or spec.get("serviceAccount")
            namespace = obj["metadata"].get("namespace", "")
            if not account or store.try_get(kinds.serviceaccount, namespace, account) is not None:
                continue
            made += 1 if ensure_service_account(store, kinds, namespace, account) is not None else 0
    return made


class ServiceAccountsController:
    """Keeps a ``default`` ServiceAccount in every active namespace."""

    name = "serviceaccount-controller"

    def __init__(self, *, kinds: Kinds) -> None:
        self._kinds = kinds
        self._dirty: set[str] = set()
        self._pace = Pacer()
        self._store: Store | None = None
        self._waker: Waker | None = None

    def attach(self, store: Store, clock: SimClock) -> None:
        self._store = store
        keys = (self._kinds.namespace.key, self._kinds.serviceaccount.key)
        self._waker = Waker(store, clock, resources=keys, on_event=self._on_event)
        self._dirty.update(ns["metadata"]["name"] for ns in store.list(self._kinds.namespace))

    def _on_event(self, event: WatchEvent) -> bool:
        meta = event.obj["metadata"]
        if event.rtype.key == self._kinds.namespace.key:
            if event.type == "DELETED" or meta.get("deletionTimestamp"):
                return False
            self._dirty.add(meta["name"])
            return True
        if event.type == "DELETED" and meta["name"] == DEFAULT_SERVICE_ACCOUNT:
            self._dirty.add(meta.get("namespace", ""))
            return True
        return False

    async def run(self, twin: Any) -> None:
        self.attach(twin.store, twin.clock)
        assert self._waker is not None
        while True:
            await self.sync_once()
            await self._waker.wait(None)

    async def sync_once(self) -> None:
        names = sorted(self._dirty)
        self._dirty.clear()
        for namespace in names:
            self.ensure_default(namespace)
            await self._pace()

    def ensure_default(self, namespace: str) -> bool:
        """Create ``default`` in ``namespace`` if it is missing; False when the namespace cannot hold it."""
        return ensure_default_service_account(self._require_store(), self._kinds, namespace)

    def _require_store(self) -> Store:
        if self._store is None:
            raise RuntimeError("ServiceAccountsController.attach() was not called")
        return self._store


class ServiceAccountAdmission:
    """The ServiceAccount admission plugin, as a store admission hook for pod creation."""

    def __init__(self, *, store: Store, kinds: Kinds) -> None:
        self._store = store
        self._kinds = kinds

    def __call__(self, operation: str, rtype: ResourceType, obj: Obj, old: Obj | None) -> None:
        if operation != "CREATE" or rtype.key != self._kinds.pod.key:
            return
        meta = obj["metadata"]
        if MIRROR_POD_ANNOTATION in (meta.get("annotations") or {}):
            return
        spec = obj.setdefault("spec", {})
        account = spec.get("serviceAccountName") or spec.get("serviceAccount") or DEFAULT_SERVICE_ACCOUNT
        spec["serviceAccountName"] = account
        spec.setdefault("serviceAccount", account)
        namespace = meta.get("namespace", "")
        if self._store.try_get(self._kinds.serviceaccount, namespace, account) is not None:
            return
        if account == DEFAULT_SERVICE_ACCOUNT:
            ensure_default_service_account(self._store, self._kinds, namespace)
            if self._store.try_get(self._kinds.serviceaccount, namespace, account) is not None:
                return
        name = _name_for_message(meta)
        raise errors.ApiError(
            403,
            "Forbidden",
            f'pods "{name}" is forbidden: error looking up service account '
            f'{namespace}/{account}: serviceaccount "{account}" not found',
            {"name": name, "kind": "pods"},
        )


def _name_for_message(meta: Obj) -> str:
    # Upstream names the object before its name is generated: the prefix, then.
    prefix = meta.get("generateName") or ""
    name = meta.get("name") or ""
    return prefix if prefix and name.startswith(prefix) else name
