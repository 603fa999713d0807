"""Authorization as kube-apiserver's RBAC authorizer decides it.

The pure part (request attributes and RBAC objects in, a decision and its reason out) follows upstream:

- ``request_attributes``: the attributes ``k8s.io/apiserver/pkg/endpoints/request`` RequestInfoFactory
  derives from a request.  Paths outside ``/api`` and ``/apis``, and those with fewer than three segments
  (``/api/v1``, ``/apis/apps/v1``: discovery) are non-resource requests whose verb is the lowercase HTTP
  method.  Resource requests take the verb from the method (GET and HEAD ``get``, POST ``create``, PUT
  ``update``, PATCH ``patch``, DELETE ``delete``) or from a leading ``watch``/``proxy`` segment; a
  ``get`` without a name is ``list``, or ``watch`` with the ``watch`` query parameter; a ``delete``
  without a name is ``deletecollection``.  A ``metadata.name=`` field selector names the object of a
  list or watch (so ``resourceNames`` rules apply to ``kubectl get node X -w``).  ``/namespaces/{ns}``
  itself is the resource ``namespaces`` named ``ns`` in the namespace ``ns``.
- ``rule_allows``: plugin/pkg/auth/authorizer/rbac's RuleAllows with pkg/apis/rbac/v1's matchers: verbs
  and API groups match exactly or by ``*``; a resource by ``*``, exactly (``pods/eviction`` is the
  combined ``resource/subresource``) or ``*/<subresource>``; ``resourceNames`` restrict to those names
  when not empty (so never match a request without a name: list, create); non-resource URLs match
  exactly, by ``*`` or by a trailing ``*`` prefix.
- ``visit_rules``: pkg/registry/rbac/validation's DefaultRuleResolver: every ClusterRoleBinding whose
  subjects include the user (User by name, Group by membership, ServiceAccount by
  ``system:serviceaccount:<ns>:<name>``), then, for a namespaced request, every RoleBinding of that
  namespace (a ServiceAccount subject without a namespace means the binding's); a binding whose role is
  missing is an error that is reported, not a denial of its own.
- ``authorize``: the ``system:masters`` group is allowed everything before RBAC is asked (kube-apiserver's
  privileged-group authorizer); RBAC allows with the reason ``RBAC: allowed by ClusterRoleBinding "b"
  of ClusterRole "r" to User "u"`` or has no opinion (the request is forbidden), with the resolution
  errors as reason (``RBAC: clusterrole.rbac.authorization.k8s.io "x" not found``).
- ``forbidden``: the 403 Status of k8s.io/apiserver's responsewriters.Forbidden
  (``nodes "gpu-worker-001" is forbidden: User "system:serviceaccount:gpufleet:audit" cannot patch
  resource "nodes" in API group "" at the cluster scope``; ``forbidden: User "u" cannot get path "/x"``
  for non-resource requests), with ``details`` ``{name, group, kind}`` as apierrors.NewForbidden.
- ``access_review_status`` / ``rules_review_status``: what authorization.k8s.io/v1
  SelfSubjectAccessReview and SelfSubjectRulesReview answer from the same rules.
- ``BOOTSTRAP_CLUSTER_ROLES`` / ``BOOTSTRAP_CLUSTER_ROLE_BINDINGS``: the default roles of
  plugin/pkg/auth/authorizer/rbac/bootstrappolicy that matter to the twin's clients, with
  ``aggregate_cluster_roles`` doing the clusterrole-aggregation controller's work.

``StorePolicy`` reads the RBAC objects from the twin's store.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qs

from ..machinery import errors, selectors
from ..machinery.errors import ApiError
from ..machinery.registry import Registry
from ..machinery.store import Store, WatchEvent
from .serviceaccount_tokens import UserInfo

Obj = dict[str, Any]

GROUP = "rbac.authorization.k8s.io"
SYSTEM_MASTERS = "system:masters"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
_SPECIAL_VERBS = frozenset({"proxy", "watch"})
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
_METHOD_VERBS: Mapping[str, str] = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}
# What strconv.ParseBool, which decoding ListOptions' ``watch`` uses, reads as true.
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})


@dataclass(frozen=True)
class Attributes:
    """authorizer.Attributes of one request (or of a SelfSubjectAccessReview's spec)."""

    user: UserInfo
    verb: str
    resource_request: bool
    path: str = ""
    api_group: str = ""
    api_version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


# -- request attributes -------------------------------------------------------------------------------------


def request_attributes(*, user: UserInfo, method: str, path: str, query: Mapping[str, str]) -> Attributes:
    """The authorization attributes kube-apiserver's RequestInfoFactory derives from one request."""
    parts = [part for part in path.split("/") if part]
    non_resource = Attributes(user=user, verb=method.lower(), resource_request=False, path=path)
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return non_resource
    rest = parts[1:]
    group = ""
    if parts[0] == "apis":
        if len(rest) < 3:
            return non_resource
        group, rest = rest[0], rest[1:]
    version, rest = rest[0], rest[1:]
    if rest[0] in _SPECIAL_VERBS:
        if len(rest) < 2:
            # Upstream refuses to build a RequestInfo ("unable to determine kind and namespace"); the
            # request is then authorized as the path it is.
            return non_resource
        verb, rest = rest[0], rest[1:]
    else:
        verb = _METHOD_VERBS.get(method.upper(), "")
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 and verb != "proxy" else ""
    if not name and verb == "get":
        # Any value strconv.ParseBool does not read as true (or cannot read at all) leaves a list.
        verb = "watch" if query.get("watch", "") in _TRUE else "list"
        name = _name_from_field_selector(query.get("fieldSelector", ""))
    if not name and verb == "delete":
        verb = "deletecollection"
    return Attributes(
        user=user,
        verb=verb,
        resource_request=True,
        path=path,
        api_group=group,
        api_version=version,
        namespace=namespace,
        resource=resource,
        subresource=subresource,
        name=name,
    )


def query_of(raw_query: str) -> dict[str, str]:
    """The first value of each query parameter (what ListOptions decoding reads)."""
    return {key: values[0] for key, values in parse_qs(raw_query, keep_blank_values=True).items()}


def _name_from_field_selector(selector: str) -> str:
    """The name a ``metadata.name=X`` (or ``==``) term of a field selector requires, if it is a valid path segment."""
    for term in selectors.split_field_terms(selector):
        parts = selectors.split_field_term(term.strip())
        if parts is None:
            continue
        key, operator, value = parts
        if key.strip() == "metadata.name" and operator in ("=", "==") and _valid_path_segment(value):
            return value
    return ""


def _valid_path_segment(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "%" not in name


# -- rule matching ---------------------------------------------------------------------------------------------


def verb_matches(rule: Obj, verb: str) -> bool:
    return any(candidate in ("*", verb) for candidate in rule.get("verbs") or ())


def api_group_matches(rule: Obj, group: str) -> bool:
    return any(candidate in ("*", group) for candidate in rule.get("apiGroups") or ())


def resource_matches(rule: Obj, combined_resource: str, subresource: str) -> bool:
    for candidate in rule.get("resources") or ():
        if candidate in ("*", combined_resource):
            return True
        if subresource and candidate == f"*/{subresource}":
            return True
    return False


def resource_name_matches(rule: Obj, name: str) -> bool:
    names = rule.get("resourceNames") or ()
    return not names or name in names


def non_resource_url_matches(rule: Obj, path: str) -> bool:
    for candidate in rule.get("nonResourceURLs") or ():
        if candidate in ("*", path):
            return True
        if candidate.endswith("*") and path.startswith(candidate.rstrip("*")):
            return True
    return False


def rule_allows(attributes: Attributes, rule: Obj) -> bool:
    if not attributes.resource_request:
        return verb_matches(rule, attributes.verb) and non_resource_url_matches(rule, attributes.path)
    combined = attributes.resource
    if attributes.subresource:
        combined = f"{attributes.resource}/{attributes.subresource}"
    return (
        verb_matches(rule, attributes.verb)
        and api_group_matches(rule, attributes.api_group)
        and resource_matches(rule, combined, attributes.subresource)
        and resource_name_matches(rule, attributes.name)
    )


# -- rule resolution --------------------------------------------------------------------------------------------


class Policy(Protocol):
    """The RBAC objects the authorizer reads (its informers' listers)."""

    def cluster_role_bindings(self) -> Iterable[Obj]: ...

    def role_bindings(self, namespace: str) -> Iterable[Obj]: ...

    def cluster_role(self, name: str) -> Obj | None: ...

    def role(self, namespace: str, name: str) -> Obj | None: ...


class RuleSourceError(Exception):
    """A binding whose role cannot be read (upstream's lister NotFound, or an unsupported kind)."""


# (source description, rule) -> keep visiting?
Visitor = Callable[[str, Obj], bool]


def subject_applies(user: UserInfo, subject: Obj, namespace: str) -> bool:
    kind = subject.get("kind")
    name = subject.get("name", "")
    if kind == "User":
        return user.username == name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        account_namespace = subject.get("namespace") or namespace
        return bool(account_namespace) and user.username == f"{SERVICE_ACCOUNT_PREFIX}{account_namespace}:{name}"
    return False


def _describe_subject(subject: Obj, binding_namespace: str) -> str:
    kind, name = subject.get("kind", ""), subject.get("name", "")
    if kind == "ServiceAccount":
        return f'{kind} "{name}/{subject.get("namespace") or binding_namespace}"'
    return f'{kind} "{name}"'


def _role_rules(policy: Policy, role_ref: Obj, binding_namespace: str) -> list[Obj]:
    kind, name = role_ref.get("kind", ""), role_ref.get("name", "")
    if kind == "Role":
        role = policy.role(binding_namespace, name)
        if role is None:
            raise RuleSourceError(f'role.{GROUP} "{name}" not found')
    elif kind == "ClusterRole":
        role = policy.cluster_role(name)
        if role is None:
            raise RuleSourceError(f'clusterrole.{GROUP} "{name}" not found')
    else:
        raise RuleSourceError(f'unsupported role reference kind: "{kind}"')
    return list(role.get("rules") or ())


def visit_rules(policy: Policy, user: UserInfo, namespace: str, visit: Visitor) -> list[str]:
    """Visit every rule bound to ``user`` for ``namespace`` (cluster bindings first); the resolution errors."""
    problems: list[str] = []
    scopes: list[tuple[str, Iterable[Obj]]] = [("", policy.cluster_role_bindings())]
    if namespace:
        scopes.append((namespace, policy.role_bindings(namespace)))
    for scope, bindings in scopes:
        for binding in bindings:
            subject = next((s for s in binding.get("subjects") or () if subject_applies(user, s, scope)), None)
            if subject is None:
                continue
            role_ref = binding.get("roleRef") or {}
            try:
                rules = _role_rules(policy, role_ref, scope)
            except RuleSourceError as problem:
                problems.append(str(problem))
                continue
            name = binding["metadata"]["name"]
            described = f'"{name}/{scope}"' if scope else f'"{name}"'
            source = (
                f"{'RoleBinding' if scope else 'ClusterRoleBinding'} {described} of {role_ref.get('kind', '')} "
                f'"{role_ref.get("name", "")}" to {_describe_subject(subject, scope)}'
            )
            for rule in rules:
                if not visit(source, rule):
                    return problems
    return problems


def rules_for(policy: Policy, user: UserInfo, namespace: str) -> tuple[list[Obj], list[str]]:
    """Every rule bound to ``user`` for ``namespace``, and the errors met resolving them."""
    found: list[Obj] = []

    def keep(source: str, rule: Obj) -> bool:
        found.append(rule)
        return True

    return found, visit_rules(policy, user, namespace, keep)


def authorize(attributes: Attributes, policy: Policy) -> Decision:
    if SYSTEM_MASTERS in attributes.user.groups:
        return Decision(allowed=True)
    allowed_by: list[str] = []

    def check(source: str, rule: Obj) -> bool:
        if rule_allows(attributes, rule):
            allowed_by.append(source)
            return False
        return True

    problems = visit_rules(policy, attributes.user, attributes.namespace, check)
    if allowed_by:
        return Decision(allowed=True, reason=f"RBAC: allowed by {allowed_by[0]}")
    return Decision(allowed=False, reason=f"RBAC: {_aggregate(problems)}" if problems else "")


def _aggregate(problems: Sequence[str]) -> str:
    # utilerrors.NewAggregate: one error as it is, several in brackets.
    return problems[0] if len(problems) == 1 else f"[{', '.join(problems)}]"


# -- the 403 ---------------------------------------------------------------------------------------------------


def forbidden_message(attributes: Attributes) -> str:
    user = attributes.user.username
    if not attributes.resource_request:
        return f'User "{user}" cannot {attributes.verb} path "{attributes.path}"'
    resource = attributes.resource
    if attributes.subresource:
        resource = f"{resource}/{attributes.subresource}"
    where = f'in the namespace "{attributes.namespace}"' if attributes.namespace else "at the cluster scope"
    return f'User "{user}" cannot {attributes.verb} resource "{resource}" in API group "{attributes.api_group}" {where}'


def forbidden(attributes: Attributes, reason: str) -> ApiError:
    """The Status a refused request gets (responsewriters.Forbidden through apierrors.NewForbidden)."""
    text = forbidden_message(attributes)
    if reason:
        text = f"{text}: {reason}"
    group = attributes.api_group if attributes.resource_request else ""
    resource = attributes.resource if attributes.resource_request else ""
    qualified = f"{resource}.{group}" if group else resource
    details: Obj = {}
    if attributes.name:
        details["name"] = attributes.name
    if group:
        details["group"] = group
    if resource:
        details["kind"] = resource
    if not qualified:
        message = f"forbidden: {text}"
    elif attributes.name:
        message = f'{qualified} "{attributes.name}" is forbidden: {text}'
    else:
        message = f"{qualified} is forbidden: {text}"
    problem = errors.forbidden(message)
    problem.details = details
    return problem


# -- the review kinds -------------------------------------------------------------------------------------------


def _invalid_review(kind: str, field_path: str, message: str) -> ApiError:
    return errors.invalid(
        kind, "", [{"reason": "FieldValueRequired", "field": field_path, "message": message}], "authorization.k8s.io"
    )


def access_review_status(spec: Obj, user: UserInfo, policy: Policy) -> Obj:
    """The status of a SelfSubjectAccessReview with this spec (422 when it asks for neither or both kinds)."""
    resource = spec.get("resourceAttributes")
    non_resource = spec.get("nonResourceAttributes")
    if resource is not None and non_resource is not None:
        raise errors.invalid(
            "SelfSubjectAccessReview",
            "",
            [
                {
                    "reason": "FieldValueInvalid",
                    "field": "spec.nonResourceAttributes",
                    "message": 'Invalid value: "object": cannot be specified in combination with resourceAttributes',
                }
            ],
            "authorization.k8s.io",
        )
    if resource is None and non_resource is None:
        raise _invalid_review(
            "SelfSubjectAccessReview",
            "spec.resourceAttributes",
            "Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )
    if resource is not None:
        attributes = Attributes(
            user=user,
            verb=str(resource.get("verb") or ""),
            resource_request=True,
            api_group=str(resource.get("group") or ""),
            api_version=str(resource.get("version") or ""),
            namespace=str(resource.get("namespace") or ""),
            resource=str(resource.get("resource") or ""),
            subresource=str(resource.get("subresource") or ""),
            name=str(resource.get("name") or ""),
        )
    else:
        non_resource = non_resource or {}  # not None here: one of the two was required above
        attributes = Attributes(
            user=user,
            verb=str(non_resource.get("verb") or ""),
            resource_request=False,
            path=str(non_resource.get("path") or ""),
        )
    decision = authorize(attributes, policy)
    status: Obj = {"allowed": decision.allowed}
    if decision.reason:
        status["reason"] = decision.reason
    return status


def rules_review_status(spec: Obj, user: UserInfo, policy: Policy) -> Obj:
    """The status of a SelfSubjectRulesReview for ``spec.namespace`` (400 without one, as upstream)."""
    namespace = str(spec.get("namespace") or "")
    if not namespace:
        raise errors.bad_request("no namespace on request")
    rules, problems = rules_for(policy, user, namespace)
    resource_rules: list[Obj] = []
    non_resource_rules: list[Obj] = []
    for rule in rules:
        if rule.get("resources"):
            entry: Obj = {"verbs": list(rule.get("verbs") or [])}
            for key in ("apiGroups", "resources", "resourceNames"):
                if rule.get(key):
                    entry[key] = list(rule[key])
            resource_rules.append(entry)
        if rule.get("nonResourceURLs"):
            non_resource_rules.append(
                {"verbs": list(rule.get("verbs") or []), "nonResourceURLs": list(rule["nonResourceURLs"])}
            )
    status: Obj = {"resourceRules": resource_rules, "nonResourceRules": non_resource_rules, "incomplete": False}
    if problems:
        status["evaluationError"] = _aggregate(problems)
    return status


# -- the RBAC objects of the store ------------------------------------------------------------------------------


@dataclass
class StorePolicy:
    """The RBAC objects as the twin's store holds them."""

    store: Store
    registry: Registry

    def _rtype(self, plural: str) -> Any:
        rtype = self.registry.get(GROUP, plural)
        assert rtype is not None, f"{plural}.{GROUP} is not registered"
        return rtype

    def cluster_role_bindings(self) -> Iterable[Obj]:
        return self.store.list(self._rtype("clusterrolebindings"))

    def role_bindings(self, namespace: str) -> Iterable[Obj]:
        return self.store.list(self._rtype("rolebindings"), namespace)

    def cluster_role(self, name: str) -> Obj | None:
        return self.store.try_get(self._rtype("clusterroles"), None, name)

    def role(self, namespace: str, name: str) -> Obj | None:
        return self.store.try_get(self._rtype("roles"), namespace, name)


# -- ClusterRole aggregation --------------------------------------------------------------------------------


def aggregated_rules(role: Obj, cluster_roles: Iterable[Obj]) -> list[Obj]:
    """The rules the clusterrole-aggregation controller gives an aggregated ClusterRole.

    The rules of every other ClusterRole a ``clusterRoleSelectors`` entry selects, in name order, each
    rule once (pkg/controller/clusterroleaggregation).
    """
    terms = (role.get("aggregationRule") or {}).get("clusterRoleSelectors") or []
    matchers = [selectors.label_selector_from_dict(term) for term in terms]
    rules: list[Obj] = []
    name = role["metadata"]["name"]
    for other in sorted(cluster_roles, key=lambda item: item["metadata"]["name"]):
        if other["metadata"]["name"] == name:
            continue
        labels = other["metadata"].get("labels") or {}
        if not any(matcher.matches(labels) for matcher in matchers):
            continue
        for rule in other.get("rules") or ():
            if rule not in rules:
                rules.append(copy.deepcopy(rule))
    return rules


@dataclass
class ClusterRoleAggregator:
    """Store listener: keeps the ``rules`` of aggregated ClusterRoles the union of the roles they select."""

    store: Store
    registry: Registry
    _busy: bool = field(default=False)

    def __call__(self, event: WatchEvent) -> None:
        if event.rtype.key != (GROUP, "clusterroles") or self._busy:
            return
        self.reconcile()

    def reconcile(self) -> None:
        """Aggregate until nothing changes: a role aggregated into another (edit into admin) settles first."""
        rtype = self.registry.get(GROUP, "clusterroles")
        assert rtype is not None
        self._busy = True
        try:
            names = [role["metadata"]["name"] for role in self.store.list(rtype) if role.get("aggregationRule")]
            for _pass in range(len(names) + 1):
                changed = False
                for name in names:
                    role = self.store.try_get(rtype, None, name)
                    if role is None or not role.get("aggregationRule"):
                        continue
                    rules = aggregated_rules(role, self.store.list(rtype))
                    if rules != (role.get("rules") or []):
                        self.store.update(rtype, {**role, "rules": rules})
                        changed = True
                if not changed:
                    return
        finally:
            self._busy = False


# -- bootstrap policy ------------------------------------------------------------------------------------------

_READ = ["get", "list", "watch"]
_WRITE = ["create", "delete", "deletecollection", "patch", "update"]
_BOOTSTRAP_LABELS = {"kubernetes.io/bootstrapping": "rbac-defaults"}
_AUTOUPDATE = {"rbac.authorization.kubernetes.io/autoupdate": "true"}


def _rule(verbs: list[str], groups: list[str], resources: list[str]) -> Obj:
    return {"verbs": list(verbs), "apiGroups": list(groups), "resources": sorted(resources)}


def _urls(verbs: list[str], urls: list[str]) -> Obj:
    return {"verbs": list(verbs), "nonResourceURLs": list(urls)}


def _cluster_role(
    name: str, rules: list[Obj], *, labels: Mapping[str, str] | None = None, aggregate_to: str = ""
) -> Obj:
    role: Obj = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": {**_BOOTSTRAP_LABELS, **(labels or {})}, "annotations": dict(_AUTOUPDATE)},
        "rules": rules,
    }
    if aggregate_to:
        role["aggregationRule"] = {
            "clusterRoleSelectors": [
                {"matchLabels": {f"rbac.authorization.k8s.io/aggregate-to-{aggregate_to}": "true"}}
            ]
        }
    return role


def _aggregates_to(*names: str) -> dict[str, str]:
    return {f"rbac.authorization.k8s.io/aggregate-to-{name}": "true" for name in names}


# bootstrappolicy/policy.go (Kubernetes 1.32): the roles every cluster starts with that the twin's clients meet.
# admin, edit and view are aggregated from the system:aggregate-to-* roles (and any ClusterRole labelled so).
BOOTSTRAP_CLUSTER_ROLES: tuple[Obj, ...] = (
    _cluster_role("cluster-admin", [_rule(["*"], ["*"], ["*"]), _urls(["*"], ["*"])]),
    _cluster_role(
        "system:discovery",
        [
            _urls(
                ["get"],
                [
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
            )
        ],
    ),
    _cluster_role(
        "system:public-info-viewer", [_urls(["get"], ["/healthz", "/livez", "/readyz", "/version", "/version/"])]
    ),
    _cluster_role(
        "system:basic-user",
        [
            _rule(["create"], ["authentication.k8s.io"], ["selfsubjectreviews"]),
            _rule(["create"], ["authorization.k8s.io"], ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
        ],
    ),
    _cluster_role("admin", [], aggregate_to="admin"),
    _cluster_role("edit", [], labels=_aggregates_to("admin"), aggregate_to="edit"),
    _cluster_role("view", [], labels=_aggregates_to("admin", "edit"), aggregate_to="view"),
    _cluster_role(
        "system:aggregate-to-admin",
        [
            _rule(["create"], ["authorization.k8s.io"], ["localsubjectaccessreviews"]),
            _rule(_READ + _WRITE, [GROUP], ["rolebindings", "roles"]),
        ],
        labels=_aggregates_to("admin"),
    ),
    _cluster_role(
        "system:aggregate-to-edit",
        [
            _rule(
                _READ, [""], ["pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets", "services/proxy"]
            ),
            _rule(["impersonate"], [""], ["serviceaccounts"]),
            _rule(_WRITE, [""], ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"]),
            _rule(["create"], [""], ["pods/eviction"]),
            _rule(
                _WRITE,
                [""],
                [
                    "configmaps",
                    "events",
                    "persistentvolumeclaims",
                    "replicationcontrollers",
                    "replicationcontrollers/scale",
                    "secrets",
                    "serviceaccounts",
                    "services",
                    "services/proxy",
                ],
            ),
            _rule(["create"], [""], ["serviceaccounts/token"]),
            _rule(
                _WRITE,
                ["apps"],
                [
                    "daemonsets",
                    "deployments",
                    "deployments/rollback",
                    "deployments/scale",
                    "replicasets",
                    "replicasets/scale",
                    "statefulsets",
                    "statefulsets/scale",
                ],
            ),
            _rule(_WRITE, ["autoscaling"], ["horizontalpodautoscalers"]),
            _rule(_WRITE, ["batch"], ["cronjobs", "jobs"]),
            _rule(_WRITE, ["policy"], ["poddisruptionbudgets"]),
            _rule(_WRITE, ["networking.k8s.io"], ["ingresses", "networkpolicies"]),
            _rule(_READ + _WRITE, ["coordination.k8s.io"], ["leases"]),
        ],
        labels=_aggregates_to("edit"),
    ),
    _cluster_role(
        "system:aggregate-to-view",
        [
            _rule(
                _READ,
                [""],
                [
                    "configmaps",
                    "endpoints",
                    "persistentvolumeclaims",
                    "persistentvolumeclaims/status",
                    "pods",
                    "replicationcontrollers",
                    "replicationcontrollers/scale",
                    "serviceaccounts",
                    "services",
                    "services/status",
                ],
            ),
            _rule(
                _READ,
                [""],
                [
                    "bindings",
                    "events",
                    "limitranges",
                    "namespaces/status",
                    "pods/log",
                    "pods/status",
                    "replicationcontrollers/status",
                    "resourcequotas",
                    "resourcequotas/status",
                ],
            ),
            _rule(_READ, [""], ["namespaces"]),
            _rule(_READ, ["discovery.k8s.io"], ["endpointslices"]),
            _rule(
                _READ,
                ["apps"],
                [
                    "controllerrevisions",
                    "daemonsets",
                    "daemonsets/status",
                    "deployments",
                    "deployments/scale",
                    "deployments/status",
                    "replicasets",
                    "replicasets/scale",
                    "replicasets/status",
                    "statefulsets",
                    "statefulsets/scale",
                    "statefulsets/status",
                ],
            ),
            _rule(_READ, ["autoscaling"], ["horizontalpodautoscalers", "horizontalpodautoscalers/status"]),
            _rule(_READ, ["batch"], ["cronjobs", "cronjobs/status", "jobs", "jobs/status"]),
            _rule(_READ, ["policy"], ["poddisruptionbudgets", "poddisruptionbudgets/status"]),
            _rule(_READ, ["networking.k8s.io"], ["ingresses", "ingresses/status", "networkpolicies"]),
        ],
        labels=_aggregates_to("view"),
    ),
)


def _cluster_role_binding(name: str, groups: Sequence[str]) -> Obj:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": dict(_BOOTSTRAP_LABELS), "annotations": dict(_AUTOUPDATE)},
        "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": GROUP, "kind": "Group", "name": group} for group in groups],
    }


BOOTSTRAP_CLUSTER_ROLE_BINDINGS: tuple[Obj, ...] = (
    _cluster_role_binding("cluster-admin", [SYSTEM_MASTERS]),
    _cluster_role_binding("system:basic-user", ["system:authenticated"]),
    _cluster_role_binding("system:discovery", ["system:authenticated"]),
    _cluster_role_binding("system:public-info-viewer", ["system:authenticated", "system:unauthenticated"]),
)


def install_bootstrap_policy(store: Store, registry: Registry) -> None:
    """Create the default ClusterRoles and ClusterRoleBindings missing from the store, and aggregate."""
    roles = [copy.deepcopy(role) for role in BOOTSTRAP_CLUSTER_ROLES]
    for _pass in range(len(roles)):
        # Aggregated before they are written, so that they are written once (view into edit into admin).
        for role in roles:
            if role.get("aggregationRule"):
                role["rules"] = aggregated_rules(role, roles)
    bindings = [copy.deepcopy(binding) for binding in BOOTSTRAP_CLUSTER_ROLE_BINDINGS]
    for plural, objects in (("clusterroles", roles), ("clusterrolebindings", bindings)):
        rtype = registry.get(GROUP, plural)
        assert rtype is not None
        for obj in objects:
            if store.try_get(rtype, None, obj["metadata"]["name"]) is None:
                # Complete objects written as etcd holds them (no admission to run, as for seeded Nodes).
                store.create(rtype, obj, restore=True)
    ClusterRoleAggregator(store, registry).reconcile()


# -- defaulting and validation (pkg/apis/rbac/v1 defaults, pkg/apis/rbac/validation) ----------------------------


def _go_strings(values: Sequence[str]) -> str:
    return "[]string{" + ", ".join(json.dumps(value) for value in values) + "}"


def _supported(field_path: str, value: str, allowed: Sequence[str]) -> Obj:
    listed = ", ".join(json.dumps(item) for item in allowed)
    return {
        "reason": "FieldValueNotSupported",
        "field": field_path,
        "message": f"Unsupported value: {json.dumps(value)}: supported values: {listed}",
    }


def _required(field_path: str, detail: str = "") -> Obj:
    message = f"Required value: {detail}" if detail else "Required value"
    return {"reason": "FieldValueRequired", "field": field_path, "message": message}


def _rule_causes(rule: Obj, *, namespaced: bool, where: str) -> list[Obj]:
    causes: list[Obj] = []
    if not rule.get("verbs"):
        causes.append(_required(f"{where}.verbs", "verbs must contain at least one value"))
    urls = rule.get("nonResourceURLs") or []
    if urls:
        rendered = f"Invalid value: {_go_strings(urls)}: "
        if namespaced:
            causes.append(
                {
                    "reason": "FieldValueInvalid",
                    "field": f"{where}.nonResourceURLs",
                    "message": rendered + "namespaced rules cannot apply to non-resource URLs",
                }
            )
        if rule.get("apiGroups") or rule.get("resources") or rule.get("resourceNames"):
            causes.append(
                {
                    "reason": "FieldValueInvalid",
                    "field": f"{where}.nonResourceURLs",
                    "message": rendered + "rules cannot apply to both regular resources and non-resource URLs",
                }
            )
        return causes
    if not rule.get("apiGroups"):
        causes.append(_required(f"{where}.apiGroups", "resource rules must supply at least one api group"))
    if not rule.get("resources"):
        causes.append(_required(f"{where}.resources", "resource rules must supply at least one resource"))
    return causes


def _subject_causes(subject: Obj, *, namespaced: bool, where: str) -> list[Obj]:
    causes: list[Obj] = []
    kind, group = subject.get("kind", ""), subject.get("apiGroup", "")
    if not subject.get("name"):
        causes.append(_required(f"{where}.name"))
    if kind == "ServiceAccount":
        if group:
            causes.append(_supported(f"{where}.apiGroup", group, [""]))
        if not namespaced and not subject.get("namespace"):
            causes.append(_required(f"{where}.namespace"))
    elif kind in ("User", "Group"):
        if group != GROUP:
            causes.append(_supported(f"{where}.apiGroup", group, [GROUP]))
    else:
        causes.append(_supported(f"{where}.kind", kind, ["ServiceAccount", "User", "Group"]))
    return causes


def _go_role_ref(role_ref: Obj) -> str:
    """A RoleRef as Go's ``%#v`` prints it in field.Invalid."""
    fields = ", ".join(
        f"{go_name}:{json.dumps(role_ref.get(name, ''))}"
        for go_name, name in (("APIGroup", "apiGroup"), ("Kind", "kind"), ("Name", "name"))
    )
    return f"rbac.RoleRef{{{fields}}}"


def admit(operation: str, rtype: Any, obj: Obj, old: Obj | None) -> None:
    """Store admission hook: the v1 defaults and the validation kube-apiserver applies to RBAC writes."""
    if rtype.group != GROUP or operation not in ("CREATE", "UPDATE"):
        return
    causes: list[Obj] = []
    if rtype.plural in ("roles", "clusterroles"):
        for index, rule in enumerate(obj.get("rules") or []):
            causes += _rule_causes(rule, namespaced=rtype.plural == "roles", where=f"rules[{index}]")
    else:
        role_ref = obj.setdefault("roleRef", {})
        if not role_ref.get("apiGroup"):
            role_ref["apiGroup"] = GROUP  # SetDefaults_RoleBinding / _ClusterRoleBinding
        for subject in obj.get("subjects") or []:
            if not subject.get("apiGroup") and subject.get("kind") in ("User", "Group"):
                subject["apiGroup"] = GROUP  # SetDefaults_Subject
        if role_ref["apiGroup"] != GROUP:
            causes.append(_supported("roleRef.apiGroup", role_ref["apiGroup"], [GROUP]))
        kinds = ["Role", "ClusterRole"] if rtype.plural == "rolebindings" else ["ClusterRole"]
        if role_ref.get("kind") not in kinds:
            causes.append(_supported("roleRef.kind", str(role_ref.get("kind", "")), kinds))
        if not role_ref.get("name"):
            causes.append(_required("roleRef.name"))
        for index, subject in enumerate(obj.get("subjects") or []):
            causes += _subject_causes(subject, namespaced=rtype.plural == "rolebindings", where=f"subjects[{index}]")
        if operation == "UPDATE" and old is not None and (old.get("roleRef") or {}) != role_ref:
            causes.append(
                {
                    "reason": "FieldValueInvalid",
                    "field": "roleRef",
                    "message": f"Invalid value: {_go_role_ref(role_ref)}: cannot change roleRef",
                }
            )
    if causes:
        raise errors.invalid(rtype.kind, obj["metadata"].get("name", ""), causes, GROUP)


# -- impersonation (k8s.io/apiserver pkg/endpoints/filters/impersonation.go) -----------------------------------


def impersonated_user(
    *, requester: UserInfo, user: str, groups: Sequence[str], uid: str, policy: Policy
) -> UserInfo | None:
    """Who a request with ``Impersonate-User``/``-Group``/``-Uid`` headers acts as; None without them.

    The requester needs ``impersonate`` on ``users`` (or ``serviceaccounts`` in the account's namespace for
    ``system:serviceaccount:<ns>:<name>``), on ``groups`` for every group and on ``uids``; refused, the
    request gets the 403 of the first check that failed.  A ServiceAccount impersonated without groups is in
    its two ServiceAccount groups; every impersonated user is in ``system:authenticated`` unless a group says
    ``system:authenticated`` or ``system:unauthenticated`` already.
    """
    if not user:
        if groups or uid:
            raise errors.bad_request("requested impersonation of groups or a uid without impersonating a user")
        return None
    checks: list[Attributes] = []
    names: list[str] = list(groups)
    if user.startswith(SERVICE_ACCOUNT_PREFIX) and user.count(":") == 3:
        namespace, name = user.split(":")[2:]
        checks.append(
            Attributes(
                user=requester,
                verb="impersonate",
                resource_request=True,
                namespace=namespace,
                resource="serviceaccounts",
                name=name,
            )
        )
        if not groups:
            names = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
    else:
        checks.append(
            Attributes(user=requester, verb="impersonate", resource_request=True, resource="users", name=user)
        )
    checks += [
        Attributes(user=requester, verb="impersonate", resource_request=True, resource="groups", name=group)
        for group in groups
    ]
    if uid:
        checks.append(
            Attributes(
                user=requester,
                verb="impersonate",
                resource_request=True,
                api_group="authentication.k8s.io",
                resource="uids",
                name=uid,
            )
        )
    for attributes in checks:
        decision = authorize(attributes, policy)
        if not decision.allowed:
            raise forbidden(attributes, decision.reason)
    if user != "system:anonymous" and not {"system:authenticated", "system:unauthenticated"} & set(names):
        names.append("system:authenticated")
    return UserInfo(username=user, uid=uid, groups=tuple(names))
