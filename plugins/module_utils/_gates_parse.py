# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Parsers of what validation pods print (collection-internal, pure).

Every function takes the text a container wrote to its log and returns plain
data; nothing here judges (``_gates.py`` does) and nothing does I/O. Output
that cannot be read raises ``UnreadableOutputError`` naming what was expected,
because a gate whose output cannot be read is a failed gate, never a pass.

Formats follow real output (``tests/unit/fixtures/gates``):

* ``nvidia-smi --query-gpu=... --format=csv``: a header row (units in
  brackets with ``nounits`` absent), one row per GPU, ``[N/A]`` (also ``N/A``
  and bracketed messages such as ``[Requested functionality has been
  deprecated]``) where the GPU or driver has no value; lines such as
  ``Unable to determine the device handle for GPU0000:DB:00.0: Unknown Error``
  before the table when a GPU fell off the bus.
* ``ibstat``: ``CA '<name>'`` blocks, ``Port N:`` sub-blocks, indented with
  tabs or spaces; a trailing ``ibpanic: ...`` line when a device cannot be
  read (the command then exits 255).
* ``dcgmi diag -r N``: DCGM 3.x rows (``PCIe | Pass - All``, ``| Fail -
  GPU: 1`` continuation rows, ``Warning``/``Error``/``Info`` rows wrapped at
  46 characters mid-word) and DCGM 4.x rows (lower-case sections with one
  ``GPU<n>: Pass|Fail`` row per GPU, ``Warning: GPU<n>`` rows).
* the kernel log (``dmesg``): ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU
  has fallen off the bus.`` lines.
* Prometheus ``/api/v1/query`` answers (DCGM exporter's
  ``DCGM_FI_DEV_XID_ERRORS``, the last XID seen per GPU).
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import GpuFleetError


class UnreadableOutputError(GpuFleetError):
    """A validation pod printed something that is not what its tool prints: the gate fails."""


def excerpt(text: str, *, limit: int = 1500) -> str:
    """The head and tail of a long output, so evidence stays readable and a ledger stays small."""
    text = text or ""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters left out ...]\n{text[-half:]}"


def focused_excerpt(text: str, needles: Sequence[str], *, after: int = 0, limit: int = 1500) -> str:
    """The lines that matter: each line holding one of ``needles`` and the ``after`` lines that follow it.

    A failing port or test sits anywhere in a long output; a head-and-tail
    excerpt would cut exactly that. Without a match, the plain excerpt.
    """
    lines = (text or "").splitlines()
    keep: List[int] = []
    for index, line in enumerate(lines):
        if any(needle and needle in line for needle in needles):
            keep.extend(range(index, min(index + after + 1, len(lines))))
    if not keep:
        return excerpt(text, limit=limit)
    chosen = sorted(set(keep))
    parts: List[str] = []
    previous = -2
    for index in chosen:
        if index != previous + 1 and parts:
            parts.append("[...]")
        parts.append(lines[index])
        previous = index
    return excerpt("\n".join(parts), limit=limit)


# -- nvidia-smi --query-gpu CSV -----------------------------------------------------------------

# What nvidia-smi prints instead of a value: "[N/A]", "N/A", "[Not Supported]",
# "[Requested functionality has been deprecated]", "[Unknown Error]"...
_NO_VALUE = re.compile(r"^\[.*\]$|^N/A$")
_DEVICE_HANDLE = re.compile(r"Unable to determine the device handle for GPU\s*([0-9A-Fa-f:.]+)\s*:\s*(.*)")
# nvidia-smi's own failures, printed instead of a table (exit status 9, 12...).
_SMI_FAILURES = (
    "NVIDIA-SMI has failed",
    "Failed to initialize NVML",
    "No devices were found",
    "is not a valid field to query",
    "Unknown Error",
)
_UNIT_SUFFIX = re.compile(r"\s*\[[^\]]*\]$")


@dataclass
class SmiQuery:
    """Rows of ``nvidia-smi --query-gpu`` keyed by field name (units stripped), and lost GPUs."""

    rows: List[Dict[str, Optional[str]]]
    lost_gpus: List[Tuple[str, str]] = field(default_factory=list)  # (bus id, message)
    fields: List[str] = field(default_factory=list)  # the header's field names, units stripped

    def require_fields(self, wanted: Sequence[str]) -> None:
        """Output of another query (or whose header went missing) is unreadable: it cannot prove what was asked."""
        missing = [name for name in wanted if name not in self.fields]
        if self.fields and missing:
            raise UnreadableOutputError(
                f"nvidia-smi CSV has no column {', '.join(missing)} (header {', '.join(self.fields)[:200]!r})"
            )


