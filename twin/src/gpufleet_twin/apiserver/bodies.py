"""What a write sends: its body (JSON, YAML or protobuf), its kind, ``fieldValidation`` and ``dryRun``."""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml
from aiohttp import web

from ..machinery import crd_schema, errors
from ..machinery.errors import ApiError
from ..machinery.registry import ResourceType
from ..machinery.store import Obj
from . import openapi
from .context import ServerContext
from .responses import JSON_TYPE, YAML_TYPE


async def read_body(request: web.Request) -> Any:
    raw = await request.read()
    media_type = (request.content_type or JSON_TYPE).lower()
    if not raw:
        raise errors.bad_request("the body of the request was empty")
    if media_type in (JSON_TYPE, "text/json", "application/octet-stream"):
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as problem:
            raise errors.bad_request(f"error decoding JSON body: {problem}") from None
    if media_type in (YAML_TYPE, "application/x-yaml", "text/yaml"):
        try:
            return yaml.safe_load(raw)
        except yaml.YAMLError as problem:
            raise errors.bad_request(f"error decoding YAML body: {problem}") from None
    if media_type == openapi.PROTOBUF_TYPE:
        try:
            return openapi.decode_protobuf_object(raw)
        except (ValueError, UnicodeDecodeError) as problem:
            raise ApiError(
                415, "UnsupportedMediaType", f"the body of the request could not be read: {problem}"
            ) from None
    raise ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        f"application/json, application/yaml; got {media_type}",
    )


def check_body_kind(
    rtype: ResourceType,
    body: Any,
    *,
    expected_kind: str | None = None,
    expected_api_version: str | None = None,
) -> Obj:
    if not isinstance(body, dict):
        raise errors.bad_request("the body of the request must be an object")
    kind = expected_kind or rtype.kind
    api_version = expected_api_version or rtype.api_version
    if body.get("apiVersion") and body["apiVersion"] != api_version:
        raise errors.bad_request(
            f"the API version in the data ({body['apiVersion']}) does not match "
            f"the expected API version ({api_version})"
        )
    if body.get("kind") and body["kind"] != kind:
        raise errors.bad_request(
            f'{kind} in version "{api_version.rpartition("/")[2]}" cannot be handled as a {kind}: '
            f"unexpected kind {body['kind']}"
        )
    if not isinstance(body.get("metadata", {}), dict):
        raise errors.bad_request("metadata must be an object")
    return body


def field_validation(request: web.Request) -> str:
    directive = request.query.get("fieldValidation", "") or "Warn"
    if directive not in ("Strict", "Warn", "Ignore"):
        raise errors.bad_request(
            f'fieldValidation: Unsupported value: "{directive}": supported values: "Ignore", "Strict", "Warn"'
        )
    return directive


def is_dry_run(request: web.Request, options: Obj | None = None) -> bool:
    values = list(request.query.getall("dryRun", []))
    values.extend((options or {}).get("dryRun") or [])
    for value in values:
        if value != "All":
            raise errors.bad_request(f'dryRun: Unsupported value: "{value}": supported values: "All"')
    return bool(values)


def check_unknown_fields(ctx: ServerContext, rtype: ResourceType, obj: Obj, directive: str) -> tuple[Obj, list[str]]:
    """(object to write, warnings) after the server-side field validation of ``obj``.

    Unknown fields are dropped whatever the directive (Ignore drops them
    silently, Warn with a warning, Strict refuses the request).  Built-in
    kinds are pruned here against their OpenAPI schema (what decoding into
    Go types does); custom resources are pruned by the CRD admission and
    only checked here.
    """
    if rtype.schema is not None:
        if directive == "Ignore":
            return obj, []
        trial = copy.deepcopy(obj)
        unknown = crd_schema.prune(trial, rtype.schema)
        result = obj
    else:
        schema = ctx.catalog.root_schema(rtype) if ctx.catalog.has_builtin_schema(rtype) else None
        if schema is None:
            return obj, []
        result, unknown = openapi.prune_unknown_fields(obj, schema[0], schema[1])
        unknown = [path for path in unknown if not path.startswith("metadata.managedFields")]
    if directive == "Ignore":
        return result, []
    if unknown and directive == "Strict":
        details = ", ".join(f'unknown field "{path}"' for path in unknown)
        raise errors.bad_request(
            f'{rtype.kind} in version "{rtype.version}" cannot be handled as a {rtype.kind}: '
            f"strict decoding error: {details}"
        )
    return result, [f'unknown field "{path}"' for path in unknown]
