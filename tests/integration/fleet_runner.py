"""Run a playbook over a fleet of twins the way AWX runs a job: ``ansible-runner run`` on a private data dir.

AWX (and Automation Platform) hands ansible-runner a private data directory holding the inventory
(``inventory/hosts``), the extra vars (``env/extravars``), the environment its credentials inject
(``env/envvars``: an "OpenShift or Kubernetes API Bearer Token" credential sets K8S_AUTH_HOST,
K8S_AUTH_API_KEY, K8S_AUTH_VERIFY_SSL and K8S_AUTH_SSL_CA_CERT) and the project checkout
(``project/``); the job's events, and the ``set_stats`` data AWX shows as the job's artifacts, end
up under ``artifacts/<ident>/``. The benchmark and the integration tests share this helper.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import yaml

from gpufleet_twin.process import TwinProcess

ROOT = pathlib.Path(__file__).resolve().parents[2]
VENV_BIN = pathlib.Path(sys.executable).parent


def credential_env(twin: TwinProcess) -> dict[str, str]:
    """What an AWX Kubernetes bearer-token credential injects for this twin's API server."""
    return {
        "K8S_AUTH_HOST": twin.api_url,
        "K8S_AUTH_API_KEY": twin.token,
        "K8S_AUTH_VERIFY_SSL": "True",
        "K8S_AUTH_SSL_CA_CERT": twin.companion["ca_file"],
    }


def host_connection(twin: TwinProcess, *, form: str) -> dict[str, Any]:
    """Inventory host vars reaching ``twin``: ``auth`` (gpufleet_k8s_auth) or ``vars`` (gpufleet_k8s_<option>)."""
    options = {"host": twin.api_url, "api_key": twin.token, "ca_cert": twin.companion["ca_file"]}
    if form == "auth":
        return {"gpufleet_k8s_auth": dict(options, validate_certs=True)}
    return {f"gpufleet_k8s_{name}": value for name, value in options.items()}


@dataclass
class RunnerJob:
    """One finished ansible-runner job: its status, exit code, output and events."""

    directory: pathlib.Path
    ident: str
    status: str
    rc: int
    stdout: str

    @property
    def artifacts(self) -> pathlib.Path:
        return self.directory / "artifacts" / self.ident

    def events(self) -> list[dict[str, Any]]:
        folder = self.artifacts / "job_events"
        return [json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))]

    def stats_artifacts(self) -> dict[str, Any]:
        """The job's set_stats data, as AWX stores it from the playbook_on_stats event (``artifact_data``)."""
        (stats,) = [event for event in self.events() if event.get("event") == "playbook_on_stats"]
        return stats["event_data"].get("artifact_data") or {}


def run_job(
    directory: pathlib.Path,
    *,
    playbook: str,
    hosts: dict[str, dict[str, Any]],
    extravars: dict[str, Any],
    envvars: dict[str, str],
    ident: str,
    forks: int = 5,
    timeout: float = 900,
) -> RunnerJob:
    """``ansible-runner run`` of ``playbook`` over an inventory group ``gpu_clusters`` of ``hosts``."""
    (directory / "inventory").mkdir(parents=True, exist_ok=True)
    (directory / "env").mkdir(exist_ok=True)
    inventory = {"gpu_clusters": {"hosts": hosts, "vars": {"ansible_connection": "local"}}}
    (directory / "inventory" / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (directory / "env" / "extravars").write_text(yaml.safe_dump(extravars))
    settings = {
        # The project's collection as an execution environment has it installed.
        "ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".build" / "collections"),
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "ANSIBLE_FORKS": str(forks),
        "ANSIBLE_NOCOLOR": "1",
    }
    (directory / "env" / "envvars").write_text(yaml.safe_dump(dict(settings, **envvars)))
    project = directory / "project"
    if not project.exists():
        project.symlink_to(ROOT, target_is_directory=True)
    # No connection leaks in from the test's own environment: only what the job's files say.
    env = {key: value for key, value in os.environ.items() if not key.startswith(("K8S_AUTH_", "KUBECONFIG"))}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    command = [str(VENV_BIN / "ansible-runner"), "run", str(directory), "-p", playbook, "--ident", ident]
    completed = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    artifacts = directory / "artifacts" / ident
    status = (artifacts / "status").read_text().strip() if (artifacts / "status").exists() else "missing"
    rc = int((artifacts / "rc").read_text()) if (artifacts / "rc").exists() else completed.returncode
    stdout = (artifacts / "stdout").read_text() if (artifacts / "stdout").exists() else completed.stdout
    return RunnerJob(directory=directory, ident=ident, status=status, rc=rc, stdout=stdout + completed.stderr)
