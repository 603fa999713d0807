"""Who a request is: bearer tokens (the admin's, static user tokens, ServiceAccount tokens), impersonation, and the
twin's ``/admin/healthz`` and ``/admin/tokens``.

kube-apiserver's default ``--anonymous-auth=true``: a request without credentials is ``system:anonymous``; credentials
that fail are 401. RBAC decides the rest (``rbac.py``).
"""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Awaitable, Callable

from aiohttp import web

from ..machinery import errors
from ..machinery.errors import ApiError
from . import rbac, rbac_escalation, serviceaccount_tokens
from .context import USER, ServerContext
from .responses import json_response, status_response


async def authenticate(
    ctx: ServerContext, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
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
        user = user_of(ctx, token.strip()) if scheme.lower() == "bearer" else None
    if user is None:
        return status_response(errors.unauthorized())
    try:
        acting_as = rbac.impersonated_user(
            requester=user,
            user=request.headers.get("Impersonate-User", ""),
            groups=request.headers.getall("Impersonate-Group", []),
            uid=request.headers.get("Impersonate-Uid", ""),
            policy=ctx.policy,
        )
    except ApiError as problem:
        return status_response(problem)
    user = acting_as or user
    request[USER] = user
    if own_route:
        # The twin's own routes (/admin/...) are non-resource paths: system:masters may use them, others
        # only where a rule names the path. API requests are authorized in _serve.
        attributes = rbac.request_attributes(
            user=user, method=request.method, path=request.path, query=rbac.query_of(request.query_string)
        )
        decision = rbac.authorize(attributes, ctx.policy)
        if not decision.allowed:
            return status_response(rbac.forbidden(attributes, decision.reason))
    # The RBAC storage's escalation check (rbac_escalation) needs who writes and the name the URL gives.
    named = rbac.request_attributes(
        user=user, method=request.method, path=request.path, query=rbac.query_of(request.query_string)
    ).name
    with rbac_escalation.requester(user, ctx.policy, named):
        return await handler(request)


def user_of(ctx: ServerContext, token: str) -> serviceaccount_tokens.UserInfo | None:
    """Who a bearer token stands for: the admin, a static user token, or a ServiceAccount token the twin issued."""
    if hmac.compare_digest(token.encode(), ctx.twin.token.encode()):
        return serviceaccount_tokens.ADMIN
    user = ctx.twin.user_tokens.authenticate(token)
    if user is not None:
        return user
    issuer = ctx.twin.service_account_tokens
    return issuer.authenticate(token) if issuer is not None else None


async def admin_healthz(ctx: ServerContext, request: web.Request) -> web.Response:
    return web.json_response(
        {"status": "ok", "resourceVersion": str(ctx.twin.store.resource_version), "time": ctx.twin.clock.iso()}
    )


async def admin_tokens(ctx: ServerContext, request: web.Request) -> web.Response:
    """``POST /admin/tokens``: a bearer token for a user or a ServiceAccount (only system:masters may ask).

    ``{"user": "alice", "groups": ["team"], "uid": "..."}`` makes a static user token (as a line of
    kube-apiserver's ``--token-auth-file``); ``{"serviceAccount": "<namespace>/<name>",
    "expirationSeconds": 3600}`` issues a TokenRequest token for an existing ServiceAccount.
    """
    try:
        body = json.loads(await request.text() or "{}")
    except json.JSONDecodeError as problem:
        return status_response(errors.bad_request(f"the request body is not valid JSON: {problem}"))
    if not isinstance(body, dict) or ("user" in body) == ("serviceAccount" in body):
        return status_response(
            errors.bad_request('expected {"user": NAME, "groups": [...]} or {"serviceAccount": "NAMESPACE/NAME"}')
        )
    if "user" in body:
        groups = body.get("groups") or []
        if not isinstance(body["user"], str) or not isinstance(groups, list):
            return status_response(errors.bad_request('"user" must be a string and "groups" a list of strings'))
        token = secrets.token_urlsafe(32)
        try:
            user = ctx.twin.user_tokens.add(
                token, username=body["user"], uid=str(body.get("uid") or ""), groups=[str(g) for g in groups]
            )
        except ValueError as problem:
            return status_response(errors.bad_request(str(problem)))
        return json_response({"token": token, "user": user.to_json()}, status=201)
    namespace, _, name = str(body["serviceAccount"]).partition("/")
    issuer = ctx.twin.service_account_tokens
    if not namespace or not name or issuer is None:
        return status_response(errors.bad_request('"serviceAccount" must be "NAMESPACE/NAME"'))
    spec = {"expirationSeconds": body["expirationSeconds"]} if "expirationSeconds" in body else {}
    try:
        answer = issuer.token_request(namespace=namespace, name=name, body={"spec": spec})
    except ApiError as problem:
        return status_response(problem)
    token = answer["status"]["token"]
    user = issuer.authenticate(token)
    assert user is not None
    return json_response(
        {"token": token, "expirationTimestamp": answer["status"]["expirationTimestamp"], "user": user.to_json()},
        status=201,
    )
