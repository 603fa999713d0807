"""RBAC over HTTP: ServiceAccount and user tokens are held to their Roles and ClusterRoles, as on a real server.

A ServiceAccount's token (``kubectl create token``) is bound to a Role or ClusterRole by the admin token; the
``kubernetes`` client and kubectl then meet the answers a real kube-apiserver gives: the request allowed, or a
403 ``Status`` worded like responsewriters.Forbidden, and ``kubectl auth can-i`` saying yes or no (exit code 0
or 1) from a SelfSubjectAccessReview, ``--list`` from a SelfSubjectRulesReview.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

RBAC = "/apis/rbac.authorization.k8s.io/v1"
ServedTwin = Any  # conftest's ServedTwin (tests import nothing from conftest)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _account_token(twin: ServedTwin, namespace: str, name: str) -> str:
    twin.kubectl("create", "serviceaccount", name, "-n", namespace)
    return twin.kubectl("create", "token", name, "-n", namespace).stdout.strip()


def _create(twin: ServedTwin, path: str, obj: dict[str, Any]) -> None:
    result = twin.request("POST", path, body=obj)
    assert result.status == 201, result.body


def _cluster_role(twin: ServedTwin, name: str, rules: list[dict[str, Any]]) -> None:
    _create(twin, f"{RBAC}/clusterroles", {"metadata": {"name": name}, "rules": rules})


def _bind(twin: ServedTwin, *, name: str, role_kind: str, role: str, subject: dict, namespace: str = "") -> None:
    obj = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [subject],
    }
    if namespace:
        _create(twin, f"{RBAC}/namespaces/{namespace}/rolebindings", obj)
    else:
        _create(twin, f"{RBAC}/clusterrolebindings", obj)


def _client_for(twin: ServedTwin, token: str) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = twin.api_url
    configuration.ssl_ca_cert = twin.companion["ca_file"]
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(configuration)


@pytest.fixture
def audit(twin: ServedTwin, namespace: str, kit: Any) -> dict[str, Any]:
    """A ServiceAccount ``audit`` bound cluster-wide to read nodes and pods, and a node to read."""
    role = unique("audit")
    _cluster_role(
        twin,
        role,
        [
            {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["list"]},
        ],
    )
    _bind(
        twin,
        name=role,
        role_kind="ClusterRole",
        role=role,
        subject={"kind": "ServiceAccount", "name": "audit", "namespace": namespace},
    )
    node = unique("gpu-worker")
    kit.node(node, labels={"gpufleet.io/rack": role})
    token = _account_token(twin, namespace, "audit")
    api = _client_for(twin, token)
    yield {"token": token, "node": node, "role": role, "user": f"system:serviceaccount:{namespace}:audit", "api": api}
    api.close()
    twin.request("DELETE", f"/api/v1/nodes/{node}")
    twin.request("DELETE", f"{RBAC}/clusterrolebindings/{role}")
    twin.request("DELETE", f"{RBAC}/clusterroles/{role}")


def test_bootstrap_roles_are_served(twin):
    roles = twin.kubectl("get", "clusterroles", "-o", "name").stdout.split()
    for name in ("cluster-admin", "admin", "edit", "view", "system:basic-user", "system:discovery"):
        assert f"clusterrole.rbac.authorization.k8s.io/{name}" in roles
    binding = json.loads(twin.kubectl("get", "clusterrolebinding", "system:basic-user", "-o", "json").stdout)
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}
    ]
    view = json.loads(twin.kubectl("get", "clusterrole", "view", "-o", "json").stdout)
    assert any(rule["apiGroups"] == ["apps"] and "daemonsets" in rule["resources"] for rule in view["rules"])
    assert any("pods" in rule["resources"] and rule["verbs"] == ["get", "list", "watch"] for rule in view["rules"])


def test_a_bound_account_reads_and_is_refused_a_write(twin, audit):
    core = client.CoreV1Api(audit["api"])
    names = [node.metadata.name for node in core.list_node(label_selector=f"gpufleet.io/rack={audit['role']}").items]
    assert names == [audit["node"]]
    assert core.read_node(audit["node"]).metadata.name == audit["node"]
    with pytest.raises(ApiException) as refused:
        core.patch_node(audit["node"], {"metadata": {"labels": {"x": "y"}}})
    assert refused.value.status == 403
    assert json.loads(refused.value.body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'nodes "{audit["node"]}" is forbidden: User "{audit["user"]}" cannot patch resource "nodes" '
        'in API group "" at the cluster scope',
        "reason": "Forbidden",
        "details": {"name": audit["node"], "kind": "nodes"},
        "code": 403,
    }
    # Nothing was written.
    assert "x" not in (twin.request("GET", f"/api/v1/nodes/{audit['node']}").json()["metadata"].get("labels") or {})
    with pytest.raises(ApiException) as listing:
        client.AppsV1Api(audit["api"]).list_namespaced_deployment("default")
    assert listing.value.status == 403
    assert json.loads(listing.value.body)["message"] == (
        f'deployments.apps is forbidden: User "{audit["user"]}" cannot list resource "deployments" in API group '
        '"apps" in the namespace "default"'
    )
    assert json.loads(listing.value.body)["details"] == {"group": "apps", "kind": "deployments"}


def test_watch_needs_the_watch_verb(twin, audit, namespace):
    core = client.CoreV1Api(audit["api"])
    stream = watch.Watch().stream(core.list_node, label_selector=f"gpufleet.io/rack={audit['role']}", timeout_seconds=1)
    assert [event["object"].metadata.name for event in stream] == [audit["node"]]
    # Daemonsets may be listed, not watched.
    listed = twin.request("GET", "/apis/apps/v1/daemonsets?watch=true&timeoutSeconds=1", token=audit["token"])
    assert listed.status == 403
    assert 'cannot watch resource "daemonsets" in API group "apps" at the cluster scope' in listed.json()["message"]
    assert twin.request("GET", "/apis/apps/v1/daemonsets", token=audit["token"]).status == 200


def test_subresources_are_granted_apart(twin, namespace, kit):
    node = unique("gpu-worker")
    kit.node(node)
    role = unique("node-status")
    _cluster_role(twin, role, [{"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}])
    _bind(
        twin,
        name=role,
        role_kind="ClusterRole",
        role=role,
        subject={"kind": "ServiceAccount", "name": "op", "namespace": namespace},
    )
    # A ClusterRole bound by a RoleBinding grants in that namespace only.
    _cluster_role(twin, f"{role}-evict", [{"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}])
    _bind(
        twin,
        name="evict",
        role_kind="ClusterRole",
        role=f"{role}-evict",
        subject={"kind": "ServiceAccount", "name": "op", "namespace": namespace},
        namespace=namespace,
    )
    token = _account_token(twin, namespace, "op")
    user = f"system:serviceaccount:{namespace}:op"
    patch = {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Test"}]}}
    headers = {"Content-Type": "application/strategic-merge-patch+json"}
    status = twin.request("PATCH", f"/api/v1/nodes/{node}/status", body=patch, headers=headers, token=token)
    assert status.status == 200, status.body
    whole = twin.request("PATCH", f"/api/v1/nodes/{node}", body={"metadata": {}}, headers=headers, token=token)
    assert whole.status == 403
    assert whole.json()["message"] == (
        f'nodes "{node}" is forbidden: User "{user}" cannot patch resource "nodes" in API group "" at the cluster scope'
    )
    kit.running_pod(namespace, "victim", node=node)
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "victim", "namespace": namespace}}
    evicted = twin.request("POST", f"/api/v1/namespaces/{namespace}/pods/victim/eviction", body=eviction, token=token)
    assert evicted.status == 201, evicted.body
    elsewhere = twin.request("POST", "/api/v1/namespaces/default/pods/victim/eviction", body=eviction, token=token)
    assert elsewhere.status == 403
    assert elsewhere.json()["message"] == (
        f'pods "victim" is forbidden: User "{user}" cannot create resource "pods/eviction" in API group "" '
        'in the namespace "default"'
    )
    assert elsewhere.json()["details"] == {"name": "victim", "kind": "pods"}
    twin.request("DELETE", f"/api/v1/nodes/{node}")
    twin.request("DELETE", f"{RBAC}/clusterrolebindings/{role}")
    twin.request("DELETE", f"{RBAC}/clusterroles/{role}")
    twin.request("DELETE", f"{RBAC}/clusterroles/{role}-evict")


def test_resource_names_restrict_to_those_objects(twin, namespace):
    _create(
        twin,
        f"{RBAC}/namespaces/{namespace}/roles",
        {
            "metadata": {"name": "ledger"},
            "rules": [
                {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["ledger"], "verbs": ["get", "patch"]}
            ],
        },
    )
    _bind(
        twin,
        name="ledger",
        role_kind="Role",
        role="ledger",
        subject={"kind": "ServiceAccount", "name": "upgrader"},
        namespace=namespace,
    )
    for name in ("ledger", "other"):
        _create(twin, f"/api/v1/namespaces/{namespace}/configmaps", {"metadata": {"name": name}})
    token = _account_token(twin, namespace, "upgrader")
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    assert twin.request("GET", f"{base}/ledger", token=token).status == 200
    assert twin.request("GET", f"{base}/other", token=token).status == 403
    assert twin.request("GET", base, token=token).status == 403  # a list names no object
    # A list narrowed to the name by a field selector names the object, but still needs the list verb.
    assert twin.request("GET", f"{base}?fieldSelector=metadata.name%3Dledger", token=token).status == 403
    assert twin.request("POST", base, body={"metadata": {"name": "new"}}, token=token).status == 403


def test_kubectl_auth_can_i_answers_as_a_server(twin, namespace):
    role = unique("upgrader")
    _cluster_role(
        twin,
        role,
        [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
            {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        ],
    )
    _bind(
        twin,
        name=role,
        role_kind="ClusterRole",
        role=role,
        subject={"kind": "ServiceAccount", "name": "upgrader", "namespace": namespace},
    )
    token = _account_token(twin, namespace, "upgrader")

    def can_i(*args: str) -> tuple[str, int]:
        result = twin.kubectl("--token", token, "auth", "can-i", *args, check=False)
        return result.stdout.strip(), result.returncode

    assert can_i("patch", "nodes") == ("yes", 0)
    assert can_i("patch", "nodes/gpu-worker-001") == ("yes", 0)
    assert can_i("delete", "nodes") == ("no", 1)
    assert can_i("create", "pods", "--subresource=eviction", "-n", namespace) == ("yes", 0)
    assert can_i("create", "pods", "-n", namespace) == ("no", 1)
    assert can_i("get", "/version") == ("yes", 0)
    assert can_i("get", "/metrics") == ("no", 1)
    assert can_i("create", "selfsubjectaccessreviews.authorization.k8s.io") == ("yes", 0)
    # The admin token stays a cluster administrator.
    admin = twin.kubectl("auth", "can-i", "*", "*", "--all-namespaces", check=False)
    assert (admin.stdout.strip(), admin.returncode) == ("yes", 0)
    listed = twin.kubectl("--token", token, "auth", "can-i", "--list", "-n", namespace).stdout.splitlines()
    rows = [line.split() for line in listed[1:]]
    assert listed[0].split() == ["Resources", "Non-Resource", "URLs", "Resource", "Names", "Verbs"]
    assert ["nodes", "[]", "[]", "[get", "list", "patch]"] in rows
    assert ["pods/eviction", "[]", "[]", "[create]"] in rows
    assert ["selfsubjectaccessreviews.authorization.k8s.io", "[]", "[]", "[create]"] in rows
    assert ["[/version]", "[]", "[get]"] in rows
    twin.request("DELETE", f"{RBAC}/clusterrolebindings/{role}")
    twin.request("DELETE", f"{RBAC}/clusterroles/{role}")


def test_self_subject_access_review_over_http(twin, audit):
    def review(spec: dict[str, Any]) -> dict[str, Any]:
        answer = twin.request(
            "POST",
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            body={"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": spec},
            token=audit["token"],
        )
        assert answer.status == 201, answer.body
        return answer.json()["status"]

    allowed = review({"resourceAttributes": {"verb": "list", "resource": "nodes"}})
    assert allowed == {
        "allowed": True,
        "reason": f'RBAC: allowed by ClusterRoleBinding "{audit["role"]}" of ClusterRole "{audit["role"]}" to '
        f'ServiceAccount "audit/{audit["user"].split(":")[2]}"',
    }
    assert review({"resourceAttributes": {"verb": "patch", "resource": "nodes", "name": audit["node"]}}) == {
        "allowed": False
    }
    assert review({"nonResourceAttributes": {"verb": "get", "path": "/apis"}})["allowed"] is True
    invalid = twin.request(
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        body={"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {}},
        token=audit["token"],
    )
    assert invalid.status == 422


def test_discovery_and_version_stay_open_to_any_authenticated_user(twin, audit):
    for path in ("/api", "/api/v1", "/apis", "/apis/apps/v1", "/version", "/openapi/v2", "/openapi/v3"):
        assert twin.request("GET", path, token=audit["token"]).status == 200, path
    # kubectl discovers with the account's token and reads what it may.
    names = twin.kubectl("--token", audit["token"], "get", "nodes", "-o", "name").stdout.split()
    assert f"node/{audit['node']}" in names


def test_admin_tokens_endpoint_makes_user_and_account_tokens(twin, namespace):
    made = twin.request("POST", "/admin/tokens", body={"user": "alice", "groups": ["gpu-team"]})
    assert made.status == 201, made.body
    alice = made.json()
    assert alice["user"] == {"username": "alice", "groups": ["gpu-team", "system:authenticated"]}
    whoami = json.loads(twin.kubectl("--token", alice["token"], "auth", "whoami", "-o", "json").stdout)
    assert whoami["status"]["userInfo"]["username"] == "alice"
    refused = twin.request("GET", "/api/v1/nodes", token=alice["token"])
    assert refused.status == 403
    assert refused.json()["message"] == (
        'nodes is forbidden: User "alice" cannot list resource "nodes" in API group "" at the cluster scope'
    )
    _bind(
        twin,
        name="gpu-team-view",
        role_kind="ClusterRole",
        role="view",
        subject={"kind": "Group", "name": "gpu-team"},
        namespace=namespace,
    )
    assert twin.request("GET", f"/api/v1/namespaces/{namespace}/pods", token=alice["token"]).status == 200
    # Only a cluster administrator may mint tokens.
    again = twin.request(
        "POST", "/admin/tokens", body={"user": "mallory", "groups": ["system:masters"]}, token=alice["token"]
    )
    assert again.status == 403
    assert again.json()["message"] == 'forbidden: User "alice" cannot post path "/admin/tokens"'
    twin.kubectl("create", "serviceaccount", "bot", "-n", namespace)
    account = twin.request("POST", "/admin/tokens", body={"serviceAccount": f"{namespace}/bot"})
    assert account.status == 201, account.body
    assert account.json()["user"]["username"] == f"system:serviceaccount:{namespace}:bot"
    assert twin.request("GET", "/api/v1/nodes", token=account.json()["token"]).status == 403
    missing = twin.request("POST", "/admin/tokens", body={"serviceAccount": f"{namespace}/nobody"})
    assert missing.status == 404
    assert twin.request("POST", "/admin/tokens", body={"user": "x", "serviceAccount": "a/b"}).status == 400


def test_token_auth_file_declares_users(tmp_path, launcher):
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('# token,user,uid,"groups"\nsecret-of-bob,bob,42,"gpu-team,ops"\n\nsecret-of-eve,eve,43\n')
    served = launcher.start(tmp_path / "twin", "--bare", "--token-auth-file", str(tokens))
    try:
        whoami = json.loads(served.kubectl("--token", "secret-of-bob", "auth", "whoami", "-o", "json").stdout)
        assert whoami["status"]["userInfo"] == {
            "username": "bob",
            "uid": "42",
            "groups": ["gpu-team", "ops", "system:authenticated"],
        }
        can_i = served.kubectl("--token", "secret-of-eve", "auth", "can-i", "list", "nodes", check=False)
        assert (can_i.stdout.strip(), can_i.returncode) == ("no", 1)
        assert served.request("GET", "/api/v1/nodes", token="secret-of-nobody").status == 401
    finally:
        assert launcher.stop(served) == 0


def test_a_bad_token_auth_file_is_refused_naming_the_line(tmp_path):
    tokens = tmp_path / "tokens.csv"
    tokens.write_text("ok-token,ok,1\nonly-a-token\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpufleet_twin",
            "serve",
            "--kubeconfig",
            str(tmp_path / "kc"),
            "--token-auth-file",
            str(tokens),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert f"--token-auth-file: {tokens}:2: a line needs at least token,user,uid (got 1 fields)" in result.stderr
    assert not (tmp_path / "kc").exists()


def test_kubectl_create_role_and_binding(twin, namespace):
    """kubectl's typed generators send protobuf bodies; the objects read back as a real server stores them."""
    twin.kubectl("create", "role", "pods", "--verb=get,list", "--resource=pods,pods/log", "-n", namespace)
    twin.kubectl(
        "create",
        "rolebinding",
        "pods",
        "--role=pods",
        f"--serviceaccount={namespace}:ci",
        "--group=ops",
        "-n",
        namespace,
    )
    binding = json.loads(twin.kubectl("get", "rolebinding", "pods", "-n", namespace, "-o", "json").stdout)
    assert "generation" not in binding["metadata"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pods"}
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "ops"},
        {"kind": "ServiceAccount", "name": "ci", "namespace": namespace},
    ]
    wide = twin.kubectl("get", "rolebinding", "pods", "-n", namespace, "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]
    assert wide[1].split()[:2] == ["pods", "Role/pods"]
    assert wide[1].split()[-2:] == ["ops", f"{namespace}/ci"]
    token = _account_token(twin, namespace, "ci")
    can_i = twin.kubectl("--token", token, "auth", "can-i", "get", "pods", "--subresource=log", "-n", namespace)
    assert can_i.stdout.strip() == "yes"
    changed = twin.kubectl(
        "patch",
        "rolebinding",
        "pods",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"roleRef":{"name":"other"}}',
        check=False,
    )
    assert changed.returncode != 0
    assert "cannot change roleRef" in changed.stderr
    bad = twin.kubectl(
        "create", "clusterrolebinding", unique("bad"), "--clusterrole=view", "--serviceaccount=x", check=False
    )
    assert bad.returncode != 0


