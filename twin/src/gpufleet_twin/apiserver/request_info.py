"""Request parsing: what a request asks for (RequestInfo, as kube-apiserver's RequestInfoFactory resolves it), the
resource it names in the registry, the media types it accepts, and integer query parameters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..machinery import errors
from ..machinery.errors import ApiError
from ..machinery.registry import Registry, ResourceType
from .cluster import RequestInfo

_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})


@dataclass(frozen=True)
class ResourceRequest:
    """A request for a resource path, resolved against the registry."""

    rtype: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None
    watch_path: bool


@dataclass(frozen=True)
class MediaRange:
    type: str
    params: dict[str, str]

    @property
    def is_json(self) -> bool:
        return self.type in ("application/json", "application/*", "*/*")


def parse_accept(header: str | None) -> list[MediaRange]:
    if not header:
        return [MediaRange("*/*", {})]
    ranges = []
    for part in header.split(","):
        pieces = [p.strip() for p in part.split(";") if p.strip()]
        if not pieces:
            continue
        params = {}
        for piece in pieces[1:]:
            key, _, value = piece.partition("=")
            params[key.strip().lower()] = value.strip().strip('"')
        ranges.append(MediaRange(pieces[0].lower(), params))
    return ranges


_WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def request_info_for(method: str, path: str, query: Any) -> tuple[RequestInfo, list[str] | None]:
    """RequestInfo as kube-apiserver's RequestInfoFactory resolves it, and the resource path parts.

    The parts are ``[group, version, namespace or "", resource, name, subresource, watch]`` for
    resource requests, None for anything else.
    """
    segments = [segment for segment in path.split("/") if segment]
    lowered = method.lower()
    if not segments or segments[0] not in ("api", "apis"):
        verb = "discovery" if segments and segments[0] in ("openapi", "version") else lowered
        return RequestInfo(method=method, path=path, verb=verb), None
    if segments[0] == "api":
        if len(segments) < 2:
            return RequestInfo(method=method, path=path, verb="discovery"), None
        group, version, rest = "", segments[1], segments[2:]
    else:
        if len(segments) < 3:
            return RequestInfo(
                method=method, path=path, verb="discovery", group=segments[1] if len(segments) > 1 else None
            ), None
        group, version, rest = segments[1], segments[2], segments[3:]
    if not rest:
        return RequestInfo(method=method, path=path, verb="discovery", group=group), None
    watch_path = False
    if rest[0] == "watch":
        watch_path, rest = True, rest[1:]
    namespace = None
    if rest and rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    if not rest:
        return RequestInfo(method=method, path=path, verb=lowered, group=group), None
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    watch = watch_path or str(query.get("watch", "")).lower() in ("1", "true")
    if watch and lowered == "get":
        verb = "watch"
    elif lowered == "get":
        verb = "get" if name else "list"
    elif lowered == "post":
        verb = "create"
    elif lowered == "put":
        verb = "update"
    elif lowered == "patch":
        verb = "patch"
    elif lowered == "delete":
        verb = "delete" if name else "deletecollection"
    else:
        verb = lowered
    info = RequestInfo(
        method=method,
        path=path,
        verb=verb,
        group=group,
        resource=resource,
        subresource=subresource,
        namespace=namespace,
        name=name,
        dry_run=verb in _WRITE_VERBS and bool(query.get("dryRun")),
    )
    if len(rest) > 3:
        return info, None
    return info, [
        group,
        version,
        namespace or "",
        resource,
        name or "",
        subresource or "",
        "watch" if watch_path else "",
    ]


def resolve(registry: Registry, parts: list[str]) -> ResourceRequest:
    """The resource request of ``request_info_for``'s parts; 404 for what the registry does not serve."""
    group, version, namespace, resource, name, subresource, watch = parts
    rtype = registry.get(group, resource)
    if rtype is None or rtype.version != version:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    if not rtype.namespaced and namespace and not (rtype.key == ("", "namespaces") and namespace == name):
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    if subresource and subresource not in rtype.subresources:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    return ResourceRequest(
        rtype=rtype,
        namespace=(namespace or None) if rtype.namespaced else None,
        name=name or None,
        subresource=subresource or None,
        watch_path=bool(watch),
    )


def int_param(query: Any, name: str, *, default: int) -> int:
    value = query.get(name)
    if value in (None, ""):
        return default
    try:
        return int(value)
    except ValueError:
        raise errors.bad_request(f"{name}: invalid value {value!r}: must be an integer") from None
