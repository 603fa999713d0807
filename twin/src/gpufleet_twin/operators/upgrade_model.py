"""A pure model of the in-place driver upgrade state machine of NVIDIA's operators.

The GPU Operator (driver ``gpu``) and the Network Operator (driver ``ofed``)
both upgrade their driver DaemonSets with the same library,
NVIDIA/k8s-operator-libs ``pkg/upgrade`` (``upgrade_state.go``,
``common_manager.go``, ``upgrade_inplace.go``, ``pod_manager.go``,
``drain_manager.go``, ``validation_manager.go``).  This module re-states
that behaviour as plain data in, decisions out: no I/O, no clock, no asyncio.

One call of :func:`plan_upgrade` is one ``ApplyState`` of the library: every
node is handled according to the state label it had when the snapshot was
taken, so a node moves at most one state per reconcile (the library groups
nodes by state while building the snapshot and never regroups them).

Where the library runs work in goroutines (pod deletion, drain) it keeps the
"in progress since" fact in memory; here that fact is an input
(:attr:`NodeSnapshot.eviction_started_at`) that the caller keeps, and the
model says when to start it (:class:`StartEvictionClock`).

The two drivers differ only by configuration (:class:`DriverFlavor`): the
Network Operator enables neither the pod-deletion nor the validation state
and its NicClusterPolicy has no ``maxUnavailable``, so nodes that are already
unavailable do not throttle an OFED rollout.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..machinery.selectors import parse_label_selector

# -- states (consts.go) -------------------------------------------------------------------------
# How long the upgrade controller waits for a new driver pod to be bound before it skips it as upstream does.
UNBOUND_GRACE_SECONDS = 60.0
STATE_UNKNOWN = ""
STATE_UPGRADE_REQUIRED = "upgrade-required"
STATE_CORDON_REQUIRED = "cordon-required"
STATE_WAIT_FOR_JOBS_REQUIRED = "wait-for-jobs-required"
STATE_POD_DELETION_REQUIRED = "pod-deletion-required"
STATE_DRAIN_REQUIRED = "drain-required"
STATE_NODE_MAINTENANCE_REQUIRED = "node-maintenance-required"
STATE_POST_MAINTENANCE_REQUIRED = "post-maintenance-required"
STATE_POD_RESTART_REQUIRED = "pod-restart-required"
STATE_VALIDATION_REQUIRED = "validation-required"
STATE_UNCORDON_REQUIRED = "uncordon-required"
STATE_DONE = "upgrade-done"
STATE_FAILED = "upgrade-failed"

ALL_STATES = (
    STATE_UNKNOWN,
    STATE_UPGRADE_REQUIRED,
    STATE_CORDON_REQUIRED,
    STATE_WAIT_FOR_JOBS_REQUIRED,
    STATE_POD_DELETION_REQUIRED,
    STATE_DRAIN_REQUIRED,
    STATE_NODE_MAINTENANCE_REQUIRED,
    STATE_POST_MAINTENANCE_REQUIRED,
    STATE_POD_RESTART_REQUIRED,
    STATE_VALIDATION_REQUIRED,
    STATE_UNCORDON_REQUIRED,
    STATE_DONE,
    STATE_FAILED,
)
# GetTotalManagedNodes counts these states only: the maintenance-operator states
# (requestor mode, not modelled) and any foreign label value are left out of the total.
MANAGED_STATES = (
    STATE_UNKNOWN,
    STATE_DONE,
    STATE_UPGRADE_REQUIRED,
    STATE_CORDON_REQUIRED,
    STATE_WAIT_FOR_JOBS_REQUIRED,
    STATE_POD_DELETION_REQUIRED,
    STATE_FAILED,
    STATE_DRAIN_REQUIRED,
    STATE_POD_RESTART_REQUIRED,
    STATE_UNCORDON_REQUIRED,
    STATE_VALIDATION_REQUIRED,
)
NOT_IN_PROGRESS_STATES = (STATE_UNKNOWN, STATE_DONE, STATE_UPGRADE_REQUIRED)

# isDriverPodFailing: a container not Ready that restarted more than this many times.
DRIVER_POD_RESTART_LIMIT = 10
# validation_manager.go: validationTimeoutSeconds.
VALIDATION_TIMEOUT_SECONDS = 600
# gpu-operator upgrade_controller.go: plannedRequeueInterval.
PLANNED_REQUEUE_SECONDS = 120
# GPU pods the pod-deletion state removes (gpu-operator cmd/gpu-operator/main.go gpuPodSpecFilter).
GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")

TRUE = "true"


@dataclass(frozen=True)
class DriverFlavor:
    """What differs between the drivers that share the upgrade library."""

    name: str  # "gpu" or "ofed": the %s of every key
    # WithPodDeletionEnabled: the GPU Operator deletes GPU pods before it drains;
    # the Network Operator skips the state (wait-for-jobs -> drain).
    pod_deletion_enabled: bool
    # WithValidationEnabled(podSelector): "" leaves the validation state out
    # (pod-restart -> uncordon directly).
    validation_pod_selector: str
    # ClusterPolicy has upgradePolicy.maxUnavailable; NicClusterPolicy does not,
    # so the library falls back to "every node" for the OFED driver.
    has_max_unavailable: bool
    # CRD default of upgradePolicy.drain.enable (false for ClusterPolicy, true for NicClusterPolicy).
    drain_enabled_by_default: bool

    @property
    def state_label(self) -> str:
        return f"nvidia.com/{self.name}-driver-upgrade-state"

    @property
    def skip_label(self) -> str:
        return f"nvidia.com/{self.name}-driver-upgrade.skip"

    @property
    def drain_skip_label(self) -> str:
        return f"nvidia.com/{self.name}-driver-upgrade-drain.skip"

    @property
    def initial_state_annotation(self) -> str:
        return f"nvidia.com/{self.name}-driver-upgrade.node-initial-state.unschedulable"

    @property
    def wait_for_completion_start_annotation(self) -> str:
        return f"nvidia.com/{self.name}-driver-upgrade-wait-for-pod-completion-start-time"

    @property
    def validation_start_annotation(self) -> str:
        return f"nvidia.com/{self.name}-driver-upgrade-validation-start-time"

    @property
    def upgrade_requested_annotation(self) -> str:
        return f"nvidia.com/{self.name}-driver-upgrade-requested"

    @property
    def safe_load_annotation(self) -> str:
        return f"nvidia.com/{self.name}-driver-upgrade.driver-wait-for-safe-load"

    @property
    def event_reason(self) -> str:
        return f"{self.name.upper()}DriverUpgrade"

    @property
    def validation_enabled(self) -> bool:
        return bool(self.validation_pod_selector)


GPU_DRIVER = DriverFlavor(
    name="gpu",
    pod_deletion_enabled=True,
    validation_pod_selector="app=nvidia-operator-validator",
    has_max_unavailable=True,
    drain_enabled_by_default=False,
)
OFED_DRIVER = DriverFlavor(
    name="ofed",
    pod_deletion_enabled=False,
    validation_pod_selector="",
    has_max_unavailable=False,
    drain_enabled_by_default=True,
)


# -- policy ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WaitForCompletionPolicy:
    pod_selector: str = ""  # "" = do not wait
    timeout_seconds: int = 0  # 0 = wait forever


@dataclass(frozen=True)
class PodDeletionPolicy:
    force: bool = False
    timeout_seconds: int = 300  # 0 = retry evictions forever
    delete_empty_dir: bool = False


@dataclass(frozen=True)
class DrainPolicy:
    enable: bool = False
    force: bool = False
    pod_selector: str = ""
    timeout_seconds: int = 300  # 0 = retry evictions forever
    delete_empty_dir: bool = False


@dataclass(frozen=True)
class UpgradePolicy:
    """``upgradePolicy`` of a ClusterPolicy driver (or NicClusterPolicy ofedDriver)."""

    auto_upgrade: bool = False
    max_parallel_upgrades: int = 1  # 0 = every upgrade-required node at once
    max_unavailable: int | str | None = "25%"  # None = every managed node (library fallback)
    wait_for_completion: WaitForCompletionPolicy = field(default_factory=WaitForCompletionPolicy)
    pod_deletion: PodDeletionPolicy = field(default_factory=PodDeletionPolicy)
    drain: DrainPolicy = field(default_factory=DrainPolicy)

    @classmethod
    def from_spec(cls, spec: Mapping[str, object] | None, *, flavor: DriverFlavor = GPU_DRIVER) -> UpgradePolicy:
        """Read an ``upgradePolicy`` object; absent fields take the CRD's declared defaults.

        The API server applies those defaults on write, so a stored object
        normally carries them; filling them here keeps objects written
        without CRD defaulting (snapshots, older CRDs) meaningful.
        A missing ``upgradePolicy`` means auto upgrade is off.
        """
        if not spec:
            return cls(auto_upgrade=False, drain=DrainPolicy(enable=flavor.drain_enabled_by_default))
        wait = _mapping(spec.get("waitForCompletion"))
        deletion = _mapping(spec.get("podDeletion"))
        drain = _mapping(spec.get("drain"))
        max_unavailable: int | str | None = None
        if flavor.has_max_unavailable:
            raw = spec.get("maxUnavailable", "25%")
            max_unavailable = raw if isinstance(raw, (int, str)) else "25%"
        return cls(
            auto_upgrade=bool(spec.get("autoUpgrade", False)),
            max_parallel_upgrades=_int(spec.get("maxParallelUpgrades"), 1),
            max_unavailable=max_unavailable,
            wait_for_completion=WaitForCompletionPolicy(
                pod_selector=str(wait.get("podSelector") or ""),
                timeout_seconds=_int(wait.get("timeoutSeconds"), 0),
            ),
            pod_deletion=PodDeletionPolicy(
                force=bool(deletion.get("force", False)),
                timeout_seconds=_int(deletion.get("timeoutSeconds"), 300),
                delete_empty_dir=bool(deletion.get("deleteEmptyDir", False)),
            ),
            drain=DrainPolicy(
                enable=bool(drain.get("enable", flavor.drain_enabled_by_default)),
                force=bool(drain.get("force", False)),
                pod_selector=str(drain.get("podSelector") or ""),
                timeout_seconds=_int(drain.get("timeoutSeconds"), 300),
                delete_empty_dir=bool(drain.get("deleteEmptyDir", False)),
            ),
        )


def scaled_max_unavailable(max_unavailable: int | str | None, total_nodes: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent(value, total, roundUp=true), as the library calls it.

    An int is taken as is, "N%" is N percent of the managed nodes rounded up,
    and None (no maxUnavailable in the policy) allows every managed node.
    A string without "%" is an error there too (the reconcile fails).
    """
    if max_unavailable is None:
        return total_nodes
    if isinstance(max_unavailable, bool):
        raise ValueError(f"invalid value for IntOrString: {max_unavailable!r}")
    if isinstance(max_unavailable, int):
        return max_unavailable
    text = max_unavailable.strip()
    if not text.endswith("%"):
        raise ValueError(f"invalid value for IntOrString: invalid type: string is not a percentage: {text!r}")
    try:
        percent = int(text[:-1])
    except ValueError as exc:
        raise ValueError(f"invalid value for IntOrString: {text!r}") from exc
    return math.ceil(percent * total_nodes / 100)


