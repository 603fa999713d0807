"""Real Prometheus and Pushgateway servers for the tests (Debian's ``prometheus`` and ``prometheus-pushgateway``).

``scripts/test_services`` installs the packages when they are missing (``scripts/test`` runs it); a test
whose server is not installed is skipped, naming the package. Each server runs on loopback on a free port
with a data folder of the test's own, and is stopped by the fixture that started it. Prometheus scrapes
the twin's dcgm-exporter endpoints (``/admin/dcgm-exporter/<node>/metrics``, one target per GPU node, with
the twin's token and CA) every second and evaluates its rules every second, so a test waits seconds, not
minutes, for a fault to show.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet_twin.operators.dcgm_exporter import scrape_targets
from gpufleet_twin.process import TwinProcess

STARTUP_TIMEOUT = 60.0


def require(binary: str, package: str) -> str:
    """The server's path, or the test is skipped naming the Debian package to install."""
    found = shutil.which(binary) or (f"/usr/bin/{binary}" if Path(f"/usr/bin/{binary}").exists() else None)
    if found is None:
        pytest.skip(f"{binary} is not installed: scripts/test_services installs Debian's {package} (needs root)")
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def http_json(url: str, *, method: str = "GET", timeout: float = 10) -> Any:
    with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=timeout) as response:
        return json.loads(response.read() or b"null")


def wait_until(condition: Callable[[], Any], *, timeout: float, what: str) -> Any:
    """Real-time wait for a server (started, scraped, evaluated): the servers run on the wall clock."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = condition()
        except (OSError, ValueError) as err:
            last = err
        else:
            if last:
                return last
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]


@dataclass
class Prometheus(Server):
    def query(self, promql: str) -> list[dict[str, Any]]:
        answer = http_json(f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        return list(answer["data"]["result"])

    def firing(self) -> list[str]:
        answer = http_json(f"{self.url}/api/v1/alerts")
        return sorted({a["labels"]["alertname"] for a in answer["data"]["alerts"] if a.get("state") == "firing"})

    def wait_for(self, condition: Callable[[], Any], *, what: str, timeout: float = 60.0) -> Any:
        return wait_until(condition, timeout=timeout, what=what)


@dataclass
class Pushgateway(Server):
    def metrics(self) -> list[dict[str, Any]]:
        """Every pushed group (``/api/v1/metrics``): its labels and metric families."""
        return list(http_json(f"{self.url}/api/v1/metrics")["data"])


def _start(command: list[str], *, url: str, log_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    log = log_path.open("wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    log.close()

    def ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"{command[0]} exited {process.returncode}: {log_path.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
                return response.status == 200
        except urllib.error.HTTPError:
            return False

    try:
        wait_until(ready, timeout=STARTUP_TIMEOUT, what=f"{command[0]} to be ready")
    except AssertionError:
        process.kill()
        process.wait(timeout=10)
        raise
    return process, log_path


def prometheus_config(twin: TwinProcess, *, workdir: Path, rule_files: list[str]) -> dict[str, Any]:
    """Scrape every GPU node's dcgm-exporter on the twin each second; evaluate the rules each second."""
    api = urllib.parse.urlsplit(twin.api_url)
    token_file = workdir / "twin-token"
    token_file.write_text(twin.token)
    token_file.chmod(0o600)
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": rule_files,
        "scrape_configs": [
            {
                "job_name": "dcgm-exporter",
                "scheme": api.scheme,
                "authorization": {"credentials_file": str(token_file)},
                "tls_config": {"ca_file": twin.companion["ca_file"]},
                "static_configs": [
                    # One target per node, as one exporter pod per node; instance names the node.
                    {"targets": [api.netloc], "labels": {"__metrics_path__": path, "instance": path.split("/")[3]}}
                    for path in scrape_targets(twin.companion["published"])
                ],
            }
        ],
    }


def start_prometheus(twin: TwinProcess, *, workdir: Path, rules: dict[str, Any] | None = None) -> Prometheus:
    binary = require("prometheus", "prometheus")
    workdir.mkdir(parents=True, exist_ok=True)
    rule_files = []
    if rules:
        (workdir / "rules.yml").write_text(yaml.safe_dump(rules, sort_keys=False))
        rule_files.append(str(workdir / "rules.yml"))
    config = workdir / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus_config(twin, workdir=workdir, rule_files=rule_files), sort_keys=False))
    url = f"http://127.0.0.1:{free_port()}"
    command = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address={url.removeprefix('http://')}",
        "--web.console.templates=/dev/null",
        "--web.console.libraries=/dev/null",
        "--storage.tsdb.retention.time=1h",
    ]
    process, log_path = _start(command, url=url, log_path=workdir / "prometheus.log")
    return Prometheus(url=url, process=process, log_path=log_path)


def start_pushgateway(*, workdir: Path) -> Pushgateway:
    binary = require("prometheus-pushgateway", "prometheus-pushgateway")
    workdir.mkdir(parents=True, exist_ok=True)
    url = f"http://127.0.0.1:{free_port()}"
    command = [binary, f"--web.listen-address={url.removeprefix('http://')}"]
    process, log_path = _start(command, url=url, log_path=workdir / "pushgateway.log")
    return Pushgateway(url=url, process=process, log_path=log_path)
