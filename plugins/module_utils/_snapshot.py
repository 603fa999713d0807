# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""A read-only snapshot of a cluster for the twin's ``--from-snapshot`` loader (collection-internal).

What the rehearsal (playbooks/rehearse.yml) needs to replay a stage on a copy
of the cluster: nodes, pods with their owner references, the workloads that own
them, PodDisruptionBudgets, DaemonSets and their ControllerRevisions, the
operators' CRs, the upgrade controller's Events and this collection's own
ledger ConfigMap. Each kind is one ``kubectl get -o json``-shaped List file.

What it never holds: Secrets (not even listed), the data of any ConfigMap but
the collection's ledger (read by name, never listed), ``env[].value``,
``command`` and ``args`` of containers (a password or a token is often set
inline there) and the
``last-applied-configuration`` annotation (a copy of whatever was applied,
secrets included). Node and namespace names can be replaced by a stable
mapping (``anonymize``): the same name always gives the same alias for one
salt, so two snapshots of one cluster line up.

Pure parts (what to keep, how to clean and rename an object, the file layout)
are apart from the I/O (``take_snapshot``), which only lists and gets: every
list is read in pages (``limit``/``continue``) and bounded by ``max_objects``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError, KubeApiError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import KubeApi
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import (
    CLUSTER_POLICIES,
    CLUSTER_VERSIONS,
    CONFIGMAPS,
    CONTROLLER_REVISIONS,
    CSVS,
    DAEMONSETS,
    DEPLOYMENTS,
    EVENTS,
    JOBS,
    MACHINE_CONFIG_POOLS,
    NAMESPACES,
    NIC_CLUSTER_POLICIES,
    NODES,
    NVIDIA_DRIVERS,
    PDBS,
    PODS,
    SUBSCRIPTIONS,
    ResourceRef,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._ledger import LEDGER_DATA_KEY

Obj = Dict[str, Any]

# The file the snapshot writes beside the Lists: what it holds and how it was taken (not a Kubernetes object).
INFO_FILE = "snapshot-info.json"
SNAPSHOT_FORMAT = 1

REPLICA_SETS = ResourceRef("apps/v1", "replicasets", "ReplicaSet", True)
STATEFUL_SETS = ResourceRef("apps/v1", "statefulsets", "StatefulSet", True)
SRIOV_NODE_POLICIES = ResourceRef(
    "sriovnetwork.openshift.io/v1", "sriovnetworknodepolicies", "SriovNetworkNodePolicy", True
)
SRIOV_NODE_STATES = ResourceRef("sriovnetwork.openshift.io/v1", "sriovnetworknodestates", "SriovNetworkNodeState", True)
SRIOV_OPERATOR_CONFIGS = ResourceRef(
    "sriovnetwork.openshift.io/v1", "sriovoperatorconfigs", "SriovOperatorConfig", True
)

# Listed whole, in this order (owners before dependents does not matter: the loader orders them).
LISTED_KINDS: Tuple[ResourceRef, ...] = (
    NAMESPACES,
    NODES,
    DAEMONSETS,
    CONTROLLER_REVISIONS,
    DEPLOYMENTS,
    REPLICA_SETS,
    STATEFUL_SETS,
    JOBS,
    PODS,
    PDBS,
    CLUSTER_POLICIES,
    NVIDIA_DRIVERS,
    NIC_CLUSTER_POLICIES,
    SRIOV_NODE_POLICIES,
    SRIOV_NODE_STATES,
    SRIOV_OPERATOR_CONFIGS,
    MACHINE_CONFIG_POOLS,
    CLUSTER_VERSIONS,
    CSVS,
    SUBSCRIPTIONS,
)
# Kinds a cluster may not serve at all (no such operator, not OpenShift): absent, not an error.
OPTIONAL_GROUPS = frozenset(
    {
        "nvidia.com",
        "mellanox.com",
        "sriovnetwork.openshift.io",
        "machineconfiguration.openshift.io",
        "config.openshift.io",
        "operators.coreos.com",
    }
)
# The Events of past upgrades: the operators' upgrade controllers (k8s-operator-libs records them on the Node
# with these reasons) and the collection's own node steps.
UPGRADE_EVENT_REASONS = frozenset({"GPUDriverUpgrade", "OFEDDriverUpgrade"})
UPGRADE_EVENT_SOURCE_PREFIX = "gpufleet"
LEDGER_CONFIGMAP = "gpufleet-upgrade-ledger"
# Namespaces whose names say what runs there: never anonymised (the operators are found by them).
SYSTEM_NAMESPACE_PREFIXES = ("kube-", "openshift", "nvidia-")
SYSTEM_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
_DROPPED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)


@dataclass(frozen=True)
class SnapshotSettings:
    directory: str
    anonymize: bool = False
    anonymize_salt: str = ""
    ledger_namespaces: Tuple[str, ...] = ()
    ledger_configmap: str = LEDGER_CONFIGMAP
    page_size: int = 500
    max_objects: int = 200_000
    keep_namespaces: Tuple[str, ...] = ()


