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
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError, KubeApiError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_operator_info import operator_namespace
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import CLUSTER_POLICIES, ResourceRef
from ansible_collections.gpufleet.upgrade.plugins.module_utils._permissions import (
    GPU_OPERATOR,
    LEDGER,
    RBAC_ROLE,
    Permission,
    namespace_keys_for,
    permissions_for,
    refusal_message,
    steps_for,
)

SELF_SUBJECT_ACCESS_REVIEWS = ResourceRef(
    "authorization.k8s.io/v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False
)
CLUSTER_ROLES_REF = ResourceRef("rbac.authorization.k8s.io/v1", "clusterroles", "ClusterRole", False)


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
    return operator_namespace(policies)


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


# -- playbooks/rbac.yml ----------------------------------------------------------------------------------------------
_RBAC_GROUP = "rbac.authorization.k8s.io"
# What roles/rbac's kubernetes.core.k8s tasks send: state present reads each object, then creates or patches it;
# state absent reads it, then deletes it.
_RBAC_VERBS = {"present": ("get", "create", "patch"), "absent": ("get", "delete")}
# At most this many permissions are listed per object that could not be granted (the rest are counted).
_LISTED = 4


def _review(verb: str, group: str, resource: str, *, namespace: str = "", name: str = "") -> Dict[str, Any]:
    resource, _sep, subresource = resource.partition("/")
    attributes = {"verb": verb, "group": group, "resource": resource}
    for key, value in (("subresource", subresource), ("namespace", namespace), ("name", name)):
        if value:
            attributes[key] = value
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }


class _Reviews:
    """SelfSubjectAccessReviews, each asked once."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.answers: Dict[Tuple[str, ...], bool] = {}

    def allowed(self, verb: str, group: str, resource: str, *, namespace: str = "", name: str = "") -> bool:
        key = (verb, group, resource, namespace, name)
        if key not in self.answers:
            review = self.api.create(
                SELF_SUBJECT_ACCESS_REVIEWS, _review(verb, group, resource, namespace=namespace, name=name)
            )
            self.answers[key] = bool((review.get("status") or {}).get("allowed"))
        return self.answers[key]


def may(api: Any, verb: str, group: str, resource: str, *, namespace: str = "", name: str = "") -> bool:
    """Whether the credentials may do this (one SelfSubjectAccessReview): a read outside the shipped roles is
    asked first, so that without the grant it is "could not check" and not a 403 in the API server's audit."""
    return _Reviews(api).allowed(verb, group, resource, namespace=namespace, name=name)


def _not_held(reviews: _Reviews, role: Mapping[str, Any], namespace: str) -> List[str]:
    """The permissions of the ClusterRole's rules the credentials do not hold (in the namespace, or cluster-wide)."""
    missing = []
    for rule in role.get("rules") or []:
        for group in rule.get("apiGroups") or [""]:
            for resource in rule.get("resources") or []:
                for verb in rule.get("verbs") or []:
                    for name in rule.get("resourceNames") or [""]:
                        if not reviews.allowed(verb, group, resource, namespace=namespace, name=name):
                            where = f'in namespace "{namespace}"' if namespace else "at the cluster scope"
                            named = f" named {name}" if name else ""
                            missing.append(f'{verb} {resource}{named} in API group "{group}" {where}')
    return missing


def _listed(items: Sequence[str]) -> str:
    shown = "; ".join(items[:_LISTED])
    return shown + (f"; and {len(items) - _LISTED} more" if len(items) > _LISTED else "")


