# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The one bounded wait loop of the collection (collection-internal).

Every wait polls a predicate on a monotonic clock, sleeps between polls and
gives up at a deadline; the caller gets how long it took either way.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Generic, Optional, TypeVar

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import WaitTimeoutError

T = TypeVar("T")


@dataclass
class WaitOutcome(Generic[T]):
    value: T
    elapsed: float
    polls: int


def wait_until(
    observe: Callable[[], T],
    done: Callable[[T], bool],
    *,
    timeout: float,
    sleep: float,
    what: str,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> WaitOutcome[T]:
    """Call ``observe`` until ``done(observation)``; raise WaitTimeoutError after ``timeout`` seconds.

    The last observation rides on the error (``result['last']``) so the caller
    can report how far things got.
    """
    if timeout < 0 or sleep <= 0:
        raise ValueError("timeout must be >= 0 and sleep > 0")
    start = clock()
    deadline = start + timeout
    last: Optional[T] = None
    now = start
    # Every pause but the last lasts ``sleep``, so this many polls reach the
    # deadline; the count bounds the loop even if the clock misbehaves.
    max_polls = math.ceil(timeout / sleep) + 1
    polls = 0
    for polls in range(1, max_polls + 1):
        last = observe()
        now = clock()
        if done(last):
            return WaitOutcome(value=last, elapsed=now - start, polls=polls)
        if now >= deadline or polls == max_polls:
            break
        pause(min(sleep, max(deadline - now, 0.0)))
    raise WaitTimeoutError(
        f"Timed out after {now - start:.0f}s waiting for {what}",
        result={"last": last, "elapsed": now - start, "polls": polls},
    )
