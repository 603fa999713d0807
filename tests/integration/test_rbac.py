"""Least privilege on the twin (issue 24): the shipped rbac/ roles, bound to ServiceAccounts, are sufficient and
minimal, and the permission preflight names what a token lacks before anything is written.

The twin enforces RBAC as kube-apiserver's authorizer does and authenticates ServiceAccount tokens from
TokenRequest. Each test applies the shipped roles with playbooks/rbac.yml (as the administrator), takes a token of
the account (``kubectl create token``) and runs the playbook with it in ``K8S_AUTH_API_KEY``, as an AWX bearer token
credential injects it.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request

import pytest

from .accounts import ACCOUNTS, NAMESPACES, account_env, apply_shipped_roles, refused, run_as, token_of
from .conftest import PlaybookRun, kubectl, run_playbook
from .test_upgrade_flow import CANARY, EXAMPLE, NAMESPACE, NEW_DRIVER, OLD_DRIVER, cluster_ledger, drivers, flow, writes

pytestmark = pytest.mark.slow


@pytest.fixture
def workspace(tmp_path: pathlib.Path) -> pathlib.Path:
    shutil.copy(EXAMPLE, tmp_path / "matrix.yaml")
    return tmp_path


def raw_request(twin, token: str, method: str, path: str, body: dict) -> tuple:
    """(status, decoded body) of one API request with the token, nothing read first (kubectl GETs before it writes)."""
    request = urllib.request.Request(
        twin.api_url + path,
        data=json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/merge-patch+json"},
    )
    context = ssl.create_default_context(cafile=twin.companion["ca_file"])
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def kubectl_as(twin, token: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """kubectl with the twin's kubeconfig (server, CA) and another bearer token (empty: the administrator's)."""
    command = ["kubectl", "--kubeconfig", str(twin.kubeconfig)] + (["--token", token] if token else []) + list(args)
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=60, check=False)


def access_reviews(twin) -> int:
    """SelfSubjectAccessReviews the twin answered since its report was last reset: the permission preflight's."""
    served = twin.report()["requests"]["by_verb_resource"]
    return sum(count for key, count in served.items() if key.startswith("create selfsubjectaccessreviews"))


def stage_as(twin, workspace: pathlib.Path, stage: str, token: str, **extra) -> PlaybookRun:
    """playbooks/upgrade.yml as test_upgrade_flow runs it, with the account's token."""
    return flow(twin, workspace, stage, environment=account_env(twin, token), **extra)


def without_verb(twin, cluster_role: str, *, group: str, resource: str, verb: str) -> list:
    """Take one verb out of the ClusterRole's rule for the resource (an administrator's slip); returns the original.
    Each playbook's account is bound to exactly its own roles, so the account then lacks it."""
    original = json.loads(kubectl(twin, "get", "clusterrole", cluster_role, "-o", "json"))
    role = json.loads(json.dumps(original))
    matching = [rule for rule in role["rules"] if group in rule["apiGroups"] and resource in rule["resources"]]
    assert matching and all(verb in rule["verbs"] for rule in matching), (cluster_role, group, resource, verb)
    for rule in matching:
        rule["verbs"] = [item for item in rule["verbs"] if item != verb]
    role["rules"] = [rule for rule in role["rules"] if rule["verbs"]]
    replaced = kubectl_as(twin, "", "replace", "-f", "-", stdin=json.dumps(role))
    assert replaced.returncode == 0, replaced.stderr
    return [original]


def restore(twin, originals: list) -> None:
    for original in originals:
        _restore(twin, original)


def _restore(twin, original: dict) -> None:
    current = json.loads(kubectl(twin, "get", "clusterrole", original["metadata"]["name"], "-o", "json"))
    original = dict(
        original, metadata=dict(original["metadata"], resourceVersion=current["metadata"]["resourceVersion"])
    )
    replaced = kubectl_as(twin, "", "replace", "-f", "-", stdin=json.dumps(original))
    assert replaced.returncode == 0, replaced.stderr


