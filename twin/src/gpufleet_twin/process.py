"""Start and drive a twin as a separate process (the client side of the CLI).

Integration tests, molecule scenarios, the demo and the benchmarks use the
same handle: it starts ``python -m gpufleet_twin serve``, waits for its ready
line, and talks to the admin endpoints over real HTTPS.
"""

from __future__ import annotations

import json
import os
import pathlib
import select
import signal
import ssl
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass, field
from typing import Any

# The project checkout (twin/src/gpufleet_twin/process.py -> repository root)
# and the upstream CRDs that sit beside it in ../shared when present.
ROOT = pathlib.Path(__file__).resolve().parents[3]
SHARED_CRDS = ROOT.parent / "shared" / "reference" / "crds"


@dataclass
class TwinProcess:
    kubeconfig: pathlib.Path
    companion: dict[str, Any]
    process: subprocess.Popen[str]
    log_path: pathlib.Path
    _ssl: ssl.SSLContext | None = field(default=None, repr=False)

    @property
    def api_url(self) -> str:
        return self.companion["api"]

    @property
    def token(self) -> str:
        return self.companion["token"]

    @property
    def admin_url(self) -> str:
        return self.companion.get("admin", self.api_url + "/admin")

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context(cafile=self.companion["ca_file"])
        return self._ssl

    def admin(self, method: str, path: str, body: Any = None) -> Any:
        """Call an admin endpoint (``/admin/...``) with the twin's token."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.admin_url}/{path.lstrip('/')}",
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, context=self._context(), timeout=30) as response:
            payload = response.read()
        return json.loads(payload) if payload else None

    def report(self) -> dict[str, Any]:
        return self.admin("GET", "report")

    def advance(self, seconds: float) -> None:
        self.admin("POST", "clock/advance", {"seconds": seconds})

    def set_time_scale(self, time_scale: float) -> None:
        self.admin("POST", "clock/scale", {"time_scale": time_scale})

    def env(self) -> dict[str, str]:
        """Environment for ansible-playbook / kubectl pointed at this twin."""
        env = dict(os.environ)
        env["K8S_AUTH_KUBECONFIG"] = str(self.kubeconfig)
        env["KUBECONFIG"] = str(self.kubeconfig)
        return env

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        return self.process.returncode


def start_twin(
    *,
    nodes: int = 6,
    profile: str = "openshift",
    time_scale: float = 600.0,
    workdir: pathlib.Path | None = None,
    scenario: pathlib.Path | None = None,
    real_crds: bool = True,
    distributed_training: bool = False,
    argocd: bool = False,
    argocd_poll: float | None = None,
    maintenance_operator: bool = False,
    extra_args: tuple[str, ...] = (),
    startup_timeout: float = 300.0,
) -> TwinProcess:
    """Start a twin and return once it serves (its ready line was printed).

    ``distributed_training`` also seeds the StatefulSet ``ml-training/dist-train`` and its PDB
    (``serve --distributed-training``).  ``argocd`` runs the Argo CD application controller
    (``serve --argocd``, ``operators/argocd.py``), polling repositories every ``argocd_poll`` simulated
    seconds (default 180).  ``maintenance_operator`` runs the NVIDIA Maintenance Operator
    (``serve --maintenance-operator``, ``operators/maintenance_operator.py``).
    """
    workdir = workdir or pathlib.Path(tempfile.mkdtemp(prefix="gpufleet-twin-"))
    workdir.mkdir(parents=True, exist_ok=True)
    kubeconfig = workdir / "kubeconfig"
    log_path = workdir / "twin.log"
    command = [
        sys.executable,
        "-m",
        "gpufleet_twin",
        "serve",
        "--nodes",
        str(nodes),
        "--profile",
        profile,
        "--time-scale",
        str(time_scale),
        "--kubeconfig",
        str(kubeconfig),
        "--state-dir",
        str(workdir),
        *extra_args,
    ]
    if scenario is not None:
        command += ["--scenario", str(scenario)]
    if distributed_training:
        command.append("--distributed-training")
    if argocd:
        command.append("--argocd")
    if argocd_poll is not None:
        command += ["--argocd-poll", str(argocd_poll)]
    if maintenance_operator:
        command.append("--maintenance-operator")
    if real_crds and SHARED_CRDS.is_dir():
        command += ["--crds", str(SHARED_CRDS)]
    log = open(log_path, "w")  # noqa: SIM115 - the child keeps writing to it after this returns
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT)
    assert process.stdout is not None
    # Bounded wait for the ready line; a twin that printed it is used however long it took (a loaded machine
    # can take more than a minute to start one), only one that never does is given up on.
    readable, _, _ = select.select([process.stdout], [], [], startup_timeout)
    line = process.stdout.readline() if readable else ""
    if not line or process.poll() is not None:
        process.kill()
        raise RuntimeError(f"twin did not start within {startup_timeout:g} s: {log_path.read_text()[-3000:]}")
    companion = json.loads((workdir / "kubeconfig.twin.json").read_text())
    return TwinProcess(kubeconfig=kubeconfig, companion=companion, process=process, log_path=log_path)