# -- snapshot (data in) -----------------------------------------------------------------------------
@dataclass(frozen=True)
class ContainerState:
    name: str
    ready: bool
    restart_count: int = 0


@dataclass(frozen=True)
class DriverPod:
    """The driver pod hosted on a node (BuildState keys every node by its driver pod)."""

    namespace: str
    name: str
    daemonset: str | None  # owning DaemonSet; None = orphaned pod
    revision_hash: str | None  # the pod's controller-revision-hash label
    phase: str = "Running"
    containers: tuple[ContainerState, ...] = ()
    init_containers: tuple[ContainerState, ...] = ()
    terminating: bool = False

    @property
    def orphaned(self) -> bool:
        return self.daemonset is None

    @property
    def running_and_ready(self) -> bool:
        return self.phase == "Running" and bool(self.containers) and all(c.ready for c in self.containers)

    @property
    def failing(self) -> bool:
        """isDriverPodFailing: some (init) container is not Ready and restarted more than 10 times."""
        return any(
            not c.ready and c.restart_count > DRIVER_POD_RESTART_LIMIT
            for c in (*self.init_containers, *self.containers)
        )


@dataclass(frozen=True)
class DriverDaemonSet:
    name: str
    desired_number_scheduled: int  # status.desiredNumberScheduled
    owned_pods: int  # driver pods whose first ownerReference is this DaemonSet
    latest_revision_hash: str | None  # hash of the highest-numbered ControllerRevision


