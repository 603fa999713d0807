"""Deletes: DeleteOptions (propagation, grace period, preconditions), one object, a namespace with its content, and
deletecollection."""

from __future__ import annotations

import json

import yaml
from aiohttp import web

from ..machinery import errors
from ..machinery.errors import ApiError
from ..machinery.registry import ResourceType
from ..machinery.store import Obj
from .bodies import is_dry_run
from .context import ServerContext
from .reads import selector_predicate
from .request_info import ResourceRequest, int_param
from .responses import JSON_TYPE, YAML_TYPE, add_warnings, json_response

# pkg/registry/batch/job/storage/storage.go deleteOptionWarnings: batch/v1 orphans a Job's pods by default.
JOB_DELETE_WARNING = (
    "child pods are preserved by default when jobs are deleted; "
    "set propagationPolicy=Background to remove them or set propagationPolicy=Orphan to suppress this warning"
)


def delete_warnings(rtype: ResourceType, options: Obj) -> list[str]:
    unset = options.get("propagationPolicy") is None and "orphanDependents" not in options
    if rtype.key == ("batch", "jobs") and unset:
        return [JOB_DELETE_WARNING]
    return []


async def delete_options(request: web.Request) -> Obj:
    raw = await request.read()
    options: Obj = {}
    if raw.strip():
        try:
            decoded = json.loads(raw) if (request.content_type or JSON_TYPE) != YAML_TYPE else yaml.safe_load(raw)
        except (ValueError, yaml.YAMLError) as problem:
            raise errors.bad_request(f"error decoding DeleteOptions: {problem}") from None
        if not isinstance(decoded, dict):
            raise errors.bad_request("DeleteOptions must be an object")
        options = decoded
    query = request.query
    if "gracePeriodSeconds" in query:
        options["gracePeriodSeconds"] = int_param(query, "gracePeriodSeconds", default=0)
    if "propagationPolicy" in query:
        options["propagationPolicy"] = query["propagationPolicy"]
    if query.get("orphanDependents"):
        options["orphanDependents"] = query["orphanDependents"].lower() == "true"
    if "orphanDependents" in options and "propagationPolicy" in options and options["propagationPolicy"]:
        # ValidateDeleteOptions (apimachinery pkg/apis/meta/v1/validation).
        raise errors.invalid(
            "DeleteOptions",
            "",
            [
                {
                    "reason": "FieldValueInvalid",
                    "field": "propagationPolicy",
                    "message": f'Invalid value: "{options["propagationPolicy"]}": '
                    "orphanDependents and deletionPropagation cannot be both set",
                }
            ],
            "meta.k8s.io",
        )
    policy = options.get("propagationPolicy")
    if policy not in (None, "Orphan", "Background", "Foreground"):
        raise errors.invalid(
            "DeleteOptions",
            "",
            [
                {
                    "reason": "FieldValueNotSupported",
                    "field": "propagationPolicy",
                    "message": f'Unsupported value: "{policy}": supported values: '
                    '"Foreground", "Background", "Orphan", "nil"',
                }
            ],
            "meta.k8s.io",
        )
    return options


async def delete(ctx: ServerContext, request: web.Request, target: ResourceRequest) -> web.Response:
    rtype = target.rtype
    if target.subresource:
        raise errors.method_not_allowed()
    options = await delete_options(request)
    dry_run = is_dry_run(request, options)
    result, gone = delete_one(ctx, rtype, target.namespace, target.name or "", options, dry_run=dry_run)
    warnings = delete_warnings(rtype, options)
    if rtype.key in (("", "pods"), ("", "namespaces")) or not gone:
        # Pods are served with ReturnDeletedObject; objects still terminating come back as they are,
        # with 202 when the client asked for cascading with the legacy orphanDependents=false
        # (apiserver pkg/endpoints/handlers/delete.go).
        accepted = not gone and options.get("orphanDependents") is False
        response = json_response(result, status=202 if accepted else 200)
        add_warnings(response, warnings)
        return response
    response = json_response(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {
                "name": target.name,
                "group": rtype.group,
                "kind": rtype.plural,
                "uid": result["metadata"].get("uid"),
            },
        }
    )
    add_warnings(response, warnings)
    return response


def delete_one(
    ctx: ServerContext, rtype: ResourceType, namespace: str | None, name: str, options: Obj, *, dry_run: bool
) -> tuple[Obj, bool]:
    """Delete one object with DeleteOptions; returns (result, removed from the store).

    The store sets the garbage collector's finalizers from the propagation options; the collector
    (``kube/garbagecollector.py``) deletes or orphans the dependents.
    """
    store = ctx.twin.store
    preconditions = options.get("preconditions") or {}
    grace = options.get("gracePeriodSeconds")
    if rtype.key == ("", "namespaces") and not dry_run:
        store.get(rtype, namespace, name)
        delete_namespace_content(ctx, name)
    result = store.delete(
        rtype,
        namespace,
        name,
        precondition_uid=preconditions.get("uid"),
        precondition_rv=preconditions.get("resourceVersion"),
        immediate=grace is not None and int(grace) == 0,
        dry_run=dry_run,
        grace_period_seconds=None if grace is None else int(grace),
        propagation_policy=options.get("propagationPolicy"),
        orphan_dependents=options.get("orphanDependents"),
    )
    gone = not result["metadata"].get("deletionTimestamp") if dry_run else store.try_get(rtype, namespace, name) is None
    return result, gone


def delete_namespace_content(ctx: ServerContext, namespace: str) -> None:
    """The namespace controller's work, done at once: every object of the namespace is deleted."""
    store = ctx.twin.store
    for rtype in ctx.twin.registry.all():
        if not rtype.namespaced:
            continue
        for obj in store.list(rtype, namespace):
            # The namespace controller deletes in the background (namespaced_resources_deleter.go).
            store.delete(rtype, namespace, obj["metadata"]["name"], immediate=True, propagation_policy="Background")


async def delete_collection(ctx: ServerContext, request: web.Request, target: ResourceRequest) -> web.Response:
    rtype = target.rtype
    options = await delete_options(request)
    dry_run = is_dry_run(request, options)
    predicate, _ = selector_predicate(request, rtype)
    deleted = []
    for obj in ctx.twin.store.list(rtype, target.namespace, predicate):
        meta = obj["metadata"]
        try:
            result, _ = delete_one(ctx, rtype, meta.get("namespace"), meta["name"], options, dry_run=dry_run)
        except ApiError as problem:
            if problem.code == 404:
                continue
            raise
        deleted.append(result)
    response = json_response(
        {
            "kind": rtype.list_kind,
            "apiVersion": rtype.api_version,
            "metadata": {"resourceVersion": str(ctx.twin.store.resource_version)},
            "items": deleted,
        }
    )
    add_warnings(response, delete_warnings(rtype, options))
    return response