@dataclass
class Snapshot:
    """What was read, by file name (one List per kind), and what was left out."""

    lists: Dict[str, List[Obj]] = field(default_factory=dict)
    absent: List[str] = field(default_factory=list)
    dropped: Dict[str, int] = field(default_factory=dict)

    def count(self, what: str, number: int = 1) -> None:
        self.dropped[what] = self.dropped.get(what, 0) + number


# -- pure: which file, what to keep, how to clean ---------------------------------------------------
def file_name(ref: ResourceRef) -> str:
    """``/apis/apps/v1/daemonsets`` -> ``apis_apps_v1_daemonsets.json`` (as bench/audit_snapshot.py names them)."""
    return ref.path().strip("/").replace("/", "_") + ".json"


def is_upgrade_event(event: Mapping[str, Any]) -> bool:
    """An Event of an earlier upgrade: the upgrade controllers' state changes, or one this collection wrote."""
    if event.get("reason") in UPGRADE_EVENT_REASONS:
        return True
    source = (event.get("source") or {}).get("component") or event.get("reportingComponent") or ""
    return str(source).startswith(UPGRADE_EVENT_SOURCE_PREFIX)


def clean_object(obj: Mapping[str, Any], snapshot: Snapshot) -> Obj:
    """A copy without what a snapshot must not carry: inline env values, command lines, last-applied configurations."""
    copy: Obj = json.loads(json.dumps(obj))
    meta = copy.setdefault("metadata", {})
    meta.pop("managedFields", None)
    annotations = meta.get("annotations") or {}
    for key in _DROPPED_ANNOTATIONS:
        if annotations.pop(key, None) is not None:
            snapshot.count("last-applied-configuration annotations")
    for spec in _pod_specs(copy):
        for container in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
            for variable in container.get("env") or []:
                if isinstance(variable, dict) and "value" in variable:
                    variable["value"] = ""
                    snapshot.count("container env values")
            for key in ("command", "args"):
                if container.get(key):
                    container[key] = []
                    snapshot.count(f"container {key}")
    return copy


