# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The permission preflight (collection-internal): ask the API what these credentials may do.

One SelfSubjectAccessReview per permission the run needs (``_permissions``).
A SelfSubjectRulesReview per namespace would send fewer requests, but it is
not exact: the API documents its answer as possibly incomplete (other
authorizers, ``status.incomplete``), and its rules do not say whether a rule
came from a ClusterRoleBinding or a RoleBinding, so a namespaced grant of a
cluster-scoped resource would look sufficient when it is not. An access review
is the authorizer's own answer for exactly one request. Nothing is written:
an access review is a create that the API server answers without storing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Sequence

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError, KubeApiError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import CLUSTER_POLICIES, ResourceRef
from ansible_collections.gpufleet.upgrade.plugins.module_utils._permissions import (
    GPU_OPERATOR,
    LEDGER,
    Permission,
    namespace_keys_for,
    permissions_for,
    refusal_message,
    steps_for,
)

SELF_SUBJECT_ACCESS_REVIEWS = ResourceRef(
    "authorization.k8s.io/v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False
)


@dataclass(frozen=True)
class PermissionRequest:
    playbook: str
    stage: str = ""
    group: str = ""
    features: Sequence[str] = ()
    namespaces: Mapping[str, str] = field(default_factory=dict)


def access_review(permission: Permission) -> Dict[str, Any]:
    """The SelfSubjectAccessReview body asking for one permission."""
    attributes = {"verb": permission.verb, "group": permission.group, "resource": permission.resource}
    if permission.subresource:
        attributes["subresource"] = permission.subresource
    if permission.namespace:
        attributes["namespace"] = permission.namespace
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }


def _gpu_operator_namespace(api: Any) -> str:
    """The GPU Operator's namespace as its (oldest) ClusterPolicy reports it; "" when it cannot be read."""
    try:
        policies = api.list(CLUSTER_POLICIES)
    except KubeApiError as err:
        if err.status in (403, 404):
            return ""
        raise
    if not policies:
        return ""
    oldest = min(policies, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""))
    return str((oldest.get("status") or {}).get("namespace") or "")


def resolve_namespaces(api: Any, request: PermissionRequest, steps: Sequence[str]) -> Dict[str, str]:
    """The namespaces the steps need: given ones, the GPU Operator's read from its ClusterPolicy when not given."""
    namespaces = {key: str(value) for key, value in request.namespaces.items() if value}
    needed = namespace_keys_for(steps)
    # The ledger's default namespace is the GPU Operator's (cluster_snapshot's ledger_namespaces, upgrade_namespace).
    wanted = {GPU_OPERATOR, LEDGER} & needed
    if any(key not in namespaces for key in wanted):
        found = _gpu_operator_namespace(api)
        for key in wanted:
            if found and key not in namespaces:
                namespaces[key] = found
    missing = sorted(needed - set(namespaces))
    if missing:
        raise InvalidInputError(
            f"The permission check needs the namespace of {', '.join(missing)} (option namespaces)"
            + (
                "; the GPU Operator's was not found from its ClusterPolicy: set gpu_operator_namespace"
                if {GPU_OPERATOR, LEDGER} & set(missing)
                else ""
            )
        )
    return namespaces


def check_permissions(api: Any, request: PermissionRequest) -> Dict[str, Any]:
    """Ask for every permission the run needs; raise InvalidInputError listing the missing ones."""
    try:
        steps = steps_for(
            playbook=request.playbook, stage=request.stage, group=request.group, features=request.features
        )
    except ValueError as err:
        raise InvalidInputError(str(err)) from err
    namespaces = resolve_namespaces(api, request, steps)
    needed = permissions_for(steps, namespaces=namespaces)
    missing: List[Permission] = []
    for permission in needed:
        review = api.create(SELF_SUBJECT_ACCESS_REVIEWS, access_review(permission))
        if not (review.get("status") or {}).get("allowed"):
            missing.append(permission)
    result: Dict[str, Any] = {
        "changed": False,
        "steps": list(steps),
        "namespaces": namespaces,
        "checked": len(needed),
        "missing": [item.as_dict() for item in missing],
        "api_requests": api.requests_sent,
    }
    if missing:
        what = f"{request.playbook}.yml" + (f" stage {request.stage} of {request.group}" if request.stage else "")
        raise InvalidInputError(refusal_message(missing, what=what), result=result)
    return result
