"""Carrying out the upgrade model's decisions against the store, for every driver flavor.

``upgrade_model.plan_upgrade`` decides (pure); this module does what the
shared library's managers do with each decision (NVIDIA/k8s-operator-libs
``pkg/upgrade``: ``NodeUpgradeStateProvider.ChangeNodeUpgradeState``,
``CordonManager``, ``PodManager``, ``DrainManager``), one store write per
action.  The GPU Operator and the Network Operator simulations both use it,
parametrised only by the :class:`~.upgrade_model.DriverFlavor` (state label,
event reason) and the operator's event component: upstream it is one library.

Also here, shared by the simulations that build snapshots or evict pods:
``driver_pod_snapshot``, ``node_pod``, ``node_condition_ready``, ``set_label``
and ``evict_pod`` (the API server's eviction semantics for an in-process
caller).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..kube import podutil
from ..kube.events import EventRecorder
from ..kube.workloads import NEVER_ALLOW_ANNOTATION, controller_scale
from ..machinery import disruption, errors
from ..machinery.kinds import Kinds
from ..machinery.store import Store
from . import upgrade_model as um

log = logging.getLogger(__name__)

Obj = dict[str, Any]


@dataclass
class UpgradeApplier:
    """Applies ``um.Action`` s for one driver flavor; keeps the in-memory eviction clocks upstream keeps too.

    ``events`` returns the simulation's event recorder (or None while it has none), read at each use.
    """

    store: Store
    kinds: Kinds
    flavor: um.DriverFlavor
    component: str
    events: Callable[[], EventRecorder | None]
    # node -> (state the eviction started in, since): the library's goroutine bookkeeping.
    eviction_started: dict[str, tuple[str, float]] = field(default_factory=dict)

    def apply_plan(self, plan: um.UpgradePlan, snapshot: um.ClusterSnapshot) -> None:
        """Carry out the decisions as the library's managers do, one API write per action."""
        states = {n.name: n.state(self.flavor) for n in snapshot.nodes}
        for decision in plan.decisions:
            for action in decision.actions:
                if not self.apply(decision.node, action, state=states.get(decision.node, "")):
                    break  # the library stops processing the node on a failed write

    def apply(self, node_name: str, action: um.Action, *, state: str) -> bool:
        """One action; False when its write failed (the node is left for the next reconcile)."""
        try:
            if isinstance(action, um.ChangeState):
                self.mutate_node(node_name, lambda node: set_label(node, self.flavor.state_label, action.state))
                self.eviction_started.pop(node_name, None)
            elif isinstance(action, um.Cordon):
                self.mutate_node(node_name, lambda node: node.setdefault("spec", {}).update(unschedulable=True))
            elif isinstance(action, um.Uncordon):
                self.mutate_node(node_name, lambda node: node.setdefault("spec", {}).pop("unschedulable", None))
            elif isinstance(action, um.SetAnnotation):
                self.mutate_node(
                    node_name,
                    lambda node: node["metadata"].setdefault("annotations", {}).update({action.key: action.value}),
                )
            elif isinstance(action, um.RemoveAnnotation):
                self.mutate_node(
                    node_name, lambda node: (node["metadata"].get("annotations") or {}).pop(action.key, None)
                )
            elif isinstance(action, um.StartEvictionClock):
                self.eviction_started[node_name] = (state, action.at)
            elif isinstance(action, um.EvictPods):
                for ref in action.pods:
                    evict_pod(self.store, self.kinds, ref.namespace, ref.name)
            elif isinstance(action, um.DeleteDriverPod):
                try:
                    self.store.delete(self.kinds.pod, action.namespace, action.name)
                except errors.ApiError as exc:
                    if exc.code != 404:
                        self.node_event(node_name, "Warning", f"Failed to restart driver pod {exc.message}")
                        return False
            elif isinstance(action, um.RecordEvent):
                self.node_event(node_name, action.type, action.message, reason=action.reason)
        except errors.ApiError as exc:
            if isinstance(action, um.ChangeState):
                self.node_event(
                    node_name, "Warning", f"Failed to update node state label to {action.state}, {exc.message}"
                )
            log.debug("%s upgrade action %s on %s failed: %s", self.flavor.name, action, node_name, exc)
            return False
        return True

    def eviction_started_at(self, node_name: str, state: str) -> float | None:
        """When the node's current eviction began, if it began in the state the node is in now."""
        started = self.eviction_started.get(node_name)
        return started[1] if started and started[0] == state else None

    def reset_state_labels(self, node_labels: dict[str, dict[str, str]]) -> None:
        """removeNodeUpgradeStateLabels: with auto upgrade off the controller forgets every node's state."""
        for name in um.nodes_to_reset(node_labels, flavor=self.flavor):
            try:
                self.mutate_node(name, lambda node: node["metadata"]["labels"].pop(self.flavor.state_label, None))
            except errors.ApiError as exc:
                log.debug("state label of node %s not removed: %s", name, exc)

    def mutate_node(self, name: str, change: Callable[[Obj], Any]) -> None:
        self.store.mutate(self.kinds.node, None, name, change)

    def node_event(self, node_name: str, event_type: str, message: str, *, reason: str | None = None) -> None:
        events = self.events()
        if events is None:
            return
        node = self.store.try_get(self.kinds.node, None, node_name)
        involved = (
            node if node is not None else {"kind": "Node", "name": node_name, "uid": node_name, "apiVersion": "v1"}
        )
        events.record(
            involved,
            reason=reason or self.flavor.event_reason,
            message=message,
            component=self.component,
            event_type=event_type,
        )