@dataclass(frozen=True)
class NodePod:
    """Any other pod bound to the node (workloads, operands, validators)."""

    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    phase: str = "Running"
    ready: bool = True  # Running with every container Ready
    requests_gpu: bool = False  # requests or limits nvidia.com/gpu* or nvidia.com/mig-*
    controller_kind: str | None = "ReplicaSet"  # kind of the controlling owner; None = unmanaged
    uses_empty_dir: bool = False
    mirror: bool = False  # static pod mirrored by the kubelet
    terminating: bool = False

    @property
    def ref(self) -> PodRef:
        return PodRef(namespace=self.namespace, name=self.name)

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str


@dataclass(frozen=True)
class NodeSnapshot:
    name: str
    driver_pod: DriverPod
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    ready: bool = True  # Ready condition True (a missing condition counts as ready, as upstream)
    pods: tuple[NodePod, ...] = ()
    # When the caller began evicting pods for the node's current state
    # (pod deletion or drain); the library keeps this in a goroutine.
    eviction_started_at: float | None = None

    def state(self, flavor: DriverFlavor) -> str:
        return self.labels.get(flavor.state_label, STATE_UNKNOWN)

    def skipped(self, flavor: DriverFlavor) -> bool:
        return self.labels.get(flavor.skip_label) == TRUE

    @property
    def unavailable(self) -> bool:
        return self.unschedulable or not self.ready


@dataclass(frozen=True)
class ClusterSnapshot:
    now: float  # unix seconds
    nodes: tuple[NodeSnapshot, ...]
    daemonsets: tuple[DriverDaemonSet, ...] = ()


