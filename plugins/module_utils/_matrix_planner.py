# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The planner: from current_production to any stage, one component group per step (collection-internal).

A stage that changes several groups at once violates ``one_group_at_a_time``;
the plan is the way out: the same change split into steps in the upgrade
order GPU Operator -> Network Operator -> firmware -> OpenShift -> SR-IOV.
Each step names its group, the components with their from -> to versions,
the full version set after the step, and the rules that set would violate
(checked against the set before it, so kernel changes are seen).

A step that changes ``driver_type`` (precompiled <-> compiled) is marked
``disruptive``: the GPU Operator answers it with new driver DaemonSets and
restarts every driver pod at once, outside its upgrade controller
(NVIDIA/gpu-operator issues 2166 and 2549), so no module of the collection
writes it; docs/gpu_operator.md says how to make the switch by hand.

Going back to the ``rollback`` stage walks the groups in reverse order: the
last group upgraded is the first one undone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_catalog import Catalog
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_model import BASELINE_STAGE, Matrix
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_rules import (
    GROUP_ORDER,
    GROUP_TITLES,
    VIOLATION,
    WARNING,
    changed_groups,
    check_version_set,
)

DIRECTION_UPGRADE = "upgrade"
DIRECTION_ROLLBACK = "rollback"


@dataclass
class ComponentChange:
    component: str
    from_version: Optional[str]
    to_version: Optional[str]

    def as_dict(self) -> Dict[str, Any]:
        return {"component": self.component, "from": self.from_version, "to": self.to_version}


@dataclass
class PlanStep:
    number: int
    group: str
    changes: List[ComponentChange]
    versions_after: Dict[str, Any]
    violations: Dict[str, List[str]] = field(default_factory=dict)
    warnings: Dict[str, List[str]] = field(default_factory=dict)
    disruptive: List[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        return GROUP_TITLES.get(self.group, self.group)

    def as_dict(self) -> Dict[str, Any]:
        return {
            "step": self.number,
            "group": self.group,
            "title": self.title,
            "changes": [change.as_dict() for change in self.changes],
            "versions_after": dict(self.versions_after),
            "violates": sorted(self.violations),
            "violations": {rule: list(messages) for rule, messages in self.violations.items()},
            "warnings": {rule: list(messages) for rule, messages in self.warnings.items()},
            "disruptive": list(self.disruptive),
        }


@dataclass
class UpgradePlan:
    baseline: str
    target: str
    direction: str
    steps: List[PlanStep]

    @property
    def groups(self) -> List[str]:
        return [step.group for step in self.steps]

    def as_dict(self) -> Dict[str, Any]:
        return {
            "from": self.baseline,
            "to": self.target,
            "direction": self.direction,
            "groups": self.groups,
            "steps": [step.as_dict() for step in self.steps],
        }


def _text(value: Any) -> Optional[str]:
    return None if value is None else str(value)


def disruptive_changes(changes: List[ComponentChange]) -> List[str]:
    """Why a step cannot go through the upgrade controller's node-by-node rollout (empty when it can)."""
    messages = []
    for change in changes:
        if change.component != "driver_type" or change.to_version is None:
            continue  # a stage that stops pinning driver_type asks for no switch
        before = change.from_version or "compiled"  # the operator's default: usePrecompiled false
        if before != change.to_version:
            messages.append(
                f"a driver_type change ({before} -> {change.to_version}) "
                "is disruptive: the GPU Operator replaces the driver DaemonSets and restarts every driver pod at "
                "once, bypassing the upgrade controller (NVIDIA/gpu-operator issues 2166, 2549); "
                "gpufleet.upgrade.clusterpolicy_upgrade refuses it, see docs/gpu_operator.md "
                "'Switching precompiled and compiled drivers'"
            )
    return messages


def plan_versions(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    *,
    catalog: Catalog,
    direction: str = DIRECTION_UPGRADE,
) -> List[PlanStep]:
    """Steps from one version set to another, one group per step."""
    groups = changed_groups(before, after)
    order = list(GROUP_ORDER)
    if direction == DIRECTION_ROLLBACK:
        order.reverse()
    order += [group for group in groups if group not in order]
    steps: List[PlanStep] = []
    current: Dict[str, Any] = dict(before)
    for group in order:
        components = groups.get(group)
        if not components:
            continue
        changes = [
            ComponentChange(component, _text(current.get(component)), _text(after.get(component)))
            for component in components
        ]
        following = dict(current)
        for component in components:
            if component in after:
                following[component] = after[component]
            else:
                following.pop(component, None)
        step = PlanStep(
            number=len(steps) + 1,
            group=group,
            changes=changes,
            versions_after=following,
            disruptive=disruptive_changes(changes),
        )
        for rule, findings in check_version_set(following, catalog=catalog, previous=current).items():
            violations = [finding.message for finding in findings if finding.status == VIOLATION]
            warnings = [finding.message for finding in findings if finding.status == WARNING]
            if violations:
                step.violations[rule] = violations
            if warnings:
                step.warnings[rule] = warnings
        steps.append(step)
        current = following
    return steps


def plan_stage(
    matrix: Matrix,
    target: str,
    *,
    catalog: Catalog,
    baseline: str = BASELINE_STAGE,
) -> UpgradePlan:
    """The ordered steps from ``baseline`` (current_production) to ``target``."""
    direction = DIRECTION_ROLLBACK if target == "rollback" else DIRECTION_UPGRADE
    steps = plan_versions(
        matrix.effective_versions(baseline),
        matrix.effective_versions(target),
        catalog=catalog,
        direction=direction,
    )
    return UpgradePlan(baseline=baseline, target=target, direction=direction, steps=steps)


def disruptive_refusal(plan: Mapping[str, Any], *, stage: str) -> str:
    """The reason the upgrade flow refuses a plan (``UpgradePlan.as_dict()``) with a disruptive step; "" when none."""
    messages = [message for step in plan.get("steps") or [] for message in step.get("disruptive") or []]
    if not messages:
        return ""
    return (
        f"{stage} changes how the driver is installed, which the upgrade flow does not roll out: "
        + "; ".join(messages)
        + f". Nothing was changed. Next: give {stage} the driver_type of current_production (or leave it out) to "
        "upgrade versions, and make the switch itself as docs/gpu_operator.md 'Switching precompiled and compiled "
        "drivers' describes"
    )
