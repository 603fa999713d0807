# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The rollout engine: runs per-node steps within one capacity budget (collection-internal).

Where no in-cluster controller does the node work (a MOFED reload by hand, NIC
firmware through a BMC), a rollout module hands this engine its per-node
steps as named callables. The engine

- plans: which nodes, in what order, doing what, how many at once (check mode
  stops here and touches nothing);
- runs the steps of several nodes at once on threads, but decides what starts
  only through the pure scheduler (``_rollout_schedule``), asked again each
  time a node finishes;
- records progress on each Node, so the cluster is the state and a re-run
  resumes: annotations ``gpufleet.io/rollout-<name>-state`` (pending,
  in-progress, done, failed) with the step, target and timestamps, and
  ``gpufleet.io/rollout-<name>-initially-unschedulable=true`` for a node that
  was cordoned before the rollout came (it is left cordoned at the end);
- halts at the first failed node: it stays cordoned with a Warning Event
  naming the step and the reason; nodes not yet started are not touched;
  nodes already running finish their steps (half a reload is worse than a
  whole one). A failed node halts every later run until a person clears it
  (sets the state annotation to ``pending`` or removes it);
- undoes, when asked (``RolloutSettings.undo_other_targets``: a rollback), what
  an earlier run to another target left behind: a node it stopped before the
  first step that changes the node's component (``changing_step``) never
  changed, and neither did one the caller read to run this target already
  (``RolloutSettings.at_target_nodes``: a failed firmware job that the BMC's
  inventory shows left the old firmware in place); either is only released
  (uncordoned unless it was cordoned before, its progress annotations
  removed, an Event) without running a step; a node it left failed after that
  step and not at the target is rolled to this target from the start;
- drains through the NVIDIA Maintenance Operator when told to
  (``RolloutSettings.maintenance``, ``_node_maintenance``): the engine then
  never cordons or uncordons; its first step asks the operator for the node
  and waits until the operator has cordoned and drained it, its last gives
  the node back. A request the operator never scheduled is withdrawn, the
  node released untouched, and the rollout halts without a failed node;