# -- eviction -------------------------------------------------------------------------------------------------
def evict_pod(store: Store, kinds: Kinds, namespace: str, name: str) -> bool:
    """The API server's pods/eviction for an in-process caller: True when the pod goes.

    As the eviction REST handler: a finished pod is deleted at once; a pod
    covered by no PodDisruptionBudget is deleted; more than one covering
    budget is an error; otherwise the budget must allow a disruption (an
    unready pod may go while the budget is healthy, the default
    IfHealthyBudget policy).  A refusal is the 429 a client retries.
    """
    pod = store.try_get(kinds.pod, namespace, name)
    if pod is None:
        return True
    if podutil.is_terminating(pod):
        return True
    if not podutil.is_terminal(pod):
        pdbs = [pdb for pdb in store.list(kinds.pdb, namespace) if disruption.pods_covered(pdb, [pod])]
        if len(pdbs) > 1:
            return False
        if pdbs:
            if (pdbs[0]["metadata"].get("annotations") or {}).get(NEVER_ALLOW_ANNOTATION):
                return False  # the twin's "PDB never allows eviction" fault
            pods = store.list(kinds.pod, namespace)
            expected = disruption.expected_from_controllers(pdbs[0], pods, controller_scale(store, kinds))
            budget = disruption.compute_budget(pdbs[0], pods, expected_pods=expected)
            healthy_pod = disruption.is_pod_healthy(pod)
            allowed = budget.disruptions_allowed > 0 or (
                not healthy_pod and budget.current_healthy >= budget.desired_healthy
            )
            if budget.error or not allowed:
                return False
    try:
        store.delete(kinds.pod, namespace, name)
    except errors.ApiError as exc:
        return exc.code == 404
    return True


# -- snapshot helpers -------------------------------------------------------------------------------------------
def driver_pod_snapshot(pod: Obj, owner: Obj | None) -> um.DriverPod:
    status = pod.get("status") or {}

    def containers(key: str) -> tuple[um.ContainerState, ...]:
        return tuple(
            um.ContainerState(
                name=c.get("name", ""), ready=bool(c.get("ready")), restart_count=int(c.get("restartCount") or 0)
            )
            for c in status.get(key) or ()
        )

    return um.DriverPod(
        namespace=pod["metadata"].get("namespace", ""),
        name=pod["metadata"]["name"],
        daemonset=owner["metadata"]["name"] if owner is not None else None,
        revision_hash=(pod["metadata"].get("labels") or {}).get("controller-revision-hash"),
        phase=podutil.phase_of(pod),
        containers=containers("containerStatuses"),
        init_containers=containers("initContainerStatuses"),
        terminating=podutil.is_terminating(pod),
    )


def node_pod(pod: Obj) -> um.NodePod:
    meta = pod["metadata"]
    controller = podutil.controller_of(pod)
    volumes = (pod.get("spec") or {}).get("volumes") or ()
    return um.NodePod(
        namespace=meta.get("namespace", ""),
        name=meta["name"],
        labels=meta.get("labels") or {},
        phase=podutil.phase_of(pod),
        ready=podutil.is_pod_ready(pod),
        requests_gpu=um.requests_gpu(pod),
        controller_kind=controller.get("kind") if controller else None,
        uses_empty_dir=any("emptyDir" in volume for volume in volumes),
        mirror="kubernetes.io/config.mirror" in (meta.get("annotations") or {}),
        terminating=podutil.is_terminating(pod),
    )


def node_condition_ready(node: Obj) -> bool:
    # isNodeConditionReady: only a Ready condition that is not True makes the node unavailable.
    for condition in (node.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready" and condition.get("status") != "True":
            return False
    return True


def set_label(node: Obj, key: str, value: str | None) -> None:
    labels = node["metadata"].setdefault("labels", {})
    if value is None:
        labels.pop(key, None)
    else:
        labels[key] = value
