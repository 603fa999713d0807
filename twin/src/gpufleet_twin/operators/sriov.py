"""The twin's SR-IOV Network Operator, and what a careless Network Operator upgrade does to it.

Modelled on k8snetworkplumbingwg/sriov-network-operator as the NVIDIA Network Operator ships it
(Helm sub-chart on Kubernetes) and on OpenShift's own SR-IOV operator:

- Deployment ``sriov-network-operator`` (namespace ``nvidia-network-operator`` on the kubernetes profile,
  ``openshift-sriov-network-operator`` on openshift), ``SriovOperatorConfig`` ``default``
  (enableInjector, enableOperatorWebhook, configDaemonNodeSelector), the ``default``
  ``SriovNetworkNodePolicy`` older operators create for themselves, one real policy
  (``mlnx-cx7-ib``: ConnectX-7, vendor 15b3 device 1021, 8 VFs per port, IB), the
  ``sriov-network-config-daemon`` DaemonSet on the nodes the config selects, and one
  ``SriovNetworkNodeState`` per such node (named after it) whose ``spec.interfaces`` the operator renders
  from the policies and whose ``status.syncStatus`` the node's config daemon reports.
- While the operator runs (``spec.replicas`` > 0) it keeps one node state per selected node, the daemon's
  node selector in step with the config, and re-renders the states when a policy changes; a changed state
  goes ``InProgress`` and back to ``Succeeded`` after ``resync`` seconds (the daemon applying it).
- The upgrade hazard (Network Operator docs, "Upgrade", Mellanox/network-operator-docs PR #146): moving the
  Network Operator from a release below 24.10 to 24.10 or later with SR-IOV enabled needs two manual steps
  first: scale the SR-IOV operator Deployment to 0 and delete the ``default`` SriovNetworkNodePolicy; both
  are restored afterwards.  The twin watches the Network Operator's version (its Deployment's image tag and,
  on OpenShift, its CSVs' ``spec.version``).  If it crosses 24.10 while the SR-IOV operator still has
  replicas and the ``default`` policy still exists, every node state goes ``Failed`` with a
  ``lastSyncError``, a Warning ``SyncStatusChanged`` Event is recorded on each, the config-daemon pods
  crash-loop and every running pod using a secondary network on those nodes is recorded as disrupted.
  Done first, the crossing breaks nothing.  A broken cluster heals once somebody has done the steps after
  the fact (replicas 0 and no ``default`` policy at some moment) and then restored both.

Where the twin knowingly differs: upstream names the Helm deployment ``<release>-sriov-network-operator``
(``network-operator-sriov-network-operator`` with the documented release name); the twin uses
``sriov-network-operator`` on both profiles.  The kubelet chooses a pod's behaviour when the pod starts, so
the twin replaces the config-daemon pods of the nodes that break or heal (upstream the same pod's container
restarts).  "Operator running" is ``spec.replicas`` > 0, not the pods' readiness.  The webhook, the
resource injector, the device plugin, drains during reconfiguration and SriovNetwork objects are not
modelled; VFs exist only as counts in the node states.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..kube import podutil
from ..kube.serviceaccounts import ensure_service_account
from ..kube.state import NodeHealth, PodPlan, SimState
from ..machinery import errors
from ..machinery.kinds import Kinds
from ..machinery.registry import ResourceType
from ..machinery.store import Store, WatchEvent
from ..machinery.wake import Waker, run_operator_loop
from . import network_operator as netop

if TYPE_CHECKING:
    from ..apiserver.cluster import Twin

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Version = tuple[int, int, int]

GROUP = "sriovnetwork.openshift.io"
API_VERSION = f"{GROUP}/v1"
POLICY_PLURAL = "sriovnetworknodepolicies"
CONFIG_PLURAL = "sriovoperatorconfigs"
NODE_STATE_PLURAL = "sriovnetworknodestates"
KUBERNETES_NAMESPACE = netop.NAMESPACE
OPENSHIFT_NAMESPACE = "openshift-sriov-network-operator"
OPERATOR_DEPLOYMENT = "sriov-network-operator"
CONFIG_DAEMON = "sriov-network-config-daemon"
CONFIG_NAME = "default"
DEFAULT_POLICY = "default"
IB_POLICY = "mlnx-cx7-ib"
DAEMON_COMPONENT = "sriov-network-config-daemon"
NETWORK_OPERATOR_CSV_PREFIX = "nvidia-network-operator."
# The first Network Operator release whose SR-IOV operator needs the pre-upgrade steps (docs PR #146).
PRE_STEPS_BOUNDARY: Version = (24, 10, 0)
SYNC_SUCCEEDED = "Succeeded"
SYNC_IN_PROGRESS = "InProgress"
SYNC_FAILED = "Failed"
MELLANOX_VENDOR = "15b3"
CX7_DEVICE_ID = "1021"
SRIOV_CAPABLE_LABEL = "feature.node.kubernetes.io/network-sriov.capable"
WORKER_ROLE_LABEL = "node-role.kubernetes.io/worker"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
_VERSION_PATTERN = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class SriovTimings:
    daemon_start: float = 5.0
    resync: float = 30.0  # the config daemon applying a changed node state (VFs already exist: no reboot)
    crash_start: float = 10.0


@dataclass(frozen=True)
class Crossing:
    """A Network Operator version change across the boundary, and whether the pre-steps were done then."""

    from_version: str
    to_version: str
    at: float
    sriov_replicas: int
    default_policy_present: bool

    @property
    def pre_steps_done(self) -> bool:
        return self.sriov_replicas == 0 and not self.default_policy_present

    @property
    def breaks_nodes(self) -> bool:
        """The old operator still running *and* its default policy still there is what breaks the nodes."""
        return self.sriov_replicas > 0 and self.default_policy_present


@dataclass
class SriovFailure:
    """Nodes broken by a crossing without the pre-steps, until somebody does them and restores."""

    crossing: Crossing
    nodes: set[str] = field(default_factory=set)
    message: str = ""
    pre_steps_seen: bool = False


# -- pure -------------------------------------------------------------------------------------------------
def parse_version(text: str | None) -> Version | None:
    """``24.7.0``, ``v24.10.0``, ``24.10.0-rc.1`` -> (major, minor, patch); None for ``latest`` or a digest."""
    if not text:
        return None
    match = _VERSION_PATTERN.match(text.strip())
    if match is None:
        return None
    return (int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))


def version_of_image(image: str) -> str | None:
    """The tag of ``repo/name:tag`` (None when pinned by digest only or untagged)."""
    if "@" in image:
        image = image.split("@", 1)[0]
    _repository, sep, tag = image.rpartition(":")
    if not sep or "/" in tag:
        return None
    return tag or None


def crosses_boundary(old: str | None, new: str | None, *, boundary: Version = PRE_STEPS_BOUNDARY) -> bool:
    """True for a move from below ``boundary`` to ``boundary`` or later (an install is no crossing)."""
    old_version, new_version = parse_version(old), parse_version(new)
    if old_version is None or new_version is None:
        return False
    return old_version < boundary <= new_version


def namespace_for(profile: str) -> str:
    return OPENSHIFT_NAMESPACE if profile == "openshift" else KUBERNETES_NAMESPACE


def selector_matches(selector: Mapping[str, str] | None, labels: Mapping[str, str]) -> bool:
    """Map selectors (nodeSelector, configDaemonNodeSelector): every key equal; empty selects all."""
    return all(labels.get(key) == value for key, value in (selector or {}).items())


@dataclass(frozen=True)
class SriovImages:
    operator: str
    config_daemon: str

    @classmethod
    def for_profile(cls, profile: str, *, network_operator_version: str) -> SriovImages:
        if profile == "openshift":
            base = "registry.redhat.io/openshift4/ose-sriov-network"
            return cls(operator=f"{base}-rhel9-operator:v4.16", config_daemon=f"{base}-config-daemon-rhel9:v4.16")
        # NVIDIA publishes the SR-IOV images it ships tagged with the Network Operator release.
        tag = f"network-operator-{network_operator_version}"
        base = "nvcr.io/nvidia/mellanox/sriov-network-operator"
        return cls(operator=f"{base}:{tag}", config_daemon=f"{base}-config-daemon:{tag}")


# The operator renders the config daemon's DaemonSet with the image this variable of its own Deployment names
# (upstream's manifests and Helm chart set it; an upgrade that changes only the operator image leaves the daemon old).
CONFIG_DAEMON_IMAGE_ENV = "SRIOV_NETWORK_CONFIG_DAEMON_IMAGE"


def config_daemon_image_of(deployment: Obj | None) -> str | None:
    containers = ((((deployment or {}).get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")
    for container in containers or ():
        for variable in container.get("env") or ():
            if variable.get("name") == CONFIG_DAEMON_IMAGE_ENV and variable.get("value"):
                return str(variable["value"])
    return None


def operator_deployment(*, namespace: str, images: SriovImages) -> Obj:
    labels = {"app": OPERATOR_DEPLOYMENT}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": OPERATOR_DEPLOYMENT, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": dict(labels)},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "serviceAccountName": OPERATOR_DEPLOYMENT,
                    "containers": [
                        {
                            "name": OPERATOR_DEPLOYMENT,
                            "image": images.operator,
                            "env": [{"name": CONFIG_DAEMON_IMAGE_ENV, "value": images.config_daemon}],
                        }
                    ],
                },
            },
        },
    }


def operator_config(*, namespace: str) -> Obj:
    return {
        "apiVersion": API_VERSION,
        "kind": "SriovOperatorConfig",
        "metadata": {"name": CONFIG_NAME, "namespace": namespace},
        "spec": {
            "enableInjector": True,
            "enableOperatorWebhook": True,
            "logLevel": 2,
            "configDaemonNodeSelector": {WORKER_ROLE_LABEL: "", SRIOV_CAPABLE_LABEL: "true"},
        },
    }


def default_policy(*, namespace: str) -> Obj:
    """The empty ``default`` policy operators before the 24.10 line create (and the pre-steps delete)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "SriovNetworkNodePolicy",
        "metadata": {"name": DEFAULT_POLICY, "namespace": namespace},
        "spec": {"nicSelector": {}, "nodeSelector": {}, "numVfs": 0, "resourceName": ""},
    }


