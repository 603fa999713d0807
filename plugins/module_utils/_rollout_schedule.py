# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Which node goes next in a rollout (collection-internal, pure).

The one place that decides what starts: given the nodes running, finished and
failed, and the pool as observed now, ``next_nodes_to_start`` names the nodes
that may start at this moment. The executor calls it again each time a node
finishes, so scheduling is continuous: a freed slot is filled at once, never
held back until a whole batch is over.

Rules, in the order they apply:

- a failed node halts the rollout: nothing new starts;
- canary nodes run first; nothing else starts until every canary is done
  (the one deliberate barrier: a canary proves the change before it spreads).
  Nodes resumed from an interrupted run are exempt: they are already away;
- at most ``max_parallel`` nodes run at once (0: no cap besides the budget);
- the capacity budget: nodes of the pool that are cordoned or NotReady, plus
  the running and failed nodes, never exceed ``max_unavailable``. A node that
  is already unavailable costs nothing to start (it is away anyway), as the
  GPU Operator lets hand-cordoned nodes proceed without a free slot;
- failure domains: at most ``max_per_domain`` unavailable nodes per domain
  (a node label such as a rack or rail), counted the same way;
- within those limits, the earliest pending nodes in the rollout order start.
  The order is fixed up front: resumed nodes, canaries as given, then the
  rest by failure domain and name (names compare with numbers as numbers, so
  gpu-worker-2 precedes gpu-worker-10), or as given.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass, field
from typing import Any, Collection, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_budget import (
    node_is_unavailable,
    node_name,
)

ORDER_BY_DOMAIN = "domain"
ORDER_AS_GIVEN = "given"
ORDERS = (ORDER_BY_DOMAIN, ORDER_AS_GIVEN)

# Domain of nodes that lack the failure-domain label: they share one domain, so
# the per-domain cap still holds for them (the safe reading of "unknown rack").
UNLABELLED_DOMAIN = ""

_DIGITS = re.compile(r"(\d+)")


@dataclass(frozen=True)
class PoolNode:
    """What the scheduler needs to know about one node of the pool."""

    name: str
    domain: str = UNLABELLED_DOMAIN
    unavailable: bool = False


@dataclass(frozen=True)
class ScheduleLimits:
    max_unavailable: int
    max_parallel: int = 0
    max_per_domain: int = 0

    def __post_init__(self) -> None:
        if self.max_unavailable < 0 or self.max_parallel < 0 or self.max_per_domain < 0:
            raise InvalidInputError("maxUnavailable, the parallelism cap and the per-domain cap cannot be negative")


@dataclass(frozen=True)
class StartDecision:
    """What may start now, and why every other pending node waits."""

    start: Tuple[str, ...]
    waiting: Dict[str, str]
    halted: bool = False
    complete: bool = False
    unavailable_after: int = 0

    @property
    def blocked_reason(self) -> str:
        """Why nothing starts, when nothing does (the reason of the first waiting node)."""
        if self.start or not self.waiting:
            return ""
        return next(iter(self.waiting.values()))


def natural_key(name: str) -> Tuple[Any, ...]:
    """Sort key comparing digit runs as numbers: gpu-worker-2 < gpu-worker-10."""
    return tuple(int(part) if part.isdigit() else part for part in _DIGITS.split(name))


def pool_node_from_object(node: Mapping[str, Any], *, domain_label: str = "") -> PoolNode:
    labels = (node.get("metadata") or {}).get("labels") or {}
    domain = str(labels.get(domain_label, UNLABELLED_DOMAIN)) if domain_label else UNLABELLED_DOMAIN
    return PoolNode(name=node_name(node), domain=domain, unavailable=node_is_unavailable(node))


def pool_from_objects(nodes: Iterable[Mapping[str, Any]], *, domain_label: str = "") -> Dict[str, PoolNode]:
    pool = {}
    for node in nodes:
        entry = pool_node_from_object(node, domain_label=domain_label)
        pool[entry.name] = entry
    return pool


