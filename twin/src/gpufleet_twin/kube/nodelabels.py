"""Node labels that Node Feature Discovery and GPU Feature Discovery would publish.

Pure functions of a node's ``NodeHealth``, modelled on the label sets in
``reference/samples/nodes`` (an H100 node under the GPU Operator, an RHCOS
node's NFD labels).  The seeder uses them for the initial labels and the
kubelet simulation re-applies them when the kernel, the RHCOS image or the
loaded driver changes, the way NFD and GFD relabel a node after a reboot or
a driver reload.

GFD writes the ``cuda.driver*`` labels only from a working NVML: while no
driver is loaded the node keeps the labels of the driver that was last
loaded (they change when the new driver comes up).  Both label generations
are written: ``cuda.driver.{major,minor,rev}`` (old) and
``cuda.driver-version.{full,major,minor,revision}`` (GFD 0.15+), as 550+
nodes carry both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .state import NodeHealth

# Node Feature Discovery's os-release labels (the operators pick per-OS driver images from them).
OSTREE_LABEL = "feature.node.kubernetes.io/system-os_release.OSTREE_VERSION"
OS_ID_LABEL = "feature.node.kubernetes.io/system-os_release.ID"
OS_VERSION_LABEL = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
DRIVER_LABEL_PREFIXES = ("nvidia.com/cuda.driver", "nvidia.com/cuda.runtime")


@dataclass(frozen=True)
class GpuModel:
    product: str  # GFD label value
    smi_name: str  # what nvidia-smi prints
    memory_mib: int
    family: str
    compute: tuple[int, int]
    pci_device_id: str  # lower-case hex, as dcgmi prints it
    power_limit_w: float
    vbios: str
    mig_capable: bool


GPU_MODELS: dict[str, GpuModel] = {
    model.product: model
    for model in (
        GpuModel(
            "NVIDIA-H100-80GB-HBM3",
            "NVIDIA H100 80GB HBM3",
            81559,
            "hopper",
            (9, 0),
            "2330",
            700.0,
            "96.00.A5.00.01",
            True,
        ),
        GpuModel("NVIDIA-H200", "NVIDIA H200", 143771, "hopper", (9, 0), "2335", 700.0, "96.00.AF.00.01", True),
        GpuModel(
            "NVIDIA-A100-SXM4-80GB",
            "NVIDIA A100-SXM4-80GB",
            81920,
            "ampere",
            (8, 0),
            "20b2",
            400.0,
            "92.00.45.00.04",
            True,
        ),
        GpuModel(
            "NVIDIA-A100-SXM4-40GB",
            "NVIDIA A100-SXM4-40GB",
            40960,
            "ampere",
            (8, 0),
            "20b0",
            400.0,
            "92.00.25.00.08",
            True,
        ),
        GpuModel("NVIDIA-L40S", "NVIDIA L40S", 46068, "ada-lovelace", (8, 9), "26b9", 350.0, "95.02.66.00.02", False),
        GpuModel("NVIDIA-A10G", "NVIDIA A10G", 23028, "ampere", (8, 6), "2237", 300.0, "94.02.75.00.01", False),
    )
}

# CUDA version a driver branch ships (driver README "CUDA Toolkit and driver versions").
CUDA_BY_DRIVER_BRANCH: dict[int, str] = {
    470: "11.4",
    510: "11.6",
    525: "12.0",
    535: "12.2",
    545: "12.3",
    550: "12.4",
    555: "12.5",
    560: "12.6",
    565: "12.7",
    570: "12.8",
    575: "12.9",
    580: "13.0",
    590: "13.1",
    595: "13.2",
}


def gpu_model(product: str, *, memory_mib: int | None = None) -> GpuModel:
    model = GPU_MODELS.get(product)
    if model is not None:
        return model
    # An unknown product (from a snapshot): keep its label, guess the rest.
    return GpuModel(
        product, product.replace("-", " "), memory_mib or 0, "unknown", (0, 0), "0000", 300.0, "00.00.00.00.00", False
    )


def cuda_version_for(driver_version: str) -> str:
    try:
        branch = int(driver_version.split(".", maxsplit=1)[0])
    except ValueError:
        return "12.4"
    known = [b for b in CUDA_BY_DRIVER_BRANCH if b <= branch]
    return CUDA_BY_DRIVER_BRANCH[max(known)] if known else "11.0"


def driver_labels(driver_version: str) -> dict[str, str]:
    parts = driver_version.split(".")
    major, minor = parts[0], parts[1] if len(parts) > 1 else "0"
    cuda = cuda_version_for(driver_version)
    cuda_major, _, cuda_minor = cuda.partition(".")
    labels = {
        "nvidia.com/cuda.driver-version.full": driver_version,
        "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver.major": major,
        "nvidia.com/cuda.driver.minor": minor,
        "nvidia.com/cuda.runtime-version.full": cuda,
        "nvidia.com/cuda.runtime-version.major": cuda_major,
        "nvidia.com/cuda.runtime-version.minor": cuda_minor,
        "nvidia.com/cuda.runtime.major": cuda_major,
        "nvidia.com/cuda.runtime.minor": cuda_minor,
    }
    # Two-part versions (595.80) have no revision; GFD leaves the label out.
    if len(parts) > 2:
        labels["nvidia.com/cuda.driver-version.revision"] = parts[2]
        labels["nvidia.com/cuda.driver.rev"] = parts[2]
    return labels


def gpu_labels(health: NodeHealth, *, timestamp: int) -> dict[str, str]:
    """GFD's device labels (without the driver ones)."""
    if health.gpu_count <= 0:
        return {}
    model = gpu_model(health.gpu_product, memory_mib=health.gpu_memory_mib)
    labels = {
        "nvidia.com/gfd.timestamp": str(timestamp),
        "nvidia.com/gpu.count": str(health.gpu_count),
        "nvidia.com/gpu.memory": str(health.gpu_memory_mib),
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": health.gpu_product,
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/mps.capable": "false",
    }
    if model.product in GPU_MODELS:
        # Only what the twin knows about the product; a node loaded from a snapshot
        # with another GPU keeps the family/compute labels it came with.
        labels.update(
            {
                "nvidia.com/gpu.compute.major": str(model.compute[0]),
                "nvidia.com/gpu.compute.minor": str(model.compute[1]),
                "nvidia.com/gpu.family": model.family,
                "nvidia.com/mig.capable": "true" if model.mig_capable else "false",
            }
        )
    return labels


