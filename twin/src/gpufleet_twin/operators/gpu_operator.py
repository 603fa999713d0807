"""The twin's NVIDIA GPU Operator: ClusterPolicy and NVIDIADriver into DaemonSets, the driver's
life on a node, and the driver upgrade controller.

Modelled on NVIDIA/gpu-operator v24.9.0 (the release the twin seeds):

- ``ClusterPolicy`` (a singleton; later ones are ``ignored``) renders one
  DaemonSet per operand into the operator namespace.  The driver DaemonSet
  is always ``OnDelete``; on Kubernetes it is ``nvidia-driver-daemonset``
  with image ``<repository>/<image>:<version>-<os>`` (e.g. ``-ubuntu22.04``);
  on OpenShift there is one per RHCOS version (``nvidia-driver-daemonset-<ostree>``,
  node selector on NFD's ``OSTREE_VERSION``, ``app`` label equal to the
  DaemonSet name, ``openshift.driver-toolkit=true``), as the driver toolkit
  builds per RHCOS image.  ``status.state`` is ``ready`` only when every
  operand DaemonSet is, and the OnDelete driver only when every driver pod
  runs the latest revision (object_controls.go ``isDaemonSetReady``).
- With ``spec.driver.useNvidiaDriverCRD`` the ClusterPolicy drops its driver
  DaemonSet and every ``NVIDIADriver`` gets its own, one per OS pool of the
  nodes its ``spec.nodeSelector`` picks; nodes are routed to one CR with the
  ``nvidia.com/gpu-operator.driver.owner`` label, and overlapping selectors
  make every CR ``notReady`` with reason ``ConflictingNodeSelector``.  As in
  v24.9.0 the ClusterPolicy's ``upgradePolicy`` drives all of them (the
  per-CR ``upgradePolicy`` arrived in v26.7.0).
- Pod behaviours (``SimState.pod_behaviours``): a driver pod loads its
  module after a build-and-load time and sets ``NodeHealth.driver_version``
  while it runs; it unloads when the pod stops; a version without a build
  for the node's kernel crash-loops.  Like k8s-driver-manager, a new driver
  pod first moves the node's operand labels (``nvidia.com/gpu.deploy.*``)
  to ``paused-for-driver-upgrade`` so their pods leave, then restores them;
  the operands come back and wait for the driver (the validator is Ready
  only once the driver is loaded and the device plugin is up).
- The upgrade controller is the one both operators share
  (``upgrade_controller``, as both call k8s-operator-libs ``pkg/upgrade``):
  this module gives it the driver DaemonSets and pods its selector picks
  (``app``, ``openshift.driver-toolkit`` or, with NVIDIADriver, the
  component label) and the ClusterPolicy's ``upgradePolicy``.

Where the twin knowingly differs, and why:

- The upgrade controller also wakes when a driver or validator pod it waits
  for changes (upstream notices those at its 2-minute requeue), so tests with
  a large time scale move briskly; decisions are the same.
- It waits (up to a minute) for a new driver pod to be bound instead of
  skipping the node as BuildState does, which would hand its slot to another
  node; a real scheduler binds within milliseconds.
- A new driver pod pauses the operands only when it brings a different
  driver than the one loaded (upstream pauses on every start).
- Evictions go through the store, not HTTP: they honour PodDisruptionBudgets
  (and the twin's ``never-allow`` fault annotation) but not request hooks.
- The metrics are served at ``GET /admin/gpu-operator/metrics``.

Precompiled drivers (``driver.usePrecompiled``) get one DaemonSet per OS and
kernel, ``nvidia-driver-daemonset-<os>-<kernel>``, image tag
``<branch>-<kernel>-<os>``, as upstream's node pools do; switching between
precompiled and compiled therefore deletes the old DaemonSets and creates new
ones, so every driver pod restarts at once, outside the upgrade controller
(NVIDIA/gpu-operator issues 2166, 2549).

Left out: vGPU/sandbox/Kata/CC operands, DRA, and the per-CR upgrade policy of v26.7.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ..apiserver.admin import protected
from ..apiserver.cluster import Route
from ..kube import podutil
from ..kube.index import ClusterIndex
from ..kube.nodelabels import OS_ID_LABEL, OS_VERSION_LABEL, OSTREE_LABEL, node_os_tag
from ..kube.serviceaccounts import ensure_service_account
from ..kube.state import NodeHealth, PodPlan, SimState
from ..machinery import errors
from ..machinery.kinds import Kinds
from ..machinery.registry import ResourceType
from ..machinery.selectors import label_selector_from_map
from ..machinery.store import Store, WatchEvent
from ..machinery.wake import Waker, run_operator_loop
from . import upgrade_apply
from . import upgrade_model as um
from .upgrade_controller import DriverUpgradeController, UpgradeStatus, latest_revision_hash

if TYPE_CHECKING:
    from ..apiserver.cluster import Twin

log = logging.getLogger(__name__)

Obj = dict[str, Any]

OPERATOR_COMPONENT = "nvidia-gpu-operator"  # mgr.GetEventRecorderFor in cmd/gpu-operator/main.go
CLUSTER_POLICY_NAME = "gpu-cluster-policy"
DRA_GPU_DRIVER = "gpu.nvidia.com"  # NVIDIA/k8s-dra-driver-gpu's driver name in ResourceClaim allocations
OPERATOR_DEPLOYMENT = "gpu-operator"
OPERATOR_SERVICE_ACCOUNT = "gpu-operator"
NAMESPACE_BY_PROFILE = {"openshift": "nvidia-gpu-operator", "kubernetes": "gpu-operator"}

# Twin knob (not an upstream key): simulated seconds a new driver takes to build and load on this Node, so
# per-node times can differ as on real fleets; the rehearsal sets it from the cluster's history (with jitter).
DRIVER_SECONDS_ANNOTATION = "twin.gpufleet.io/driver-load-seconds"
# Labels and annotations of the operator (controllers/state_manager.go, object_controls.go).
DRIVER_APP = "nvidia-driver-daemonset"
KERNEL_LABEL = "feature.node.kubernetes.io/kernel-version.full"
COMPONENT_LABEL = "app.kubernetes.io/component"
DRIVER_COMPONENT = "nvidia-driver"
DTK_LABEL = "openshift.driver-toolkit"
DTK_RHCOS_LABEL = "openshift.driver-toolkit.rhcos"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
PCI_NVIDIA_LABEL = "feature.node.kubernetes.io/pci-10de.present"
OWNER_LABEL = "nvidia.com/gpu-operator.driver.owner"
LAST_APPLIED_HASH = "nvidia.com/last-applied-hash"
DEPLOY_PREFIX = "nvidia.com/gpu.deploy."
PAUSED_FOR_DRIVER_UPGRADE = "paused-for-driver-upgrade"
VALIDATOR_APP = "nvidia-operator-validator"
# What the driver container prints when rmmod fails (gpu-operator issue 2509).
DRIVER_IN_USE = "Could not unload NVIDIA driver kernel modules, driver is in use"
# Nodes whose next step depends on their driver pod (the upgrade controller looks again when it changes).
_WAITING_ON_DRIVER_POD = frozenset({um.STATE_UNKNOWN, um.STATE_POD_RESTART_REQUIRED, um.STATE_FAILED})
# States in which the upgrade controller lists a node's other pods; then those in which it retries refused evictions.
_NEEDS_PODS = frozenset(
    {
        um.STATE_WAIT_FOR_JOBS_REQUIRED,
        um.STATE_POD_DELETION_REQUIRED,
        um.STATE_DRAIN_REQUIRED,
        um.STATE_VALIDATION_REQUIRED,
    }
)
_RETRY_STATES = frozenset({um.STATE_POD_DELETION_REQUIRED, um.STATE_DRAIN_REQUIRED})
DEVICE_PLUGIN_APP = "nvidia-device-plugin-daemonset"


@dataclass(frozen=True)
class GpuOperatorRelease:
    """Versions the twin seeds.

    The driver is the one of the seed matrix's ``current_production`` stage
    (560.35.03), which GPU Operator v24.9.x lists as supported although its
    chart default is 550.127.05 (cloud-native-docs life-cycle-policy component
    matrix); device plugin, toolkit and DCGM exporter are the v24.9.0 chart's
    defaults (deployments/gpu-operator/values.yaml at tag v24.9.0).
    When the seeded nodes already run a driver, the ClusterPolicy takes theirs.
    """

    operator_version: str = "v24.9.0"
    csv_version: str = "24.9.0"
    driver_version: str = "560.35.03"
    driver_manager_version: str = "v0.7.0"
    toolkit_version: str = "v1.17.0"
    device_plugin_version: str = "v0.17.0"
    dcgm_version: str = "3.3.8-1"
    dcgm_exporter_version: str = "3.3.8-3.6.0"
    mig_manager_version: str = "v0.10.0"


@dataclass(frozen=True)
class GpuOperatorTimings:
    """Simulated seconds for what takes time on a real node."""

    driver_build_and_load: float = 240.0  # nvidia-installer compiles the module for the running kernel
    driver_build_and_load_openshift: float = 360.0  # the driver-toolkit build on RHCOS
    driver_precompiled_load: float = 60.0
    driver_already_loaded: float = 20.0  # driver-manager finds the same version loaded and skips the reload
    driver_build_failure: float = 90.0  # time until the failing build exits
    operand_start: float = 15.0
    validator_run: float = 60.0  # driver, toolkit, cuda and plugin validations
    pause_grace: float = 300.0  # driver-manager waits this long for operand pods to go
    upgrade_requeue: float = um.PLANNED_REQUEUE_SECONDS
    eviction_retry: float = 5.0  # kubectl's drain helper retries a refused eviction after 5 s


@dataclass(frozen=True)
class _Operand:
    state: str  # ClusterPolicy state name
    app: str  # DaemonSet name and pod app label
    policy_key: str  # spec key in ClusterPolicy
    deploy_label: str  # node label suffix after nvidia.com/gpu.deploy.
    container: str
    service_account: str
    default_enabled: bool = True


# Operand DaemonSets in the order the operator's state machine walks them (state_manager.go addState).
OPERANDS = (
    _Operand(
        "state-container-toolkit",
        "nvidia-container-toolkit-daemonset",
        "toolkit",
        "container-toolkit",
        "nvidia-container-toolkit-ctr",
        "nvidia-container-toolkit",
    ),
    _Operand(
        "state-operator-validation",
        VALIDATOR_APP,
        "validator",
        "operator-validator",
        "nvidia-operator-validator",
        "nvidia-operator-validator",
    ),
    _Operand(
        "state-device-plugin",
        DEVICE_PLUGIN_APP,
        "devicePlugin",
        "device-plugin",
        "nvidia-device-plugin",
        "nvidia-device-plugin",
    ),
    _Operand("state-dcgm", "nvidia-dcgm", "dcgm", "dcgm", "nvidia-dcgm-ctr", "nvidia-dcgm", default_enabled=False),
    _Operand(
        "state-dcgm-exporter",
        "nvidia-dcgm-exporter",
        "dcgmExporter",
        "dcgm-exporter",
        "nvidia-dcgm-exporter",
        "nvidia-dcgm-exporter",
    ),
    _Operand(
        "gpu-feature-discovery",
        "gpu-feature-discovery",
        "gfd",
        "gpu-feature-discovery",
        "gpu-feature-discovery",
        "nvidia-gpu-feature-discovery",
    ),
    _Operand(
        "state-mig-manager",
        "nvidia-mig-manager",
        "migManager",
        "mig-manager",
        "nvidia-mig-manager",
        "nvidia-mig-manager",
    ),
)
OPERAND_APPS = frozenset(op.app for op in OPERANDS)
# Operand labels k8s-driver-manager pauses before it touches the driver.
PAUSED_DEPLOY_LABELS = tuple(DEPLOY_PREFIX + op.deploy_label for op in OPERANDS)


# -- seeds ------------------------------------------------------------------------------------------
def default_cluster_policy(
    *, profile: str, release: GpuOperatorRelease, driver_version: str, olm_defaults: bool = False
) -> Obj:
    """A ClusterPolicy as the v24.9.0 chart (Kubernetes) or the OLM bundle (OpenShift) leaves it.

    ``olm_defaults`` leaves the driver and ``driver.manager`` without repository, image and version, as the OLM
    bundle's alm-examples do: the operator then takes both from its own environment (``bundle_env``).

    Modelled on reference/samples/clusterpolicy: upgradePolicy has the chart
    defaults (autoUpgrade true, maxParallelUpgrades 1, maxUnavailable 25%,
    drain disabled), operands update RollingUpdate with maxUnavailable "1".
    """
    openshift = profile == "openshift"
    ubi_or_ubuntu = "ubi8" if openshift else "ubuntu20.04"
    labels: dict[str, str] = {}
    if not openshift:
        labels = {
            "app.kubernetes.io/component": "gpu-operator",
            "app.kubernetes.io/instance": "gpu-operator",
            "app.kubernetes.io/managed-by": "Helm",
            "app.kubernetes.io/name": "gpu-operator",
            "app.kubernetes.io/version": release.operator_version,
            "helm.sh/chart": f"gpu-operator-{release.operator_version}",
        }
    spec: Obj = {
        "operator": {
            "defaultRuntime": "crio" if openshift else "containerd",
            "runtimeClass": "nvidia",
            "initContainer": {"repository": "nvcr.io/nvidia", "image": "cuda", "version": "12.6.2-base-ubi9"},
        },
        "daemonsets": {
            "updateStrategy": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": "1"},
            "priorityClassName": "system-node-critical",
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "labels": {
                "app.kubernetes.io/managed-by": "gpu-operator",
                "helm.sh/chart": f"gpu-operator-{release.operator_version}",
            },
        },
        "driver": {
            "enabled": True,
            "useNvidiaDriverCRD": False,
            "usePrecompiled": False,
            "kernelModuleType": "auto",
            **({} if olm_defaults else {"repository": "nvcr.io/nvidia", "image": "driver", "version": driver_version}),
            "imagePullPolicy": "IfNotPresent",
            "manager": {
                **(
                    {
                        "repository": "nvcr.io/nvidia/cloud-native",
                        "image": "k8s-driver-manager",
                        "version": release.driver_manager_version,
                    }
                    if not olm_defaults
                    else {}
                ),
                "env": [
                    {"name": "ENABLE_GPU_POD_EVICTION", "value": "true"},
                    {"name": "ENABLE_AUTO_DRAIN", "value": "false"},
                    {"name": "DRAIN_USE_FORCE", "value": "false"},
                    {"name": "DRAIN_POD_SELECTOR_LABEL", "value": ""},
                    {"name": "DRAIN_TIMEOUT_SECONDS", "value": "0s"},
                    {"name": "DRAIN_DELETE_EMPTYDIR_DATA", "value": "false"},
                ],
            },
            "rdma": {"enabled": False, "useHostMofed": False},
            "startupProbe": {
                "initialDelaySeconds": 60,
                "periodSeconds": 10,
                "timeoutSeconds": 60,
                "failureThreshold": 120,
            },
            "upgradePolicy": {
                "autoUpgrade": True,
                "maxParallelUpgrades": 1,
                "maxUnavailable": "25%",
                "waitForCompletion": {"timeoutSeconds": 0},
                "podDeletion": {"force": False, "timeoutSeconds": 300, "deleteEmptyDir": False},
                "drain": {"enable": False, "force": False, "timeoutSeconds": 300, "deleteEmptyDir": False},
            },
            "repoConfig": {"configMapName": ""},
            "certConfig": {"name": ""},
            "licensingConfig": {"configMapName": "", "nlsEnabled": True},
            "kernelModuleConfig": {"name": ""},
            "virtualTopology": {"config": ""},
        },
        "toolkit": {
            "enabled": True,
            "repository": "nvcr.io/nvidia/k8s",
            "image": "container-toolkit",
            "version": f"{release.toolkit_version}-{ubi_or_ubuntu}",
            "installDir": "/usr/local/nvidia",
        },
        "devicePlugin": {
            "enabled": True,
            "repository": "nvcr.io/nvidia",
            "image": "k8s-device-plugin",
            "version": f"{release.device_plugin_version}-ubi8",
            "config": {"name": "", "default": ""},
        },
        "dcgm": {
            "enabled": False,
            "repository": "nvcr.io/nvidia/cloud-native",
            "image": "dcgm",
            "version": f"{release.dcgm_version}-ubuntu22.04",
        },
        "dcgmExporter": {
            "enabled": True,
            "repository": "nvcr.io/nvidia/k8s",
            "image": "dcgm-exporter",
            "version": f"{release.dcgm_exporter_version}-{'ubi9' if openshift else 'ubuntu22.04'}",
            "serviceMonitor": {"enabled": openshift},
        },
        "gfd": {
            "enabled": True,
            "repository": "nvcr.io/nvidia",
            "image": "k8s-device-plugin",
            "version": f"{release.device_plugin_version}-ubi8",
        },
        "migManager": {
            "enabled": True,
            "repository": "nvcr.io/nvidia/cloud-native",
            "image": "k8s-mig-manager",
            "version": f"{release.mig_manager_version}-ubuntu20.04",
            "config": {"name": "default-mig-parted-config", "default": "all-disabled"},
        },
        "mig": {"strategy": "single"},
        "validator": {
            "repository": "nvcr.io/nvidia/cloud-native",
            "image": "gpu-operator-validator",
            "version": release.operator_version,
            "plugin": {"env": [{"name": "WITH_WORKLOAD", "value": "false"}]},
        },
        "nodeStatusExporter": {"enabled": False},
        "gds": {"enabled": False},
        "gdrcopy": {"enabled": False},
        "sandboxWorkloads": {"enabled": False, "defaultWorkload": "container"},
        "cdi": {"enabled": False, "default": False},
        "hostPaths": {"rootFS": "/", "driverInstallDir": "/run/nvidia/driver"},
        "psa": {"enabled": False},
    }
    if openshift:
        spec["operator"]["use_ocp_driver_toolkit"] = True
    metadata: Obj = {"name": CLUSTER_POLICY_NAME}
    if labels:
        metadata["labels"] = labels
        metadata["annotations"] = {
            "meta.helm.sh/release-name": "gpu-operator",
            "meta.helm.sh/release-namespace": "gpu-operator",
        }
    return {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": metadata, "spec": spec}


def operator_deployment(*, namespace: str, release: GpuOperatorRelease, olm: bool = False) -> Obj:
    """The operator's Deployment as its chart renders it, or as OLM's bundle does (``olm``: with the bundle's
    image variables, ``bundle_env``)."""
    labels = {"app": "gpu-operator", "app.kubernetes.io/component": "gpu-operator"}
    pod_labels = {
        **labels,
        # The chart exempts the operator from the upgrade drain so a drain cannot evict the controller doing it.
        "nvidia.com/gpu-driver-upgrade-drain.skip": "true",
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        # Copies: an object read from an API server shares no maps between its fields (a label added to the
        # Deployment's metadata must not land in its selector).
        "metadata": {"name": OPERATOR_DEPLOYMENT, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": dict(labels)},
            "strategy": {"type": "Recreate"},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "serviceAccountName": OPERATOR_SERVICE_ACCOUNT,
                    "priorityClassName": "system-node-critical",
                    "tolerations": [
                        {
                            "key": "node-role.kubernetes.io/master",
                            "operator": "Equal",
                            "value": "",
                            "effect": "NoSchedule",
                        },
                        {
                            "key": "node-role.kubernetes.io/control-plane",
                            "operator": "Equal",
                            "value": "",
                            "effect": "NoSchedule",
                        },
                    ],
                    "containers": [
                        {
                            "name": "gpu-operator",
                            "image": f"nvcr.io/nvidia/gpu-operator:{release.operator_version}",
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["gpu-operator"],
                            "args": ["--leader-elect", "--zap-time-encoding=epoch", "--zap-log-level=info"],
                            "env": [
                                {"name": "WATCH_NAMESPACE", "value": ""},
                                {"name": "OPERATOR_NAMESPACE", "value": namespace},
                                *(
                                    {"name": name, "value": value}
                                    for name, value in (bundle_env(release.csv_version) if olm else {}).items()
                                ),
                            ],
                            "resources": {
                                "requests": {"cpu": "200m", "memory": "100Mi"},
                                "limits": {"cpu": "500m", "memory": "350Mi"},
                            },
                        }
                    ],
                },
            },
        },
    }


def operator_csv(*, namespace: str, release: GpuOperatorRelease) -> Obj:
    name = f"gpu-operator-certified.{release.operator_version}"
    return {
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "ClusterServiceVersion",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {f"operators.coreos.com/gpu-operator-certified.{namespace}": ""},
        },
        "spec": {
            "displayName": "NVIDIA GPU Operator",
            "version": release.csv_version,
            "replaces": "gpu-operator-certified.v24.6.2",
            "provider": {"name": "NVIDIA Corporation"},
        },
        "status": {
            "phase": "Succeeded",
            "reason": "InstallSucceeded",
            "message": "install strategy completed with no errors",
        },
    }


# -- rendering (pure) ----------------------------------------------------------------------------------
def image_path(repository: str | None, image: str, version: str) -> str:
    """internal/image ImagePath: <repository>/<image>:<version>; an image with a digest is taken as is."""
    if "@" in image or (":" in image.rsplit("/", 1)[-1]):
        return image
    base = f"{repository}/{image}" if repository else image
    return f"{base}:{version}" if version else base


# DRIVER_MANAGER_IMAGE in the OLM bundle's operator Deployment, per CSV version (NVIDIA/gpu-operator
# bundle/manifests/gpu-operator-certified.clusterserviceversion.yaml at each tag). The operator takes the driver
# manager from it when the ClusterPolicy (or NVIDIADriver) names no image: OLM's alm-examples leave ``manager: {}``.
BUNDLE_DRIVER_MANAGER_IMAGES: dict[str, str] = {
    **dict.fromkeys(
        ("24.6.0", "24.6.1", "24.6.2"),
        "nvcr.io/nvidia/cloud-native/k8s-driver-manager@sha256:"
        "740abc3ff657545c10effd5354f09af525200ed9a1b7623f0c2e8c7bd9e4a4e2",
    ),
    "24.9.0": "nvcr.io/nvidia/cloud-native/k8s-driver-manager@sha256:"
    "b072c5793be65eee556eaff1b9cbbd115a1ef29982be95b2959adfcb4bc72382",
    "25.3.0": "nvcr.io/nvidia/cloud-native/k8s-driver-manager@sha256:"
    "c525320fd1e771b911b68f8e760b83e8fccf1beea43bf9b009c4f0c591e193ea",
    "25.10.0": "nvcr.io/nvidia/cloud-native/k8s-driver-manager@sha256:"
    "a6c12abacc9c4f51d3653c90fcad32f19799069889338601407eba05fea4ba18",
    "25.10.1": "nvcr.io/nvidia/cloud-native/k8s-driver-manager@sha256:"
    "c549346eb993fda62e9bf665aabaacc88abc06b0b24e69635427d4d71c2d5ed4",
    "26.3.0": "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.10.0@sha256:"
    "6677437faff2c45506484dd9f0f04ad3b4880aa65b26d11f76d169e65497fade",
}


# DRIVER_IMAGE in the same bundles, with the driver version it is taken to run: the chart's ``driver.version`` at
# the tag (deployments/gpu-operator/values.yaml), the release's default driver. A ClusterPolicy that names no
# driver repository, image or version (OLM's alm-examples) runs it, so each OLM release brings its own driver.
_DRIVER_DIGEST = "nvcr.io/nvidia/driver@sha256:"
BUNDLE_DRIVER_IMAGES: dict[str, tuple[str, str]] = {
    **dict.fromkeys(
        ("24.6.0", "24.6.1", "24.6.2"),
        (_DRIVER_DIGEST + "858de27c152669f5a3cf4287406405b16dd5bb70c0373324eb735511997bb415", "550.90.07"),
    ),
    "24.9.0": (_DRIVER_DIGEST + "8a9a9e9470f64d340a7f3106a03e9622fa98e25368fbfb7ce9c416ad98f6d951", "550.127.05"),
    "25.3.0": (_DRIVER_DIGEST + "b93f1aab82ceb081919f58e13a66142c5857a0a5e68e13661a3e74696434c1d1", "570.124.06"),
    "25.10.0": (_DRIVER_DIGEST + "317c7ab01f28c87dc8c209b38c49fb2758a595d9ffbc1d71e18530788dcf34be", "580.95.05"),
    "25.10.1": (_DRIVER_DIGEST + "838f50e304e8880851bae205edc6b781a251b5912267a2eed21661211db8e087", "580.105.08"),
    "26.3.0": (_DRIVER_DIGEST + "f8e3dc9111c5a7a0cfac73e87d03c0b7b3d1e11f3b61654cca5461847660aa2c", "580.126.20"),
}
_DIGEST_DRIVER_VERSIONS = dict(BUNDLE_DRIVER_IMAGES.values())


def bundle_env(version: str) -> dict[str, str]:
    """The image variables the OLM bundle of a CSV version sets on the operator container (the ones the twin uses)."""
    env = {}
    if version in BUNDLE_DRIVER_IMAGES:
        env["DRIVER_IMAGE"] = BUNDLE_DRIVER_IMAGES[version][0]
    if version in BUNDLE_DRIVER_MANAGER_IMAGES:
        env["DRIVER_MANAGER_IMAGE"] = BUNDLE_DRIVER_MANAGER_IMAGES[version]
    return env


def operator_env(deployment: Obj | None) -> dict[str, str]:
    """The operator container's environment: what ``os.Getenv`` reads in its pod (literal values only)."""
    containers = ((((deployment or {}).get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")
    for container in containers or []:
        if container.get("name") == "gpu-operator":
            return {e["name"]: str(e["value"]) for e in container.get("env") or [] if "value" in e}
    return {}


def env_image(section: Mapping[str, Any], env: Mapping[str, str], variable: str) -> str | None:
    """imagePath's other sources: a section that names no repository and version runs its ``image`` as a full
    reference, and one that names none of the three the operator's variable (DRIVER_IMAGE, DRIVER_MANAGER_IMAGE;
    api/nvidia/v1/clusterpolicy_types.go imagePath). None when the section names its own repository or version
    (or neither source has one)."""
    if section.get("repository") or section.get("version"):
        return None
    return str(section.get("image") or "") or env.get(variable) or None


def invalid_image_spec(section: Mapping[str, Any]) -> str:
    """imagePath's refusal of a section that names a repository or version without all three ("" when valid)."""
    repository, image, version = (str(section.get(key) or "") for key in ("repository", "image", "version"))
    if (repository or version) and not (repository and image and version):
        return (
            "invalid image specification: repository, image and version must all be set "
            f"(repository={repository}, image={image}, version={version})"
        )
    return ""


def driver_image(driver: Mapping[str, Any], env: Mapping[str, str], os_tag: str) -> str:
    """resolveDriverTag (controllers/object_controls.go): imagePath, then ``-<os tag>`` unless it is a digest."""
    image = env_image(driver, env, "DRIVER_IMAGE")
    if image is None or "/" not in image:
        return image_path(
            driver.get("repository"), driver.get("image", "driver"), f"{driver.get('version') or ''}-{os_tag}"
        )
    return image if "sha256:" in image else f"{image}-{os_tag}"


def env_manager_image(manager: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
    """The driver manager's image from ``env_image``: only a full reference counts as one (the section's ``image``
    defaults to the plain name k8s-driver-manager)."""
    image = env_image(manager, env, "DRIVER_MANAGER_IMAGE")
    return image if image and "/" in image else None


def driver_version_of_image(image: str) -> str:
    """The driver version in a driver image tag: ``nvcr.io/nvidia/driver:560.35.03-ubuntu22.04`` -> 560.35.03; an
    OLM bundle's digest runs its release's default driver (``BUNDLE_DRIVER_IMAGES``)."""
    if image in _DIGEST_DRIVER_VERSIONS:
        return _DIGEST_DRIVER_VERSIONS[image]
    tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
    return tag.split("-")[0]


def is_gpu_node(labels: Mapping[str, str]) -> bool:
    return labels.get(GPU_PRESENT_LABEL) == "true" or labels.get(PCI_NVIDIA_LABEL) == "true"


def safe_hash(text: str, length: int = 10) -> str:
    """A short name-safe hash (apimachinery's SafeEncodeString alphabet avoids vowels and look-alikes)."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    value = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    chars = []
    for _ in range(length):
        value, index = divmod(value, len(alphabet))
        chars.append(alphabet[index])
    return "".join(chars)


def spec_hash(daemonset: Obj) -> str:
    """The ``nvidia.com/last-applied-hash`` of a rendered DaemonSet (operator: FNV of the object)."""
    digest = hashlib.sha256(json.dumps(daemonset.get("spec"), sort_keys=True).encode()).hexdigest()
    return str(int(digest[:8], 16))


def _owner_ref(owner: Obj) -> Obj:
    return podutil.owner_reference(owner, block_owner_deletion=True)


def _policy_section(policy: Obj, key: str) -> Obj:
    section = (policy.get("spec") or {}).get(key)
    return section if isinstance(section, dict) else {}


def _daemonset(
    *,
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    pod_labels: Mapping[str, str],
    node_selector: Mapping[str, str],
    containers: list[Obj],
    policy: Obj,
    owner: Obj,
    update_strategy: Obj,
    service_account: str,
    init_containers: list[Obj] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> Obj:
    daemonsets = _policy_section(policy, "daemonsets")
    all_labels = {**(daemonsets.get("labels") or {}), **labels}
    template_spec: Obj = {
        "nodeSelector": dict(node_selector),
        "tolerations": copy.deepcopy(daemonsets.get("tolerations") or []),
        "priorityClassName": daemonsets.get("priorityClassName", "system-node-critical"),
        "serviceAccountName": service_account,
        "containers": containers,
    }
    if init_containers:
        template_spec["initContainers"] = init_containers
    daemonset: Obj = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": all_labels,
            "annotations": dict(annotations or {}),
            "ownerReferences": [_owner_ref(owner)],
        },
        "spec": {
            "selector": {"matchLabels": {"app": pod_labels["app"]}},
            "updateStrategy": update_strategy,
            "template": {"metadata": {"labels": dict(pod_labels)}, "spec": template_spec},
        },
    }
    daemonset["metadata"]["annotations"][LAST_APPLIED_HASH] = spec_hash(daemonset)
    return daemonset


def _operand_update_strategy(policy: Obj) -> Obj:
    daemonsets = _policy_section(policy, "daemonsets")
    if daemonsets.get("updateStrategy") == "OnDelete":
        return {"type": "OnDelete"}
    rolling = daemonsets.get("rollingUpdate") or {}
    max_unavailable = rolling.get("maxUnavailable", "1")
    # The ClusterPolicy carries "1" as a string; a DaemonSet's int-or-string wants the number.
    if isinstance(max_unavailable, str) and max_unavailable.isdigit():
        max_unavailable = int(max_unavailable)
    return {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": max_unavailable}}


def _driver_containers(
    *, driver: Obj, image: str, openshift: bool, rhcos: str | None, manager_image: str
) -> tuple[list[Obj], list[Obj]]:
    manager_env = copy.deepcopy((driver.get("manager") or {}).get("env") or [])
    init = [
        {
            "name": "k8s-driver-manager",
            "image": manager_image,
            "command": ["driver-manager"],
            "args": ["uninstall_driver"],
            "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}, *manager_env],
            "securityContext": {"privileged": True},
        }
    ]
    probe = driver.get("startupProbe") or {}
    main: Obj = {
        "name": "nvidia-driver-ctr",
        "image": image,
        "imagePullPolicy": driver.get("imagePullPolicy", "IfNotPresent"),
        "command": ["nvidia-driver"],
        "args": ["init"],
        "securityContext": {"privileged": True, "seLinuxOptions": {"level": "s0"}},
        "startupProbe": {
            "exec": {"command": ["sh", "/usr/local/bin/nvidia-driver-probe.sh"]},
            "initialDelaySeconds": probe.get("initialDelaySeconds", 60),
            "periodSeconds": probe.get("periodSeconds", 10),
            "timeoutSeconds": probe.get("timeoutSeconds", 60),
            "failureThreshold": probe.get("failureThreshold", 120),
        },
    }
    containers = [main]
    if openshift and rhcos:
        main["env"] = [{"name": "RHCOS_VERSION", "value": rhcos}]
        containers.append(
            {
                "name": "openshift-driver-toolkit-ctr",
                "image": f"quay.io/openshift-release-dev/ocp-v4.0-art-dev:driver-toolkit-{rhcos}",
                "command": ["bash", "-xc"],
                "args": [
                    "until [ -f /mnt/shared-nvidia-driver-toolkit/dir_prepared ]; do sleep 10; done; "
                    "exec /mnt/shared-nvidia-driver-toolkit/ocp_dtk_entrypoint dtk-build-driver"
                ],
                "env": [{"name": "RHCOS_VERSION", "value": rhcos}],
                "securityContext": {"privileged": True},
            }
        )
    return init, containers


def sanitized_kernel(kernel: str) -> str:
    """getSanitizedKernelVersion: 5.14.0-427.37.1.el9_4.x86_64 -> 5.14.0-427.37.1.el9.4 (architecture dropped)."""
    for arch in (".x86_64_64k", ".aarch64_64k", ".x86_64", ".aarch64"):
        if kernel.endswith(arch):
            kernel = kernel[: -len(arch)]
            break
    return kernel.replace("_", ".")


def _driver_daemonset(
    policy: Obj,
    *,
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    pod_labels: Mapping[str, str],
    node_selector: Mapping[str, str],
    pod_spec: tuple[list[Obj], list[Obj]],
    openshift: bool = True,
) -> Obj:
    """A driver DaemonSet of the ClusterPolicy: OnDelete (the upgrade controller or the user deletes its pods), the
    nvidia-driver service account, and on OpenShift its SecurityContextConstraints."""
    init, containers = pod_spec
    return _daemonset(
        name=name,
        namespace=namespace,
        labels=labels,
        pod_labels=pod_labels,
        node_selector=node_selector,
        containers=containers,
        init_containers=init,
        policy=policy,
        owner=policy,
        update_strategy={"type": "OnDelete"},
        service_account="nvidia-driver",
        annotations={"openshift.io/scc": "nvidia-driver"} if openshift else None,
    )


def _render_precompiled_driver_daemonsets(
    policy: Obj, driver: Obj, *, namespace: str, manager_image: str, nodes: list[Mapping[str, str]]
) -> list[Obj]:
    """Precompiled: one DaemonSet per (OS, kernel) pool, as upstream's getNodePools does when usePrecompiled.

    The pool's name is ``<os>-<sanitized kernel>``, its selector the NFD kernel
    label, the image tag ``<branch>-<kernel>-<os>`` (NVIDIA/gpu-operator's
    driver node pools and getSanitizedKernelVersion). The names differ from
    the compiled DaemonSets', so a switch replaces them.
    """
    pools = sorted(
        {(tag, labels[KERNEL_LABEL]) for labels in nodes if (tag := node_os_tag(labels)) and labels.get(KERNEL_LABEL)}
    )
    rendered = []
    for os_tag, kernel in pools:
        name = f"{DRIVER_APP}-{os_tag}-{sanitized_kernel(kernel)}"[:63]
        image = image_path(
            driver.get("repository"), driver.get("image", "driver"), f"{driver.get('version') or ''}-{kernel}-{os_tag}"
        )
        labels = {"app": name, COMPONENT_LABEL: DRIVER_COMPONENT, "nvidia.com/precompiled": "true"}
        init, containers = _driver_containers(
            driver=driver, image=image, openshift=False, rhcos=None, manager_image=manager_image
        )
        rendered.append(
            _driver_daemonset(
                policy,
                name=name,
                namespace=namespace,
                labels={**labels, "nvidia.com/precompiled.kernel-version": sanitized_kernel(kernel)},
                pod_labels=labels,
                node_selector={DEPLOY_PREFIX + "driver": "true", KERNEL_LABEL: kernel},
                pod_spec=(init, containers),
            )
        )
    return rendered


def render_driver_daemonsets(
    policy: Obj,
    *,
    namespace: str,
    profile: str,
    gpu_nodes: Iterable[Mapping[str, str]],
    env: Mapping[str, str] | None = None,
) -> list[Obj]:
    """state-driver of the ClusterPolicy: one OnDelete DaemonSet, one per RHCOS version on OpenShift, or per kernel.

    ``env`` is the operator's environment (the driver manager's image when the policy names none)."""
    driver = _policy_section(policy, "driver")
    if driver.get("enabled") is False or driver.get("useNvidiaDriverCRD"):
        return []
    manager = driver.get("manager") or {}
    manager_image = env_manager_image(manager, env or {}) or image_path(
        manager.get("repository"), manager.get("image", "k8s-driver-manager"), manager.get("version", "v0.7.0")
    )
    precompiled = "true" if driver.get("usePrecompiled") else "false"
    base_selector = {DEPLOY_PREFIX + "driver": "true"}
    nodes = list(gpu_nodes)
    rendered: list[Obj] = []
    if driver.get("usePrecompiled"):
        return _render_precompiled_driver_daemonsets(
            policy, driver, namespace=namespace, manager_image=manager_image, nodes=nodes
        )
    if profile == "openshift":
        rhcos_versions = sorted({labels[OSTREE_LABEL] for labels in nodes if labels.get(OSTREE_LABEL)})
        for rhcos in rhcos_versions:
            os_tag = next(
                (node_os_tag(lab) for lab in nodes if lab.get(OSTREE_LABEL) == rhcos and node_os_tag(lab)), None
            )
            image = driver_image(driver, env or {}, os_tag or "rhcos")
            name = f"{DRIVER_APP}-{rhcos}"
            labels = {
                "app": name,
                COMPONENT_LABEL: DRIVER_COMPONENT,
                "nvidia.com/precompiled": precompiled,
                DTK_LABEL: "true",
                DTK_RHCOS_LABEL: rhcos,
            }
            pod_labels = {
                "app": name,
                COMPONENT_LABEL: DRIVER_COMPONENT,
                "nvidia.com/precompiled": precompiled,
                DTK_LABEL: "true",
            }
            init, containers = _driver_containers(
                driver=driver, image=image, openshift=True, rhcos=rhcos, manager_image=manager_image
            )
            rendered.append(
                _driver_daemonset(
                    policy,
                    name=name,
                    namespace=namespace,
                    labels=labels,
                    pod_labels=pod_labels,
                    node_selector={**base_selector, OSTREE_LABEL: rhcos},
                    pod_spec=(init, containers),
                )
            )
        return rendered
    os_counts = Counter(tag for labels in nodes if (tag := node_os_tag(labels)))
    os_tag = os_counts.most_common(1)[0][0] if os_counts else "ubuntu22.04"
    image = driver_image(driver, env or {}, os_tag)
    labels = {"app": DRIVER_APP, COMPONENT_LABEL: DRIVER_COMPONENT, "nvidia.com/precompiled": precompiled}
    init, containers = _driver_containers(
        driver=driver, image=image, openshift=False, rhcos=None, manager_image=manager_image
    )
    rendered.append(
        _driver_daemonset(
            policy,
            name=DRIVER_APP,
            namespace=namespace,
            labels=labels,
            pod_labels=dict(labels),
            node_selector=base_selector,
            pod_spec=(init, containers),
            openshift=False,
        )
    )
    return rendered


def render_operand_daemonsets(policy: Obj, *, namespace: str) -> list[Obj]:
    """The other states of the ClusterPolicy: toolkit, validator, device plugin, DCGM, GFD, MIG manager."""
    rendered = []
    strategy = _operand_update_strategy(policy)
    for operand in OPERANDS:
        section = _policy_section(policy, operand.policy_key)
        if not section.get("enabled", operand.default_enabled):
            continue
        image = image_path(
            section.get("repository"), section.get("image", operand.app), str(section.get("version", ""))
        )
        container: Obj = {
            "name": operand.container,
            "image": image,
            "imagePullPolicy": section.get("imagePullPolicy", "IfNotPresent"),
        }
        if section.get("env"):
            container["env"] = copy.deepcopy(section["env"])
        init: list[Obj] = []
        if operand.app != "nvidia-container-toolkit-daemonset":
            # Every operand but the toolkit waits in an init container for the driver and toolkit validations.
            validator = _policy_section(policy, "validator")
            validator_image = image_path(
                validator.get("repository"),
                validator.get("image", "gpu-operator-validator"),
                str(validator.get("version", "")),
            )
            init.append(
                {
                    "name": "toolkit-validation",
                    "image": validator_image,
                    "command": ["sh", "-c"],
                    "args": ["until [ -f /run/nvidia/validations/toolkit-ready ]; do sleep 5; done"],
                }
            )
        labels = {"app": operand.app, "app.kubernetes.io/part-of": "nvidia-gpu"}
        rendered.append(
            _daemonset(
                name=operand.app,
                namespace=namespace,
                labels=labels,
                pod_labels=labels,
                node_selector={DEPLOY_PREFIX + operand.deploy_label: "true"},
                containers=[container],
                init_containers=init,
                policy=policy,
                owner=policy,
                update_strategy=strategy,
                service_account=operand.service_account,
            )
        )
    return rendered


def nvidiadriver_node_selector(cr: Obj) -> dict[str, str]:
    """NVIDIADriver GetNodeSelector: the CR's nodeSelector, or every GPU node when it has none."""
    selector = (cr.get("spec") or {}).get("nodeSelector")
    return dict(selector) if selector else {GPU_PRESENT_LABEL: "true"}


def assign_driver_owners(
    drivers: list[Obj], nodes: Mapping[str, Mapping[str, str]]
) -> tuple[dict[str, str | None], str]:
    """internal/nvidiadriver AssignOwners: which NVIDIADriver owns each GPU node.

    Returns ({node: owner or None}, conflict message); with a conflict no
    node changes owner (the operator fails closed before relabelling).
    """
    live = [cr for cr in drivers if not (cr.get("metadata") or {}).get("deletionTimestamp")]
    defaults = [cr["metadata"]["name"] for cr in live if (cr.get("spec") or {}).get("default")]
    if len(defaults) > 1:
        return {}, f"multiple default NVIDIADrivers found: {sorted(defaults)}"
    default_owner = defaults[0] if defaults else None
    others = [cr for cr in live if not (cr.get("spec") or {}).get("default")]
    selectors = [(cr["metadata"]["name"], label_selector_from_map(nvidiadriver_node_selector(cr))) for cr in others]
    owners: dict[str, str | None] = {}
    for node_name in sorted(nodes):
        labels = nodes[node_name]
        if labels.get(GPU_PRESENT_LABEL) != "true":
            continue
        matching = sorted(name for name, selector in selectors if selector.matches(dict(labels)))
        if len(matching) > 1:
            return {}, f"multiple NVIDIADrivers match the same node {node_name}: [{' '.join(matching)}]"
        owners[node_name] = matching[0] if matching else default_owner
    return owners, ""


def render_nvidiadriver_daemonsets(
    cr: Obj,
    *,
    namespace: str,
    profile: str,
    policy: Obj,
    owned_nodes: Iterable[Mapping[str, str]],
    env: Mapping[str, str] | None = None,
) -> list[Obj]:
    """One driver DaemonSet per OS pool of the nodes a NVIDIADriver owns (internal/state/driver.go)."""
    spec = cr.get("spec") or {}
    name = cr["metadata"]["name"]
    uid = cr["metadata"].get("uid", name)
    driver_type = spec.get("driverType", "gpu")
    openshift = profile == "openshift"
    pools: dict[str, tuple[str, str, str, str | None]] = {}
    for labels in owned_nodes:
        os_tag = node_os_tag(labels)
        if os_tag is None:
            continue  # "Could not find NFD labels for node. Is NFD installed?"
        rhcos = labels.get(OSTREE_LABEL) if openshift and not spec.get("usePrecompiled") else None
        if openshift and rhcos is None:
            continue
        pools.setdefault(rhcos or os_tag, (os_tag, labels[OS_ID_LABEL], labels[OS_VERSION_LABEL], rhcos))
    manager = spec.get("manager") or {}
    manager_image = env_manager_image(manager, env or {}) or image_path(
        manager.get("repository") or "nvcr.io/nvidia/cloud-native",
        manager.get("image") or "k8s-driver-manager",
        manager.get("version") or "v0.7.0",
    )
    precompiled = "true" if spec.get("usePrecompiled") else "false"
    rendered = []
    for os_tag, os_id, os_version, rhcos in sorted(pools.values(), key=lambda pool: (pool[0], pool[3] or "")):
        app = f"nvidia-{driver_type}-driver-{os_tag}-{safe_hash(uid + ('-' + rhcos if rhcos else ''))}"[:63]
        version = spec.get("version", "")
        image = image_path(spec.get("repository"), spec.get("image") or "nvcr.io/nvidia/driver", f"{version}-{os_tag}")
        selector = {
            **nvidiadriver_node_selector(cr),
            GPU_PRESENT_LABEL: "true",
            OWNER_LABEL: name,
            DEPLOY_PREFIX + "driver": "true",
            OS_ID_LABEL: os_id,
            OS_VERSION_LABEL: os_version,
        }
        if rhcos:
            selector[OSTREE_LABEL] = rhcos
        labels = {
            "app": app,
            COMPONENT_LABEL: DRIVER_COMPONENT,
            "nvidia.com/node.os-version": os_tag,
            "nvidia.com/precompiled": precompiled,
        }
        pod_labels = {"app": app, COMPONENT_LABEL: DRIVER_COMPONENT, "nvidia.com/precompiled": precompiled}
        if rhcos:
            labels.update({DTK_LABEL: "true", DTK_RHCOS_LABEL: rhcos})
            pod_labels[DTK_LABEL] = "true"
        init, containers = _driver_containers(
            driver=spec, image=image, openshift=openshift, rhcos=rhcos, manager_image=manager_image
        )
        rendered.append(
            _daemonset(
                name=app,
                namespace=namespace,
                labels=labels,
                pod_labels=pod_labels,
                node_selector=selector,
                containers=containers,
                init_containers=init,
                policy=policy,
                owner=cr,
                update_strategy={"type": "OnDelete"},
                service_account=f"nvidia-{driver_type}-driver-{name}",
                annotations={"openshift.io/scc": f"nvidia-{driver_type}-driver-{name}-{os_tag}"},
            )
        )
    return rendered


def daemonset_ready(daemonset: Obj, owned_pods: list[Obj], latest_hash: str | None) -> bool:
    """object_controls.go isDaemonSetReady."""
    status = daemonset.get("status") or {}
    if int(status.get("desiredNumberScheduled") or 0) == 0:
        return True
    if int(status.get("numberUnavailable") or 0) != 0:
        return False
    if ((daemonset.get("spec") or {}).get("updateStrategy") or {}).get("type") != "OnDelete":
        return True
    if not owned_pods:
        return False
    for pod in owned_pods:
        labels = pod["metadata"].get("labels") or {}
        if labels.get("controller-revision-hash") != latest_hash or podutil.phase_of(pod) != "Running":
            return False
        if any(not status.get("ready") for status in (pod.get("status") or {}).get("containerStatuses") or ()):
            return False
    return True


# -- the operator --------------------------------------------------------------------------------------
@dataclass
class _Pause:
    """k8s-driver-manager's pause of a node's operands before it (re)loads the driver."""

    pod_uid: str
    started_at: float
    paused_labels: tuple[str, ...]


@dataclass
class _CustomKinds:
    cluster_policy: ResourceType | None
    nvidia_driver: ResourceType | None
    csv: ResourceType | None

    @classmethod
    def from_registry(cls, twin: Twin) -> _CustomKinds:
        return cls(
            cluster_policy=twin.registry.get("nvidia.com", "clusterpolicies"),
            nvidia_driver=twin.registry.get("nvidia.com", "nvidiadrivers"),
            csv=twin.registry.get("operators.coreos.com", "clusterserviceversions"),
        )


class GpuOperator:
    """The operator's controllers in one simulated process: ClusterPolicy, NVIDIADriver, upgrade, driver manager."""

    name = "gpu-operator"

    def __init__(
        self,
        twin: Twin,
        *,
        release: GpuOperatorRelease | None = None,
        timings: GpuOperatorTimings | None = None,
        index: ClusterIndex | None = None,
    ) -> None:
        if not isinstance(twin.sim, SimState):
            raise RuntimeError("the GPU Operator simulation needs twin.sim (build.populate sets it)")
        self.twin = twin
        self.sim: SimState = twin.sim
        self.store: Store = twin.store
        self.kinds = Kinds.from_registry(twin.registry)
        self.custom = _CustomKinds.from_registry(twin)
        self.release = release or GpuOperatorRelease()
        self.timings = timings or GpuOperatorTimings()
        self.profile = self.sim.profile if self.sim.profile in NAMESPACE_BY_PROFILE else "kubernetes"
        self.namespace = NAMESPACE_BY_PROFILE[self.profile]
        self.index = index or getattr(self.sim, "index", None) or ClusterIndex(self.store, self.kinds)
        # In-memory facts the real operator keeps in goroutines and caches.
        self.upgrader = DriverUpgradeController(
            store=self.store,
            kinds=self.kinds,
            index=self.index,
            flavor=um.GPU_DRIVER,
            component=OPERATOR_COMPONENT,
            events=lambda: self.sim.events,
            pod_noun="driver",
            needs_pods=_NEEDS_PODS,
            retry_states=_RETRY_STATES,
            requeue=self.timings.upgrade_requeue,
            eviction_retry=self.timings.eviction_retry,
        )
        self.applier = self.upgrader.applier
        self._driver_eta: dict[str, tuple[str, float | None]] = {}  # node -> (pod uid, ready at / None = never)
        self._loaded_by: dict[str, str] = {}  # node -> uid of the driver pod whose module is loaded
        self._pauses: dict[str, _Pause] = {}
        self._seen_driver_pods: set[str] = set()
        self._new_driver_pods: set[tuple[str, str]] = set()
        self._policy_dirty = True
        self._upgrade_dirty = True
        self._waker: Waker | None = None
        self._custom_keys = frozenset(
            t.key for t in (self.custom.cluster_policy, self.custom.nvidia_driver) if t is not None
        )
        # Driver pods of the operator namespace, kept by our store listener (an informer's index).
        self._driver_pod_keys = {
            podutil.key_of(pod)
            for pod in self.store.list(self.kinds.pod, self.namespace)
            if _looks_like_driver_pod(pod)
        }
        self.store.add_listener(self._listen)

    # -- wiring -----------------------------------------------------------------------------------------
    def install(self) -> None:
        self.sim.pod_behaviours.append(self.plan_pod)
        self.sim.log_providers.append(self.pod_log)
        self.seed()
        self.twin.controllers.append(self)
        self.twin.routes.extend(self.routes())
        self.twin.published["gpu_operator"] = {
            "namespace": self.namespace,
            "cluster_policy": CLUSTER_POLICY_NAME,
            "version": self.release.operator_version,
            "metrics": "/admin/gpu-operator/metrics",
        }

    def routes(self) -> list[Route]:
        """``GET /admin/gpu-operator/metrics``: what the operator's metrics Service would serve."""

        async def metrics(request: web.Request) -> web.StreamResponse:
            return web.Response(text=self.metrics_text(), content_type="text/plain", charset="utf-8")

        return [("GET", "/admin/gpu-operator/metrics", protected(self.twin.token, metrics))]

    def metrics_text(self) -> str:
        """The operator's driver upgrade gauges (controllers/operator_metrics.go names), Prometheus text format."""
        counts = self.upgrade.counts
        enabled = 1 if self.upgrade.auto_upgrade else 0
        gauges = [
            (
                "gpu_operator_gpu_nodes_total",
                "GPU nodes in the cluster",
                sum(1 for n in self.index.nodes.values() if is_gpu_node(n["metadata"].get("labels") or {})),
            ),
            ("gpu_operator_driver_auto_upgrade_enabled", "1 when the driver upgrade controller is on", enabled),
            (
                "gpu_operator_nodes_upgrades_in_progress",
                "Nodes whose driver upgrade is under way",
                counts.in_progress if counts else 0,
            ),
            ("gpu_operator_nodes_upgrades_done", "Nodes whose driver is up to date", counts.done if counts else 0),
            ("gpu_operator_nodes_upgrades_failed", "Nodes whose driver upgrade failed", counts.failed if counts else 0),
            (
                "gpu_operator_nodes_upgrades_available",
                "Upgrade slots free in the last reconcile",
                counts.available if counts else 0,
            ),
            (
                "gpu_operator_nodes_upgrades_pending",
                "Nodes waiting in upgrade-required",
                counts.pending if counts else 0,
            ),
        ]
        lines = []
        for name, text, value in gauges:
            lines += [f"# HELP {name} {text}", f"# TYPE {name} gauge", f"{name} {value}"]
        return "\n".join(lines) + "\n"

    async def run(self, twin: Twin) -> None:
        # Our own listener (registered at construction) decides what wakes us and pokes the waker.
        self._waker = Waker(self.store, twin.clock, on_event=lambda event: False)
        await run_operator_loop(self._waker, self.reconcile_once, self._next_wait, log=log)

    def reconcile_once(self) -> None:
        """One pass of every controller: policy, driver manager, upgrade (each only when due).

        The policy and upgrade controllers run in the operator's pod: while its Deployment is gone (an OLM
        uninstall deleted it with its CSV) nothing reconciles the ClusterPolicy; the driver manager runs in the
        driver pods, which stay."""
        now = self.twin.clock.now()
        running = self.store.try_get(self.kinds.deployment, self.namespace, OPERATOR_DEPLOYMENT) is not None
        if running and self._policy_dirty:
            self._policy_dirty = False
            self.reconcile_policies()
        self._step_driver_manager(now)
        if running and (self._upgrade_dirty or now >= self.upgrader.next_at):
            self._upgrade_dirty = False
            self.reconcile_upgrade(now)

    def _next_wait(self) -> float | None:
        now = self.twin.clock.now()
        if self.store.try_get(self.kinds.deployment, self.namespace, OPERATOR_DEPLOYMENT) is None:
            # No operator to requeue: its Deployment's return wakes us (and the driver manager's pauses).
            return self.timings.eviction_retry if self._pauses else None
        wait = max(0.0, self.upgrader.next_at - now)
        if self._pauses:
            wait = min(wait, self.timings.eviction_retry)
        return wait

    def _listen(self, event: WatchEvent) -> None:
        if self._on_store_event(event) and self._waker is not None:
            self._waker.poke()

    def _on_store_event(self, event: WatchEvent) -> bool:
        """Bookkeeping for one store write; True when it should wake the operator."""
        key = event.rtype.key
        if key == self.kinds.event.key:
            return False
        if key in self._custom_keys:
            self._policy_dirty = True
            old_generation = ((event.old or {}).get("metadata") or {}).get("generation")
            if event.type != "MODIFIED" or old_generation != (event.obj.get("metadata") or {}).get("generation"):
                # Spec changes only: the operator's own status writes need no upgrade pass.
                self._upgrade_dirty = True
            return True
        if key == self.kinds.node.key:
            old_labels = ((event.old or {}).get("metadata") or {}).get("labels")
            new_labels = (event.obj.get("metadata") or {}).get("labels")
            if event.type != "MODIFIED" or old_labels != new_labels:
                # Upstream watches node label changes (LabelChangedPredicate) for both controllers.
                self._policy_dirty = self._upgrade_dirty = True
                return True
            old_spec, new_spec = (event.old or {}).get("spec"), event.obj.get("spec")
            if old_spec != new_spec and new_labels and um.GPU_DRIVER.state_label in new_labels:
                self._upgrade_dirty = True
                return True
            return False
        if key == self.kinds.daemonset.key:
            if (event.obj.get("metadata") or {}).get("namespace") != self.namespace:
                return False
            self._policy_dirty = True
            old_generation = ((event.old or {}).get("metadata") or {}).get("generation")
            if event.type != "MODIFIED" or old_generation != (event.obj.get("metadata") or {}).get("generation"):
                # The upgrade controller watches driver DaemonSets with GenerationChangedPredicate.
                self._upgrade_dirty = True
            return True
        if key == self.kinds.pod.key:
            return self._on_pod_event(event)
        if key == self.kinds.deployment.key:
            meta = event.obj.get("metadata") or {}
            rolled = event.type == "MODIFIED" and (event.old or {}).get("spec") != event.obj.get("spec")
            if (meta.get("namespace"), meta.get("name")) == (self.namespace, OPERATOR_DEPLOYMENT) and (
                event.type in ("ADDED", "DELETED") or rolled
            ):
                # The operator (re)starts (created, back, or a new pod template such as OLM's next CSV): a new
                # process reconciles everything once.
                self._policy_dirty = self._upgrade_dirty = True
                return True
        return False

    def _on_pod_event(self, event: WatchEvent) -> bool:
        meta = event.obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        node_name = (event.obj.get("spec") or {}).get("nodeName")
        if meta.get("namespace") == self.namespace and _looks_like_driver_pod(event.obj):
            if event.type == "DELETED":
                self._driver_pod_keys.discard(podutil.key_of(event.obj))
            else:
                self._driver_pod_keys.add(podutil.key_of(event.obj))
        if meta.get("namespace") == self.namespace and labels.get(COMPONENT_LABEL) == DRIVER_COMPONENT:
            uid = meta.get("uid", "")
            if (
                event.type != "DELETED"
                and node_name
                and uid not in self._seen_driver_pods
                and not meta.get("deletionTimestamp")
            ):
                self._seen_driver_pods.add(uid)
                self._new_driver_pods.add((meta.get("namespace", ""), meta.get("name", "")))
            if event.type == "DELETED":
                self._seen_driver_pods.discard(uid)
                return False
            # A driver pod just bound to its node: the driver manager has operands to pause.
            woke = (meta.get("namespace", ""), meta.get("name", "")) in self._new_driver_pods
            # Twin extension for brisk tests: upstream only notices pod changes at its 2-minute requeue.
            # Only nodes waiting on their driver pod care (and an unbound pod is invisible to BuildState).
            if node_name and self._node_state(node_name) in _WAITING_ON_DRIVER_POD:
                self._upgrade_dirty = True
                woke = True
            return woke
        if labels.get("app") in OPERAND_APPS and meta.get("namespace") == self.namespace:
            if node_name in self._pauses:
                return True
            if (
                labels.get("app") == VALIDATOR_APP
                and node_name
                and self._node_state(node_name) == um.STATE_VALIDATION_REQUIRED
            ):
                self._upgrade_dirty = True
                return True
            return False
        if node_name and event.type == "DELETED" and node_name in self.applier.eviction_started:
            self._upgrade_dirty = True
            return True
        return False

    def _node_state(self, node_name: str) -> str | None:
        node = self.index.nodes.get(node_name)
        if node is None:
            return None
        return (node["metadata"].get("labels") or {}).get(um.GPU_DRIVER.state_label, um.STATE_UNKNOWN)

    # -- seeding ------------------------------------------------------------------------------------------
    def seed(self) -> None:
        """Create the operator's objects unless they exist (a snapshot may have brought them)."""
        namespace_type = self.kinds.namespace
        if self.store.try_get(namespace_type, None, self.namespace) is None:
            labels = {"openshift.io/cluster-monitoring": "true"} if self.profile == "openshift" else {}
            self.store.create(namespace_type, {"metadata": {"name": self.namespace, "labels": labels}})
        # The operator's install (Helm chart or OLM bundle) brings its ServiceAccount.
        ensure_service_account(self.store, self.kinds, self.namespace, OPERATOR_SERVICE_ACCOUNT)
        if self.store.try_get(self.kinds.deployment, self.namespace, OPERATOR_DEPLOYMENT) is None:
            self.store.create(
                self.kinds.deployment,
                operator_deployment(namespace=self.namespace, release=self.release, olm=self.profile == "openshift"),
            )
        if self.profile == "openshift" and self.custom.csv is not None:
            csv = operator_csv(namespace=self.namespace, release=self.release)
            if self.store.try_get(self.custom.csv, self.namespace, csv["metadata"]["name"]) is None:
                self.store.create(self.custom.csv, csv)
        policy_type = self.custom.cluster_policy
        if policy_type is None:
            log.warning("no ClusterPolicy kind registered: the GPU Operator has nothing to reconcile")
            return
        if not self.store.list(policy_type):
            policy = default_cluster_policy(
                profile=self.profile,
                release=self.release,
                driver_version=self._seed_driver_version(),
                olm_defaults=self.sim.olm_cluster_policy,
            )
            created = self.store.create(policy_type, policy)
            status = {
                "state": "ready",
                "namespace": self.namespace,
                "conditions": _conditions(
                    ready=True,
                    reason="Reconciled",
                    message="ClusterPolicy is ready as all resources have been successfully reconciled",
                    stamp=self.twin.clock.iso(),
                ),
            }
            self._write_status(policy_type, created, status)
        self.reconcile_policies()

    def _seed_driver_version(self) -> str:
        loaded = Counter(h.driver_version for h in self.sim.nodes.values() if h.driver_version)
        return loaded.most_common(1)[0][0] if loaded else self.release.driver_version

    # -- ClusterPolicy and NVIDIADriver ---------------------------------------------------------------------
    def active_policy(self) -> Obj | None:
        if self.custom.cluster_policy is None:
            return None
        policies = self.store.list(self.custom.cluster_policy)
        if not policies:
            return None
        return min(policies, key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"]))

    def reconcile_policies(self) -> None:
        policy_type = self.custom.cluster_policy
        if policy_type is None:
            return
        policies = self.store.list(policy_type)
        active = self.active_policy()
        for other in policies:
            if active is not None and other["metadata"]["name"] != active["metadata"]["name"]:
                # Only one ClusterPolicy is honoured; the others are marked ignored.
                self._write_status(policy_type, other, {**(other.get("status") or {}), "state": "ignored"})
        if active is None:
            return
        node_labels = {name: (node["metadata"].get("labels") or {}) for name, node in self.index.nodes.items()}
        self._label_gpu_nodes(node_labels)
        gpu_nodes = [labels for labels in node_labels.values() if is_gpu_node(labels)]
        # The images the policy names none of come from the operator pod's environment (OLM's bundle sets them).
        env = operator_env(self.store.try_get(self.kinds.deployment, self.namespace, OPERATOR_DEPLOYMENT))
        driver = _policy_section(active, "driver")
        refused = "" if driver.get("useNvidiaDriverCRD") else invalid_image_spec(driver)
        keep: set[str] = set()
        if refused:
            # state-driver fails before it renders anything: its DaemonSets stay as they are.
            desired = []
            keep = {
                ds["metadata"]["name"]
                for ds in self._owned_daemonsets()
                if (ds["metadata"].get("labels") or {}).get(COMPONENT_LABEL) == DRIVER_COMPONENT
            }
        else:
            desired = render_driver_daemonsets(
                active, namespace=self.namespace, profile=self.profile, gpu_nodes=gpu_nodes, env=env
            )
        desired += render_operand_daemonsets(active, namespace=self.namespace)
        if driver.get("useNvidiaDriverCRD"):
            keep = self._reconcile_nvidiadrivers(active, node_labels, env)
        self._apply_daemonsets(desired, keep=keep)
        self._update_policy_status(active, desired, refused=refused)

    def _label_gpu_nodes(self, node_labels: Mapping[str, Mapping[str, str]]) -> None:
        """state_manager.go labelGPUNodes: GPU nodes get the operand deploy labels they lack.

        Values already there (``false``, ``pre-installed``, a pause) are left alone;
        the MIG manager is only deployed to MIG-capable nodes.
        """
        for name, labels in node_labels.items():
            if not is_gpu_node(labels):
                continue
            wanted = [DEPLOY_PREFIX + "driver", *PAUSED_DEPLOY_LABELS, GPU_PRESENT_LABEL]
            if labels.get("nvidia.com/mig.capable") != "true":
                wanted.remove(DEPLOY_PREFIX + "mig-manager")
            missing = tuple(key for key in wanted if key not in labels)
            if missing:

                def add(node: Obj, keys: tuple[str, ...] = missing) -> None:
                    node["metadata"].setdefault("labels", {}).update(dict.fromkeys(keys, "true"))

                self._mutate_node(name, add)

    def _reconcile_nvidiadrivers(
        self, policy: Obj, node_labels: Mapping[str, Mapping[str, str]], env: Mapping[str, str]
    ) -> set[str]:
        """The NVIDIADriver controller: owner labels, one DaemonSet per pool, CR status.  Returns DaemonSets to keep."""
        driver_type = self.custom.nvidia_driver
        if driver_type is None:
            return set()
        drivers = self.store.list(driver_type)
        existing = {ds["metadata"]["name"] for ds in self._owned_daemonsets() if _owner_kind(ds) == "NVIDIADriver"}
        owners, conflict = assign_driver_owners(drivers, node_labels)
        stamp = self.twin.clock.iso()
        if conflict:
            for cr in drivers:
                self._write_status(
                    driver_type,
                    cr,
                    {
                        "state": "notReady",
                        "conditions": _conditions(
                            ready=False, reason="ConflictingNodeSelector", message=conflict, stamp=stamp
                        ),
                    },
                )
            return existing  # nothing changes until the selectors are fixed
        for node_name, owner in owners.items():
            if node_labels[node_name].get(OWNER_LABEL) != owner:
                self._mutate_node(
                    node_name, lambda node, owner=owner: upgrade_apply.set_label(node, OWNER_LABEL, owner)
                )
        keep: set[str] = set()
        for cr in drivers:
            name = cr["metadata"]["name"]
            owned = [node_labels[n] for n, o in owners.items() if o == name]
            rendered = render_nvidiadriver_daemonsets(
                cr, namespace=self.namespace, profile=self.profile, policy=policy, owned_nodes=owned, env=env
            )
            self._apply_daemonsets(rendered, keep=existing, prune=False)
            keep.update(ds["metadata"]["name"] for ds in rendered)
            ready = all(self._daemonset_ready_by_name(ds["metadata"]["name"]) for ds in rendered)
            if ready:
                status = {
                    "state": "ready",
                    "conditions": _conditions(
                        ready=True,
                        reason="Reconciled",
                        message="All resources have been successfully reconciled",
                        stamp=stamp,
                    ),
                }
            else:
                status = {
                    "state": "notReady",
                    "conditions": _conditions(
                        ready=False, reason="DriverNotReady", message="Waiting for driver pod to be ready", stamp=stamp
                    ),
                }
            self._write_status(driver_type, cr, status)
        return keep

    def _owned_daemonsets(self) -> list[Obj]:
        return [
            ds
            for ds in self.store.list(self.kinds.daemonset, self.namespace)
            if (ds["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") == "gpu-operator"
            or _owner_kind(ds) in ("ClusterPolicy", "NVIDIADriver")
        ]

    def _apply_daemonsets(self, desired: list[Obj], *, keep: set[str], prune: bool = True) -> None:
        wanted = {ds["metadata"]["name"]: ds for ds in desired}
        for name, daemonset in wanted.items():
            # The operator creates each operand's ServiceAccount with its DaemonSet (its state manifests).
            account = ((daemonset["spec"].get("template") or {}).get("spec") or {}).get("serviceAccountName")
            if account:
                ensure_service_account(self.store, self.kinds, self.namespace, account)
            current = self.store.try_get(self.kinds.daemonset, self.namespace, name)
            if current is None:
                self.store.create(self.kinds.daemonset, daemonset)
                continue
            if (current["metadata"].get("annotations") or {}).get(LAST_APPLIED_HASH) == daemonset["metadata"][
                "annotations"
            ][LAST_APPLIED_HASH]:
                continue

            def replace(obj: Obj, daemonset: Obj = daemonset) -> None:
                obj["metadata"]["labels"] = daemonset["metadata"]["labels"]
                obj["metadata"]["annotations"] = {
                    **(obj["metadata"].get("annotations") or {}),
                    **daemonset["metadata"]["annotations"],
                }
                obj["spec"] = copy.deepcopy(daemonset["spec"])

            self.store.mutate(self.kinds.daemonset, self.namespace, name, replace)
        if not prune:
            return
        for current in self._owned_daemonsets():
            name = current["metadata"]["name"]
            if name not in wanted and name not in keep:
                # A DaemonSet the policy no longer wants (a RHCOS version gone, the driver moved to NVIDIADriver).
                try:
                    self.store.delete(self.kinds.daemonset, self.namespace, name)
                except errors.ApiError as exc:
                    log.debug("DaemonSet %s not deleted: %s", name, exc)

    def _daemonset_ready_by_name(self, name: str) -> bool:
        daemonset = self.store.try_get(self.kinds.daemonset, self.namespace, name)
        if daemonset is None:
            return False
        return daemonset_ready(
            daemonset,
            self.index.pods_of(daemonset["metadata"]["uid"]),
            latest_revision_hash(self.store, self.kinds, daemonset),
        )

    def _update_policy_status(self, policy: Obj, desired: list[Obj], *, refused: str = "") -> None:
        """Ready once every desired DaemonSet is; a state that failed (``refused``) is the ClusterPolicy's error."""
        not_ready = []
        for daemonset in desired:
            if not self._daemonset_ready_by_name(daemonset["metadata"]["name"]):
                state = (
                    "state-driver"
                    if (daemonset["metadata"].get("labels") or {}).get(COMPONENT_LABEL) == DRIVER_COMPONENT
                    else next(
                        (op.state for op in OPERANDS if op.app == daemonset["metadata"]["name"]),
                        daemonset["metadata"]["name"],
                    )
                )
                if state not in not_ready:
                    not_ready.append(state)
        stamp = self.twin.clock.iso()
        if refused:
            status = {
                "state": "notReady",
                "namespace": self.namespace,
                "conditions": _conditions(ready=False, reason="ReconcileFailed", message=refused, stamp=stamp),
            }
        elif not_ready:
            message = f"ClusterPolicy is not ready, states not ready: [{' '.join(not_ready)}]"
            status = {
                "state": "notReady",
                "namespace": self.namespace,
                "conditions": _conditions(ready=False, reason="OperandNotReady", message=message, stamp=stamp),
            }
        else:
            message = "ClusterPolicy is ready as all resources have been successfully reconciled"
            status = {
                "state": "ready",
                "namespace": self.namespace,
                "conditions": _conditions(ready=True, reason="Reconciled", message=message, stamp=stamp),
            }
        assert self.custom.cluster_policy is not None
        self._write_status(self.custom.cluster_policy, policy, status)

    def _write_status(self, rtype: ResourceType, obj: Obj, status: Obj) -> None:
        """Write status only when it changed in substance (conditions keep their transition times)."""
        current = self.store.try_get(
            rtype, None if not rtype.namespaced else obj["metadata"].get("namespace"), obj["metadata"]["name"]
        )
        if current is None:
            return
        merged = dict(status)
        if "conditions" in status:
            merged["conditions"] = _merge_conditions(
                (current.get("status") or {}).get("conditions") or [], status["conditions"]
            )
        if current.get("status") == merged:
            return

        def change(o: Obj) -> None:
            o["status"] = merged

        try:
            self.store.mutate(
                rtype, current["metadata"].get("namespace"), current["metadata"]["name"], change, subresource="status"
            )
        except errors.ApiError as exc:
            log.debug("status of %s not written: %s", obj["metadata"]["name"], exc)

    # -- driver and operand pods on the nodes --------------------------------------------------------------
    def plan_pod(self, pod: Obj, health: NodeHealth) -> PodPlan | None:
        """SimState pod behaviour for the operator's pods."""
        meta = pod.get("metadata") or {}
        if meta.get("namespace") != self.namespace:
            return None
        labels = meta.get("labels") or {}
        if labels.get(COMPONENT_LABEL) == DRIVER_COMPONENT:
            return self._plan_driver(pod, health)
        app = labels.get("app")
        if app in OPERAND_APPS:
            return self._plan_operand(app or "", health)
        return None

    def _plan_driver(self, pod: Obj, health: NodeHealth) -> PodPlan:
        uid = pod["metadata"].get("uid", "")
        version = _driver_version_of_pod(pod)
        now = self.twin.clock.now()
        if self._driver_stays_in_use(health, version):
            # The old module is still loaded: the new container cannot unload it and exits (driver is in use).
            self._driver_eta[health.name] = (uid, None)
            return PodPlan(
                outcome="crashloop",
                start_after=self.timings.driver_build_failure,
                message=DRIVER_IN_USE,
                reason="Error",
                replan_on_restart=True,  # the next restart unloads the module once the holder has left
            )
        if not self.sim.driver_builds_for(version, health.kernel, node_name=health.name):
            self._driver_eta[health.name] = (uid, None)
            message = _build_failure_message(
                version=version, kernel=health.kernel, openshift=self.profile == "openshift"
            )
            return PodPlan(
                outcome="crashloop", start_after=self.timings.driver_build_failure, message=message, reason="Error"
            )
        if health.driver_version == version:
            delay = self.timings.driver_already_loaded
        elif (annotated := self.annotated_driver_seconds(health.name)) is not None:
            delay = annotated
        elif _pod_uses_precompiled(pod):
            delay = self.timings.driver_precompiled_load
        elif self.profile == "openshift":
            delay = self.timings.driver_build_and_load_openshift
        else:
            delay = self.timings.driver_build_and_load
        self._driver_eta[health.name] = (uid, now + delay)
        node_name = health.name

        def loaded(ready_pod: Obj) -> None:
            self._loaded_by[node_name] = uid
            self.sim.nodes[node_name].driver_version = version

        def unloaded(stopped_pod: Obj) -> None:
            # The driver container unloads the kernel modules when it stops.
            if self._loaded_by.get(node_name) == uid:
                del self._loaded_by[node_name]
                if self.driver_held_by(node_name):
                    return  # rmmod fails while a process holds /dev/nvidia*: the module stays loaded
                self.sim.nodes[node_name].driver_version = None

        return PodPlan(outcome="ready", start_after=delay, on_ready=loaded, on_stop=unloaded)

    def annotated_driver_seconds(self, node_name: str) -> float | None:
        """The node's own driver build-and-load time when annotated (DRIVER_SECONDS_ANNOTATION), else None."""
        node = self.index.nodes.get(node_name) or self.store.try_get(self.kinds.node, None, node_name) or {}
        text = ((node.get("metadata") or {}).get("annotations") or {}).get(DRIVER_SECONDS_ANNOTATION)
        try:
            seconds = float(text) if text is not None else -1.0
        except ValueError:
            seconds = -1.0
        return seconds if seconds >= 0 else None

    def driver_held_by(self, node_name: str) -> list[str]:
        """Pods that use the node's GPUs without requesting ``nvidia.com/gpu`` (the ``nvidia`` runtimeClass alone, a
        hostPath mount of ``/dev/nvidia*``, a DRA claim allocated a ``gpu.nvidia.com`` device): the upgrade
        controller does not evict them and the kernel module cannot be unloaded while they run (gpu-operator issues
        2509, 2570)."""
        held = []
        for pod in self.index.pods_on(node_name):
            meta = pod["metadata"]
            spec = pod.get("spec") or {}
            if meta.get("namespace") == self.namespace or podutil.is_terminating(pod) or um.requests_gpu(pod):
                continue
            if podutil.phase_of(pod) in ("Succeeded", "Failed"):
                continue
            device_mount = any(
                str((volume.get("hostPath") or {}).get("path") or "").startswith("/dev/nvidia")
                for volume in spec.get("volumes") or ()
            )
            if "nvidia" in str(spec.get("runtimeClassName") or "") or device_mount or self._holds_dra_gpu(pod):
                held.append(f"{meta.get('namespace')}/{meta['name']}")
        return held

    def _holds_dra_gpu(self, pod: Obj) -> bool:
        """A pod whose Dynamic Resource Allocation claim is allocated a device of NVIDIA's DRA driver
        (``gpu.nvidia.com``, NVIDIA/k8s-dra-driver-gpu) uses the GPU without ``nvidia.com/gpu`` (gpu-operator #2570).

        The twin has no DRA allocator: whoever plays the scheduler writes the claim's ``status.allocation``."""
        claims_type = self.twin.registry.get("resource.k8s.io", "resourceclaims")
        if claims_type is None:
            return False
        namespace = pod["metadata"].get("namespace")
        by_pod = {
            status.get("name"): status.get("resourceClaimName")
            for status in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
        }
        for ref in (pod.get("spec") or {}).get("resourceClaims") or ():
            name = ref.get("resourceClaimName") or by_pod.get(ref.get("name"))
            claim = self.store.try_get(claims_type, namespace, name) if name else None
            results = (((claim or {}).get("status") or {}).get("allocation") or {}).get("devices", {}).get("results")
            if any(result.get("driver") == DRA_GPU_DRIVER for result in results or ()):
                return True
        return False

    def _driver_stays_in_use(self, health: NodeHealth, version: str) -> bool:
        """An older module no driver pod owns any more is still loaded and held by a pod (see driver_held_by)."""
        return (
            health.driver_version not in (None, version)
            and self._loaded_by.get(health.name) is None
            and bool(self.driver_held_by(health.name))
        )

    def _plan_operand(self, app: str, health: NodeHealth) -> PodPlan:
        now = self.twin.clock.now()
        failure = self.sim.validator_failures.get(health.name) if app == VALIDATOR_APP else None
        if failure:
            # Fault validator_fails: the validation container exits with what it printed.
            return PodPlan(outcome="crashloop", start_after=self.timings.validator_run, message=failure, reason="Error")
        run_time = self.timings.validator_run if app == VALIDATOR_APP else self.timings.operand_start
        if health.driver_version is not None:
            wait = 0.0
        else:
            eta = self._driver_eta.get(health.name)
            if eta is not None and eta[1] is None and self._driver_pod_uid(health.name) == eta[0]:
                # The node's driver cannot load: the operand waits in its init container for good.
                return PodPlan(
                    outcome="pending",
                    start_after=self.timings.operand_start,
                    reason="PodInitializing",
                    message="waiting for the driver validation",
                )
            ready_at = (
                eta[1]
                if eta is not None and eta[1] is not None and eta[1] > now
                else now + self.timings.driver_build_and_load
            )
            wait = ready_at - now
        node_name = health.name
        if app == DEVICE_PLUGIN_APP:

            def plugin_up(pod: Obj) -> None:
                self.sim.nodes[node_name].device_plugin_up = True

            def plugin_down(pod: Obj) -> None:
                self.sim.nodes[node_name].device_plugin_up = False

            return PodPlan(outcome="ready", start_after=wait + run_time, on_ready=plugin_up, on_stop=plugin_down)
        return PodPlan(outcome="ready", start_after=wait + run_time)

    def _driver_pod_uid(self, node_name: str) -> str | None:
        for pod in self.index.pods_on(node_name):
            labels = pod["metadata"].get("labels") or {}
            if labels.get(COMPONENT_LABEL) == DRIVER_COMPONENT and not podutil.is_terminating(pod):
                return pod["metadata"].get("uid")
        return None

    def pod_log(self, pod: Obj, container: str | None, health: NodeHealth | None) -> str | None:
        """Logs of the driver container (the rest falls through to the default providers)."""
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if meta.get("namespace") == self.namespace and labels.get("app") == VALIDATOR_APP and health is not None:
            failure = self.sim.validator_failures.get(health.name)
            if failure:
                return "running command chroot with args [/run/nvidia/driver nvidia-smi]\n" + failure + "\n"
        if meta.get("namespace") != self.namespace or labels.get(COMPONENT_LABEL) != DRIVER_COMPONENT:
            return None
        if container not in (None, "nvidia-driver-ctr"):
            return None
        version = _driver_version_of_pod(pod)
        kernel = health.kernel if health else "unknown"
        lines = [
            "DRIVER_ARCH is x86_64",
            f"Unpacking the NVIDIA driver {version} package",
            f"Installing NVIDIA driver version {version} for Linux kernel version {kernel}",
        ]
        if health is not None and self._driver_stays_in_use(health, version):
            lines += ["Unloading NVIDIA driver kernel modules...", DRIVER_IN_USE]
        elif health is not None and not self.sim.driver_builds_for(version, kernel, node_name=health.name):
            lines += [
                _build_failure_message(version=version, kernel=kernel, openshift=self.profile == "openshift"),
                "Unloading NVIDIA driver kernel modules...",
            ]
        elif health is not None and health.driver_version == version:
            lines += [
                "Loading NVIDIA driver kernel modules...",
                "+ modprobe nvidia",
                "+ modprobe nvidia-uvm",
                "+ modprobe nvidia-modeset",
                "Starting NVIDIA persistence daemon...",
                "Done, now waiting for signal",
            ]
        else:
            lines += ["Building the NVIDIA kernel modules for the running kernel..."]
        return "\n".join(lines) + "\n"

    def _step_driver_manager(self, now: float) -> None:
        """k8s-driver-manager: a new driver pod pauses the node's operands until their pods are gone."""
        for namespace, name in sorted(self._new_driver_pods):
            pod = self.store.try_get(self.kinds.pod, namespace, name)
            self._new_driver_pods.discard((namespace, name))
            if pod is None or podutil.is_terminating(pod):
                continue
            node_name = (pod.get("spec") or {}).get("nodeName")
            health = self.sim.nodes.get(node_name or "")
            if node_name is None or health is None:
                continue
            if health.driver_version == _driver_version_of_pod(pod):
                # Twin shortcut: with the same module loaded nothing has to leave (upstream pauses anyway).
                continue
            paused = self._pause_operands(node_name)
            self._pauses[node_name] = _Pause(pod_uid=pod["metadata"]["uid"], started_at=now, paused_labels=paused)
        for node_name, pause in list(self._pauses.items()):
            remaining = [
                pod
                for pod in self.index.pods_on(node_name)
                if (pod["metadata"].get("labels") or {}).get("app") in OPERAND_APPS
                and pod["metadata"].get("namespace") == self.namespace
            ]
            if remaining and now - pause.started_at < self.timings.pause_grace:
                continue
            del self._pauses[node_name]
            health = self.sim.nodes.get(node_name)
            if (
                health is not None
                and self._loaded_by.get(node_name) is None
                and health.driver_version is not None
                and not self.driver_held_by(node_name)
            ):
                # uninstall_driver: the old module goes before the new one is built.
                health.driver_version = None
            self._restore_operands(node_name, pause.paused_labels)

    def _pause_operands(self, node_name: str) -> tuple[str, ...]:
        paused: list[str] = []

        def pause(node: Obj) -> None:
            labels = node["metadata"].setdefault("labels", {})
            for key in PAUSED_DEPLOY_LABELS:
                if labels.get(key) == "true":
                    labels[key] = PAUSED_FOR_DRIVER_UPGRADE
                    paused.append(key)

        self._mutate_node(node_name, pause)
        return tuple(paused)

    def _restore_operands(self, node_name: str, keys: tuple[str, ...]) -> None:
        def restore(node: Obj) -> None:
            labels = node["metadata"].setdefault("labels", {})
            for key in keys:
                if labels.get(key) == PAUSED_FOR_DRIVER_UPGRADE:
                    labels[key] = "true"

        self._mutate_node(node_name, restore)

    # -- the upgrade controller --------------------------------------------------------------------------------
    @property
    def upgrade(self) -> UpgradeStatus:
        """What the last upgrade reconcile saw (the metrics read it)."""
        return self.upgrader.status

    def _driver_selector(self, policy: Obj) -> dict[str, str]:
        """upgrade_controller.go: which label finds the driver DaemonSets and pods."""
        if _policy_section(policy, "driver").get("useNvidiaDriverCRD"):
            return {COMPONENT_LABEL: DRIVER_COMPONENT}
        if self.profile == "openshift":
            return {DTK_LABEL: "true"}
        return {"app": DRIVER_APP}

    def reconcile_upgrade(self, now: float) -> None:
        """The driver upgrade controller's reconcile (``upgrade_controller``, the library both operators share)."""
        policy_obj = self.active_policy()
        if policy_obj is None:
            self.upgrader.next_at = now + self.timings.upgrade_requeue
            return
        policy = um.UpgradePolicy.from_spec(_policy_section(policy_obj, "driver").get("upgradePolicy"))
        if _policy_section(policy_obj, "sandboxWorkloads").get("enabled"):
            policy = um.UpgradePolicy(auto_upgrade=False)
        # The recorder derives the budget in force from the same upgradePolicy while nodes are in
        # rollout states, so nothing is declared here (an explicit admin budget must not be clobbered).
        self.upgrader.reconcile(now, policy, lambda: self.driver_objects(policy_obj))

    def driver_objects(self, policy_obj: Obj) -> tuple[list[Obj], list[Obj]]:
        """The driver DaemonSets and driver pods of the operator namespace that the upgrade controller selects."""
        selector = label_selector_from_map(self._driver_selector(policy_obj))
        daemonsets = [
            ds
            for ds in self.store.list(self.kinds.daemonset, self.namespace)
            if selector.matches(ds["metadata"].get("labels") or {})
        ]
        pods = [
            pod
            for key in sorted(self._driver_pod_keys)
            if (pod := self.store.try_get(self.kinds.pod, key[0], key[1])) is not None
            and selector.matches(pod["metadata"].get("labels") or {})
        ]
        return daemonsets, pods

    # -- writes -----------------------------------------------------------------------------------------------
    def _mutate_node(self, name: str, change: Any, *, strict: bool = False) -> None:
        try:
            self.store.mutate(self.kinds.node, None, name, change)
        except errors.ApiError:
            if strict:
                raise
            log.debug("node %s not updated", name)


def _driver_version_of_pod(pod: Obj) -> str:
    for container in (pod.get("spec") or {}).get("containers") or ():
        if container.get("name") == "nvidia-driver-ctr":
            return driver_version_of_image(container.get("image", ""))
    return ""


def _pod_uses_precompiled(pod: Obj) -> bool:
    return (pod["metadata"].get("labels") or {}).get("nvidia.com/precompiled") == "true"


def _build_failure_message(*, version: str, kernel: str, openshift: bool) -> str:
    if openshift:
        return (
            f"Installing NVIDIA driver {version} with the driver toolkit failed: "
            f"no kernel-devel package matches the running kernel {kernel}"
        )
    return (
        f"Could not build the NVIDIA kernel module {version}: the kernel headers of the running kernel "
        f"{kernel} are not installed and no matching package was found"
    )


def _looks_like_driver_pod(pod: Obj) -> bool:
    """A pod any of the upgrade controller's driver selectors could match."""
    labels = pod["metadata"].get("labels") or {}
    return (
        labels.get(COMPONENT_LABEL) == DRIVER_COMPONENT
        or labels.get("app") == DRIVER_APP
        or labels.get(DTK_LABEL) == "true"
    )


def _owner_kind(obj: Obj) -> str | None:
    refs = obj["metadata"].get("ownerReferences") or []
    return refs[0].get("kind") if refs else None


def _conditions(*, ready: bool, reason: str, message: str, stamp: str) -> list[Obj]:
    """The Ready/Error condition pair the operator's condition updater writes."""
    if ready:
        return [
            {"type": "Ready", "status": "True", "reason": reason, "message": message, "lastTransitionTime": stamp},
            {"type": "Error", "status": "False", "reason": "Ready", "message": "", "lastTransitionTime": stamp},
        ]
    return [
        {"type": "Ready", "status": "False", "reason": "Error", "message": "", "lastTransitionTime": stamp},
        {"type": "Error", "status": "True", "reason": reason, "message": message, "lastTransitionTime": stamp},
    ]


def _merge_conditions(current: list[Obj], desired: list[Obj]) -> list[Obj]:
    """meta.SetStatusCondition: keep lastTransitionTime while a condition's status stays the same."""
    by_type = {c.get("type"): c for c in current}
    merged = []
    for condition in desired:
        previous = by_type.get(condition["type"])
        if previous is not None and previous.get("status") == condition["status"]:
            kept = previous.get("lastTransitionTime", condition["lastTransitionTime"])
            merged.append({**condition, "lastTransitionTime": kept})
        else:
            merged.append(condition)
    return merged


def install(twin: Twin) -> GpuOperator:
    """Entry point for ``sim.build.populate``: seed the operator's objects and start its controllers.

    On OpenShift the operator is an OLM package: the composition root attaches OLM (``gpu_operator_olm``)."""
    operator = GpuOperator(twin)
    operator.install()
    return operator