def ib_policy(*, namespace: str) -> Obj:
    return {
        "apiVersion": API_VERSION,
        "kind": "SriovNetworkNodePolicy",
        "metadata": {"name": IB_POLICY, "namespace": namespace},
        "spec": {
            "resourceName": "mlnx_cx7_ib",
            "numVfs": 8,
            "priority": 90,
            "isRdma": True,
            "linkType": "ib",
            "deviceType": "netdevice",
            "nicSelector": {"vendor": MELLANOX_VENDOR, "deviceID": CX7_DEVICE_ID},
            "nodeSelector": {GPU_PRESENT_LABEL: "true", SRIOV_CAPABLE_LABEL: "true"},
        },
    }


def config_daemon_daemonset(*, namespace: str, images: SriovImages, node_selector: Mapping[str, str]) -> Obj:
    labels = {"app": CONFIG_DAEMON, "component": "network"}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": CONFIG_DAEMON, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "selector": {"matchLabels": {"app": CONFIG_DAEMON}},
            # Upstream rolls the daemon 33% at a time so a bad image cannot take every node at once.
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "33%"}},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "nodeSelector": dict(node_selector),
                    "hostNetwork": True,
                    "hostPID": True,
                    "priorityClassName": "system-node-critical",
                    "serviceAccountName": CONFIG_DAEMON,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {
                            "name": CONFIG_DAEMON,
                            "image": images.config_daemon,
                            "securityContext": {"privileged": True},
                        }
                    ],
                },
            },
        },
    }


