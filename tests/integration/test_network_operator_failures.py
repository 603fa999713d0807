"""playbooks/upgrade.yml moving the Network Operator group, when things go wrong (issue 16, items 1 and 5).

- A canary that cannot finish (no helm binary, no rendered manifests) changes nothing and says what is
  missing; a stage that fails after the SR-IOV pre-steps puts them back, or names them with the command
  that does; stage=rollback restores them and fails loudly while it cannot.
- A MOFED canary halted at evict-pods (a PDB that never allows) is undone by the report's "Next",
  run exactly as printed: the node never changed, so it is uncordoned and unlabelled without an eviction.

Every assertion reads the cluster (Deployments, the policy, Nodes, Events, the ledger ConfigMap) or the twin's
recorder, and every playbook run is ``playbooks/upgrade.yml`` as a person runs it.
"""

from __future__ import annotations

import json
import pathlib
import re
import shutil

import pytest

from .conftest import ROOT, PlaybookRun, kubectl, run_playbook
from .test_upgrade_flow import cluster_ledger, flow, last_report, node_labels, writes

pytestmark = pytest.mark.slow

EXAMPLE = ROOT / "examples" / "gpu-version-matrix.yaml"
MANIFESTS = ROOT / "tests" / "integration" / "files" / "network_operator" / "manifests"
SRIOV_NAMESPACE = "openshift-sriov-network-operator"
NETOP_NAMESPACE = "nvidia-network-operator"
STATE_CONFIGMAP = "gpufleet-sriov-pre-steps"
CANARY = "gpu-worker-001"  # the example matrix's canary_node
OLD_MOFED = "24.07-0.6.1.0"
NEW_MOFED = "24.10-1.0.0.0"
OFED_STATE = "gpufleet.io/rollout-ofed-state"


def network_operator_matrix(workspace: pathlib.Path) -> None:
    """canary_testing moves the Network Operator group only: v24.7.0 -> v24.10.0 (crosses the SR-IOV release)."""
    text = EXAMPLE.read_text()
    start = text.index("    canary_testing:")
    end = text.index("    rollback:")
    canary = (
        "    canary_testing:\n"
        '      network_operator: "v24.10.0"\n'
        f'      mofed: "{NEW_MOFED}"\n'
        '      status: "canary-testing"\n'
        f'      canary_node: "{CANARY}"\n\n'
    )
    (workspace / "matrix.yaml").write_text(text[:start] + canary + text[end:])


@pytest.fixture
def workspace(tmp_path: pathlib.Path) -> pathlib.Path:
    network_operator_matrix(tmp_path)
    return tmp_path


def get_json(twin, *args: str) -> dict:
    return json.loads(kubectl(twin, "get", *args, "-o", "json"))


def sriov_state(twin) -> dict:
    """What a person checks after a failed Network Operator stage: is SR-IOV whole?"""
    deployment = get_json(twin, "deployment", "sriov-network-operator", "-n", SRIOV_NAMESPACE)
    policy = kubectl(
        twin,
        "get",
        "sriovnetworknodepolicies.sriovnetwork.openshift.io",
        "default",
        "-n",
        SRIOV_NAMESPACE,
        "-o",
        "json",
        check=False,
    )
    configmaps = [c["metadata"]["name"] for c in get_json(twin, "configmaps", "-n", SRIOV_NAMESPACE)["items"]]
    return {
        "replicas": deployment["spec"]["replicas"],
        "policy": json.loads(policy)["spec"] if policy else None,
        "saved_state": STATE_CONFIGMAP in configmaps,
    }


def operator_image(twin) -> str:
    deployment = get_json(twin, "deployment", "network-operator", "-n", NETOP_NAMESPACE)
    return deployment["spec"]["template"]["spec"]["containers"][0]["image"]


def audit(twin, workspace: pathlib.Path) -> PlaybookRun:
    variables = {"audit_matrix_file": str(workspace / "matrix.yaml"), "audit_output_dir": str(workspace / "audit")}
    return run_playbook("playbooks/audit.yml", twin=twin, extra_vars=variables)


def audit_drift(workspace: pathlib.Path) -> list:
    result = json.loads((workspace / "audit" / "audit.json").read_text())
    return result["drift"]["nodes_with_drift"]


