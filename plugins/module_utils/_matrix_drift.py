# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Drift between the matrix and what runs: observation from API objects, then comparison (collection-internal).

``observe_from_api`` turns plain API objects (dicts as the Kubernetes API
returns them) into an ``Observed`` structure; ``compute_drift`` compares it
with the matrix. Both are pure: the I/O layer lists the objects.

Where each value is read:

* per GPU node: ``gpu_driver`` from the Running driver pod's image tag
  (``nvcr.io/nvidia/driver:560.35.03-rhcos4.16``), else the GFD labels
  ``nvidia.com/cuda.driver-version.full`` or the older
  ``nvidia.com/cuda.driver.major/minor/rev``; ``kernel`` from
  ``status.nodeInfo.kernelVersion``; ``ostree`` from the NFD label
  ``...system-os_release.OSTREE_VERSION`` or the RHCOS ``osImage``;
  ``mofed`` from the Running MOFED/DOCA pod's image tag (pods labelled
  ``nvidia.com/ofed-driver``), else, for a digest-pinned pod, the
  NicClusterPolicy ``spec.ofedDriver.version`` it was rendered from;
  ``firmware_<name>`` from BMC inventory passed in, else the collection's own
  node labels ``gpufleet.io/firmware.<name>``;
* cluster-wide: ``gpu_operator``, ``network_operator``, ``sriov_operator``
  from a Succeeded ClusterServiceVersion (``spec.version``), else the
  operator Deployment's image tag; ``openshift`` from ClusterVersion (newest
  Completed history entry, else ``status.desired.version``); ``dcgm``,
  ``device_plugin``, ``container_toolkit`` from the ClusterPolicy spec
  versions, else the operand DaemonSet's image tag; ``driver_type``
  (precompiled or compiled) from the ClusterPolicy ``spec.driver.usePrecompiled``
  (unknown when NVIDIADriver resources manage the driver). Digests are not
  versions: a value pinned by digest only is reported as unknown.

The canary node (label ``gpu-canary=true``) is compared with
``canary_testing``, every other GPU node with ``current_production``. A
cluster-wide component serves both roles during a canary, so it is "ok"
when it matches either stage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_versions import (
    FIRMWARE_PREFIX,
    same_version,
    try_parse,
)

ROLE_CANARY = "canary"
ROLE_PRODUCTION = "production"
CANARY_LABEL = "gpu-canary"
FIRMWARE_LABEL_PREFIX = "gpufleet.io/firmware."
STATUS_OK = "ok"
STATUS_DRIFT = "drift"
STATUS_UNKNOWN = "unknown"

NODE_COMPONENTS = ("gpu_driver", "kernel", "mofed")
# Found on every GPU node, so not found is drift; MOFED runs only where there are Mellanox adapters.
MUST_RUN_ON_GPU_NODES = frozenset({"gpu_driver"})
CLUSTER_COMPONENTS = (
    "gpu_operator",
    "openshift",
    "network_operator",
    "sriov_operator",
    "dcgm",
    "dcgm_hostengine",
    "device_plugin",
    "container_toolkit",
    "driver_type",
)

_GFD_FULL = "nvidia.com/cuda.driver-version.full"
_GFD_OLD = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev")
_OSTREE_LABEL = "feature.node.kubernetes.io/system-os_release.OSTREE_VERSION"
_GPU_NODE_LABELS = ("nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-10de.present")
_DRIVER_TAG = re.compile(r"^(\d{3,}\.\d+(?:\.\d+)?)(?:-|$)")
_MOFED_TAG = re.compile(r"^((?:doca\d+(?:\.\d+)*-)?\d+\.\d+-\d+(?:\.\d+){2,4}(?:-\d+)?)(?:-.*)?$")
_RHCOS_IMAGE = re.compile(r"CoreOS\s+(\d+\.\d+\.\d+-\d+)")
# Operand DaemonSets the GPU Operator creates, and the image each holds (shared with _gpu_operands).
OPERAND_DAEMONSETS = {
    "dcgm": ("nvidia-dcgm-exporter", "dcgm-exporter"),
    "dcgm_hostengine": ("nvidia-dcgm", "/dcgm:"),
    "device_plugin": ("nvidia-device-plugin-daemonset", "k8s-device-plugin"),
    "container_toolkit": ("nvidia-container-toolkit-daemonset", "container-toolkit"),
}
CLUSTERPOLICY_FIELDS = {
    "dcgm": "dcgmExporter",
    "dcgm_hostengine": "dcgm",
    "device_plugin": "devicePlugin",
    "container_toolkit": "toolkit",
}
# The standalone DCGM host engine runs only when enabled; the other operands unless disabled
# (NVIDIA/gpu-operator api/nvidia/v1/clusterpolicy_types.go, DCGMSpec.IsEnabled).
_OFF_UNLESS_ENABLED = frozenset({"dcgm"})


