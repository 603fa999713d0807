"""The fault matrix's NIC firmware cases (issue 16): a BMC that refuses, a BMC job that fails.

One real ``playbooks/upgrade.yml -e stage=...`` run per case against the twin with one fault injected through
its admin URL, then the invariants of tests/integration/fault_matrix.py (outcome, budget, explained marks,
recovery by the printed Next, matrix and cluster agree). The cases, their settings and the twins they share are
tests/integration/fault_matrix_cases.py's: the cases of a group share one twin, and each ends back at
``current_production`` with no mark of ours left, which is itself the proof that the tool recovered.
"""

from __future__ import annotations

import pytest

from .fault_matrix_cases import (
    Case,
    Groups,
    cases_of,
    run_fault,
)

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("group_name", "case"), cases_of("firmware"))
def test_fault(groups: Groups, group_name: str, case: Case) -> None:
    run_fault(groups, group_name, case)
