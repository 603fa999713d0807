"""The driver upgrade controller the GPU Operator and the Network Operator simulations share.

Upstream both operators' upgrade controllers (gpu-operator and network-operator
``controllers/upgrade_controller.go``) are thin callers of one library, NVIDIA/k8s-operator-libs
``pkg/upgrade``: each lists its driver DaemonSets and driver pods, the library's ``BuildState``
(``upgrade_state.go``) turns them and the nodes hosting the pods into the cluster's upgrade state,
``ApplyState`` walks every node's state machine, and the managers (``pod_manager.go``,
``drain_manager.go``, ``cordon_manager.go``, ``validation_manager.go``,
``node_upgrade_state_provider.go``) carry out the steps.  The twin splits it the same way:
``upgrade_model`` plans (pure), ``upgrade_apply`` applies, and this module is the skeleton around
them, one reconcile:

    driver DaemonSets and pods (the operator's)  ->  ``build_snapshot`` (BuildState)
        ->  ``upgrade_model.plan_upgrade``  ->  ``UpgradeApplier.apply_plan``

What each operator keeps to itself: which DaemonSets and pods are its drivers, its state label
(the ``um.DriverFlavor``), the states in which a node's other pods matter, and where its
``upgradePolicy`` (and so ``autoUpgrade``) comes from.

Where the twin knowingly differs (both operators): while a driver pod just created is not bound
to a node yet the controller waits for it (up to ``um.UNBOUND_GRACE_SECONDS``) instead of skipping
the node as BuildState does, which would hand the node's upgrade slot to another node; a real
scheduler binds within milliseconds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..kube.events import EventRecorder
from ..kube.index import ClusterIndex
from ..machinery.clock import parse_rfc3339
from ..machinery.kinds import Kinds
from ..machinery.selectors import label_selector_from_map
from ..machinery.store import Store
from . import upgrade_apply
from . import upgrade_model as um

Obj = dict[str, Any]


def latest_revision_hash(store: Store, kinds: Kinds, daemonset: Obj) -> str | None:
    """The hash of the DaemonSet's newest ControllerRevision: what a driver pod must carry to be up to date.

    As ``GetDaemonsetControllerRevisionHash`` in k8s-operator-libs ``pkg/upgrade/pod_manager.go`` (since
    its commit cf74a6e, "Fix Daemonset controller revision check when duplicate Daemonsets exist with same
    selector"): the ControllerRevisions of the DaemonSet's namespace that its ``spec.selector.matchLabels``
    select and whose name starts with the DaemonSet's name; the one with the highest ``revision``; its name
    without the ``<daemonset>-`` prefix.  None when there is none (upstream returns an error).
    """
    meta = daemonset["metadata"]
    name = meta["name"]
    match_labels = ((daemonset.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    selector = label_selector_from_map(match_labels)
    best: tuple[int, str] | None = None
    for revision in store.list(
        kinds.controllerrevision,
        meta.get("namespace"),
        lambda r: selector.matches(r["metadata"].get("labels") or {}),
    ):
        revision_name = revision["metadata"]["name"]
        if not revision_name.startswith(name):
            continue  # another DaemonSet's revision that the same selector happens to match
        number = int(revision.get("revision") or 0)
        if best is None or number > best[0]:
            best = (number, revision_name.removeprefix(f"{name}-"))
    return best[1] if best else None


@dataclass
class UpgradeStatus:
    """What the last upgrade reconcile saw (the GPU Operator serves it as its gpu_operator_nodes_upgrades_* gauges)."""

    auto_upgrade: bool = True
    counts: um.UpgradeCounts | None = None
    blocked_reason: str = ""
    reconciled_at: float | None = None
    reconciles: int = 0
    node_states: dict[str, str] = field(default_factory=dict)


class DriverUpgradeController:
    """One operator's driver upgrade controller: BuildState, plan, apply, requeue.

    ``needs_pods``: the states in which the snapshot lists the node's other pods (what the state machine
    waits for or evicts there); ``retry_states``: the states in which refused evictions are retried after
    ``eviction_retry`` seconds (kubectl's drain helper does), not at the next planned requeue.
    """

    def __init__(
        self,
        *,
        store: Store,
        kinds: Kinds,
        index: ClusterIndex,
        flavor: um.DriverFlavor,
        component: str,
        events: Callable[[], EventRecorder | None],
        pod_noun: str,
        needs_pods: frozenset[str],
        retry_states: frozenset[str],
        requeue: float,
        eviction_retry: float,
        auto_upgrade: bool = True,
    ) -> None:
        self.store = store
        self.kinds = kinds
        self.index = index
        self.flavor = flavor
        self.pod_noun = pod_noun
        self.needs_pods = needs_pods
        self.retry_states = retry_states
        self.requeue = requeue
        self.eviction_retry = eviction_retry
        self.applier = upgrade_apply.UpgradeApplier(
            store=store, kinds=kinds, flavor=flavor, component=component, events=events
        )
        self.status = UpgradeStatus(auto_upgrade=auto_upgrade)
        self.next_at = 0.0  # simulated time of the next planned reconcile (upstream's requeue)

    def reconcile(
        self,
        now: float,
        policy: um.UpgradePolicy,
        drivers: Callable[[], tuple[Sequence[Obj], Iterable[Obj]]],
    ) -> None:
        """One reconcile under ``policy``; ``drivers`` lists the driver DaemonSets and driver pods when needed."""
        self.next_at = now + self.requeue
        reconciles = self.status.reconciles + 1
        if not policy.auto_upgrade:
            # removeNodeUpgradeStateLabels: with auto upgrade off the controller forgets every node's state.
            self.applier.reset_state_labels(
                {name: (node["metadata"].get("labels") or {}) for name, node in self.index.nodes.items()}
            )
            self.status = UpgradeStatus(
                auto_upgrade=False,
                blocked_reason=f"{self.pod_noun} auto upgrade is disabled",
                reconciled_at=now,
                reconciles=reconciles,
            )
            return
        daemonsets, pods = drivers()
        snapshot, unbound = self.build_snapshot(daemonsets, pods, now=now)
        if unbound:
            self.status = UpgradeStatus(
                blocked_reason=f"{self.pod_noun} pod {unbound[0]} is not bound to a node yet",
                reconciled_at=now,
                reconciles=reconciles,
            )
            self.next_at = now + 1.0
            return
        try:
            plan = um.plan_upgrade(snapshot, policy=policy, flavor=self.flavor)
        except ValueError as exc:
            # e.g. maxUnavailable "1": the real controller fails the reconcile and retries.
            self.status = UpgradeStatus(blocked_reason=str(exc), reconciled_at=now, reconciles=reconciles)
            return
        self.status = UpgradeStatus(
            counts=plan.counts,
            blocked_reason=plan.blocked_reason,
            reconciled_at=now,
            reconciles=reconciles,
            node_states={n.name: n.state(self.flavor) for n in snapshot.nodes},
        )
        self.applier.apply_plan(plan, snapshot)
        if any(n.state(self.flavor) in self.retry_states for n in snapshot.nodes):
            self.next_at = min(self.next_at, now + self.eviction_retry)

    def build_snapshot(
        self, daemonsets: Sequence[Obj], pods: Iterable[Obj], *, now: float
    ) -> tuple[um.ClusterSnapshot, list[str]]:
        """BuildState: the driver DaemonSets, their pods (and orphaned driver pods) and the nodes hosting them.

        Pods owned by something other than these DaemonSets are left out.  Also returns the names of driver
        pods created less than ``um.UNBOUND_GRACE_SECONDS`` ago and not bound to a node yet.
        """
        by_uid = {ds["metadata"]["uid"]: ds for ds in daemonsets}
        owned: Counter[str] = Counter()
        nodes: list[um.NodeSnapshot] = []
        unbound: list[str] = []
        for pod in pods:
            refs = pod["metadata"].get("ownerReferences") or []
            owner = by_uid.get(refs[0].get("uid")) if refs else None
            if refs and owner is None:
                continue
            if owner is not None:
                owned[owner["metadata"]["uid"]] += 1
            node_name = (pod.get("spec") or {}).get("nodeName")
            if not node_name:
                stamp = pod["metadata"].get("creationTimestamp")
                if stamp and now - parse_rfc3339(stamp) < um.UNBOUND_GRACE_SECONDS:
                    unbound.append(pod["metadata"]["name"])
                continue  # "Driver Pod has no NodeName, skipping"
            node = self.index.nodes.get(node_name) or self.store.try_get(self.kinds.node, None, node_name)
            if node is not None:
                nodes.append(self._node_snapshot(node, pod, owner))
        daemonset_snapshots = tuple(
            um.DriverDaemonSet(
                name=ds["metadata"]["name"],
                desired_number_scheduled=int((ds.get("status") or {}).get("desiredNumberScheduled") or 0),
                owned_pods=owned[ds["metadata"]["uid"]],
                latest_revision_hash=latest_revision_hash(self.store, self.kinds, ds),
            )
            for ds in daemonsets
        )
        nodes.sort(key=lambda n: n.name)
        return um.ClusterSnapshot(now=now, nodes=tuple(nodes), daemonsets=daemonset_snapshots), unbound

    def _node_snapshot(self, node: Obj, driver_pod: Obj, owner: Obj | None) -> um.NodeSnapshot:
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels") or {}
        state = labels.get(self.flavor.state_label, "")
        others: tuple[um.NodePod, ...] = ()
        if state in self.needs_pods:
            uid = driver_pod["metadata"].get("uid")
            others = tuple(
                upgrade_apply.node_pod(p) for p in self.index.pods_on(name) if p["metadata"].get("uid") != uid
            )
        return um.NodeSnapshot(
            name=name,
            driver_pod=upgrade_apply.driver_pod_snapshot(driver_pod, owner),
            labels=labels,
            annotations=node["metadata"].get("annotations") or {},
            unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
            ready=upgrade_apply.node_condition_ready(node),
            pods=others,
            eviction_started_at=self.applier.eviction_started_at(name, state),
        )