def smi_value(value: Optional[str]) -> Optional[str]:
    """A CSV cell as text, or None where nvidia-smi has no value for it."""
    if value is None:
        return None
    text = value.strip()
    if not text or _NO_VALUE.match(text):
        return None
    return text


def parse_smi_query_csv(text: str) -> SmiQuery:
    """Parse ``nvidia-smi --query-gpu=<fields> --format=csv`` (with header)."""
    lost: List[Tuple[str, str]] = []
    table_lines: List[str] = []
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        handle = _DEVICE_HANDLE.search(line)
        if handle:
            lost.append((handle.group(1).rstrip(":"), handle.group(2).strip()))
            continue
        table_lines.append(line)
    if not table_lines:
        if lost:
            return SmiQuery(rows=[], lost_gpus=lost)
        raise UnreadableOutputError("nvidia-smi printed nothing (expected a CSV header and one row per GPU)")
    failure = next((line for line in table_lines if any(marker in line for marker in _SMI_FAILURES)), None)
    if failure is not None and "," not in table_lines[0]:
        raise UnreadableOutputError(f"nvidia-smi failed: {failure}")
    reader = csv.reader(io.StringIO("\n".join(table_lines)), skipinitialspace=True)
    records = [record for record in reader if record]
    header = [_UNIT_SUFFIX.sub("", name.strip()) for name in records[0]]
    if not header or any(not name or " " in name for name in header):
        raise UnreadableOutputError(f"nvidia-smi CSV has no header row of field names: {table_lines[0][:200]!r}")
    rows: List[Dict[str, Optional[str]]] = []
    for number, record in enumerate(records[1:], start=2):
        if len(record) != len(header):
            raise UnreadableOutputError(
                f"nvidia-smi CSV line {number} has {len(record)} values for {len(header)} fields: "
                f"{','.join(record)[:200]!r}"
            )
        rows.append({name: smi_value(record[position]) for position, name in enumerate(header)})
    return SmiQuery(rows=rows, lost_gpus=lost, fields=header)


@dataclass
class GpuEccCounters:
    """ECC counters of one GPU; None where the GPU does not report them (ECC off, consumer cards)."""

    index: str
    bus_id: str
    uuid: str
    corrected_volatile: Optional[int] = None
    uncorrected_volatile: Optional[int] = None
    corrected_aggregate: Optional[int] = None
    uncorrected_aggregate: Optional[int] = None

    @property
    def key(self) -> str:
        """Stable identity across runs: the UUID, else the bus id, else the index."""
        return self.uuid or self.bus_id or f"index-{self.index}"

    @property
    def corrected(self) -> Optional[int]:
        """Lifetime corrected errors where known (aggregate survives driver reloads), else volatile."""
        return self.corrected_aggregate if self.corrected_aggregate is not None else self.corrected_volatile

    @property
    def uncorrected(self) -> Optional[int]:
        return self.uncorrected_aggregate if self.uncorrected_aggregate is not None else self.uncorrected_volatile

    def as_dict(self) -> Dict[str, Any]:
        return {
            "index": self.index,
            "bus_id": self.bus_id,
            "uuid": self.uuid,
            "corrected_volatile": self.corrected_volatile,
            "uncorrected_volatile": self.uncorrected_volatile,
            "corrected_aggregate": self.corrected_aggregate,
            "uncorrected_aggregate": self.uncorrected_aggregate,
        }


def _count(row: Mapping[str, Optional[str]], name: str) -> Optional[int]:
    value = row.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError as err:
        raise UnreadableOutputError(f"nvidia-smi field {name} is {value!r}, expected a count") from err


def ecc_counters(query: SmiQuery) -> List[GpuEccCounters]:
    """Per-GPU ECC counters from the CSV rows (``ecc.errors.{corrected,uncorrected}.{volatile,aggregate}.total``)."""
    counters: List[GpuEccCounters] = []
    for row in query.rows:
        for name in ("index", "pci.bus_id", "uuid"):
            value = row.get(name)
            if value and any(row.get(name) == other.get(name) for other in query.rows[: len(counters)]):
                raise UnreadableOutputError(f"nvidia-smi lists the GPU with {name} {value} twice")
        counters.append(
            GpuEccCounters(
                index=row.get("index") or "",
                bus_id=row.get("pci.bus_id") or "",
                uuid=row.get("uuid") or "",
                corrected_volatile=_count(row, "ecc.errors.corrected.volatile.total"),
                uncorrected_volatile=_count(row, "ecc.errors.uncorrected.volatile.total"),
                corrected_aggregate=_count(row, "ecc.errors.corrected.aggregate.total"),
                uncorrected_aggregate=_count(row, "ecc.errors.uncorrected.aggregate.total"),
            )
        )
    return counters