def test_audit_with_the_read_only_account_succeeds_and_its_writes_are_refused(fresh_twin, workspace):
    twin = fresh_twin
    apply_shipped_roles(twin)
    token = token_of(twin, "gpufleet-audit")
    twin.admin("POST", "report/reset")
    audit = run_as(
        twin,
        token,
        "playbooks/audit.yml",
        extra_vars={"audit_matrix_file": str(workspace / "matrix.yaml"), "audit_output_dir": str(workspace / "audit")},
    )
    assert audit.returncode == 0, audit.output[-4000:]
    assert json.loads((workspace / "audit" / "audit.json").read_text())["drift"]["nodes_with_drift"] == []
    served = twin.report()["requests"]
    assert served["by_code"].get("403", 0) == 0, served  # nothing the audit reads is refused
    assert writes(twin) == {}

    # The audit token cannot write: the API answers 403 in kube-apiserver's words.
    status, answer = raw_request(
        twin, token, "PATCH", f"/api/v1/nodes/{CANARY}", {"metadata": {"labels": {"gpufleet.io/touched": "yes"}}}
    )
    assert (status, answer["reason"]) == (403, "Forbidden"), answer
    assert answer["message"] == (
        f'nodes "{CANARY}" is forbidden: User "system:serviceaccount:{ACCOUNTS}:gpufleet-audit" cannot patch '
        'resource "nodes" in API group "" at the cluster scope'
    )
    assert kubectl_as(twin, token, "auth", "can-i", "patch", "nodes").stdout.strip() == "no"
    assert "gpufleet.io/touched" not in kubectl(twin, "get", "node", CANARY, "--show-labels")

    # The upgrade with the audit token: the plan's first read the account lacks (the ledger ConfigMap, which only
    # the upgrade's, the rehearsal's and the remediation's accounts read) is refused by the API before any write,
    # and the failure names the rule and the ClusterRoles that grant it.
    twin.admin("POST", "report/reset")
    canary = stage_as(twin, workspace, "canary", token)
    assert canary.returncode != 0
    assert f'missing permission: get configmaps in API group "" in namespace "{NAMESPACE}"' in canary.output, (
        canary.output[-4000:]
    )
    assert "gpufleet-upgrade-ledger (rbac/upgrade.yaml, bound by a RoleBinding there)" in canary.output
    assert writes(twin) == {}
    assert cluster_ledger(twin) == []

    # playbooks/rbac.yml with the audit token: its preflight refuses before anything is applied, naming the verbs
    # the token lacks (granted by gpufleet-rbac) and the ClusterRoles kube-apiserver would refuse to let it create
    # (it holds neither their permissions nor escalate); nothing is written.
    twin.admin("POST", "report/reset")
    rbac = run_as(twin, token, "playbooks/rbac.yml", extra_vars={"rbac_namespaces": NAMESPACES})
    assert rbac.returncode != 0
    assert (
        'create clusterroles in API group "rbac.authorization.k8s.io" at the cluster scope (needed by rbac_apply; '
        "granted by ClusterRole gpufleet-rbac in rbac/rbac.yaml through a ClusterRoleBinding)"
    ) in rbac.output, rbac.output[-4000:]
    assert "kube-apiserver would refuse to grant" in rbac.output
    assert "create ClusterRole gpufleet-upgrade: the credentials neither hold its" in rbac.output
    # The audit's own role it holds every permission of: not named.
    assert "ClusterRole gpufleet-audit:" not in rbac.output
    assert writes(twin) == {}
    assert refused(twin) == {}  # it asked, it did not try

    # The rbac account (rbac/rbac.yaml: bind and escalate on the shipped roles by name) re-applies them once they
    # exist: its preflight passes and nothing it sends is refused.
    apply_shipped_roles(twin, playbooks=["audit", "rehearse", "diagnose", "upgrade", "rbac"])
    twin.admin("POST", "report/reset")
    again = run_as(
        twin, token_of(twin, "gpufleet-rbac"), "playbooks/rbac.yml", extra_vars={"rbac_namespaces": NAMESPACES}
    )
    assert again.returncode == 0, again.output[-4000:]
    assert refused(twin) == {}
    # Applied once more, nothing changes: the objects go in one module run (kubernetes.core.k8s, a list) that
    # patches nothing already right.
    assert "changed=0" in again.output, again.output[-2000:]

    # rbac_state=absent removes the bindings, ClusterRoles and accounts it made, and keeps their namespace.
    removed = run_playbook(
        "playbooks/rbac.yml",
        twin=twin,
        extra_vars={
            "rbac_namespaces": NAMESPACES,
            "rbac_state": "absent",
            "rbac_playbooks": ["audit", "rehearse", "diagnose", "upgrade", "rbac"],
        },
    )
    assert removed.returncode == 0, removed.output[-4000:]
    left = kubectl(twin, "get", "clusterroles,clusterrolebindings,rolebindings,serviceaccounts", "-A", "-o", "name")
    assert "gpufleet-" not in left, left
    assert kubectl(twin, "get", "namespace", ACCOUNTS, "-o", "name").strip() == f"namespace/{ACCOUNTS}"