def _escalation_problems(reviews: _Reviews, api: Any, objects: Sequence[Mapping[str, Any]]) -> List[str]:
    """kube-apiserver's RBAC escalation check, asked ahead: a ClusterRole may be created or updated only by who holds
    every permission in it or may escalate it; a binding only by who holds the role's permissions (where it binds
    them) or may bind it."""
    roles = {item["metadata"]["name"]: item for item in objects if item.get("kind") == "ClusterRole"}
    problems = []
    # Whether a ClusterRole exists decides what the authorizer is asked; without get on clusterroles (already
    # reported missing) every one is taken as to be created, and nothing is read that would be refused.
    may_read = reviews.allowed("get", _RBAC_GROUP, "clusterroles")
    for name, role in roles.items():
        exists = may_read and _exists(api, name)
        # An object being created has no name yet for the authorizer: a rule limited by resourceNames covers it
        # only once it exists (an update).
        if reviews.allowed("escalate", _RBAC_GROUP, "clusterroles", name=name if exists else ""):
            continue
        missing = _not_held(reviews, role, "")
        if missing:
            problems.append(
                f"{'update' if exists else 'create'} ClusterRole {name}: the credentials neither hold its "
                f"{len(missing)} permission(s) {_listed(missing)} nor may escalate clusterroles "
                f"(escalate on it is granted by ClusterRole {RBAC_ROLE} in rbac/rbac.yaml once it exists; creating "
                "it needs its permissions held, a cluster administrator's)"
            )
    for binding in objects:
        if binding.get("kind") not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        ref = binding.get("roleRef") or {}
        namespace = str((binding.get("metadata") or {}).get("namespace") or "")
        if reviews.allowed("bind", _RBAC_GROUP, "clusterroles", namespace=namespace, name=str(ref.get("name"))):
            continue
        role = roles.get(str(ref.get("name"))) or {}
        missing = _not_held(reviews, role, namespace) if role else ["the ClusterRole's permissions (not applied here)"]
        if missing:
            where = f' in namespace "{namespace}"' if namespace else ""
            problems.append(
                f"create {binding['kind']} {binding['metadata']['name']}{where}: the credentials neither may bind "
                f"ClusterRole {ref.get('name')} (bind, granted by ClusterRole {RBAC_ROLE} in rbac/rbac.yaml through "
                f"a ClusterRoleBinding) nor hold its {len(missing)} permission(s) {_listed(missing)}"
            )
    return problems


def _exists(api: Any, name: str) -> bool:
    try:
        return api.get(CLUSTER_ROLES_REF, name) is not None
    except KubeApiError as err:
        if err.status in (403, 404):
            return False
        raise


def check_rbac_apply(api: Any, objects: Sequence[Mapping[str, Any]], *, state: str = "present") -> Dict[str, Any]:
    """May the credentials apply (or remove) roles/rbac's objects? Raise InvalidInputError naming what is missing.

    First the verbs on each kind (the rbac_apply step of the permission table, granted by ClusterRole
    gpufleet-rbac), then, to apply, kube-apiserver's escalation check for every ClusterRole and binding.
    """
    if state not in _RBAC_VERBS:
        raise InvalidInputError(f"state must be present or absent (got {state!r})")
    reviews = _Reviews(api)
    wanted = _RBAC_VERBS[state]
    needed = [item for item in permissions_for(steps_for(playbook="rbac"), namespaces={}) if item.verb in wanted]
    missing = [item for item in needed if not reviews.allowed(item.verb, item.group, item.resource)]
    problems = _escalation_problems(reviews, api, objects) if state == "present" else []
    result: Dict[str, Any] = {
        "changed": False,
        "steps": ["rbac_apply"],
        "namespaces": {},
        "checked": len(reviews.answers),
        "missing": [item.as_dict() for item in missing],
        "escalation": problems,
        "api_requests": api.requests_sent,
    }
    if missing or problems:
        parts = []
        if missing:
            parts.append(refusal_message(missing, what="rbac.yml"))
        if problems:
            parts.append(
                f"rbac.yml: kube-apiserver would refuse to grant {len(problems)} object(s), so nothing was changed "
                "(a user may grant only permissions it holds, unless it has escalate and bind on the roles): "
                + "; ".join(problems)
            )
        raise InvalidInputError(" ".join(parts), result=result)
    return result
