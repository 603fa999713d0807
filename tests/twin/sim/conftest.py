"""Fixtures of the simulation core's tests; the harness itself is ``simharness.py``."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from simharness import run_scenario


@pytest.fixture
def simulate() -> Callable[..., None]:
    """``simulate(scenario, nodes=3, ...)`` runs an async scenario against a fresh in-process cluster."""
    return run_scenario