def test_audit_with_a_read_removed_names_every_missing_read(fresh_twin, workspace):
    twin = fresh_twin
    apply_shipped_roles(twin)
    without_verb(twin, "gpufleet-audit", group="apps", resource="daemonsets", verb="list")
    audit = run_as(
        twin,
        token_of(twin, "gpufleet-audit"),
        "playbooks/audit.yml",
        extra_vars={"audit_matrix_file": str(workspace / "matrix.yaml"), "audit_output_dir": str(workspace / "audit")},
    )
    assert audit.returncode != 0
    # The module's own 403, explained, then the preflight's list.
    assert 'missing permission: list daemonsets in API group "apps" at the cluster scope' in audit.output
    assert "check ClusterRole gpufleet-audit (rbac/audit.yaml, bound by a ClusterRoleBinding)" in audit.output
    assert "the credentials lack 1 permission(s)" in audit.output
    assert "granted by ClusterRole gpufleet-audit in rbac/audit.yaml" in audit.output

    # The rehearsal's snapshot lists DaemonSets too, with an account of its own (gpufleet-rehearse): the same slip in
    # its role, gpufleet-audit-snapshot, makes its permission preflight refuse first, naming the rule and the
    # ClusterRole, and nothing but the preflight's questions (and its look at the ClusterPolicy for the ledger's
    # namespace) reaches the cluster.
    without_verb(twin, "gpufleet-audit-snapshot", group="apps", resource="daemonsets", verb="list")
    token = token_of(twin, "gpufleet-rehearse")
    twin.admin("POST", "report/reset")
    rehearsal = run_as(
        twin,
        token,
        "playbooks/rehearse.yml",
        extra_vars={"stage": "promote", "rehearse_dir": str(workspace / "rehearsal")},
    )
    assert rehearsal.returncode != 0
    assert "the credentials lack 1 permission(s)" in rehearsal.output, rehearsal.output[-4000:]
    assert 'list daemonsets in API group "apps" at the cluster scope' in rehearsal.output, rehearsal.output[-4000:]
    assert "granted by ClusterRole gpufleet-audit-snapshot in rbac/rehearse.yaml" in rehearsal.output
    served = twin.report()["requests"]["by_verb_resource"]
    reviews = "create selfsubjectaccessreviews.authorization.k8s.io"
    assert set(served) <= {reviews, "list clusterpolicies.nvidia.com"}, served
    assert served.get(reviews), served
    assert not (workspace / "rehearsal" / "snapshot").exists()