def operand_enabled(spec: Mapping[str, Any], field_name: str) -> bool:
    """Whether the ClusterPolicy runs the operand of ``field_name`` (its ``enabled``, else the operator's default)."""
    enabled = (spec.get(field_name) or {}).get("enabled")
    return bool(enabled) if enabled is not None else field_name not in _OFF_UNLESS_ENABLED


_CSV_PREFIXES = {
    "gpu_operator": ("gpu-operator-certified.", "gpu-operator."),
    "network_operator": ("nvidia-network-operator.", "network-operator."),
    "sriov_operator": ("sriov-network-operator.",),
}
_OPERATOR_DEPLOYMENTS = {
    "gpu_operator": (("gpu-operator",), "gpu-operator"),
    "network_operator": (("network-operator", "nvidia-network-operator-controller-manager"), "network-operator"),
    "sriov_operator": (("sriov-network-operator",), "sriov-network-operator"),
}


@dataclass
class ObservedNode:
    name: str
    role: str
    gpu_driver: Optional[str] = None
    kernel: Optional[str] = None
    ostree: Optional[str] = None
    mofed: Optional[str] = None
    firmware: Dict[str, str] = field(default_factory=dict)
    sources: Dict[str, str] = field(default_factory=dict)

    def versions(self) -> Dict[str, Optional[str]]:
        values: Dict[str, Optional[str]] = {"gpu_driver": self.gpu_driver, "kernel": self.kernel, "mofed": self.mofed}
        values.update(self.firmware)
        return values

    def as_dict(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role,
            "gpu_driver": self.gpu_driver,
            "kernel": self.kernel,
            "ostree": self.ostree,
            "mofed": self.mofed,
            "firmware": dict(self.firmware),
            "sources": dict(self.sources),
        }


@dataclass
class ObservedCluster:
    gpu_operator: Optional[str] = None
    openshift: Optional[str] = None
    network_operator: Optional[str] = None
    sriov_operator: Optional[str] = None
    dcgm: Optional[str] = None
    dcgm_hostengine: Optional[str] = None
    device_plugin: Optional[str] = None
    container_toolkit: Optional[str] = None
    driver_type: Optional[str] = None
    sources: Dict[str, str] = field(default_factory=dict)

    def versions(self) -> Dict[str, Optional[str]]:
        return {component: getattr(self, component) for component in CLUSTER_COMPONENTS}

    def as_dict(self) -> Dict[str, Any]:
        values: Dict[str, Any] = dict(self.versions())
        values["sources"] = dict(self.sources)
        return values


@dataclass
class Observed:
    nodes: List[ObservedNode] = field(default_factory=list)
    cluster: ObservedCluster = field(default_factory=ObservedCluster)

    def as_dict(self) -> Dict[str, Any]:
        return {"nodes": [node.as_dict() for node in self.nodes], "cluster": self.cluster.as_dict()}


# -- small readers -------------------------------------------------------------


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return _meta(obj).get("labels") or {}


def _ref(obj: Mapping[str, Any]) -> str:
    meta = _meta(obj)
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


