# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Drains through the NVIDIA Maintenance Operator: one cluster-wide disruption budget for every operator
(collection-internal).

When the cluster serves ``maintenance.nvidia.com/v1alpha1`` NodeMaintenance, the rollout engine does not cordon
and drain a node itself: it asks the operator for the node, as the GPU and Network Operators' upgrade controllers
do in their requestor mode (NVIDIA/k8s-operator-libs ``pkg/upgrade/upgrade_requestor.go``):

- The request is the NodeMaintenance ``<prefix>-<node>`` in the requestor namespace (the library's default prefix
  ``nvidia-operator`` and namespace ``default``), so every requestor using the defaults meets on one object per
  node. If another requestor's object is there, this one joins it by adding its ID to
  ``spec.additionalRequestors`` (a merge patch guarded by the resourceVersion) instead of making a second
  request, which the operator would keep Pending until the first is gone.
- The operator schedules the request within ``maxParallelOperations`` and ``maxUnavailable`` (counting nodes
  others cordoned), cordons the node, drains what ``drainSpec`` selects and sets the Ready condition's reason to
  ``Ready``; until then the engine waits, bounded.
- When the node is done the owner deletes the object and a joined requestor takes its ID out of the list; the
  operator uncordons once nobody holds the node.
- The request is annotated ``maintenance.nvidia.com/garbage-collector.ignore``: the operator's garbage collector
  deletes (and so uncordons) a request Ready for longer than ``maxNodeMaintenanceTimeSeconds`` (one hour by
  default), which a firmware flash and reboot can outlast. A node the rollout fails on stays held, readable.