- returns the timeline: per node, each step with its start, end and outcome.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import functools
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Protocol, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._alerts import AlertsGate, FiringAlert
from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import (
    AlertsFiringError,
    GpuFleetError,
    InvalidInputError,
    KubeApiError,
    RolloutHaltedError,
    WaitTimeoutError,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gates_parse import UnreadableOutputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_events import record_event
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_nodes import (
    PodSelection,
    drain_pods,
    get_node,
    patch_node,
    wait_for_jobs,
    wait_for_node_ready,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import (
    NODES,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._node_maintenance import (
    MaintenanceNotGrantedError,
    MaintenanceSettings,
    set_requestor_failed,
    wait_granted,
    wait_released,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_budget import (
    CapacityBudget,
    MaxUnavailable,
    capacity_budget,
    node_is_unschedulable,
    node_name,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_schedule import (
    ORDER_BY_DOMAIN,
    ContinuousScheduler,
    PoolNode,
    ScheduleLimits,
    SimulatedSchedule,
    StartDecision,
    pool_from_objects,
    rollout_order,
    simulate_schedule,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import iso, utc_now
from ansible_collections.gpufleet.upgrade.plugins.module_utils._wait import wait_until

ANNOTATION_DOMAIN = "gpufleet.io"

STATE_PENDING = "pending"
STATE_IN_PROGRESS = "in-progress"
STATE_DONE = "done"
STATE_FAILED = "failed"
STATES = (STATE_PENDING, STATE_IN_PROGRESS, STATE_DONE, STATE_FAILED)

# The steps the engine itself adds around the caller's steps.
CORDON_STEP = "cordon"
UNCORDON_STEP = "uncordon"
RESERVED_STEP_NAMES = (CORDON_STEP, UNCORDON_STEP)

# What the engine does with a target node, decided from its annotations.
ACTION_RUN = "run"
ACTION_RESUME = "resume"
ACTION_SKIP = "skip"
ACTION_HALT = "halt"
ACTION_RELEASE = "release"
STATE_RELEASED = "released"
# A node the Maintenance Operator never granted: released untouched, and the rollout halts.
STATE_NOT_GRANTED = "not-granted"

# "rollout-" + name + "-initially-unschedulable" must fit a 63-character annotation name.
_ROLLOUT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,28}[a-z0-9])?$")
_MESSAGE_LIMIT = 1000


# -- progress annotations (pure) -----------------------------------------------------------


@dataclass(frozen=True)
class ProgressKeys:
    """Annotation names of one rollout (one rollout name: one set of keys on every node)."""

    rollout: str

    def __post_init__(self) -> None:
        if not _ROLLOUT_NAME.match(self.rollout):
            raise InvalidInputError(
                f"Rollout name {self.rollout!r} must be 1-30 lowercase letters, digits or '-', "
                "starting and ending with a letter or digit"
            )

    def _key(self, suffix: str) -> str:
        return f"{ANNOTATION_DOMAIN}/rollout-{self.rollout}-{suffix}"

    @property
    def state(self) -> str:
        return self._key("state")

    @property
    def step(self) -> str:
        return self._key("step")

    @property
    def target(self) -> str:
        return self._key("target")

    @property
    def started_at(self) -> str:
        return self._key("started-at")

    @property
    def step_started_at(self) -> str:
        return self._key("step-started-at")

    @property
    def finished_at(self) -> str:
        return self._key("finished-at")

    @property
    def message(self) -> str:
        return self._key("message")

    @property
    def initially_unschedulable(self) -> str:
        return self._key("initially-unschedulable")


@dataclass(frozen=True)
class NodeProgress:
    """A node's progress as its annotations tell it."""

    state: str = ""
    step: str = ""
    target: str = ""
    started_at: str = ""
    finished_at: str = ""
    message: str = ""
    initially_unschedulable: bool = False

    @property
    def unfinished_attempt(self) -> bool:
        """An earlier run began this node and did not finish it (in progress, failed, or cleared after failing)."""
        return bool(self.started_at) and self.state != STATE_DONE


def read_progress(node: Mapping[str, Any], keys: ProgressKeys) -> NodeProgress:
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return NodeProgress(
        state=str(annotations.get(keys.state, "")),
        step=str(annotations.get(keys.step, "")),
        target=str(annotations.get(keys.target, "")),
        started_at=str(annotations.get(keys.started_at, "")),
        finished_at=str(annotations.get(keys.finished_at, "")),
        message=str(annotations.get(keys.message, "")),
        initially_unschedulable=annotations.get(keys.initially_unschedulable) == "true",
    )


def unfinished_nodes(nodes: Iterable[Mapping[str, Any]], keys: ProgressKeys) -> List[str]:
    """Nodes an earlier run began and did not finish: in progress, failed, or failed and cleared to pending.

    They stay targets whatever their component runs now: one may still be cordoned by the rollout (resume
    and uncordon it) or have failed after its change took effect (it must halt the rollout).
    """
    return [node_name(node) for node in nodes if read_progress(node, keys).unfinished_attempt]


@dataclass(frozen=True)
class Disposition:
    """What the engine does with one target node, and why."""

    action: str
    from_step: str = ""
    why: str = ""


def node_disposition(
    progress: NodeProgress,
    *,
    target: str,
    undo_other_targets: bool = False,
    before_change: Sequence[str] = (),
    at_target: bool = False,
) -> Disposition:
    """Decide from the annotations: run, resume where it stopped, skip (done), or halt (failed).

    With ``undo_other_targets`` (a rollback), a node an earlier run to another target left unfinished at one of
    the ``before_change`` steps never changed: release it; so is one the caller read to run ``target`` already
    (``at_target``), whatever step it stopped at. One it left failed later is rolled from the start.
    """
    state = progress.state or STATE_PENDING
    if undo_other_targets and progress.unfinished_attempt and progress.target and progress.target != target:
        where = f"step {progress.step or CORDON_STEP} of the rollout to {progress.target}"
        if (progress.step or CORDON_STEP) in before_change:
            return Disposition(
                action=ACTION_RELEASE,
                from_step=progress.step or CORDON_STEP,
                why=f"stopped at {where}, before anything changed: released without running a step",
            )
        if at_target:
            return Disposition(
                action=ACTION_RELEASE,
                from_step=progress.step or CORDON_STEP,
                why=f"stopped at {where} and still runs {target}, nothing to undo: released without running a step",
            )
        if state != STATE_IN_PROGRESS:
            return Disposition(action=ACTION_RUN, why=f"left {state} at {where}; rolled to {target} from the start")
    if state == STATE_PENDING:
        return Disposition(action=ACTION_RUN, why="not started")
    if state == STATE_DONE:
        if progress.target == target:
            return Disposition(action=ACTION_SKIP, why=f"done at {progress.finished_at or 'an earlier run'}")
        return Disposition(action=ACTION_RUN, why=f"done for {progress.target or 'another target'}, not for {target}")
    if state == STATE_IN_PROGRESS:
        if progress.target == target:
            return Disposition(
                action=ACTION_RESUME, from_step=progress.step, why=f"interrupted at step {progress.step or '?'}"
            )
        return Disposition(
            action=ACTION_RESUME, why=f"interrupted while rolling out {progress.target or '?'}; starting over"
        )
    if state == STATE_FAILED:
        return Disposition(
            action=ACTION_HALT,
            from_step=progress.step,
            why=f"failed at step {progress.step or '?'}: {progress.message or 'no message recorded'}",
        )
    return Disposition(action=ACTION_HALT, why=f"unknown rollout state {state!r} (expected one of {', '.join(STATES)})")


def start_annotations(
    node: Mapping[str, Any], *, keys: ProgressKeys, target: str, moment: str
) -> Tuple[Dict[str, Optional[str]], bool]:
    """Annotations that mark a node in progress, and whether it counts as cordoned before the rollout.

    The initial state is taken from the node only when no earlier attempt is
    unfinished: after an interruption or a cleared failure the node is
    cordoned by us, and the annotation written the first time is the truth.
    """
    progress = read_progress(node, keys)
    if progress.unfinished_attempt:
        initially_unschedulable = progress.initially_unschedulable
    else:
        initially_unschedulable = node_is_unschedulable(node)
    resuming_same = progress.state == STATE_IN_PROGRESS and progress.target == target
    annotations: Dict[str, Optional[str]] = {
        keys.state: STATE_IN_PROGRESS,
        keys.target: target,
        # Resuming keeps the step it resumes from: a second interruption before the next step is recorded
        # must not send the node back to the first step.
        keys.step: progress.step if resuming_same and progress.step else CORDON_STEP,
        keys.started_at: progress.started_at if resuming_same and progress.started_at else moment,
        keys.step_started_at: moment,
        keys.finished_at: None,
        keys.message: None,
        keys.initially_unschedulable: "true" if initially_unschedulable else None,
    }
    return annotations, initially_unschedulable


def step_annotations(*, keys: ProgressKeys, step: str, moment: str) -> Dict[str, Optional[str]]:
    return {keys.step: step, keys.step_started_at: moment}


def done_annotations(*, keys: ProgressKeys, moment: str) -> Dict[str, Optional[str]]:
    return {
        keys.state: STATE_DONE,
        keys.step: None,
        keys.step_started_at: None,
        keys.finished_at: moment,
        keys.message: None,
    }


def failed_annotations(*, keys: ProgressKeys, step: str, reason: str, moment: str) -> Dict[str, Optional[str]]:
    return {
        keys.state: STATE_FAILED,
        keys.step: step,
        keys.finished_at: moment,
        keys.message: reason[:_MESSAGE_LIMIT],
    }


@dataclass(frozen=True)
class NodeWrite:
    """One change to a Node: annotations (None removes), ``spec.unschedulable`` (None: leave), and an Event."""

    annotations: Dict[str, Optional[str]]
    unschedulable: Optional[bool] = None
    event_message: str = ""
    event_type: str = "Normal"


# -- settings, steps, timeline -----------------------------------------------------------------


@dataclass(frozen=True)
class RolloutSettings:
    """How a rollout paces itself. ``max_parallel`` 0: no cap besides the budget."""

    name: str
    target: str = ""
    max_unavailable: MaxUnavailable = 1
    max_parallel: int = 1
    failure_domain_label: str = ""
    max_per_domain: int = 1
    canary_nodes: Tuple[str, ...] = ()
    order: str = ORDER_BY_DOMAIN
    manage_cordon: bool = True
    budget_wait_timeout: float = 0.0
    budget_wait_sleep: float = 10.0
    # The first of the caller's steps that changes the node's component (the steps before it only prepare);
    # with undo_other_targets, a node an earlier run to another target left before it is released.
    changing_step: str = ""
    undo_other_targets: bool = False
    # With undo_other_targets: nodes the caller read to run this target already (their component never changed,
    # whatever step an earlier run stopped them at); they are released like those stopped before changing_step.
    at_target_nodes: Tuple[str, ...] = ()
    # The alerts gate, asked before each node the rollout would start (None: no gate).
    alerts: Optional[AlertsGate] = None
    # Drain through the NVIDIA Maintenance Operator (None: the engine cordons and the caller's step drains).
    maintenance: Optional[MaintenanceSettings] = None

    @property
    def keys(self) -> ProgressKeys:
        return ProgressKeys(self.name)

    @property
    def cordons(self) -> bool:
        """Whether the engine itself cordons and uncordons (never when the Maintenance Operator does)."""
        return self.manage_cordon and self.maintenance is None

    def steps_before_change(self, step_names: Sequence[str]) -> Tuple[str, ...]:
        """The engine's cordon and the caller's steps before ``changing_step`` (none when it is not set)."""
        if not self.changing_step or self.changing_step not in step_names:
            return ()
        return (CORDON_STEP, *step_names[: list(step_names).index(self.changing_step)])


@dataclass(frozen=True)
class StepContext:
    """What a step is told about the node it works on."""

    node_name: str
    rollout: str
    target: str
    resumed: bool
    api: Optional[KubeApi] = None


@dataclass(frozen=True)
class NodeStep:
    """One named per-node step; ``run`` raises a GpuFleetError to fail the node, may return details."""

    name: str
    run: Callable[[StepContext], Optional[Mapping[str, Any]]]
    description: str = ""


@dataclass
class StepRecord:
    name: str
    outcome: str = "running"
    started: str = ""
    ended: str = ""
    seconds: float = 0.0
    detail: Dict[str, Any] = field(default_factory=dict)
    error: str = ""

    def as_dict(self) -> Dict[str, Any]:
        entry: Dict[str, Any] = {
            "name": self.name,
            "outcome": self.outcome,
            "started": self.started,
            "ended": self.ended,
            "seconds": round(self.seconds, 3),
        }
        if self.detail:
            entry["detail"] = self.detail
        if self.error:
            entry["error"] = self.error
        return entry


@dataclass
class NodeRun:
    """The timeline of one node in this run."""

    node: str
    action: str
    outcome: str = "running"
    why: str = ""
    started: str = ""
    ended: str = ""
    seconds: float = 0.0
    steps: List[StepRecord] = field(default_factory=list)
    failed_step: str = ""
    error: str = ""

    def as_dict(self) -> Dict[str, Any]:
        entry: Dict[str, Any] = {"node": self.node, "action": self.action, "outcome": self.outcome}
        if self.why:
            entry["why"] = self.why
        if self.started:
            entry.update(started=self.started, ended=self.ended, seconds=round(self.seconds, 3))
            entry["steps"] = [step.as_dict() for step in self.steps]
        if self.failed_step:
            entry.update(failed_step=self.failed_step, error=self.error)
        return entry


# -- the plan (pure) ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RolloutPlan:
    """Everything decided before anything is touched."""

    settings: RolloutSettings
    order: Tuple[str, ...]
    dispositions: Dict[str, Disposition]
    skipped: Tuple[str, ...]
    halted_by: Tuple[str, ...]
    resumed: Tuple[str, ...]
    released: Tuple[str, ...]
    canaries: Tuple[str, ...]
    goes_first: Tuple[str, ...]
    budget: CapacityBudget
    limits: ScheduleLimits
    pool: Dict[str, PoolNode]
    step_names: Tuple[str, ...]
    step_descriptions: Tuple[Tuple[str, str], ...]
    first_decision: StartDecision
    forecast: SimulatedSchedule
    # Nodes of the pool that are not targets but finished this target in an earlier run (one killed before it
    # could record them): their progress annotations are this rollout's, and the run's record names them.
    done_earlier: Tuple[str, ...] = ()

    @property
    def halt_message(self) -> str:
        if not self.halted_by:
            return ""
        details = "; ".join(f"{name} {self.dispositions[name].why}" for name in self.halted_by)
        clear = clear_failed(self.settings.keys, self.halted_by[0])
        return f"Rollout {self.settings.name} is halted by a failed node: {details}. {clear}"

    def as_dict(self) -> Dict[str, Any]:
        initially_cordoned = [name for name in self.order if self.pool.get(name, PoolNode(name)).unavailable]
        return {
            "rollout": self.settings.name,
            "target": self.settings.target,
            "budget": self.budget.as_dict(),
            "max_parallel": self.settings.max_parallel,
            "failure_domain_label": self.settings.failure_domain_label,
            "max_per_domain": self.limits.max_per_domain,
            "max_at_once": self.forecast.peak_running,
            "starts_now": list(self.first_decision.start),
            "blocked_reason": self.first_decision.blocked_reason if not self.halted_by else self.halt_message,
            "nodes": [
                {
                    "node": name,
                    "domain": self.pool[name].domain if name in self.pool else "",
                    "canary": name in self.canaries,
                    "action": self.dispositions[name].action,
                    "from_step": self.dispositions[name].from_step,
                    "why": self.dispositions[name].why,
                    "unavailable_now": name in initially_cordoned,
                }
                for name in self.order
            ],
            "skipped": [{"node": name, "why": self.dispositions[name].why} for name in self.skipped],
            "released": [{"node": name, "why": self.dispositions[name].why} for name in self.released],
            "halted_by": [{"node": name, "why": self.dispositions[name].why} for name in self.halted_by],
            "steps": [{"name": name, "description": text} for name, text in self.step_descriptions],
            "forecast_order": [name for _when, name in self.forecast.starts],
        }


def _validate(settings: RolloutSettings, steps: Sequence[NodeStep]) -> None:
    ProgressKeys(settings.name)  # raises InvalidInputError for a rollout name the annotation keys cannot hold
    if settings.max_parallel < 0 or settings.max_per_domain < 0:
        raise InvalidInputError("max_parallel and max_per_domain cannot be negative")
    if settings.budget_wait_timeout < 0 or settings.budget_wait_sleep <= 0:
        raise InvalidInputError("budget_wait_timeout must be >= 0 and budget_wait_sleep > 0")
    names = [step.name for step in steps]
    if settings.changing_step and settings.changing_step not in names:
        raise InvalidInputError(f"changing_step {settings.changing_step!r} is not one of the steps {names}")
    if any(not name for name in names) or len(set(names)) != len(names):
        raise InvalidInputError(f"Step names must be unique and not empty: {names}")
    reserved = [name for name in names if name in RESERVED_STEP_NAMES]
    if reserved:
        raise InvalidInputError(f"Step names {reserved} are the engine's own")


def build_plan(
    *,
    settings: RolloutSettings,
    targets: Sequence[str],
    steps: Sequence[NodeStep],
    pool_nodes: Sequence[Mapping[str, Any]],
) -> RolloutPlan:
    """Plan a rollout from the pool's Node objects: order, what happens to each node, the budget."""
    _validate(settings, steps)
    keys = settings.keys
    objects = {node_name(node): node for node in pool_nodes}
    _check_targets(targets, objects)
    pool = pool_from_objects(pool_nodes, domain_label=settings.failure_domain_label)
    budget = capacity_budget(max_unavailable=settings.max_unavailable, pool_nodes=pool_nodes)
    limits = ScheduleLimits(
        max_unavailable=budget.max_unavailable,
        max_parallel=settings.max_parallel,
        max_per_domain=settings.max_per_domain if settings.failure_domain_label else 0,
    )
    before_change = settings.steps_before_change([step.name for step in steps])
    dispositions = {
        name: node_disposition(
            read_progress(objects[name], keys),
            target=settings.target,
            undo_other_targets=settings.undo_other_targets,
            before_change=before_change,
            at_target=name in settings.at_target_nodes,
        )
        for name in targets
    }
    skipped = tuple(name for name in targets if dispositions[name].action == ACTION_SKIP)
    released = tuple(name for name in targets if dispositions[name].action == ACTION_RELEASE)
    halted_by = tuple(name for name in targets if dispositions[name].action == ACTION_HALT)
    resumed = tuple(name for name in targets if dispositions[name].action == ACTION_RESUME)
    # Nodes an earlier attempt left unavailable (a failed node still cordoned, rolled again from the start) go
    # first, like resumed ones: they take no more of the budget, and waiting behind the canary for the slot they
    # hold themselves would stall the rollout (a rollback after a halted promotion).
    goes_first = resumed + tuple(
        name
        for name in targets
        if dispositions[name].action == ACTION_RUN
        and read_progress(objects[name], keys).unfinished_attempt
        and pool[name].unavailable
    )
    to_work = [name for name in targets if dispositions[name].action in (ACTION_RUN, ACTION_RESUME)]
    canaries = tuple(settings.canary_nodes)
    strangers = [name for name in canaries if name not in targets]
    if strangers:
        raise InvalidInputError(f"Canary nodes that are not rollout targets: {', '.join(strangers)}")
    order = rollout_order(
        to_work,
        pool=pool,
        canaries=[name for name in canaries if name in to_work],
        resumed=goes_first,
        order=settings.order,
    )
    first = ContinuousScheduler(
        order=tuple(order), limits=limits, canaries=canaries, resumed=goes_first, finished={*skipped, *released}
    ).peek(pool)
    # Nodes the forecast keeps unavailable after they finish: those the rollout will leave cordoned.
    stay = [
        name
        for name in order
        if start_annotations(objects[name], keys=keys, target=settings.target, moment="")[1]
        or (not settings.cordons and pool[name].unavailable)
    ]
    forecast = simulate_schedule(
        order=order,
        pool=pool,
        limits=limits,
        canaries=[name for name in canaries if name not in skipped and name not in released],
        resumed=goes_first,
        stay_unavailable=stay,
    )
    descriptions = [(CORDON_STEP, _cordon_description(settings))]
    descriptions += [(step.name, step.description or step.name) for step in steps]
    descriptions.append((UNCORDON_STEP, _uncordon_description(settings)))
    return RolloutPlan(
        settings=settings,
        order=tuple(order),
        dispositions=dispositions,
        skipped=skipped,
        halted_by=halted_by,
        resumed=resumed,
        released=released,
        canaries=canaries,
        goes_first=goes_first,
        budget=budget,
        limits=limits,
        pool=pool,
        step_names=tuple(step.name for step in steps),
        step_descriptions=tuple(descriptions),
        first_decision=first,
        forecast=forecast,
        done_earlier=done_earlier(objects, keys=keys, target=settings.target, targets=targets),
    )


def _check_targets(targets: Sequence[str], objects: Mapping[str, Any]) -> None:
    if len(set(targets)) != len(targets):
        raise InvalidInputError(f"Rollout targets listed more than once: {sorted(targets)}")
    missing = [name for name in targets if name not in objects]
    if missing:
        raise InvalidInputError(f"Rollout targets not in the node pool: {', '.join(missing)}")


def done_earlier(
    objects: Mapping[str, Mapping[str, Any]], *, keys: ProgressKeys, target: str, targets: Sequence[str] = ()
) -> Tuple[str, ...]:
    """Nodes of the pool (``objects``, by name), not targets, whose progress says they finished ``target`` (in an
    earlier run: one killed before it could record them leaves them to the run that resumes it)."""
    found = []
    for name, node in objects.items():
        progress = read_progress(node, keys)
        if name not in targets and progress.state == STATE_DONE and progress.target == target:
            found.append(name)
    return tuple(sorted(found))


def _cordon_description(settings: RolloutSettings) -> str:
    if settings.maintenance is not None:
        return f"mark the node in progress ({settings.keys.state}), then {settings.maintenance.describe()}"
    if not settings.manage_cordon:
        return f"mark the node in progress ({settings.keys.state}); scheduling is left as it is"
    return (
        f"mark the node in progress ({settings.keys.state}), remember whether it was already cordoned "
        f"({settings.keys.initially_unschedulable}), cordon it"
    )


def _uncordon_description(settings: RolloutSettings) -> str:
    if settings.maintenance is not None:
        return (
            "give the node back to the Maintenance Operator (delete the request, or leave another requestor's) and "
            "wait until it is gone; the operator uncordons once nobody holds the node; mark it done"
        )
    if not settings.manage_cordon:
        return "mark the node done"
    return "uncordon the node unless it was cordoned before the rollout, mark it done"


def begin_write(node: Mapping[str, Any], *, settings: RolloutSettings, moment: str) -> NodeWrite:
    """Mark the node in progress, remember its initial state, cordon it -- in one write."""
    before = read_progress(node, settings.keys)
    resumed = before.state == STATE_IN_PROGRESS and before.target == settings.target
    annotations, _previous = start_annotations(node, keys=settings.keys, target=settings.target, moment=moment)
    cordon = settings.cordons and not node_is_unschedulable(node)
    return NodeWrite(
        annotations=annotations,
        unschedulable=True if cordon else None,
        event_message=(
            f"Rollout {settings.name} to {settings.target or 'the new version'} "
            + ("resumed on this node" if resumed else "started on this node")
            + ("; node cordoned" if cordon else "")
        ),
    )


def step_write(*, settings: RolloutSettings, step: str, moment: str) -> NodeWrite:
    return NodeWrite(annotations=step_annotations(keys=settings.keys, step=step, moment=moment))


def finish_write(node: Mapping[str, Any], *, settings: RolloutSettings, moment: str) -> NodeWrite:
    """Mark done; uncordon unless the node was cordoned before the rollout came."""
    progress = read_progress(node, settings.keys)
    release = settings.cordons and node_is_unschedulable(node) and not progress.initially_unschedulable
    kept = " (left cordoned: it was cordoned before the rollout)" if progress.initially_unschedulable else ""
    return NodeWrite(
        annotations=done_annotations(keys=settings.keys, moment=moment),
        unschedulable=False if release else None,
        event_message=f"Rollout {settings.name} to {settings.target or 'the new version'} done on this node{kept}",
    )


def release_write(node: Mapping[str, Any], *, settings: RolloutSettings) -> NodeWrite:
    """Undo the rollout's marks on a node it stopped before changing it: the progress annotations go, and the
    node is uncordoned unless it was cordoned before the rollout came (nothing else was done to it)."""
    progress = read_progress(node, settings.keys)
    release = settings.cordons and node_is_unschedulable(node) and not progress.initially_unschedulable
    keys = settings.keys
    progress_keys = (
        keys.state,
        keys.step,
        keys.target,
        keys.started_at,
        keys.step_started_at,
        keys.finished_at,
        keys.message,
        keys.initially_unschedulable,
    )
    annotations: Dict[str, Optional[str]] = dict.fromkeys(progress_keys)
    kept = " (left cordoned: it was cordoned before the rollout)" if progress.initially_unschedulable else ""
    return NodeWrite(
        annotations=annotations,
        unschedulable=False if release else None,
        event_message=(
            f"Rollout {settings.name} to {progress.target or 'another version'} stopped on this node at step "
            f"{progress.step or CORDON_STEP}, before anything changed; released for {settings.target or 'the rollback'}"
            f"{' and uncordoned' if release else ''}, nothing evicted{kept}"
        ),
    )


def clear_failed(keys: ProgressKeys, node: str) -> str:
    """How a person clears a failed node's mark once the node is fixed: every run halts on it until then (the
    report's Next repeats the command, _report.clear_commands)."""
    return f"Fix the node, then clear it with: kubectl annotate node {node} {keys.state}={STATE_PENDING} --overwrite"


def fail_write(*, settings: RolloutSettings, step: str, reason: str, moment: str) -> NodeWrite:
    """Mark failed and say why; the node is left as it is (cordoned) for a person to read."""
    return NodeWrite(
        annotations=failed_annotations(keys=settings.keys, step=step, reason=reason, moment=moment),
        event_message=(
            f"Rollout {settings.name} failed at step {step}: {reason}. "
            "The node stays cordoned and the rollout is halted."
        ),
        event_type="Warning",
    )


# -- the cluster as the engine sees it ---------------------------------------------------------


class RolloutCluster(Protocol):
    """What the executor needs from the cluster; ``KubeRolloutCluster`` keeps it on the Nodes."""

    def pool_nodes(self) -> List[Dict[str, Any]]: ...

    def begin_node(self, name: str) -> Optional[Mapping[str, Any]]: ...

    def record_step(self, name: str, step: str) -> None: ...

    def finish_node(self, name: str) -> Optional[Mapping[str, Any]]: ...

    def fail_node(self, name: str, *, step: str, reason: str) -> None: ...

    def release_node(self, name: str) -> None: ...


class KubeRolloutCluster:
    """Progress and cordon state kept on the Node objects, Events beside them.

    Only I/O: what to write comes from the pure ``*_write`` functions.
    """

    _CONFLICT_RETRIES = 5

    def __init__(
        self,
        api: KubeApi,
        *,
        settings: RolloutSettings,
        pool_selector: str = "",
        now: Optional[Callable[[], datetime.datetime]] = None,
        clock: Callable[[], float] = time.monotonic,
        pause: Callable[[float], None] = time.sleep,
    ) -> None:
        self.api = api
        self.settings = settings
        self.pool_selector = pool_selector
        # One clock: the progress annotations (started-at, finished-at) carry the cluster's time.
        self.now = now or api.cluster_now
        # The waits for the Maintenance Operator.
        self.clock = clock
        self.pause = pause
        self.warnings: List[str] = []

    def pool_nodes(self) -> List[Dict[str, Any]]:
        return self.api.list(NODES, label_selector=self.pool_selector or None)

    def begin_node(self, name: str) -> Optional[Mapping[str, Any]]:
        """One write guarded by resourceVersion: the initial state is read from the node it applies to. Then,
        with the Maintenance Operator, the request for the node, granted once it is cordoned and drained."""
        for attempt in range(self._CONFLICT_RETRIES):
            node = get_node(self.api, name)
            write = begin_write(node, settings=self.settings, moment=iso(self.now()))
            try:
                self._apply(name, write, resource_version=node["metadata"].get("resourceVersion"))
                break
            except KubeApiError as err:
                # Someone else changed the node between our read and our write: read again.
                if err.status != 409 or attempt == self._CONFLICT_RETRIES - 1:
                    raise
        if self.settings.maintenance is None:
            return None
        return wait_granted(self.api, self.settings.maintenance, name, clock=self.clock, pause=self.pause)

    def record_step(self, name: str, step: str) -> None:
        self._apply(name, step_write(settings=self.settings, step=step, moment=iso(self.now())))

    def finish_node(self, name: str) -> Optional[Mapping[str, Any]]:
        detail = self._give_back(name)
        node = get_node(self.api, name)
        self._apply(name, finish_write(node, settings=self.settings, moment=iso(self.now())))
        return detail

    def fail_node(self, name: str, *, step: str, reason: str) -> None:
        """Mark the node failed; with the Maintenance Operator, our request for it keeps the node cordoned and says
        RequestorFailed (the operator then neither ends it nor counts it as done)."""
        self._apply(name, fail_write(settings=self.settings, step=step, reason=reason, moment=iso(self.now())))
        if self.settings.maintenance is None:
            return
        try:
            set_requestor_failed(
                self.api, self.settings.maintenance, name, failed=True, message=f"{self.settings.name}: {reason}"
            )
        except KubeApiError as err:
            # The node's annotations and Event are the record; the request stays as it was.
            self.warnings.append(f"Could not mark the NodeMaintenance of node {name} RequestorFailed: {err.msg}")

    def release_node(self, name: str) -> None:
        self._give_back(name)
        node = get_node(self.api, name)
        self._apply(name, release_write(node, settings=self.settings))

    def _give_back(self, name: str) -> Optional[Mapping[str, Any]]:
        """With the Maintenance Operator: end our request for the node (its uncordon is the operator's)."""
        if self.settings.maintenance is None:
            return None
        return wait_released(self.api, self.settings.maintenance, name, clock=self.clock, pause=self.pause)

    def hold_node(self, name: str, message: str) -> None:
        """A Normal Event on a node the rollout holds before (kubectl describe says why it waits)."""
        try:
            record_event(self.api, get_node(self.api, name), message=message, action="AlertsHold")
        except KubeApiError as err:
            self.warnings.append(f"Could not record an Event on node {name}: {err.msg}")

    def _apply(self, name: str, write: NodeWrite, *, resource_version: Optional[str] = None) -> None:
        node = patch_node(
            self.api,
            name,
            annotations=write.annotations,
            unschedulable=write.unschedulable,
            resource_version=resource_version,
        )
        if not write.event_message:
            return
        try:
            record_event(self.api, node, message=write.event_message, event_type=write.event_type, action="Rollout")
        except KubeApiError as err:
            # The annotations are the record; an Event that cannot be written must not fail the node.
            self.warnings.append(f"Could not record an Event on node {name}: {err.msg}")


# -- the executor ------------------------------------------------------------------------------------


def failure_reason(err: BaseException) -> str:
    """A failure as the node's annotation and the report show it; an unexpected error says it was one."""
    if isinstance(err, GpuFleetError):
        return err.msg
    return f"unexpected {type(err).__name__}: {err}"


class _NodeWorker:
    """Runs one node's steps on a worker thread and keeps its timeline."""

    def __init__(
        self,
        *,
        cluster: RolloutCluster,
        plan: RolloutPlan,
        steps: Sequence[NodeStep],
        api: Optional[KubeApi],
        clock: Callable[[], float],
        now: Callable[[], datetime.datetime],
    ) -> None:
        self.cluster = cluster
        self.plan = plan
        self.steps = steps
        self.api = api
        self.clock = clock
        self.now = now

    def run(self, name: str) -> NodeRun:
        disposition = self.plan.dispositions[name]
        run = NodeRun(node=name, action=disposition.action, why=disposition.why, started=iso(self.now()))
        began = self.clock()
        first_index = self._resume_index(disposition)
        context = StepContext(
            node_name=name,
            rollout=self.plan.settings.name,
            target=self.plan.settings.target,
            resumed=disposition.action == ACTION_RESUME,
            api=self.api,
        )
        current = CORDON_STEP
        try:
            self._timed(run, CORDON_STEP, lambda: self.cluster.begin_node(name))
            for index, step in enumerate(self.steps):
                if index < first_index:
                    run.steps.append(StepRecord(name=step.name, outcome="skipped", detail={"why": "done earlier"}))
                    continue
                current = step.name
                self.cluster.record_step(name, step.name)
                self._timed(run, step.name, functools.partial(step.run, context))
            current = UNCORDON_STEP
            self._timed(run, UNCORDON_STEP, lambda: self.cluster.finish_node(name))
            run.outcome = STATE_DONE
        except MaintenanceNotGrantedError as err:
            # The operator never scheduled the node, and the request is withdrawn: nothing was done to it.
            run.outcome = STATE_NOT_GRANTED
            run.error = err.msg
            try:
                self.cluster.release_node(name)
            except GpuFleetError as release_err:
                run.error += f" (and its progress marks could not be taken off: {release_err.msg})"
        except Exception as err:  # pylint: disable=broad-except
            # Broad on purpose: whatever stopped a step (an odd BMC payload, a bug), the node must end up
            # marked failed, with a Warning Event, and halt the rollout, not look merely interrupted.
            run.outcome = STATE_FAILED
            run.failed_step = current
            run.error = failure_reason(err)
            try:
                self.cluster.fail_node(name, step=current, reason=run.error)
            except GpuFleetError as record_err:
                run.error += f" (and the failure could not be recorded on the node: {record_err.msg})"
        run.ended = iso(self.now())
        run.seconds = self.clock() - began
        return run

    def release(self, name: str) -> NodeRun:
        """A node an earlier run stopped before changing it: take the rollout's marks off, run no step."""
        disposition = self.plan.dispositions[name]
        run = NodeRun(node=name, action=ACTION_RELEASE, why=disposition.why, started=iso(self.now()))
        began = self.clock()
        try:
            self._timed(run, UNCORDON_STEP, lambda: self.cluster.release_node(name))
            run.outcome = STATE_RELEASED
        except GpuFleetError as err:
            run.outcome = STATE_FAILED
            run.failed_step = UNCORDON_STEP
            run.error = f"could not release the node: {err.msg}"
        run.ended = iso(self.now())
        run.seconds = self.clock() - began
        return run

    def _resume_index(self, disposition: Disposition) -> int:
        if disposition.action != ACTION_RESUME or not disposition.from_step:
            return 0
        names = [step.name for step in self.steps]
        if disposition.from_step in names:
            return names.index(disposition.from_step)
        if disposition.from_step == UNCORDON_STEP:
            return len(names)
        return 0

    def _timed(self, run: NodeRun, step_name: str, action: Callable[[], Any]) -> None:
        record = StepRecord(name=step_name, started=iso(self.now()))
        run.steps.append(record)
        began = self.clock()
        try:
            detail = action()
        except Exception as err:  # pylint: disable=broad-except
            record.outcome = STATE_FAILED
            record.error = failure_reason(err)
            raise
        finally:
            record.ended = iso(self.now())
            record.seconds = self.clock() - began
        record.outcome = STATE_DONE
        if isinstance(detail, Mapping):
            record.detail = dict(detail)


@dataclass
class _RoundsOutcome:
    """What the rounds of one rollout left: the node runs, and why it halted (empty when it did not)."""

    runs: List[NodeRun]
    # The scheduler's latest decision: on a halt, its reasons are why the nodes not started wait.
    last_decision: StartDecision
    halt_reason: str = ""
    peak_unavailable: int = 0
    # Every alert that held a node back, and those still firing when the alerts gate gave up.
    alerts: Dict[str, List[str]] = field(default_factory=lambda: {"held_for": [], "firing": []})


def execute_rollout(
    cluster: RolloutCluster,
    *,
    settings: RolloutSettings,
    targets: Sequence[str],
    steps: Sequence[NodeStep],
    check_mode: bool = False,
    api: Optional[KubeApi] = None,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
    now: Optional[Callable[[], datetime.datetime]] = None,
) -> Dict[str, Any]:
    """Plan, then (unless ``check_mode``) run the rollout; return the result with its timeline.

    ``cluster`` provides ``pool_nodes()``, ``begin_node(name)``,
    ``record_step(name, step)``, ``finish_node(name)`` and
    ``fail_node(name, step=, reason=)`` -- ``KubeRolloutCluster`` in modules.
    Raises RolloutHaltedError (carrying the result) when a node failed, in this
    run or an earlier one, or when the budget stayed exhausted.
    """
    started = clock()
    plan = build_plan(settings=settings, targets=targets, steps=steps, pool_nodes=cluster.pool_nodes())
    result: Dict[str, Any] = {
        "rollout": settings.name,
        "target": settings.target,
        "check_mode": check_mode,
        "plan": plan.as_dict(),
        "changed": False,
    }
    if plan.halted_by:
        result.update(_summary(plan, runs=[], waiting={}), halted=True, halt_reason=plan.halt_message)
        raise RolloutHaltedError(plan.halt_message, node=plan.halted_by[0], result=result)
    if check_mode:
        result["changed"] = bool(plan.order or plan.released)
        result.update(_summary(plan, runs=[], waiting=dict(plan.first_decision.waiting)))
        result.update(halted=False, halt_reason="", elapsed=clock() - started)
        return result

    # One clock: the progress annotations and the timeline carry the cluster's time (its API server's Date).
    if now is None:
        now = api.cluster_now if api is not None else utc_now
    worker = _NodeWorker(cluster=cluster, plan=plan, steps=steps, api=api, clock=clock, now=now)
    scheduler = ContinuousScheduler(
        order=plan.order,
        limits=plan.limits,
        canaries=plan.canaries,
        resumed=plan.goes_first,
        finished={*plan.skipped, *plan.released},
    )
    # Released nodes only become available again: no budget to ask, before anything starts.
    progress = _RoundsOutcome(runs=[worker.release(name) for name in plan.released], last_decision=plan.first_decision)
    _run_rounds(
        progress,
        cluster=cluster,
        plan=plan,
        settings=settings,
        worker=worker,
        scheduler=scheduler,
        clock=clock,
        pause=pause,
    )

    runs = progress.runs
    halt_reason = progress.halt_reason
    failed = [run for run in runs if run.outcome == STATE_FAILED]
    not_granted = [run for run in runs if run.outcome == STATE_NOT_GRANTED]
    if failed and not halt_reason:
        first = failed[0]
        halt_reason = f"node {first.node} failed at step {first.failed_step}: {first.error}. " + clear_failed(
            settings.keys, first.node
        )
    elif not_granted and not halt_reason:
        halt_reason = f"node {not_granted[0].node} was not started: {not_granted[0].error}"
    waiting = dict(progress.last_decision.waiting) if halt_reason else {}
    result.update(_summary(plan, runs=runs, waiting=waiting))
    result.update(
        changed=bool(runs),
        halted=bool(halt_reason),
        halt_reason=halt_reason,
        peak_unavailable=progress.peak_unavailable,
        elapsed=clock() - started,
        warnings=list(getattr(cluster, "warnings", [])),
    )
    if settings.alerts is not None:
        result.update(alerts_held_for=progress.alerts["held_for"], held_by_alerts=progress.alerts["firing"])
    if halt_reason:
        raise RolloutHaltedError(
            f"Rollout {settings.name} halted: {halt_reason}",
            node=failed[0].node if failed else "",
            result=result,
        )
    return result


def _run_rounds(
    progress: _RoundsOutcome,
    *,
    cluster: RolloutCluster,
    plan: RolloutPlan,
    settings: RolloutSettings,
    worker: _NodeWorker,
    scheduler: ContinuousScheduler,
    clock: Callable[[], float],
    pause: Callable[[float], None],
) -> None:
    """Start nodes as soon as the scheduler allows, each on a thread of its own, until none is pending or the
    rollout halts; nodes under way are always waited for. Records the runs and the halt reason in ``progress``."""

    def observe() -> Dict[str, PoolNode]:
        return pool_from_objects(cluster.pool_nodes(), domain_label=settings.failure_domain_label)

    in_flight: Dict[concurrent.futures.Future, str] = {}
    workers = settings.max_parallel or max(1, len(plan.order))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rollout") as executor:
        # Each round starts nodes or collects at least one finished node (or waits for the
        # budget once), so the rounds are bounded by the number of nodes.
        for _round in range(2 * len(plan.order) + 8):
            if not scheduler.halted and scheduler.pending:
                progress.halt_reason = _hold_for_alerts(
                    scheduler,
                    observe,
                    settings=settings,
                    alerts=progress.alerts,
                    clock=clock,
                    pause=pause,
                    cluster=cluster,
                )
                if progress.halt_reason:
                    break
                progress.last_decision = scheduler.decide(observe())
                progress.peak_unavailable = max(progress.peak_unavailable, progress.last_decision.unavailable_after)
                for name in progress.last_decision.start:
                    in_flight[executor.submit(worker.run, name)] = name
                if not in_flight:
                    progress.halt_reason = _wait_for_budget(
                        scheduler, observe, settings=settings, clock=clock, pause=pause
                    )
                    if progress.halt_reason:
                        break
                    continue
            if not in_flight:
                break
            _collect_finished(in_flight, plan=plan, scheduler=scheduler, runs=progress.runs)
        # Never abandon a node that is running: collect whatever is still in flight.
        for future in concurrent.futures.as_completed(list(in_flight)):
            progress.runs.append(future.result())
    if not progress.halt_reason and (in_flight or (scheduler.pending and not scheduler.halted)):
        progress.halt_reason = "the scheduler stopped making progress"


def _collect_finished(
    in_flight: Dict[concurrent.futures.Future, str],
    *,
    plan: RolloutPlan,
    scheduler: ContinuousScheduler,
    runs: List[NodeRun],
) -> None:
    """Wait for at least one running node to finish; record each finished one and tell the scheduler."""
    finished, _pending = concurrent.futures.wait(in_flight, return_when=concurrent.futures.FIRST_COMPLETED)
    for future in sorted(finished, key=lambda item: plan.order.index(in_flight[item])):
        in_flight.pop(future)
        run = future.result()
        runs.append(run)
        if run.outcome == STATE_DONE:
            scheduler.node_finished(run.node)
        else:
            scheduler.node_failed(run.node)


def _hold_for_alerts(
    scheduler: ContinuousScheduler,
    observe: Callable[[], Dict[str, PoolNode]],
    *,
    settings: RolloutSettings,
    alerts: Dict[str, List[str]],
    clock: Callable[[], float],
    pause: Callable[[float], None],
    cluster: RolloutCluster,
) -> str:
    """Before the scheduler starts a node: hold while the alerts gate's alerts fire; the halt reason if they do
    not stop within its bound (nothing more starts; nodes under way finish). Records what held it in ``alerts``."""
    if settings.alerts is None:
        return ""
    starting = scheduler.peek(observe()).start
    if not starting:
        return ""
    what = f"before node {', '.join(starting)} of rollout {settings.name}"
    hold_node = getattr(cluster, "hold_node", None)

    def on_hold(firing: Sequence[FiringAlert]) -> None:
        # kubectl describe node says why the rollout waits before it.
        if hold_node is not None:
            message = f"Rollout {settings.name} holds {what} while alerts fire: " + ", ".join(
                alert.describe() for alert in firing
            )
            for name in starting:
                hold_node(name, message)

    try:
        held = settings.alerts.hold(what, clock=clock, pause=pause, on_hold=on_hold)
    except AlertsFiringError as err:
        alerts["firing"] = list(err.result.get("firing") or [])
        alerts["held_for"] = sorted({*alerts["held_for"], *alerts["firing"]})
        return err.msg
    except UnreadableOutputError as err:
        # Could not check is no pass: nothing more starts, and the halt says why.
        return f"the alerts gate could not read Prometheus before node {', '.join(starting)}: {err.msg}"
    alerts["held_for"] = sorted({*alerts["held_for"], *held["held_for"]})
    return ""


def _wait_for_budget(
    scheduler: ContinuousScheduler,
    observe: Callable[[], Dict[str, PoolNode]],
    *,
    settings: RolloutSettings,
    clock: Callable[[], float],
    pause: Callable[[float], None],
) -> str:
    """Nothing runs and nothing may start: wait (bounded) for the budget to free up; the halt reason if not."""
    try:
        wait_until(
            lambda: scheduler.peek(observe()),
            lambda decision: bool(decision.start),
            timeout=settings.budget_wait_timeout,
            sleep=settings.budget_wait_sleep,
            what="the capacity budget to allow another node",
            clock=clock,
            pause=pause,
        )
    except WaitTimeoutError as err:
        last = err.result.get("last")
        reason = last.blocked_reason if isinstance(last, StartDecision) else ""
        return f"no node may start ({reason or 'blocked'})"
    return ""


def _summary(plan: RolloutPlan, *, runs: Sequence[NodeRun], waiting: Mapping[str, str]) -> Dict[str, Any]:
    started = {run.node for run in runs}
    timeline = [run.as_dict() for run in runs]
    timeline += [
        NodeRun(node=name, action=ACTION_SKIP, outcome="skipped", why=plan.dispositions[name].why).as_dict()
        for name in plan.skipped
    ]
    not_started = [name for name in plan.order if name not in started]
    not_granted = [run.node for run in runs if run.outcome == STATE_NOT_GRANTED]
    timeline += [
        NodeRun(
            node=name,
            action=plan.dispositions[name].action,
            outcome="not-started",
            why=waiting.get(name, plan.dispositions[name].why),
        ).as_dict()
        for name in not_started
    ]
    return {
        "nodes_done": [run.node for run in runs if run.outcome == STATE_DONE],
        "nodes_failed": [run.node for run in runs if run.outcome == STATE_FAILED] + list(plan.halted_by),
        "nodes_released": [run.node for run in runs if run.outcome == STATE_RELEASED],
        "nodes_skipped": list(plan.skipped),
        "nodes_done_earlier": list(plan.done_earlier),
        "nodes_not_started": not_granted + not_started,
        "nodes_not_granted": not_granted,
        "max_unavailable": plan.budget.max_unavailable,
        "timeline": timeline,
    }


def run_rollout(
    api: KubeApi,
    *,
    settings: RolloutSettings,
    targets: Sequence[str],
    steps: Sequence[NodeStep],
    pool_selector: str = "",
    check_mode: bool = False,
) -> Dict[str, Any]:
    """Run a rollout against the cluster; the progress lives on the Nodes of the pool."""
    cluster = KubeRolloutCluster(api, settings=settings, pool_selector=pool_selector)
    return execute_rollout(cluster, settings=settings, targets=targets, steps=steps, check_mode=check_mode, api=api)


# -- ready-made steps --------------------------------------------------------------------------------


def drain_step(
    api: KubeApi, *, selection: PodSelection, timeout: float, sleep: float = 5.0, name: str = "evict-pods"
) -> NodeStep:
    """Evict the selected pods (retrying PDB refusals) and wait until they have left."""

    def run(context: StepContext) -> Dict[str, Any]:
        return drain_pods(api, context.node_name, selection=selection, timeout=timeout, sleep=sleep).as_dict()

    what = [
        label
        for label, enabled in (
            ("all pods", selection.all_pods),
            ("GPU pods", selection.gpu),
            ("secondary-network pods", selection.secondary_network),
            (f"pods matching {selection.label_selector}", bool(selection.label_selector)),
        )
        if enabled
    ]
    return NodeStep(
        name=name,
        run=run,
        description=f"evict {' and '.join(what)} (DaemonSet and mirror pods stay), retrying PDB refusals "
        f"for up to {timeout:.0f}s, and wait until they are gone",
    )


def wait_ready_step(api: KubeApi, *, timeout: float, sleep: float = 10.0, name: str = "wait-node-ready") -> NodeStep:
    def run(context: StepContext) -> Dict[str, Any]:
        outcome = wait_for_node_ready(api, context.node_name, timeout=timeout, sleep=sleep)
        return {"elapsed": round(outcome.elapsed, 3)}

    return NodeStep(name=name, run=run, description=f"wait up to {timeout:.0f}s for the node to be Ready")


def wait_for_jobs_step(
    api: KubeApi,
    *,
    pod_selector: str,
    timeout: float,
    sleep: float = 10.0,
    proceed_on_timeout: bool = False,
    name: str = "wait-for-jobs",
) -> NodeStep:
    def run(context: StepContext) -> Dict[str, Any]:
        waited = wait_for_jobs(
            api,
            context.node_name,
            pod_selector=pod_selector,
            timeout=timeout,
            sleep=sleep,
            proceed_on_timeout=proceed_on_timeout,
        )
        return {
            "elapsed": round(waited.elapsed, 3),
            "timed_out": waited.timed_out,
            "still_running": waited.still_running,
        }

    after = "then go on" if proceed_on_timeout else "then fail"
    return NodeStep(
        name=name,
        run=run,
        description=f"wait up to {timeout:.0f}s for pods matching {pod_selector} on the node to finish, {after}",
    )
