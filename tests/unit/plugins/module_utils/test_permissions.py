"""The one permission table against the shipped rbac/ manifests, docs/security.md and the 403 wording."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest
import yaml

from ansible_collections.gpufleet.upgrade.plugins.filter.rbac import forbidden_explained, rbac_objects
from ansible_collections.gpufleet.upgrade.plugins.module_utils import _permissions as table
from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import _api_error
from ansible_collections.gpufleet.upgrade.plugins.module_utils._permission_check import (
    PermissionRequest,
    access_review,
    check_permissions,
)

ROOT = pathlib.Path(__file__).resolve().parents[4]
RBAC = ROOT / "rbac"
NAMESPACES = {
    "ledger": "nvidia-gpu-operator",
    "gpu_operator": "nvidia-gpu-operator",
    "network_operator": "nvidia-network-operator",
    "sriov_operator": "openshift-sriov-network-operator",
    "matrix": "gpu-operator",
}


def _manifest_docs():
    docs = []
    for path in sorted(RBAC.glob("*.yaml")):
        if path.name != "example-bindings.yaml":
            docs += [(path.name, doc) for doc in _items(path)]
    return docs


def _items(path):
    """The objects of a manifest file: one ``kind: List`` document (ansible-test's yamllint wants one per file)."""
    (document,) = list(yaml.safe_load_all(path.read_text()))
    assert document["kind"] == "List"
    return document["items"]


def _granted_by_manifests():
    """(ClusterRole, group, resource, resourceNames, verb) for every rule of every shipped ClusterRole."""
    found = set()
    for _name, doc in _manifest_docs():
        if doc["kind"] != "ClusterRole":
            continue
        for rule in doc["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        found.add(
                            (doc["metadata"]["name"], group, resource, tuple(rule.get("resourceNames", ())), verb)
                        )
    return found


def _granted_by_table():
    found = set()
    for _what, grants in table.STEPS.values():
        for grant in grants:
            found |= {(grant.role, grant.group, grant.resource, grant.resource_names, verb) for verb in grant.verbs}
    for _why, grant in table.POD_GRANTS:
        found |= {(grant.role, grant.group, grant.resource, grant.resource_names, verb) for verb in grant.verbs}
    return found


def test_the_manifests_grant_exactly_what_the_table_needs():
    granted = _granted_by_manifests()
    needed = _granted_by_table()
    assert sorted(granted - needed) == [], "granted by rbac/ but needed by no step"
    assert sorted(needed - granted) == [], "needed by a step but granted by no manifest"


def test_every_clusterrole_is_in_the_table_with_its_binding_scope_and_file():
    shipped = {info.name: info for info in (*table.CLUSTER_ROLES, *table.POD_CLUSTER_ROLES)}
    seen = {}
    for file_name, doc in _manifest_docs():
        assert doc["kind"] == "ClusterRole", f"{file_name} holds a {doc['kind']}: rbac/ ships ClusterRoles only"
        name = doc["metadata"]["name"]
        seen[name] = (file_name, doc["metadata"]["annotations"]["gpufleet.io/bound-in"])
    assert seen == {name: (info.manifest, info.scope) for name, info in shipped.items()}


def test_every_rule_has_a_comment_saying_which_step_needs_it():
    steps = set(table.STEPS)
    for path in sorted(RBAC.glob("*.yaml")):
        lines = path.read_text().splitlines()
        for index, line in enumerate(lines):
            if line.strip().startswith("- apiGroups:"):
                comment = lines[index - 1].strip()
                assert comment.startswith("#"), f"{path.name}:{index + 1}: a rule without a comment"
                block = []
                back = index - 1
                while back >= 0 and lines[back].strip().startswith("#"):
                    block.append(lines[back])
                    back -= 1
                text = " ".join(block)
                assert any(step in text for step in steps), f"{path.name}:{index + 1}: the comment names no step"


def test_the_manifests_and_the_docs_are_what_the_generator_writes():
    spec = importlib.util.spec_from_file_location("rbac_manifests", ROOT / "scripts" / "rbac_manifests.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    for name, text in generator.render_manifests().items():
        assert (RBAC / name).read_text() == text, f"rbac/{name} is stale: run scripts/rbac_manifests.py"
    doc = (ROOT / "docs" / "security.md").read_text()
    assert generator.render_doc_tables() in doc, "docs/security.md is stale: run scripts/rbac_manifests.py"


def test_the_read_only_role_only_reads():
    for role, _group, _resource, _names, verb in _granted_by_manifests():
        if role.startswith("gpufleet-audit"):
            assert verb in ("get", "list", "watch"), (role, verb)


@pytest.mark.parametrize("group", table.GROUPS)
@pytest.mark.parametrize("stage", table.STAGES)
def test_every_stage_of_every_group_is_planned_with_the_frame_steps(stage, group):
    steps = table.steps_for(playbook="upgrade", stage=stage, group=group)
    assert steps[:4] == ("upgrade_plan", "upgrade_lease", "upgrade_diagnose", "upgrade_record")
    assert "validate_gates" in steps
    permissions = table.permissions_for(steps, namespaces=NAMESPACES)
    assert len({(p.verb, p.group, p.resource, p.subresource, p.namespace) for p in permissions}) == len(permissions)


def test_the_gpu_operator_canary_needs_the_node_label_and_the_clusterpolicy_patch():
    steps = table.steps_for(playbook="upgrade", stage="canary", group="gpu_operator")
    permissions = {
        (p.verb, p.group, p.resource, p.subresource, p.namespace): p
        for p in table.permissions_for(steps, namespaces=NAMESPACES)
    }
    assert permissions[("patch", "", "nodes", "", "")].role == "gpufleet-upgrade"
    assert permissions[("patch", "nvidia.com", "clusterpolicies", "", "")].steps == (
        "gpu_operator_operator",  # a driver manager the operator release would replace is pinned first
        "gpu_operator_operands",
        "gpu_operator_driver",
    )
    assert permissions[("create", "batch", "jobs", "", "nvidia-gpu-operator")].role == "gpufleet-upgrade-ledger"
    # The canary moves no node through evictions: the GPU Operator's upgrade controller drains.
    assert ("create", "", "pods", "eviction", "") not in permissions
    # The NVIDIADriver writes only with the feature that uses it.
    assert ("create", "nvidia.com", "nvidiadrivers", "", "") not in permissions
    with_driver = table.steps_for(playbook="upgrade", stage="canary", group="gpu_operator", features=["nvidiadriver"])
    assert "gpu_operator_nvidiadriver" in with_driver


def test_a_bake_rolls_back_only_with_the_feature():
    plain = table.steps_for(playbook="upgrade", stage="bake", group="gpu_operator")
    assert "gpu_operator_driver" not in plain and "upgrade_canary_label" not in plain
    rolling = table.steps_for(
        playbook="upgrade", stage="bake", group="gpu_operator", features=["rollback_on_bake_failure"]
    )
    assert "gpu_operator_driver" in rolling and "upgrade_canary_label" in rolling


def test_bad_input_names_what_is_wrong():
    with pytest.raises(ValueError, match="stage must be one of"):
        table.steps_for(playbook="upgrade", stage="soak", group="gpu_operator")
    with pytest.raises(ValueError, match="group must be one of"):
        table.steps_for(playbook="upgrade", stage="canary", group="storage")
    with pytest.raises(ValueError, match="unknown features"):
        table.steps_for(playbook="audit", features=["sudo"])
    with pytest.raises(ValueError, match="needs the ledger namespace"):
        table.permissions_for(("upgrade_lease",), namespaces={})


def test_request_attributes_follow_the_apiserver():
    attrs = table.request_attributes
    assert attrs("PATCH", "/api/v1/nodes/gpu-worker-001")["verb"] == "patch"
    assert attrs("GET", "/api/v1/nodes")["verb"] == "list"
    assert attrs("GET", "/api/v1/nodes", query={"watch": "true"})["verb"] == "watch"
    evict = attrs("POST", "/api/v1/namespaces/ml/pods/p-1/eviction")
    assert (evict["verb"], evict["resource"], evict["subresource"], evict["namespace"]) == (
        "create",
        "pods",
        "eviction",
        "ml",
    )
    lease = attrs("PUT", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/gpufleet-upgrade")
    assert (lease["verb"], lease["group"], lease["namespace"]) == ("update", "coordination.k8s.io", "ns")
    namespace = attrs("GET", "/api/v1/namespaces/ml")
    assert (namespace["verb"], namespace["resource"], namespace["namespace"]) == ("get", "namespaces", "")
    assert attrs("GET", "/version") is None
    assert attrs("DELETE", "/apis/batch/v1/namespaces/ns/jobs")["verb"] == "deletecollection"


def test_a_403_from_the_api_names_the_rule_and_the_clusterrole():
    body = (
        b'{"kind":"Status","status":"Failure","reason":"Forbidden","code":403,"message":"nodes \\"gpu-worker-001\\" '
        b'is forbidden: User \\"system:serviceaccount:gpufleet:audit\\" cannot patch resource \\"nodes\\" in API '
        b'group \\"\\" at the cluster scope"}'
    )
    err = _api_error("PATCH", "/api/v1/nodes/gpu-worker-001", 403, body)
    assert err.status == 403
    assert "cannot patch resource" in err.msg  # the server's own words stay
    assert 'missing permission: patch nodes in API group "" at the cluster scope' in err.msg
    assert "check ClusterRole gpufleet-upgrade (rbac/upgrade.yaml, bound by a ClusterRoleBinding)" in err.msg
    ledger = _api_error("POST", "/api/v1/namespaces/nvidia-gpu-operator/configmaps", 403, b"{}")
    assert 'create configmaps in API group "" in namespace "nvidia-gpu-operator"' in ledger.msg
    assert "gpufleet-upgrade-ledger (rbac/upgrade.yaml, bound by a RoleBinding there)" in ledger.msg
    odd = _api_error("DELETE", "/api/v1/nodes/gpu-worker-001", 403, b"{}")
    assert "no ClusterRole shipped in rbac/ grants it" in odd.msg
    # Other statuses are left alone.
    assert "missing permission" not in _api_error("PATCH", "/api/v1/nodes/x", 404, b"{}").msg


def test_a_403_met_by_another_module_is_explained_from_the_servers_words():
    # kubernetes.core's k8s reports the Status JSON inside its own message, quotes escaped.
    escaped = (
        'Failed to patch object: {"kind":"Status","message":"nodes \\"gpu-worker-001\\" is forbidden: User '
        '\\"system:serviceaccount:gpufleet:gpufleet-upgrade\\" cannot patch resource \\"nodes\\" in API group '
        '\\"\\" at the cluster scope","reason":"Forbidden","code":403}'
    )
    explained = forbidden_explained(escaped)
    assert explained.startswith(escaped)
    # The upgrade's own role first; the doctor's remediation role grants it too and is named after it.
    assert (
        '(missing permission: patch nodes in API group "" at the cluster scope; check ClusterRole gpufleet-upgrade '
        "(rbac/upgrade.yaml, bound by a ClusterRoleBinding) or gpufleet-upgrade-doctor"
    ) in explained
    assert explained.endswith(")")
    plain = (
        'pods "x" is forbidden: User "u" cannot create resource "pods/eviction" in API group "" in the namespace '
        '"ml-training"'
    )
    assert table.forbidden_detail_of_message(plain).startswith(
        'missing permission: create pods/eviction in API group "" in namespace "ml-training"; check ClusterRole '
        "gpufleet-upgrade (rbac/upgrade.yaml, bound by a ClusterRoleBinding)"
    )
    subscriptions = (
        'User "u" cannot patch resource "subscriptions" in API group "operators.coreos.com" in the namespace "n"'
    )
    assert "check ClusterRole gpufleet-upgrade-gpu-operator" in forbidden_explained(subscriptions)
    # Already explained (the collection's own modules), not a 403, or nothing: unchanged.
    done = _api_error("PATCH", "/api/v1/nodes/x", 403, escaped.split("object: ", 1)[1].encode()).msg
    assert forbidden_explained(done) == done
    assert forbidden_explained("Timed out waiting for the pool") == "Timed out waiting for the pool"
    assert forbidden_explained(None) == ""


class _ReviewingApi:
    """Answers SelfSubjectAccessReviews from a set of allowed attribute tuples; records what it was asked."""

    def __init__(self, allowed, *, policies=()):
        self.allowed = allowed
        self.asked = []
        self.policies = list(policies)
        self.requests_sent = 0

    def create(self, ref, body, *, namespace=None, dry_run=False):
        self.requests_sent += 1
        assert ref.plural == "selfsubjectaccessreviews"
        attrs = body["spec"]["resourceAttributes"]
        key = (
            attrs["verb"],
            attrs["group"],
            attrs["resource"],
            attrs.get("subresource", ""),
            attrs.get("namespace", ""),
        )
        self.asked.append(key)
        return {"status": {"allowed": key in self.allowed}}

    def list(self, ref, **kwargs):
        self.requests_sent += 1
        return self.policies


def _all_needed(request):
    steps = table.steps_for(playbook=request.playbook, stage=request.stage, group=request.group)
    return {
        (p.verb, p.group, p.resource, p.subresource, p.namespace)
        for p in table.permissions_for(steps, namespaces={**NAMESPACES, **request.namespaces})
    }


def test_the_preflight_asks_once_per_permission_and_passes_when_all_are_allowed():
    request = PermissionRequest(
        playbook="upgrade", stage="canary", group="gpu_operator", namespaces={"ledger": "nvidia-gpu-operator"}
    )
    api = _ReviewingApi(_all_needed(request), policies=[{"status": {"namespace": "nvidia-gpu-operator"}}])
    result = check_permissions(api, request)
    assert result["missing"] == []
    assert sorted(api.asked) == sorted(_all_needed(request))
    assert result["namespaces"]["gpu_operator"] == "nvidia-gpu-operator"  # read from the ClusterPolicy


def test_the_preflight_refuses_naming_each_missing_permission_and_its_clusterrole():
    request = PermissionRequest(playbook="upgrade", stage="canary", group="gpu_operator", namespaces=dict(NAMESPACES))
    allowed = _all_needed(request) - {
        ("patch", "", "nodes", "", ""),
        ("create", "batch", "jobs", "", "nvidia-gpu-operator"),
    }
    with pytest.raises(InvalidInputError) as raised:
        check_permissions(_ReviewingApi(allowed), request)
    message = raised.value.msg
    assert "lack 2 permission(s), so nothing was changed" in message
    assert 'patch nodes in API group "" at the cluster scope' in message
    assert "granted by ClusterRole gpufleet-upgrade in rbac/upgrade.yaml through a ClusterRoleBinding" in message
    assert 'create jobs in API group "batch" in namespace "nvidia-gpu-operator"' in message
    assert 'gpufleet-upgrade-ledger in rbac/upgrade.yaml through a RoleBinding in namespace "nvidia-gpu-operator"' in (
        message
    )
    missing = raised.value.result["missing"]
    assert {(item["verb"], item["resource"]) for item in missing} == {("patch", "nodes"), ("create", "jobs")}


def test_the_preflight_needs_the_gpu_operator_namespace_when_no_clusterpolicy_says_it():
    request = PermissionRequest(playbook="upgrade", stage="canary", group="gpu_operator", namespaces={"ledger": "x"})
    with pytest.raises(InvalidInputError, match="set gpu_operator_namespace"):
        check_permissions(_ReviewingApi(set()), request)


def test_an_access_review_names_the_subresource_and_namespace_only_when_there_are_some():
    (evict,) = [p for p in table.permissions_for(("firmware_rollout",), namespaces={}) if p.subresource == "eviction"]
    assert access_review(evict)["spec"]["resourceAttributes"] == {
        "verb": "create",
        "group": "",
        "resource": "pods",
        "subresource": "eviction",
    }


def test_the_example_bindings_bind_every_shipped_clusterrole_once():
    docs = _items(RBAC / "example-bindings.yaml")
    bound = sorted(doc["roleRef"]["name"] for doc in docs if "roleRef" in doc)
    shipped = sorted(info.name for info in (*table.CLUSTER_ROLES, *table.POD_CLUSTER_ROLES))
    # The matrix role has no namespace in the example (the matrix is a file there).
    assert bound == [name for name in shipped if name != "gpufleet-audit-matrix"]


def test_rbac_objects_bind_cluster_roles_cluster_wide_and_namespaced_ones_where_they_act():
    docs = [doc for _name, doc in _manifest_docs()]
    accounts = {
        key: {"name": name, "namespace": "nvidia-gpu-operator" if key == "scc" else "gpufleet"}
        for key, name in table.ACCOUNTS.items()
    }
    objects = rbac_objects(docs, accounts, {**NAMESPACES, "matrix": ""})
    bindings = {
        (o["kind"], o["metadata"].get("namespace", ""), o["roleRef"]["name"]): o for o in objects if "roleRef" in o
    }
    assert ("ClusterRoleBinding", "", "gpufleet-upgrade") in bindings
    assert ("RoleBinding", "nvidia-gpu-operator", "gpufleet-upgrade-ledger") in bindings
    assert ("RoleBinding", "default", "gpufleet-upgrade-node-events") in bindings
    assert ("RoleBinding", "nvidia-gpu-operator", "gpufleet-validate-scc") in bindings
    assert ("RoleBinding", "nvidia-network-operator", "gpufleet-upgrade-network-operator-helm") in bindings
    assert not any(role == "gpufleet-audit-matrix" for _kind, _ns, role in bindings)  # its namespace is empty

    def subjects(kind, namespace, role):
        return [item["name"] for item in bindings[(kind, namespace, role)]["subjects"]]

    # One account per playbook: each bound to exactly its playbook's roles.
    assert subjects("ClusterRoleBinding", "", "gpufleet-audit") == ["gpufleet-audit"]
    assert subjects("ClusterRoleBinding", "", "gpufleet-audit-snapshot") == ["gpufleet-rehearse"]
    assert subjects("RoleBinding", "nvidia-gpu-operator", "gpufleet-audit-snapshot-ledger") == ["gpufleet-rehearse"]
    # The diagnosis' read-only roles go to the doctor and to the remediation; the remediation's writes to it alone.
    assert subjects("ClusterRoleBinding", "", "gpufleet-audit-doctor") == [
        "gpufleet-doctor",
        "gpufleet-doctor-remediate",
    ]
    assert subjects("ClusterRoleBinding", "", "gpufleet-upgrade-doctor") == ["gpufleet-doctor-remediate"]
    assert subjects("ClusterRoleBinding", "", "gpufleet-rbac") == ["gpufleet-rbac"]
    for (kind, namespace, role), binding in bindings.items():
        names = {item["name"] for item in binding["subjects"]}
        expected = {
            table.ACCOUNTS[key]
            for key in table.ROLES_BY_NAME.get(role, table.ClusterRoleInfo(role, "", "", "", ("scc",))).accounts
        }
        assert names == expected, (kind, namespace, role)
    service_accounts = [o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"]
    assert sorted(service_accounts) == sorted(table.ACCOUNTS.values())
    # Only the accounts given are bound: the doctor's roles without the remediation's account.
    only_doctor = rbac_objects(
        [
            doc
            for name, doc in _manifest_docs()
            if name == "diagnose.yaml" and doc["metadata"]["name"].startswith("gpufleet-audit")
        ],
        {"diagnose": accounts["diagnose"]},
        NAMESPACES,
    )
    assert {o["metadata"]["name"] for o in only_doctor if o["kind"] == "ServiceAccount"} == {"gpufleet-doctor"}


def test_the_rbac_preflight_names_missing_verbs_and_roles_it_could_not_grant():
    """check_rbac_apply against a fake API whose access reviews allow a fixed set: what it asks and what it says."""
    from ansible_collections.gpufleet.upgrade.plugins.module_utils._permission_check import check_rbac_apply

    class Api:
        requests_sent = 0

        def __init__(self, allowed):
            self.allowed = allowed
            self.asked = []

        def create(self, _ref, body):
            attributes = body["spec"]["resourceAttributes"]
            key = (
                attributes["verb"],
                attributes["resource"],
                attributes.get("namespace", ""),
                attributes.get("name", ""),
            )
            self.asked.append(key)
            return {"status": {"allowed": key in self.allowed}}

        def get(self, _ref, name):
            return {"metadata": {"name": name}} if name == "existing" else None

    role = {
        "kind": "ClusterRole",
        "metadata": {"name": "new"},
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}],
    }
    existing = dict(role, metadata={"name": "existing"})
    binding = {
        "kind": "RoleBinding",
        "metadata": {"name": "new", "namespace": "ns"},
        "roleRef": {"kind": "ClusterRole", "name": "new"},
    }
    verbs = {
        (verb, resource, "", "")
        for verb in ("get", "create", "patch")
        for resource in ("namespaces", "serviceaccounts", "clusterroles", "clusterrolebindings", "rolebindings")
    }
    # Holds get nodes only; may escalate the existing role by name and bind nothing.
    api = Api(
        verbs | {("get", "nodes", "", ""), ("get", "nodes", "ns", ""), ("escalate", "clusterroles", "", "existing")}
    )
    with pytest.raises(InvalidInputError) as refused:
        check_rbac_apply(api, [role, existing, binding])
    message = str(refused.value)
    assert "the credentials lack" not in message  # every verb on the kinds is allowed
    assert "create ClusterRole new: the credentials neither hold its 1 permission(s) patch nodes" in message
    assert "ClusterRole existing" not in message  # escalate by name covers updating it
    assert 'create RoleBinding new in namespace "ns": the credentials neither may bind ClusterRole new' in message
    # A create is asked without a name (the authorizer is not told the new object's name).
    assert ("escalate", "clusterroles", "", "") in api.asked
    # Removing asks only get and delete, and nothing about escalation.
    api = Api(set())
    with pytest.raises(InvalidInputError) as removing:
        check_rbac_apply(api, [role], state="absent")
    assert {verb for verb, *_rest in api.asked} == {"get", "delete"}
    assert "granted by ClusterRole gpufleet-rbac in rbac/rbac.yaml" in str(removing.value)


def test_a_given_token_wins_over_the_kubeconfig_user(tmp_path, monkeypatch):
    """api_key (K8S_AUTH_API_KEY) with a kubeconfig whose user has a token: requests carry the given token.

    The kubernetes client's kubeconfig loader re-sets its own token before every request (refresh_api_key_hook),
    so without care a least-privilege token given alongside an administrator's kubeconfig is silently ignored.
    """
    from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import KubeApi

    for name in ("K8S_AUTH_KUBECONFIG", "K8S_AUTH_HOST", "K8S_AUTH_API_KEY", "KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://twin.invalid:6443"}}],
                "users": [{"name": "admin", "user": {"token": "admin-token"}}],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "admin"}}],
                "current-context": "ctx",
            }
        )
    )
    api = KubeApi.from_params({"kubeconfig": str(kubeconfig), "api_key": "account-token"}, keep_stage_lease=False)
    settings = api._client.configuration.auth_settings()
    assert settings["BearerToken"]["value"] == "Bearer account-token"
    assert api.host == "https://twin.invalid:6443"
    alone = KubeApi.from_params({"kubeconfig": str(kubeconfig)}, keep_stage_lease=False)
    assert alone._client.configuration.auth_settings()["BearerToken"]["value"] == "Bearer admin-token"
