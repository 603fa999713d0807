# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""One capacity budget for every rollout of the collection (collection-internal, pure).

Every component that takes nodes away (MOFED reload, NIC firmware, GPU driver
checks) counts unavailability the same way: ``maxUnavailable`` is a count or a
percent of the node pool, percents round up like Kubernetes'
``intstr.GetScaledValueFromIntOrPercent(..., roundUp=true)``, and nodes that are
already cordoned or NotReady use up the budget before the rollout takes any.

Also here: the GPU Operator upgrade controller's own slot formula
(NVIDIA/k8s-operator-libs ``GetUpgradesAvailable``), reproduced so preflight
can say what the in-cluster controller will do with the same cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple, Union

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_objects import object_field, object_items

# An int-or-percent as Kubernetes writes it: 2, "2", "25%".
MaxUnavailable = Union[int, str]

_PERCENT = re.compile(r"^(\d+)%$")
_COUNT = re.compile(r"^\d+$")

# The GPU Operator's per-node state label (``%s`` is "gpu", or "ofed" for the Network Operator).
UPGRADE_STATE_LABEL = "nvidia.com/{component}-driver-upgrade-state"

# States k8s-operator-libs sums in GetTotalManagedNodes (in-place mode); a node
# whose label holds anything else is not counted in the total.
_MANAGED_STATES = (
    "",
    "upgrade-done",
    "upgrade-required",
    "cordon-required",
    "wait-for-jobs-required",
    "pod-deletion-required",
    "upgrade-failed",
    "drain-required",
    "pod-restart-required",
    "uncordon-required",
    "validation-required",
)
_NOT_IN_PROGRESS_STATES = ("", "upgrade-done", "upgrade-required")


def scaled_max_unavailable(value: MaxUnavailable, *, total: int) -> int:
    """``value`` as a node count: ints as they are, percents of ``total`` rounded up.

    A count written as a string ("2") is accepted too: Ansible options arrive as
    strings; the Kubernetes API itself would reject a non-percent string.
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidInputError(f"maxUnavailable must be a count or a percent such as '25%', not {value!r}")
    if total < 0:
        raise InvalidInputError(f"A node pool cannot hold {total} nodes")
    if isinstance(value, int):
        if value < 0:
            raise InvalidInputError(f"maxUnavailable cannot be negative: {value}")
        return value
    text = value.strip()
    if _COUNT.match(text):
        return int(text)
    match = _PERCENT.match(text)
    if match is None:
        raise InvalidInputError(f"maxUnavailable must be a count or a percent such as '25%', not {value!r}")
    # Integer arithmetic: float rounding must not turn 29% of 100 into 30.
    return -(-int(match.group(1)) * total // 100)


# -- node availability ---------------------------------------------------------------


def node_name(node: Mapping[str, Any]) -> str:
    return str(object_field(node, "metadata").get("name") or "")


def node_is_unschedulable(node: Mapping[str, Any]) -> bool:
    return bool(object_field(node, "spec").get("unschedulable"))


def node_ready_status(node: Mapping[str, Any]) -> str:
    """The Ready condition's status: "True", "False", "Unknown", or "" when the node reports none."""
    for condition in object_items(node, "status", "conditions"):
        if condition.get("type") == "Ready":
            return str(condition.get("status") or "")
    return ""


def node_is_ready(node: Mapping[str, Any]) -> bool:
    return node_ready_status(node) == "True"


def node_is_unavailable(node: Mapping[str, Any]) -> bool:
    """Cordoned, or not Ready.

    A node reporting no Ready condition at all counts as unavailable here
    (kubectl shows it as "Unknown"); the GPU Operator counts such a node as
    ready, see ``gpu_operator_counts_from_nodes``.
    """
    return node_is_unschedulable(node) or not node_is_ready(node)


def unavailable_node_names(nodes: Iterable[Mapping[str, Any]]) -> Tuple[str, ...]:
    return tuple(sorted(node_name(node) for node in nodes if node_is_unavailable(node)))


# -- the collection's budget -----------------------------------------------------------


@dataclass(frozen=True)
class CapacityBudget:
    """How many nodes of a pool may be away at once, and how many already are."""

    pool_size: int
    max_unavailable: int
    requested: str
    unavailable: Tuple[str, ...]

    @property
    def unavailable_count(self) -> int:
        return len(self.unavailable)

    @property
    def headroom(self) -> int:
        """Nodes that may still be taken away now (0 when the pool is already at or over budget)."""
        return max(0, self.max_unavailable - self.unavailable_count)

    @property
    def exhausted(self) -> bool:
        return self.headroom == 0

    def as_dict(self) -> Dict[str, Any]:
        return {
            "pool_size": self.pool_size,
            "max_unavailable": self.max_unavailable,
            "max_unavailable_requested": self.requested,
            "unavailable_now": list(self.unavailable),
            "headroom": self.headroom,
        }


