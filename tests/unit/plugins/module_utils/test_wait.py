import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import RunCancelledError, WaitTimeoutError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._wait import ControllerProcess, wait_until


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


# -- the controller that started the module ----------------------------------------------------------------------


def fake_process(proc, pid: int, ppid: int, argv: list, *, state: str = "S", start: int = 1000) -> None:
    folder = proc / str(pid)
    folder.mkdir(exist_ok=True)
    fields = [state, str(ppid)] + ["0"] * 17 + [str(start)] + ["0"] * 5
    (folder / "stat").write_text(f"{pid} (some (odd) name) " + " ".join(fields) + "\n")
    (folder / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")


def ansible_tree(proc) -> None:
    """pytest -> ansible-playbook (main) -> ansible-playbook (task worker) -> /bin/sh -> python AnsiballZ."""
    fake_process(proc, 10, 1, ["/usr/bin/python3", "-m", "pytest"])
    fake_process(proc, 20, 10, ["/venv/bin/python", "/venv/bin/ansible-playbook", "-i", "localhost,", "site.yml"])
    fake_process(proc, 21, 20, ["/venv/bin/python", "/venv/bin/ansible-playbook", "-i", "localhost,", "site.yml"])
    fake_process(proc, 30, 21, ["/bin/sh", "-c", "/venv/bin/python /root/.ansible/tmp/x/AnsiballZ_m.py && sleep 0"])
    fake_process(proc, 31, 30, ["/venv/bin/python", "/root/.ansible/tmp/x/AnsiballZ_m.py"])


def test_the_controller_is_the_top_of_the_ansible_program_not_its_task_worker(tmp_path):
    ansible_tree(tmp_path)
    controller = ControllerProcess.find(31, proc=str(tmp_path))
    assert controller is not None and controller.pid == 20 and controller.alive()


def test_no_controller_without_ansible_above():
    assert ControllerProcess.find(999999, proc="/nonexistent") is None


@pytest.mark.parametrize("how", ["gone", "zombie", "pid reused"])
def test_a_wait_stops_when_the_controller_is_gone(tmp_path, how):
    ansible_tree(tmp_path)
    controller = ControllerProcess.find(31, proc=str(tmp_path))
    clock = FakeClock()
    observed = []

    def observe():
        observed.append(clock.now)
        if len(observed) == 2:  # ansible-playbook is killed while the module waits
            if how == "gone":
                for name in ("stat", "cmdline"):
                    (tmp_path / "20" / name).unlink()
            elif how == "zombie":
                fake_process(tmp_path, 20, 10, [], state="Z")
            else:
                fake_process(tmp_path, 20, 10, ["/usr/bin/other"], start=5000)
        return False

    with pytest.raises(RunCancelledError, match="ansible process 20 that started this module is gone"):
        wait_until(
            observe,
            lambda value: value,
            timeout=600,
            sleep=10,
            what="nothing",
            clock=clock.monotonic,
            pause=clock.sleep,
            controller=controller,
        )
    assert len(observed) == 2, "no observation after the controller is gone"
