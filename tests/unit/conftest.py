"""Settings of the unit layer: the hypothesis profiles the fuzz tests (``test_fuzz_*.py``) run under.

CI (the default profile ``ci``) is deterministic and bounded: ``derandomize`` derives every example from the test
itself, so a run on a busy 2-core machine sees the same inputs each time and the whole fuzz layer stays under a
minute; no example database is written into the checkout. A longer campaign, locally:

    HYPOTHESIS_PROFILE=campaign .venv/bin/python -m pytest -q tests/unit -k fuzz

(random seeds, 20x the examples; a failure prints the smallest input and a ``@reproduce_failure`` line to keep
as a regression example).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = {
    "deadline": None,  # the machine is shared: wall-clock limits per example would make the result depend on load
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}
settings.register_profile("ci", derandomize=True, max_examples=60, print_blob=True, **_COMMON)
settings.register_profile("campaign", max_examples=1200, print_blob=True, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