# -- ibstat ----------------------------------------------------------------------------------

_CA_LINE = re.compile(r"^CA '([^']+)'\s*$")
_PORT_LINE = re.compile(r"^Port (\d+):\s*$")
_KEY_VALUE = re.compile(r"^([A-Za-z][A-Za-z ]*?):\s*(.*)$")


@dataclass
class IbPortStatus:
    device: str
    port: int
    state: str = ""
    physical_state: str = ""
    rate: Optional[int] = None
    link_layer: str = ""

    @property
    def name(self) -> str:
        return f"{self.device}/{self.port}"

    def as_dict(self) -> Dict[str, Any]:
        return {
            "device": self.device,
            "port": self.port,
            "state": self.state,
            "physical_state": self.physical_state,
            "rate": self.rate,
            "link_layer": self.link_layer,
        }


@dataclass
class IbDevice:
    name: str
    ca_type: str = ""
    firmware: str = ""
    ports: List[IbPortStatus] = field(default_factory=list)


@dataclass
class Ibstat:
    devices: List[IbDevice]
    # ibstat's own failure (``ibpanic: ...``): printed after what it could read.
    panic: str = ""

    @property
    def ports(self) -> List[IbPortStatus]:
        return [port for device in self.devices for port in device.ports]


# What ibstat prints for every port (rdma-core infiniband-diags/ibstat.c, port_dump): a port block without one of
# these was cut short or is not ibstat's. Link layer is the kernel's sysfs link_layer word.
_PORT_KEYS = ("state", "physical state", "rate", "link layer")
_LINK_LAYERS = ("InfiniBand", "Ethernet", "Unknown")


def parse_ibstat(text: str) -> Ibstat:
    """Parse ``ibstat`` output (all devices or one), indented with tabs or spaces.

    Output that is not whole is unreadable, never a shorter pass: each ``CA`` block must list the ports its
    ``Number of ports`` line announces, each port its State, Physical state, Rate and Link layer, each once.
    """
    devices: List[IbDevice] = []
    declared: Dict[str, int] = {}
    panic = ""
    device: Optional[IbDevice] = None
    port: Optional[IbPortStatus] = None
    seen: set = set()  # the keys of the current CA or port block
    port_keys: Dict[str, set] = {}
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("ibpanic:"):
            panic = line
            continue
        ca = _CA_LINE.match(line)
        if ca:
            device = IbDevice(name=ca.group(1))
            devices.append(device)
            port, seen = None, set()
            continue
        if device is None:
            # A shell prompt or the command echoed before the first block.
            continue
        port_match = _PORT_LINE.match(line)
        if port_match:
            port = IbPortStatus(device=device.name, port=int(port_match.group(1)))
            if any(other.port == port.port for other in device.ports):
                raise UnreadableOutputError(f"ibstat lists port {port.name} twice")
            device.ports.append(port)
            seen = port_keys[port.name] = set()
            continue
        pair = _KEY_VALUE.match(line)
        if not pair:
            raise UnreadableOutputError(f"ibstat line {raw.strip()[:120]!r} is not 'Key: value'")
        key, value = pair.group(1).strip().lower(), pair.group(2).strip()
        if key in seen:
            where = f"port {port.name}" if port is not None else f"CA '{device.name}'"
            raise UnreadableOutputError(f"ibstat {where} has {pair.group(1).strip()!r} twice")
        seen.add(key)
        if port is None:
            if key == "ca type":
                device.ca_type = value
            elif key == "firmware version":
                device.firmware = value
            elif key == "number of ports":
                if not value.isdigit():
                    raise UnreadableOutputError(f"ibstat CA '{device.name}' number of ports {value!r} is not a number")
                declared[device.name] = int(value)
            continue
        if key == "state":
            port.state = value
        elif key == "physical state":
            port.physical_state = value
        elif key == "rate":
            try:
                port.rate = int(float(value.split(" ", 1)[0]))  # "400", "2.5", "40 (FDR10)"
            except (ValueError, OverflowError) as err:
                raise UnreadableOutputError(f"ibstat port {port.name} rate {value!r} is not a number") from err
        elif key == "link layer":
            if value not in _LINK_LAYERS:
                raise UnreadableOutputError(f"ibstat port {port.name} link layer {value!r} is not one ibstat prints")
            port.link_layer = value
    if not devices and not panic:
        raise UnreadableOutputError("ibstat printed no CA block (expected CA '<device>' with its ports)")
    if not panic:
        # ibstat stops at its panic; what it printed before is judged, and the panic fails the gate anyway.
        _check_whole(devices, declared, port_keys)
    return Ibstat(devices=devices, panic=panic)


