"""Settings every test layer shares."""

from __future__ import annotations

import os
import pathlib

import pytest

from gpufleet_twin.machinery.store import VERIFY_ENCODED_ENV

# Every twin the tests start, in process or as a server process (which inherits
# the environment), checks that no stored object changes in place behind its
# cached list encoding.
os.environ.setdefault(VERIFY_ENCODED_ENV, "1")

# The longest test files, longest first (seconds a file took on one of two workers of this 2-core machine,
# pytest --durations, 2026-11-28): upgrade_flow 464, rbac_stages 413, stage_lease 301, openshift 166,
# molecule 153 (2026-11-29, a scenario per role), network_operator_failures 165, observability 152, upgrade_faults
# 139, ofed_rolling_reload 124, rbac 123, rehearse 116, four_passes 115; every other file under 100. make test's
# workers take whole files in collection order (pytest-xdist --dist loadfile, scripts/test), so these come first:
# one of them started last would run alone while the other workers sit idle.
LONGEST_FIRST = (
    *(f"integration/test_{name}.py" for name in ("upgrade_flow", "rbac_stages", "stage_lease", "openshift")),
    "molecule/test_molecule.py",
    *(
        f"integration/test_{name}.py"
        for name in (
            "network_operator_failures",
            "observability",
            "upgrade_faults",
            "ofed_rolling_reload",
            "rbac",
            "rehearse",
            "four_passes",
            "gitops_flow",
        )
    ),
)
TESTS = pathlib.Path(__file__).resolve().parent
_MOVED = [name for name in LONGEST_FIRST if not (TESTS / name).is_file()]
if _MOVED:
    raise RuntimeError(f"tests/conftest.py LONGEST_FIRST names files that do not exist: {', '.join(_MOVED)}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of LONGEST_FIRST first, in its order; every other test where it was (a stable sort)."""
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}

    def place(item: pytest.Item) -> int:
        try:
            return rank.get(item.path.relative_to(TESTS).as_posix(), len(rank))
        except ValueError:  # a test outside tests/
            return len(rank)

    items.sort(key=place)
