"""The other subresources: ``pods/log``, ``pods/binding``, ``serviceaccounts/token`` and ``scale``."""

from __future__ import annotations

import copy

from aiohttp import web

from ..machinery import errors, patching
from ..machinery.errors import ApiError
from ..machinery.store import Obj
from . import builtin_types
from .bodies import check_body_kind, is_dry_run, read_body
from .cluster import RequestInfo
from .context import ServerContext
from .request_info import ResourceRequest
from .responses import json_response


def pod_log(ctx: ServerContext, request: web.Request, target: ResourceRequest) -> web.Response:
    pod = ctx.twin.store.get(target.rtype, target.namespace, target.name or "")
    containers = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or ()]
    init_containers = [c.get("name") for c in (pod.get("spec") or {}).get("initContainers") or ()]
    container = request.query.get("container") or None
    if container is None:
        default = (pod["metadata"].get("annotations") or {}).get("kubectl.kubernetes.io/default-container")
        if default in containers:
            container = default
        elif len(containers) == 1:
            container = containers[0]
        else:
            raise errors.bad_request(
                f"a container name must be specified for pod {target.name}, choose one of: [{' '.join(containers)}]"
                + (f" or one of the init containers: [{' '.join(init_containers)}]" if init_containers else "")
            )
    elif container not in containers and container not in init_containers:
        raise errors.bad_request(f"container {container} is not valid for pod {target.name}")
    provider = ctx.twin.pod_logs
    text = provider(pod, container) if provider is not None else None
    if text is None:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ( pods/log {target.name})")
    tail = request.query.get("tailLines")
    if tail:
        lines = text.splitlines(keepends=True)
        text = "".join(lines[-int(tail) :]) if int(tail) > 0 else ""
    limit = request.query.get("limitBytes")
    if limit:
        text = text.encode()[: int(limit)].decode(errors="ignore")
    return web.Response(text=text, content_type="text/plain")


async def bind(ctx: ServerContext, request: web.Request, target: ResourceRequest) -> web.Response:
    body = await read_body(request)
    node = ((body or {}).get("target") or {}).get("name") if isinstance(body, dict) else None
    if not node:
        raise errors.invalid(
            "Binding",
            target.name or "",
            [{"reason": "FieldValueRequired", "field": "target.name", "message": "Required value"}],
        )
    store = ctx.twin.store
    pod = store.get(target.rtype, target.namespace, target.name or "")
    if (pod.get("spec") or {}).get("nodeName"):
        raise ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on pods/binding "{target.name}": '
            f'pod {target.name} is already assigned to node "{pod["spec"]["nodeName"]}"',
        )

    def bind(obj: Obj) -> None:
        obj.setdefault("spec", {})["nodeName"] = node

    if not is_dry_run(request):
        store.mutate(target.rtype, target.namespace, target.name or "", bind)
    return json_response(
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, status=201
    )


async def token_request(ctx: ServerContext, request: web.Request, target: ResourceRequest) -> web.Response:
    """authentication.k8s.io/v1 TokenRequest for a ServiceAccount (``kubectl create token``)."""
    body = check_body_kind(
        target.rtype,
        await read_body(request),
        expected_kind="TokenRequest",
        expected_api_version="authentication.k8s.io/v1",
    )
    issuer = ctx.twin.service_account_tokens
    if issuer is None:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    answer = issuer.token_request(namespace=target.namespace or "", name=target.name or "", body=body)
    if is_dry_run(request):
        answer["status"] = {"token": "", "expirationTimestamp": answer["status"]["expirationTimestamp"]}
    return json_response(answer, status=201)


async def scale(ctx: ServerContext, request: web.Request, info: RequestInfo, target: ResourceRequest) -> web.Response:
    """autoscaling/v1 Scale of a Deployment or ReplicaSet (spec.replicas)."""
    rtype, store = target.rtype, ctx.twin.store
    current = store.get(rtype, target.namespace, target.name or "")
    if info.verb == "get":
        return json_response(_scale_of(current))
    if info.verb == "update":
        body = check_body_kind(
            rtype, await read_body(request), expected_kind="Scale", expected_api_version="autoscaling/v1"
        )
    elif info.verb == "patch":
        raw = await request.read()
        body = patching.apply_patch(
            _scale_of(current), raw, request.headers.get("Content-Type", ""), kind="Scale", strategic_supported=True
        )
    else:
        raise errors.method_not_allowed()
    replicas = (body.get("spec") or {}).get("replicas")
    if not isinstance(replicas, int) or replicas < 0:
        raise errors.invalid(
            "Scale",
            target.name or "",
            [
                {
                    "reason": "FieldValueInvalid",
                    "field": "spec.replicas",
                    "message": f"Invalid value: {replicas}: must be greater than or equal to 0",
                }
            ],
            "autoscaling",
        )
    sent_rv = (body.get("metadata") or {}).get("resourceVersion")
    if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
        raise errors.conflict(rtype.plural, target.name or "", rtype.group)
    updated = copy.deepcopy(current)
    updated.setdefault("spec", {})["replicas"] = replicas
    result = store.update(rtype, updated, dry_run=is_dry_run(request))
    return json_response(_scale_of(result))


def _scale_of(obj: Obj) -> Obj:
    meta = obj["metadata"]
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta["name"],
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
            "creationTimestamp": meta.get("creationTimestamp"),
        },
        "spec": {"replicas": spec.get("replicas", 1)},
        "status": {
            "replicas": int(status.get("replicas") or 0),
            # The selector as a label selector string, as the scale subresource reports it.
            "selector": builtin_types.format_label_selector(spec.get("selector")) if spec.get("selector") else "",
        },
    }
