"""Settings every test layer shares."""

from __future__ import annotations

import os

from gpufleet_twin.machinery.store import VERIFY_ENCODED_ENV

# Every twin the tests start, in process or as a server process (which inherits
# the environment), checks that no stored object changes in place behind its
# cached list encoding.
os.environ.setdefault(VERIFY_ENCODED_ENV, "1")