def image_tag(image: Optional[str]) -> Optional[str]:
    """The tag of an image reference: registry:5000/a/b:tag@sha256:... -> tag; no tag (digest only) -> None."""
    if not image:
        return None
    name = image.split("@", 1)[0]
    last_slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > last_slash:
        return name[colon + 1 :] or None
    return None


def driver_version_from_tag(tag: Optional[str]) -> Optional[str]:
    """560.35.03-rhcos4.16 -> 560.35.03; a precompiled tag (535-5.15.0-...) names only a branch -> None."""
    if not tag:
        return None
    match = _DRIVER_TAG.match(tag)
    return match.group(1) if match else None


def mofed_version_from_tag(tag: Optional[str]) -> Optional[str]:
    """24.07-0.6.1.0-0-rhcos4.16-amd64 -> 24.07-0.6.1.0-0; doca3.1.0-25.07-0.9.7.0-0-ubuntu24.04-amd64 likewise."""
    if not tag:
        return None
    match = _MOFED_TAG.match(tag)
    return match.group(1) if match else None


def _is_digest(value: Optional[str]) -> bool:
    return bool(value) and str(value).startswith("sha256:")


def _containers(pod_or_template: Mapping[str, Any]) -> List[Mapping[str, Any]]:
    spec = pod_or_template.get("spec") or {}
    return list(spec.get("containers") or [])


