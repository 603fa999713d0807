"""How an object or a list is written back: JSON, YAML, Table (``kubectl get``) or PartialObjectMetadata, as the
``Accept`` header asks."""

from __future__ import annotations

import yaml
from aiohttp import web

from ..machinery import errors
from ..machinery.errors import ApiError
from ..machinery.registry import ResourceType
from ..machinery.store import Obj, compact_json
from . import builtin_types
from .context import ServerContext
from .request_info import MediaRange, parse_accept
from .responses import JSON_TYPE, YAML_TYPE, json_response


def render_object(
    ctx: ServerContext, request: web.Request, rtype: ResourceType, obj: Obj, *, status: int = 200
) -> web.Response:
    for media in parse_accept(request.headers.get("Accept")):
        kind = media.params.get("as")
        if kind == "Table" and media.params.get("g") == "meta.k8s.io":
            table = as_table(
                ctx,
                rtype,
                [obj],
                media,
                request,
                list_meta={"resourceVersion": obj["metadata"].get("resourceVersion", "")},
            )
            return json_response(table, status=status, content_type=table_content_type(media))
        if kind == "PartialObjectMetadata" and media.params.get("g") == "meta.k8s.io":
            return json_response(partial_metadata(obj, media.params.get("v", "v1")), status=status)
        if kind in ("PartialObjectMetadataList",):
            raise ApiError(
                406,
                "NotAcceptable",
                "you requested PartialObjectMetadataList, but the requested object is not a list",
            )
        if media.is_json and not kind:
            return json_response(obj, status=status)
        if media.type == YAML_TYPE:
            return web.Response(
                body=yaml.safe_dump(obj, sort_keys=False).encode(), status=status, content_type=YAML_TYPE
            )
    raise ApiError(
        406, "NotAcceptable", "only the following media types are accepted: application/json, application/yaml"
    )


def render_list(
    ctx: ServerContext, request: web.Request, rtype: ResourceType, items: list[Obj], meta: Obj
) -> web.Response:
    for media in parse_accept(request.headers.get("Accept")):
        kind = media.params.get("as")
        if kind == "Table" and media.params.get("g") == "meta.k8s.io":
            table = as_table(ctx, rtype, items, media, request, list_meta=meta)
            return json_response(table, content_type=table_content_type(media))
        if kind == "PartialObjectMetadataList" and media.params.get("g") == "meta.k8s.io":
            version = media.params.get("v", "v1")
            return json_response(
                {
                    "kind": "PartialObjectMetadataList",
                    "apiVersion": f"meta.k8s.io/{version}",
                    "metadata": meta,
                    "items": [partial_metadata(obj, version) for obj in items],
                }
            )
        if kind == "PartialObjectMetadata":
            raise ApiError(
                406, "NotAcceptable", "you requested PartialObjectMetadata, but the requested object is a list"
            )
        if media.type == YAML_TYPE:
            body = {"kind": rtype.list_kind, "apiVersion": rtype.api_version, "metadata": meta, "items": items}
            return web.Response(body=yaml.safe_dump(body, sort_keys=False).encode(), content_type=YAML_TYPE)
        if media.is_json and not kind:
            head = {"kind": rtype.list_kind, "apiVersion": rtype.api_version, "metadata": meta}
            encoded = ctx.twin.store.encoded
            # The same bytes json.dumps would give the whole list, from each item's cached encoding.
            body_bytes = b"".join(
                (
                    compact_json(head)[:-1],
                    b',"items":[',
                    b",".join([encoded(rtype, obj) for obj in items]),
                    b"]}",
                )
            )
            response = web.Response(body=body_bytes)
            response.headers["Content-Type"] = JSON_TYPE
            return response
    raise ApiError(
        406, "NotAcceptable", "only the following media types are accepted: application/json, application/yaml"
    )


def as_table(
    ctx: ServerContext,
    rtype: ResourceType,
    objs: list[Obj],
    media: MediaRange,
    request: web.Request,
    *,
    list_meta: Obj,
    headers: bool = True,
) -> Obj:
    include = request.query.get("includeObject", "Metadata") or "Metadata"
    if include not in ("Object", "Metadata", "None"):
        raise errors.bad_request(f'unrecognized includeObject value: "{include}"')
    version = media.params.get("v", "v1")
    now = ctx.twin.clock.now()
    rows = []
    for obj in objs:
        row: Obj = {"cells": builtin_types.table_cells(rtype, obj, now)}
        if include == "Object":
            row["object"] = obj
        elif include == "Metadata":
            row["object"] = partial_metadata(obj, version)
        rows.append(row)
    columns = None
    if headers:
        columns = [
            {
                "name": c.name,
                "type": c.type,
                "format": c.format,
                "description": c.description,
                "priority": c.priority,
            }
            for c in builtin_types.table_columns(rtype)
        ]
    return {
        "kind": "Table",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": list_meta,
        "columnDefinitions": columns,
        "rows": rows,
    }


def partial_metadata(obj: Obj, version: str) -> Obj:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": obj.get("metadata") or {},
    }


def table_content_type(media: MediaRange) -> str:
    return f"application/json;as=Table;v={media.params.get('v', 'v1')};g=meta.k8s.io"
