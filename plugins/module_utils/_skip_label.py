# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The upgrade controller's state and skip labels, and how this collection paces the controller with them
(collection-internal, pure): one implementation for the GPU driver and the OFED driver rollouts.

The GPU Operator and the Network Operator run the same upgrade controller
(NVIDIA/k8s-operator-libs ``pkg/upgrade``); its keys carry the driver's name
(``consts.go``: ``nvidia.com/%s-driver-upgrade-state``,
``nvidia.com/%s-driver-upgrade.skip``). The controller leaves a node whose
skip label is ``"true"`` alone while it has not started it. This collection
holds nodes with it (a canary's other nodes, a paced rollout's next ones, the
nodes not started when a rollout halts or alerts fire) and marks each hold it
sets with an annotation of its own, whose value says why, so it only ever
releases its own holds, never a person's.

``SkipLabelPacer`` decides which held targets the controller may take now:

- without limits (the GPU driver, unless failure domains are asked for), the
  controller paces by its own ``maxParallelUpgrades``/``maxUnavailable``, so
  every target this collection holds is released (a hold there is a canary's,
  an alert's or a halt's);
- with limits (the OFED driver, whose controller has no ``maxUnavailable``;
  the GPU driver with failure domains, which its controller does not know),
  targets are released in rollout order as the collection's capacity budget,
  parallelism and failure domains allow (``_rollout_schedule``), canaries
  first; a target already done loses a hold of ours at once.

Either way a halt, or an alert, holds every target not yet started
(``SkipLabelPacer.to_hold``): a node released a moment ago but not taken by
the controller yet would otherwise still start after the halt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection, Dict, Mapping, Optional, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_schedule import (
    PoolNode,
    ScheduleLimits,
    next_nodes_to_start,
)

SKIP_LABEL_FORMAT = "nvidia.com/{}-driver-upgrade.skip"
STATE_LABEL_FORMAT = "nvidia.com/{}-driver-upgrade-state"
STATE_REQUIRED = "upgrade-required"
STATE_DONE = "upgrade-done"
STATE_FAILED = "upgrade-failed"
NOT_STARTED_STATES = ("", STATE_REQUIRED)
# The in-place state machine in order (k8s-operator-libs consts.go); the rank orders a timeline.
STATE_ORDER = (
    "",
    STATE_REQUIRED,
    "cordon-required",
    "wait-for-jobs-required",
    "pod-deletion-required",
    "drain-required",
    "pod-restart-required",
    "validation-required",
    "uncordon-required",
    STATE_DONE,
    STATE_FAILED,
)

# Why this collection holds a node (the value of its mark).
HOLD_CANARY = "canary"
HOLD_HALT = "halt"
HOLD_PACED = "paced"
# Where a node of a rollout stands, from its state label and its driver pod.
PROGRESS_DONE = "done"
PROGRESS_FAILED = "failed"
PROGRESS_IN_PROGRESS = "in-progress"
PROGRESS_PENDING = "pending"