def capacity_budget(*, max_unavailable: MaxUnavailable, pool_nodes: Sequence[Mapping[str, Any]]) -> CapacityBudget:
    """The budget of a node pool given as Node objects; cordoned and NotReady nodes are already spent.

    A budget of 0 is refused: a rollout under it could never take a node away
    (OpenShift's MachineConfigPool refuses maxUnavailable 0 for the same reason).
    """
    resolved = scaled_max_unavailable(max_unavailable, total=len(pool_nodes))
    if resolved < 1 and pool_nodes:
        raise InvalidInputError(
            f"maxUnavailable {max_unavailable!r} of a pool of {len(pool_nodes)} nodes allows no node to be taken away"
        )
    return CapacityBudget(
        pool_size=len(pool_nodes),
        max_unavailable=resolved,
        requested=str(max_unavailable),
        unavailable=unavailable_node_names(pool_nodes),
    )


def nodes_at_once(*, budget: CapacityBudget, max_parallel: int, candidates: Sequence[str]) -> int:
    """How many of ``candidates`` may be worked on at the same moment right now.

    Candidates that are already unavailable cost nothing from the budget (they
    are away anyway); the others each take one unit of headroom. ``max_parallel``
    0 means no cap beyond the budget.
    """
    already_away = sum(1 for name in candidates if name in budget.unavailable)
    fresh = len(candidates) - already_away
    at_once = already_away + min(fresh, budget.headroom)
    if max_parallel > 0:
        at_once = min(at_once, max_parallel)
    return at_once


# -- the GPU Operator upgrade controller's formula --------------------------------------


@dataclass(frozen=True)
class GpuOperatorSlots:
    """The numbers k8s-operator-libs logs as "Upgrades in progress" on each reconcile."""

    total_nodes: int
    in_progress: int
    upgrade_required: int
    current_unavailable: int
    max_unavailable: int
    max_parallel_upgrades: int
    available: int

    def as_dict(self) -> Dict[str, int]:
        return {
            "total_nodes": self.total_nodes,
            "in_progress": self.in_progress,
            "upgrade_required": self.upgrade_required,
            "current_unavailable": self.current_unavailable,
            "max_unavailable": self.max_unavailable,
            "max_parallel_upgrades": self.max_parallel_upgrades,
            "available": self.available,
        }


def gpu_operator_upgrade_slots(
    *,
    total_nodes: int,
    in_progress: int,
    upgrade_required: int,
    unavailable_nodes: int,
    cordon_required: int,
    max_parallel_upgrades: int,
    max_unavailable: Optional[MaxUnavailable],
) -> GpuOperatorSlots:
    """How many upgrade-required nodes the GPU Operator moves to cordon-required in one reconcile.

    Follows k8s-operator-libs ``ProcessUpgradeRequiredNodes`` and
    ``GetUpgradesAvailable``:

    - maxUnavailable is scaled from ``total_nodes`` rounding up; unset means every node;
    - maxParallelUpgrades 0 means every upgrade-required node, otherwise
      ``maxParallelUpgrades - in_progress``;
    - never more than maxUnavailable;
    - nodes cordoned or NotReady plus nodes in cordon-required are already
      unavailable: at or over maxUnavailable nothing starts, otherwise the slots
      are clamped to what is left -- except that upstream skips the clamp when
      maxUnavailable covers the whole pool.

    The result may be negative (more in progress than maxParallelUpgrades);
    upstream treats that like 0. Nodes cordoned by hand proceed regardless.
    """
    scaled = total_nodes if max_unavailable is None else scaled_max_unavailable(max_unavailable, total=total_nodes)
    available = upgrade_required if max_parallel_upgrades == 0 else max_parallel_upgrades - in_progress
    current_unavailable = unavailable_nodes + cordon_required
    available = min(available, scaled)
    if current_unavailable >= scaled:
        available = 0
    elif scaled < total_nodes and current_unavailable + available > scaled:
        available = scaled - current_unavailable
    return GpuOperatorSlots(
        total_nodes=total_nodes,
        in_progress=in_progress,
        upgrade_required=upgrade_required,
        current_unavailable=current_unavailable,
        max_unavailable=scaled,
        max_parallel_upgrades=max_parallel_upgrades,
        available=available,
    )


def gpu_operator_slots_from_nodes(
    nodes: Sequence[Mapping[str, Any]],
    *,
    max_parallel_upgrades: int,
    max_unavailable: Optional[MaxUnavailable],
    component: str = "gpu",
) -> GpuOperatorSlots:
    """The same formula from the Node objects that host a driver pod (skipped nodes included).

    Counts like upstream: a node is unavailable when cordoned or when its Ready
    condition exists and is not "True" (no Ready condition counts as ready).
    """
    label = UPGRADE_STATE_LABEL.format(component=component)
    states = [str(((node.get("metadata") or {}).get("labels") or {}).get(label, "")) for node in nodes]
    total = sum(1 for state in states if state in _MANAGED_STATES)
    not_in_progress = sum(1 for state in states if state in _NOT_IN_PROGRESS_STATES)
    unavailable = sum(1 for node in nodes if node_is_unschedulable(node) or node_ready_status(node) not in ("True", ""))
    return gpu_operator_upgrade_slots(
        total_nodes=total,
        in_progress=total - not_in_progress,
        upgrade_required=states.count("upgrade-required"),
        unavailable_nodes=unavailable,
        cordon_required=states.count("cordon-required"),
        max_parallel_upgrades=max_parallel_upgrades,
        max_unavailable=max_unavailable,
    )