@dataclass(frozen=True)
class NicPort:
    """One SR-IOV capable physical function as the config daemon discovers it."""

    name: str
    pci_address: str
    vendor: str = MELLANOX_VENDOR
    device_id: str = CX7_DEVICE_ID
    total_vfs: int = 16
    link_type: str = "IB"


def nic_ports(health: NodeHealth | None) -> list[NicPort]:
    """The node's ConnectX-7 ports, one PF per ``mlx5_<n>`` device (names follow RHEL's ``ibp<bus>s0``)."""
    devices = sorted({port.device for port in (health.ib_ports if health else ())}, key=_device_number)
    ports = []
    for index, _device in enumerate(devices):
        bus = 0x18 + index * 0x10
        ports.append(NicPort(name=f"ibp{bus}s0", pci_address=f"0000:{bus:02x}:00.0"))
    return ports


def _device_number(device: str) -> int:
    digits = device.rsplit("_", 1)[-1]
    return int(digits) if digits.isdigit() else 0


def render_node_state_spec(*, policies: Iterable[Obj], node_labels: Mapping[str, str], ports: list[NicPort]) -> Obj:
    """``spec.interfaces``: per matching PF, its VFs from the highest-priority policy (lowest number wins)."""
    applicable = [
        p
        for p in policies
        if p["metadata"]["name"] != DEFAULT_POLICY
        and int((p.get("spec") or {}).get("numVfs") or 0) > 0
        and selector_matches((p.get("spec") or {}).get("nodeSelector"), node_labels)
    ]
    applicable.sort(key=lambda p: (int(p["spec"].get("priority", 99)), p["metadata"]["name"]))
    interfaces = []
    for port in ports:
        for policy in applicable:
            spec = policy["spec"]
            nic = spec.get("nicSelector") or {}
            if nic.get("vendor") not in (None, port.vendor) or nic.get("deviceID") not in (None, port.device_id):
                continue
            if nic.get("pfNames") and port.name not in nic["pfNames"]:
                continue
            num_vfs = min(int(spec["numVfs"]), port.total_vfs)
            interfaces.append(
                {
                    "name": port.name,
                    "pciAddress": port.pci_address,
                    "numVfs": num_vfs,
                    "linkType": str(spec.get("linkType") or "eth").lower(),
                    "vfGroups": [
                        {
                            "resourceName": spec.get("resourceName", ""),
                            "deviceType": spec.get("deviceType", "netdevice"),
                            "isRdma": bool(spec.get("isRdma")),
                            "policyName": policy["metadata"]["name"],
                            "vfRange": f"0-{num_vfs - 1}",
                        }
                    ],
                }
            )
            break
    return {"interfaces": interfaces}


