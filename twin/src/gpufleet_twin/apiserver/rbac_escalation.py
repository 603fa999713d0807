"""kube-apiserver's RBAC escalation check: who may write a Role, ClusterRole or binding.

Authorization decides whether a user may ``create clusterroles``; the RBAC storage then decides whether it may
grant what the object grants (pkg/registry/rbac/{role,clusterrole,rolebinding,clusterrolebinding}/policybased
and pkg/registry/rbac/validation's ConfirmNoEscalation, as described by
https://kubernetes.io/docs/reference/access-authn-authz/rbac/#privilege-escalation-prevention-and-bootstrapping):

- ``system:masters`` may write anything (EscalationAllowed).
- A Role or ClusterRole: allowed when the user may ``escalate`` it (the request's own attributes with the verb
  ``escalate``: the name of an update, no name for a create, whose object the authorizer is not told), else
  when the user already holds every permission in it, where it applies (a Role's namespace, a ClusterRole's
  cluster scope). A ClusterRole with an ``aggregationRule`` needs ``escalate``.
- A RoleBinding or ClusterRoleBinding: allowed when the user may ``bind`` the referenced role (in the binding's
  namespace, or at the cluster scope for a ClusterRoleBinding), else when it holds every permission of the role
  where the binding grants it. A missing role is refused with its resolution error.
- An update that changes only what garbage collection changes (ownerReferences, finalizers) is not checked.

Holding is rule coverage, not authorization: each requested rule is broken into single (group, resource,
verb, name) rules, each of which some rule the user holds must cover (``*`` matches all, ``*/sub`` any
resource's subresource, an owner rule without resourceNames any name). The refusal is a 403 worded as the
real one::

    clusterroles.rbac.authorization.k8s.io "x" is forbidden: user "u" (groups=["g1" "g2"]) is attempting to
    grant RBAC permissions not currently held:
    {APIGroups:[""], Resources:["nodes"], Verbs:["patch"]}

with the missing rules compacted (one line per group, resource and name, its verbs together) and sorted.

The check runs as a store admission hook; the API server sets who is writing (``requester``) for the length
of a request, so the twin's own controllers, which write without a request, are not checked.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import Any

from ..machinery import errors
from .rbac import GROUP, SYSTEM_MASTERS, Attributes, Obj, Policy, RuleSourceError, _role_rules, authorize, rules_for
from .serviceaccount_tokens import UserInfo

_REQUESTER: ContextVar[tuple[UserInfo, Policy, str] | None] = ContextVar("rbac_requester", default=None)
_ROLE_KINDS = ("roles", "clusterroles")
_BINDING_KINDS = ("rolebindings", "clusterrolebindings")
# What garbage collection changes; an update touching only these is not checked (IsOnlyMutatingGCFields).
_GC_FIELDS = ("ownerReferences", "finalizers")
# Fields the store sets on every write, never the writer's.
_STORE_FIELDS = ("resourceVersion", "managedFields", "generation", "uid", "creationTimestamp")


@contextlib.contextmanager
def requester(user: UserInfo, policy: Policy, name: str = "") -> Iterator[None]:
    """Who writes during the block (``name``: the object the request's URL names, empty for a create)."""
    token = _REQUESTER.set((user, policy, name))
    try:
        yield
    finally:
        _REQUESTER.reset(token)


@contextlib.contextmanager
def as_controller() -> Iterator[None]:
    """During the block nobody's request writes: a controller woken by a write (the ClusterRole aggregator) writes
    as itself, as kube-controller-manager does, unchecked."""
    token = _REQUESTER.set(None)
    try:
        yield
    finally:
        _REQUESTER.reset(token)


def breakdown(rule: Obj) -> list[Obj]:
    """The rule as single-verb, single-group, single-resource (and single-name) rules (BreakdownRule)."""
    verbs = list(rule.get("verbs") or ())
    names = list(rule.get("resourceNames") or ())
    atoms: list[Obj] = []
    for group in rule.get("apiGroups") or ():
        for resource in rule.get("resources") or ():
            for verb in verbs:
                base = {"apiGroups": [group], "resources": [resource], "verbs": [verb]}
                atoms += [{**base, "resourceNames": [name]} for name in names] if names else [base]
    for url in rule.get("nonResourceURLs") or ():
        atoms += [{"nonResourceURLs": [url], "verbs": [verb]} for verb in verbs]
    return atoms


def _resources_cover(owned: Sequence[str], wanted: Sequence[str]) -> bool:
    if "*" in owned:
        return True
    for resource in wanted:
        if resource in owned:
            continue
        if "/" not in resource or f"*/{resource.split('/', 1)[1]}" not in owned:
            return False
    return True


def _urls_cover(owned: Sequence[str], wanted: Sequence[str]) -> bool:
    for url in wanted:
        if not any(
            candidate in ("*", url) or (candidate.endswith("*") and url.startswith(candidate.rstrip("*")))
            for candidate in owned
        ):
            return False
    return True


def rule_covers(owner: Obj, atom: Obj) -> bool:
    """ruleCovers: whether the rule the user holds covers the single rule."""
    verbs, groups = owner.get("verbs") or (), owner.get("apiGroups") or ()
    owned_names, names = owner.get("resourceNames") or (), atom.get("resourceNames") or ()
    return (
        ("*" in verbs or all(verb in verbs for verb in atom.get("verbs") or ()))
        and ("*" in groups or all(group in groups for group in atom.get("apiGroups") or ()))
        and _resources_cover(owner.get("resources") or (), atom.get("resources") or ())
        and (not owned_names if not names else (not owned_names or all(name in owned_names for name in names)))
        and _urls_cover(owner.get("nonResourceURLs") or (), atom.get("nonResourceURLs") or ())
    )


def missing_rules(held: Sequence[Obj], wanted: Sequence[Obj]) -> list[Obj]:
    """The single rules of ``wanted`` no held rule covers (Covers)."""
    return [atom for rule in wanted for atom in breakdown(rule) if not any(rule_covers(own, atom) for own in held)]


def compact(rules: Sequence[Obj]) -> list[Obj]:
    """CompactRules: single-group, single-resource rules with at most one name merged, their verbs appended."""
    merged: dict[tuple[str, str, tuple[str, ...]], Obj] = {}
    others: list[Obj] = []
    for rule in rules:
        groups, resources, names = rule.get("apiGroups") or [], rule.get("resources") or [], rule.get("resourceNames")
        simple = len(groups) == 1 and len(resources) == 1 and len(names or []) <= 1 and not rule.get("nonResourceURLs")
        if not simple:
            others.append(rule)
            continue
        key = (groups[0], resources[0], tuple(names or ()))
        if key in merged:
            merged[key]["verbs"] = list(merged[key]["verbs"]) + list(rule.get("verbs") or ())
        else:
            merged[key] = json.loads(json.dumps(rule))
    return others + list(merged.values())


def _go_quoted(values: Sequence[str]) -> str:
    """Go's %q of a []string: ["a" "b"]."""
    return "[" + " ".join(json.dumps(value) for value in values) + "]"


def compact_string(rule: Obj) -> str:
    """rbacv1helpers.CompactString: {APIGroups:[...], Resources:[...], NonResourceURLs:[...], ResourceNames:[...],
    Verbs:[...]}, each part only when not empty."""
    parts = [
        f"{label}:{_go_quoted(rule[key])}"
        for label, key in (
            ("APIGroups", "apiGroups"),
            ("Resources", "resources"),
            ("NonResourceURLs", "nonResourceURLs"),
            ("ResourceNames", "resourceNames"),
            ("Verbs", "verbs"),
        )
        if rule.get(key)
    ]
    return "{" + ", ".join(parts) + "}"


def _forbidden(plural: str, name: str, text: str) -> errors.ApiError:
    """apierrors.NewForbidden(rbac.Resource(plural), name, err)."""
    problem = errors.forbidden(f'{plural}.{GROUP} "{name}" is forbidden: {text}')
    problem.details = {"name": name, "group": GROUP, "kind": plural}
    return problem


def confirm_no_escalation(user: UserInfo, policy: Policy, namespace: str, rules: Sequence[Obj]) -> str:
    """ConfirmNoEscalation: "" when the user holds every rule where it applies, else the refusal's text."""
    held, problems = rules_for(policy, user, namespace)
    missing = missing_rules(held, rules)
    if not missing:
        return ""
    lines = sorted({compact_string(rule) for rule in compact(missing)})
    text = (
        f"user {json.dumps(user.username)} (groups={_go_quoted(user.groups)}) is attempting to grant RBAC "
        "permissions not currently held:\n" + "\n".join(lines)
    )
    if problems:
        text += f"; resolution errors: [{' '.join(problems)}]"
    return text


def _only_gc_changes(obj: Obj, old: Obj | None) -> bool:
    if old is None:
        return False

    def stripped(item: Obj) -> Obj:
        copy = json.loads(json.dumps(item))
        for key in (*_GC_FIELDS, *_STORE_FIELDS):
            copy.get("metadata", {}).pop(key, None)
        return copy

    return stripped(obj) == stripped(old)


def _allowed(user: UserInfo, policy: Policy, verb: str, resource: str, *, namespace: str, name: str) -> bool:
    attributes = Attributes(
        user=user, verb=verb, resource_request=True, api_group=GROUP, resource=resource, namespace=namespace, name=name
    )
    return authorize(attributes, policy).allowed


def admit(operation: str, rtype: Any, obj: Obj, old: Obj | None) -> None:
    """Store admission hook: refuse a Role, ClusterRole or binding that grants what its writer does not hold."""
    acting = _REQUESTER.get()
    if acting is None or rtype.group != GROUP or operation not in ("CREATE", "UPDATE"):
        return
    user, policy, url_name = acting
    if SYSTEM_MASTERS in user.groups or _only_gc_changes(obj, old):
        return
    meta = obj.get("metadata") or {}
    name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
    if rtype.plural in _ROLE_KINDS:
        # The authorizer is told the name the request's URL carries: none for a create.
        if _allowed(user, policy, "escalate", rtype.plural, namespace=namespace, name=url_name):
            return
        if obj.get("aggregationRule"):
            raise _forbidden(rtype.plural, name, "must have cluster-admin privileges to use the aggregationRule")
        text = confirm_no_escalation(user, policy, namespace, list(obj.get("rules") or ()))
    elif rtype.plural in _BINDING_KINDS:
        role_ref = obj.get("roleRef") or {}
        kind = "roles" if role_ref.get("kind") == "Role" else "clusterroles"
        if _allowed(user, policy, "bind", kind, namespace=namespace, name=str(role_ref.get("name") or "")):
            return
        try:
            rules = _role_rules(policy, role_ref, namespace)
        except RuleSourceError as problem:
            raise _forbidden(rtype.plural, name, str(problem)) from None
        text = confirm_no_escalation(user, policy, namespace, rules)
    else:
        return
    if text:
        raise _forbidden(rtype.plural, name, text)
