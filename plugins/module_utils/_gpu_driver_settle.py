# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Held nodes a fleet-wide driver run need not take through an upgrade cycle (collection-internal, pure).

While a skip_label canary bakes, the upgrade controller marks every other node ``upgrade-required`` (its
ProcessDoneOrUnknownNodes compares the driver pod with the DaemonSet and does not look at the skip label;
NVIDIA/k8s-operator-libs ``pkg/upgrade/common_manager.go``), and once a node is ``upgrade-required`` it is never
compared again: ProcessUpgradeRequiredNodes (``upgrade_inplace.go``) cordons it as soon as a slot is free, then
drains it, and ProcessPodRestartNodes only then finds its pod already in sync. After a rollback the driver
DaemonSet's template is the old one again and the DaemonSet controller re-uses the old ControllerRevision (its
revision number bumped to the newest), so those nodes' pods are in sync with the DaemonSet
(``podInSyncWithDS``: the pod's ``controller-revision-hash`` is the hash of the newest revision,
``pod_manager.go`` GetDaemonsetControllerRevisionHash). Cycling them would cordon and drain every node of the
fleet for nothing, one budget slot at a time.

So a fleet-wide run (a promotion or a rollback), once the DaemonSets run the target, sets such a node's state
back to ``upgrade-done`` while this collection's skip label still holds it (the controller does not move a held
node, so nothing races the write), then releases it. ``upgrade-done`` is where ProcessDoneOrUnknownNodes compares
the pod again: a node whose pod is not in sync is marked ``upgrade-required`` again at its next reconcile, so the
write can never skip an upgrade a node needs. Nodes the write would lose something on are left to the cycle: one
a person cordoned (the controller's node-initial-state annotation, which only the cycle takes off), one whose
upgrade was requested by annotation, one waiting for the safe driver load, one whose pod is missing, orphaned or
terminating.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_scope import (
    PHASE_SCOPE,
    STATE_LABEL,
    Write,
    annotations_of,
    labels_of,
    name_of,
    node_label_view,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_spec import driver_version_of_image
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_watch import DRIVER_CONTAINER
from ansible_collections.gpufleet.upgrade.plugins.module_utils._skip_label import GPU_DRIVER, STATE_DONE, STATE_REQUIRED

REVISION_HASH_LABEL = "controller-revision-hash"
INITIAL_STATE_ANNOTATION = "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable"
REQUESTED_ANNOTATION = "nvidia.com/gpu-driver-upgrade-requested"
SAFE_LOAD_ANNOTATION = "nvidia.com/gpu-driver-upgrade.driver-wait-for-safe-load"


def _uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _controller_uid(obj: Mapping[str, Any]) -> str:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return next((str(ref.get("uid") or "") for ref in refs if ref.get("controller")), "")


def newest_revision_hash(daemonset: Mapping[str, Any], revisions: Sequence[Mapping[str, Any]]) -> Optional[str]:
    """The hash the upgrade controller compares pods with: the name suffix of the highest revision the DaemonSet
    owns and that is named after it (``<daemonset>-<hash>``, pod_manager.go's filter since k8s-operator-libs
    cf74a6e)."""
    name = name_of(daemonset)
    owned = [
        rev for rev in revisions if _controller_uid(rev) == _uid(daemonset) and name_of(rev).startswith(f"{name}-")
    ]
    if not owned:
        return None
    newest = max(owned, key=lambda rev: int(rev.get("revision") or 0))
    return name_of(newest)[len(name) + 1 :]


def _template_version(daemonset: Mapping[str, Any]) -> str:
    spec = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = list(spec.get("containers") or [])
    image = next((str(c.get("image") or "") for c in containers if c.get("name") == DRIVER_CONTAINER), "")
    return driver_version_of_image(image or (str(containers[0].get("image") or "") if containers else ""))


def daemonsets_run_target(daemonsets: Sequence[Mapping[str, Any]], *, target_version: str) -> bool:
    """Every driver DaemonSet renders the target and its controller has seen that template (so its revision
    exists: the DaemonSet controller writes the revision before the status that reports the generation)."""
    for ds in daemonsets:
        meta, status = ds.get("metadata") or {}, ds.get("status") or {}
        if _template_version(ds) != target_version:
            return False
        if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
            return False
    return bool(daemonsets)


def _settled_pod(pods: Sequence[Mapping[str, Any]], hashes: Mapping[str, Optional[str]]) -> Optional[Mapping[str, Any]]:
    """The node's one live driver pod when it is in sync with its DaemonSet's newest revision, else None."""
    live = [pod for pod in pods if not (pod.get("metadata") or {}).get("deletionTimestamp")]
    if len(live) != 1 or len(pods) != 1:
        return None
    pod = live[0]
    owner = _controller_uid(pod)
    wanted = hashes.get(owner)
    return pod if wanted and labels_of(pod).get(REVISION_HASH_LABEL) == wanted else None


def needless_cycle_writes(
    *,
    nodes: Sequence[Mapping[str, Any]],
    driver_pods: Sequence[Mapping[str, Any]],
    daemonsets: Sequence[Mapping[str, Any]],
    revisions: Sequence[Mapping[str, Any]],
    targets: Sequence[str],
) -> List[Write]:
    """``upgrade-done`` for each target node this collection holds in ``upgrade-required`` whose driver pod
    already runs its DaemonSet's newest revision (see the module's doc for what is left to the cycle)."""
    hashes = {_uid(ds): newest_revision_hash(ds, revisions) for ds in daemonsets}
    pods_by_node: Dict[str, List[Mapping[str, Any]]] = {}
    for pod in driver_pods:
        pods_by_node.setdefault(str((pod.get("spec") or {}).get("nodeName") or ""), []).append(pod)
    wanted = set(targets)
    writes: List[Write] = []
    for node in nodes:
        name, labels, annotations = name_of(node), labels_of(node), annotations_of(node)
        held = GPU_DRIVER.our_hold(node)
        if name not in wanted or not held or labels.get(STATE_LABEL) != STATE_REQUIRED:
            continue
        if (node.get("spec") or {}).get("unschedulable") or INITIAL_STATE_ANNOTATION in annotations:
            continue
        if annotations.get(REQUESTED_ANNOTATION) == "true" or annotations.get(SAFE_LOAD_ANNOTATION):
            continue
        if _settled_pod(pods_by_node.get(name, []), hashes) is None:
            continue
        desired = {"metadata": {"labels": {STATE_LABEL: STATE_DONE}}}
        writes.append(
            Write(
                op="patch",
                kind="Node",
                name=name,
                why="its driver pod already runs the DaemonSet's current revision: upgrade-done instead of a "
                "cordon-and-drain cycle for nothing (the controller compares it again from there)",
                phase=PHASE_SCOPE,
                desired=desired,
                patch={"metadata": {"labels": {STATE_LABEL: STATE_DONE}}},
                before=node_label_view(node),
            )
        )
    return writes
