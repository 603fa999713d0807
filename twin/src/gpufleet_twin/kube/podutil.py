"""Small pure helpers about pods and nodes shared by the scheduler, kubelet and controllers.

Semantics follow the upstream helpers they are named after (component-helpers
``scheduling/corev1``, ``v1helper.ToleratesTaint``, pod readiness in
``podutil``), reimplemented for plain JSON dicts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..machinery.clock import parse_rfc3339

Obj = dict[str, Any]
PodKey = tuple[str, str]

GPU_RESOURCE = "nvidia.com/gpu"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
MULTUS_NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"


def key_of(obj: Obj) -> PodKey:
    meta = obj["metadata"]
    return (meta.get("namespace") or "", meta["name"])


def controller_of(obj: Obj) -> Obj | None:
    """The ownerReference with ``controller: true``, if any."""
    for ref in obj.get("metadata", {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return ref
    return None


def owner_reference(owner: Obj, *, block_owner_deletion: bool = True) -> Obj:
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": block_owner_deletion,
    }


def is_terminating(obj: Obj) -> bool:
    return bool(obj.get("metadata", {}).get("deletionTimestamp"))


def phase_of(pod: Obj) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def is_terminal(pod: Obj) -> bool:
    return phase_of(pod) in ("Succeeded", "Failed")


def condition(obj: Obj, kind: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == kind:
            return cond
    return None


def is_pod_ready(pod: Obj) -> bool:
    cond = condition(pod, "Ready")
    return cond is not None and cond.get("status") == "True"


def is_pod_available(pod: Obj, *, min_ready_seconds: float, now: float) -> bool:
    """Ready for at least ``minReadySeconds`` (upstream ``IsPodAvailable``)."""
    if is_terminating(pod) or not is_pod_ready(pod):
        return False
    if min_ready_seconds <= 0:
        return True
    since = (condition(pod, "Ready") or {}).get("lastTransitionTime")
    return since is not None and parse_rfc3339(since) + min_ready_seconds <= now


def is_node_ready(node: Obj) -> bool:
    cond = condition(node, "Ready")
    return cond is not None and cond.get("status") == "True"


def node_unavailable(node: Obj) -> bool:
    """Cordoned or not Ready: what upgrade budgets count as unavailable."""
    return bool((node.get("spec") or {}).get("unschedulable")) or not is_node_ready(node)


def quantity_int(value: Any) -> int:
    """A count-like resource quantity ("8", 8) as an int; 0 when absent or not a plain integer."""
    if value is None:
        return 0
    try:
        return int(str(value))
    except ValueError:
        return 0


def container_gpus(container: Obj) -> int:
    resources = container.get("resources") or {}
    # Extended resources cannot be overcommitted: requests default to limits.
    limits = quantity_int((resources.get("limits") or {}).get(GPU_RESOURCE))
    requests = quantity_int((resources.get("requests") or {}).get(GPU_RESOURCE))
    return max(limits, requests)


def gpu_request(pod: Obj) -> int:
    """GPUs a pod occupies: sum of its containers, or the largest init container if more."""
    spec = pod.get("spec") or {}
    regular = sum(container_gpus(c) for c in spec.get("containers") or ())
    init = max((container_gpus(c) for c in spec.get("initContainers") or ()), default=0)
    return max(regular, init)


def uses_secondary_network(pod: Obj) -> bool:
    return bool((pod.get("metadata", {}).get("annotations") or {}).get(MULTUS_NETWORKS_ANNOTATION))


# -- taints and tolerations ---------------------------------------------------------------------
def tolerates(toleration: Obj, taint: Obj) -> bool:
    """``v1.Toleration.ToleratesTaint``: empty effect matches all, Exists with empty key matches all."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def untolerated_taint(
    taints: Iterable[Obj],
    tolerations: Iterable[Obj],
    *,
    effects: frozenset[str] = frozenset({"NoSchedule", "NoExecute"}),
) -> Obj | None:
    tolerations = list(tolerations)
    for taint in taints:
        if taint.get("effect") not in effects:
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def node_taints(node: Obj) -> list[Obj]:
    return list((node.get("spec") or {}).get("taints") or ())


# -- node selection --------------------------------------------------------------------------------
def _requirement_matches(requirement: Obj, value: str | None) -> bool:
    operator = requirement.get("operator")
    values = requirement.get("values") or []
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt"):
        if value is None or len(values) != 1:
            return False
        try:
            have, want = int(value), int(values[0])
        except ValueError:
            return False
        return have > want if operator == "Gt" else have < want
    return False


def node_selector_term_matches(term: Obj, node: Obj) -> bool:
    """A NodeSelectorTerm: all matchExpressions (labels) and matchFields (metadata.name) hold."""
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False  # an empty term matches no objects (upstream NodeSelectorTerm doc)
    labels = node["metadata"].get("labels") or {}
    if not all(_requirement_matches(req, labels.get(req.get("key", ""))) for req in expressions):
        return False
    for req in fields:
        # metadata.name is the only supported field.
        value = node["metadata"]["name"] if req.get("key") == "metadata.name" else None
        if not _requirement_matches(req, value):
            return False
    return True


def required_node_affinity(pod_spec: Obj) -> list[Obj] | None:
    affinity = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not affinity:
        return None
    return list(affinity.get("nodeSelectorTerms") or [])


def pod_fits_node_labels(pod_spec: Obj, node: Obj) -> bool:
    """nodeSelector and required node affinity (terms are ORed, like the scheduler's NodeAffinity)."""
    labels = node["metadata"].get("labels") or {}
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    terms = required_node_affinity(pod_spec)
    if terms is None:
        return True
    return any(node_selector_term_matches(term, node) for term in terms)


def pinned_node_name(pod_spec: Obj) -> str | None:
    """The node a DaemonSet pod is pinned to through ``matchFields metadata.name In [node]``."""
    for term in required_node_affinity(pod_spec) or ():
        for req in term.get("matchFields") or ():
            values = req.get("values") or []
            if req.get("key") == "metadata.name" and req.get("operator") == "In" and len(values) == 1:
                return str(values[0])
    return None


# -- selectors and arithmetic ---------------------------------------------------------------------------
def label_selector_matcher(selector: Mapping[str, Any] | None) -> Callable[[Mapping[str, str] | None], bool]:
    """A matcher for a metav1.LabelSelector (matchLabels + matchExpressions)."""
    from ..machinery import selectors  # noqa: PLC0415 - lazy: the one import site of the shared selector parser

    return selectors.label_selector_from_dict(selector).matches


def scaled_value(value: int | str | None, total: int, *, round_up: bool, default: int | str = 0) -> int:
    """``intstr.GetScaledValueFromIntOrPercent``: an int, or a percent of ``total``."""
    if value is None:
        value = default
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if text.endswith("%"):
        percent = float(text[:-1])
        scaled = percent * total / 100.0
        return math.ceil(scaled) if round_up else math.floor(scaled)
    return int(text)