def _running(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and not _meta(pod).get("deletionTimestamp")


def _gfd_driver(labels: Mapping[str, str]) -> Optional[str]:
    full = labels.get(_GFD_FULL)
    if full:
        return full
    parts = [labels.get(key) for key in _GFD_OLD]
    if parts[0] and parts[1]:
        return ".".join(part for part in parts if part)
    return None


def _ostree(node: Mapping[str, Any]) -> Optional[str]:
    value = _labels(node).get(_OSTREE_LABEL)
    if value:
        return value
    os_image = ((node.get("status") or {}).get("nodeInfo") or {}).get("osImage") or ""
    match = _RHCOS_IMAGE.search(os_image)
    return match.group(1) if match else None


def _is_driver_pod(pod: Mapping[str, Any]) -> bool:
    labels = _labels(pod)
    return (
        labels.get("app") == "nvidia-driver-daemonset" or labels.get("app.kubernetes.io/component") == "nvidia-driver"
    )


def _is_mofed_pod(pod: Mapping[str, Any]) -> bool:
    labels = _labels(pod)
    return "nvidia.com/ofed-driver" in labels or str(labels.get("app", "")).startswith("mofed-")


def _pod_driver_version(pod: Mapping[str, Any]) -> Optional[str]:
    containers = _containers(pod)
    preferred = [c for c in containers if c.get("name") == "nvidia-driver-ctr"] or containers
    for container in preferred:
        version = driver_version_from_tag(image_tag(container.get("image")))
        if version:
            return version
    return None


def _pod_mofed(pod: Mapping[str, Any]) -> Tuple[Optional[str], bool]:
    """(version, pinned by digest) of a MOFED pod's driver container."""
    digest_only = False
    for container in _containers(pod):
        image = container.get("image") or ""
        tag = image_tag(image)
        version = mofed_version_from_tag(tag)
        if version:
            return version, False
        if tag is None and "@sha256:" in image:
            digest_only = True
    return None, digest_only


def _is_gpu_node(node: Mapping[str, Any], driver_nodes: Iterable[str]) -> bool:
    labels = _labels(node)
    if any(labels.get(key) == "true" for key in _GPU_NODE_LABELS) or labels.get(CANARY_LABEL) == "true":
        return True
    return _meta(node).get("name") in set(driver_nodes)


def _csv_version(
    csvs: Iterable[Mapping[str, Any]], prefixes: Tuple[str, ...], component: str
) -> Optional[Tuple[str, str]]:
    best: Optional[Tuple[Any, str, str]] = None
    for csv in csvs:
        name = str(_meta(csv).get("name", ""))
        if not name.startswith(prefixes):
            continue
        if (csv.get("status") or {}).get("phase") not in (None, "Succeeded"):
            continue
        version = (csv.get("spec") or {}).get("version")
        parsed = try_parse(component, str(version)) if version else None
        if parsed is None:
            continue
        if best is None or parsed.compare(best[0]) > 0:
            best = (parsed, str(version), f"ClusterServiceVersion {_ref(csv)} spec.version")
    return (best[1], best[2]) if best else None


def _deployment_version(
    deployments: Iterable[Mapping[str, Any]], names: Tuple[str, ...], image_name: str
) -> Optional[Tuple[str, str]]:
    for deployment in deployments:
        if _meta(deployment).get("name") not in names:
            continue
        template = (deployment.get("spec") or {}).get("template") or {}
        for container in _containers(template):
            image = container.get("image") or ""
            tag = image_tag(image)
            if tag and image_name in image.split("@", 1)[0].rsplit("/", 1)[-1]:
                return tag, f"Deployment {_ref(deployment)} image"
    return None


def _clusterversion(clusterversions: Iterable[Mapping[str, Any]]) -> Optional[Tuple[str, str]]:
    for clusterversion in clusterversions:
        status = clusterversion.get("status") or {}
        for entry in status.get("history") or []:
            # history is newest first; a Partial entry is an update still in progress.
            if entry.get("state") == "Completed" and entry.get("version"):
                return entry["version"], f"ClusterVersion {_ref(clusterversion)} status.history (Completed)"
        desired = (status.get("desired") or {}).get("version")
        if desired:
            return desired, f"ClusterVersion {_ref(clusterversion)} status.desired.version"
    return None


def _policy_driver_type(policy: Mapping[str, Any]) -> Optional[Tuple[str, str]]:
    """precompiled or compiled from spec.driver.usePrecompiled (absent = false); None when NVIDIADrivers decide."""
    driver = (policy.get("spec") or {}).get("driver") or {}
    if driver.get("enabled") is False or driver.get("useNvidiaDriverCRD"):
        return None
    kind = "precompiled" if driver.get("usePrecompiled") is True else "compiled"
    return kind, f"ClusterPolicy {_ref(policy)} spec.driver.usePrecompiled"


def _operand_versions(
    clusterpolicies: Iterable[Mapping[str, Any]], daemonsets: Iterable[Mapping[str, Any]]
) -> Dict[str, Tuple[str, str]]:
    found: Dict[str, Tuple[str, str]] = {}
    for policy in clusterpolicies:
        spec = policy.get("spec") or {}
        for component, field_name in CLUSTERPOLICY_FIELDS.items():
            version = (spec.get(field_name) or {}).get("version")
            if not operand_enabled(spec, field_name):
                continue
            if version and not _is_digest(version) and component not in found:
                found[component] = (str(version), f"ClusterPolicy {_ref(policy)} spec.{field_name}.version")
    for policy in clusterpolicies:
        driver_type = _policy_driver_type(policy)
        if driver_type and "driver_type" not in found:
            found["driver_type"] = driver_type
    for daemonset in daemonsets:
        name = _meta(daemonset).get("name")
        for component, (ds_name, image_name) in OPERAND_DAEMONSETS.items():
            if component in found or name != ds_name:
                continue
            template = (daemonset.get("spec") or {}).get("template") or {}
            for container in _containers(template):
                image = container.get("image") or ""
                tag = image_tag(image)
                if tag and image_name in image:
                    found[component] = (tag, f"DaemonSet {_ref(daemonset)} image")
    return found


def observe_from_api(
    *,
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]] = (),
    daemonsets: Iterable[Mapping[str, Any]] = (),
    clusterpolicies: Iterable[Mapping[str, Any]] = (),
    csvs: Iterable[Mapping[str, Any]] = (),
    clusterversions: Iterable[Mapping[str, Any]] = (),
    nicclusterpolicies: Iterable[Mapping[str, Any]] = (),
    deployments: Iterable[Mapping[str, Any]] = (),
    firmware_by_node: Optional[Mapping[str, Mapping[str, str]]] = None,
) -> Observed:
    """Build the observed state from API list items (plain dicts); nothing here talks to the API.

    ``nodes`` and ``pods`` are each read once, pods first, so they may be
    streamed page by page.
    """
    driver_by_node: Dict[str, Tuple[str, str]] = {}
    mofed_by_node: Dict[str, Tuple[Optional[str], bool, str]] = {}
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name or not _running(pod):
            continue
        if _is_driver_pod(pod):
            version = _pod_driver_version(pod)
            if version:
                driver_by_node[node_name] = (version, f"Pod {_ref(pod)} image")
            else:
                driver_by_node.setdefault(node_name, ("", f"Pod {_ref(pod)}"))
        elif _is_mofed_pod(pod):
            version, digest_only = _pod_mofed(pod)
            mofed_by_node[node_name] = (version, digest_only, f"Pod {_ref(pod)} image")
    policy_mofed = None
    for policy in nicclusterpolicies:
        version = ((policy.get("spec") or {}).get("ofedDriver") or {}).get("version")
        if version:
            policy_mofed = (str(version), f"NicClusterPolicy {_ref(policy)} spec.ofedDriver.version")
    firmware_by_node = firmware_by_node or {}

    observed = Observed()
    for node in nodes:
        name = str(_meta(node).get("name"))
        if not _is_gpu_node(node, driver_by_node):
            continue
        labels = _labels(node)
        entry = ObservedNode(name=name, role=ROLE_CANARY if labels.get(CANARY_LABEL) == "true" else ROLE_PRODUCTION)
        driver = driver_by_node.get(name)
        if driver and driver[0]:
            entry.gpu_driver, entry.sources["gpu_driver"] = driver
        else:
            gfd = _gfd_driver(labels)
            if gfd:
                entry.gpu_driver, entry.sources["gpu_driver"] = gfd, "GFD node labels"
        kernel = ((node.get("status") or {}).get("nodeInfo") or {}).get("kernelVersion")
        if kernel:
            entry.kernel, entry.sources["kernel"] = kernel, "status.nodeInfo.kernelVersion"
        entry.ostree = _ostree(node)
        mofed = mofed_by_node.get(name)
        if mofed and mofed[0]:
            entry.mofed, entry.sources["mofed"] = mofed[0], mofed[2]
        elif mofed and mofed[1] and policy_mofed:
            entry.mofed, entry.sources["mofed"] = policy_mofed[0], policy_mofed[1] + " (pod pinned by digest)"
        for label, value in labels.items():
            if label.startswith(FIRMWARE_LABEL_PREFIX) and value:
                key = FIRMWARE_PREFIX + label[len(FIRMWARE_LABEL_PREFIX) :]
                entry.firmware[key], entry.sources[key] = value, f"node label {label}"
        for key, value in (firmware_by_node.get(name) or {}).items():
            if value:
                entry.firmware[key], entry.sources[key] = value, "BMC firmware inventory"
        observed.nodes.append(entry)
    observed.nodes.sort(key=lambda observed_node: observed_node.name)

    cluster = observed.cluster
    csvs, deployments = list(csvs), list(deployments)
    for component, prefixes in _CSV_PREFIXES.items():
        found = _csv_version(csvs, prefixes, component)
        if found is None:
            names, image_name = _OPERATOR_DEPLOYMENTS[component]
            found = _deployment_version(deployments, names, image_name)
        if found:
            setattr(cluster, component, found[0])
            cluster.sources[component] = found[1]
    version_found = _clusterversion(clusterversions)
    if version_found:
        cluster.openshift, cluster.sources["openshift"] = version_found
    for component, (value, source) in _operand_versions(clusterpolicies, daemonsets).items():
        setattr(cluster, component, value)
        cluster.sources[component] = source
    return observed