def test_network_operator_canary_without_helm_or_manifests_changes_nothing(fresh_twin, workspace):
    twin = fresh_twin
    before = sriov_state(twin)
    assert before == {"replicas": 1, "policy": before["policy"], "saved_state": False} and before["policy"]
    image = operator_image(twin)
    twin.admin("POST", "report/reset")

    # Neither a helm binary (none on this machine's PATH) nor network_operator_manifests_dir.
    assert shutil.which("helm") is None
    canary = flow(twin, workspace, "canary")
    assert canary.returncode != 0
    assert "No helm binary" in canary.output and "network_operator_manifests_dir" in canary.output, canary.output
    # Checked before the first write: not one write reached the cluster besides the ledger's own.
    # The ledger, and the stage Lease the run held while it ran (taken and released).
    lease = {"create leases.coordination.k8s.io", "update leases.coordination.k8s.io"}
    assert set(writes(twin)) <= {"create configmaps", "update configmaps"} | lease, writes(twin)
    assert sriov_state(twin) == before
    assert operator_image(twin) == image
    assert "gpu-canary" not in node_labels(twin)[CANARY]
    (entry,) = cluster_ledger(twin) or [{"outcome": "failed", "cluster_changed": False}]
    assert (entry["outcome"], entry["cluster_changed"]) == ("failed", False)
    report = last_report(workspace, "canary")
    assert "No helm binary" in report
    # Nothing changed, so nothing needs undoing: the report says to fix the cause and run the canary again.
    next_line = next(line for line in report.splitlines() if line.startswith("| Next |"))
    assert "stage=canary" in next_line and "stage=rollback" not in next_line, next_line


def target_manifests(tmp_path: pathlib.Path) -> str:
    """The v24.10.0 release's rendered operator Deployment (the fixture renders v25.1.0)."""
    directory = tmp_path / "manifests-24.10.0"
    directory.mkdir()
    text = (MANIFESTS / "network-operator.yaml").read_text().replace(":v25.1.0", ":v24.10.0")
    (directory / "network-operator.yaml").write_text(text)
    return str(directory)


def refuse_writes(twin, resource: str, namespace: str, verbs: list[str], *, name: str = "") -> None:
    """The API server answers 503 to these writes for ten simulated days (until DELETE /admin/faults).
    A create names no object in its URL: leave ``name`` out to match it."""
    fault = {"type": "api_errors", "code": 503, "verb": verbs, "resource": resource, "namespace": namespace,
             "duration": 864000, **({"name": name} if name else {})}  # fmt: skip
    twin.admin("POST", "faults", fault)


def test_a_canary_failing_after_the_sriov_pre_steps_puts_them_back(fresh_twin, workspace, tmp_path):
    twin = fresh_twin
    before = sriov_state(twin)
    image = operator_image(twin)
    # Every prerequisite is there, but the API server refuses the Network Operator Deployment's update:
    # the stage fails after the pre-steps ran.
    refuse_writes(twin, "deployments", NETOP_NAMESPACE, ["patch", "update"], name="network-operator")
    canary = flow(twin, workspace, "canary", network_operator_manifests_dir=target_manifests(tmp_path))
    assert canary.returncode != 0, canary.output
    assert "The SR-IOV pre-steps were put back" in canary.output, canary.output
    assert sriov_state(twin) == before
    assert operator_image(twin) == image
    entry = cluster_ledger(twin)[-1]
    assert (entry["stage"], entry["outcome"], entry["cluster_changed"]) == ("canary", "failed", True)
    assert [(step["what"], step["restored"]) for step in entry["pre_steps"]] == [
        ("SR-IOV operator scaled to 0", True),
        ("default SriovNetworkNodePolicy deleted", True),
    ]
    report = last_report(workspace, "canary")
    deployment = "Deployment openshift-sriov-network-operator/sriov-network-operator"
    assert f"| SR-IOV operator scaled to 0 | {deployment} |" in report
    assert "STILL CHANGED" not in report

    # The canary label is still on the node: the printed Next (stage=rollback) takes it off.
    twin.admin("DELETE", "faults")
    rollback = run_printed_next(twin, workspace, "canary")
    assert rollback.returncode == 0, rollback.output
    assert "Stage rollback: success" in rollback.output
    assert sriov_state(twin) == before
    assert "gpu-canary" not in node_labels(twin)[CANARY]
    run = audit(twin, workspace)
    assert run.returncode == 0, run.output
    assert audit_drift(workspace) == []


