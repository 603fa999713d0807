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

This module is the entry point: ``ApiServer`` (the aiohttp application, authentication and RBAC around every
request, dispatch by verb and subresource) and what importers take from here. The work is in the modules beside it:
``request_info`` (parsing and resolving a request), ``discovery`` (non-resource paths), ``reads``, ``rendering``,
``watch``, ``bodies``, ``writes``, ``deletes``, ``eviction``, ``subresources``, ``authentication``, ``responses``,
``context`` (the state the handlers share); building a twin in ``install``, ``admission``, ``admission_dra``,
``names`` and ``crds``.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from ..machinery import errors
from ..machinery.errors import ApiError
from . import authentication, deletes, discovery, eviction, rbac, reads, subresources, watch, writes
from .cluster import RequestInfo, Twin
from .context import USER, ServerContext
from .crds import CustomResourceRegistrar, install_crds, load_crd_manifests, own_crds_directory
from .install import create_twin, graceful_pod_deletion, install_api_machinery
from .request_info import ResourceRequest, request_info_for, resolve
from .responses import status_response

log = logging.getLogger("gpufleet_twin.server")


class ApiServer(ServerContext):
    """The HTTP layer over one Twin (its settings: ``ServerContext``)."""

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
        # kube-apiserver's WithCacheControl filter: every answer that sets no Cache-Control of its own gets
        # "no-cache, private". It matters more here than there: an HTTP cache (kubectl's discovery cache) judges a
        # response's age by its own clock against Date, and the twin's Date runs ahead, so without no-cache a cached
        # answer would look fresh until the wall clock caught up (kubectl would never see a CRD created since).
        response.headers.setdefault("Cache-Control", "no-cache, private")

    async def _on_shutdown(self, app: web.Application) -> None:
        self.stopping.set()
        for watcher in list(self.watchers):
            watcher.close()

    @web.middleware
    async def _authenticate(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        return await authentication.authenticate(self, request, handler)

    async def _admin_healthz(self, request: web.Request) -> web.Response:
        return await authentication.admin_healthz(self, request)

    async def _admin_tokens(self, request: web.Request) -> web.Response:
        return await authentication.admin_tokens(self, request)

    # -- dispatch --------------------------------------------------------------------------------
    async def _serve(self, request: web.Request) -> web.StreamResponse:
        info, parts = request_info_for(request.method, request.path, request.query)
        status = 500
        try:
            self._authorize(request)
            for hook in self.twin.before_request:
                await hook(info)
            if parts is None:
                response = await discovery.serve_non_resource(self, request, info)
            else:
                response = await self._serve_resource(request, info, resolve(self.twin.registry, parts))
            status = response.status
            return response
        except ApiError as problem:
            status = problem.code
            return status_response(problem)
        except (ConnectionResetError, asyncio.CancelledError):
            status = 499
            raise
        except Exception as problem:
            # A real server answers 500 with a Status instead of dropping the connection.
            log.exception("internal error serving %s %s", request.method, request.path)
            status = 500
            return status_response(errors.internal_error(f"{type(problem).__name__}: {problem}"))
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
            user=request[USER], method=request.method, path=request.path, query=rbac.query_of(request.query_string)
        )
        decision = rbac.authorize(attributes, self.policy)
        if not decision.allowed:
            raise rbac.forbidden(attributes, decision.reason)

    async def _serve_resource(
        self, request: web.Request, info: RequestInfo, target: ResourceRequest
    ) -> web.StreamResponse:
        sub = target.subresource
        verb = info.verb
        if not sub and verb not in target.rtype.verbs:
            raise errors.method_not_allowed()
        if sub == "eviction":
            if verb != "create":
                raise errors.method_not_allowed()
            return await eviction.evict(self, request, target)
        if sub == "log":
            if verb != "get":
                raise errors.method_not_allowed()
            return subresources.pod_log(self, request, target)
        if sub == "binding":
            if verb != "create":
                raise errors.method_not_allowed()
            return await subresources.bind(self, request, target)
        if sub == "scale":
            return await subresources.scale(self, request, info, target)
        if sub == "token":
            if verb != "create":
                raise errors.method_not_allowed()
            return await subresources.token_request(self, request, target)
        if verb == "watch":
            return await watch.watch(self, request, target)
        if verb == "list":
            return reads.list_objects(self, request, target)
        if verb == "get":
            return reads.get(self, request, target)
        if verb == "create":
            if target.name and not sub:
                raise errors.method_not_allowed()
            return await writes.create(self, request, target)
        if verb == "update":
            return await writes.update(self, request, target)
        if verb == "patch":
            return await writes.patch(self, request, target)
        if verb == "delete":
            return await deletes.delete(self, request, target)
        if verb == "deletecollection":
            return await deletes.delete_collection(self, request, target)
        raise errors.method_not_allowed()


def make_app(twin: Twin, **settings: Any) -> web.Application:
    """The aiohttp application serving ``twin`` (see ApiServer for settings)."""
    return ApiServer(twin, **settings).make_app()


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