# -- comparison ------------------------------------------------------------------


def _compare(component: str, expected: Optional[str], found: Optional[str]) -> str:
    if found is None or found == "":
        return STATUS_UNKNOWN
    return STATUS_OK if same_version(component, expected, found) else STATUS_DRIFT


def _text(value: Any) -> Optional[str]:
    return None if value is None else str(value)


def compute_drift(
    stage_versions_by_role: Mapping[str, Mapping[str, Any]],
    observed: Observed,
) -> Dict[str, Any]:
    """Per node and cluster-wide: component, expected, found, status (ok|drift|unknown), and a summary by component.

    ``stage_versions_by_role`` maps ``canary`` and ``production`` to the
    effective versions of ``canary_testing`` and ``current_production``.
    Components the stage does not pin are not compared; cuda and nccl cannot
    be read from the API and are left out.
    """
    production = stage_versions_by_role.get(ROLE_PRODUCTION) or {}
    canary = stage_versions_by_role.get(ROLE_CANARY) or production
    summary: Dict[str, Dict[str, int]] = {}

    def count(component: str, status: str) -> None:
        summary.setdefault(component, {STATUS_OK: 0, STATUS_DRIFT: 0, STATUS_UNKNOWN: 0})[status] += 1

    node_reports = []
    for node in observed.nodes:
        expected_versions = canary if node.role == ROLE_CANARY else production
        found_versions = node.versions()
        components = [c for c in NODE_COMPONENTS if c in expected_versions]
        components += sorted(c for c in expected_versions if isinstance(c, str) and c.startswith(FIRMWARE_PREFIX))
        rows: List[Dict[str, Any]] = []
        for component in components:
            expected = _text(expected_versions.get(component))
            found = found_versions.get(component)
            status = _compare(component, expected, found)
            source = node.sources.get(component)
            if status == STATUS_UNKNOWN and component in MUST_RUN_ON_GPU_NODES:
                # Every GPU node runs a driver: none seen is not "cannot tell", it is a node without one.
                status, source = STATUS_DRIFT, "none running: no driver pod and no GFD driver labels"
            count(component, status)
            rows.append(
                {
                    "component": component,
                    "expected": expected,
                    "found": found,
                    "status": status,
                    "source": source,
                }
            )
        node_reports.append(
            {
                "node": node.name,
                "role": node.role,
                "ostree": node.ostree,
                "status": _worst(str(row["status"]) for row in rows),
                "components": rows,
            }
        )

    has_canary = any(node.role == ROLE_CANARY for node in observed.nodes)
    cluster_rows = []
    cluster_found = observed.cluster.versions()
    for component in CLUSTER_COMPONENTS:
        expected_production = _text(production.get(component))
        expected_canary = _text(canary.get(component)) if has_canary else None
        if expected_production is None and expected_canary is None:
            continue
        found = cluster_found.get(component)
        matched = None
        status = STATUS_UNKNOWN if not found else STATUS_DRIFT
        if found:
            for role, expected in ((ROLE_PRODUCTION, expected_production), (ROLE_CANARY, expected_canary)):
                if expected is not None and same_version(component, expected, found):
                    status, matched = STATUS_OK, role
                    break
        count(component, status)
        row = {
            "component": component,
            "expected": expected_production,
            "found": found,
            "status": status,
            "matched_role": matched,
            "source": observed.cluster.sources.get(component),
        }
        if expected_canary is not None and not same_version(component, expected_canary, expected_production):
            row["expected_canary"] = expected_canary
        cluster_rows.append(row)

    totals = {STATUS_OK: 0, STATUS_DRIFT: 0, STATUS_UNKNOWN: 0}
    for counts in summary.values():
        for status, number in counts.items():
            totals[status] += number
    return {
        "nodes": node_reports,
        "nodes_total": len(node_reports),
        "cluster": cluster_rows,
        "summary": summary,
        "totals": totals,
        "nodes_with_drift": [report["node"] for report in node_reports if report["status"] == STATUS_DRIFT],
    }


def _worst(statuses: Iterable[str]) -> str:
    order = {STATUS_OK: 0, STATUS_UNKNOWN: 1, STATUS_DRIFT: 2}
    worst = STATUS_OK
    for status in statuses:
        if order[status] > order[worst]:
            worst = status
    return worst