# -- decisions (data out) -------------------------------------------------------------------------
@dataclass(frozen=True)
class ChangeState:
    state: str


@dataclass(frozen=True)
class Cordon:
    pass


@dataclass(frozen=True)
class Uncordon:
    pass


@dataclass(frozen=True)
class SetAnnotation:
    key: str
    value: str


@dataclass(frozen=True)
class RemoveAnnotation:
    key: str


@dataclass(frozen=True)
class StartEvictionClock:
    at: float


@dataclass(frozen=True)
class EvictPods:
    """Create a policy/v1 Eviction for each pod (PDBs apply; a 429 is retried on a later reconcile)."""

    pods: tuple[PodRef, ...]
    purpose: Literal["pod-deletion", "drain"]


@dataclass(frozen=True)
class DeleteDriverPod:
    """Delete the driver pod: its OnDelete DaemonSet recreates it at the latest revision."""

    namespace: str
    name: str


@dataclass(frozen=True)
class RecordEvent:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


Action = (
    ChangeState
    | Cordon
    | Uncordon
    | SetAnnotation
    | RemoveAnnotation
    | StartEvictionClock
    | EvictPods
    | DeleteDriverPod
    | RecordEvent
)


@dataclass(frozen=True)
class NodeDecision:
    node: str
    state: str  # the state the node had in the snapshot
    actions: tuple[Action, ...]

    @property
    def next_state(self) -> str | None:
        """The state the node moves to in this reconcile, None when it stays."""
        changes = [a.state for a in self.actions if isinstance(a, ChangeState)]
        return changes[-1] if changes else None

    def of_type(self, action_type: type) -> list[Action]:
        return [a for a in self.actions if isinstance(a, action_type)]


@dataclass(frozen=True)
class UpgradeCounts:
    """The slot arithmetic of one reconcile (also the operator's upgrade metrics)."""

    total: int  # managed nodes: nodes hosting a driver pod in a managed state
    in_progress: int
    done: int
    failed: int
    pending: int  # upgrade-required
    max_unavailable: int
    current_unavailable: int  # cordoned or NotReady nodes + nodes in cordon-required
    available: int  # upgrade slots handed out this reconcile


@dataclass(frozen=True)
class UpgradePlan:
    decisions: tuple[NodeDecision, ...]
    counts: UpgradeCounts | None
    # Non-empty when the reconcile stops before deciding anything (the library returns an error).
    blocked_reason: str = ""

    def for_node(self, name: str) -> NodeDecision | None:
        for decision in self.decisions:
            if decision.node == name:
                return decision
        return None

    def next_states(self) -> dict[str, str]:
        """{node: new state} for the nodes that move in this reconcile."""
        moves: dict[str, str] = {}
        for decision in self.decisions:
            if decision.next_state is not None:
                moves[decision.node] = decision.next_state
        return moves


# -- the model --------------------------------------------------------------------------------------
def count_upgrades(
    nodes: Sequence[NodeSnapshot], *, policy: UpgradePolicy, flavor: DriverFlavor = GPU_DRIVER
) -> UpgradeCounts:
    """GetTotalManagedNodes / GetUpgradesInProgress / GetUpgradesAvailable of common_manager.go."""
    by_state = _group_by_state(nodes, flavor)
    total = sum(len(by_state.get(state, ())) for state in MANAGED_STATES)
    in_progress = total - sum(len(by_state.get(state, ())) for state in NOT_IN_PROGRESS_STATES)
    max_unavailable = scaled_max_unavailable(policy.max_unavailable, total)
    upgrade_required = len(by_state.get(STATE_UPGRADE_REQUIRED, ()))
    # maxParallelUpgrades 0 = no parallelism limit: every upgrade-required node may start.
    parallel = policy.max_parallel_upgrades
    available = upgrade_required if parallel == 0 else parallel - in_progress
    # Nodes counted unavailable: every node of the snapshot that is cordoned or
    # NotReady (whatever its state label), plus the nodes about to be cordoned.
    current_unavailable = sum(1 for node in nodes if node.unavailable) + len(by_state.get(STATE_CORDON_REQUIRED, ()))
    available = min(available, max_unavailable)
    if current_unavailable >= max_unavailable:
        available = 0
    elif max_unavailable < total and current_unavailable + available > max_unavailable:
        # Upstream only clamps when maxUnavailable is below the node count.
        available = max_unavailable - current_unavailable
    return UpgradeCounts(
        total=total,
        in_progress=in_progress,
        done=len(by_state.get(STATE_DONE, ())),
        failed=len(by_state.get(STATE_FAILED, ())),
        pending=upgrade_required,
        max_unavailable=max_unavailable,
        current_unavailable=current_unavailable,
        available=available,
    )


