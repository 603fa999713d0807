"""The twin's RBAC authorizer, pure: request attributes, rule matching, rule resolution, 403 wording, reviews.

Expectations follow kube-apiserver: k8s.io/apiserver's RequestInfoFactory for the attributes,
plugin/pkg/auth/authorizer/rbac (RuleAllows and pkg/apis/rbac/v1's matchers) for the rules,
pkg/registry/rbac/validation for the resolution and responsewriters.Forbidden for the 403.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gpufleet_twin.apiserver import rbac
from gpufleet_twin.apiserver.serviceaccount_tokens import ADMIN, UserInfo
from gpufleet_twin.machinery.errors import ApiError

AUDIT = UserInfo(
    username="system:serviceaccount:gpufleet:audit",
    groups=("system:serviceaccounts", "system:serviceaccounts:gpufleet", "system:authenticated"),
)
ALICE = UserInfo(username="alice", groups=("team-gpu", "system:authenticated"))


@dataclass
class Policy:
    """The RBAC objects of a test, as plain lists (what the store holds)."""

    cluster_roles: list[dict] = field(default_factory=list)
    cluster_bindings: list[dict] = field(default_factory=list)
    roles: list[dict] = field(default_factory=list)
    bindings: list[dict] = field(default_factory=list)

    def cluster_role_bindings(self):
        return self.cluster_bindings

    def role_bindings(self, namespace):
        return [b for b in self.bindings if b["metadata"]["namespace"] == namespace]

    def cluster_role(self, name):
        return next((r for r in self.cluster_roles if r["metadata"]["name"] == name), None)

    def role(self, namespace, name):
        return next(
            (r for r in self.roles if r["metadata"]["namespace"] == namespace and r["metadata"]["name"] == name), None
        )


def _meta(name, namespace=None):
    return {"name": name, **({"namespace": namespace} if namespace else {})}


def _binding(name, role_kind, role, subjects, namespace=None):
    return {
        "metadata": _meta(name, namespace),
        "roleRef": {"apiGroup": rbac.GROUP, "kind": role_kind, "name": role},
        "subjects": subjects,
    }


SA_AUDIT = {"kind": "ServiceAccount", "name": "audit", "namespace": "gpufleet"}


def _attrs(method, path, query=None, user=AUDIT):
    return rbac.request_attributes(user=user, method=method, path=path, query=query or {})


# -- request attributes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/api/v1/nodes", {}, ("list", "", "nodes", "", "", "")),
        ("GET", "/api/v1/nodes/gpu-worker-001", {}, ("get", "", "nodes", "", "gpu-worker-001", "")),
        ("GET", "/api/v1/nodes", {"watch": "true"}, ("watch", "", "nodes", "", "", "")),
        ("GET", "/api/v1/nodes", {"watch": "1"}, ("watch", "", "nodes", "", "", "")),
        ("GET", "/api/v1/nodes", {"watch": "false"}, ("list", "", "nodes", "", "", "")),
        # A name in the path makes it a get, even with watch=true (only the nameless GET is list/watch).
        ("GET", "/api/v1/nodes/n1", {"watch": "true"}, ("get", "", "nodes", "", "n1", "")),
        ("GET", "/api/v1/watch/nodes/n1", {}, ("watch", "", "nodes", "", "n1", "")),
        ("GET", "/api/v1/watch/namespaces/ns/pods", {}, ("watch", "", "pods", "", "", "ns")),
        # kubectl get node n1 -w: list/watch with a metadata.name field selector names the object.
        (
            "GET",
            "/api/v1/nodes",
            {"watch": "true", "fieldSelector": "metadata.name=n1"},
            ("watch", "", "nodes", "", "n1", ""),
        ),
        ("GET", "/api/v1/pods", {"fieldSelector": "spec.nodeName=n1"}, ("list", "", "pods", "", "", "")),
        ("GET", "/api/v1/namespaces/ns/pods", {"labelSelector": "app=x"}, ("list", "", "pods", "", "", "ns")),
        ("POST", "/api/v1/namespaces/ns/pods/p/eviction", {}, ("create", "", "pods", "eviction", "p", "ns")),
        ("PATCH", "/api/v1/nodes/n1/status", {}, ("patch", "", "nodes", "status", "n1", "")),
        (
            "PUT",
            "/apis/apps/v1/namespaces/ns/deployments/d/scale",
            {},
            ("update", "apps", "deployments", "scale", "d", "ns"),
        ),
        ("DELETE", "/apis/batch/v1/namespaces/ns/jobs/j", {}, ("delete", "batch", "jobs", "", "j", "ns")),
        ("DELETE", "/apis/batch/v1/namespaces/ns/jobs", {}, ("deletecollection", "batch", "jobs", "", "", "ns")),
        ("POST", "/api/v1/namespaces", {}, ("create", "", "namespaces", "", "", "")),
        # A namespace is named, and lives in, itself; its status and finalize are its subresources.
        ("GET", "/api/v1/namespaces/ns", {}, ("get", "", "namespaces", "", "ns", "ns")),
        ("PUT", "/api/v1/namespaces/ns/finalize", {}, ("update", "", "namespaces", "finalize", "ns", "ns")),
        ("HEAD", "/api/v1/namespaces/ns/configmaps/c", {}, ("get", "", "configmaps", "", "c", "ns")),
        (
            "POST",
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            {},
            ("create", "authorization.k8s.io", "selfsubjectaccessreviews", "", "", ""),
        ),
    ],
)
def test_resource_request_attributes(method, path, query, expected):
    attributes = _attrs(method, path, query)
    assert attributes.resource_request
    got = (
        attributes.verb,
        attributes.api_group,
        attributes.resource,
        attributes.subresource,
        attributes.name,
        attributes.namespace,
    )
    assert got == expected


@pytest.mark.parametrize(
    ("method", "path", "verb"),
    [
        ("GET", "/api", "get"),
        ("GET", "/api/v1", "get"),
        ("GET", "/apis", "get"),
        ("GET", "/apis/apps", "get"),
        ("GET", "/apis/apps/v1", "get"),
        ("GET", "/openapi/v3/api/v1", "get"),
        ("GET", "/version", "get"),
        ("POST", "/admin/tokens", "post"),
        ("DELETE", "/admin/faults", "delete"),
    ],
)
def test_non_resource_request_attributes(method, path, verb):
    attributes = _attrs(method, path)
    assert not attributes.resource_request
    assert (attributes.verb, attributes.path) == (verb, path)


# -- rule matching -------------------------------------------------------------------------------------------


def _rule(verbs, groups=("",), resources=(), names=()):
    rule = {"verbs": list(verbs), "apiGroups": list(groups), "resources": list(resources)}
    if names:
        rule["resourceNames"] = list(names)
    return rule


@pytest.mark.parametrize(
    ("rule", "method", "path", "query", "allowed"),
    [
        (_rule(["get"], resources=["nodes"]), "GET", "/api/v1/nodes/n1", {}, True),
        (_rule(["get"], resources=["nodes"]), "GET", "/api/v1/nodes", {}, False),  # list is another verb
        (_rule(["list"], resources=["nodes"]), "GET", "/api/v1/nodes", {"labelSelector": "a=b"}, True),
        (_rule(["list"], resources=["nodes"]), "GET", "/api/v1/nodes", {"watch": "true"}, False),
        (_rule(["*"], resources=["nodes"]), "DELETE", "/api/v1/nodes", {}, True),
        (_rule(["patch"], resources=["nodes"]), "PATCH", "/api/v1/nodes/n1", {}, True),
        # A resource does not grant its subresources, nor a subresource its resource.
        (_rule(["patch"], resources=["nodes"]), "PATCH", "/api/v1/nodes/n1/status", {}, False),
        (_rule(["patch"], resources=["nodes/status"]), "PATCH", "/api/v1/nodes/n1/status", {}, True),
        (_rule(["patch"], resources=["nodes/status"]), "PATCH", "/api/v1/nodes/n1", {}, False),
        (_rule(["create"], resources=["pods/eviction"]), "POST", "/api/v1/namespaces/a/pods/p/eviction", {}, True),
        (_rule(["create"], resources=["pods"]), "POST", "/api/v1/namespaces/a/pods/p/eviction", {}, False),
        (_rule(["create"], resources=["*/eviction"]), "POST", "/api/v1/namespaces/a/pods/p/eviction", {}, True),
        (_rule(["patch"], resources=["*/status"]), "PATCH", "/api/v1/nodes/n1/status", {}, True),
        (_rule(["patch"], resources=["*/status"]), "PATCH", "/api/v1/nodes/n1", {}, False),
        (_rule(["patch"], resources=["*"]), "PATCH", "/api/v1/nodes/n1/status", {}, True),
        # API groups: exact, or "*"; the core group is "".
        (
            _rule(["get"], groups=["apps"], resources=["deployments"]),
            "GET",
            "/apis/apps/v1/namespaces/a/deployments/d",
            {},
            True,
        ),
        (
            _rule(["get"], groups=[""], resources=["deployments"]),
            "GET",
            "/apis/apps/v1/namespaces/a/deployments/d",
            {},
            False,
        ),
        (
            _rule(["get"], groups=["*"], resources=["deployments"]),
            "GET",
            "/apis/apps/v1/namespaces/a/deployments/d",
            {},
            True,
        ),
        (_rule(["get"], groups=["apps"], resources=["nodes"]), "GET", "/api/v1/nodes/n1", {}, False),
        # resourceNames: only requests naming one of them (never list or create).
        (_rule(["get", "patch"], resources=["nodes"], names=["n1"]), "PATCH", "/api/v1/nodes/n1", {}, True),
        (_rule(["get", "patch"], resources=["nodes"], names=["n1"]), "PATCH", "/api/v1/nodes/n2", {}, False),
        (_rule(["list"], resources=["nodes"], names=["n1"]), "GET", "/api/v1/nodes", {}, False),
        (
            _rule(["watch"], resources=["nodes"], names=["n1"]),
            "GET",
            "/api/v1/nodes",
            {"watch": "1", "fieldSelector": "metadata.name=n1"},
            True,
        ),
        (
            _rule(["create"], resources=["configmaps"], names=["x"]),
            "POST",
            "/api/v1/namespaces/a/configmaps",
            {},
            False,
        ),
        # Non-resource URLs.
        ({"verbs": ["get"], "nonResourceURLs": ["/version"]}, "GET", "/version", {}, True),
        ({"verbs": ["get"], "nonResourceURLs": ["/version"]}, "GET", "/version/", {}, False),
        ({"verbs": ["get"], "nonResourceURLs": ["/apis/*"]}, "GET", "/apis/apps/v1", {}, True),
        ({"verbs": ["get"], "nonResourceURLs": ["/apis/*"]}, "GET", "/apis", {}, False),
        ({"verbs": ["get"], "nonResourceURLs": ["*"]}, "GET", "/anything", {}, True),
        ({"verbs": ["get"], "nonResourceURLs": ["/admin/*"]}, "POST", "/admin/tokens", {}, False),
        ({"verbs": ["post"], "nonResourceURLs": ["/admin/*"]}, "POST", "/admin/tokens", {}, True),
        # A resource rule never grants a non-resource URL, nor the reverse.
        (_rule(["*"], groups=["*"], resources=["*"]), "GET", "/version", {}, False),
        ({"verbs": ["*"], "nonResourceURLs": ["*"]}, "GET", "/api/v1/nodes", {}, False),
    ],
)
def test_rule_allows(rule, method, path, query, allowed):
    assert rbac.rule_allows(_attrs(method, path, query), rule) is allowed


# -- resolution and decisions ---------------------------------------------------------------------------------


def _audit_policy():
    return Policy(
        cluster_roles=[
            {"metadata": _meta("gpufleet-audit"), "rules": [_rule(["get", "list", "watch"], resources=["nodes"])]},
            {"metadata": _meta("evict"), "rules": [_rule(["create"], resources=["pods/eviction"])]},
        ],
        cluster_bindings=[
            _binding("gpufleet-audit", "ClusterRole", "gpufleet-audit", [SA_AUDIT]),
            _binding("admins", "ClusterRole", "cluster-admin", [{"kind": "Group", "name": "system:masters"}]),
        ],
        roles=[{"metadata": _meta("jobs", "gpufleet"), "rules": [_rule(["create"], ["batch"], ["jobs"])]}],
        bindings=[
            # A ServiceAccount subject without a namespace is the binding's namespace's.
            _binding("jobs", "Role", "jobs", [{"kind": "ServiceAccount", "name": "audit"}], "gpufleet"),
            _binding("evict", "ClusterRole", "evict", [{"kind": "User", "name": "alice"}], "ml-training"),
            _binding("broken", "Role", "missing", [{"kind": "Group", "name": "team-gpu"}], "ml-training"),
        ],
    )


def test_cluster_binding_allows_and_says_which():
    decision = rbac.authorize(_attrs("GET", "/api/v1/nodes"), _audit_policy())
    assert decision == rbac.Decision(
        allowed=True,
        reason='RBAC: allowed by ClusterRoleBinding "gpufleet-audit" of ClusterRole "gpufleet-audit" '
        'to ServiceAccount "audit/gpufleet"',
    )


def test_role_binding_grants_in_its_namespace_only():
    policy = _audit_policy()
    allowed = rbac.authorize(_attrs("POST", "/apis/batch/v1/namespaces/gpufleet/jobs"), policy)
    assert allowed.allowed
    assert allowed.reason == (
        'RBAC: allowed by RoleBinding "jobs/gpufleet" of Role "jobs" to ServiceAccount "audit/gpufleet"'
    )
    assert not rbac.authorize(_attrs("POST", "/apis/batch/v1/namespaces/other/jobs"), policy).allowed
    # A RoleBinding never grants at the cluster scope (list jobs in every namespace).
    assert not rbac.authorize(_attrs("POST", "/apis/batch/v1/jobs"), policy).allowed


def test_cluster_role_bound_in_a_namespace_grants_there():
    policy = _audit_policy()
    evict = "/api/v1/namespaces/ml-training/pods/p/eviction"
    assert rbac.authorize(_attrs("POST", evict, user=ALICE), policy).allowed
    assert not rbac.authorize(_attrs("POST", evict.replace("ml-training", "default"), user=ALICE), policy).allowed
    assert not rbac.authorize(_attrs("POST", evict), policy).allowed  # not bound to the audit account


def test_missing_role_is_reported_as_the_reason():
    decision = rbac.authorize(_attrs("GET", "/api/v1/namespaces/ml-training/pods", user=ALICE), _audit_policy())
    assert decision == rbac.Decision(allowed=False, reason='RBAC: role.rbac.authorization.k8s.io "missing" not found')


def test_system_masters_is_allowed_without_any_binding():
    assert rbac.authorize(_attrs("DELETE", "/api/v1/nodes", user=ADMIN), Policy()) == rbac.Decision(allowed=True)


def test_service_account_subject_needs_the_right_namespace():
    other = UserInfo(username="system:serviceaccount:other:audit", groups=("system:authenticated",))
    assert not rbac.authorize(_attrs("GET", "/api/v1/nodes", user=other), _audit_policy()).allowed
    assert not rbac.subject_applies(AUDIT, {"kind": "ServiceAccount", "name": "audit"}, "")


# -- 403 -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "message", "details"),
    [
        (
            "PATCH",
            "/api/v1/nodes/gpu-worker-001",
            'nodes "gpu-worker-001" is forbidden: User "system:serviceaccount:gpufleet:audit" cannot patch '
            'resource "nodes" in API group "" at the cluster scope',
            {"name": "gpu-worker-001", "kind": "nodes"},
        ),
        (
            "POST",
            "/api/v1/namespaces/ml-training/pods/llm-0/eviction",
            'pods "llm-0" is forbidden: User "system:serviceaccount:gpufleet:audit" cannot create resource '
            '"pods/eviction" in API group "" in the namespace "ml-training"',
            {"name": "llm-0", "kind": "pods"},
        ),
        (
            "GET",
            "/apis/apps/v1/namespaces/gpu-operator/daemonsets",
            'daemonsets.apps is forbidden: User "system:serviceaccount:gpufleet:audit" cannot list resource '
            '"daemonsets" in API group "apps" in the namespace "gpu-operator"',
            {"group": "apps", "kind": "daemonsets"},
        ),
        (
            "POST",
            "/admin/tokens",
            'forbidden: User "system:serviceaccount:gpufleet:audit" cannot post path "/admin/tokens"',
            {},
        ),
    ],
)
def test_forbidden_status_is_worded_as_kube_apiserver(method, path, message, details):
    problem = rbac.forbidden(_attrs(method, path), "")
    assert isinstance(problem, ApiError)
    status = problem.to_status()
    assert (status["code"], status["reason"], status["message"]) == (403, "Forbidden", message)
    assert status.get("details", {}) == details


def test_forbidden_message_carries_the_reason():
    problem = rbac.forbidden(
        _attrs("GET", "/api/v1/nodes"), 'RBAC: clusterrole.rbac.authorization.k8s.io "x" not found'
    )
    assert problem.message.endswith('at the cluster scope: RBAC: clusterrole.rbac.authorization.k8s.io "x" not found')


# -- reviews ---------------------------------------------------------------------------------------------------


def test_access_review_of_resource_and_non_resource_attributes():
    policy = _audit_policy()
    allowed = rbac.access_review_status({"resourceAttributes": {"verb": "list", "resource": "nodes"}}, AUDIT, policy)
    assert allowed["allowed"] is True
    assert allowed["reason"].startswith('RBAC: allowed by ClusterRoleBinding "gpufleet-audit"')
    denied = rbac.access_review_status(
        {"resourceAttributes": {"verb": "patch", "resource": "nodes", "subresource": "status", "name": "n1"}},
        AUDIT,
        policy,
    )
    assert denied == {"allowed": False}
    assert rbac.access_review_status({"nonResourceAttributes": {"verb": "get", "path": "/version"}}, AUDIT, policy) == {
        "allowed": False
    }
    assert rbac.access_review_status({"nonResourceAttributes": {"verb": "get", "path": "/x"}}, ADMIN, policy) == {
        "allowed": True
    }


def test_access_review_needs_exactly_one_kind_of_attributes():
    with pytest.raises(ApiError) as neither:
        rbac.access_review_status({}, AUDIT, Policy())
    assert neither.value.code == 422
    with pytest.raises(ApiError) as both:
        rbac.access_review_status({"resourceAttributes": {}, "nonResourceAttributes": {}}, AUDIT, Policy())
    assert both.value.code == 422


def test_rules_review_lists_the_bound_rules_of_the_namespace():
    status = rbac.rules_review_status({"namespace": "gpufleet"}, AUDIT, _audit_policy())
    assert status == {
        "resourceRules": [
            {"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["nodes"]},
            {"verbs": ["create"], "apiGroups": ["batch"], "resources": ["jobs"]},
        ],
        "nonResourceRules": [],
        "incomplete": False,
    }
    broken = rbac.rules_review_status({"namespace": "ml-training"}, ALICE, _audit_policy())
    assert broken["evaluationError"] == 'role.rbac.authorization.k8s.io "missing" not found'
    assert broken["resourceRules"] == [{"verbs": ["create"], "apiGroups": [""], "resources": ["pods/eviction"]}]
    with pytest.raises(ApiError) as no_namespace:
        rbac.rules_review_status({}, AUDIT, Policy())
    assert (no_namespace.value.code, no_namespace.value.message) == (400, "no namespace on request")


# -- bootstrap policy and aggregation -------------------------------------------------------------------------


def _bootstrap_policy():
    return Policy(
        cluster_roles=[dict(role) for role in rbac.BOOTSTRAP_CLUSTER_ROLES],
        cluster_bindings=list(rbac.BOOTSTRAP_CLUSTER_ROLE_BINDINGS),
    )


def test_every_authenticated_user_may_discover_and_review_itself():
    policy = _bootstrap_policy()
    for method, path in [
        ("GET", "/api"),
        ("GET", "/apis/apps/v1"),
        ("GET", "/openapi/v3/apis/apps/v1"),
        ("GET", "/version"),
        ("GET", "/healthz"),
        ("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"),
        ("POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews"),
        ("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews"),
    ]:
        assert rbac.authorize(_attrs(method, path), policy).allowed, path
    for method, path in [("GET", "/api/v1/nodes"), ("GET", "/metrics"), ("POST", "/admin/tokens")]:
        assert not rbac.authorize(_attrs(method, path), policy).allowed, path


def test_aggregated_roles_take_the_rules_of_the_roles_they_select():
    roles = [dict(role) for role in rbac.BOOTSTRAP_CLUSTER_ROLES]
    by_name = {role["metadata"]["name"]: role for role in roles}
    view = rbac.aggregated_rules(by_name["view"], roles)
    assert view == by_name["system:aggregate-to-view"]["rules"]
    extra = {
        "metadata": {"name": "gpu-view", "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
        "rules": [_rule(["get"], ["nvidia.com"], ["clusterpolicies"])],
    }
    # In the name order of the selected roles: gpu-view before system:aggregate-to-view.
    assert rbac.aggregated_rules(by_name["view"], [*roles, extra]) == [*extra["rules"], *view]


# -- defaulting and validation of writes -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Type:
    plural: str
    kind: str
    group: str = rbac.GROUP


_ROLE = _Type("roles", "Role")
_CLUSTER_BINDING = _Type("clusterrolebindings", "ClusterRoleBinding")


def _causes(rtype, obj, old=None):
    with pytest.raises(ApiError) as refused:
        rbac.admit("UPDATE" if old else "CREATE", rtype, obj, old)
    assert refused.value.code == 422
    return [(cause["field"], cause["message"]) for cause in refused.value.details["causes"]]


def test_rules_are_validated_as_kube_apiserver_does():
    role = {
        "metadata": {"name": "r"},
        "rules": [{"verbs": [], "resources": ["pods"]}, {"verbs": ["get"], "nonResourceURLs": ["/logs"]}],
    }
    assert _causes(_ROLE, role) == [
        ("rules[0].verbs", "Required value: verbs must contain at least one value"),
        ("rules[0].apiGroups", "Required value: resource rules must supply at least one api group"),
        (
            "rules[1].nonResourceURLs",
            'Invalid value: []string{"/logs"}: namespaced rules cannot apply to non-resource URLs',
        ),
    ]


def test_bindings_are_defaulted_and_validated():
    binding = {
        "metadata": {"name": "b"},
        "roleRef": {"kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "Group", "name": "g"}],
    }
    rbac.admit("CREATE", _CLUSTER_BINDING, binding, None)
    assert binding["roleRef"]["apiGroup"] == rbac.GROUP
    assert binding["subjects"][0]["apiGroup"] == rbac.GROUP
    refused = {
        "metadata": {"name": "b"},
        "roleRef": {"kind": "Role", "name": "r"},
        "subjects": [{"kind": "ServiceAccount", "name": "audit"}, {"kind": "Robot", "name": "x"}],
    }
    assert _causes(_CLUSTER_BINDING, refused) == [
        ("roleRef.kind", 'Unsupported value: "Role": supported values: "ClusterRole"'),
        ("subjects[0].namespace", "Required value"),
        ("subjects[1].kind", 'Unsupported value: "Robot": supported values: "ServiceAccount", "User", "Group"'),
    ]
    changed = {**binding, "roleRef": {"apiGroup": rbac.GROUP, "kind": "ClusterRole", "name": "edit"}}
    assert _causes(_CLUSTER_BINDING, changed, old=binding) == [
        (
            "roleRef",
            'Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", Kind:"ClusterRole", Name:"edit"}: '
            "cannot change roleRef",
        )
    ]


# -- impersonation ---------------------------------------------------------------------------------------------


def test_the_admin_may_impersonate_a_service_account():
    acting = rbac.impersonated_user(
        requester=ADMIN, user="system:serviceaccount:gpufleet:audit", groups=[], uid="", policy=Policy()
    )
    assert acting == AUDIT
    assert rbac.authorize(_attrs("GET", "/api/v1/nodes", user=acting), _audit_policy()).allowed
    assert rbac.impersonated_user(requester=ADMIN, user="", groups=[], uid="", policy=Policy()) is None


def test_impersonating_a_user_with_groups():
    acting = rbac.impersonated_user(requester=ADMIN, user="bob", groups=["ops"], uid="", policy=Policy())
    assert acting == UserInfo(username="bob", groups=("ops", "system:authenticated"))


def test_impersonation_needs_the_impersonate_verb():
    with pytest.raises(ApiError) as refused:
        rbac.impersonated_user(requester=AUDIT, user="bob", groups=[], uid="", policy=_audit_policy())
    assert refused.value.code == 403
    assert refused.value.message == (
        'users "bob" is forbidden: User "system:serviceaccount:gpufleet:audit" cannot impersonate resource "users" '
        'in API group "" at the cluster scope'
    )
    with pytest.raises(ApiError) as groups_only:
        rbac.impersonated_user(requester=ADMIN, user="", groups=["ops"], uid="", policy=Policy())
    assert groups_only.value.code == 400


def test_escalation_check_breaks_rules_down_and_words_the_missing_ones_as_go_does():
    from gpufleet_twin.apiserver import rbac_escalation as escalation

    held = [
        {"apiGroups": [""], "resources": ["nodes", "pods/*"], "verbs": ["get", "list"]},
        {"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["update"], "resourceNames": ["ledger"]},
        {"nonResourceURLs": ["/healthz*"], "verbs": ["get"]},
    ]
    wanted = [
        {"apiGroups": [""], "resources": ["nodes", "deployments/status"], "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["update"], "resourceNames": ["ledger", "other"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["update"]},
        {"nonResourceURLs": ["/healthz/ready", "/metrics"], "verbs": ["get"]},
    ]
    missing = escalation.missing_rules(held, wanted)
    lines = sorted(escalation.compact_string(rule) for rule in escalation.compact(missing))
    assert lines == [
        '{APIGroups:[""], Resources:["configmaps"], ResourceNames:["other"], Verbs:["update"]}',
        '{APIGroups:[""], Resources:["configmaps"], Verbs:["update"]}',
        '{APIGroups:[""], Resources:["deployments/status"], Verbs:["patch"]}',
        '{APIGroups:[""], Resources:["nodes"], Verbs:["patch"]}',
        '{NonResourceURLs:["/metrics"], Verbs:["get"]}',
    ]
    # "pods/*" covers no subresource by itself in ruleCovers (only "*" and "*/sub" do): pods/log is missing.
    assert escalation.missing_rules(held, [{"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}])
    assert escalation.missing_rules(held, [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]) == []
