# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Node operations for rollouts: cordon, pods that must leave, eviction, waits (collection-internal).

Pure parts (which pods must leave a node, label selectors, which PDB guards a
pod) are plain functions of API objects. The I/O parts take a ``KubeApi`` and
wait only through ``wait_until``.

Eviction retries while a PodDisruptionBudget refuses (429), until a timeout,
then halts naming the node, the pod and the budget -- where
kubernetes.core.k8s_drain gives up at the first refusal.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import (
    InvalidInputError,
    KubeApiError,
    RolloutHaltedError,
    WaitTimeoutError,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_objects import object_field
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import (
    NODES,
    PDBS,
    PODS,
    RESOURCE_CLAIMS,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_budget import (
    node_is_ready,
    node_is_unschedulable,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._wait import WaitOutcome, wait_until

# Extended resources the GPU Operator's pod-deletion filter looks for (prefix match).
GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")
# The extended resource the NVIDIA device plugin advertises per GPU.
GPU_RESOURCE = "nvidia.com/gpu"
# Multus: pods attached to secondary networks name them in this annotation.
MULTUS_NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
# NVIDIA's DRA driver for GPUs (NVIDIA/k8s-dra-driver-gpu) allocates GPUs to ResourceClaims under this driver name.
DRA_GPU_DRIVER = "gpu.nvidia.com"
# Static pods appear in the API as mirror pods carrying this annotation; the
# API cannot delete them for good, so kubectl drain leaves them.
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"

_FINISHED_PHASES = ("Succeeded", "Failed")

Clock = Callable[[], float]
Pause = Callable[[float], None]


# -- label selectors (pure) ------------------------------------------------------------

_SELECTOR_TOKEN = re.compile(r"\s*(!=|==|=|\(|\)|,|!|[^\s!=(),]+)")


@dataclass(frozen=True)
class SelectorRequirement:
    key: str
    operator: str  # "=", "!=", "in", "notin", "exists", "!"
    values: Tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        if self.operator in ("=", "in"):
            return present and labels[self.key] in self.values
        # "!=" and "notin" match nodes without the key, as Kubernetes does.
        return not present or labels[self.key] not in self.values


def parse_label_selector(text: str) -> Tuple[SelectorRequirement, ...]:
    """Parse the string form (``a=b,c!=d,e in (f,g),!h,i``); an empty selector matches everything."""
    tokens = [token for token in _SELECTOR_TOKEN.findall(text or "") if token]
    if "".join(tokens) != re.sub(r"\s+", "", text or ""):
        raise InvalidInputError(f"Cannot parse label selector {text!r}")
    requirements: List[SelectorRequirement] = []
    position = 0

    def take() -> str:
        nonlocal position
        if position >= len(tokens):
            raise InvalidInputError(f"Label selector {text!r} ends too early")
        position += 1
        return tokens[position - 1]

    while position < len(tokens):
        token = take()
        if token == "!":
            requirements.append(SelectorRequirement(key=take(), operator="!"))
        elif position < len(tokens) and tokens[position] in ("=", "==", "!="):
            operator = "!=" if take() == "!=" else "="
            # "key=" selects an empty value, as the API server reads it.
            value = "" if position >= len(tokens) or tokens[position] == "," else take()
            requirements.append(SelectorRequirement(key=token, operator=operator, values=(value,)))
        elif position < len(tokens) and tokens[position] in ("in", "notin"):
            operator = take()
            if take() != "(":
                raise InvalidInputError(f"Label selector {text!r}: expected '(' after {operator!r}")
            values: List[str] = []
            for _attempt in range(len(tokens)):
                value = take()
                if value == ")":
                    break
                if value != ",":
                    values.append(value)
            requirements.append(SelectorRequirement(key=token, operator=operator, values=tuple(values)))
        else:
            requirements.append(SelectorRequirement(key=token, operator="exists"))
        if position < len(tokens) and take() != ",":
            raise InvalidInputError(f"Label selector {text!r}: expected ',' between requirements")
        if tokens[position - 1] == "," and position >= len(tokens):
            raise InvalidInputError(f"Label selector {text!r} ends with ','")
    return tuple(requirements)


def label_selector_matches(text: str, labels: Optional[Mapping[str, str]]) -> bool:
    return all(requirement.matches(labels or {}) for requirement in parse_label_selector(text))


def selector_object_matches(selector: Optional[Mapping[str, Any]], labels: Optional[Mapping[str, str]]) -> bool:
    """A metav1.LabelSelector (matchLabels, matchExpressions) against labels.

    A null selector matches nothing and an empty one everything, as for a
    policy/v1 PodDisruptionBudget.
    """
    if selector is None:
        return False
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        operator = str(expression.get("operator") or "")
        key = str(expression.get("key") or "")
        values = tuple(str(value) for value in expression.get("values") or [])
        mapped = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}.get(operator)
        if mapped is None:
            return False
        if not SelectorRequirement(key=key, operator=mapped, values=values).matches(labels):
            return False
    return True


# -- which pods must leave (pure) --------------------------------------------------------


@dataclass(frozen=True)
class PodSelection:
    """Which pods must leave a node; a pod matching any enabled criterion must go.

    ``exempt_label``: pods labelled ``<key>=true`` stay (like the GPU Operator's
    ``nvidia.com/gpu-driver-upgrade-drain.skip``). ``gpu_consumers``: also pods
    that use the GPUs without requesting them (the ``nvidia`` runtimeClass alone,
    a hostPath mount of ``/dev/nvidia*``); they keep the driver loaded
    (NVIDIA/gpu-operator issues 2509, 2570). ``force`` and
    ``delete_emptydir_data`` mean what they mean to ``kubectl drain``.
    """

    gpu: bool = False
    gpu_consumers: bool = False
    secondary_network: bool = False
    label_selector: str = ""
    all_pods: bool = False
    exempt_label: str = ""
    force: bool = False
    delete_emptydir_data: bool = False

    def __post_init__(self) -> None:
        if not (self.gpu or self.secondary_network or self.label_selector or self.all_pods):
            raise InvalidInputError("A pod selection needs at least one criterion (gpu, secondary_network, ...)")
        parse_label_selector(self.label_selector)


@dataclass(frozen=True)
class PodEvictionPlan:
    """The verdict on every pod of a node."""

    evict: Tuple[Dict[str, Any], ...]
    # Already terminating: nothing to ask, only to wait for.
    terminating: Tuple[Dict[str, Any], ...]
    # (namespace/name, why) for pods left on the node.
    skipped: Tuple[Tuple[str, str], ...]
    # (namespace/name, why) for pods that must leave but may not be evicted under the options.
    blocked: Tuple[Tuple[str, str], ...]

    def summary(self) -> Dict[str, Any]:
        return {
            "evict": [pod_key(pod) for pod in self.evict],
            "terminating": [pod_key(pod) for pod in self.terminating],
            "skipped": [{"pod": key, "why": why} for key, why in self.skipped],
            "blocked": [{"pod": key, "why": why} for key, why in self.blocked],
        }


def gpus_missing(node: Mapping[str, Any]) -> str:
    """Why the node does not offer all its GPUs to pods ('' when it does, or has none): not Ready, or fewer
    ``nvidia.com/gpu`` allocatable than its capacity (the device plugin, which needs the driver, is not back)."""
    if not node_is_ready(node):
        return "the node is not Ready"
    status = object_field(node, "status")
    capacity = str((status.get("capacity") or {}).get(GPU_RESOURCE) or "0")
    allocatable = str((status.get("allocatable") or {}).get(GPU_RESOURCE) or "0")
    if not capacity.isdigit() or int(capacity) == 0:
        return ""  # a node without GPUs: Ready is all there is to wait for
    if allocatable.isdigit() and int(allocatable) >= int(capacity):
        return ""
    return f"{allocatable} of its {capacity} {GPU_RESOURCE} allocatable"


def _gpu_count(value: Any) -> int:
    try:
        return int(str(value or 0))
    except ValueError:
        return 0


def pod_gpus(pod: Mapping[str, Any], dra: Optional[Mapping[str, int]] = None) -> int:
    """``nvidia.com/gpu`` the pod's containers hold: per container the larger of request and limit (for an
    extended resource the API server makes them equal, defaulting the request to the limit), summed; init
    containers run alone. With ``dra`` (``dra_gpus_by_pod``), plus the GPUs its Dynamic Resource Allocation
    claims were allocated."""
    held = (dra or {}).get(pod_key(pod), 0)
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        held += max(
            _gpu_count((resources.get("requests") or {}).get(GPU_RESOURCE)),
            _gpu_count((resources.get("limits") or {}).get(GPU_RESOURCE)),
        )
    return held


def free_gpus(
    nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]], dra: Optional[Mapping[str, int]] = None
) -> Dict[str, int]:
    """GPUs left per node: allocatable ``nvidia.com/gpu`` minus what the node's unfinished pods ask for (and, with
    ``dra``, were allocated through their claims; a claim two pods share counts for each, which errs on the side
    of fewer free GPUs)."""
    used: Dict[str, int] = {}
    for pod in pods:
        spec = pod.get("spec") or {}
        if (pod.get("status") or {}).get("phase") in _FINISHED_PHASES or not spec.get("nodeName"):
            continue
        used[spec["nodeName"]] = used.get(spec["nodeName"], 0) + pod_gpus(pod, dra)
    free = {}
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name") or "")
        allocatable = _gpu_count(((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE))
        free[name] = max(allocatable - used.get(name, 0), 0)
    return free


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = object_field(pod, "metadata")
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def pod_requests_gpu(pod: Mapping[str, Any]) -> bool:
    """Any container or init container asks for ``nvidia.com/gpu*`` or ``nvidia.com/mig-*``."""
    spec = pod.get("spec") or {}
    for container in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
        resources = container.get("resources") or {}
        for amounts in (resources.get("limits") or {}, resources.get("requests") or {}):
            if any(str(name).startswith(GPU_RESOURCE_PREFIXES) for name in amounts):
                return True
    return False


def pod_uses_gpus_unrequested(pod: Mapping[str, Any]) -> bool:
    """The pod reaches the GPUs through the ``nvidia`` runtimeClass or a ``/dev/nvidia*`` hostPath."""
    spec = pod.get("spec") or {}
    if "nvidia" in str(spec.get("runtimeClassName") or ""):
        return True
    return any(
        str((volume.get("hostPath") or {}).get("path") or "").startswith("/dev/nvidia")
        for volume in spec.get("volumes") or ()
    )


def pod_claim_names(pod: Mapping[str, Any]) -> List[str]:
    """The ResourceClaims the pod uses: named in ``spec.resourceClaims``, or made from a template for it (the
    claim's name is in ``status.resourceClaimStatuses``)."""
    made = {
        str(status.get("name")): str(status.get("resourceClaimName") or "")
        for status in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
        if isinstance(status, Mapping)
    }
    names = []
    for ref in (pod.get("spec") or {}).get("resourceClaims") or ():
        if isinstance(ref, Mapping):
            name = str(ref.get("resourceClaimName") or made.get(str(ref.get("name"))) or "")
            if name:
                names.append(name)
    return names


def claim_gpu_devices(claim: Mapping[str, Any]) -> int:
    """Devices NVIDIA's DRA driver for GPUs allocated to the claim (``status.allocation.devices.results``)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or ()
    return sum(1 for result in results if isinstance(result, Mapping) and result.get("driver") == DRA_GPU_DRIVER)


def dra_gpus_by_pod(pods: Sequence[Mapping[str, Any]], claims: Sequence[Mapping[str, Any]]) -> Dict[str, int]:
    """Pod (namespace/name) -> GPUs allocated to it through Dynamic Resource Allocation: such pods request no
    ``nvidia.com/gpu`` yet use the GPUs, keep the driver loaded and take capacity (gpu-operator #2570)."""
    devices = {
        (str((claim.get("metadata") or {}).get("namespace")), str((claim.get("metadata") or {}).get("name"))): (
            claim_gpu_devices(claim)
        )
        for claim in claims
    }
    found = {}
    for pod in pods:
        namespace = str((pod.get("metadata") or {}).get("namespace"))
        count = sum(devices.get((namespace, name), 0) for name in pod_claim_names(pod))
        if count:
            found[pod_key(pod)] = count
    return found


def pod_uses_secondary_network(pod: Mapping[str, Any]) -> bool:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    value = str(annotations.get(MULTUS_NETWORKS_ANNOTATION) or "").strip()
    return value not in ("", "[]")


def pod_controller(pod: Mapping[str, Any]) -> Optional[Mapping[str, Any]]:
    for owner in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("controller"):
            return owner
    return None


def _selected_because(pod: Mapping[str, Any], selection: PodSelection, dra: Mapping[str, int]) -> str:
    if selection.all_pods:
        return "all pods"
    if selection.gpu and pod_requests_gpu(pod):
        return "requests GPUs"
    if selection.gpu and dra.get(pod_key(pod)):
        return f"holds GPUs through a Dynamic Resource Allocation claim ({DRA_GPU_DRIVER})"
    if selection.gpu_consumers and pod_uses_gpus_unrequested(pod):
        return "uses the GPUs without requesting them"
    if selection.secondary_network and pod_uses_secondary_network(pod):
        return "uses a secondary network"
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if selection.label_selector and label_selector_matches(selection.label_selector, labels):
        return f"matches {selection.label_selector}"
    return ""


def pods_to_evict(
    pods: Sequence[Mapping[str, Any]], *, selection: PodSelection, dra: Optional[Mapping[str, int]] = None
) -> PodEvictionPlan:
    """Which pods of a node must leave, following kubectl drain's filters. ``dra`` (``dra_gpus_by_pod``): pods
    holding GPUs through DRA claims are GPU pods.

    Left on the node: mirror pods, DaemonSet pods (their controller would put
    them straight back), finished pods (they hold no device), exempt pods, and
    pods the selection does not name. Blocked (the node cannot be emptied):
    pods no controller would recreate, unless ``force``, and pods with emptyDir
    data, unless ``delete_emptydir_data``.
    """
    evict: List[Dict[str, Any]] = []
    terminating: List[Dict[str, Any]] = []
    skipped: List[Tuple[str, str]] = []
    blocked: List[Tuple[str, str]] = []
    for pod in sorted(pods, key=pod_key):
        key = pod_key(pod)
        meta = pod.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        controller = pod_controller(pod)
        if MIRROR_POD_ANNOTATION in annotations:
            skipped.append((key, "mirror pod"))
            continue
        if controller is not None and controller.get("kind") == "DaemonSet":
            skipped.append((key, "DaemonSet pod"))
            continue
        if (pod.get("status") or {}).get("phase") in _FINISHED_PHASES:
            skipped.append((key, "finished"))
            continue
        if selection.exempt_label and (meta.get("labels") or {}).get(selection.exempt_label) == "true":
            skipped.append((key, f"exempt ({selection.exempt_label}=true)"))
            continue
        if not _selected_because(pod, selection, dra or {}):
            skipped.append((key, "not selected"))
            continue
        if meta.get("deletionTimestamp"):
            terminating.append(dict(pod))
            continue
        if controller is None and not selection.force:
            blocked.append((key, "no controller manages it (set force to delete it anyway)"))
            continue
        volumes = (pod.get("spec") or {}).get("volumes") or []
        if not selection.delete_emptydir_data and any("emptyDir" in volume for volume in volumes):
            blocked.append((key, "it has emptyDir data (set delete_emptydir_data to delete it anyway)"))
            continue
        evict.append(dict(pod))
    return PodEvictionPlan(
        evict=tuple(evict), terminating=tuple(terminating), skipped=tuple(skipped), blocked=tuple(blocked)
    )


def pdbs_covering_pod(pdbs: Sequence[Mapping[str, Any]], pod: Mapping[str, Any]) -> List[Mapping[str, Any]]:
    """The PodDisruptionBudgets of the pod's namespace whose selector matches it."""
    meta = pod.get("metadata") or {}
    return [
        pdb
        for pdb in pdbs
        if (pdb.get("metadata") or {}).get("namespace") == meta.get("namespace")
        and selector_object_matches((pdb.get("spec") or {}).get("selector"), meta.get("labels"))
    ]


def describe_pdb(pdb: Mapping[str, Any]) -> str:
    """The budget and the numbers a person needs to see why it refuses (those the object has)."""
    meta = pdb.get("metadata") or {}
    spec = pdb.get("spec") or {}
    status = pdb.get("status") or {}
    facts = [f"{field} {spec[field]}" for field in ("minAvailable", "maxUnavailable") if field in spec]
    facts += [
        f"{field} {status[field]}"
        for field in ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods")
        if field in status
    ]
    described = f"PodDisruptionBudget {meta.get('namespace', '')}/{meta.get('name', '')}"
    return f"{described} ({', '.join(facts)})" if facts else described


# -- I/O: nodes ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CordonResult:
    node: Dict[str, Any]
    changed: bool
    was_unschedulable: bool


def get_node(api: KubeApi, name: str) -> Dict[str, Any]:
    node = api.get(NODES, name)
    if node is None:
        raise KubeApiError(f"Node {name} does not exist", status=404, reason="NotFound", method="GET")
    node.setdefault("kind", "Node")
    node.setdefault("apiVersion", "v1")
    return node


def patch_node(
    api: KubeApi,
    name: str,
    *,
    annotations: Optional[Mapping[str, Optional[str]]] = None,
    unschedulable: Optional[bool] = None,
    resource_version: Optional[str] = None,
    dry_run: bool = False,
) -> Dict[str, Any]:
    """One JSON merge patch of a node's annotations and/or ``spec.unschedulable``.

    ``None`` as an annotation value removes it. ``unschedulable=False`` removes
    the field, as kubectl uncordon leaves it. ``resource_version`` makes the
    write conditional: a node changed meanwhile answers 409.
    """
    body: Dict[str, Any] = {}
    metadata: Dict[str, Any] = {}
    if annotations:
        metadata["annotations"] = dict(annotations)
    if resource_version:
        metadata["resourceVersion"] = resource_version
    if metadata:
        body["metadata"] = metadata
    if unschedulable is not None:
        body["spec"] = {"unschedulable": True if unschedulable else None}
    node = api.patch(NODES, name, body, patch_type="merge", dry_run=dry_run)
    node.setdefault("kind", "Node")
    node.setdefault("apiVersion", "v1")
    return node


def cordon_node(
    api: KubeApi,
    name: str,
    *,
    annotations: Optional[Mapping[str, Optional[str]]] = None,
    dry_run: bool = False,
) -> CordonResult:
    """Mark the node unschedulable; ``was_unschedulable`` tells whether it already was (the initial state)."""
    node = get_node(api, name)
    was_unschedulable = node_is_unschedulable(node)
    if was_unschedulable and not annotations:
        return CordonResult(node=node, changed=False, was_unschedulable=True)
    patched = patch_node(
        api,
        name,
        annotations=annotations,
        unschedulable=None if was_unschedulable else True,
        dry_run=dry_run,
    )
    return CordonResult(node=patched, changed=not was_unschedulable, was_unschedulable=was_unschedulable)


def uncordon_node(
    api: KubeApi,
    name: str,
    *,
    keep_if_annotated: str = "",
    annotations: Optional[Mapping[str, Optional[str]]] = None,
    dry_run: bool = False,
) -> CordonResult:
    """Make the node schedulable again, unless it carries ``keep_if_annotated=true`` (cordoned before we came)."""
    node = get_node(api, name)
    was_unschedulable = node_is_unschedulable(node)
    keep = bool(keep_if_annotated) and (node["metadata"].get("annotations") or {}).get(keep_if_annotated) == "true"
    release = was_unschedulable and not keep
    if not release and not annotations:
        return CordonResult(node=node, changed=False, was_unschedulable=was_unschedulable)
    patched = patch_node(api, name, annotations=annotations, unschedulable=False if release else None, dry_run=dry_run)
    return CordonResult(node=patched, changed=release, was_unschedulable=was_unschedulable)


def wait_for_node_ready(
    api: KubeApi,
    name: str,
    *,
    timeout: float,
    sleep: float,
    previous_boot_id: str = "",
    clock: Clock = time.monotonic,
    pause: Pause = time.sleep,
) -> WaitOutcome[Optional[Dict[str, Any]]]:
    """Wait until the node is Ready; with ``previous_boot_id``, also until it has rebooted.

    A reboot shows as a new ``status.nodeInfo.bootID``; without that check a
    node still Ready from before the reboot would pass at once.
    """

    def rebooted_and_ready(node: Optional[Dict[str, Any]]) -> bool:
        if node is None or not node_is_ready(node):
            return False
        boot_id = object_field(node, "status", "nodeInfo").get("bootID", "")
        return not previous_boot_id or boot_id != previous_boot_id

    what = f"node {name} to be Ready" + (" after a reboot" if previous_boot_id else "")
    return wait_until(
        lambda: api.get(NODES, name),
        rebooted_and_ready,
        timeout=timeout,
        sleep=sleep,
        what=what,
        clock=clock,
        pause=pause,
    )


# -- I/O: pods -------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvictionResult:
    node: str
    evicted: Tuple[str, ...]
    waited_for: Tuple[str, ...]
    skipped: Tuple[Tuple[str, str], ...]
    elapsed: float
    refusals: int

    def as_dict(self) -> Dict[str, Any]:
        return {
            "node": self.node,
            "evicted": list(self.evicted),
            "waited_for": list(self.waited_for),
            "skipped": [{"pod": key, "why": why} for key, why in self.skipped],
            "elapsed": round(self.elapsed, 3),
            "pdb_refusals": self.refusals,
        }


def list_pods_on_node(
    api: KubeApi, node_name: str, *, namespace: Optional[str] = None, label_selector: Optional[str] = None
) -> List[Dict[str, Any]]:
    """Pods bound to the node, across namespaces unless one is given (field selector ``spec.nodeName``)."""
    return api.list(
        PODS, namespace=namespace, field_selector=f"spec.nodeName={node_name}", label_selector=label_selector
    )


def read_dra_gpus(api: KubeApi, pods: Sequence[Mapping[str, Any]]) -> Dict[str, int]:
    """``dra_gpus_by_pod`` for these pods, reading the ResourceClaims where a pod names one: one list of its
    namespace, or one cluster-wide list when pods of several namespaces do (no request when none does; none is held
    where the cluster serves no ``resource.k8s.io/v1``)."""
    namespaces = {str((pod.get("metadata") or {}).get("namespace")) for pod in pods if pod_claim_names(pod)}
    if not namespaces:
        return {}
    try:
        claims = api.list(RESOURCE_CLAIMS, namespace=namespaces.pop() if len(namespaces) == 1 else None)
    except KubeApiError as err:
        if err.status == 404:
            return {}
        raise
    return dra_gpus_by_pod(pods, claims)


def evict_pods(
    api: KubeApi,
    node_name: str,
    pods: Sequence[Mapping[str, Any]],
    *,
    timeout: float,
    sleep: float,
    clock: Clock = time.monotonic,
    pause: Pause = time.sleep,
) -> Tuple[int, float]:
    """Ask the eviction API to remove each pod, retrying those a PDB refuses, until ``timeout``.

    Returns (refusals seen, seconds spent). After the timeout raises
    RolloutHaltedError naming the node, the first pod still refused and the
    PodDisruptionBudget guarding it.
    """
    remaining = {pod_key(pod): pod for pod in pods}
    refusals = 0

    def evict_remaining() -> List[str]:
        nonlocal refusals
        for key in list(remaining):
            meta = remaining[key]["metadata"]
            if api.evict(meta["namespace"], meta["name"]):
                del remaining[key]
            else:
                refusals += 1
        return sorted(remaining)

    try:
        outcome = wait_until(
            evict_remaining,
            lambda still: not still,
            timeout=timeout,
            sleep=sleep,
            what=f"evictions from node {node_name}",
            clock=clock,
            pause=pause,
        )
    except WaitTimeoutError as err:
        first = remaining[sorted(remaining)[0]]
        namespace = first["metadata"]["namespace"]
        guards = pdbs_covering_pod(api.list(PDBS, namespace=namespace), first)
        guard = describe_pdb(guards[0]) if guards else "no PodDisruptionBudget found any more"
        raise RolloutHaltedError(
            f"Cannot evict pod {pod_key(first)} from node {node_name}: {guard} refused it for {timeout:.0f}s"
            + (f" ({len(remaining) - 1} more pods refused)" if len(remaining) > 1 else ""),
            node=node_name,
            result={"refused": sorted(remaining), "pdb_refusals": refusals, "elapsed": err.result.get("elapsed")},
        ) from err
    return refusals, outcome.elapsed


def wait_for_pods_gone(
    api: KubeApi,
    node_name: str,
    pods: Sequence[Mapping[str, Any]],
    *,
    timeout: float,
    sleep: float,
    clock: Clock = time.monotonic,
    pause: Pause = time.sleep,
) -> WaitOutcome[List[str]]:
    """Wait until none of ``pods`` is on the node any more.

    A pod is gone when no pod on the node has its uid: a StatefulSet pod
    recreated under the same name is a new pod (kubectl drain checks the same).
    """
    uids = {str((pod.get("metadata") or {}).get("uid")): pod_key(pod) for pod in pods}

    def still_there() -> List[str]:
        present = {str((pod.get("metadata") or {}).get("uid")) for pod in list_pods_on_node(api, node_name)}
        return sorted(key for uid, key in uids.items() if uid in present)

    try:
        return wait_until(
            still_there,
            lambda left: not left,
            timeout=timeout,
            sleep=sleep,
            what=f"evicted pods to leave node {node_name}",
            clock=clock,
            pause=pause,
        )
    except WaitTimeoutError as err:
        left = err.result.get("last") or []
        raise WaitTimeoutError(f"{err.msg}; still there: {', '.join(left)}", result=err.result) from err


def drain_pods(
    api: KubeApi,
    node_name: str,
    *,
    selection: PodSelection,
    timeout: float,
    sleep: float,
    clock: Clock = time.monotonic,
    pause: Pause = time.sleep,
) -> EvictionResult:
    """Remove the selected pods from the node: evict (retrying PDB refusals), then wait until they are gone.

    ``timeout`` bounds the evictions and the wait for the pods to go together.
    Blocked pods (no controller, emptyDir data) halt before anything is evicted.
    """
    started = clock()
    pods = list_pods_on_node(api, node_name)
    dra = read_dra_gpus(api, pods) if selection.gpu else {}
    plan = pods_to_evict(pods, selection=selection, dra=dra)
    if plan.blocked:
        reasons = "; ".join(f"{key}: {why}" for key, why in plan.blocked)
        raise RolloutHaltedError(
            f"Cannot empty node {node_name}: {reasons}", node=node_name, result={"pods": plan.summary()}
        )
    refusals, _gone = evict_pods(api, node_name, plan.evict, timeout=timeout, sleep=sleep, clock=clock, pause=pause)
    leaving = list(plan.evict) + list(plan.terminating)
    remaining_time = max(0.0, timeout - (clock() - started))
    wait_for_pods_gone(api, node_name, leaving, timeout=remaining_time, sleep=sleep, clock=clock, pause=pause)
    return EvictionResult(
        node=node_name,
        evicted=tuple(pod_key(pod) for pod in plan.evict),
        waited_for=tuple(pod_key(pod) for pod in plan.terminating),
        skipped=plan.skipped,
        elapsed=clock() - started,
        refusals=refusals,
    )


@dataclass(frozen=True)
class JobsWaitResult:
    node: str
    elapsed: float
    timed_out: bool
    still_running: Tuple[str, ...]


def unfinished_pods(pods: Sequence[Mapping[str, Any]]) -> List[str]:
    return sorted(pod_key(pod) for pod in pods if object_field(pod, "status").get("phase") not in _FINISHED_PHASES)


def wait_for_jobs(
    api: KubeApi,
    node_name: str,
    *,
    pod_selector: str,
    timeout: float,
    sleep: float,
    proceed_on_timeout: bool = False,
    namespace: Optional[str] = None,
    clock: Clock = time.monotonic,
    pause: Pause = time.sleep,
) -> JobsWaitResult:
    """Wait until no pod on the node matching ``pod_selector`` is still Pending or Running.

    The GPU Operator's waitForCompletion moves on after its timeout; here that
    is ``proceed_on_timeout``, otherwise the timeout is an error.
    """
    parse_label_selector(pod_selector)
    try:
        outcome = wait_until(
            lambda: unfinished_pods(
                list_pods_on_node(api, node_name, namespace=namespace, label_selector=pod_selector)
            ),
            lambda running: not running,
            timeout=timeout,
            sleep=sleep,
            what=f"pods matching {pod_selector} on node {node_name} to finish",
            clock=clock,
            pause=pause,
        )
    except WaitTimeoutError as err:
        if not proceed_on_timeout:
            raise
        return JobsWaitResult(
            node=node_name,
            elapsed=float(err.result.get("elapsed") or timeout),
            timed_out=True,
            still_running=tuple(err.result.get("last") or ()),
        )
    return JobsWaitResult(node=node_name, elapsed=outcome.elapsed, timed_out=False, still_running=())
