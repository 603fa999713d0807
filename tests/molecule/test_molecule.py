"""Every molecule scenario (one per role), each against a twin of its own (default driver, no containers).

The base configuration all scenarios share is .config/molecule/config.yml. Every scenario gets a scratch folder as
GPUFLEET_MOLECULE_OUT. The twin's BMCs reach the nic_firmware scenario as GPUFLEET_MOLECULE_FIRMWARE (JSON: each
node's BMC address and credentials, their CA, and a ConnectX-7 image in the twin's format). The gitops scenario finds
a bare repository in its folder, gpu-operator.git, holding the twin's ClusterPolicy as a team keeps it in Git.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess
import sys

import pytest
import yaml

from gpufleet_twin.process import TwinProcess, start_twin
from gpufleet_twin.redfish import build_firmware_image

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCENARIOS = sorted(path.parent.name for path in (ROOT / "molecule").glob("*/molecule.yml"))
NEW_CX7 = "28.42.1000"  # newer than the twin's BMCs hold
# What a scenario needs of its twin beyond the default (start_twin's options).
TWIN_OPTIONS = {"gitops": {"argocd": True}}


def run(*args: str, **kwargs) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=60, **kwargs).stdout


def seed_repository(twin: TwinProcess, out: pathlib.Path) -> None:
    """out/gpu-operator.git: the live ClusterPolicy (without the fields the server owns) in gpu-operator/."""
    live = json.loads(run("kubectl", "--kubeconfig", str(twin.kubeconfig), "get", "clusterpolicy", "-o", "json"))
    (policy,) = live["items"]
    manifest = {
        "apiVersion": policy["apiVersion"],
        "kind": policy["kind"],
        "metadata": {"name": policy["metadata"]["name"]},
        "spec": policy["spec"],
    }
    remote, seed = out / "gpu-operator.git", out / "seed"
    run("git", "init", "-q", "--bare", "-b", "main", str(remote))
    run("git", "clone", "-q", str(remote), str(seed))
    (seed / "gpu-operator").mkdir()
    header = "# The GPU Operator's ClusterPolicy. Argo CD applies this file; edit it here, never on the cluster.\n"
    (seed / "gpu-operator" / "clusterpolicy.yaml").write_text(
        header + "---\n" + yaml.safe_dump(manifest, sort_keys=False)
    )
    identity = ("-c", "user.name=seed", "-c", "user.email=seed@example.invalid")
    run("git", "checkout", "-q", "-b", "main", cwd=seed)
    run("git", "add", ".", cwd=seed)
    run("git", *identity, "commit", "-q", "-m", "The ClusterPolicy", cwd=seed)
    run("git", "push", "-q", "origin", "main", cwd=seed)


def firmware_settings(twin: TwinProcess, out: pathlib.Path) -> str:
    """The twin's BMCs as an operator lists them, their CA, and an image of NEW_CX7 (JSON)."""
    image = out / f"ConnectX-7-{NEW_CX7}.bin"
    content = build_firmware_image("ConnectX-7", NEW_CX7, size=64 * 1024)
    image.write_bytes(content)
    published = twin.companion["published"]
    return json.dumps(
        {
            "version": NEW_CX7,
            "image": {"image_path": str(image), "sha256": hashlib.sha256(content).hexdigest()},
            "bmcs": [{"node": node, **bmc} for node, bmc in sorted(published["bmcs"].items())],
            "ca_path": str(published["bmc_ca_file"]),
        }
    )


def test_every_role_has_a_scenario():
    roles = sorted(path.name for path in (ROOT / "roles").iterdir() if (path / "tasks").is_dir())
    assert roles == SCENARIOS, "every role has its molecule scenario, named after it"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario, tmp_path):
    twin = start_twin(
        nodes=4, profile="openshift", time_scale=600, workdir=tmp_path / "twin", **TWIN_OPTIONS.get(scenario, {})
    )
    try:
        venv_bin = pathlib.Path(sys.executable).parent
        out = tmp_path / "out"
        out.mkdir()
        env = twin.env()
        if scenario == "gitops":
            seed_repository(twin, out)
        if scenario == "nic_firmware":
            env["GPUFLEET_MOLECULE_FIRMWARE"] = firmware_settings(twin, out)
        env.update(
            PATH=f"{venv_bin}{os.pathsep}{env.get('PATH', '')}",
            ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
            ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"),
            # Anything molecule keeps under ANSIBLE_HOME stays out of the user's ~/.ansible.
            ANSIBLE_HOME=str(tmp_path / "ansible-home"),
            ANSIBLE_PYTHON_INTERPRETER=sys.executable,
            GPUFLEET_MOLECULE_OUT=str(out),
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