def rollout_order(
    targets: Sequence[str],
    *,
    pool: Mapping[str, PoolNode],
    canaries: Sequence[str] = (),
    resumed: Collection[str] = (),
    order: str = ORDER_BY_DOMAIN,
) -> List[str]:
    """The fixed priority order of a rollout: resumed nodes, canaries as given, then the rest."""
    if order not in ORDERS:
        raise InvalidInputError(f"Unknown rollout order {order!r}; expected one of {', '.join(ORDERS)}")
    if len(set(targets)) != len(targets):
        duplicates = sorted({name for name in targets if list(targets).count(name) > 1})
        raise InvalidInputError(f"Nodes listed more than once: {', '.join(duplicates)}")
    target_set = set(targets)
    strangers = [name for name in canaries if name not in target_set]
    if strangers:
        raise InvalidInputError(f"Canary nodes that are not rollout targets: {', '.join(strangers)}")
    first = [name for name in targets if name in resumed]
    first += [name for name in canaries if name not in resumed]
    placed = set(first)
    rest = [name for name in targets if name not in placed]
    if order == ORDER_BY_DOMAIN:

        def domain_then_name(name: str) -> Tuple[Any, ...]:
            domain = pool[name].domain if name in pool else UNLABELLED_DOMAIN
            # Unlabelled nodes go last: labelled domains are the ones a person planned.
            return (domain == UNLABELLED_DOMAIN, natural_key(domain), natural_key(name))

        rest.sort(key=domain_then_name)
    return first + rest


def next_nodes_to_start(
    *,
    order: Sequence[str],
    pool: Mapping[str, PoolNode],
    limits: ScheduleLimits,
    running: Collection[str] = (),
    finished: Collection[str] = (),
    failed: Collection[str] = (),
    canaries: Collection[str] = (),
    resumed: Collection[str] = (),
) -> StartDecision:
    """The nodes that may start now (in rollout order) and why the others wait.

    ``pool`` is the node pool as observed now (its size is not used here: the
    budget is already a count). Targets missing from the pool count as
    unavailable, in the unlabelled domain.
    """
    running_set, finished_set, failed_set = set(running), set(finished), set(failed)
    pending = [name for name in order if name not in running_set | finished_set | failed_set]
    if failed_set:
        reason = f"halted: {', '.join(sorted(failed_set, key=natural_key))} failed"
        return StartDecision(start=(), waiting=dict.fromkeys(pending, reason), halted=True)
    if not pending:
        return StartDecision(start=(), waiting={}, complete=not running_set)

    away: Set[str] = {name for name, node in pool.items() if node.unavailable}
    away |= running_set | failed_set
    away |= {name for name in order if name not in pool}

    def domain_of(name: str) -> str:
        return pool[name].domain if name in pool else UNLABELLED_DOMAIN

    away_per_domain: Dict[str, int] = {}
    for name in away:
        away_per_domain[domain_of(name)] = away_per_domain.get(domain_of(name), 0) + 1

    canaries_open = [name for name in canaries if name not in finished_set]
    slots = limits.max_parallel - len(running_set) if limits.max_parallel else len(pending)
    start: List[str] = []
    waiting: Dict[str, str] = {}
    for name in pending:
        already_away = name in away
        if canaries_open and name not in canaries and name not in resumed:
            waiting[name] = f"canary: waiting for {', '.join(canaries_open)} to finish"
            continue
        if slots <= 0:
            waiting[name] = f"parallelism: {limits.max_parallel} nodes already running"
            continue
        if not already_away and len(away) + 1 > limits.max_unavailable:
            waiting[name] = f"budget: {len(away)} of at most {limits.max_unavailable} nodes unavailable"
            continue
        domain = domain_of(name)
        if limits.max_per_domain and not already_away and away_per_domain.get(domain, 0) + 1 > limits.max_per_domain:
            waiting[name] = (
                f"failure domain {domain or '(unlabelled)'}: "
                f"{away_per_domain.get(domain, 0)} of at most {limits.max_per_domain} nodes unavailable"
            )
            continue
        start.append(name)
        slots -= 1
        if not already_away:
            away.add(name)
            away_per_domain[domain] = away_per_domain.get(domain, 0) + 1
    return StartDecision(start=tuple(start), waiting=waiting, unavailable_after=len(away))