def _pod_specs(obj: Obj) -> Iterable[Obj]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return []
    if obj.get("kind") == "Pod":
        return [spec]
    template = (spec.get("template") or {}).get("spec")
    job_template = (((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}).get("spec")
    return [found for found in (template, job_template) if isinstance(found, dict)]


def alias(name: str, *, prefix: str, salt: str) -> str:
    """A stable alias: the same name and salt always give the same one."""
    digest = hmac.new(salt.encode(), name.encode(), hashlib.sha256).hexdigest()
    return f"{prefix}-{digest[:10]}"


def anonymization_map(
    lists: Mapping[str, Sequence[Obj]], *, salt: str, keep_namespaces: Iterable[str] = ()
) -> Dict[str, str]:
    """Old name -> alias for every node and every workload namespace (system and operator namespaces stay)."""
    kept = set(keep_namespaces)
    mapping: Dict[str, str] = {}
    for node in lists.get(file_name(NODES), ()):
        name = str(node["metadata"]["name"])
        mapping[name] = alias(name, prefix="node", salt=salt)
    for namespace in lists.get(file_name(NAMESPACES), ()):
        name = str(namespace["metadata"]["name"])
        if name in kept or name in SYSTEM_NAMESPACES or name.startswith(SYSTEM_NAMESPACE_PREFIXES):
            continue
        mapping[name] = alias(name, prefix="ns", salt=salt)
    return mapping


def name_pattern(mapping: Mapping[str, str]) -> "re.Pattern[str]":
    """Matches a mapped name as a whole word inside a longer text (an Event's message, a pod's name)."""
    names = "|".join(re.escape(name) for name in sorted(mapping, key=len, reverse=True)) or "(?!)"
    return re.compile(r"(?<![A-Za-z0-9.])(" + names + r")(?![A-Za-z0-9.])")


def anonymize(obj: Any, mapping: Mapping[str, str], pattern: "re.Pattern[str]") -> Any:
    """Every string equal to a mapped name replaced, and every mapped name inside a longer string."""
    if isinstance(obj, dict):
        return {key: anonymize(value, mapping, pattern) for key, value in obj.items()}
    if isinstance(obj, list):
        return [anonymize(value, mapping, pattern) for value in obj]
    if isinstance(obj, str):
        if obj in mapping:
            return mapping[obj]
        return pattern.sub(lambda match: mapping[match.group(1)], obj)
    return obj


def snapshot_info(snapshot: Snapshot, *, server: str, anonymized: bool, taken_at: str) -> Obj:
    return {
        "format": SNAPSHOT_FORMAT,
        "taken_at": taken_at,
        "server": "" if anonymized else server,
        "anonymized": anonymized,
        "counts": {name: len(items) for name, items in sorted(snapshot.lists.items())},
        "absent": sorted(snapshot.absent),
        "left_out": dict(sorted(snapshot.dropped.items())),
        "never_read": ["Secrets", "ConfigMaps other than the collection's ledger"],
    }


# -- I/O: read only -------------------------------------------------------------------------------
def read_kind(api: KubeApi, ref: ResourceRef, *, settings: SnapshotSettings) -> Optional[List[Obj]]:
    """Every object of one kind in pages, or None when the cluster does not serve the kind."""
    items: List[Obj] = []
    try:
        for item in api.iter_list(ref, page_size=settings.page_size):
            items.append(item)
            if len(items) > settings.max_objects:
                raise InvalidInputError(
                    f"{ref.kind} has more than max_objects={settings.max_objects} objects: raise max_objects to "
                    "snapshot a cluster this big"
                )
    except KubeApiError as err:
        group = ref.api_version.rpartition("/")[0]
        if err.status == 404 and group in OPTIONAL_GROUPS:
            return None
        raise
    return items


def read_ledgers(api: KubeApi, *, settings: SnapshotSettings, namespaces: Iterable[str]) -> List[Obj]:
    """The collection's ledger ConfigMap in each namespace that has one (read by name; no other ConfigMap)."""
    found = []
    for namespace in sorted(set(namespaces)):
        configmap = api.get(CONFIGMAPS, settings.ledger_configmap, namespace=namespace)
        if configmap is not None:
            configmap.setdefault("kind", "ConfigMap")
            configmap.setdefault("apiVersion", "v1")
            data = configmap.get("data") or {}
            configmap["data"] = {LEDGER_DATA_KEY: data.get(LEDGER_DATA_KEY, "")}
            found.append(configmap)
    return found


def ledger_namespaces(lists: Mapping[str, Sequence[Obj]], settings: SnapshotSettings) -> List[str]:
    """The namespaces given, else where the GPU Operator runs (the ledger's default namespace)."""
    if settings.ledger_namespaces:
        return list(settings.ledger_namespaces)
    found = [
        str((policy.get("status") or {}).get("namespace"))
        for policy in lists.get(file_name(CLUSTER_POLICIES), ())
        if (policy.get("status") or {}).get("namespace")
    ]
    return found or ["nvidia-gpu-operator"]


def take_snapshot(api: KubeApi, *, settings: SnapshotSettings, check_mode: bool, taken_at: str) -> Dict[str, Any]:
    """Read the cluster and (unless ``check_mode``) write the snapshot folder; returns the module's result."""
    if settings.page_size < 1 or settings.max_objects < 1:
        raise InvalidInputError("page_size and max_objects must be at least 1")
    if settings.anonymize and not settings.anonymize_salt:
        raise InvalidInputError("anonymize needs anonymize_salt (any secret string of yours: it keys the aliases)")
    snapshot = Snapshot()
    for ref in LISTED_KINDS:
        items = read_kind(api, ref, settings=settings)
        if items is None:
            snapshot.absent.append(ref.kind)
            continue
        snapshot.lists[file_name(ref)] = [clean_object(item, snapshot) for item in items]
    events = [event for event in read_kind(api, EVENTS, settings=settings) or [] if is_upgrade_event(event)]
    snapshot.lists[file_name(EVENTS)] = [clean_object(event, snapshot) for event in events]
    ledgers = read_ledgers(api, settings=settings, namespaces=ledger_namespaces(snapshot.lists, settings))
    snapshot.lists[file_name(CONFIGMAPS)] = ledgers
    mapping: Dict[str, str] = {}
    if settings.anonymize:
        mapping = anonymization_map(
            snapshot.lists, salt=settings.anonymize_salt, keep_namespaces=settings.keep_namespaces
        )
        pattern = name_pattern(mapping)
        snapshot.lists = {
            name: [anonymize(item, mapping, pattern) for item in items] for name, items in snapshot.lists.items()
        }
    info = snapshot_info(snapshot, server=api.host, anonymized=settings.anonymize, taken_at=taken_at)
    files = sorted([*snapshot.lists, INFO_FILE])
    if not check_mode:
        write_snapshot(settings.directory, snapshot, info)
    return {
        # Every run writes the folder afresh (its info file says when it was taken): check mode says so too.
        "changed": True,
        "directory": settings.directory,
        "files": files,
        "counts": info["counts"],
        "absent": info["absent"],
        "left_out": info["left_out"],
        "anonymized": {
            "nodes": sum(1 for key in mapping if not mapping[key].startswith("ns-")),
            "namespaces": sum(1 for key in mapping if mapping[key].startswith("ns-")),
        },
        "api_requests": api.requests_sent,
    }


def write_snapshot(directory: str, snapshot: Snapshot, info: Mapping[str, Any]) -> None:
    """One List file per kind; the info file last, so an interrupted snapshot is not taken for a complete one."""
    os.makedirs(directory, exist_ok=True)
    stale = os.path.join(directory, INFO_FILE)
    if os.path.exists(stale):
        os.remove(stale)
    for name, items in sorted(snapshot.lists.items()):
        kind = f"{items[0]['kind']}List" if items and items[0].get("kind") else "List"
        _write_json(os.path.join(directory, name), {"apiVersion": "v1", "kind": kind, "items": items})
    _write_json(stale, info)


def _write_json(path: str, document: Any) -> None:
    temporary = path + ".tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(document, handle, separators=(",", ":"), sort_keys=True)
    os.replace(temporary, path)
