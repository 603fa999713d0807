"""What the simulation knows that the API objects do not show directly.

Controllers keep the API objects (Node status and labels, pods) in step with
this state: a node's kernel, whether its GPU driver is loaded, its error
counters and InfiniBand ports.  Pod logs of validation pods and the BMCs
read it, so what a validation gate sees reflects the node's simulated health.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

Obj = dict[str, Any]

PodOutcome = Literal["ready", "crashloop", "succeeded", "failed", "pending"]


@dataclass
class IbPort:
    device: str  # mlx5_0
    port: int
    state: str = "Active"  # Active, Down, Init
    physical_state: str = "LinkUp"  # LinkUp, Disabled, Polling
    rate: int = 400
    link_layer: str = "InfiniBand"  # or Ethernet
    firmware: str = "28.39.1002"
    ca_type: str = "MT4129"


@dataclass
class NodeHealth:
    name: str
    kernel: str
    os_image: str
    ostree_version: str | None  # RHCOS OSTREE version on OpenShift, None elsewhere
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    gpu_count: int = 8
    gpu_memory_mib: int = 81559
    # Lifecycle
    ready: bool = True
    rebooting_until: float | None = None  # simulated time the node comes back
    never_returns: bool = False  # fault: after a reboot it stays NotReady
    # GPU stack on the node
    driver_version: str | None = None  # version of the loaded kernel module, None = not loaded
    device_plugin_up: bool = False
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    xid_events: list[int] = field(default_factory=list)
    dcgm_failures: list[str] = field(default_factory=list)  # failing dcgmi diag tests
    # Network stack on the node
    mofed_version: str | None = None
    secondary_network_up: bool = True
    ib_ports: list[IbPort] = field(default_factory=list)

    @property
    def gpus_allocatable(self) -> int:
        """GPUs the kubelet advertises: none while the driver or device plugin is down."""
        if not self.ready or self.driver_version is None or not self.device_plugin_up:
            return 0
        return self.gpu_count


@dataclass(frozen=True)
class PodPlan:
    """How a pod's containers behave once the kubelet starts them."""

    outcome: PodOutcome
    start_after: float = 5.0  # simulated seconds until Running (image pull, module load...)
    run_for: float | None = None  # for succeeded/failed: seconds Running before it ends
    message: str = ""  # shown as the waiting/terminated reason's message
    reason: str = ""  # e.g. CrashLoopBackOff, Error, Completed


# Decides how a pod behaves on a node; returns None to let the next one decide.
PodBehaviour = Callable[[Obj, NodeHealth], "PodPlan | None"]
# Produces the log of a pod's container on a node; None = next provider.
LogProvider = Callable[[Obj, str | None, NodeHealth | None], "str | None"]


@dataclass
class SimState:
    nodes: dict[str, NodeHealth] = field(default_factory=dict)
    pod_behaviours: list[PodBehaviour] = field(default_factory=list)
    log_providers: list[LogProvider] = field(default_factory=list)
    # Kernels for which a GPU driver can be built, per driver version:
    # {driver_version: {kernel, ...}}; a version absent here builds for any kernel.
    driver_builds: dict[str, set[str]] = field(default_factory=dict)
    # Kernels with no driver build at all (fault "driver fails to build for a kernel").
    kernels_without_driver_build: set[str] = field(default_factory=set)

    def plan_for(self, pod: Obj, node: NodeHealth) -> PodPlan:
        for behaviour in self.pod_behaviours:
            plan = behaviour(pod, node)
            if plan is not None:
                return plan
        return PodPlan(outcome="ready")

    def driver_builds_for(self, driver_version: str, kernel: str) -> bool:
        if kernel in self.kernels_without_driver_build:
            return False
        kernels = self.driver_builds.get(driver_version)
        return kernels is None or kernel in kernels