def _meta(node: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    return (node.get("metadata") or {}).get(key) or {}


@dataclass(frozen=True)
class SkipLabel:
    """One driver's skip label and this collection's mark on the holds it set."""

    label: str
    annotation: str
    state_label: str

    def state(self, node: Mapping[str, Any]) -> str:
        """The node's upgrade state label ("" when the controller has not labelled it)."""
        return str(_meta(node, "labels").get(self.state_label, ""))

    def held(self, node: Mapping[str, Any]) -> bool:
        return _meta(node, "labels").get(self.label) == "true"

    def held_by_us(self, node: Mapping[str, Any]) -> bool:
        return self.annotation in _meta(node, "annotations")

    def our_hold(self, node: Mapping[str, Any]) -> bool:
        """Held, by this collection (the label and its mark): a hold this collection may release."""
        return self.held(node) and self.held_by_us(node)

    def held_by_others(self, node: Mapping[str, Any]) -> bool:
        """Held, and not by this collection: someone's own hold, which a release never touches."""
        return self.held(node) and not self.held_by_us(node)

    def hold_patch(self, reason: str) -> Dict[str, Any]:
        """The merge patch that holds a node, ``reason`` (canary, halt, the rollout's name) in the mark."""
        return {"metadata": {"labels": {self.label: "true"}, "annotations": {self.annotation: reason}}}

    def release_patch(self, node: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        """The merge patch that releases this collection's hold (the label left out when ``node`` has none)."""
        patch: Dict[str, Any] = {"metadata": {"annotations": {self.annotation: None}}}
        if node is None or self.label in _meta(node, "labels"):
            patch["metadata"]["labels"] = {self.label: None}
        return patch


GPU_DRIVER = SkipLabel(
    SKIP_LABEL_FORMAT.format("gpu"), "gpufleet.io/gpu-driver-upgrade-hold", STATE_LABEL_FORMAT.format("gpu")
)
OFED_DRIVER = SkipLabel(
    SKIP_LABEL_FORMAT.format("ofed"), "gpufleet.io/ofed-upgrade-hold", STATE_LABEL_FORMAT.format("ofed")
)


def state_rank(state: str) -> int:
    return STATE_ORDER.index(state) if state in STATE_ORDER else len(STATE_ORDER)


def progress_of(state: str, *, at_target: bool, failing: bool = False) -> str:
    """Done, failed, in progress or pending (not started) for a node that should run the target.

    ``at_target``: its driver pod runs the target and is Ready; ``failing``: that pod fails as the controller
    judges it (isDriverPodFailing). A node the controller calls done but whose pod does not run the target yet
    is pending: the controller will take it again.
    """
    if state == STATE_FAILED or failing:
        return PROGRESS_FAILED
    if state == STATE_DONE:
        return PROGRESS_DONE if at_target else PROGRESS_PENDING
    if state in NOT_STARTED_STATES:
        return PROGRESS_PENDING
    return PROGRESS_IN_PROGRESS


@dataclass(frozen=True)
class Pace:
    """The targets to release now, and why each other pending target waits."""

    release: Tuple[str, ...]
    waiting: Dict[str, str]


@dataclass(frozen=True)
class SkipLabelPacer:
    """How this collection paces one rollout of the upgrade controller with the skip label (see the module's doc).

    ``order`` is the targets in rollout order; ``limits`` None leaves the pace to the controller.
    """

    order: Tuple[str, ...]
    limits: Optional[ScheduleLimits] = None
    canaries: Tuple[str, ...] = ()

    def running(
        self, progress: Mapping[str, str], *, released: Collection[str], held: Collection[str]
    ) -> Tuple[str, ...]:
        """Targets under way: past upgrade-required (a skip label no longer stops them there), or released by this
        run and not held since (the controller takes them at its next pass)."""
        return tuple(
            name
            for name in self.order
            if progress.get(name) == PROGRESS_IN_PROGRESS
            or (progress.get(name) == PROGRESS_PENDING and name in released and name not in held)
        )

    def pace(
        self,
        progress: Mapping[str, str],
        *,
        held_by_us: Collection[str],
        released: Collection[str] = (),
        held: Collection[str] = (),
        pool: Optional[Mapping[str, PoolNode]] = None,
    ) -> Pace:
        """The targets the controller may take now.

        ``progress``: each target's progress (``progress_of``); ``held_by_us``: targets under this collection's
        hold; ``released``: targets this run released; ``held``: targets under any skip label; ``pool``: the node
        pool as observed now (needed with limits).
        """
        if self.limits is None:
            return Pace(release=tuple(name for name in self.order if name in held_by_us), waiting={})
        decision = next_nodes_to_start(
            order=self.order,
            pool=pool or {},
            limits=self.limits,
            running=self.running(progress, released=released, held=held),
            finished=[name for name in self.order if progress.get(name) == PROGRESS_DONE],
            failed=[name for name in self.order if progress.get(name) == PROGRESS_FAILED],
            canaries=self.canaries,
        )
        done_and_held = tuple(name for name in self.order if progress.get(name) == PROGRESS_DONE and name in held_by_us)
        return Pace(release=decision.start + done_and_held, waiting=dict(decision.waiting))

    def to_hold(self, progress: Mapping[str, str], *, held: Collection[str]) -> Tuple[str, ...]:
        """Targets not started and not held: what a halt or a firing alert holds."""
        return hold_not_started(progress, held=held, among=self.order)


def hold_not_started(
    progress: Mapping[str, str], *, held: Collection[str], among: Optional[Collection[str]] = None
) -> Tuple[str, ...]:
    """The nodes of ``progress`` (or only those ``among``) not started and not under a skip label, in its order."""
    names = progress if among is None else [name for name in among if name in progress]
    return tuple(name for name in names if progress[name] == PROGRESS_PENDING and name not in held)
