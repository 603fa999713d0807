"""Pod logs: what a validation pod's container printed, from its node's ``NodeHealth``.

``PodLogReader.read(pod, container)`` serves ``pods/log``.  Providers that
other parts of the simulation register in ``SimState.log_providers`` are
asked first.  Otherwise the container's command and args say what it ran,
and the output follows the real tools' formats (see
``reference/samples``):

- ``nvidia-smi`` (the default table), ``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]``
  (``[N/A]`` where real output has it, ECC counters from the node) and
  ``nvidia-smi -q -d ECC``; with no driver loaded, the "couldn't
  communicate with the NVIDIA driver" failure;
- ``ibstat [device]``: one block per HCA and port, from ``NodeHealth.ib_ports``;
- ``dcgmi diag -r 1..4``: the DCGM 3.x table (capitalised test names,
  "Fail - GPU: 1" plus a Warning row) or the DCGM 4.x one (lower-case
  sections with a row per GPU), chosen by ``NodeHealth.dcgm_version``; tests
  named in ``dcgm_failures`` ("pcie", "memory", "pcie:1" for GPU 1...) fail,
  and uncorrectable ECC errors fail "Page Retirement/Row Remap".

A pod that requests ``nvidia.com/gpu`` sees only that many GPUs (indexes
0..n-1), as the device plugin exposes them; a pod requesting none (a
privileged validator) sees all of them.  Other containers print a plausible
start line (and their crash message when crash-looping).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..machinery import errors
from ..machinery.clock import rfc3339
from . import podutil
from .nodelabels import GpuModel, cuda_version_for, gpu_model
from .state import NodeHealth, SimState

Obj = dict[str, Any]

DRIVER_UNREACHABLE = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)
_TOOLS = re.compile(r"\bdcgmi\s+diag\b|\bnvidia-smi\b|\bibstat\b")


class PodLogReader:
    def __init__(self, sim: SimState, *, now: Callable[[], float] | None = None) -> None:
        self._sim = sim
        self._now = now

    def read(self, pod: Obj, container: str | None) -> str:
        spec = pod.get("spec") or {}
        containers = list(spec.get("containers") or ()) + list(spec.get("initContainers") or ())
        names = [c.get("name", "") for c in containers]
        meta = pod.get("metadata") or {}
        if container is None:
            if len(spec.get("containers") or ()) > 1:
                choices = " ".join(c.get("name", "") for c in spec.get("containers") or ())
                raise errors.bad_request(
                    f"a container name must be specified for pod {meta.get('name')}, choose one of: [{choices}]"
                )
            container = names[0] if names else None
        elif container not in names:
            raise errors.bad_request(f"container {container} is not valid for pod {meta.get('name')}")
        self._require_started(pod, container)
        node = self._sim.nodes.get(spec.get("nodeName") or "")
        for provider in self._sim.log_providers:
            text = provider(pod, container, node)
            if text is not None:
                return text
        definition: Obj = next((c for c in containers if c.get("name") == container), {})
        command = " ".join([*(definition.get("command") or ()), *(definition.get("args") or ())])
        outputs = [
            self._tool_output(match.group(0), command[match.start() :], pod, node) for match in _TOOLS.finditer(command)
        ]
        if outputs:
            return "".join(outputs)
        return self._default_log(pod, container or "", node)

    def _require_started(self, pod: Obj, container: str | None) -> None:
        # The kubelet refuses logs of a container that has not started yet.
        for status in (pod.get("status") or {}).get("containerStatuses") or ():
            if status.get("name") != container:
                continue
            waiting = (status.get("state") or {}).get("waiting")
            if waiting and not status.get("restartCount") and not status.get("lastState"):
                raise errors.bad_request(
                    f'container "{container}" in pod "{pod["metadata"]["name"]}" is waiting to start: '
                    f"{waiting.get('reason', 'ContainerCreating')}"
                )

    def _tool_output(self, tool: str, command: str, pod: Obj, node: NodeHealth | None) -> str:
        if node is None:
            return ""
        args = _arguments(command)
        moment = self._moment()
        if tool.startswith("dcgmi"):
            return dcgmi_diag(node, level=_diag_level(args))
        if tool == "ibstat":
            device = args[1] if len(args) > 1 and not args[1].startswith("-") else None
            return ibstat(node, device=device)
        gpus = _visible_gpus(pod, node)
        query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
        if query is not None:
            fmt = next((a.split("=", 1)[1] for a in args if a.startswith("--format=")), "csv")
            return nvidia_smi_query(node, fields=query.split(","), csv_format=fmt, gpus=gpus, moment=moment)
        if "-q" in args or "--query" in args:
            return nvidia_smi_q(node, gpus=gpus, moment=moment)
        return nvidia_smi_table(node, gpus=gpus, moment=moment)

    def _default_log(self, pod: Obj, container: str, node: NodeHealth | None) -> str:
        statuses = {s.get("name"): s for s in (pod.get("status") or {}).get("containerStatuses") or ()}
        status = statuses.get(container) or {}
        started = ((status.get("state") or {}).get("running") or {}).get("startedAt") or rfc3339(self._moment())
        lines = [f'time="{started}" level=info msg="Starting {container}" node="{(node.name if node else "")}"']
        last = (status.get("lastState") or {}).get("terminated") or {}
        if last.get("message"):
            lines.append(f'time="{last.get("finishedAt", started)}" level=error msg="{last["message"]}"')
        return "\n".join(lines) + "\n"

    def _moment(self) -> float:
        if self._now is not None:
            return self._now()
        if self._sim.clock is not None:
            return self._sim.clock.now()
        return 0.0


# -- argument helpers -------------------------------------------------------------------------------
def _arguments(command: str) -> list[str]:
    """The words of one tool invocation: up to a shell separator."""
    head = re.split(r"&&|\|\||;|\||\n", command, maxsplit=1)[0]
    try:
        return shlex.split(head)
    except ValueError:
        return head.split()


def _diag_level(args: list[str]) -> int:
    for flag in ("-r", "--run"):
        if flag in args and args.index(flag) + 1 < len(args):
            value = args[args.index(flag) + 1]
            return int(value) if value.isdigit() else 2
    return 1


def _visible_gpus(pod: Obj, node: NodeHealth) -> list[int]:
    wanted = podutil.gpu_request(pod)
    count = node.gpu_count if wanted <= 0 else min(wanted, node.gpu_count)
    return list(range(count))


# -- per-GPU facts ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Gpu:
    index: int
    model: GpuModel
    bus_id: str
    uuid: str
    serial: str
    temperature: int
    power: float
    corrected: int
    uncorrected: int


_BUS_NUMBERS = ("19", "3B", "4C", "5D", "9B", "BB", "CB", "DB")


def _gpus(node: NodeHealth, indexes: list[int]) -> list[_Gpu]:
    model = gpu_model(node.gpu_product, memory_mib=node.gpu_memory_mib)
    found = []
    for index in indexes:
        digest = hashlib.sha256(f"{node.name}/{index}".encode()).hexdigest()
        bus = _BUS_NUMBERS[index % len(_BUS_NUMBERS)] if index < len(_BUS_NUMBERS) else f"{0x20 + index:02X}"
        found.append(
            _Gpu(
                index=index,
                model=model,
                bus_id=f"00000000:{bus}:00.0",
                uuid=f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}",
                serial=str(int(digest[:10], 16))[:13].rjust(13, "1"),
                temperature=22 + int(digest[32:34], 16) % 8,
                power=round(model.power_limit_w * 0.1 + int(digest[34:36], 16) % 5, 2),
                # Error counters of the node land on its first GPU (one bad GPU is the common case).
                corrected=node.ecc_corrected if index == 0 else 0,
                uncorrected=node.ecc_uncorrected if index == 0 else 0,
            )
        )
    return found


# -- nvidia-smi --------------------------------------------------------------------------------------------------
def _smi_time(moment: float) -> str:
    return dt.datetime.fromtimestamp(moment, dt.UTC).strftime("%a %b %d %H:%M:%S %Y")


def _lost_bus_lines(node: NodeHealth) -> str:
    if 79 not in node.xid_events:
        return ""
    # XID 79: the GPU fell off the bus; nvidia-smi reports it before anything else.
    return "Unable to determine the device handle for GPU0000:DB:00.0: Unknown Error\n"


def nvidia_smi_table(node: NodeHealth, *, gpus: list[int], moment: float) -> str:
    if node.driver_version is None:
        return DRIVER_UNREACHABLE
    version = node.driver_version
    cuda = cuda_version_for(version)
    rule = "+-----------------------------------------+------------------------+----------------------+"
    lines = [
        _smi_time(moment),
        "+-----------------------------------------------------------------------------------------+",
        f"| NVIDIA-SMI {version:<22} Driver Version: {version:<14} CUDA Version: {cuda:<9}|",
        "|-----------------------------------------+------------------------+----------------------+",
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                        |               MIG M. |",
        "|=========================================+========================+======================|",
    ]
    for gpu in _gpus(node, gpus):
        watts = f"{round(gpu.power)}"
        cap = f"{round(gpu.model.power_limit_w)}"
        lines += [
            f"|{gpu.index:>4}  {gpu.model.smi_name:<29}{'On':>4}  |{gpu.bus_id:>19} {'Off':<3} |"
            f"{gpu.uncorrected:>21} |",
            f"| {'N/A':>3}  {gpu.temperature:>3}C    {'P0':<2}{watts:>15}W / {cap:>4}W |"
            f"{1:>8}MiB / {gpu.model.memory_mib:>6}MiB |{0:>7}%{'Default':>13} |",
            f"|{'':41}|{'':24}|{'Disabled':>21} |",
            rule,
        ]
    lines += [
        "",
        "+-----------------------------------------------------------------------------------------+",
        "| Processes:                                                                              |",
        "|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |",
        "|        ID   ID                                                               Usage      |",
        "|=========================================================================================|",
        "|  No running processes found                                                             |",
        "+-----------------------------------------------------------------------------------------+",
    ]
    return _lost_bus_lines(node) + "\n".join(lines) + "\n"


# Field -> (header unit, value).  Values come from the GPU's facts; "[N/A]" where
# an H100 prints it (see nge-h100-590.48.01-query-gpu.csv).
_QUERY_ALIASES = {
    "gpu_name": "name",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
    "gpu_serial": "serial",
    "clocks.sm": "clocks.current.sm",
    "clocks.gr": "clocks.current.graphics",
    "clocks.mem": "clocks.current.memory",
    "temperature.gpu.current": "temperature.gpu",
}


def _query_value(field: str, gpu: _Gpu, node: NodeHealth, *, count: int, moment: float) -> tuple[str, str] | None:
    """(unit for the header, value) of one --query-gpu field; None when nvidia-smi does not know it."""
    model = gpu.model
    version = node.driver_version or ""
    ecc_fields = {
        "ecc.errors.corrected.volatile.total": gpu.corrected,
        "ecc.errors.corrected.aggregate.total": gpu.corrected,
        "ecc.errors.uncorrected.volatile.total": gpu.uncorrected,
        "ecc.errors.uncorrected.aggregate.total": gpu.uncorrected,
        "ecc.errors.corrected.volatile.device_memory": gpu.corrected,
        "ecc.errors.corrected.aggregate.device_memory": gpu.corrected,
        "ecc.errors.uncorrected.volatile.device_memory": gpu.uncorrected,
        "ecc.errors.uncorrected.aggregate.device_memory": gpu.uncorrected,
        "ecc.errors.corrected.volatile.dram": gpu.corrected,
        "ecc.errors.corrected.aggregate.dram": gpu.corrected,
        "ecc.errors.uncorrected.volatile.dram": gpu.uncorrected,
        "ecc.errors.uncorrected.aggregate.dram": gpu.uncorrected,
        "ecc.errors.corrected.volatile.sram": 0,
        "ecc.errors.corrected.aggregate.sram": 0,
        "ecc.errors.uncorrected.volatile.sram": 0,
        "ecc.errors.uncorrected.aggregate.sram": 0,
        "remapped_rows.correctable": gpu.corrected,
        "remapped_rows.uncorrectable": gpu.uncorrected,
    }
    if field in ecc_fields:
        return "", str(ecc_fields[field])
    if re.fullmatch(
        r"ecc\.errors\.(un)?corrected\.(volatile|aggregate)\.(register_file|l1_cache|l2_cache|texture_memory|cbu)",
        field,
    ):
        return "", "[N/A]"
    simple: dict[str, tuple[str, str]] = {
        "timestamp": ("", dt.datetime.fromtimestamp(moment, dt.UTC).strftime("%Y/%m/%d %H:%M:%S.000")),
        "driver_version": ("", version),
        "count": ("", str(count)),
        "name": ("", model.smi_name),
        "serial": ("", gpu.serial),
        "uuid": ("", gpu.uuid),
        "pci.bus_id": ("", gpu.bus_id),
        "index": ("", str(gpu.index)),
        "persistence_mode": ("", "Enabled"),
        "vbios_version": ("", model.vbios),
        "pstate": ("", "P0"),
        "compute_cap": ("", f"{model.compute[0]}.{model.compute[1]}"),
        "compute_mode": ("", "Default"),
        "memory.total": ("MiB", f"{model.memory_mib} MiB"),
        "memory.used": ("MiB", "0 MiB"),
        "memory.free": ("MiB", f"{max(0, model.memory_mib - 479)} MiB"),
        "memory.reserved": ("MiB", "479 MiB"),
        "utilization.gpu": ("%", "0 %"),
        "utilization.memory": ("%", "0 %"),
        "ecc.mode.current": ("", "Enabled"),
        "ecc.mode.pending": ("", "Enabled"),
        "retired_pages.single_bit_ecc.count": ("", "[N/A]"),
        "retired_pages.double_bit.count": ("", "[N/A]"),
        "retired_pages.pending": ("", "[N/A]"),
        "remapped_rows.pending": ("", "Yes" if gpu.uncorrected else "No"),
        "remapped_rows.failure": ("", "No"),
        "temperature.gpu": ("", str(gpu.temperature)),
        "temperature.memory": ("", str(gpu.temperature + 7)),
        "power.draw": ("W", f"{gpu.power:.2f} W"),
        "power.limit": ("W", f"{model.power_limit_w:.2f} W"),
        "enforced.power.limit": ("W", f"{model.power_limit_w:.2f} W"),
        "clocks.current.graphics": ("MHz", "345 MHz"),
        "clocks.current.sm": ("MHz", "345 MHz"),
        "clocks.current.memory": ("MHz", "2619 MHz"),
        "fan.speed": ("%", "[N/A]"),
        "mig.mode.current": ("", "Disabled"),
        "mig.mode.pending": ("", "Disabled"),
        "display_mode": ("", "Enabled"),
        "display_active": ("", "Disabled"),
    }
    return simple.get(field)


def nvidia_smi_query(node: NodeHealth, *, fields: list[str], csv_format: str, gpus: list[int], moment: float) -> str:
    if node.driver_version is None:
        return DRIVER_UNREACHABLE
    options = {o.strip() for o in csv_format.split(",")}
    wanted = [_QUERY_ALIASES.get(f.strip(), f.strip()) for f in fields if f.strip()]
    facts = _gpus(node, gpus)
    probe = facts[0] if facts else _gpus(node, [0])[0]
    headers = []
    for field in wanted:
        known = _query_value(field, probe, node, count=len(facts), moment=moment)
        if known is None:
            return f'Field "{field}" is not a valid field to query.\n\n'
        unit = known[0]
        headers.append(f"{field} [{unit}]" if unit else field)
    lines = [] if "noheader" in options else [", ".join(headers)]
    for gpu in facts:
        values = []
        for field in wanted:
            unit, value = _query_value(field, gpu, node, count=len(facts), moment=moment) or ("", "")
            if "nounits" in options and unit and value != "[N/A]":
                value = value.removesuffix(f" {unit}")
            values.append(value)
        lines.append(", ".join(values))
    return _lost_bus_lines(node) + "\n".join(lines) + "\n"


def nvidia_smi_q(node: NodeHealth, *, gpus: list[int], moment: float) -> str:
    """``nvidia-smi -q`` reduced to the identity and ECC sections (the H100 layout)."""
    if node.driver_version is None:
        return DRIVER_UNREACHABLE
    facts = _gpus(node, gpus)
    lines = [
        "",
        "==============NVSMI LOG==============",
        "",
        f"{'Timestamp':<42}: {_smi_time(moment)}",
        f"{'Driver Version':<42}: {node.driver_version}",
        f"{'CUDA Version':<42}: {cuda_version_for(node.driver_version)}",
        "",
        f"{'Attached GPUs':<42}: {len(facts)}",
    ]
    for gpu in facts:
        pending = "Yes" if gpu.uncorrected else "No"
        lines += [
            f"GPU {gpu.bus_id}",
            f"    {'Product Name':<38}: {gpu.model.smi_name}",
            f"    {'Serial Number':<38}: {gpu.serial}",
            f"    {'GPU UUID':<38}: {gpu.uuid}",
            f"    {'Minor Number':<38}: {gpu.index}",
            f"    {'VBIOS Version':<38}: {gpu.model.vbios}",
            "    ECC Mode",
            f"        {'Current':<34}: Enabled",
            f"        {'Pending':<34}: Enabled",
            "    ECC Errors",
            "        Volatile",
            f"            {'SRAM Correctable':<30}: 0",
            f"            {'SRAM Uncorrectable Parity':<30}: 0",
            f"            {'SRAM Uncorrectable SEC-DED':<30}: 0",
            f"            {'DRAM Correctable':<30}: {gpu.corrected}",
            f"            {'DRAM Uncorrectable':<30}: {gpu.uncorrected}",
            "        Aggregate",
            f"            {'SRAM Correctable':<30}: 0",
            f"            {'SRAM Uncorrectable Parity':<30}: 0",
            f"            {'SRAM Uncorrectable SEC-DED':<30}: 0",
            f"            {'DRAM Correctable':<30}: {gpu.corrected}",
            f"            {'DRAM Uncorrectable':<30}: {gpu.uncorrected}",
            f"            {'SRAM Threshold Exceeded':<30}: No",
            "    Remapped Rows",
            f"        {'Correctable Error':<34}: {gpu.corrected}",
            f"        {'Uncorrectable Error':<34}: {gpu.uncorrected}",
            f"        {'Pending':<34}: {pending}",
            f"        {'Remapping Failure Occurred':<34}: No",
        ]
    return _lost_bus_lines(node) + "\n".join(lines) + "\n\n"


# -- ibstat -----------------------------------------------------------------------------------------------------
def ibstat(node: NodeHealth, *, device: str | None = None) -> str:
    ports = [p for p in node.ib_ports if device is None or p.device == device]
    if device is not None and not ports:
        pid = int(hashlib.sha256(node.name.encode()).hexdigest()[:4], 16) % 90000 + 10000
        return f"ibpanic: [{pid}] main: stat of IB device '{device}' failed: No such file or directory\n"
    by_device: dict[str, list[Any]] = {}
    for port in ports:
        by_device.setdefault(port.device, []).append(port)
    blocks = []
    for name in sorted(by_device, key=_device_order):
        device_ports = sorted(by_device[name], key=lambda p: p.port)
        first = device_ports[0]
        guid = _guid(node.name, name)
        lines = [
            f"CA '{name}'",
            f"\tCA type: {first.ca_type}",
            f"\tNumber of ports: {len(device_ports)}",
            f"\tFirmware version: {first.firmware}",
            "\tHardware version: 0",
            f"\tNode GUID: {guid}",
            f"\tSystem image GUID: {guid}",
        ]
        for port in device_ports:
            ethernet = port.link_layer == "Ethernet"
            up = port.state == "Active"
            rate = port.rate if up or port.physical_state == "LinkUp" else 10
            lid = 0 if ethernet else int(guid[-3:], 16) % 900 + 1
            lines += [
                f"\tPort {port.port}:",
                f"\t\tState: {port.state}",
                f"\t\tPhysical state: {port.physical_state}",
                f"\t\tRate: {rate}",
                f"\t\tBase lid: {lid}",
                "\t\tLMC: 0",
                f"\t\tSM lid: {0 if ethernet else 334}",
                f"\t\tCapability mask: {'0x00010000' if ethernet else '0xa751e848'}",
                f"\t\tPort GUID: {_guid(node.name, name, ethernet=ethernet)}",
                f"\t\tLink layer: {port.link_layer}",
            ]
        blocks.append("\n".join(lines))
    return "\n".join(blocks) + ("\n" if blocks else "")


def _device_order(name: str) -> tuple[str, int]:
    match = re.match(r"(\D+)(\d+)$", name)
    return (match.group(1), int(match.group(2))) if match else (name, 0)


def _guid(node_name: str, device: str, *, ethernet: bool = False) -> str:
    digest = hashlib.sha256(f"{node_name}/{device}".encode()).hexdigest()
    if ethernet:
        return f"0x{digest[:6]}fffe{digest[6:12]}"
    return f"0x946dae0300{digest[:6]}"


# -- dcgmi diag -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _DiagTest:
    key: str  # how dcgm_failures name it
    v3_name: str
    v4_section: str  # DCGM 4.x section (deployment tests all report as "software")
    category: str  # Deployment, Integration, Hardware, Stress
    per_gpu: bool
    level: int
    warning: str


_DEPLOYMENT_TESTS = (
    ("denylist", "Denylist"),
    ("nvml_library", "NVML Library"),
    ("cuda_main_library", "CUDA Main Library"),
    ("permissions_and_os_blocks", "Permissions and OS Blocks"),
    ("persistence_mode", "Persistence Mode"),
    ("environment_variables", "Environment Variables"),
    ("page_retirement/row_remap", "Page Retirement/Row Remap"),
    ("graphics_processes", "Graphics Processes"),
    ("inforom", "Inforom"),
)
_GENERIC_WARNING = "GPU {gpu} failed the {name} check. Check DCGM and system logs for errors."
_DEPLOYMENT_WARNINGS = {
    "persistence_mode": "Persistence mode for GPU {gpu} is currently disabled. The DCGM diagnostic requires "
    'peristence mode to be enabled. Enable persistence mode by running "nvidia-smi -i <gpuId> -pm 1 " as root.',
    "page_retirement/row_remap": "GPU {gpu} had uncorrectable memory errors and row remapping is pending. "
    "Drain the GPU and reset it or reboot the node to resolve this issue.",
}
DIAG_TESTS: tuple[_DiagTest, ...] = (
    *(
        _DiagTest(key, name, "software", "Deployment", False, 1, _DEPLOYMENT_WARNINGS.get(key, _GENERIC_WARNING))
        for key, name in _DEPLOYMENT_TESTS
    ),
    _DiagTest(
        "pcie",
        "PCIe",
        "pcie",
        "Integration",
        True,
        2,
        "GPU {gpu} PCIe link width x8 is below the expected x16 for GPU {gpu}. Check the PCIe link and reseat the GPU.",
    ),
    _DiagTest(
        "memory",
        "GPU Memory",
        "memory",
        "Hardware",
        True,
        2,
        "GPU {gpu} A memory mismatch was detected on GPU {gpu}, but no error was reported by CUDA or NVML. "
        "Run a field diagnostic on the GPU.",
    ),
    _DiagTest(
        "diagnostic",
        "Diagnostic",
        "diagnostic",
        "Hardware",
        True,
        3,
        "GPU {gpu} had uncorrectable memory errors during the stress test. Run a field diagnostic on the GPU.",
    ),
    _DiagTest(
        "targeted_stress",
        "Targeted Stress",
        "targeted_stress",
        "Stress",
        True,
        3,
        "GPU {gpu} Max stress level of 1504.7 did not reach desired stress level of 1550.0 for GPU {gpu}. "
        "Verify that the clock speeds and GPU utilization are high.",
    ),
    _DiagTest(
        "targeted_power",
        "Targeted Power",
        "targeted_power",
        "Stress",
        True,
        3,
        "GPU {gpu} Max power of 224.1 did not reach desired power minimum target_power_min_ratio of 224.2 "
        "for GPU {gpu} Verify that the clock speeds and GPU utilization are high.",
    ),
    _DiagTest(
        "memory_bandwidth",
        "Memory Bandwidth",
        "memory_bandwidth",
        "Stress",
        True,
        3,
        "GPU {gpu} Memory bandwidth of 2412.8 GB/s is below the minimum of 2500.0 GB/s for GPU {gpu}.",
    ),
    _DiagTest(
        "pulse_test",
        "Pulse Test",
        "pulse_test",
        "Stress",
        True,
        4,
        "GPU {gpu} pulse test failed: the power supply could not sustain the load transients for GPU {gpu}.",
    ),
)
_CATEGORY_ORDER = ("Deployment", "Integration", "Hardware", "Stress")


def _failures(node: NodeHealth) -> dict[str, set[int]]:
    """dcgm_failures ("pcie", "PCIe:1", "GPU Memory", "Persistence Mode") as {test key: failing GPUs}."""
    failing: dict[str, set[int]] = {}
    aliases = {t.v3_name.lower().replace(" ", "_"): t.key for t in DIAG_TESTS}
    aliases.update({"gpu_memory": "memory", "software": "persistence_mode"})
    for entry in node.dcgm_failures:
        name, _, gpu = str(entry).partition(":")
        key = name.strip().lower().replace(" ", "_").replace("-", "_")
        key = aliases.get(key, key)
        failing.setdefault(key, set()).add(int(gpu) if gpu.strip().isdigit() else 0)
    if node.ecc_uncorrected > 0:
        failing.setdefault("page_retirement/row_remap", set()).add(0)
    return failing


def dcgmi_diag(node: NodeHealth, *, level: int) -> str:
    if node.driver_version is None:
        return (
            "Error: unable to establish a connection to the specified host: localhost\n"
            "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"
        )
    level = max(1, min(level, 4))
    tests = [t for t in DIAG_TESTS if t.level <= level]
    failing = _failures(node)
    model = gpu_model(node.gpu_product, memory_mib=node.gpu_memory_mib)
    gpus = list(range(node.gpu_count))
    major = node.dcgm_version.split(".", maxsplit=1)[0]
    version4 = major.isdigit() and int(major) >= 4
    ids = (", " if version4 else ",").join([model.pci_device_id] * len(gpus))
    out = [
        "Successfully ran diagnostic for group.",
        "+---------------------------+------------------------------------------------+",
        "| Diagnostic                | Result                                         |",
        "+===========================+================================================+",
        _section("Metadata", first=True),
        _row("DCGM Version", node.dcgm_version),
        _row("Driver Version Detected", node.driver_version),
        _row("GPU Device IDs Detected", ids),
    ]
    if version4:
        out += _diag_v4(tests, failing, gpus)
    else:
        out += _diag_v3(tests, failing, gpus, level=level)
    out.append("+---------------------------+------------------------------------------------+")
    return "\n".join(out) + "\n"


def _diag_v3(tests: list[_DiagTest], failing: dict[str, set[int]], gpus: list[int], *, level: int) -> list[str]:
    out: list[str] = []
    for category in _CATEGORY_ORDER:
        in_category = [t for t in tests if t.category == category]
        # DCGM 3.x prints the Stress header at level 2 even though no stress test runs there.
        if not in_category and not (category == "Stress" and level >= 2):
            continue
        out.append(_section(category, first=category == "Deployment"))
        for test in in_category:
            bad = sorted(g for g in failing.get(test.key, set()) if g in gpus or not test.per_gpu)
            if not test.per_gpu:
                if bad:
                    out.append(_row(test.v3_name, "Fail"))
                    out += _wrapped("Error", test.warning.format(gpu=bad[0], name=test.v3_name))
                else:
                    out.append(_row(test.v3_name, "Pass"))
                continue
            if not bad:
                out.append(_row(test.v3_name, "Pass - All"))
                continue
            good = [g for g in gpus if g not in bad]
            if good:
                label = "GPU" if len(good) == 1 else "GPUs"
                out.append(_row(test.v3_name, f"Pass - {label}: {', '.join(map(str, good))}"))
                out.append(_row("", f"Fail - {'GPU' if len(bad) == 1 else 'GPUs'}: {', '.join(map(str, bad))}"))
            else:
                out.append(_row(test.v3_name, "Fail - All"))
            for gpu in bad:
                out += _wrapped("Warning", test.warning.format(gpu=gpu, name=test.v3_name))
        if category == "Stress" and level >= 3:
            out.append(_row("EUD Test", "Skip - All"))
    return out


def _diag_v4(tests: list[_DiagTest], failing: dict[str, set[int]], gpus: list[int]) -> list[str]:
    out: list[str] = []
    sections: dict[str, list[_DiagTest]] = {}
    for test in tests:
        sections.setdefault(test.v4_section, []).append(test)
    for category in _CATEGORY_ORDER:
        names = [s for s, members in sections.items() if members[0].category == category]
        if not names:
            continue
        out.append(_section(category, first=category == "Deployment"))
        for section in names:
            members = sections[section]
            bad = sorted({g for t in members for g in failing.get(t.key, set()) if g in gpus})
            out.append(_row(section, "Fail" if bad else "Pass"))
            out += [_row("", f"GPU{g}: {'Fail' if g in bad else 'Pass'}") for g in gpus]
            for gpu in bad:
                test = next(t for t in members if gpu in failing.get(t.key, set()))
                out += _wrapped(f"Warning: GPU{gpu}", test.warning.format(gpu=gpu, name=test.v3_name))
    return out


def _section(name: str, *, first: bool) -> str:
    title = f"-----  {name}  ".ljust(27, "-")
    edge = "|" if first or name == "Metadata" else "+"
    return f"{edge}{title}+------------------------------------------------{edge}"


def _row(name: str, value: str) -> str:
    return f"| {name:<25} | {value:<46} |"


def _wrapped(label: str, message: str) -> list[str]:
    # dcgmi cuts long messages at the column width, mid-word.
    chunks = [message[i : i + 46] for i in range(0, len(message), 46)] or [""]
    return [_row(label if i == 0 else "", chunk) for i, chunk in enumerate(chunks)]
