"""Integration tests: real ansible-playbook runs against a real twin process over HTTPS."""

from __future__ import annotations

import base64
import json
import os
import pathlib
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from gpufleet_twin.process import TwinProcess, start_twin

ROOT = pathlib.Path(__file__).resolve().parents[2]
VENV_BIN = pathlib.Path(sys.executable).parent


@dataclass
class PlaybookRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


# Keys whose values are secrets wherever they sit in extra vars (kubernetes.core's api_key, a BMC's password...).
SECRET_KEYS = ("password", "api_key", "token", "secret")
# Secrets shorter than this are not scanned for: they would match ordinary words (no test uses one).
_MIN_SECRET = 6
# Files bigger than this (firmware images) are not scanned after a run.
_MAX_SCANNED_FILE = 8 * 1024 * 1024


def secrets_in(value: Any, *, key: str = "") -> Iterator[tuple[str, str]]:
    """(what, secret) pairs for every secret value in ``value``, and HTTP basic auth built from user and password."""
    if isinstance(value, dict):
        user = next((value[k] for k in ("username", "user", "bmc_username") if isinstance(value.get(k), str)), "")
        for name, item in value.items():
            yield from secrets_in(item, key=str(name))
            if isinstance(item, str) and "password" in str(name).lower() and user:
                basic = base64.b64encode(f"{user}:{item}".encode()).decode("ascii")
                yield f"basic auth of {user} ({name})", basic
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from secrets_in(item, key=key)
    elif isinstance(value, str) and len(value) >= _MIN_SECRET and any(word in key.lower() for word in SECRET_KEYS):
        yield key, value


def twin_secrets(twin: TwinProcess) -> list[tuple[str, str]]:
    """The twin's API token and every BMC password it published (with each one's basic auth)."""
    found = [("the twin's API token", twin.token)]
    published = twin.companion.get("published", {}).get("bmcs", {})
    for node, bmc in published.items():
        found += [(f"BMC {node} {what}", secret) for what, secret in secrets_in(bmc)]
    return found


def written_files(values: Any) -> Iterator[pathlib.Path]:
    """Files under the paths given in extra vars (reports, ledgers, result files) as they are after a run."""
    if isinstance(values, dict):
        values = list(values.values())
    if isinstance(values, list):
        for item in values:
            yield from written_files(item)
    elif isinstance(values, str) and values.startswith("/") and len(values) < 4096:
        path = pathlib.Path(values)
        candidates = path.rglob("*") if path.is_dir() else [path]
        for candidate in candidates:
            if candidate.is_file() and candidate.stat().st_size <= _MAX_SCANNED_FILE:
                yield candidate


def assert_no_secret(
    run: PlaybookRun, secrets: Iterable[tuple[str, str]], *, files: Iterable[pathlib.Path] = ()
) -> None:
    """No secret in the run's output or in the files it wrote; the failure names the secret's kind, never its value."""
    places = [("stdout", run.stdout.encode()), ("stderr", run.stderr.encode())]
    places += [(str(path), path.read_bytes()) for path in files]
    leaks = [
        f"{what} in {where}"
        for what, secret in secrets
        if len(secret) >= _MIN_SECRET
        for where, content in places
        if secret.encode() in content
    ]
    assert not leaks, "secrets printed or written: " + "; ".join(sorted(set(leaks)))


def run_playbook(
    playbook: str | pathlib.Path,
    *,
    twin: TwinProcess | None,
    extra_vars: dict[str, Any] | None = None,
    check: bool = False,
    diff: bool = False,
    verbosity: int = 0,
    timeout: float = 600,
    environment: dict[str, str] | None = None,
) -> PlaybookRun:
    """``ansible-playbook`` as a person runs it, pointed at the twin through K8S_AUTH_KUBECONFIG.

    ``environment`` adds variables (``K8S_AUTH_API_KEY``... as an AWX credential injects them).
    """
    env = twin.env() if twin is not None else dict(os.environ)
    env.update(environment or {})
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"),
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_NOCOLOR="1",
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    command = [str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", str(ROOT / playbook)]
    if extra_vars:
        command += ["-e", json.dumps(extra_vars)]
    if check:
        command.append("--check")
    if diff:
        command.append("--diff")
    if verbosity:
        command.append("-" + "v" * verbosity)
    # Every playbook run of the suite: neither the twin's token nor a password it was given shows anywhere.
    secrets = [*secrets_in(extra_vars or {}), *secrets_in(environment or {})]
    secrets += twin_secrets(twin) if twin is not None else []
    try:
        completed = subprocess.run(
            command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as timed_out:
        # What it printed up to then names the task it was stuck in (the output comes as bytes here).
        printed = [
            part.decode(errors="replace") if isinstance(part, bytes) else part or ""
            for part in (timed_out.stdout, timed_out.stderr)
        ]
        killed = PlaybookRun(-9, printed[0], printed[1])
        assert_no_secret(killed, secrets, files=written_files(extra_vars or {}))
        raise AssertionError(
            f"ansible-playbook {playbook} ran past {timeout} s and was killed; its output up to then:\n"
            f"{killed.output[-6000:]}"
        ) from None
    run = PlaybookRun(completed.returncode, completed.stdout, completed.stderr)
    assert_no_secret(run, secrets, files=written_files(extra_vars or {}))
    return run


def in_background(work: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``work`` (a playbook run, say) in a thread while the test acts on the twin; its result or error lands in
    the box (``value`` or ``error``) for the test thread to use or raise once it joins."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as err:  # the test thread reports it
            box["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def kubectl(twin: TwinProcess, *args: str, check: bool = True) -> str:
    completed = subprocess.run(
        ["kubectl", "--kubeconfig", str(twin.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if check and completed.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {completed.stderr}")
    return completed.stdout


@pytest.fixture
def fresh_twin(tmp_path):
    """A twin of its own for a test that changes the cluster."""
    twin = start_twin(nodes=6, profile="openshift", time_scale=600, workdir=tmp_path / "twin")
    yield twin
    assert twin.stop() == 0, twin.log_path.read_text()[-2000:]


@pytest.fixture(scope="module")
def shared_twin(tmp_path_factory):
    """A twin shared by the read-only tests of one file."""
    twin = start_twin(nodes=6, profile="openshift", time_scale=600, workdir=tmp_path_factory.mktemp("twin"))
    yield twin
    assert twin.stop() == 0, twin.log_path.read_text()[-2000:]


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    """The fault matrix's twins, one per component group, shared by the cases of one test_fault_matrix_*.py file."""
    from .fault_matrix_cases import group_pool  # imported here: it imports this module

    yield from group_pool(tmp_path_factory)
