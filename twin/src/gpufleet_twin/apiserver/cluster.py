"""The twin as one object: registry, store, simulated clock, controllers.

The HTTP layer (``apiserver/server.py``) serves ``Twin.store``; simulated behaviour
(kubelet, GPU Operator, Network Operator, MCO, BMCs) plugs in as
``Controller`` objects that read and write the same store on the same clock.
Request hooks let fault injection slow down or refuse API calls and let the
recorder count them, without the HTTP layer knowing about either.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..machinery.clock import SimClock
from ..machinery.registry import Registry
from ..machinery.store import Store
from .serviceaccount_tokens import StaticTokens


@dataclass(frozen=True)
class RequestInfo:
    """What the HTTP layer knows about one API request before serving it."""

    method: str
    path: str
    verb: str  # get, list, watch, create, update, patch, delete, deletecollection, proxy, discovery
    group: str | None = None
    resource: str | None = None  # plural
    subresource: str | None = None
    namespace: str | None = None
    name: str | None = None
    # A write with ``dryRun=All`` in its query (kubectl --dry-run=server, kubernetes.core's check mode): the
    # server validates it and stores nothing, and apiserver_request_total labels it with dry_run.
    dry_run: bool = False


# Runs before a request is served; may sleep (slow responses) or raise an
# ApiError (bursts of 5xx/429, write conflicts).
BeforeRequest = Callable[[RequestInfo], Awaitable[None]]
# Runs after a request was answered, with its HTTP status code.
AfterRequest = Callable[[RequestInfo, int], None]
# Extra routes (admin endpoints, pod logs): (method, path, aiohttp handler).
Route = tuple[str, str, Callable[..., Awaitable[Any]]]


class Controller(Protocol):
    """A simulated component: started with the twin, cancelled at shutdown."""

    name: str

    async def run(self, twin: Twin) -> None: ...


@dataclass
class Twin:
    registry: Registry
    store: Store
    clock: SimClock
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    controllers: list[Controller] = field(default_factory=list)
    before_request: list[BeforeRequest] = field(default_factory=list)
    after_request: list[AfterRequest] = field(default_factory=list)
    routes: list[Route] = field(default_factory=list)
    # Free-form facts other parts publish (BMC endpoints, node -> BMC map),
    # written next to the kubeconfig for tests and the demo.
    published: dict[str, Any] = field(default_factory=dict)
    # Serves ``pods/log``: (pod object, container name or None) -> log text.
    # The kubelet simulation sets it; without it the server answers 404.
    pod_logs: Callable[[dict[str, Any], str | None], str] | None = None
    # Simulation state shared by the controllers (``sim.state.SimState``);
    # typed loosely so that the HTTP layer does not depend on the simulation.
    sim: Any = None
    # The PEM of the CA that signed the API server's certificate (the CLI sets it):
    # what the kube-root-ca.crt ConfigMap of every namespace holds.
    ca_cert_pem: bytes = b""
    # Issues and checks ServiceAccount tokens (TokenRequest); ``serviceaccount_tokens.TokenIssuer``.
    service_account_tokens: Any = None
    # Users' bearer tokens (``serve --token-auth-file``, ``POST /admin/tokens``).
    user_tokens: StaticTokens = field(default_factory=StaticTokens)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start_controllers(self) -> None:
        # From now on a turn of this loop moves simulated time on by clock.max_step at most (machinery/clock.py).
        self.clock.meter_loop(asyncio.get_running_loop())
        for controller in self.controllers:
            self._tasks.append(asyncio.create_task(controller.run(self), name=f"controller:{controller.name}"))

    async def stop_controllers(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        self.clock.unmeter_loop()
