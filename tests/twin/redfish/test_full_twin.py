"""BMCs on the whole simulated cluster: a Redfish reset takes the Kubernetes node down and brings it back."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from bmc_harness import BmcHarness, running_twin

from gpufleet_twin.redfish import BMC_ADDRESS_ANNOTATION
from gpufleet_twin.redfish.model import BmcTimings

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("gpufleet_twin.harness.seed") is None, reason="the simulation's seeding is not written yet"
)

TIMINGS = BmcTimings(host_boot_seconds=120.0)
RESET = "/redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset"


def ready_status(bmcs: BmcHarness, node: str) -> str:
    node_type = bmcs.twin.registry.get("", "nodes")
    obj: dict[str, Any] = bmcs.call(bmcs.twin.store.get, node_type, None, node)
    conditions = {c["type"]: c["status"] for c in obj.get("status", {}).get("conditions", [])}
    return conditions.get("Ready", "")


def test_reset_through_the_bmc_reboots_the_kubernetes_node(tmp_path: Path) -> None:
    with running_twin(tmp_path, full=True, timings=TIMINGS) as bmcs:
        node = bmcs.fleet.nodes[0]
        node_type = bmcs.twin.registry.get("", "nodes")
        annotations = bmcs.call(bmcs.twin.store.get, node_type, None, node)["metadata"]["annotations"]
        assert annotations[BMC_ADDRESS_ANNOTATION] == bmcs.fleet.address(node)
        bmcs.wait_for(lambda: ready_status(bmcs, node) == "True")
        boot_id = bmcs.health(node).boot_id

        assert bmcs.post(node, RESET, {"ResetType": "ForceRestart"}).status == 204
        # The kubelet stops posting; the node lifecycle controller marks the node after its grace period.
        down_after = bmcs.advance_until(lambda: ready_status(bmcs, node) == "Unknown", step=10, limit=120)
        assert down_after >= 40
        assert ready_status(bmcs, bmcs.fleet.nodes[1]) == "True"

        back_after = bmcs.advance_until(lambda: ready_status(bmcs, node) == "True", step=10, limit=300)
        reboot_seconds = 5 + TIMINGS.host_boot_seconds  # a forced restart skips the graceful shutdown
        assert down_after + back_after == pytest.approx(reboot_seconds, abs=20)
        assert bmcs.health(node).boot_id != boot_id


def test_fault_route_through_the_twin_api_server(tmp_path: Path) -> None:
    """The admin routes as the real API server mounts them: bearer token, JSON body."""
    from aiohttp import web

    from gpufleet_twin.apiserver.server import ApiServer

    with running_twin(tmp_path, full=True) as bmcs:
        node = bmcs.fleet.nodes[1]

        async def serve() -> tuple[web.AppRunner, int]:
            runner = web.AppRunner(ApiServer(bmcs.twin).make_app())
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

        runner, port = asyncio.run_coroutine_threadsafe(serve(), bmcs.loop).result(timeout=10)
        try:
            url = f"http://127.0.0.1:{port}/admin/bmc/{node}/fault"
            body = json.dumps({"type": "unresponsive", "mode": "refuse", "seconds": 300}).encode()
            headers = {"Content-Type": "application/json"}
            unauthenticated = urllib.request.Request(url, data=body, method="POST", headers=headers)
            with pytest.raises(urllib.error.HTTPError) as denied:
                urllib.request.urlopen(unauthenticated, timeout=5)
            assert denied.value.code == 401
            headers["Authorization"] = f"Bearer {bmcs.twin.token}"
            with urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST", headers=headers)) as ok:
                assert ok.status == 201
            bmcs.settle()
            with pytest.raises(urllib.error.URLError):
                bmcs.get(node, "/redfish/v1", auth=None, timeout=2)
            bmcs.advance(301)
            assert bmcs.get(node, "/redfish/v1", auth=None).status == 200
        finally:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), bmcs.loop).result(timeout=10)
