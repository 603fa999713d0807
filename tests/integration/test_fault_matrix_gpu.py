"""The fault matrix's GPU Operator cases (issue 16): API bursts, a driver that does not build, a cordoned canary,
SIGKILL mid-stage, a refused then halted promote.

What a case runs and checks: tests/integration/fault_matrix_cases.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpufleet_twin.process import TwinProcess

from .conftest import kubectl
from .fault_matrix import (
    Halt,
    assert_marks_explained,
    assert_matrix_agrees,
    assert_outcome,
    assert_within_budget,
    clear_faults,
    cluster_ledger,
    halt_as_recorded,
    last_report,
    marks,
    printed_next,
    recover,
)
from .fault_matrix_cases import (
    Case,
    Groups,
    case_named,
    cases_of,
    run_fault,
    sigkill_then_rerun,
)
from .test_clusterpolicy_upgrade import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.long]


@pytest.mark.parametrize(("group_name", "case"), cases_of("gpu_operator"))
def test_fault(groups: Groups, group_name: str, case: Case) -> None:
    run_fault(groups, group_name, case)


def test_sigkill_of_the_process_group_mid_stage_then_rerun(groups: Groups) -> None:
    with groups.case("gpu_operator") as group:
        sigkill_then_rerun(group)


def test_a_refused_promote_says_so_and_its_next_promotes_a_halted_promote_rolls_back_to_production(
    groups: Groups,
) -> None:
    """A GPU Operator promote refused by clusterpolicy_upgrade's own budget check changed nothing and says so; its
    Next (stage=promote) is accepted and drives the promotion, which this time halts at a driver that does not build
    (the matrix not rewritten); that halt's Next, stage=rollback, returns the moved nodes to current_production
    (not the matrix's rollback entry): audit finds no drift, nothing is left cordoned (issue 16, soak bugs 1 and 3)."""
    with groups.case("gpu_operator") as group:
        twin = group.twin
        baseline = marks(twin)
        assert_outcome(group, "canary", group.run("canary"), None)
        twin.advance(49 * 3600)  # the bake window, on the twin's clock
        twin.admin("POST", "report/reset")
        twin.admin("POST", "faults", {"type": "cordon", "node": "gpu-worker-002"})  # the whole budget, by hand
        refused = group.run("promote")
        entry = assert_outcome(group, "promote", refused, Halt("", "preflight", "maxUnavailable"))
        assert entry["cluster_changed"] is False, entry
        assert "Nothing on the cluster was changed" in last_report(group.workspace, "promote")
        assert printed_next(group.workspace, "promote") == {"stage": "promote"}
        assert "stage=rollback" not in next(
            line for line in last_report(group.workspace, "promote").splitlines() if line.startswith("| Next |")
        )
        assert_within_budget(twin, group.budget)

        # The cordon lifted, the printed Next: the ledger lets it run, and it moves nodes (then halts on a driver
        # that does not build on the fleet's kernel, the cluster changed).
        clear_faults(twin)
        group_name, driver_fault = case_named("driver-build-fails")
        assert group_name == "gpu_operator"
        driver_fault.inject(twin)
        before, matrix = marks(twin), (group.workspace / "matrix.yaml").read_text()
        halted = group.run("promote", **driver_fault.extra)
        entry = assert_outcome(group, "promote", halted, halt_as_recorded(twin))
        assert entry["cluster_changed"] is True, entry
        assert "halted at node" in entry["message"] and "no kernel-devel package" in entry["message"], entry
        assert_marks_explained(twin, before)
        assert_within_budget(twin, group.budget)
        assert (group.workspace / "matrix.yaml").read_text() == matrix, "a halted promotion rewrote the matrix"

        # Its Next, the fault cleared: back to current_production, no drift, nothing left cordoned or labelled.
        recover(group, "promote", clear_faults, baseline)
        rollback = cluster_ledger(twin)[-1]
        assert (rollback["stage"], rollback["rollback_target"]) == ("rollback", "current_production"), rollback
        assert "rollback entry" not in rollback["message"] and "revert the promotion" not in rollback["message"]
        assert_within_budget(twin, group.budget)


def test_a_rollback_validates_its_canary_before_gpu_work_waiting_for_it_takes_it(groups: Groups) -> None:
    """GPU work waiting, pending, for the canary node's GPUs (as pods a halted stage evicted wait for room) takes them
    the moment the rollback's driver change uncordons the node, before the gates' Jobs could be scheduled: the gates
    could not run. The rollback takes the canary out of service again through the upgrade controller (its
    upgrade-requested annotation), validates it cordoned, then releases it to the waiting work (docs/reliability.md,
    NEW 1)."""
    with groups.case("gpu_operator") as group:
        twin = group.twin
        baseline = marks(twin)
        assert_outcome(group, "canary", group.run("canary"), None)
        canary = cluster_ledger(twin)[-1]["canary_node"]
        waiting = group.workspace / "waiting-gpu-work.json"
        waiting.write_text(json.dumps(waiting_gpu_work(node=canary)))
        kubectl(twin, "apply", "-f", str(waiting))
        wait_for(lambda: bool(_pods(twin, "waiting-gpu-work")), what="the waiting GPU work's pod")
        try:
            before = marks(twin)
            run = group.run("rollback")
            assert run.returncode == 0, run.output[-3000:]
            assert_outcome(group, "rollback", run, None)
            rollback = cluster_ledger(twin)[-1]
            canary_gates = [gate for gate in rollback["gates"] if gate["node"] == canary]
            assert canary_gates and all(gate["passed"] for gate in canary_gates), canary_gates
            assert_marks_explained(twin, before)
            assert_within_budget(twin, group.budget)
            assert_matrix_agrees(group, baseline)
            # After its gates the canary went back to work: the waiting GPU work took it.
            wait_for(lambda: canary in nodes_of_pods(twin, "waiting-gpu-work"), what="the waiting work on the canary")
        finally:
            kubectl(twin, "delete", "-f", str(waiting), check=False)


def waiting_gpu_work(*, node: str) -> dict[str, object]:
    """A Deployment of one pod that wants every GPU of ``node``."""
    labels = {"app": "waiting-gpu-work"}
    container = {"name": "main", "image": "registry.example/trainer:1", "resources": {"limits": {"nvidia.com/gpu": 8}}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "waiting-gpu-work", "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [container]},
            },
        },
    }


def _pods(twin: TwinProcess, app: str) -> list[dict[str, Any]]:
    return json.loads(kubectl(twin, "get", "pods", "-n", "default", "-l", f"app={app}", "-o", "json"))["items"]


def nodes_of_pods(twin: TwinProcess, app: str) -> set[str]:
    return {pod["spec"].get("nodeName", "") for pod in _pods(twin, app) if pod["status"].get("phase") == "Running"}
