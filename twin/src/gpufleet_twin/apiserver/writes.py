"""Writes: create (and the self-subject reviews answered at once), update, patch (JSON, merge, strategic) and a
minimal server-side apply."""

from __future__ import annotations

import copy
import json

import yaml
from aiohttp import web

from ..machinery import errors, patching
from ..machinery.errors import ApiError
from ..machinery.registry import ResourceType
from ..machinery.store import Obj
from . import managed_fields, rbac
from .bodies import check_body_kind, check_unknown_fields, field_validation, is_dry_run, read_body
from .context import USER, ServerContext
from .rendering import render_object
from .request_info import ResourceRequest
from .responses import add_warnings, json_response

_SELF_SUBJECT_REVIEW = ("authentication.k8s.io", "selfsubjectreviews")
_ACCESS_REVIEW = ("authorization.k8s.io", "selfsubjectaccessreviews")
_RULES_REVIEW = ("authorization.k8s.io", "selfsubjectrulesreviews")


async def create(ctx: ServerContext, request: web.Request, target: ResourceRequest) -> web.Response:
    rtype = target.rtype
    if rtype.namespaced and not target.namespace:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    body = check_body_kind(rtype, await read_body(request))
    user = request[USER]
    review: Obj | None = None
    if rtype.key == _SELF_SUBJECT_REVIEW:
        review = {"userInfo": user.to_json()}
    elif rtype.key == _ACCESS_REVIEW:
        review = rbac.access_review_status(body.get("spec") or {}, user, ctx.policy)
    elif rtype.key == _RULES_REVIEW:
        review = rbac.rules_review_status(body.get("spec") or {}, user, ctx.policy)
    if review is not None:
        answered = {**body, "apiVersion": rtype.api_version, "kind": rtype.kind, "status": review}
        answered.setdefault("metadata", {})
        return json_response(answered, status=201)
    directive = field_validation(request)
    dry_run = is_dry_run(request)
    obj, warnings = check_unknown_fields(ctx, rtype, body, directive)
    stamp_managed_fields(ctx, request, rtype, None, obj)
    created = ctx.twin.store.create(rtype, obj, namespace=target.namespace, dry_run=dry_run)
    response = render_object(ctx, request, rtype, created, status=201)
    add_warnings(response, warnings)
    return response


async def update(ctx: ServerContext, request: web.Request, target: ResourceRequest) -> web.Response:
    rtype = target.rtype
    if not target.name:
        raise errors.method_not_allowed()
    body = check_body_kind(rtype, await read_body(request))
    meta = body.setdefault("metadata", {})
    take_name_from_url(meta, target)
    if rtype.namespaced:
        if meta.get("namespace") and meta["namespace"] != target.namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        meta["namespace"] = target.namespace
    directive = field_validation(request)
    dry_run = is_dry_run(request)
    obj, warnings = check_unknown_fields(ctx, rtype, body, directive)
    subresource = target.subresource if target.subresource in ("status",) else None
    if target.subresource == "finalize":
        obj = finalize_body(ctx, rtype, target, obj)
    if not target.subresource:
        current = ctx.twin.store.try_get(rtype, target.namespace, target.name)
        stamp_managed_fields(ctx, request, rtype, current, obj)
    updated = ctx.twin.store.update(rtype, obj, subresource=subresource, dry_run=dry_run)
    response = render_object(ctx, request, rtype, updated)
    add_warnings(response, warnings)
    return response


def finalize_body(ctx: ServerContext, rtype: ResourceType, target: ResourceRequest, body: Obj) -> Obj:
    """namespaces/<name>/finalize changes spec.finalizers only."""
    current = copy.deepcopy(ctx.twin.store.get(rtype, None, target.name or ""))
    current.setdefault("spec", {})["finalizers"] = (body.get("spec") or {}).get("finalizers") or []
    current["metadata"]["resourceVersion"] = (body.get("metadata") or {}).get("resourceVersion") or current["metadata"][
        "resourceVersion"
    ]
    return current


