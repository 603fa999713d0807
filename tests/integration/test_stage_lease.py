"""One driver at a time, and a killed run stops: real ansible-playbook runs against the twin.

- Killing ``ansible-playbook`` alone (SIGKILL of that one process, not its
  group) stops the module it was running within a bounded time, and nothing
  more reaches the cluster (the twin's recorder).
- A stage of ``playbooks/upgrade.yml`` holds the Lease ``gpufleet-upgrade``
  (coordination.k8s.io/v1) in the ledger's namespace: a second run is refused
  before any write, naming the holder and the Lease's age; a killed run's
  Lease expires after its duration on the twin's clock, then a re-run
  resumes; the Lease is released at the end of a stage (a failed one: test_upgrade_flow's failed canary).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gpufleet_twin.process import TwinProcess, start_twin

from .conftest import ROOT, VENV_BIN, kubectl, run_playbook
from .test_upgrade_flow import (
    CANARY,
    EXAMPLE,
    NAMESPACE,
    NEW_DRIVER,
    drivers,
    flow,
    lease,
    patch_lease,
    writes,
)

pytestmark = pytest.mark.slow

MODULE_PLAYBOOK = "tests/integration/playbooks/gpu_clusterpolicy_upgrade.yml"
DAY = 86400


@pytest.fixture
def twin_at(tmp_path: pathlib.Path) -> Iterator[Callable[[float], TwinProcess]]:
    """A twin of the test's own at the given time scale (a slower clock keeps a rollout running for a while)."""
    started: list[TwinProcess] = []

    def start(time_scale: float) -> TwinProcess:
        twin = start_twin(nodes=6, profile="openshift", time_scale=time_scale, workdir=tmp_path / f"twin{len(started)}")
        started.append(twin)
        return twin

    yield start
    for twin in started:
        assert twin.stop() == 0, twin.log_path.read_text()[-2000:]


@pytest.fixture
def workspace(tmp_path: pathlib.Path) -> pathlib.Path:
    shutil.copy(EXAMPLE, tmp_path / "matrix.yaml")
    return tmp_path


# -- processes ------------------------------------------------------------------------------------------------
def _stat(pid: int) -> tuple[str, int] | None:
    try:
        text = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return fields[0], int(fields[1])


def alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def module_processes(root: int, module: str = "clusterpolicy_upgrade") -> list[int]:
    """Live processes below ``root`` that run that module (AnsiballZ)."""
    parents: dict[int, int] = {}
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            parents[int(entry.name)] = stat[1]

    def below(pid: int) -> bool:
        for _poll in range(64):
            pid = parents.get(pid, 0)
            if pid == root:
                return True
            if pid <= 1:
                return False
        return False

    found = []
    wanted = f"AnsiballZ_{module}".encode()
    for pid in parents:
        with contextlib.suppress(OSError):
            if below(pid) and wanted in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes() and alive(pid):
                found.append(pid)
    return found


