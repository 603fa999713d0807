"""Responses: JSON bodies, Kubernetes ``Status`` errors and ``Warning`` headers."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ..machinery.errors import ApiError
from ..machinery.store import compact_json

JSON_TYPE = "application/json"
YAML_TYPE = "application/yaml"


def json_response(body: Any, *, status: int = 200, content_type: str = JSON_TYPE) -> web.Response:
    response = web.Response(body=compact_json(body), status=status)
    response.headers["Content-Type"] = content_type
    return response


def status_response(problem: ApiError) -> web.Response:
    response = json_response(problem.to_status(), status=problem.code)
    for key, value in problem.headers.items():
        response.headers[key] = value
    return response


def add_warnings(response: web.StreamResponse, warnings: list[str]) -> None:
    for warning in warnings[:50]:
        escaped = warning.replace("\\", "\\\\").replace('"', '\\"')
        response.headers.add("Warning", f'299 - "{escaped}"')
