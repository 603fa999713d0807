"""Test harness: a twin with BMCs served over real HTTPS from a background event loop.

The twin here is the bare core (registry, store, simulated clock) plus the
simulation state the BMCs act on (``SimState`` with ``NodeHealth`` and
InfiniBand ports); the BMC fleet runs exactly as in the full twin, as a
controller on the twin's loop.  Tests talk to it over HTTP(S) with urllib and
jump simulated time with ``harness.advance``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import http.server
import json
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet_twin.apiserver.cluster import Twin
from gpufleet_twin.kube.state import IbPort, NodeHealth, SimState
from gpufleet_twin.machinery.clock import SimClock
from gpufleet_twin.machinery.registry import Registry, ResourceType
from gpufleet_twin.machinery.store import Store
from gpufleet_twin.redfish import service
from gpufleet_twin.redfish.model import BmcTimings

NODE_TYPE = ResourceType(
    group="", version="v1", kind="Node", plural="nodes", namespaced=False, subresources=frozenset({"status"})
)
NODES = ("gpu-worker-01", "gpu-worker-02")
PASSWORD = "Gpuf1eet-Calvin"


def ib_ports() -> list[IbPort]:
    """8 ConnectX-7 InfiniBand ports and 2 ConnectX-6 Dx Ethernet ports, as the H100 ibstat samples show."""
    ports = [IbPort(device=f"mlx5_{i}", port=1) for i in range(8)]
    ports += [
        IbPort(device=f"mlx5_{i}", port=1, link_layer="Ethernet", firmware="22.38.1002", ca_type="MT4125", rate=100)
        for i in (8, 9)
    ]
    return ports


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class BmcHarness:
    twin: Twin
    fleet: service.BmcFleet
    loop: asyncio.AbstractEventLoop
    ca_file: Path | None
    ssl_context: ssl.SSLContext | None
    images: Path
    image_base_url: str
    _cleanup: list[Callable[[], None]] = field(default_factory=list)

    # -- time and the loop ------------------------------------------------------------------
    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` on the twin's loop (the fleet and the clock are not thread-safe)."""

        async def run() -> Any:
            return fn(*args, **kwargs)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout=10)

    def advance(self, seconds: float) -> None:
        self.call(self.twin.clock.advance, seconds)
        self.settle()

    def settle(self) -> None:
        """Let the fleet's controller run once after a change."""
        self.call(lambda: None)
        future = asyncio.run_coroutine_threadsafe(self.fleet.tick(), self.loop)
        future.result(timeout=10)

    def advance_until(self, predicate: Callable[[], Any], *, step: float, limit: float) -> float:
        """Advance simulated time in ``step``s (giving the controllers a moment each) until ``predicate``.

        Returns the simulated seconds it took; fails after ``limit`` simulated seconds.
        """
        spent = 0.0
        while not predicate():
            if spent >= limit:
                raise AssertionError(f"condition not met within {limit} simulated seconds")
            self.advance(step)
            spent += step
            time.sleep(0.05)
        return spent

    def wait_for(self, predicate: Callable[[], Any], *, timeout: float = 10.0, step: float = 0.02) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError("condition not met in time")
            time.sleep(step)

    # -- HTTP -----------------------------------------------------------------------------------
    def url(self, node: str, path: str) -> str:
        return self.fleet.address(node) + path

    def request(
        self,
        node: str,
        method: str,
        path: str,
        *,
        body: Any = None,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
        auth: tuple[str, str] | bool | None = True,
        token: str | None = None,
        timeout: float = 10.0,
    ) -> Response:
        sent = dict(headers or {})
        if body is not None:
            data = json.dumps(body).encode()
            sent.setdefault("Content-Type", "application/json")
        if token is not None:
            sent["X-Auth-Token"] = token
        elif auth is True:
            creds = self.fleet.credentials(node)
            auth = (creds["username"], creds["password"])
        if isinstance(auth, tuple):
            sent["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request = urllib.request.Request(self.url(node, path), data=data, method=method, headers=sent)
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self.ssl_context) as answer:
                return Response(answer.status, {k.lower(): v for k, v in answer.headers.items()}, answer.read())
        except urllib.error.HTTPError as error:
            return Response(error.code, {k.lower(): v for k, v in error.headers.items()}, error.read())

    def get(self, node: str, path: str, **kwargs: Any) -> Response:
        return self.request(node, "GET", path, **kwargs)

    def post(self, node: str, path: str, body: Any = None, **kwargs: Any) -> Response:
        return self.request(node, "POST", path, body=body if body is not None else {}, **kwargs)

    def multipart(
        self, node: str, path: str, fields: list[tuple[str, str | None, str, bytes]], **kwargs: Any
    ) -> Response:
        """POST multipart/form-data: fields are (name, filename, content type, content)."""
        boundary = "gpufleetBoundary7d93"
        chunks: list[bytes] = []
        for name, filename, content_type, content in fields:
            disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
            chunks.append(
                f"--{boundary}\r\nContent-Disposition: {disposition}\r\nContent-Type: {content_type}\r\n\r\n".encode()
                + content
                + b"\r\n"
            )
        chunks.append(f"--{boundary}--\r\n".encode())
        headers = {"Content-Type": f"multipart/form-data; boundary={boundary}", **kwargs.pop("headers", {})}
        return self.request(node, "POST", path, data=b"".join(chunks), headers=headers, **kwargs)

    def login(self, node: str, password: str | None = None) -> tuple[str, str]:
        creds = self.fleet.credentials(node)
        answer = self.post(
            node,
            "/redfish/v1/SessionService/Sessions",
            {"UserName": creds["username"], "Password": password or creds["password"]},
            auth=None,
        )
        assert answer.status == 201, answer.body
        return answer.headers["x-auth-token"], answer.headers["location"]

    def task(self, node: str, task_uri: str) -> dict[str, Any]:
        answer = self.get(node, task_uri)
        assert answer.status == 200, answer.body
        return answer.json()

    def inventory_ids(self, node: str) -> list[str]:
        members = self.get(node, "/redfish/v1/UpdateService/FirmwareInventory").json()["Members"]
        return [m["@odata.id"].rsplit("/", 1)[1] for m in members]

    def publish_image(self, name: str, content: bytes) -> str:
        (self.images / name).write_bytes(content)
        return f"{self.image_base_url}/{name}"

    def health(self, node: str) -> NodeHealth:
        return self.twin.sim.nodes[node]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def image_server(directory: Path) -> Iterator[str]:
    """A loopback HTTP server for firmware images (what a real site's repository web server is)."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="image-server", daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextlib.contextmanager
def running_twin(
    tmp_path: Path,
    *,
    tls: bool = True,
    time_scale: float = 1.0,
    timings: BmcTimings | None = None,
    nodes: tuple[str, ...] = NODES,
    full: bool = False,
) -> Iterator[BmcHarness]:
    """BMCs on a running twin: the bare core and a SimState by default, the whole simulation with ``full``."""
    ca = service.CaPair.generate() if tls else None
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="twin-loop", daemon=True)
    thread.start()

    def bare_twin() -> Twin:
        registry = Registry()
        registry.add(NODE_TYPE)
        clock = SimClock(time_scale=time_scale)
        store = Store(registry, clock)
        twin = Twin(registry=registry, store=store, clock=clock)
        twin.sim = SimState(clock=clock)
        for name in nodes:
            twin.sim.add_node(
                NodeHealth(
                    name=name,
                    kernel="5.14.0-427.40.1.el9_4.x86_64",
                    os_image="Red Hat Enterprise Linux CoreOS 416.94.202410211619-0",
                    ostree_version="416.94.202410211619-0",
                    ib_ports=ib_ports(),
                )
            )
            store.create(NODE_TYPE, {"metadata": {"name": name, "labels": {"node-role.kubernetes.io/worker": ""}}})
        return twin

    def simulated_twin() -> Twin:
        from gpufleet_twin.apiserver.server import create_twin
        from gpufleet_twin.harness.build import populate

        twin = create_twin(time_scale=time_scale)
        populate(twin, {"nodes": len(nodes), "profile": "kubernetes"})
        return twin

    async def build() -> tuple[Twin, service.BmcFleet]:
        twin = simulated_twin() if full else bare_twin()
        fleet = service.install(
            twin,
            nodes=None if full else list(nodes),
            ca=ca,
            tls=tls,
            password=PASSWORD,
            timings=timings,
            work_dir=tmp_path / "bmc-state",
        )
        twin.start_controllers()
        return twin, fleet

    twin: Twin | None = None
    try:
        twin, fleet = asyncio.run_coroutine_threadsafe(build(), loop).result(timeout=30)
        ca_file = None
        context = None
        if ca is not None:
            # Clients trust the CA, as they would trust the twin's CA: no verification is switched off.
            ca_file = tmp_path / "bmc-ca.crt"
            ca_file.write_bytes(ca.cert_pem)
            context = ssl.create_default_context(cafile=str(ca_file))
        images = tmp_path / "images"
        images.mkdir()
        with image_server(images) as base_url:
            harness = BmcHarness(
                twin=twin,
                fleet=fleet,
                loop=loop,
                ca_file=ca_file,
                ssl_context=context,
                images=images,
                image_base_url=base_url,
            )
            harness.wait_for(lambda: all(harness.get(n, "/redfish/v1", auth=None).status == 200 for n in fleet.nodes))
            yield harness
    finally:
        if twin is not None:
            asyncio.run_coroutine_threadsafe(twin.stop_controllers(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
