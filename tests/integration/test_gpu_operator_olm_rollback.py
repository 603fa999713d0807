"""A GPU Operator canary that moved the operator through OLM, and the rollback that takes it back (issue 16).

OLM does not downgrade an operator through its Subscription; the rollback reinstalls the older CSV (uninstall:
Subscription, then CSV, the ClusterPolicy and CRDs stay; install: startingCSV, Manual approval, exactly that
InstallPlan approved). Real ``playbooks/upgrade.yml`` runs against the twin, judged by the cluster, the ledger
and ``playbooks/audit.yml``: the preflight refuses a change whose way back the catalog no longer serves, a
rollback the catalog cannot serve changes nothing, check mode changes nothing, and a rollback killed half-way
through the reinstall is finished by the next run, after which the audit finds no drift.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet_twin.process import TwinProcess, start_twin

from .conftest import run_playbook
from .fault_matrix import (
    Group,
    assert_matrix_agrees,
    assert_outcome,
    cluster_ledger,
    get_json,
    kill_group_mid_stage,
    lease_holder,
    marks,
    write_matrix,
)

pytestmark = [pytest.mark.slow, pytest.mark.long]

NAMESPACE = "nvidia-gpu-operator"
PACKAGE = "gpu-operator-certified"
OLD_CSV = f"{PACKAGE}.v24.9.0"  # current_production's operator, the twin's
NEW_CSV = f"{PACKAGE}.v25.3.0"  # the example matrix's canary_testing
STATE = "gpufleet-gpu-operator-olm-reinstall"
PRUNE_OLD = {"type": "olm_bundle_pruned", "package": PACKAGE, "version": "24.9.0"}


@pytest.fixture
def group(tmp_path: pathlib.Path) -> Iterator[Group]:
    twin = start_twin(nodes=4, profile="openshift", time_scale=600, workdir=tmp_path / "twin")
    try:
        write_matrix(tmp_path, None)  # the example matrix: canary_testing moves the operator to v25.3.0
        found = Group(name="gpu_operator", twin=twin, workspace=tmp_path)
        twin.admin("POST", "budget", {"maxUnavailable": found.budget, "scope": "nvidia.com/gpu.present=true"})
        yield found
    finally:
        assert twin.stop() == 0, twin.log_path.read_text()[-2000:]


def csvs(twin: TwinProcess) -> dict[str, str]:
    return {
        csv["metadata"]["name"]: (csv.get("status") or {}).get("phase", "")
        for csv in get_json(twin, "csv", "-n", NAMESPACE)["items"]
    }


def subscription(twin: TwinProcess) -> dict[str, Any]:
    return get_json(twin, "subscription", "-n", NAMESPACE, PACKAGE)


def state_saved(twin: TwinProcess) -> bool:
    return any(cm["metadata"]["name"] == STATE for cm in get_json(twin, "configmap", "-n", NAMESPACE)["items"])


def test_canary_moving_the_operator_then_rollback_reinstalls_it_and_the_audit_finds_no_drift(group: Group) -> None:
    twin = group.twin
    baseline = marks(twin)
    policy_uid = get_json(twin, "clusterpolicy", "gpu-cluster-policy")["metadata"]["uid"]

    # 1. A catalog that no longer carries the installed bundle: the canary is refused before its first write.
    fault = twin.admin("POST", "faults", PRUNE_OLD)
    run = group.run("canary")
    assert run.returncode != 0, run.output[-3000:]
    assert f"no longer carries the bundle {OLD_CSV}" in run.output, run.output[-3000:]
    assert csvs(twin) == {OLD_CSV: "Succeeded"}
    assert marks(twin) == baseline, "the refused canary labelled or cordoned a node"
    twin.admin("DELETE", "faults")
    assert fault

    # 2. The canary moves the operator through OLM.
    run = group.run("canary")
    assert_outcome(group, "canary", run, None)
    assert csvs(twin) == {NEW_CSV: "Succeeded"}
    assert "Rollback possible: the catalog still carries" in run.output

    # 3. The catalog pruned the older bundle since: the rollback cannot reinstall it and changes nothing of OLM's.
    twin.admin("POST", "faults", PRUNE_OLD)
    before = subscription(twin)
    run = group.run("rollback")
    assert run.returncode != 0, run.output[-3000:]
    assert "Stage rollback: failed" in run.output
    assert f"no longer carries the bundle {OLD_CSV}" in run.output and "Nothing was changed" in run.output
    assert csvs(twin) == {NEW_CSV: "Succeeded"}
    assert subscription(twin)["metadata"]["uid"] == before["metadata"]["uid"]
    assert not state_saved(twin)
    twin.admin("DELETE", "faults")

    # 4. Check mode: the rollback says what it would do and changes nothing of OLM's.
    check = run_playbook(
        "playbooks/upgrade.yml",
        twin=twin,
        extra_vars={
            "stage": "rollback",
            "upgrade_matrix_file": str(group.workspace / "matrix.yaml"),
            "upgrade_report_dir": str(group.workspace / "reports"),
            "upgrade_max_unavailable": group.budget,
            "gpu_operator_wait_sleep": 1,
        },
        check=True,
        timeout=900,
    )
    assert check.returncode == 0, check.output[-5000:]
    assert f"goes back from {NEW_CSV} to {OLD_CSV}" in check.output
    assert csvs(twin) == {NEW_CSV: "Succeeded"}
    assert subscription(twin)["metadata"]["uid"] == before["metadata"]["uid"]
    assert not state_saved(twin)

    # 5. The rollback killed (process group) while the reinstall is under way; its Lease expires and the re-run
    # continues the reinstall from the state it kept.
    duration = 600
    kill_group_mid_stage(group, "rollback", lease_duration=duration, until=lambda: state_saved(twin))
    assert lease_holder(twin)
    twin.advance(duration + 60)
    run = group.run("rollback", upgrade_lease_duration=duration)
    assert_outcome(group, "rollback", run, None)

    # OLM's way back: the older CSV runs, the newer is gone, the Subscription installs exactly the older one.
    assert csvs(twin) == {OLD_CSV: "Succeeded"}
    sub = subscription(twin)
    assert sub["spec"]["startingCSV"] == OLD_CSV and sub["spec"]["installPlanApproval"] == "Manual"
    assert sub["spec"]["channel"] == "v24.9" and sub["status"]["installedCSV"] == OLD_CSV
    assert sub["metadata"]["annotations"]["gpufleet.io/reinstalled-from"] == NEW_CSV
    deployment = get_json(twin, "deployment", "-n", NAMESPACE, "gpu-operator")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":v24.9.0")
    assert get_json(twin, "clusterpolicy", "gpu-cluster-policy")["metadata"]["uid"] == policy_uid  # CRs stay
    assert not state_saved(twin)
    # The ledger records what the rollback did to the operator.
    reinstall = cluster_ledger(twin)[-1]["operator"]["reinstall"]
    assert (reinstall["from_csv"], reinstall["to_csv"], reinstall["completed"]) == (NEW_CSV, OLD_CSV, True)
    assert any("startingCSV" in step for step in reinstall["steps"]), reinstall
    assert_matrix_agrees(group, baseline)  # audit.yml: no drift, gpu_operator included
    cluster = json.loads((group.workspace / "audit" / "audit.json").read_text())["drift"]["cluster"]
    row = next(row for row in cluster if row["component"] == "gpu_operator")
    assert (row["status"], row["found"]) == ("ok", "24.9.0"), row
