"""The simulated clock every behaviour of the twin runs on.

``time_scale`` simulated seconds pass per real second, so a 10-minute driver
reload takes a couple of real seconds at ``--time-scale 300``.  ``advance``
jumps simulated time forward (a 48 h bake in one call) and wakes every
sleeper whose deadline has passed.

While the twin's controllers run (``meter_loop``, called by
``Twin.start_controllers``), one turn of the event loop may move simulated
time on by ``max_step`` simulated seconds at most.  The loop's waits count in
full (up to the timeout the loop asked for: a timer that fires late on a busy
machine is counted as on time), but the real time a turn spends running
callbacks, or waiting for a CPU, counts only up to ``max_step``.  On a loaded
machine simulated time therefore slows down instead of jumping past the
controllers' deadlines: a reboot, a grace period or an event's TTL elapses
over as many loop turns as on an idle machine, and no controller misses a
state it would have seen there.  A real cluster's clock does not slow down,
but its controllers do not stall for minutes of cluster time either.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from typing import Any

# Smaller than every timing of the simulation (graceful deletion 2 s, drain retry and MCO tick 5 s,
# kubelet back-off 10 s, node monitor grace 40 s).
DEFAULT_MAX_STEP = 2.0


def rfc3339(moment: float) -> str:
    """RFC 3339 timestamp (second precision, UTC) as Kubernetes writes them."""
    return dt.datetime.fromtimestamp(moment, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(stamp: str) -> float:
    """Epoch seconds of an RFC 3339 timestamp as the API writes them (fractional seconds or not)."""
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


class SimClock:
    def __init__(
        self, time_scale: float = 1.0, start: float | None = None, *, max_step: float = DEFAULT_MAX_STEP
    ) -> None:
        if time_scale <= 0:
            raise ValueError("time_scale must be positive")
        if max_step <= 0:
            raise ValueError("max_step must be positive")
        self.time_scale = time_scale
        self.max_step = max_step
        self._start = time.time() if start is None else start
        # Simulated seconds elapsed up to the real moment _mark (advance() apart, see _offset).
        self._elapsed = 0.0
        self._mark = time.monotonic()
        self._metered: _TurnMeter | None = None
        self._latest = self._start
        self._offset = 0.0
        self._changed = asyncio.Event() if _has_loop() else None

    def now(self) -> float:
        """Simulated wall-clock time in seconds since the epoch."""
        span = (time.monotonic() - self._mark) * self.time_scale
        if self._metered is not None:
            span = min(span, self.max_step)
        moment = self._start + self._elapsed + span + self._offset
        # Never backwards, also for a reader between two of the loop's bookkeeping steps.
        self._latest = max(self._latest, moment)
        return self._latest

    def iso(self, at: float | None = None) -> str:
        """RFC 3339 timestamp (second precision, UTC) as Kubernetes writes them."""
        return rfc3339(self.now() if at is None else at)

    def advance(self, seconds: float) -> None:
        """Jump simulated time forward and wake the sleepers that are now due."""
        if seconds < 0:
            raise ValueError("the clock only moves forward")
        self._offset += seconds
        self._pulse()

    def set_time_scale(self, time_scale: float) -> None:
        """Run on at another pace from now on (a test slows the twin down to look at a short-lived state).

        The clock does not jump: the time passed so far is folded in at the old pace, and sleepers wake to wait
        again at the new one."""
        if time_scale <= 0:
            raise ValueError("time_scale must be positive")
        moment = self.now()
        self._elapsed = moment - self._start - self._offset
        self._mark = time.monotonic()
        self.time_scale = time_scale
        self._pulse()

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` of simulated time (cut short by ``advance``)."""
        deadline = self.now() + seconds
        while True:
            remaining = deadline - self.now()
            if remaining <= 0:
                return
            changed = self._event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout=remaining / self.time_scale)

    # -- one loop turn, max_step at most ------------------------------------------------------------------------
    def meter_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Cap each turn of ``loop`` at ``max_step`` simulated seconds (see the module docstring).

        A loop without a selector (not a ``SelectorEventLoop``) is left alone: the clock then runs freely.
        """
        if self._metered is not None and self._metered.loop is loop:
            return
        self.unmeter_loop()
        selector = getattr(loop, "_selector", None)
        if selector is None or not hasattr(selector, "select"):
            return
        self._settle()
        meter = _TurnMeter(loop, selector, self)
        slot: Any = loop  # asyncio's private selector slot
        slot._selector = meter
        self._metered = meter

    def unmeter_loop(self) -> None:
        """Let the clock run freely again (the controllers stopped)."""
        meter = self._metered
        self._metered = None
        if meter is None:
            return
        self._elapsed += min((time.monotonic() - self._mark) * self.time_scale, self.max_step)
        self._mark = time.monotonic()
        loop: Any = meter.loop  # asyncio's private selector slot
        original = meter.selector
        if getattr(loop, "_selector", None) is meter:
            loop._selector = original

    def _settle(self) -> None:
        """Fold the free-running time up to now into ``_elapsed``."""
        real = time.monotonic()
        self._elapsed += (real - self._mark) * self.time_scale
        self._mark = real

    def _loop_waits(self, real: float) -> None:
        """The loop finished a turn's callbacks: that turn counts ``max_step`` at most."""
        self._elapsed += min((real - self._mark) * self.time_scale, self.max_step)
        self._mark = real

    def _loop_resumes(self, waited: float, real: float) -> None:
        """The loop waited ``waited`` real seconds (no longer than it asked to): they count in full."""
        self._elapsed += waited * self.time_scale
        self._mark = real

    def _event(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def _pulse(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = asyncio.Event()


class _TurnMeter:
    """Stands in for an event loop's selector and tells the clock when the loop waits, and how long."""

    def __init__(self, loop: asyncio.AbstractEventLoop, selector: Any, clock: SimClock) -> None:
        self.loop = loop
        self.selector = selector
        self._clock = clock

    def select(self, timeout: float | None = None) -> Any:
        began = time.monotonic()
        self._clock._loop_waits(began)
        try:
            return self.selector.select(timeout)
        finally:
            ended = time.monotonic()
            waited = ended - began if timeout is None else min(ended - began, max(0.0, timeout))
            self._clock._loop_resumes(waited, ended)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.selector, name)


def _has_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
