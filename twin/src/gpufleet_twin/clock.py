"""The simulated clock every behaviour of the twin runs on.

``time_scale`` simulated seconds pass per real second, so a 10-minute driver
reload takes a couple of real seconds at ``--time-scale 300``.  ``advance``
jumps simulated time forward (a 48 h bake in one call) and wakes every
sleeper whose deadline has passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time


class SimClock:
    def __init__(self, time_scale: float = 1.0, start: float | None = None) -> None:
        if time_scale <= 0:
            raise ValueError("time_scale must be positive")
        self.time_scale = time_scale
        self._start = time.time() if start is None else start
        self._mono0 = time.monotonic()
        self._offset = 0.0
        self._changed = asyncio.Event() if _has_loop() else None

    def now(self) -> float:
        """Simulated wall-clock time in seconds since the epoch."""
        return self._start + (time.monotonic() - self._mono0) * self.time_scale + self._offset

    def iso(self, at: float | None = None) -> str:
        """RFC 3339 timestamp (second precision, UTC) as Kubernetes writes them."""
        moment = self.now() if at is None else at
        return dt.datetime.fromtimestamp(moment, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def advance(self, seconds: float) -> None:
        """Jump simulated time forward and wake the sleepers that are now due."""
        if seconds < 0:
            raise ValueError("the clock only moves forward")
        self._offset += seconds
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

    def _event(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def _pulse(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = asyncio.Event()


def _has_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
