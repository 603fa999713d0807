"""Start sushy-tools' ``sushy-emulator`` (fake driver) with firmware versions, for the generic Redfish client's tests.

sushy-tools is an independent Redfish implementation (OpenStack's emulator).
Its fake driver keeps no firmware versions, so ``UpdateService.SimpleUpdate``
answers 500 ("Failed fetching BIOS information"). This launcher gives the
fake driver ``get_versions``/``set_versions``/``reset_versions`` that keep
the versions in the fake system's own record (persisted like its power
state), then runs the emulator's own ``main()``. Nothing else of sushy-tools
is changed: its SimpleUpdate raises the BIOS minor version, answers 204 with
a ``Location`` of its fixed task ``/redfish/v1/TaskService/Tasks/42``, and a
``ComputerSystem.Reset`` turns the system off and back on after 1-11 s.

Run as a program (``python -m tests.integration.redfish_emulator.sushy_launcher
--config FILE``, the emulator's own options) or use :func:`start_emulator`.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[3]
SYSTEM_UUID = "8cfd9a1e-6a2b-4c1e-9f61-5a9b2f0c7e11"
SYSTEM_NAME = "gpu-worker-sushy"
BIOS_VERSION = "2.3.5"


def add_firmware_versions() -> None:
    """Give sushy-tools' fake driver firmware versions kept in each fake system's record."""
    from sushy_tools.emulator.resources.systems.fakedriver import FakeDriver

    def get_versions(self: Any, identity: str) -> dict[str, str]:
        system = self._get(identity)
        return dict(system.get("versions") or {"BiosVersion": system.get("bios_version", BIOS_VERSION)})

    def set_versions(self: Any, identity: str, firmware_versions: dict[str, str]) -> None:
        system = self._get(identity)
        versions = get_versions(self, identity)
        versions.update(firmware_versions)
        self._update(system, versions=versions)

    def reset_versions(self: Any, identity: str) -> None:
        self._update(self._get(identity), versions=None)

    FakeDriver.get_versions = get_versions  # type: ignore[attr-defined]
    FakeDriver.set_versions = set_versions  # type: ignore[attr-defined]
    FakeDriver.reset_versions = reset_versions  # type: ignore[attr-defined]


def main() -> None:
    add_firmware_versions()
    from sushy_tools.emulator import main as emulator

    emulator.main()


@dataclass
class Emulator:
    url: str
    username: str
    password: str
    ca_file: str
    system_uri: str
    process: subprocess.Popen[bytes]
    log_path: pathlib.Path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _write_tls(directory: pathlib.Path) -> tuple[str, str, str]:
    """(CA file, certificate file, key file) for 127.0.0.1, made with the twin's certificate helpers."""
    from gpufleet_twin.redfish.service import CaPair, issue_bmc_certificate

    ca = CaPair.generate("sushy-emulator-test-ca")
    cert_pem, key_pem = issue_bmc_certificate(ca, "127.0.0.1", common_name="sushy-emulator")
    paths = directory / "ca.crt", directory / "server.crt", directory / "server.key"
    paths[0].write_bytes(ca.cert_pem)
    paths[1].write_bytes(cert_pem)
    paths[2].touch(mode=0o600)
    paths[2].write_bytes(key_pem)
    return str(paths[0]), str(paths[1]), str(paths[2])


def _write_htpasswd(path: pathlib.Path, username: str, password: str) -> None:
    import bcrypt

    digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    path.write_text(f"{username}:{digest}\n")


@contextlib.contextmanager
def start_emulator(
    directory: pathlib.Path, *, username: str = "admin", password: str = "Sushy-Emul8tor-Pass", timeout: float = 30.0
) -> Iterator[Emulator]:
    """sushy-emulator over HTTPS on 127.0.0.1 with one fake system (power On, BIOS 2.3.5) and basic auth."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_file, cert_file, key_file = _write_tls(directory)
    auth_file = directory / "htpasswd"
    _write_htpasswd(auth_file, username, password)
    port = _free_port()
    systems = [{"uuid": SYSTEM_UUID, "name": SYSTEM_NAME, "power_state": "On", "external_notifier": False,
                "bios_version": BIOS_VERSION, "nics": [{"mac": "b8:3f:d2:00:00:01", "ip": "10.1.0.9"}]}]  # fmt: skip
    config = directory / "emulator.conf"
    config.write_text(
        "\n".join(
            [
                "SUSHY_EMULATOR_FAKE_DRIVER = True",
                f"SUSHY_EMULATOR_FAKE_SYSTEMS = {systems!r}",
                "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'",
                f"SUSHY_EMULATOR_LISTEN_PORT = {port}",
                f"SUSHY_EMULATOR_SSL_CERT = {cert_file!r}",
                f"SUSHY_EMULATOR_SSL_KEY = {key_file!r}",
                f"SUSHY_EMULATOR_AUTH_FILE = {str(auth_file)!r}",
                f"SUSHY_EMULATOR_STATE_DIR = {str(directory / 'state')!r}",
            ]
        )
        + "\n"
    )
    log_path = directory / "emulator.log"
    log = open(log_path, "wb")  # noqa: SIM115 - the child writes to it until it stops
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.redfish_emulator.sushy_launcher", "--config", str(config)],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        env=env,
    )
    url = f"https://127.0.0.1:{port}"
    context = ssl.create_default_context(cafile=ca_file)
    try:
        deadline = time.monotonic() + timeout
        for _attempt in range(int(timeout / 0.2) + 1):
            if process.poll() is not None:
                raise RuntimeError(f"sushy-emulator exited: {log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/redfish/v1/", context=context, timeout=2):
                    break
            except urllib.error.HTTPError:
                break  # it answers (401 before auth): up
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sushy-emulator did not start: {log_path.read_text()[-2000:]}") from None
                time.sleep(0.2)
        yield Emulator(
            url=url,
            username=username,
            password=password,
            ca_file=ca_file,
            system_uri=f"/redfish/v1/Systems/{SYSTEM_UUID}",
            process=process,
            log_path=log_path,
        )
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.close()


if __name__ == "__main__":
    main()
