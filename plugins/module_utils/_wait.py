# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The one bounded wait loop of the collection (collection-internal).

Every wait polls a predicate on a monotonic clock, sleeps between polls and
gives up at a deadline; the caller gets how long it took either way.

A wait also stops when the ansible-playbook that started the module is gone.
Killing ``ansible-playbook`` (SIGKILL of that one process, not its group)
leaves its task worker and the module below it running as orphans: the
module's parent is ``/bin/sh`` and its grandparent the worker, a fork of
ansible-playbook that outlives it, so neither a parent-death signal
(``PR_SET_PDEATHSIG`` fires for the direct parent only) nor the parent pid
tell.  ``ControllerProcess`` therefore remembers, when the module starts, the
topmost process of the ansible program above it (pid and start time, so a
reused pid is not mistaken for it) and checks it is still alive (not a
zombie) before each poll; ``KubeApi`` checks it before every request, so an
orphaned module sends nothing more.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Callable, Generic, List, Optional, TypeVar

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import RunCancelledError, WaitTimeoutError

T = TypeVar("T")


@dataclass
class WaitOutcome(Generic[T]):
    value: T
    elapsed: float
    polls: int


# Programs whose runs start modules (argv[0] or, for "python .../ansible-playbook", argv[1]).
ANSIBLE_PROGRAMS = frozenset({"ansible-playbook", "ansible", "ansible-console", "ansible-pull"})
_MAX_ANCESTORS = 64


@dataclass(frozen=True)
class ControllerProcess:
    """The ansible process that started this module: alive while its pid has the same start time and is no zombie."""

    pid: int
    start_ticks: str
    proc: str = "/proc"

    def alive(self) -> bool:
        stat = _read_stat(self.pid, proc=self.proc)
        return stat is not None and stat[0] not in ("Z", "X") and stat[2] == self.start_ticks

    def ensure_alive(self, *, what: str) -> None:
        if not self.alive():
            raise RunCancelledError(
                f"The ansible process {self.pid} that started this module is gone (killed or cancelled): "
                f"stopped {what} without any further change; a re-run resumes from the cluster's state"
            )

    @classmethod
    def find(cls, pid: int, *, proc: str = "/proc") -> Optional["ControllerProcess"]:
        """The topmost process of the nearest ansible program above ``pid`` (its task workers are forks of it).

        None when no ansible process is above (a module run by hand, or over a
        remote connection: this collection's modules run on the controller).
        """
        chain: List[tuple] = []  # (pid, argv, start ticks) from pid upwards
        current = pid
        for _depth in range(_MAX_ANCESTORS):
            stat = _read_stat(current, proc=proc)
            if stat is None:
                break
            chain.append((current, _read_argv(current, proc=proc), stat[2]))
            parent = stat[1]
            if parent <= 1:
                break
            current = parent
        for index, (candidate, argv, ticks) in enumerate(chain):
            if not _is_ansible(argv):
                continue
            top = (candidate, ticks)
            for upper, upper_argv, upper_ticks in chain[index + 1 :]:
                if upper_argv != argv:
                    break
                top = (upper, upper_ticks)
            return cls(pid=top[0], start_ticks=top[1], proc=proc)
        return None


def _is_ansible(argv: List[str]) -> bool:
    return any(os.path.basename(arg) in ANSIBLE_PROGRAMS for arg in argv[:2])


def _read_stat(pid: int, *, proc: str) -> Optional[tuple]:
    """(state, parent pid, start time in clock ticks) from /proc/<pid>/stat; None when there is no such process."""
    try:
        with open(os.path.join(proc, str(pid), "stat"), encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")".
    fields = text[text.rfind(")") + 2 :].split()
    if len(fields) < 20:
        return None
    try:
        return fields[0], int(fields[1]), fields[19]
    except ValueError:
        return None


def _read_argv(pid: int, *, proc: str) -> List[str]:
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as handle:
            raw = handle.read()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


# Found once, when the module starts (this file is imported then), while the controller is surely alive: after
# a kill the orphaned task worker would look like the top of the program.  Immutable: a fact of this process.
THIS_CONTROLLER = ControllerProcess.find(os.getpid())


def wait_until(
    observe: Callable[[], T],
    done: Callable[[T], bool],
    *,
    timeout: float,
    sleep: float,
    what: str,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
    controller: Optional[ControllerProcess] = THIS_CONTROLLER,
) -> WaitOutcome[T]:
    """Call ``observe`` until ``done(observation)``; raise WaitTimeoutError after ``timeout`` seconds.

    The last observation rides on the error (``result['last']``) so the caller
    can report how far things got.  ``RunCancelledError`` when ``controller``
    (the ansible process that started the module) is gone.
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
        if controller is not None:
            controller.ensure_alive(what=what)
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
