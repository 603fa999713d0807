"""The fault matrix's OpenShift cases (issue 16): a node that never returns, a rollback refused after a canary that
passed.

What a case runs and checks: tests/integration/fault_matrix_cases.py.
"""

from __future__ import annotations

import pytest

from .fault_matrix import (
    assert_outcome,
    last_report,
    printed_next,
)
from .fault_matrix_cases import (
    Case,
    Groups,
    cases_of,
    run_fault,
)

pytestmark = [pytest.mark.slow, pytest.mark.long]


@pytest.mark.parametrize(("group_name", "case"), cases_of("openshift"))
def test_fault(groups: Groups, group_name: str, case: Case) -> None:
    run_fault(groups, group_name, case)


def test_an_openshift_canary_that_passed_is_refused_a_rollback_whose_next_goes_forward(groups: Groups) -> None:
    """OpenShift cannot be downgraded: after a canary that passed, stage=rollback is refused before any change, and
    its report's Next is the stage that works from there (bake, then promote), not stage=rollback again."""
    with groups.case("openshift_forward") as group:
        twin = group.twin
        assert_outcome(group, "canary", group.run("canary"), None)
        twin.admin("POST", "report/reset")
        refused = group.run("rollback")
        assert refused.returncode != 0, refused.output[-3000:]
        assert "Stage rollback: refused" in refused.output, refused.output[-3000:]
        assert "does not support downgrading" in refused.output and "Nothing was changed" in refused.output
        served = twin.report()["requests"]["by_verb_resource"]
        assert not [key for key in served if key.split(" ")[0] in ("create", "update", "patch", "delete")
                    and not key.endswith("leases.coordination.k8s.io")], served  # fmt: skip
        found = printed_next(group.workspace, "rollback")
        assert found == {"stage": "bake"}, found
        line = next(line for line in last_report(group.workspace, "rollback").splitlines() if line.startswith("| Next"))
        assert "stage=promote" in line and "stage=rollback" not in line, line
        assert_outcome(group, "bake", group.run("bake"), None)
