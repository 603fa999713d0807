"""Cheaper writes for controllers that change one part of an object.

``Store.mutate`` deep-copies the whole object before the caller edits it;
a status write only needs its own copy of ``status`` (the store copies the
object again on the way in anyway).  At 60,000 pods the difference is
seconds of event-loop time.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from .registry import ResourceType
from .store import Store

Obj = dict[str, Any]


def edit_status(store: Store, rtype: ResourceType, current: Obj, change: Callable[[Obj], None]) -> Obj:
    """Write ``change`` applied to a copy of ``current``'s status, through the status subresource.

    ``change`` receives a shallow copy of the object whose ``status`` is a
    private deep copy: it may edit ``status`` freely and must not touch the rest.
    """
    draft = dict(current)
    draft["status"] = copy.deepcopy(current.get("status") or {})
    change(draft)
    return store.update(rtype, draft, subresource="status")


def replace_status(store: Store, rtype: ResourceType, current: Obj, status: Obj) -> Obj:
    """Write a whole new ``status`` for ``current`` (no-op when it is unchanged)."""
    if current.get("status") == status:
        return current
    draft = dict(current)
    draft["status"] = status
    return store.update(rtype, draft, subresource="status")
