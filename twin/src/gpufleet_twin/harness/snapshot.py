"""Loading a cluster from ``kubectl get ... -o yaml|json`` dumps (``--from-snapshot DIR``).

Every ``.yaml``, ``.yml`` and ``.json`` file in the directory (not
recursive) is read: List objects (``kubectl get nodes,pods -o yaml``),
multi-document YAML, or single objects.  Documents that are not Kubernetes
objects (a bare label map, say) and kinds the twin does not serve are
skipped and listed in the summary.

Server-managed fields are dropped (``uid``, ``resourceVersion``,
``managedFields``, ``generation``, ``creationTimestamp``, ``selfLink``,
deletion fields): the store assigns new ones.  Finalizers are dropped too,
since nothing in the twin would ever remove a vendor's finalizer.  Labels,
annotations, spec and status are kept.  Owners are created before their
dependents and ``ownerReferences`` are rewritten to the owners' new UIDs
(references to owners absent from the snapshot are kept as they are).
Missing namespaces are created.

Each Node gets a ``NodeHealth`` built from what it shows: kernel and OS
image from ``status.nodeInfo``, the RHCOS OSTREE version from the NFD label
(or the OS image), GPU product/count/memory from the GFD labels (or the
``nvidia.com/gpu`` capacity), the loaded driver from the
``cuda.driver-version.*`` or older ``cuda.driver.*`` labels, Ready from its
condition, the device plugin as up when GPUs are allocatable.  Pods that
were Running on a loaded node are adopted by the kubelet as they are.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..apiserver.cluster import Twin
from ..kube.state import NodeHealth, SimState
from ..machinery import errors
from ..machinery.kinds import Kinds
from ..machinery.registry import ResourceType
from ..operators.olm import register_olm_kinds

Obj = dict[str, Any]

SNAPSHOT_SUFFIXES = (".yaml", ".yml", ".json")
# What the collection's cluster_snapshot writes beside its Lists: how the snapshot was taken, not an object.
SNAPSHOT_INFO_FILE = "snapshot-info.json"
_DROPPED_METADATA = (
    "uid",
    "resourceVersion",
    "managedFields",
    "generation",
    "creationTimestamp",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "finalizers",
)
# Owners before dependents; anything else between the groups of known kinds.
_ORDER = {
    "Namespace": 0,
    "CustomResourceDefinition": 1,
    "Node": 2,
    "DaemonSet": 4,
    "Deployment": 4,
    "Job": 4,
    "ReplicaSet": 5,
    "ControllerRevision": 6,
    "Pod": 7,
    "Event": 8,
}


@dataclass
class SnapshotLoad:
    node_names: list[str] = field(default_factory=list)
    created: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    def summary(self) -> Obj:
        return {"files": self.files, "created": dict(sorted(self.created.items())), "skipped": self.skipped}


def read_documents(path: Path) -> list[Any]:
    """The objects in one dump file (List items flattened)."""
    text = path.read_text()
    if path.suffix == ".json":
        documents: list[Any] = [json.loads(text)]
    else:
        documents = list(yaml.safe_load_all(text))
    objects: list[Any] = []
    for document in documents:
        if isinstance(document, dict) and isinstance(document.get("items"), list) and "kind" in document:
            objects.extend(document["items"])
        elif document is not None:
            objects.append(document)
    return objects


def load_snapshot(twin: Twin, sim: SimState, directory: Path, *, profile: str) -> SnapshotLoad:
    if not directory.is_dir():
        raise ValueError(f"--from-snapshot: {directory} is not a directory")
    kinds = Kinds.from_registry(twin.registry)
    if profile == "openshift":
        # A cluster's own Subscriptions load as they are; the OLM model adopts them when it starts.
        register_olm_kinds(twin)
    result = SnapshotLoad()
    pending: list[tuple[int, ResourceType, Obj]] = []
    for path in snapshot_files(directory):
        result.files.append(path.name)
        try:
            documents = read_documents(path)
        except (ValueError, yaml.YAMLError) as exc:
            result.skipped.append(f"{path.name}: not parseable ({exc.__class__.__name__})")
            continue
        for position, obj in enumerate(documents):
            if not isinstance(obj, dict) or "kind" not in obj or "metadata" not in obj:
                result.skipped.append(f"{path.name}#{position}: not a Kubernetes object")
                continue
            rtype = _resource_type(twin, obj)
            if rtype is None:
                result.skipped.append(f"{path.name}#{position}: kind {obj.get('apiVersion')}/{obj['kind']} not served")
                continue
            pending.append((_ORDER.get(rtype.kind, 3), rtype, obj))
    pending.sort(key=lambda item: item[0])
    new_uids: dict[str, str] = {}
    for _, rtype, original in pending:
        obj = _clean(original, new_uids)
        namespace = obj["metadata"].get("namespace")
        if rtype.namespaced:
            namespace = namespace or "default"
            if _ensure_namespace(twin, kinds, namespace):
                result.created["Namespace"] = result.created.get("Namespace", 0) + 1
        try:
            created = twin.store.create(rtype, obj, namespace=namespace if rtype.namespaced else None)
        except errors.ApiError as exc:
            result.skipped.append(f"{rtype.kind} {obj['metadata'].get('name')}: {exc.message}")
            continue
        if "status" in obj and created.get("status") != obj["status"] and "status" in rtype.subresources:
            # A real API server resets some kinds' status on create (pods): restore the dumped one.
            restored = dict(created, status=obj["status"])
            created = twin.store.update(rtype, restored, subresource="status")
        old_uid = original["metadata"].get("uid")
        if old_uid:
            new_uids[old_uid] = created["metadata"]["uid"]
        result.created[rtype.kind] = result.created.get(rtype.kind, 0) + 1
        if rtype.key == kinds.node.key:
            sim.add_node(health_from_node(created))
            result.node_names.append(created["metadata"]["name"])
    sim.profile = profile
    return result


def taken_at(directory: Path) -> float | None:
    """When the collection's snapshot was taken, on the source cluster's clock (its info file), else None."""
    path = directory / SNAPSHOT_INFO_FILE
    try:
        text = json.loads(path.read_text()).get("taken_at") or ""
        moment = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except (OSError, ValueError, AttributeError):
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)).timestamp()


def continue_source_clock(clock: Any, directory: Path) -> float:
    """Move a copy's clock on to the moment its snapshot was taken, when that lies ahead; returns the seconds.

    A copy continues its cluster's time: the Events, ledger entries and state annotations it carries are dated by
    the source's clock, and the collection dates everything it writes by the API server's (the copy's) clock.
    A copy that started behind its source (a simulated source running faster than real time, or a source's clock
    ahead of this machine's) would date the rehearsed run before the copied history, and whatever orders by time
    (the latest state change of a node, a run's span) would take the copied past for the present.
    """
    moment = taken_at(directory)
    if moment is None:
        return 0.0
    ahead = moment - clock.now()
    if ahead <= 0:
        return 0.0
    clock.advance(ahead)
    return ahead


def snapshot_files(directory: Path) -> list[Path]:
    """The dump files of a folder, in name order (the collection's info file is read by the rehearsal only)."""
    return sorted(
        p for p in directory.iterdir() if p.suffix in SNAPSHOT_SUFFIXES and p.is_file() and p.name != SNAPSHOT_INFO_FILE
    )


def _resource_type(twin: Twin, obj: Obj) -> ResourceType | None:
    api_version = obj.get("apiVersion", "v1")
    for rtype in twin.registry.all():
        if rtype.kind == obj["kind"] and rtype.api_version == api_version:
            return rtype
    for rtype in twin.registry.all():
        if rtype.kind == obj["kind"]:
            return rtype
    return None


def _clean(original: Obj, new_uids: dict[str, str]) -> Obj:
    # Only metadata is edited here and the store copies what it stores, so a
    # shallow copy keeps ``original`` intact (a deep copy of 100,000 dumped
    # pods was a quarter of a 10,000-node load).
    obj = dict(original)
    meta = obj["metadata"] = dict(original["metadata"])
    for field_name in _DROPPED_METADATA:
        meta.pop(field_name, None)
    if meta.get("annotations"):
        annotations = meta["annotations"] = dict(meta["annotations"])
        annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    refs = meta.get("ownerReferences")
    if refs:
        meta["ownerReferences"] = [dict(ref, uid=new_uids.get(ref.get("uid", ""), ref.get("uid", ""))) for ref in refs]
    return obj


def _ensure_namespace(twin: Twin, kinds: Kinds, namespace: str) -> bool:
    """Create a namespace the dump refers to without containing it; True if created."""
    if twin.store.try_get(kinds.namespace, None, namespace) is not None:
        return False
    twin.store.create(
        kinds.namespace,
        {
            "metadata": {"name": namespace, "labels": {"kubernetes.io/metadata.name": namespace}},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        },
    )
    return True


def health_from_node(node: Obj) -> NodeHealth:
    """What the simulation knows about a node, read back from its API object."""
    labels = node["metadata"].get("labels") or {}
    status = node.get("status") or {}
    info = status.get("nodeInfo") or {}
    kernel = info.get("kernelVersion") or labels.get("feature.node.kubernetes.io/kernel-version.full") or "unknown"
    os_image = info.get("osImage") or ""
    ostree = labels.get("feature.node.kubernetes.io/system-os_release.OSTREE_VERSION")
    if ostree is None:
        match = re.search(r"CoreOS (\d+\.\d+\.\d+-\d+)", os_image)
        ostree = match.group(1) if match else None
    capacity = (status.get("capacity") or {}).get("nvidia.com/gpu")
    allocatable = (status.get("allocatable") or {}).get("nvidia.com/gpu")
    count = _int(labels.get("nvidia.com/gpu.count")) or _int(capacity) or 0
    memory = _int(labels.get("nvidia.com/gpu.memory")) or 0
    if memory > 10_000_000:
        memory //= 1024 * 1024  # old GFD published bytes, newer MiB
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())
    health = NodeHealth(
        name=node["metadata"]["name"],
        kernel=kernel,
        os_image=os_image,
        ostree_version=ostree,
        gpu_product=labels.get("nvidia.com/gpu.product", "") if count else "",
        gpu_count=count,
        gpu_memory_mib=memory,
        ready=ready,
        driver_version=driver_from_labels(labels) if count else None,
        device_plugin_up=bool(_int(allocatable)),
    )
    if info.get("bootID"):
        health.boot_id = info["bootID"]
    return health


def driver_from_labels(labels: dict[str, str]) -> str | None:
    full = labels.get("nvidia.com/cuda.driver-version.full")
    if full:
        return full
    major = labels.get("nvidia.com/cuda.driver.major")
    minor = labels.get("nvidia.com/cuda.driver.minor")
    if not major or not minor:
        return None
    revision = labels.get("nvidia.com/cuda.driver.rev")
    return f"{major}.{minor}.{revision}" if revision else f"{major}.{minor}"


def _int(value: Any) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None
