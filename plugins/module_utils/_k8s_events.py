# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Kubernetes Events on the objects the collection acts on (collection-internal).

``kubectl get events`` (or ``kubectl describe node``) then tells the story of
an upgrade: which node was cordoned, upgraded, halted, and why. The stages of
roles/upgrade add one Normal Event (reason ``GPUFleetUpgrade``) per milestone
(``STAGE_EVENTS``: canary started and passed, bake check passed or failed,
promoted, rolled back) on the component's own object (the ClusterPolicy, the
NicClusterPolicy, the MachineConfigPools of the nodes) and on each node,
stamped with the API server's clock.
"""

from __future__ import annotations

import datetime
import secrets
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError, KubeApiError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import (
    CLUSTER_POLICIES,
    EVENTS,
    MACHINE_CONFIG_POOLS,
    NIC_CLUSTER_POLICIES,
    NODES,
    ResourceRef,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import iso, utc_now

EVENT_REASON = "GPUFleetUpgrade"
REPORTING_COMPONENT = "gpufleet.upgrade"


def build_event(
    involved: Dict[str, Any],
    *,
    message: str,
    reason: str = EVENT_REASON,
    event_type: str = "Normal",
    action: str = "Upgrade",
    now: Optional[datetime.datetime] = None,
) -> Dict[str, Any]:
    """A core/v1 Event about ``involved`` (any object with kind, apiVersion and metadata).

    Its times are ``now`` (the cluster's clock, see ``record_event``): ``firstTimestamp`` and ``lastTimestamp``
    as metav1.Time (seconds), ``eventTime`` as MicroTime, the way the events.k8s.io recorders write core/v1
    Events (an Event with eventTime needs reportingComponent, reportingInstance and action, which it has).
    """
    meta = involved.get("metadata") or {}
    moment_at = now or utc_now()
    moment = iso(moment_at)
    # Cluster-scoped objects (Nodes, ClusterPolicies) get their Events in
    # "default", where kubectl describe looks for them.
    namespace = meta.get("namespace") or "default"
    involved_ref = {
        "apiVersion": involved.get("apiVersion", "v1"),
        "kind": involved.get("kind", ""),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
    }
    if meta.get("namespace"):
        involved_ref["namespace"] = meta["namespace"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta.get('name', 'object')}.{secrets.token_hex(8)}", "namespace": namespace},
        "involvedObject": involved_ref,
        "reason": reason,
        "message": message[:1024],
        "type": event_type,
        "action": action,
        "count": 1,
        "eventTime": iso(moment_at, micro=True),
        "firstTimestamp": moment,
        "lastTimestamp": moment,
        "source": {"component": REPORTING_COMPONENT},
        "reportingComponent": REPORTING_COMPONENT,
        "reportingInstance": REPORTING_COMPONENT,
    }


def record_event(
    api: KubeApi,
    involved: Dict[str, Any],
    *,
    message: str,
    reason: str = EVENT_REASON,
    event_type: str = "Normal",
    action: str = "Upgrade",
    now: Optional[datetime.datetime] = None,
) -> Dict[str, Any]:
    """Post an Event about ``involved``, stamped with the cluster's clock (the API server's Date) unless ``now``."""
    moment = now if now is not None else api.cluster_now()
    event = build_event(involved, message=message, reason=reason, event_type=event_type, action=action, now=moment)
    return api.create(EVENTS, event, namespace=event["metadata"]["namespace"])


# -- stage milestones ---------------------------------------------------------------------------------------

# Milestone -> the Event's action (Events' "action" says what was done, in CamelCase like the kubelet's).
STAGE_EVENTS: Dict[str, str] = {
    "canary_started": "CanaryStarted",
    "canary_passed": "CanaryPassed",
    "bake_passed": "BakeCheckPassed",
    "bake_failed": "BakeCheckFailed",
    "promoted": "Promoted",
    "rolled_back": "RolledBack",
}
# The object of each component group that its in-cluster controller reconciles; groups not named here (NIC
# firmware through the BMCs, SR-IOV) get their Events on the nodes only.
GROUP_OBJECTS: Dict[str, ResourceRef] = {
    "gpu_operator": CLUSTER_POLICIES,
    "network_operator": NIC_CLUSTER_POLICIES,
    "openshift": MACHINE_CONFIG_POOLS,
}


def _selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A LabelSelector's matchLabels and In/NotIn/Exists/DoesNotExist expressions against node labels."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        present = key in labels
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and present and labels.get(key) in values:
            return False
        if (operator == "Exists") != present and operator in ("Exists", "DoesNotExist"):
            return False
    return True


def pools_of_nodes(pools: Sequence[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """The MachineConfigPools that hold any of ``nodes``: for each node the most specific pool (most selector
    terms) that selects it, as the MCO places a node in a custom pool rather than ``worker``."""
    chosen: Dict[str, Dict[str, Any]] = {}
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        matching = [pool for pool in pools if _selects((pool.get("spec") or {}).get("nodeSelector") or {}, labels)]
        if not matching:
            continue

        def terms(pool: Mapping[str, Any]) -> int:
            selector = (pool.get("spec") or {}).get("nodeSelector") or {}
            return len(selector.get("matchLabels") or {}) + len(selector.get("matchExpressions") or [])

        best = max(matching, key=terms)
        chosen[str(best["metadata"]["name"])] = dict(best)
    return [chosen[name] for name in sorted(chosen)]


def record_stage_events(
    api: KubeApi,
    *,
    milestone: str,
    group: str,
    nodes: Sequence[str],
    message: str,
    check_mode: bool = False,
) -> Dict[str, Any]:
    """One Normal Event for ``milestone`` on the group's object(s) and on each node; what was (or would be) made."""
    if milestone not in STAGE_EVENTS:
        raise InvalidInputError(f"milestone must be one of {', '.join(STAGE_EVENTS)}, not {milestone!r}")
    if not message.strip():
        raise InvalidInputError("message cannot be empty: it is what kubectl describe shows")
    node_objects = [node for node in (api.get(NODES, name) for name in nodes) if node is not None]
    missing = sorted(set(nodes) - {str(node["metadata"]["name"]) for node in node_objects})
    if missing:
        raise InvalidInputError(f"Node(s) not found: {', '.join(missing)}")
    involved: List[Dict[str, Any]] = []
    ref = GROUP_OBJECTS.get(group)
    if ref is not None:
        try:
            objects = api.list(ref)
        except KubeApiError as err:
            # The group's CRD not served (a cluster without that operator): the nodes still get theirs.
            if err.status != 404:
                raise
            objects = []
        involved += pools_of_nodes(objects, node_objects) if ref is MACHINE_CONFIG_POOLS else objects
    involved += node_objects
    events = [
        {"kind": obj.get("kind", ""), "name": obj["metadata"]["name"], "action": STAGE_EVENTS[milestone]}
        for obj in involved
    ]
    if not check_mode:
        # The cluster's clock, as every timestamp the collection writes.
        now = api.cluster_now()
        for obj in involved:
            record_event(api, obj, message=message, action=STAGE_EVENTS[milestone], now=now)
    return {"changed": bool(events), "events": events, "milestone": milestone}
