"""The fault matrix's NIC firmware cases (issue 16): a BMC that refuses, a BMC job that fails.

What a case runs and checks: tests/integration/fault_matrix_cases.py.
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


@pytest.mark.parametrize(("group_name", "case"), cases_of("firmware", mark_long=True))
def test_fault(groups: Groups, group_name: str, case: Case) -> None:
    run_fault(groups, group_name, case)
