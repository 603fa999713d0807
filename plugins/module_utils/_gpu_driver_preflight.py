# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Preflight of a GPU driver rollout: what would stall, fail or hurt, before anything is written
(collection-internal, pure).

Findings carry a severity: ``error`` stops the module before any write (the
rollout could not progress, or would fail for sure), ``warning`` is reported
and the rollout goes on, ``info`` is context. The same findings are returned
by a read-only preflight run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_scope import (
    MODE_SKIP_LABEL,
    SCOPE_CANARY,
    STATE_LABEL,
    labels_of,
    name_of,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_watch import (
    GPU_RESOURCE,
    driver_pods_by_node,
    gpu_quantity,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_nodes import (
    describe_pdb,
    pdbs_covering_pod,
    pod_gpus,
    pod_key,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_budget import (
    gpu_operator_upgrade_slots,
    node_is_unschedulable,
    node_ready_status,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._skip_label import (
    NOT_STARTED_STATES,
    STATE_DONE,
    STATE_FAILED,
)

ERROR = "error"
WARNING = "warning"
INFO = "info"

DEPLOY_DRIVER_LABEL = "nvidia.com/gpu.deploy.driver"
MCO_STATE_ANNOTATION = "machineconfiguration.openshift.io/state"
_FINISHED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Finding:
    check: str
    severity: str
    message: str
    nodes: Tuple[str, ...] = ()
    details: Dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> Dict[str, Any]:
        shown: Dict[str, Any] = {"check": self.check, "severity": self.severity, "message": self.message}
        if self.nodes:
            shown["nodes"] = list(self.nodes)
        if self.details:
            shown["details"] = dict(self.details)
        return shown


@dataclass(frozen=True)
class PreflightInput:
    policy: Dict[str, Any]
    upgrade_policy: Dict[str, Any]  # what the controller will read once the patch lands
    gpu_nodes: Tuple[Dict[str, Any], ...]
    driver_pods: Tuple[Dict[str, Any], ...]
    driver_daemonsets: Tuple[Dict[str, Any], ...]
    pods: Tuple[Dict[str, Any], ...]  # every pod that may hold GPUs
    pdbs: Tuple[Dict[str, Any], ...]
    machine_config_pools: Optional[Tuple[Dict[str, Any], ...]]  # None: the cluster serves no MachineConfigPools
    targets: Tuple[str, ...]
    managed: FrozenSet[str]
    held_by_others: Tuple[str, ...] = ()
    scope: str = "all"
    canary_mode: Optional[str] = None
    wait: bool = True
    retry_failed_nodes: bool = False
    target_version: str = ""
    # False: no upgrade controller moves the driver (autoUpgrade false, or an operator that predates it); the
    # module replaces the driver pods itself.
    upgrade_controller: bool = True
    # GPUs pods hold through Dynamic Resource Allocation claims (_k8s_nodes.dra_gpus_by_pod).
    dra_gpus: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Preflight:
    findings: Tuple[Finding, ...]
    summary: Dict[str, Any]

    @property
    def errors(self) -> List[Finding]:
        return [finding for finding in self.findings if finding.severity == ERROR]

    @property
    def warnings(self) -> List[Finding]:
        return [finding for finding in self.findings if finding.severity == WARNING]

    def as_dict(self) -> Dict[str, Any]:
        return {
            "ok": not self.errors,
            "findings": [finding.as_dict() for finding in self.findings],
            "summary": dict(self.summary),
        }


def _unavailable(node: Mapping[str, Any]) -> bool:
    # The controller's view: cordoned, or a Ready condition that is not True.
    return node_is_unschedulable(node) or node_ready_status(node) not in ("True", "")


def _controller_findings(data: PreflightInput) -> List[Finding]:
    """Whether an upgrade controller will move the driver, or this module does the node work itself."""
    if not data.upgrade_controller:
        return [
            Finding(
                "auto_upgrade",
                INFO,
                "No upgrade controller moves the driver (upgradePolicy.autoUpgrade is false, or the operator "
                "predates it): this module replaces the driver pods node by node itself; autoUpgrade stays as it is",
            )
        ]
    if not bool(data.upgrade_policy.get("autoUpgrade")):
        return [
            Finding(
                "auto_upgrade",
                ERROR if data.wait else WARNING,
                "upgradePolicy.autoUpgrade is false: the upgrade controller replaces no driver pod (and clears "
                "every node's state label); set upgrade_policy.autoUpgrade true",
            )
        ]
    return []


def run_preflight(data: PreflightInput) -> Preflight:
    findings: List[Finding] = []
    nodes = {name_of(node): node for node in data.gpu_nodes}
    states = {name: labels_of(node).get(STATE_LABEL, "") for name, node in nodes.items()}
    policy = data.upgrade_policy

    findings += _daemonset_findings(data, nodes)

    findings += _controller_findings(data)

    unavailable = sorted(name for name in data.managed if name in nodes and _unavailable(nodes[name]))
    findings += _node_state_findings(data, states, unavailable=unavailable)

    # The controller's slot formula, as if every target not yet on the target driver were upgrade-required now.
    managed_states = [states.get(name, "") for name in data.managed]
    in_progress = sum(1 for state in managed_states if state not in (*NOT_STARTED_STATES, STATE_DONE))
    pods = driver_pods_by_node(data.driver_pods)
    pending = [
        name
        for name in data.targets
        if states.get(name, "") in (*NOT_STARTED_STATES, STATE_DONE)
        and not (name in pods and pods[name].version == data.target_version and pods[name].ready)
    ]
    max_parallel = int(policy.get("maxParallelUpgrades", 1))
    try:
        slots = gpu_operator_upgrade_slots(
            total_nodes=len(data.managed),
            in_progress=in_progress,
            upgrade_required=len(pending),
            unavailable_nodes=len(unavailable),
            cordon_required=sum(1 for state in managed_states if state == "cordon-required"),
            max_parallel_upgrades=max_parallel,
            max_unavailable=policy.get("maxUnavailable", "25%"),
        )
    except InvalidInputError as err:
        findings.append(Finding("budget", ERROR, f"upgradePolicy.maxUnavailable: {err.msg}"))
        return Preflight(findings=tuple(findings), summary={})
    schedulable_pending = [name for name in pending if not node_is_unschedulable(nodes.get(name, {}))]
    if slots.available <= 0 and schedulable_pending and in_progress == 0:
        # Without the controller the rollout engine decides: it finishes the nodes it cordoned first (resuming
        # an interrupted run) and waits, bounded, for the budget otherwise.
        findings.append(
            Finding(
                "budget",
                ERROR if data.upgrade_controller else WARNING,
                f"maxUnavailable allows {slots.max_unavailable} node(s) away and {slots.current_unavailable} already "
                + (
                    "are: the upgrade controller would start no node"
                    if data.upgrade_controller
                    else "are: only a node this collection's rollout cordoned can go now"
                ),
                nodes=tuple(unavailable),
                details=slots.as_dict(),
            )
        )

    at_once = max(0, min(slots.available, len(pending))) if pending else 0
    findings += _capacity_findings(data, nodes, pending=pending, at_once=at_once)
    findings += _pdb_findings(
        data, nodes, pending=pending, drain_enabled=bool((policy.get("drain") or {}).get("enable"))
    )

    if data.scope == SCOPE_CANARY and data.canary_mode == MODE_SKIP_LABEL:
        findings += _recreation_findings(data, nodes)

    findings += _operator_findings(data.policy)

    summary = {
        "gpu_nodes": len(nodes),
        "managed_nodes": len(data.managed),
        "targets": len(data.targets),
        "pending": len(pending),
        "max_unavailable": slots.max_unavailable,
        "max_parallel_upgrades": max_parallel,
        "unavailable_now": len(unavailable),
        "nodes_at_once": at_once,
        "slots": slots.as_dict(),
    }
    return Preflight(findings=tuple(findings), summary=summary)


def _node_state_findings(
    data: PreflightInput, states: Mapping[str, str], *, unavailable: Sequence[str]
) -> List[Finding]:
    """Targets failed in an earlier attempt, nodes someone else holds, and nodes already away."""
    findings: List[Finding] = []
    failed = sorted(name for name in data.targets if states.get(name) == STATE_FAILED)
    if failed and not data.retry_failed_nodes:
        findings.append(
            Finding(
                "failed_nodes",
                ERROR,
                f"Node(s) {', '.join(failed)} are upgrade-failed from an earlier attempt; the rollout stays halted. "
                "Fix the cause and retry them (retry_failed_nodes), or roll back",
                nodes=tuple(failed),
            )
        )
    if data.held_by_others:
        findings.append(
            Finding(
                "held_by_others",
                WARNING,
                f"{len(data.held_by_others)} node(s) carry nvidia.com/gpu-driver-upgrade.skip=true set by someone "
                "else; this rollout leaves them on their current driver",
                nodes=tuple(data.held_by_others),
            )
        )
    if unavailable:
        findings.append(
            Finding(
                "nodes_unavailable",
                WARNING,
                f"{len(unavailable)} node(s) are cordoned or NotReady; they count against maxUnavailable",
                nodes=tuple(unavailable),
            )
        )
    return findings


def _daemonset_findings(data: PreflightInput, nodes: Mapping[str, Mapping[str, Any]]) -> List[Finding]:
    findings: List[Finding] = []
    owned: Dict[str, int] = {}
    for pod in data.driver_pods:
        for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
            if ref.get("kind") == "DaemonSet":
                owned[str(ref.get("uid"))] = owned.get(str(ref.get("uid")), 0) + 1
    for daemonset in data.driver_daemonsets:
        meta = daemonset.get("metadata") or {}
        desired = int((daemonset.get("status") or {}).get("desiredNumberScheduled") or 0)
        have = owned.get(str(meta.get("uid")), 0)
        if desired != have:
            findings.append(
                Finding(
                    "driver_daemonset",
                    ERROR,
                    f"Driver DaemonSet {meta.get('namespace')}/{meta.get('name')} should run {desired} pod(s) and "
                    f"owns {have}: the upgrade controller stops every upgrade while a driver DaemonSet has "
                    "unscheduled pods",
                    details={"desired": desired, "pods": have},
                )
            )
    hosting = {str((pod.get("spec") or {}).get("nodeName") or "") for pod in data.driver_pods}
    missing = sorted(
        name
        for name, node in nodes.items()
        if labels_of(node).get(DEPLOY_DRIVER_LABEL, "true") == "true" and name not in hosting
    )
    if missing:
        findings.append(
            Finding(
                "driver_daemonset",
                ERROR,
                f"{len(missing)} GPU node(s) run no driver pod: the driver DaemonSet is not scheduled there, which "
                "stalls the upgrade controller (and their driver would not be upgraded)",
                nodes=tuple(missing),
            )
        )
    return findings


def _gpu_use(data: PreflightInput) -> Dict[str, int]:
    used: Dict[str, int] = {}
    for pod in data.pods:
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if not node or (pod.get("status") or {}).get("phase") in _FINISHED:
            continue
        used[node] = used.get(node, 0) + pod_gpus(pod, data.dra_gpus)
    return used


def _capacity_findings(
    data: PreflightInput, nodes: Mapping[str, Mapping[str, Any]], *, pending: Sequence[str], at_once: int
) -> List[Finding]:
    if at_once <= 0:
        return []
    used = _gpu_use(data)
    busiest = sorted(pending, key=lambda name: (-used.get(name, 0), name))[:at_once]
    displaced = sum(used.get(name, 0) for name in busiest)
    free = 0
    for name, node in nodes.items():
        if name in busiest or _unavailable(node):
            continue
        allocatable = gpu_quantity(((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE))
        free += max(0, allocatable - used.get(name, 0))
    details = {"nodes_at_once": at_once, "gpus_displaced": displaced, "gpus_free_elsewhere": free}
    if displaced > free:
        return [
            Finding(
                "capacity",
                WARNING,
                f"Up to {at_once} node(s) go at once; their GPU pods hold {displaced} GPU(s) and only {free} are free "
                "on the other nodes: displaced pods will wait Pending until a node comes back",
                nodes=tuple(busiest),
                details=details,
            )
        ]
    return [Finding("capacity", INFO, f"{free} free GPU(s) elsewhere cover the {displaced} displaced", details=details)]


def _pdb_findings(
    data: PreflightInput, nodes: Mapping[str, Mapping[str, Any]], *, pending: Sequence[str], drain_enabled: bool
) -> List[Finding]:
    pending_set = set(pending)
    blocked: Dict[str, List[str]] = {}
    for pod in data.pods:
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if (
            node not in pending_set
            or pod_gpus(pod, data.dra_gpus) == 0
            or (pod.get("status") or {}).get("phase") in _FINISHED
        ):
            continue
        for pdb in pdbs_covering_pod(data.pdbs, pod):
            if int((pdb.get("status") or {}).get("disruptionsAllowed") or 0) <= 0:
                blocked.setdefault(describe_pdb(pdb), []).append(f"{node}: {pod_key(pod)}")
    findings = []
    consequence = (
        "the controller falls back to a drain" if drain_enabled else "with drain disabled the node goes upgrade-failed"
    )
    for pdb_text, pods in sorted(blocked.items()):
        findings.append(
            Finding(
                "pdb",
                WARNING,
                f"{pdb_text} allows no disruption now: deleting {len(pods)} GPU pod(s) will be refused until it does; "
                f"after podDeletion.timeoutSeconds {consequence}",
                nodes=tuple(sorted({entry.split(":", 1)[0] for entry in pods})),
                details={"pods": sorted(pods)},
            )
        )
    return findings


def _recreation_findings(data: PreflightInput, nodes: Mapping[str, Mapping[str, Any]]) -> List[Finding]:
    """skip_label: anything that recreates a driver pod on a held node brings up the new driver."""
    findings: List[Finding] = [
        Finding(
            "skip_label_not_a_pin",
            WARNING,
            "Skip labels hold the upgrade controller, not the driver: the DaemonSet already carries the new driver, "
            "so a driver pod recreated on a held node (reboot, MachineConfigPool update, eviction, deletion) starts "
            "the new driver. Keep held nodes from rebooting until promotion, or use canary_mode nvidiadriver",
        )
    ]
    held = [name for name in sorted(data.managed) if name not in data.targets]
    for pool in data.machine_config_pools or ():
        meta, spec, status = pool.get("metadata") or {}, pool.get("spec") or {}, pool.get("status") or {}
        rendered = ((spec.get("configuration") or {}).get("name")) or ""
        current = ((status.get("configuration") or {}).get("name")) or ""
        machines = int(status.get("machineCount") or 0)
        updated = int(status.get("updatedMachineCount") or 0)
        updating = any(
            c.get("type") == "Updating" and c.get("status") == "True" for c in status.get("conditions") or []
        )
        pending = (rendered and current and rendered != current) or updated < machines or updating
        if not pending:
            continue
        if spec.get("paused"):
            message = (
                f"MachineConfigPool {meta.get('name')} is paused with pending changes ({updated}/{machines} "
                "updated): unpausing it during the bake reboots its nodes into the new driver"
            )
        else:
            message = (
                f"MachineConfigPool {meta.get('name')} is updating ({updated}/{machines} updated): its reboots "
                "recreate driver pods on held nodes with the new driver; pause it or wait for it first"
            )
        findings.append(Finding("machine_config_pool", WARNING, message))
    rebooting = sorted(
        name
        for name in held
        if name in nodes
        and (
            node_ready_status(nodes[name]) not in ("True", "")
            or (nodes[name].get("metadata") or {}).get("annotations", {}).get(MCO_STATE_ANNOTATION, "Done")
            not in ("Done", "")
        )
    )
    if rebooting:
        findings.append(
            Finding(
                "held_nodes_not_ready",
                WARNING,
                f"{len(rebooting)} held node(s) are NotReady or being updated by the MachineConfig daemon: when they "
                "come back their driver pod may be recreated with the new driver",
                nodes=tuple(rebooting),
            )
        )
    return findings


def _operator_findings(policy: Mapping[str, Any]) -> List[Finding]:
    status = policy.get("status") or {}
    generation = (policy.get("metadata") or {}).get("generation")
    findings = []
    state = status.get("state")
    if state != "ready":
        message = next(
            (c.get("message") for c in status.get("conditions") or [] if c.get("type") == "Error" and c.get("message")),
            "",
        )
        findings.append(
            Finding(
                "operator_reconciled",
                WARNING,
                f"ClusterPolicy {name_of(policy)} is {state or 'without a state'}"
                + (f": {message}" if message else ""),
            )
        )
    stale = [
        c.get("type")
        for c in status.get("conditions") or []
        if isinstance(c.get("observedGeneration"), int)
        and isinstance(generation, int)
        and c["observedGeneration"] < generation
    ]
    if stale:
        findings.append(
            Finding(
                "operator_reconciled",
                WARNING,
                f"The operator has not reconciled ClusterPolicy generation {generation} yet "
                f"(conditions {', '.join(stale)})",
            )
        )
    return findings