def _check_whole(devices: Sequence[IbDevice], declared: Mapping[str, int], port_keys: Mapping[str, set]) -> None:
    for device in devices:
        if device.name not in declared:
            raise UnreadableOutputError(f"ibstat CA '{device.name}' has no 'Number of ports' line (output cut short?)")
        # Port 0 is listed too on switches, so at least as many as announced.
        if len(device.ports) < declared[device.name]:
            raise UnreadableOutputError(
                f"ibstat CA '{device.name}' announces {declared[device.name]} ports and lists {len(device.ports)} "
                "(output cut short?)"
            )
        for port in device.ports:
            missing = [key for key in _PORT_KEYS if key not in port_keys.get(port.name, set())]
            if missing:
                names = ", ".join(key.capitalize() for key in missing)
                raise UnreadableOutputError(f"ibstat port {port.name} has no {names} line (output cut short?)")


# -- dcgmi diag ---------------------------------------------------------------------------------

_SECTION = re.compile(r"^[|+]-+\s+(\w[\w ]*?)\s+-+\+")
# The line that closes the table: dashes only (a section line carries its name).
_BOTTOM_BORDER = re.compile(r"^\+-+\+-+\+\s*$")
_GPU_LIST = re.compile(r"GPUs?:\s*([\d,\s]+)")
_V4_GPU_ROW = re.compile(r"^GPU(\d+):\s*(\w+)")
_MESSAGE_LABELS = ("Warning", "Error", "Info")
# Column widths of the table: "| " + 25 + " | " + 46 + " |".
_VALUE_WIDTH = 46


@dataclass
class DiagMessage:
    kind: str  # Warning, Error, Info
    text: str
    gpu: Optional[int] = None


@dataclass
class DiagTest:
    name: str
    category: str
    result: str  # Pass, Fail, Skip, Warn
    passed_gpus: List[int] = field(default_factory=list)
    failed_gpus: List[int] = field(default_factory=list)
    messages: List[DiagMessage] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        # dcgmi prints Error rows for failures only: one under a test fails it even when its result row is lost.
        return self.result == "Fail" or bool(self.failed_gpus) or any(m.kind == "Error" for m in self.messages)

    def as_dict(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "category": self.category,
            "result": self.result,
            "passed_gpus": list(self.passed_gpus),
            "failed_gpus": list(self.failed_gpus),
            "messages": [{"kind": m.kind, "gpu": m.gpu, "text": m.text} for m in self.messages],
        }


@dataclass
class DiagReport:
    dcgm_version: str
    driver_version: str
    layout: int  # 3 or 4: the DCGM major version whose table layout was printed
    tests: List[DiagTest]

    @property
    def failed_tests(self) -> List[DiagTest]:
        return [test for test in self.tests if test.failed]


def _cells(line: str, *, width: int = _VALUE_WIDTH) -> Optional[Tuple[str, str]]:
    """(name, raw value) of a table row; the value keeps its exact ``width`` characters (wrapped text)."""
    if not line.startswith("|") or not line.rstrip().endswith("|"):
        return None
    parts = line.rstrip().split("|")
    if len(parts) < 4:
        return None
    name = parts[1].strip()
    value = "|".join(parts[2:-1])
    # One space of padding on the left; then the cell's text and padding.
    return name, value[1 : 1 + width] if value.startswith(" ") else value


def _text_width(lines: Sequence[str]) -> int:
    """How many characters of a row dcgmi fills with wrapped text.

    Real dcgmi (3.x and 4.x samples) cuts messages every 45 characters and
    pads the 46-wide column with a space; output that fills all 46 (as some
    emulations do) is read at 46, so no character is lost or invented.
    """
    for line in lines:
        cells = _cells(line, width=_VALUE_WIDTH)
        if cells is not None and len(cells[1]) == _VALUE_WIDTH and cells[1][-1] != " ":
            return _VALUE_WIDTH
    return _VALUE_WIDTH - 1


