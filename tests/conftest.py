"""Settings every test layer shares."""

from __future__ import annotations

import os
import pathlib

import pytest

from gpufleet_twin.store import VERIFY_ENCODED_ENV

# Every twin the tests start, in process or as a server process (which inherits
# the environment), checks that no stored object changes in place behind its
# cached list encoding.
os.environ.setdefault(VERIFY_ENCODED_ENV, "1")

# With ``pytest -n N --dist loadgroup`` (scripts/test), the tests of a file stay on one worker (as with
# ``--dist loadfile``) except the integration tests that share nothing with their neighbours: a test of
# tests/integration whose fixtures are all function-scoped starts its own twin and runs its own playbooks, so
# it is a unit of work of its own, and one long file no longer holds a worker while the other has finished.
_SHARED_SCOPES = {"class", "module", "package"}
_INDEPENDENT_DIR = pathlib.Path(__file__).resolve().parent / "integration"


def _shares_a_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return True
    for definitions in info.name2fixturedefs.values():
        if any(str(getattr(definition, "scope", "function")) in _SHARED_SCOPES for definition in definitions):
            return True
    return False


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("dist", default="no") != "loadgroup":
        return
    for item in items:
        independent = _INDEPENDENT_DIR in item.path.parents and not _shares_a_fixture(item)
        if not independent and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
