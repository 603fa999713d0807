"""The twin's Kubernetes API server: the REST API of kube-apiserver over aiohttp.

Serves ``Twin.store`` the way a real API server serves etcd, so kubectl, the
``kubernetes`` Python client and Ansible's kubernetes.core work unchanged:

- discovery (legacy and aggregated ``apidiscovery.k8s.io/v2``), OpenAPI v2/v3;
- get, list (label/field selectors, ``limit``/``continue`` pagination), watch
  (chunked JSON events, bookmarks, 410 for compacted history), create, update,
  patch (JSON, merge, strategic, minimal server-side apply), delete (with
  ``DeleteOptions``), deletecollection, ``dryRun=All``, ``fieldValidation``;
- Table output for ``kubectl get`` (``as=Table``) and PartialObjectMetadata;
- subresources ``status``, ``scale`` (autoscaling/v1), ``pods/eviction``
  (policy/v1 with PodDisruptionBudgets), ``pods/log``, ``pods/binding``;
- graceful pod deletion, the garbage collector's ``foregroundDeletion`` and
  ``orphan`` finalizers from the propagation options (``sim/garbagecollector``
  does the rest), namespace deletion of its content, CRDs registering their
  kinds live; zero values of ``omitempty`` fields dropped (``machinery/omitempty.py``);
- bearer-token authentication (401 Status for a wrong token; no credentials are ``system:anonymous``, as
  with kube-apiserver's default --anonymous-auth=true), RBAC authorization of every request and its escalation
  check on RBAC writes (``apiserver/rbac.py``, ``apiserver/rbac_escalation.py``: 403 Status as kube-apiserver words it;
  SelfSubjectAccessReview/SelfSubjectRulesReview answered from the same rules),
  and the Twin's request hooks around every API request.

Extension points for the simulation: ``Twin.routes`` (extra aiohttp routes,
e.g. under ``/admin/``), ``Twin.before_request``/``after_request`` hooks,
``Twin.pod_logs`` (serves ``pods/log``; it may raise an ApiError such as 400
"container is waiting to start"), ``Twin.published["kubernetes_version"]``
(``/version``'s gitVersion, e.g. ``v1.32.5``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import email.utils
import hmac
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import yaml
from aiohttp import web

from ..machinery import crd_schema, errors, patching, selectors
from ..machinery.disruption import compute_budget, is_pod_ready, pdb_status
from ..machinery.errors import ApiError
from ..machinery.registry import ResourceType
from ..machinery.store import Obj, compact_json
from . import builtin_types, openapi, rbac, rbac_escalation, serviceaccount_tokens
from .cluster import RequestInfo, Twin
from .crds import CustomResourceRegistrar, install_crds, load_crd_manifests, own_crds_directory
from .install import create_twin, graceful_pod_deletion, install_api_machinery

log = logging.getLogger("gpufleet_twin.server")

JSON_TYPE = "application/json"
YAML_TYPE = "application/yaml"
DISCOVERY_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
DISCOVERY_V2BETA1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
DEFAULT_KUBERNETES_VERSION = "v1.32.4"
# A real server ends a watch after a random 30-60 minutes; clients re-establish it.
DEFAULT_WATCH_TIMEOUT = 1800.0
DEFAULT_BOOKMARK_INTERVAL = 60.0
_WATCH_CHUNK_EVENTS = 500
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
# Who a request acts as: the admin, a user token, a ServiceAccount token, or whom it impersonates.
_USER = web.RequestKey("user", serviceaccount_tokens.UserInfo)
_SELF_SUBJECT_REVIEW = ("authentication.k8s.io", "selfsubjectreviews")
_ACCESS_REVIEW = ("authorization.k8s.io", "selfsubjectaccessreviews")
_RULES_REVIEW = ("authorization.k8s.io", "selfsubjectrulesreviews")


# -- request parsing ------------------------------------------------------------------------------------------


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


# -- continue tokens ----------------------------------------------------------------------------------------


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


# -- the application ------------------------------------------------------------------------------------------


Handler = Callable[[web.Request, RequestInfo, ResourceRequest], Awaitable[web.StreamResponse]]


class ApiServer:
    """The HTTP layer over one Twin."""

    def __init__(
        self,
        twin: Twin,
        *,
        bookmark_interval: float = DEFAULT_BOOKMARK_INTERVAL,
        max_watch_timeout: float = DEFAULT_WATCH_TIMEOUT,
    ) -> None:
        self.twin = twin
        self.catalog = openapi.SchemaCatalog(twin.registry)
        self.bookmark_interval = bookmark_interval
        self.max_watch_timeout = max_watch_timeout
        self.server_address = "127.0.0.1:443"
        self._watchers: set[Any] = set()
        self._stopping = asyncio.Event()
        self.policy = rbac.StorePolicy(twin.store, twin.registry)

    # -- application ---------------------------------------------------------------------------
    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._authenticate], client_max_size=64 * 1024 * 1024)
        app.router.add_get("/admin/healthz", self._admin_healthz)
        app.router.add_post("/admin/tokens", self._admin_tokens)
        for method, path, handler in self.twin.routes:
            app.router.add_route(method, path, handler)
        app.router.add_route("*", "/{tail:.*}", self._serve)
        app.on_response_prepare.append(self._date_header)
        app.on_shutdown.append(self._on_shutdown)
        return app

    async def _date_header(self, request: web.Request, response: web.StreamResponse) -> None:
        # A real server's Date is its own wall clock; the twin's wall clock is
        # the simulated one, so clients that time things by the server (a bake
        # window) see simulated time pass.
        response.headers["Date"] = email.utils.formatdate(self.twin.clock.now(), usegmt=True)

    async def _on_shutdown(self, app: web.Application) -> None:
        self._stopping.set()
        for watcher in list(self._watchers):
            watcher.close()

    @web.middleware
    async def _authenticate(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        own_route = request.match_info.route.resource is not None and request.match_info.get("tail") is None
        if not header and not own_route:
            # No credentials at all: kube-apiserver's default (--anonymous-auth=true) authenticates the request as
            # system:anonymous in system:unauthenticated, and RBAC decides (403 but for what the bootstrap policy
            # allows everyone: system:public-info-viewer's /version, /healthz...). Credentials that fail are 401,
            # and so is the twin's own /admin/ API without credentials (it is not kube-apiserver's).
            user: serviceaccount_tokens.UserInfo | None = serviceaccount_tokens.ANONYMOUS
        else:
            user = self._user_of(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            return _status_response(errors.unauthorized())
        try:
            acting_as = rbac.impersonated_user(
                requester=user,
                user=request.headers.get("Impersonate-User", ""),
                groups=request.headers.getall("Impersonate-Group", []),
                uid=request.headers.get("Impersonate-Uid", ""),
                policy=self.policy,
            )
        except ApiError as problem:
            return _status_response(problem)
        user = acting_as or user
        request[_USER] = user
        if own_route:
            # The twin's own routes (/admin/...) are non-resource paths: system:masters may use them, others
            # only where a rule names the path. API requests are authorized in _serve.
            attributes = rbac.request_attributes(
                user=user, method=request.method, path=request.path, query=rbac.query_of(request.query_string)
            )
            decision = rbac.authorize(attributes, self.policy)
            if not decision.allowed:
                return _status_response(rbac.forbidden(attributes, decision.reason))
        # The RBAC storage's escalation check (rbac_escalation) needs who writes and the name the URL gives.
        named = rbac.request_attributes(
            user=user, method=request.method, path=request.path, query=rbac.query_of(request.query_string)
        ).name
        with rbac_escalation.requester(user, self.policy, named):
            return await handler(request)

    def _user_of(self, token: str) -> serviceaccount_tokens.UserInfo | None:
        """Who a bearer token stands for: the admin, a static user token, or a ServiceAccount token the twin issued."""
        if hmac.compare_digest(token.encode(), self.twin.token.encode()):
            return serviceaccount_tokens.ADMIN
        user = self.twin.user_tokens.authenticate(token)
        if user is not None:
            return user
        issuer = self.twin.service_account_tokens
        return issuer.authenticate(token) if issuer is not None else None

    async def _admin_healthz(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"status": "ok", "resourceVersion": str(self.twin.store.resource_version), "time": self.twin.clock.iso()}
        )

    async def _admin_tokens(self, request: web.Request) -> web.Response:
        """``POST /admin/tokens``: a bearer token for a user or a ServiceAccount (only system:masters may ask).

        ``{"user": "alice", "groups": ["team"], "uid": "..."}`` makes a static user token (as a line of
        kube-apiserver's ``--token-auth-file``); ``{"serviceAccount": "<namespace>/<name>",
        "expirationSeconds": 3600}`` issues a TokenRequest token for an existing ServiceAccount.
        """
        try:
            body = json.loads(await request.text() or "{}")
        except json.JSONDecodeError as problem:
            return _status_response(errors.bad_request(f"the request body is not valid JSON: {problem}"))
        if not isinstance(body, dict) or ("user" in body) == ("serviceAccount" in body):
            return _status_response(
                errors.bad_request('expected {"user": NAME, "groups": [...]} or {"serviceAccount": "NAMESPACE/NAME"}')
            )
        if "user" in body:
            groups = body.get("groups") or []
            if not isinstance(body["user"], str) or not isinstance(groups, list):
                return _status_response(errors.bad_request('"user" must be a string and "groups" a list of strings'))
            token = secrets.token_urlsafe(32)
            try:
                user = self.twin.user_tokens.add(
                    token, username=body["user"], uid=str(body.get("uid") or ""), groups=[str(g) for g in groups]
                )
            except ValueError as problem:
                return _status_response(errors.bad_request(str(problem)))
            return _json_response({"token": token, "user": user.to_json()}, status=201)
        namespace, _, name = str(body["serviceAccount"]).partition("/")
        issuer = self.twin.service_account_tokens
        if not namespace or not name or issuer is None:
            return _status_response(errors.bad_request('"serviceAccount" must be "NAMESPACE/NAME"'))
        spec = {"expirationSeconds": body["expirationSeconds"]} if "expirationSeconds" in body else {}
        try:
            answer = issuer.token_request(namespace=namespace, name=name, body={"spec": spec})
        except ApiError as problem:
            return _status_response(problem)
        token = answer["status"]["token"]
        user = issuer.authenticate(token)
        assert user is not None
        return _json_response(
            {"token": token, "expirationTimestamp": answer["status"]["expirationTimestamp"], "user": user.to_json()},
            status=201,
        )

    # -- dispatch --------------------------------------------------------------------------------
    async def _serve(self, request: web.Request) -> web.StreamResponse:
        info, parts = request_info_for(request.method, request.path, request.query)
        status = 500
        try:
            self._authorize(request)
            for hook in self.twin.before_request:
                await hook(info)
            if parts is None:
                response = await self._serve_non_resource(request, info)
            else:
                response = await self._serve_resource(request, info, self._resolve(parts))
            status = response.status
            return response
        except ApiError as problem:
            status = problem.code
            return _status_response(problem)
        except (ConnectionResetError, asyncio.CancelledError):
            status = 499
            raise
        except Exception as problem:
            # A real server answers 500 with a Status instead of dropping the connection.
            log.exception("internal error serving %s %s", request.method, request.path)
            status = 500
            return _status_response(errors.internal_error(f"{type(problem).__name__}: {problem}"))
        finally:
            for after in self.twin.after_request:
                try:
                    after(info, status)
                except Exception:
                    # A broken recorder must not break the API.
                    log.exception("after_request hook failed")

    def _authorize(self, request: web.Request) -> None:
        """Refuse (403) what the authenticated user may not do, as kube-apiserver's RBAC authorizer would."""
        attributes = rbac.request_attributes(
            user=request[_USER], method=request.method, path=request.path, query=rbac.query_of(request.query_string)
        )
        decision = rbac.authorize(attributes, self.policy)
        if not decision.allowed:
            raise rbac.forbidden(attributes, decision.reason)

    def _resolve(self, parts: list[str]) -> ResourceRequest:
        group, version, namespace, resource, name, subresource, watch = parts
        rtype = self.twin.registry.get(group, resource)
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

    async def _serve_non_resource(self, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        if request.method != "GET":
            raise errors.method_not_allowed("the server does not allow this method on the requested resource")
        path = request.path.rstrip("/") or "/"
        registry = self.twin.registry
        accept = parse_accept(request.headers.get("Accept"))
        if path == "/version":
            return _json_response(self._version())
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
                        return _json_response(document, content_type=content_type)
                if media.is_json and "as" not in media.params:
                    break
            if core:
                return _json_response(openapi.api_versions(self.server_address))
            return _json_response(openapi.api_group_list(registry))
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
            return _json_response(self.catalog.v2_document())
        elif path == "/openapi/v3":
            return _json_response(self.catalog.v3_index())
        elif path.startswith("/openapi/v3/"):
            served = self.catalog.v3_document(path.removeprefix("/openapi/v3/"))
            if served is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            body, digest = served
            response = _json_response(body)
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
        return _json_response(found)

    def _version(self) -> Obj:
        git_version = str(self.twin.published.get("kubernetes_version") or DEFAULT_KUBERNETES_VERSION)
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

    async def _serve_resource(
        self, request: web.Request, info: RequestInfo, target: ResourceRequest
    ) -> web.StreamResponse:
        sub = target.subresource
        verb = info.verb
        if not sub and verb not in target.rtype.verbs:
            raise errors.method_not_allowed("the server does not allow this method on the requested resource")
        if sub == "eviction":
            if verb != "create":
                raise errors.method_not_allowed("the server does not allow this method on the requested resource")
            return await self._evict(request, target)
        if sub == "log":
            if verb != "get":
                raise errors.method_not_allowed("the server does not allow this method on the requested resource")
            return self._pod_log(request, target)
        if sub == "binding":
            if verb != "create":
                raise errors.method_not_allowed("the server does not allow this method on the requested resource")
            return await self._bind(request, target)
        if sub == "scale":
            return await self._scale(request, info, target)
        if sub == "token":
            if verb != "create":
                raise errors.method_not_allowed("the server does not allow this method on the requested resource")
            return await self._token_request(request, target)
        if verb == "watch":
            return await self._watch(request, target)
        if verb == "list":
            return self._list(request, target)
        if verb == "get":
            return self._get(request, target)
        if verb == "create":
            if target.name and not sub:
                raise errors.method_not_allowed("the server does not allow this method on the requested resource")
            return await self._create(request, target)
        if verb == "update":
            return await self._update(request, target)
        if verb == "patch":
            return await self._patch(request, target)
        if verb == "delete":
            return await self._delete(request, target)
        if verb == "deletecollection":
            return await self._delete_collection(request, target)
        raise errors.method_not_allowed("the server does not allow this method on the requested resource")

    # -- reads ----------------------------------------------------------------------------------------
    def _get(self, request: web.Request, target: ResourceRequest) -> web.Response:
        obj = self.twin.store.get(target.rtype, target.namespace, target.name or "")
        return self._render_object(request, target.rtype, obj)

    def _render_object(self, request: web.Request, rtype: ResourceType, obj: Obj, *, status: int = 200) -> web.Response:
        for media in parse_accept(request.headers.get("Accept")):
            kind = media.params.get("as")
            if kind == "Table" and media.params.get("g") == "meta.k8s.io":
                table = self._table(
                    rtype,
                    [obj],
                    media,
                    request,
                    list_meta={"resourceVersion": obj["metadata"].get("resourceVersion", "")},
                )
                return _json_response(table, status=status, content_type=_table_content_type(media))
            if kind == "PartialObjectMetadata" and media.params.get("g") == "meta.k8s.io":
                return _json_response(_partial(obj, media.params.get("v", "v1")), status=status)
            if kind in ("PartialObjectMetadataList",):
                raise ApiError(
                    406,
                    "NotAcceptable",
                    "you requested PartialObjectMetadataList, but the requested object is not a list",
                )
            if media.is_json and not kind:
                return _json_response(obj, status=status)
            if media.type == YAML_TYPE:
                return web.Response(
                    body=yaml.safe_dump(obj, sort_keys=False).encode(), status=status, content_type=YAML_TYPE
                )
        raise ApiError(
            406, "NotAcceptable", "only the following media types are accepted: application/json, application/yaml"
        )

    def _predicate(
        self, request: web.Request, rtype: ResourceType, name: str | None = None
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
            if label_selector is not None and not label_selector.matches(
                (obj.get("metadata") or {}).get("labels") or {}
            ):
                return False
            return field_predicate is None or field_predicate(obj)

        return predicate, True

    def _list(self, request: web.Request, target: ResourceRequest) -> web.Response:
        rtype, store = target.rtype, self.twin.store
        query = request.query
        predicate, filtered = self._predicate(request, rtype)
        limit = _int_param(query, "limit", default=0)
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
                return _json_response(status, status=410)
        page = store.list_page(rtype, target.namespace, predicate, after=start, limit=limit)
        meta: Obj = {"resourceVersion": str(list_rv)}
        if page.more:
            meta["continue"] = encode_continue(list_rv, *_key_of(page.items[-1]))
            if not filtered:
                meta["remainingItemCount"] = page.remaining
        return self._render_list(request, rtype, page.items, meta)

    def _render_list(self, request: web.Request, rtype: ResourceType, items: list[Obj], meta: Obj) -> web.Response:
        for media in parse_accept(request.headers.get("Accept")):
            kind = media.params.get("as")
            if kind == "Table" and media.params.get("g") == "meta.k8s.io":
                table = self._table(rtype, items, media, request, list_meta=meta)
                return _json_response(table, content_type=_table_content_type(media))
            if kind == "PartialObjectMetadataList" and media.params.get("g") == "meta.k8s.io":
                version = media.params.get("v", "v1")
                return _json_response(
                    {
                        "kind": "PartialObjectMetadataList",
                        "apiVersion": f"meta.k8s.io/{version}",
                        "metadata": meta,
                        "items": [_partial(obj, version) for obj in items],
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
                encoded = self.twin.store.encoded
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

    def _table(
        self,
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
        now = self.twin.clock.now()
        rows = []
        for obj in objs:
            row: Obj = {"cells": builtin_types.table_cells(rtype, obj, now)}
            if include == "Object":
                row["object"] = obj
            elif include == "Metadata":
                row["object"] = _partial(obj, version)
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

    # -- watch -------------------------------------------------------------------------------------------
    async def _watch(self, request: web.Request, target: ResourceRequest) -> web.StreamResponse:
        rtype, store, query = target.rtype, self.twin.store, request.query
        predicate, _ = self._predicate(request, rtype, name=target.name)
        timeout = min(
            float(_int_param(query, "timeoutSeconds", default=int(self.max_watch_timeout))), self.max_watch_timeout
        )
        bookmarks = query.get("allowWatchBookmarks", "").lower() in ("1", "true")
        initial_events = query.get("sendInitialEvents", "").lower() in ("1", "true")
        rv_text = query.get("resourceVersion", "")
        since: int | None = None
        if rv_text not in ("", "0") and not initial_events:
            try:
                since = int(rv_text)
            except ValueError:
                raise errors.bad_request(f"invalid resource version: {rv_text}") from None
        table_media = next(
            (
                m
                for m in parse_accept(request.headers.get("Accept"))
                if m.params.get("as") == "Table" and m.params.get("g") == "meta.k8s.io"
            ),
            None,
        )
        response = web.StreamResponse(
            status=200, headers={"Content-Type": JSON_TYPE, "Cache-Control": "no-cache, private"}
        )
        response.enable_chunked_encoding()
        try:
            watcher = store.watch(rtype, namespace=target.namespace, predicate=predicate, since=since)
        except ApiError as problem:
            # A watch from a compacted resourceVersion opens, then reports 410 as an ERROR event.
            await response.prepare(request)
            await response.write(_event_line("ERROR", problem.to_status()))
            await response.write_eof()
            return response
        self._watchers.add(watcher)
        await response.prepare(request)
        first_table = True
        initial_pending = watcher.queue.qsize() if initial_events else 0
        deadline = time.monotonic() + max(0.0, timeout)
        next_bookmark = time.monotonic() + self.bookmark_interval

        def render(obj: Obj) -> Obj:
            nonlocal first_table
            if table_media is None:
                return obj
            table = self._table(
                rtype,
                [obj],
                table_media,
                request,
                list_meta={"resourceVersion": obj["metadata"].get("resourceVersion", "")},
                headers=first_table,
            )
            first_table = False
            return table

        def bookmark(annotations: dict[str, str] | None = None) -> bytes:
            meta: Obj = {"resourceVersion": str(store.resource_version)}
            if annotations:
                meta["annotations"] = annotations
            return _event_line("BOOKMARK", {"kind": rtype.kind, "apiVersion": rtype.api_version, "metadata": meta})

        try:
            if initial_events and initial_pending == 0 and bookmarks:
                await response.write(bookmark({"k8s.io/initial-events-end": "true"}))
            while not self._stopping.is_set():
                now = time.monotonic()
                remaining = deadline - now
                if remaining <= 0:
                    break
                wait = min(remaining, max(0.05, next_bookmark - now)) if bookmarks else remaining
                try:
                    item = await asyncio.wait_for(watcher.queue.get(), timeout=wait)
                except TimeoutError:
                    if bookmarks and watcher.queue.empty() and time.monotonic() >= next_bookmark:
                        await response.write(bookmark())
                        next_bookmark = time.monotonic() + self.bookmark_interval
                    continue
                # Events already queued (a watch's initial state can be thousands) go out in one write.
                chunk: list[bytes] = []
                while item is not None:
                    event_type, obj = item
                    chunk.append(_event_line(event_type, render(obj)))
                    if initial_pending:
                        initial_pending -= 1
                        if initial_pending == 0 and bookmarks:
                            chunk.append(bookmark({"k8s.io/initial-events-end": "true"}))
                    if watcher.queue.empty() or len(chunk) >= _WATCH_CHUNK_EVENTS:
                        break
                    item = watcher.queue.get_nowait()
                if chunk:
                    await response.write(b"".join(chunk))
                if item is None:
                    break
            if bookmarks and not self._stopping.is_set() and watcher.queue.empty():
                # A last bookmark lets the client resume exactly where this watch ended.
                await response.write(bookmark())
            await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            watcher.close()
            self._watchers.discard(watcher)
        return response

    # -- writes ---------------------------------------------------------------------------------------------
    async def _read_body(self, request: web.Request) -> Any:
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

    def _check_body_kind(
        self,
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

    def _field_validation(self, request: web.Request) -> str:
        directive = request.query.get("fieldValidation", "") or "Warn"
        if directive not in ("Strict", "Warn", "Ignore"):
            raise errors.bad_request(
                f'fieldValidation: Unsupported value: "{directive}": supported values: "Ignore", "Strict", "Warn"'
            )
        return directive

    def _dry_run(self, request: web.Request, options: Obj | None = None) -> bool:
        values = list(request.query.getall("dryRun", []))
        values.extend((options or {}).get("dryRun") or [])
        for value in values:
            if value != "All":
                raise errors.bad_request(f'dryRun: Unsupported value: "{value}": supported values: "All"')
        return bool(values)

    def _check_unknown_fields(self, rtype: ResourceType, obj: Obj, directive: str) -> tuple[Obj, list[str]]:
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
            schema = self.catalog.root_schema(rtype) if self.catalog.has_builtin_schema(rtype) else None
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

    async def _create(self, request: web.Request, target: ResourceRequest) -> web.Response:
        rtype = target.rtype
        if rtype.namespaced and not target.namespace:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        body = self._check_body_kind(rtype, await self._read_body(request))
        user = request[_USER]
        review: Obj | None = None
        if rtype.key == _SELF_SUBJECT_REVIEW:
            review = {"userInfo": user.to_json()}
        elif rtype.key == _ACCESS_REVIEW:
            review = rbac.access_review_status(body.get("spec") or {}, user, self.policy)
        elif rtype.key == _RULES_REVIEW:
            review = rbac.rules_review_status(body.get("spec") or {}, user, self.policy)
        if review is not None:
            answered = {**body, "apiVersion": rtype.api_version, "kind": rtype.kind, "status": review}
            answered.setdefault("metadata", {})
            return _json_response(answered, status=201)
        directive = self._field_validation(request)
        dry_run = self._dry_run(request)
        obj, warnings = self._check_unknown_fields(rtype, body, directive)
        created = self.twin.store.create(rtype, obj, namespace=target.namespace, dry_run=dry_run)
        response = self._render_object(request, rtype, created, status=201)
        _add_warnings(response, warnings)
        return response

    async def _update(self, request: web.Request, target: ResourceRequest) -> web.Response:
        rtype = target.rtype
        if not target.name:
            raise errors.method_not_allowed("the server does not allow this method on the requested resource")
        body = self._check_body_kind(rtype, await self._read_body(request))
        meta = body.setdefault("metadata", {})
        if meta.get("name") and meta["name"] != target.name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({target.name})"
            )
        meta["name"] = target.name
        if rtype.namespaced:
            if meta.get("namespace") and meta["namespace"] != target.namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = target.namespace
        directive = self._field_validation(request)
        dry_run = self._dry_run(request)
        obj, warnings = self._check_unknown_fields(rtype, body, directive)
        subresource = target.subresource if target.subresource in ("status",) else None
        if target.subresource == "finalize":
            obj = self._finalize_body(rtype, target, obj)
        updated = self.twin.store.update(rtype, obj, subresource=subresource, dry_run=dry_run)
        response = self._render_object(request, rtype, updated)
        _add_warnings(response, warnings)
        return response

    def _finalize_body(self, rtype: ResourceType, target: ResourceRequest, body: Obj) -> Obj:
        """namespaces/<name>/finalize changes spec.finalizers only."""
        current = copy.deepcopy(self.twin.store.get(rtype, None, target.name or ""))
        current.setdefault("spec", {})["finalizers"] = (body.get("spec") or {}).get("finalizers") or []
        current["metadata"]["resourceVersion"] = (body.get("metadata") or {}).get("resourceVersion") or current[
            "metadata"
        ]["resourceVersion"]
        return current

    async def _patch(self, request: web.Request, target: ResourceRequest) -> web.Response:
        rtype, store = target.rtype, self.twin.store
        if not target.name:
            raise errors.method_not_allowed("the server does not allow this method on the requested resource")
        content_type = request.headers.get("Content-Type", "")
        media_type = content_type.split(";", 1)[0].strip().lower()
        raw = await request.read()
        directive = self._field_validation(request)
        dry_run = self._dry_run(request)
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
            return await self._server_side_apply(request, target, raw, directive=directive, dry_run=dry_run)
        current = store.get(rtype, target.namespace, target.name)
        # Strategic merge needs Go types: built-in kinds only (custom resources answer 415).
        patched = patching.apply_patch(
            current, raw, content_type, kind=rtype.kind, strategic_supported=rtype.schema is None
        )
        if not isinstance(patched, dict):
            raise errors.bad_request("the patch did not produce an object")
        meta = patched.setdefault("metadata", {})
        if meta.get("name") != target.name:
            raise errors.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({target.name})"
            )
        if rtype.namespaced and meta.get("namespace") != target.namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        obj, warnings = self._check_unknown_fields(rtype, patched, directive)
        updated = store.update(rtype, obj, subresource=subresource, dry_run=dry_run)
        response = self._render_object(request, rtype, updated)
        _add_warnings(response, warnings)
        return response

    async def _server_side_apply(
        self, request: web.Request, target: ResourceRequest, raw: bytes, *, directive: str, dry_run: bool
    ) -> web.Response:
        """Minimal server-side apply: create when absent, else merge the applied fields into the object.

        Not modelled: managedFields ownership, conflicts between managers, and
        removing fields that an earlier apply set and this one omits.
        """
        rtype, store = target.rtype, self.twin.store
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
        applied = self._check_body_kind(rtype, applied)
        if not applied.get("apiVersion") or not applied.get("kind"):
            raise errors.bad_request("apiVersion and kind must be set in an apply patch")
        meta = applied.setdefault("metadata", {})
        if meta.get("name") and meta["name"] != target.name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({target.name})"
            )
        meta["name"] = target.name
        if rtype.namespaced:
            meta.setdefault("namespace", target.namespace)
        current = store.try_get(rtype, target.namespace, target.name or "")
        if current is None:
            if target.subresource:
                raise errors.not_found(rtype.plural, target.name or "", rtype.group)
            obj, warnings = self._check_unknown_fields(rtype, applied, directive)
            created = store.create(rtype, obj, namespace=target.namespace, dry_run=dry_run)
            response = self._render_object(request, rtype, created, status=201)
            _add_warnings(response, warnings)
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
        obj, warnings = self._check_unknown_fields(rtype, patched, directive)
        updated = store.update(
            rtype, obj, subresource="status" if target.subresource == "status" else None, dry_run=dry_run
        )
        response = self._render_object(request, rtype, updated)
        _add_warnings(response, warnings)
        return response

    async def _delete_options(self, request: web.Request) -> Obj:
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
            options["gracePeriodSeconds"] = _int_param(query, "gracePeriodSeconds", default=0)
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

    async def _delete(self, request: web.Request, target: ResourceRequest) -> web.Response:
        rtype = target.rtype
        if target.subresource:
            raise errors.method_not_allowed("the server does not allow this method on the requested resource")
        options = await self._delete_options(request)
        dry_run = self._dry_run(request, options)
        result, gone = self._delete_one(rtype, target.namespace, target.name or "", options, dry_run=dry_run)
        warnings = _delete_warnings(rtype, options)
        if rtype.key in (("", "pods"), ("", "namespaces")) or not gone:
            # Pods are served with ReturnDeletedObject; objects still terminating come back as they are,
            # with 202 when the client asked for cascading with the legacy orphanDependents=false
            # (apiserver pkg/endpoints/handlers/delete.go).
            accepted = not gone and options.get("orphanDependents") is False
            response = _json_response(result, status=202 if accepted else 200)
            _add_warnings(response, warnings)
            return response
        response = _json_response(
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
        _add_warnings(response, warnings)
        return response

    def _delete_one(
        self, rtype: ResourceType, namespace: str | None, name: str, options: Obj, *, dry_run: bool
    ) -> tuple[Obj, bool]:
        """Delete one object with DeleteOptions; returns (result, removed from the store).

        The store sets the garbage collector's finalizers from the propagation options; the collector
        (``kube/garbagecollector.py``) deletes or orphans the dependents.
        """
        store = self.twin.store
        preconditions = options.get("preconditions") or {}
        grace = options.get("gracePeriodSeconds")
        if rtype.key == ("", "namespaces") and not dry_run:
            store.get(rtype, namespace, name)
            self._delete_namespace_content(name)
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
        if dry_run:
            gone = not result["metadata"].get("deletionTimestamp")
        else:
            gone = store.try_get(rtype, namespace, name) is None
        return result, gone

    def _delete_namespace_content(self, namespace: str) -> None:
        """The namespace controller's work, done at once: every object of the namespace is deleted."""
        store = self.twin.store
        for rtype in self.twin.registry.all():
            if not rtype.namespaced:
                continue
            for obj in store.list(rtype, namespace):
                # The namespace controller deletes in the background (namespaced_resources_deleter.go).
                store.delete(rtype, namespace, obj["metadata"]["name"], immediate=True, propagation_policy="Background")

    async def _delete_collection(self, request: web.Request, target: ResourceRequest) -> web.Response:
        rtype = target.rtype
        options = await self._delete_options(request)
        dry_run = self._dry_run(request, options)
        predicate, _ = self._predicate(request, rtype)
        deleted = []
        for obj in self.twin.store.list(rtype, target.namespace, predicate):
            meta = obj["metadata"]
            try:
                result, _ = self._delete_one(rtype, meta.get("namespace"), meta["name"], options, dry_run=dry_run)
            except ApiError as problem:
                if problem.code == 404:
                    continue
                raise
            deleted.append(result)
        response = _json_response(
            {
                "kind": rtype.list_kind,
                "apiVersion": rtype.api_version,
                "metadata": {"resourceVersion": str(self.twin.store.resource_version)},
                "items": deleted,
            }
        )
        _add_warnings(response, _delete_warnings(rtype, options))
        return response

    # -- subresources -------------------------------------------------------------------------------------
    async def _evict(self, request: web.Request, target: ResourceRequest) -> web.Response:
        """policy/v1 Eviction, with the eviction REST handler's PodDisruptionBudget checks."""
        store, registry = self.twin.store, self.twin.registry
        body = await self._read_body(request)
        if not isinstance(body, dict) or body.get("kind", "Eviction") != "Eviction":
            raise errors.bad_request("the body of an eviction must be a policy/v1 Eviction")
        if body.get("apiVersion") not in (None, "policy/v1", "policy/v1beta1"):
            raise errors.bad_request(f"unsupported Eviction version {body.get('apiVersion')}")
        name = (body.get("metadata") or {}).get("name")
        if name and name != target.name:
            raise errors.bad_request("name in URL does not match name in Eviction object")
        options = dict(body.get("deleteOptions") or {})
        dry_run = self._dry_run(request, options)
        pod_type = target.rtype
        pod = store.get(pod_type, target.namespace, target.name or "")
        phase = (pod.get("status") or {}).get("phase")
        # Finished, pending and already-terminating pods are evicted regardless of budgets.
        ignore_budgets = phase in ("Succeeded", "Failed", "Pending") or bool(pod["metadata"].get("deletionTimestamp"))
        governing: Obj | None = None
        if not ignore_budgets:
            pdb_type = registry.get("policy", "poddisruptionbudgets")
            pdbs = []
            if pdb_type is not None:
                labels = pod["metadata"].get("labels") or {}
                for pdb in store.list(pdb_type, target.namespace):
                    selector = (pdb.get("spec") or {}).get("selector")
                    if selector is None:
                        continue
                    sel = selectors.label_selector_from_dict(selector)
                    # An empty selector matches nothing for eviction purposes (as getPodDisruptionBudgets skips it).
                    if sel.empty:
                        continue
                    if sel.matches(labels):
                        pdbs.append(pdb)
            if len(pdbs) > 1:
                raise errors.internal_error(
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
                )
            if pdbs:
                assert pdb_type is not None
                governing = pdbs[0]
                self._check_budget(governing, pod)
        self._delete_one(pod_type, target.namespace, target.name or "", options, dry_run=dry_run)
        if governing is not None and not dry_run:
            self._record_disruption(governing, pod)
        return _json_response(
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, status=201
        )

    def _budget_of(self, pdb: Obj) -> tuple[int, int, int]:
        """(disruptionsAllowed, desiredHealthy, currentHealthy) the eviction decides on.

        A status the disruption controller keeps (observedGeneration current) is
        used as is, as the real eviction handler does; without one (no controller,
        or the spec just changed) the budget is computed from the pods now.
        """
        status = pdb.get("status") or {}
        generation = pdb["metadata"].get("generation", 1)
        if "disruptionsAllowed" in status and int(status.get("observedGeneration") or 0) >= generation:
            return (
                int(status["disruptionsAllowed"]),
                int(status.get("desiredHealthy") or 0),
                int(status.get("currentHealthy") or 0),
            )
        pod_type = self.twin.registry.get("", "pods")
        assert pod_type is not None
        budget = compute_budget(pdb, self.twin.store.list(pod_type, pdb["metadata"]["namespace"]))
        if budget.error:
            raise _eviction_refused(
                f"The disruption budget {pdb['metadata']['name']} is still being processed by the server."
            )
        return budget.disruptions_allowed, budget.desired_healthy, budget.current_healthy

    def _check_budget(self, pdb: Obj, pod: Obj) -> None:
        allowed, desired, current = self._budget_of(pdb)
        policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy", "IfHealthyBudget")
        if not is_pod_ready(pod) and (policy == "AlwaysAllow" or (current >= desired > 0)):
            # Unready pods do not count as healthy; evicting one costs nothing when the budget is met.
            return
        if allowed <= 0:
            raise _eviction_refused(
                f"The disruption budget {pdb['metadata']['name']} needs {desired} healthy pods "
                f"and has {current} currently"
            )

    def _record_disruption(self, pdb: Obj, pod: Obj) -> None:
        """Write what the eviction handler writes to the PDB: one disruption fewer, and the pod it took.

        Without a controller-kept status the twin writes the whole status as the
        disruption controller would compute it after the eviction.
        """
        store, registry = self.twin.store, self.twin.registry
        pdb_type, pod_type = registry.get("policy", "poddisruptionbudgets"), registry.get("", "pods")
        assert pdb_type is not None and pod_type is not None
        namespace, name = pdb["metadata"]["namespace"], pdb["metadata"]["name"]
        now = self.twin.clock.iso()
        status = pdb.get("status") or {}
        kept = "disruptionsAllowed" in status and int(status.get("observedGeneration") or 0) >= pdb["metadata"].get(
            "generation", 1
        )

        def write(obj: Obj) -> None:
            if not kept:
                obj["status"] = pdb_status(obj, store.list(pod_type, namespace), now=now)
                return
            current = obj.setdefault("status", {})
            current["disruptionsAllowed"] = max(0, int(current.get("disruptionsAllowed") or 0) - 1)
            current.setdefault("disruptedPods", {})[pod["metadata"]["name"]] = now
            if current["disruptionsAllowed"] == 0:
                for condition in current.get("conditions") or ():
                    if condition.get("type") == "DisruptionAllowed" and condition.get("status") != "False":
                        condition.update(status="False", reason="InsufficientPods", lastTransitionTime=now)

        store.mutate(pdb_type, namespace, name, write, subresource="status")

    def _pod_log(self, request: web.Request, target: ResourceRequest) -> web.Response:
        pod = self.twin.store.get(target.rtype, target.namespace, target.name or "")
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
        provider = self.twin.pod_logs
        text = provider(pod, container) if provider is not None else None
        if text is None:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ( pods/log {target.name})"
            )
        tail = request.query.get("tailLines")
        if tail:
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-int(tail) :]) if int(tail) > 0 else ""
        limit = request.query.get("limitBytes")
        if limit:
            text = text.encode()[: int(limit)].decode(errors="ignore")
        return web.Response(text=text, content_type="text/plain")

    async def _bind(self, request: web.Request, target: ResourceRequest) -> web.Response:
        body = await self._read_body(request)
        node = ((body or {}).get("target") or {}).get("name") if isinstance(body, dict) else None
        if not node:
            raise errors.invalid(
                "Binding",
                target.name or "",
                [{"reason": "FieldValueRequired", "field": "target.name", "message": "Required value"}],
            )
        store = self.twin.store
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

        if not self._dry_run(request):
            store.mutate(target.rtype, target.namespace, target.name or "", bind)
        return _json_response(
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, status=201
        )

    async def _token_request(self, request: web.Request, target: ResourceRequest) -> web.Response:
        """authentication.k8s.io/v1 TokenRequest for a ServiceAccount (``kubectl create token``)."""
        body = self._check_body_kind(
            target.rtype,
            await self._read_body(request),
            expected_kind="TokenRequest",
            expected_api_version="authentication.k8s.io/v1",
        )
        issuer = self.twin.service_account_tokens
        if issuer is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        answer = issuer.token_request(namespace=target.namespace or "", name=target.name or "", body=body)
        if self._dry_run(request):
            answer["status"] = {"token": "", "expirationTimestamp": answer["status"]["expirationTimestamp"]}
        return _json_response(answer, status=201)

    async def _scale(self, request: web.Request, info: RequestInfo, target: ResourceRequest) -> web.Response:
        """autoscaling/v1 Scale of a Deployment or ReplicaSet (spec.replicas)."""
        rtype, store = target.rtype, self.twin.store
        current = store.get(rtype, target.namespace, target.name or "")
        if info.verb == "get":
            return _json_response(_scale_of(current))
        if info.verb == "update":
            body = self._check_body_kind(
                rtype, await self._read_body(request), expected_kind="Scale", expected_api_version="autoscaling/v1"
            )
        elif info.verb == "patch":
            raw = await request.read()
            body = patching.apply_patch(
                _scale_of(current), raw, request.headers.get("Content-Type", ""), kind="Scale", strategic_supported=True
            )
        else:
            raise errors.method_not_allowed("the server does not allow this method on the requested resource")
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
        result = store.update(rtype, updated, dry_run=self._dry_run(request))
        return _json_response(_scale_of(result))


# -- helpers ---------------------------------------------------------------------------------------------------


def make_app(twin: Twin, **settings: Any) -> web.Application:
    """The aiohttp application serving ``twin`` (see ApiServer for settings)."""
    return ApiServer(twin, **settings).make_app()


def _both(first: Callable[[Obj], bool], second: Callable[[Obj], bool]) -> Callable[[Obj], bool]:
    return lambda obj: first(obj) and second(obj)


def _key_of(obj: Obj) -> tuple[str, str]:
    meta = obj["metadata"]
    return (meta.get("namespace") or "", meta["name"])


def _int_param(query: Any, name: str, *, default: int) -> int:
    value = query.get(name)
    if value in (None, ""):
        return default
    try:
        return int(value)
    except ValueError:
        raise errors.bad_request(f"{name}: invalid value {value!r}: must be an integer") from None


def _partial(obj: Obj, version: str) -> Obj:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": obj.get("metadata") or {},
    }