def wait_for(condition: Callable[[], Any], *, timeout: float, what: str) -> Any:
    # Real-time bound on a process event (a process starting or ending), not on simulated progress.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def start_playbook(
    twin: TwinProcess, playbook: str, extra_vars: dict[str, Any], output: pathlib.Path | None = None
) -> subprocess.Popen:
    """ansible-playbook in the background; its output goes to ``output`` when given."""
    env = twin.env()
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"),
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    command = [str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", str(ROOT / playbook)]
    command += ["-e", json.dumps(extra_vars)]
    # Its own session, so the test can clean up whatever is left whatever happens.
    sink = output.open("wb") if output is not None else subprocess.DEVNULL
    try:
        return subprocess.Popen(
            command, env=env, cwd=ROOT, start_new_session=True, stdout=sink, stderr=subprocess.STDOUT
        )
    finally:
        if output is not None:
            sink.close()


@contextlib.contextmanager
def killed_controller(process: subprocess.Popen) -> Iterator[Callable[[], list[int]]]:
    """Yields ``kill()``: SIGKILL the ansible-playbook process only (not its group); returns its modules' pids."""

    def kill() -> list[int]:
        modules = module_processes(process.pid)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        return modules

    try:
        yield kill
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # the orphans too, should any be left


def assert_stops_and_stays_quiet(twin: TwinProcess, modules: list[int]) -> None:
    assert modules, "the module was not running when ansible-playbook was killed"
    # The module polls every second: it notices within a poll or two (generous for a loaded machine).
    wait_for(lambda: not any(alive(pid) for pid in modules), timeout=30, what="the orphaned module to stop")
    twin.admin("POST", "report/reset")
    time.sleep(3)  # the module polled every second: an orphan would have sent requests by now
    report = twin.report()["requests"]
    assert report["total"] == 0, f"requests after the module stopped: {report['by_verb_resource']}"


def states(twin: TwinProcess) -> dict[str, str]:
    nodes = json.loads(kubectl(twin, "get", "nodes", "-l", "nvidia.com/gpu.present=true", "-o", "json"))["items"]
    return {
        n["metadata"]["name"]: n["metadata"]["labels"].get("nvidia.com/gpu-driver-upgrade-state", "") for n in nodes
    }


# -- tests ----------------------------------------------------------------------------------------------------
def test_killing_ansible_playbook_stops_its_module(twin_at, tmp_path):
    twin = twin_at(40)  # six nodes one at a time: minutes of real time, longer than the stop may take
    args = {"driver": {"version": NEW_DRIVER}, "upgrade_policy": {"maxUnavailable": 1}, "wait_sleep": 1,
            "wait_timeout": 600}  # fmt: skip
    process = start_playbook(
        twin, MODULE_PLAYBOOK, {"gpu_module_args": args, "gpu_result_file": str(tmp_path / "r.json")}
    )
    with killed_controller(process) as kill:
        wait_for(
            lambda: any(s not in ("upgrade-done", "upgrade-required", "") for s in states(twin).values()),
            timeout=120,
            what="the rollout to start",
        )
        modules = kill()
        assert_stops_and_stays_quiet(twin, modules)
        # Stopped while the rollout was still under way (an orphan would have gone on watching it).
        assert any(s != "upgrade-done" for s in states(twin).values())


def test_a_killed_stage_keeps_its_lease_a_rerun_is_refused_then_resumes_after_expiry(twin_at, workspace):
    twin = twin_at(60)
    variables = {
        "stage": "canary",
        "upgrade_matrix_file": str(workspace / "matrix.yaml"),
        "upgrade_report_dir": str(workspace / "reports"),
        "upgrade_wait_timeout": 3600,
        "upgrade_lease_duration": DAY,
        "validate_wait_sleep": 0.5,
        "gpu_operator_wait_sleep": 1,
    }
    process = start_playbook(twin, "playbooks/upgrade.yml", variables)
    with killed_controller(process) as kill:
        wait_for(
            lambda: lease(twin).get("holderIdentity") and module_processes(process.pid),
            timeout=180,
            what="the canary to hold the Lease and run clusterpolicy_upgrade",
        )
        held = lease(twin)
        modules = kill()
        assert_stops_and_stays_quiet(twin, modules)
    assert held["leaseDurationSeconds"] == DAY
    holder = held["holderIdentity"]
    assert "@" in holder and ", run " in holder

    # A re-run while the killed run's Lease is valid: refused before any write, naming the holder and its age.
    twin.admin("POST", "report/reset")
    refused = flow(twin, workspace, "canary", upgrade_lease_duration=DAY)
    assert refused.returncode != 0
    assert f"Another run holds the Lease: {holder}, for " in refused.output, refused.output[-3000:]
    assert "Stage canary: refused" in refused.output
    assert writes(twin) == {}, "a refused run writes nothing"
    assert lease(twin)["holderIdentity"] == holder

    # After the Lease's duration on the twin's clock, a re-run takes it over and finishes the canary.
    twin.admin("POST", "clock/advance", {"seconds": DAY + 60})
    resumed = flow(twin, workspace, "canary", upgrade_lease_duration=DAY)
    assert resumed.returncode == 0, resumed.output[-4000:]
    assert "Stage canary: success" in resumed.output
    assert drivers(twin)[CANARY] == NEW_DRIVER
    after = lease(twin)
    assert after["holderIdentity"] == "", "released at the end of the stage"
    assert after["leaseTransitions"] >= 1


def test_a_concurrent_second_run_is_refused_naming_the_holder(twin_at, workspace):
    twin = twin_at(15)  # slow enough that the first run is still at work when the second has planned
    variables = {
        "stage": "canary",
        "upgrade_matrix_file": str(workspace / "matrix.yaml"),
        "upgrade_report_dir": str(workspace / "reports"),
        "upgrade_wait_timeout": 3600,
        "gpu_operator_wait_sleep": 1,
    }
    first = start_playbook(twin, "playbooks/upgrade.yml", variables)
    with killed_controller(first):
        wait_for(lambda: lease(twin).get("holderIdentity"), timeout=180, what="the first run to hold the Lease")
        holder = lease(twin)["holderIdentity"]
        second = flow(twin, workspace, "canary")
        assert second.returncode != 0, second.output[-3000:]
        assert f"Another run holds the Lease: {holder}, for " in second.output, second.output[-3000:]
        assert "renewed" in second.output and "expires in" in second.output
        assert first.poll() is None, "the first run goes on"
        # The rollout module renews the Lease while it waits (every third of its 300 s on the twin's clock).
        wait_for(lambda: module_processes(first.pid), timeout=120, what="the first run's rollout module")
        renewed = lease(twin)["renewTime"]
        wait_for(
            lambda: lease(twin)["renewTime"] != renewed and module_processes(first.pid),
            timeout=120,
            what="the rollout module to renew the Lease",
        )
        assert first.wait(timeout=600) == 0
    assert lease(twin)["holderIdentity"] == ""
    ledger = json.loads((workspace / "reports" / "upgrade-ledger.json").read_text())["entries"]
    assert sorted(e["outcome"] for e in ledger) == ["refused", "success"]


# -- 409 Conflict on the Lease's own write -------------------------------------------------------------------
LEASE_PLAYBOOK = "tests/integration/playbooks/stage_lease.yml"
ALICE = "alice@controller, run 1"


def take_lease(twin: TwinProcess, **extra: Any) -> Any:
    return run_playbook(LEASE_PLAYBOOK, twin=twin, extra_vars={"lease_holder": ALICE, **extra})


def test_a_409_on_the_lease_write_is_read_again_and_retried_while_the_lease_is_ours_or_free(fresh_twin):
    twin = fresh_twin
    assert take_lease(twin).returncode == 0
    first = lease(twin)
    twin.advance(30)
    # Every PUT of the Lease answers 409 twice (as when another writer raced this run): renewing goes on.
    twin.admin("POST", "faults", {"type": "conflict", "verb": "update", "resource": "leases.coordination.k8s.io",
                                  "count": 2})  # fmt: skip
    renewed = take_lease(twin)
    assert renewed.returncode == 0, renewed.output[-3000:]
    assert '"action": "renew"' in renewed.output
    after = lease(twin)
    assert after["holderIdentity"] == ALICE and after["renewTime"] > first["renewTime"]
    assert after["acquireTime"] == first["acquireTime"], "a renewal keeps the acquire time"
    assert [f["hits"] for f in twin.admin("GET", "faults")["faults"]] == [2], "both conflicts were met"

    # Released, then taken again through another 409: the free Lease is read again and taken.
    assert take_lease(twin, lease_state="absent").returncode == 0
    twin.admin("POST", "faults", {"type": "conflict", "verb": "update", "resource": "leases.coordination.k8s.io",
                                  "count": 1})  # fmt: skip
    retaken = take_lease(twin, lease_holder="carol@controller, run 3")
    assert retaken.returncode == 0, retaken.output[-3000:]
    assert lease(twin)["holderIdentity"] == "carol@controller, run 3"


def test_a_409_because_another_run_took_the_lease_meanwhile_is_refused_naming_it(fresh_twin, tmp_path):
    twin = fresh_twin
    assert take_lease(twin).returncode == 0
    # The renewal's PUT is held at the server (slow) while bob takes the Lease: the PUT then carries a stale
    # resourceVersion and the API server answers 409 Conflict, as in a real race.
    twin.admin("POST", "faults", {"type": "slow", "delay": 20, "verb": "update",
                                  "resource": "leases.coordination.k8s.io", "count": 1})  # fmt: skip
    log = tmp_path / "race.log"
    process = start_playbook(twin, LEASE_PLAYBOOK, {"lease_holder": ALICE}, output=log)
    with killed_controller(process):
        wait_for(
            lambda: [f for f in twin.admin("GET", "faults")["faults"] if f["hits"] >= 1],
            timeout=120,
            what="the renewal's PUT to reach the server",
        )
        now = twin.admin("GET", "clock")["now"]
        # A day long: the held PUT waits 20 real seconds, hours of the twin's clock.
        bob = {"holderIdentity": "bob@elsewhere, run 2", "leaseDurationSeconds": DAY, "acquireTime": now,
               "renewTime": now}  # fmt: skip
        patch_lease(twin, bob)
        assert process.wait(timeout=120) != 0, "the run that lost the race is refused"
    raced = log.read_text()
    assert "409 Conflict): Another run holds the Lease: bob@elsewhere, run 2, for " in raced, raced[-3000:]
    twin.admin("POST", "report/reset")
    # The same refusal, now read before any write; and bob's Lease is left as bob wrote it.
    refused = take_lease(twin)
    assert refused.returncode != 0
    assert "Another run holds the Lease: bob@elsewhere, run 2, for " in refused.output, refused.output[-3000:]
    assert writes(twin) == {}
    assert lease(twin)["holderIdentity"] == "bob@elsewhere, run 2"


def test_a_role_wait_longer_than_the_lease_is_not_taken_over_by_a_second_run(twin_at, workspace):
    """A stage whose role waits with kubernetes.core (an until loop, nothing of the collection's renewing) for many
    times the Lease's duration on the twin's clock: the Lease's keeper renews it, so a second run is refused naming
    the holder; the keeper stops when the stage releases the Lease."""
    twin = twin_at(600)
    # One second of real time: lapsed many times over by the time the second run asks, were it not renewed. The
    # keeper renews it every third of that on the twin's clock (a third of a second of ours), so it lapses only if
    # the keeper is kept from running for two thirds of a second. The 60 s Lease this test had (a tenth of a second
    # of ours) lapsed between renewals while the keeper slept a whole second whatever the clock's rate (the second
    # run then took it over and exited 0); now the keeper would renew it every 33 ms, and a loaded machine that
    # stalls the keeper for 70 ms would let it lapse.
    duration = 600
    variables = {
        "stage": "canary",
        "upgrade_matrix_file": str(workspace / "matrix.yaml"),
        "upgrade_report_dir": str(workspace / "reports"),
        "upgrade_lease_duration": duration,
        "upgrade_component_roles": {"gpu_operator": str(ROOT / "tests/integration/roles/slow.gpu_operator")},
    }
    first = start_playbook(twin, "playbooks/upgrade.yml", variables, output=workspace / "first.log")
    with killed_controller(first):
        # The canary label comes right before the role's wait.
        wait_for(
            lambda: lease(twin).get("holderIdentity") and node_label(twin, CANARY, "gpu-canary") == "true",
            timeout=180,
            what="the first run to hold the Lease and start its role's wait",
        )
        holder = lease(twin)["holderIdentity"]
        started = twin.admin("GET", "clock")["now"]
        wait_for(
            lambda: seconds_between(started, twin.admin("GET", "clock")["now"]) > 10 * duration,
            timeout=300,  # 10 s of real time on an idle machine; the twin's clock slows down on a loaded one
            what="ten Lease durations on the twin's clock",
        )
        assert first.poll() is None, (workspace / "first.log").read_text()[-3000:]
        held = lease(twin)
        assert held["holderIdentity"] == holder
        assert seconds_between(started, held["renewTime"]) > 0, "renewed during the role's wait"

        twin.admin("POST", "report/reset")
        second = flow(twin, workspace, "canary", upgrade_lease_duration=duration)
        assert second.returncode != 0, second.output[-3000:]
        assert f"Another run holds the Lease: {holder}, for " in second.output, second.output[-3000:]
        # The refused run writes nothing; the first run's keeper renews its Lease meanwhile.
        assert set(writes(twin)) <= {"update leases.coordination.k8s.io"}, writes(twin)
        assert lease(twin)["holderIdentity"] == holder

        kubectl(twin, "create", "configmap", "slow-wait-go", "-n", NAMESPACE)
        assert first.wait(timeout=300) != 0  # the stand-in role stops the stage after its wait
    log = (workspace / "first.log").read_text()
    assert "The slow test role stops here" in log, log[-3000:]
    released = lease(twin)
    assert released["holderIdentity"] == "", "released at the end of the stage"
    # The keeper stopped with the stage: the released Lease stays as the stage left it.
    twin.advance(10 * duration)
    time.sleep(3)
    assert lease(twin) == released


def node_label(twin: TwinProcess, node: str, key: str) -> str:
    found = json.loads(kubectl(twin, "get", "node", node, "-o", "json"))
    return str(found["metadata"].get("labels", {}).get(key, ""))


def seconds_between(earlier: str, later: str) -> float:
    def parse(text: str) -> datetime.datetime:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))

    return (parse(later) - parse(earlier)).total_seconds()