def daemonset_blocker(daemonsets: Sequence[DriverDaemonSet]) -> str:
    """BuildState refuses to go on while a driver DaemonSet has unscheduled pods.

    One node that cannot run the driver pod (NotReady, tainted, out of
    resources) therefore stops every upgrade in the cluster (gpu-operator #688).
    """
    for daemonset in daemonsets:
        if daemonset.desired_number_scheduled != daemonset.owned_pods:
            return (
                f"driver DaemonSet {daemonset.name} should not have Unscheduled pods "
                f"(desired {daemonset.desired_number_scheduled}, has {daemonset.owned_pods})"
            )
    return ""


def plan_upgrade(snapshot: ClusterSnapshot, *, policy: UpgradePolicy, flavor: DriverFlavor = GPU_DRIVER) -> UpgradePlan:
    """Decide what one reconcile of the upgrade controller does to each node."""
    blocker = daemonset_blocker(snapshot.daemonsets)
    if blocker:
        return UpgradePlan(decisions=(), counts=None, blocked_reason=blocker)
    if not policy.auto_upgrade:
        # The operator's controller then clears every node's state label instead.
        return UpgradePlan(decisions=(), counts=None, blocked_reason="driver auto upgrade is disabled")
    counts = count_upgrades(snapshot.nodes, policy=policy, flavor=flavor)
    latest_hash = {ds.name: ds.latest_revision_hash for ds in snapshot.daemonsets}
    context = _Context(snapshot=snapshot, policy=policy, flavor=flavor, latest_hash=latest_hash)
    slots = counts.available
    decisions: list[NodeDecision] = []
    for node in snapshot.nodes:
        state = node.state(flavor)
        if state == STATE_UPGRADE_REQUIRED:
            actions, slots = _upgrade_required(context, node, slots)
        else:
            actions = _STATE_HANDLERS.get(state, _no_change)(context, node)
        decisions.append(NodeDecision(node=node.name, state=state, actions=tuple(actions)))
    return UpgradePlan(decisions=tuple(decisions), counts=counts)


def nodes_to_reset(node_labels: Mapping[str, Mapping[str, str]], *, flavor: DriverFlavor = GPU_DRIVER) -> list[str]:
    """Nodes whose state label the controller removes while auto upgrade is off (removeNodeUpgradeStateLabels)."""
    return sorted(name for name, labels in node_labels.items() if flavor.state_label in labels)


def pod_in_sync(pod: DriverPod, latest_revision_hash: str | None) -> bool:
    """podInSyncWithDS: the pod's controller-revision-hash is the DaemonSet's latest revision."""
    return not pod.orphaned and pod.revision_hash is not None and pod.revision_hash == latest_revision_hash


def requests_gpu(pod: Mapping[str, object]) -> bool:
    """gpuPodSpecFilter's resource test on a Pod object: any container asks for a GPU or MIG slice."""
    containers = _mapping(pod.get("spec")).get("containers")
    for container in containers if isinstance(containers, list) else []:
        resources = _mapping(_mapping(container).get("resources"))
        for section in ("limits", "requests"):
            for resource_name in _mapping(resources.get(section)):
                if str(resource_name).startswith(GPU_RESOURCE_PREFIXES):
                    return True
    return False


# -- per-state handlers -------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Context:
    snapshot: ClusterSnapshot
    policy: UpgradePolicy
    flavor: DriverFlavor
    latest_hash: Mapping[str, str | None]

    @property
    def now(self) -> float:
        return self.snapshot.now

    def in_sync(self, node: NodeSnapshot) -> bool:
        pod = node.driver_pod
        return pod_in_sync(pod, self.latest_hash.get(pod.daemonset or ""))

    def driver_ready_in_sync(self, node: NodeSnapshot) -> bool:
        """isDriverPodInSync: in sync with the DaemonSet, Running, and every container Ready."""
        return self.in_sync(node) and node.driver_pod.running_and_ready

    def change(self, state: str) -> list[Action]:
        # NodeUpgradeStateProvider patches the label and records a Normal event once the cache shows it.
        return [
            ChangeState(state),
            RecordEvent("Normal", self.flavor.event_reason, f"Successfully updated node state label to {state}"),
        ]

    def annotate(self, key: str, value: str) -> list[Action]:
        return [
            SetAnnotation(key, value),
            RecordEvent("Normal", self.flavor.event_reason, f"Successfully updated node annotation to {key}={value}"),
        ]

    def unannotate(self, key: str) -> list[Action]:
        # The library removes an annotation by patching it to null and reports the value "null".
        return [
            RemoveAnnotation(key),
            RecordEvent("Normal", self.flavor.event_reason, f"Successfully updated node annotation to {key}=null"),
        ]

    def warn(self, message: str) -> RecordEvent:
        return RecordEvent("Warning", self.flavor.event_reason, message)

    def normal(self, message: str) -> RecordEvent:
        return RecordEvent("Normal", self.flavor.event_reason, message)


