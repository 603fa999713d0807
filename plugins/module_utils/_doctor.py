# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The upgrade doctor: why a node does not move, and what would move it (collection-internal, pure).

Plain API objects in (``ClusterView``, read by ``_doctor_read``), findings out.
A node is *stuck* when it is not at rest in an upgrade this collection knows:
the GPU Operator's or Network Operator's driver state label (k8s-operator-libs
``pkg/upgrade``), a driver pod out of date while the controller will not move
it, a GPU node outside every driver selection, a MachineConfigPool that holds
its update, or a hold this collection left. Each finding names one cause from
``CAUSES`` (docs/doctor.md lists them with their upstream sources), the
evidence (objects named), how long the node has been in its state on the API
server's clock, the remedy a person applies, and, where the doctor may apply it
itself, the remediation it would take (``_doctor_remedy``).
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_nodes import (
    MULTUS_NETWORKS_ANNOTATION,
    label_selector_matches,
    pdbs_covering_pod,
    pod_controller,
    pod_key,
    pod_requests_gpu,
    pod_uses_secondary_network,
    selector_object_matches,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._lease import is_expired, parse_lease
from ansible_collections.gpufleet.upgrade.plugins.module_utils._openshift_mcp import paused_by, paused_since, pool_state
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_budget import (
    gpu_operator_slots_from_nodes,
    node_is_unschedulable,
    node_name,
    node_ready_status,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_engine import (
    STATE_FAILED,
    STATE_IN_PROGRESS,
    NodeProgress,
    ProgressKeys,
    read_progress,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._skip_label import (
    GPU_DRIVER,
    OFED_DRIVER,
    SKIP_LABEL_FORMAT,
    STATE_LABEL_FORMAT,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import iso, parse_time

GPU = "gpu"
OFED = "ofed"
COMPONENTS = {GPU: "gpu-driver", OFED: "ofed-driver"}
STATE_LABEL = STATE_LABEL_FORMAT
SKIP_LABEL = SKIP_LABEL_FORMAT
WAIT_START_ANNOTATION = "nvidia.com/{}-driver-upgrade-wait-for-pod-completion-start-time"
VALIDATION_START_ANNOTATION = "nvidia.com/{}-driver-upgrade-validation-start-time"
EVENT_REASON = "{}DriverUpgrade"  # GPUDriverUpgrade, OFEDDriverUpgrade
# This collection's own marks (_gpu_driver_scope, _ofed_plan): a skip label it set for a canary carries these.
HOLD_ANNOTATIONS = {GPU: GPU_DRIVER.annotation, OFED: OFED_DRIVER.annotation}
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
DEPLOY_DRIVER_LABEL = "nvidia.com/gpu.deploy.driver"
DRIVER_POD_LABEL = ("app.kubernetes.io/component", "nvidia-driver")
VALIDATOR_APP = "nvidia-operator-validator"
OFED_POD_LABEL = ("nvidia.com/ofed-driver", "")
MCO_STATE = "machineconfiguration.openshift.io/state"
MCO_REASON = "machineconfiguration.openshift.io/reason"
MCO_CURRENT = "machineconfiguration.openshift.io/currentConfig"
MCO_DESIRED = "machineconfiguration.openshift.io/desiredConfig"
AT_REST = ("", "upgrade-done")
# This collection's own rollouts (_rollout_engine: the MOFED reload by hand, NIC firmware, the GPU driver without a
# controller) record each node's progress in gpufleet.io/rollout-<name>-state and its sibling annotations.
_ROLLOUT_STATE_KEY = re.compile(r"^gpufleet\.io/rollout-([a-z0-9](?:[-a-z0-9]*[a-z0-9])?)-state$")
# The engine's steps that evict pods (a PodDisruptionBudget can hold them).
_EVICTING_STEPS = ("evict-pods", "drain")
# Beyond upgrade-required the node needs its pods looked at (_doctor_read reads them for these nodes only).
STATES_NEEDING_PODS = (
    "wait-for-jobs-required",
    "pod-deletion-required",
    "drain-required",
    "pod-restart-required",
    "validation-required",
    "upgrade-failed",
)
# The kubelet's waiting reasons of a container whose image it cannot pull (kubelet images/types.go).
IMAGE_PULL_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
# k8s-operator-libs isDriverPodFailing: a container not Ready that restarted more than 10 times.
DRIVER_RESTART_LIMIT = 10
# OpenShift rotates the kubelet client CA at 292 days and drops the old one at 365: a paused pool holds the new one.
CA_ROTATION_WARN_SECONDS = 24 * 3600
# Where Go's and the drivers' logs say what failed.
_FAILED_LINE = re.compile(r"(error|fail|cannot|could not|unable|not found|no such|timed out|in use)", re.IGNORECASE)
_NVIDIA_DEVICE_PATH = re.compile(r"^/dev/nvidia")

# The causes the doctor names: id -> (title, remedy a person applies). docs/doctor.md has the evidence and sources.
CAUSES: Dict[str, Tuple[str, str]] = {
    "budget_used_by_unavailable": (
        "the GPU Operator's maxUnavailable is used up by nodes that are cordoned or NotReady",
        "uncordon or repair the named nodes, or raise upgradePolicy.maxUnavailable",
    ),
    "slot_held_by_failed": (
        "maxParallelUpgrades slots are held by upgrade-failed nodes",
        "fix each upgrade-failed node's cause, then relabel it upgrade-required (or let it heal)",
    ),
    "waiting_for_slot": (
        "every upgrade slot is taken by nodes still upgrading",
        "nothing: it starts when a named node finishes; look at those nodes if they do not",
    ),
    "auto_upgrade_disabled": (
        "upgradePolicy.autoUpgrade is false: the controller moves no node",
        "set upgradePolicy.autoUpgrade true, or replace the driver pods yourself",
    ),
    "skip_label": (
        "the node carries the upgrade skip label",
        "remove the label when the node may be upgraded",
    ),
    "held_by_canary": (
        "this collection holds the node back for its canary (skip label with its hold annotation)",
        "run the promote or rollback stage of playbooks/upgrade.yml",
    ),
    "outside_selection": (
        "no driver DaemonSet selects the node (NVIDIADriver nodeSelector or the node's deploy labels)",
        "label the node for a driver pool, or widen the NVIDIADriver nodeSelector",
    ),
    "driver_daemonset_unscheduled": (
        "a driver DaemonSet has fewer pods than nodes it should run on: the controller stops every upgrade",
        "make the named DaemonSet schedule on every node it targets (NotReady or tainted nodes)",
    ),
    "pdb_blocks_eviction": (
        "a PodDisruptionBudget refuses the eviction of a pod that must leave",
        "scale the workload up or relax the PDB (the doctor never deletes a PDB)",
    ),
    "drain_refused": (
        "a pod that must leave cannot be evicted (no controller, emptyDir data, or a DaemonSet pod using GPUs)",
        "delete or move the named pod, or set force/deleteEmptyDir in the upgrade policy",
    ),
    "waiting_for_jobs": (
        "waitForCompletion waits for the named Jobs' pods to finish",
        "let the Jobs finish, or set waitForCompletion.timeoutSeconds",
    ),
    "gpu_consumers_without_request": (
        "pods use the GPUs without requesting nvidia.com/gpu, so the controller does not evict them and the driver "
        "stays in use",
        "remove the named pods from the node (the doctor evicts them when they match remediate_pod_selector); a "
        "DaemonSet's pod comes back, so keep the DaemonSet off the node for the upgrade",
    ),
    "driver_pod_crashloop": (
        "the new driver pod crash-loops",
        "fix what its last message says (kernel headers, driver toolkit image, image pull), then delete the pod",
    ),
    "driver_image_pull": (
        "the new driver pod cannot pull its image, so it never starts (and, never restarting, is never marked "
        "upgrade-failed)",
        "make the image pullable: fix the policy's repository, image or version (a tag built for the node's OS), "
        "the pull secret or the registry; the kubelet retries the pull by itself",
    ),
    "validator_failing": (
        "the operator validator on the node does not become Ready",
        "fix what the validator's log says; the doctor may restart a failing validator pod once",
    ),
    "validation_running": (
        "the operator validator on the node is not Ready yet, and nothing says it failed: validation is running",
        "wait: the controller moves the node on once the validator is Ready (upgrade-failed after 600 s)",
    ),
    "validator_missing": (
        "no validator pod runs on the node, so validation never starts its timeout",
        "check the validator DaemonSet's node selector and the node's nvidia.com/gpu.deploy.operator-validator label",
    ),
    "node_not_ready": (
        "the node is NotReady",
        "repair the node (kubelet, network, power); the upgrade continues when it is Ready",
    ),
    "ofed_secondary_network_pods": (
        "pods on secondary networks keep the MOFED driver from reloading without cutting their network",
        "move the named pods off the node first (the doctor evicts them when they match remediate_pod_selector)",
    ),
    "mcp_paused": (
        "the node's MachineConfigPool is paused, so its update waits",
        "unpause the pool when its update may go on",
    ),
    "mcp_degraded": (
        "the MachineConfigPool is degraded on this node",
        "fix the machine-config daemon's reason on the node, then let the pool go on",
    ),
    "rollout_interrupted": (
        "a run of this collection stopped before its end (its Lease expired)",
        "run the same stage again: it resumes from the ledger and the cluster",
    ),
    "rollout_step_failed": (
        "a rollout of this collection stopped the node at a failed step (the node stays cordoned, later runs halt "
        "on it)",
        "fix what the step's message names, clear the node's failed mark (kubectl annotate node <node> "
        "gpufleet.io/rollout-<rollout>-state=pending --overwrite, as the stage's failure says), then take the stage's "
        "own way on (the same stage run again rolls the node from its first step; a rollback undoes it)",
    ),
    "upgrade_failed": (
        "the upgrade controller marked the node upgrade-failed; no cause is visible any more",
        "relabel the node upgrade-required (the doctor does so with remediate)",
    ),
    "unknown": (
        "no cause the doctor knows",
        "read the node's Events and the operator's log",
    ),
}


@dataclass
class ClusterView:
    """What ``_doctor_read`` read: plain API objects, and the API server's clock."""

    now: datetime.datetime
    nodes: List[Dict[str, Any]]
    cluster_policy: Optional[Dict[str, Any]] = None
    nvidia_drivers: List[Dict[str, Any]] = field(default_factory=list)
    nic_cluster_policy: Optional[Dict[str, Any]] = None
    # Driver pods of the GPU Operator (and MOFED pods of the Network Operator), every node.
    driver_pods: List[Dict[str, Any]] = field(default_factory=list)
    ofed_pods: List[Dict[str, Any]] = field(default_factory=list)
    driver_daemonsets: List[Dict[str, Any]] = field(default_factory=list)
    # Every pod of the nodes in STATES_NEEDING_PODS, by node.
    pods_by_node: Dict[str, List[Dict[str, Any]]] = field(default_factory=dict)
    pdbs: List[Dict[str, Any]] = field(default_factory=list)
    # Events about Nodes (namespace default), newest last.
    node_events: List[Dict[str, Any]] = field(default_factory=list)
    machine_config_pools: List[Dict[str, Any]] = field(default_factory=list)
    lease: Optional[Dict[str, Any]] = None
    # (namespace, pod) -> the tail of its log, for the pods ``logs_wanted`` named.
    logs: Dict[Tuple[str, str], str] = field(default_factory=dict)


@dataclass(frozen=True)
class Remediation:
    """One action of the fixed list ``_doctor_remedy`` may take for a finding."""

    action: str  # relabel_upgrade_required | evict_pods | restart_validator | unpause_pool | clear_hold
    node: str
    target: Dict[str, Any]
    description: str

    def as_dict(self) -> Dict[str, Any]:
        return {"action": self.action, "node": self.node, "target": dict(self.target), "description": self.description}


@dataclass
class Finding:
    node: str
    component: str
    state: str
    cause: str
    detail: str
    evidence: Dict[str, Any] = field(default_factory=dict)
    since: Optional[datetime.datetime] = None
    seconds_in_state: Optional[int] = None
    remediation: Optional[Remediation] = None
    warnings: List[str] = field(default_factory=list)

    @property
    def remedy(self) -> str:
        return CAUSES[self.cause][1]

    def as_dict(self) -> Dict[str, Any]:
        return {
            "node": self.node,
            "component": self.component,
            "state": self.state,
            "cause": self.cause,
            "cause_title": CAUSES[self.cause][0],
            "detail": self.detail,
            "evidence": self.evidence,
            "since": iso(self.since) if self.since else None,
            "seconds_in_state": self.seconds_in_state,
            "in_state_for": human_duration(self.seconds_in_state),
            "remedy": self.remedy,
            "remediation": self.remediation.as_dict() if self.remediation else None,
            "warnings": list(self.warnings),
        }


def human_duration(seconds: Optional[int]) -> str:
    if seconds is None:
        return "unknown"
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 3 * 86400:
        return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
    return f"{seconds // 86400}d{(seconds % 86400) // 3600:02d}h"


# -- small readers ---------------------------------------------------------------------------------------------
def _labels(obj: Mapping[str, Any]) -> Dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def _annotations(obj: Mapping[str, Any]) -> Dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def _spec(obj: Optional[Mapping[str, Any]], *path: str) -> Dict[str, Any]:
    current: Any = (obj or {}).get("spec") or {}
    for key in path:
        current = current.get(key) if isinstance(current, Mapping) else None
    return dict(current) if isinstance(current, Mapping) else {}


def node_state(node: Mapping[str, Any], component: str) -> str:
    return _labels(node).get(STATE_LABEL.format(component), "")


def pod_node(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _unix_annotation(node: Mapping[str, Any], key: str) -> Optional[datetime.datetime]:
    value = _annotations(node).get(key)
    try:
        return datetime.datetime.fromtimestamp(int(str(value)), tz=datetime.timezone.utc) if value else None
    except (TypeError, ValueError, OverflowError):
        return None


def _ready_since(node: Mapping[str, Any]) -> Optional[datetime.datetime]:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return parse_time(condition.get("lastTransitionTime"))
    return None


def _cordoned_since(node: Mapping[str, Any]) -> Optional[datetime.datetime]:
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("key") == "node.kubernetes.io/unschedulable":
            return parse_time(taint.get("timeAdded"))
    return None


def node_is_not_ready(node: Mapping[str, Any]) -> bool:
    """Upstream's reading: a Ready condition that exists and is not True (no condition counts as ready)."""
    return node_ready_status(node) not in ("True", "")


def upgrade_policy(view: ClusterView, component: str) -> Dict[str, Any]:
    if component == OFED:
        return _spec(view.nic_cluster_policy, "ofedDriver", "upgradePolicy")
    return _spec(view.cluster_policy, "driver", "upgradePolicy")


def _container_problem(pod: Mapping[str, Any]) -> Tuple[int, str, str]:
    """(highest restartCount of a container not Ready, its waiting reason, its last message) of a pod."""
    worst = (0, "", "")
    status = pod.get("status") or {}
    for container in list(status.get("initContainerStatuses") or []) + list(status.get("containerStatuses") or []):
        if container.get("ready"):
            continue
        state = container.get("state") or {}
        waiting = state.get("waiting") or {}
        last = (container.get("lastState") or {}).get("terminated") or {}
        terminated = state.get("terminated") or {}
        message = str(
            last.get("message") or terminated.get("message") or waiting.get("message") or last.get("reason") or ""
        )
        reason = str(waiting.get("reason") or terminated.get("reason") or "")
        restarts = int(container.get("restartCount") or 0)
        if (restarts, bool(message)) > (worst[0], bool(worst[2])):
            worst = (restarts, reason, message)
    return worst


def image_pull_problem(pod: Mapping[str, Any]) -> Optional[Dict[str, str]]:
    """{container, image, reason, message} of the first container of the pod waiting for an image it cannot pull."""
    status = pod.get("status") or {}
    for container in list(status.get("initContainerStatuses") or []) + list(status.get("containerStatuses") or []):
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in IMAGE_PULL_REASONS:
            return {
                "container": str(container.get("name") or ""),
                "image": str(container.get("image") or ""),
                "reason": str(waiting["reason"]),
                "message": str(waiting.get("message") or ""),
            }
    return None


def _set_image_pull(finding: Finding, pod: Mapping[str, Any], problem: Mapping[str, str]) -> None:
    _set(
        finding,
        "driver_image_pull",
        f"driver pod {pod_key(pod)} cannot pull {problem['image']} ({problem['reason']}: {problem['message']})",
        {"driver_pod": pod_key(pod), **problem},
    )


def failing_log_line(log: str) -> str:
    """The last line of a log that says something failed ('' when none does)."""
    lines = [line.strip() for line in (log or "").splitlines() if line.strip()]
    for line in reversed(lines):
        if _FAILED_LINE.search(line):
            return line[:400]
    return ""


def _events_for(view: ClusterView, node: str) -> List[Dict[str, Any]]:
    return [event for event in view.node_events if (event.get("involvedObject") or {}).get("name") == node]


def _event_time(event: Mapping[str, Any]) -> Optional[datetime.datetime]:
    return (
        parse_time(event.get("lastTimestamp"))
        or parse_time(event.get("eventTime"))
        or parse_time(event.get("firstTimestamp"))
    )


def state_since(view: ClusterView, node: Mapping[str, Any], component: str) -> Optional[datetime.datetime]:
    """When the node entered its state: the controller's Event "Successfully updated node state label to <state>"
    (k8s-operator-libs NodeUpgradeStateProvider), else the state's own start-time annotation."""
    state = node_state(node, component)
    reason = EVENT_REASON.format(component.upper())
    wanted = f"state label to {state}"
    moments = [
        moment
        for event in _events_for(view, node_name(node))
        if event.get("reason") == reason
        and str(event.get("message") or "").endswith(wanted)
        and (moment := _event_time(event)) is not None
    ]
    if moments:
        return max(moments)
    if state == "wait-for-jobs-required":
        return _unix_annotation(node, WAIT_START_ANNOTATION.format(component))
    if state == "validation-required":
        return _unix_annotation(node, VALIDATION_START_ANNOTATION.format(component))
    return None


def warning_events(view: ClusterView, node: str, component: str) -> List[str]:
    reason = EVENT_REASON.format(component.upper())
    events = [e for e in _events_for(view, node) if e.get("type") == "Warning" and e.get("reason") == reason]
    events.sort(key=lambda e: _event_time(e) or view.now)
    return [str(e.get("message") or "") for e in events[-3:]]


# -- per-node causes --------------------------------------------------------------------------------------------
def _driver_pods_by_node(pods: Iterable[Mapping[str, Any]]) -> Dict[str, Dict[str, Any]]:
    found: Dict[str, Dict[str, Any]] = {}
    for pod in pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        if pod_node(pod):
            found[pod_node(pod)] = dict(pod)
    return found


def gpu_consumers_without_request(
    pods: Sequence[Mapping[str, Any]], *, operator_namespaces: Sequence[str]
) -> List[Dict[str, str]]:
    """Pods that use the node's GPUs without asking for ``nvidia.com/gpu``: the GPU Operator's pod deletion filter
    (gpuPodSpecFilter) leaves them, and they keep the driver loaded ("driver is in use", gpu-operator #2509/#2570).

    Reads: the ``nvidia`` runtimeClass, ``NVIDIA_VISIBLE_DEVICES`` set to devices, hostPath mounts of
    ``/dev/nvidia*``, and Dynamic Resource Allocation claims. The operators' own pods are left out.
    """
    found: List[Dict[str, str]] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("namespace") in operator_namespaces or meta.get("deletionTimestamp"):
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") or pod_requests_gpu(pod):
            continue
        spec = pod.get("spec") or {}
        how = ""
        if "nvidia" in str(spec.get("runtimeClassName") or ""):
            how = f"runtimeClassName {spec.get('runtimeClassName')}"
        elif spec.get("resourceClaims"):
            how = "Dynamic Resource Allocation claims " + ", ".join(
                str(claim.get("name")) for claim in spec.get("resourceClaims") or []
            )
        else:
            for volume in spec.get("volumes") or []:
                path = str((volume.get("hostPath") or {}).get("path") or "")
                if _NVIDIA_DEVICE_PATH.match(path):
                    how = f"hostPath {path}"
                    break
            for container in spec.get("containers") or []:
                for env in container.get("env") or []:
                    value = str(env.get("value") or "")
                    if not how and env.get("name") == "NVIDIA_VISIBLE_DEVICES" and value not in ("", "void", "none"):
                        how = f"NVIDIA_VISIBLE_DEVICES={value}"
        if how:
            found.append({"pod": pod_key(pod), "how": how, "owner": _owner_of(pod)})
    return found


def _object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _blocked_detail(blocked: Sequence[Mapping[str, Any]]) -> str:
    first = blocked[0]
    return f"PDB {first['pdb']} (disruptionsAllowed {first['disruptionsAllowed']}) refuses evicting {first['pod']}"


def blocking_pdbs(pods: Sequence[Mapping[str, Any]], pdbs: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """Pods a PodDisruptionBudget would refuse to evict now (``status.disruptionsAllowed`` 0), with the PDB.

    Only running pods are protected: the eviction API ignores a PDB for pods that are Pending, finished or
    already terminating (kube-apiserver canIgnorePDB).
    """
    blocked: List[Dict[str, Any]] = []
    for pod in pods:
        if (pod.get("status") or {}).get("phase") != "Running" or (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        for pdb in pdbs_covering_pod(pdbs, pod):
            status = pdb.get("status") or {}
            allowed = int(status.get("disruptionsAllowed") or 0)
            if allowed < 1:
                blocked.append(
                    {
                        "pod": pod_key(pod),
                        "pdb": _object_key(pdb),
                        "disruptionsAllowed": allowed,
                        "currentHealthy": status.get("currentHealthy"),
                        "desiredHealthy": status.get("desiredHealthy"),
                    }
                )
    return blocked


def _live(pods: Sequence[Mapping[str, Any]]) -> List[Mapping[str, Any]]:
    return [
        pod
        for pod in pods
        if (pod.get("status") or {}).get("phase") in ("Running", "Pending")
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
    ]


def _drainable(pods: Sequence[Mapping[str, Any]]) -> List[Mapping[str, Any]]:
    """The live pods a drain evicts: not a DaemonSet's, not a static (mirror) pod."""
    return [
        pod
        for pod in _live(pods)
        if (pod_controller(pod) or {}).get("kind") != "DaemonSet"
        and "kubernetes.io/config.mirror" not in _annotations(pod)
    ]


def _pods_that_must_leave(pods: Sequence[Mapping[str, Any]], *, state: str, policy: Mapping[str, Any], component: str):
    if state == "pod-deletion-required" or (state == "upgrade-failed" and component == GPU):
        return [pod for pod in _live(pods) if pod_requests_gpu(pod)]
    drain = policy.get("drain") or {}
    selector = str(drain.get("podSelector") or "")
    skip = f"nvidia.com/{component}-driver-upgrade-drain.skip"
    return [
        pod
        for pod in _drainable(pods)
        if (not selector or label_selector_matches(selector, _labels(pod))) and _labels(pod).get(skip) != "true"
    ]


def _drain_refusals(
    pods: Sequence[Mapping[str, Any]], *, policy: Mapping[str, Any], state: str
) -> List[Dict[str, str]]:
    section = policy.get("podDeletion" if state == "pod-deletion-required" else "drain") or {}
    refused = []
    for pod in pods:
        owner = pod_controller(pod)
        volumes = (pod.get("spec") or {}).get("volumes") or []
        if owner is not None and owner.get("kind") == "DaemonSet":
            refused.append({"pod": pod_key(pod), "why": "a DaemonSet pod requesting GPUs (never evicted)"})
        elif any("emptyDir" in volume for volume in volumes) and not section.get("deleteEmptyDir"):
            refused.append({"pod": pod_key(pod), "why": "emptyDir data and deleteEmptyDir is false"})
        elif owner is None and not section.get("force"):
            refused.append({"pod": pod_key(pod), "why": "no controller and force is false"})
    return refused


@dataclass(frozen=True)
class DoctorOptions:
    operator_namespaces: Tuple[str, ...] = ("nvidia-gpu-operator", "gpu-operator", "nvidia-network-operator")
    # Pods the user allows the doctor to evict (label selector; "" = none).
    remediate_pod_selector: str = ""


def diagnose(view: ClusterView, *, options: DoctorOptions = DoctorOptions()) -> Dict[str, Any]:
    """Every stuck node with its cause; also the cluster-wide blockers (Lease, DaemonSets, pools)."""
    findings: List[Finding] = []
    cluster: List[Dict[str, Any]] = []
    node_pods = [pod for pods in view.pods_by_node.values() for pod in pods]
    drivers = _driver_pods_by_node([*view.driver_pods, *(pod for pod in node_pods if is_driver_pod(pod))])
    ofed_pods = _driver_pods_by_node([*view.ofed_pods, *(pod for pod in node_pods if is_ofed_pod(pod))])
    gpu_nodes = [
        node for node in view.nodes if _labels(node).get(GPU_PRESENT_LABEL) == "true" or node_name(node) in drivers
    ]

    blocker = _daemonset_blocker(view)
    if blocker:
        cluster.append(blocker)
    if view.cluster_policy is not None:
        findings += _gpu_findings(view, gpu_nodes, drivers, blocker=bool(blocker), options=options)
    if view.nic_cluster_policy is not None:
        ofed_nodes = [node for node in view.nodes if node_state(node, OFED) not in AT_REST]
        findings += _ofed_findings(view, ofed_nodes, ofed_pods, options=options)
    findings += _mcp_findings(view)
    interrupted = _interrupted_rollout(view)
    findings += _rollout_findings(view, interrupted=interrupted is not None)
    if interrupted:
        cluster.append(interrupted)
        _offer_clear_holds(findings, interrupted)
    for finding in findings:
        finding.seconds_in_state = (
            int((view.now - finding.since).total_seconds()) if finding.since is not None else None
        )
    findings.sort(key=lambda f: (f.node, f.component))
    return {
        "findings": [finding.as_dict() for finding in findings],
        "cluster": cluster,
        "stuck_nodes": sorted({finding.node for finding in findings}),
        "remediations": [finding.remediation for finding in findings if finding.remediation is not None],
        "checked_at": iso(view.now),
    }


def logs_wanted(view: ClusterView) -> List[Tuple[str, str, str]]:
    """(namespace, pod, container) whose log tail the diagnosis quotes: crash-looping driver pods of stuck nodes and
    the validator pods of nodes in validation-required (the failing line)."""
    wanted: List[Tuple[str, str, str]] = []
    node_pods = [pod for pods in view.pods_by_node.values() for pod in pods]
    drivers = _driver_pods_by_node([*view.driver_pods, *(pod for pod in node_pods if is_driver_pod(pod))])
    for node in view.nodes:
        state = node_state(node, GPU)
        if state in AT_REST or state == "upgrade-required":
            continue
        pod = drivers.get(node_name(node))
        if pod is not None and _container_problem(pod)[0] > 0:
            meta = pod["metadata"]
            wanted.append((meta["namespace"], meta["name"], "nvidia-driver-ctr"))
        if state in ("validation-required", "upgrade-failed"):
            for other in view.pods_by_node.get(node_name(node), []):
                if _labels(other).get("app") == VALIDATOR_APP and not _pod_ready(other):
                    meta = other["metadata"]
                    wanted.append((meta["namespace"], meta["name"], ""))
    return wanted


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def _daemonset_blocker(view: ClusterView) -> Optional[Dict[str, Any]]:
    """k8s-operator-libs BuildState stops every upgrade while a driver DaemonSet's desiredNumberScheduled differs from
    the driver pods it owns (gpu-operator #688). A NotReady node drops out of desiredNumberScheduled (the not-ready
    NoSchedule taint) while its pod keeps running (numberMisscheduled), so one NotReady node is enough."""
    not_ready = sorted(node_name(node) for node in view.nodes if node_is_not_ready(node))
    for daemonset in view.driver_daemonsets:
        name = str((daemonset.get("metadata") or {}).get("name"))
        status = daemonset.get("status") or {}
        desired = int(status.get("desiredNumberScheduled") or 0)
        owned = int(status.get("currentNumberScheduled") or 0) + int(status.get("numberMisscheduled") or 0)
        if desired != owned:
            return {
                "cause": "driver_daemonset_unscheduled",
                "cause_title": CAUSES["driver_daemonset_unscheduled"][0],
                "detail": f"driver DaemonSet {name} should run {desired} pods and owns {owned}"
                + (f" (NotReady: {', '.join(not_ready)})" if not_ready else ""),
                "evidence": {
                    "daemonset": name,
                    "desiredNumberScheduled": desired,
                    "currentNumberScheduled": int(status.get("currentNumberScheduled") or 0),
                    "numberMisscheduled": int(status.get("numberMisscheduled") or 0),
                    "not_ready_nodes": not_ready,
                },
                "remedy": CAUSES["driver_daemonset_unscheduled"][1],
            }
    return None


def _revision_in_sync(pod: Mapping[str, Any], view: ClusterView) -> Optional[bool]:
    """Whether the pod runs its DaemonSet's current template (None when the DaemonSet is unknown)."""
    owner = pod_controller(pod) or {}
    for daemonset in view.driver_daemonsets:
        if (daemonset.get("metadata") or {}).get("name") == owner.get("name"):
            status = daemonset.get("status") or {}
            # OnDelete DaemonSets: updatedNumberScheduled counts the pods at the current template; the pod's own
            # generation label is the readable per-pod sign.
            generation = str(_labels(pod).get("pod-template-generation") or "")
            current = str((daemonset.get("metadata") or {}).get("generation") or "")
            if generation and current:
                return generation == current
            return int(status.get("updatedNumberScheduled") or 0) >= int(status.get("desiredNumberScheduled") or 0)
    return None


def is_driver_pod(pod: Mapping[str, Any]) -> bool:
    """A GPU Operator driver pod under any of the upgrade controller's selectors (ClusterPolicy, OpenShift DTK,
    NVIDIADriver)."""
    labels = _labels(pod)
    return (
        labels.get(DRIVER_POD_LABEL[0]) == DRIVER_POD_LABEL[1]
        or labels.get("app") == "nvidia-driver-daemonset"
        or labels.get("openshift.driver-toolkit") == "true"
    )


def is_ofed_pod(pod: Mapping[str, Any]) -> bool:
    return OFED_POD_LABEL[0] in _labels(pod)


def outside_selection(view: ClusterView, node: Mapping[str, Any]) -> str:
    """Why no driver DaemonSet selects a GPU node ('' when one does, or when the node's driver is not managed)."""
    labels = _labels(node)
    driver = _spec(view.cluster_policy, "driver")
    deploy = labels.get(DEPLOY_DRIVER_LABEL, "")
    if deploy == "pre-installed" or driver.get("enabled") is False:
        return ""
    if driver.get("useNvidiaDriverCRD"):
        for custom in view.nvidia_drivers:
            selector = _spec(custom).get("nodeSelector") or {}
            if all(labels.get(key) == value for key, value in selector.items()):
                return ""
        return "no NVIDIADriver's nodeSelector matches its labels"
    if deploy in ("true", "paused-for-driver-upgrade"):
        return ""
    return f"nvidia.com/gpu.deploy.driver is {deploy or 'unset'} (the driver DaemonSets select true)"


def _gpu_findings(
    view: ClusterView,
    gpu_nodes: Sequence[Mapping[str, Any]],
    drivers: Mapping[str, Mapping[str, Any]],
    *,
    blocker: bool,
    options: DoctorOptions,
) -> List[Finding]:
    component = COMPONENTS[GPU]
    policy = upgrade_policy(view, GPU)
    auto_upgrade = bool(policy.get("autoUpgrade", False))
    outside = {node_name(node): outside_selection(view, node) for node in gpu_nodes}
    hosting = [node for node in gpu_nodes if not outside[node_name(node)]]
    slots = gpu_operator_slots_from_nodes(
        hosting,
        max_parallel_upgrades=int(policy.get("maxParallelUpgrades", 1) or 0),
        max_unavailable=policy.get("maxUnavailable", "25%"),
    )
    states = {node_name(node): node_state(node, GPU) for node in hosting}
    failed = sorted(name for name, state in states.items() if state == "upgrade-failed")
    in_progress = sorted(
        name for name, state in states.items() if state not in ("", "upgrade-done", "upgrade-required")
    )
    unavailable_idle = sorted(
        node_name(node)
        for node in hosting
        if (node_is_unschedulable(node) or node_is_not_ready(node)) and node_name(node) not in in_progress
    )
    findings: List[Finding] = []
    for node in gpu_nodes:
        name = node_name(node)
        state = node_state(node, GPU)
        pod = drivers.get(name)
        since = state_since(view, node, GPU)
        if outside[name]:
            selectors = [
                {"nvidiadriver": (d.get("metadata") or {}).get("name"), "nodeSelector": _spec(d).get("nodeSelector")}
                for d in view.nvidia_drivers
            ]
            findings.append(
                Finding(
                    node=name,
                    component=component,
                    state=state or "not managed",
                    cause="outside_selection",
                    detail=f"no driver DaemonSet selects {name}: {outside[name]}",
                    evidence={
                        "deploy_driver_label": _labels(node).get(DEPLOY_DRIVER_LABEL, ""),
                        "nvidiadrivers": selectors,
                    },
                )
            )
            continue
        if state in AT_REST:
            if not auto_upgrade and pod is not None and _revision_in_sync(pod, view) is False:
                findings.append(
                    Finding(
                        node=name,
                        component=component,
                        state=state or "unknown",
                        cause="auto_upgrade_disabled",
                        detail=f"driver pod {pod_key(pod)} runs an older template and autoUpgrade is false",
                        evidence={"driver_pod": pod_key(pod), "autoUpgrade": False},
                    )
                )
            continue
        finding = Finding(node=name, component=component, state=state, cause="unknown", detail="", since=since)
        if not auto_upgrade:
            _set(finding, "auto_upgrade_disabled", "autoUpgrade is false in the ClusterPolicy", {"autoUpgrade": False})
        elif state == "upgrade-required":
            _upgrade_required(finding, node, slots=slots, failed=failed, in_progress=in_progress, idle=unavailable_idle)
            if blocker and finding.cause in ("waiting_for_slot", "budget_used_by_unavailable", "slot_held_by_failed"):
                # Whatever the slots say, the controller does not reconcile at all while the DaemonSet blocks it.
                _set(
                    finding, "driver_daemonset_unscheduled", "the upgrade controller stops at the driver DaemonSet", {}
                )
        elif pod is None:
            _set(finding, "unknown", "no driver pod found on the node", {})
        else:
            _in_progress(view, finding, node, pod, policy=policy, options=options)
        findings.append(finding)
    return findings


def _set(finding: Finding, cause: str, detail: str, evidence: Mapping[str, Any]) -> None:
    finding.cause = cause
    finding.detail = detail
    finding.evidence.update(evidence)


def _upgrade_required(
    finding: Finding,
    node: Mapping[str, Any],
    *,
    slots: Any,
    failed: Sequence[str],
    in_progress: Sequence[str],
    idle: Sequence[str],
) -> None:
    labels = _labels(node)
    if labels.get(SKIP_LABEL.format(GPU)) == "true":
        if _annotations(node).get(HOLD_ANNOTATIONS[GPU]):
            _set(
                finding,
                "held_by_canary",
                f"skip label set by this collection ({HOLD_ANNOTATIONS[GPU]}="
                f"{_annotations(node)[HOLD_ANNOTATIONS[GPU]]})",
                {"label": SKIP_LABEL.format(GPU)},
            )
        else:
            _set(finding, "skip_label", f"{SKIP_LABEL.format(GPU)}=true", {"label": SKIP_LABEL.format(GPU)})
        return
    if node_is_not_ready(node):
        _set(finding, "node_not_ready", "the node's Ready condition is not True", {"ready": node_ready_status(node)})
        finding.since = finding.since or _ready_since(node)
        return
    if node_is_unschedulable(node):
        # Upstream lets a node cordoned by hand start without a slot: it is about to move.
        _set(finding, "unknown", "cordoned: the controller starts it without a slot at its next reconcile", {})
        return
    numbers = slots.as_dict()
    if slots.available > 0:
        _set(finding, "waiting_for_slot", "a slot is free: the controller starts it at its next reconcile", numbers)
        return
    if slots.current_unavailable >= slots.max_unavailable and idle:
        _set(
            finding,
            "budget_used_by_unavailable",
            f"{slots.current_unavailable} of maxUnavailable {slots.max_unavailable} are already away: "
            + ", ".join(idle),
            {**numbers, "unavailable_nodes": list(idle)},
        )
        if failed:
            finding.evidence["upgrade_failed_nodes"] = list(failed)
        return
    if failed and slots.max_parallel_upgrades and slots.in_progress >= slots.max_parallel_upgrades:
        _set(
            finding,
            "slot_held_by_failed",
            f"{len(failed)} of maxParallelUpgrades {slots.max_parallel_upgrades} slots held by upgrade-failed "
            + ", ".join(failed),
            {**numbers, "upgrade_failed_nodes": list(failed)},
        )
        return
    _set(
        finding,
        "waiting_for_slot",
        "slots taken by " + ", ".join(in_progress[:10]),
        {**numbers, "in_progress_nodes": list(in_progress)},
    )


@dataclass(frozen=True)
class _StuckNode:
    """A node in an upgrade state, with what the checks of _in_progress read about it."""

    view: ClusterView
    finding: Finding
    node: Mapping[str, Any]
    driver_pod: Mapping[str, Any]
    pods: Sequence[Mapping[str, Any]]
    policy: Mapping[str, Any]
    options: DoctorOptions


def _check_not_ready(stuck: _StuckNode) -> bool:
    """A NotReady node: nothing moves on it until it is Ready again."""
    finding = stuck.finding
    node = stuck.node
    if node_is_not_ready(node):
        _set(finding, "node_not_ready", "the node's Ready condition is not True", {"ready": node_ready_status(node)})
        finding.since = finding.since or _ready_since(node)
        return True
    return False


def _check_image_pull(stuck: _StuckNode) -> bool:
    """A new driver pod that cannot pull its image: upstream waits for it in pod-restart-required for ever."""
    problem = image_pull_problem(stuck.driver_pod)
    if problem is None or stuck.finding.state not in ("pod-restart-required", "upgrade-failed"):
        return False
    _set_image_pull(stuck.finding, stuck.driver_pod, problem)
    return True


def _check_driver_crashloop(stuck: _StuckNode) -> bool:
    """A crash-looping driver pod, or GPU consumers without requests holding the driver."""
    view = stuck.view
    finding = stuck.finding
    driver_pod = stuck.driver_pod
    pods = stuck.pods
    options = stuck.options
    state = finding.state
    restarts, reason, message = _container_problem(driver_pod)
    if restarts > 0 and state in ("pod-restart-required", "upgrade-failed"):
        meta = driver_pod.get("metadata") or {}
        log_line = failing_log_line(view.logs.get((str(meta.get("namespace")), str(meta.get("name"))), ""))
        consumers = gpu_consumers_without_request(pods, operator_namespaces=options.operator_namespaces)
        evidence: Dict[str, Any] = {
            "driver_pod": pod_key(driver_pod),
            "restartCount": restarts,
            "reason": reason,
            "last_message": message or log_line,
        }
        if log_line:
            evidence["log_line"] = log_line
        if consumers and ("in use" in (message + log_line) or not (message or log_line)):
            evidence["pods"] = consumers
            _set(finding, "gpu_consumers_without_request", _consumers_detail(consumers), evidence)
            _offer_eviction(finding, consumers, options)
            return True
        _set(
            finding,
            "driver_pod_crashloop",
            f"driver pod {pod_key(driver_pod)} restarted {restarts} times: {message or log_line or reason}",
            evidence,
        )
        return True
    return False


def _check_waiting_for_jobs(stuck: _StuckNode) -> bool:
    """wait-for-jobs-required: the pods (and their Jobs) the policy waits for."""
    finding = stuck.finding
    pods = stuck.pods
    policy = stuck.policy
    state = finding.state
    if state == "wait-for-jobs-required":
        selector = str((policy.get("waitForCompletion") or {}).get("podSelector") or "")
        running = [
            pod
            for pod in pods
            if selector
            and label_selector_matches(selector, _labels(pod))
            and (pod.get("status") or {}).get("phase") in ("Running", "Pending")
        ]
        jobs = sorted(
            {
                f"{(pod.get('metadata') or {}).get('namespace')}/{(pod_controller(pod) or {}).get('name')}"
                for pod in running
                if (pod_controller(pod) or {}).get("kind") == "Job"
            }
        )
        timeout = int((policy.get("waitForCompletion") or {}).get("timeoutSeconds") or 0)
        _set(
            finding,
            "waiting_for_jobs",
            f"{len(running)} pods matching {selector} still run"
            + (f" (Jobs {', '.join(jobs)})" if jobs else "")
            + (", no timeout" if timeout == 0 else f", timeout {timeout}s"),
            {"pod_selector": selector, "jobs": jobs, "pods": [pod_key(p) for p in running], "timeoutSeconds": timeout},
        )
        return True
    return False


def _check_eviction(stuck: _StuckNode) -> bool:
    """A drain or pod deletion that PDBs or the drain settings refuse."""
    view = stuck.view
    finding = stuck.finding
    pods = stuck.pods
    policy = stuck.policy
    name = finding.node
    state = finding.state
    if state in ("pod-deletion-required", "drain-required", "upgrade-failed"):
        leaving = _pods_that_must_leave(pods, state=state, policy=policy, component=GPU)
        refusals = _drain_refusals(leaving, policy=policy, state=state)
        blocked = blocking_pdbs(leaving, view.pdbs)
        warnings = warning_events(view, name, GPU)
        if blocked:
            _set(
                finding,
                "pdb_blocks_eviction",
                _blocked_detail(blocked),
                {"blocked": blocked, "events": warnings},
            )
            return True
        if refusals:
            _set(
                finding,
                "drain_refused",
                "; ".join(f"{r['pod']}: {r['why']}" for r in refusals),
                {"refused": refusals, "events": warnings},
            )
            return True
        if state != "upgrade-failed":
            _set(finding, "unknown", f"{len(leaving)} pods still to leave", {"pods": [pod_key(p) for p in leaving]})
            return True
    return False


def _check_validator(stuck: _StuckNode) -> bool:
    """A missing or failing validator."""
    view = stuck.view
    finding = stuck.finding
    pods = stuck.pods
    name = finding.node
    state = finding.state
    if state in ("validation-required", "upgrade-failed"):
        validators = [pod for pod in pods if _labels(pod).get("app") == VALIDATOR_APP]
        if state == "validation-required" and not validators:
            _set(finding, "validator_missing", f"no {VALIDATOR_APP} pod on {name}", {})
            return True
        not_ready = [pod for pod in validators if not _pod_ready(pod)]
        failing = [pod for pod in not_ready if _validator_failure(view, pod)]
        if not_ready and not failing:
            # Not Ready yet, with nothing that says it failed: the validation is still running (upstream gives it
            # 600 s before upgrade-failed). Restarting it would only start it over.
            _set(
                finding,
                "validation_running",
                f"validator {pod_key(not_ready[0])} is not Ready yet: no restart, no failing log line",
                {"validator_pod": pod_key(not_ready[0])},
            )
            return True
        if failing:
            pod = failing[0]
            meta = pod.get("metadata") or {}
            line = failing_log_line(view.logs.get((str(meta.get("namespace")), str(meta.get("name"))), ""))
            _restarts, _reason, message = _container_problem(pod)
            _set(
                finding,
                "validator_failing",
                f"validator {pod_key(pod)} is not Ready: {line or message or 'no log line says why'}",
                {"validator_pod": pod_key(pod), "log_line": line, "last_message": message},
            )
            finding.remediation = Remediation(
                action="restart_validator",
                node=name,
                target={"namespace": meta.get("namespace"), "pod": meta.get("name")},
                description=f"delete validator pod {pod_key(pod)} once so its DaemonSet starts it again",
            )
            return True
        if state == "validation-required":
            _set(finding, "unknown", "validators are Ready: the controller moves it at its next reconcile", {})
            return True
    return False


def _validator_failure(view: ClusterView, pod: Mapping[str, Any]) -> bool:
    """A validator pod shows it failed: a container restarted, waits in a crash or error state, or its log has a
    failing line."""
    meta = pod.get("metadata") or {}
    restarts, reason, _message = _container_problem(pod)
    log = view.logs.get((str(meta.get("namespace")), str(meta.get("name"))), "")
    return restarts > 0 or reason in ("CrashLoopBackOff", "Error") or bool(failing_log_line(log))


def _check_failed_or_restart(stuck: _StuckNode) -> bool:
    """An upgrade-failed node with no cause left, or a driver restart held by GPU consumers."""
    view = stuck.view
    finding = stuck.finding
    driver_pod = stuck.driver_pod
    pods = stuck.pods
    options = stuck.options
    name = finding.node
    state = finding.state
    if state == "upgrade-failed":
        _set(finding, "upgrade_failed", "no blocking pod, crash-looping driver or failing validator now", {})
        finding.evidence["events"] = warning_events(view, name, GPU)
        finding.remediation = Remediation(
            action="relabel_upgrade_required",
            node=name,
            target={"label": STATE_LABEL.format(GPU), "from": "upgrade-failed", "to": "upgrade-required"},
            description=f"relabel {name} {STATE_LABEL.format(GPU)}=upgrade-required (the upstream retry)",
        )
        return True
    if state == "pod-restart-required":
        consumers = gpu_consumers_without_request(pods, operator_namespaces=options.operator_namespaces)
        if consumers:
            _set(finding, "gpu_consumers_without_request", _consumers_detail(consumers), {"pods": consumers})
            _offer_eviction(finding, consumers, options)
            return True
        _set(finding, "unknown", f"waiting for driver pod {pod_key(driver_pod)} to be Ready", {})

    return False


def _in_progress(
    view: ClusterView,
    finding: Finding,
    node: Mapping[str, Any],
    driver_pod: Mapping[str, Any],
    *,
    policy: Mapping[str, Any],
    options: DoctorOptions,
) -> None:
    """The cause of a node stuck in an upgrade state: the first check that recognises it sets the finding."""
    stuck = _StuckNode(
        view=view,
        finding=finding,
        node=node,
        driver_pod=driver_pod,
        pods=view.pods_by_node.get(finding.node, []),
        policy=policy,
        options=options,
    )
    for check in _IN_PROGRESS_CHECKS:
        if check(stuck):
            return


_IN_PROGRESS_CHECKS = (
    _check_not_ready,
    _check_image_pull,
    _check_driver_crashloop,
    _check_waiting_for_jobs,
    _check_eviction,
    _check_validator,
    _check_failed_or_restart,
)


def _consumers_detail(consumers: Sequence[Mapping[str, str]]) -> str:
    return "; ".join(f"{item['pod']} ({item['how']})" for item in consumers[:5])


def _offer_eviction(finding: Finding, pods: Sequence[Mapping[str, str]], options: DoctorOptions) -> None:
    """Evicting is offered only for the pods the user's selector names (checked again on the live pods), and never
    for a DaemonSet's: its controller puts the pod back on the node at once (it tolerates the cordon)."""
    daemons = [item for item in pods if str(item.get("owner") or "").startswith("DaemonSet/")]
    if daemons:
        finding.warnings.append(
            f"{', '.join(item['pod'] for item in daemons)} belong to "
            f"{', '.join(sorted({str(item['owner']) for item in daemons}))}: evicting would only bring them back; keep "
            "the DaemonSet off the node for the upgrade (its nodeSelector or affinity)"
        )
    evictable = [item for item in pods if item not in daemons]
    if not options.remediate_pod_selector or not evictable:
        return
    finding.remediation = Remediation(
        action="evict_pods",
        node=finding.node,
        target={"pods": [item["pod"] for item in evictable], "selector": options.remediate_pod_selector},
        description=f"evict the pods on {finding.node} matching {options.remediate_pod_selector}",
    )


def _owner_of(pod: Mapping[str, Any]) -> str:
    owner = pod_controller(pod)
    return f"{owner.get('kind')}/{owner.get('name')}" if owner else "none"


def _ofed_findings(
    view: ClusterView,
    nodes: Sequence[Mapping[str, Any]],
    pods_by_node: Mapping[str, Mapping[str, Any]],
    *,
    options: DoctorOptions,
) -> List[Finding]:
    component = COMPONENTS[OFED]
    policy = upgrade_policy(view, OFED)
    auto_upgrade = bool(policy.get("autoUpgrade", False))
    findings: List[Finding] = []
    failed = sorted(node_name(n) for n in nodes if node_state(n, OFED) == "upgrade-failed")
    for node in nodes:
        state = node_state(node, OFED)
        if state in AT_REST:
            continue
        name = node_name(node)
        finding = Finding(
            node=name, component=component, state=state, cause="unknown", detail="", since=state_since(view, node, OFED)
        )
        pods = view.pods_by_node.get(name, [])
        mofed = pods_by_node.get(name) or {}
        restarts, _reason, message = _container_problem(mofed) if mofed else (0, "", "")
        pull = image_pull_problem(mofed) if mofed else None
        if not auto_upgrade:
            _set(
                finding,
                "auto_upgrade_disabled",
                "ofedDriver.upgradePolicy.autoUpgrade is false",
                {"autoUpgrade": False},
            )
        elif node_is_not_ready(node):
            _set(
                finding, "node_not_ready", "the node's Ready condition is not True", {"ready": node_ready_status(node)}
            )
        elif state == "upgrade-required" and _labels(node).get(SKIP_LABEL.format(OFED)) == "true":
            cause = "held_by_canary" if _annotations(node).get(HOLD_ANNOTATIONS[OFED]) else "skip_label"
            _set(finding, cause, f"{SKIP_LABEL.format(OFED)}=true", {"label": SKIP_LABEL.format(OFED)})
        elif state == "upgrade-required" and failed and int(policy.get("maxParallelUpgrades", 1) or 0):
            _set(
                finding,
                "slot_held_by_failed",
                "slots held by upgrade-failed " + ", ".join(failed),
                {"upgrade_failed_nodes": failed},
            )
        elif pull is not None:
            _set_image_pull(finding, mofed, pull)
        elif restarts > 0:
            _set(
                finding,
                "driver_pod_crashloop",
                f"MOFED pod {pod_key(mofed)} restarted {restarts} times: {message}",
                {"driver_pod": pod_key(mofed), "restartCount": restarts, "last_message": message},
            )
        elif state in ("drain-required", "pod-restart-required", "wait-for-jobs-required", "upgrade-failed"):
            secondary = [
                {
                    "pod": pod_key(pod),
                    "networks": _annotations(pod).get(MULTUS_NETWORKS_ANNOTATION, ""),
                    "owner": _owner_of(pod),
                }
                for pod in pods
                if pod_uses_secondary_network(pod) and (pod.get("status") or {}).get("phase") == "Running"
            ]
            leaving = _pods_that_must_leave(pods, state="drain-required", policy=policy, component=OFED)
            blocked = blocking_pdbs(leaving, view.pdbs)
            if blocked:
                _set(
                    finding,
                    "pdb_blocks_eviction",
                    _blocked_detail(blocked),
                    {"blocked": blocked},
                )
            elif secondary:
                _set(
                    finding,
                    "ofed_secondary_network_pods",
                    "; ".join(f"{item['pod']} ({item['networks']})" for item in secondary[:5]),
                    {"pods": secondary},
                )
                _offer_eviction(finding, secondary, options)
            elif state == "upgrade-failed":
                _set(finding, "upgrade_failed", "no blocking pod or crash-looping MOFED pod now", {})
                finding.remediation = Remediation(
                    action="relabel_upgrade_required",
                    node=name,
                    target={"label": STATE_LABEL.format(OFED), "from": "upgrade-failed", "to": "upgrade-required"},
                    description=f"relabel {name} {STATE_LABEL.format(OFED)}=upgrade-required (the upstream retry)",
                )
        findings.append(finding)
    return findings


def pool_membership(pools: Sequence[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]]) -> Dict[str, str]:
    """Each node's MachineConfigPool: a custom pool wins over ``worker`` (nodes in a custom pool keep the worker role
    label), ``master`` over both; between two custom pools (an error upstream) the first by name."""
    membership: Dict[str, str] = {}
    for node in nodes:
        matched = sorted(
            str((pool.get("metadata") or {}).get("name"))
            for pool in pools
            if _spec(pool, "nodeSelector") and selector_object_matches(_spec(pool, "nodeSelector"), _labels(node))
        )
        if not matched:
            continue
        custom = [name for name in matched if name not in ("master", "worker")]
        membership[node_name(node)] = "master" if "master" in matched else (custom or matched)[0]
    return membership


def _mcp_findings(view: ClusterView) -> List[Finding]:
    """Nodes whose MachineConfigPool holds their update: paused (who, since when) or degraded."""
    findings: List[Finding] = []
    membership = pool_membership(view.machine_config_pools, view.nodes)
    for pool in view.machine_config_pools:
        pool_name = str((pool.get("metadata") or {}).get("name"))
        members = [node for node in view.nodes if membership.get(node_name(node)) == pool_name]
        paused = bool(_spec(pool).get("paused"))
        conditions = {c.get("type"): c for c in (pool.get("status") or {}).get("conditions") or []}
        for node in members:
            annotations = _annotations(node)
            name = node_name(node)
            behind = annotations.get(MCO_CURRENT, "") != annotations.get(MCO_DESIRED, "") or (
                paused and str(_spec(pool, "configuration").get("name") or "") not in ("", annotations.get(MCO_CURRENT))
            )
            if annotations.get(MCO_STATE) == "Degraded":
                degraded = conditions.get("NodeDegraded") or conditions.get("Degraded") or {}
                findings.append(
                    Finding(
                        node=name,
                        component="machine-config",
                        state="Degraded",
                        cause="mcp_degraded",
                        detail=f"pool {pool_name}: "
                        + str(annotations.get(MCO_REASON) or degraded.get("message") or "no reason"),
                        evidence={"pool": pool_name, "reason": annotations.get(MCO_REASON, ""), "condition": degraded},
                        since=parse_time(degraded.get("lastTransitionTime")),
                    )
                )
            elif paused and behind:
                findings.append(_paused_finding(view, pool, node))
    return findings


def _paused_finding(view: ClusterView, pool: Mapping[str, Any], node: Mapping[str, Any]) -> Finding:
    pool_name = str((pool.get("metadata") or {}).get("name"))
    annotations = _annotations(pool)
    # Who: this collection when its mark is there, else the manager of spec.paused; since: the earliest known.
    state = pool_state(pool)
    by, since = paused_by(state), paused_since(state)
    finding = Finding(
        node=node_name(node),
        component="machine-config",
        state="paused",
        cause="mcp_paused",
        detail=f"pool {pool_name} paused" + (f" by {by}" if by else "") + (f" since {iso(since)}" if since else ""),
        evidence={
            "pool": pool_name,
            "paused_by": by or "unknown",
            "paused_since": iso(since) if since else None,
            "reason": annotations.get("gpufleet.io/paused-reason", ""),
            "current_config": _annotations(node).get(MCO_CURRENT, ""),
            "pool_config": str(_spec(pool, "configuration").get("name") or ""),
        },
        since=since,
    )
    if since is not None and (view.now - since).total_seconds() > CA_ROTATION_WARN_SECONDS:
        finding.warnings.append(
            f"pool {pool_name} has been paused for {human_duration(int((view.now - since).total_seconds()))}: a paused "
            "pool also holds the kubelet client CA rotation (new CA at 292 days, old one removed at 365); unpause it "
            "before a rotation is due"
        )
    if state.paused_at:  # this collection paused it (its mark), so its remediation may unpause it
        finding.remediation = Remediation(
            action="unpause_pool",
            node=node_name(node),
            target={"pool": pool_name},
            description=f"unpause MachineConfigPool {pool_name} (this collection paused it)",
        )
    return finding


def _interrupted_rollout(view: ClusterView) -> Optional[Dict[str, Any]]:
    lease = parse_lease(view.lease) if view.lease is not None else None
    if lease is None or not lease.holder or not is_expired(lease, now=view.now):
        return None
    meta = (view.lease or {}).get("metadata") or {}
    return {
        "cause": "rollout_interrupted",
        "cause_title": CAUSES["rollout_interrupted"][0],
        "detail": f"Lease {meta.get('namespace')}/{meta.get('name')} still names {lease.holder}, last renewed "
        f"{iso(lease.renew_time) if lease.renew_time else 'never'}",
        "evidence": {
            "lease": f"{meta.get('namespace')}/{meta.get('name')}",
            "holder": lease.holder,
            "acquired": iso(lease.acquire_time) if lease.acquire_time else None,
            "renewed": iso(lease.renew_time) if lease.renew_time else None,
            "duration_seconds": lease.duration_seconds,
        },
        "remedy": CAUSES["rollout_interrupted"][1],
    }


def rollouts_left(node: Mapping[str, Any]) -> List[Tuple[str, NodeProgress]]:
    """(rollout name, progress) of each rollout of this collection that left the node failed or in progress."""
    found = []
    for key in sorted(_annotations(node)):
        match = _ROLLOUT_STATE_KEY.match(key)
        if match:
            progress = read_progress(node, ProgressKeys(match.group(1)))
            if progress.state in (STATE_FAILED, STATE_IN_PROGRESS):
                found.append((match.group(1), progress))
    return found


def _rollout_findings(view: ClusterView, *, interrupted: bool) -> List[Finding]:
    """Nodes one of this collection's rollouts (_rollout_engine) stopped at a failed step, and, once the run holding
    the stage Lease is gone (``interrupted``), the nodes it left in progress. A node in progress under a live Lease
    is moving, not stuck."""
    findings: List[Finding] = []
    for node in view.nodes:
        name = node_name(node)
        for rollout, progress in rollouts_left(node):
            if progress.state == STATE_IN_PROGRESS and not interrupted:
                continue
            finding = Finding(
                node=name,
                component=f"{rollout}-rollout",
                state=f"{progress.state} at {progress.step or 'its start'}",
                cause="unknown",
                detail="",
                since=parse_time(progress.finished_at or progress.started_at),
            )
            evidence = {
                "rollout": rollout,
                "step": progress.step,
                "target": progress.target,
                "message": progress.message,
                "cordoned_before": progress.initially_unschedulable,
            }
            # The rollout's own eviction step: which pods it selects is its caller's, so any pod a drain takes.
            pods = view.pods_by_node.get(name, []) if progress.step in _EVICTING_STEPS else []
            blocked = blocking_pdbs(_drainable(pods), view.pdbs)
            if progress.state == STATE_IN_PROGRESS:
                _set(finding, "rollout_interrupted", f"{rollout} rollout stopped at {progress.step}", evidence)
            elif blocked:
                _set(finding, "pdb_blocks_eviction", _blocked_detail(blocked), {**evidence, "blocked": blocked})
            else:
                _set(
                    finding,
                    "rollout_step_failed",
                    f"{rollout} rollout failed at {progress.step}: {progress.message or 'no message recorded'}",
                    evidence,
                )
            findings.append(finding)
    return findings


def _offer_clear_holds(findings: Sequence[Finding], interrupted: Mapping[str, Any]) -> None:
    """A hold this collection set (skip label with its hold annotation) is stale once the run that set it stopped
    without releasing its stage Lease and the Lease has expired: ``clear_hold`` may release it."""
    holder = str(interrupted["evidence"]["holder"])
    for finding in findings:
        if finding.cause != "held_by_canary" or finding.remediation is not None:
            continue
        component = GPU if finding.component == COMPONENTS[GPU] else OFED
        finding.evidence["stale_since_lease_of"] = holder
        finding.remediation = Remediation(
            action="clear_hold",
            node=finding.node,
            target={
                "label": SKIP_LABEL.format(component),
                "annotation": HOLD_ANNOTATIONS[component],
                "lease": interrupted["evidence"]["lease"],
                "holder": holder,
            },
            description=f"remove this collection's hold ({SKIP_LABEL.format(component)}, "
            f"{HOLD_ANNOTATIONS[component]}) from {finding.node}, left by {holder} whose Lease expired",
        )


def summary_lines(result: Mapping[str, Any]) -> List[str]:
    """One line per finding and cluster-wide blocker, as diagnose.yml prints them."""
    lines = [f"cluster: {item['cause']}: {item['detail']} -> {item['remedy']}" for item in result.get("cluster") or []]
    for item in result.get("findings") or []:
        lines.append(
            f"{item['node']} {item['component']} {item['state']} for {item['in_state_for']}: {item['cause']}: "
            f"{item['detail']} -> {item['remedy']}"
        )
    return lines


def nodes_needing_pods(nodes: Iterable[Mapping[str, Any]]) -> List[str]:
    """Nodes whose pods the diagnosis reads: those past upgrade-required in either driver's state machine, and those
    a rollout of this collection left at a step that evicts pods (a PDB may hold them)."""
    return sorted(
        node_name(node)
        for node in nodes
        if node_state(node, GPU) in STATES_NEEDING_PODS
        or node_state(node, OFED) in STATES_NEEDING_PODS
        or any(progress.step in _EVICTING_STEPS for _rollout, progress in rollouts_left(node))
    )


def needs_all_driver_pods(view: ClusterView) -> bool:
    """With autoUpgrade false nothing labels the out-of-date nodes: their driver pods name them, read only when a
    driver DaemonSet says some pods run an older template."""
    if view.cluster_policy is None or upgrade_policy(view, GPU).get("autoUpgrade", False):
        return False
    return any(
        int((ds.get("status") or {}).get("updatedNumberScheduled") or 0)
        < int((ds.get("status") or {}).get("desiredNumberScheduled") or 0)
        for ds in view.driver_daemonsets
    )
