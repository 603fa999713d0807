"""Least privilege, minimal (issue 24): take any single rule (one verb on one resource) out of the shipped rbac/
roles, and the permission preflight names exactly it: verb, API group, resource, namespace and the ClusterRole
that grants it; nothing is written.

A sweep over every rule through the real preflight code (``_permission_check.check_permissions``) with a real
``kubernetes`` client against the twin over HTTPS: one ServiceAccount per rule, bound to the shipped roles with the
one ClusterRole replaced by a copy lacking the rule, one token each (TokenRequest), the twin's RBAC authorizer
answering the SelfSubjectAccessReviews. Each rule is checked with a run (playbook, stage, group) that needs it. Every
namespaced ClusterRole is bound in a namespace of its own here, so no rule is hidden by another role's grant in the
same namespace (in the default setting the ledger lives in the GPU Operator's namespace, where the two roles'
ConfigMap and pod rules add up). The full playbook runs with a rule removed are in test_rbac.py. Every playbook's
account is bound to exactly its playbook's roles (the doctor's remediation, which writes, to the diagnosis' read-only
roles and its own), so a rule taken out of one role is missing from the account, whichever role it is.
"""

from __future__ import annotations

import copy
import itertools
import re
import subprocess
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
import yaml

from ansible_collections.gpufleet.upgrade.plugins.filter.rbac import rbac_objects
from ansible_collections.gpufleet.upgrade.plugins.module_utils import _permissions as table
from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import KubeApi
from ansible_collections.gpufleet.upgrade.plugins.module_utils._permission_check import (
    PermissionRequest,
    check_permissions,
)
from gpufleet_twin.process import TwinProcess, start_twin

from .conftest import ROOT
from .test_upgrade_flow import writes

pytestmark = pytest.mark.slow

ACCOUNTS = "gpufleet-sweep"
# One namespace per namespace key, none shared.
NAMESPACES = {
    "ledger": "gpufleet-ledger",
    "gpu_operator": "nvidia-gpu-operator",
    "network_operator": "nvidia-network-operator",
    "sriov_operator": "openshift-sriov-network-operator",
    "matrix": "gpufleet-matrix",
}
# The manifests of the playbooks the preflight checks step by step (rbac.yaml's own check is test_rbac.py's).
MANIFESTS = ("audit.yaml", "rehearse.yaml", "diagnose.yaml", "upgrade.yaml")


def shipped_cluster_roles() -> list[dict[str, Any]]:
    roles = []
    for name in MANIFESTS:
        for document in yaml.safe_load_all((ROOT / "rbac" / name).read_text()):
            roles += [item for item in document.get("items") or [document] if item.get("kind") == "ClusterRole"]
    return roles


def rules_of(role: dict[str, Any]) -> Iterator[tuple[int, str]]:
    """(index of the rule, verb): every single grant the ClusterRole makes."""
    for index, rule in enumerate(role["rules"]):
        for verb in rule["verbs"]:
            yield index, verb


def without(role: dict[str, Any], index: int, verb: str, name: str) -> dict[str, Any]:
    """A copy of the ClusterRole named ``name`` lacking ``verb`` in its rule ``index``."""
    reduced = copy.deepcopy(role)
    reduced["metadata"]["name"] = name
    rule = reduced["rules"][index]
    rule["verbs"] = [item for item in rule["verbs"] if item != verb]
    reduced["rules"] = [item for item in reduced["rules"] if item["verbs"]]
    return reduced


def account_of(name: str) -> str:
    """The account a rule of the ClusterRole is swept with: its own playbook's (the diagnosis' read-only roles are
    bound to the doctor's account and the remediation's; they are swept with the doctor's)."""
    return table.ROLES_BY_NAME[name].accounts[0]


