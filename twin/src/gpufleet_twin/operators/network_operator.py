"""The twin's NVIDIA Network Operator: NicClusterPolicy into MOFED DaemonSets, the MOFED driver's
life on a node, and its driver upgrade controller.

Modelled on Mellanox/network-operator 24.7 (``api/v1alpha1/nicclusterpolicy_types.go``,
``docs/life-cycle-management.rst``, ``controllers/upgrade_controller.go``):

- ``NicClusterPolicy`` (``mellanox.com/v1alpha1``, cluster-scoped, ``nic-cluster-policy``)
  ``spec.ofedDriver`` {image, repository, version, upgradePolicy} renders one
  MOFED DaemonSet per OS of the Mellanox nodes (NFD ``pci-15b3.present``),
  ``updateStrategy: OnDelete`` (the operator never restarts a driver pod by
  itself), pods labelled ``nvidia.com/ofed-driver`` and ``app=mofed-<os>``,
  image ``<repository>/<image>:<version>-<os>-amd64``.  On OpenShift there is
  one DaemonSet per RHCOS OSTREE version (node selector on NFD's
  ``OSTREE_VERSION``), as the driver is built against each RHCOS kernel.
- A MOFED pod (``SimState.pod_behaviours``): when it stops the driver unloads,
  so the node's secondary network (``NodeHealth.secondary_network_up``) goes
  down and the kubelet records every Running pod on the node that uses a
  Multus network as disrupted; the next pod reloads the driver after
  ``mofed_reload`` seconds (``NodeHealth.mofed_version``) and the network
  returns.  A version with no build for the node's kernel
  (``SimState.mofed_builds_for``) crash-loops and the network stays down.
  Two reload hazards are read from node labels (the host facts): storage
  modules loaded (``STORAGE_MODULES_LABEL``) without
  ``UNLOAD_STORAGE_MODULES=true`` in ``spec.ofedDriver.env`` crash-loop the new
  pod; a primary interface on a ConnectX port (``PRIMARY_INTERFACE_LABEL``)
  leaves the node NotReady from the unload until a reboot.
- With ``upgradePolicy.autoUpgrade`` the operator's upgrade controller (the one
  the GPU Operator simulation uses too, ``upgrade_controller``) runs the
  shared library's state machine (``upgrade_model.plan_upgrade`` with the
  ``OFED_DRIVER`` flavor: label ``nvidia.com/ofed-driver-upgrade-state``,
  maxParallelUpgrades, drain with its podSelector and timeout, no pod-deletion
  or validation state and no maxUnavailable).

Where the twin knowingly differs: evictions go through the store (they honour
PDBs, not request hooks); the controller also wakes on MOFED pod changes
(upstream requeues every 2 minutes); the other NicClusterPolicy components
(RDMA shared device plugin, secondary network, NV-IPAM...) are accepted in
the spec but render nothing; ``safeLoad`` is not modelled.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..kube import nodelabels, podutil
from ..kube.index import ClusterIndex
from ..kube.state import NodeHealth, PodPlan, SimState
from ..machinery import errors
from ..machinery.kinds import Kinds
from ..machinery.registry import ResourceType
from ..machinery.store import Store, WatchEvent
from ..machinery.wake import Waker, run_operator_loop
from . import upgrade_model as um
from .upgrade_controller import DriverUpgradeController, UpgradeStatus

if TYPE_CHECKING:
    from ..apiserver.cluster import Twin

log = logging.getLogger(__name__)

Obj = dict[str, Any]

GROUP = "mellanox.com"
API_VERSION = f"{GROUP}/v1alpha1"
NIC_POLICY_PLURAL = "nicclusterpolicies"
NIC_POLICY_NAME = "nic-cluster-policy"
NAMESPACE = "nvidia-network-operator"
OPERATOR_DEPLOYMENT = "network-operator"
OPERATOR_COMPONENT = "network-operator"
OFED_LABEL = "nvidia.com/ofed-driver"  # every MOFED pod carries it (upstream's driver pod selector)
MOFED_CONTAINER = "mofed-container"
MELLANOX_PRESENT_LABEL = "feature.node.kubernetes.io/pci-15b3.present"
# Twin knob (not an upstream key): simulated seconds a MOFED reload takes on this Node, so reload times can
# differ per node as they do on real fleets (NIC count, kernel, image pull); benchmarks set it.
RELOAD_SECONDS_ANNOTATION = "twin.gpufleet.io/mofed-reload-seconds"
# The host facts behind two reload hazards, published as node labels (the twin reads them as what NFD's rule or
# hook saw on the host; the collection reads the same keys by default):
# the primary interface (value: its name) is a ConnectX port, so the driver restart takes the node off the network
# and the kubelet stays NotReady until a reboot (Mellanox/network-operator issues 2176, 2258);
PRIMARY_INTERFACE_LABEL = "gpufleet.io/primary-interface-mlx5"
# NVMe-oF / NFS-RDMA modules are loaded, so the driver container refuses to reload unless its env has
# UNLOAD_STORAGE_MODULES=true (doca-driver-build entrypoint; network-operator issue 1084).
STORAGE_MODULES_LABEL = "gpufleet.io/rdma-storage-modules"
FLAVOR = um.OFED_DRIVER
STATE_LABEL = FLAVOR.state_label
_NEEDS_PODS = frozenset({um.STATE_WAIT_FOR_JOBS_REQUIRED, um.STATE_DRAIN_REQUIRED})


@dataclass(frozen=True)
class NetworkOperatorRelease:
    """What the twin seeds: the operator release and the MOFED (DOCA driver) it ships."""

    operator_version: str = "24.7.0"
    mofed_version: str = "24.07-0.6.1.0"
    mofed_repository: str = "nvcr.io/nvidia/mellanox"
    mofed_image: str = "doca-driver"
    operator_image: str = "nvcr.io/nvidia/cloud-native/network-operator"


@dataclass(frozen=True)
class NetworkOperatorTimings:
    mofed_reload: float = 180.0  # unload + load of the mlx5 stack from a precompiled container
    mofed_reload_openshift: float = 420.0  # built against the RHCOS kernel first (driver toolkit)
    mofed_already_loaded: float = 10.0
    build_failure: float = 90.0
    upgrade_requeue: float = 120.0  # upstream plannedRequeueInterval
    eviction_retry: float = 5.0


# -- rendering (pure) -------------------------------------------------------------------------------
def default_nic_cluster_policy(*, release: NetworkOperatorRelease, mofed_version: str) -> Obj:
    return {
        "apiVersion": API_VERSION,
        "kind": "NicClusterPolicy",
        "metadata": {"name": NIC_POLICY_NAME},
        "spec": {
            "ofedDriver": {
                "image": release.mofed_image,
                "repository": release.mofed_repository,
                "version": mofed_version,
                "upgradePolicy": {
                    "autoUpgrade": False,
                    "maxParallelUpgrades": 1,
                    "safeLoad": False,
                    "drain": {
                        "enable": True,
                        "force": True,
                        "podSelector": "",
                        "timeoutSeconds": 300,
                        "deleteEmptyDir": True,
                    },
                },
            },
        },
    }


def operator_deployment(*, release: NetworkOperatorRelease) -> Obj:
    labels = {"app.kubernetes.io/name": "network-operator", "control-plane": "network-operator"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": OPERATOR_DEPLOYMENT, "namespace": NAMESPACE, "labels": dict(labels)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": dict(labels)},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "containers": [
                        {"name": "network-operator", "image": f"{release.operator_image}:v{release.operator_version}"}
                    ]
                },
            },
        },
    }


def operator_csv(*, release: NetworkOperatorRelease) -> Obj:
    return {
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "ClusterServiceVersion",
        "metadata": {"name": f"nvidia-network-operator.v{release.operator_version}", "namespace": NAMESPACE},
        "spec": {
            "displayName": "NVIDIA Network Operator",
            "version": release.operator_version,
            "provider": {"name": "NVIDIA"},
        },
        "status": {"phase": "Succeeded", "reason": "InstallSucceeded"},
    }


def mofed_image(ofed: Mapping[str, Any], os_tag: str) -> str:
    """``<repository>/<image>:<version>-<os>-amd64`` as the MOFED state renders the container image."""
    base = f"{ofed.get('repository')}/{ofed.get('image', 'doca-driver')}"
    return f"{base}:{ofed.get('version', '')}-{os_tag}-amd64"


def mofed_version_of_image(image: str) -> str:
    tag = image.rsplit(":", 1)[-1]
    parts = tag.rsplit("-", 2)  # <version>-<os>-<arch>; the OS tag and arch have no dash
    return parts[0] if len(parts) == 3 else tag


def render_mofed_daemonsets(policy: Obj, *, node_labels: Mapping[str, Mapping[str, str]], openshift: bool) -> list[Obj]:
    """One OnDelete DaemonSet per OS (per RHCOS OSTREE version on OpenShift) of the Mellanox nodes."""
    ofed = (policy.get("spec") or {}).get("ofedDriver")
    if not isinstance(ofed, dict) or not ofed.get("version"):
        return []
    pools: dict[tuple[str, str | None], None] = {}
    for labels in node_labels.values():
        if labels.get(MELLANOX_PRESENT_LABEL) != "true":
            continue
        os_tag = nodelabels.node_os_tag(labels)
        if os_tag is None:
            continue
        pools[(os_tag, labels.get(nodelabels.OSTREE_LABEL) if openshift else None)] = None
    owner = podutil.owner_reference(policy, block_owner_deletion=True)
    daemonsets = []
    for os_tag, ostree in sorted(pools, key=lambda k: (k[0], k[1] or "")):
        app = f"mofed-{os_tag}"
        selector = {
            MELLANOX_PRESENT_LABEL: "true",
            nodelabels.OS_ID_LABEL: os_tag.rstrip("0123456789."),
            nodelabels.OS_VERSION_LABEL: os_tag[len(os_tag.rstrip("0123456789.")) :],
        }
        name = f"{app}-ds"
        if ostree:
            selector[nodelabels.OSTREE_LABEL] = ostree
            name = f"{app}-{ostree}-ds"
        pod_labels = {"app": app, OFED_LABEL: "", "nvidia.com/ofed-driver-ds": name}
        daemonsets.append(
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {
                    "name": name,
                    "namespace": NAMESPACE,
                    "labels": {"app": app, "nvidia.network-operator.state": "state-OFED"},
                    "ownerReferences": [owner],
                },
                "spec": {
                    # Upstream pins the driver with OnDelete: a new spec reaches a node only when its pod is
                    # deleted, by hand or by the upgrade controller.
                    "updateStrategy": {"type": "OnDelete"},
                    "selector": {"matchLabels": {"app": app, "nvidia.com/ofed-driver-ds": name}},
                    "template": {
                        "metadata": {"labels": pod_labels},
                        "spec": {
                            "nodeSelector": selector,
                            "hostNetwork": True,
                            "priorityClassName": "system-node-critical",
                            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                            "containers": [
                                {
                                    "name": MOFED_CONTAINER,
                                    "image": mofed_image(ofed, os_tag),
                                    "securityContext": {"privileged": True},
                                }
                            ],
                        },
                    },
                },
            }
        )
    return daemonsets


# -- the operator ---------------------------------------------------------------------------------------
class NetworkOperator:
    """NicClusterPolicy controller, MOFED driver behaviour and OFED upgrade controller in one process."""

    name = "network-operator"

    def __init__(
        self,
        twin: Twin,
        *,
        release: NetworkOperatorRelease | None = None,
        timings: NetworkOperatorTimings | None = None,
    ) -> None:
        if not isinstance(twin.sim, SimState):
            raise RuntimeError("the Network Operator simulation needs twin.sim (build.populate sets it)")
        self.twin = twin
        self.sim: SimState = twin.sim
        self.store: Store = twin.store
        self.kinds = Kinds.from_registry(twin.registry)
        self.policy_type: ResourceType | None = twin.registry.get(GROUP, NIC_POLICY_PLURAL)
        self.csv_type = twin.registry.get("operators.coreos.com", "clusterserviceversions")
        self.release = release or NetworkOperatorRelease()
        self.timings = timings or NetworkOperatorTimings()
        self.openshift = self.sim.profile == "openshift"
        self.index = getattr(self.sim, "index", None) or ClusterIndex(self.store, self.kinds)
        self._loaded_by: dict[str, str] = {}  # node -> uid of the MOFED pod whose driver is loaded
        self.upgrader = DriverUpgradeController(
            store=self.store,
            kinds=self.kinds,
            index=self.index,
            flavor=FLAVOR,
            component=OPERATOR_COMPONENT,
            events=lambda: self.sim.events,
            pod_noun="MOFED",
            needs_pods=_NEEDS_PODS,
            retry_states=_NEEDS_PODS,
            requeue=self.timings.upgrade_requeue,
            eviction_retry=self.timings.eviction_retry,
            auto_upgrade=False,
        )
        self.applier = self.upgrader.applier
        self._policy_dirty = True
        self._upgrade_dirty = True
        self._waker: Waker | None = None

    # -- wiring -------------------------------------------------------------------------------------------
    def install(self) -> None:
        self.sim.pod_behaviours.append(self.plan_pod)
        self.seed()
        self.store.add_listener(self._listen)
        self.twin.controllers.append(self)
        self.twin.published["network_operator"] = {
            "namespace": NAMESPACE,
            "nic_cluster_policy": NIC_POLICY_NAME,
            "version": self.release.operator_version,
        }

    def seed(self) -> None:
        if self.store.try_get(self.kinds.namespace, None, NAMESPACE) is None:
            labels = {"openshift.io/cluster-monitoring": "true"} if self.openshift else {}
            self.store.create(self.kinds.namespace, {"metadata": {"name": NAMESPACE, "labels": labels}})
        if self.store.try_get(self.kinds.deployment, NAMESPACE, OPERATOR_DEPLOYMENT) is None:
            self.store.create(self.kinds.deployment, operator_deployment(release=self.release))
        if self.openshift and self.csv_type is not None:
            csv = operator_csv(release=self.release)
            if self.store.try_get(self.csv_type, NAMESPACE, csv["metadata"]["name"]) is None:
                self.store.create(self.csv_type, csv)
        if self.policy_type is None:
            log.warning("no NicClusterPolicy kind registered: the Network Operator has nothing to reconcile")
            return
        if not self.store.list(self.policy_type):
            loaded = Counter(h.mofed_version for h in self.sim.nodes.values() if h.mofed_version)
            version = loaded.most_common(1)[0][0] if loaded else self.release.mofed_version
            self.store.create(self.policy_type, default_nic_cluster_policy(release=self.release, mofed_version=version))
        self.reconcile_policy()

    def _listen(self, event: WatchEvent) -> None:
        key = event.rtype.key
        wake = False
        if self.policy_type is not None and key == self.policy_type.key:
            self._policy_dirty = self._upgrade_dirty = wake = True
        elif key == self.kinds.node.key:
            old_labels = ((event.old or {}).get("metadata") or {}).get("labels")
            if event.type != "MODIFIED" or old_labels != (event.obj.get("metadata") or {}).get("labels"):
                self._policy_dirty = self._upgrade_dirty = wake = True
        elif key in (self.kinds.daemonset.key, self.kinds.pod.key):
            meta = event.obj.get("metadata") or {}
            if meta.get("namespace") == NAMESPACE:
                self._upgrade_dirty = wake = True
                self._policy_dirty = self._policy_dirty or key == self.kinds.daemonset.key
            elif key == self.kinds.pod.key and event.type == "DELETED":
                node_name = (event.obj.get("spec") or {}).get("nodeName")
                if node_name in self.applier.eviction_started:
                    self._upgrade_dirty = wake = True
        if wake and self._waker is not None:
            self._waker.poke()

    async def run(self, twin: Twin) -> None:
        self._waker = Waker(self.store, twin.clock, on_event=lambda event: False)
        await run_operator_loop(
            self._waker, self.reconcile_once, lambda: max(0.0, self.upgrader.next_at - twin.clock.now()), log=log
        )

    def reconcile_once(self) -> None:
        now = self.twin.clock.now()
        if self._policy_dirty:
            self._policy_dirty = False
            self.reconcile_policy()
        if self._upgrade_dirty or now >= self.upgrader.next_at:
            self._upgrade_dirty = False
            self.reconcile_upgrade(now)

    # -- NicClusterPolicy ----------------------------------------------------------------------------------
    def active_policy(self) -> Obj | None:
        if self.policy_type is None:
            return None
        return self.store.try_get(self.policy_type, None, NIC_POLICY_NAME)

    def reconcile_policy(self) -> None:
        policy = self.active_policy()
        if policy is None:
            return
        node_labels = {name: node["metadata"].get("labels") or {} for name, node in self.index.nodes.items()}
        desired = render_mofed_daemonsets(policy, node_labels=node_labels, openshift=self.openshift)
        wanted = {ds["metadata"]["name"] for ds in desired}
        for ds in desired:
            current = self.store.try_get(self.kinds.daemonset, NAMESPACE, ds["metadata"]["name"])
            if current is None:
                self.store.create(self.kinds.daemonset, ds)
            elif current["spec"]["template"] != ds["spec"]["template"]:

                def change(obj: Obj, ds: Obj = ds) -> None:
                    obj["spec"]["template"] = ds["spec"]["template"]

                self.store.mutate(self.kinds.daemonset, NAMESPACE, ds["metadata"]["name"], change)
        ready = True
        for ds in self.store.list(self.kinds.daemonset, NAMESPACE):
            if (ds["metadata"].get("labels") or {}).get("nvidia.network-operator.state") != "state-OFED":
                continue
            if ds["metadata"]["name"] not in wanted:
                # A DaemonSet for an OS no node runs any more (e.g. the old RHCOS after an update).
                self.store.delete(self.kinds.daemonset, NAMESPACE, ds["metadata"]["name"])
                continue
            status = ds.get("status") or {}
            desired_count = int(status.get("desiredNumberScheduled") or 0)
            ready = ready and int(status.get("numberReady") or 0) >= desired_count
        state = "ready" if ready else "notReady"
        new_status = {"state": state, "appliedStates": [{"name": "state-OFED", "state": state}]}
        if policy.get("status") != new_status and self.policy_type is not None:

            def write(obj: Obj) -> None:
                obj["status"] = new_status

            try:
                self.store.mutate(self.policy_type, None, NIC_POLICY_NAME, write, subresource="status")
            except errors.ApiError as exc:
                log.debug("NicClusterPolicy status not written: %s", exc)

    # -- MOFED pods ------------------------------------------------------------------------------------------
    def plan_pod(self, pod: Obj, health: NodeHealth) -> PodPlan | None:
        meta = pod.get("metadata") or {}
        if meta.get("namespace") != NAMESPACE or OFED_LABEL not in (meta.get("labels") or {}):
            return None
        version = mofed_version_of_pod(pod)
        if not self.sim.mofed_builds_for(version, health.kernel, node_name=health.name):
            message = (
                f"Failed to install MOFED {version}: no driver package for kernel {health.kernel} "
                "(kernel-devel/headers not found)"
            )
            # The driver container installs at each start: once a package for the kernel exists (the fault
            # cleared), its next restart succeeds.
            return PodPlan(
                outcome="crashloop",
                start_after=self.timings.build_failure,
                message=message,
                reason="Error",
                replan_on_restart=True,
            )
        labels = self._node_labels(health.name)
        if health.mofed_version == version:
            delay = self.timings.mofed_already_loaded
        else:
            delay = self.reload_seconds(health.name)
            if labels.get(STORAGE_MODULES_LABEL) == "true" and not self._unloads_storage_modules():
                message = (
                    "Storage modules (nvme_rdma, rpcrdma...) are loaded and UNLOAD_STORAGE_MODULES is not "
                    '"true": not reloading the driver'
                )
                return PodPlan(outcome="crashloop", start_after=delay, message=message, reason="Error")
        uid = meta.get("uid", "")
        node_name = health.name

        def loaded(ready_pod: Obj) -> None:
            self._loaded_by[node_name] = uid
            node = self.sim.nodes[node_name]
            node.mofed_version = version
            node.secondary_network_up = True

        def unloaded(stopped_pod: Obj) -> None:
            # The driver container restores the inbox driver on exit: the NICs' netdevs and RDMA devices
            # vanish for every container on the node until the next MOFED pod has loaded.
            if self._loaded_by.get(node_name) == uid:
                del self._loaded_by[node_name]
                node = self.sim.nodes[node_name]
                node.mofed_version = None
                node.secondary_network_up = False
                if PRIMARY_INTERFACE_LABEL in self._node_labels(node_name):
                    # The primary uplink does not come back (DHCP, bond): the kubelet loses the API server and
                    # the node is NotReady until rebooted (a reboot sets Ready again).
                    node.ready = False

        return PodPlan(outcome="ready", start_after=delay, on_ready=loaded, on_stop=unloaded)

    def _node_labels(self, node_name: str) -> Mapping[str, str]:
        node = self.index.nodes.get(node_name) or self.store.try_get(self.kinds.node, None, node_name) or {}
        return (node.get("metadata") or {}).get("labels") or {}

    def _unloads_storage_modules(self) -> bool:
        ofed = ((self.active_policy() or {}).get("spec") or {}).get("ofedDriver") or {}
        return any(
            entry.get("name") == "UNLOAD_STORAGE_MODULES" and str(entry.get("value", "")).lower() == "true"
            for entry in ofed.get("env") or []
            if isinstance(entry, Mapping)
        )

    def reload_seconds(self, node_name: str) -> float:
        """The node's own reload time when annotated (RELOAD_SECONDS_ANNOTATION), else the profile's."""
        node = self.index.nodes.get(node_name) or self.store.try_get(self.kinds.node, None, node_name) or {}
        text = ((node.get("metadata") or {}).get("annotations") or {}).get(RELOAD_SECONDS_ANNOTATION)
        try:
            seconds = float(text) if text is not None else -1.0
        except ValueError:
            seconds = -1.0
        if seconds >= 0:
            return seconds
        return self.timings.mofed_reload_openshift if self.openshift else self.timings.mofed_reload

    # -- upgrade controller ------------------------------------------------------------------------------------
    @property
    def upgrade(self) -> UpgradeStatus:
        return self.upgrader.status

    def reconcile_upgrade(self, now: float) -> None:
        """The OFED upgrade controller's reconcile (``upgrade_controller``, the library both operators share)."""
        policy_obj = self.active_policy()
        if policy_obj is None:
            self.upgrader.next_at = now + self.timings.upgrade_requeue
            return
        ofed = (policy_obj.get("spec") or {}).get("ofedDriver") or {}
        policy = um.UpgradePolicy.from_spec(ofed.get("upgradePolicy"), flavor=FLAVOR)
        self.upgrader.reconcile(now, policy, self.driver_objects)

    def driver_objects(self) -> tuple[list[Obj], list[Obj]]:
        """The MOFED DaemonSets (``state-OFED``) and the MOFED pods of the operator namespace."""
        daemonsets = [
            ds
            for ds in self.store.list(self.kinds.daemonset, NAMESPACE)
            if (ds["metadata"].get("labels") or {}).get("nvidia.network-operator.state") == "state-OFED"
        ]
        pods = self.store.list(self.kinds.pod, NAMESPACE, lambda p: OFED_LABEL in (p["metadata"].get("labels") or {}))
        return daemonsets, sorted(pods, key=lambda p: p["metadata"]["name"])


def mofed_version_of_pod(pod: Obj) -> str:
    for container in (pod.get("spec") or {}).get("containers") or ():
        if container.get("name") == MOFED_CONTAINER:
            return mofed_version_of_image(container.get("image", ""))
    return ""


def install(twin: Twin) -> NetworkOperator:
    operator = NetworkOperator(twin)
    operator.install()
    return operator
