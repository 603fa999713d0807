"""Integration tests: real ansible-playbook runs against a real twin process over HTTPS."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
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


def run_playbook(
    playbook: str | pathlib.Path,
    *,
    twin: TwinProcess | None,
    extra_vars: dict[str, Any] | None = None,
    check: bool = False,
    diff: bool = False,
    verbosity: int = 0,
    timeout: float = 600,
) -> PlaybookRun:
    """``ansible-playbook`` as a person runs it, pointed at the twin through K8S_AUTH_KUBECONFIG."""
    env = twin.env() if twin is not None else dict(os.environ)
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
    completed = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout, check=False)
    return PlaybookRun(completed.returncode, completed.stdout, completed.stderr)


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
