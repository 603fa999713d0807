"""PodDisruptionBudget arithmetic, as the disruption controller computes it (pure).

Follows kube-controller-manager's disruption controller (``getExpectedPodCount``
and ``countHealthyPods``):

- ``maxUnavailable`` (int or percent of the expected pods, rounded up):
  desiredHealthy = expectedPods - maxUnavailable, never below 0;
- ``minAvailable`` as an int: desiredHealthy = minAvailable and the expected
  pods are the pods the selector matches;
- ``minAvailable`` as a percent of the expected pods, rounded up;
- neither set: nothing is expected and nothing is protected;
- currentHealthy counts the matching pods that are Ready and not being deleted;
- disruptionsAllowed = max(0, currentHealthy - desiredHealthy).

The real controller takes ``expectedPods`` for percentages and
``maxUnavailable`` from the scale of the pods' controllers (``getExpectedScale``:
each controller's ``spec.replicas`` once, pods without a controller left out),
so a StatefulSet pod deleted and not yet recreated still counts as expected.
``expected_from_controllers`` does that sum; callers that can look the
controllers up pass its result as ``expected_pods``, otherwise the matching pods
are counted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .selectors import label_selector_from_dict

Obj = dict[str, Any]

_PERCENT = re.compile(r"^(\d+)%$")


@dataclass(frozen=True)
class DisruptionBudget:
    expected_pods: int
    desired_healthy: int
    current_healthy: int
    disruptions_allowed: int
    # Set when the budget cannot be computed (a malformed percent); nothing may be disrupted then.
    error: str = ""


def scaled_value(value: int | str, total: int, *, round_up: bool) -> int:
    """An int-or-percent value scaled against ``total`` (intstr.GetScaledValueFromIntOrPercent)."""
    if isinstance(value, bool):
        raise ValueError(f"invalid value for IntOrString: {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        match = _PERCENT.match(value.strip())
        if match is None:
            if value.strip().isdigit():
                # A number in a string is not a percent; the API server rejects it on write.
                raise ValueError(f"invalid value for IntOrString: invalid type: string is not a percentage: {value!r}")
            raise ValueError(f"invalid value for IntOrString: {value!r}")
        fraction = int(match.group(1)) * total / 100
        return math.ceil(fraction) if round_up else math.floor(fraction)
    raise ValueError(f"invalid value for IntOrString: {value!r}")


def is_pod_ready(pod: Obj) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def is_pod_healthy(pod: Obj) -> bool:
    """Counted towards currentHealthy: Ready and not being deleted."""
    return not (pod.get("metadata") or {}).get("deletionTimestamp") and is_pod_ready(pod)


def pods_covered(pdb: Obj, pods: list[Obj]) -> list[Obj]:
    """The pods of the PDB's namespace that its selector matches.

    In policy/v1 an empty selector matches every pod of the namespace and a
    missing (null) selector matches none.
    """
    namespace = (pdb.get("metadata") or {}).get("namespace")
    selector_dict = (pdb.get("spec") or {}).get("selector")
    if selector_dict is None:
        return []
    selector = label_selector_from_dict(selector_dict)
    return [
        pod
        for pod in pods
        if (pod.get("metadata") or {}).get("namespace") == namespace
        and selector.matches((pod.get("metadata") or {}).get("labels") or {})
    ]


def expected_from_controllers(
    pdb: Obj, pods: list[Obj], scale_of: Callable[[str, Obj], tuple[str, int] | None]
) -> int | None:
    """The sum of the scales of the covered pods' controllers, each once (``getExpectedScale``).

    ``scale_of(namespace, controllerRef)`` gives the (uid, replicas) of the
    controller that owns the scale (a ReplicaSet's Deployment), or None when it
    knows none; then this returns None and the caller counts the pods.
    """
    scales: dict[str, int] = {}
    for pod in pods_covered(pdb, pods):
        meta = pod.get("metadata") or {}
        ref = next((r for r in meta.get("ownerReferences") or () if r.get("controller")), None)
        if ref is None:
            continue  # an unmanaged pod is left out of the expected count
        found = scale_of(meta.get("namespace", ""), ref)
        if found is None:
            return None
        uid, replicas = found
        scales[uid] = replicas
    return sum(scales.values())


def compute_budget(pdb: Obj, pods: list[Obj], *, expected_pods: int | None = None) -> DisruptionBudget:
    """The budget of ``pdb`` given candidate ``pods`` (any pods; those it covers are picked here)."""
    covered = pods_covered(pdb, pods)
    spec = pdb.get("spec") or {}
    max_unavailable = spec.get("maxUnavailable")
    min_available = spec.get("minAvailable")
    current_healthy = sum(1 for pod in covered if is_pod_healthy(pod))
    expected = len(covered) if expected_pods is None else expected_pods
    try:
        if max_unavailable is not None:
            unavailable = scaled_value(max_unavailable, expected, round_up=True)
            desired = max(0, expected - unavailable)
        elif min_available is not None:
            if isinstance(min_available, int) and not isinstance(min_available, bool):
                desired = min_available
                expected = len(covered)
            else:
                desired = scaled_value(min_available, expected, round_up=True)
        else:
            expected, desired = 0, 0
    except ValueError as problem:
        return DisruptionBudget(
            expected_pods=0,
            desired_healthy=0,
            current_healthy=current_healthy,
            disruptions_allowed=0,
            error=str(problem),
        )
    return DisruptionBudget(
        expected_pods=expected,
        desired_healthy=desired,
        current_healthy=current_healthy,
        disruptions_allowed=max(0, current_healthy - desired),
    )


def pdb_status(pdb: Obj, pods: list[Obj], *, expected_pods: int | None = None, now: str | None = None) -> Obj:
    """The ``status`` the disruption controller would write for ``pdb``.

    ``now`` (RFC 3339) stamps a condition that changes; without it the
    previous transition time (or the PDB's creation time) is kept.
    """
    budget = compute_budget(pdb, pods, expected_pods=expected_pods)
    previous = pdb.get("status") or {}
    if budget.error:
        condition_status, reason, message = "False", "SyncFailed", budget.error
    elif budget.disruptions_allowed > 0:
        condition_status, reason, message = "True", "SufficientPods", ""
    else:
        condition_status, reason, message = "False", "InsufficientPods", ""
    old_condition = next((c for c in previous.get("conditions") or () if c.get("type") == "DisruptionAllowed"), None)
    if old_condition is not None and old_condition.get("status") == condition_status:
        transition = old_condition.get("lastTransitionTime")
    else:
        transition = now or (pdb.get("metadata") or {}).get("creationTimestamp")
    condition: Obj = {
        "type": "DisruptionAllowed",
        "status": condition_status,
        "reason": reason,
        "message": message,
        "observedGeneration": (pdb.get("metadata") or {}).get("generation", 1),
    }
    if transition:
        condition["lastTransitionTime"] = transition
    status: Obj = {
        "observedGeneration": (pdb.get("metadata") or {}).get("generation", 1),
        "currentHealthy": budget.current_healthy,
        "desiredHealthy": budget.desired_healthy,
        "expectedPods": budget.expected_pods,
        "disruptionsAllowed": budget.disruptions_allowed,
        "conditions": [condition],
    }
    return status