def _no_change(context: _Context, node: NodeSnapshot) -> list[Action]:
    return []


def _done_or_unknown(context: _Context, node: NodeSnapshot) -> list[Action]:
    """ProcessDoneOrUnknownNodes: does the node need the new driver?"""
    flavor = context.flavor
    out_of_date = not context.in_sync(node) and not node.driver_pod.orphaned
    waiting_for_safe_load = bool(node.annotations.get(flavor.safe_load_annotation))
    requested = node.annotations.get(flavor.upgrade_requested_annotation) == TRUE
    if out_of_date or waiting_for_safe_load or requested:
        actions: list[Action] = []
        if node.unschedulable:
            # Remember that a person cordoned it, so the upgrade leaves it cordoned.
            actions += context.annotate(flavor.initial_state_annotation, TRUE)
        return actions + context.change(STATE_UPGRADE_REQUIRED)
    if node.state(flavor) == STATE_UNKNOWN:
        return context.change(STATE_DONE)
    return []


def _upgrade_required(context: _Context, node: NodeSnapshot, slots: int) -> tuple[list[Action], int]:
    """ProcessUpgradeRequiredNodes (in-place): start upgrades while slots last."""
    flavor = context.flavor
    actions: list[Action] = []
    if node.annotations.get(flavor.upgrade_requested_annotation) == TRUE:
        actions += context.unannotate(flavor.upgrade_requested_annotation)
    if node.skipped(flavor):
        return actions, slots
    # A node somebody already cordoned costs no extra capacity, so it goes without a slot.
    if slots <= 0 and not node.unschedulable:
        return actions, slots
    return actions + context.change(STATE_CORDON_REQUIRED), slots - 1


def _cordon_required(context: _Context, node: NodeSnapshot) -> list[Action]:
    return [Cordon(), *context.change(STATE_WAIT_FOR_JOBS_REQUIRED)]


def _wait_for_jobs_required(context: _Context, node: NodeSnapshot) -> list[Action]:
    """ProcessWaitForJobsRequiredNodes and PodManager.ScheduleCheckOnPodCompletion."""
    flavor = context.flavor
    wait = context.policy.wait_for_completion
    if not wait.pod_selector:
        next_state = STATE_POD_DELETION_REQUIRED if flavor.pod_deletion_enabled else STATE_DRAIN_REQUIRED
        return context.change(next_state)
    selector = parse_label_selector(wait.pod_selector)
    running = any(pod.phase in ("Running", "Pending") for pod in node.pods if selector.matches(dict(pod.labels)))
    start_key = flavor.wait_for_completion_start_annotation
    if running:
        if wait.timeout_seconds == 0:
            return []  # wait forever
        started = _unix_annotation(node.annotations, start_key)
        if started is None:
            return context.annotate(start_key, str(int(context.now)))
        if int(context.now) > started + wait.timeout_seconds:
            # A timeout is not a failure: the jobs are then deleted like any GPU pod.
            return context.change(STATE_POD_DELETION_REQUIRED) + context.unannotate(start_key)
        return []
    actions: list[Action] = []
    if start_key in node.annotations:
        actions += context.unannotate(start_key)
    # The library always goes to pod-deletion-required here; without the
    # pod-deletion state that state hands the node straight to drain-required.
    return actions + context.change(STATE_POD_DELETION_REQUIRED)


def _pod_deletion_required(context: _Context, node: NodeSnapshot) -> list[Action]:
    """ProcessPodDeletionRequiredNodes and PodManager.SchedulePodEviction."""
    flavor = context.flavor
    if not flavor.pod_deletion_enabled:
        return context.change(STATE_DRAIN_REQUIRED)
    deletion = context.policy.pod_deletion
    to_delete = [pod for pod in node.pods if pod.requests_gpu and pod.phase in ("Running", "Pending")]
    if not to_delete:
        actions: list[Action] = []
        if node.eviction_started_at is not None:
            actions.append(context.normal("Deleted workload pods on the node for the driver upgrade"))
        return actions + context.change(STATE_POD_RESTART_REQUIRED)
    # The drain helper refuses DaemonSet and mirror pods, unmanaged pods without
    # force and emptyDir pods without deleteEmptyDir: then not every GPU pod can go.
    skipped = [pod for pod in to_delete if pod.controller_kind == "DaemonSet" or pod.mirror]
    if skipped or drain_refusals(to_delete, force=deletion.force, delete_empty_dir=deletion.delete_empty_dir):
        return _pod_deletion_failed(context, message="")
    timed_out = _eviction_timed_out(node, now=context.now, timeout_seconds=deletion.timeout_seconds)
    if timed_out:
        stuck = to_delete[0]
        reason = (
            f'error when evicting pods/"{stuck.name}" -n "{stuck.namespace}": '
            f"global timeout reached: {go_duration(deletion.timeout_seconds)}"
        )
        return _pod_deletion_failed(
            context, message=f"Failed to delete workload pods on the node for the driver upgrade, {reason}"
        )
    return _evict(node, pods=to_delete, purpose="pod-deletion", now=context.now)