@dataclass
class ContinuousScheduler:
    """The state of one rollout run around ``next_nodes_to_start``: who runs, who finished, who failed."""

    order: Tuple[str, ...]
    limits: ScheduleLimits
    canaries: Tuple[str, ...] = ()
    resumed: Tuple[str, ...] = ()
    running: Set[str] = field(default_factory=set)
    finished: Set[str] = field(default_factory=set)
    failed: Set[str] = field(default_factory=set)

    def decide(self, pool: Mapping[str, PoolNode]) -> StartDecision:
        """Decide from the pool as observed now, and count the chosen nodes as running."""
        decision = next_nodes_to_start(
            order=self.order,
            pool=pool,
            limits=self.limits,
            running=self.running,
            finished=self.finished,
            failed=self.failed,
            canaries=self.canaries,
            resumed=self.resumed,
        )
        self.running.update(decision.start)
        return decision

    def peek(self, pool: Mapping[str, PoolNode]) -> StartDecision:
        """Like ``decide`` but changes nothing (to wait for the budget to free up)."""
        return next_nodes_to_start(
            order=self.order,
            pool=pool,
            limits=self.limits,
            running=self.running,
            finished=self.finished,
            failed=self.failed,
            canaries=self.canaries,
            resumed=self.resumed,
        )

    def node_finished(self, name: str) -> None:
        self.running.discard(name)
        self.finished.add(name)

    def node_failed(self, name: str) -> None:
        self.running.discard(name)
        self.failed.add(name)

    @property
    def halted(self) -> bool:
        return bool(self.failed)

    @property
    def pending(self) -> List[str]:
        return [name for name in self.order if name not in self.running | self.finished | self.failed]


@dataclass(frozen=True)
class SimulatedSchedule:
    """A predicted run: when each node starts and ends, assuming every node succeeds."""

    starts: Tuple[Tuple[float, str], ...]
    ends: Dict[str, float]
    makespan: float
    peak_running: int
    peak_unavailable: int
    never_started: Tuple[str, ...]
    blocked_reason: str = ""


def simulate_schedule(
    *,
    order: Sequence[str],
    pool: Mapping[str, PoolNode],
    limits: ScheduleLimits,
    durations: Optional[Mapping[str, float]] = None,
    canaries: Collection[str] = (),
    resumed: Collection[str] = (),
    stay_unavailable: Collection[str] = (),
) -> SimulatedSchedule:
    """Run the scheduler against a clock instead of a cluster (the plan in check mode).

    Each node takes ``durations[name]`` (default 1); a finished node becomes
    available again unless it is in ``stay_unavailable`` (it was cordoned before
    the rollout, so it is left cordoned). Other nodes keep their availability.
    """
    scheduler = ContinuousScheduler(order=tuple(order), limits=limits, canaries=tuple(canaries), resumed=tuple(resumed))
    view = dict(pool)
    now = 0.0
    finishing: List[Tuple[float, int, str]] = []
    starts: List[Tuple[float, str]] = []
    ends: Dict[str, float] = {}
    peak_running = 0
    peak_unavailable = 0
    blocked_reason = ""
    for sequence in range(2 * len(order) + 1):
        decision = scheduler.decide(view)
        for name in decision.start:
            starts.append((now, name))
            heapq.heappush(finishing, (now + (durations or {}).get(name, 1.0), sequence, name))
        peak_running = max(peak_running, len(scheduler.running))
        peak_unavailable = max(peak_unavailable, decision.unavailable_after)
        if not finishing:
            blocked_reason = decision.blocked_reason
            break
        now, _sequence, name = heapq.heappop(finishing)
        scheduler.node_finished(name)
        ends[name] = now
        if name in view:
            view[name] = PoolNode(name=name, domain=view[name].domain, unavailable=name in stay_unavailable)
    return SimulatedSchedule(
        starts=tuple(starts),
        ends=ends,
        makespan=max(ends.values(), default=0.0),
        peak_running=peak_running,
        peak_unavailable=peak_unavailable,
        never_started=tuple(scheduler.pending),
        blocked_reason=blocked_reason,
    )