def _table_content_type(media: MediaRange) -> str:
    return f"application/json;as=Table;v={media.params.get('v', 'v1')};g=meta.k8s.io"


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


def _eviction_refused(cause: str) -> ApiError:
    # No Retry-After header: client-go would retry a 429 with one silently, and
    # kubectl drain must see the refusal to report it and retry on its own.
    return ApiError(
        429,
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
        {"causes": [{"reason": "DisruptionBudget", "message": cause}]},
    )


def _event_line(event_type: str, obj: Obj) -> bytes:
    return compact_json({"type": event_type, "object": obj}) + b"\n"


def _json_response(body: Any, *, status: int = 200, content_type: str = JSON_TYPE) -> web.Response:
    response = web.Response(body=compact_json(body), status=status)
    response.headers["Content-Type"] = content_type
    return response


def _status_response(problem: ApiError) -> web.Response:
    response = _json_response(problem.to_status(), status=problem.code)
    for key, value in problem.headers.items():
        response.headers[key] = value
    return response


# pkg/registry/batch/job/storage/storage.go deleteOptionWarnings: batch/v1 orphans a Job's pods by default.
JOB_DELETE_WARNING = (
    "child pods are preserved by default when jobs are deleted; "
    "set propagationPolicy=Background to remove them or set propagationPolicy=Orphan to suppress this warning"
)


def _delete_warnings(rtype: ResourceType, options: Obj) -> list[str]:
    unset = options.get("propagationPolicy") is None and "orphanDependents" not in options
    if rtype.key == ("batch", "jobs") and unset:
        return [JOB_DELETE_WARNING]
    return []


def _add_warnings(response: web.StreamResponse, warnings: list[str]) -> None:
    for warning in warnings[:50]:
        escaped = warning.replace("\\", "\\\\").replace('"', '\\"')
        response.headers.add("Warning", f'299 - "{escaped}"')


__all__ = [
    "ApiServer",
    "CustomResourceRegistrar",
    "create_twin",
    "graceful_pod_deletion",
    "install_api_machinery",
    "install_crds",
    "load_crd_manifests",
    "make_app",
    "own_crds_directory",
    "request_info_for",
]
