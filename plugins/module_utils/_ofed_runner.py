# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""MOFED rollouts against the cluster: the I/O part behind ``ofed_rolling_reload`` (collection-internal).

``rolling`` mode is the Network Operator's documented manual upgrade done by
the collection's rollout engine (``_rollout_engine``), node by node within one
capacity budget: cordon, wait for the selected jobs, evict the pods that use a
secondary network (their NICs vanish while the driver reloads), delete the
MOFED pod (the DaemonSet is OnDelete), wait for the new pod Ready at the
target version, uncordon. ``auto_upgrade`` mode hands the node work to the
operator's upgrade controller (``upgradePolicy.autoUpgrade``) and paces it:
nodes that must wait carry the upstream skip label.

Decisions come from ``_ofed_plan`` (pure); this module reads and writes.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._alerts import AlertsGate
from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import (
    GpuFleetError,
    InvalidInputError,
    KubeApiError,
    RolloutHaltedError,
    WaitTimeoutError,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gitops import deferred_change
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_events import record_event
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_nodes import PodSelection, parse_label_selector
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import (
    DAEMONSETS,
    EVENTS,
    NIC_CLUSTER_POLICIES,
    NODES,
    PODS,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._node_maintenance import (
    RDMA_EVICTION_FILTER,
    MaintenanceChoice,
    drain_spec,
    resolve_settings,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._ofed_plan import (
    DEFAULT_NAMESPACE,
    MODE_AUTO_UPGRADE,
    MODE_ROLLING,
    MODES,
    MOFED_POD_SELECTOR,
    SKIP_LABEL,
    AutoNode,
    AutoUpgradeSettings,
    MofedPod,
    TargetSelection,
    auto_node,
    daemonsets_render,
    mofed_pods_by_node,
    new_pod_ready,
    ofed_diff,
    ofed_policy_patch,
    pod_failure,
    select_targets,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._ofed_safety import (
    SafetyOptions,
    check_reload_safety,
    validate_safety_options,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_budget import (
    CapacityBudget,
    MaxUnavailable,
    capacity_budget,
    node_name,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_engine import (
    STATE_DONE,
    STATE_FAILED,
    KubeRolloutCluster,
    NodeStep,
    ProgressKeys,
    RolloutSettings,
    StepContext,
    done_earlier,
    drain_step,
    execute_rollout,
    unfinished_nodes,
    wait_for_jobs_step,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_schedule import (
    PoolNode,
    ScheduleLimits,
    natural_key,
    pool_from_objects,
    rollout_order,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._skip_label import (
    HOLD_HALT,
    OFED_DRIVER,
    SkipLabelPacer,
    hold_not_started,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import iso, utc_now
from ansible_collections.gpufleet.upgrade.plugins.module_utils._wait import wait_until

_POLICY_CONFLICT_RETRIES = 5
# The one step that changes a node: the steps before it (cordon, wait-for-jobs, evict-pods) only prepare it.
RELOAD_STEP = "reload-mofed"


@dataclass(frozen=True)
class OfedRolloutOptions:
    """The module's options, validated."""

    target_version: str
    mode: str = MODE_ROLLING
    namespace: str = DEFAULT_NAMESPACE
    nic_cluster_policy: str = ""
    mofed_pod_selector: str = MOFED_POD_SELECTOR
    node_selector: str = ""
    nodes: Tuple[str, ...] = ()
    canary_selector: str = ""
    max_unavailable: MaxUnavailable = 1
    max_parallel: int = 1
    failure_domain_label: str = ""
    max_per_domain: int = 1
    job_selector: str = ""
    job_timeout: int = 300
    evict_secondary_network: bool = True
    evict_pod_selector: str = ""
    evict_force: bool = False
    evict_delete_emptydir_data: bool = False
    eviction_timeout: int = 300
    reload_timeout: int = 1200
    restart_limit: int = 3
    budget_timeout: int = 600
    wait: bool = True
    wait_timeout: int = 7200
    wait_sleep: float = 5.0
    rollout_name: str = "ofed"
    # Undo a rollout to another version: nodes it stopped before reload-mofed are released, not run.
    rollback: bool = False
    check_mode: bool = False
    # Return what changes, before and after (diff mode).
    diff: bool = False
    # The alerts gate, asked before each node (rolling mode).
    alerts: Optional[AlertsGate] = None
    # Drain through the NVIDIA Maintenance Operator (rolling mode; node_maintenance).
    node_maintenance: MaintenanceChoice = field(default_factory=MaintenanceChoice)
    # GitOps mode (docs/gitops.md): "Kind/name" of the objects Argo CD writes from Git; the NicClusterPolicy's
    # change is then returned for a commit (gitops_changes), and a run after the sync (gitops_synced) rolls it out.
    gitops_managed: Tuple[str, ...] = ()
    gitops_synced: bool = False
    # Hazards of a reload on a node (primary interface on ConnectX, storage modules): where read, what is allowed.
    safety: SafetyOptions = field(default_factory=SafetyOptions)

    def __post_init__(self) -> None:
        if not self.target_version:
            raise InvalidInputError("target_version is required")
        if self.mode not in MODES:
            raise InvalidInputError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        for selector in (self.node_selector, self.canary_selector, self.job_selector, self.evict_pod_selector):
            parse_label_selector(selector)
        ProgressKeys(self.rollout_name)
        validate_safety_options(self.safety)
        if min(self.job_timeout, self.eviction_timeout, self.reload_timeout, self.budget_timeout) < 0:
            raise InvalidInputError("Timeouts cannot be negative")
        if self.wait_sleep <= 0 or self.max_parallel < 0 or self.max_per_domain < 0 or self.restart_limit < 0:
            raise InvalidInputError("wait_sleep must be > 0; max_parallel, max_per_domain, restart_limit >= 0")

    @property
    def settings(self) -> RolloutSettings:
        return RolloutSettings(
            name=self.rollout_name,
            target=self.target_version,
            max_unavailable=self.max_unavailable,
            max_parallel=self.max_parallel,
            failure_domain_label=self.failure_domain_label,
            max_per_domain=self.max_per_domain,
            budget_wait_timeout=float(self.budget_timeout),
            budget_wait_sleep=self.wait_sleep,
            changing_step=RELOAD_STEP,
            undo_other_targets=self.rollback,
            alerts=self.alerts,
        )

    @property
    def pod_selection(self) -> Optional[PodSelection]:
        if not (self.evict_secondary_network or self.evict_pod_selector):
            return None
        return PodSelection(
            secondary_network=self.evict_secondary_network,
            label_selector=self.evict_pod_selector,
            force=self.evict_force,
            delete_emptydir_data=self.evict_delete_emptydir_data,
        )


@dataclass
class ClusterView:
    """What the runner read before deciding anything."""

    policy: Dict[str, Any]
    nodes: List[Dict[str, Any]]
    pods: Dict[str, MofedPod]
    selection: TargetSelection
    policy_patch: Dict[str, Any] = field(default_factory=dict)
    safety: List[Dict[str, Any]] = field(default_factory=list)
    refusal: str = ""


# -- reading -------------------------------------------------------------------------------------------------


def find_policy(api: KubeApi, name: str) -> Dict[str, Any]:
    if name:
        policy = api.get(NIC_CLUSTER_POLICIES, name)
        if policy is None:
            raise InvalidInputError(f"NicClusterPolicy {name} does not exist")
        return policy
    policies = api.list(NIC_CLUSTER_POLICIES)
    if len(policies) != 1:
        found = ", ".join(node_name(policy) for policy in policies) or "none"
        raise InvalidInputError(f"Expected one NicClusterPolicy, found {found}: name it with nic_cluster_policy")
    return policies[0]


def list_mofed_pods(api: KubeApi, options: OfedRolloutOptions, *, node: str = "") -> List[Dict[str, Any]]:
    return api.list(
        PODS,
        namespace=options.namespace,
        label_selector=options.mofed_pod_selector,
        field_selector=f"spec.nodeName={node}" if node else None,
    )


def read_cluster(api: KubeApi, options: OfedRolloutOptions) -> ClusterView:
    policy = find_policy(api, options.nic_cluster_policy)
    nodes = api.list(NODES)
    pods = mofed_pods_by_node(list_mofed_pods(api, options))
    keys = ProgressKeys(options.rollout_name)
    unfinished = unfinished_nodes(nodes, keys) if options.mode == MODE_ROLLING else []
    selection = select_targets(
        nodes=nodes,
        pods=pods,
        version=options.target_version,
        node_selector=options.node_selector,
        node_names=options.nodes,
        canary_selector=options.canary_selector,
        unfinished=unfinished,
    )
    auto = _auto_settings(options) if options.mode == MODE_AUTO_UPGRADE else None
    patch = ofed_policy_patch(policy, version=options.target_version, auto_upgrade=auto)
    # A rollback reloads the nodes too: the same hazards apply.
    findings, refused = check_reload_safety(
        nodes=nodes, targets=selection.targets, policy=policy, options=options.safety
    )
    return ClusterView(policy=policy, nodes=nodes, pods=pods, selection=selection, policy_patch=patch,
                       safety=findings, refusal=refused)  # fmt: skip


# -- writing the NicClusterPolicy ------------------------------------------------------------------------------


def apply_policy(api: KubeApi, options: OfedRolloutOptions, view: ClusterView) -> List[Dict[str, Any]]:
    """Merge-patch the NicClusterPolicy, guarded by resourceVersion; re-read and recompute on a conflict."""
    sent: List[Dict[str, Any]] = []
    policy = view.policy
    patch = view.policy_patch
    for attempt in range(_POLICY_CONFLICT_RETRIES):
        if not patch:
            return sent
        body = {**patch, "metadata": {"resourceVersion": (policy.get("metadata") or {}).get("resourceVersion")}}
        try:
            api.patch(NIC_CLUSTER_POLICIES, node_name(policy), body, patch_type="merge")
            sent.append({"kind": "NicClusterPolicy", "name": node_name(policy), "patch": patch})
            return sent
        except KubeApiError as err:
            if err.status != 409 or attempt == _POLICY_CONFLICT_RETRIES - 1:
                raise
        policy = find_policy(api, node_name(policy))
        patch = ofed_policy_patch(
            policy,
            version=options.target_version,
            auto_upgrade=_auto_settings(options) if options.mode == MODE_AUTO_UPGRADE else None,
        )
    return sent


def _auto_settings(options: OfedRolloutOptions) -> AutoUpgradeSettings:
    return AutoUpgradeSettings(
        max_parallel_upgrades=options.max_parallel,
        drain_pod_selector=options.evict_pod_selector,
        drain_timeout_seconds=options.eviction_timeout,
        wait_pod_selector=options.job_selector,
        wait_timeout_seconds=options.job_timeout,
    )


def wait_for_daemonsets(api: KubeApi, options: OfedRolloutOptions) -> float:
    """Wait until every MOFED DaemonSet renders the target (the operator re-renders after the policy changes)."""

    def behind() -> List[str]:
        owners = set()
        for pod in list_mofed_pods(api, options):
            for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
                if ref.get("kind") == "DaemonSet":
                    owners.add(str(ref.get("name")))
        daemonsets = [ds for ds in api.list(DAEMONSETS, namespace=options.namespace) if node_name(ds) in owners]
        return daemonsets_render(daemonsets, version=options.target_version) if daemonsets else ["(none found)"]

    try:
        outcome = wait_until(
            behind,
            lambda names: not names,
            timeout=float(options.reload_timeout),
            sleep=options.wait_sleep,
            what=f"the MOFED DaemonSets to render {options.target_version}",
        )
    except WaitTimeoutError as err:
        raise WaitTimeoutError(
            f"{err.msg}; still behind: {', '.join(err.result.get('last') or [])}. Is the Network Operator running "
            "and does the NicClusterPolicy's ofedDriver render this version?",
            result={"elapsed": err.result.get("elapsed")},
        ) from err
    return outcome.elapsed


# -- rolling mode: the per-node reload step -------------------------------------------------------------------


def reload_mofed_step(api: KubeApi, options: OfedRolloutOptions) -> NodeStep:
    """Delete the node's MOFED pod unless it already runs the target, then wait for the new one Ready."""

    def run(context: StepContext) -> Dict[str, Any]:
        version = options.target_version
        replaced: List[str] = []
        for pod in mofed_pods_by_node(list_mofed_pods(api, options, node=context.node_name)).values():
            if not pod.terminating and not pod.runs(version):
                api.delete(PODS, pod.name, namespace=pod.namespace)
                replaced.append(pod.uid)

        def observe() -> Optional[MofedPod]:
            pods = mofed_pods_by_node(list_mofed_pods(api, options, node=context.node_name))
            pod = pods.get(context.node_name)
            if pod is not None and pod.uid not in replaced and pod.runs(version):
                failure = pod_failure(pod, restart_limit=options.restart_limit)
                if failure:
                    raise RolloutHaltedError(failure, node=context.node_name, result={"pod": pod.key})
            return pod

        try:
            outcome = wait_until(
                observe,
                lambda pod: new_pod_ready(pod, version=version, replaced_uids=replaced),
                timeout=float(options.reload_timeout),
                sleep=options.wait_sleep,
                what=f"a Ready MOFED pod at {version} on node {context.node_name}",
            )
        except WaitTimeoutError as err:
            last = err.result.get("last")
            state = "no MOFED pod" if last is None else f"{last.key} ({last.image}, ready={last.ready})"
            raise WaitTimeoutError(
                f"{err.msg}; last seen: {state}", result={"elapsed": err.result.get("elapsed")}
            ) from err
        new_pod = outcome.value
        return {
            "deleted": len(replaced),
            "pod": new_pod.key if new_pod is not None else "",
            "image": new_pod.image if new_pod is not None else "",
            "elapsed": round(outcome.elapsed, 3),
        }

    return NodeStep(
        name=RELOAD_STEP,
        run=run,
        description=(
            f"delete the MOFED pod unless it already runs {options.target_version} (the DaemonSet is OnDelete), "
            f"wait up to {options.reload_timeout}s for the new pod Ready at {options.target_version}; "
            f"a pod crash-looping past {options.restart_limit} restarts fails the node"
        ),
    )


def rolling_steps(api: KubeApi, options: OfedRolloutOptions) -> List[NodeStep]:
    steps: List[NodeStep] = []
    if options.job_selector:
        # Upstream waitForCompletion moves on after its timeout (not a failure); so does this step.
        steps.append(
            wait_for_jobs_step(
                api,
                pod_selector=options.job_selector,
                timeout=float(options.job_timeout),
                sleep=options.wait_sleep,
                proceed_on_timeout=True,
            )
        )
    selection = options.pod_selection
    if selection is not None:
        steps.append(
            drain_step(api, selection=selection, timeout=float(options.eviction_timeout), sleep=options.wait_sleep)
        )
    steps.append(reload_mofed_step(api, options))
    return steps


class MofedRolloutCluster(KubeRolloutCluster):
    """The engine's view of the cluster, with the pool limited to the nodes that host a MOFED pod."""

    def __init__(self, api: KubeApi, *, settings: RolloutSettings, pool: Sequence[str]) -> None:
        super().__init__(api, settings=settings)
        self.pool = set(pool)

    def pool_nodes(self) -> List[Dict[str, Any]]:
        return [node for node in super().pool_nodes() if node_name(node) in self.pool]


def failures_of(timeline: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    return [
        {"node": entry["node"], "step": entry.get("failed_step", ""), "reason": entry.get("error", "")}
        for entry in timeline
        if entry.get("outcome") == STATE_FAILED
    ]


def maintenance_drain(options: OfedRolloutOptions) -> Optional[Dict[str, Any]]:
    """What the Maintenance Operator drains: RDMA pods when secondary-network pods are evicted (the evict step
    after it takes those it cannot see by resource); nothing (a cordon only) when the module evicts nothing."""
    if options.pod_selection is None:
        return None
    filters = (RDMA_EVICTION_FILTER,) if options.evict_secondary_network else ()
    return drain_spec(
        resource_filters=filters,
        timeout=float(options.eviction_timeout),
        force=options.evict_force,
        delete_emptydir=options.evict_delete_emptydir_data,
        pod_selector="" if options.evict_secondary_network else options.evict_pod_selector,
    )


def run_rolling(api: KubeApi, options: OfedRolloutOptions, view: ClusterView) -> Dict[str, Any]:
    maintenance = resolve_settings(
        api, options.node_maintenance, drain=maintenance_drain(options), sleep=options.wait_sleep
    )
    settings = dataclasses.replace(options.settings, canary_nodes=view.selection.canaries, maintenance=maintenance)
    cluster = MofedRolloutCluster(api, settings=settings, pool=view.selection.pool)
    return execute_rollout(
        cluster,
        settings=settings,
        targets=list(view.selection.targets),
        steps=rolling_steps(api, options),
        check_mode=options.check_mode,
        api=api,
    )


# -- auto_upgrade mode ---------------------------------------------------------------------------------------------


@dataclass
class AutoTimeline:
    """State labels each node showed, in the order this run saw them."""

    states: Dict[str, List[Dict[str, str]]] = field(default_factory=dict)
    released: Dict[str, str] = field(default_factory=dict)

    def observe(self, nodes: Sequence[AutoNode], *, moment: str) -> None:
        for node in nodes:
            seen = self.states.setdefault(node.name, [])
            if not seen or seen[-1]["state"] != node.state:
                seen.append({"state": node.state, "observed_at": moment})

    def as_list(self, order: Sequence[str], *, outcome: Callable[[str], str]) -> List[Dict[str, Any]]:
        return [
            {
                "node": name,
                "outcome": outcome(name),
                "released_at": self.released.get(name, ""),
                "states": self.states.get(name, []),
            }
            for name in order
        ]


@dataclass(frozen=True)
class _AutoSchedule:
    """The pacing of an ``auto_upgrade`` run as its first read implies it (pure data, computed once)."""

    budget: CapacityBudget
    pacer: SkipLabelPacer
    # Every node of the pool as the first read saw it.
    observed: Dict[str, AutoNode]
    # Targets under a skip label someone else set: left out of the order, never released.
    held_by_others: List[str]
    pool: Dict[str, PoolNode]

    @property
    def order(self) -> Tuple[str, ...]:
        return self.pacer.order


def _auto_schedule(options: OfedRolloutOptions, view: ClusterView) -> _AutoSchedule:
    """Budget, limits and order of the targets the controller may take, from the cluster as read."""
    by_name = {node_name(node): node for node in view.nodes}
    pool_objects = [by_name[name] for name in view.selection.pool]
    budget = capacity_budget(max_unavailable=options.max_unavailable, pool_nodes=pool_objects)
    limits = ScheduleLimits(
        max_unavailable=budget.max_unavailable,
        max_parallel=options.max_parallel,
        max_per_domain=options.max_per_domain if options.failure_domain_label else 0,
    )
    version = options.target_version
    observed = {name: auto_node(by_name[name], view.pods.get(name), version=version) for name in view.selection.pool}
    held_by_others = sorted(
        (name for name in view.selection.targets if observed[name].held and not observed[name].held_by_us),
        key=natural_key,
    )
    targets = [name for name in view.selection.targets if name not in held_by_others]
    pool = pool_from_objects(pool_objects, domain_label=options.failure_domain_label)
    canaries = tuple(n for n in view.selection.canaries if n in targets)
    order = rollout_order(targets, pool=pool, canaries=list(canaries))
    return _AutoSchedule(
        budget=budget,
        pacer=SkipLabelPacer(order=tuple(order), limits=limits, canaries=canaries),
        observed=observed,
        held_by_others=held_by_others,
        pool=pool,
    )


def _progress(nodes: Mapping[str, AutoNode], names: Sequence[str]) -> Dict[str, str]:
    return {name: nodes[name].progress for name in names if name in nodes}


def _held(nodes: Mapping[str, AutoNode], names: Sequence[str]) -> List[str]:
    return [name for name in names if name in nodes and nodes[name].held]


def _nodes_to_hold(pool: Sequence[str], schedule: _AutoSchedule, *, start_now: Sequence[str]) -> List[str]:
    """Every node of the pool that has not started and is not released now waits under the skip label.

    A node the controller already works on is left alone: a skip label would not stop it, only hide it.
    """
    observed = schedule.observed
    return list(hold_not_started(_progress(observed, pool), held=[*_held(observed, pool), *start_now]))


@dataclass
class _AutoPacer:
    """Releases the nodes of an ``auto_upgrade`` run as the budget allows, and records what it saw (the I/O around
    ``SkipLabelPacer``, which decides).

    One object because deciding, releasing and observing share what this run released: a node it
    released counts as running even while its state label still says upgrade-required.
    """

    api: KubeApi
    options: OfedRolloutOptions
    schedule: _AutoSchedule
    pool: Sequence[str]
    now: Callable[[], datetime.datetime]
    timeline: AutoTimeline = field(default_factory=AutoTimeline)
    released_now: List[str] = field(default_factory=list)

    def decide(
        self, nodes: Mapping[str, AutoNode], current_pool: Mapping[str, Any]
    ) -> Tuple[List[str], Dict[str, str]]:
        """The nodes to release now, and why the others wait."""
        order = self.schedule.order
        pace = self.schedule.pacer.pace(
            _progress(nodes, order),
            held_by_us=[name for name in order if name in nodes and nodes[name].held_by_us],
            released=self.released_now,
            held=_held(nodes, order),
            pool=current_pool,
        )
        return list(pace.release), pace.waiting

    def release(self, names: Sequence[str]) -> None:
        for name in names:
            self.api.patch(NODES, name, OFED_DRIVER.release_patch(), patch_type="merge")
            self.timeline.released[name] = iso(self.now())
            self.released_now.append(name)

    def observe(self) -> Dict[str, AutoNode]:
        """Read the targets' states, halt at a failed one, release whatever the budget now allows."""
        nodes = {node_name(node): node for node in self.api.list(NODES)}
        pods = mofed_pods_by_node(list_mofed_pods(self.api, self.options))
        version = self.options.target_version
        order = self.schedule.order
        current = {name: auto_node(nodes[name], pods.get(name), version=version) for name in order if name in nodes}
        self.timeline.observe(list(current.values()), moment=iso(self.now()))
        self._halt_at_failed(current, pods)
        more, _waiting = self.decide(
            current,
            pool_from_objects(
                [nodes[name] for name in self.pool if name in nodes],
                domain_label=self.options.failure_domain_label,
            ),
        )
        self.release(more)
        if more:
            current.update({name: AutoNode(name, current[name].state, False, False, False) for name in more})
        return current

    def _halt_at_failed(self, current: Mapping[str, AutoNode], pods: Mapping[str, MofedPod]) -> None:
        """At the first failed target, hold every target not started (also one released a moment ago) and halt."""
        failed = [name for name in self.schedule.order if name in current and current[name].failed]
        if not failed:
            return
        order = self.schedule.order
        for name in self.schedule.pacer.to_hold(_progress(current, order), held=_held(current, order)):
            self.api.patch(NODES, name, OFED_DRIVER.hold_patch(HOLD_HALT), patch_type="merge")
        pod = pods.get(failed[0])
        reason = (pod_failure(pod, restart_limit=0) if pod is not None else "") or last_warning(self.api, failed[0])
        raise RolloutHaltedError(
            f"Node {failed[0]} is upgrade-failed ({reason}). The nodes not yet started are held with {SKIP_LABEL}=true",
            node=failed[0],
        )

    def all_done(self, nodes: Mapping[str, AutoNode]) -> bool:
        return all(nodes[name].done for name in self.schedule.order if name in nodes)

    def outcome(self, name: str) -> str:
        states = self.timeline.states.get(name) or [{"state": ""}]
        return states[-1]["state"] or "unknown"

    def timeline_list(self) -> List[Dict[str, Any]]:
        return self.timeline.as_list(self.schedule.order, outcome=self.outcome)


def run_auto_upgrade(
    api: KubeApi,
    options: OfedRolloutOptions,
    view: ClusterView,
    *,
    now: Callable[[], datetime.datetime] = utc_now,
    clock: Callable[[], float] = time.monotonic,
) -> Dict[str, Any]:
    """Hand the rollout to the operator's upgrade controller; hold nodes with the skip label to keep the budget."""
    started = clock()
    schedule = _auto_schedule(options, view)
    order = schedule.order
    pacer = _AutoPacer(api=api, options=options, schedule=schedule, pool=view.selection.pool, now=now)
    start_now, waiting = pacer.decide(schedule.observed, schedule.pool)
    to_hold = _nodes_to_hold(view.selection.pool, schedule, start_now=start_now)
    to_release = [name for name in start_now if schedule.observed[name].held_by_us]
    plan = {
        "mode": MODE_AUTO_UPGRADE,
        "order": order,
        "canaries": list(schedule.pacer.canaries),
        "budget": schedule.budget.as_dict(),
        "max_parallel": options.max_parallel,
        "starts_now": start_now,
        "hold": to_hold,
        "release": to_release,
        "held_by_others": schedule.held_by_others,
        "waiting": waiting,
        "policy_patch": view.policy_patch,
    }
    result: Dict[str, Any] = {
        "plan": plan,
        "changed": bool(to_hold or to_release or view.policy_patch) and bool(order or view.policy_patch),
        "halted": False,
        "halt_reason": "",
    }
    if options.check_mode or (not options.wait and not order):
        result["timeline"] = []
        return result
    for name in to_hold:
        api.patch(NODES, name, OFED_DRIVER.hold_patch(options.rollout_name), patch_type="merge")
    patches = apply_policy(api, options, view)
    result["patches"] = patches
    result["changed"] = bool(patches or to_hold or to_release or order)
    pacer.release(start_now)
    _await_auto_upgrade(pacer, result=result, started=started, clock=clock)
    return result


def _await_auto_upgrade(
    pacer: _AutoPacer, *, result: Dict[str, Any], started: float, clock: Callable[[], float]
) -> None:
    """Wait (when asked) until every target is upgrade-done, releasing nodes as the budget frees up.

    Fills in ``result``; on a failed node or a timeout raises RolloutHaltedError carrying it.
    """
    options = pacer.options
    try:
        if options.wait:
            wait_until(
                pacer.observe,
                pacer.all_done,
                timeout=float(options.wait_timeout),
                sleep=options.wait_sleep,
                what=f"every targeted node to reach upgrade-done at {options.target_version}",
            )
    except GpuFleetError as err:
        result.update(
            halted=True,
            halt_reason=err.msg,
            timeline=pacer.timeline_list(),
            elapsed=clock() - started,
        )
        result["failures"] = [
            {"node": entry["node"], "step": "auto-upgrade", "reason": err.msg}
            for entry in result["timeline"]
            if entry["outcome"] == "upgrade-failed"
        ]
        raise RolloutHaltedError(err.msg, node=getattr(err, "node", ""), result=result) from err
    result.update(
        timeline=pacer.timeline_list(),
        failures=[],
        nodes_done=list(pacer.schedule.order) if options.wait else [],
        elapsed=clock() - started,
    )


def last_warning(api: KubeApi, node: str) -> str:
    """The newest Warning Event on the node (the upgrade controller says there why a node failed)."""
    events = api.list(EVENTS, field_selector=f"involvedObject.name={node},involvedObject.kind=Node,type=Warning")
    if not events:
        return "no Warning Event recorded"
    newest = max(events, key=lambda event: str(event.get("lastTimestamp") or event.get("eventTime") or ""))
    return f"{newest.get('reason', '')}: {newest.get('message', '')}"


# -- entry point ---------------------------------------------------------------------------------------------------


def _deferred_to_git(options: OfedRolloutOptions, view: ClusterView) -> List[Dict[str, Any]]:
    """The NicClusterPolicy's change, when Argo CD writes it from Git (raises once synced if it is still missing)."""
    name = node_name(view.policy)
    if not view.policy_patch or f"NicClusterPolicy/{name}" not in options.gitops_managed:
        return []
    why = f"MOFED {options.target_version} ({options.mode})"
    return [deferred_change("NicClusterPolicy", name, view.policy_patch, synced=options.gitops_synced, why=why)]


def run_ofed_rollout(api: KubeApi, options: OfedRolloutOptions) -> Dict[str, Any]:
    """Read, decide, then (unless check mode) set the NicClusterPolicy and roll MOFED out."""
    view = read_cluster(api, options)
    base: Dict[str, Any] = {
        "target_version": options.target_version,
        "mode": options.mode,
        "nic_cluster_policy": node_name(view.policy),
        "namespace": options.namespace,
        "selection": view.selection.as_dict(),
        "policy_patch": view.policy_patch,
        "check_mode": options.check_mode,
        "safety": view.safety,
    }
    if view.refusal:
        # Preflight: before any write, in check mode too (the plan would not run).
        raise GpuFleetError(view.refusal, result={**base, "changed": False})
    deferred = _deferred_to_git(options, view)
    base.update(gitops_changes=deferred, gitops_pending=bool(deferred))
    if deferred:
        # Argo CD writes the NicClusterPolicy: the change goes into Git first; no node is touched before the sync.
        return {**base, "changed": False, "timeline": [], "failures": []}
    try:
        if options.mode == MODE_AUTO_UPGRADE:
            result = run_auto_upgrade(api, options, view, now=api.cluster_now)
        else:
            patches: List[Dict[str, Any]] = []
            if not options.check_mode and view.policy_patch:
                patches = apply_policy(api, options, view)
            if not options.check_mode and view.selection.targets:
                base["daemonsets_waited"] = round(wait_for_daemonsets(api, options), 3)
            result = (
                run_rolling(api, options, view)
                if view.selection.targets or options.check_mode
                else {"nodes_done_earlier": list(_done_before(options, view))}
            )
            result.setdefault("timeline", [])
            result["patches"] = patches
            result["changed"] = (
                bool(result.get("changed")) or bool(patches) or (options.check_mode and bool(view.policy_patch))
            )
            result["failures"] = failures_of(result["timeline"])
    except RolloutHaltedError as err:
        partial = {**base, **err.result}
        partial.setdefault("timeline", [])
        partial["failures"] = (
            partial.get("failures")
            or failures_of(partial["timeline"])
            or [{"node": err.node, "step": "", "reason": err.msg}]
        )
        partial["changed"] = True if not options.check_mode else bool(partial.get("changed"))
        if options.diff:
            partial["diff"] = rollout_diff(options, view, partial)
        _record_halt_event(api, err, options)
        raise RolloutHaltedError(err.msg, node=err.node, result=partial) from err
    except GpuFleetError as err:
        err.result = {**base, **err.result}
        raise
    if options.diff:
        result["diff"] = rollout_diff(options, view, result)
    return {**base, **result}


def _done_before(options: OfedRolloutOptions, view: ClusterView) -> Tuple[str, ...]:
    """With every node at the target: those an earlier run of this rollout finished (killed before it recorded
    them, this run records them)."""
    pool = set(view.selection.pool)
    objects = {node_name(node): node for node in view.nodes if node_name(node) in pool}
    return done_earlier(objects, keys=ProgressKeys(options.rollout_name), target=options.target_version)


def rollout_diff(options: OfedRolloutOptions, view: ClusterView, result: Mapping[str, Any]) -> Dict[str, Any]:
    """The diff of a run: the rolling engine's node states (planned ``done`` in check mode, else each node's
    outcome), the auto_upgrade mode's holds (the plan's)."""
    states: Dict[str, str] = {}
    held: Dict[str, bool] = {}
    if options.mode == MODE_AUTO_UPGRADE:
        plan = result.get("plan") or {}
        held = {**dict.fromkeys(plan.get("hold") or [], True), **dict.fromkeys(plan.get("release") or [], False)}
    elif options.check_mode:
        states = dict.fromkeys(view.selection.targets, STATE_DONE)
    else:
        states = {str(entry["node"]): str(entry["outcome"]) for entry in result.get("timeline") or []
                  if entry.get("node") and entry.get("outcome")}  # fmt: skip
    return ofed_diff(
        view.policy,
        view.policy_patch,
        nodes=view.nodes,
        pods=view.pods,
        targets=view.selection.targets,
        version=options.target_version,
        state_key=ProgressKeys(options.rollout_name).state,
        states=states,
        held=held,
    )


def _record_halt_event(api: KubeApi, err: RolloutHaltedError, options: OfedRolloutOptions) -> None:
    """A Warning Event on the node the auto-upgrade halted at (the engine records its own for rolling mode)."""
    if options.mode != MODE_AUTO_UPGRADE or options.check_mode or not err.node:
        return
    node = api.get(NODES, err.node)
    if node is None:
        return
    node.setdefault("kind", "Node")
    node.setdefault("apiVersion", "v1")
    try:
        record_event(api, node, message=f"MOFED rollout {options.rollout_name} halted: {err.msg}"[:1000],
                     event_type="Warning", action="Rollout")  # fmt: skip
    except KubeApiError:
        # The failure itself is what matters; a missing Event must not hide it.
        return