def _pod_deletion_failed(context: _Context, *, message: str) -> list[Action]:
    actions: list[Action] = [context.warn(message)] if message else []
    if context.policy.drain.enable:
        actions.append(context.warn("Pod deletion failed but drain is enabled in spec. Will attempt a node drain"))
        return actions + context.change(STATE_DRAIN_REQUIRED)
    return actions + context.change(STATE_FAILED)


def _drain_required(context: _Context, node: NodeSnapshot) -> list[Action]:
    """ProcessDrainNodes and DrainManager.ScheduleNodesDrain (kubectl's drain helper)."""
    drain = context.policy.drain
    if not drain.enable:
        return context.change(STATE_POD_RESTART_REQUIRED)
    # The operator appends the drain-skip selector to the user's podSelector.
    selector_text = ",".join(
        part for part in (drain.pod_selector, f"{context.flavor.drain_skip_label}!={TRUE}") if part
    )
    selector = parse_label_selector(selector_text)
    # IgnoreAllDaemonSets: the driver and operand pods stay; mirror pods are never drained.
    to_drain = [
        pod
        for pod in node.pods
        if selector.matches(dict(pod.labels)) and pod.controller_kind != "DaemonSet" and not pod.mirror
    ]
    actions: list[Action] = []
    if node.eviction_started_at is None:
        actions.append(context.normal("Scheduling drain of the node"))
    refusals = drain_refusals(to_drain, force=drain.force, delete_empty_dir=drain.delete_empty_dir)
    if refusals:
        return [*actions, *context.change(STATE_FAILED), context.warn(f"Failed to drain the node, {refusals}")]
    if not to_drain:
        if node.eviction_started_at is None:
            actions.append(StartEvictionClock(context.now))
        return [*actions, context.normal("Successfully drained the node"), *context.change(STATE_POD_RESTART_REQUIRED)]
    if _eviction_timed_out(node, now=context.now, timeout_seconds=drain.timeout_seconds):
        stuck = to_drain[0]
        reason = (
            f'error when evicting pods/"{stuck.name}" -n "{stuck.namespace}": '
            f"global timeout reached: {go_duration(drain.timeout_seconds)}"
        )
        return [*context.change(STATE_FAILED), context.warn(f"Failed to drain the node, {reason}")]
    return actions + _evict(node, pods=to_drain, purpose="drain", now=context.now)


def _pod_restart_required(context: _Context, node: NodeSnapshot) -> list[Action]:
    """ProcessPodRestartNodes: replace the driver pod, then wait for it to be Ready."""
    flavor = context.flavor
    pod = node.driver_pod
    if not context.in_sync(node) or pod.orphaned:
        if pod.terminating:
            return []  # already on its way out; the DaemonSet recreates it
        return [DeleteDriverPod(pod.namespace, pod.name)]
    actions: list[Action] = []
    if node.annotations.get(flavor.safe_load_annotation):
        # Safe load: the new pod waits in its init container until this annotation goes.
        actions += context.unannotate(flavor.safe_load_annotation)
    if context.driver_ready_in_sync(node):
        if not flavor.validation_enabled:
            return actions + _uncordon_or_done(context, node)
        return actions + context.change(STATE_VALIDATION_REQUIRED)
    if pod.failing:
        return actions + context.change(STATE_FAILED)
    return actions


def _validation_required(context: _Context, node: NodeSnapshot) -> list[Action]:
    """ProcessValidationRequiredNodes and ValidationManager.Validate."""
    flavor = context.flavor
    actions: list[Action] = []
    if node.annotations.get(flavor.safe_load_annotation):
        actions += context.unannotate(flavor.safe_load_annotation)
    selector = parse_label_selector(flavor.validation_pod_selector)
    validators = [pod for pod in node.pods if selector.matches(dict(pod.labels))]
    if not validators:
        # No validator pod on the node: the library waits without starting the
        # timeout, which is how nodes get stuck here (gpu-operator #626).
        return actions
    start_key = flavor.validation_start_annotation
    if all(pod.phase == "Running" and pod.ready for pod in validators):
        if start_key in node.annotations:
            actions += context.unannotate(start_key)
        return actions + _uncordon_or_done(context, node)
    started = _unix_annotation(node.annotations, start_key)
    if started is None:
        return actions + context.annotate(start_key, str(int(context.now)))
    if int(context.now) > started + VALIDATION_TIMEOUT_SECONDS:
        return actions + context.change(STATE_FAILED) + context.unannotate(start_key)
    return actions


