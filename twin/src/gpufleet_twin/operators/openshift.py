"""The twin's OpenShift platform: MachineConfigPools (the MCO's render, node controller and daemon)
and the ClusterVersion operator's control-plane update.

Modelled on openshift/machine-config-operator (``pkg/controller/node``: pool membership,
maxUnavailable, ``calculateStatus``) and openshift/cluster-version-operator (history):

- Pools ``master`` and ``worker`` are seeded; custom pools select nodes with
  ``spec.nodeSelector`` (e.g. ``node-role.kubernetes.io/gpu-canary: ""``).  A node
  that matches ``worker`` and a custom pool belongs to the custom pool (nodes keep
  the worker role label); two custom pools matching one node is an error upstream,
  here the first by name wins.
- Rendering: every pool's target config is ``rendered-<pool>-<hash>`` of the
  RHCOS release of the cluster's OpenShift version (``RHCOS_BY_OPENSHIFT``).  A
  paused pool is rendered but its nodes are not touched (upstream also keeps
  ``spec.configuration``); its status shows Updated False, Updating False.
- Node controller: an unpaused pool hands the target config to at most
  ``maxUnavailable`` (default 1) nodes at a time, counting nodes that are updating,
  cordoned, NotReady or Degraded, through the node annotations
  ``machineconfiguration.openshift.io/desiredConfig``.
- Daemon (per node): ``state`` Working, cordon, drain (evictions honouring PDBs,
  retried every 5 s), then ``SimState.reboot``; the node comes back with the new
  kernel and OSTREE version (so NFD labels, ``nodeInfo`` and the per-RHCOS GPU and
  MOFED DaemonSets follow), ``currentConfig`` = desired, ``state`` Done, uncordon.
  A node in ``SimState.machine_config_failures`` goes ``state`` Degraded instead, also on a
  config-only change (a node moved into a custom pool: the daemon writes files, no reboot).
- ClusterVersion ``version``: a new ``spec.desiredUpdate`` adds a Partial history
  entry (newest first), ``status.desired``, Progressing True; after
  ``control_plane_seconds`` the pools are re-rendered, the master pool rolls first,
  and once it is Updated the entry is Completed (paused worker pools do not hold the
  update, as in the EUS/canary procedures); worker pools render after the masters.

- Driver toolkit (openshift/driver-toolkit ``docs/driver_toolkit_imagestream.md``): the ImageStream
  ``openshift/driver-toolkit`` has one tag per RHCOS version the cluster has run (named by its OSTREE
  version) plus ``latest``, which points at the newest; the CVO adds the new release's tag when the
  control plane is updated, before any node reboots, and older tags stay (nodes still run them).
- A pod that builds a driver on a driver-toolkit image (a container whose image is a DTK tag's image
  beside a ``driver``/``doca-driver``/``mofed`` container with ``DRIVER_VERSION``) compiles against
  that RHCOS's kernel: it Succeeds, or Fails as the build would (``SimState.driver_builds_for`` /
  ``mofed_builds_for``, faults ``driver_build_fails``/``mofed_build_fails``).  This is how a person
  checks a build exists for a kernel before any node boots it.
- On this profile OLM also manages OpenShift's SR-IOV Network Operator (package
  ``sriov-network-operator``, channel ``stable``, ``operators/sriov_olm.py``), which the composition
  root attaches after this simulation (the channel's head follows the cluster's OpenShift minor).

- The kubelet client CA signer: the Secret ``openshift-kube-apiserver-operator/kube-apiserver-to-kubelet-signer``
  with the annotations the kube-apiserver operator writes on its signers (cluster-kube-apiserver-operator
  bindata ``kube-apiserver-to-kubelet-signer.yaml``): ``auth.openshift.io/certificate-not-before`` and
  ``-not-after`` (365 days; the operator makes a new CA at 292 days, openshift-docs PR 45313). Seeded as
  installed ``SIGNER_SEED_AGE_DAYS`` ago; tests move the dates with ``kubectl annotate``. Its data is a placeholder.

Left out: MachineConfig objects and their merge, RenderDegraded causes, the kubelet CA rotation itself (the
signer is never renewed), the drain's 1-hour degradation, ClusterOperators, availableUpdates/graph.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..kube import podutil
from ..kube.namespaces import namespace_object
from ..kube.state import NodeHealth, PodPlan, SimState
from ..machinery import errors
from ..machinery.kinds import Kinds
from ..machinery.registry import ResourceType
from ..machinery.selectors import label_selector_from_dict
from ..machinery.store import Store, WatchEvent
from ..machinery.wake import Waker
from . import upgrade_apply

if TYPE_CHECKING:
    from ..apiserver.cluster import Twin

log = logging.getLogger(__name__)

Obj = dict[str, Any]

MC_GROUP = "machineconfiguration.openshift.io"
CONFIG_GROUP = "config.openshift.io"
CURRENT_CONFIG = f"{MC_GROUP}/currentConfig"
DESIRED_CONFIG = f"{MC_GROUP}/desiredConfig"
MCD_STATE = f"{MC_GROUP}/state"
MCD_REASON = f"{MC_GROUP}/reason"
# Why a MachineConfig update drawn to fail (fault ``node_step_failures``) left the node Degraded, as the MCD says it.
STEP_FAILURE_REASON = "failed to update OS: rpm-ostree rebase exited with status 1"
ROLE_LABEL = "node-role.kubernetes.io/"
STATE_DONE, STATE_WORKING, STATE_DEGRADED = "Done", "Working", "Degraded"
CLUSTER_VERSION_NAME = "version"
IMAGE_GROUP = "image.openshift.io"
DTK_NAMESPACE = "openshift"
DTK_IMAGESTREAM = "driver-toolkit"
DTK_IMAGE_PREFIX = "quay.io/openshift-release-dev/ocp-v4.0-art-dev:driver-toolkit-"
GPU_DRIVER_IMAGES = frozenset({"driver"})
SIGNER_NAMESPACE = "openshift-kube-apiserver-operator"
SIGNER_NAME = "kube-apiserver-to-kubelet-signer"
SIGNER_LIFETIME_DAYS = 365
SIGNER_SEED_AGE_DAYS = 200  # the next rotation (day 292) is 92 days away
MOFED_DRIVER_IMAGES = frozenset({"doca-driver", "mofed"})


@dataclass(frozen=True)
class RhcosRelease:
    ostree: str
    kernel: str

    @property
    def os_image(self) -> str:
        return f"Red Hat Enterprise Linux CoreOS {self.ostree}"


# RHCOS per OpenShift release, shaped like the release notes' "RHCOS build / kernel" lines
# (4.16 and 4.17 are RHEL 9.4 based, kernel 5.14.0-427.*.el9_4).  The builds are
# illustrative: the twin needs distinct OSTREE versions and kernels per release, not the
# exact ones.  A version missing here gets its minor's entry with a z-stream-derived build.
RHCOS_BY_OPENSHIFT: dict[str, RhcosRelease] = {
    "4.16.20": RhcosRelease("416.94.202410211619-0", "5.14.0-427.40.1.el9_4.x86_64"),
    "4.16.21": RhcosRelease("416.94.202411041608-0", "5.14.0-427.42.1.el9_4.x86_64"),
    "4.17.3": RhcosRelease("417.94.202410250757-0", "5.14.0-427.42.1.el9_4.x86_64"),
    "4.17.12": RhcosRelease("417.94.202501071621-0", "5.14.0-427.50.1.el9_4.x86_64"),
    "4.18.1": RhcosRelease("418.94.202502100215-0", "5.14.0-427.55.1.el9_4.x86_64"),
}
SEED_OPENSHIFT_VERSION = "4.16.20"


def rhcos_for(version: str) -> RhcosRelease:
    if version in RHCOS_BY_OPENSHIFT:
        return RHCOS_BY_OPENSHIFT[version]
    parts = version.split(".")
    minor = ".".join(parts[:2])
    same_minor = [v for v in RHCOS_BY_OPENSHIFT if v.startswith(f"{minor}.")]
    base = RHCOS_BY_OPENSHIFT[same_minor[-1]] if same_minor else RHCOS_BY_OPENSHIFT[SEED_OPENSHIFT_VERSION]
    z = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else 0
    head = f"4{parts[1]}" if len(parts) > 1 else "416"
    build = f"{head}.94.2025{(z % 12) + 1:02d}{(z % 28) + 1:02d}0000-0"
    kernel_base, _, suffix = base.kernel.rpartition(".el9_4")
    return RhcosRelease(build, f"{kernel_base.rsplit('.', 2)[0]}.{z}.1.el9_4{suffix}")


def dtk_image(release: RhcosRelease) -> str:
    """The driver-toolkit image built for one RHCOS (the GPU Operator simulation names it the same way)."""
    return f"{DTK_IMAGE_PREFIX}{release.ostree}"


IMAGESTREAM_CRD: Obj = {
    # ImageStreams are served by openshift-apiserver (an aggregated API); a schemaless CRD serves the same
    # REST paths, which is all a client sees.
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"imagestreams.{IMAGE_GROUP}", "labels": {"gpufleet.io/twin-minimal-crd": "true"}},
    "spec": {
        "group": IMAGE_GROUP,
        "scope": "Namespaced",
        "names": {"kind": "ImageStream", "listKind": "ImageStreamList", "plural": "imagestreams",
                  "singular": "imagestream", "shortNames": ["is"]},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "apiVersion": {"type": "string"},
                            "kind": {"type": "string"},
                            "metadata": {"type": "object"},
                            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            }
        ],
    },
}  # fmt: skip


def release_image(version: str) -> str:
    return f"quay.io/openshift-release-dev/ocp-release@sha256:{hashlib.sha256(version.encode()).hexdigest()}"


def rendered_name(pool: str, release: RhcosRelease) -> str:
    return f"rendered-{pool}-{hashlib.sha256(f'{pool}/{release.ostree}'.encode()).hexdigest()[:32]}"


@dataclass(frozen=True)
class OpenShiftTimings:
    control_plane_seconds: float = 1200.0  # CVO: operators of the control plane updated
    reboot_seconds: float = 300.0
    drain_retry: float = 5.0
    tick: float = 5.0


@dataclass
class _NodeUpdate:
    phase: str  # "drain" or "reboot"
    target: str
    boot_id: str = ""


class OpenShiftPlatform:
    """MCO (render, node controller, daemons) and CVO in one simulated process."""

    name = "openshift"

    def __init__(self, twin: Twin, *, timings: OpenShiftTimings | None = None) -> None:
        if not isinstance(twin.sim, SimState):
            raise RuntimeError("the OpenShift simulation needs twin.sim")
        self.twin = twin
        self.sim: SimState = twin.sim
        self.store: Store = twin.store
        self.kinds = Kinds.from_registry(twin.registry)
        self.timings = timings or OpenShiftTimings()
        self.pool_type: ResourceType | None = twin.registry.get(MC_GROUP, "machineconfigpools")
        self.cv_type: ResourceType | None = twin.registry.get(CONFIG_GROUP, "clusterversions")
        # rendered config name -> the RHCOS it boots
        self.rendered: dict[str, RhcosRelease] = {}
        self.cluster_version = SEED_OPENSHIFT_VERSION
        self.masters_target_version = SEED_OPENSHIFT_VERSION
        self.workers_target_version = SEED_OPENSHIFT_VERSION
        self._cp_done_at: float | None = None
        self._updates: dict[str, _NodeUpdate] = {}
        # The rendered configs the seeded nodes run, per pool: the targets at the seeded version.
        self._seed_configs: dict[str, str] = {}
        self._waker: Waker | None = None
        self.imagestream_type: ResourceType | None = None

    # -- seeding ----------------------------------------------------------------------------------------------
    def install(self) -> None:
        if self.pool_type is None or self.cv_type is None:
            log.warning("no MachineConfigPool/ClusterVersion kinds registered: no OpenShift simulation")
            return
        self.seed()
        self.seed_driver_toolkit()
        self.seed_kubelet_signer()
        self.sim.pod_behaviours.insert(0, self.build_check_plan)
        self.twin.controllers.append(self)
        self.twin.published["openshift"] = {
            "version": self.cluster_version,
            "pools": ["master", "worker"],
            "driver_toolkit": f"{DTK_NAMESPACE}/{DTK_IMAGESTREAM}",
        }

    def seed(self) -> None:
        assert self.pool_type is not None and self.cv_type is not None
        for name, health in self.sim.nodes.items():
            node = self.store.try_get(self.kinds.node, None, name)
            current = ((node or {}).get("metadata", {}).get("annotations") or {}).get(CURRENT_CONFIG)
            if current and health.ostree_version:
                self.rendered[current] = RhcosRelease(health.ostree_version, health.kernel)
                pool = current.removeprefix("rendered-").rsplit("-", 1)[0]
                self._seed_configs.setdefault(pool, current)
        seed_release = next(iter(self.rendered.values()), rhcos_for(SEED_OPENSHIFT_VERSION))
        self.rendered.setdefault(rendered_name("master", seed_release), seed_release)
        for pool in ("master", "worker"):
            if self.store.try_get(self.pool_type, None, pool) is None:
                self.store.create(
                    self.pool_type,
                    {
                        "apiVersion": f"{MC_GROUP}/v1",
                        "kind": "MachineConfigPool",
                        "metadata": {
                            "name": pool,
                            "labels": {f"pools.operator.machineconfiguration.openshift.io/{pool}": ""},
                        },
                        "spec": {
                            "nodeSelector": {"matchLabels": {f"{ROLE_LABEL}{pool}": ""}},
                            "machineConfigSelector": {"matchLabels": {f"{MC_GROUP}/role": pool}},
                            "paused": False,
                        },
                    },
                )
        if self.store.try_get(self.cv_type, None, CLUSTER_VERSION_NAME) is None:
            stamp = self.twin.clock.iso()
            image = release_image(SEED_OPENSHIFT_VERSION)
            created = self.store.create(
                self.cv_type,
                {
                    "apiVersion": f"{CONFIG_GROUP}/v1",
                    "kind": "ClusterVersion",
                    "metadata": {"name": CLUSTER_VERSION_NAME},
                    "spec": {"clusterID": "6f1c2c8e-8c3a-4c0e-9a59-2f1f6d0a1b2c", "channel": "stable-4.16"},
                },
            )
            status = {
                # Required by the real CRD (openshift/api config/v1): without them a status write is refused.
                "availableUpdates": None,
                "versionHash": hashlib.sha256(image.encode()).hexdigest()[:11],
                "desired": {"version": SEED_OPENSHIFT_VERSION, "image": image},
                "history": [
                    {
                        "state": "Completed",
                        "startedTime": stamp,
                        "completionTime": stamp,
                        "version": SEED_OPENSHIFT_VERSION,
                        "image": image,
                        "verified": False,
                    }
                ],
                "observedGeneration": created["metadata"].get("generation", 1),
                "conditions": self._cv_conditions(progressing=False, version=SEED_OPENSHIFT_VERSION),
            }
            self._write_status(self.cv_type, CLUSTER_VERSION_NAME, status)
        self.reconcile()

    def seed_kubelet_signer(self) -> None:
        secret_type = self.twin.registry.get("", "secrets")
        if secret_type is None or self.store.try_get(secret_type, SIGNER_NAMESPACE, SIGNER_NAME) is not None:
            return
        if self.store.try_get(self.kinds.namespace, None, SIGNER_NAMESPACE) is None:
            self.store.create(self.kinds.namespace, namespace_object(SIGNER_NAMESPACE, profile="openshift"))
        not_before = self.twin.clock.now() - SIGNER_SEED_AGE_DAYS * 86400
        placeholder = base64.b64encode(b"twin placeholder, not a certificate").decode()
        self.store.create(
            secret_type,
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "kubernetes.io/tls",
                "metadata": {
                    "name": SIGNER_NAME,
                    "namespace": SIGNER_NAMESPACE,
                    "annotations": {
                        "auth.openshift.io/certificate-not-before": self.twin.clock.iso(not_before),
                        "auth.openshift.io/certificate-not-after": self.twin.clock.iso(
                            not_before + SIGNER_LIFETIME_DAYS * 86400
                        ),
                        "auth.openshift.io/certificate-issuer": "kube-apiserver-to-kubelet-signer",
                        "openshift.io/owning-component": "kube-apiserver",
                    },
                },
                "data": {"tls.crt": placeholder, "tls.key": placeholder},
            },
        )

    # -- driver toolkit -----------------------------------------------------------------------------------------
    def seed_driver_toolkit(self) -> None:
        crd_type = self.twin.registry.get("apiextensions.k8s.io", "customresourcedefinitions")
        if self.twin.registry.get(IMAGE_GROUP, "imagestreams") is None and crd_type is not None:
            self.store.create(crd_type, IMAGESTREAM_CRD)
        self.imagestream_type = self.twin.registry.get(IMAGE_GROUP, "imagestreams")
        if self.imagestream_type is None:
            return
        if self.store.try_get(self.kinds.namespace, None, DTK_NAMESPACE) is None:
            self.store.create(self.kinds.namespace, namespace_object(DTK_NAMESPACE, profile="openshift"))
        self.seed_shared_resource_viewers()
        for release in sorted(set(self.rendered.values()), key=lambda r: r.ostree):
            self.publish_driver_toolkit(release)

    def seed_shared_resource_viewers(self) -> None:
        """OpenShift's bootstrap policy (origin's bootstrappolicy, the "openshift" shared-resources namespace):
        every authenticated user may read the ImageStreams, tags and templates there and pull from them (Role
        ``shared-resource-viewer``, RoleBinding ``shared-resource-viewers`` to ``system:authenticated``), which is
        how anyone reads the driver-toolkit ImageStream."""
        group = "rbac.authorization.k8s.io"
        roles = self.twin.registry.get(group, "roles")
        bindings = self.twin.registry.get(group, "rolebindings")
        if roles is None or bindings is None:
            return
        read = ["get", "list", "watch"]
        role: dict[str, Any] = {
            "apiVersion": f"{group}/v1",
            "kind": "Role",
            "metadata": {"name": "shared-resource-viewer", "namespace": DTK_NAMESPACE},
            "rules": [
                {"verbs": read, "apiGroups": ["", "template.openshift.io"], "resources": ["templates"]},
                {
                    "verbs": read,
                    "apiGroups": ["", IMAGE_GROUP],
                    "resources": ["imagestreamimages", "imagestreams", "imagestreamtags"],
                },
                {"verbs": ["get"], "apiGroups": ["", IMAGE_GROUP], "resources": ["imagestreams/layers"]},
            ],
        }
        binding: dict[str, Any] = {
            "apiVersion": f"{group}/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "shared-resource-viewers", "namespace": DTK_NAMESPACE},
            "roleRef": {"apiGroup": group, "kind": "Role", "name": "shared-resource-viewer"},
            "subjects": [{"apiGroup": group, "kind": "Group", "name": "system:authenticated"}],
        }
        for rtype, obj in ((roles, role), (bindings, binding)):
            if self.store.try_get(rtype, DTK_NAMESPACE, obj["metadata"]["name"]) is None:
                # Complete objects written as etcd holds them (no admission to run), as the bootstrap policy is.
                self.store.create(rtype, obj, restore=True)

    def publish_driver_toolkit(self, release: RhcosRelease) -> None:
        """Add the RHCOS's tag (kept by later updates) and point ``latest`` at it."""
        if self.imagestream_type is None:
            return
        image = dtk_image(release)

        def tag(name: str) -> Obj:
            return {
                "name": name,
                "annotations": None,
                "from": {"kind": "DockerImage", "name": image},
                "importPolicy": {"scheduled": True},
                "referencePolicy": {"type": "Source"},
            }

        current = self.store.try_get(self.imagestream_type, DTK_NAMESPACE, DTK_IMAGESTREAM)
        if current is None:
            self.store.create(
                self.imagestream_type,
                {
                    "apiVersion": f"{IMAGE_GROUP}/v1",
                    "kind": "ImageStream",
                    "metadata": {"name": DTK_IMAGESTREAM, "namespace": DTK_NAMESPACE},
                    "spec": {"tags": [tag(release.ostree), tag("latest")]},
                },
            )
            return

        def add(obj: Obj) -> None:
            tags = [
                t for t in (obj.get("spec") or {}).get("tags") or [] if t.get("name") not in (release.ostree, "latest")
            ]
            obj.setdefault("spec", {})["tags"] = [*tags, tag(release.ostree), tag("latest")]

        self.store.mutate(self.imagestream_type, DTK_NAMESPACE, DTK_IMAGESTREAM, add)

    def _release_of_dtk(self, image: str) -> RhcosRelease | None:
        ostree = image[len(DTK_IMAGE_PREFIX) :] if image.startswith(DTK_IMAGE_PREFIX) else ""
        known = [*self.rendered.values(), *RHCOS_BY_OPENSHIFT.values()]
        return next((release for release in known if release.ostree == ostree), None) if ostree else None

    def build_check_plan(self, pod: Obj, health: NodeHealth) -> PodPlan | None:
        """A driver build on a driver-toolkit image compiles for that RHCOS's kernel, wherever the pod runs."""
        if podutil.controller_of(pod) is not None:
            return None  # the operators' own driver pods (DaemonSets) load what they build: not a build check
        containers = (pod.get("spec") or {}).get("containers") or []
        release = next((r for c in containers if (r := self._release_of_dtk(str(c.get("image") or "")))), None)
        if release is None:
            return None
        for container in containers:
            image = str(container.get("image") or "")
            name = image.rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0]
            env = {str(e.get("name")): str(e.get("value") or "") for e in container.get("env") or []}
            version = env.get("DRIVER_VERSION") or image.rsplit(":", 1)[-1].split("-rhcos", 1)[0]
            if name in GPU_DRIVER_IMAGES:
                builds, what, seconds = self.sim.driver_builds_for(version, release.kernel), "NVIDIA driver", 360.0
            elif name in MOFED_DRIVER_IMAGES:
                builds, what, seconds = self.sim.mofed_builds_for(version, release.kernel), "MOFED/DOCA driver", 420.0
            else:
                continue
            if builds:
                return PodPlan(
                    outcome="succeeded", run_for=seconds, reason="Completed",
                    message=f"{what} {version} built for kernel {release.kernel} (RHCOS {release.ostree})",
                )  # fmt: skip
            return PodPlan(
                outcome="failed", run_for=seconds / 4, reason="Error",
                message=f"{what} {version} does not build for kernel {release.kernel} (RHCOS {release.ostree}): "
                "modules failed to compile against the driver toolkit's kernel headers",
            )  # fmt: skip
        return None

    # -- loop -------------------------------------------------------------------------------------------------
    async def run(self, twin: Twin) -> None:
        keys = {self.kinds.node.key, self.kinds.pod.key}
        if self.pool_type is not None and self.cv_type is not None:
            keys |= {self.pool_type.key, self.cv_type.key}

        def relevant(event: WatchEvent) -> bool:
            if event.rtype.key == self.kinds.pod.key:
                return event.type == "DELETED" and (event.obj.get("spec") or {}).get("nodeName") in self._updates
            if self.pool_type is not None and event.rtype.key == self.pool_type.key:
                return (event.old or {}).get("spec") != event.obj.get("spec")
            if self.cv_type is not None and event.rtype.key == self.cv_type.key:
                return (event.old or {}).get("spec") != event.obj.get("spec")
            return event.rtype.key in keys and event.obj.get("metadata") != (event.old or {}).get("metadata")

        self._waker = Waker(self.store, twin.clock, on_event=relevant)
        while True:
            try:
                self.reconcile()
            except Exception:
                log.exception("openshift reconcile failed")
            await self._waker.wait(self.timings.tick if self._updates or self._cp_done_at else 60.0)
            await asyncio.sleep(0)

    def reconcile(self) -> None:
        if self.pool_type is None or self.cv_type is None:
            return
        now = self.twin.clock.now()
        self._reconcile_cluster_version(now)
        pools = sorted(self.store.list(self.pool_type), key=lambda p: p["metadata"]["name"])
        membership = self._membership(pools)
        for pool in pools:
            self._reconcile_pool(pool, membership.get(pool["metadata"]["name"], []), now)
        self._run_daemons(now)

    # -- CVO --------------------------------------------------------------------------------------------------
    def _reconcile_cluster_version(self, now: float) -> None:
        assert self.cv_type is not None
        cv = self.store.try_get(self.cv_type, None, CLUSTER_VERSION_NAME)
        if cv is None:
            return
        status = dict(cv.get("status") or {})
        desired = (cv.get("spec") or {}).get("desiredUpdate") or {}
        version = desired.get("version")
        history = list(status.get("history") or [])
        if version and version != (status.get("desired") or {}).get("version"):
            image = desired.get("image") or release_image(version)
            if history and history[0].get("state") == "Partial":
                history[0] = {**history[0], "state": "Partial", "completionTime": self.twin.clock.iso(now)}
            history.insert(
                0,
                {
                    "state": "Partial",
                    "startedTime": self.twin.clock.iso(now),
                    "completionTime": None,
                    "version": version,
                    "image": image,
                    "verified": bool(desired.get("image") is None),
                },
            )
            status.update(
                versionHash=hashlib.sha256(image.encode()).hexdigest()[:11],
                desired={"version": version, "image": image},
                history=history,
                observedGeneration=cv["metadata"].get("generation", 1),
                conditions=self._cv_conditions(progressing=True, version=version),
            )
            self._cp_done_at = now + self.timings.control_plane_seconds
            self._write_status(self.cv_type, CLUSTER_VERSION_NAME, status)
            return
        if not history or history[0].get("state") != "Partial":
            return
        target = history[0]["version"]
        if self._cp_done_at is not None and now >= self._cp_done_at:
            # The machine-config operator is updated: it renders the new RHCOS, masters first.  The
            # payload's driver-toolkit ImageStream manifest has been applied by now: a tag for the new RHCOS.
            self.masters_target_version = target
            self._cp_done_at = None
            self.publish_driver_toolkit(rhcos_for(target))
        if self.masters_target_version == target and self._pool_updated("master"):
            self.workers_target_version = target
            self.cluster_version = target
            history[0] = {**history[0], "state": "Completed", "completionTime": self.twin.clock.iso(now)}
            status.update(history=history, conditions=self._cv_conditions(progressing=False, version=target))
            self._write_status(self.cv_type, CLUSTER_VERSION_NAME, status)

    def _cv_conditions(self, *, progressing: bool, version: str) -> list[Obj]:
        stamp = self.twin.clock.iso()
        message = f"Working towards {version}" if progressing else f"Cluster version is {version}"
        return [
            {"type": "Available", "status": "True", "lastTransitionTime": stamp, "message": f"Done applying {version}"},
            {"type": "Failing", "status": "False", "lastTransitionTime": stamp},
            {"type": "Progressing", "status": "True" if progressing else "False", "lastTransitionTime": stamp,
             "message": message},
            {"type": "Upgradeable", "status": "True", "lastTransitionTime": stamp},
        ]  # fmt: skip

    def _pool_updated(self, name: str) -> bool:
        assert self.pool_type is not None
        pool = self.store.try_get(self.pool_type, None, name)
        conditions = ((pool or {}).get("status") or {}).get("conditions") or []
        target = self._target_for(name)
        return ((pool or {}).get("status") or {}).get("configuration", {}).get("name") == target and any(
            c.get("type") == "Updated" and c.get("status") == "True" for c in conditions
        )

    # -- MCO: pools -------------------------------------------------------------------------------------------
    def _membership(self, pools: list[Obj]) -> dict[str, list[Obj]]:
        members: dict[str, list[Obj]] = {p["metadata"]["name"]: [] for p in pools}
        selectors = {
            p["metadata"]["name"]: label_selector_from_dict((p.get("spec") or {}).get("nodeSelector") or {})
            for p in pools
        }
        for node in self.store.list(self.kinds.node):
            labels = node["metadata"].get("labels") or {}
            matched = [name for name, sel in selectors.items() if sel.matches(labels)]
            if not matched:
                continue
            if "master" in matched:
                chosen = "master"
            else:
                custom = [m for m in matched if m != "worker"]
                chosen = custom[0] if custom else "worker"
            members[chosen].append(node)
        return members

    def _target_for(self, pool_name: str) -> str:
        version = self.masters_target_version if pool_name == "master" else self.workers_target_version
        if version == SEED_OPENSHIFT_VERSION and pool_name in self._seed_configs:
            return self._seed_configs[pool_name]
        release = rhcos_for(version)
        name = rendered_name(pool_name, release)
        self.rendered.setdefault(name, release)
        return name

    def _reconcile_pool(self, pool: Obj, nodes: list[Obj], now: float) -> None:
        assert self.pool_type is not None
        name = pool["metadata"]["name"]
        spec = pool.get("spec") or {}
        target = self._target_for(name)
        if (spec.get("configuration") or {}).get("name") != target:

            def set_spec(obj: Obj) -> None:
                obj["spec"]["configuration"] = {"name": target, "source": []}

            self.store.mutate(self.pool_type, None, name, set_spec)
        paused = bool(spec.get("paused"))
        raw_max = spec.get("maxUnavailable", 1)
        try:
            # pkg/controller/node maxUnavailable(): a percent of the pool's nodes rounded down, and never below 1.
            max_unavailable = max(1, podutil.scaled_value(raw_max, len(nodes), round_up=False))
        except ValueError:
            max_unavailable = 1
        # A node is "updated" when it runs the target and is Done.
        annotations = {n["metadata"]["name"]: n["metadata"].get("annotations") or {} for n in nodes}

        def updated(n: Obj) -> bool:
            a = annotations[n["metadata"]["name"]]
            return a.get(CURRENT_CONFIG) == target and a.get(DESIRED_CONFIG) == target and a.get(MCD_STATE) == "Done"

        def unavailable(n: Obj) -> bool:
            a = annotations[n["metadata"]["name"]]
            return (
                a.get(CURRENT_CONFIG) != a.get(DESIRED_CONFIG)
                or a.get(MCD_STATE) in (STATE_WORKING, STATE_DEGRADED)
                or bool((n.get("spec") or {}).get("unschedulable"))
                or not upgrade_apply.node_condition_ready(n)
            )

        if not paused:
            busy = sum(1 for n in nodes if unavailable(n))
            for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
                if busy >= max_unavailable:
                    break
                a = annotations[node["metadata"]["name"]]
                if a.get(DESIRED_CONFIG) == target or unavailable(node):
                    continue
                self._annotate(node["metadata"]["name"], {DESIRED_CONFIG: target})
                busy += 1
        degraded = [n for n in nodes if annotations[n["metadata"]["name"]].get(MCD_STATE) == STATE_DEGRADED]
        n_updated = sum(1 for n in nodes if updated(n))
        ready = sum(1 for n in nodes if updated(n) and not unavailable(n))
        all_updated = n_updated == len(nodes)
        updating = not all_updated and not paused and not degraded
        stamp = self.twin.clock.iso(now)
        node_degraded_msg = "; ".join(
            f'Node {n["metadata"]["name"]} is reporting: "{annotations[n["metadata"]["name"]].get(MCD_REASON, "")}"'
            for n in degraded
        )
        conditions = [
            _cond("RenderDegraded", False, "", "", stamp),
            _cond(
                "NodeDegraded",
                bool(degraded),
                f"{len(degraded)} nodes are reporting degraded status on sync" if degraded else "",
                node_degraded_msg,
                stamp,
            ),
            _cond("Degraded", bool(degraded), "", "", stamp),
            _cond(
                "Updated", all_updated and not degraded, "", f"All nodes are updated with MachineConfig {target}"
                if all_updated else "", stamp
            ),
            _cond("Updating", updating, "", f"All nodes are updating to MachineConfig {target}" if updating else "",
                  stamp),
        ]  # fmt: skip
        current_name = ((pool.get("status") or {}).get("configuration") or {}).get("name")
        status = {
            "observedGeneration": pool["metadata"].get("generation", 1),
            "machineCount": len(nodes),
            "updatedMachineCount": n_updated,
            "readyMachineCount": ready,
            "unavailableMachineCount": sum(1 for n in nodes if unavailable(n)),
            "degradedMachineCount": len(degraded),
            # status.configuration moves to the target only once every machine runs it.
            "configuration": {"name": target if all_updated else (current_name or target), "source": []},
            "conditions": conditions,
        }
        self._write_status(self.pool_type, name, status)

    # -- MCD ----------------------------------------------------------------------------------------------------
    def _run_daemons(self, now: float) -> None:
        for node in self.store.list(self.kinds.node):
            name = node["metadata"]["name"]
            annotations = node["metadata"].get("annotations") or {}
            desired, current = annotations.get(DESIRED_CONFIG), annotations.get(CURRENT_CONFIG)
            health = self.sim.nodes.get(name)
            if health is None or not desired or desired == current or annotations.get(MCD_STATE) == STATE_DEGRADED:
                continue
            update = self._updates.get(name)
            release = self.rendered.get(desired)
            if update is None and (release is None or release.ostree == health.ostree_version):
                # Same OS content (e.g. a node moved into a custom pool): the daemon finds nothing that
                # needs a drain or a reboot and just records the new config, unless writing the config's
                # files fails (fault machine_config_fails): then the node is Degraded as after a failed update.
                failure = self.sim.machine_config_failures.get(name)
                if failure:
                    self._annotate(name, {MCD_STATE: STATE_DEGRADED, MCD_REASON: failure})
                    continue
                self._finish(name)
                continue
            if update is None or update.target != desired:
                update = self._updates[name] = _NodeUpdate(phase="drain", target=desired)
                self._annotate(name, {MCD_STATE: STATE_WORKING, MCD_REASON: ""})
                self.store.mutate(self.kinds.node, None, name, lambda n: n["spec"].update(unschedulable=True))
            if update.phase == "drain":
                remaining = [
                    p
                    for p in self._drainable(name)
                    if not upgrade_apply.evict_pod(
                        self.store, self.kinds, p["metadata"]["namespace"], p["metadata"]["name"]
                    )
                ]
                if remaining:
                    continue
                drawn = self.sim.step_fails(name, "machine_config", release.ostree if release else "")
                if name in self.sim.machine_config_failures or drawn:
                    reason = self.sim.machine_config_failures.get(name) or STEP_FAILURE_REASON
                    self._annotate(name, {MCD_STATE: STATE_DEGRADED, MCD_REASON: reason})
                    del self._updates[name]
                    continue
                if release is None or release.ostree == health.ostree_version:
                    self._finish(name)
                    continue
                update.phase, update.boot_id = "reboot", health.boot_id
                self.sim.reboot(name, self.timings.reboot_seconds)
                # The node boots the new RHCOS deployment: new kernel and OSTREE version.
                health.kernel, health.ostree_version, health.os_image = release.kernel, release.ostree, release.os_image
            elif update.phase == "reboot" and health.boot_id != update.boot_id and health.ready:
                self._finish(name)

    def _finish(self, name: str) -> None:
        node = self.store.get(self.kinds.node, None, name)
        desired = (node["metadata"].get("annotations") or {}).get(DESIRED_CONFIG, "")
        self._annotate(name, {CURRENT_CONFIG: desired, MCD_STATE: STATE_DONE, MCD_REASON: ""})
        self.store.mutate(self.kinds.node, None, name, lambda n: n["spec"].pop("unschedulable", None))
        self._updates.pop(name, None)

    def _drainable(self, node_name: str) -> list[Obj]:
        pods = self.store.list(self.kinds.pod, None, lambda p: (p.get("spec") or {}).get("nodeName") == node_name)
        return [
            p
            for p in pods
            if not podutil.is_terminal(p)
            and not p["metadata"].get("deletionTimestamp")
            and (podutil.controller_of(p) or {}).get("kind") != "DaemonSet"
            and "kubernetes.io/config.mirror" not in (p["metadata"].get("annotations") or {})
        ]

    # -- writes -------------------------------------------------------------------------------------------------
    def _annotate(self, name: str, values: dict[str, str]) -> None:
        self.store.mutate(
            self.kinds.node, None, name, lambda n: n["metadata"].setdefault("annotations", {}).update(values)
        )

    def _write_status(self, rtype: ResourceType, name: str, status: Obj) -> None:
        current = self.store.try_get(rtype, None, name)
        if current is None:
            return
        merged = dict(status)
        if "conditions" in status:
            old = {c.get("type"): c for c in (current.get("status") or {}).get("conditions") or []}
            merged["conditions"] = [
                {**c, "lastTransitionTime": old[c["type"]].get("lastTransitionTime", c["lastTransitionTime"])}
                if c["type"] in old and old[c["type"]].get("status") == c["status"]
                else c
                for c in status["conditions"]
            ]
        if current.get("status") == merged:
            return

        def change(obj: Obj) -> None:
            obj["status"] = merged

        try:
            self.store.mutate(rtype, None, name, change, subresource="status")
        except errors.ApiError as exc:
            log.debug("status of %s not written: %s", name, exc)


def _cond(kind: str, status: bool, reason: str, message: str, stamp: str) -> Obj:
    return {
        "type": kind,
        "status": "True" if status else "False",
        "lastTransitionTime": stamp,
        "reason": reason,
        "message": message,
    }


def install(twin: Twin) -> OpenShiftPlatform | None:
    if not isinstance(twin.sim, SimState) or twin.sim.profile != "openshift":
        return None
    platform = OpenShiftPlatform(twin)
    platform.install()
    return platform
