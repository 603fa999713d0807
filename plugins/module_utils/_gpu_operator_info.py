# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Where the GPU Operator runs and how it is installed (collection-internal).

One read of what roles/gpu_operator needs before it moves the operator: its ClusterPolicies, the namespace the
operator runs in, its OLM Subscription, the record an interrupted OLM reinstall left, and the driver images its
release would replace (``_gpu_operands.release_pins``, from the driver DaemonSets and NVIDIADrivers).
``honoured_cluster_policy`` is the one rule for which ClusterPolicy counts: the GPU Operator reconciles only its
oldest and marks the others ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import KubeApiError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_scope import name_of
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_operands import release_pins
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import list_served
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import (
    CLUSTER_POLICIES,
    CONFIGMAPS,
    DAEMONSETS,
    DRIVER_SELECTOR,
    NVIDIA_DRIVERS,
    SUBSCRIPTIONS,
)


def honoured_cluster_policy(policies: Sequence[Mapping[str, Any]]) -> Optional[Mapping[str, Any]]:
    """The ClusterPolicy the GPU Operator reconciles: the oldest (by creationTimestamp, then name); None if none."""
    if not policies:
        return None
    return min(policies, key=lambda p: (str((p.get("metadata") or {}).get("creationTimestamp") or ""), name_of(p)))


def operator_namespace(policies: Sequence[Mapping[str, Any]], *, given: str = "") -> str:
    """The operator's namespace: ``given``, else the honoured ClusterPolicy's ``status.namespace``; "" if unknown."""
    if given:
        return given
    honoured = honoured_cluster_policy(policies)
    return str(((honoured or {}).get("status") or {}).get("namespace") or "")


@dataclass(frozen=True)
class OperatorQuery:
    cluster_policy: str = ""  # a ClusterPolicy by name; empty: every ClusterPolicy
    namespace: str = ""  # the operator's namespace; empty: read from the ClusterPolicy
    subscription: str = "gpu-operator-certified"
    olm_state_configmap: str = "gpufleet-gpu-operator-olm-reinstall"
    gitops_managed: Tuple[str, ...] = ()  # Kind/name of the objects Argo CD writes (their pins go to Git)


def _get_or_none(api: Any, ref: Any, name: str, *, namespace: Optional[str] = None) -> Optional[Dict[str, Any]]:
    """The object; None when it or its kind is absent (a cluster without OLM serves no Subscription)."""
    try:
        return api.get(ref, name, namespace=namespace)
    except KubeApiError as err:
        if err.status == 404:
            return None
        raise


def read_operator(api: Any, query: OperatorQuery) -> Dict[str, Any]:
    """Read the ClusterPolicies, then the Subscription and the reinstall record in the operator's namespace.

    Reads only. A ClusterPolicy named in ``query`` that does not exist, or a cluster without the ClusterPolicy
    kind, gives no policies (the callers say what that means for their step).
    """
    if query.cluster_policy:
        found = _get_or_none(api, CLUSTER_POLICIES, query.cluster_policy)
        policies: List[Dict[str, Any]] = [found] if found else []
    else:
        policies = list_served(api, CLUSTER_POLICIES)
    namespace = operator_namespace(policies, given=query.namespace)
    subscription = olm_state = None
    pins: Dict[str, Any] = {"pins": [], "gitops_changes": [], "problems": []}
    if namespace:
        subscription = _get_or_none(api, SUBSCRIPTIONS, query.subscription, namespace=namespace)
        olm_state = _get_or_none(api, CONFIGMAPS, query.olm_state_configmap, namespace=namespace)
        honoured = honoured_cluster_policy(policies)
        if honoured is not None:
            uses_crd = bool(((honoured.get("spec") or {}).get("driver") or {}).get("useNvidiaDriverCRD"))
            pins = release_pins(
                honoured,
                list_served(api, NVIDIA_DRIVERS) if uses_crd else [],
                api.list(DAEMONSETS, namespace=namespace, label_selector=DRIVER_SELECTOR),
                gitops_managed=query.gitops_managed,
            )
    return {
        "changed": False,
        "cluster_policies": policies,
        "namespace": namespace,
        "subscription": subscription or {},
        "olm_state": olm_state or {},
        # OLM manages the operator when its Subscription exists, or while an interrupted reinstall's record says
        # the Subscription was deleted on the way back to it.
        "olm": bool(subscription) or bool(olm_state),
        "release_pins": pins["pins"],
        "release_pin_gitops_changes": pins["gitops_changes"],
        "release_pin_problems": pins["problems"],
    }