async def patch(ctx: ServerContext, request: web.Request, target: ResourceRequest) -> web.Response:
    rtype, store = target.rtype, ctx.twin.store
    if not target.name:
        raise errors.method_not_allowed()
    content_type = request.headers.get("Content-Type", "")
    media_type = content_type.split(";", 1)[0].strip().lower()
    raw = await request.read()
    directive = field_validation(request)
    dry_run = is_dry_run(request)
    force = request.query.get("force", "")
    is_apply = media_type == patching.APPLY_PATCH
    if force and not is_apply:
        raise errors.invalid(
            "PatchOptions",
            "",
            [
                {
                    "reason": "FieldValueInvalid",
                    "field": "force",
                    "message": "Invalid value: true: may not be specified for non-apply patch",
                }
            ],
            "meta.k8s.io",
        )
    subresource = "status" if target.subresource == "status" else None
    if is_apply:
        return await server_side_apply(ctx, request, target, raw, directive=directive, dry_run=dry_run)
    current = store.get(rtype, target.namespace, target.name)
    # Strategic merge needs Go types: built-in kinds only (custom resources answer 415).
    patched = patching.apply_patch(
        current, raw, content_type, kind=rtype.kind, strategic_supported=rtype.schema is None
    )
    if not isinstance(patched, dict):
        raise errors.bad_request("the patch did not produce an object")
    meta = patched.setdefault("metadata", {})
    if meta.get("name") != target.name:
        raise name_mismatch(meta.get("name"), target)
    if rtype.namespaced and meta.get("namespace") != target.namespace:
        raise errors.bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    obj, warnings = check_unknown_fields(ctx, rtype, patched, directive)
    if not target.subresource:
        stamp_managed_fields(ctx, request, rtype, current, obj)
    updated = store.update(rtype, obj, subresource=subresource, dry_run=dry_run)
    response = render_object(ctx, request, rtype, updated)
    add_warnings(response, warnings)
    return response


async def server_side_apply(
    ctx: ServerContext, request: web.Request, target: ResourceRequest, raw: bytes, *, directive: str, dry_run: bool
) -> web.Response:
    """Minimal server-side apply: create when absent, else merge the applied fields into the object.

    managedFields are recorded as for an update (managed_fields). Not modelled: conflicts between managers, and
    removing fields that an earlier apply set and this one omits.
    """
    rtype, store = target.rtype, ctx.twin.store
    if not request.query.get("fieldManager"):
        raise errors.invalid(
            "PatchOptions",
            "",
            [
                {
                    "reason": "FieldValueRequired",
                    "field": "fieldManager",
                    "message": "Required value: is required for apply patch",
                }
            ],
            "meta.k8s.io",
        )
    try:
        applied = yaml.safe_load(raw or b"")
    except yaml.YAMLError as problem:
        raise errors.bad_request(f"error decoding YAML: {problem}") from None
    applied = check_body_kind(rtype, applied)
    if not applied.get("apiVersion") or not applied.get("kind"):
        raise errors.bad_request("apiVersion and kind must be set in an apply patch")
    meta = applied.setdefault("metadata", {})
    take_name_from_url(meta, target)
    if rtype.namespaced:
        meta.setdefault("namespace", target.namespace)
    current = store.try_get(rtype, target.namespace, target.name or "")
    if current is None:
        if target.subresource:
            raise errors.not_found(rtype.plural, target.name or "", rtype.group)
        obj, warnings = check_unknown_fields(ctx, rtype, applied, directive)
        stamp_managed_fields(ctx, request, rtype, None, obj, operation="Apply")
        created = store.create(rtype, obj, namespace=target.namespace, dry_run=dry_run)
        response = render_object(ctx, request, rtype, created, status=201)
        add_warnings(response, warnings)
        return response
    strategic = rtype.schema is None
    patch_body = json.dumps(applied).encode()
    patched = patching.apply_patch(
        current,
        patch_body,
        patching.STRATEGIC_MERGE_PATCH if strategic else patching.MERGE_PATCH,
        kind=rtype.kind,
        strategic_supported=strategic,
    )
    obj, warnings = check_unknown_fields(ctx, rtype, patched, directive)
    if not target.subresource:
        stamp_managed_fields(ctx, request, rtype, current, obj, operation="Apply")
    updated = store.update(
        rtype, obj, subresource="status" if target.subresource == "status" else None, dry_run=dry_run
    )
    response = render_object(ctx, request, rtype, updated)
    add_warnings(response, warnings)
    return response


def stamp_managed_fields(
    ctx: ServerContext,
    request: web.Request,
    rtype: ResourceType,
    current: Obj | None,
    obj: Obj,
    *,
    operation: str = "Update",
) -> None:
    """Record who changed which fields of ``obj`` (the manager from ``fieldManager`` or the User-Agent)."""
    managed_fields.record(
        current,
        obj,
        manager=managed_fields.manager_of(request.query.get("fieldManager", ""), request.headers.get("User-Agent", "")),
        operation=operation,
        api_version=rtype.api_version,
        now=ctx.twin.clock.iso(),
    )


def name_mismatch(name: object, target: ResourceRequest) -> ApiError:
    return errors.bad_request(f"the name of the object ({name}) does not match the name on the URL ({target.name})")


def take_name_from_url(meta: Obj, target: ResourceRequest) -> None:
    """An update or apply body names the object of its URL, or no object (then it gets the URL's name)."""
    if meta.get("name") and meta["name"] != target.name:
        raise name_mismatch(meta["name"], target)
    meta["name"] = target.name