def _result_word(value: str) -> str:
    word = value.strip().split(" ", 1)[0].rstrip(":")
    return word if word in ("Pass", "Fail", "Skip", "Warn") else ""


def _gpu_numbers(value: str) -> List[int]:
    match = _GPU_LIST.search(value)
    if not match:
        return []
    return [int(number) for number in re.findall(r"\d+", match.group(1))]


def parse_dcgmi_diag(text: str) -> DiagReport:
    """Parse the table ``dcgmi diag -r N`` prints, in the DCGM 3.x or 4.x layout."""
    lines = (text or "").splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("| Diagnostic") and "Result" in line), None)
    if start is None:
        failure = next((line.strip() for line in lines if line.strip().startswith("Error")), "")
        raise UnreadableOutputError(
            "dcgmi diag printed no result table"
            + (f": {failure}" if failure else " (expected '| Diagnostic | Result |')")
        )
    width = _text_width(lines[start + 1 :])
    metadata: Dict[str, str] = {}
    tests: List[DiagTest] = []
    category = ""
    current: Optional[DiagTest] = None
    message: Optional[DiagMessage] = None
    for line in lines[start + 1 :]:
        section = _SECTION.match(line)
        if section:
            category = section.group(1).strip()
            current, message = None, None
            continue
        cells = _cells(line, width=width)
        if cells is None:
            continue
        name, raw_value = cells
        value = raw_value.strip()
        if category == "Metadata":
            if _result_word(value):
                # A section line is missing: tests would be read as metadata and their results ignored.
                raise UnreadableOutputError(f"dcgmi diag row {name!r} has a test result in the Metadata section")
            if name:
                metadata[name] = value
            continue
        label = name.split(":", 1)[0] if name else ""
        if label in _MESSAGE_LABELS:
            gpu_match = re.search(r"GPU(\d+)", name)
            message = DiagMessage(kind=label, text=raw_value, gpu=int(gpu_match.group(1)) if gpu_match else None)
            if current is not None:
                current.messages.append(message)
            continue
        if not name and message is not None and not _result_word(value) and not _V4_GPU_ROW.match(value):
            # A wrapped message: dcgmi cut it at the column width, mid-word.
            message.text += raw_value
            continue
        if not name and current is not None:
            message = None
            v4_row = _V4_GPU_ROW.match(value)
            if v4_row:
                gpu, result = int(v4_row.group(1)), v4_row.group(2)
                (current.failed_gpus if result == "Fail" else current.passed_gpus).append(gpu)
                continue
            word = _result_word(value)
            if word == "Fail":
                current.failed_gpus.extend(_gpu_numbers(value))
                current.result = "Fail"
            elif word == "Pass":
                current.passed_gpus.extend(_gpu_numbers(value))
            continue
        if not name:
            if _result_word(value) or _V4_GPU_ROW.match(value):
                # A per-GPU result under no test: the test's own row is missing.
                raise UnreadableOutputError(f"dcgmi diag row {value!r} belongs to no test (a row is missing)")
            continue
        word = _result_word(value)
        if not word:
            raise UnreadableOutputError(f"dcgmi diag row {name!r} has no result (found {value!r})")
        message = None
        if any(test.name == name for test in tests):
            raise UnreadableOutputError(f"dcgmi diag lists test {name!r} twice")
        current = DiagTest(name=name, category=category, result=word)
        if word == "Fail":
            current.failed_gpus.extend(_gpu_numbers(value))
        elif word == "Pass":
            current.passed_gpus.extend(_gpu_numbers(value))
        tests.append(current)
    for test in tests:
        for item in test.messages:
            item.text = item.text.strip()
    if not tests:
        raise UnreadableOutputError("dcgmi diag printed a table with no test results")
    table = [line.strip() for line in lines[start + 1 :] if line.strip().startswith(("|", "+"))]
    if not _BOTTOM_BORDER.match(table[-1]):
        # A table cut short would pass on the rows it kept.
        raise UnreadableOutputError(
            f"dcgmi diag table ends at {table[-1][:80]!r}, not at its bottom border (cut short?)"
        )
    version = metadata.get("DCGM Version", "")
    if not version:
        raise UnreadableOutputError("dcgmi diag table has no DCGM Version in its Metadata section (a part is missing)")
    _check_every_gpu_reported(tests, metadata.get("GPU Device IDs Detected", ""))
    major = version.split(".", 1)[0]
    # DCGM 4.x names its sections in lower case (software, pcie, memory) and prints per-GPU rows.
    layout = 4 if (major.isdigit() and int(major) >= 4) or all(t.name.islower() for t in tests) else 3
    return DiagReport(
        dcgm_version=version,
        driver_version=metadata.get("Driver Version Detected", ""),
        layout=layout,
        tests=tests,
    )


