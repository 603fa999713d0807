# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Which nodes a driver rollout targets and which writes scope it (collection-internal, pure).

Two ways to keep a new driver on the canary nodes, chosen by the caller:

``nvidiadriver``
    A second NVIDIADriver for the canary pool (``nodeSelector`` = the canary
    label) beside the production one. This is a real pin: each CR renders its
    own DaemonSet with its own driver version. Upstream refuses overlapping
    selectors (every CR goes notReady with ConflictingNodeSelector), so the
    production CR must stop selecting the canary nodes. In order of preference:

    1. it is already the ``default`` NVIDIADriver (it then owns only the GPU
       nodes no other CR selects): nothing to change;
    2. the served CRD has ``spec.default`` and the CR has no nodeSelector: it
       is made the default. Its DaemonSet template does not change, so no
       production driver pod is replaced;
    3. otherwise the pool-label way NVIDIA documents for driver pools: every
       GPU node the CR selects gets ``<canary label>=false`` first, then the
       CR's nodeSelector gains that label. The DaemonSet template changes
       with the selector, so the upgrade controller walks every production
       node through a same-version restart once (within the budget); the
       plan says so in a warning. nodeAffinity ``NotIn`` would avoid the
       labels, but the operators up to v26.3 ignore NVIDIADriver nodeAffinity.

    A new canary CR is first created at the production driver (the canary
    nodes' driver pods move to its DaemonSet at the same version), and only
    then bumped to the target, so the canary nodes' upgrade goes through the
    upgrade controller (cordon, pod deletion, restart, validation, and
    ``upgrade-failed`` when the driver cannot load) like any other.

``skip_label``
    The upgrade controller's ``nvidia.com/gpu-driver-upgrade.skip=true`` on
    every node that must wait. It holds the state machine, not the
    DaemonSet: the template already carries the new driver, so any
    recreation of a driver pod on a held node (reboot, MachineConfigPool
    update, eviction) starts the new driver. Preflight warns about what
    could do that during the bake.

Skip labels this collection sets carry the annotation ``HOLD_ANNOTATION``,
so a later promotion releases exactly those and never a person's own
(``_skip_label``, shared with the OFED rollout).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Sequence, Set, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_spec import (
    DriverTarget,
    desired_cluster_policy,
    desired_nvidia_driver,
    merge_patch_for,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._skip_label import (
    GPU_DRIVER,
    HOLD_CANARY,
    HOLD_HALT,
    HOLD_PACED,
    STATE_FAILED,
    STATE_REQUIRED,
)

STATE_LABEL = GPU_DRIVER.state_label
SKIP_LABEL = GPU_DRIVER.label
HOLD_ANNOTATION = GPU_DRIVER.annotation
# On a node while it moves between NVIDIADriver pools: who cordoned it.
POOL_MOVE_ANNOTATION = "gpufleet.io/gpu-driver-pool-move"
POOL_MOVE_CORDONED = "cordoned"
POOL_MOVE_WAS_UNSCHEDULABLE = "was-unschedulable"
DRIVER_OWNER_LABEL = "nvidia.com/gpu-operator.driver.owner"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpufleet.upgrade"

SCOPE_CANARY = "canary"
SCOPE_ALL = "all"
MODE_NVIDIADRIVER = "nvidiadriver"
MODE_SKIP_LABEL = "skip_label"


# Paced holds go first: every target waits under the skip label before the target changes.
PHASE_HOLD = "hold"
PHASE_SCOPE = "scope"
PHASE_TARGET = "target"
PHASE_CLEANUP = "cleanup"


@dataclass(frozen=True)
class Write:
    """One API write of the plan.

    ``desired`` is a merge-patch fragment of the fields this module owns; at
    write time the runner re-reads the object and sends only what still
    differs (guarded by resourceVersion), so a plan computed from one read
    stays right after a conflict. ``patch`` is what the plan's read implies
    (check mode shows it). Creates carry the whole object in ``desired``.
    """

    op: str  # "patch", "create", "delete"
    kind: str  # "ClusterPolicy", "NVIDIADriver", "Node"
    name: str
    why: str
    phase: str
    desired: Dict[str, Any] = field(default_factory=dict)
    patch: Dict[str, Any] = field(default_factory=dict)
    before: Optional[Dict[str, Any]] = None

    def as_dict(self) -> Dict[str, Any]:
        shown = self.desired if self.op == "create" else self.patch
        return {
            "op": self.op,
            "kind": self.kind,
            "name": self.name,
            "why": self.why,
            "phase": self.phase,
            "body": shown,
        }


@dataclass(frozen=True)
class PinWait:
    """Wait until the canary nodes' driver pods run from the canary NVIDIADriver's DaemonSet."""

    driver_name: str
    nodes: Tuple[str, ...]


@dataclass(frozen=True)
class RolloutRequest:
    scope: str
    target: Optional[DriverTarget]
    upgrade_policy: Dict[str, Any]
    canary_mode: Optional[str] = None
    canary_selector: Dict[str, str] = field(default_factory=lambda: {"gpu-canary": "true"})
    canary_driver_name: str = "gpu-canary"
    remove_canary_driver: bool = True
    retry_failed_nodes: bool = False
    # The runner releases the targets in turn (failure domains): the plan holds them instead of releasing them,
    # except those already done at the target (``done``).
    paced: bool = False
    done: FrozenSet[str] = frozenset()


@dataclass(frozen=True)
class ClusterView:
    """What the planner reads: API objects as the server returned them."""

    policy: Dict[str, Any]
    drivers: Tuple[Dict[str, Any], ...]
    nodes: Tuple[Dict[str, Any], ...]
    # Nodes hosting a driver pod (the upgrade controller manages exactly these).
    managed: FrozenSet[str]
    crd_has_default: bool = False

    @property
    def uses_nvidia_driver_crd(self) -> bool:
        return bool((((self.policy.get("spec") or {}).get("driver")) or {}).get("useNvidiaDriverCRD"))


@dataclass(frozen=True)
class RolloutPlan:
    targets: Tuple[str, ...]
    held_by_others: Tuple[str, ...]
    canary_nodes: Tuple[str, ...]
    writes: Tuple[Write, ...]
    pin: Optional[PinWait] = None
    warnings: Tuple[str, ...] = ()

    def in_phase(self, phase: str) -> List[Write]:
        return [write for write in self.writes if write.phase == phase]

    @property
    def changes(self) -> bool:
        return any(write.op != "patch" or write.patch for write in self.writes)

    def as_dict(self) -> Dict[str, Any]:
        return {
            "targets": list(self.targets),
            "canary_nodes": list(self.canary_nodes),
            "held_by_others": list(self.held_by_others),
            "writes": [write.as_dict() for write in self.writes if write.op != "patch" or write.patch],
            "waits_for_canary_pool": self.pin is not None,
        }


# -- helpers (pure) ----------------------------------------------------------------------------


def labels_of(obj: Mapping[str, Any]) -> Dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def annotations_of(obj: Mapping[str, Any]) -> Dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def name_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def nvidia_driver_selects(cr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a non-default NVIDIADriver selects a node (an empty nodeSelector means every GPU node)."""
    selector = dict((cr.get("spec") or {}).get("nodeSelector") or {}) or {GPU_PRESENT_LABEL: "true"}
    return matches(selector, labels)


def is_default_driver(cr: Mapping[str, Any]) -> bool:
    return bool((cr.get("spec") or {}).get("default"))


def held_by_others(node: Mapping[str, Any]) -> bool:
    """A skip label somebody else set (this collection marks its own with HOLD_ANNOTATION)."""
    return GPU_DRIVER.held_by_others(node)


def hold_write(node: Mapping[str, Any], *, reason: str, why: str, phase: str = PHASE_SCOPE) -> Optional[Write]:
    """Skip label plus our annotation, unless the node already carries both."""
    if GPU_DRIVER.our_hold(node):
        return None
    return _node_write(node, GPU_DRIVER.hold_patch(reason), why=why, phase=phase)


def release_write(node: Mapping[str, Any], *, why: str) -> Optional[Write]:
    """Remove the skip label and annotation this collection set (nothing when it set none)."""
    if not GPU_DRIVER.held_by_us(node):
        return None
    return _node_write(node, GPU_DRIVER.release_patch(node), why=why)


def _node_write(node: Mapping[str, Any], desired: Dict[str, Any], *, why: str, phase: str = PHASE_SCOPE) -> Write:
    return Write(
        op="patch",
        kind="Node",
        name=name_of(node),
        why=why,
        phase=phase,
        desired=desired,
        patch=merge_patch_for(node, desired),
        before=node_label_view(node),
    )


def node_label_view(node: Mapping[str, Any]) -> Dict[str, Any]:
    """The part of a Node a diff of skip labels and pool labels needs."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name_of(node), "labels": labels_of(node), "annotations": annotations_of(node)},
    }


def _patch_write(*, kind: str, obj: Mapping[str, Any], desired: Dict[str, Any], why: str, phase: str) -> Write:
    return Write(
        op="patch",
        kind=kind,
        name=name_of(obj),
        why=why,
        phase=phase,
        desired=desired,
        patch=merge_patch_for(obj, desired),
        before=dict(obj),
    )


# -- the planner (pure) -----------------------------------------------------------------------------


def plan_rollout(view: ClusterView, request: RolloutRequest) -> RolloutPlan:
    """Targets and writes of one run, computed from what the cluster holds now (a re-run resumes)."""
    _check_request(request)
    managed_nodes = [node for node in view.nodes if name_of(node) in view.managed]
    others_hold = tuple(sorted(name_of(node) for node in managed_nodes if held_by_others(node)))
    canary_nodes = tuple(
        sorted(name_of(node) for node in managed_nodes if matches(request.canary_selector, labels_of(node)))
    )
    targets = _targets(view, request, canary_nodes=canary_nodes, others_hold=others_hold)
    if request.scope == SCOPE_CANARY and request.canary_mode == MODE_NVIDIADRIVER and not view.uses_nvidia_driver_crd:
        raise InvalidInputError(
            "canary_mode 'nvidiadriver' needs a cluster whose ClusterPolicy sets spec.driver.useNvidiaDriverCRD: "
            "true (switching it replaces every driver pod, a step of its own); use canary_mode 'skip_label' here"
        )

    warnings: List[str] = []
    by_name = {name_of(node): node for node in view.nodes}
    writes = _skip_label_writes(managed_nodes, request, targets=set(targets), others_hold=others_hold)
    pin: Optional[PinWait] = None
    if not view.uses_nvidia_driver_crd:
        desired = desired_cluster_policy(view.policy, target=request.target, upgrade_policy=request.upgrade_policy)
        writes.append(
            _patch_write(
                kind="ClusterPolicy",
                obj=view.policy,
                desired=desired,
                why="target driver and upgrade policy",
                phase=PHASE_TARGET,
            )
        )
    else:
        pin = _plan_nvidia_drivers(
            view=view, request=request, canary_nodes=canary_nodes, by_name=by_name, writes=writes, warnings=warnings
        )
    if request.retry_failed_nodes:
        writes.extend(_retry_failed_writes(targets, by_name=by_name))
    return RolloutPlan(
        targets=targets,
        held_by_others=others_hold,
        canary_nodes=canary_nodes,
        writes=tuple(writes),
        pin=pin,
        warnings=tuple(warnings),
    )


def _check_request(request: RolloutRequest) -> None:
    """Refuse a scope, canary mode or canary selector the planner cannot work with (before looking at the cluster)."""
    if request.scope not in (SCOPE_CANARY, SCOPE_ALL):
        raise InvalidInputError(f"scope must be {SCOPE_CANARY!r} or {SCOPE_ALL!r}, not {request.scope!r}")
    if request.scope == SCOPE_CANARY and request.canary_mode not in (MODE_NVIDIADRIVER, MODE_SKIP_LABEL):
        raise InvalidInputError(
            f"scope 'canary' needs canary_mode {MODE_NVIDIADRIVER!r} or {MODE_SKIP_LABEL!r}, "
            f"not {request.canary_mode!r}"
        )
    if not request.canary_selector:
        raise InvalidInputError("canary_selector must name at least one label (e.g. gpu-canary: 'true')")


def _targets(
    view: ClusterView, request: RolloutRequest, *, canary_nodes: Tuple[str, ...], others_hold: Tuple[str, ...]
) -> Tuple[str, ...]:
    """The canary nodes (refused when none, or when someone else holds one), or every managed node not held."""
    if request.scope != SCOPE_CANARY:
        return tuple(sorted(name for name in view.managed if name not in others_hold))
    if not canary_nodes:
        selector_text = ",".join(f"{key}={value}" for key, value in sorted(request.canary_selector.items()))
        raise InvalidInputError(
            f"No node hosting a GPU driver pod carries {selector_text}: label the canary node(s) first"
        )
    blocked = sorted(set(canary_nodes) & set(others_hold))
    if blocked:
        raise InvalidInputError(
            f"Canary node(s) {', '.join(blocked)} carry {SKIP_LABEL}=true set by someone else; the upgrade "
            "controller would never start them. Remove the label or choose another canary"
        )
    return canary_nodes


def _skip_label_writes(
    managed_nodes: Sequence[Mapping[str, Any]],
    request: RolloutRequest,
    *,
    targets: Set[str],
    others_hold: Tuple[str, ...],
) -> List[Write]:
    """Release our skip label on every target (hold it, when the runner releases the targets in turn); hold the rest
    in skip_label canary mode."""
    writes: List[Write] = []
    for node in managed_nodes:
        name = name_of(node)
        if name in targets and request.paced and name not in request.done:
            write = hold_write(
                node, reason=HOLD_PACED, why="target of this rollout: waits for its turn", phase=PHASE_HOLD
            )
        elif name in targets:
            write = release_write(node, why="target of this rollout: release the hold this collection set")
        elif request.scope == SCOPE_CANARY and request.canary_mode == MODE_SKIP_LABEL and name not in others_hold:
            write = hold_write(node, reason=HOLD_CANARY, why="not a canary node: hold it until promotion")
        else:
            write = None
        if write is not None:
            writes.append(write)
    return writes


def _plan_nvidia_drivers(
    *,
    view: ClusterView,
    request: RolloutRequest,
    canary_nodes: Sequence[str],
    by_name: Mapping[str, Dict[str, Any]],
    writes: List[Write],
    warnings: List[str],
) -> Optional[PinWait]:
    """The writes of a cluster whose driver lives in NVIDIADriver resources. Returns the pin wait."""
    if request.upgrade_policy:
        desired = desired_cluster_policy(view.policy, target=None, upgrade_policy=request.upgrade_policy)
        writes.append(
            _patch_write(
                kind="ClusterPolicy",
                obj=view.policy,
                desired=desired,
                why="upgrade policy (the ClusterPolicy's drives every NVIDIADriver DaemonSet)",
                phase=PHASE_TARGET,
            )
        )
    live = [cr for cr in view.drivers if not (cr.get("metadata") or {}).get("deletionTimestamp")]
    canary_cr = next((cr for cr in live if name_of(cr) == request.canary_driver_name), None)
    production = [cr for cr in live if name_of(cr) != request.canary_driver_name]
    if not production and canary_cr is None:
        raise InvalidInputError(
            "The ClusterPolicy uses NVIDIADriver resources (useNvidiaDriverCRD) but the cluster has none"
        )
    if request.target is None:
        return None  # a preflight without a target: nothing to write on the NVIDIADrivers
    if request.scope == SCOPE_CANARY and request.canary_mode == MODE_NVIDIADRIVER:
        return _plan_canary_pool(
            view=view,
            request=request,
            production=production,
            canary_cr=canary_cr,
            canary_nodes=canary_nodes,
            by_name=by_name,
            writes=writes,
            warnings=warnings,
        )
    # skip_label canary or promotion/rollback: every NVIDIADriver gets the target.
    for cr in live:
        desired = desired_nvidia_driver(cr, target=request.target, upgrade_policy=request.upgrade_policy)
        writes.append(
            _patch_write(kind="NVIDIADriver", obj=cr, desired=desired, why="target driver", phase=PHASE_TARGET)
        )
    if request.scope == SCOPE_ALL and canary_cr is not None and request.remove_canary_driver:
        if labels_of(canary_cr).get(MANAGED_BY_LABEL) == MANAGED_BY:
            writes.append(
                Write(
                    op="delete",
                    kind="NVIDIADriver",
                    name=name_of(canary_cr),
                    why="promotion done: the canary nodes are cordoned, emptied of GPU pods and moved back "
                    "to the production NVIDIADriver (same driver), then uncordoned",
                    phase=PHASE_CLEANUP,
                    before=dict(canary_cr),
                )
            )
        else:
            warnings.append(f"NVIDIADriver {name_of(canary_cr)} was not created by {MANAGED_BY}; it is left in place")
    return None


def _retry_failed_writes(targets: Sequence[str], *, by_name: Mapping[str, Dict[str, Any]]) -> List[Write]:
    """Failed nodes a person asked to retry: upstream's manual retry is relabelling them upgrade-required.

    Planned after the target writes, or the controller would retry the very driver that failed.
    """
    writes: List[Write] = []
    for name in targets:
        node = by_name[name]
        if labels_of(node).get(STATE_LABEL) == STATE_FAILED:
            desired = {"metadata": {"labels": {STATE_LABEL: STATE_REQUIRED}}}
            writes.append(
                Write(
                    op="patch",
                    kind="Node",
                    name=name,
                    why="retry the failed driver upgrade (relabel upgrade-required, upstream's manual retry)",
                    phase=PHASE_TARGET,
                    desired=desired,
                    patch=merge_patch_for(node, desired),
                    before=node_label_view(node),
                )
            )
    return writes


def _plan_canary_pool(
    *,
    view: ClusterView,
    request: RolloutRequest,
    production: Sequence[Dict[str, Any]],
    canary_cr: Optional[Dict[str, Any]],
    canary_nodes: Sequence[str],
    by_name: Mapping[str, Dict[str, Any]],
    writes: List[Write],
    warnings: List[str],
) -> Optional[PinWait]:
    """Production exclusion, then the canary NVIDIADriver (pinned first when new). Returns the pin wait."""
    target = request.target
    if target is None:
        raise InvalidInputError("canary scoping needs a target driver")
    canary_labels = [labels_of(by_name[name]) for name in canary_nodes]
    defaults = [cr for cr in production if is_default_driver(cr)]
    overlapping = [
        cr
        for cr in production
        if not is_default_driver(cr) and any(nvidia_driver_selects(cr, labels) for labels in canary_labels)
    ]
    owner_of_canaries = overlapping[0] if overlapping else (defaults[0] if defaults else production[0])
    _exclude_canaries_from_production(
        overlapping,
        view=view,
        request=request,
        defaults=defaults,
        canary_nodes=canary_nodes,
        writes=writes,
        warnings=warnings,
    )
    if canary_cr is None:
        writes.extend(_new_canary_driver_writes(request, target=target, production_cr=owner_of_canaries))
        return PinWait(driver_name=request.canary_driver_name, nodes=tuple(canary_nodes))
    selector_desired = desired_nvidia_driver(canary_cr, node_selector=request.canary_selector)
    writes.append(
        _patch_write(
            kind="NVIDIADriver",
            obj=canary_cr,
            desired=selector_desired,
            why="canary pool selector",
            phase=PHASE_SCOPE,
        )
    )
    desired = desired_nvidia_driver(canary_cr, target=target, upgrade_policy=request.upgrade_policy)
    writes.append(
        _patch_write(
            kind="NVIDIADriver",
            obj=canary_cr,
            desired=desired,
            why="target driver on the canary pool",
            phase=PHASE_TARGET,
        )
    )
    return None


def _exclude_canaries_from_production(
    overlapping: Sequence[Dict[str, Any]],
    *,
    view: ClusterView,
    request: RolloutRequest,
    defaults: List[Dict[str, Any]],
    canary_nodes: Sequence[str],
    writes: List[Write],
    warnings: List[str],
) -> None:
    """Make each production NVIDIADriver that selects a canary node stop selecting it (upstream refuses overlaps).

    Appends to ``defaults`` the CR it makes the default, so it makes at most one.
    """
    for cr in overlapping:
        selector = dict((cr.get("spec") or {}).get("nodeSelector") or {})
        if view.crd_has_default and not defaults and not selector:
            # The default CR owns only the nodes no other CR selects; its DaemonSet template is unchanged.
            desired = desired_nvidia_driver(cr, default=True)
            writes.append(
                _patch_write(
                    kind="NVIDIADriver",
                    obj=cr,
                    desired=desired,
                    why="make the production NVIDIADriver the default so it stops selecting the canary pool",
                    phase=PHASE_SCOPE,
                )
            )
            defaults.append(cr)
            continue
        writes.extend(_pool_label_exclusion(cr, request=request, view=view, canary_nodes=canary_nodes))
        warnings.append(
            f"NVIDIADriver {name_of(cr)} gains nodeSelector {_first_label(request)}=false: its DaemonSet template "
            "changes, so the upgrade controller restarts the driver pod of each of its nodes once (same driver, "
            "within maxUnavailable)"
        )


def _new_canary_driver_writes(
    request: RolloutRequest, *, target: DriverTarget, production_cr: Mapping[str, Any]
) -> List[Write]:
    """Create the canary NVIDIADriver at the production driver, then set the target on it.

    Two steps so the canary nodes' driver pods first move to its DaemonSet at the same version, and the
    upgrade itself goes through the upgrade controller like any other.
    """
    production_spec = dict(production_cr.get("spec") or {})
    pinned = DriverTarget(
        version=str(production_spec.get("version") or target.version),
        repository=production_spec.get("repository"),
        image=production_spec.get("image"),
    )
    spec = {
        key: value
        for key, value in production_spec.items()
        if key not in ("nodeSelector", "default", "nodeAffinity", "upgradePolicy")
    }
    spec.update(pinned.fields_for(production_spec))
    spec.update({"default": False, "nodeSelector": dict(request.canary_selector)})
    spec.setdefault("driverType", "gpu")
    body = {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": request.canary_driver_name, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
        "spec": spec,
    }
    return [
        Write(
            op="create",
            kind="NVIDIADriver",
            name=request.canary_driver_name,
            why=f"canary pool at the production driver {pinned.version}: its nodes are cordoned, emptied of GPU "
            "pods, moved to it and uncordoned before the target is set",
            phase=PHASE_SCOPE,
            desired=body,
        ),
        Write(
            op="patch",
            kind="NVIDIADriver",
            name=request.canary_driver_name,
            why="target driver on the canary pool",
            phase=PHASE_TARGET,
            desired=desired_nvidia_driver(body, target=target),
            patch=merge_patch_for(body, desired_nvidia_driver(body, target=target)),
            before=body,
        ),
    ]


def _first_label(request: RolloutRequest) -> str:
    return sorted(request.canary_selector)[0]


def _pool_label_exclusion(
    cr: Mapping[str, Any], *, request: RolloutRequest, view: ClusterView, canary_nodes: Sequence[str]
) -> List[Write]:
    """Label the CR's non-canary GPU nodes ``<key>=false``, then add that to its nodeSelector (in this order,
    so no production node is ever left without a driver)."""
    if len(request.canary_selector) != 1 or next(iter(request.canary_selector.values())) != "true":
        raise InvalidInputError(
            f"NVIDIADriver {name_of(cr)} selects the canary nodes and cannot be made the default here; excluding "
            "them by pool label needs a canary_selector of one label with the value 'true' (e.g. gpu-canary: 'true')"
        )
    key = _first_label(request)
    writes: List[Write] = []
    for node in view.nodes:
        name = name_of(node)
        labels = labels_of(node)
        if name in canary_nodes or labels.get(GPU_PRESENT_LABEL) != "true" or not nvidia_driver_selects(cr, labels):
            continue
        if labels.get(key) == "false":
            continue
        if key in labels:
            raise InvalidInputError(
                f"Node {name} carries {key}={labels[key]}: it would fall out of NVIDIADriver {name_of(cr)}'s pool"
            )
        desired = {"metadata": {"labels": {key: "false"}}}
        writes.append(
            Write(
                op="patch",
                kind="Node",
                name=name,
                why=f"production pool label (NVIDIADriver {name_of(cr)} will select {key}=false)",
                phase=PHASE_SCOPE,
                desired=desired,
                patch=merge_patch_for(node, desired),
                before=node_label_view(node),
            )
        )
    selector = dict((cr.get("spec") or {}).get("nodeSelector") or {})
    selector[key] = "false"
    desired = desired_nvidia_driver(cr, node_selector=selector)
    writes.append(
        _patch_write(
            kind="NVIDIADriver",
            obj=cr,
            desired=desired,
            why=f"production pool stops selecting the canary nodes ({key}=false)",
            phase=PHASE_SCOPE,
        )
    )
    return writes


def halt_writes(nodes: Sequence[Mapping[str, Any]], *, hold: Sequence[str]) -> List[Write]:
    """Skip labels that stop a halted rollout from starting more nodes."""
    writes = []
    for node in nodes:
        if name_of(node) in hold:
            write = hold_write(node, reason=HOLD_HALT, why="rollout halted: hold nodes not yet started")
            if write is not None:
                writes.append(write)
    return writes
