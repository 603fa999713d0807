"""The README's commands run from a fresh clone.

In a copy of the files a clone has (``git ls-files``, so no ``.build``, ``.venv`` or ``collections``),
the collection is built and installed as the README says, and every ``ansible-playbook`` command of
the README passes ``--syntax-check`` there, which finds the playbook, its roles and every module
through the checkout's ansible.cfg.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from tests.unit.test_readme_commands import ROOT, readme_commands

VENV_BIN = pathlib.Path(sys.executable).parent


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory) -> pathlib.Path:
    """The files a clone has (tracked files as they are now), and nothing built."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True, timeout=60)
    clone = tmp_path_factory.mktemp("clone")
    for name in listed.stdout.decode().split("\0"):
        source = ROOT / name
        if name and source.is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)
    return clone


def run_in(clone: pathlib.Path, command: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("ANSIBLE_", "K8S_AUTH_"))}
    env.update(PATH=f"{VENV_BIN}{os.pathsep}{env['PATH']}", HOME=str(clone / ".home"), ANSIBLE_NOCOLOR="1")
    return subprocess.run(
        ["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_commands_run_from_a_fresh_clone(fresh_clone):
    commands = readme_commands()
    installs = [c for c in commands if c.startswith("ansible-galaxy collection")]
    assert [c.split()[2] for c in installs] == ["build", "install"], installs
    for command in installs:
        done = run_in(fresh_clone, command)
        assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"
    assert (fresh_clone / "collections" / "ansible_collections" / "gpufleet" / "upgrade" / "MANIFEST.json").is_file()
    playbooks = [c for c in commands if "ansible-playbook " in c]
    assert len(playbooks) >= 4
    for command in playbooks:
        done = run_in(fresh_clone, command.replace("ansible-playbook ", "ansible-playbook --syntax-check ", 1))
        assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"
    done = run_in(fresh_clone, f"{sys.executable} -m gpufleet_twin serve --help")
    assert done.returncode == 0 and "--kubeconfig" in done.stdout, done.stderr
