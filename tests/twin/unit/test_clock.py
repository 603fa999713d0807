"""SimClock: simulated time per real time, and at most max_step simulated seconds per busy event-loop turn."""

from __future__ import annotations

import asyncio
import time

import pytest

from gpufleet_twin.machinery.clock import SimClock

SCALE = 600.0


def busy(real_seconds: float) -> None:
    """Hold the event loop (and the CPU) the way a starved or loaded twin does."""
    until = time.monotonic() + real_seconds
    while time.monotonic() < until:
        pass


def test_a_turn_that_holds_the_loop_moves_the_clock_by_max_step_at_most() -> None:
    clock = SimClock(time_scale=SCALE, start=0.0, max_step=2.0)

    async def scenario() -> list[float]:
        clock.meter_loop(asyncio.get_running_loop())
        await asyncio.sleep(0)
        seen = []
        for _ in range(3):
            before = clock.now()
            busy(0.05)  # 30 simulated seconds of real time in one turn
            seen.append(clock.now() - before)
            await asyncio.sleep(0)
        clock.unmeter_loop()
        return seen

    steps = asyncio.run(scenario())
    assert all(step <= 2.0 + 1e-9 for step in steps), steps


def test_waiting_counts_in_full_so_simulated_sleeps_take_their_real_time() -> None:
    clock = SimClock(time_scale=SCALE, start=0.0)

    async def scenario() -> tuple[float, float]:
        clock.meter_loop(asyncio.get_running_loop())
        began_real, began = time.monotonic(), clock.now()
        await clock.sleep(120.0)  # 0.2 real seconds
        return clock.now() - began, time.monotonic() - began_real

    simulated, real = asyncio.run(scenario())
    assert simulated >= 120.0
    assert real < 120.0 / SCALE + 1.0  # an idle loop is not slowed down


def test_unmetered_clock_runs_freely_and_never_backwards() -> None:
    clock = SimClock(time_scale=SCALE, start=0.0)
    first = clock.now()
    busy(0.02)
    assert clock.now() - first >= 0.02 * SCALE * 0.9
    clock.advance(100.0)
    assert clock.now() >= first + 100.0
    with pytest.raises(ValueError):
        SimClock(time_scale=SCALE, max_step=0)


def test_a_new_time_scale_takes_over_without_a_jump() -> None:
    clock = SimClock(time_scale=SCALE, start=0.0)
    time.sleep(0.05)
    before = clock.now()
    clock.set_time_scale(1.0)
    assert clock.now() >= before
    assert clock.now() < before + 1.0, "folded at the old pace, no jump"
    time.sleep(0.1)
    slow = clock.now() - before
    assert 0.05 <= slow < 5.0, slow  # about 0.1 s of simulated time per 0.1 s real, not 60
    clock.set_time_scale(SCALE)
    mark = clock.now()
    time.sleep(0.05)
    assert clock.now() - mark >= 10.0  # 600 times faster again
    with pytest.raises(ValueError):
        clock.set_time_scale(0)


def test_a_sleeper_waits_at_the_new_pace() -> None:
    clock = SimClock(time_scale=1.0, start=0.0)

    async def scenario() -> float:
        started = time.monotonic()
        sleeper = asyncio.ensure_future(clock.sleep(60))
        await asyncio.sleep(0.05)
        clock.set_time_scale(6000.0)  # 60 simulated seconds now pass in 10 ms
        await asyncio.wait_for(sleeper, timeout=5)
        return time.monotonic() - started

    assert asyncio.run(scenario()) < 5