def discovered_interfaces(ports: list[NicPort], spec: Obj) -> list[Obj]:
    configured = {i.get("pciAddress"): int(i.get("numVfs") or 0) for i in spec.get("interfaces") or ()}
    return [
        {
            "name": port.name,
            "pciAddress": port.pci_address,
            "vendor": port.vendor,
            "deviceID": port.device_id,
            "driver": "mlx5_core",
            "linkType": port.link_type,
            "linkSpeed": "400000 Mb/s",
            "mtu": 4092,
            "totalvfs": port.total_vfs,
            "numVfs": configured.get(port.pci_address, 0),
        }
        for port in ports
    ]


def failure_message(crossing: Crossing) -> str:
    return (
        f"failed to apply node state: SR-IOV configuration rendered by the operator of Network Operator "
        f"{crossing.from_version} (policy {DEFAULT_POLICY!r} present, operator still running) is not accepted "
        f"by the config daemon of Network Operator {crossing.to_version}"
    )


# -- the operator -------------------------------------------------------------------------------------------
class SriovOperator:
    """SR-IOV operator, config daemons and the Network Operator upgrade hazard, in one process."""

    name = "sriov-network-operator"

    def __init__(self, twin: Twin, *, timings: SriovTimings | None = None) -> None:
        if not isinstance(twin.sim, SimState):
            raise RuntimeError("the SR-IOV simulation needs twin.sim (build.populate sets it)")
        self.twin = twin
        self.sim: SimState = twin.sim
        self.store: Store = twin.store
        self.kinds = Kinds.from_registry(twin.registry)
        self.timings = timings or SriovTimings()
        self.namespace = namespace_for(self.sim.profile)
        self.policy_type: ResourceType | None = twin.registry.get(GROUP, POLICY_PLURAL)
        self.config_type: ResourceType | None = twin.registry.get(GROUP, CONFIG_PLURAL)
        self.state_type: ResourceType | None = twin.registry.get(GROUP, NODE_STATE_PLURAL)
        self.csv_type: ResourceType | None = twin.registry.get("operators.coreos.com", "clusterserviceversions")
        self.crossings: list[Crossing] = []
        self.failure: SriovFailure | None = None
        self._pending: list[Crossing] = []
        self._versions: dict[str, str] = {}  # source ("deployment", "csv") -> Network Operator version
        self._syncs_due: dict[str, float] = {}  # node -> when its InProgress state completes
        self._was_running = True
        self._sriov_keys = frozenset(t.key for t in (self.policy_type, self.config_type) if t is not None)
        self._selector_keys: frozenset[str] = frozenset()  # node label keys the config and policies select on
        self._dirty = True
        self._waker: Waker | None = None

    @property
    def enabled(self) -> bool:
        return self.policy_type is not None and self.config_type is not None and self.state_type is not None

    # -- wiring ---------------------------------------------------------------------------------------------
    def install(self) -> None:
        if not self.enabled:
            log.warning("the SR-IOV CRDs are not served: no SR-IOV operator simulated")
            return
        self.sim.pod_behaviours.append(self.plan_pod)
        self.seed()
        self._versions = self._observed_versions()
        self._was_running = self.operator_replicas() > 0
        self.store.add_listener(self._listen)
        self.twin.controllers.append(self)
        self.twin.published["sriov"] = {
            "namespace": self.namespace,
            "operator_deployment": OPERATOR_DEPLOYMENT,
            "default_policy": DEFAULT_POLICY,
            "config_daemon": CONFIG_DAEMON,
            "pre_steps_boundary": ".".join(str(n) for n in PRE_STEPS_BOUNDARY[:2]),
        }

    def seed(self) -> None:
        assert self.policy_type is not None and self.config_type is not None
        if self.store.try_get(self.kinds.namespace, None, self.namespace) is None:
            labels = {"openshift.io/cluster-monitoring": "true"} if self.sim.profile == "openshift" else {}
            self.store.create(self.kinds.namespace, {"metadata": {"name": self.namespace, "labels": labels}})
        images = SriovImages.for_profile(
            self.sim.profile, network_operator_version=self.network_operator_version() or "24.7.0"
        )
        # The operator's install brings the ServiceAccounts its Deployment and config daemon run as.
        for account in (OPERATOR_DEPLOYMENT, CONFIG_DAEMON):
            ensure_service_account(self.store, self.kinds, self.namespace, account)
        if self.store.try_get(self.kinds.deployment, self.namespace, OPERATOR_DEPLOYMENT) is None:
            self.store.create(self.kinds.deployment, operator_deployment(namespace=self.namespace, images=images))
        config = self.store.try_get(self.config_type, self.namespace, CONFIG_NAME)
        if config is None:
            config = self.store.create(self.config_type, operator_config(namespace=self.namespace))
            self._write_status(
                self.config_type, CONFIG_NAME, {"injector": "Running", "operatorWebhook": "Running"}, ignore=True
            )
        if not self.store.list(self.policy_type, self.namespace):
            self.store.create(self.policy_type, default_policy(namespace=self.namespace))
            self.store.create(self.policy_type, ib_policy(namespace=self.namespace))
        if self.store.try_get(self.kinds.daemonset, self.namespace, CONFIG_DAEMON) is None:
            selector = (config.get("spec") or {}).get("configDaemonNodeSelector") or {}
            self.store.create(
                self.kinds.daemonset,
                config_daemon_daemonset(namespace=self.namespace, images=images, node_selector=selector),
            )
        # A seeded cluster is in steady state: every node state already synced.
        self.reconcile_node_states(now=self.twin.clock.now(), initial_status=SYNC_SUCCEEDED)

    async def run(self, twin: Twin) -> None:
        self._waker = Waker(self.store, twin.clock, on_event=lambda event: False)
        await run_operator_loop(self._waker, self.reconcile_once, self._next_wait, log=log)

    def _next_wait(self) -> float | None:
        next_due = min(self._syncs_due.values(), default=None)
        return None if next_due is None else max(0.0, next_due - self.twin.clock.now())

    # -- observing the cluster (store listener: cheap, no writes) ----------------------------------------------
    def _listen(self, event: WatchEvent) -> None:
        key = event.rtype.key
        meta = event.obj.get("metadata") or {}
        wake = False
        if key == self.kinds.deployment.key:
            if meta.get("namespace") == netop.NAMESPACE and meta.get("name") == netop.OPERATOR_DEPLOYMENT:
                wake = self._version_seen("deployment", None if event.type == "DELETED" else event.obj)
            if meta.get("namespace") == self.namespace and meta.get("name") == OPERATOR_DEPLOYMENT:
                self._note_pre_steps()
                wake = True
        elif self.csv_type is not None and key == self.csv_type.key:
            if meta.get("namespace") == netop.NAMESPACE and meta.get("name", "").startswith(
                NETWORK_OPERATOR_CSV_PREFIX
            ):
                wake = self._version_seen("csv", None)
        elif key == self.kinds.node.key:
            if event.type != "MODIFIED":
                wake = True
            else:
                # Label churn (GFD, upgrade states) is constant on a big cluster: only selector keys matter.
                old_labels = ((event.old or {}).get("metadata") or {}).get("labels") or {}
                labels = meta.get("labels") or {}
                wake = any(old_labels.get(k) != labels.get(k) for k in self._selector_keys)
        elif key in self._sriov_keys and meta.get("namespace") == self.namespace:
            self._note_pre_steps()
            wake = True
        if wake:
            self._dirty = True
            if self._waker is not None:
                self._waker.poke()

    def _version_seen(self, source: str, deployment: Obj | None) -> bool:
        before = self._effective_version()
        version = self._deployment_version(deployment) if source == "deployment" else self._csv_version()
        if version is None:
            self._versions.pop(source, None)
        else:
            self._versions[source] = version
        after = self._effective_version()
        if before == after or not crosses_boundary(before, after):
            return before != after
        # Decide now, with the SR-IOV operator as it is at the moment of the crossing: a person who restores
        # before the twin's loop runs must not be judged on the later state.
        crossing = Crossing(
            from_version=before or "",
            to_version=after or "",
            at=self.twin.clock.now(),
            sriov_replicas=self.operator_replicas(),
            default_policy_present=self._default_policy_present(),
        )
        if self.store.try_get(self.kinds.deployment, self.namespace, OPERATOR_DEPLOYMENT) is None:
            return True  # SR-IOV not enabled: nothing to protect
        self.crossings.append(crossing)
        self._pending.append(crossing)
        return True

    def _note_pre_steps(self) -> None:
        if self.failure is not None and self.operator_replicas() == 0 and not self._default_policy_present():
            self.failure.pre_steps_seen = True

    def _effective_version(self) -> str | None:
        """The newest version any source reports: OLM creates the new CSV before the Deployment rolls."""
        known = [(parse_version(v), v) for v in self._versions.values()]
        parsed = [(p, v) for p, v in known if p is not None]
        return max(parsed)[1] if parsed else None

    def _observed_versions(self) -> dict[str, str]:
        versions: dict[str, str] = {}
        deployment = self.store.try_get(self.kinds.deployment, netop.NAMESPACE, netop.OPERATOR_DEPLOYMENT)
        from_deployment = self._deployment_version(deployment)
        if from_deployment:
            versions["deployment"] = from_deployment
        from_csv = self._csv_version()
        if from_csv:
            versions["csv"] = from_csv
        return versions

    @staticmethod
    def _deployment_version(deployment: Obj | None) -> str | None:
        if deployment is None:
            return None
        containers = (((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")
        for container in containers or ():
            tag = version_of_image(container.get("image", ""))
            if parse_version(tag) is not None:
                return tag.lstrip("v") if tag else None
        return None

    def _csv_version(self) -> str | None:
        if self.csv_type is None:
            return None
        versions = []
        for csv in self.store.list(self.csv_type, netop.NAMESPACE):
            if not csv["metadata"]["name"].startswith(NETWORK_OPERATOR_CSV_PREFIX) or podutil.is_terminating(csv):
                continue
            text = str((csv.get("spec") or {}).get("version") or "")
            parsed = parse_version(text)
            if parsed is not None:
                versions.append((parsed, text.lstrip("v")))
        return max(versions)[1] if versions else None

    def network_operator_version(self) -> str | None:
        return self._effective_version() or self._deployment_version(
            self.store.try_get(self.kinds.deployment, netop.NAMESPACE, netop.OPERATOR_DEPLOYMENT)
        )

    def operator_replicas(self) -> int:
        deployment = self.store.try_get(self.kinds.deployment, self.namespace, OPERATOR_DEPLOYMENT)
        if deployment is None:
            return 0
        replicas = (deployment.get("spec") or {}).get("replicas")
        return 1 if replicas is None else int(replicas)  # the API server defaults replicas to 1

    def _default_policy_present(self) -> bool:
        if self.policy_type is None:
            return False
        policy = self.store.try_get(self.policy_type, self.namespace, DEFAULT_POLICY)
        return policy is not None and not podutil.is_terminating(policy)

    # -- reconciling ------------------------------------------------------------------------------------------------
    def reconcile_once(self) -> None:
        now = self.twin.clock.now()
        pending, self._pending = self._pending, []
        for crossing in pending:
            self._apply_crossing(crossing)
        running = self.operator_replicas() > 0
        restarted = running and not self._was_running
        self._was_running = running
        failure = self.failure
        if failure is not None and failure.pre_steps_seen and running and self._default_policy_present():
            self._heal(failure, now=now)
        elif restarted and failure is None:
            # The restored operator re-renders every node state; the daemons re-apply them.
            self._start_syncs(self._state_names(), now=now)
        if self._dirty:
            self._dirty = False
            if running:
                self.reconcile_node_states(now=now)
                self._reconcile_daemon_selector()
                self._reconcile_daemon_image()
        self._finish_syncs(now)

    def _reconcile_daemon_image(self) -> None:
        wanted = config_daemon_image_of(self.store.try_get(self.kinds.deployment, self.namespace, OPERATOR_DEPLOYMENT))
        daemonset = self.store.try_get(self.kinds.daemonset, self.namespace, CONFIG_DAEMON)
        if wanted is None or daemonset is None:
            return
        containers = daemonset["spec"]["template"]["spec"]["containers"]
        if all(container.get("image") == wanted for container in containers):
            return

        def render(ds: Obj) -> None:
            for container in ds["spec"]["template"]["spec"]["containers"]:
                container["image"] = wanted

        self.store.mutate(self.kinds.daemonset, self.namespace, CONFIG_DAEMON, render)

    def _apply_crossing(self, crossing: Crossing) -> None:
        if not crossing.breaks_nodes:
            log.info("Network Operator %s -> %s: SR-IOV pre-steps done", crossing.from_version, crossing.to_version)
            return
        nodes = set(self._state_names())
        if self.failure is None:
            self.failure = SriovFailure(crossing=crossing, message=failure_message(crossing))
        self.failure.nodes |= nodes
        self._note_pre_steps()  # somebody may have done them between the crossing and this pass
        for node_name in sorted(nodes):
            self._syncs_due.pop(node_name, None)
            self._set_sync_status(node_name, SYNC_FAILED, error=self.failure.message)
            self._replace_daemon_pod(node_name)
            self._record_disruptions(node_name, why=f"SR-IOV configuration failed: {self.failure.message}")

    def _heal(self, failure: SriovFailure, *, now: float) -> None:
        self.failure = None
        for node_name in sorted(failure.nodes):
            self._replace_daemon_pod(node_name)
        self._start_syncs(sorted(failure.nodes), now=now)

    def _start_syncs(self, node_names: Iterable[str], *, now: float) -> None:
        for node_name in node_names:
            if self._set_sync_status(node_name, SYNC_IN_PROGRESS):
                self._syncs_due[node_name] = now + self.timings.resync

    def _finish_syncs(self, now: float) -> None:
        for node_name, due in sorted(self._syncs_due.items()):
            if due > now:
                continue
            del self._syncs_due[node_name]
            if self.failure is None or node_name not in self.failure.nodes:
                self._set_sync_status(node_name, SYNC_SUCCEEDED)

    def reconcile_node_states(self, *, now: float, initial_status: str = SYNC_IN_PROGRESS) -> None:
        """One state per node the config selects, its spec rendered from the policies (the operator's job)."""
        assert self.policy_type is not None and self.config_type is not None and self.state_type is not None
        config = self.store.try_get(self.config_type, self.namespace, CONFIG_NAME)
        if config is None:
            return
        selector = (config.get("spec") or {}).get("configDaemonNodeSelector") or {}
        policies = [p for p in self.store.list(self.policy_type, self.namespace) if not podutil.is_terminating(p)]
        self._selector_keys = frozenset(selector).union(
            *(((p.get("spec") or {}).get("nodeSelector") or {}).keys() for p in policies)
        )
        wanted: dict[str, Obj] = {}
        for node in self.store.list(self.kinds.node):
            labels = node["metadata"].get("labels") or {}
            if selector_matches(selector, labels):
                ports = nic_ports(self.sim.nodes.get(node["metadata"]["name"]))
                wanted[node["metadata"]["name"]] = render_node_state_spec(
                    policies=policies, node_labels=labels, ports=ports
                )
        owner = podutil.owner_reference(config, block_owner_deletion=False)
        for existing in self.store.list(self.state_type, self.namespace):
            name = existing["metadata"]["name"]
            if name not in wanted:
                self._syncs_due.pop(name, None)
                self._ignore_api_errors(lambda name=name: self.store.delete(self.state_type, self.namespace, name))
        for node_name, spec in sorted(wanted.items()):
            state = self.store.try_get(self.state_type, self.namespace, node_name)
            ports = nic_ports(self.sim.nodes.get(node_name))
            if state is None:
                self.store.create(
                    self.state_type,
                    {
                        "metadata": {"name": node_name, "namespace": self.namespace, "ownerReferences": [owner]},
                        "spec": spec,
                    },
                )
                status: Obj = {"syncStatus": initial_status, "interfaces": discovered_interfaces(ports, spec)}
                self._write_status(self.state_type, node_name, status, ignore=True)
                if initial_status == SYNC_IN_PROGRESS:
                    self._syncs_due[node_name] = now + self.timings.resync
            elif state.get("spec") != spec:

                def change(obj: Obj, spec: Obj = spec) -> None:
                    obj["spec"] = spec

                self.store.mutate(self.state_type, self.namespace, node_name, change)
                if self.failure is None or node_name not in self.failure.nodes:
                    self._start_syncs([node_name], now=now)

    def _reconcile_daemon_selector(self) -> None:
        assert self.config_type is not None
        config = self.store.try_get(self.config_type, self.namespace, CONFIG_NAME)
        daemonset = self.store.try_get(self.kinds.daemonset, self.namespace, CONFIG_DAEMON)
        if config is None or daemonset is None:
            return
        selector = dict((config.get("spec") or {}).get("configDaemonNodeSelector") or {})
        if daemonset["spec"]["template"]["spec"].get("nodeSelector") != selector:

            def change(obj: Obj) -> None:
                obj["spec"]["template"]["spec"]["nodeSelector"] = selector

            self.store.mutate(self.kinds.daemonset, self.namespace, CONFIG_DAEMON, change)

    # -- config daemons ---------------------------------------------------------------------------------------------
    def plan_pod(self, pod: Obj, health: NodeHealth) -> PodPlan | None:
        meta = pod.get("metadata") or {}
        if meta.get("namespace") != self.namespace or (meta.get("labels") or {}).get("app") != CONFIG_DAEMON:
            return None
        failure = self.failure
        if failure is not None and health.name in failure.nodes:
            return PodPlan(
                outcome="crashloop", start_after=self.timings.crash_start, message=failure.message, reason="Error"
            )
        return PodPlan(outcome="ready", start_after=self.timings.daemon_start)

    def _replace_daemon_pod(self, node_name: str) -> None:
        """The kubelet fixes a pod's behaviour at start: a new pod on the node picks up the new one."""
        for pod in self.store.list(
            self.kinds.pod,
            self.namespace,
            lambda p: (
                (p["metadata"].get("labels") or {}).get("app") == CONFIG_DAEMON
                and (p.get("spec") or {}).get("nodeName") == node_name
            ),
        ):
            if not podutil.is_terminating(pod):
                self._ignore_api_errors(
                    lambda pod=pod: self.store.delete(self.kinds.pod, self.namespace, pod["metadata"]["name"])
                )

    def _record_disruptions(self, node_name: str, *, why: str) -> None:
        if self.sim.recorder is None:
            return
        for pod in self.store.list(self.kinds.pod, None, lambda p: (p.get("spec") or {}).get("nodeName") == node_name):
            owner = podutil.controller_of(pod) or {}
            if (
                podutil.uses_secondary_network(pod)
                and podutil.phase_of(pod) == "Running"
                and not podutil.is_terminating(pod)
                and owner.get("kind") != "DaemonSet"
            ):
                self.sim.recorder.record_disruption(pod, node=node_name, why=why)

    # -- writes ------------------------------------------------------------------------------------------------------
    def _state_names(self) -> list[str]:
        if self.state_type is None:
            return []
        return sorted(s["metadata"]["name"] for s in self.store.list(self.state_type, self.namespace))

    def _set_sync_status(self, node_name: str, sync_status: str, *, error: str = "") -> bool:
        """Write a node state's syncStatus (and an Event on change, as the config daemon does)."""
        assert self.state_type is not None
        state = self.store.try_get(self.state_type, self.namespace, node_name)
        if state is None:
            return False
        old = (state.get("status") or {}).get("syncStatus", "")
        status = dict(state.get("status") or {})
        status["syncStatus"] = sync_status
        if error:
            status["lastSyncError"] = error
        else:
            status.pop("lastSyncError", None)
        if status == state.get("status"):
            return True
        self._write_status(self.state_type, node_name, status, ignore=True)
        if old != sync_status and self.sim.events is not None:
            self.sim.events.record(
                state,
                reason="SyncStatusChanged",
                message=f"Status changed from: {old or 'none'} to: {sync_status}",
                component=DAEMON_COMPONENT,
                host=node_name,
                event_type="Warning" if sync_status == SYNC_FAILED else "Normal",
            )
        return True

    def _write_status(self, rtype: ResourceType, name: str, status: Obj, *, ignore: bool = False) -> None:
        def write(obj: Obj) -> None:
            obj["status"] = status

        try:
            self.store.mutate(rtype, self.namespace, name, write, subresource="status")
        except errors.ApiError as exc:
            if not ignore:
                raise
            log.debug("%s %s status not written: %s", rtype.kind, name, exc)

    @staticmethod
    def _ignore_api_errors(action: Any) -> None:
        try:
            action()
        except errors.ApiError as exc:
            log.debug("SR-IOV write skipped: %s", exc)


def install(twin: Twin) -> SriovOperator:
    operator = SriovOperator(twin)
    operator.install()
    return operator
