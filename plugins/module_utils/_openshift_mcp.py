# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""MachineConfigPool logic without I/O: pool state, degraded nodes, canary pools, pause writes
(collection-internal).

Facts used (openshift/api ``machineconfiguration/v1/types.go``, openshift/machine-config-operator
``pkg/controller/node`` and the OpenShift docs "Performing a canary rollout update"):

- A pool is done when ``Updated=True``, ``Updating=False``, ``machineCount == updatedMachineCount ==
  readyMachineCount``, ``degradedMachineCount == 0`` and ``status.observedGeneration`` has caught up
  with ``metadata.generation``; ``Degraded``/``NodeDegraded`` True means a node failed to apply its
  config (the node's ``machineconfiguration.openshift.io/state=Degraded`` annotation, with ``reason``).
- A custom pool selects its nodes with a role label ``node-role.kubernetes.io/<pool>`` that the nodes
  carry beside ``node-role.kubernetes.io/worker``; its ``machineConfigSelector`` takes the worker
  configs and its own (``machineconfiguration.openshift.io/role In [worker, <pool>]``). A node in
  ``worker`` and one custom pool belongs to the custom pool; in two custom pools it is an error.
- ``spec.paused`` holds rendering and node updates, and also the kubelet client CA rotation
  (a new certificate at 292 days, the old one removed at 365): a pool must not stay paused long.
  The CA is the Secret ``openshift-kube-apiserver-operator/kube-apiserver-to-kubelet-signer``; the operator
  annotates it with ``auth.openshift.io/certificate-not-before``/``-not-after`` (cluster-kube-apiserver-operator
  bindata) and library-go's ``certrotation`` makes a new one at 80 % of its validity (day 292 of 365; openshift-docs
  PRs 34704 and 45313, "Updating a cluster using custom machine config pools"; the MCO's alert
  ``MachineConfigControllerPausedPoolKubeletCA``, machine-config-operator PR 2802). From OpenShift 4.13 the
  machine-config daemon writes the new kubelet CA on nodes of paused pools too (machine-config-operator PR 3575,
  OCPBUGS-8446; OpenShift 4.13 release notes, openshift-docs PR 57901): there a pause across the rotation is
  reported, before 4.13 it is refused.
