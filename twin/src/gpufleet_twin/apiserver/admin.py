"""Helpers for the twin's admin endpoints (``/admin/...``): bearer auth, JSON in and out.

The admin endpoints are the simulation's control panel (faults, clock,
report), served on the API port with the same bearer token as the API.
Errors are Kubernetes ``Status`` objects, like the rest of the server.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from ..machinery import errors

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_response(data: Any, *, status: int = 200) -> web.Response:
    return web.Response(
        text=json.dumps(data, indent=2, sort_keys=False) + "\n", status=status, content_type="application/json"
    )


def error_response(error: errors.ApiError) -> web.Response:
    response = json_response(error.to_status(), status=error.code)
    for name, value in error.headers.items():
        response.headers[name] = value
    return response


def protected(token: str, handler: Handler) -> Handler:
    """Wrap a handler: 401 without the bearer token, ApiError -> Status, bad JSON -> 400."""

    async def guarded(request: web.Request) -> web.StreamResponse:
        sent = request.headers.get("Authorization", "")
        expected = f"Bearer {token}"
        if not hmac.compare_digest(sent.encode(), expected.encode()):
            return error_response(errors.unauthorized())
        try:
            return await handler(request)
        except errors.ApiError as exc:
            return error_response(exc)

    return guarded


async def read_json(request: web.Request) -> Any:
    """The request body as JSON (an empty body is ``{}``)."""
    text = await request.text()
    if not text.strip():
        return {}
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise errors.bad_request(f"the request body is not valid JSON: {exc}") from exc
