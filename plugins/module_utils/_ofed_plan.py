# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""MOFED (DOCA driver) rollouts of the NVIDIA Network Operator: the pure part (collection-internal).

Plain data in, decisions out, no I/O:

- which MOFED pod runs on which node and whether it runs the target version
  (the image tag starts with the NicClusterPolicy ``ofedDriver.version``: the
  operator renders ``<repository>/<image>:<version>-<os>-<arch>``);
- whether a new MOFED pod is failing (a container not Ready that restarted
  too often, as k8s-operator-libs' ``isDriverPodFailing`` reads it);
- which nodes a rollout targets (not at the target, or left unfinished by an
  earlier run of the same rollout);
- the NicClusterPolicy merge patch (``ofedDriver.version`` set explicitly:
  ``helm upgrade`` does not change it; ``upgradePolicy`` for the operator's
  own auto upgrade);
- in ``auto_upgrade`` mode, which nodes the collection holds with the
  upstream skip label ``nvidia.com/ofed-driver-upgrade.skip=true`` so the
  operator never has more nodes away than the budget allows (the
  NicClusterPolicy has ``maxParallelUpgrades`` but no ``maxUnavailable``, and
  nodes already unavailable do not throttle it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_spec import apply_merge_patch
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_nodes import label_selector_matches
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_budget import node_name
from ansible_collections.gpufleet.upgrade.plugins.module_utils._skip_label import (
    OFED_DRIVER,
    PROGRESS_DONE,
    PROGRESS_FAILED,
    progress_of,
)

DEFAULT_NAMESPACE = "nvidia-network-operator"
# Every MOFED pod the Network Operator renders carries this label (its driver pod selector).
MOFED_POD_SELECTOR = "nvidia.com/ofed-driver"
MOFED_CONTAINER = "mofed-container"
# k8s-operator-libs keys with %s = "ofed" (consts.go).
STATE_LABEL = OFED_DRIVER.state_label
SKIP_LABEL = OFED_DRIVER.label
# Marks a skip label this collection set, so it only ever removes its own (_skip_label).
HOLD_ANNOTATION = OFED_DRIVER.annotation
# isDriverPodFailing: restartCount > 10 with a container not Ready.
UPSTREAM_RESTART_LIMIT = 10

MODE_ROLLING = "rolling"
MODE_AUTO_UPGRADE = "auto_upgrade"
MODES = (MODE_ROLLING, MODE_AUTO_UPGRADE)


# -- MOFED pods ---------------------------------------------------------------------------------------


def image_tag(image: str) -> str:
    """The tag of ``repo/name:tag`` (empty for a digest-only or untagged image)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else ""


def image_runs_version(image: str, version: str) -> bool:
    """The image tag is the version or starts with ``<version>-`` (``24.10-0.7.0.0-0-rhcos4.16-amd64``)."""
    if not version:
        return False
    tag = image_tag(image)
    return tag == version or tag.startswith(version + "-")


def mofed_image(pod_spec: Mapping[str, Any]) -> str:
    """The driver container's image: the one named ``mofed-container``, else the first container's."""
    containers = list(pod_spec.get("containers") or [])
    for container in containers:
        if container.get("name") == MOFED_CONTAINER:
            return str(container.get("image") or "")
    return str(containers[0].get("image") or "") if containers else ""


@dataclass(frozen=True)
class MofedPod:
    """What a rollout needs to know about one MOFED pod."""

    namespace: str
    name: str
    uid: str
    node: str
    image: str
    ready: bool
    terminating: bool
    restarts: int
    waiting_reason: str = ""
    message: str = ""

    def runs(self, version: str) -> bool:
        return image_runs_version(self.image, version)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def mofed_pod(pod: Mapping[str, Any]) -> MofedPod:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    statuses = list(status.get("containerStatuses") or [])
    ready = bool(statuses) and all(bool(entry.get("ready")) for entry in statuses)
    restarts = max((int(entry.get("restartCount") or 0) for entry in statuses), default=0)
    waiting_reason = ""
    message = ""
    for entry in statuses:
        waiting = (entry.get("state") or {}).get("waiting") or {}
        terminated = (entry.get("lastState") or {}).get("terminated") or {}
        if waiting and not waiting_reason:
            waiting_reason = str(waiting.get("reason") or "")
            # The last run's termination message says why (the build error); the waiting one only "back-off".
            message = str(terminated.get("message") or waiting.get("message") or "")
        elif terminated and not message:
            message = str(terminated.get("message") or "")
    return MofedPod(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        node=str(spec.get("nodeName") or ""),
        image=mofed_image(spec),
        ready=ready and status.get("phase") == "Running",
        terminating=bool(meta.get("deletionTimestamp")),
        restarts=restarts,
        waiting_reason=waiting_reason,
        message=message,
    )


def mofed_pods_by_node(pods: Sequence[Mapping[str, Any]]) -> Dict[str, MofedPod]:
    """The live MOFED pod of each node (a terminating one only when nothing replaced it yet)."""
    chosen: Dict[str, MofedPod] = {}
    for pod in pods:
        entry = mofed_pod(pod)
        if not entry.node:
            continue
        current = chosen.get(entry.node)
        if current is None or (current.terminating and not entry.terminating):
            chosen[entry.node] = entry
    return chosen


def pod_failure(pod: MofedPod, *, restart_limit: int) -> str:
    """Why the pod counts as failed (empty while it may still come up).

    ``restart_limit`` 0 fails at the first crash-loop; upstream waits for more
    than 10 restarts, which at the kubelet's back-off is close to an hour.
    """
    if pod.ready or pod.terminating:
        return ""
    crash_looping = pod.waiting_reason == "CrashLoopBackOff"
    if pod.restarts > restart_limit or (crash_looping and pod.restarts >= max(restart_limit, 1)):
        detail = f": {pod.message}" if pod.message else ""
        return (
            f"MOFED pod {pod.key} on node {pod.node} is {pod.waiting_reason or 'not Ready'} "
            f"after {pod.restarts} restarts{detail}"
        )
    return ""


def new_pod_ready(pod: Optional[MofedPod], *, version: str, replaced_uids: Sequence[str]) -> bool:
    return pod is not None and pod.uid not in replaced_uids and not pod.terminating and pod.ready and pod.runs(version)


# -- targets --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TargetSelection:
    """The nodes of a rollout: targets in the given order, and the nodes left out with the reason."""

    pool: Tuple[str, ...]
    targets: Tuple[str, ...]
    current: Tuple[str, ...]
    excluded: Tuple[Tuple[str, str], ...]
    canaries: Tuple[str, ...]

    def as_dict(self) -> Dict[str, Any]:
        return {
            "pool": list(self.pool),
            "targets": list(self.targets),
            "already_at_target": list(self.current),
            "canaries": list(self.canaries),
            "excluded": [{"node": name, "why": why} for name, why in self.excluded],
        }


def select_targets(
    *,
    nodes: Sequence[Mapping[str, Any]],
    pods: Mapping[str, MofedPod],
    version: str,
    node_selector: str = "",
    node_names: Sequence[str] = (),
    canary_selector: str = "",
    unfinished: Sequence[str] = (),
) -> TargetSelection:
    """Which nodes hosting a MOFED pod the rollout works on.

    A node is a target when it matches ``node_selector`` and ``node_names``
    (when given) and its MOFED pod does not run ``version``, or when an
    earlier run of the same rollout left it unfinished (``unfinished``: it
    must be resumed, even if its new pod already runs).
    """
    by_name = {node_name(node): node for node in nodes}
    unknown = [name for name in node_names if name not in by_name]
    if unknown:
        raise InvalidInputError(f"Nodes not in the cluster: {', '.join(unknown)}")
    pool = tuple(sorted(name for name in pods if name in by_name))
    wanted = set(node_names)
    targets: List[str] = []
    current: List[str] = []
    excluded: List[Tuple[str, str]] = []
    for name in node_names:
        if name not in pods:
            excluded.append((name, "runs no MOFED pod"))
    for name in pool:
        labels = (by_name[name].get("metadata") or {}).get("labels") or {}
        if wanted and name not in wanted:
            continue
        if node_selector and not label_selector_matches(node_selector, labels):
            continue
        if pods[name].runs(version) and not pods[name].terminating and name not in unfinished:
            current.append(name)
            continue
        targets.append(name)
    canaries = tuple(
        name
        for name in targets
        if canary_selector
        and label_selector_matches(canary_selector, (by_name[name].get("metadata") or {}).get("labels") or {})
    )
    return TargetSelection(
        pool=pool, targets=tuple(targets), current=tuple(current), excluded=tuple(excluded), canaries=canaries
    )


# -- NicClusterPolicy -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AutoUpgradeSettings:
    """The ``ofedDriver.upgradePolicy`` the collection writes in ``auto_upgrade`` mode (CRD field names)."""

    max_parallel_upgrades: int
    drain_pod_selector: str = ""
    drain_timeout_seconds: int = 300
    wait_pod_selector: str = ""
    wait_timeout_seconds: int = 0

    def upgrade_policy(self) -> Dict[str, Any]:
        policy: Dict[str, Any] = {
            "autoUpgrade": True,
            "maxParallelUpgrades": self.max_parallel_upgrades,
            "drain": {
                "enable": True,
                "podSelector": self.drain_pod_selector,
                "timeoutSeconds": self.drain_timeout_seconds,
            },
        }
        if self.wait_pod_selector:
            policy["waitForCompletion"] = {
                "podSelector": self.wait_pod_selector,
                "timeoutSeconds": self.wait_timeout_seconds,
            }
        return policy


def _merge_diff(current: Mapping[str, Any], desired: Mapping[str, Any]) -> Dict[str, Any]:
    """The part of ``desired`` (nested dicts) that differs from ``current``."""
    patch: Dict[str, Any] = {}
    for key, value in desired.items():
        have = current.get(key)
        if isinstance(value, Mapping) and isinstance(have, Mapping):
            nested = _merge_diff(have, value)
            if nested:
                patch[key] = nested
        elif have != value:
            patch[key] = value
    return patch


def ofed_policy_patch(
    policy: Mapping[str, Any], *, version: str, auto_upgrade: Optional[AutoUpgradeSettings] = None
) -> Dict[str, Any]:
    """The merge patch that sets ``ofedDriver.version`` and the upgradePolicy, or {} when nothing differs.

    Without ``auto_upgrade`` (a rolling rollout) the operator's autoUpgrade is turned off.
    """
    ofed = (policy.get("spec") or {}).get("ofedDriver")
    if not isinstance(ofed, Mapping):
        raise InvalidInputError(
            f"NicClusterPolicy {(policy.get('metadata') or {}).get('name', '')} has no spec.ofedDriver: "
            "the Network Operator does not manage a MOFED driver here"
        )
    desired: Dict[str, Any] = {"version": version}
    if auto_upgrade is not None:
        desired["upgradePolicy"] = auto_upgrade.upgrade_policy()
    elif (ofed.get("upgradePolicy") or {}).get("autoUpgrade") is True:
        # A rolling rollout is the only actor: left on (by hand, or by an earlier auto_upgrade run), the
        # operator's own controller would reload nodes beside it, outside the budget (it has no maxUnavailable).
        desired["upgradePolicy"] = {"autoUpgrade": False}
    diff = _merge_diff(ofed, desired)
    return {"spec": {"ofedDriver": diff}} if diff else {}


def daemonsets_render(daemonsets: Sequence[Mapping[str, Any]], *, version: str) -> List[str]:
    """Names of MOFED DaemonSets whose pod template does not run ``version`` yet (empty: all do)."""
    behind = []
    for daemonset in daemonsets:
        template = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
        if not image_runs_version(mofed_image(template), version):
            behind.append(str((daemonset.get("metadata") or {}).get("name") or ""))
    return sorted(behind)


# -- auto_upgrade: the operator does the node work, the collection paces it --------------------------------


@dataclass(frozen=True)
class AutoNode:
    """A node of an ``auto_upgrade`` rollout as observed now."""

    name: str
    state: str
    held: bool
    held_by_us: bool
    at_target: bool

    @property
    def progress(self) -> str:
        return progress_of(self.state, at_target=self.at_target)

    @property
    def done(self) -> bool:
        return self.progress == PROGRESS_DONE

    @property
    def failed(self) -> bool:
        return self.progress == PROGRESS_FAILED


def auto_node(node: Mapping[str, Any], pod: Optional[MofedPod], *, version: str) -> AutoNode:
    return AutoNode(
        name=node_name(node),
        state=OFED_DRIVER.state(node),
        held=OFED_DRIVER.held(node),
        held_by_us=OFED_DRIVER.held_by_us(node),
        at_target=pod is not None and pod.ready and not pod.terminating and pod.runs(version),
    )


def ofed_diff(
    policy: Mapping[str, Any],
    policy_patch: Mapping[str, Any],
    *,
    nodes: Sequence[Mapping[str, Any]],
    pods: Mapping[str, MofedPod],
    targets: Sequence[str],
    version: str,
    state_key: str,
    states: Mapping[str, str],
    held: Mapping[str, bool],
) -> Dict[str, Any]:
    """Before and after of what a rollout changes: the NicClusterPolicy's ``spec.ofedDriver`` and, per target
    node, the MOFED it runs (the pod's image before, the target version after), its rollout state annotation
    (``states``: the planned or the observed one) and whether the operator's upgrade skip label holds it (``held``:
    the nodes whose hold changes; auto_upgrade mode). A rolling rollout uncordons each node it cordoned, so the
    cordon is no difference between before and after."""
    ofed = dict((policy.get("spec") or {}).get("ofedDriver") or {})
    after_ofed = apply_merge_patch(ofed, (policy_patch.get("spec") or {}).get("ofedDriver") or {})
    by_name = {node_name(node): node for node in nodes}
    before: Dict[str, Any] = {}
    after: Dict[str, Any] = {}
    for name in targets:
        meta = by_name.get(name, {}).get("metadata") or {}
        pod = pods.get(name)
        was = {
            "mofed": pod.image if pod else "",
            "rollout_state": str((meta.get("annotations") or {}).get(state_key, "")),
            "held": OFED_DRIVER.held(by_name.get(name, {})),
        }
        before[name] = was
        after[name] = {
            "mofed": version,
            "rollout_state": states.get(name, was["rollout_state"]),
            "held": held.get(name, was["held"]),
        }
    return {
        "before": {"nic_cluster_policy": {"ofedDriver": ofed}, "nodes": before},
        "after": {"nic_cluster_policy": {"ofedDriver": after_ofed}, "nodes": after},
    }