def _check_every_gpu_reported(tests: Sequence[DiagTest], device_ids: str) -> None:
    """A test that names GPUs (``Pass - GPUs: 0, 2, 3``, ``GPU0: Pass``) names each GPU dcgmi detected.

    One missing is a lost row (``Fail - GPU: 1`` under the Pass row), and reading the rest would pass it.
    """
    detected = len([part for part in device_ids.split(",") if part.strip()])
    for test in tests:
        named = set(test.passed_gpus) | set(test.failed_gpus)
        if detected and named and len(named) < detected:
            raise UnreadableOutputError(
                f"dcgmi diag test {test.name!r} reports GPUs {', '.join(map(str, sorted(named)))} of the "
                f"{detected} it detected (a row is missing)"
            )


# -- kernel log XIDs -------------------------------------------------------------------------

_XID_LINE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\):\s*(\d+)(?:,\s*(.*))?")


@dataclass
class XidEvent:
    bus_id: str
    xid: int
    message: str

    def as_dict(self) -> Dict[str, Any]:
        return {"bus_id": self.bus_id, "xid": self.xid, "message": self.message}


def parse_kernel_xids(text: str) -> List[XidEvent]:
    """XID events the NVIDIA driver wrote to the kernel log (``dmesg``), in order."""
    lines = (text or "").splitlines()
    if not any(line.strip() for line in lines):
        raise UnreadableOutputError("the kernel log read was empty (expected dmesg output)")
    refused = next((line for line in lines if "read kernel buffer failed" in line), None)
    if refused is not None:
        raise UnreadableOutputError(f"dmesg could not read the kernel log: {refused.strip()}")
    events = []
    for line in lines:
        match = _XID_LINE.search(line)
        if match:
            events.append(
                XidEvent(bus_id=match.group(1), xid=int(match.group(2)), message=(match.group(3) or "").strip())
            )
    return events


# -- Prometheus (DCGM exporter) ------------------------------------------------------------------


@dataclass
class MetricSample:
    labels: Dict[str, str]
    value: float


def parse_prometheus_vector(answer: Any) -> List[MetricSample]:
    """Samples of a Prometheus ``/api/v1/query`` answer of result type vector."""
    if not isinstance(answer, Mapping) or answer.get("status") != "success":
        error = answer.get("error") if isinstance(answer, Mapping) else None
        raise UnreadableOutputError(f"Prometheus did not answer the query: {error or str(answer)[:200]}")
    data = answer.get("data") or {}
    if data.get("resultType") != "vector":
        raise UnreadableOutputError(f"Prometheus answered a {data.get('resultType')!r}, expected a vector")
    samples = []
    for item in data.get("result") or []:
        pair = item.get("value") or [None, None]
        try:
            value = float(pair[1])
        except (TypeError, ValueError, IndexError) as err:
            raise UnreadableOutputError(f"Prometheus sample {item!r} has no numeric value") from err
        samples.append(MetricSample(labels=dict(item.get("metric") or {}), value=value))
    return samples


# -- PyTorch smoke checks --------------------------------------------------------------------

_PYTHON_ERROR = re.compile(r"^(\w+(?:\.\w+)*(?:Error|Exception)|SystemExit|AssertionError)\b:?\s*(.*)$")


@dataclass
class SmokeOutcome:
    passed: bool
    reason: str
    lines: List[str]


def parse_smoke_log(text: str, *, success_line: str) -> SmokeOutcome:
    """Did the smoke script reach its success line? If not, the Python error that stopped it."""
    lines = [line.rstrip() for line in (text or "").splitlines() if line.strip()]
    if any(line.strip().startswith(success_line) for line in lines):
        return SmokeOutcome(passed=True, reason=success_line, lines=lines)
    errors = [match for match in (_PYTHON_ERROR.match(line.strip()) for line in lines) if match]
    if errors:
        last = errors[-1]
        return SmokeOutcome(passed=False, reason=f"{last.group(1)}: {last.group(2)}".rstrip(": "), lines=lines)
    if not lines:
        return SmokeOutcome(passed=False, reason="the smoke script printed nothing", lines=lines)
    return SmokeOutcome(passed=False, reason=f"the smoke script never printed {success_line!r}", lines=lines)