@pytest.mark.long
def test_gpu_operator_canary_refused_without_one_rule_then_succeeds_with_the_shipped_role(fresh_twin, workspace):
    twin = fresh_twin
    apply_shipped_roles(twin)
    token = token_of(twin, "gpufleet-upgrade")

    # One rule short: the preflight names it and the ClusterRole; the recorder shows no write at all.
    original = without_verb(twin, "gpufleet-upgrade", group="", resource="nodes", verb="patch")
    twin.admin("POST", "report/reset")
    refusal = stage_as(twin, workspace, "canary", token)
    assert refusal.returncode != 0
    assert "the credentials lack 1 permission(s), so nothing was changed" in refusal.output
    assert 'patch nodes in API group "" at the cluster scope' in refusal.output
    assert "granted by ClusterRole gpufleet-upgrade in rbac/upgrade.yaml through a ClusterRoleBinding" in refusal.output
    assert writes(twin) == {}, "a run refused by the preflight writes nothing"
    assert cluster_ledger(twin) == []
    assert set(drivers(twin).values()) == {OLD_DRIVER}

    # Check mode with the shipped role: the preflight passes and nothing is written.
    restore(twin, original)
    twin.admin("POST", "report/reset")
    check = run_as(
        twin,
        token,
        "playbooks/upgrade.yml",
        extra_vars={
            "stage": "canary",
            "upgrade_matrix_file": str(workspace / "matrix.yaml"),
            "upgrade_report_dir": str(workspace / "check-reports"),
        },
        check=True,
    )
    # The preflight runs in check mode too and passes; the check-mode canary goes on as far as check mode can
    # (its driver step needs the canary label, which check mode does not write) and writes nothing.
    assert (
        "TASK [gpufleet.upgrade.upgrade : Decide what this run may do, and whether the credentials may do all of it]"
        in check.output
    )
    assert access_reviews(twin) > 0, "the preflight asked nothing in check mode"
    assert "the credentials lack" not in check.output, check.output[-4000:]
    assert writes(twin) == {}

    # The shipped role is enough for the whole canary, and nothing it does is refused.
    twin.admin("POST", "report/reset")
    canary = stage_as(twin, workspace, "canary", token)
    assert canary.returncode == 0, canary.output[-6000:]
    assert "Stage canary: success" in canary.output
    assert twin.report()["requests"]["by_code"].get("403", 0) == 0, twin.report()["requests"]
    found = drivers(twin)
    assert found[CANARY] == NEW_DRIVER
    (entry,) = cluster_ledger(twin)
    assert (entry["stage"], entry["outcome"]) == ("canary", "success")


def mofed_canary_as_upgrade_account(twin, workspace: pathlib.Path, *, min_available: int, **extra) -> PlaybookRun:
    """A MOFED canary with the shipped upgrade account's token, a pod using the RDMA network on the canary whose PDB
    keeps ``min_available`` (the MOFED reload evicts it: pods/eviction across namespaces); the report reset first."""
    from .test_network_operator_failures import mofed_matrix
    from .test_ofed_rolling_reload import mofed_ready, pinned_secondary_network_app

    mofed_matrix(workspace)
    mofed_ready(twin)
    pinned_secondary_network_app(twin, CANARY, min_available=min_available)
    apply_shipped_roles(twin)
    token = token_of(twin, "gpufleet-upgrade")
    twin.admin("POST", "report/reset")
    return stage_as(twin, workspace, "canary", token, network_operator_wait_sleep=0.3, **extra)


