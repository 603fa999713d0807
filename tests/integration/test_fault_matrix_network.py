"""The fault matrix's Network Operator cases (issue 16): 409 conflicts, a MOFED that does not build, a halted
MOFED promote.

What a case runs and checks: tests/integration/fault_matrix_cases.py.
"""

from __future__ import annotations

import pytest

from .fault_matrix import (
    cluster_ledger,
    marks,
    run_case_at,
)
from .fault_matrix_cases import (
    Case,
    Groups,
    case_named,
    cases_of,
    run_fault,
)

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("group_name", "case"), cases_of("network_operator", mark_long=True))
def test_fault(groups: Groups, group_name: str, case: Case) -> None:
    run_fault(groups, group_name, case)


@pytest.mark.long
def test_a_halted_mofed_promote_rolls_back_mofed_and_leaves_no_node_cordoned(groups: Groups) -> None:
    """After a Network Operator promote halted at a node whose MOFED does not build, its Next (stage=rollback), the
    fault cleared, rolls back the Network Operator group (not the GPU Operator), within the budget, and leaves no
    node cordoned; audit finds no drift (issue 16, soak bug 2)."""
    group_name, case = case_named("mofed-build-fails")
    with groups.case(group_name) as group:
        run_case_at(group, case, "promote", exact=False)
        rollback = cluster_ledger(group.twin)[-1]
        assert (rollback["stage"], rollback["outcome"], rollback["group"]) == (
            "rollback",
            "success",
            "network_operator",
        )
        assert rollback["rollback_target"] == "current_production", rollback
        assert not [node for node, keys in marks(group.twin).items() if "cordoned" in keys]
