# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The kernel interlock without I/O: may GPU nodes reboot into the new RHCOS? (collection-internal)

A GPU node that boots a kernel no GPU driver (or MOFED/DOCA driver) is built for comes back without
GPUs (or without its RDMA network). Before any GPU node reboots into a new RHCOS, three things must
hold:

1. the matrix allows it: the rules ``openshift_kernel`` (the kernel is the one the release ships),
   ``driver_kernel`` and ``mofed_kernel`` (the operators are validated on that OpenShift) of
   ``_matrix_rules``, against the shipped catalog (its RHCOS -> RHEL -> kernel-line table);
2. the cluster publishes a driver toolkit (DTK) for the new RHCOS: the ImageStream
   ``openshift/driver-toolkit`` has one tag per RHCOS version the cluster runs plus ``latest``,
   which the CVO points at the new release's RHCOS once the control plane is updated
   (openshift/driver-toolkit ``docs/driver_toolkit_imagestream.md``). The GPU Operator builds the
   driver on each node from the DTK of the node's OSTREE version; a missing tag means no build
   (NVIDIA/gpu-operator issue #990);
3. a build on that DTK succeeds: a pod runs the driver container's build on the DTK image of the new
   RHCOS (which carries that kernel's headers), without loading anything, on any node. A failed
   build names the kernel and the driver before a node is lost to it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_spec import normalized_for_diff
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_catalog import Catalog
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_rules import (
    VIOLATION,
    WARNING,
    check_version_set,
)

INTERLOCK_RULES = ("openshift_kernel", "driver_kernel", "mofed_kernel")
DTK_NAMESPACE = "openshift"
DTK_IMAGESTREAM = "driver-toolkit"
BUILD_LABEL = "gpufleet.io/kernel-interlock"
ERROR = "error"
WARN = "warning"
INFO = "info"


@dataclass
class Finding:
    check: str
    severity: str
    message: str
    evidence: List[str] = field(default_factory=list)

    def as_dict(self) -> Dict[str, Any]:
        return {"check": self.check, "severity": self.severity, "message": self.message, "evidence": self.evidence}


def matrix_findings(
    versions: Mapping[str, Any], *, previous: Optional[Mapping[str, Any]], catalog: Catalog
) -> List[Finding]:
    """The matrix rules about the new kernel, as interlock findings (a violation stops the reboot)."""
    results = check_version_set(versions, catalog=catalog, previous=previous)
    findings = []
    for rule in INTERLOCK_RULES:
        for item in results.get(rule, []):
            severity = ERROR if item.status == VIOLATION else WARN if item.status == WARNING else INFO
            findings.append(Finding(f"matrix_{rule}", severity, item.message, list(item.evidence)))
    return findings


@dataclass(frozen=True)
class DriverToolkit:
    """The DTK the cluster publishes for the RHCOS its nodes are about to boot."""

    rhcos: str
    image: str
    tags: List[str]


def driver_toolkit(imagestream: Optional[Mapping[str, Any]], *, rhcos: Optional[str] = None) -> Optional[DriverToolkit]:
    """The tag for ``rhcos`` (default: the one ``latest`` points at, the newest release's RHCOS)."""
    if not imagestream:
        return None
    tags = [t for t in ((imagestream.get("spec") or {}).get("tags") or []) if t.get("name")]
    images = {str(t["name"]): str((t.get("from") or {}).get("name") or "") for t in tags}
    names = sorted(name for name in images if name != "latest")
    if rhcos is None:
        latest = images.get("latest")
        rhcos = next((name for name in names if latest and images[name] == latest), None)
    if rhcos is None or rhcos not in images:
        return None
    return DriverToolkit(rhcos=rhcos, image=images[rhcos], tags=names)


def rhcos_minor(rhcos: str) -> str:
    """``417.94.202410250757-0`` -> ``4.17`` (the first field is major and minor run together)."""
    head = rhcos.split(".", 1)[0]
    return f"{head[0]}.{head[1:]}" if len(head) > 1 and head.isdigit() else ""


def build_pod(
    *,
    name: str,
    namespace: str,
    dtk_image: str,
    builder_image: str,
    driver_version: str,
    what: str,
    rhcos: str,
) -> Dict[str, Any]:
    """A pod that builds (and does not load) a driver on the DTK of one RHCOS: it ends Succeeded or Failed."""
    shared = {"name": "shared-driver-toolkit", "mountPath": "/mnt/shared-driver-toolkit"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {BUILD_LABEL: what, "app.kubernetes.io/managed-by": "gpufleet.upgrade"},
            "annotations": {"gpufleet.io/rhcos": rhcos},
        },
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": 3600,
            "tolerations": [{"operator": "Exists"}],
            "volumes": [{"name": "shared-driver-toolkit", "emptyDir": {}}],
            "containers": [
                {
                    "name": "driver-build",
                    "image": builder_image,
                    "command": ["/bin/sh", "-c"],
                    "args": ["until [ -f /mnt/shared-driver-toolkit/built ]; do sleep 5; done"],
                    "env": [{"name": "DRIVER_VERSION", "value": driver_version}, {"name": "BUILD_ONLY", "value": "1"}],
                    "volumeMounts": [shared],
                },
                {
                    "name": "driver-toolkit",
                    "image": dtk_image,
                    "command": ["/bin/sh", "-c"],
                    # The DTK carries the kernel headers of its RHCOS: compile, do not insmod.
                    "args": ["dtk-build-driver && touch /mnt/shared-driver-toolkit/built"],
                    "env": [{"name": "DRIVER_VERSION", "value": driver_version}],
                    "volumeMounts": [shared],
                },
            ],
        },
    }