def test_a_halted_mofed_canary_with_the_shipped_role_carries_the_doctors_diagnosis(fresh_twin, tmp_path):
    """The upgrade account's own roles hold the diagnosis' reads (step upgrade_diagnose): a canary halted by a PDB
    that allows no eviction is recorded with the doctor's finding for the node and a Next that starts with it, and
    the API refuses nothing. The node was left by this collection's own MOFED rollout (the doctor once saw only the
    operators' state labels), and the crash-looping driver pod logs it may quote were the doctor's account's only."""
    from .test_upgrade_flow import last_report

    twin = fresh_twin
    canary = mofed_canary_as_upgrade_account(twin, tmp_path, min_available=1, network_operator_eviction_timeout=3)
    assert canary.returncode != 0, canary.output[-6000:]
    assert "Stage canary: failed" in canary.output, canary.output[-6000:]
    served = twin.report()["requests"]
    assert served["by_code"].get("403", 0) == 0, served
    entry = cluster_ledger(twin)[-1]
    findings = {(f["node"], f["cause"]): f for f in (entry.get("diagnosis") or {}).get("findings") or []}
    assert (CANARY, "pdb_blocks_eviction") in findings, entry.get("diagnosis")
    finding = findings[(CANARY, "pdb_blocks_eviction")]
    assert finding["component"] == "ofed-rollout", finding
    assert finding["state"] == "failed at evict-pods", finding
    assert finding["detail"].startswith(
        "PDB default/rdma-app (disruptionsAllowed 0) refuses evicting default/rdma-app-"
    ), finding
    report = last_report(tmp_path, "canary")
    next_line = next(line for line in report.splitlines() if line.startswith("| Next |"))
    assert f"To unstick {CANARY} (pdb_blocks_eviction: " in next_line, next_line


def test_a_403_after_the_preflight_names_the_rule_and_the_clusterrole(fresh_twin, workspace):
    """With the preflight turned off, the first write the account lacks (labelling the canary, a kubernetes.core
    task) is refused by the API: the failure, in the output and the ledger, names the rule and the ClusterRole as
    the preflight would, and nothing on the nodes changed."""
    twin = fresh_twin
    apply_shipped_roles(twin)
    token = token_of(twin, "gpufleet-upgrade")
    without_verb(twin, "gpufleet-upgrade", group="", resource="nodes", verb="patch")
    twin.admin("POST", "report/reset")
    canary = stage_as(twin, workspace, "canary", token, upgrade_permission_check=False)
    assert canary.returncode != 0
    detail = (
        'missing permission: patch nodes in API group "" at the cluster scope; check ClusterRole gpufleet-upgrade '
        "(rbac/upgrade.yaml, bound by a ClusterRoleBinding)"
    )
    assert detail in canary.output, canary.output[-4000:]
    entry = cluster_ledger(twin)[-1]
    assert (entry["stage"], entry["outcome"]) == ("canary", "failed"), entry
    assert detail in entry["message"], entry
    forbidden = refused(twin)
    assert set(forbidden) == {"patch nodes"}, forbidden
    assert "patch nodes" not in writes(twin)
    assert set(drivers(twin).values()) == {OLD_DRIVER}


def test_one_inventory_gives_each_playbook_its_accounts_token(fresh_twin, workspace):
    """As examples/fleet-inventory.yml does: the host's token chosen by gpufleet_account, which each playbook sets.
    The audit runs with the read-only account and the upgrade's preflight passes with the upgrade account; the
    upgrade's token cannot run the audit (its reads are the audit role's, not the upgrade's)."""
    twin = fresh_twin
    apply_shipped_roles(twin)
    host = {
        "gpufleet_k8s_host": twin.api_url,
        "gpufleet_k8s_ca_cert": twin.companion["ca_file"],
        "gpufleet_k8s_api_key": "{{ vault_cluster_tokens[gpufleet_account] }}",
        "vault_cluster_tokens": {
            "audit": token_of(twin, "gpufleet-audit"),
            "upgrade": token_of(twin, "gpufleet-upgrade"),
        },
    }
    audit_vars = {"audit_matrix_file": str(workspace / "matrix.yaml"), "audit_output_dir": str(workspace / "audit")}
    twin.admin("POST", "report/reset")
    audit = run_playbook("playbooks/audit.yml", twin=None, extra_vars={**host, **audit_vars})
    assert audit.returncode == 0, audit.output[-4000:]
    assert refused(twin) == {}

    check = run_playbook(
        "playbooks/upgrade.yml",
        twin=None,
        extra_vars={
            **host,
            "stage": "canary",
            "upgrade_matrix_file": str(workspace / "matrix.yaml"),
            "upgrade_report_dir": str(workspace / "reports"),
        },
        check=True,
    )
    assert "Decide what this run may do, and whether the credentials may do all of it" in check.output
    assert access_reviews(twin) > 0, "the preflight asked nothing in check mode"
    assert "the credentials lack" not in check.output, check.output[-4000:]
    assert writes(twin) == {}

    wrong = run_playbook(
        "playbooks/audit.yml", twin=None, extra_vars={**host, **audit_vars, "gpufleet_account": "upgrade"}
    )
    assert wrong.returncode != 0
    assert "check ClusterRole gpufleet-audit (rbac/audit.yaml, bound by a ClusterRoleBinding)" in wrong.output