@pytest.mark.long
def test_what_a_failed_canary_could_not_put_back_is_named_and_rollback_fails_until_it_is_back(
    fresh_twin, workspace, tmp_path
):
    twin = fresh_twin
    before = sriov_state(twin)
    # The operator update and the default policy's re-creation are both refused: the stage fails after the
    # pre-steps and cannot put the policy back.
    refuse_writes(twin, "deployments", NETOP_NAMESPACE, ["patch", "update"], name="network-operator")
    refuse_writes(twin, "sriovnetworknodepolicies", SRIOV_NAMESPACE, ["create"])
    manifests = target_manifests(tmp_path)
    canary = flow(twin, workspace, "canary", network_operator_manifests_dir=manifests)
    assert canary.returncode != 0, canary.output
    assert "STILL CHANGED, not put back" in canary.output and "default SriovNetworkNodePolicy deleted" in canary.output
    assert "Restore with: ansible-playbook playbooks/upgrade.yml -e stage=rollback" in canary.output
    assert sriov_state(twin) == {**before, "policy": None, "saved_state": True}  # scaled back, the policy not
    # The record of what the pre-steps replaced is in the cluster, for a re-run or another controller.
    saved = get_json(twin, "configmap", STATE_CONFIGMAP, "-n", SRIOV_NAMESPACE)["data"]
    assert saved["replicas"] == "1" and json.loads(saved["policy"])["spec"] == before["policy"]
    entry = cluster_ledger(twin)[-1]
    assert [(step["what"], step["restored"]) for step in entry["pre_steps"]] == [
        ("SR-IOV operator scaled to 0", True),
        ("default SriovNetworkNodePolicy deleted", False),
    ]
    report = last_report(workspace, "canary")
    assert (
        "default SriovNetworkNodePolicy deleted (SriovNetworkNodePolicy openshift-sriov-network-operator/default) "
        "is still changed: restore with `ansible-playbook playbooks/upgrade.yml -e stage=rollback`"
    ) in report

    # While the policy cannot be created, stage=rollback fails loudly naming it: never "success".
    rollback = run_printed_next(twin, workspace, "canary")
    assert rollback.returncode != 0, rollback.output
    assert "Stage rollback: success" not in rollback.output
    assert "default SriovNetworkNodePolicy deleted" in rollback.output, rollback.output
    assert sriov_state(twin)["policy"] is None
    assert cluster_ledger(twin)[-1]["outcome"] == "failed"

    # Once the API takes it again, the rollback's own Next (stage=rollback again) brings everything back.
    twin.admin("DELETE", "faults")
    again = run_printed_next(twin, workspace, "rollback")
    assert again.returncode == 0, again.output
    assert "Stage rollback: success" in again.output
    assert sriov_state(twin) == before
    assert "gpu-canary" not in node_labels(twin)[CANARY]
    assert [(step["what"], step["restored"]) for step in cluster_ledger(twin)[-1]["pre_steps"]] == [
        ("SR-IOV operator scaled to 0", True),
        ("default SriovNetworkNodePolicy deleted", True),
    ]
    run = audit(twin, workspace)
    assert run.returncode == 0, run.output
    assert audit_drift(workspace) == []


# -- a MOFED canary halted before it changed anything ------------------------------------------------------------


def mofed_matrix(workspace: pathlib.Path) -> None:
    """canary_testing moves MOFED only (the Network Operator group, the operator itself unchanged)."""
    text = EXAMPLE.read_text()
    start = text.index("    canary_testing:")
    end = text.index("    rollback:")
    canary = (
        "    canary_testing:\n"
        f'      mofed: "{NEW_MOFED}"\n'
        '      status: "canary-testing"\n'
        f'      canary_node: "{CANARY}"\n\n'
    )
    (workspace / "matrix.yaml").write_text(text[:start] + canary + text[end:])


