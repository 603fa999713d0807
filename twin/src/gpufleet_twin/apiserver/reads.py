"""Reads: get, and list with label/field selectors and ``limit``/``continue`` pagination."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable

from aiohttp import web

from ..machinery import errors, selectors
from ..machinery.registry import ResourceType
from ..machinery.store import Obj
from .context import ServerContext
from .rendering import render_list, render_object
from .request_info import ResourceRequest, int_param
from .responses import json_response


def encode_continue(resource_version: int, namespace: str, name: str) -> str:
    payload = json.dumps({"v": "meta.k8s.io/v1", "rv": resource_version, "start": [namespace, name]})
    return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        payload = json.loads(raw)
        if payload.get("v") != "meta.k8s.io/v1":
            raise ValueError("incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
        namespace, name = payload["start"]
        return int(payload["rv"]), (str(namespace), str(name))
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeDecodeError) as problem:
        raise errors.bad_request(f"continue key is not valid: {problem}") from None


def get(ctx: ServerContext, request: web.Request, target: ResourceRequest) -> web.Response:
    obj = ctx.twin.store.get(target.rtype, target.namespace, target.name or "")
    return render_object(ctx, request, target.rtype, obj)


def selector_predicate(
    request: web.Request, rtype: ResourceType, name: str | None = None
) -> tuple[Callable[[Obj], bool] | None, bool]:
    """The label/field selector predicate of a list or watch, and whether any selector was given."""
    label_text = request.query.get("labelSelector", "")
    field_text = request.query.get("fieldSelector", "")
    label_selector = selectors.parse_label_selector(label_text) if label_text else None
    field_predicate = selectors.parse_field_selector(field_text, rtype.kind) if field_text else None
    if name is not None:
        by_name = selectors.parse_field_selector(f"metadata.name={name}", rtype.kind)
        field_predicate = by_name if field_predicate is None else _both(field_predicate, by_name)
    if label_selector is None and field_predicate is None:
        return None, False

    def predicate(obj: Obj) -> bool:
        if label_selector is not None and not label_selector.matches((obj.get("metadata") or {}).get("labels") or {}):
            return False
        return field_predicate is None or field_predicate(obj)

    return predicate, True


def list_objects(ctx: ServerContext, request: web.Request, target: ResourceRequest) -> web.Response:
    rtype, store = target.rtype, ctx.twin.store
    query = request.query
    predicate, filtered = selector_predicate(request, rtype)
    limit = int_param(query, "limit", default=0)
    if limit < 0:
        raise errors.bad_request("limit must be a non-negative integer")
    token = query.get("continue", "")
    list_rv = store.resource_version
    start: tuple[str, str] | None = None
    if token:
        if query.get("resourceVersion") not in (None, "", "0"):
            raise errors.bad_request("specifying resource version is not allowed when using continue")
        list_rv, start = decode_continue(token)
        if list_rv < store.compacted_revision(rtype):
            problem = errors.gone(
                "The provided continue parameter is too old to display a consistent list result. You can start a "
                "new list without the continue parameter, or use the continue token in this response to retrieve "
                "the remainder of the results. Continuing with the provided token results in an inconsistent list "
                "- objects that were created, modified, or deleted between the time the first chunk was returned "
                "and now may show up in the list."
            )
            status = problem.to_status()
            status["metadata"] = {"continue": encode_continue(store.resource_version, *start)}
            return json_response(status, status=410)
    page = store.list_page(rtype, target.namespace, predicate, after=start, limit=limit)
    meta: Obj = {"resourceVersion": str(list_rv)}
    if page.more:
        meta["continue"] = encode_continue(list_rv, *_key_of(page.items[-1]))
        if not filtered:
            meta["remainingItemCount"] = page.remaining
    return render_list(ctx, request, rtype, page.items, meta)


def _both(first: Callable[[Obj], bool], second: Callable[[Obj], bool]) -> Callable[[Obj], bool]:
    return lambda obj: first(obj) and second(obj)


def _key_of(obj: Obj) -> tuple[str, str]:
    meta = obj["metadata"]
    return (meta.get("namespace") or "", meta["name"])
