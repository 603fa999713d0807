"""Waking controllers: on a store change they care about, or after some simulated time.

Every simulated controller loops "reconcile, then wait".  ``Waker.wait``
returns as soon as a relevant store write happens (a store listener sets an
``asyncio.Event``), when ``SimClock.advance`` jumps past the deadline, or when
the simulated timeout elapses, whichever comes first, so a test that
advances the clock or patches an object sees the reaction promptly, and a
10,000-node cluster that is idle costs nothing.

``DueTimes`` is the companion for per-object deadlines (a container that
starts in 5 s, a node that comes back from a reboot): a heap with lazy
deletion, so rescheduling an object is O(log n).  ``run_operator_loop`` is the
loop of a simulated operator process whose passes are whole reconciles.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections.abc import Callable, Hashable, Iterable

from .clock import SimClock
from .store import Store, WatchEvent

# Returns True when the event should wake the controller; may also record
# what changed (dirty sets) as a side effect.  Must be cheap: it runs inside
# every store write.
EventFilter = Callable[[WatchEvent], bool]

# Real-time spacing of an operator's passes (``run_operator_loop``).
CHEAP_PASS_SECONDS = 0.005
PASS_SPACING_FACTOR = 2.0
MAX_PASS_SPACING_SECONDS = 2.0

# Upper bound for one wait, so a controller re-checks its world now and then
# even if a change slipped past its filter.
DEFAULT_RESYNC_SECONDS = 300.0


class Waker:
    def __init__(
        self,
        store: Store,
        clock: SimClock,
        *,
        resources: Iterable[tuple[str, str]] = (),
        on_event: EventFilter | None = None,
    ) -> None:
        """``resources``: (group, plural) keys to listen to (empty = every kind)."""
        self._clock = clock
        self._keys = frozenset(resources)
        self._on_event = on_event
        self._event = asyncio.Event()
        store.add_listener(self._listen)

    def _listen(self, event: WatchEvent) -> None:
        if self._keys and event.rtype.key not in self._keys:
            return
        if self._on_event is not None and not self._on_event(event):
            return
        self._event.set()

    def poke(self) -> None:
        """Wake the controller now (state outside the store changed)."""
        self._event.set()

    async def wait(self, sim_seconds: float | None = None) -> bool:
        """Wait for a change or ``sim_seconds`` of simulated time; True if a change woke us."""
        if self._event.is_set():
            self._event.clear()
            # Let the writer that woke us finish its burst before we look.
            await asyncio.sleep(0)
            return True
        timeout = DEFAULT_RESYNC_SECONDS if sim_seconds is None else min(sim_seconds, DEFAULT_RESYNC_SECONDS)
        if timeout <= 0:
            await asyncio.sleep(0)
            return False
        sleeper = asyncio.ensure_future(self._clock.sleep(timeout))
        changed = asyncio.ensure_future(self._event.wait())
        try:
            await asyncio.wait({sleeper, changed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            changed.cancel()
        woke = self._event.is_set()
        self._event.clear()
        return woke


class DueTimes:
    """Simulated deadlines per key; the latest ``schedule`` for a key wins."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Hashable]] = []
        self._due: dict[Hashable, float] = {}
        self._counter = itertools.count()

    def schedule(self, key: Hashable, at: float) -> None:
        self._due[key] = at
        heapq.heappush(self._heap, (at, next(self._counter), key))

    def schedule_earliest(self, key: Hashable, at: float) -> None:
        """Schedule unless the key is already due earlier."""
        current = self._due.get(key)
        if current is None or at < current:
            self.schedule(key, at)

    def cancel(self, key: Hashable) -> None:
        self._due.pop(key, None)

    def due_at(self, key: Hashable) -> float | None:
        return self._due.get(key)

    def pop_due(self, now: float) -> list[Hashable]:
        """Keys whose deadline is at or before ``now`` (each once), earliest first."""
        ready: list[Hashable] = []
        while self._heap and self._heap[0][0] <= now:
            at, _, key = heapq.heappop(self._heap)
            if self._due.get(key) == at:
                del self._due[key]
                ready.append(key)
        return ready

    def next_due(self) -> float | None:
        while self._heap:
            at, _, key = self._heap[0]
            if self._due.get(key) == at:
                return at
            heapq.heappop(self._heap)
        return None

    def __len__(self) -> int:
        return len(self._due)


class Pacer:
    """Yields to the event loop once a pass has held it for ``budget`` real seconds.

    Controllers call it after every object they handle, so that a pass over
    thousands of pods never keeps the API server from answering for long.
    """

    def __init__(self, budget: float = 0.005) -> None:
        self._budget = budget
        self._since = time.monotonic()

    async def __call__(self) -> None:
        if time.monotonic() - self._since >= self._budget:
            await asyncio.sleep(0)
            self._since = time.monotonic()


async def run_operator_loop(
    waker: Waker, reconcile: Callable[[], None], next_wait: Callable[[], float | None], *, log: logging.Logger
) -> None:
    """An operator process: ``reconcile``, then ``waker.wait(next_wait())``, forever.

    A pass that raises is logged and the loop goes on (the real operator logs and requeues; one bad
    reconcile must not stop the twin).  A pass over thousands of nodes costs tens of milliseconds: after
    one that cost more than ``CHEAP_PASS_SECONDS`` the loop lets changes pile up (real time) so the
    operator takes a bounded share of the twin's single core.  The pass's cost is its CPU time: on a
    loaded machine its wall time grows, and pausing after it that much longer would let simulated time
    run on past the operator.
    """
    while True:
        started = time.thread_time()
        try:
            reconcile()
        except Exception:
            log.exception("reconcile failed")
        spent = time.thread_time() - started
        if spent > CHEAP_PASS_SECONDS:
            await asyncio.sleep(min(spent * PASS_SPACING_FACTOR, MAX_PASS_SPACING_SECONDS))
        await waker.wait(next_wait())
