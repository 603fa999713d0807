"""The non-resource paths: ``/version``, health, discovery (legacy and aggregated ``apidiscovery.k8s.io``) and OpenAPI
v2/v3."""

from __future__ import annotations

import hashlib

from aiohttp import web

from ..machinery import errors
from ..machinery.errors import ApiError
from ..machinery.store import Obj
from . import openapi
from .cluster import RequestInfo
from .context import ServerContext
from .request_info import parse_accept
from .responses import json_response

DISCOVERY_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
DISCOVERY_V2BETA1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
DEFAULT_KUBERNETES_VERSION = "v1.32.4"


async def serve_non_resource(ctx: ServerContext, request: web.Request, info: RequestInfo) -> web.StreamResponse:
    if request.method != "GET":
        raise errors.method_not_allowed()
    path = request.path.rstrip("/") or "/"
    registry = ctx.twin.registry
    accept = parse_accept(request.headers.get("Accept"))
    if path == "/version":
        return json_response(version_info(ctx))
    if path in ("/healthz", "/livez", "/readyz"):
        return web.Response(text="ok", content_type="text/plain")
    if path in ("/api", "/apis"):
        core = path == "/api"
        for media in accept:
            if media.params.get("as") == "APIGroupDiscoveryList" and media.params.get("g") == "apidiscovery.k8s.io":
                version = media.params.get("v")
                if version in ("v2", "v2beta1"):
                    document = openapi.aggregated_discovery(registry, core=core)
                    document["apiVersion"] = f"apidiscovery.k8s.io/{version}"
                    content_type = DISCOVERY_V2 if version == "v2" else DISCOVERY_V2BETA1
                    return _with_etag(request, json_response(document, content_type=content_type))
            if media.is_json and "as" not in media.params:
                break
        if core:
            return json_response(openapi.api_versions(ctx.server_address))
        return json_response(openapi.api_group_list(registry))
    segments = [s for s in path.split("/") if s]
    if segments[0] == "api" and len(segments) == 2:
        found = openapi.resource_list(registry, "", segments[1])
    elif segments[0] == "apis" and len(segments) == 2:
        found = openapi.api_group(registry, segments[1])
    elif segments[0] == "apis" and len(segments) == 3:
        found = openapi.resource_list(registry, segments[1], segments[2])
    elif path == "/openapi/v2":
        if not any(m.is_json for m in accept):
            raise ApiError(406, "NotAcceptable", "only application/json is served for /openapi/v2")
        return json_response(ctx.catalog.v2_document())
    elif path == "/openapi/v3":
        return json_response(ctx.catalog.v3_index())
    elif path.startswith("/openapi/v3/"):
        served = ctx.catalog.v3_document(path.removeprefix("/openapi/v3/"))
        if served is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        body, digest = served
        response = json_response(body)
        response.headers["ETag"] = f'"{digest}"'
        if request.query.get("hash") == digest:
            response.headers["Cache-Control"] = "public, immutable"
        else:
            response.headers["Cache-Control"] = "no-cache, private"
        return response
    else:
        found = None
    if found is None:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    return json_response(found)


def _with_etag(request: web.Request, response: web.Response) -> web.Response:
    """Aggregated discovery as kube-apiserver serves it (``aggregated.ServeHTTPWithETag``): the ETag of the body,
    ``Vary: Accept``, and 304 Not Modified when the client's If-None-Match names it. kube-apiserver says
    ``Cache-Control: public``; the twin says ``no-cache`` (``ApiServer._date_header``: its Date runs ahead of the
    client's clock), so a client revalidates each time, as it would with a server whose clock agrees with its own."""
    body = response.body if isinstance(response.body, bytes) else b""
    etag = '"' + hashlib.sha512(body).hexdigest().upper() + '"'
    if etag in (value.strip() for value in request.headers.get("If-None-Match", "").split(",")):
        response = web.Response(status=304)
    response.headers["ETag"] = etag
    response.headers["Vary"] = "Accept"
    response.headers["Cache-Control"] = "public, no-cache"
    return response


def version_info(ctx: ServerContext) -> Obj:
    git_version = str(ctx.twin.published.get("kubernetes_version") or DEFAULT_KUBERNETES_VERSION)
    major, minor = git_version.lstrip("v").split(".")[:2]
    return {
        "major": major,
        "minor": minor,
        "gitVersion": git_version,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.23.6",
        "compiler": "gc",
        "platform": "linux/amd64",
    }