def printed_next(workspace: pathlib.Path, stage: str) -> dict:
    """The "Next" of the stage's last report as extra vars: ``stage=...`` and any ``-e name=value`` it names."""
    line = next(line for line in last_report(workspace, stage).splitlines() if line.startswith("| Next |"))
    found = dict(re.findall(r"(?:-e )?\b(stage|upgrade_\w+)=([\w.-]+)", line))
    assert "stage" in found, f"the report's Next names no stage to run: {line}"
    return found


def run_printed_next(twin, workspace: pathlib.Path, stage: str, **same_inputs) -> PlaybookRun:
    """Run exactly what the report's Next says, with the inputs the failed run had (matrix, report dir, ...)."""
    found = printed_next(workspace, stage)
    return flow(twin, workspace, found.pop("stage"), **{**same_inputs, **found})


def test_mofed_canary_halted_at_evict_pods_is_undone_by_the_printed_next(fresh_twin, tmp_path):
    from .test_clusterpolicy_upgrade import max_unavailable_at_once
    from .test_ofed_rolling_reload import mofed_ready, mofed_versions, pinned_secondary_network_app, workers

    twin = fresh_twin
    workspace = tmp_path
    mofed_matrix(workspace)
    mofed_ready(twin)
    twin.admin("POST", "budget", {"maxUnavailable": 1, "scope": "nvidia.com/gpu.present=true"})
    pinned_secondary_network_app(twin, CANARY, min_available=0)
    twin.admin("POST", "faults", {"type": "pdb_never_allows", "namespace": "default", "name": "rdma-app"})
    inputs = {"network_operator_eviction_timeout": 3, "network_operator_wait_sleep": 0.3}

    canary = flow(twin, workspace, "canary", **inputs)
    assert canary.returncode != 0, canary.output
    assert "evict-pods" in canary.output and "PodDisruptionBudget default/rdma-app" in canary.output, canary.output
    node = workers(twin)[CANARY]
    assert node["spec"].get("unschedulable") is True
    assert node["metadata"]["labels"].get("gpu-canary") == "true"
    assert node["metadata"]["annotations"][OFED_STATE] == "failed"
    assert node["metadata"]["annotations"]["gpufleet.io/rollout-ofed-step"] == "evict-pods"
    assert set(mofed_versions(twin).values()) == {OLD_MOFED}  # MOFED was never reloaded anywhere

    # The PDB still never allows: the undo must not need an eviction at all.
    twin.admin("POST", "report/reset")
    rollback = run_printed_next(twin, workspace, "canary", **inputs)
    assert rollback.returncode == 0, rollback.output
    assert "Stage rollback: success" in rollback.output
    served = twin.report()
    assert served["requests"]["by_verb_resource"].get("create pods/eviction", 0) == 0, served["requests"]
    assert served["budget_violations"] == []
    assert max_unavailable_at_once(served) <= 1
    node = workers(twin)[CANARY]
    assert not node["spec"].get("unschedulable")
    assert "gpu-canary" not in node["metadata"]["labels"]
    assert not [key for key in node["metadata"].get("annotations", {}) if key.startswith("gpufleet.io/rollout-ofed")]
    assert set(mofed_versions(twin).values()) == {OLD_MOFED}
    policy = get_json(twin, "nicclusterpolicies.mellanox.com", "nic-cluster-policy")
    assert policy["spec"]["ofedDriver"]["version"] == OLD_MOFED
    events = get_json(twin, "events", "-A", "--field-selector", f"involvedObject.name={CANARY},type=Normal")
    assert any("before anything changed" in e["message"] for e in events["items"]), events["items"]
    entry = cluster_ledger(twin)[-1]
    assert (entry["stage"], entry["outcome"]) == ("rollback", "success")
    released = next(n for n in entry["nodes"] if n["node"] == CANARY)
    assert released["outcome"] == "released", entry["nodes"]

    # The fault is lifted the way that works today: DELETE /admin/faults may keep pdb_never_allows (another
    # change fixes that in the twin), and its request hook refuses by the PDB's name, so the PDB goes.
    twin.admin("DELETE", "faults")
    kubectl(twin, "delete", "pdb", "rdma-app", "-n", "default")
    run = audit(twin, workspace)
    assert run.returncode == 0, run.output
    assert audit_drift(workspace) == []
