"""Seeding a realistic GPU cluster: namespaces, nodes and workloads.

Nodes are modelled on ``reference/samples/nodes``: NFD labels (kernel,
os-release, on RHCOS the OSTREE version, PCI vendors), GFD labels (product,
count, memory, driver and CUDA versions, ``gpu.deploy.*``), topology
(``topology.kubernetes.io/zone``, ``gpufleet.io/rack=rack-<k>`` with 8 nodes
per rack), ``status.nodeInfo`` as an OpenShift 4.16 RHCOS or an Ubuntu
22.04 node reports it, capacity/allocatable with ``nvidia.com/gpu`` and the
four kubelet conditions.

Workers are ``gpu-worker-<i>`` with the index zero-padded to the width of
the node count (at least 3 digits), so names sort naturally.  Control-plane
nodes: ``master-0..2`` on OpenShift, ``control-plane-0`` on Kubernetes.

Workload rule (keeps seeding O(N) and the pod count proportionate): the
first ``min(N, 256)`` workers carry workloads:

- ``ml-training``: Deployments ``llm-train-<k>`` of 4 replicas x 4 GPUs
  (one Deployment per 4 such workers; every other one has a PDB with
  ``maxUnavailable: 1``; every third uses a secondary network through the
  Multus annotation);
- ``ml-batch``: Jobs ``batch-eval-<k>`` (one per 8 such workers, at most 32),
  2 pods x 1 GPU, completing after an hour of simulated time;
- ``ml-inference``: one Deployment ``llm-inference`` (2 x 2 GPUs) with a
  PDB ``minAvailable: 1``;
- with ``distributed_training`` (opt-in: the scenario key, or ``serve
  --distributed-training``): a StatefulSet ``ml-training/dist-train``
  (``Parallel``, up to 4 ranks x 4 GPUs, a ``checkpoints`` claim template
  kept as data, the headless Service ``dist-train``) with a PDB
  ``maxUnavailable: 1``.

The pods themselves are created by the simulated controllers once the twin
runs, as in a real cluster.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

from ..apiserver.cluster import Twin
from ..kube import nodelabels
from ..kube.kubelet import RUN_FOR_ANNOTATION
from ..kube.namespaces import namespace_object
from ..kube.podutil import MULTUS_NETWORKS_ANNOTATION, UNSCHEDULABLE_TAINT
from ..kube.state import IbPort, NodeHealth, SimState
from ..machinery.clock import parse_rfc3339
from ..machinery.kinds import Kinds

Obj = dict[str, Any]

NODES_PER_RACK = 8
WORKLOAD_NODES_MAX = 256
RACK_LABEL = "gpufleet.io/rack"
GPU_DEPLOY_COMPONENTS = (
    "container-toolkit",
    "dcgm",
    "dcgm-exporter",
    "device-plugin",
    "driver",
    "gpu-feature-discovery",
    "mig-manager",
    "node-status-exporter",
    "operator-validator",
)


@dataclass(frozen=True)
class ProfileDefaults:
    kernel: str
    os_image: str
    ostree_version: str | None
    os_id: str
    os_version_id: str
    kubelet_version: str
    container_runtime: str
    control_plane_names: tuple[str, ...]
    control_plane_taint: str


PROFILES: dict[str, ProfileDefaults] = {
    "openshift": ProfileDefaults(
        kernel="5.14.0-427.40.1.el9_4.x86_64",
        os_image="Red Hat Enterprise Linux CoreOS 416.94.202410211619-0",
        ostree_version="416.94.202410211619-0",
        os_id="rhcos",
        os_version_id="4.16",
        kubelet_version="v1.29.10+67d3387",
        container_runtime="cri-o://1.29.10-3.rhaos4.16.git319967c.el9",
        control_plane_names=("master-0", "master-1", "master-2"),
        control_plane_taint="node-role.kubernetes.io/master",
    ),
    "kubernetes": ProfileDefaults(
        kernel="5.15.0-124-generic",
        os_image="Ubuntu 22.04.5 LTS",
        ostree_version=None,
        os_id="ubuntu",
        os_version_id="22.04",
        kubelet_version="v1.31.4",
        container_runtime="containerd://1.7.24",
        control_plane_names=("control-plane-0",),
        control_plane_taint="node-role.kubernetes.io/control-plane",
    ),
}


@dataclass(frozen=True)
class SeedSpec:
    nodes: int = 4
    profile: str = "kubernetes"
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    gpu_count: int = 8
    gpu_memory_mib: int | None = None  # default: the product's memory
    kernel: str | None = None  # default: the profile's
    os_image: str | None = None
    ostree_version: str | None = None
    # The driver loaded on the workers when the cluster starts (the GPU Operator
    # v24.9.0 default); the GPU Operator simulation reloads from its DaemonSet.
    driver_version: str = "550.127.05"
    dcgm_version: str = "3.3.8"
    mofed_version: str = "24.07-0.6.1.0"
    ib_ports: int = 8
    ib_firmware: str = "28.39.1002"
    workloads: bool = True
    # Also the StatefulSet-based distributed training job (opt-in: the existing seeded set stays as it was).
    distributed_training: bool = False
    cordoned: tuple[str, ...] = ()
    zones: int = 3

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"unknown profile {self.profile!r}: use one of {', '.join(PROFILES)}")
        if self.nodes < 0:
            raise ValueError("nodes cannot be negative")

    @property
    def defaults(self) -> ProfileDefaults:
        return PROFILES[self.profile]

    @property
    def gpu_operator_namespace(self) -> str:
        return "nvidia-gpu-operator" if self.profile == "openshift" else "gpu-operator"

    @property
    def network_operator_namespace(self) -> str:
        return "nvidia-network-operator"

    def namespaces(self) -> list[str]:
        names = [
            "default",
            "kube-system",
            "kube-public",
            "kube-node-lease",
            self.gpu_operator_namespace,
            self.network_operator_namespace,
        ]
        if self.profile == "openshift":
            names += ["openshift-machine-config-operator", "openshift-operators", "openshift-monitoring"]
        if self.workloads:
            names += ["ml-training", "ml-batch", "ml-inference"]
        return names

    def worker_name(self, index: int) -> str:
        return f"gpu-worker-{index:0{worker_name_width(self.nodes)}d}"


@dataclass
class SeedResult:
    worker_names: list[str] = field(default_factory=list)
    control_plane_names: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    workload_objects: int = 0


def worker_name_width(count: int) -> int:
    return max(3, len(str(max(count, 1))))


def seed_cluster(twin: Twin, sim: SimState, spec: SeedSpec) -> SeedResult:
    """Create namespaces, nodes (with their NodeHealth) and workloads; O(nodes)."""
    kinds = Kinds.from_registry(twin.registry)
    result = SeedResult()
    for namespace in spec.namespaces():
        if twin.store.try_get(kinds.namespace, None, namespace) is None:
            twin.store.create(kinds.namespace, namespace_object(namespace, profile=spec.profile))
        result.namespaces.append(namespace)
    now_iso = twin.clock.iso()
    for index, name in enumerate(spec.defaults.control_plane_names):
        health = _control_plane_health(spec, name)
        sim.add_node(health)
        # Nodes are written as restored etcd entries: complete objects, no admission, no copy.
        twin.store.create(
            kinds.node, node_object(health, spec=spec, index=index, control_plane=True, now=now_iso), restore=True
        )
        result.control_plane_names.append(name)
    cordoned = set(spec.cordoned)
    for index in range(1, spec.nodes + 1):
        name = spec.worker_name(index)
        health = worker_health(spec, name)
        sim.add_node(health)
        node = node_object(health, spec=spec, index=index, control_plane=False, now=now_iso)
        if name in cordoned:
            node["spec"]["unschedulable"] = True
            node["spec"].setdefault("taints", []).append({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"})
        twin.store.create(kinds.node, node, restore=True)
        result.worker_names.append(name)
    if spec.workloads:
        for rtype, obj in workload_objects(spec):
            twin.store.create(getattr(kinds, rtype), obj)
            result.workload_objects += 1
    return result


def worker_health(spec: SeedSpec, name: str) -> NodeHealth:
    defaults = spec.defaults
    model = nodelabels.gpu_model(spec.gpu_product, memory_mib=spec.gpu_memory_mib)
    ib_ports = [
        IbPort(device=f"mlx5_{i}", port=1, rate=400, firmware=spec.ib_firmware, ca_type="MT4129")
        for i in range(spec.ib_ports)
    ]
    return NodeHealth(
        name=name,
        kernel=spec.kernel or defaults.kernel,
        os_image=spec.os_image or defaults.os_image,
        ostree_version=spec.ostree_version or defaults.ostree_version,
        gpu_product=spec.gpu_product,
        gpu_count=spec.gpu_count,
        gpu_memory_mib=spec.gpu_memory_mib or model.memory_mib,
        boot_id=_uuid(name, "boot"),
        driver_version=spec.driver_version,
        device_plugin_up=True,
        dcgm_version=spec.dcgm_version,
        mofed_version=spec.mofed_version,
        ib_ports=ib_ports,
    )


def _control_plane_health(spec: SeedSpec, name: str) -> NodeHealth:
    defaults = spec.defaults
    return NodeHealth(
        name=name,
        kernel=spec.kernel or defaults.kernel,
        os_image=spec.os_image or defaults.os_image,
        ostree_version=spec.ostree_version or defaults.ostree_version,
        gpu_product="",
        gpu_count=0,
        gpu_memory_mib=0,
        boot_id=_uuid(name, "boot"),
        device_plugin_up=False,
    )


def node_object(health: NodeHealth, *, spec: SeedSpec, index: int, control_plane: bool, now: str) -> Obj:
    defaults = spec.defaults
    name = health.name
    zone = f"zone-{'abcdefgh'[(index - 1) % max(1, spec.zones) % 8]}"
    labels: dict[str, str] = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "topology.kubernetes.io/region": "region-1",
        "topology.kubernetes.io/zone": zone,
        "feature.node.kubernetes.io/cpu-model.vendor_id": "AMD" if not control_plane else "Intel",
        "feature.node.kubernetes.io/cpu-hardware_multithreading": "true",
        "feature.node.kubernetes.io/kernel-config.NO_HZ": "true",
        "feature.node.kubernetes.io/storage-nonrotationaldisk": "true",
    }
    labels.update(nodelabels.kernel_labels(health.kernel))
    labels.update(nodelabels.os_release_labels(health, os_id=defaults.os_id, version_id=defaults.os_version_id))
    if spec.profile == "openshift":
        labels["node.openshift.io/os_id"] = "rhcos"
    annotations = {
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
    }
    taints: list[Obj] = []
    if control_plane:
        labels["node-role.kubernetes.io/master"] = ""
        labels["node-role.kubernetes.io/control-plane"] = ""
        taints.append({"key": defaults.control_plane_taint, "effect": "NoSchedule"})
        instance = "m6i.4xlarge" if spec.profile == "openshift" else "control-plane"
    else:
        labels["node-role.kubernetes.io/worker"] = ""
        labels[RACK_LABEL] = f"rack-{(index - 1) // NODES_PER_RACK + 1}"
        labels.update(
            {
                "feature.node.kubernetes.io/pci-10de.present": "true",
                "feature.node.kubernetes.io/pci-15b3.present": "true",
                "feature.node.kubernetes.io/pci-15b3.sriov.capable": "true",
                "feature.node.kubernetes.io/network-sriov.capable": "true",
                "feature.node.kubernetes.io/rdma.available": "true",
                "feature.node.kubernetes.io/rdma.capable": "true",
            }
        )
        labels.update(nodelabels.gpu_labels(health, timestamp=int(_epoch(now))))
        if health.driver_version is not None:
            labels.update(nodelabels.driver_labels(health.driver_version))
        labels.update({f"nvidia.com/gpu.deploy.{component}": "true" for component in GPU_DEPLOY_COMPONENTS})
        labels["nvidia.com/gpu.machine"] = "PowerEdge-XE9680"
        labels["nvidia.com/mig.config"] = "all-disabled"
        instance = "PowerEdge-XE9680"
    labels["node.kubernetes.io/instance-type"] = instance
    if spec.profile == "openshift":
        pool = "master" if control_plane else "worker"
        rendered = f"rendered-{pool}-{hashlib.sha256(f'{pool}/{defaults.os_image}'.encode()).hexdigest()[:32]}"
        annotations.update(
            {
                "machineconfiguration.openshift.io/currentConfig": rendered,
                "machineconfiguration.openshift.io/desiredConfig": rendered,
                "machineconfiguration.openshift.io/state": "Done",
                "machineconfiguration.openshift.io/reason": "",
            }
        )
    pod_cidr_index = index * 2 + (0 if not control_plane else 20_000)
    pod_cidr = f"10.{128 + (pod_cidr_index // 256) % 64}.{pod_cidr_index % 256}.0/23"
    node_spec: Obj = {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]}
    if taints:
        node_spec["taints"] = taints
    return {
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": node_spec,
        "status": _node_status(health, spec=spec, index=index, control_plane=control_plane, now=now),
    }


def _node_status(health: NodeHealth, *, spec: SeedSpec, index: int, control_plane: bool, now: str) -> Obj:
    defaults = spec.defaults
    if control_plane:
        cpu, memory, pods = "16", "65023908Ki", "250"
        allocatable_cpu, allocatable_memory = "15500m", "63873956Ki"
        address = f"10.0.0.{10 + index}"
    else:
        cpu, memory, pods = "224", "2113440196Ki", "250"
        allocatable_cpu, allocatable_memory = "223500m", "2112290244Ki"
        address = f"10.1.{(index - 1) // 250}.{(index - 1) % 250 + 4}"
    capacity = {
        "cpu": cpu,
        "ephemeral-storage": "3748742148Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": memory,
        "pods": pods,
    }
    allocatable = dict(
        capacity, cpu=allocatable_cpu, memory=allocatable_memory, **{"ephemeral-storage": "3454817892021"}
    )
    if health.gpu_count > 0:
        capacity["nvidia.com/gpu"] = str(health.gpu_count)
        allocatable["nvidia.com/gpu"] = str(health.gpus_allocatable)
    ready = health.ready
    conditions = [
        _condition(
            "MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available", now
        ),
        _condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure", now),
        _condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available", now),
        _condition(
            "Ready",
            "True" if ready else "False",
            "KubeletReady" if ready else "KubeletNotReady",
            "kubelet is posting ready status" if ready else "kubelet is not ready",
            now,
        ),
    ]
    kubelet_version = defaults.kubelet_version
    return {
        "addresses": [{"address": address, "type": "InternalIP"}, {"address": health.name, "type": "Hostname"}],
        "capacity": capacity,
        "allocatable": allocatable,
        "conditions": conditions,
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "architecture": "amd64",
            "bootID": health.boot_id,
            "containerRuntimeVersion": defaults.container_runtime,
            "kernelVersion": health.kernel,
            "kubeProxyVersion": kubelet_version,
            "kubeletVersion": kubelet_version,
            "machineID": _uuid(health.name, "machine").replace("-", ""),
            "operatingSystem": "linux",
            "osImage": health.os_image,
            "systemUUID": _uuid(health.name, "system"),
        },
    }


def _condition(kind: str, status: str, reason: str, message: str, now: str) -> Obj:
    return {
        "type": kind,
        "status": status,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    }


def _uuid(*parts: str) -> str:
    digest = hashlib.sha256("/".join(parts).encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _epoch(iso: str) -> float:
    return parse_rfc3339(iso)


# -- workloads -----------------------------------------------------------------------------------------------------
def workload_objects(spec: SeedSpec) -> list[tuple[str, Obj]]:
    """(kind attribute of ``Kinds``, object) for the seeded workloads; see the module docstring for the rule."""
    bearing = min(spec.nodes, WORKLOAD_NODES_MAX)
    if bearing <= 0 or spec.gpu_count <= 0:
        return []
    objects: list[tuple[str, Obj]] = []
    image = "nvcr.io/nvidia/pytorch:24.09-py3"
    gpus_per_pod = max(1, min(4, spec.gpu_count // 2))
    for k in range(1, math.ceil(bearing / 4) + 1):
        name = f"llm-train-{k:02d}"
        annotations = {}
        if k % 3 == 1:
            annotations[MULTUS_NETWORKS_ANNOTATION] = '[{"name": "ib-sriov-net", "namespace": "ml-training"}]'
        objects.append(
            (
                "deployment",
                _deployment(
                    name, "ml-training", replicas=4, gpus=gpus_per_pod, image=image, annotations=annotations, team="llm"
                ),
            )
        )
        if k % 2 == 1:
            objects.append(("pdb", _pdb(name, "ml-training", max_unavailable=1)))
    for k in range(1, min(32, math.ceil(bearing / 8)) + 1):
        objects.append(("job", _job(f"batch-eval-{k:02d}", "ml-batch", image=image)))
    objects.append(
        (
            "deployment",
            _deployment(
                "llm-inference",
                "ml-inference",
                replicas=2,
                gpus=min(2, spec.gpu_count),
                image="nvcr.io/nvidia/tritonserver:24.09-py3",
                annotations={},
                team="serving",
            ),
        )
    )
    objects.append(("pdb", _pdb("llm-inference", "ml-inference", min_available=1)))
    if spec.distributed_training:
        ranks = min(4, bearing)
        objects.append(("service", _headless_service("dist-train", "ml-training")))
        objects.append(("statefulset", _statefulset("dist-train", "ml-training", replicas=ranks, gpus=gpus_per_pod)))
        objects.append(("pdb", _pdb("dist-train", "ml-training", max_unavailable=1)))
    return objects


def _headless_service(name: str, namespace: str) -> Obj:
    # The governing Service of a StatefulSet: pods resolve each other as <pod>.<service>.
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {"clusterIP": "None", "selector": {"app": name}, "ports": [{"name": "rdzv", "port": 29500}]},
    }


def _statefulset(name: str, namespace: str, *, replicas: int, gpus: int) -> Obj:
    labels = {"app": name, "team": "llm"}
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            # Ranks start together, as torchrun's rendezvous expects.
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "nvcr.io/nvidia/pytorch:24.09-py3",
                            "command": ["torchrun"],
                            "args": [
                                f"--nnodes={replicas}",
                                f"--nproc-per-node={gpus}",
                                f"--rdzv-endpoint={name}-0.{name}:29500",
                                "train.py",
                            ],
                            "resources": {
                                "limits": {"nvidia.com/gpu": str(gpus)},
                                "requests": {"cpu": "8", "memory": "64Gi"},
                            },
                            "volumeMounts": [{"name": "checkpoints", "mountPath": "/checkpoints"}],
                        }
                    ],
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "nodeSelector": {"nvidia.com/gpu.present": "true"},
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "checkpoints"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "100Gi"}}},
                }
            ],
        },
    }


def _deployment(
    name: str, namespace: str, *, replicas: int, gpus: int, image: str, annotations: dict[str, str], team: str
) -> Obj:
    labels = {"app": name, "team": team}
    template_meta: Obj = {"labels": labels}
    if annotations:
        template_meta["annotations"] = annotations
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": {
                "metadata": template_meta,
                "spec": {
                    "containers": [
                        {
                            "name": "trainer" if team == "llm" else "server",
                            "image": image,
                            "command": ["torchrun"] if team == "llm" else ["tritonserver"],
                            "args": ["--nproc-per-node", str(gpus), "train.py"]
                            if team == "llm"
                            else ["--model-repository=/models"],
                            "resources": {
                                "limits": {"nvidia.com/gpu": str(gpus)},
                                "requests": {"cpu": "8", "memory": "64Gi"},
                            },
                        }
                    ],
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "nodeSelector": {"nvidia.com/gpu.present": "true"},
                },
            },
        },
    }


def _pdb(name: str, namespace: str, *, max_unavailable: int | None = None, min_available: int | None = None) -> Obj:
    spec: Obj = {"selector": {"matchLabels": {"app": name}}}
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    if min_available is not None:
        spec["minAvailable"] = min_available
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def _job(name: str, namespace: str, *, image: str) -> Obj:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "batch-eval"}},
        "spec": {
            "completions": 2,
            "parallelism": 2,
            "backoffLimit": 4,
            "template": {
                "metadata": {"labels": {"app": "batch-eval"}, "annotations": {RUN_FOR_ANNOTATION: "3600"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "eval",
                            "image": image,
                            "command": ["python", "evaluate.py", "--suite", "mmlu"],
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                    "nodeSelector": {"nvidia.com/gpu.present": "true"},
                },
            },
        },
    }
