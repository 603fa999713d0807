"""Fixtures of the API server tests: one real twin process per session, driven over HTTPS.

The twin is started exactly as users start it (``python -m gpufleet_twin serve``)
on a random port with a temporary kubeconfig, in ``--bare`` mode so that no
simulated controller touches the objects the tests create; with the upstream
CRDs of ``../shared/reference/crds`` when that folder exists.  kubectl runs
with that kubeconfig and a private discovery cache; the ``kubernetes`` client
loads the same kubeconfig.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import signal
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
SHARED_CRDS = ROOT.parent / "shared" / "reference" / "crds"
STARTUP_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0


@dataclass
class HttpResult:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class ServedTwin:
    """A twin process and the ways to talk to it."""

    process: subprocess.Popen[str]
    kubeconfig: Path
    companion: dict[str, Any]
    workdir: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def api_url(self) -> str:
        return self.companion["api"]

    @property
    def token(self) -> str:
        return self.companion["token"]

    @property
    def port(self) -> int:
        return int(self.api_url.rsplit(":", 1)[1])

    def kubectl(
        self, *args: str, check: bool = True, timeout: float = 60, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        headers: dict[str, str] | None = None,
        token: str | None = "",
        timeout: float = 30,
    ) -> HttpResult:
        """A raw HTTPS request; ``token=""`` uses the twin's token, None sends none."""
        context = ssl.create_default_context(cafile=self.companion["ca_file"])
        connection = http.client.HTTPSConnection("127.0.0.1", self.port, context=context, timeout=timeout)
        sent_headers = {"Accept": "application/json", **(headers or {})}
        if token is not None:
            sent_headers["Authorization"] = f"Bearer {token or self.token}"
        payload = None
        if body is not None:
            payload = body if isinstance(body, bytes) else json.dumps(body).encode()
            sent_headers.setdefault("Content-Type", "application/json")
        try:
            connection.request(method, path, body=payload, headers=sent_headers)
            response = connection.getresponse()
            return HttpResult(response.status, response.headers, response.read())
        finally:
            connection.close()


def start_twin_process(workdir: Path, *extra: str) -> tuple[ServedTwin, queue.Queue[str]]:
    """Start ``python -m gpufleet_twin serve`` and wait (bounded) for its ready line."""
    workdir.mkdir(parents=True, exist_ok=True)
    kubeconfig = workdir / "kubeconfig"
    log = open(workdir / "twin.log", "w")  # noqa: SIM115 - the child writes to it until it stops
    process = subprocess.Popen(
        [sys.executable, "-m", "gpufleet_twin", "serve", "--kubeconfig", str(kubeconfig), "--port", "0", *extra],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        cwd=ROOT,
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    try:
        ready = lines.get(timeout=STARTUP_TIMEOUT)
    except queue.Empty:
        process.kill()
        raise RuntimeError(f"the twin did not start:\n{(workdir / 'twin.log').read_text()[-3000:]}") from None
    assert ready.startswith("gpufleet-twin ready "), ready
    companion = json.loads((workdir / "kubeconfig.twin.json").read_text())
    env = dict(os.environ)
    env["KUBECACHEDIR"] = str(workdir / "kube-cache")  # never the user's ~/.kube/cache
    env.pop("KUBECONFIG", None)
    return ServedTwin(process=process, kubeconfig=kubeconfig, companion=companion, workdir=workdir, env=env), lines


def stop_twin_process(twin: ServedTwin, signum: int = signal.SIGTERM) -> int:
    twin.process.send_signal(signum)
    try:
        return twin.process.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        twin.process.kill()
        twin.process.wait(timeout=10)
        raise


@pytest.fixture(scope="session")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedTwin]:
    workdir = tmp_path_factory.mktemp("api-twin")
    extra = ["--bare", "--nodes", "0", "--state-dir", str(workdir / "state")]
    if SHARED_CRDS.is_dir():
        extra += ["--crds", str(SHARED_CRDS)]
    served, _ = start_twin_process(workdir, *extra)
    yield served
    assert stop_twin_process(served) == 0, (workdir / "twin.log").read_text()[-3000:]


@pytest.fixture(scope="session")
def sim_twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedTwin]:
    """A simulated plain-Kubernetes cluster (kubelet, controllers, garbage collector) on the real clock.

    One GPU worker, no seeded workloads: the tests create what they delete.  ``--time-scale 1`` keeps
    the kubelet's graceful terminations (2 simulated seconds) long enough for an early return to show.
    """
    workdir = tmp_path_factory.mktemp("sim-twin")
    scenario = workdir / "scenario.yaml"
    scenario.write_text("description: API tests on a plain Kubernetes cluster\nworkloads: false\n")
    extra = ["--profile", "kubernetes", "--nodes", "1", "--time-scale", "1", "--scenario", str(scenario)]
    served, _ = start_twin_process(workdir, *extra, "--state-dir", str(workdir / "state"))
    yield served
    assert stop_twin_process(served) == 0, (workdir / "twin.log").read_text()[-3000:]