- The API keeps no time of a pause. ``metadata.managedFields`` (apimachinery ``ManagedFieldsEntry``) names the
  manager that last changed ``spec.paused`` and the time of that manager's last change to the object, so the pause
  began at or before that time; this collection also writes ``gpufleet.io/paused-at`` and its field manager is
  ``gpufleet.upgrade``.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_budget import (
    node_is_unavailable,
    scaled_max_unavailable,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import parse_time

MCO_PREFIX = "machineconfiguration.openshift.io/"
CURRENT_CONFIG = MCO_PREFIX + "currentConfig"
DESIRED_CONFIG = MCO_PREFIX + "desiredConfig"
MCD_STATE = MCO_PREFIX + "state"
MCD_REASON = MCO_PREFIX + "reason"
ROLE_LABEL_PREFIX = "node-role.kubernetes.io/"
MC_ROLE_LABEL = MCO_PREFIX + "role"
# Set by this collection when it pauses a pool, so an age can be told later (the API keeps none).
PAUSED_AT_ANNOTATION = "gpufleet.io/paused-at"
PAUSED_REASON_ANNOTATION = "gpufleet.io/paused-reason"
STATE_DEGRADED = "Degraded"
FIELD_MANAGER = "gpufleet.upgrade"
SIGNER_NAMESPACE = "openshift-kube-apiserver-operator"
SIGNER_NAME = "kube-apiserver-to-kubelet-signer"
SIGNER_NOT_BEFORE = "auth.openshift.io/certificate-not-before"
SIGNER_NOT_AFTER = "auth.openshift.io/certificate-not-after"
CA_REFRESH_FRACTION = 0.8  # library-go certrotation: a new signer at 80 % of the old one's validity (292/365 days)
DEFAULT_MAX_PAUSE_HOURS = 168.0
STATE_DONE = "Done"


def _conditions(obj: Mapping[str, Any]) -> Dict[str, Dict[str, Any]]:
    return {str(c.get("type")): dict(c) for c in ((obj.get("status") or {}).get("conditions") or [])}


def _is_true(conditions: Mapping[str, Mapping[str, Any]], kind: str) -> bool:
    return str((conditions.get(kind) or {}).get("status")) == "True"


@dataclass(frozen=True)
class PoolState:
    """What a MachineConfigPool says about itself."""

    name: str
    paused: bool
    generation: int
    observed_generation: int
    machine_count: int
    updated_count: int
    ready_count: int
    unavailable_count: int
    degraded_count: int
    target_config: str
    current_config: str
    updated: bool
    updating: bool
    degraded: bool
    degraded_message: str
    paused_at: str = ""
    paused_reason: str = ""
    paused_by: str = ""
    paused_by_time: str = ""

    @property
    def settled(self) -> bool:
        """Every machine runs the pool's target config and is ready; nothing degraded."""
        return (
            self.updated
            and not self.updating
            and not self.degraded
            and self.degraded_count == 0
            and self.machine_count == self.updated_count == self.ready_count
            and self.observed_generation >= self.generation
        )

    def summary(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "paused": self.paused,
            "updated": self.updated,
            "updating": self.updating,
            "degraded": self.degraded,
            "settled": self.settled,
            "machine_count": self.machine_count,
            "updated_machine_count": self.updated_count,
            "ready_machine_count": self.ready_count,
            "unavailable_machine_count": self.unavailable_count,
            "degraded_machine_count": self.degraded_count,
            "target_config": self.target_config,
            "current_config": self.current_config,
            "paused_at": self.paused_at or None,
            "paused_reason": self.paused_reason or None,
            "paused_by": paused_by(self) or None,
            "paused_by_time": self.paused_by_time or None,
        }


def pool_state(pool: Mapping[str, Any]) -> PoolState:
    meta = pool.get("metadata") or {}
    spec = pool.get("spec") or {}
    status = pool.get("status") or {}
    conditions = _conditions(pool)
    annotations = meta.get("annotations") or {}
    holder, holder_time = pause_manager(pool)
    degraded_message = "; ".join(
        str((conditions.get(kind) or {}).get("message") or "")
        for kind in ("NodeDegraded", "RenderDegraded", "Degraded")
        if _is_true(conditions, kind) and (conditions.get(kind) or {}).get("message")
    )
    return PoolState(
        name=str(meta.get("name") or ""),
        paused=bool(spec.get("paused")),
        generation=int(meta.get("generation") or 0),
        observed_generation=int(status.get("observedGeneration") or 0),
        machine_count=int(status.get("machineCount") or 0),
        updated_count=int(status.get("updatedMachineCount") or 0),
        ready_count=int(status.get("readyMachineCount") or 0),
        unavailable_count=int(status.get("unavailableMachineCount") or 0),
        degraded_count=int(status.get("degradedMachineCount") or 0),
        target_config=str((spec.get("configuration") or {}).get("name") or ""),
        current_config=str((status.get("configuration") or {}).get("name") or ""),
        updated=_is_true(conditions, "Updated"),
        updating=_is_true(conditions, "Updating"),
        degraded=any(_is_true(conditions, kind) for kind in ("Degraded", "NodeDegraded", "RenderDegraded")),
        degraded_message=degraded_message,
        paused_at=str(annotations.get(PAUSED_AT_ANNOTATION) or ""),
        paused_reason=str(annotations.get(PAUSED_REASON_ANNOTATION) or ""),
        paused_by=holder if spec.get("paused") else "",
        paused_by_time=holder_time if spec.get("paused") else "",
    )


def pause_manager(pool: Mapping[str, Any]) -> Tuple[str, str]:
    """(manager, time) of the managedFields entry that owns ``spec.paused``; ("", "") when none does."""
    for entry in (pool.get("metadata") or {}).get("managedFields") or []:
        if not isinstance(entry, Mapping):
            continue
        spec_fields = (entry.get("fieldsV1") or {}).get("f:spec") or {}
        if isinstance(spec_fields, Mapping) and "f:paused" in spec_fields:
            return str(entry.get("manager") or ""), str(entry.get("time") or "")
    return "", ""


def pool_of_config(config_name: str) -> str:
    """``rendered-<pool>-<hash>`` -> ``<pool>`` (pool names may contain dashes; the hash has none)."""
    if not config_name.startswith("rendered-"):
        return ""
    return config_name[len("rendered-") :].rsplit("-", 1)[0]


def node_pool(node: Mapping[str, Any]) -> str:
    """The pool a node is in, from the config the MCO gave it last."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return pool_of_config(str(annotations.get(DESIRED_CONFIG) or annotations.get(CURRENT_CONFIG) or ""))


def node_name(node: Mapping[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name") or "")


def degraded_nodes(nodes: Sequence[Mapping[str, Any]], *, pool: str) -> List[Dict[str, str]]:
    """Nodes of ``pool`` whose machine-config daemon reports Degraded, with its reason."""
    found = []
    for node in nodes:
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        if annotations.get(MCD_STATE) == STATE_DEGRADED and node_pool(node) == pool:
            reason = str(annotations.get(MCD_REASON) or "no reason given by the machine-config daemon")
            found.append({"node": node_name(node), "pool": pool, "reason": reason})
    return sorted(found, key=lambda item: item["node"])


def role_label(pool: str) -> str:
    return ROLE_LABEL_PREFIX + pool


def custom_pool_body(*, name: str, paused: bool, max_unavailable: Optional[Any] = None) -> Dict[str, Any]:
    """A custom worker pool as the OpenShift docs make one for a canary: nodes keep the worker role."""
    spec: Dict[str, Any] = {
        "machineConfigSelector": {
            "matchExpressions": [{"key": MC_ROLE_LABEL, "operator": "In", "values": ["worker", name]}]
        },
        "nodeSelector": {"matchLabels": {role_label(name): ""}},
        "paused": paused,
    }
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    return {
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfigPool",
        "metadata": {"name": name, "labels": {f"pools.operator.machineconfiguration.openshift.io/{name}": ""}},
        "spec": spec,
    }


def matches_labels(labels: Mapping[str, Any], selector: Mapping[str, Any]) -> bool:
    return all(str(labels.get(key)) == str(value) for key, value in selector.items())


@dataclass
class MembershipPlan:
    """Role label writes that make a custom pool select exactly the member nodes."""

    add: List[str] = field(default_factory=list)
    remove: List[str] = field(default_factory=list)


def membership_plan(
    nodes: Sequence[Mapping[str, Any]], *, pool: str, member_selector: Optional[Mapping[str, Any]]
) -> MembershipPlan:
    """Nodes matching ``member_selector`` get the pool's role label; others lose it (None: remove from all)."""
    label = role_label(pool)
    plan = MembershipPlan()
    for node in sorted(nodes, key=node_name):
        labels = (node.get("metadata") or {}).get("labels") or {}
        wanted = member_selector is not None and matches_labels(labels, member_selector)
        has = label in labels
        if wanted and not has:
            plan.add.append(node_name(node))
        elif has and not wanted:
            plan.remove.append(node_name(node))
    return plan


def pause_patch(
    pool: Mapping[str, Any], *, paused: bool, now: str, reason: str = "", max_unavailable: Optional[Any] = None
) -> Dict[str, Any]:
    """The merge patch that brings ``spec.paused`` (and the pause annotations) where asked; {} when already."""
    state = pool_state(pool)
    spec: Dict[str, Any] = {}
    if state.paused != paused:
        spec["paused"] = paused
    current_max = (pool.get("spec") or {}).get("maxUnavailable")
    if max_unavailable is not None and str(current_max) != str(max_unavailable):
        spec["maxUnavailable"] = max_unavailable
    annotations: Dict[str, Any] = {}
    if paused and not state.paused_at:
        # A pool someone else paused gets its age counted from now: the API keeps no time of the pause.
        annotations[PAUSED_AT_ANNOTATION] = now
    if paused and reason and state.paused_reason != reason:
        annotations[PAUSED_REASON_ANNOTATION] = reason
    if not paused and state.paused_at:
        annotations[PAUSED_AT_ANNOTATION] = None
    if not paused and state.paused_reason:
        annotations[PAUSED_REASON_ANNOTATION] = None
    patch: Dict[str, Any] = {}
    if spec:
        patch["spec"] = spec
    if annotations:
        patch["metadata"] = {"annotations": annotations}
    return patch


def paused_by(state: PoolState) -> str:
    """Who paused the pool: this collection when its mark is there, else the manager of ``spec.paused``.

    The mark goes in the same patch as ``spec.paused`` and is removed when the collection unpauses; a pool the
    collection paused before it wrote as field manager ``gpufleet.upgrade`` has the client's User-Agent there.
    """
    if not state.paused:
        return ""
    return FIELD_MANAGER if state.paused_at else state.paused_by


def paused_since(state: PoolState) -> Optional[datetime.datetime]:
    """The earliest time the pool is known to have been paused by (this collection's mark or managedFields).

    The earliest of the two counts the longer age: the managedFields time is its manager's last change, which can
    come after the pause.
    """
    if not state.paused:
        return None
    known = [t for t in (parse_time(state.paused_at), parse_time(state.paused_by_time)) if t is not None]
    return min(known) if known else None


def paused_hours(state: PoolState, *, now: datetime.datetime) -> Optional[float]:
    since = paused_since(state)
    if since is None:
        return None
    return max(0.0, (now - since).total_seconds() / 3600.0)


@dataclass(frozen=True)
class CaRotation:
    """When the kubelet client CA signer is next renewed, or why that could not be read."""

    at: Optional[datetime.datetime]
    not_after: Optional[datetime.datetime]
    unknown: str = ""


def ca_rotation(signer_metadata: Optional[Mapping[str, Any]]) -> CaRotation:
    """The next rotation point from the signer Secret's metadata (None: the Secret could not be read)."""
    if signer_metadata is None:
        return CaRotation(None, None, f"Secret {SIGNER_NAMESPACE}/{SIGNER_NAME} could not be read")
    annotations = signer_metadata.get("annotations") or {}
    not_before = parse_time(annotations.get(SIGNER_NOT_BEFORE))
    not_after = parse_time(annotations.get(SIGNER_NOT_AFTER))
    if not_before is None or not_after is None or not_after <= not_before:
        return CaRotation(None, not_after, f"{SIGNER_NAME} has no readable {SIGNER_NOT_BEFORE}/{SIGNER_NOT_AFTER}")
    return CaRotation(not_before + (not_after - not_before) * CA_REFRESH_FRACTION, not_after)


@dataclass(frozen=True)
class PauseCheck:
    """A decision about one pool's pause: ``refuse`` stops the plan before any change."""

    pool: str
    refuse: bool
    warning: bool
    message: str

    def as_dict(self) -> Dict[str, Any]:
        return {"pool": self.pool, "refuse": self.refuse, "warning": self.warning, "message": self.message}


def pause_plan_checks(
    state: PoolState,
    *,
    planned_hours: float,
    max_pause_hours: float,
    rotation: CaRotation,
    now: datetime.datetime,
    ca_synced_when_paused: bool = False,
) -> List[PauseCheck]:
    """Would pausing ``state``'s pool for ``planned_hours`` more exceed the limit or reach the CA rotation?

    The pause is counted from when the pool was paused (if it already is) to the end of the plan.
    ``max_pause_hours`` 0 turns the limit off; the rotation check stays (a warning only when
    ``ca_synced_when_paused``: OpenShift 4.13 and later).
    """
    name = state.name
    held = paused_hours(state, now=now) or 0.0
    total = held + max(0.0, planned_hours)
    who = paused_by(state)
    already = f" (paused {held:.1f} h ago by {who or 'an unknown manager'})" if state.paused else ""
    checks: List[PauseCheck] = []
    if max_pause_hours > 0 and total > max_pause_hours:
        checks.append(
            PauseCheck(
                name,
                True,
                False,
                f"MachineConfigPool {name} would stay paused {total:.1f} h{already}, over openshift_max_pause_hours="
                f"{max_pause_hours:g}: a paused pool holds its nodes' updates and the kubelet client CA rotation; "
                "plan a shorter pause or raise the limit",
            )
        )
    end = now + datetime.timedelta(hours=max(0.0, planned_hours))
    if rotation.at is None:
        checks.append(
            PauseCheck(
                name,
                False,
                True,
                f"could not check whether MachineConfigPool {name}'s pause reaches the next kubelet client CA "
                f"rotation: {rotation.unknown}",
            )
        )
    elif end >= rotation.at:
        expires = rotation.not_after.strftime("%Y-%m-%dT%H:%M:%SZ") if rotation.not_after else "unknown"
        message = (
            f"MachineConfigPool {name} would still be paused at the kubelet client CA rotation "
            f"({rotation.at.strftime('%Y-%m-%dT%H:%M:%SZ')}, {SIGNER_NAME} expires {expires})"
        )
        if ca_synced_when_paused:
            message += ": OpenShift 4.13 and later write the new CA on paused pools too, other updates still wait"
        else:
            message += ": before OpenShift 4.13 its nodes would not get the new CA; finish the plan and unpause first"
        checks.append(PauseCheck(name, not ca_synced_when_paused, ca_synced_when_paused, message))
    return checks


def over_limit(state: PoolState, *, max_pause_hours: float, now: datetime.datetime) -> Optional[str]:
    """A report line for a pool already paused longer than the limit (None when it is not)."""
    hours = paused_hours(state, now=now)
    if max_pause_hours <= 0 or hours is None or hours <= max_pause_hours:
        return None
    return (
        f"MachineConfigPool {state.name} has been paused {hours:.1f} h by {paused_by(state) or 'an unknown manager'}, "
        f"over openshift_max_pause_hours={max_pause_hours:g}"
    )


def normalized_pool(pool: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """For diffs: metadata the user owns and the spec, server-managed fields removed."""
    if not pool:
        return {}
    meta = pool.get("metadata") or {}
    return {
        "metadata": {
            "name": meta.get("name"),
            "labels": dict(meta.get("labels") or {}),
            "annotations": {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith("gpufleet.io/")},
        },
        "spec": {k: v for k, v in (pool.get("spec") or {}).items() if k != "configuration"},
    }


def apply_patch(obj: Mapping[str, Any], patch: Mapping[str, Any]) -> Dict[str, Any]:
    """RFC 7386 merge patch applied to a copy (for the diff's after)."""
    result: Dict[str, Any] = dict(obj)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
            result[key] = apply_patch(result[key], value)
        else:
            result[key] = value
    return result


# -- one capacity budget across the GPU pools ---------------------------------------------------------------------
#
# The MCO keeps maxUnavailable per pool (machine-config-operator ``pkg/controller/node``: ``getAllCandidateMachines``
# counts only the pool's own unavailable nodes), while the collection's budget covers every GPU node: a node away in
# the canary pool does not stop the worker pool from taking one more. And the MCO counts a cordoned node as neither
# ready nor a candidate (``checkNodeReady`` fails on ``spec.unschedulable``; the candidates skip unscheduled nodes),
# so a node someone else cordoned keeps its pool from ever being Updated.


def _daemon_done(node: Mapping[str, Any]) -> bool:
    """The machine-config daemon runs the config it was given and is not working on another."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return annotations.get(DESIRED_CONFIG) == annotations.get(CURRENT_CONFIG) and annotations.get(MCD_STATE) in (
        STATE_DONE,
        None,
    )


def mco_unavailable(node: Mapping[str, Any]) -> bool:
    """As the MCO counts a node against ``maxUnavailable``: not Ready or cordoned, or not done with its config."""
    return node_is_unavailable(node) or not _daemon_done(node)


def cordoned_by_others(node: Mapping[str, Any]) -> bool:
    """Cordoned while its machine-config daemon is done: not the daemon's own drain, so the MCO leaves it there."""
    return bool((node.get("spec") or {}).get("unschedulable")) and _daemon_done(node)


@dataclass(frozen=True)
class PoolBudget:
    """What one pool may take of the budget its pools share, and the nodes that stop it from rolling."""

    pool: str
    budget: int
    elsewhere: Tuple[str, ...]  # nodes of the other pools of the budget unavailable now
    stalled: Tuple[str, ...]  # nodes of the pool cordoned by someone else: the MCO would never finish them
    pending: Tuple[str, ...]  # nodes of the pool not yet done at its target config (none: the pool does not roll)

    @property
    def left(self) -> int:
        return self.budget - len(self.elsewhere)

    def refusal(self) -> str:
        """Why the pool must not roll now ("" when it may)."""
        if self.stalled:
            return (
                f"{', '.join(self.stalled)} (pool {self.pool}) "
                f"{'is' if len(self.stalled) == 1 else 'are'} cordoned and not updating: someone other than the "
                "machine-config operator cordoned it, and the MCO neither updates nor counts as ready a cordoned "
                f"node, so pool {self.pool} would never be Updated. Once whoever cordoned it is done, uncordon it "
                f"(oc adm uncordon {' '.join(self.stalled)}) and run the stage again"
            )
        if self.pending and self.left < 1:
            return (
                f"the capacity budget of {self.budget} node(s) is used up by {', '.join(self.elsewhere)}, unavailable "
                f"outside pool {self.pool}: rolling it would take one node more. Bring "
                f"{'it' if len(self.elsewhere) == 1 else 'them'} back (uncordoned and Ready) and run the stage again"
            )
        return ""

    def as_dict(self) -> Dict[str, Any]:
        return {
            "pool": self.pool,
            "budget": self.budget,
            "unavailable_elsewhere": list(self.elsewhere),
            "max_unavailable": max(self.left, 0),
            "stalled": list(self.stalled),
            "pending": list(self.pending),
        }


def pool_budget(
    nodes: Sequence[Mapping[str, Any]],
    *,
    pool: str,
    members: Sequence[str],
    budget_pools: Sequence[str],
    max_unavailable: Any,
    target: Optional[str],
) -> PoolBudget:
    """The share of ``max_unavailable`` (a count or a percent of the budget pools' nodes, rounded up as the
    collection's budget is) left to ``pool`` by the budget pools' nodes unavailable outside it, and its ``members``
    (node names) that would stall it. ``target`` is the pool's config ("" when it has none yet: every member rolls;
    None when the members only leave the pool)."""
    shared = [node for node in nodes if node_pool(node) in budget_pools or node_name(node) in members]
    budget = scaled_max_unavailable(max_unavailable, total=len(shared))
    elsewhere = sorted(node_name(n) for n in shared if node_name(n) not in members and mco_unavailable(n))
    stalled = sorted(node_name(n) for n in shared if node_name(n) in members and cordoned_by_others(n))
    pending = (
        []
        if target is None
        else sorted(node_name(n) for n in shared if node_name(n) in members and not _done_at(n, target))
    )
    return PoolBudget(
        pool=pool, budget=budget, elsewhere=tuple(elsewhere), stalled=tuple(stalled), pending=tuple(pending)
    )


def _done_at(node: Mapping[str, Any], target: str) -> bool:
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return (
        bool(target)
        and annotations.get(CURRENT_CONFIG) == target == annotations.get(DESIRED_CONFIG)
        and annotations.get(MCD_STATE) == STATE_DONE
    )
