# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Kubernetes Events on the objects the collection acts on (collection-internal).

``kubectl get events`` (or ``kubectl describe node``) then tells the story of
an upgrade: which node was cordoned, upgraded, halted, and why.
"""

from __future__ import annotations

import datetime
import secrets
from typing import Any, Dict, Optional

from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import (
    EVENTS,
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
    """A core/v1 Event about ``involved`` (any object with kind, apiVersion and metadata)."""
    meta = involved.get("metadata") or {}
    moment = iso(now or utc_now())
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
) -> Dict[str, Any]:
    event = build_event(involved, message=message, reason=reason, event_type=event_type, action=action)
    return api.create(EVENTS, event, namespace=event["metadata"]["namespace"])