# One rule each later stage needs (the rollback's only it needs), and how the preflight names it.
LATER_STAGE_RULES = [
    (
        "bake",
        "gpufleet-upgrade-ledger",
        "batch",
        "jobs",
        "create",
        f'create jobs in API group "batch" in namespace "{NAMESPACE}" (needed by validate_gates; granted by '
        "ClusterRole gpufleet-upgrade-ledger in rbac/upgrade.yaml through a RoleBinding in namespace "
        f'"{NAMESPACE}")',
    ),
    (
        "promote",
        "gpufleet-upgrade",
        "nvidia.com",
        "clusterpolicies",
        "patch",
        'patch clusterpolicies in API group "nvidia.com" at the cluster scope (needed by gpu_operator_driver, '
        "gpu_operator_operands; granted by ClusterRole gpufleet-upgrade in rbac/upgrade.yaml through a "
        "ClusterRoleBinding)",
    ),
    (
        "rollback",
        "gpufleet-upgrade-gpu-operator",
        "operators.coreos.com",
        "clusterserviceversions",
        "delete",
        f'delete clusterserviceversions in API group "operators.coreos.com" in namespace "{NAMESPACE}" (needed by '
        "gpu_operator_olm_reinstall; granted by ClusterRole gpufleet-upgrade-gpu-operator in rbac/upgrade.yaml "
        f'through a RoleBinding in namespace "{NAMESPACE}")',
    ),
]


@pytest.mark.long
def test_each_later_stage_one_rule_short_is_refused_naming_it_and_writes_nothing(fresh_twin, workspace):
    """After a canary with the shipped roles, each later stage with one of its rules taken out is refused by the
    preflight naming exactly that rule and its ClusterRole, and the cluster (nodes, ledger, Lease) is untouched."""
    twin = fresh_twin
    apply_shipped_roles(twin)
    token = token_of(twin, "gpufleet-upgrade")
    canary = stage_as(twin, workspace, "canary", token)
    assert canary.returncode == 0, canary.output[-6000:]
    twin.advance(49 * 3600)
    ledger = cluster_ledger(twin)
    before = drivers(twin)

    for stage, cluster_role, group, resource, verb, named in LATER_STAGE_RULES:
        original = without_verb(twin, cluster_role, group=group, resource=resource, verb=verb)
        twin.admin("POST", "report/reset")
        run = stage_as(twin, workspace, stage, token)
        assert run.returncode != 0, (stage, run.output[-4000:])
        assert "the credentials lack 1 permission(s), so nothing was changed: " + named in run.output, (
            stage,
            run.output[-4000:],
        )
        assert writes(twin) == {}, (stage, "a run refused by the preflight writes nothing")
        assert refused(twin) == {}, stage
        assert cluster_ledger(twin) == ledger, stage
        assert drivers(twin) == before, stage
        restore(twin, original)