def _uncordon_or_done(context: _Context, node: NodeSnapshot) -> list[Action]:
    """updateNodeToUncordonOrDoneState: a node cordoned before the upgrade stays cordoned."""
    key = context.flavor.initial_state_annotation
    if key in node.annotations:
        return context.change(STATE_DONE) + context.unannotate(key)
    return context.change(STATE_UNCORDON_REQUIRED)


def _uncordon_required(context: _Context, node: NodeSnapshot) -> list[Action]:
    return [Uncordon(), *context.change(STATE_DONE)]


def _upgrade_failed(context: _Context, node: NodeSnapshot) -> list[Action]:
    """ProcessUpgradeFailedNodes: heals once the driver pod is in sync and Ready."""
    if not context.driver_ready_in_sync(node):
        return []
    key = context.flavor.initial_state_annotation
    if key in node.annotations:
        return context.change(STATE_DONE) + context.unannotate(key)
    return context.change(STATE_UNCORDON_REQUIRED)


_STATE_HANDLERS = {
    STATE_UNKNOWN: _done_or_unknown,
    STATE_DONE: _done_or_unknown,
    STATE_CORDON_REQUIRED: _cordon_required,
    STATE_WAIT_FOR_JOBS_REQUIRED: _wait_for_jobs_required,
    STATE_POD_DELETION_REQUIRED: _pod_deletion_required,
    STATE_DRAIN_REQUIRED: _drain_required,
    STATE_POD_RESTART_REQUIRED: _pod_restart_required,
    STATE_VALIDATION_REQUIRED: _validation_required,
    STATE_UNCORDON_REQUIRED: _uncordon_required,
    STATE_FAILED: _upgrade_failed,
}


# -- helpers ---------------------------------------------------------------------------------------
def _evict(
    node: NodeSnapshot, *, pods: Sequence[NodePod], purpose: Literal["pod-deletion", "drain"], now: float
) -> list[Action]:
    actions: list[Action] = []
    if node.eviction_started_at is None:
        actions.append(StartEvictionClock(now))
    # Terminating pods were evicted already: the drain helper now waits for them to go.
    pending = tuple(pod.ref for pod in pods if not pod.terminating)
    if pending:
        actions.append(EvictPods(pods=pending, purpose=purpose))
    return actions


def _eviction_timed_out(node: NodeSnapshot, *, now: float, timeout_seconds: int) -> bool:
    # kubectl's drain helper: a zero timeout retries forever.
    if timeout_seconds == 0 or node.eviction_started_at is None:
        return False
    return now - node.eviction_started_at > timeout_seconds


_UNMANAGED_FATAL = "cannot delete Pods that declare no controller (use --force to override)"
_LOCAL_STORAGE_FATAL = "cannot delete Pods with local storage (use --delete-emptydir-data to override)"


def drain_refusals(pods: Sequence[NodePod], *, force: bool, delete_empty_dir: bool) -> str:
    """The drain helper's filters that make a drain fail (kubectl/pkg/drain/filters.go), as its error text.

    Finished pods are always deletable; the others are refused when they have
    no controller (unless force) or an emptyDir volume (unless deleteEmptyDir).
    Errors are grouped per reason and aggregated like utilerrors.NewAggregate.
    """
    refused: dict[str, list[str]] = {}
    for pod in pods:
        if pod.terminal:
            continue
        # The local-storage filter runs before the unreplicated one; the first refusal wins.
        if pod.uses_empty_dir and not delete_empty_dir:
            refused.setdefault(_LOCAL_STORAGE_FATAL, []).append(f"{pod.namespace}/{pod.name}")
        elif pod.controller_kind is None and not force:
            refused.setdefault(_UNMANAGED_FATAL, []).append(f"{pod.namespace}/{pod.name}")
    messages = [f"{reason}: {', '.join(names)}" for reason, names in refused.items()]
    if len(messages) > 1:
        return "[" + ", ".join(messages) + "]"
    return messages[0] if messages else ""


def _group_by_state(nodes: Sequence[NodeSnapshot], flavor: DriverFlavor) -> dict[str, list[NodeSnapshot]]:
    grouped: dict[str, list[NodeSnapshot]] = {}
    for node in nodes:
        grouped.setdefault(node.state(flavor), []).append(node)
    return grouped


def _unix_annotation(annotations: Mapping[str, str], key: str) -> int | None:
    value = annotations.get(key)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        # The library fails the node's processing on a bad value; restarting the clock is the kinder reading.
        return None


def go_duration(seconds: int) -> str:
    """Format whole seconds like Go's time.Duration.String() (300 -> "5m0s")."""
    if seconds == 0:
        return "0s"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def _int(value: object, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return int(value)