@pytest.fixture(scope="session")
def api_client(twin: ServedTwin) -> Iterator[Any]:
    from kubernetes import config

    client = config.new_client_from_config(config_file=str(twin.kubeconfig))
    yield client
    client.close()


@pytest.fixture(scope="session")
def core(api_client: Any) -> Any:
    from kubernetes import client

    return client.CoreV1Api(api_client)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def namespace(twin: ServedTwin) -> Iterator[str]:
    """A fresh namespace per test (tests share one twin)."""
    name = unique("t")
    created = twin.request("POST", "/api/v1/namespaces", body={"metadata": {"name": name}})
    assert created.status == 201, created.body
    yield name
    twin.request("DELETE", f"/api/v1/namespaces/{name}")


def make_node(twin: ServedTwin, name: str, *, labels: dict[str, str] | None = None, ready: bool = True) -> dict:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady"}],
            "nodeInfo": {"kubeletVersion": "v1.32.4", "osImage": "Red Hat Enterprise Linux CoreOS"},
            "addresses": [{"type": "InternalIP", "address": "10.0.0.10"}],
        },
    }
    result = twin.request("POST", "/api/v1/nodes", body=node)
    assert result.status == 201, result.body
    return result.json()


def make_running_pod(
    twin: ServedTwin, namespace: str, name: str, *, node: str, labels: dict[str, str] | None = None
) -> dict:
    """A pod bound to ``node`` and reported Running and Ready (what the kubelet would report)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "registry.local/app:1.0"}]},
    }
    created = twin.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=pod)
    assert created.status == 201, created.body
    status = {
        "status": {
            "phase": "Running",
            "podIP": "10.128.0.5",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {
                    "name": "main",
                    "ready": True,
                    "restartCount": 0,
                    "image": "registry.local/app:1.0",
                    "imageID": "",
                    "started": True,
                    "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                }
            ],
        }
    }
    patched = twin.request(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/pods/{name}/status",
        body=status,
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert patched.status == 200, patched.body
    return patched.json()


class PlayKubelet:
    """TEST-ONLY stand-in for the kubelet simulation (the twin runs ``--bare`` here).

    A real kubelet stops the containers of a pod marked for graceful deletion
    and then deletes it for good; this thread does only that last step, for
    pods on one node, so that ``kubectl drain`` can see evicted pods go.
    """

    def __init__(self, twin: ServedTwin, node: str) -> None:
        self.twin = twin
        self.node = node
        self.finalized: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PlayKubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            listed = self.twin.request("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{self.node}")
            if listed.status != 200:
                continue
            for pod in listed.json()["items"]:
                meta = pod["metadata"]
                if meta.get("deletionTimestamp"):
                    self.twin.request(
                        "DELETE",
                        f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                        body={"gracePeriodSeconds": 0},
                    )
                    self.finalized.append(meta["name"])


def wait_for(predicate: Any, *, timeout: float = 10.0, interval: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns something truthy (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(interval)


@dataclass(frozen=True)
class Kit:
    """The helpers above bound to the session's twin (tests import nothing from conftest)."""

    twin: ServedTwin

    @staticmethod
    def unique(prefix: str) -> str:
        return unique(prefix)

    def node(self, name: str, **options: Any) -> dict:
        return make_node(self.twin, name, **options)

    def running_pod(self, namespace: str, name: str, **options: Any) -> dict:
        return make_running_pod(self.twin, namespace, name, **options)

    def play_kubelet(self, node: str) -> PlayKubelet:
        return PlayKubelet(self.twin, node)

    @staticmethod
    def wait_for(predicate: Any, *, timeout: float = 10.0, interval: float = 0.1) -> Any:
        return wait_for(predicate, timeout=timeout, interval=interval)

    def ansible_playbook(
        self, playbook: Path, extra_vars: dict[str, Any], tmp_path: Path
    ) -> subprocess.CompletedProcess[str]:
        """Run a real ``ansible-playbook`` (kubernetes.core reads the twin's kubeconfig)."""
        venv_bin = Path(sys.executable).parent
        env = dict(self.twin.env)
        env.update(
            K8S_AUTH_KUBECONFIG=str(self.twin.kubeconfig),
            ANSIBLE_HOME=str(tmp_path / "ansible-home"),
            ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
            ANSIBLE_PYTHON_INTERPRETER=sys.executable,
            ANSIBLE_NOCOLOR="1",
            PATH=f"{venv_bin}{os.pathsep}{env.get('PATH', '')}",
        )
        return subprocess.run(
            [str(venv_bin / "ansible-playbook"), "-i", "localhost,", str(playbook), "-e", json.dumps(extra_vars)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )


@pytest.fixture
def kit(twin: ServedTwin) -> Kit:
    return Kit(twin)


@dataclass(frozen=True)
class Launcher:
    """Start and stop twin processes of a test's own (beside the session twin)."""

    @staticmethod
    def start(workdir: Path, *extra: str) -> ServedTwin:
        served, _ = start_twin_process(workdir, *extra)
        return served

    @staticmethod
    def stop(served: ServedTwin, signum: int = signal.SIGTERM) -> int:
        return stop_twin_process(served, signum)


@pytest.fixture
def launcher() -> Launcher:
    return Launcher()
