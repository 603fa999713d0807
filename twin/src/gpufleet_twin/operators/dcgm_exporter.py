"""dcgm-exporter's ``/metrics`` for every simulated GPU node, so a real Prometheus can scrape the twin.

On a real cluster the GPU Operator runs NVIDIA's dcgm-exporter as a
DaemonSet; Prometheus scrapes each pod on port 9400. The twin serves what
each node's exporter would, at ``GET /admin/dcgm-exporter/{node}/metrics``
(the twin's bearer token, like every admin endpoint): the fields of the
exporter's ``etc/default-counters.csv`` that matter to an upgrade
(``DCGM_FI_DEV_XID_ERRORS``: the value of the last XID, a gauge; clocks,
temperature, power, utilisation, framebuffer), plus the ECC volatile totals
(``DCGM_FI_DEV_ECC_SBE_VOL_TOTAL``, ``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL``), which
the default file lists commented out and clusters that alert on ECC errors
enable in their own counters file. Every series carries the exporter's labels
``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname`` (the
node name, as the GPU Operator's exporter sets it) and
``DCGM_FI_DRIVER_VERSION``.

The values follow the node's ``NodeHealth``: the fault ``ecc_errors`` (and
``gpu_lost``) moves them, on the GPU ``nvidia-smi`` reports them on. While
the node is down or its driver is not loaded the exporter cannot read the
GPUs and the endpoint answers 503, as a scrape of a crashed exporter pod
fails. The exposition text is written by ``prometheus_client``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric

from ..apiserver.admin import error_response, protected
from ..apiserver.cluster import Route, Twin
from ..kube.logs import _gpus as gpu_facts
from ..kube.state import NodeHealth
from ..machinery import errors

PATH = "/admin/dcgm-exporter/{node}/metrics"

# (field, Prometheus type, help): the exporter's counters-file columns.
_FIELDS = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    # Counters in the exporter's file; declared untyped here: prometheus_client writes a counter's TYPE line
    # with the OpenMetrics "_total" suffix added, which would not name these series. Prometheus stores and
    # queries them the same either way.
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "unknown", "Total number of single-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "unknown", "Total number of double-bit volatile ECC errors."),
)
# XID 79 (fallen off the bus) is reported on the GPU nvidia-smi cannot reach (bus DB), the others on GPU 0,
# where harness/validation.py's kernel log puts them.
_LOST_GPU_XID = 79


class NodeExporter:
    """The collector of one node's exporter: ``prometheus_client`` calls ``collect``."""

    def __init__(self, node: NodeHealth) -> None:
        self.node = node

    def collect(self) -> Iterator[Metric]:
        node = self.node
        gpus = gpu_facts(node, list(range(node.gpu_count)))
        last_xid_on = {0: next((x for x in reversed(node.xid_events) if x != _LOST_GPU_XID), 0)}
        if _LOST_GPU_XID in node.xid_events and gpus:
            last_xid_on[gpus[-1].index] = _LOST_GPU_XID
        for name, kind, text in _FIELDS:
            metric = Metric(name, text, kind)
            for gpu in gpus:
                labels = {
                    "gpu": str(gpu.index),
                    "UUID": gpu.uuid,
                    "pci_bus_id": gpu.bus_id,
                    "device": f"nvidia{gpu.index}",
                    "modelName": gpu.model.smi_name,
                    "Hostname": node.name,
                    "DCGM_FI_DRIVER_VERSION": node.driver_version or "",
                }
                values = {
                    "DCGM_FI_DEV_SM_CLOCK": 1980.0,
                    "DCGM_FI_DEV_GPU_TEMP": float(gpu.temperature),
                    "DCGM_FI_DEV_POWER_USAGE": gpu.power,
                    "DCGM_FI_DEV_GPU_UTIL": 0.0,
                    "DCGM_FI_DEV_XID_ERRORS": float(last_xid_on.get(gpu.index, 0)),
                    "DCGM_FI_DEV_FB_FREE": float(gpu.model.memory_mib - 1),
                    "DCGM_FI_DEV_FB_USED": 1.0,
                    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": float(gpu.corrected),
                    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": float(gpu.uncorrected),
                }
                metric.add_sample(name, labels, values[name])
            yield metric


def exposition(node: NodeHealth) -> bytes:
    """The node exporter's ``/metrics`` body (Prometheus text format 0.0.4)."""
    return generate_latest(NodeExporter(node))  # type: ignore[arg-type,unused-ignore]  # anything with collect()


def routes(twin: Twin) -> list[Route]:
    async def metrics(request: web.Request) -> web.StreamResponse:
        name = request.match_info["node"]
        node = twin.sim.nodes.get(name) if twin.sim is not None else None
        if node is None:
            return error_response(errors.not_found("dcgm-exporter", name))
        if not node.kubelet_running or not node.ready or node.driver_version is None:
            message = f"dcgm-exporter on {name} is not running (node down or no GPU driver)"
            return error_response(errors.ApiError(503, "ServiceUnavailable", message))
        return web.Response(body=exposition(node), headers={"Content-Type": CONTENT_TYPE_LATEST})

    return [("GET", PATH, protected(twin.token, metrics))]


def install(twin: Twin) -> None:
    twin.routes.extend(routes(twin))
    twin.published["dcgm_exporter"] = {"metrics": PATH}


def scrape_targets(published: dict[str, Any]) -> list[str]:
    """The metrics path of every GPU worker a twin published (what a test's Prometheus scrapes)."""
    path = str((published.get("dcgm_exporter") or {}).get("metrics") or PATH)
    return [path.format(node=node) for node in published.get("gpu_worker_nodes") or []]
