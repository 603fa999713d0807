# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Validation gates: Jobs pinned to a node, their logs parsed and judged (collection-internal).

Five gates, all of which must pass:

* ``smoke_training`` / ``smoke_inference``: PyTorch checks (seed 001's
  payload, hardened: a backward pass, finite results) in a Job that asks
  for ``nvidia.com/gpu``, so the device plugin, the container toolkit and the
  driver are all exercised the way a workload uses them;
* ``rdma``: ``ibstat``; every port of the chosen link layers must be
  Active/LinkUp at or above a minimum rate;
* ``gpu_errors``: ECC counters from ``nvidia-smi --query-gpu`` (a privileged
  container that sees every GPU, so it takes none from the scheduler) and XID
  events from the kernel log, or from DCGM exporter metrics when a
  Prometheus URL is given; compared with a baseline during the bake;
* ``dcgm_diag``: ``dcgmi diag -r <level>`` in the DCGM 3.x or 4.x layout.

A gate that cannot run (never scheduled, image not pulled, timed out, output
that cannot be read) fails: a skipped check is how broken nodes get promoted.
One that could not run because of the cluster rather than the node (the API
failed it after its retries, or the scheduler never placed its pod) is an
infrastructure failure: it fails, but it is no verdict on the node.
Building Jobs and judging output are pure functions; ``run_gates`` is the
I/O: it first waits (bounded, on the cluster's clock) until the node offers
its GPUs to pods again and the GPU Operator's validator on it is Ready (right
after a driver change the device plugin is still coming back), creates the
Jobs with unique names, waits (bounded, ``wait_until``) for all of them at
once, runs again (after the same wait) a gate whose pod was never scheduled,
reads ``pods/log``, and deletes what it created, also when it fails.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Type
from urllib.parse import urlencode

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import (
    InvalidInputError,
    KubeApiError,
    WaitTimeoutError,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gates_parse import (
    UnreadableOutputError,
    ecc_counters,
    excerpt,
    focused_excerpt,
    parse_dcgmi_diag,
    parse_ibstat,
    parse_kernel_xids,
    parse_prometheus_vector,
    parse_smi_query_csv,
    parse_smoke_log,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_spec import normalized_for_diff
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_nodes import (
    GPU_RESOURCE,
    free_gpus,
    gpus_missing,
    pod_gpus,
    read_dra_gpus,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_objects import (
    describe_object,
    object_field,
    object_items,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import (
    JOBS,
    NODES,
    PODS,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._wait import wait_until

GATE_NAMES = ("smoke_training", "smoke_inference", "rdma", "gpu_errors", "dcgm_diag")
_SHORT_NAMES = {
    "smoke_training": "train",
    "smoke_inference": "infer",
    "rdma": "rdma",
    "gpu_errors": "gpuerr",
    "dcgm_diag": "dcgm",
}
MANAGED_BY = "gpufleet.upgrade"
GATE_LABEL = "gpufleet.io/gate"
GATE_NODE_LABEL = "gpufleet.io/gate-node"
GATE_RUN_LABEL = "gpufleet.io/gate-run"
# The GPU Operator's validator DaemonSet: Ready once the driver, toolkit, CUDA and device plugin checks passed.
VALIDATOR_SELECTOR = "app=nvidia-operator-validator"
NOT_SCHEDULED = "not scheduled"

DEFAULT_IMAGES = {
    "pytorch": "nvcr.io/nvidia/pytorch:24.03-py3",
    "cuda": "nvcr.io/nvidia/cuda:12.4.1-base-ubi9",
    "rdma": "docker.io/mellanox/rping-test:latest",
    "kernel_log": "registry.access.redhat.com/ubi9/ubi:latest",
    "dcgm": "nvcr.io/nvidia/cloud-native/dcgm:3.3.8-1-ubi9",
}

TRAINING_SUCCESS = "Training smoke: OK"
INFERENCE_SUCCESS = "Inference smoke: OK"
# Seed 001's checks, made to fail loudly: a backward pass (training is autograd,
# not only a matmul) and a finiteness test, each ending in a line the gate looks for.
TRAINING_SCRIPT = f"""import sys
import torch

if not torch.cuda.is_available():
    sys.exit("RuntimeError: CUDA is not available to PyTorch")
x = torch.randn(1000, 1000, device="cuda", requires_grad=True)
y = torch.mm(x, x)
y.sum().backward()
torch.cuda.synchronize()
if not bool(torch.isfinite(x.grad).all()):
    sys.exit("RuntimeError: non-finite gradients from the GPU")
print("{TRAINING_SUCCESS}")
print("shape:", tuple(y.shape), "device:", torch.cuda.get_device_name(0))
"""
INFERENCE_SCRIPT = f"""import sys
import torch

if not torch.cuda.is_available():
    sys.exit("RuntimeError: CUDA is not available to PyTorch")
model = torch.nn.Linear(1024, 1024).cuda().eval()
batch = torch.randn(32, 1024, device="cuda")
with torch.no_grad():
    out = model(batch)
torch.cuda.synchronize()
if tuple(out.shape) != (32, 1024) or not bool(torch.isfinite(out).all()):
    sys.exit("RuntimeError: unexpected inference output from the GPU")
print("{INFERENCE_SUCCESS}")
print("shape:", tuple(out.shape), "device:", torch.cuda.get_device_name(0))
"""
ECC_FIELDS = (
    "index",
    "pci.bus_id",
    "uuid",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.corrected.aggregate.total",
    "ecc.errors.uncorrected.aggregate.total",
)
# XIDs that application code causes (13 graphics engine exception, 31 MMU fault,
# 43 GPU stopped by a failing app, 45 preemptive cleanup): not a node fault.
DEFAULT_XID_IGNORE = (13, 31, 43, 45)
# Container states in which a pod will not start by itself.
_NOT_STARTING = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError")
_LOG_LIMIT = 4 * 1024 * 1024

Clock = Callable[[], float]
Pause = Callable[[float], None]
Fetch = Callable[[str], Any]


@dataclass(frozen=True)
class GateSettings:
    """How gates run and what they accept; one object for every gate of a run."""

    namespace: str
    images: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_IMAGES))
    dcgm_level: int = 2
    timeout: float = 1800.0
    start_timeout: float = 300.0
    sleep: float = 2.0
    pin: str = "hostname"  # nodeSelector kubernetes.io/hostname (scheduler checks GPUs), or "node_name"
    tolerations: Tuple[Mapping[str, Any], ...] = ({"key": "nvidia.com/gpu", "operator": "Exists"},)
    service_account: str = ""
    runtime_class_name: str = ""
    privileged: bool = True
    smoke_gpus: int = 1
    rdma_link_layers: Tuple[str, ...] = ("InfiniBand",)
    rdma_min_rate: int = 0
    rdma_min_ports: int = 1
    max_uncorrected: int = 0
    max_corrected: Optional[int] = None
    max_corrected_growth: int = 10
    max_uncorrected_growth: int = 0
    xid_ignore: Tuple[int, ...] = DEFAULT_XID_IGNORE
    kernel_log: bool = True
    prometheus_url: str = ""
    prometheus_node_label: str = "Hostname"
    baseline: Optional[Mapping[str, Any]] = None
    extra_labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    image_pull_secrets: Tuple[str, ...] = ()
    # Seconds (cluster clock) to wait for the node to offer its GPUs and pass its validator before the gates.
    ready_timeout: float = 600.0
    validator_selector: str = VALIDATOR_SELECTOR
    # How many times a gate whose pod was never scheduled runs again before it is an infrastructure failure.
    schedule_retries: int = 1

    def __post_init__(self) -> None:
        if self.ready_timeout < 0 or self.schedule_retries < 0:
            raise InvalidInputError(
                f"ready_timeout and schedule_retries cannot be negative (got {self.ready_timeout}, "
                f"{self.schedule_retries})"
            )

    def image(self, name: str) -> str:
        return str(self.images.get(name) or DEFAULT_IMAGES[name])


@dataclass
class GateVerdict:
    gate: str
    node: str
    passed: bool
    reason: str
    evidence: str = ""
    details: Dict[str, Any] = field(default_factory=dict)
    job: str = ""
    elapsed: float = 0.0
    # Set when the gate could not run because of the cluster, not the node: the API failed it (after its
    # retries) or the scheduler never placed its pod (after the reruns). An infrastructure failure, no verdict.
    infrastructure_error: str = ""
    # Its pod was never scheduled (this round): run it again after the node offers its GPUs.
    unscheduled: bool = False
    # When its pod started and its last container finished, on the cluster's clock (the pod's status): the
    # gate's real duration, where ``elapsed`` is this machine's time spent waiting for it.
    started_at: str = ""
    finished_at: str = ""

    def as_dict(self) -> Dict[str, Any]:
        return {
            "gate": self.gate,
            "node": self.node,
            "passed": self.passed,
            "could_not_run": bool(self.infrastructure_error),
            "infrastructure_error": self.infrastructure_error,
            "reason": self.reason,
            "evidence": self.evidence,
            "details": self.details,
            "job": self.job,
            "elapsed": round(self.elapsed, 1),
            "started_at": self.started_at,
            "finished_at": self.finished_at,
        }


def pod_run_times(pod: Optional[Mapping[str, Any]]) -> Tuple[str, str]:
    """(started, finished) of a pod on the cluster's clock: its ``startTime`` and its containers' last
    ``terminated.finishedAt`` (core/v1 PodStatus, ContainerStateTerminated); "" where the pod does not say."""
    status = (pod or {}).get("status") or {}
    finished = [
        str(((container.get("state") or {}).get("terminated") or {}).get("finishedAt") or "")
        for container in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
        if isinstance(container, Mapping)
    ]
    return str(status.get("startTime") or ""), max(finished, default="")


@dataclass
class GateReport:
    node: str
    verdicts: List[GateVerdict]
    elapsed: float = 0.0
    # The Jobs the run created (and deleted once judged), for the diff.
    jobs: List[Dict[str, Any]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.verdicts) and all(verdict.passed for verdict in self.verdicts)

    @property
    def counters(self) -> Dict[str, Any]:
        """Error counters seen by the gpu_errors gate (the bake's baseline)."""
        for verdict in self.verdicts:
            if verdict.gate == "gpu_errors":
                return dict(verdict.details.get("counters") or {})
        return {}

    @property
    def infrastructure_failures(self) -> List[str]:
        """Gates that could not run because of the cluster, each with why: no verdict on the node."""
        return [
            f"{verdict.gate}: {verdict.infrastructure_error}"
            for verdict in self.verdicts
            if verdict.infrastructure_error
        ]

    def as_dict(self) -> Dict[str, Any]:
        failed = [verdict for verdict in self.verdicts if not verdict.passed]
        return {
            "node": self.node,
            "passed": self.passed,
            "gates": [verdict.as_dict() for verdict in self.verdicts],
            "failed_gates": [verdict.gate for verdict in failed],
            # Failed gates that ran and judged the node, apart from those the API kept from running.
            "judged_failed_gates": [verdict.gate for verdict in failed if not verdict.infrastructure_error],
            "infrastructure_failures": self.infrastructure_failures,
            "summary": "all gates passed"
            if self.passed
            else "; ".join(f"{verdict.gate}: {verdict.reason}" for verdict in failed),
            "counters": self.counters,
            "elapsed": round(self.elapsed, 1),
        }


# -- Jobs (pure) -------------------------------------------------------------------------------


def validate_gate_names(gates: Sequence[str]) -> List[str]:
    names = []
    for gate in gates:
        if gate not in GATE_NAMES:
            raise InvalidInputError(f"Unknown validation gate {gate!r} (known: {', '.join(GATE_NAMES)})")
        if gate not in names:
            names.append(gate)
    if not names:
        raise InvalidInputError("No validation gate given")
    return names


def gate_job_name(gate: str, node: str, *, suffix: str) -> str:
    """A unique Job name within the 63 characters a label value (job-name) may have, with room for the pod suffix."""
    node_part = "".join(ch if ch.isalnum() or ch == "-" else "-" for ch in node.lower()).strip("-")
    head = f"gpufleet-{_SHORT_NAMES[gate]}-"
    room = 52 - len(head) - len(suffix) - 1
    return f"{head}{node_part[:room].rstrip('-')}-{suffix}"


def _container(
    name: str, image: str, command: List[str], *, settings: GateSettings, gpus: int = 0, privileged: bool = False
) -> Dict[str, Any]:
    container: Dict[str, Any] = {"name": name, "image": image, "command": command, "imagePullPolicy": "IfNotPresent"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    else:
        # Seeing every GPU without taking any from the device plugin: the way
        # node-level tools (DCGM, the operator's validator) look at all of them.
        container["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    if privileged and settings.privileged:
        container["securityContext"] = {"privileged": True}
    return container


def gate_containers(gate: str, *, settings: GateSettings) -> List[Dict[str, Any]]:
    """The containers a gate's pod runs (each one's log is parsed on its own)."""
    if gate == "smoke_training":
        return [
            _container(
                "smoke",
                settings.image("pytorch"),
                ["python3", "-c", TRAINING_SCRIPT],
                settings=settings,
                gpus=settings.smoke_gpus,
            )
        ]
    if gate == "smoke_inference":
        return [
            _container(
                "smoke",
                settings.image("pytorch"),
                ["python3", "-c", INFERENCE_SCRIPT],
                settings=settings,
                gpus=settings.smoke_gpus,
            )
        ]
    if gate == "rdma":
        return [_container("ibstat", settings.image("rdma"), ["ibstat"], settings=settings, privileged=True)]
    if gate == "gpu_errors":
        query = ["nvidia-smi", f"--query-gpu={','.join(ECC_FIELDS)}", "--format=csv"]
        containers = [_container("ecc", settings.image("cuda"), query, settings=settings, privileged=True)]
        if settings.kernel_log and not settings.prometheus_url:
            containers.append(
                _container("kernel-log", settings.image("kernel_log"), ["dmesg"], settings=settings, privileged=True)
            )
        return containers
    if gate == "dcgm_diag":
        if not 1 <= settings.dcgm_level <= 4:
            raise InvalidInputError(f"dcgm_diag level must be 1 to 4, not {settings.dcgm_level}")
        # dcgmi talks to a host engine; start one in the pod (it daemonizes) first.
        script = f"nv-hostengine >/dev/null 2>&1; dcgmi diag -r {settings.dcgm_level}"
        return [
            _container("dcgm", settings.image("dcgm"), ["/bin/sh", "-c", script], settings=settings, privileged=True)
        ]
    raise InvalidInputError(f"Unknown validation gate {gate!r}")


def build_gate_job(gate: str, *, node: str, settings: GateSettings, run_id: str, suffix: str) -> Dict[str, Any]:
    """A batch/v1 Job running one gate on one node, once (no retries: a retry would hide a flaky node)."""
    labels = dict(settings.extra_labels)
    labels.update(
        {
            "app.kubernetes.io/managed-by": MANAGED_BY,
            "app.kubernetes.io/component": "validation-gate",
            GATE_LABEL: gate.replace("_", "-"),
            GATE_NODE_LABEL: node[:63],
            GATE_RUN_LABEL: run_id,
        }
    )
    pod_spec: Dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": gate_containers(gate, settings=settings),
        "tolerations": [dict(toleration) for toleration in settings.tolerations],
        "terminationGracePeriodSeconds": 5,
    }
    if settings.pin == "node_name":
        pod_spec["nodeName"] = node
    else:
        pod_spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    if settings.service_account:
        pod_spec["serviceAccountName"] = settings.service_account
    if settings.runtime_class_name:
        pod_spec["runtimeClassName"] = settings.runtime_class_name
    if settings.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in settings.image_pull_secrets]
    template_meta: Dict[str, Any] = {"labels": dict(labels)}
    if settings.annotations:
        template_meta["annotations"] = dict(settings.annotations)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": gate_job_name(gate, node, suffix=suffix),
            "namespace": settings.namespace,
            "labels": labels,
        },
        "spec": {
            "backoffLimit": 0,
            # The cluster stops a stuck gate even if this run dies, and cleans up later.
            "activeDeadlineSeconds": int(max(settings.timeout + settings.start_timeout, 3600)),
            "ttlSecondsAfterFinished": 86400,
            "template": {"metadata": template_meta, "spec": pod_spec},
        },
    }


def planned_gate_jobs(gates: Sequence[str], *, node: str, settings: GateSettings) -> List[Dict[str, Any]]:
    """The Jobs a run of ``gates`` on ``node`` creates (what check mode shows; a run names them afresh)."""
    run_id = secrets.token_hex(4)
    return [
        build_gate_job(gate, node=node, settings=settings, run_id=run_id, suffix=secrets.token_hex(3))
        for gate in validate_gate_names(gates)
    ]


def gate_jobs_diff(jobs: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """The diff of a validation: the gates' Jobs, none before, each one after (by name). They are deleted once
    judged, so the cluster ends as it began; the diff is what the run creates on the way."""
    return {
        "before": {"jobs": {}},
        "after": {"jobs": {str(job["metadata"]["name"]): normalized_for_diff(job) for job in jobs}},
        "after_header": "Jobs the gates run (deleted once judged)",
    }


def check_mode_result(gates: Sequence[str], *, node: str, settings: GateSettings, diff: bool) -> Dict[str, Any]:
    """What check mode returns: no gate run, no verdict (``passed`` null), and the change a run makes (it creates
    the gates' Jobs), with the Jobs as the diff when asked."""
    names = validate_gate_names(gates)
    result: Dict[str, Any] = {
        "changed": True,
        "passed": None,
        "checked": False,
        "node": node,
        "gates": [],
        "failed_gates": [],
        "judged_failed_gates": [],
        "infrastructure_failures": [],
        "summary": f"check mode: {', '.join(names)} not run",
        "counters": {},
        "elapsed": 0.0,
    }
    if diff:
        result["diff"] = gate_jobs_diff(planned_gate_jobs(names, node=node, settings=settings))
    return result


def report_result(report: GateReport, *, diff: bool) -> Dict[str, Any]:
    """What a run returns: the report, changed when it created Jobs (deleted once judged: the cluster ends as it
    began, yet each run writes), and the Jobs as the diff when asked."""
    result = dict(report.as_dict(), changed=bool(report.jobs), checked=True)
    if diff:
        result["diff"] = gate_jobs_diff(report.jobs)
    return result


# -- judging (pure) ----------------------------------------------------------------------------


def judge_smoke(gate: str, logs: Mapping[str, str]) -> Tuple[bool, str, Dict[str, Any]]:
    success = TRAINING_SUCCESS if gate == "smoke_training" else INFERENCE_SUCCESS
    outcome = parse_smoke_log(logs.get("smoke", ""), success_line=success)
    return outcome.passed, outcome.reason, {"lines": outcome.lines[-10:]}


def judge_rdma(text: str, *, settings: GateSettings) -> Tuple[bool, str, Dict[str, Any]]:
    report = parse_ibstat(text)
    wanted = {layer.lower() for layer in settings.rdma_link_layers}
    ports = [port for port in report.ports if not wanted or port.link_layer.lower() in wanted]
    problems = []
    if report.panic:
        problems.append(f"ibstat failed: {report.panic}")
    for port in ports:
        if port.state != "Active" or port.physical_state != "LinkUp":
            problems.append(f"{port.name} is {port.state}/{port.physical_state}")
        elif settings.rdma_min_rate and (port.rate or 0) < settings.rdma_min_rate:
            problems.append(f"{port.name} runs at {port.rate} Gb/s, below {settings.rdma_min_rate}")
    if len(ports) < settings.rdma_min_ports:
        layers = "/".join(settings.rdma_link_layers) or "any"
        problems.append(f"{len(ports)} {layers} ports found, at least {settings.rdma_min_ports} expected")
    failing = sorted({port.device for port in ports if port.state != "Active" or port.physical_state != "LinkUp"})
    details = {
        "ports": [port.as_dict() for port in ports],
        "devices": [{"name": d.name, "ca_type": d.ca_type, "firmware": d.firmware} for d in report.devices],
        "focus": {"ibstat": [f"CA '{device}'" for device in failing] + ["ibpanic"], "after": 16},
    }
    if problems:
        return False, "; ".join(problems), details
    return True, f"{len(ports)} ports Active/LinkUp", details


def xid_counts(events: Sequence[Any], *, ignore: Sequence[int]) -> Dict[str, int]:
    """How often each (GPU, XID) appears, leaving out the XIDs that applications cause."""
    counts: Dict[str, int] = {}
    for event in events:
        if event.xid in ignore:
            continue
        key = f"{event.bus_id}/xid-{event.xid}"
        counts[key] = counts.get(key, 0) + 1
    return counts


def counter_growth(
    baseline: Mapping[str, Any],
    current: Mapping[str, Any],
    *,
    max_corrected_growth: int,
    max_uncorrected_growth: int,
) -> List[str]:
    """What grew since the baseline beyond what is allowed: ECC counters per GPU and XIDs."""
    problems = []
    before_gpus = baseline.get("gpus") or {}
    for key, now in sorted((current.get("gpus") or {}).items()):
        before = before_gpus.get(key) or {}
        for kind, allowed in (("uncorrected", max_uncorrected_growth), ("corrected", max_corrected_growth)):
            if now.get(kind) is None:
                continue
            grew = int(now[kind]) - int(before.get(kind) or 0)
            if grew > allowed:
                problems.append(f"GPU {key}: {kind} ECC errors grew by {grew} (allowed {allowed})")
    before_xids = baseline.get("xids") or {}
    for key, count in sorted((current.get("xids") or {}).items()):
        new = int(count) - int(before_xids.get(key) or 0)
        if new > 0:
            problems.append(f"{new} new XID event(s) {key}")
    return problems


def judge_gpu_errors(
    logs: Mapping[str, str],
    *,
    settings: GateSettings,
    xid_samples: Optional[Any] = None,
) -> Tuple[bool, str, Dict[str, Any]]:
    query = parse_smi_query_csv(logs.get("ecc", ""))
    query.require_fields(ECC_FIELDS)
    gpus = ecc_counters(query)
    problems = [f"GPU {bus} is lost: {message} (XID 79, fallen off the bus)" for bus, message in query.lost_gpus]
    if not gpus and not query.lost_gpus:
        problems.append("nvidia-smi listed no GPU")
    unknown = [gpu.key for gpu in gpus if gpu.uncorrected is None]
    # With a baseline (the bake) growth is judged instead: errors from before
    # the canary passed were judged then.
    for gpu in [] if settings.baseline else gpus:
        if gpu.uncorrected is not None and gpu.uncorrected > settings.max_uncorrected:
            problems.append(f"GPU {gpu.index} ({gpu.bus_id}) has {gpu.uncorrected} uncorrected ECC errors")
        if settings.max_corrected is not None and (gpu.corrected or 0) > settings.max_corrected:
            problems.append(f"GPU {gpu.index} ({gpu.bus_id}) has {gpu.corrected} corrected ECC errors")
    xid_events: List[Dict[str, Any]] = []
    xids: Dict[str, int] = {}
    if xid_samples is not None:
        for sample in xid_samples:
            last_xid = int(sample.value)
            if last_xid and last_xid not in settings.xid_ignore:
                gpu = sample.labels.get("gpu", "?")
                key = f"gpu-{gpu}/xid-{last_xid}"
                xids[key] = 1
                xid_events.append({"bus_id": f"gpu {gpu}", "xid": last_xid, "message": "DCGM_FI_DEV_XID_ERRORS"})
    elif "kernel-log" in logs:
        events = parse_kernel_xids(logs["kernel-log"])
        xid_events = [event.as_dict() for event in events]
        xids = xid_counts(events, ignore=settings.xid_ignore)
    counters = {
        "gpus": {gpu.key: {"corrected": gpu.corrected, "uncorrected": gpu.uncorrected} for gpu in gpus},
        "xids": xids,
    }
    if settings.baseline:
        problems += counter_growth(
            settings.baseline,
            counters,
            max_corrected_growth=settings.max_corrected_growth,
            max_uncorrected_growth=settings.max_uncorrected_growth,
        )
    else:
        problems += [f"XID {key.split('/xid-')[1]} on {key.split('/xid-')[0]}" for key in sorted(xids)]
    details = {
        "focus": {"kernel-log": ["NVRM: Xid"], "after": 0},
        "gpus": [gpu.as_dict() for gpu in gpus],
        "xid_events": xid_events[-20:],
        "counters": counters,
        "ecc_not_reported": unknown,
        "compared_with_baseline": bool(settings.baseline),
    }
    if problems:
        return False, "; ".join(problems), details
    note = f" (ECC not reported by {len(unknown)} GPUs)" if unknown else ""
    return True, f"{len(gpus)} GPUs without uncorrected errors or XIDs{note}", details


def judge_dcgm(text: str) -> Tuple[bool, str, Dict[str, Any]]:
    report = parse_dcgmi_diag(text)
    failed = report.failed_tests
    details = {
        "dcgm_version": report.dcgm_version,
        "layout": f"DCGM {report.layout}.x",
        "tests": [test.as_dict() for test in report.tests],
        "focus": {"dcgm": [f"| {test.name} " for test in failed], "after": 6},
    }
    if failed:
        parts = []
        for test in failed:
            gpus = f" (GPU {', '.join(map(str, test.failed_gpus))})" if test.failed_gpus else ""
            why = next((m.text for m in test.messages if m.kind in ("Warning", "Error")), "")
            parts.append(f"{test.name}{gpus} failed" + (f": {why[:200]}" if why else ""))
        return False, "; ".join(parts), details
    return True, f"{len(report.tests)} tests passed (DCGM {report.dcgm_version})", details


def gate_evidence(logs: Mapping[str, str], *, focus: Optional[Mapping[str, Any]] = None) -> str:
    """Raw output per container: around what failed when the judge said where to look, else head and tail."""
    focus = focus or {}
    parts = []
    for name, text in logs.items():
        needles = focus.get(name)
        shown = focused_excerpt(text, needles, after=int(focus.get("after", 0))) if needles else excerpt(text)
        parts.append(f"--- {name} ---\n{shown}")
    return "\n".join(parts)


def judge_gate(
    gate: str,
    logs: Mapping[str, str],
    *,
    settings: GateSettings,
    xid_samples: Optional[Any] = None,
) -> Tuple[bool, str, Dict[str, Any]]:
    """Judge one gate from its containers' logs; unreadable output is a failure that says what was wrong."""
    try:
        if gate in ("smoke_training", "smoke_inference"):
            return judge_smoke(gate, logs)
        if gate == "rdma":
            return judge_rdma(logs.get("ibstat", ""), settings=settings)
        if gate == "gpu_errors":
            return judge_gpu_errors(logs, settings=settings, xid_samples=xid_samples)
        if gate == "dcgm_diag":
            return judge_dcgm(logs.get("dcgm", ""))
    except UnreadableOutputError as err:
        return False, f"output cannot be read: {err.msg}", {}
    raise InvalidInputError(f"Unknown validation gate {gate!r}")


# -- pod states (pure) ---------------------------------------------------------------------------


@dataclass
class PodSituation:
    """Where a gate's pod stands: finished (with phase), still running, or not starting (and why)."""

    finished: bool
    phase: str
    problem: str = ""
    exit_codes: Dict[str, int] = field(default_factory=dict)


def pod_situation(pod: Optional[Mapping[str, Any]]) -> PodSituation:
    if pod is None:
        return PodSituation(finished=False, phase="", problem="no pod created yet")
    status = object_field(pod, "status")
    phase = str(status.get("phase") or "Pending")
    exit_codes = {}
    problem = ""
    for index, container in enumerate(object_items(pod, "status", "containerStatuses")):
        where = f"status.containerStatuses[{index}]"
        state = _field_of(pod, container, where, "state")
        terminated = _field_of(pod, state, where + ".state", "terminated")
        if terminated:
            exit_code = terminated.get("exitCode") or 0
            if not isinstance(exit_code, int) or isinstance(exit_code, bool):
                raise KubeApiError(f"{describe_object(pod)}: {where}.state.terminated.exitCode is {exit_code!r}")
            exit_codes[str(container.get("name"))] = exit_code
        waiting = _field_of(pod, state, where + ".state", "waiting")
        if waiting.get("reason") in _NOT_STARTING:
            problem = (
                f"container {container.get('name')}: {waiting.get('reason')} {waiting.get('message') or ''}".strip()
            )
    if phase == "Pending" and not problem:
        for condition in object_items(pod, "status", "conditions"):
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                problem = f"not scheduled: {condition.get('message') or condition.get('reason') or 'Unschedulable'}"
    return PodSituation(finished=phase in ("Succeeded", "Failed"), phase=phase, problem=problem, exit_codes=exit_codes)


def _field_of(obj: Mapping[str, Any], parent: Mapping[str, Any], where: str, key: str) -> Dict[str, Any]:
    """``parent[key]`` as an object (empty when absent); another type names ``obj`` and the field."""
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise KubeApiError(f"{describe_object(obj)}: {where}.{key} is not an object ({value!r:.60})")
    return value


# -- I/O ------------------------------------------------------------------------------------------


@dataclass
class _GateRun:
    gate: str
    job: Dict[str, Any]
    created_at: float
    create_error: str = ""


def _newest(pods: Sequence[Mapping[str, Any]]) -> Optional[Mapping[str, Any]]:
    if not pods:
        return None
    return sorted(pods, key=lambda pod: str((pod.get("metadata") or {}).get("creationTimestamp") or ""))[-1]


def _owned_by_job(pod: Mapping[str, Any], job_name: str) -> bool:
    owners = object_items(pod, "metadata", "ownerReferences")
    return any(owner.get("kind") == "Job" and owner.get("name") == job_name for owner in owners)


def _delete_job(api: KubeApi, namespace: str, name: str) -> None:
    # Jobs deleted through the API orphan their pods unless told otherwise.
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
    try:
        api.request("DELETE", JOBS.path(namespace=namespace, name=name), body=body)
    except KubeApiError as err:
        if err.status != 404:
            raise


def cleanup_gate_objects(api: KubeApi, *, namespace: str, run_id: str, job_names: Sequence[str]) -> List[str]:
    """Delete the run's Jobs and any of their pods still there; returns what could not be deleted."""
    left = []
    for name in job_names:
        try:
            _delete_job(api, namespace, name)
        except KubeApiError as err:
            left.append(f"Job {namespace}/{name}: {err.msg}")
    try:
        pods = api.list(PODS, namespace=namespace, label_selector=f"{GATE_RUN_LABEL}={run_id}")
    except KubeApiError as err:
        return [*left, f"pods of run {run_id}: {err.msg}"]
    for pod in pods:
        name = pod["metadata"]["name"]
        try:
            api.delete(PODS, name, namespace=namespace, grace_period_seconds=0)
        except KubeApiError as err:
            left.append(f"Pod {namespace}/{name}: {err.msg}")
    return left


def _prometheus_xids(fetch: Fetch, *, settings: GateSettings, node: str) -> Any:
    selector = f'{settings.prometheus_node_label}="{node}"'
    url = f"{settings.prometheus_url.rstrip('/')}/api/v1/query?" + urlencode(
        {"query": f"DCGM_FI_DEV_XID_ERRORS{{{selector}}}"}
    )
    samples = parse_prometheus_vector(fetch(url))
    if not samples:
        # No series is no evidence: the exporter is not scraped, or the node label is not the one it carries.
        raise UnreadableOutputError(
            f"no DCGM_FI_DEV_XID_ERRORS series with {selector} in Prometheus (is dcgm-exporter on the node "
            "scraped, and does prometheus_node_label name the label that holds the node name?)"
        )
    return samples


def gates_gpus(gates: Sequence[str], *, settings: GateSettings) -> int:
    """GPUs the gates ask the scheduler for at once (the smoke tests; the others see the GPUs without taking any)."""
    return sum(settings.smoke_gpus for gate in gates if gate in ("smoke_training", "smoke_inference"))


def node_gate_blocker(
    node: Optional[Mapping[str, Any]],
    validators: Sequence[Mapping[str, Any]],
    *,
    pods: Sequence[Mapping[str, Any]] = (),
    gpus_needed: int = 0,
    dra: Optional[Mapping[str, int]] = None,
) -> str:
    """Why the node cannot take its gates yet ('' when it can): gone, not Ready, fewer GPUs allocatable than
    it has (the device plugin is not back after a driver change), its GPU Operator validator not Ready, or
    fewer GPUs free than the gates ask for (``pods`` on the node hold them)."""
    if node is None:
        return "the node does not exist"
    missing = gpus_missing(node)
    if missing:
        return missing
    for pod in validators:
        conditions = object_items(pod, "status", "conditions")
        if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            return f"the GPU Operator validator {describe_object(pod)} is not Ready"
    name = str(object_field(node, "metadata").get("name") or "")
    free = free_gpus([node], pods, dra).get(name, 0)
    if free < gpus_needed:
        holders = sorted(
            f"{describe_object(pod)} ({pod_gpus(pod, dra)})"
            for pod in pods
            if pod_gpus(pod, dra) and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        )
        return f"{free} {GPU_RESOURCE} free, the gates need {gpus_needed}; held by {', '.join(holders) or 'nothing'}"
    return ""


def wait_for_gate_node(
    api: KubeApi, *, node: str, gates: Sequence[str], settings: GateSettings, clock: Clock, pause: Pause
) -> Dict[str, Any]:
    """Wait (bounded by ``ready_timeout`` on ``clock``, the cluster's) until the node can take its gates.

    Never fails: what still blocks the node after the wait is returned, and the gates then say what they can.
    """

    def observe() -> str:
        validators: List[Dict[str, Any]] = []
        if settings.validator_selector:
            validators = api.list(
                PODS,
                namespace=settings.namespace,
                label_selector=settings.validator_selector,
                field_selector=f"spec.nodeName={node}",
            )
        needed = gates_gpus(gates, settings=settings)
        pods = api.list(PODS, field_selector=f"spec.nodeName={node}") if needed else []
        dra = read_dra_gpus(api, pods)
        return node_gate_blocker(api.get(NODES, node), validators, pods=pods, gpus_needed=needed, dra=dra)

    what = f"node {node} to offer its GPUs and pass its validator"
    try:
        outcome = wait_until(
            observe,
            lambda blocker: not blocker,
            timeout=settings.ready_timeout,
            sleep=settings.sleep,
            what=what,
            clock=clock,
            pause=pause,
        )
    except WaitTimeoutError as err:
        return {"waited": round(float(err.result.get("elapsed") or 0), 1), "blocker": str(err.result.get("last"))}
    except KubeApiError as err:
        return {"waited": 0.0, "blocker": f"the node could not be read: {err.msg}"}
    return {"waited": round(outcome.elapsed, 1), "blocker": ""}


def cluster_clock(api: KubeApi) -> Clock:
    """Seconds on the API server's clock (its Date header): waits on the cluster's time, as the bake."""
    return lambda: api.server_time().timestamp()


def run_gates(
    api: KubeApi,
    *,
    node: str,
    gates: Sequence[str],
    settings: GateSettings,
    fetch: Optional[Fetch] = None,
    clock: Clock = time.monotonic,
    pause: Pause = time.sleep,
    node_clock: Optional[Clock] = None,
) -> GateReport:
    """Run the gates on one node at once and judge each; never leaves its Jobs behind.

    Before each round, wait for the node to take gates (``wait_for_gate_node`` on ``node_clock``, the cluster's
    by default); a gate whose pod was never scheduled runs again, up to ``schedule_retries`` times, and is an
    infrastructure failure if it never is.
    """
    names = validate_gate_names(gates)
    started = clock()
    on_cluster = node_clock or cluster_clock(api)
    waits = [wait_for_gate_node(api, node=node, gates=names, settings=settings, clock=on_cluster, pause=pause)]
    jobs: List[Dict[str, Any]] = []
    verdicts = _run_round(
        api, node=node, gates=names, settings=settings, fetch=fetch, clock=clock, pause=pause, created=jobs
    )
    for _retry in range(settings.schedule_retries):
        again = [verdict.gate for verdict in verdicts if verdict.unscheduled]
        if not again:
            break
        waits.append(wait_for_gate_node(api, node=node, gates=again, settings=settings, clock=on_cluster, pause=pause))
        rounds = _run_round(
            api, node=node, gates=again, settings=settings, fetch=fetch, clock=clock, pause=pause, created=jobs
        )
        rerun = {verdict.gate: verdict for verdict in rounds}
        verdicts = [rerun.get(verdict.gate, verdict) for verdict in verdicts]
    for verdict in verdicts:
        verdict.details.setdefault("node_wait", waits)
        if verdict.unscheduled and len(waits) > 1:
            verdict.reason += f" (in each of {len(waits)} runs)"
    return GateReport(node=node, verdicts=verdicts, elapsed=clock() - started, jobs=jobs)


def _run_round(
    api: KubeApi,
    *,
    node: str,
    gates: Sequence[str],
    settings: GateSettings,
    fetch: Optional[Fetch],
    clock: Clock,
    pause: Pause,
    created: Optional[List[Dict[str, Any]]] = None,
) -> List[GateVerdict]:
    """One Job per gate, created at once, awaited and judged together, then deleted; ``created`` gets each Job
    the API accepted."""
    run_id = secrets.token_hex(4)
    runs: List[_GateRun] = []
    for gate in gates:
        job = build_gate_job(gate, node=node, settings=settings, run_id=run_id, suffix=secrets.token_hex(3))
        runs.append(_GateRun(gate=gate, job=job, created_at=clock()))
    try:
        for run in runs:
            try:
                # KubeApi retries transient answers (5xx, 429, a broken connection) a bounded number of times.
                api.create(JOBS, run.job, namespace=settings.namespace)
            except KubeApiError as err:
                run.create_error = err.msg
            else:
                if created is not None:
                    created.append(run.job)
            run.created_at = clock()
        try:
            verdicts = _await_and_judge(
                api, node=node, runs=runs, settings=settings, fetch=fetch, clock=clock, pause=pause
            )
        except KubeApiError as err:
            # The gates' pods and Jobs could not be watched: none of them was judged.
            verdicts = [_could_not_run(run.gate, node, run.create_error or err.msg, job=run) for run in runs]
    finally:
        left = cleanup_gate_objects(
            api,
            namespace=settings.namespace,
            run_id=run_id,
            job_names=[run.job["metadata"]["name"] for run in runs if not run.create_error],
        )
    if left:
        for verdict in verdicts:
            verdict.details.setdefault("cleanup_left", left)
    return verdicts


def _could_not_run(gate: str, node: str, why: str, *, job: _GateRun, unscheduled: bool = False) -> GateVerdict:
    reason = f"could not run (infrastructure failure, not a verdict on the node): {why}"
    name = job.job["metadata"]["name"]
    return GateVerdict(gate, node, False, reason, job=name, infrastructure_error=why, unscheduled=unscheduled)


def job_failure(job: Optional[Mapping[str, Any]]) -> str:
    """Why a Job failed (DeadlineExceeded, BackoffLimitExceeded...), or "" when it has not."""
    for condition in object_items(job or {}, "status", "conditions"):
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            return f"{condition.get('reason') or 'Failed'}: {condition.get('message') or 'the Job failed'}"
    return ""


@dataclass
class _Observed:
    pod: Optional[Mapping[str, Any]]
    situation: PodSituation
    job_failed: str = ""
    settled_at: Optional[float] = None


def _await_and_judge(
    api: KubeApi,
    *,
    node: str,
    runs: Sequence[_GateRun],
    settings: GateSettings,
    fetch: Optional[Fetch],
    clock: Clock,
    pause: Pause,
) -> List[GateVerdict]:
    selector = f"{GATE_RUN_LABEL}={runs[0].job['metadata']['labels'][GATE_RUN_LABEL]}"
    pending = [run for run in runs if not run.create_error]
    # The last pod seen per gate: a finished pod may be deleted (a Job past its
    # deadline deletes its pod) before every gate has settled.
    observed: Dict[str, _Observed] = {run.gate: _Observed(pod=None, situation=pod_situation(None)) for run in pending}

    def observe() -> Dict[str, _Observed]:
        pods = api.list(PODS, namespace=settings.namespace, label_selector=selector)
        jobs = {
            job["metadata"]["name"]: job
            for job in api.list(JOBS, namespace=settings.namespace, label_selector=selector)
        }
        now = clock()
        for run in pending:
            state = observed[run.gate]
            if state.settled_at is not None:
                continue
            job_name = run.job["metadata"]["name"]
            pod = _newest([pod for pod in pods if _owned_by_job(pod, job_name)])
            if pod is not None:
                state.pod, state.situation = pod, pod_situation(pod)
            state.job_failed = job_failure(jobs.get(job_name))
            stuck = bool(state.situation.problem) and now - run.created_at >= settings.start_timeout
            if state.situation.finished or stuck or (state.job_failed and pod is None):
                state.settled_at = now
        return observed

    timed_out = False
    try:
        wait_until(
            observe,
            lambda states: all(state.settled_at is not None for state in states.values()),
            timeout=settings.timeout,
            sleep=settings.sleep,
            what=f"validation gates on node {node}",
            clock=clock,
            pause=pause,
        )
    except WaitTimeoutError:
        timed_out = True
    verdicts = []
    for run in runs:
        job_name = run.job["metadata"]["name"]
        if run.create_error:
            verdicts.append(_could_not_run(run.gate, node, run.create_error, job=run))
            continue
        state = observed[run.gate]
        elapsed = (state.settled_at if state.settled_at is not None else clock()) - run.created_at
        situation = state.situation
        if not situation.finished:
            if state.pod is None or situation.problem.startswith(NOT_SCHEDULED):
                # Never placed on the node (no room for its GPUs, the node cordoned, no pod at all): the
                # scheduler's doing, not the node's; run again after the node offers its GPUs.
                then = f"; then {state.job_failed}" if state.job_failed else ""
                why = f"{situation.problem or 'no pod was created'}{then}"
                verdicts.append(_could_not_run(run.gate, node, why, job=run, unscheduled=True))
                continue
            if state.job_failed:
                seen = f"{situation.problem}; then " if situation.problem else ""
                reason = f"could not run: {seen}{state.job_failed}"
            elif situation.problem and (state.settled_at is not None or not timed_out):
                reason = f"could not run: {situation.problem}"
            else:
                reason = f"timed out after {settings.timeout:.0f}s (pod {situation.phase or 'not created'})"
            verdicts.append(GateVerdict(run.gate, node, False, reason, job=job_name, elapsed=elapsed))
            continue
        verdict = _judge_finished(api, run=run, pod=state.pod, situation=situation, settings=settings, fetch=fetch)
        verdict.elapsed = elapsed
        verdict.started_at, verdict.finished_at = pod_run_times(state.pod)
        verdicts.append(verdict)
    return verdicts


def _judge_finished(
    api: KubeApi,
    *,
    run: _GateRun,
    pod: Optional[Mapping[str, Any]],
    situation: PodSituation,
    settings: GateSettings,
    fetch: Optional[Fetch],
) -> GateVerdict:
    meta = (pod or {}).get("metadata") or {}
    node = str(run.job["metadata"]["labels"][GATE_NODE_LABEL])
    job_name = run.job["metadata"]["name"]
    logs: Dict[str, str] = {}
    for container in run.job["spec"]["template"]["spec"]["containers"]:
        try:
            logs[container["name"]] = api.read_pod_log(
                settings.namespace, meta.get("name", ""), container=container["name"], limit_bytes=_LOG_LIMIT
            )
        except KubeApiError as err:
            return _could_not_run(run.gate, node, f"its log cannot be read: {err.msg}", job=run)
    xid_samples = None
    if run.gate == "gpu_errors" and settings.prometheus_url and fetch is not None:
        try:
            xid_samples = _prometheus_xids(fetch, settings=settings, node=node)
        except UnreadableOutputError as err:
            reason = f"DCGM exporter metrics: {err.msg}"
            return GateVerdict(run.gate, node, False, reason, evidence=gate_evidence(logs), job=job_name)
    passed, reason, details = judge_gate(run.gate, logs, settings=settings, xid_samples=xid_samples)
    focus = details.pop("focus", None)
    evidence = gate_evidence(logs, focus=None if passed else focus)
    details["pod"] = meta.get("name", "")
    details["exit_codes"] = situation.exit_codes
    if situation.phase != "Succeeded":
        codes = ", ".join(f"{name} exited {code}" for name, code in sorted(situation.exit_codes.items()) if code)
        if passed:
            reason = (
                f"the pod {situation.phase}" + (f" ({codes})" if codes else "") + " although its output looked good"
            )
        passed = False
    return GateVerdict(run.gate, node, passed, reason, evidence=evidence, details=details, job=job_name)


def fetch_json_with(
    open_url: Callable[..., Any],
    *,
    validate_certs: bool,
    timeout: float,
    errors: Tuple[Type[BaseException], ...] = (OSError, ValueError),
) -> Fetch:
    """A ``fetch(url) -> JSON`` built on ansible's open_url (Prometheus queries); ``errors`` are its failures."""

    def fetch(url: str) -> Any:
        try:
            response = open_url(url, method="GET", validate_certs=validate_certs, timeout=timeout)
            return json.loads(response.read())
        except errors as err:
            raise UnreadableOutputError(f"cannot query {url.split('?', 1)[0]}: {err}") from err

    return fetch
