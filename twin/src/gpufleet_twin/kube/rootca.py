"""kube-controller-manager's root CA certificate publisher.

Upstream ``pkg/controller/certificates/rootcacertpublisher``.

Every active namespace has a ConfigMap ``kube-root-ca.crt`` whose ``ca.crt``
is the PEM of the CA that signed the API server's certificate (the twin's
own CA, ``Twin.ca_cert_pem``), with the description annotation upstream
sets.  A deleted or edited ConfigMap is put back.
"""

from __future__ import annotations

import logging
from typing import Any

from ..machinery import errors
from ..machinery.clock import SimClock
from ..machinery.kinds import Kinds
from ..machinery.store import Store, WatchEvent
from ..machinery.wake import Pacer, Waker
from . import podutil

log = logging.getLogger(__name__)

Obj = dict[str, Any]

ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
DESCRIPTION_ANNOTATION = "kubernetes.io/description"
DESCRIPTION = (
    "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the "
    "internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of "
    "Kubernetes clusters."
)


class RootCACertPublisher:
    name = "root-ca-cert-publisher"

    def __init__(self, *, kinds: Kinds, ca_pem: str) -> None:
        self._kinds = kinds
        self._ca_pem = ca_pem
        self._dirty: set[str] = set()
        self._pace = Pacer()
        self._store: Store | None = None
        self._waker: Waker | None = None
        self._own_write = False

    def attach(self, store: Store, clock: SimClock) -> None:
        self._store = store
        keys = (self._kinds.namespace.key, self._kinds.configmap.key)
        self._waker = Waker(store, clock, resources=keys, on_event=self._on_event)
        self._dirty.update(ns["metadata"]["name"] for ns in store.list(self._kinds.namespace))

    def _on_event(self, event: WatchEvent) -> bool:
        if self._own_write:
            return False
        meta = event.obj["metadata"]
        if event.rtype.key == self._kinds.namespace.key:
            if event.type == "DELETED" or meta.get("deletionTimestamp"):
                return False
            self._dirty.add(meta["name"])
            return True
        if meta["name"] != ROOT_CA_CONFIGMAP:
            return False
        self._dirty.add(meta.get("namespace", ""))
        return True

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
            self._sync(namespace)
            await self._pace()

    def _sync(self, namespace: str) -> None:
        store = self._require_store()
        ns = store.try_get(self._kinds.namespace, None, namespace)
        if ns is None or podutil.is_terminating(ns):
            return
        data = {"ca.crt": self._ca_pem}
        current = store.try_get(self._kinds.configmap, namespace, ROOT_CA_CONFIGMAP)
        try:
            self._own_write = True
            if current is None:
                store.create(
                    self._kinds.configmap,
                    {
                        "metadata": {
                            "name": ROOT_CA_CONFIGMAP,
                            "namespace": namespace,
                            "annotations": {DESCRIPTION_ANNOTATION: DESCRIPTION},
                        },
                        "data": data,
                    },
                )
            elif (
                current.get("data") != data
                or (current["metadata"].get("annotations") or {}).get(DESCRIPTION_ANNOTATION) != DESCRIPTION
            ):

                def reset(obj: Obj) -> None:
                    obj["data"] = dict(data)
                    obj.pop("binaryData", None)
                    obj["metadata"].setdefault("annotations", {})[DESCRIPTION_ANNOTATION] = DESCRIPTION

                store.mutate(self._kinds.configmap, namespace, ROOT_CA_CONFIGMAP, reset)
        except errors.ApiError as exc:
            log.debug("%s: %s/%s: %s", self.name, namespace, ROOT_CA_CONFIGMAP, exc)
        finally:
            self._own_write = False

    def _require_store(self) -> Store:
        if self._store is None:
            raise RuntimeError("RootCACertPublisher.attach() was not called")
        return self._store
