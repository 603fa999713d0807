"""Every molecule scenario, each against a twin of its own (default driver, no containers)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from gpufleet_twin.process import start_twin

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCENARIOS = sorted(path.parent.name for path in (ROOT / "molecule").glob("*/molecule.yml"))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario, tmp_path):
    twin = start_twin(nodes=4, profile="openshift", time_scale=600, workdir=tmp_path / "twin")
    try:
        venv_bin = pathlib.Path(sys.executable).parent
        env = twin.env()
        env.update(
            PATH=f"{venv_bin}{os.pathsep}{env.get('PATH', '')}",
            ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
            ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"),
            # Molecule installs the project collection under ANSIBLE_HOME: keep
            # that copy out of the user's ~/.ansible, where it would go stale.
            ANSIBLE_HOME=str(tmp_path / "ansible-home"),
            ANSIBLE_PYTHON_INTERPRETER=sys.executable,
            GPUFLEET_MOLECULE_OUT=str(tmp_path / "out"),
            MOLECULE_NO_LOG="false",
            NO_COLOR="1",
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_FORCE_COLOR="0",
        )
        completed = subprocess.run(
            [str(venv_bin / "molecule"), "test", "-s", scenario],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert completed.returncode == 0, completed.stdout[-6000:] + completed.stderr[-3000:]
    finally:
        assert twin.stop() == 0
