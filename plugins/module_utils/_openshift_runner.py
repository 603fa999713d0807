# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""API access of the OpenShift modules: machineconfigpool, clusterversion_update, gpu_kernel_interlock
(collection-internal).

Each ``run_*`` reads, decides with the pure functions of ``_openshift_mcp``, ``_openshift_cv`` and
``_openshift_interlock``, writes resourceVersion-guarded merge patches (check mode stops before any
write) and waits with the collection's one bounded loop. Everything it decides from is on the cluster
(pool pause annotations, ``spec.desiredUpdate``, build pods named after what they build), so a run
that was interrupted continues when run again.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import (
    InvalidInputError,
    KubeApiError,
    RolloutHaltedError,
    WaitTimeoutError,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import (
    CLUSTER_POLICIES,
    CLUSTER_VERSIONS,
    IMAGE_STREAMS,
    MACHINE_CONFIG_POOLS,
    NIC_CLUSTER_POLICIES,
    NODES,
    PODS,
    SECRETS,
    ResourceRef,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_check import MatrixSource, read_catalog
from ansible_collections.gpufleet.upgrade.plugins.module_utils._openshift_cv import (
    desired_update_patch,
    minor_of,
    progress_line,
    refusal,
    update_state,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._openshift_interlock import (
    DTK_IMAGESTREAM,
    DTK_NAMESPACE,
    ERROR,
    INFO,
    WARN,
    BuildOutcome,
    BuildPlan,
    DriverToolkit,
    Finding,
    build_outcome,
    build_pods,
    build_pods_diff,
    driver_image,
    driver_toolkit,
    halted,
    matrix_findings,
    plan_builds,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._openshift_mcp import (
    CURRENT_CONFIG,
    DEFAULT_MAX_PAUSE_HOURS,
    DESIRED_CONFIG,
    FIELD_MANAGER,
    MCD_STATE,
    SIGNER_NAME,
    SIGNER_NAMESPACE,
    STATE_DONE,
    CaRotation,
    PoolState,
    apply_patch,
    ca_rotation,
    custom_pool_body,
    degraded_nodes,
    matches_labels,
    membership_plan,
    node_name,
    node_pool,
    normalized_pool,
    over_limit,
    pause_patch,
    pause_plan_checks,
    paused_by,
    paused_hours,
    pool_budget,
    pool_state,
    role_label,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._permission_check import may
from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import iso, utc_now
from ansible_collections.gpufleet.upgrade.plugins.module_utils._wait import wait_until

CONFLICT_ATTEMPTS = 5


@dataclass
class Clock:
    monotonic: Callable[[], float] = time.monotonic
    pause: Callable[[float], None] = time.sleep
    now: Callable[[], datetime.datetime] = utc_now


@dataclass(frozen=True)
class WaitOptions:
    wait: bool = True
    timeout: float = 3600.0
    sleep: float = 10.0


def _guarded_merge(
    api: KubeApi, ref: ResourceRef, name: str, compute: Callable[[Dict[str, Any]], Dict[str, Any]]
) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Read, compute the patch, send it with the resourceVersion it was computed from; on 409 do it again.

    Returns (object before, patch sent); the patch is {} when nothing needed to change.
    """
    for _attempt in range(CONFLICT_ATTEMPTS):
        current = api.get(ref, name)
        if current is None:
            raise InvalidInputError(f"{ref.kind} {name} does not exist")
        patch = compute(current)
        if not patch:
            return current, {}
        body = apply_patch(patch, {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]}})
        try:
            api.patch(ref, name, body, field_manager=FIELD_MANAGER)
        except KubeApiError as err:
            if err.status == 409:
                continue
            raise
        return current, patch
    raise KubeApiError(f"{ref.kind} {name} kept changing under this write ({CONFLICT_ATTEMPTS} conflicts in a row)")


# -- MachineConfigPool --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolOptions:
    name: str
    state: str  # paused | unpaused | present | absent
    member_selector: Optional[Dict[str, str]] = None
    paused: Optional[bool] = None  # state=present only
    max_unavailable: Optional[Any] = None
    budget_pools: List[str] = field(default_factory=list)
    pause_reason: str = ""
    max_pause_hours: float = DEFAULT_MAX_PAUSE_HOURS
    planned_pause_hours: float = 0.0
    wait: WaitOptions = field(default_factory=WaitOptions)
    check_mode: bool = False
    diff: bool = False


def read_ca_rotation(api: KubeApi) -> CaRotation:
    """The kubelet client CA signer's next rotation; unknown (with why) when the Secret cannot be read.

    Only the Secret's metadata is asked for (PartialObjectMetadata): its data holds the CA's private key.
    """
    try:
        if not may(api, "get", "", "secrets", namespace=SIGNER_NAMESPACE, name=SIGNER_NAME):
            return CaRotation(None, None, f"the credentials may not read Secret {SIGNER_NAMESPACE}/{SIGNER_NAME}")
        return ca_rotation(api.get_metadata(SECRETS, SIGNER_NAME, namespace=SIGNER_NAMESPACE))
    except KubeApiError as err:
        return CaRotation(None, None, f"Secret {SIGNER_NAMESPACE}/{SIGNER_NAME} could not be read: {err.msg}")


def ca_synced_when_paused(api: KubeApi) -> bool:
    """OpenShift 4.13 and later write the new kubelet CA on paused pools (machine-config-operator PR 3575)."""
    try:
        cv = api.get(CLUSTER_VERSIONS, CLUSTER_VERSION_NAME)
    except KubeApiError:
        return False
    current = update_state(cv, version="").current if cv else ""
    try:
        return bool(current) and tuple(int(part) for part in minor_of(current).split(".")) >= (4, 13)
    except ValueError:
        return False


def check_pause_plan(
    api: KubeApi, states: List[PoolState], *, planned_hours: float, max_pause_hours: float, now: datetime.datetime
) -> Dict[str, Any]:
    """Every pool's pause checks for a plan that keeps ``states`` paused ``planned_hours`` more.

    Returns ``checks`` (dicts), ``refusals`` and ``warnings`` (messages).
    """
    rotation = read_ca_rotation(api)
    synced = ca_synced_when_paused(api) if rotation.at is not None else False
    checks = [
        check
        for state in states
        for check in pause_plan_checks(
            state,
            planned_hours=planned_hours,
            max_pause_hours=max_pause_hours,
            rotation=rotation,
            now=now,
            ca_synced_when_paused=synced,
        )
    ]
    return {
        "checks": [check.as_dict() for check in checks],
        "refusals": [check.message for check in checks if check.refuse],
        "warnings": [check.message for check in checks if check.warning],
        "ca_rotation_at": iso(rotation.at) if rotation.at else None,
    }


class NodeTimeline:
    """Per node of a pool: when it was handed a new config, whether it rebooted, when it was done.

    A node that went through its whole update between two looks is still recorded (its current config or
    boot ID changed), with ``started_at`` unknown.  ``observe`` is given every node, not only the pool's:
    a node joins the pool's list when the MCO hands it the pool's config (``node_pool`` reads the desired
    config), and a node that waited under ``maxUnavailable`` can get that config, drain, reboot and finish
    between two looks; its first look must therefore be from before it joined, or it would seem unchanged.
    """

    def __init__(self) -> None:
        self.entries: Dict[str, Dict[str, Any]] = {}
        self.first_seen: Dict[str, Tuple[str, str]] = {}  # node -> (config, boot ID) at the first look

    def observe(self, nodes: List[Dict[str, Any]], *, pool: str, at: str) -> None:
        """One look at every node of the cluster; entries are kept for the nodes of ``pool``."""
        for node in nodes:
            name = node_name(node)
            annotations = (node.get("metadata") or {}).get("annotations") or {}
            boot_id = str(((node.get("status") or {}).get("nodeInfo") or {}).get("bootID") or "")
            current, desired = str(annotations.get(CURRENT_CONFIG) or ""), str(annotations.get(DESIRED_CONFIG) or "")
            state = str(annotations.get(MCD_STATE) or "")
            first_config, first_boot = self.first_seen.setdefault(name, (current, boot_id))
            if node_pool(node) != pool:
                continue
            busy = current != desired or state != STATE_DONE
            moved = current != first_config or boot_id != first_boot
            entry = self.entries.get(name)
            if entry is None and (busy or moved):
                entry = self.entries[name] = {
                    "node": name,
                    "pool": pool,
                    "from_config": first_config,
                    "to_config": desired,
                    "started_at": at if busy and not moved else None,
                    "rebooted": False,
                    "done_at": None,
                    "state": state,
                }
            if entry is None:
                continue
            entry.update(state=state, to_config=desired)
            if boot_id and boot_id != first_boot:
                entry["rebooted"] = True
            if not busy and moved and entry["done_at"] is None:
                entry["done_at"] = at

    def as_list(self) -> List[Dict[str, Any]]:
        return [self.entries[name] for name in sorted(self.entries)]


def wait_for_pool(
    api: KubeApi,
    *,
    name: str,
    wait: WaitOptions,
    clock: Clock,
    result: Dict[str, Any],
    settled: Optional[Callable[[PoolState], bool]] = None,
    timeline: Optional[NodeTimeline] = None,
) -> PoolState:
    """Until the pool is Updated (all counts equal) or Degraded (then halt naming the nodes), bounded.

    ``timeline`` carries a first look taken before the write that set the pool going (see run_machineconfigpool).
    """
    timeline = timeline or NodeTimeline()
    done = settled or (lambda state: state.settled)

    def observe() -> Tuple[PoolState, List[Dict[str, Any]]]:
        pool = api.get(MACHINE_CONFIG_POOLS, name)
        if pool is None:
            raise InvalidInputError(f"MachineConfigPool {name} disappeared while waiting for it")
        every_node = api.list(NODES)
        timeline.observe(every_node, pool=name, at=iso(clock.now()))
        return pool_state(pool), [node for node in every_node if node_pool(node) == name]

    def finished(observation: Tuple[PoolState, List[Dict[str, Any]]]) -> bool:
        state, nodes = observation
        return done(state) or state.degraded or bool(degraded_nodes(nodes, pool=name))

    try:
        outcome = wait_until(
            observe,
            finished,
            timeout=wait.timeout,
            sleep=wait.sleep,
            what=f"MachineConfigPool {name} to be Updated",
            clock=clock.monotonic,
            pause=clock.pause,
        )
    except WaitTimeoutError as err:
        last = err.result.get("last")
        if last is not None:
            result["pool"] = last[0].summary()
        result["timeline"] = timeline.as_list()
        progress = _pool_progress(last[0]) if last else "never read"
        raise WaitTimeoutError(f"{err.msg} ({progress})", result=result) from err
    state, nodes = outcome.value
    result["pool"] = state.summary()
    result["timeline"] = timeline.as_list()
    result["wait_elapsed"] = round(outcome.elapsed, 3)
    failing = degraded_nodes(nodes, pool=name)
    if failing or (state.degraded and not done(state)):
        result["degraded_nodes"] = failing
        result["failures"] = failing or [{"node": "", "pool": name, "reason": state.degraded_message}]
        named = "; ".join(f"{item['node']}: {item['reason']}" for item in failing) or state.degraded_message
        raise RolloutHaltedError(
            f"MachineConfigPool {name} is Degraded: {named}",
            node=failing[0]["node"] if failing else "",
            result=result,
        )
    return state


def _pool_progress(state: PoolState) -> str:
    return (
        f"{state.updated_count}/{state.machine_count} updated, {state.ready_count} ready, "
        f"{state.unavailable_count} unavailable, {state.degraded_count} degraded"
    )


def run_machineconfigpool(api: KubeApi, options: PoolOptions, *, clock: Optional[Clock] = None) -> Dict[str, Any]:
    clock = clock or Clock(now=api.cluster_now)  # one clock: the cluster's
    started = clock.monotonic()
    result: Dict[str, Any] = {"changed": False, "name": options.name, "state": options.state, "patches": []}
    current = api.get(MACHINE_CONFIG_POOLS, options.name)
    before = normalized_pool(current)
    after: Dict[str, Any] = dict(before)
    if current is None and options.state in ("paused", "unpaused"):
        raise InvalidInputError(f"MachineConfigPool {options.name} does not exist")
    _refuse_long_pause(api, options, current, result=result, now=clock.now())
    options = _share_of_budget(api, options, current, result=result)
    waits = options.wait.wait and not options.check_mode and options.state in ("unpaused", "present")
    # The timeline's first look is taken before the write that sets the pool going: a node the MCO updates
    # between that write and the wait's first look (drain and reboot between two reads of a busy client)
    # would otherwise look as if it had always run its new config.
    timeline = NodeTimeline()
    if waits:
        timeline.observe(api.list(NODES), pool=options.name, at=iso(clock.now()))
    if options.state in ("present", "absent"):
        nodes = api.list(NODES)
        membership = membership_plan(
            nodes,
            pool=options.name,
            member_selector=options.member_selector if options.state == "present" else None,
        )
        result["members_added"], result["members_removed"] = membership.add, membership.remove
    if options.state == "present" and current is None:
        body = custom_pool_body(name=options.name, paused=bool(options.paused), max_unavailable=options.max_unavailable)
        if options.paused:
            body["metadata"]["annotations"] = {"gpufleet.io/paused-at": iso(clock.now())}
        after = normalized_pool(body)
        result["changed"] = True
        if not options.check_mode:
            api.create(MACHINE_CONFIG_POOLS, body)
            result["patches"].append({"op": "create", "kind": "MachineConfigPool", "name": options.name})
    elif options.state in ("paused", "unpaused", "present") and current is not None:
        wanted_paused = {"paused": True, "unpaused": False}.get(options.state, options.paused)
        stamp = iso(clock.now())

        def compute(obj: Dict[str, Any]) -> Dict[str, Any]:
            if wanted_paused is None:
                spec = obj.get("spec") or {}
                if options.max_unavailable is None or str(spec.get("maxUnavailable")) == str(options.max_unavailable):
                    return {}
                return {"spec": {"maxUnavailable": options.max_unavailable}}
            return pause_patch(
                obj,
                paused=bool(wanted_paused),
                now=stamp,
                reason=options.pause_reason,
                max_unavailable=options.max_unavailable,
            )

        patch = compute(current)
        if patch:
            result["changed"] = True
            after = normalized_pool(apply_patch(current, patch))
            if not options.check_mode:
                _seen, sent = _guarded_merge(api, MACHINE_CONFIG_POOLS, options.name, compute)
                if sent:
                    result["patches"].append({"op": "patch", "kind": "MachineConfigPool", "name": options.name,
                                              "patch": sent})  # fmt: skip
    if options.state in ("present", "absent"):
        _write_membership(api, options, result=result)
    if options.state == "absent" and current is not None:
        result["changed"] = True
        after = {}
        if not options.check_mode:
            if options.wait.wait and result["members_removed"]:
                # The nodes go back to the worker pool first; a pool deleted with members strands them.
                wait_for_pool(
                    api,
                    name=options.name,
                    wait=options.wait,
                    clock=clock,
                    result=result,
                    settled=lambda state: state.machine_count == 0,
                )
            api.delete(MACHINE_CONFIG_POOLS, options.name)
            result["patches"].append({"op": "delete", "kind": "MachineConfigPool", "name": options.name})
    if options.diff or options.check_mode:
        result["diff"] = {"before": before, "after": after}
    pool_now = api.get(MACHINE_CONFIG_POOLS, options.name) if not options.check_mode else current
    if waits and pool_now is not None and not pool_state(pool_now).paused:
        wait_for_pool(api, name=options.name, wait=options.wait, clock=clock, result=result, timeline=timeline)
    elif pool_now is not None:
        result["pool"] = pool_state(pool_now).summary()
    result.setdefault("timeline", [])
    result.setdefault("degraded_nodes", [])
    result.setdefault("failures", [])
    result["elapsed"] = round(clock.monotonic() - started, 3)
    result["api_requests"] = api.requests_sent
    return result


def _refuse_long_pause(
    api: KubeApi,
    options: PoolOptions,
    current: Optional[Dict[str, Any]],
    *,
    result: Dict[str, Any],
    now: datetime.datetime,
) -> None:
    """Before any write: a pause over ``max_pause_hours`` or across the kubelet CA rotation is refused."""
    if current is not None:
        state = pool_state(current)
        result["paused_by"] = paused_by(state) or None
        late = over_limit(state, max_pause_hours=options.max_pause_hours, now=now)
        if late:
            result.setdefault("warnings", []).append(late)
    pausing = options.state == "paused" or (options.state == "present" and options.paused)
    if not pausing:
        return
    state = pool_state(current) if current is not None else pool_state({"metadata": {"name": options.name}})
    plan = check_pause_plan(
        api, [state], planned_hours=options.planned_pause_hours, max_pause_hours=options.max_pause_hours, now=now
    )
    result["pause_checks"] = plan["checks"]
    result.setdefault("warnings", []).extend(plan["warnings"])
    if plan["refusals"]:
        raise InvalidInputError("; ".join(plan["refusals"]) + ". Nothing was changed.", result=result)


def _share_of_budget(
    api: KubeApi, options: PoolOptions, current: Optional[Dict[str, Any]], *, result: Dict[str, Any]
) -> PoolOptions:
    """Before any write: the pool's share of the budget of ``budget_pools`` becomes its ``maxUnavailable``; refused
    when nothing is left for a pool with nodes to update, or when a node of the pool is cordoned by someone else."""
    if not options.budget_pools or options.state == "paused":
        return options
    nodes = api.list(NODES)
    spec = (current or {}).get("spec") or {}
    target: Optional[str] = str((spec.get("configuration") or {}).get("name") or "")
    if options.state == "absent":  # the nodes go back to their own pool: a config move, no roll
        members = membership_plan(nodes, pool=options.name, member_selector=None).remove
        target = None
    elif options.state == "present":
        selector = options.member_selector or {}
        members = [
            node_name(n) for n in nodes if matches_labels((n.get("metadata") or {}).get("labels") or {}, selector)
        ]
    else:
        members = [node_name(n) for n in nodes if node_pool(n) == options.name]
    requested = options.max_unavailable if options.max_unavailable is not None else spec.get("maxUnavailable", 1)
    share = pool_budget(
        nodes,
        pool=options.name,
        members=members,
        budget_pools=options.budget_pools,
        max_unavailable=requested,
        target=target,
    )
    result["budget"] = share.as_dict()
    refusal = share.refusal()
    if refusal:
        named = share.stalled or share.elsewhere
        result["failures"] = [{"node": node, "pool": options.name, "reason": refusal} for node in named]
        raise RolloutHaltedError(f"MachineConfigPool {options.name}: {refusal}. Nothing was changed.", node=named[0],
                                 result=result)  # fmt: skip
    if not share.elsewhere or target is None:
        return options
    return replace(options, max_unavailable=share.left)


def _write_membership(api: KubeApi, options: PoolOptions, *, result: Dict[str, Any]) -> None:
    """Give the pool's role label to the nodes ``result`` says join it and take it off those that leave."""
    label = role_label(options.name)
    for node in result["members_added"]:
        result["changed"] = True
        if not options.check_mode:
            api.patch(NODES, node, {"metadata": {"labels": {label: ""}}})
            result["patches"].append({"op": "patch", "kind": "Node", "name": node, "labels": {label: ""}})
    for node in result["members_removed"]:
        result["changed"] = True
        if not options.check_mode:
            api.patch(NODES, node, {"metadata": {"labels": {label: None}}})
            result["patches"].append({"op": "patch", "kind": "Node", "name": node, "labels": {label: None}})


# -- ClusterVersion -----------------------------------------------------------------------------------

CLUSTER_VERSION_NAME = "version"


@dataclass(frozen=True)
class ClusterVersionOptions:
    version: str
    image: Optional[str] = None
    channel: Optional[str] = None
    force: bool = False
    preflight_only: bool = False
    paused_age_warning_hours: float = 720.0
    pools: Optional[List[str]] = None
    max_pause_hours: float = DEFAULT_MAX_PAUSE_HOURS
    planned_pause_hours: float = 0.0
    pause_pools: Optional[List[str]] = None  # the pools the plan will pause (checked against the limits)
    wait: WaitOptions = field(default_factory=WaitOptions)
    check_mode: bool = False
    diff: bool = False


def cluster_preflight(
    cv: Mapping[str, Any],
    pools: List[Dict[str, Any]],
    nodes: List[Dict[str, Any]],
    *,
    version: str,
    now: datetime.datetime,
    paused_age_warning_hours: float,
    max_pause_hours: float = 0.0,
    pause_plan: Optional[Mapping[str, Any]] = None,
) -> List[Finding]:
    """Every pool Updated and none degraded, the cluster upgradeable, no pool paused for too long.

    A run resuming its own update (``spec.desiredUpdate`` already asks for ``version``) finds pools
    paused and rolling by its own hand: those are reported, not refused. ``pause_plan`` (check_pause_plan)
    refuses a planned pause over ``max_pause_hours`` or across the kubelet CA rotation.
    """
    state = update_state(cv, version=version)
    # Pools paused or rolling by this update's own hand (a run interrupted and started again) are expected.
    resuming = version in (state.requested, state.desired)
    findings: List[Finding] = []
    why_not = refusal(state, version=version)
    if why_not:
        findings.append(Finding("cluster_version", ERROR, why_not))
    elif state.current == version:
        findings.append(Finding("cluster_version", INFO, f"the control plane already runs OpenShift {version}"))
    elif resuming:
        findings.append(Finding("cluster_version", INFO, f"resuming: the cluster is updating to {version}"))
    else:
        upgradeable = state.condition("Upgradeable")
        severity = WARN if upgradeable == "False" else INFO
        kind = "z-stream" if minor_of(version) == minor_of(state.current) else "minor"
        message = f"OpenShift {state.current} -> {version} ({kind} update); Upgradeable={upgradeable}"
        findings.append(Finding("cluster_version", severity, f"{message} {state.message('Upgradeable')}".strip()))
    for pool in pools:
        pool_view = pool_state(pool)
        failing = degraded_nodes(nodes, pool=pool_view.name)
        if pool_view.degraded or failing:
            named = "; ".join(f"{item['node']}: {item['reason']}" for item in failing) or pool_view.degraded_message
            findings.append(Finding("pool_degraded", ERROR, f"MachineConfigPool {pool_view.name} is degraded: {named}"))
            continue
        hours = paused_hours(pool_view, now=now)
        who = f" by {paused_by(pool_view)}" if paused_by(pool_view) else ""
        late = over_limit(pool_view, max_pause_hours=max_pause_hours, now=now)
        if late:
            findings.append(Finding("pool_pause_limit", WARN, late))
        if pool_view.paused:
            if hours is None:
                findings.append(
                    Finding(
                        "pool_paused",
                        WARN,
                        f"MachineConfigPool {pool_view.name} is paused{who} and nobody recorded since when; a pool "
                        "paused for months holds the kubelet client CA rotation (new certificate at 292 days)",
                    )
                )
            elif hours >= paused_age_warning_hours:
                findings.append(
                    Finding(
                        "pool_paused",
                        WARN,
                        f"MachineConfigPool {pool_view.name} has been paused{who} for {hours:.0f} h (warning at "
                        f"{paused_age_warning_hours:.0f} h): a paused pool holds the kubelet client CA rotation",
                    )
                )
            else:
                findings.append(
                    Finding("pool_paused", INFO, f"MachineConfigPool {pool_view.name} paused{who} for {hours:.1f} h")
                )
        elif not pool_view.settled and not resuming:
            findings.append(
                Finding(
                    "pool_not_updated",
                    ERROR,
                    f"MachineConfigPool {pool_view.name} is not Updated ({_pool_progress(pool_view)}): another "
                    "change is rolling; let it finish first",
                )
            )
    for message in (pause_plan or {}).get("refusals") or []:
        findings.append(Finding("pause_limit", ERROR, message))
    for message in (pause_plan or {}).get("warnings") or []:
        findings.append(Finding("pause_limit", WARN, message))
    return findings


def _preflight(
    api: KubeApi, options: ClusterVersionOptions, cv: Mapping[str, Any], *, now: datetime.datetime
) -> Tuple[List[Dict[str, Any]], List[Finding]]:
    """The pools looked at and cluster_preflight's findings, the planned pause of ``pause_pools`` included."""
    every_pool = api.list(MACHINE_CONFIG_POOLS)
    pools = every_pool
    if options.pools:
        pools = [p for p in pools if (p.get("metadata") or {}).get("name") in options.pools]
    pause_plan = None
    if options.pause_pools:
        by_name = {pool_state(p).name: pool_state(p) for p in every_pool}
        planned = [by_name.get(name) or pool_state({"metadata": {"name": name}}) for name in options.pause_pools]
        pause_plan = check_pause_plan(
            api,
            planned,
            planned_hours=options.planned_pause_hours,
            max_pause_hours=options.max_pause_hours,
            now=now,
        )
    findings = cluster_preflight(
        cv,
        pools,
        api.list(NODES),
        version=options.version,
        now=now,
        paused_age_warning_hours=options.paused_age_warning_hours,
        max_pause_hours=options.max_pause_hours,
        pause_plan=pause_plan,
    )
    return pools, findings


def run_clusterversion_update(
    api: KubeApi, options: ClusterVersionOptions, *, clock: Optional[Clock] = None
) -> Dict[str, Any]:
    clock = clock or Clock(now=api.cluster_now)  # one clock: the cluster's
    started = clock.monotonic()
    cv = api.get(CLUSTER_VERSIONS, CLUSTER_VERSION_NAME)
    if cv is None:
        raise InvalidInputError("ClusterVersion 'version' does not exist: this is not an OpenShift cluster")
    pools, findings = _preflight(api, options, cv, now=clock.now())
    state = update_state(cv, version=options.version)
    result: Dict[str, Any] = {
        "changed": False,
        "version": options.version,
        "preflight": {
            "ok": not halted(findings),
            "findings": [finding.as_dict() for finding in findings],
            "pools": [pool_state(p).summary() for p in pools],
        },
        "cluster_version": state.summary(),
        "progress": [],
        "history": state.history,
    }
    if options.preflight_only:
        result["elapsed"] = round(clock.monotonic() - started, 3)
        result["api_requests"] = api.requests_sent
        return result
    why_not = refusal(state, version=options.version)
    if why_not:
        raise InvalidInputError(why_not, result=result)

    def compute(obj: Dict[str, Any]) -> Dict[str, Any]:
        return desired_update_patch(
            obj, version=options.version, image=options.image, channel=options.channel, force=options.force
        )

    patch = compute(cv)
    if patch:
        result["changed"] = True
        if options.diff or options.check_mode:
            result["diff"] = {
                "before": {"spec": {k: (cv.get("spec") or {}).get(k) for k in ("channel", "desiredUpdate")}},
                "after": {
                    "spec": {k: apply_patch(cv, patch).get("spec", {}).get(k) for k in ("channel", "desiredUpdate")}
                },
            }
        if not options.check_mode:
            _guarded_merge(api, CLUSTER_VERSIONS, CLUSTER_VERSION_NAME, compute)
            result["patch"] = patch
    if options.check_mode or not options.wait.wait:
        result["elapsed"] = round(clock.monotonic() - started, 3)
        result["api_requests"] = api.requests_sent
        return result
    progress: List[Dict[str, Any]] = result["progress"]

    def observe() -> Dict[str, Any]:
        current = api.get(CLUSTER_VERSIONS, CLUSTER_VERSION_NAME) or {}
        line = progress_line(update_state(current, version=options.version))
        if not progress or progress[-1]["message"] != line:
            progress.append({"at": iso(clock.now()), "elapsed": round(clock.monotonic() - started, 3), "message": line})
        return current

    def finished(current: Dict[str, Any]) -> bool:
        view = update_state(current, version=options.version)
        return view.completed or view.failing

    try:
        outcome = wait_until(
            observe,
            finished,
            timeout=options.wait.timeout,
            sleep=options.wait.sleep,
            what=f"the cluster to complete the update to {options.version}",
            clock=clock.monotonic,
            pause=clock.pause,
        )
    except WaitTimeoutError as err:
        last = err.result.get("last") or cv
        result["cluster_version"] = update_state(last, version=options.version).summary()
        result["elapsed"] = round(clock.monotonic() - started, 3)
        raise WaitTimeoutError(f"{err.msg}: {progress[-1]['message'] if progress else ''}", result=result) from err
    final = update_state(outcome.value, version=options.version)
    result["cluster_version"] = final.summary()
    result["history"] = final.history
    result["elapsed"] = round(clock.monotonic() - started, 3)
    result["api_requests"] = api.requests_sent
    if final.failing:
        raise RolloutHaltedError(
            f"the update to {options.version} is Failing: {final.message('Failing') or 'no message'}", result=result
        )
    return result


# -- kernel interlock -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class InterlockOptions:
    target: Dict[str, Any]
    previous: Optional[Dict[str, Any]] = None
    catalog_path: Optional[str] = None
    rhcos: Optional[str] = None
    check_matrix: bool = True
    check_driver_toolkit: bool = True
    build_check: bool = True
    build_namespace: Optional[str] = None
    wait: WaitOptions = field(default_factory=WaitOptions)
    check_mode: bool = False
    diff: bool = False


def _first(api: KubeApi, ref: ResourceRef) -> Optional[Dict[str, Any]]:
    try:
        items = api.list(ref)
    except KubeApiError as err:
        if err.status == 404:
            return None
        raise
    items.sort(key=lambda item: str((item.get("metadata") or {}).get("creationTimestamp") or ""))
    return items[0] if items else None


def _build_specs(api: KubeApi, options: InterlockOptions, rhcos: str) -> Tuple[List[Dict[str, Any]], str]:
    """What to build: the GPU driver of the ClusterPolicy and the MOFED/DOCA driver of the NicClusterPolicy."""
    specs: List[Dict[str, Any]] = []
    namespace = options.build_namespace or ""
    policy = _first(api, CLUSTER_POLICIES)
    if policy is not None:
        driver = (policy.get("spec") or {}).get("driver") or {}
        version = str(options.target.get("gpu_driver") or driver.get("version") or "")
        namespace = namespace or str((policy.get("status") or {}).get("namespace") or "")
        if version and driver.get("enabled", True):
            specs.append(
                {"what": "gpu-driver", "version": version, "image": driver_image(driver, version=version, rhcos=rhcos)}
            )
    nic_policy = _first(api, NIC_CLUSTER_POLICIES)
    ofed = ((nic_policy or {}).get("spec") or {}).get("ofedDriver") or {}
    if ofed:
        version = str(options.target.get("mofed") or ofed.get("version") or "")
        if version:
            specs.append(
                {
                    "what": "mofed-driver",
                    "version": version,
                    "image": driver_image(ofed, version=version, rhcos=rhcos, suffix="-amd64"),
                }
            )
    return specs, namespace or "default"


def _plan_builds(api: KubeApi, pods: List[Dict[str, Any]], namespace: str) -> BuildPlan:
    """Read the build pods an earlier run may have left (read only: check mode plans with it too)."""
    names = [str(pod["metadata"]["name"]) for pod in pods]
    return plan_builds(pods, {name: api.get(PODS, name, namespace=namespace) for name in names})


def _run_builds(
    api: KubeApi, *, specs: List[Dict[str, Any]], pods: List[Dict[str, Any]], plan: BuildPlan, namespace: str,
    dtk_image: str, rhcos: str, options: InterlockOptions, clock: Clock,
) -> List[Dict[str, Any]]:  # fmt: skip
    """Create the plan's pods (after deleting a failed one of an earlier run), wait for every build, record its
    outcome and delete its pod."""
    leftovers = {str(pod["metadata"]["name"]) for pod in plan.leftovers}
    for pod in plan.create:
        name = str(pod["metadata"]["name"])
        if name in leftovers:
            # A failed build from an earlier run is tried again: the cause may have been fixed since.
            api.delete(PODS, name, namespace=namespace, grace_period_seconds=0)
        try:
            api.create(PODS, pod, namespace=namespace)
        except KubeApiError as err:
            if err.status != 409:
                raise
    builds = []
    for index, spec in enumerate(specs):
        name = str(pods[index]["metadata"]["name"])
        builds.append({**spec, "pod": f"{namespace}/{name}", "name": name, "rhcos": rhcos, "dtk_image": dtk_image})
    for build in builds:
        pod_name = str(build["name"])

        def observe(pod_name: str = pod_name) -> BuildOutcome:
            return build_outcome(api.get(PODS, pod_name, namespace=namespace))

        def done(seen: BuildOutcome) -> bool:
            return seen.done

        try:
            outcome = wait_until(
                observe,
                done,
                timeout=options.wait.timeout,
                sleep=options.wait.sleep,
                what=f"the {build['what']} {build['version']} build on RHCOS {rhcos}",
                clock=clock.monotonic,
                pause=clock.pause,
            )
            seen = outcome.value
        except WaitTimeoutError as err:
            last = err.result.get("last")
            build.update(succeeded=False, message=f"{err.msg}: {last.message if last else ''}")
            continue
        build.update(succeeded=seen.succeeded, message=seen.message)
        # The outcome is recorded in the result; the finished pod is not needed any more.
        api.delete(PODS, build["name"], namespace=namespace)
    return builds


def _interlock_builds(
    api: KubeApi, options: InterlockOptions, *, toolkit: DriverToolkit, findings: List[Finding], clock: Clock
) -> Tuple[List[Dict[str, Any]], BuildPlan]:
    """The build check, its findings appended to ``findings``: the builds and the plan of their pods (empty when an
    earlier check already stops the reboot; in check mode, what a run would do)."""
    if halted(findings):
        findings.append(Finding("driver_build", INFO, "not attempted: an earlier check already stops the reboot"))
        return [], BuildPlan(create=[], leftovers=[])
    specs, namespace = _build_specs(api, options, toolkit.rhcos)
    pods = build_pods(specs, namespace=namespace, dtk_image=toolkit.image, rhcos=toolkit.rhcos)
    plan = _plan_builds(api, pods, namespace)
    if options.check_mode:
        findings.append(
            Finding("driver_build", INFO, f"check mode: would build {[s['what'] for s in specs]} on the DTK")
        )
        return [], plan
    builds = _run_builds(
        api, specs=specs, pods=pods, plan=plan, namespace=namespace, dtk_image=toolkit.image, rhcos=toolkit.rhcos,
        options=options, clock=clock,
    )  # fmt: skip
    for build in builds:
        verb = "builds" if build["succeeded"] else "does not build"
        findings.append(
            Finding(
                f"{build['what']}_build",
                INFO if build["succeeded"] else ERROR,
                f"{build['what']} {build['version']} {verb} for RHCOS {toolkit.rhcos}: {build['message']}",
            )
        )
    return builds, plan


def run_kernel_interlock(api: KubeApi, options: InterlockOptions, *, clock: Optional[Clock] = None) -> Dict[str, Any]:
    clock = clock or Clock(now=api.cluster_now)  # one clock: the cluster's
    started = clock.monotonic()
    findings: List[Finding] = []
    openshift = str(options.target.get("openshift") or "")
    if options.check_matrix:
        catalog = read_catalog(MatrixSource(catalog_path=options.catalog_path))
        findings += matrix_findings(options.target, previous=options.previous, catalog=catalog)
    result: Dict[str, Any] = {"changed": False, "openshift": openshift, "kernel": options.target.get("kernel")}
    toolkit = None
    if options.check_driver_toolkit or options.build_check:
        imagestream = api.get(IMAGE_STREAMS, DTK_IMAGESTREAM, namespace=DTK_NAMESPACE)
        toolkit = driver_toolkit(imagestream, rhcos=options.rhcos)
        if toolkit is None:
            wanted = options.rhcos or "the RHCOS the 'latest' tag points at"
            findings.append(
                Finding(
                    "driver_toolkit",
                    ERROR,
                    f"ImageStream {DTK_NAMESPACE}/{DTK_IMAGESTREAM} has no tag for {wanted}"
                    + ("" if imagestream else " (the ImageStream does not exist)")
                    + ": the GPU Operator cannot build the driver for the new kernel",
                )
            )
        else:
            findings.append(
                Finding("driver_toolkit", INFO, f"driver toolkit for RHCOS {toolkit.rhcos}: {toolkit.image}")
            )
            result["rhcos"], result["dtk_image"] = toolkit.rhcos, toolkit.image
    builds: List[Dict[str, Any]] = []
    plan = BuildPlan(create=[], leftovers=[])
    if options.build_check and toolkit is not None:
        builds, plan = _interlock_builds(api, options, toolkit=toolkit, findings=findings, clock=clock)
    # Check mode says what a run writes: the build pods it creates (and those of an earlier run it deletes).
    result["changed"] = plan.changes
    if options.diff:
        result["diff"] = build_pods_diff(plan)
    result.update(
        builds=builds,
        findings=[finding.as_dict() for finding in findings],
        halted=halted(findings),
        elapsed=round(clock.monotonic() - started, 3),
        api_requests=api.requests_sent,
    )
    if result["halted"]:
        errors = "; ".join(f.message for f in findings if f.severity == ERROR)
        result["failures"] = [{"node": "", "reason": f.message} for f in findings if f.severity == ERROR]
        raise RolloutHaltedError(f"GPU nodes must not reboot into the new RHCOS: {errors}", result=result)
    return result