A request the operator never scheduled within the wait (other requestors hold the budget) is withdrawn: the node
was never touched, so the engine releases it and halts without marking it failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import (
    GpuFleetError,
    InvalidInputError,
    KubeApiError,
    WaitTimeoutError,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import KubeApi
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import NODE_MAINTENANCES
from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import iso
from ansible_collections.gpufleet.upgrade.plugins.module_utils._wait import wait_until

API_GROUP_VERSION = "maintenance.nvidia.com/v1alpha1"
# k8s-operator-libs' DefaultNodeMaintenanceNamePrefix and MAINTENANCE_OPERATOR_REQUESTOR_NAMESPACE default.
NAME_PREFIX = "nvidia-operator"
DEFAULT_NAMESPACE = "default"
DEFAULT_REQUESTOR_ID = "gpufleet.upgrade"
GC_IGNORE_ANNOTATION = "maintenance.nvidia.com/garbage-collector.ignore"
READY = "Ready"
PENDING = "Pending"
# A requestor whose work on the node failed says so on its request (maintenance-operator api/v1alpha1: the condition
# type RequestorFailed, reason FailedMaintenance): the operator's Ready reason becomes RequestorFailed, and the
# request is kept, node cordoned, until the requestor clears the condition or gives the node back.
REQUESTOR_FAILED = "RequestorFailed"
FAILED_MAINTENANCE = "FailedMaintenance"
# k8s-operator-libs' default eviction filters (resource name regexes) for the GPU and the Network Operator's pods.
GPU_EVICTION_FILTER = "nvidia.com/gpu-*"
RDMA_EVICTION_FILTER = "nvidia.com/rdma*"
MODES = ("auto", "always", "never")
_CONFLICT_RETRIES = 5


class MaintenanceNotGrantedError(GpuFleetError):
    """The operator did not schedule the request in time; it was withdrawn and the node never touched."""


@dataclass(frozen=True)
class MaintenanceSettings:
    """How this collection asks the Maintenance Operator for a node."""

    requestor_id: str = DEFAULT_REQUESTOR_ID
    namespace: str = DEFAULT_NAMESPACE
    drain: Mapping[str, Any] = field(default_factory=dict)  # the NodeMaintenance's spec.drainSpec
    timeout: float = 3600.0
    sleep: float = 10.0

    def object_name(self, node: str) -> str:
        return f"{NAME_PREFIX}-{node}"

    def describe(self) -> str:
        return (
            f"request the node from the NVIDIA Maintenance Operator (NodeMaintenance "
            f"{self.namespace}/{NAME_PREFIX}-<node>, requestor {self.requestor_id}; joins another requestor's), "
            f"which cordons and drains it within the cluster-wide budget; wait up to {self.timeout:.0f}s for Ready"
        )


# -- deciding (pure) ---------------------------------------------------------------------------------------


def drain_spec(
    *,
    resource_filters: Sequence[str],
    timeout: float,
    force: bool = False,
    delete_emptydir: bool = False,
    pod_selector: str = "",
) -> Dict[str, Any]:
    """A NodeMaintenance drainSpec. With ``resource_filters`` the operator evicts only pods whose containers
    request a matching resource; the module's own eviction step still runs after the grant, for the pods a
    resource filter cannot see (GPU consumers that request no GPU, secondary-network pods by annotation)."""
    spec: Dict[str, Any] = {"force": force, "deleteEmptyDir": delete_emptydir, "timeoutSeconds": int(timeout)}
    if pod_selector:
        spec["podSelector"] = pod_selector
    if resource_filters:
        spec["podEvictionFilters"] = [{"byResourceNameRegex": regex} for regex in resource_filters]
    return spec


def request_body(settings: MaintenanceSettings, node: str) -> Dict[str, Any]:
    spec: Dict[str, Any] = {"requestorID": settings.requestor_id, "nodeName": node, "cordon": True}
    if settings.drain:
        spec["drainSpec"] = dict(settings.drain)
    return {
        "apiVersion": API_GROUP_VERSION,
        "kind": "NodeMaintenance",
        "metadata": {
            "name": settings.object_name(node),
            "namespace": settings.namespace,
            "annotations": {GC_IGNORE_ANNOTATION: "true"},
        },
        "spec": spec,
    }


def holders(obj: Optional[Mapping[str, Any]]) -> Tuple[str, ...]:
    """The requestor IDs on a NodeMaintenance: its owner, then those who joined."""
    spec = (obj or {}).get("spec") or {}
    owner = [str(spec["requestorID"])] if spec.get("requestorID") else []
    return tuple(owner + [str(item) for item in spec.get("additionalRequestors") or ()])


def request_action(existing: Optional[Mapping[str, Any]], requestor_id: str) -> str:
    """``create`` (no request yet), ``ours`` (we own it), ``joined`` (already among its additional requestors),
    ``join`` (another requestor's: add ours), ``wait-deleted`` (being deleted: ask again once it is gone)."""
    if existing is None:
        return "create"
    if (existing.get("metadata") or {}).get("deletionTimestamp"):
        return "wait-deleted"
    spec = existing.get("spec") or {}
    if spec.get("requestorID") == requestor_id:
        return "ours"
    if requestor_id in (spec.get("additionalRequestors") or ()):
        return "joined"
    return "join"


def release_action(existing: Optional[Mapping[str, Any]], requestor_id: str) -> str:
    """``delete`` (we own it), ``leave`` (take our ID out of another's), ``none`` (nothing of ours)."""
    if existing is None:
        return "none"
    spec = existing.get("spec") or {}
    if spec.get("requestorID") == requestor_id:
        return "delete"
    if requestor_id in (spec.get("additionalRequestors") or ()):
        return "leave"
    return "none"


def ready_reason(obj: Optional[Mapping[str, Any]]) -> str:
    """The Ready condition's reason (the operator's progress: Pending, Scheduled, Cordon, ..., Ready)."""
    for condition in ((obj or {}).get("status") or {}).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == READY:
            return str(condition.get("reason") or "")
    return ""


def is_ready(obj: Optional[Mapping[str, Any]]) -> bool:
    return ready_reason(obj) == READY


def requestor_failed(obj: Optional[Mapping[str, Any]]) -> bool:
    """Whether the request carries a RequestorFailed condition that is True."""
    conditions = ((obj or {}).get("status") or {}).get("conditions") or ()
    return any(
        isinstance(item, Mapping) and item.get("type") == REQUESTOR_FAILED and item.get("status") == "True"
        for item in conditions
    )


def conditions_after(obj: Mapping[str, Any], *, failed: bool, message: str, moment: str) -> List[Dict[str, Any]]:
    """The request's conditions with RequestorFailed set True (``failed``, with ``message``) or taken out."""
    kept = [
        dict(condition)
        for condition in ((obj.get("status") or {}).get("conditions") or ())
        if isinstance(condition, Mapping) and condition.get("type") != REQUESTOR_FAILED
    ]
    if failed:
        kept.append(
            {
                "type": REQUESTOR_FAILED,
                "status": "True",
                "reason": FAILED_MAINTENANCE,
                "message": message[:32768],  # metav1.Condition's limit
                "lastTransitionTime": moment,
            }
        )
    return kept


def validate_settings(settings: MaintenanceSettings) -> None:
    if not settings.requestor_id.strip():
        raise InvalidInputError("node_maintenance.requestor_id must not be empty")
    if not settings.namespace.strip():
        raise InvalidInputError("node_maintenance.namespace must not be empty")
    if settings.timeout < 0 or settings.sleep <= 0:
        raise InvalidInputError("node_maintenance.timeout must be >= 0 and the poll interval > 0")


# -- talking to the cluster (I/O) ---------------------------------------------------------------------------


def maintenance_served(api: KubeApi) -> bool:
    """Whether the cluster serves NodeMaintenance (discovery, which every authenticated user may read)."""
    try:
        found = api.request("GET", f"/apis/{API_GROUP_VERSION}")
    except KubeApiError as err:
        if err.status == 404:
            return False
        raise
    return any(item.get("name") == NODE_MAINTENANCES.plural for item in found.get("resources") or ())


def resolve_settings(
    api: KubeApi,
    choice: "MaintenanceChoice",
    *,
    drain: Optional[Mapping[str, Any]] = None,
    sleep: Optional[float] = None,
) -> Optional[MaintenanceSettings]:
    """The settings to drain with (``drain`` and ``sleep`` put in when given), or None to cordon and drain without
    the operator."""
    if choice.mode not in MODES:
        raise InvalidInputError(f"node_maintenance must be one of {', '.join(MODES)}, not {choice.mode!r}")
    if choice.mode == "never":
        return None
    validate_settings(choice.settings)
    if not maintenance_served(api):
        if choice.mode == "always":
            raise InvalidInputError(
                f"node_maintenance is always, but the cluster does not serve NodeMaintenance ({API_GROUP_VERSION}): "
                "install the NVIDIA Maintenance Operator, or set node_maintenance to auto or never"
            )
        return None
    settings = choice.settings
    if drain is not None:
        settings = replace(settings, drain=dict(drain))
    if sleep is not None:
        settings = replace(settings, sleep=sleep)
    return settings


def _get(api: KubeApi, settings: MaintenanceSettings, node: str) -> Optional[Dict[str, Any]]:
    return api.get(NODE_MAINTENANCES, settings.object_name(node), namespace=settings.namespace)


def _set_additional(
    api: KubeApi, settings: MaintenanceSettings, node: str, change: Callable[[List[str]], List[str]]
) -> Optional[Dict[str, Any]]:
    """Rewrite spec.additionalRequestors (a merge patch replaces the list) guarded by the resourceVersion read."""
    for attempt in range(_CONFLICT_RETRIES):
        current = _get(api, settings, node)
        if current is None:
            return None
        before = [str(item) for item in (current.get("spec") or {}).get("additionalRequestors") or ()]
        after = change(before)
        if after == before:
            return current
        patch = {
            "metadata": {"resourceVersion": current["metadata"].get("resourceVersion")},
            "spec": {"additionalRequestors": after},
        }
        try:
            return api.patch(NODE_MAINTENANCES, current["metadata"]["name"], patch, namespace=settings.namespace)
        except KubeApiError as err:
            # Another requestor changed the list between our read and our write: read again.
            if err.status != 409 or attempt == _CONFLICT_RETRIES - 1:
                raise
    return None


def set_requestor_failed(
    api: KubeApi,
    settings: MaintenanceSettings,
    node: str,
    *,
    failed: bool,
    message: str = "",
    existing: Optional[Mapping[str, Any]] = None,
) -> Optional[Dict[str, Any]]:
    """Set (``failed``) or clear the RequestorFailed condition of our own request for the node (its status, guarded
    by the resourceVersion read; ``existing``, read here unless given); a request of another requestor that we joined
    is theirs to mark. Returns the request as it is now, None when there is none of ours."""
    for attempt in range(_CONFLICT_RETRIES):
        current = dict(existing) if existing is not None and attempt == 0 else _get(api, settings, node)
        if current is None or request_action(current, settings.requestor_id) != "ours":
            return None
        if requestor_failed(current) == failed:
            return current
        moment = iso(api.cluster_now())
        patch = {
            "metadata": {"resourceVersion": current["metadata"].get("resourceVersion")},
            "status": {"conditions": conditions_after(current, failed=failed, message=message, moment=moment)},
        }
        try:
            name = current["metadata"]["name"]
            return api.patch(NODE_MAINTENANCES, name, patch, namespace=settings.namespace, subresource="status")
        except KubeApiError as err:
            # The operator wrote the status between our read and our write: read again.
            if err.status != 409 or attempt == _CONFLICT_RETRIES - 1:
                raise
    return None


def request_node(
    api: KubeApi, settings: MaintenanceSettings, node: str, existing: Optional[Mapping[str, Any]] = None
) -> str:
    """Create our request for the node, or join the one there (``existing``, read here unless given); what was done
    (see request_action)."""
    if existing is None:
        existing = _get(api, settings, node)
    action = request_action(existing, settings.requestor_id)
    if action == "create":
        api.create(NODE_MAINTENANCES, request_body(settings, node), namespace=settings.namespace)
    elif action == "join":
        _set_additional(
            api, settings, node, lambda ids: ids if settings.requestor_id in ids else [*ids, settings.requestor_id]
        )
    return action


def wait_granted(
    api: KubeApi,
    settings: MaintenanceSettings,
    node: str,
    *,
    clock: Callable[[], float],
    pause: Callable[[float], None],
) -> Dict[str, Any]:
    """Ask for the node and wait until the operator has it cordoned and drained (Ready).

    A request still Pending at the deadline is withdrawn (MaintenanceNotGrantedError: the node was never touched);
    one that got further and did not finish is a WaitTimeoutError naming the operator's last step.
    """
    first = request_node(api, settings, node)

    def observe() -> Optional[Dict[str, Any]]:
        current = _get(api, settings, node)
        if request_action(current, settings.requestor_id) in ("create", "join"):
            # Deleted (by its owner) or left by us meanwhile: ask again.
            request_node(api, settings, node, current)
            current = _get(api, settings, node)
        elif requestor_failed(current):
            # Our request from a run that failed on the node: worked on again (another's that we joined is theirs).
            current = set_requestor_failed(api, settings, node, failed=False, existing=current) or current
        return current

    where = f"NodeMaintenance {settings.namespace}/{settings.object_name(node)}"
    what = f"the Maintenance Operator to grant node {node} ({where})"
    try:
        outcome = wait_until(
            observe, is_ready, timeout=settings.timeout, sleep=settings.sleep, what=what, clock=clock, pause=pause
        )
    except WaitTimeoutError as err:
        last = err.result.get("last")
        reason = ready_reason(last) or PENDING
        if reason == PENDING:
            withdrawn = release_node(api, settings, node)
            raise MaintenanceNotGrantedError(
                f"The NVIDIA Maintenance Operator did not schedule NodeMaintenance {settings.namespace}/"
                f"{settings.object_name(node)} for node {node} within {settings.timeout:.0f}s: other requests hold "
                f"its budget (maxParallelOperations, maxUnavailable). The request was withdrawn ({withdrawn}); "
                "nothing was done to the node. See kubectl get nodemaintenances -A, then run the stage again"
            ) from err
        raise WaitTimeoutError(
            f"{err.msg}; the operator's last step was {reason} (kubectl describe nodemaintenance -n "
            f"{settings.namespace} {settings.object_name(node)})",
            result={"elapsed": err.result.get("elapsed")},
        ) from err
    granted = outcome.value or {}
    return {
        "node_maintenance": f"{settings.namespace}/{settings.object_name(node)}",
        "request": first,
        "holders": list(holders(granted)),
        "elapsed": round(outcome.elapsed, 3),
    }


def release_node(api: KubeApi, settings: MaintenanceSettings, node: str) -> str:
    """Give the node back: delete our request, or take our ID out of another requestor's; what was done."""
    existing = _get(api, settings, node)
    action = release_action(existing, settings.requestor_id)
    if action == "delete":
        api.delete(NODE_MAINTENANCES, settings.object_name(node), namespace=settings.namespace)
    elif action == "leave":
        _set_additional(api, settings, node, lambda ids: [item for item in ids if item != settings.requestor_id])
    return action


def wait_released(
    api: KubeApi,
    settings: MaintenanceSettings,
    node: str,
    *,
    clock: Callable[[], float],
    pause: Callable[[float], None],
) -> Dict[str, Any]:
    """Release the node and wait until our request is gone (the operator uncordons once nobody holds the node)."""
    action = release_node(api, settings, node)
    if action != "delete":
        return {"release": action}
    outcome = wait_until(
        lambda: _get(api, settings, node),
        lambda current: (
            current is None or request_action(current, settings.requestor_id) not in ("ours", "wait-deleted")
        ),
        timeout=settings.timeout,
        sleep=settings.sleep,
        what=f"the Maintenance Operator to end NodeMaintenance {settings.namespace}/{settings.object_name(node)}",
        clock=clock,
        pause=pause,
    )
    return {"release": action, "elapsed": round(outcome.elapsed, 3)}


# -- the modules' option ------------------------------------------------------------------------------------


def node_maintenance_suboptions() -> Dict[str, Any]:
    """The ``node_maintenance`` option of the rollout modules (documented by the doc fragment node_maintenance)."""
    return {
        "type": "dict",
        "default": {},
        "apply_defaults": True,
        "options": {
            "mode": {"type": "str", "choices": list(MODES), "default": "auto"},
            "requestor_id": {"type": "str", "default": DEFAULT_REQUESTOR_ID},
            "namespace": {"type": "str", "default": DEFAULT_NAMESPACE},
            "timeout": {"type": "int", "default": 3600},
        },
    }


@dataclass(frozen=True)
class MaintenanceChoice:
    """What a module was asked: the mode, and the settings to use when the operator drains."""

    mode: str = "never"
    settings: MaintenanceSettings = MaintenanceSettings()


def maintenance_choice_from_params(params: Optional[Mapping[str, Any]]) -> MaintenanceChoice:
    given = dict(params or {})
    return MaintenanceChoice(
        mode=str(given.get("mode") or "auto"),
        settings=MaintenanceSettings(
            requestor_id=str(given.get("requestor_id") or DEFAULT_REQUESTOR_ID),
            namespace=str(given.get("namespace") or DEFAULT_NAMESPACE),
            timeout=float(given.get("timeout", 3600)),
        ),
    )
