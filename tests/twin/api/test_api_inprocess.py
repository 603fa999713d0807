"""Server behaviours that need a twin built in the test: small watch history, request hooks,
pod log providers, extra routes, and the speed of a 10,000-node paginated list.

The server runs on a local port inside the test's own event loop (plain HTTP:
TLS and the CLI are covered by the session twin of the other files).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from gpufleet_twin.apiserver.cluster import RequestInfo, Twin
from gpufleet_twin.apiserver.server import ApiServer, install_api_machinery
from gpufleet_twin.machinery import errors
from gpufleet_twin.machinery.clock import SimClock
from gpufleet_twin.machinery.registry import Registry
from gpufleet_twin.machinery.store import VERIFY_ENCODED_ENV, Store

Scenario = Callable[[Twin, aiohttp.ClientSession, str], Awaitable[None]]


def serve(
    scenario: Scenario, *, history: int = 50_000, prepare: Callable[[Twin], None] | None = None, **settings: Any
) -> None:
    async def main() -> None:
        registry = Registry()
        clock = SimClock()
        twin = Twin(registry=registry, store=Store(registry, clock, history_per_type=history), clock=clock)
        install_api_machinery(twin)
        namespaces = registry.get("", "namespaces")
        assert namespaces is not None
        twin.store.create(namespaces, {"metadata": {"name": "default"}})
        if prepare is not None:
            prepare(twin)
        runner = web.AppRunner(ApiServer(twin, **settings).make_app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            headers = {"Authorization": f"Bearer {twin.token}"}
            async with aiohttp.ClientSession(headers=headers) as session:
                await asyncio.wait_for(scenario(twin, session, f"http://127.0.0.1:{port}"), timeout=60)
        finally:
            await runner.cleanup()

    asyncio.run(main())


async def _events(response: aiohttp.ClientResponse) -> list[dict]:
    return [json.loads(line) for line in (await response.text()).splitlines() if line.strip()]


def test_watch_from_a_compacted_resource_version_reports_410_as_an_error_event():
    async def scenario(twin: Twin, session: aiohttp.ClientSession, url: str) -> None:
        base = f"{url}/api/v1/namespaces/default/configmaps"
        for index in range(6):
            async with session.post(base, json={"metadata": {"name": f"cm-{index}"}}) as created:
                assert created.status == 201
        async with session.get(f"{base}?watch=1&resourceVersion=2&timeoutSeconds=1") as response:
            assert response.status == 200
            events = await _events(response)
        assert [event["type"] for event in events] == ["ERROR"]
        assert events[0]["object"]["code"] == 410
        assert events[0]["object"]["reason"] == "Expired"
        current = twin.store.resource_version
        async with session.get(f"{base}?watch=1&resourceVersion={current - 1}&timeoutSeconds=1") as response:
            assert [event["object"]["metadata"]["name"] for event in await _events(response)] == ["cm-5"]

    serve(scenario, history=3)


def test_a_continue_token_older_than_the_history_is_410_with_a_fresh_token():
    async def scenario(twin: Twin, session: aiohttp.ClientSession, url: str) -> None:
        base = f"{url}/api/v1/namespaces/default/configmaps"
        for index in range(4):
            await session.post(base, json={"metadata": {"name": f"cm-{index}"}})
        async with session.get(f"{base}?limit=2") as response:
            token = (await response.json())["metadata"]["continue"]
        for index in range(4, 10):
            await session.post(base, json={"metadata": {"name": f"cm-{index}"}})
        async with session.get(f"{base}?limit=2&continue={token}") as response:
            assert response.status == 410
            status = await response.json()
        assert status["reason"] == "Expired"
        assert "too old to display a consistent list result" in status["message"]
        async with session.get(f"{base}?limit=100&continue={status['metadata']['continue']}") as response:
            names = [item["metadata"]["name"] for item in (await response.json())["items"]]
        assert names == [f"cm-{index}" for index in range(2, 10)]

    serve(scenario, history=3)


def test_initial_events_end_with_an_annotated_bookmark_and_idle_watches_get_bookmarks():
    async def scenario(twin: Twin, session: aiohttp.ClientSession, url: str) -> None:
        base = f"{url}/api/v1/namespaces"
        query = (
            "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1"
        )
        async with session.get(f"{base}?{query}") as response:
            events = await _events(response)
        assert [e["type"] for e in events[:2]] == ["ADDED", "BOOKMARK"]
        assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
        assert events[-1]["type"] == "BOOKMARK"
        started = time.monotonic()
        async with session.get(
            f"{base}?watch=1&resourceVersion={twin.store.resource_version}&allowWatchBookmarks=true&timeoutSeconds=2"
        ) as response:
            idle = await _events(response)
        assert time.monotonic() - started < 5
        assert len(idle) >= 3 and {e["type"] for e in idle} == {"BOOKMARK"}

    serve(scenario, bookmark_interval=0.5)


def test_request_hooks_see_request_info_and_can_refuse():
    seen: list[tuple[str, str | None, str | None, int]] = []

    def prepare(twin: Twin) -> None:
        async def refuse_secrets(info: RequestInfo) -> None:
            if info.resource == "secrets":
                raise errors.ApiError(503, "ServiceUnavailable", "injected fault")

        twin.before_request.append(refuse_secrets)
        twin.after_request.append(lambda info, code: seen.append((info.verb, info.resource, info.subresource, code)))

    async def scenario(twin: Twin, session: aiohttp.ClientSession, url: str) -> None:
        base = f"{url}/api/v1/namespaces/default"
        await session.post(f"{base}/configmaps", json={"metadata": {"name": "a", "labels": {"x": "1"}}})
        await session.get(f"{base}/configmaps/a")
        await session.get(f"{base}/configmaps")
        await session.get(f"{url}/api/v1/configmaps?watch=true&timeoutSeconds=0")
        await session.patch(
            f"{base}/configmaps/a", json={"data": {}}, headers={"Content-Type": "application/merge-patch+json"}
        )
        await session.delete(f"{base}/configmaps?labelSelector=x%3D1")
        async with session.get(f"{base}/secrets") as refused:
            assert refused.status == 503
            assert (await refused.json())["message"] == "injected fault"
        await session.get(f"{url}/apis")

    serve(scenario, prepare=prepare)
    assert seen == [
        ("create", "configmaps", None, 201),
        ("get", "configmaps", None, 200),
        ("list", "configmaps", None, 200),
        ("watch", "configmaps", None, 200),
        ("patch", "configmaps", None, 200),
        ("deletecollection", "configmaps", None, 200),
        ("list", "secrets", None, 503),
        ("discovery", None, None, 200),
    ]


def test_pod_logs_come_from_the_registered_provider_and_extra_routes_are_served():
    def prepare(twin: Twin) -> None:
        twin.pod_logs = lambda pod, container: f"{pod['metadata']['name']}/{container}: line 1\nline 2\nline 3\n"

        async def hello(request: web.Request) -> web.Response:
            return web.json_response({"hello": "admin"})

        twin.routes.append(("GET", "/admin/hello", hello))

    async def scenario(twin: Twin, session: aiohttp.ClientSession, url: str) -> None:
        pods = f"{url}/api/v1/namespaces/default/pods"
        spec = {"containers": [{"name": "driver", "image": "d:1"}, {"name": "toolkit", "image": "t:1"}]}
        await session.post(pods, json={"metadata": {"name": "nvidia-driver"}, "spec": spec})
        async with session.get(f"{pods}/nvidia-driver/log?container=driver&tailLines=2") as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain")
            assert await response.text() == "line 2\nline 3\n"
        async with session.get(f"{pods}/nvidia-driver/log") as response:
            assert response.status == 400
            assert "a container name must be specified" in (await response.json())["message"]
        async with session.get(f"{url}/admin/hello") as response:
            assert await response.json() == {"hello": "admin"}
        async with aiohttp.ClientSession() as anonymous, anonymous.get(f"{url}/admin/hello") as response:
            assert response.status == 401

    serve(scenario, prepare=prepare)


def test_paginated_list_of_10000_nodes_takes_seconds_not_minutes():
    def prepare(twin: Twin) -> None:
        nodes = twin.registry.get("", "nodes")
        assert nodes is not None
        for index in range(10_000):
            twin.store.create(
                nodes,
                {
                    "metadata": {"name": f"gpu-worker-{index:05d}", "labels": {"nvidia.com/gpu.present": "true"}},
                    "status": {
                        "conditions": [{"type": "Ready", "status": "True"}],
                        "capacity": {"nvidia.com/gpu": "8"},
                    },
                },
            )

    async def scenario(twin: Twin, session: aiohttp.ClientSession, url: str) -> None:
        started = time.monotonic()
        names: list[str] = []
        token = ""
        while True:
            async with session.get(f"{url}/api/v1/nodes?limit=500&continue={token}") as response:
                page = await response.json()
            names += [item["metadata"]["name"] for item in page["items"]]
            token = page["metadata"].get("continue", "")
            if not token:
                break
        elapsed = time.monotonic() - started
        assert len(names) == 10_000 and len(set(names)) == 10_000
        assert elapsed < 10, f"20 pages of 500 nodes took {elapsed:.1f}s"

    serve(scenario, prepare=prepare)


def test_lists_serve_each_object_as_last_written_and_an_in_place_change_is_caught(monkeypatch):
    monkeypatch.setenv(VERIFY_ENCODED_ENV, "1")

    async def scenario(twin: Twin, session: aiohttp.ClientSession, url: str) -> None:
        base = f"{url}/api/v1/namespaces/default/configmaps"
        for index in range(3):
            await session.post(base, json={"metadata": {"name": f"cm-{index}"}, "data": {"v": "1"}})

        async def listed() -> tuple[bytes, dict]:
            async with session.get(base) as response:
                assert response.status == 200
                body = await response.read()
            return body, json.loads(body)

        first_bytes, first = await listed()
        again_bytes, _ = await listed()
        assert again_bytes == first_bytes
        # Byte for byte what encoding the whole list at once gives.
        assert first_bytes == json.dumps(first, separators=(",", ":")).encode()

        changed = first["items"][1]
        changed["data"]["v"] = "2"
        async with session.put(f"{base}/cm-1", json=changed) as response:
            assert response.status == 200
        async with session.delete(f"{base}/cm-0") as response:
            assert response.status == 200
        _, after = await listed()
        assert [(item["metadata"]["name"], item["data"]["v"]) for item in after["items"]] == [
            ("cm-1", "2"),
            ("cm-2", "1"),
        ]

        # The store's rule (a stored dict never changes) broken on purpose: the check names the object.
        configmaps = twin.registry.get("", "configmaps")
        assert configmaps is not None
        twin.store.get(configmaps, "default", "cm-2")["data"]["v"] = "changed in place"
        async with session.get(base) as response:
            assert response.status == 500

    serve(scenario)
