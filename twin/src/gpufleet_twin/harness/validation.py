"""Validation pods run to completion: one-shot tools exit, as they do on a real node.

A pod that runs a node check once (``restartPolicy: Never`` or ``OnFailure``,
as a Job's pod does) and whose containers run ``nvidia-smi``, ``ibstat``,
``dcgmi diag``, ``dmesg`` or a PyTorch script ends after the time the tool
takes, ``Succeeded`` or ``Failed`` by the node's health:

- ``nvidia-smi`` fails without a loaded driver (exit 9 on a real node) or
  with a GPU off the bus (XID 79);
- ``ibstat <device>`` fails for a device the node does not have (``ibpanic``,
  exit 255); without a device it reports every port and succeeds;
- ``dcgmi diag -r N`` takes longer the higher the level and fails when a test
  fails (``dcgm_failures``, uncorrectable ECC errors) or no driver is loaded;
- a PyTorch script fails on a node whose GPUs it cannot use (no driver, no
  allocatable GPU, a GPU off the bus, uncorrectable ECC errors) with the
  error CUDA raises there, and otherwise prints what its plain ``print("...")``
  calls print.

``dmesg`` prints a kernel log with the NVIDIA driver's ``NVRM: Xid`` lines for
the node's XID events.  The output of the other tools comes from
``kube/logs.py``; this module only adds what a finished pod needs.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from ..apiserver.cluster import Twin
from ..kube.state import NodeHealth, PodPlan

Obj = dict[str, Any]

# Simulated seconds each tool runs (dcgmi diag: the documented order of each level).
_RUN_FOR = {"nvidia-smi": 2.0, "ibstat": 1.0, "dmesg": 1.0, "torch": 40.0}
_DIAG_RUN_FOR = {1: 60.0, 2: 150.0, 3: 1500.0, 4: 3600.0}
_DIAG = re.compile(r"\bdcgmi\s+diag\b(?:.*?(?:-r|--run)\s+(\d))?")
_XID_TEXT = {
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, "
    "subpartition 0.",
    63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
    74: "NVLink: fatal error detected on link 4(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    79: "GPU has fallen off the bus.",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
}


def _command(container: Obj) -> str:
    return " ".join([*(container.get("command") or ()), *(container.get("args") or ())])


def _tool(command: str) -> tuple[str, int] | None:
    """(tool, dcgmi diag level) for a command this model runs to completion."""
    diag = _DIAG.search(command)
    if diag:
        return "dcgmi", int(diag.group(1) or 1)
    words = command.split()
    if not words:
        return None
    program = words[0].rsplit("/", 1)[-1]
    if program.startswith("python") and "torch" in command:
        return "torch", 0
    for tool in ("nvidia-smi", "ibstat", "dmesg"):
        if re.search(rf"(^|[\s/;&|]){re.escape(tool)}\b", command):
            return tool, 0
    return None


def _torch_failure(node: NodeHealth) -> str:
    """The error a CUDA program meets on this node, or "" when it can use its GPUs."""
    if node.driver_version is None:
        return (
            "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and "
            "installed a driver from http://www.nvidia.com/Download/index.aspx"
        )
    if 79 in node.xid_events:
        return "RuntimeError: CUDA error: unspecified launch failure"
    if node.ecc_uncorrected > 0:
        return "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    if node.gpus_allocatable <= 0:
        return "RuntimeError: CUDA is not available to PyTorch"
    return ""


def _fails(tool: str, command: str, node: NodeHealth) -> str:
    """Why the tool exits non-zero on this node ("" when it succeeds)."""
    if tool == "nvidia-smi":
        if node.driver_version is None:
            return "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"
        if 79 in node.xid_events:
            return "Unable to determine the device handle for a GPU: Unknown Error"
        return ""
    if tool == "ibstat":
        words = command.split()
        position = next((i for i, word in enumerate(words) if word.rsplit("/", 1)[-1] == "ibstat"), -1)
        following = words[position + 1] if 0 <= position < len(words) - 1 else "-"
        device = None if following.startswith("-") else following
        if device is not None and all(port.device != device for port in node.ib_ports):
            return f"ibpanic: stat of IB device '{device}' failed"
        return ""
    if tool == "dcgmi":
        if node.driver_version is None:
            return "Unable to connect to host engine"
        if node.dcgm_failures or node.ecc_uncorrected > 0:
            return "One or more diagnostic tests failed"
        return ""
    if tool == "torch":
        return _torch_failure(node)
    return ""


def plan_validation_pod(pod: Obj, node: NodeHealth) -> PodPlan | None:
    """Run-to-completion plan for a check pod; None for any other pod."""
    spec = pod.get("spec") or {}
    if (spec.get("restartPolicy") or "Always") == "Always":
        return None
    containers = list(spec.get("containers") or ())
    tools = []
    for container in containers:
        command = _command(container)
        found = _tool(command)
        if found is None:
            return None
        tools.append((found, command))
    if not tools:
        return None
    run_for = max(_DIAG_RUN_FOR.get(level, 60.0) if tool == "dcgmi" else _RUN_FOR[tool] for (tool, level), _ in tools)
    failures = [why for why in (_fails(tool, command, node) for (tool, _level), command in tools) if why]
    if failures:
        return PodPlan(outcome="failed", start_after=3.0, run_for=run_for, reason="Error", message=failures[0])
    return PodPlan(outcome="succeeded", start_after=3.0, run_for=run_for)


# -- logs ------------------------------------------------------------------------------------------------


def _script_of(container: Obj) -> str:
    words = [*(container.get("command") or ()), *(container.get("args") or ())]
    if "-c" in words and words.index("-c") + 1 < len(words):
        return str(words[words.index("-c") + 1])
    return ""


def _literal_prints(script: str) -> list[str]:
    """What the script's ``print("...")`` calls of plain string literals print, in order."""
    try:
        tree = ast.parse(script)
    except SyntaxError as exc:
        return [f"SyntaxError: {exc.msg}"]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "print"
            and node.args
            and all(isinstance(arg, ast.Constant) and isinstance(arg.value, str) for arg in node.args)
        ):
            found.append((node.lineno, " ".join(str(arg.value) for arg in node.args)))  # type: ignore[attr-defined]
    return [text for _line, text in sorted(found)]