def test_kubectl_as_impersonates_the_account(twin, audit, namespace):
    account = f"--as={audit['user']}"
    assert twin.kubectl(account, "auth", "can-i", "list", "nodes").stdout.strip() == "yes"
    refused = twin.kubectl(account, "auth", "can-i", "patch", "nodes", check=False)
    assert (refused.stdout.strip(), refused.returncode) == ("no", 1)
    whoami = json.loads(twin.kubectl(account, "auth", "whoami", "-o", "json").stdout)
    assert whoami["status"]["userInfo"]["groups"] == [
        "system:serviceaccounts",
        f"system:serviceaccounts:{namespace}",
        "system:authenticated",
    ]
    # An account without the impersonate verb may not act as another.
    denied = twin.kubectl("--token", audit["token"], "--as=bob", "get", "nodes", check=False)
    assert denied.returncode != 0
    assert (
        f'users "bob" is forbidden: User "{audit["user"]}" cannot impersonate resource "users" in API group "" '
        "at the cluster scope"
    ) in denied.stderr


def test_labelled_cluster_roles_aggregate_into_view(twin, namespace):
    extra = unique("view-leases")
    rule = {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list", "watch"]}
    _bind(
        twin,
        name="view",
        role_kind="ClusterRole",
        role="view",
        subject={"kind": "ServiceAccount", "name": "reader"},
        namespace=namespace,
    )
    token = _account_token(twin, namespace, "reader")
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    assert twin.request("GET", leases, token=token).status == 403
    _create(
        twin,
        f"{RBAC}/clusterroles",
        {
            "metadata": {"name": extra, "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
            "rules": [rule],
        },
    )
    view = json.loads(twin.kubectl("get", "clusterrole", "view", "-o", "json").stdout)
    assert rule in view["rules"]
    assert twin.request("GET", leases, token=token).status == 200
    # admin aggregates edit, which aggregates view: the rule reaches it too.
    assert rule in json.loads(twin.kubectl("get", "clusterrole", "admin", "-o", "json").stdout)["rules"]
    twin.kubectl("delete", "clusterrole", extra)
    assert rule not in json.loads(twin.kubectl("get", "clusterrole", "view", "-o", "json").stdout)["rules"]
    assert twin.request("GET", leases, token=token).status == 403


def test_granting_permissions_not_held_is_refused_as_kube_apiserver_words_it(twin, audit, namespace):
    """pkg/registry/rbac's escalation check: a ClusterRole or binding may grant only what its writer holds, unless
    the writer may escalate (roles) or bind (bindings); kubectl sees the real 403 wording."""
    writer = unique("rbac-writer")
    _cluster_role(
        twin,
        writer,
        [
            {
                "apiGroups": ["rbac.authorization.k8s.io"],
                "resources": ["clusterroles", "clusterrolebindings", "rolebindings"],
                "verbs": ["create"],
            }
        ],
    )
    subject = {"kind": "ServiceAccount", "name": "audit", "namespace": namespace}
    _bind(twin, name=writer, role_kind="ClusterRole", role=writer, subject=subject)
    token, user = audit["token"], audit["user"]
    groups = f'["system:serviceaccounts" "system:serviceaccounts:{namespace}" "system:authenticated"]'

    too_much = unique("patch-nodes")
    body = {
        "metadata": {"name": too_much},
        "rules": [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch", "delete"]},
            {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["list"]},
        ],
    }
    refused = twin.request("POST", f"{RBAC}/clusterroles", body=body, token=token)
    assert refused.status == 403, refused.body
    assert refused.json()["message"] == (
        f'clusterroles.rbac.authorization.k8s.io "{too_much}" is forbidden: user "{user}" (groups={groups}) is '
        "attempting to grant RBAC permissions not currently held:\n"
        '{APIGroups:[""], Resources:["nodes"], Verbs:["patch" "delete"]}'
    )
    assert refused.json()["details"] == {"name": too_much, "group": "rbac.authorization.k8s.io", "kind": "clusterroles"}
    assert twin.request("GET", f"{RBAC}/clusterroles/{too_much}").status == 404

    # What it holds it may grant, and bind where it holds it.
    held = unique("read-nodes")
    body_held = {"metadata": {"name": held}, "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]}
    assert twin.request("POST", f"{RBAC}/clusterroles", body=body_held, token=token).status == 201
    binding = {
        "metadata": {"name": held},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": held},
        "subjects": [{"kind": "ServiceAccount", "name": "other", "namespace": namespace}],
    }
    assert twin.request("POST", f"{RBAC}/clusterrolebindings", body=binding, token=token).status == 201

    # Binding cluster-admin is granting everything: refused with its rules, compacted and sorted.
    admin_binding = dict(
        binding, metadata={"name": unique("admin")}, roleRef=dict(binding["roleRef"], name="cluster-admin")
    )
    refused_bind = twin.request("POST", f"{RBAC}/namespaces/{namespace}/rolebindings", body=admin_binding, token=token)
    assert refused_bind.status == 403
    assert refused_bind.json()["message"] == (
        f'rolebindings.rbac.authorization.k8s.io "{admin_binding["metadata"]["name"]}" is forbidden: user "{user}" '
        f"(groups={groups}) is attempting to grant RBAC permissions not currently held:\n"
        '{APIGroups:["*"], Resources:["*"], Verbs:["*"]}\n{NonResourceURLs:["*"], Verbs:["*"]}'
    )
    # A binding of a role that does not exist is refused with the resolution error.
    missing = dict(binding, metadata={"name": unique("missing")}, roleRef=dict(binding["roleRef"], name="no-such"))
    gone = twin.request("POST", f"{RBAC}/clusterrolebindings", body=missing, token=token)
    assert gone.status == 403
    assert gone.json()["message"].endswith('is forbidden: clusterrole.rbac.authorization.k8s.io "no-such" not found')

    # kubectl meets the same refusal.
    created = twin.kubectl(
        "--token", token, "create", "clusterrole", unique("kubectl"), "--verb=delete", "--resource=pods", check=False
    )
    assert created.returncode != 0
    assert "is attempting to grant RBAC permissions not currently held" in created.stderr, created.stderr

    # escalate on clusterroles lets it create the role; bind on cluster-admin (by name) lets it bind that one.
    powers = unique("powers")
    _cluster_role(
        twin,
        powers,
        [
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["escalate"]},
            {
                "apiGroups": ["rbac.authorization.k8s.io"],
                "resources": ["clusterroles"],
                "verbs": ["bind"],
                "resourceNames": ["cluster-admin"],
            },
        ],
    )
    _bind(twin, name=powers, role_kind="ClusterRole", role=powers, subject=subject)
    assert twin.request("POST", f"{RBAC}/clusterroles", body=body, token=token).status == 201
    allowed = twin.request("POST", f"{RBAC}/namespaces/{namespace}/rolebindings", body=admin_binding, token=token)
    assert allowed.status == 201, allowed.body
    for path in (
        f"{RBAC}/clusterroles/{too_much}",
        f"{RBAC}/clusterroles/{held}",
        f"{RBAC}/clusterroles/{writer}",
        f"{RBAC}/clusterroles/{powers}",
        f"{RBAC}/clusterrolebindings/{held}",
        f"{RBAC}/clusterrolebindings/{writer}",
        f"{RBAC}/clusterrolebindings/{powers}",
    ):
        twin.request("DELETE", path)
