"""What the simulation knows that the API objects do not show directly.

Controllers keep the API objects (Node status and labels, pods) in step with
this state: a node's kernel, whether its GPU driver is loaded, its error
counters and InfiniBand ports.  Pod logs of validation pods and the BMCs
read it, so what a validation gate sees reflects the node's simulated health.

Changing a scalar field of a ``NodeHealth`` that ``SimState`` knows (through
``add_node``) tells the kubelet simulation at once, so the Node object
(Ready condition, allocatable GPUs, GFD/NFD labels) follows without polling.
In-place edits of lists (``xid_events``, ``ib_ports``) are read live by the
pod logs and need no notification.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ..machinery.clock import SimClock

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
    boot_id: str = field(default_factory=lambda: str(uuid.uuid4()))  # changes with every reboot
    # GPU stack on the node
    driver_version: str | None = None  # version of the loaded kernel module, None = not loaded
    device_plugin_up: bool = False
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    xid_events: list[int] = field(default_factory=list)
    dcgm_failures: list[str] = field(default_factory=list)  # failing dcgmi diag tests ("pcie", "PCIe:1"...)
    dcgm_version: str = "3.3.8"  # DCGM in the validation image: 3.x and 4.x print diag tables differently
    # Network stack on the node
    mofed_version: str | None = None
    secondary_network_up: bool = True
    ib_ports: list[IbPort] = field(default_factory=list)
    # Set by SimState.add_node: called with the node name when a field changes.
    _on_change: Callable[[str], None] | None = field(default=None, repr=False, compare=False)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        listener = self.__dict__.get("_on_change")
        if listener is not None and not name.startswith("_"):
            listener(self.__dict__["name"])

    @property
    def gpus_allocatable(self) -> int:
        """GPUs the kubelet advertises: none while the driver or device plugin is down."""
        if not self.ready or self.driver_version is None or not self.device_plugin_up:
            return 0
        return self.gpu_count

    @property
    def kubelet_running(self) -> bool:
        """False while the machine is down (rebooting or dead): nothing on it progresses."""
        return self.rebooting_until is None and not (self.never_returns and not self.ready)


@dataclass(frozen=True)
class PodPlan:
    """How a pod's containers behave once the kubelet starts them."""

    outcome: PodOutcome
    start_after: float = 5.0  # simulated seconds until Running (image pull, module load...)
    run_for: float | None = None  # for succeeded/failed: seconds Running before it ends
    message: str = ""  # shown as the waiting/terminated reason's message
    reason: str = ""  # e.g. CrashLoopBackOff, Error, Completed
    # A crash loop whose cause can go away while the pod lives (the old driver module held by a pod that then
    # leaves): the kubelet asks SimState.plan_for again at each restart, as the container tries again.
    replan_on_restart: bool = False
    # Side effects of the simulated process, called by the kubelet with the
    # pod object: when its containers become Ready (a driver pod loads its
    # module) and when they stop (pod deleted, node rebooted, container ended).
    on_ready: Callable[[Obj], None] | None = field(default=None, compare=False)
    on_stop: Callable[[Obj], None] | None = field(default=None, compare=False)


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
    # The same for the Network Operator's MOFED driver: {mofed_version: {kernel, ...}} and the
    # kernels no MOFED version builds for (e.g. an OpenShift update moved to a kernel the
    # DOCA/MOFED release does not support yet, network-operator issue #2471).
    mofed_builds: dict[str, set[str]] = field(default_factory=dict)
    kernels_without_mofed_build: set[str] = field(default_factory=set)
    # OLM bundles a catalog update pruned (fault ``olm_bundle_pruned``): {(package, version), ...}.
    olm_pruned_bundles: set[tuple[str, str]] = field(default_factory=set)
    # The Argo CD application controller (``operators/argocd.py``) when ``serve --argocd`` runs one; its faults
    # (``argocd_sync_stalls``, ``argocd_repo_unreachable``) act on its ``stalled``/``unreachable``.
    argocd: Any = None
    # Nodes whose next machine-config update fails (fault ``machine_config_fails``): node -> reason.
    machine_config_failures: dict[str, str] = field(default_factory=dict)
    # Images no registry serves (fault ``image_pull_fails``): image reference, or a reference up to the OS suffix
    # the operators append to a tag (``nvcr.io/nvidia/driver:570.124.06`` for ``...:570.124.06-rhcos4.16``) -> why
    # the pull fails, as the container runtime says it.
    unpullable_images: dict[str, str] = field(default_factory=dict)
    # Nodes whose GPU Operator validator pods fail (fault ``validator_fails``): node -> the line the validator prints.
    validator_failures: dict[str, str] = field(default_factory=dict)
    # Per-node steps drawn to fail at random (fault ``node_step_failures``): each is called with
    # (node, step, key) and says whether that step fails; see ``step_fails``.
    step_failure_draws: list[Callable[[str, str, str], bool]] = field(default_factory=list)
    # Whether the seeded ClusterPolicy is the one OLM creates from the bundle's alm-examples, which names no driver
    # or driver manager image (the operator's release decides both), rather than the chart's, which pins every
    # image (scenario key ``olm_cluster_policy``).
    olm_cluster_policy: bool = False
    # The twin's clock (set by ``build.populate``); ``reboot`` needs it.
    clock: SimClock | None = None
    # Simulated time the cluster was populated; scenario ``at`` times count from it.
    started_at: float = 0.0
    # "openshift" or "kubernetes"
    profile: str = "kubernetes"
    # ``sim.recorder.Recorder`` once populated (``set_budget``, ``record_disruption``).
    recorder: Any = None
    # ``sim.events.EventRecorder`` once populated: records core/v1 Events.
    events: Any = None
    # Whether the kubelet records per-pod Events (Scheduled, Started, Killing...);
    # off for very large clusters to keep the Event count proportionate.
    pod_events: bool = True
    # Called with a node name whenever its NodeHealth changes (the kubelet listens).
    node_listeners: list[Callable[[str], None]] = field(default_factory=list)

    def unpullable_image(self, pod: Obj) -> tuple[str, str] | None:
        """(image, why) of the first container of the pod whose image cannot be pulled now, or None."""
        spec = pod.get("spec") or {}
        for container in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]:
            image = str(container.get("image") or "")
            for unpullable, why in self.unpullable_images.items():
                if image == unpullable or image.startswith(unpullable + "-"):
                    return image, why
        return None

    def plan_for(self, pod: Obj, node: NodeHealth) -> PodPlan:
        for behaviour in self.pod_behaviours:
            plan = behaviour(pod, node)
            if plan is not None:
                return plan
        return PodPlan(outcome="ready")

    def step_fails(self, node_name: str, step: str, key: str = "") -> bool:
        """Whether a node's ``step`` (``driver_build``, ``mofed_build``, ``reboot``, ``machine_config``) for
        ``key`` (the version built, the release applied) was drawn to fail by an active fault."""
        answers = [draw(node_name, step, key) for draw in self.step_failure_draws]  # each fault sees every step
        return any(answers)

    def driver_builds_for(self, driver_version: str, kernel: str, *, node_name: str | None = None) -> bool:
        if kernel in self.kernels_without_driver_build:
            return False
        if node_name is not None and self.step_fails(node_name, "driver_build", driver_version):
            return False
        kernels = self.driver_builds.get(driver_version)
        return kernels is None or kernel in kernels

    def mofed_builds_for(self, mofed_version: str, kernel: str, *, node_name: str | None = None) -> bool:
        if kernel in self.kernels_without_mofed_build:
            return False
        if node_name is not None and self.step_fails(node_name, "mofed_build", mofed_version):
            return False
        kernels = self.mofed_builds.get(mofed_version)
        return kernels is None or kernel in kernels

    # -- nodes ----------------------------------------------------------------------
    def add_node(self, health: NodeHealth) -> NodeHealth:
        """Register a node's health; later field changes notify ``node_listeners``."""
        self.nodes[health.name] = health
        health._on_change = self.node_changed
        self.node_changed(health.name)
        return health

    def node_changed(self, node_name: str) -> None:
        for listener in self.node_listeners:
            listener(node_name)

    def now(self) -> float:
        if self.clock is None:
            raise RuntimeError("SimState.clock is not set (build.populate sets it)")
        return self.clock.now()

    def reboot(self, node_name: str, duration: float) -> None:
        """Take a node down for ``duration`` simulated seconds, as a power cycle does.

        The loaded GPU driver and the device plugin go with it (the kernel
        module is gone after a reboot; the driver pod reloads it when the
        kubelet restarts it).  The kubelet brings the node back at
        ``rebooting_until`` unless ``never_returns`` is set (or this reboot was
        drawn to fail, fault ``node_step_failures``), restarting the containers
        of every pod on it.
        """
        health = self.nodes[node_name]
        if self.step_fails(node_name, "reboot"):
            health.never_returns = True  # this reboot was drawn to fail: the node does not come back
        until = self.now() + max(0.0, duration)
        if health.rebooting_until is not None:
            until = max(until, health.rebooting_until)
        health.rebooting_until = until
        health.ready = False
        health.device_plugin_up = False
        health.driver_version = None
