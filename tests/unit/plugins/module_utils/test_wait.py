import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import WaitTimeoutError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._wait import wait_until


class FakeClock:
    """A clock that moves only when the wait loop sleeps."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_returns_first_observation_that_satisfies_the_condition():
    clock = FakeClock()
    readings = iter([1, 2, 3, 4])
    outcome = wait_until(
        lambda: next(readings),
        lambda value: value >= 3,
        timeout=60,
        sleep=5,
        what="three",
        clock=clock.monotonic,
        pause=clock.sleep,
    )
    assert outcome.value == 3
    assert outcome.polls == 3
    assert outcome.elapsed == 10
    assert clock.sleeps == [5, 5]


def test_times_out_with_the_last_observation_and_never_sleeps_past_the_deadline():
    clock = FakeClock()
    with pytest.raises(WaitTimeoutError) as caught:
        wait_until(
            lambda: "pending",
            lambda value: value == "done",
            timeout=12,
            sleep=5,
            what="the rollout",
            clock=clock.monotonic,
            pause=clock.sleep,
        )
    assert "the rollout" in caught.value.msg
    assert caught.value.result["last"] == "pending"
    assert clock.sleeps == [5, 5, 2]
    assert caught.value.result["elapsed"] == 12


def test_zero_timeout_polls_once():
    clock = FakeClock()
    with pytest.raises(WaitTimeoutError):
        wait_until(lambda: 0, bool, timeout=0, sleep=1, what="x", clock=clock.monotonic, pause=clock.sleep)
    assert clock.sleeps == []


def test_rejects_a_non_positive_sleep():
    with pytest.raises(ValueError):
        wait_until(lambda: 0, bool, timeout=1, sleep=0, what="x")