def kernel_labels(kernel: str) -> dict[str, str]:
    """NFD ``kernel-version.*``: 5.14.0-427.40.1.el9_4.x86_64 -> major 5, minor 14, revision 0."""
    numeric = kernel.split("-", maxsplit=1)[0].split(".")
    numeric += ["0"] * (3 - len(numeric))
    return {
        "feature.node.kubernetes.io/kernel-version.full": kernel,
        "feature.node.kubernetes.io/kernel-version.major": numeric[0],
        "feature.node.kubernetes.io/kernel-version.minor": numeric[1],
        "feature.node.kubernetes.io/kernel-version.revision": numeric[2],
    }


def openshift_version_from_ostree(ostree_version: str) -> str:
    """416.94.202410211619-0 -> "4.16" (RHCOS versions start with the OpenShift minor)."""
    head = ostree_version.split(".", maxsplit=1)[0]
    return f"{head[0]}.{head[1:]}" if len(head) >= 2 else head


def rhel_version_from_ostree(ostree_version: str) -> str:
    """416.94.202410211619-0 -> "9.4"."""
    parts = ostree_version.split(".")
    second = parts[1] if len(parts) > 1 else ""
    return f"{second[0]}.{second[1:]}" if len(second) >= 2 else second


def os_release_labels(health: NodeHealth, *, os_id: str, version_id: str) -> dict[str, str]:
    """NFD ``system-os_release.*``; on RHCOS VERSION_ID is the OpenShift version (e.g. 4.17)."""
    labels: dict[str, str] = {}
    if health.ostree_version:
        ocp = openshift_version_from_ostree(health.ostree_version)
        version_id = ocp
        labels.update(
            {
                "feature.node.kubernetes.io/system-os_release.OSTREE_VERSION": health.ostree_version,
                "feature.node.kubernetes.io/system-os_release.OPENSHIFT_VERSION": ocp,
                "feature.node.kubernetes.io/system-os_release.RHEL_VERSION": rhel_version_from_ostree(
                    health.ostree_version
                ),
            }
        )
    major, _, minor = version_id.partition(".")
    labels.update(
        {
            "feature.node.kubernetes.io/system-os_release.ID": os_id,
            "feature.node.kubernetes.io/system-os_release.VERSION_ID": version_id,
            "feature.node.kubernetes.io/system-os_release.VERSION_ID.major": major,
            "feature.node.kubernetes.io/system-os_release.VERSION_ID.minor": minor,
        }
    )
    return labels


def tracked_labels(health: NodeHealth, *, current: dict[str, str], timestamp: int) -> dict[str, str]:
    """Labels the kubelet simulation keeps in step with ``health`` (others are left alone).

    ``current`` are the node's labels now: the GFD timestamp is only renewed
    when something GFD publishes changed, to avoid a write per node per pass.
    """
    desired = kernel_labels(health.kernel)
    if health.ostree_version:
        os_id = current.get("feature.node.kubernetes.io/system-os_release.ID", "rhcos")
        desired.update(os_release_labels(health, os_id=os_id, version_id=""))
    if health.gpu_count > 0:
        # Only what NodeHealth says; sharing, MIG and family labels stay as seeded or loaded.
        gfd = {
            "nvidia.com/gfd.timestamp": str(timestamp),
            "nvidia.com/gpu.count": str(health.gpu_count),
            "nvidia.com/gpu.memory": str(health.gpu_memory_mib),
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": health.gpu_product,
        }
        if health.driver_version is not None:
            gfd.update(driver_labels(health.driver_version))
        changed = any(current.get(k) != v for k, v in gfd.items() if k != "nvidia.com/gfd.timestamp")
        if not changed:
            gfd.pop("nvidia.com/gfd.timestamp")
        desired.update(gfd)
    return desired


def node_os_tag(labels: Mapping[str, str]) -> str | None:
    """getNodeOSTag: NFD os-release ID and VERSION_ID, e.g. ubuntu22.04 or rhcos4.16."""
    os_id, version = labels.get(OS_ID_LABEL), labels.get(OS_VERSION_LABEL)
    if not os_id or not version:
        return None
    return f"{os_id}{version}"