def bound_to(account: str, shipped: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every shipped ClusterRole bound to the account: exactly what it runs with."""
    return [item for item in shipped if account in table.ROLES_BY_NAME[item["metadata"]["name"]].accounts]


def runs() -> Iterator[PermissionRequest]:
    """Every run the preflight knows: the audit (with and without its matrix ConfigMap), every stage of every group
    with every combination of the optional paths."""
    yield PermissionRequest(playbook="audit", namespaces=NAMESPACES)
    yield PermissionRequest(playbook="audit", features=("matrix_configmap",), namespaces=NAMESPACES)
    yield PermissionRequest(playbook="rehearse", namespaces=NAMESPACES)
    yield PermissionRequest(playbook="diagnose", namespaces=NAMESPACES)
    yield PermissionRequest(playbook="diagnose", features=("doctor_remediate",), namespaces=NAMESPACES)
    optional = ("nvidiadriver", "rollback_on_bake_failure", "network_operator_helm", "gitops")
    for stage, group, count in itertools.product(table.STAGES, table.GROUPS, range(len(optional) + 1)):
        for features in itertools.combinations(optional, count):
            yield PermissionRequest(
                playbook="upgrade", stage=stage, group=group, features=features, namespaces=NAMESPACES
            )


def needed(request: PermissionRequest) -> list[table.Permission]:
    steps = table.steps_for(
        playbook=request.playbook, stage=request.stage, group=request.group, features=request.features
    )
    return table.permissions_for(steps, namespaces=request.namespaces)


def namespace_of(role: dict[str, Any]) -> str:
    scope = role["metadata"]["annotations"]["gpufleet.io/bound-in"]
    return "" if scope == table.CLUSTER else table.FIXED_NAMESPACES.get(scope) or NAMESPACES[scope]


def run_needing(role: dict[str, Any], rule: dict[str, Any], verb: str) -> tuple[PermissionRequest, table.Permission]:
    """The first run that needs the grant, and the permission the preflight should name."""
    namespace = namespace_of(role)
    for request in runs():
        for permission in needed(request):
            resource = permission.resource + (f"/{permission.subresource}" if permission.subresource else "")
            if (
                permission.verb == verb
                and [permission.group] == rule["apiGroups"]
                and [resource] == rule["resources"]
                and permission.namespace == namespace
                and permission.role == role["metadata"]["name"]
            ):
                return request, permission
    raise AssertionError(f"no run needs {verb} {rule} of ClusterRole {role['metadata']['name']}: remove the rule")


def admin_client(twin: TwinProcess) -> kubernetes.client.ApiClient:
    return kubernetes.config.new_client_from_config(config_file=str(twin.kubeconfig))


def account_api(twin: TwinProcess, token: str) -> KubeApi:
    """The collection's own client, as permission_check builds it from a bearer token credential."""
    params = {"host": twin.api_url, "api_key": token, "ca_cert": twin.companion["ca_file"], "validate_certs": True}
    return KubeApi.from_params(params, keep_stage_lease=False, retries=1)


def apply(client: kubernetes.client.ApiClient, objects: list[dict[str, Any]]) -> None:
    for item in objects:
        try:
            kubernetes.utils.create_from_dict(client, item)
        except kubernetes.utils.FailToCreateError as err:
            if any(getattr(failure, "status", 0) != 409 for failure in err.api_exceptions):
                raise


def token_for(client: kubernetes.client.ApiClient, name: str) -> str:
    request = kubernetes.client.AuthenticationV1TokenRequest(
        spec=kubernetes.client.V1TokenRequestSpec(audiences=[], expiration_seconds=10 * 365 * 86400)
    )
    answer = kubernetes.client.CoreV1Api(client).create_namespaced_service_account_token(name, ACCOUNTS, request)
    return answer.status.token


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwinProcess]:
    started = start_twin(nodes=2, profile="openshift", workdir=tmp_path_factory.mktemp("twin"))
    yield started
    assert started.stop() == 0, started.log_path.read_text()[-2000:]