def _torch_log(container: Obj, node: NodeHealth) -> str:
    failure = _torch_failure(node)
    if failure:
        return f'Traceback (most recent call last):\n  File "<string>", line 6, in <module>\n{failure}\n'
    return "".join(f"{line}\n" for line in _literal_prints(_script_of(container)))


def kernel_log(node: NodeHealth) -> str:
    """A node's ``dmesg``: a few boot lines, the driver loading, then its XID events."""
    lines = [
        "[    0.000000] Linux version " + node.kernel,
        "[    0.000000] Command line: BOOT_IMAGE=(hd0,gpt3)/ostree/vmlinuz root=UUID=... rw",
        "[    2.114230] pci 0000:19:00.0: [10de:2330] type 00 class 0x030200",
    ]
    if node.driver_version:
        lines.append(
            f"[   41.552817] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {node.driver_version}  "
            "Release Build  (dvs-builder@U16-I3-B03-4-3)"
        )
    stamp = 3600.0
    for xid in node.xid_events:
        bus = "0000:db:00" if xid == 79 else "0000:19:00"
        text = _XID_TEXT.get(xid, "Graphics Exception: ESR 0x404600=0x80000010")
        lines.append(f"[{stamp:12.6f}] NVRM: Xid (PCI:{bus}): {xid}, pid=4127, name=python3, {text}")
        stamp += 17.25
    return "\n".join(lines) + "\n"


def validation_log(pod: Obj, container_name: str | None, node: NodeHealth | None) -> str | None:
    """Log provider: PyTorch scripts and dmesg of check pods; None leaves other tools to ``kube/logs``."""
    if node is None:
        return None
    spec = pod.get("spec") or {}
    container = next((c for c in spec.get("containers") or () if c.get("name") == container_name), None)
    if container is None:
        return None
    found = _tool(_command(container))
    if found is None:
        return None
    if found[0] == "torch":
        return _torch_log(container, node)
    if found[0] == "dmesg":
        return kernel_log(node)
    return None


def install(twin: Twin) -> None:
    """Add the run-to-completion plans and the extra logs to the twin's simulation."""
    sim = twin.sim
    sim.pod_behaviours.append(plan_validation_pod)
    sim.log_providers.append(validation_log)
