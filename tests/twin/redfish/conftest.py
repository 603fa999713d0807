"""Fixtures of the BMC tests (the harness itself is ``bmc_harness``, importable under a unique name)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from bmc_harness import BmcHarness, running_twin


@pytest.fixture
def bmcs(tmp_path: Path) -> Iterator[BmcHarness]:
    with running_twin(tmp_path) as harness:
        yield harness