def test_any_single_rule_removed_is_named_by_the_preflight_and_nothing_is_written(twin: TwinProcess) -> None:
    client = admin_client(twin)
    namespaces = sorted({ACCOUNTS, *NAMESPACES.values(), "default"})
    apply(client, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}} for name in namespaces])
    shipped = shipped_cluster_roles()
    assert {role["metadata"]["name"] for role in shipped} == {
        info.name for info in table.CLUSTER_ROLES if info.manifest in MANIFESTS
    }

    # Every account, its reduced ClusterRole and its bindings first, then the sweep (which must write nothing).
    cases = []
    for role in shipped:
        name = role["metadata"]["name"]
        # The account is bound to exactly its playbook's roles (rbac_objects, as roles/rbac binds them), one of
        # them lacking the rule.
        key = account_of(name)
        for index, verb in rules_of(role):
            account = f"sweep-{len(cases):03d}"
            reduced = without(role, index, verb, f"{name}-{account}")
            objects = rbac_objects(bound_to(key, shipped), {key: {"name": account, "namespace": ACCOUNTS}}, NAMESPACES)
            # The bindings carry the ClusterRole's name: give each account its own, and bind the reduced copy
            # instead of the role.
            for item in objects:
                if item["kind"].endswith("Binding"):
                    if item["roleRef"]["name"] == name:
                        item["roleRef"]["name"] = reduced["metadata"]["name"]
                    item["metadata"]["name"] = f"{item['roleRef']['name']}-{account}"
            apply(client, [reduced, *objects])
            request, permission = run_needing(role, role["rules"][index], verb)
            cases.append((account, name, request, permission))
    tokens = {account: token_for(client, account) for account, *_rest in cases}

    twin.admin("POST", "report/reset")
    not_named = []
    for account, name, request, permission in cases:
        try:
            check_permissions(account_api(twin, tokens[account]), request)
        except InvalidInputError as err:
            message = str(err)
            assert err.result["missing"] == [permission.as_dict()], (account, name, message)
            assert permission.describe() in message, message
            assert f"granted by ClusterRole {name} in rbac/" in message, message
            continue
        not_named.append(f"{permission.describe()} of ClusterRole {name} ({request.playbook} {request.stage})")
    assert not not_named, "granted anyway, so not needed by itself: " + "; ".join(not_named)
    assert writes(twin) == {}
    served = twin.report()["requests"]["by_verb_resource"]
    assert served.get("create selfsubjectaccessreviews.authorization.k8s.io", 0) > len(cases), served


def can_i_list(twin: TwinProcess, token: str, namespace: str) -> dict[str, set[str]]:
    """``kubectl auth can-i --list`` with the token (a SelfSubjectRulesReview): resource -> verbs."""
    completed = subprocess.run(
        ["kubectl", "--kubeconfig", str(twin.kubeconfig), "--token", token, "auth", "can-i", "--list", "-n", namespace],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found: dict[str, set[str]] = {}
    for line in completed.stdout.splitlines()[1:]:
        columns = re.match(r"^(\S+)\s+\[(.*?)\]\s+\[(.*?)\]\s+\[(.*?)\]\s*$", line)
        if columns and columns.group(1) != "":
            found.setdefault(columns.group(1), set()).update(columns.group(4).split())
    return found


def test_kubectl_auth_can_i_list_shows_the_shipped_roles_in_each_namespace(twin: TwinProcess) -> None:
    client = admin_client(twin)
    namespaces = sorted({ACCOUNTS, *NAMESPACES.values(), "default"})
    apply(client, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}} for name in namespaces])
    roles = bound_to("upgrade", shipped_cluster_roles())
    objects = rbac_objects(roles, {"upgrade": {"name": "upgrade-full", "namespace": ACCOUNTS}}, NAMESPACES)
    for item in objects:
        if item["kind"].endswith("Binding"):
            item["metadata"]["name"] = f"{item['roleRef']['name']}-full"
    apply(client, objects)
    token = token_for(client, "upgrade-full")

    ledger = can_i_list(twin, token, NAMESPACES["ledger"])
    # The cluster-wide grants show in every namespace, the ledger's RoleBinding only in its own.
    assert ledger["nodes"] >= {"get", "list", "patch"}, ledger
    assert ledger["leases.coordination.k8s.io"] == {"get", "create", "update"}, ledger
    assert ledger["jobs.batch"] == {"create", "list", "delete"}, ledger
    assert ledger["selfsubjectaccessreviews.authorization.k8s.io"] == {"create"}, ledger
    network = can_i_list(twin, token, NAMESPACES["network_operator"])
    assert "leases.coordination.k8s.io" not in network and "jobs.batch" not in network, network
    assert network["pods"] == {"list", "delete"}, network
    assert network["nodes"] == ledger["nodes"]
    # OpenShift's bootstrap policy: any authenticated user reads the ImageStreams of "openshift" (the driver
    # toolkit's, which the kernel interlock reads), through the RoleBinding shared-resource-viewers.
    shared = can_i_list(twin, token, "openshift")
    assert shared["imagestreams.image.openshift.io"] == {"get", "list", "watch"}, shared