def build_pods(
    specs: Sequence[Mapping[str, Any]], *, namespace: str, dtk_image: str, rhcos: str
) -> List[Dict[str, Any]]:
    """The build pods of ``specs`` (``what``, ``version``, ``image``), named after what they build on which DTK, so
    a run that was interrupted finds its pods again."""
    pods = []
    for spec in specs:
        digest = hashlib.sha256(f"{spec['image']}|{dtk_image}".encode()).hexdigest()[:8]
        pods.append(
            build_pod(
                name=f"gpufleet-build-{spec['what']}-{digest}",
                namespace=namespace,
                dtk_image=dtk_image,
                builder_image=str(spec["image"]),
                driver_version=str(spec["version"]),
                what=str(spec["what"]),
                rhcos=rhcos,
            )
        )
    return pods


@dataclass(frozen=True)
class BuildPlan:
    """What a run does with the build pods: ``create`` the pods it creates, ``leftovers`` the pods of an earlier
    run it finds (a failed one is deleted and built again, one still building or built is waited for) and deletes
    once their outcome is recorded."""

    create: List[Dict[str, Any]]
    leftovers: List[Dict[str, Any]]

    @property
    def changes(self) -> bool:
        return bool(self.create or self.leftovers)


def plan_builds(pods: Sequence[Mapping[str, Any]], existing: Mapping[str, Optional[Mapping[str, Any]]]) -> BuildPlan:
    """``existing`` maps each pod's name to the pod the cluster has under that name (None when it has none)."""
    create, leftovers = [], []
    for pod in pods:
        found = existing.get(str(pod["metadata"]["name"]))
        if found:
            leftovers.append(dict(found))
        if not found or (build_outcome(found).done and not build_outcome(found).succeeded):
            create.append(dict(pod))
    return BuildPlan(create=create, leftovers=leftovers)


def build_pods_diff(plan: BuildPlan) -> Dict[str, Any]:
    """The diff of the interlock's builds: before, the pods of an earlier run it deletes; after, the pods it creates
    (by name). It deletes those too once their outcome is recorded; the diff is what the run writes on the way."""

    def by_name(pods: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
        return {str(pod["metadata"]["name"]): normalized_for_diff(pod) for pod in pods}

    return {
        "before": {"pods": by_name(plan.leftovers)},
        "after": {"pods": by_name(plan.create)},
        "after_header": "Build pods of the kernel interlock (deleted once their outcome is recorded)",
    }


@dataclass(frozen=True)
class BuildOutcome:
    done: bool
    succeeded: bool
    message: str


def build_outcome(pod: Optional[Mapping[str, Any]]) -> BuildOutcome:
    if not pod:
        return BuildOutcome(done=True, succeeded=False, message="the build pod disappeared")
    status = pod.get("status") or {}
    phase = status.get("phase")
    messages = []
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        detail = state.get("terminated") or state.get("waiting") or {}
        if detail.get("message"):
            messages.append(f"{container.get('name')}: {detail.get('message')}")
    text = "; ".join(messages) or str(status.get("message") or status.get("reason") or "")
    if phase == "Succeeded":
        return BuildOutcome(done=True, succeeded=True, message=text or "built")
    if phase == "Failed":
        return BuildOutcome(done=True, succeeded=False, message=text or "the build failed")
    return BuildOutcome(done=False, succeeded=False, message=text or f"build pod {phase or 'Pending'}")


def driver_image(spec: Mapping[str, Any], *, version: str, rhcos: str, suffix: str = "") -> str:
    """``<repository>/<image>:<version>-rhcos<minor><suffix>``, the tag scheme of NVIDIA's OpenShift images."""
    repository = str(spec.get("repository") or "nvcr.io/nvidia")
    image = str(spec.get("image") or "driver")
    if "@" in image or ":" in image.rsplit("/", 1)[-1]:
        return image
    return f"{repository}/{image}:{version}-rhcos{rhcos_minor(rhcos)}{suffix}"


def halted(findings: Sequence[Finding]) -> bool:
    return any(finding.severity == ERROR for finding in findings)
