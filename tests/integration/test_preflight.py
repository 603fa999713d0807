"""Preflight before the first write (issue 16): a stage of ``playbooks/upgrade.yml`` that cannot finish changes
nothing. Each test gives a stage a prerequisite it lacks, runs the playbook as a person does against the twin,
and asserts that the run fails naming what is missing and where, and that the twin's recorder saw no write but
the stage Lease (taken, then released) and the ledger's own record of the failed run: not the canary label,
nothing of the component.

The table of what each stage checks before its first write is in docs/upgrade-flow.md.
"""

from __future__ import annotations

import json
import pathlib
import re
from collections.abc import Iterator

import pytest

from gpufleet_twin.process import TwinProcess, start_twin

from .conftest import kubectl, run_playbook
from .test_upgrade_flow import CANARY, EXAMPLE, NAMESPACE, flow, last_report, node_labels, writes

pytestmark = pytest.mark.slow

# The ledger's record of the failed run, and the stage Lease the run held (taken and released).
ALLOWED_WRITES = {
    "create configmaps",
    "update configmaps",
    "create leases.coordination.k8s.io",
    "update leases.coordination.k8s.io",
}
SRIOV_NAMESPACE = "openshift-sriov-network-operator"


@pytest.fixture
def kubernetes_twin(tmp_path: pathlib.Path) -> Iterator[TwinProcess]:
    """A Kubernetes (not OpenShift) twin: no OLM, so operators move from their rendered manifests."""
    twin = start_twin(nodes=6, profile="kubernetes", time_scale=600, workdir=tmp_path / "twin")
    yield twin
    assert twin.stop() == 0, twin.log_path.read_text()[-2000:]


def matrix(workspace: pathlib.Path, *, canary: dict[str, str] | None = None, production: dict[str, str] | None = None):
    """The example matrix, with canary_testing replaced and current_production versions set where given."""
    text = EXAMPLE.read_text()
    for key, value in (production or {}).items():
        text = re.sub(rf'(\n      {key}: )"[^"]*"', rf'\1"{value}"', text, count=1)
    if canary is not None:
        start, end = text.index("    canary_testing:"), text.index("    rollback:")
        body = "".join(f'      {key}: "{value}"\n' for key, value in canary.items())
        text = text[:start] + "    canary_testing:\n" + body + "\n" + text[end:]
    (workspace / "matrix.yaml").write_text(text)


def cluster_ledger(twin: TwinProcess, namespace: str = NAMESPACE) -> list[dict]:
    found = kubectl(twin, "get", "configmap", "-n", namespace, "gpufleet-upgrade-ledger", "-o", "json", check=False)
    text = json.loads(found)["data"]["ledger.jsonl"] if found else ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def assert_changed_nothing(
    twin: TwinProcess, workspace: pathlib.Path, run, *, names: list[str], namespace: str = NAMESPACE
) -> None:
    """Failed, naming each of ``names``; no write but the ledger's; the report says to fix it and run it again."""
    assert run.returncode != 0, run.output[-3000:]
    assert "Stage canary: failed" in run.output, run.output[-3000:]
    for what in names:
        assert what in run.output, f"the failure does not name {what!r}:\n{run.output[-3000:]}"
    assert set(writes(twin)) <= ALLOWED_WRITES, f"writes besides the ledger's and the Lease's: {writes(twin)}"
    assert "gpu-canary" not in node_labels(twin)[CANARY]
    entry = cluster_ledger(twin, namespace)[-1]
    assert (entry["outcome"], entry["cluster_changed"]) == ("failed", False), entry
    next_line = next(line for line in last_report(workspace, "canary").splitlines() if line.startswith("| Next |"))
    assert "run stage=canary again" in next_line and "stage=rollback" not in next_line, next_line


def test_a_gpu_operator_canary_from_manifests_without_the_target_crds_changes_nothing(kubernetes_twin, tmp_path):
    twin = kubernetes_twin
    namespace = twin.companion["published"]["gpu_operator_namespace"]
    matrix(tmp_path)  # the example: GPU Operator v24.9.0 -> v25.3.0
    twin.admin("POST", "report/reset")
    run = flow(twin, tmp_path, "canary", upgrade_namespace=namespace)
    names = ["GPU Operator cannot move from 24.9.0 to 25.3.0", "set gpu_operator_crds_dir"]
    assert_changed_nothing(twin, tmp_path, run, names=names, namespace=namespace)

    # A folder without a CRD in it is named too.
    empty = tmp_path / "crds"
    empty.mkdir()
    twin.admin("POST", "report/reset")
    run = flow(twin, tmp_path, "canary", upgrade_namespace=namespace, gpu_operator_crds_dir=str(empty))
    names = [f"gpu_operator_crds_dir {empty} holds no *.yaml CRD"]
    assert_changed_nothing(twin, tmp_path, run, names=names, namespace=namespace)

    # With the target's CRDs at hand the operator step's preflight passes (the role's preflight alone: read-only).
    (empty / "nvidia.com_clusterpolicies.yaml").write_text(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
    )
    twin.admin("POST", "report/reset")
    variables = {"gpu_operator_action": "preflight", "gpu_operator_crds_dir": str(empty),
                 "gpu_operator_target": {"gpu_operator": "v25.3.0", "gpu_driver": "570.124.06"}}  # fmt: skip
    passed = run_playbook("tests/integration/playbooks/gpu_operator_role.yml", twin=twin, extra_vars=variables)
    assert passed.returncode == 0, passed.output[-3000:]
    assert writes(twin) == {}


def test_an_sriov_canary_to_a_build_olm_does_not_offer_yet_changes_nothing(fresh_twin, tmp_path):
    twin = fresh_twin
    # The matrix says OpenShift 4.17 runs (it does not: the twin runs 4.16.20), so the matrix rules allow the
    # 4.17 build of the SR-IOV operator; Red Hat's index for a 4.16 cluster does not have it.
    matrix(
        tmp_path,
        production={"openshift": "4.17.12"},
        canary={"sriov_operator": "4.17.0", "status": "canary-testing", "canary_node": CANARY},
    )
    subscription = json.loads(
        kubectl(twin, "get", "subscriptions.operators.coreos.com", "-n", SRIOV_NAMESPACE, "-o", "json")
    )["items"][0]
    twin.admin("POST", "report/reset")
    run = flow(twin, tmp_path, "canary", upgrade_wait_timeout=120, sriov_operator_wait_sleep=1)
    assert_changed_nothing(twin, tmp_path, run, names=["4.17.0", "OpenShift minor 4.16", "update OpenShift to 4.17"])
    after = json.loads(kubectl(twin, "get", "subscriptions.operators.coreos.com", "-n", SRIOV_NAMESPACE, "-o", "json"))
    assert after["items"][0]["spec"] == subscription["spec"]
